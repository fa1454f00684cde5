// The NCCL communicator. Without a GPU only the clear-error paths run (a CPU device; a build
// without CUDA); with one GPU a 1-rank group runs every collective end to end on device buffers,
// and two ranks asking for the same GPU get an error naming both. Multi-rank NCCL needs several
// GPUs and is not run here. The exchanges over NCCL: tests/terngrad/aggregate_nccl_cuda_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_comm.h"
#include "comm/store.h"
#include "nn/core/cuda_runtime.h"
#include "nn/core/tensor.h"
#include "tests/comm/rank_threads.h"
#include "tests/testing/files.h"
#include "tests/testing/op_harness.h"

namespace tg::comm {
namespace {

using namespace std::chrono_literals;

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
