// terngrad_faulty: the `terngrad` command line (tg::cli::run) with faults injected first, for
// tests/cmd/faults_test.cpp. The release binary reads no fault from its environment; this test
// driver does, and hands what it reads to the library's injection points:
//   TG_FAULT=<kind>,rank=<r>,call=<k>  rank r's k-th (0-based) Gloo allgather/alltoall
//                                      exchange misbehaves (comm/gloo_comm.h inject_wire_fault:
//                                      length, truncate, job, seq, context or magic);
//   TG_FAULT_WRITE=<enospc|eio>@<bytes>  writes fail with that errno once <bytes> bytes were
//                                      written in all (train/checkpoint.h inject_write_fault).
// A malformed spec is an error (exit 1): a typo must not make a fault test pass vacuously.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cmd/cli.h"
#include "comm/gloo_comm.h"
#include "nn/core/error.h"
#include "train/checkpoint.h"

namespace {

// `text` as a whole non-negative integer, or throws naming `what`.
template <class T>
T parse_count(std::string_view text, const std::string& what) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  TG_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0, what, ": '", text,
           "' is not a non-negative integer");
  return v;
}

void inject_from_environment() {
  if (const char* env = std::getenv("TG_FAULT"); env != nullptr && *env != '\0') {
    const std::string spec = env, what = "TG_FAULT='" + spec + "'";
    tg::comm::WireFault f;
    size_t at = 0;
    while (at <= spec.size()) {
      const size_t comma = std::min(spec.find(',', at), spec.size());
      const std::string_view item = std::string_view(spec).substr(at, comma - at);
      if (item.starts_with("rank="))
        f.rank = parse_count<int>(item.substr(5), what + " rank");
      else if (item.starts_with("call="))
        f.call = parse_count<int64_t>(item.substr(5), what + " call");
      else
        f.kind = item;
      at = comma + 1;
    }
    bool known = false;
    for (const std::string& k : tg::comm::wire_fault_kinds()) known = known || k == f.kind;
    TG_CHECK(known, what, ": unknown fault '", f.kind,
             "' (expected length, truncate, job, seq, context or magic, then ,rank=R,call=K)");
    TG_CHECK(f.rank >= 0 && f.call >= 0, what, ": expected <kind>,rank=R,call=K");
    tg::comm::inject_wire_fault(f);
  }
  if (const char* env = std::getenv("TG_FAULT_WRITE"); env != nullptr && *env != '\0') {
    const std::string spec = env, what = "TG_FAULT_WRITE='" + spec + "'";
    const size_t at = spec.find('@');
    const std::string kind = spec.substr(0, at);
    TG_CHECK(at != std::string::npos && (kind == "enospc" || kind == "eio"), what,
             ": expected enospc@BYTES or eio@BYTES");
    tg::train::inject_write_fault(kind == "enospc" ? ENOSPC : EIO,
                                  parse_count<uint64_t>(spec.substr(at + 1), what));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    inject_from_environment();
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "terngrad: error: %s\n", e.what());
    return 1;
  }
  return tg::cli::run(argc, argv);
}
