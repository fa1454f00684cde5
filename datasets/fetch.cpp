// `terngrad data fetch`: the built-in table of official sources and checksums, a libcurl
// download that hashes while it writes "<file>.part", and the extraction of CIFAR-10's .tar.gz.
//
// Extraction is libarchive's: it parses the tar stream (ustar, GNU long names, pax records,
// header checksums, truncation). Three things are still written here, each for a reason:
// - The gzip layer is zlib's gzread (GzSource), handed to libarchive as its input: libarchive's
//   own gzip filter does not check the gzip trailer (CRC-32 and length), so a flipped byte in a
//   stored deflate block would extract silently; zlib checks it, and GzSource reads the stream
//   to its end after the tar's end-of-archive blocks so the trailer is always read. zlib also
//   passes a plain tar through unchanged.
// - The loop over the entries and the write: archive_write_disk finishes an entry (with
//   ARCHIVE_EXTRACT_SAFE_WRITES: renames its temporary file into place) even when reading the
//   entry's data failed, so a truncated archive would leave a file under its final name, against
//   the promise in datasets/fetch.h; and it would create the links, devices and fifos refused
//   here and restore owners, modes and times from the archive. So each file goes to
//   "<file>.part" through PartFile; all are renamed only once the whole stream was read and
//   the gzip trailer checked, since the CRC covers every entry at once.
// - The path check (safe_relative): an absolute path or a '..' component is refused with one
//   line naming the archive and the entry; the ARCHIVE_EXTRACT_SECURE_* flags belong to
//   archive_write_disk, which is not used.
#include "datasets/fetch.h"

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>

#include "nn/core/error.h"
#include "nn/core/hash.h"

