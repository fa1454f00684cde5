// TernGrad's per-tensor kernels on CUDA; mirrors ternary_cpu.cpp (packed bytes and accumulators
// bit-identical, stats equal up to double summation order). All work runs on
// cuda::current_stream(); n = number of elements of one gradient tensor g (f32, contiguous).
//
// tensor_stats: two deterministic passes, no atomics (the pattern of nn/ops/reduce_cuda.cu):
//   1. a grid of B = stats_blocks(n) blocks (B depends on n only); each thread accumulates sum,
//      sum of squares and L1 in double and max|g| over its grid-stride elements; each block
//      combines its threads with cuda::block_reduce and writes 4 partials;
//   2. one block combines the B partials in a fixed tree and writes the 4 results, which are
//      copied to the host (the call synchronizes the stream).
// ternarize_pack: the rule of ternary_rule.h, evaluated by the same host/device function as
//   the CPU's scalar path (one IEEE multiply __fmul_rn per element, never fused), so the bytes
//   are bit-identical.
//   two_bit: one thread per Philox block = 16 elements (four float4 loads when g is 16-byte
//     aligned) = 4 output bytes.
//   base3: one thread per 5 Philox blocks = 80 elements = 16 output bytes (a byte's 5 elements
//     never straddle two threads).
// unpack_accumulate(_many): one thread per packed byte, the digits of all vectors summed in
//   registers, one read-modify-write of acc (base3: 5 digits by constant divisions). Undefined
//   byte values decode as code 0, like the CPU table.
// scale_accumulated: one thread per element, __fmul_rn(float(acc), scale).
//
// Napkin math (H100, ~3 TB/s): ternarize reads 4 B and writes 0.25 B per element, ~700 G
// elements/s at the copy rate; one Philox block (20 multiplies + ~40 other integer ops) per 16
// elements is ~4 integer ops per element on top of ~10 for the rule, ~10 T integer ops/s: near
// the GPU's integer rate, so the pass should run near bandwidth.
#include <cstdint>

#include "nn/core/allocator.h"
#include "nn/core/cuda_block_reduce.cuh"
#include "nn/core/cuda_check.cuh"
#include "nn/core/device.h"
#include "nn/core/philox.h"
#include "terngrad/ternary_kernels.h"
#include "terngrad/ternary_rule.h"

