// The exchanges over a one-rank NCCL group (skipped without a GPU): every ternary algorithm
// against the CPU sum of the codes, and the Reducer with the compressors' hook overlapping
// backward on the device's side stream, against the fold of tests/terngrad/emulated_reference.h.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/reducer.h"
#include "comm/store.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "nn/core/tensor.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/comm_hook.h"
#include "terngrad/exchange/ternary_collectives.h"
#include "terngrad/ternary_kernels.h"
#include "tests/comm/rank_threads.h"
#include "tests/terngrad/emulated_reference.h"
#include "tests/testing/files.h"
#include "tests/testing/op_harness.h"

namespace tg::tern {
namespace {

using namespace std::chrono_literals;
using namespace tg::comm;

// Every ternary route over a 1-rank NCCL group with W = 3 local workers on the GPU equals the
// plain CPU sum of the unpacked codes.
TEST(NcclComm, TernaryRoutesOnOneRank) {
  TG_REQUIRE_CUDA();
  testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 10s);
  const Device gpu = Device::cuda(0);
  auto comm = make_communicator(nccl_options(0, 1, gpu), *store, "tern");
  const int w = 3;
  const int64_t n = 100003;
  const size_t b = tern::packed_bytes(tern::PackFormat::two_bit, n);
  std::vector<uint8_t> codes(w * b);
  std::vector<int32_t> expected(n, 1);
  for (int k = 0; k < w; ++k) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = uniform01(philox_word(11, k, i)) * 2.0f - 1.0f;
    tern::ternarize_pack_cpu(g.data(), n, 0.7f, 5, rng_stream(RngPurpose::ternarize, 0, k, 0),
                             tern::PackFormat::two_bit, codes.data() + k * b);
    std::vector<int32_t> one(n, 0);
    tern::unpack_accumulate_cpu(codes.data() + k * b, n, tern::PackFormat::two_bit, one.data());
    for (int64_t i = 0; i < n; ++i) expected[i] += one[i];
  }
  Tensor dcodes = Tensor::from_vector(codes, {static_cast<int64_t>(codes.size())}, gpu);
  for (Route a : {Route::ps, Route::allgather, Route::packed_allreduce, Route::sharded,
                  Route::hierarchical, Route::automatic}) {
    Tensor acc = Tensor::full({n}, 1, DType::i32, gpu);
    const TernaryResult r = ternary_aggregate_bucket(
        *comm, a, dcodes.data<uint8_t>(), w, {n}, tern::PackFormat::two_bit, {acc.data<int32_t>()});
    EXPECT_EQ(acc.to_vector<int32_t>(), expected) << name(a);
    EXPECT_EQ(r.wire.sent, 0u) << name(a);
  }
}

// The reducer over a one-rank NCCL group, W = 3 workers on the GPU: with overlap its thread runs
// the buckets through the compressors' hook on the side stream while this thread writes the
// last worker's gradient on the main stream, slot by slot from the last, marking each ready after
// its write (as backward does). The reduced gradient equals the fold of the same gradients on
// the GPU (memcmp), with overlap and without; a bucket that read a slot before its write (a
// missing event) or a result read before the side stream finished would differ.
TEST(NcclComm, ReducerOverlapsBackwardOnTheSideStream) {
  TG_REQUIRE_CUDA();
  testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 10s);
  const Device gpu = Device::cuda(0);
  auto comm = make_communicator(nccl_options(0, 1, gpu), *store, "reducer");
  std::vector<tern::GradSlot> layout;
  int64_t total = 0;
  for (int64_t n : {4099, 700001, 13, 250000, 64, 1000003}) {
    std::string name = "t";  // (not "t" + to_string: GCC 12 -Wrestrict false positive)
    name += std::to_string(layout.size());
    layout.push_back({name, total, n});
    total += n;
  }
  const int w = 3;
  auto worker_grad = [&](int k, int64_t step) {
    std::vector<float> v(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i)
      v[i] = (uniform01(philox_word(5, 100 * step + k, i)) - 0.5f) * (i % 29 == 0 ? 6.0f : 1.0f);
    return Tensor::from_vector(v, {total}, gpu);
  };
  for (const char* method : {"terngrad", "none", "fp16"}) {
    tern::CompressionOptions o;
    o.method = parse_enum(tern::kMethods, method, "method");
    o.min_size = 16;
    auto reference = tern::make_compressor(o, layout);
    for (bool overlap : {true, false}) {
      auto c = tern::make_compressor(o, layout);
      ReducerOptions ro;
      ro.bucket_mb = 3;
      ro.first_bucket_bytes = 64 << 10;
      ro.overlap = overlap;
      CompressionHook hook(*c, {});
      Reducer reducer(layout, *comm, hook, ro);
      ASSERT_GE(reducer.buckets().size(), 3u);
      EXPECT_EQ(reducer.overlapped(), overlap);
      for (int64_t step = 0; step < 2; ++step) {
        const std::string at = std::string(method) + (overlap ? " overlapped" : " after backward") +
                               " step " + std::to_string(step);
        std::vector<Tensor> grads;
        for (int k = 0; k < w; ++k) grads.push_back(worker_grad(k, step));
        const Tensor last = grads.back();
        grads.back() = Tensor::full({total}, 777.0, DType::f32, gpu);
        Tensor out = Tensor::full({total}, -1.0, DType::f32, gpu);
        reducer.begin(step, grads, out);
        for (size_t t = layout.size(); t-- > 0;) {
          const int64_t a = layout[t].offset, b = a + layout[t].numel;
          grads.back().slice(0, a, b).copy_from(last.slice(0, a, b));
          reducer.mark_ready(t);
        }
        const ReduceStats st = reducer.finish();
        EXPECT_EQ(st.buckets, static_cast<int64_t>(reducer.buckets().size())) << at;
        const std::vector<float> got = out.to_vector<float>();
        // The reference: the same gradients in one process (these methods keep no state between
        // calls, so one reference compressor serves every run).
        grads.back() = last;
        Tensor ref_out = Tensor::empty({total}, DType::f32, gpu);
        reference_aggregate(*reference, grads, step, ref_out);
        const std::vector<float> want = ref_out.to_vector<float>();
        ASSERT_EQ(got.size(), want.size()) << at;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << at << ": differs from the fold";
      }
    }
  }
}

}  // namespace
}  // namespace tg::tern