namespace tg::data {
namespace fs = std::filesystem;

namespace {

struct Source {
  std::string name;
  std::string base;  // official URL prefix, ends with '/'
  std::vector<FetchFile> files;
  // Archives: the folder they unpack to (relative to dir) and the files it must then hold.
  std::string extract_subdir;
  std::vector<std::string> extracted;
};

// The one table of fetchable datasets.
const std::vector<Source>& sources() {
  static const std::vector<Source> table = [] {
    const auto file = [](const std::string& base, const char* name, const char* md5, int64_t size) {
      return FetchFile{name, md5, size, base + name};
    };
    std::vector<Source> t;
    // MNIST: the official site http://yann.lecun.com/exdb/mnist/ is unreliable (often 403/down);
    // PyTorch's S3 copy serves byte-identical files (same sizes and md5 as in
    // shared/data/README.md).
    const std::string mnist = "https://ossci-datasets.s3.amazonaws.com/mnist/";
    t.push_back(
        {"mnist",
         mnist,
         {file(mnist, "train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
          file(mnist, "train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28881),
          file(mnist, "t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1648877),
          file(mnist, "t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4542)},
         "",
         {}});
    // Fashion-MNIST: Zalando's own bucket (md5s from github.com/zalandoresearch/fashion-mnist;
    // sizes not pinned, -1). Debian's dataset-fashion-mnist re-gzips the files, so its copies
    // carry different md5s and cannot serve as a mirror.
    const std::string fashion = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/";
    t.push_back(
        {"fashion-mnist",
         fashion,
         {file(fashion, "train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d", -1),
          file(fashion, "train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe", -1),
          file(fashion, "t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79", -1),
          file(fashion, "t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310", -1)},
         "",
         {}});
    // CIFAR-10, binary version (Krizhevsky's page https://www.cs.toronto.edu/~kriz/cifar.html).
    const std::string cifar = "https://www.cs.toronto.edu/~kriz/";
    t.push_back({"cifar10",
                 cifar,
                 {file(cifar, "cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530", -1)},
                 "cifar-10-batches-bin",
                 {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                  "data_batch_5.bin", "test_batch.bin"}});
    return t;
  }();
  return table;
}

const Source& find_source(const std::string& dataset) {
  for (const Source& s : sources()) {
    if (s.name == dataset) return s;
  }
  std::string known;
  for (const Source& s : sources()) known += (known.empty() ? "" : ", ") + s.name;
  TG_THROW("unknown dataset '", dataset, "' for data fetch (known: ", known, ")");
}

void say(const FetchOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

// Removes a temporary file on scope exit unless it was committed (renamed into place).
class PartFile {
 public:
  explicit PartFile(fs::path p) : path_(std::move(p)) {}
  ~PartFile() {
    if (!committed_) {
      std::error_code ec;
      fs::remove(path_, ec);
    }
  }
  PartFile(const PartFile&) = delete;
  PartFile& operator=(const PartFile&) = delete;
  const fs::path& path() const { return path_; }
  void commit(const fs::path& final_path) {
    std::error_code ec;
    fs::rename(path_, final_path, ec);
    TG_CHECK(!ec, "cannot rename '", path_.string(), "' to '", final_path.string(),
             "': ", ec.message());
    committed_ = true;
  }

 private:
  fs::path path_;
  bool committed_ = false;
};

using FilePtr = std::unique_ptr<FILE, int (*)(FILE*)>;

// ------------------------------------------------------------------------------- download

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    TG_CHECK(rc == CURLE_OK, "curl_global_init failed: ", curl_easy_strerror(rc));
  });
}

struct Transfer {
  FILE* out = nullptr;
  Md5 md5;
  int64_t bytes = 0;
  int64_t expected_size = -1;  // from the table; else Content-Length once known
  int64_t next_report = 0;
  int64_t last_reported = -1;
  int write_errno = 0;
  CURL* curl = nullptr;
  const FetchOptions* options = nullptr;
  const std::string* name = nullptr;
};

constexpr int64_t kReportUnknownEvery = 16 << 20;  // bytes between lines when total unknown

std::string progress_line(const Transfer& t, int64_t total) {
  if (total > 0) {
    return tg::detail::concat("  ", *t.name, ": ", t.bytes, " / ", total, " bytes (",
                              100 * t.bytes / total, "%)");
  }
  return tg::detail::concat("  ", *t.name, ": ", t.bytes, " bytes");
}

int64_t transfer_total(Transfer& t) {
  if (t.expected_size >= 0) return t.expected_size;
  curl_off_t len = -1;
  if (curl_easy_getinfo(t.curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) == CURLE_OK && len > 0)
    return len;
  return -1;
}

size_t on_data(char* p, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (std::fwrite(p, 1, len, t.out) != len) {
    t.write_errno = errno;
    return 0;  // aborts the transfer with CURLE_WRITE_ERROR
  }
  t.md5.update(p, len);
  t.bytes += len;
  const int64_t total = transfer_total(t);
  // Ten lines per file when the size is known; the first one after 10%, the last at the end.
  const int64_t step = total > 0 ? std::max<int64_t>(total / 10, 1) : kReportUnknownEvery;
  if (t.next_report == 0) t.next_report = step;
  if (t.bytes >= t.next_report) {
    say(*t.options, progress_line(t, total));
    t.last_reported = t.bytes;
    t.next_report = (t.bytes / step + 1) * step;
  }
  return len;
}

// Whether `path` is present with the expected size and md5 (logging why not, if present).
bool verified(const FetchOptions& o, const fs::path& path, const FetchFile& f) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const auto size = fs::file_size(path, ec);
  if (ec) return false;
  if (f.size >= 0 && int64_t(size) != f.size) {
    say(o, tg::detail::concat(f.name, ": present but ", size, " bytes, expected ", f.size,
                              "; downloading again"));
    return false;
  }
  const std::string got = md5_file(path.string());
  if (got != f.md5) {
    say(o, tg::detail::concat(f.name, ": present but md5 ", got, ", expected ", f.md5,
                              "; downloading again"));
    return false;
  }
  return true;
}

// Downloads `url` to dir/f.name via dir/f.name.part, verifying size and md5 before the rename.
void download(const FetchOptions& o, const std::string& url, const fs::path& final_path,
              const FetchFile& f) {
  curl_init_once();
  PartFile part(fs::path(final_path.string() + ".part"));
  FilePtr out(std::fopen(part.path().c_str(), "wb"), &std::fclose);
  TG_CHECK(out, "cannot create '", part.path().string(), "': ", std::strerror(errno));

  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), &curl_easy_cleanup);
  TG_CHECK(curl, "curl_easy_init failed while fetching ", url);
  Transfer t;
  t.out = out.get();
  t.expected_size = f.size;
  t.curl = curl.get();
  t.options = &o;
  t.name = &f.name;
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);  // HTTP >= 400 is an error, body not written
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85: the string form; the bitmask form is deprecated
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, long(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(c, CURLOPT_USERAGENT, "terngrad-data-fetch/1");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  // Abort a stalled transfer: under 1 KiB/s for a minute.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);

  say(o, tg::detail::concat(f.name, ": downloading ", url));
  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_HTTP_RETURNED_ERROR) {
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    TG_THROW("download of ", url, " failed: HTTP ", status, " (", f.name, " not written)");
  }
  if (rc == CURLE_WRITE_ERROR && t.write_errno != 0) {
    TG_THROW("download of ", url, " failed: cannot write '", part.path().string(),
             "': ", std::strerror(t.write_errno));
  }
  TG_CHECK(rc == CURLE_OK, "download of ", url,
           " failed: ", errbuf[0] ? errbuf : curl_easy_strerror(rc), " (", f.name, " not written)");
  TG_CHECK(std::fclose(out.release()) == 0, "cannot write '", part.path().string(),
           "': ", std::strerror(errno));
  if (t.bytes != t.last_reported) say(o, progress_line(t, transfer_total(t)));

