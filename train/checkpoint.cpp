#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "nn/core/checked.h"
#include "nn/core/hash.h"
#include "nn/core/json.h"

namespace tg::train {

namespace {

constexpr char kMagic[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr size_t kDigestLen = 64;  // SHA-256 as hex
// A header longer than this is certainly garbage (a real one is a few KiB).
constexpr uint64_t kMaxHeader = 64ull << 20;

DType parse_dtype(const std::string& s, const std::string& file) {
  for (DType d : {DType::f32, DType::i8, DType::u8, DType::i32, DType::i64, DType::u64})
    if (s == dtype_name(d)) return d;
  TG_THROW(file, ": corrupt checkpoint: unknown dtype '", s, "' in header");
}

// The injected write failure (inject_write_fault); error 0: none.
struct WriteFault {
  int error = 0;
  uint64_t budget = 0;
};

WriteFault& write_fault() {
  static WriteFault f;
  return f;
}

// ::write, or the injected failure once the budget is spent (a short write up to it first).
ssize_t checked_write(int fd, const char* p, size_t n) {
  WriteFault& f = write_fault();
  if (f.error == 0) return ::write(fd, p, n);
  if (f.budget == 0) {
    errno = f.error;
    return -1;
  }
  const size_t k = static_cast<size_t>(std::min<uint64_t>(n, f.budget));
  const ssize_t w = ::write(fd, p, k);
  if (w > 0) f.budget -= static_cast<uint64_t>(w);
  return w;
}

// Writes all of `data` to fd or throws naming `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = checked_write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      TG_THROW("cannot write ", path, ": ", std::strerror(e));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Writes the pieces to "<path>.tmp", fsyncs, renames over path; the temp file never survives a
// failure.
void write_pieces_atomic(const std::string& path,
                         const std::vector<std::pair<const void*, size_t>>& pieces) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TG_CHECK(fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
  for (const auto& [data, n] : pieces) write_all(fd, data, n, tmp);
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  if (synced != 0 || closed != 0) {
    const int e = synced != 0 ? synced : closed;
    ::unlink(tmp.c_str());
    TG_THROW("cannot write ", tmp, ": ", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    TG_THROW("cannot rename ", tmp, " to ", path, ": ", std::strerror(e));
  }
}

}  // namespace

void inject_write_fault(int error, uint64_t after_bytes) {
  TG_CHECK(error == ENOSPC || error == EIO, "inject_write_fault: error ", error,
           " (expected ENOSPC or EIO)");
  write_fault() = {error, after_bytes};
}

const Tensor& Checkpoint::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  TG_THROW(source.empty() ? std::string("checkpoint") : source, ": has no tensor '", name, "'");
}

bool Checkpoint::has(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

namespace {

constexpr const char* kCompressorPrefix = "compressor/worker";

// "compressor/worker<w>/<name>" -> (w, name); throws naming the entry when it is malformed.
std::pair<int, std::string> parse_compressor_key(const std::string& key, const std::string& file) {
  const std::string rest = key.substr(std::strlen(kCompressorPrefix));
  const size_t slash = rest.find('/');
  const std::string digits = rest.substr(0, slash);
  const bool ok = slash != std::string::npos && slash + 1 < rest.size() && !digits.empty() &&
                  digits.size() <= 6 &&
                  digits.find_first_not_of("0123456789") == std::string::npos &&
                  (digits == "0" || digits[0] != '0');
  TG_CHECK(ok, file, ": malformed compressor state entry '", key,
           "' (expected 'compressor/worker<index>/<name>')");
  return {std::stoi(digits), rest.substr(slash + 1)};
}

}  // namespace

std::string compressor_state_key(int worker, const std::string& name) {
  return kCompressorPrefix + std::to_string(worker) + "/" + name;
}

void add_compressor_state(Checkpoint& ckpt, const tern::Compressor& compressor, int workers) {
  for (int w = 0; w < workers; ++w)
    for (auto& [name, t] : compressor.state(w))
      ckpt.tensors.emplace_back(compressor_state_key(w, name), std::move(t));
}

void load_compressor_state(const Checkpoint& ckpt, tern::Compressor* compressor, int workers) {
  const std::string file = ckpt.source.empty() ? std::string("checkpoint") : ckpt.source;
  TG_CHECK(workers >= 1, "load_compressor_state: workers must be >= 1, got ", workers);
  std::map<int, tern::NamedTensors> by_worker;
  for (const auto& [key, t] : ckpt.tensors) {
    if (key.rfind("compressor/", 0) != 0) continue;
    TG_CHECK(key.rfind(kCompressorPrefix, 0) == 0, file, ": malformed compressor state entry '",
             key, "' (expected 'compressor/worker<index>/<name>')");
    auto [w, name] = parse_compressor_key(key, file);
    by_worker[w].emplace_back(std::move(name), t);
  }
  // The checkpoint's workers must be exactly 0..n-1 for some n.
  int saved = 0;
  for (const auto& [w, entries] : by_worker) {
    TG_CHECK(w == saved, file, ": compressor state has worker ", w, " but no worker ", saved,
             " (entries 'compressor/worker<index>/...' must cover workers 0..N-1)");
    ++saved;
  }
  if (compressor == nullptr) {
    TG_CHECK(saved == 0, file, ": the checkpoint holds compressor state for ", saved,
             " worker(s), but this run has no compressor (1 worker, compression.method = none)");
    return;
  }
  TG_CHECK(saved == 0 || saved == workers, file, ": the checkpoint holds ", compressor->name(),
           " compressor state for ", saved, " worker(s), the config has ", workers,
           " worker(s) (workers.count)");
  for (int w = 0; w < workers; ++w) {
    try {
      compressor->load_state(w, by_worker[w]);
    } catch (const Error& e) {
      TG_THROW(file, ": cannot restore worker ", w, "'s ", compressor->name(),
               " compressor state: ", e.what(),
               saved == 0 ? " (the checkpoint holds no compressor state at all: written by an "
                            "older terngrad that did not save it?)"
                          : "");
    }
  }
}

namespace {

// Where a checkpoint's bytes come from: a file read in order, or bytes in memory. Reads are
// sequential; `read` fills exactly n bytes or throws naming the source.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual void read(void* dst, size_t n) = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {}
  void read(void* dst, size_t n) override {
    TG_CHECK(n <= bytes_.size() - pos_, "read past the end of the checkpoint bytes");
    if (n) std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY)) {
    TG_CHECK(fd_ >= 0, "cannot open checkpoint ", path, ": ", std::strerror(errno));
  }
  ~FileSource() override { ::close(fd_); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  uint64_t size() const {
    struct stat st {};
    TG_CHECK(::fstat(fd_, &st) == 0, "cannot read checkpoint ", path_, ": ", std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }
  void read(void* dst, size_t n) override {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::read(fd_, p, n);
      if (got < 0 && errno == EINTR) continue;
      TG_CHECK(got > 0, "cannot read checkpoint ", path_, ": ",
               got < 0 ? std::strerror(errno) : "the file shrank while it was read");
      p += got;
      n -= static_cast<size_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_;
};

// Reads `n` bytes through the digest, in chunks of at most `chunk` (never the whole payload at
// once); `sink(offset, data, len)` sees each piece, offsets relative to the first byte read.
template <class Sink>
void stream(ByteSource& src, Sha256& sha, uint64_t n, std::vector<char>& chunk, Sink&& sink) {
  uint64_t done = 0;
  while (done < n) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk.size(), n - done));
    src.read(chunk.data(), len);
    sha.update(chunk.data(), len);
    sink(done, chunk.data(), len);
    done += len;
  }
}

constexpr size_t kChunk = 4u << 20;  // the streaming buffer: 4 MiB

// One pass over a checkpoint of `size` bytes: magic and version, the header (validated before any
// tensor is allocated), then the payload, copied into the tensors while the SHA-256 is computed,
// then the stored digest compared. Memory: the tensors plus one 4 MiB buffer (not a second copy
// of the file). When the header or an entry is refused, the rest of the file is still hashed: a
// file whose digest does not match is reported as corrupt (the likelier story) rather than by the
// symptom the damage happened to cause.
Checkpoint read_checkpoint(ByteSource& src, uint64_t size, const std::string& path,
                           const CheckpointSink& sink, bool header_only) {
  const uint64_t min_size = sizeof(kMagic) + sizeof(uint64_t) + kDigestLen;
  char magic[sizeof(kMagic)] = {};
  src.read(magic, std::min<uint64_t>(size, sizeof(kMagic)));
  TG_CHECK(size >= sizeof(kMagic) && std::memcmp(magic, kMagic, 7) == 0, path,
           ": not a terngrad checkpoint (bad magic)");
  TG_CHECK(magic[7] == kMagic[7], path, ": unsupported checkpoint format version ",
           static_cast<int>(static_cast<unsigned char>(magic[7])), ", expected ",
           static_cast<int>(kMagic[7]));
  TG_CHECK(size >= min_size, path, ": truncated checkpoint (", size, " bytes)");
  const uint64_t body = size - kDigestLen;
  Sha256 sha;
  sha.update(magic, sizeof(magic));
  uint64_t hlen = 0;
  src.read(&hlen, sizeof(hlen));
  sha.update(&hlen, sizeof(hlen));
  const uint64_t hstart = sizeof(kMagic) + sizeof(hlen);
  uint64_t consumed = hstart;  // bytes read (and hashed) so far
  std::vector<char> chunk(static_cast<size_t>(std::min<uint64_t>(kChunk, body)));

  // Hashes the rest of the body, compares the digest; throws the mismatch if there is one.
  const auto verify = [&] {
    stream(src, sha, body - consumed, chunk, [](uint64_t, const char*, size_t) {});
    consumed = body;
    std::string stored(kDigestLen, '\0');
    src.read(stored.data(), kDigestLen);
    const std::string actual = sha.hex();
    TG_CHECK(stored == actual, path, ": corrupt checkpoint: SHA-256 mismatch (stored ",
             stored.substr(0, 16), "..., computed ", actual.substr(0, 16),
             "...); the file was truncated or modified");
  };

  Checkpoint ck;
  ck.source = path;
  struct Entry {
    uint64_t offset, nbytes;
    size_t index;  // into ck.tensors
  };
  std::vector<Entry> entries;
  try {
    // hstart <= body (min_size), so body - hstart cannot wrap.
    TG_CHECK(hlen <= kMaxHeader && hlen <= body - hstart, path,
             ": corrupt checkpoint header length ", hlen, " (", body - hstart,
             " bytes lie between the length and the checksum)");
    std::string header(static_cast<size_t>(hlen), '\0');
    src.read(header.data(), header.size());
    sha.update(header.data(), header.size());
    consumed += hlen;
    json::Value h;
    try {
      h = json::parse(header);
    } catch (const Error& e) {
      TG_THROW(path, ": corrupt checkpoint header: ", e.what());
    }
    try {
      ck.step = checked_integer<int64_t>(h["step"].as_number(), "'step'");
      ck.net = h["net"].as_string();
      ck.config_toml = h["config_toml"].as_string();
      const uint64_t payload_bytes = body - consumed;  // consumed <= body, checked above
      for (const json::Value& e : h["tensors"].arr) {
        const std::string name = e["name"].as_string();
        const std::string what = "tensor '" + name + "'";
        DType dt = parse_dtype(e["dtype"].as_string(), path);
        Shape shape;
        for (const json::Value& d : e["shape"].arr) {
          shape.push_back(checked_integer<int64_t>(d.as_number(), what + " shape"));
          TG_CHECK(shape.back() >= 0, what, " has a negative dimension ", shape.back());
          TG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), what, " has more than ", kMaxDims,
                   " dimensions");
        }
        const auto off = checked_integer<uint64_t>(e["offset"].as_number(), what + " offset");
        const auto nb = checked_integer<uint64_t>(e["nbytes"].as_number(), what + " nbytes");
        const auto numel = static_cast<uint64_t>(checked_numel(shape, what));
        TG_CHECK(nb == checked_mul<uint64_t>(numel, element_size(dt),
                                             what + ": element count * element size"),
                 what, " size does not match its shape");
        // Compared against the payload's length, not as payload + off + nb <= body: a hostile
        // offset must not wrap around.
        TG_CHECK(off <= payload_bytes && nb <= payload_bytes - off, what, " (offset ", off, ", ",
                 nb, " bytes) lies outside the file's ", payload_bytes, " payload bytes");
        if (header_only) continue;
        entries.push_back({off, nb, ck.tensors.size()});
        // The sink's tensor when it fits (a contiguous host tensor of this dtype and element
        // count, read into in place), else a new one (nb <= the file's size).
        Tensor t = sink ? sink(name, dt, shape) : Tensor();
        const bool fits = t.defined() && t.device().is_cpu() && t.dtype() == dt &&
                          t.is_contiguous() && static_cast<uint64_t>(t.numel()) == numel;
        ck.tensors.emplace_back(name, fits ? t.view(shape) : Tensor::empty(shape, dt));
      }
    } catch (const Error& e) {
      if (std::string(e.what()).rfind(path, 0) == 0) throw;
      TG_THROW(path, ": corrupt checkpoint: ", e.what());
    }
  } catch (const Error&) {
    verify();  // a checksum mismatch explains the damage better
    throw;
  }
  if (header_only) return ck;
  // The payload, in order, into the tensors (entries may come in any order, leave gaps or
  // overlap: each chunk is copied into every tensor it intersects), then the digest.
  stream(src, sha, body - consumed, chunk, [&](uint64_t at, const char* data, size_t len) {
    const uint64_t end = at + len;
    for (const Entry& e : entries) {
      const uint64_t lo = std::max(at, e.offset), hi = std::min(end, e.offset + e.nbytes);
      if (lo >= hi) continue;
      auto* dst = static_cast<char*>(ck.tensors[e.index].second.raw_data());
      std::memcpy(dst + (lo - e.offset), data + (lo - at), static_cast<size_t>(hi - lo));
    }
  });
  consumed = body;
  verify();
  return ck;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CheckpointFiles
// ---------------------------------------------------------------------------------------------

namespace {

// The step of a name "checkpoint-<step>.tgckpt" (digits only, no sign, fits int64); else none.
std::optional<int64_t> numbered_step(const std::string& name) {
  constexpr std::string_view kPrefix = "checkpoint-", kSuffix = ".tgckpt";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return std::nullopt;
  const std::string digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

// The numbered checkpoints of `dir`, by decreasing step.
std::vector<std::pair<int64_t, std::string>> numbered_files(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (auto step = numbered_step(e.path().filename().string()))
      out.emplace_back(*step, e.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

CheckpointFiles::CheckpointFiles(std::string dir, int64_t keep)
    : dir_(std::move(dir)),
      latest_((std::filesystem::path(dir_) / kLatest).string()),
      keep_(std::max<int64_t>(keep, 1)) {}

std::string CheckpointFiles::numbered(int64_t step) const {
  return (std::filesystem::path(dir_) / ("checkpoint-" + std::to_string(step) + ".tgckpt"))
      .string();
}

std::vector<std::string> CheckpointFiles::candidates() const {
  std::vector<std::string> out;
  std::error_code ec;
  if (std::filesystem::exists(latest_, ec)) out.push_back(latest_);
  for (auto& [step, path] : numbered_files(dir_)) out.push_back(std::move(path));
  return out;
}

void CheckpointFiles::save(const Checkpoint& ckpt) {
  std::error_code ec;
  if (keep_ > 1 && latest_step_ && *latest_step_ != ckpt.step &&
      std::filesystem::exists(latest_, ec)) {
    // Linked under a temporary name, then renamed: an older file of that name (one set aside
    // from a previous attempt's future) is replaced whole.
    const std::string keep_as = numbered(*latest_step_);
    const std::string tmp = keep_as + ".tmp";
    ::unlink(tmp.c_str());
    const bool linked = ::link(latest_.c_str(), tmp.c_str()) == 0;
    TG_CHECK(linked ? ::rename(tmp.c_str(), keep_as.c_str()) == 0
                    : ::rename(latest_.c_str(), keep_as.c_str()) == 0,
             "cannot keep ", latest_, " as ", keep_as, ": ", std::strerror(errno));
  }
  save_checkpoint(latest_, ckpt);
  latest_step_ = ckpt.step;
  int64_t kept = 0;
  for (const auto& [step, path] : numbered_files(dir_)) {
    // A numbered file of the step just written is the same state: only the newest name stays.
    if (step != ckpt.step && kept < keep_ - 1) {
      ++kept;
      continue;
    }
    TG_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT, "cannot remove ", path, ": ",
             std::strerror(errno));
  }
}

std::vector<std::string> CheckpointFiles::set_aside(const std::vector<std::string>& files) const {
  std::vector<std::string> out;
  for (const std::string& f : files) {
    const std::string to = f + ".damaged";
    TG_CHECK(::rename(f.c_str(), to.c_str()) == 0, "cannot rename ", f, " to ", to, ": ",
             std::strerror(errno));
    out.push_back(to);
  }
  return out;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_pieces_atomic(path, {{text.data(), text.size()}});
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  std::vector<Tensor> host;
  host.reserve(ckpt.tensors.size());
  std::string table = "[";
  uint64_t offset = 0;
  for (size_t i = 0; i < ckpt.tensors.size(); ++i) {
    const auto& [name, t] = ckpt.tensors[i];
    TG_CHECK(t.defined(), "save_checkpoint: tensor '", name, "' is undefined");
    Tensor h = t.to(Device::cpu()).contiguous();
    std::string shape = "[";
    for (size_t d = 0; d < h.shape().size(); ++d)
      shape += std::string(d ? "," : "") + std::to_string(h.shape()[d]);
    shape += "]";
    json::Object o;
    o.add("name", name).add("dtype", dtype_name(h.dtype())).add_raw("shape", shape);
    o.add("offset", static_cast<uint64_t>(offset)).add("nbytes", static_cast<uint64_t>(h.nbytes()));
    if (i) table += ",";
    table += o.str();
    offset += h.nbytes();
    host.push_back(std::move(h));
  }
  table += "]";
  json::Object header;
  header.add("step", ckpt.step).add("net", ckpt.net).add("config_toml", ckpt.config_toml);
  header.add_raw("tensors", table);
  const std::string hdr = header.str();
  const uint64_t hlen = hdr.size();

  Sha256 sha;
  std::vector<std::pair<const void*, size_t>> pieces;
  pieces.emplace_back(kMagic, sizeof(kMagic));
  pieces.emplace_back(&hlen, sizeof(hlen));
  pieces.emplace_back(hdr.data(), hdr.size());
  for (const Tensor& h : host) pieces.emplace_back(h.raw_data(), h.nbytes());
  for (const auto& [p, n] : pieces) sha.update(p, n);
  const std::string digest = sha.hex();
  pieces.emplace_back(digest.data(), digest.size());
  write_pieces_atomic(path, pieces);
}

Checkpoint load_checkpoint(const std::string& path, const CheckpointSink& sink) {
  FileSource src(path);
  return read_checkpoint(src, src.size(), path, sink, /*header_only=*/false);
}

Checkpoint load_checkpoint_header(const std::string& path) {
  FileSource src(path);
  return read_checkpoint(src, src.size(), path, {}, /*header_only=*/true);
}

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& path) {
  MemorySource src(bytes);
  return read_checkpoint(src, bytes.size(), path, {}, /*header_only=*/false);
}

}  // namespace tg::train
