// `terngrad data fetch` without the internet: a tiny HTTP/1.0 server on 127.0.0.1 (ephemeral
// port, one std::thread, POSIX sockets) serves files from a directory and answers 404 otherwise.
// MNIST is fetched from it as a --mirror with the real checksums (shared/data/mnist holds the
// official files); corrupt, truncated and missing files must fail naming the file/URL and leave
// nothing under the final name. extract_tar_gz (libarchive underneath) is tested on archives this
// file writes by hand.
#include "datasets/fetch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nn/core/error.h"
#include "nn/core/hash.h"
#include "tests/testing/errors.h"
#include "tests/testing/files.h"

namespace tg::data {
namespace {
namespace fs = std::filesystem;
using namespace tg::testing;

const std::string kMnistDir = TG_SHARED_DATA_DIR "/mnist";

struct Expected {
  const char* name;
  const char* md5;
};
constexpr Expected kMnist[] = {
    {"train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"},
    {"train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"},
    {"t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"},
    {"t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"},
};

// HTTP/1.0 file server: GET /<name> answers 200 with the bytes of root/<name>, anything else
// 404. One connection at a time, closed after each response.
class HttpServer {
 public:
  explicit HttpServer(fs::path root) : root_(std::move(root)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;  // ephemeral
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(fd_);
      throw std::runtime_error("bind/listen on 127.0.0.1 failed");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~HttpServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      handle(c);
      close(c);
    }
  }

  static void send_all(int c, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t k = send(c, p, n, MSG_NOSIGNAL);
      if (k <= 0) return;  // client went away
      p += k;
      n -= size_t(k);
    }
  }

  void handle(int c) {
    timeval tv{5, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      const ssize_t k = recv(c, buf, sizeof(buf), 0);
      if (k <= 0) return;
      req.append(buf, size_t(k));
    }
    std::istringstream line(req.substr(0, req.find("\r\n")));
    std::string method, target;
    line >> method >> target;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(target);
    }
    const std::string name = target.empty() ? "" : target.substr(1);
    const fs::path file = root_ / name;
    std::error_code ec;
    if (method != "GET" || target.empty() || target[0] != '/' ||
        name.find('/') != std::string::npos || name.empty() || !fs::is_regular_file(file, ec)) {
      const std::string body = "not found\n";
      const std::string head =
          "HTTP/1.0 404 Not Found\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n";
      send_all(c, head.data(), head.size());
      send_all(c, body.data(), body.size());
      return;
    }
    const std::string body = read_text(file);
    const std::string head =
        "HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    send_all(c, head.data(), head.size());
    send_all(c, body.data(), body.size());
  }

  fs::path root_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

class FetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Loopback must never go through a proxy from the environment.
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  }
  FetchOptions options(const std::string& dataset, const fs::path& dir, const std::string& mirror) {
    FetchOptions o;
    o.dataset = dataset;
    o.dir = dir.string();
    o.mirror = mirror;
    o.log = [this](const std::string& line) { log_.push_back(line); };
    return o;
  }
  int log_count(const std::string& needle) const {
    int n = 0;
    for (const auto& l : log_) n += l.find(needle) != std::string::npos;
    return n;
  }
  std::string log_text() const {
    std::string s;
    for (const auto& l : log_) s += l + "\n";
    return s;
  }
  static void expect_no_part_files(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
      EXPECT_NE(e.path().extension(), ".part") << "left behind: " << e.path();
    }
  }

  std::vector<std::string> log_;
};