  TG_CHECK(f.size < 0 || t.bytes == f.size, "size mismatch for ", f.name, " from ", url,
           ": expected ", f.size, " bytes, got ", t.bytes, " (not written)");
  const std::string got = t.md5.hex();
  TG_CHECK(got == f.md5, "checksum mismatch for ", f.name, " from ", url, ": expected md5 ", f.md5,
           ", got md5 ", got, " (not written)");
  part.commit(final_path);
  say(o, tg::detail::concat(f.name, ": ", t.bytes, " bytes, md5 ", got, " ok"));
}

std::string file_url(const std::string& mirror, const FetchFile& f) {
  if (mirror.empty()) return f.url;
  std::string base = mirror;
  if (base.find("://") == std::string::npos) base = "file://" + fs::absolute(base).string();
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/" + f.name;
}

// ---------------------------------------------------------------------------------- untar

using ArchivePtr = std::unique_ptr<struct archive, int (*)(struct archive*)>;

// archive_errno() for "no reader recognised the data": libarchive's ARCHIVE_ERRNO_FILE_FORMAT,
// which its public header leaves to the platform (EILSEQ on Linux).
constexpr int kArchiveErrnoFileFormat = EILSEQ;

// zlib's gzip reader as libarchive's input (see the opening comment for why not libarchive's).
class GzSource {
 public:
  explicit GzSource(const std::string& path) : path_(path), gz_(gzopen(path.c_str(), "rb")) {
    TG_CHECK(gz_, "cannot open archive '", path, "': ", std::strerror(errno));
    gzbuffer(gz_, 1 << 18);
  }
  ~GzSource() { gzclose(gz_); }
  GzSource(const GzSource&) = delete;
  GzSource& operator=(const GzSource&) = delete;

  // libarchive's read callback: the next chunk of the uncompressed stream, 0 at its end.
  static la_ssize_t read(struct archive* a, void* self, const void** chunk) {
    auto& s = *static_cast<GzSource*>(self);
    const la_ssize_t got = s.fill();
    if (got < 0) {
      archive_set_error(a, EIO, "%s", s.error_.c_str());
      return ARCHIVE_FATAL;
    }
    *chunk = s.buf_.data();
    return got;
  }

  // Reads what follows the tar's end-of-archive blocks (padding) up to the end of the gzip
  // stream, so that zlib checks its trailer; throws naming the archive.
  void finish() {
    for (la_ssize_t got = 1; got != 0;) {
      got = fill();
      TG_CHECK(got >= 0, "archive '", path_, "' is corrupt after the tar's last entry: ", error_);
    }
  }

 private:
  la_ssize_t fill() {
    const int got = gzread(gz_, buf_.data(), unsigned(buf_.size()));
    int errnum = Z_OK;
    const char* msg = gzerror(gz_, &errnum);
    // zlib reports a truncated gzip member as an error only once the data is used up.
    if (got < 0 || (got == 0 && errnum != Z_OK)) {
      std::string m = msg;
      if (m.rfind(path_ + ": ", 0) == 0) m.erase(0, path_.size() + 2);  // gzerror names the file
      error_ = "gzip stream: " + m;
      return -1;
    }
    return got;
  }