namespace tg::tern {

namespace {

constexpr int kThreads = 256;           // a multiple of 32 (full warps for the shuffles)
constexpr int64_t kMaxBlocks = 1024;    // grid cap of the stats pass = number of partials
constexpr int64_t kItemsPerThread = 8;  // stats: below this load per thread, fewer blocks

int64_t stats_blocks(int64_t n) {
  int64_t b = (n + kThreads * kItemsPerThread - 1) / (kThreads * kItemsPerThread);
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return b;
}

struct SumF {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct MaxF {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

// partial layout: [0, B) sum, [B, 2B) sum_sq, [2B, 3B) l1, [3B, 4B) max_abs.
__global__ void stats_partials_kernel(const float* __restrict__ g, int64_t n,
                                      double* __restrict__ partial) {
  __shared__ double smem[32];
  double s = 0, q = 0, a = 0;
  float m = 0.0f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float f = g[i];
    const double d = f;
    s += d;
    q += d * d;
    a += fabs(d);
    m = fmaxf(m, fabsf(f));
  }
  s = cuda::block_reduce(s, 0.0, SumF(), smem);
  q = cuda::block_reduce(q, 0.0, SumF(), smem);
  a = cuda::block_reduce(a, 0.0, SumF(), smem);
  const double mx = cuda::block_reduce(double(m), 0.0, MaxF(), smem);
  if (threadIdx.x == 0) {
    const int64_t B = gridDim.x;
    partial[blockIdx.x] = s;
    partial[B + blockIdx.x] = q;
    partial[2 * B + blockIdx.x] = a;
    partial[3 * B + blockIdx.x] = mx;
  }
}

__global__ void stats_final_kernel(const double* __restrict__ partial, int64_t B,
                                   double* __restrict__ out) {
  __shared__ double smem[32];
  double v[4] = {0, 0, 0, 0};
  for (int64_t i = threadIdx.x; i < B; i += blockDim.x) {
    v[0] += partial[i];
    v[1] += partial[B + i];
    v[2] += partial[2 * B + i];
    v[3] = fmax(v[3], partial[3 * B + i]);
  }
  for (int k = 0; k < 3; ++k) v[k] = cuda::block_reduce(v[k], 0.0, SumF(), smem);
  v[3] = cuda::block_reduce(v[3], 0.0, MaxF(), smem);
  if (threadIdx.x == 0)
    for (int k = 0; k < 4; ++k) out[k] = v[k];
}

// clipped_sum_sq: per block the sum of min(g^2, s^2) over its grid-stride elements (double),
// then one block sums the B partials in a fixed tree.
__global__ void clipped_partials_kernel(const float* __restrict__ g, int64_t n, double cap,
                                        double* __restrict__ partial) {
  __shared__ double smem[32];
  double q = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double d = static_cast<double>(g[i]) * g[i];
    q += d < cap ? d : cap;
  }
  q = cuda::block_reduce(q, 0.0, SumF(), smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = q;
}

__global__ void clipped_final_kernel(const double* __restrict__ partial, int64_t B,
                                     double* __restrict__ out) {
  __shared__ double smem[32];
  double v = 0;
  for (int64_t i = threadIdx.x; i < B; i += blockDim.x) v += partial[i];
  v = cuda::block_reduce(v, 0.0, SumF(), smem);
  if (threadIdx.x == 0) out[0] = v;
}

// code + 1 of element i (primary byte b): 2 kept positive, 0 kept negative, 1 dropped. The
// rule is ternary_rule.h's, shared with the CPU.
__device__ __forceinline__ uint32_t code_plus_one(float g, float s, float c, uint32_t b,
                                                  uint64_t seed, uint64_t stream, int64_t i) {
  if (!ternary_keep(g, s, c, b, seed, stream, static_cast<uint64_t>(i))) return 1;
  return g > 0.0f ? 2 : 0;
}

// One thread per Philox block = 16 elements = 4 output bytes.
template <bool kAligned>
__global__ void pack_two_bit_kernel(const float* __restrict__ g, int64_t n, float s, float c,
                                    uint64_t seed, uint64_t stream, int64_t bytes,
                                    uint8_t* __restrict__ out) {
  const int64_t blocks = (n + kCodesPerBlock - 1) / kCodesPerBlock;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < blocks;
       q += (int64_t)gridDim.x * blockDim.x) {
    const Philox4 r = philox_block(seed, stream, static_cast<uint64_t>(q));
    const int64_t base = kCodesPerBlock * q;
    float x[kCodesPerBlock];
    if (kAligned && base + kCodesPerBlock <= n) {
      const float4* v = reinterpret_cast<const float4*>(g + base);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 t = v[k];
        x[4 * k] = t.x;
        x[4 * k + 1] = t.y;
        x[4 * k + 2] = t.z;
        x[4 * k + 3] = t.w;
      }
    } else {
#pragma unroll
      for (int k = 0; k < kCodesPerBlock; ++k) x[k] = base + k < n ? g[base + k] : 0.0f;
    }
#pragma unroll
    for (int byte = 0; byte < 4; ++byte) {
      uint32_t b = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int e = 4 * byte + k;
        if (base + e < n)  // padding bits: 0
          b |= code_plus_one(x[e], s, c, primary_byte(r, e), seed, stream, base + e) << (2 * k);
      }
      if (4 * q + byte < bytes) out[4 * q + byte] = static_cast<uint8_t>(b);
    }
  }
}

// One thread per 5 Philox blocks = 80 elements = 16 output bytes (5 elements per byte never
// straddle the thread's range).
__global__ void pack_base3_kernel(const float* __restrict__ g, int64_t n, float s, float c,
                                  uint64_t seed, uint64_t stream, int64_t bytes,
                                  uint8_t* __restrict__ out) {
  constexpr int kBlocks = 5, kElems = kBlocks * kCodesPerBlock, kBytes = kElems / 5;
  const int64_t groups = (bytes + kBytes - 1) / kBytes;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < groups;
       q += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e0 = kElems * q;
    uint32_t acc[kBytes];
#pragma unroll
    for (int k = 0; k < kBytes; ++k) acc[k] = 0;
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
      const Philox4 r = philox_block(seed, stream, static_cast<uint64_t>(kBlocks * q + blk));
#pragma unroll
      for (int k = 0; k < kCodesPerBlock; ++k) {
        const int e = kCodesPerBlock * blk + k;  // byte e / 5, digit e % 5 (compile-time)
        constexpr uint32_t kPow3[5] = {1, 3, 9, 27, 81};
        const int64_t i = e0 + e;
        const uint32_t d =
            i < n ? code_plus_one(g[i], s, c, primary_byte(r, k), seed, stream, i) : 1;
        acc[e / 5] += d * kPow3[e % 5];  // missing elements: digit 1 (code 0)
      }
    }
