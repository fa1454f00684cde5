// The NCCL communicator. Without a GPU only the clear-error paths run (a CPU device; a build
// without CUDA); with one GPU a 1-rank group runs every collective end to end on device buffers,
// then every ternary algorithm over NCCL against the CPU sum, and two ranks asking for the same
// GPU get an error naming both. Multi-rank NCCL needs several GPUs and is not run here.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_comm.h"
#include "comm/reducer.h"
#include "comm/store.h"
#include "comm/ternary_collectives.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/philox.h"
#include "nn/core/tensor.h"
#include "terngrad/compressor.h"
#include "terngrad/ternary_kernels.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"
#include "tests/testing/op_harness.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

CommOptions nccl_options(int rank, int size, Device device) {
  CommOptions o;
  o.backend = "nccl";
  o.rank = rank;
  o.size = size;
  o.device = device;
  o.timeout = 30s;
  return o;
}

TEST(NcclComm, CpuDeviceIsAClearError) {
  testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 2s);
  const std::string msg =
      error_of([&] { make_communicator(nccl_options(0, 1, Device::cpu()), *store, "cpu"); });
#if TG_CUDA
  EXPECT_NE(msg.find("needs a CUDA device"), std::string::npos) << msg;
#else
  EXPECT_NE(msg.find("needs a build with CUDA"), std::string::npos) << msg;
#endif
}

TEST(NcclComm, MissingGpuIsAClearError) {
  testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 2s);
  const int count = cuda::device_count();
  const std::string msg = error_of(
      [&] { make_nccl_communicator(nccl_options(0, 1, Device::cuda(count)), *store, "none"); });
  EXPECT_NE(msg.find("nccl"), std::string::npos) << msg;
}

TEST(NcclComm, OneRankCollectivesOnDevice) {
  TG_REQUIRE_CUDA();
  testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 10s);
  const Device gpu = Device::cuda(0);
  auto comm = make_communicator(nccl_options(0, 1, gpu), *store, "one");
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->device(), gpu);

  const std::vector<float> f = {1.5f, -2.0f, 3.25f};
  Tensor tf = Tensor::from_vector(f, {3}, gpu);
  comm->allreduce(tf.data<float>(), 3, DType::f32, ReduceOp::sum);
  EXPECT_EQ(tf.to_vector<float>(), f);
  comm->allreduce(tf.data<float>(), 3, DType::f32, ReduceOp::max);
  EXPECT_EQ(tf.to_vector<float>(), f);
  const std::vector<int32_t> i32 = {-7, 2147483647, 0};
  Tensor ti = Tensor::from_vector(i32, {3}, gpu);
  comm->allreduce(ti.data<int32_t>(), 3, DType::i32, ReduceOp::sum);
  EXPECT_EQ(ti.to_vector<int32_t>(), i32);
  const std::vector<int64_t> i64 = {-1, int64_t{1} << 40};
  Tensor tl = Tensor::from_vector(i64, {2}, gpu);
  comm->allreduce(tl.data<int64_t>(), 2, DType::i64, ReduceOp::sum);
  EXPECT_EQ(tl.to_vector<int64_t>(), i64);
  const std::vector<uint64_t> u64 = {~uint64_t{0}, 12345};
  Tensor tu = Tensor::from_vector(u64, {2}, gpu);
  comm->allreduce(tu.data<uint64_t>(), 2, DType::u64, ReduceOp::sum);
  EXPECT_EQ(tu.to_vector<uint64_t>(), u64);

  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
  Tensor in = Tensor::from_vector(bytes, {5}, gpu);
  Tensor out = Tensor::zeros({5}, DType::u8, gpu);
  comm->allgather(in.data<uint8_t>(), out.data<uint8_t>(), 5);
  EXPECT_EQ(out.to_vector<uint8_t>(), bytes);
  Tensor out2 = Tensor::zeros({5}, DType::u8, gpu);
  comm->gather(in.data<uint8_t>(), out2.data<uint8_t>(), 5, 0);
  EXPECT_EQ(out2.to_vector<uint8_t>(), bytes);
  comm->broadcast(in.data<uint8_t>(), 5, 0);
  EXPECT_EQ(in.to_vector<uint8_t>(), bytes);
  Tensor out3 = Tensor::zeros({5}, DType::u8, gpu);
  comm->alltoall(in.data<uint8_t>(), out3.data<uint8_t>(), 5);  // one rank: its own block
  EXPECT_EQ(out3.to_vector<uint8_t>(), bytes);
  comm->barrier();
  EXPECT_EQ(comm->wire().sent, 0u);  // one rank: nothing on the wire
  EXPECT_EQ(comm->wire().received, 0u);
  EXPECT_THROW(comm->broadcast(in.data<uint8_t>(), 5, 1), Error);
}

// Every ternary algorithm over a 1-rank NCCL group with W = 3 local workers on the GPU equals the
// plain CPU sum of the unpacked codes.
TEST(NcclComm, TernaryAlgorithmsOnOneRank) {
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
  for (TernaryAlgorithm a : {TernaryAlgorithm::ps, TernaryAlgorithm::allgather,
                             TernaryAlgorithm::packed_allreduce, TernaryAlgorithm::automatic}) {
    Tensor acc = Tensor::full({n}, 1, DType::i32, gpu);
    const TernaryResult r = ternary_aggregate(*comm, a, dcodes.data<uint8_t>(), w, n,
                                              tern::PackFormat::two_bit, acc.data<int32_t>());
    EXPECT_EQ(acc.to_vector<int32_t>(), expected) << name(a);
    EXPECT_EQ(r.wire.sent, 0u) << name(a);
  }
}

// The reducer over a one-rank NCCL group, W = 3 workers on the GPU: with overlap its thread runs
// the buckets on the side stream while this thread writes the last worker's gradient on the main
// stream, slot by slot from the last, marking each ready after its write (as backward does). The
// reduced gradient equals tern::aggregate_emulated of the same gradients on the GPU (memcmp), with
// overlap and without; a bucket that read a slot before its write (a missing event) or a result
// read before the side stream finished would differ.
TEST(NcclComm, ReducerOverlapsBackwardOnTheSideStream) {
  TG_REQUIRE_CUDA();
  testing::TempDir dir;
  auto store = open_store("file://" + dir.str(), 10s);
  const Device gpu = Device::cuda(0);
  auto comm = make_communicator(nccl_options(0, 1, gpu), *store, "reducer");
  std::vector<tern::GradSlot> layout;
  int64_t total = 0;
  for (int64_t n : {4099, 700001, 13, 250000, 64, 1000003}) {
    layout.push_back({"t" + std::to_string(layout.size()), total, n});
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
      ro.bucket_bytes = 3 << 20;
      ro.first_bucket_bytes = 64 << 10;
      ro.overlap = overlap;
      Reducer reducer(*c, comm.get(), ro);
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
        tern::aggregate_emulated(*reference, grads, step, ref_out);
        const std::vector<float> want = ref_out.to_vector<float>();
        ASSERT_EQ(got.size(), want.size()) << at;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << at << ": differs from aggregate_emulated";
      }
    }
  }
}

TEST(NcclComm, TwoRanksOnOneGpuIsAClearError) {
  TG_REQUIRE_CUDA();
  testing::TempDir dir;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto store = open_store("file://" + dir.str(), 10s);
      errors[r] = error_of(
          [&] { make_communicator(nccl_options(r, 2, Device::cuda(0)), *store, "shared"); });
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("ranks 0 and 1 both use"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("one GPU per rank"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace tg::comm