  std::string path_;
  gzFile gz_;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
  std::string error_;  // zlib's message for the last failed read
};

std::string archive_message(struct archive* a) {
  const char* m = archive_error_string(a);
  return m ? m : "unknown libarchive error";
}

// Normalises an entry name to a relative path inside the destination, rejecting escapes.
std::string safe_relative(const std::string& name, const std::string& archive) {
  TG_CHECK(!name.empty() && name[0] != '/', "archive '", archive, "': entry '", name,
           "' has an absolute path; refusing to extract");
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    TG_CHECK(part != "..", "archive '", archive, "': entry '", name,
             "' contains '..'; refusing to extract outside the destination");
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = end + 1;
  }
  return out;
}

// What a non-regular, non-directory entry is, for the refusal message.
const char* entry_kind(struct archive_entry* e) {
  if (archive_entry_hardlink(e) != nullptr) return "hard link";
  switch (archive_entry_filetype(e)) {
    case AE_IFLNK:
      return "symbolic link";
    case AE_IFCHR:
      return "character device";
    case AE_IFBLK:
      return "block device";
    case AE_IFIFO:
      return "fifo";
    case AE_IFSOCK:
      return "socket";
    default:
      return "special file";
  }
}

}  // namespace

std::vector<std::string> extract_tar_gz(const std::string& archive, const std::string& dest) {
  std::error_code ec;
  fs::create_directories(dest, ec);
  TG_CHECK(!ec, "cannot create directory '", dest, "': ", ec.message());

  GzSource source(archive);
  ArchivePtr in(archive_read_new(), &archive_read_free);
  TG_CHECK(in, "cannot read archive '", archive, "': archive_read_new failed");
  struct archive* a = in.get();
  archive_read_support_format_tar(a);  // all its dialects; no filter, GzSource decompresses
  if (archive_read_open(a, &source, nullptr, &GzSource::read, nullptr) != ARCHIVE_OK) {
    // Opening reads the first header to recognise the format; libarchive's tar reader does not
    // recognise one whose checksum or numeric fields are wrong.
    TG_CHECK(archive_errno(a) != kArchiveErrnoFileFormat, "archive '", archive,
             "' does not start with a tar header (not a tar or tar.gz file, or its first header's "
             "checksum or fields are damaged): ",
             archive_message(a));
    TG_THROW("cannot read archive '", archive, "': ", archive_message(a));
  }

  std::vector<std::string> extracted;
  // Every file stays "<file>.part" until the whole stream was read and the gzip trailer checked
  // (the CRC covers all entries at once); an error anywhere removes them all and leaves dest's
  // existing files as they were. A path seen twice keeps the later entry's data, as tar does.
  std::deque<PartFile> parts;
  std::vector<fs::path> finals;                // parallel to parts
  std::map<std::string, size_t> part_of_path;  // rel -> index into parts
  std::vector<char> data(1 << 20);
  std::string previous;  // the last entry read, to place an error in a damaged archive
  for (;;) {
    struct archive_entry* e = nullptr;
    const int rc = archive_read_next_header(a, &e);
    if (rc == ARCHIVE_EOF) break;
    const std::string where =
        previous.empty() ? std::string("in its first header") : "after entry '" + previous + "'";
    // The tar reader answers ARCHIVE_RETRY only for a header whose checksum is wrong (a caller
    // could skip ahead to the next good header; a damaged archive is refused here instead).
    TG_CHECK(rc != ARCHIVE_RETRY, "archive '", archive, "': header checksum mismatch ", where, ": ",
             archive_message(a));
    // A warning is a guess (a malformed pax record ignored, a name not convertible to the
    // locale's charset): refused too, since the entry might land under the wrong name.
    TG_CHECK(rc == ARCHIVE_OK, "archive '", archive, "' is damaged ", where, ": ",
             archive_message(a));
    const char* raw = archive_entry_pathname(e);
    const std::string name = raw ? raw : "";
    previous = name;
    const std::string rel = safe_relative(name, archive);
    if (archive_entry_hardlink(e) == nullptr && archive_entry_filetype(e) == AE_IFDIR) {
      if (!rel.empty()) {
        fs::create_directories(fs::path(dest) / rel, ec);
        TG_CHECK(!ec, "cannot create directory '", (fs::path(dest) / rel).string(),
                 "': ", ec.message());
      }
      continue;  // the next archive_read_next_header() skips any data
    }
    TG_CHECK(archive_entry_hardlink(e) == nullptr && archive_entry_filetype(e) == AE_IFREG,
             "archive '", archive, "': entry '", name, "' is a ", entry_kind(e),
             "; only regular files and directories are extracted");
    TG_CHECK(!rel.empty(), "archive '", archive, "': file entry '", name, "' has an empty path");

    const fs::path final_path = fs::path(dest) / rel;
    fs::create_directories(final_path.parent_path(), ec);
    TG_CHECK(!ec, "cannot create directory '", final_path.parent_path().string(),
             "': ", ec.message());
    const auto [slot, fresh] = part_of_path.try_emplace(rel, parts.size());
    if (fresh) {
      parts.emplace_back(fs::path(final_path.string() + ".part"));
      finals.push_back(final_path);
    }
    const PartFile& part = parts[slot->second];
    {
      FilePtr out(std::fopen(part.path().c_str(), "wb"), &std::fclose);
      TG_CHECK(out, "cannot create '", part.path().string(), "': ", std::strerror(errno));
      // archive_read_data() fills the holes of a sparse entry with zeros.
      for (;;) {
        const la_ssize_t got = archive_read_data(a, data.data(), data.size());
        TG_CHECK(got >= 0, "archive '", archive, "': cannot read entry '", name,
                 "': ", archive_message(a));
        if (got == 0) break;
        TG_CHECK(std::fwrite(data.data(), 1, size_t(got), out.get()) == size_t(got),
                 "cannot write '", part.path().string(), "': ", std::strerror(errno));
      }
      TG_CHECK(std::fclose(out.release()) == 0, "cannot write '", part.path().string(),
               "': ", std::strerror(errno));
    }
    extracted.push_back(rel);
  }
  source.finish();
  for (size_t i = 0; i < parts.size(); ++i) parts[i].commit(finals[i]);
  return extracted;
}

