// The job secret (comm/secret.h): the file's checks, the job key, and the signing store.
#include "comm/secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "nn/core/error.h"

namespace tg::comm {

namespace {

constexpr size_t kMinSecretBytes = 16, kMaxSecretBytes = 65536;

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// The tag of one entry: HMAC(K, "rdzv" 0 key 0 value).
Mac256 entry_tag(const Mac256& k, const std::string& key, const std::vector<char>& value) {
  std::string msg = "rdzv";
  msg.push_back('\0');
  msg += key;
  msg.push_back('\0');
  msg.append(value.begin(), value.end());
  return hmac_sha256(k.data(), k.size(), msg.data(), msg.size());
}

class SignedStore final : public Store {
 public:
  SignedStore(std::unique_ptr<Store> inner, const Mac256& key)
      : inner_(std::move(inner)), key_(key) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    const Mac256 tag = entry_tag(key_, key, value);
    std::vector<char> signed_value(kSignedMagic, kSignedMagic + kSignedMagicBytes);
    signed_value.insert(signed_value.end(), tag.begin(), tag.end());
    signed_value.insert(signed_value.end(), value.begin(), value.end());
    inner_->set(key, signed_value);
  }

  std::vector<char> get(const std::string& key) override {
    const std::vector<char> raw = inner_->get(key);
    const size_t head = kSignedMagicBytes + sizeof(Mac256);
    const bool has_magic =
        raw.size() >= head && std::memcmp(raw.data(), kSignedMagic, kSignedMagicBytes) == 0;
    TG_CHECK(has_magic, inner_->url(), ": rendezvous entry '", key,
             "' is not signed: written by a process without this job's secret (a stranger, or "
             "a rank started without comm.secret_file / TG_SECRET_FILE); refused");
    std::vector<char> value(raw.begin() + static_cast<ptrdiff_t>(head), raw.end());
    const Mac256 want = entry_tag(key_, key, value);
    TG_CHECK(equal_constant_time(want.data(), raw.data() + kSignedMagicBytes, want.size()),
             inner_->url(), ": rendezvous entry '", key,
             "' is signed with another secret than this job's (a stranger, or a rank given "
             "another secret file); refused");
    return value;
  }

  void wait(const std::vector<std::string>& keys) override { inner_->wait(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_->wait(keys, timeout);
  }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  std::string url() const override { return inner_->url(); }

 private:
  std::unique_ptr<Store> inner_;
  const Mac256 key_;
};

}  // namespace

std::string read_secret_file(const std::string& path, const std::string& what) {
  TG_CHECK(!path.empty(), what, ": empty path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  TG_CHECK(fd >= 0, what, " '", path, "': cannot open it: ", std::strerror(errno));
  struct stat st {};
  std::string bytes;
  try {
    TG_CHECK(::fstat(fd, &st) == 0, what, " '", path, "': cannot stat it: ", std::strerror(errno));
    TG_CHECK(S_ISREG(st.st_mode), what, " '", path, "' is not a regular file");
    TG_CHECK(st.st_uid == ::geteuid(), what, " '", path, "' is owned by uid ", st.st_uid,
             ", not by this user (uid ", ::geteuid(), "): a job secret must be the user's own");
    TG_CHECK((st.st_mode & 077) == 0, what, " '", path, "' can be read by others (mode ",
             mode_text(st.st_mode), "): make it the owner's only, e.g. chmod 600 ", path);
    TG_CHECK(st.st_size >= static_cast<off_t>(kMinSecretBytes) &&
                 st.st_size <= static_cast<off_t>(kMaxSecretBytes),
             what, " '", path, "' holds ", st.st_size, " bytes (expected ", kMinSecretBytes, " to ",
             kMaxSecretBytes, ", e.g. from `openssl rand -hex 32 > ", path, "`)");
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      TG_CHECK(r > 0, what, " '", path,
               "': cannot read it: ", r == 0 ? "it shrank while being read" : std::strerror(errno));
      got += static_cast<size_t>(r);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

std::optional<JobSecret> find_job_secret(const std::string& secret_file,
                                         const std::optional<std::string>& env_value) {
  if (!secret_file.empty())
    return JobSecret{read_secret_file(secret_file, "comm.secret_file"),
                     "comm.secret_file " + secret_file};
  if (env_value && !env_value->empty())
    return JobSecret{read_secret_file(*env_value, "TG_SECRET_FILE"),
                     "TG_SECRET_FILE " + *env_value};
  return std::nullopt;
}

Mac256 job_mac_key(const std::string& secret, const std::string& job_prefix) {
  const std::string label = "terngrad job " + job_prefix;
  return hmac_sha256(secret.data(), secret.size(), label.data(), label.size());
}

std::unique_ptr<Store> signed_store(std::unique_ptr<Store> inner, const Mac256& key) {
  return std::make_unique<SignedStore>(std::move(inner), key);
}

}  // namespace tg::comm
