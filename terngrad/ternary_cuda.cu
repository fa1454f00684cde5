// TernGrad's kernels on CUDA; mirrors ternary_cpu.cpp (packed bytes and accumulators
// bit-identical, stats equal up to double summation order). All work runs on
// cuda::current_stream(); n = number of elements of one gradient tensor g (f32, contiguous).
//
// Statistics, ternarize + pack, unpack + accumulate and scale run as batch kernels
// (terngrad/ternary_batch.h: one launch per up to 60 tensors, the kernel bodies shared with the
// CPU emulation test); a per-tensor call is a batch of one. tensor_stats copies the batch's
// results to the host (one synchronization per call); the last-block election of its single pass
// uses kMaxSlots counters per (device, stream), zeroed once and left at zero by every launch.
// unpack_accumulate(_many) runs as a batch kernel too: one thread per packed byte.
// clipped_sum_sq is the statistics kernel in its clipped mode.
//
// Napkin math (H100, ~3 TB/s; bench/README "TernGrad kernels on the GPU" for the measurements):
// ternarize reads 4 B and writes 0.25 B per element, ~700 G elements/s at the copy rate. The
// old per-tensor kernels reached 0.46-0.64 of a copy: statistics kept one 4-byte load per thread
// in flight and paid two launches; packing decided each element with a float-to-int conversion
// and an inlined refine draw per element (code size, divergence). The batch kernels keep four
// float4 loads in flight per thread, decide with ~10 float/logic ops per element plus ~6 for
// its share of a Philox block, and draw refine words in one loop per 64-80 elements.
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "nn/core/allocator.h"
#include "nn/core/cuda_block_reduce.cuh"
#include "nn/core/cuda_check.cuh"
#include "nn/core/cuda_runtime.h"
#include "nn/core/device.h"
#include "nn/core/philox.h"
#include "terngrad/ternary_batch.h"
#include "terngrad/ternary_kernels.h"
#include "terngrad/ternary_rule.h"

