// The vocabulary of GPU convolution algorithms, the policy that picks one per pass and shape, and
// the record of what was picked (conv2d_kernels.h). Compiled in every build: a CPU-only binary
// still parses and reports the config keys, it just never dispatches.
#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "nn/core/error.h"
#include "nn/core/precision.h"
#include "nn/ops/conv2d_kernels.h"
#include "nn/ops/cuda_options.h"

namespace tg {

namespace {

// A pass of a shape as numbers: the choices' index.
using ShapePass = std::array<int64_t, 15>;

ShapePass shape_pass(const Conv2dShape& s, Conv2dPass p) {
  return {s.N,        s.C,       s.H,        s.W,      s.K,
          s.R,        s.S,       s.P,        s.Q,      s.stride_h,
          s.stride_w, s.pad_top, s.pad_left, s.groups, static_cast<int64_t>(p)};
}

struct ShapePassHash {
  size_t operator()(const ShapePass& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the numbers
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct PolicyState {
  std::mutex mu;
  Conv2dPolicy policy;
  std::vector<std::pair<std::string, Conv2dAlgo>> choices;     // first-use order, for the reports
  std::unordered_map<ShapePass, size_t, ShapePassHash> index;  // -> choices; every conv call
};

PolicyState& policy_state() {
  static PolicyState s;
  return s;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

const char* conv2d_pass_name(Conv2dPass p) {
  switch (p) {
    case Conv2dPass::forward:
      return "fwd";
    case Conv2dPass::backward_data:
      return "bwd_data";
    case Conv2dPass::backward_weight:
      return "bwd_weight";
  }
  return "?";
}

std::string conv2d_algo_name(const Conv2dAlgo& a) {
  if (a.kind == Conv2dAlgo::im2col) return "im2col";
  char buf[48];
  if (a.splits > 1)
    std::snprintf(buf, sizeof(buf), "igemm%dx%ds%d%s", a.bm, a.bn, a.splits, a.tf32 ? "_tf32" : "");
  else
    std::snprintf(buf, sizeof(buf), "igemm%dx%d%s", a.bm, a.bn, a.tf32 ? "_tf32" : "");
  return buf;
}

std::vector<Conv2dAlgo> conv2d_igemm_tiles(bool tf32) {
  std::vector<Conv2dAlgo> tiles{{Conv2dAlgo::igemm, 128, 128, 1},
                                {Conv2dAlgo::igemm, 64, 64, 1},
                                {Conv2dAlgo::igemm, 32, 128, 1}};
  if (tf32) {
    for (size_t i = 0, n = tiles.size(); i < n; ++i) {
      tiles.push_back(tiles[i]);
      tiles.back().tf32 = true;
    }
  }
  return tiles;
}

Conv2dAlgo parse_conv2d_algo(const std::string& name, const std::string& what) {
  if (name == "im2col") return {};
  const bool tf32 = name.ends_with("_tf32");
  const std::string base = tf32 ? name.substr(0, name.size() - 5) : name;
  int bm = 0, bn = 0, splits = 1, used = 0;
  const int got = std::sscanf(base.c_str(), "igemm%dx%d%n", &bm, &bn, &used);
  bool ok = got == 2 && used > 0;
  if (ok && static_cast<size_t>(used) < base.size()) {
    int used2 = 0;
    ok = std::sscanf(base.c_str() + used, "s%d%n", &splits, &used2) == 1 &&
         static_cast<size_t>(used + used2) == base.size() && splits >= 1 && splits <= 4096;
  }
  Conv2dAlgo a{Conv2dAlgo::igemm, bm, bn, splits, tf32};
  bool tile_ok = false;
  for (const Conv2dAlgo& t : conv2d_igemm_tiles()) tile_ok |= ok && t.bm == bm && t.bn == bn;
  TG_CHECK(tile_ok, what, ": unknown convolution algorithm '", name,
           "' (expected im2col, or igemm<BM>x<BN> with tile 128x128, 64x64 or 32x128, "
           "optionally followed by s<splits> and then by _tf32, e.g. igemm64x64s4 or "
           "igemm128x128_tf32)");
  return a;
}

std::string conv2d_pass_key(const Conv2dShape& s, Conv2dPass p) {
  char buf[192];
  std::snprintf(
      buf, sizeof(buf),
      "N%lld C%lld H%lld W%lld K%lld R%lld S%lld P%lld Q%lld s%lldx%lld p%lldx%lld g%lld %s",
      static_cast<long long>(s.N), static_cast<long long>(s.C), static_cast<long long>(s.H),
      static_cast<long long>(s.W), static_cast<long long>(s.K), static_cast<long long>(s.R),
      static_cast<long long>(s.S), static_cast<long long>(s.P), static_cast<long long>(s.Q),
      static_cast<long long>(s.stride_h), static_cast<long long>(s.stride_w),
      static_cast<long long>(s.pad_top), static_cast<long long>(s.pad_left),
      static_cast<long long>(s.groups), conv2d_pass_name(p));
  return buf;
}

void set_conv2d_policy(const Conv2dPolicy& p) {
  TG_CHECK(p.mode == "im2col" || p.mode == "igemm" || p.mode == "autotune",
           "cuda.conv_algo: unknown value '", p.mode, "' (expected im2col, igemm or autotune)");
  for (const auto& [key, algo] : p.pins)
    parse_conv2d_algo(algo, "cuda.conv_algorithms['" + key + "']");
  PolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.policy = p;
  st.choices.clear();
  st.index.clear();
}

Conv2dPolicy conv2d_policy() {
  PolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.policy;
}

std::vector<std::pair<std::string, std::string>> conv2d_choices() {
  PolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, a] : st.choices) out.emplace_back(key, conv2d_algo_name(a));
  return out;
}

size_t conv2d_choice_count() {
  PolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.choices.size();
}

bool find_conv2d_choice(const Conv2dShape& s, Conv2dPass p, Conv2dAlgo* out) {
  PolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  const auto it = st.index.find(shape_pass(s, p));
  if (it == st.index.end()) return false;
  *out = st.choices[it->second].second;
  return true;
}

void note_conv2d_choice(const Conv2dShape& s, Conv2dPass p, const Conv2dAlgo& a) {
  const std::string key = conv2d_pass_key(s, p);
  PolicyState& st = policy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.index.emplace(shape_pass(s, p), st.choices.size()).second) st.choices.emplace_back(key, a);
}

Conv2dGemmDims conv2d_gemm_dims(const Conv2dShape& s, Conv2dPass p) {
  const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups, RS = s.R * s.S;
  switch (p) {
    case Conv2dPass::forward:
      return {Kg, s.N * s.P * s.Q, Cg * RS};
    case Conv2dPass::backward_data:
      return {Cg, s.N * s.H * s.W, Kg * RS};
    case Conv2dPass::backward_weight:
      return {Kg, Cg * RS, s.N * s.P * s.Q};
  }
  return {0, 0, 0};
}

Conv2dAlgo conv2d_igemm_split(const Conv2dShape& s, Conv2dPass p, const Conv2dAlgo& tile,
                              int64_t workspace_floats) {
  const Conv2dGemmDims g = conv2d_gemm_dims(s, p);
  // Split K when the grid has fewer tiles than a large GPU has room for (~4 blocks on each of
  // ~128 SMs; a fixed number, so the choice does not depend on which GPU runs it), keeping each
  // piece at least 16 steps of 8 and the partials inside the workspace.
  constexpr int64_t kTargetBlocks = 512, kMinSteps = 16;
  const int64_t tiles = ceil_div(g.m, tile.bm) * ceil_div(g.n, tile.bn) * s.groups;
  const int64_t steps = ceil_div(g.k, 8);
  int64_t splits =
      std::min(ceil_div(kTargetBlocks, std::max<int64_t>(tiles, 1)), steps / kMinSteps);
  const int64_t per_split = s.groups * g.m * g.n;
  if (per_split > 0) splits = std::min(splits, workspace_floats / per_split);
  return {Conv2dAlgo::igemm, tile.bm, tile.bn, static_cast<int>(std::clamp<int64_t>(splits, 1, 64)),
          tile.tf32};
}

Conv2dAlgo conv2d_igemm_rule(const Conv2dShape& s, Conv2dPass p, int64_t workspace_floats,
                             bool tf32) {
  const Conv2dGemmDims g = conv2d_gemm_dims(s, p);
  const int bm = g.m <= 32 ? 32 : g.m >= 128 && g.n >= 128 * 16 ? 128 : 64;
  const int bn = bm == 64 ? 64 : 128;
  return conv2d_igemm_split(s, p, {Conv2dAlgo::igemm, bm, bn, 1, tf32}, workspace_floats);
}

std::string conv2d_pins_string(const std::vector<std::pair<std::string, std::string>>& choices) {
  std::string out;
  for (const auto& [key, algo] : choices) out += (out.empty() ? "" : "; ") + key + "=" + algo;
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_conv2d_pins(const std::string& pins) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at <= pins.size()) {
    size_t end = pins.find(';', at);
    if (end == std::string::npos) end = pins.size();
    std::string entry = pins.substr(at, end - at);
    const size_t b = entry.find_first_not_of(" \t"), e = entry.find_last_not_of(" \t");
    entry = b == std::string::npos ? "" : entry.substr(b, e - b + 1);
    if (!entry.empty()) {
      const size_t eq = entry.rfind('=');
      TG_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < entry.size(),
               "cuda.conv_algorithms: entry '", entry,
               "' is not '<pass key>=<algorithm>' (entries are separated by ';', as "
               "summary.json's conv_algorithms_pins writes them)");
      std::string key = entry.substr(0, eq);
      key = key.substr(0, key.find_last_not_of(" \t") + 1);
      const std::string algo = entry.substr(entry.find_first_not_of(" \t", eq + 1));
      parse_conv2d_algo(algo, "cuda.conv_algorithms['" + key + "']");
      for (const auto& [k, a] : out)
        TG_CHECK(k != key, "cuda.conv_algorithms: '", key, "' is pinned twice");
      out.emplace_back(key, algo);
    }
    at = end + 1;
  }
  return out;
}

void check_cuda_options(const CudaOptions& o) {
  for (auto& [key, algo] : parse_conv2d_pins(o.conv_algorithms))
    TG_CHECK(o.tf32 || !parse_conv2d_algo(algo, "cuda.conv_algorithms['" + key + "']").tf32,
             "cuda.conv_algorithms['", key, "'] = ", algo,
             " is a TF32 algorithm but cuda.tf32 is false (set cuda.tf32 = true to redo that run)");
}

void apply_cuda_options(const CudaOptions& o) {
  check_cuda_options(o);
  Conv2dPolicy p;
  p.mode = o.conv_algo;
  for (auto& [key, algo] : parse_conv2d_pins(o.conv_algorithms)) p.pins.emplace(key, algo);
  set_conv2d_policy(p);
  set_cuda_tf32(o.tf32);
}

}  // namespace tg