std::vector<std::string> fetchable_datasets() {
  std::vector<std::string> names;
  for (const Source& s : sources()) names.push_back(s.name);
  return names;
}

std::string default_fetch_dir(const std::string& dataset) {
  return "data/" + dataset;
}

std::vector<FetchFile> fetch_files(const std::string& dataset) {
  return find_source(dataset).files;
}

std::string fetch_dataset(const FetchOptions& options) {
  const Source& src = find_source(options.dataset);
  const fs::path dir = options.dir.empty() ? default_fetch_dir(src.name) : options.dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  TG_CHECK(!ec, "cannot create directory '", dir.string(), "' for dataset ", src.name, ": ",
           ec.message());

  const fs::path out_dir = src.extract_subdir.empty() ? dir : dir / src.extract_subdir;
  const auto all_extracted = [&] {
    return !src.extracted.empty() &&
           std::all_of(src.extracted.begin(), src.extracted.end(),
                       [&](const std::string& f) { return fs::is_regular_file(out_dir / f, ec); });
  };
  if (!options.force && all_extracted()) {
    say(options, tg::detail::concat(src.name, ": already extracted in ", out_dir.string(),
                                    " (skipped; --force to fetch again)"));
    return out_dir.string();
  }

  for (const FetchFile& f : src.files) {
    const fs::path path = dir / f.name;
    if (!options.force && verified(options, path, f)) {
      say(options, tg::detail::concat(f.name, ": already present, md5 ok (skipped)"));
      continue;
    }
    download(options, file_url(options.mirror, f), path, f);
  }

  if (!src.extract_subdir.empty()) {
    for (const FetchFile& f : src.files) {
      say(options, tg::detail::concat(f.name, ": extracting into ", dir.string()));
      const auto files = extract_tar_gz((dir / f.name).string(), dir.string());
      say(options, tg::detail::concat(f.name, ": extracted ", files.size(), " files"));
    }
    for (const std::string& f : src.extracted) {
      TG_CHECK(fs::is_regular_file(out_dir / f, ec), "after extracting ", src.files[0].name,
               " into '", dir.string(), "': expected file '", (out_dir / f).string(),
               "' is missing");
    }
  }
  return out_dir.string();
}

}  // namespace tg::data