namespace tg::tern {

namespace {

// The batch kernels of ternary_batch.h; the parameter block is read in place
// (__grid_constant__: no copy of its ~3 KB per thread).
template <class F, bool kEF>
__global__ void __launch_bounds__(batch::kPackThreads)
    pack_kernel(const __grid_constant__ batch::PackArgs a) {
  batch::pack_thread<F, kEF>(a, blockIdx.x, threadIdx.x);
}

template <bool kClipped>
__global__ void __launch_bounds__(batch::kStatsThreads)
    stats_kernel(const __grid_constant__ batch::StatsArgs a) {
  batch::stats_block<kClipped>(a, blockIdx.x, threadIdx.x);
}

__global__ void __launch_bounds__(batch::kScaleThreads)
    scale_kernel(const __grid_constant__ batch::ScaleArgs a) {
  batch::scale_thread(a, blockIdx.x, threadIdx.x);
}

// kMaxSlots counters of the stats kernel for the current device and `st`, zeroed once; every
// launch leaves them at zero, and launches on one stream never overlap.
unsigned* done_counters(cudaStream_t st) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, unsigned*> counters;  // never freed
  int dev = 0;
  TG_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  unsigned*& p = counters[{dev, st}];
  if (p == nullptr) {
    void* raw = cuda::malloc_raw(dev, batch::kMaxSlots * sizeof(unsigned));
    TG_CUDA_CHECK(cudaMemsetAsync(raw, 0, batch::kMaxSlots * sizeof(unsigned), st));
    p = static_cast<unsigned*>(raw);
  }
  return p;
}

template <int Per>
__global__ void __launch_bounds__(batch::kUnpackThreads)
    unpack_kernel(const __grid_constant__ batch::UnpackArgs a) {
  batch::unpack_thread<Per>(a, blockIdx.x, threadIdx.x);
}

// Device memory from the caching allocator of the current device, returned on scope exit (safe
// before the kernels finish: the allocator reuses blocks in stream order).
class Workspace {
 public:
  explicit Workspace(size_t bytes) {
    int dev = 0;
    TG_CUDA_CHECK(cudaGetDevice(&dev));
    alloc_ = &allocator_for(Device::cuda(dev));
    p_ = alloc_->allocate(bytes);
  }
  ~Workspace() { alloc_->deallocate(p_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  CachingAllocator* alloc_ = nullptr;
  void* p_ = nullptr;
};

// The statistics (or, with scalers, the clipped sums of squares) of a batch: the launches,
// then one copy of all results to the host: slot k's sum, sum_sq, l1, max at 4 k.
std::vector<double> run_stats(const StatsTask* tasks, size_t count, const float* scalers,
                              std::vector<size_t>& index) {
  std::vector<batch::StatsArgs> plans = batch::plan_stats(tasks, count, index, scalers);
  if (plans.empty()) return {};
  int64_t blocks = 0;
  for (const batch::StatsArgs& a : plans) blocks += a.blocks;
  const int64_t slots = static_cast<int64_t>(index.size());
  Workspace ws(static_cast<size_t>(4 * (blocks + slots)) * sizeof(double));
  double* partial = ws.as<double>();
  double* result = partial + 4 * blocks;
  cudaStream_t st = cuda::current_stream();
  unsigned* done = done_counters(st);
  int64_t b0 = 0, s0 = 0;
  for (batch::StatsArgs& a : plans) {
    a.partial = partial + 4 * b0;
    a.out = result + 4 * s0;
    a.done = done;
    const uint32_t nb = a.blocks;
    if (a.clipped)
      stats_kernel<true><<<nb, batch::kStatsThreads, 0, st>>>(a);
    else
      stats_kernel<false><<<nb, batch::kStatsThreads, 0, st>>>(a);
    TG_CUDA_LAUNCH_CHECK();
    b0 += nb;
    s0 += a.count;
  }
  std::vector<double> host(static_cast<size_t>(4 * slots));
  TG_CUDA_CHECK(cudaMemcpyAsync(host.data(), result, host.size() * sizeof(double),
                                cudaMemcpyDeviceToHost, st));
  TG_CUDA_CHECK(cudaStreamSynchronize(st));
  return host;
}

}  // namespace

void tensor_stats_batch_cuda(const StatsTask* tasks, size_t count, TensorStats* out) {
  TG_CHECK(count == 0 || (tasks != nullptr && out != nullptr),
           "tensor_stats_cuda: tasks or out is null");
  for (size_t i = 0; i < count; ++i) out[i] = TensorStats{};
  std::vector<size_t> index;
  const std::vector<double> host = run_stats(tasks, count, nullptr, index);
  for (size_t k = 0; k < index.size(); ++k) {
    TensorStats& o = out[index[k]];
    o.n = tasks[index[k]].n;
    o.sum = host[4 * k];
    o.sum_sq = host[4 * k + 1];
    o.l1 = host[4 * k + 2];
    o.max_abs = host[4 * k + 3];
  }
}

void clipped_sum_sq_batch_cuda(const StatsTask* tasks, size_t count, const float* scalers,
                               double* out) {
  TG_CHECK(count == 0 || (tasks != nullptr && scalers != nullptr && out != nullptr),
           "clipped_sum_sq_cuda: tasks, scalers or out is null");
  for (size_t i = 0; i < count; ++i) out[i] = 0.0;
  std::vector<size_t> index;
  const std::vector<double> host = run_stats(tasks, count, scalers, index);
  for (size_t k = 0; k < index.size(); ++k) out[index[k]] = host[4 * k + 1];
}

double clipped_sum_sq_cuda(const float* g, int64_t n, float s) {
  TG_CHECK(n >= 0, "clipped_sum_sq_cuda: element count ", n, " is negative (expected n >= 0)");
  TG_CHECK(n == 0 || g != nullptr, "clipped_sum_sq_cuda: g is null for n = ", n);
  const StatsTask t{g, n};
  double out = 0;
  clipped_sum_sq_batch_cuda(&t, 1, &s, &out);
  return out;
}

void tensor_stats_cuda(const float* g, int64_t n, TensorStats* out) {
  TG_CHECK(n >= 0, "tensor_stats_cuda: element count ", n, " is negative (expected n >= 0)");
  TG_CHECK(out != nullptr, "tensor_stats_cuda: out is null");
  const StatsTask t{g, n};
  tensor_stats_batch_cuda(&t, 1, out);
}

void ternarize_pack_batch_cuda(const PackTask* tasks, size_t count, uint64_t seed, PackFormat f) {
  detail::check_format(f, "ternarize_pack_cuda");
  TG_CHECK(count == 0 || tasks != nullptr, "ternarize_pack_cuda: tasks is null");
  cudaStream_t st = cuda::current_stream();
  for (const batch::PackArgs& a : batch::plan_pack(tasks, count, seed, f)) {
    const unsigned grid = a.blocks, threads = batch::kPackThreads;
    if (f == PackFormat::two_bit && !a.residual)
      pack_kernel<batch::TwoBit, false><<<grid, threads, 0, st>>>(a);
    else if (f == PackFormat::two_bit)
      pack_kernel<batch::TwoBit, true><<<grid, threads, 0, st>>>(a);
    else if (!a.residual)
      pack_kernel<batch::Base3, false><<<grid, threads, 0, st>>>(a);
    else
      pack_kernel<batch::Base3, true><<<grid, threads, 0, st>>>(a);
    TG_CUDA_LAUNCH_CHECK();
  }
}

void ternarize_pack_cuda(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                         PackFormat f, uint8_t* out) {
  const PackTask t{g, n, s, stream, out};
  ternarize_pack_batch_cuda(&t, 1, seed, f);
}

void unpack_accumulate_cuda(const uint8_t* packed, int64_t n, PackFormat f, int32_t* acc) {
  unpack_accumulate_many_cuda(packed, 1, 0, n, f, acc);
}

void unpack_accumulate_batch_cuda(const UnpackTask* tasks, size_t count, PackFormat f) {
  detail::check_format(f, "unpack_accumulate_cuda");
  TG_CHECK(count == 0 || tasks != nullptr, "unpack_accumulate_cuda: tasks is null");
  cudaStream_t st = cuda::current_stream();
  for (const batch::UnpackArgs& a : batch::plan_unpack(tasks, count, f)) {
    if (f == PackFormat::two_bit)
      unpack_kernel<4><<<a.blocks, batch::kUnpackThreads, 0, st>>>(a);
    else
      unpack_kernel<5><<<a.blocks, batch::kUnpackThreads, 0, st>>>(a);
    TG_CUDA_LAUNCH_CHECK();
  }
}

void unpack_accumulate_many_cuda(const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                                 PackFormat f, int32_t* acc) {
  const UnpackTask t{packed, count, stride, n, acc};
  unpack_accumulate_batch_cuda(&t, 1, f);
}

void scale_accumulated_batch_cuda(const ScaleTask* tasks, size_t count) {
  TG_CHECK(count == 0 || tasks != nullptr, "scale_accumulated_cuda: tasks is null");
  cudaStream_t st = cuda::current_stream();
  for (const batch::ScaleArgs& a : batch::plan_scale(tasks, count)) {
    scale_kernel<<<a.blocks, batch::kScaleThreads, 0, st>>>(a);
    TG_CUDA_LAUNCH_CHECK();
  }
}

void scale_accumulated_cuda(const int32_t* acc, int64_t n, float scale, float* out) {
  const ScaleTask t{acc, n, scale, out};
  scale_accumulated_batch_cuda(&t, 1);
}

}  // namespace tg::tern
