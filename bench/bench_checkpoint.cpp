// Memory and time of loading a checkpoint, what `terngrad train --resume` and `eval` do first.
// Writes a checkpoint of --mb MiB (default 512: about VGG-A's parameters with their momentum,
// shared over three tensors as a run stores params, ema and optim/momentum) to a temp directory,
// then loads it in fresh processes (this program re-executed, so nothing of the writer is
// resident), each reporting its peak RSS (VmHWM) before and after:
//   stream   train::load_checkpoint: the file read in 4 MiB pieces into the tensors while the
//            SHA-256 is computed (the product's path)
//   whole    the whole file read into memory, then train::parse_checkpoint over the bytes (the
//            loader before streaming: two copies at its peak)
//   read     the file read in 4 MiB pieces and hashed, nothing kept: the reference for time
//   hash     SHA-256 of the file's bytes already in memory: the digest's own rate (nn/core/hash.h,
//            OpenSSL), which bounds every load and save
//   save     train::save_checkpoint of the loaded tensors to a new file (hashed while written,
//            fsync'ed, renamed): what every train.checkpoint_every iterations costs
// Output: one JSON line per mode (peak RSS added by the load in MiB and as a multiple of the file,
// seconds, MB/s), a table on stderr.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nn/core/clock.h"
#include "nn/core/error.h"
#include "nn/core/hash.h"
#include "nn/core/json.h"
#include "train/checkpoint.h"

namespace tg::bench {
namespace {

namespace fs = std::filesystem;

// This process's peak resident set (VmHWM), MiB.
double peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

// The child: loads `file` by `mode`, prints "before after seconds".
int child(const std::string& mode, const std::string& file) {
  const double before = peak_rss_mib();
  const auto t0 = Clock::now();
  if (mode == "stream") {
    train::load_checkpoint(file);
  } else if (mode == "hash" || mode == "save") {
    // Timed from when the bytes or tensors are in memory.
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const train::Checkpoint ck = train::parse_checkpoint(bytes, file);
    const auto t1 = Clock::now();
    if (mode == "hash")
      sha256_hex(bytes.data(), bytes.size());
    else
      train::save_checkpoint(file + ".saved", ck);
    std::printf("%.3f %.3f %.6f\n", before, peak_rss_mib(), seconds_since(t1));
    std::error_code ec;
    fs::remove(file + ".saved", ec);
    return 0;
  } else if (mode == "whole") {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    train::parse_checkpoint(bytes, file);
  } else {
    const int fd = ::open(file.c_str(), O_RDONLY);
    TG_CHECK(fd >= 0, "cannot open ", file);
    std::vector<char> buf(4u << 20);
    Sha256 sha;
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) sha.update(buf.data(), n);
    ::close(fd);
    sha.hex();
  }
  const double seconds = seconds_since(t0);
  std::printf("%.3f %.3f %.6f\n", before, peak_rss_mib(), seconds);
  return 0;
}

struct Result {
  double before = 0, after = 0, seconds = 0;
};

Result run_child(const char* self, const std::string& mode, const std::string& file) {
  int pipefd[2];
  TG_CHECK(::pipe(pipefd) == 0, "pipe failed");
  const pid_t pid = ::fork();
  TG_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::close(pipefd[0]);
    ::execl(self, self, "--child", mode.c_str(), file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  TG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the ", mode, " child failed");
  Result r;
  std::istringstream in(out);
  in >> r.before >> r.after >> r.seconds;
  return r;
}

int run(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--child") return child(argv[2], argv[3]);
  int64_t mb = 512;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc) {
      mb = std::stoll(argv[++i]);
    } else {
      TG_THROW("usage: bench_checkpoint [--mb MiB] (got '", a, "')");
    }
  }
  TG_CHECK(mb >= 3, "--mb must be >= 3");
  const fs::path dir = fs::temp_directory_path() / ("tg_bench_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "checkpoint.tgckpt").string();
  {
    train::Checkpoint ck;
    ck.net = "bench";
    const int64_t each = mb * (1 << 20) / 3 / 4;
    for (const char* name : {"params", "ema", "optim/momentum"}) {
      Tensor t = Tensor::empty({each});
      auto* p = t.data<float>();
      for (int64_t i = 0; i < each; ++i) p[i] = static_cast<float>(i % 1000) * 1e-3f;
      ck.tensors.emplace_back(name, std::move(t));
    }
    train::save_checkpoint(file, ck);
  }
  const double file_mib = static_cast<double>(fs::file_size(file)) / (1 << 20);
  std::fprintf(stderr, "bench_checkpoint: %.1f MiB checkpoint in %s\n", file_mib, file.c_str());
  std::fprintf(stderr, "%-7s %14s %10s %9s %9s\n", "mode", "load peak MiB", "x file", "seconds",
               "MB/s");
  for (const char* mode : {"read", "hash", "stream", "whole", "save"}) {
    // The best of three (page cache warm after the first).
    Result best;
    for (int rep = 0; rep < 3; ++rep) {
      const Result r = run_child(argv[0], mode, file);
      if (rep == 0 || r.seconds < best.seconds) best = r;
    }
    const double added = best.after - best.before;
    const double mbps = file_mib * (1 << 20) / 1e6 / best.seconds;
    std::fprintf(stderr, "%-7s %14.1f %10.2f %9.3f %9.0f\n", mode, added, added / file_mib,
                 best.seconds, mbps);
    json::Object o;
    o.add("bench", "checkpoint_load").add("mode", mode).add("file_mib", file_mib);
    o.add("peak_rss_added_mib", added).add("peak_rss_added_per_file", added / file_mib);
    o.add("seconds", best.seconds).add("mb_per_s", mbps);
    std::printf("%s\n", o.str().c_str());
  }
  fs::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace tg::bench

int main(int argc, char** argv) {
  try {
    return tg::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
}