#pragma unroll
    for (int k = 0; k < kBytes; ++k)
      if (kBytes * q + k < bytes) out[kBytes * q + k] = static_cast<uint8_t>(acc[k]);
  }
}

__global__ void zero_codes_kernel(int64_t n, PackFormat f, int64_t bytes,
                                  uint8_t* __restrict__ out) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < bytes;
       j += (int64_t)gridDim.x * blockDim.x) {
    uint8_t b;
    if (f == PackFormat::base3) {
      b = 121;  // five digits 1
    } else {
      const int64_t valid = n - 4 * j;  // elements in this byte (padding bits stay 0)
      b = valid >= 4 ? 0x55 : static_cast<uint8_t>(0x55 & ((1u << (2 * valid)) - 1));
    }
    out[j] = b;
  }
}

// acc += the sum of `count` code vectors (vector v at packed + v * stride): one thread per
// packed byte j, the vectors' digits summed in registers, one read-modify-write of acc.
template <int Per>
__global__ void unpack_many_kernel(const uint8_t* __restrict__ packed, int64_t count, size_t stride,
                                   int64_t n, int64_t bytes, int32_t* __restrict__ acc) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < bytes;
       j += (int64_t)gridDim.x * blockDim.x) {
    int32_t sum[Per];
#pragma unroll
    for (int k = 0; k < Per; ++k) sum[k] = 0;
    for (int64_t v = 0; v < count; ++v) {
      uint32_t b = packed[v * stride + j];
      if (Per == 4) {
#pragma unroll
        for (int k = 0; k < Per; ++k) {
          const int d = (b >> (2 * k)) & 3;
          sum[k] += d == 3 ? 0 : d - 1;  // digit 3 is never written: code 0, like the CPU table
        }
      } else if (b <= 242) {  // larger bytes are never written: code 0
#pragma unroll
        for (int k = 0; k < Per; ++k) {
          sum[k] += static_cast<int32_t>(b % 3) - 1;
          b /= 3;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < Per; ++k)
      if (Per * j + k < n) acc[Per * j + k] += sum[k];
  }
}

__global__ void scale_kernel(const int32_t* __restrict__ acc, int64_t n, float scale,
                             float* __restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = __fmul_rn(__int2float_rn(acc[i]), scale);
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

}  // namespace

double clipped_sum_sq_cuda(const float* g, int64_t n, float s) {
  TG_CHECK(n >= 0, "clipped_sum_sq_cuda: element count ", n, " is negative (expected n >= 0)");
  if (n == 0) return 0.0;
  TG_CHECK(g != nullptr, "clipped_sum_sq_cuda: g is null for n = ", n);
  const int64_t B = stats_blocks(n);
  Workspace ws((B + 1) * sizeof(double));
  double* partial = ws.as<double>();
  cudaStream_t st = cuda::current_stream();
  clipped_partials_kernel<<<static_cast<unsigned>(B), kThreads, 0, st>>>(
      g, n, static_cast<double>(s) * s, partial);
  TG_CUDA_LAUNCH_CHECK();
  clipped_final_kernel<<<1, kThreads, 0, st>>>(partial, B, partial + B);
  TG_CUDA_LAUNCH_CHECK();
  double host = 0;
  TG_CUDA_CHECK(cudaMemcpyAsync(&host, partial + B, sizeof(host), cudaMemcpyDeviceToHost, st));
  TG_CUDA_CHECK(cudaStreamSynchronize(st));
  return host;
}

void tensor_stats_cuda(const float* g, int64_t n, TensorStats* out) {
  TG_CHECK(n >= 0, "tensor_stats_cuda: element count ", n, " is negative (expected n >= 0)");
  TG_CHECK(out != nullptr, "tensor_stats_cuda: out is null");
  *out = TensorStats{};
  if (n == 0) return;
  TG_CHECK(g != nullptr, "tensor_stats_cuda: g is null for n = ", n);
  const int64_t B = stats_blocks(n);
  Workspace ws((4 * B + 4) * sizeof(double));
  double* partial = ws.as<double>();
  double* result = partial + 4 * B;
  cudaStream_t st = cuda::current_stream();
  stats_partials_kernel<<<static_cast<unsigned>(B), kThreads, 0, st>>>(g, n, partial);
  TG_CUDA_LAUNCH_CHECK();
  stats_final_kernel<<<1, kThreads, 0, st>>>(partial, B, result);
  TG_CUDA_LAUNCH_CHECK();
  double host[4];
  TG_CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(host), cudaMemcpyDeviceToHost, st));
  TG_CUDA_CHECK(cudaStreamSynchronize(st));
  out->n = n;
  out->sum = host[0];
  out->sum_sq = host[1];
  out->l1 = host[2];
  out->max_abs = host[3];
}