TEST_F(FetchTest, MnistFromMirrorVerifiesThenSkips) {
  HttpServer server(kMnistDir);
  TempDir tmp;
  const fs::path dir = tmp.path() / "data" / "mnist";  // created by fetch
  const std::string got = fetch_dataset(options("mnist", dir, server.url()));
  EXPECT_EQ(fs::path(got), dir);
  for (const auto& f : kMnist) {
    ASSERT_TRUE(fs::is_regular_file(dir / f.name)) << f.name;
    EXPECT_EQ(md5_file((dir / f.name).string()), f.md5) << f.name;
  }
  expect_no_part_files(dir);
  EXPECT_EQ(server.requests().size(), 4u);
  EXPECT_EQ(log_count("md5 f68b3c2dcbeaaa9fbdd348bbdeb94873 ok"), 1) << log_text();
  // Progress lines: bytes / total.
  EXPECT_GE(log_count("/ 9912422 bytes"), 2) << log_text();

  log_.clear();
  fetch_dataset(options("mnist", dir, server.url()));
  EXPECT_EQ(server.requests().size(), 4u) << "second fetch must not download";
  EXPECT_EQ(log_count("already present"), 4) << log_text();

  log_.clear();
  FetchOptions forced = options("mnist", dir, server.url() + "/");  // trailing '/' tolerated
  forced.force = true;
  fetch_dataset(forced);
  EXPECT_EQ(server.requests().size(), 8u) << "--force downloads again";
  EXPECT_EQ(server.requests().back(), "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(log_count("already present"), 0) << log_text();
}

TEST_F(FetchTest, StaleWrongFileIsReplaced) {
  HttpServer server(kMnistDir);
  TempDir tmp;
  for (const auto& f : kMnist) fs::copy_file(fs::path(kMnistDir) / f.name, tmp.path() / f.name);
  fs::permissions(tmp.path() / "t10k-labels-idx1-ubyte.gz", fs::perms::owner_write,
                  fs::perm_options::add);
  write_text(tmp.path() / "t10k-labels-idx1-ubyte.gz", "garbage");
  fetch_dataset(options("mnist", tmp.path(), server.url()));
  EXPECT_EQ(server.requests(), std::vector<std::string>{"/t10k-labels-idx1-ubyte.gz"});
  EXPECT_EQ(log_count("present but 7 bytes, expected 4542"), 1) << log_text();
  EXPECT_EQ(md5_file((tmp.path() / "t10k-labels-idx1-ubyte.gz").string()),
            "ec29112dd5afa0611ce80d1b7f02629c");
}

TEST_F(FetchTest, LocalDirectoryMirror) {
  TempDir tmp;
  fetch_dataset(options("mnist", tmp.path(), kMnistDir));  // no scheme: read via file://
  for (const auto& f : kMnist) EXPECT_EQ(md5_file((tmp.path() / f.name).string()), f.md5);
}

TEST_F(FetchTest, CorruptedCopyFailsNamingFileAndBothChecksums) {
  TempDir mirror, out;
  for (const auto& f : kMnist) fs::copy_file(fs::path(kMnistDir) / f.name, mirror.path() / f.name);
  const fs::path bad = mirror.path() / "train-labels-idx1-ubyte.gz";
  std::string bytes = read_text(bad);
  bytes[1000] ^= 0x01;  // same size, so the md5 check (not the size check) must catch it
  fs::permissions(bad, fs::perms::owner_write, fs::perm_options::add);
  write_text(bad, bytes);
  const std::string bad_md5 = md5_hex(bytes.data(), bytes.size());

  HttpServer server(mirror.path());
  expect_error_with([&] { fetch_dataset(options("mnist", out.path(), server.url())); },
                    {"train-labels-idx1-ubyte.gz", server.url() + "/train-labels-idx1-ubyte.gz",
                     "d53e105ee54ea40749a09fcbcd1e9432", bad_md5});
  EXPECT_FALSE(fs::exists(out.path() / "train-labels-idx1-ubyte.gz"));
  EXPECT_TRUE(fs::exists(out.path() / "train-images-idx3-ubyte.gz"));  // verified before it
  expect_no_part_files(out.path());
}

TEST_F(FetchTest, TruncatedCopyFailsOnSize) {
  TempDir mirror, out;
  // The first three are present and verified; only the last one is requested.
  for (int i = 0; i < 3; ++i)
    fs::copy_file(fs::path(kMnistDir) / kMnist[i].name, out.path() / kMnist[i].name);
  const std::string full = read_text(fs::path(kMnistDir) / kMnist[3].name);
  write_text(mirror.path() / kMnist[3].name, full.substr(0, 4000));
  HttpServer server(mirror.path());
  expect_error_with([&] { fetch_dataset(options("mnist", out.path(), server.url())); },
                    {"t10k-labels-idx1-ubyte.gz", "expected 4542 bytes, got 4000"});
  EXPECT_FALSE(fs::exists(out.path() / kMnist[3].name));
  expect_no_part_files(out.path());
  EXPECT_EQ(log_count("already present"), 3) << log_text();
}

TEST_F(FetchTest, MissingFileIs404NamingTheUrl) {
  TempDir empty, out;
  HttpServer server(empty.path());
  expect_error_with([&] { fetch_dataset(options("fashion-mnist", out.path(), server.url())); },
                    {server.url() + "/train-images-idx3-ubyte.gz", "404"});
  EXPECT_TRUE(fs::is_empty(out.path())) << "nothing written, not even a .part";
}

TEST_F(FetchTest, ConnectionRefusedNamesTheUrl) {
  // Find a free port, then close it so nobody listens there.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  TempDir out;
  expect_error_with([&] { fetch_dataset(options("mnist", out.path(), url)); },
                    {url + "/train-images-idx3-ubyte.gz"});
  EXPECT_TRUE(fs::is_empty(out.path()));
}

TEST_F(FetchTest, UnknownDatasetListsKnownNames) {
  TempDir out;
  expect_error_with([&] { fetch_dataset(options("imagenet", out.path(), "")); },
                    {"'imagenet'", "mnist, fashion-mnist, cifar10"});
  EXPECT_EQ(fetchable_datasets(), (std::vector<std::string>{"mnist", "fashion-mnist", "cifar10"}));
}

TEST(FetchTable, OfficialSourcesAndChecksums) {
  const auto mnist = fetch_files("mnist");
  ASSERT_EQ(mnist.size(), 4u);
  EXPECT_EQ(mnist[0].url,
            "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz");
  EXPECT_EQ(mnist[0].size, 9912422);
  const auto fashion = fetch_files("fashion-mnist");
  ASSERT_EQ(fashion.size(), 4u);
  EXPECT_EQ(fashion[0].md5, "8d4fb7e6c68d591d4c3dfef9ec88bf0d");
  EXPECT_EQ(fashion[3].url,
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-labels-idx1-ubyte.gz");
  const auto cifar = fetch_files("cifar10");
  ASSERT_EQ(cifar.size(), 1u);
  EXPECT_EQ(cifar[0].url, "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz");
  EXPECT_EQ(cifar[0].md5, "c32a1d4ab5d03f1284b67883e8d87530");
  EXPECT_EQ(default_fetch_dir("cifar10"), "data/cifar10");
}

// ------------------------------------------------------------------------------------ tar

// One ustar header block (POSIX "ustar\0" "00"), checksum filled in.
std::string tar_header(const std::string& name, size_t size, char type,
                       const std::string& prefix = "", const std::string& link = "") {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  std::snprintf(&h[124], 12, "%011zo", size);
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = type;
  std::memcpy(&h[157], link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  std::memcpy(&h[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(&h[148], 8, "%06o", sum);  // six digits, NUL, then the space already there
  return h;
}

std::string tar_entry(const std::string& name, const std::string& content, char type = '0',
                      const std::string& prefix = "") {
  std::string e = tar_header(name, content.size(), type, prefix) + content;
  e.resize((e.size() + 511) / 512 * 512, '\0');
  return e;
}

std::string tar_end() {
  return std::string(1024, '\0');
}

// mode "wb0": deflate's stored blocks, so a flipped byte still inflates and only the CRC shows it.
void write_gz(const fs::path& p, const std::string& bytes, const char* mode = "wb") {
  gzFile g = gzopen(p.c_str(), mode);
  ASSERT_NE(g, nullptr) << p;
  ASSERT_EQ(gzwrite(g, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  ASSERT_EQ(gzclose(g), Z_OK);
}

std::string pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char((i * 131 + size_t(seed) * 7) & 0xff);
  return s;
}

// The regular files under `dir` (recursively), relative to it; none if it does not exist.
std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (fs::is_regular_file(e.symlink_status())) out.push_back(e.path().lexically_relative(dir));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Expects extracting `archive` into `dest` to throw a tg::Error mentioning every fragment.
void expect_extract_error(const fs::path& archive, const fs::path& dest,
                          const std::vector<std::string>& fragments) {
  expect_error_with([&] { extract_tar_gz(archive.string(), dest.string()); }, fragments);
}

TEST(ExtractTarGz, ExtractsFilesDirectoriesAndLongNames) {
  TempDir tmp;
  const std::string batch = pattern(3073 * 3, 1);
  const std::string exact = pattern(512, 2);
  const std::string long_dir = std::string(120, 'd');
  const std::string gnu_long = "gnu/" + std::string(150, 'g') + ".bin";
  const std::string pax_long = "pax/" + std::string(130, 'p') + ".bin";
  const std::string pax_rec = " path=" + pax_long + "\n";
  // A pax record's length counts its own digits: 3 digits here (record < 1000 bytes).
  const std::string pax_body = std::to_string(pax_rec.size() + 3) + pax_rec;
  const std::string tar =
      tar_entry("cifar-10-batches-bin/", "", '5') +
      tar_entry("cifar-10-batches-bin/data_batch_1.bin", batch) + tar_entry("./exact.bin", exact) +
      tar_entry("empty.txt", "") + tar_entry("file.txt", "in a long directory", '0', long_dir) +
      tar_entry("././@LongLink", gnu_long + std::string(1, '\0'), 'L') +
      tar_entry("gnu/truncated-name", "gnu long", '0') + tar_entry("PaxHeaders/x", pax_body, 'x') +
      tar_entry("pax/short", "pax long", '0') +
      tar_entry("pax_global_header", "20 comment=whatever\n", 'g') + tar_end();
  ASSERT_EQ(pax_body.size(), std::stoul(pax_body.substr(0, 3)));
  write_gz(tmp.path() / "a.tar.gz", tar);

  const fs::path dest = tmp.path() / "out";
  const auto files = extract_tar_gz((tmp.path() / "a.tar.gz").string(), dest.string());
  const std::vector<std::string> want = {"cifar-10-batches-bin/data_batch_1.bin",
                                         "exact.bin",
                                         "empty.txt",
                                         long_dir + "/file.txt",
                                         gnu_long,
                                         pax_long};
  EXPECT_EQ(files, want);
  EXPECT_EQ(read_text(dest / "cifar-10-batches-bin/data_batch_1.bin"), batch);
  EXPECT_EQ(read_text(dest / "exact.bin"), exact);
  EXPECT_TRUE(fs::is_regular_file(dest / "empty.txt"));
  EXPECT_EQ(fs::file_size(dest / "empty.txt"), 0u);
  EXPECT_EQ(read_text(dest / long_dir / "file.txt"), "in a long directory");
  EXPECT_EQ(read_text(dest / gnu_long), "gnu long");
  EXPECT_EQ(read_text(dest / pax_long), "pax long");
  EXPECT_FALSE(fs::exists(dest / "gnu/truncated-name"));
  EXPECT_FALSE(fs::exists(dest / "pax_global_header"));

  // The same archive uncompressed reads the same (zlib passes plain data through).
  write_text(tmp.path() / "a.tar", tar);
  EXPECT_EQ(extract_tar_gz((tmp.path() / "a.tar").string(), (tmp.path() / "plain").string()), want);
}

TEST(ExtractTarGz, RejectsEntriesEscapingTheDestination) {
  TempDir tmp;
  const fs::path dest = tmp.path() / "a" / "b";
  for (const std::string name : {"../evil.txt", "ok/../../evil.txt", "x/.."}) {
    write_gz(tmp.path() / "dots.tar.gz",
             tar_entry("fine.txt", "ok") + tar_entry(name, "evil") + tar_end());
    expect_extract_error(tmp.path() / "dots.tar.gz", dest, {"'" + name + "'", "..", "dots.tar.gz"});
    EXPECT_EQ(files_under(dest), std::vector<std::string>{}) << "fine.txt is not kept either";
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "a" / "evil.txt"));
  EXPECT_FALSE(fs::exists(tmp.path() / "evil.txt"));

  write_gz(tmp.path() / "abs.tar.gz", tar_entry("/tmp/tg_fetch_test_evil.txt", "evil") + tar_end());
  expect_extract_error(tmp.path() / "abs.tar.gz", dest, {"absolute"});
  EXPECT_FALSE(fs::exists("/tmp/tg_fetch_test_evil.txt"));
}

TEST(ExtractTarGz, RejectsLinksDevicesAndFifos) {
  TempDir tmp;
  const struct {
    char type;
    const char* kind;
  } kCases[] = {{'1', "hard link"},
                {'2', "symbolic link"},
                {'3', "character device"},
                {'4', "block device"},
                {'6', "fifo"}};
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.kind);
    const fs::path out = tmp.path() / ("out" + std::string(1, c.type));
    write_gz(tmp.path() / "special.tar.gz", tar_entry("fine.txt", "ok") +
                                                tar_header("passwd", 0, c.type, "", "/etc/passwd") +
                                                tar_end());
    expect_extract_error(tmp.path() / "special.tar.gz", out,
                         {"special.tar.gz", "'passwd'", c.kind});
    EXPECT_FALSE(fs::exists(fs::symlink_status(out / "passwd")));
    EXPECT_EQ(files_under(out), std::vector<std::string>{}) << "fine.txt is not kept either";
  }
}

TEST(ExtractTarGz, CorruptOrTruncatedArchivesFail) {
  TempDir tmp;
  const std::string tar = tar_entry("big.bin", pattern(5000, 3)) + tar_end();

  // Entry cut short inside its data (plain tar, so the tar layer sees the short read).
  write_text(tmp.path() / "short.tar", tar.substr(0, 512 + 2000));
  expect_extract_error(tmp.path() / "short.tar", tmp.path() / "out1",
                       {"short.tar", "'big.bin'", "Truncated"});
  EXPECT_FALSE(fs::exists(tmp.path() / "out1" / "big.bin"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out1" / "big.bin.part"));

  // gzip stream cut in half.
  write_gz(tmp.path() / "full.tar.gz", tar);
  const std::string gz = read_text(tmp.path() / "full.tar.gz");
  write_text(tmp.path() / "cut.tar.gz", gz.substr(0, gz.size() / 2));
  expect_extract_error(tmp.path() / "cut.tar.gz", tmp.path() / "out2",
                       {"cut.tar.gz", "gzip stream"});
  EXPECT_FALSE(fs::exists(tmp.path() / "out2" / "big.bin"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out2" / "big.bin.part"));

  // Header checksum off by one, in the first header (libarchive then does not recognise a tar)
  // and in a later one.
  std::string bad = tar;
  bad[0] = 'c';  // "big.bin" -> "cig.bin": sum changes by one
  write_text(tmp.path() / "sum.tar", bad);
  expect_extract_error(tmp.path() / "sum.tar", tmp.path() / "out3", {"sum.tar", "checksum"});
  write_text(tmp.path() / "sum2.tar", tar_entry("fine.txt", "ok") + bad);
  expect_extract_error(tmp.path() / "sum2.tar", tmp.path() / "out5",
                       {"sum2.tar", "checksum", "after entry 'fine.txt'"});
  EXPECT_FALSE(fs::exists(tmp.path() / "out5" / "cig.bin"));

  // Not a tar at all.
  write_gz(tmp.path() / "junk.tar.gz", pattern(2048, 4));
  expect_extract_error(tmp.path() / "junk.tar.gz", tmp.path() / "out4",
                       {"junk.tar.gz", "not a tar"});
}

// libarchive's own gzip filter leaves the gzip trailer unchecked; extract_tar_gz must not.
TEST(ExtractTarGz, GzipCrcIsChecked) {
  TempDir tmp;
  const std::string tar = tar_entry("a.bin", pattern(5000, 5)) + tar_end();
  write_gz(tmp.path() / "stored.tar.gz", tar, "wb0");
  std::string gz = read_text(tmp.path() / "stored.tar.gz");
  const size_t at = gz.find(pattern(5000, 5).substr(0, 64));
  ASSERT_NE(at, std::string::npos) << "expected a stored deflate block";
  gz[at + 1000] ^= 0x01;  // inside a.bin's data: inflates fine, the CRC differs
  write_text(tmp.path() / "flipped.tar.gz", gz);
  expect_extract_error(tmp.path() / "flipped.tar.gz", tmp.path() / "out1",
                       {"flipped.tar.gz", "incorrect data check"});
  EXPECT_EQ(files_under(tmp.path() / "out1"), std::vector<std::string>{});

  gz = read_text(tmp.path() / "stored.tar.gz");
  gz[gz.size() - 8] ^= 0x01;  // the trailer's CRC-32 itself
  write_text(tmp.path() / "crc.tar.gz", gz);
  expect_extract_error(tmp.path() / "crc.tar.gz", tmp.path() / "out2",
                       {"crc.tar.gz", "incorrect data check"});
  EXPECT_EQ(files_under(tmp.path() / "out2"), std::vector<std::string>{});
}

// Files already in dest survive a failed extraction untouched; nothing of the archive appears.
TEST(ExtractTarGz, FailureLeavesDestinationAsItWas) {
  TempDir tmp;
  const fs::path dest = tmp.path() / "out";
  fs::create_directories(dest);
  write_text(dest / "a.txt", "old");
  const std::string tar = tar_entry("a.txt", "new") + tar_entry("b.txt", "new") +
                          tar_entry("c.bin", pattern(5000, 6)) + tar_end();
  write_text(tmp.path() / "short.tar", tar.substr(0, tar.size() - 1024 - 2048));
  expect_extract_error(tmp.path() / "short.tar", dest, {"short.tar", "'c.bin'"});
  EXPECT_EQ(files_under(dest), std::vector<std::string>{"a.txt"});
  EXPECT_EQ(read_text(dest / "a.txt"), "old");
}

// A path that appears twice ends up with the later entry's data, as with tar itself.
TEST(ExtractTarGz, LaterEntryOfTheSamePathWins) {
  TempDir tmp;
  write_gz(tmp.path() / "twice.tar.gz",
           tar_entry("a.txt", "first") + tar_entry("./a.txt", "second") + tar_end());
  EXPECT_EQ(extract_tar_gz((tmp.path() / "twice.tar.gz").string(), (tmp.path() / "out").string()),
            (std::vector<std::string>{"a.txt", "a.txt"}));
  EXPECT_EQ(files_under(tmp.path() / "out"), std::vector<std::string>{"a.txt"});
  EXPECT_EQ(read_text(tmp.path() / "out" / "a.txt"), "second");
}

TEST_F(FetchTest, Cifar10AlreadyExtractedIsNotDownloaded) {
  TempDir tmp;
  const fs::path sub = tmp.path() / "cifar-10-batches-bin";
  fs::create_directories(sub);
  for (const char* f : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                        "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"})
    write_text(sub / f, "x");
  // An unreachable mirror proves nothing is fetched.
  EXPECT_EQ(fs::path(fetch_dataset(options("cifar10", tmp.path(), "http://127.0.0.1:1"))), sub);
  EXPECT_EQ(log_count("already extracted"), 1) << log_text();
}

}  // namespace
}  // namespace tg::data