void ternarize_pack_cuda(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                         PackFormat f, uint8_t* out) {
  if (!detail::ternarize_args(g, n, f, out, "ternarize_pack_cuda")) return;
  const int64_t bytes = static_cast<int64_t>(packed_bytes(f, n));
  cudaStream_t st = cuda::current_stream();
  if (!(s > 0.0f)) {  // s <= 0 (or NaN): all-zero codes, as on the CPU
    zero_codes_kernel<<<cuda::grid_for(bytes, kThreads), kThreads, 0, st>>>(n, f, bytes, out);
    TG_CUDA_LAUNCH_CHECK();
    return;
  }
  TG_CHECK(static_cast<uint64_t>(n) <= kMaxTernaryElements, "ternarize_pack_cuda: ", n,
           " elements exceed the limit of the random-number layout (", kMaxTernaryElements, ")");
  const float c = keep_scale(s);
  if (f == PackFormat::two_bit) {
    const int64_t blocks = (n + kCodesPerBlock - 1) / kCodesPerBlock;
    const bool aligned = reinterpret_cast<uintptr_t>(g) % 16 == 0;
    if (aligned)
      pack_two_bit_kernel<true><<<cuda::grid_for(blocks, kThreads), kThreads, 0, st>>>(
          g, n, s, c, seed, stream, bytes, out);
    else
      pack_two_bit_kernel<false><<<cuda::grid_for(blocks, kThreads), kThreads, 0, st>>>(
          g, n, s, c, seed, stream, bytes, out);
    TG_CUDA_LAUNCH_CHECK();
  } else {
    const int64_t groups = (bytes + 15) / 16;
    pack_base3_kernel<<<cuda::grid_for(groups, kThreads), kThreads, 0, st>>>(g, n, s, c, seed,
                                                                             stream, bytes, out);
    TG_CUDA_LAUNCH_CHECK();
  }
}

void unpack_accumulate_cuda(const uint8_t* packed, int64_t n, PackFormat f, int32_t* acc) {
  unpack_accumulate_many_cuda(packed, 1, 0, n, f, acc);
}

void unpack_accumulate_many_cuda(const uint8_t* packed, int64_t count, size_t stride, int64_t n,
                                 PackFormat f, int32_t* acc) {
  if (!detail::unpack_args(packed, count, stride, n, f, acc, "unpack_accumulate_cuda")) return;
  const int64_t bytes = static_cast<int64_t>(packed_bytes(f, n));
  cudaStream_t st = cuda::current_stream();
  if (f == PackFormat::two_bit)
    unpack_many_kernel<4><<<cuda::grid_for(bytes, kThreads), kThreads, 0, st>>>(
        packed, count, stride, n, bytes, acc);
  else
    unpack_many_kernel<5><<<cuda::grid_for(bytes, kThreads), kThreads, 0, st>>>(
        packed, count, stride, n, bytes, acc);
  TG_CUDA_LAUNCH_CHECK();
}

void scale_accumulated_cuda(const int32_t* acc, int64_t n, float scale, float* out) {
  if (!detail::scale_args(acc, n, out, "scale_accumulated_cuda")) return;
  scale_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(acc, n, scale,
                                                                                     out);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg::tern
