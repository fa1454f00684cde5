// Baseline compressors on CUDA: fp16, QSGD and 1-bit SGD with error feedback (formats and
// semantics in baseline_kernels.h); mirrors baseline_cpu.cpp bit for bit.
//
//   fp16:   one thread per element (grid stride), __float2half_rn with NaNs canonicalized;
//           unpack: acc = __fmaf_rn(scale, half, acc).
//   qsgd:   pack: one block per bucket, T = qsgd_reduce_threads(bucket) threads. Thread t adds
//           the squares of elements t, t+T, ... in double, block_reduce folds them (the canonical
//           order the CPU replays); then thread t owns groups of 8 codes t, t+T, ... -- 8 codes
//           of w bits are exactly w bytes, so no two threads share a byte.
//           unpack: one thread per group of 8 codes over all buckets (grid stride).
//   onebit: (1) one block of 256 threads per chunk of kOnebitChunk elements: v = g + residual
//           stored into residual, per-chunk (sum >= 0, sum < 0, count >= 0) into a workspace;
//           (2) one block folds the chunk results, writes the two means to the wire header and
//           to the workspace; (3) one thread per output byte writes 8 bits and subtracts the
//           reconstruction from the 8 residuals.
// All rounding-sensitive arithmetic uses the _rn intrinsics (never contracted into FMAs except
// where the CPU uses std::fma too). Wire words are written byte by byte: packed buffers may sit
// at any offset. Napkin math for onebit at n = 60 M (AlexNet): pass 1 reads 480 MB and writes
// 240 MB, pass 3 reads and writes 240 MB + 7.5 MB: ~0.4 ms at ~3 TB/s; the workspace is 15 K
// chunks x 24 bytes.
#include <cuda_fp16.h>

#include <cstdint>

#include "nn/core/allocator.h"
#include "nn/core/cuda_block_reduce.cuh"
#include "nn/core/cuda_check.cuh"
#include "nn/core/philox.h"
#include "terngrad/baseline_kernels.h"

namespace tg::tern {

namespace {

constexpr int kThreads = 256;
static_assert(kThreads == detail::kReduceThreads, "onebit passes must use the canonical T");

using detail::check_n;
using detail::check_qsgd;

struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct SumLL {
  __device__ long long operator()(long long a, long long b) const { return a + b; }
};

__device__ __forceinline__ void store_f32(uint8_t* p, float v) {
  const uint32_t u = __float_as_uint(v);
  p[0] = static_cast<uint8_t>(u);
  p[1] = static_cast<uint8_t>(u >> 8);
  p[2] = static_cast<uint8_t>(u >> 16);
  p[3] = static_cast<uint8_t>(u >> 24);
}
__device__ __forceinline__ float load_f32(const uint8_t* p) {
  return __uint_as_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

// ---- fp16 ------------------------------------------------------------------------------------

__device__ __forceinline__ uint16_t to_half_bits(float x) {
  if (isnan(x)) return static_cast<uint16_t>((__float_as_uint(x) >> 16) & 0x8000u) | 0x7E00u;
  return __half_as_ushort(__float2half_rn(x));
}

__global__ void fp16_pack_kernel(const float* __restrict__ g, int64_t n,
                                 uint8_t* __restrict__ out) {
  const bool aligned = (reinterpret_cast<uintptr_t>(out) & 1) == 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint16_t h = to_half_bits(g[i]);
    if (aligned) {
      reinterpret_cast<uint16_t*>(out)[i] = h;
    } else {
      out[2 * i] = static_cast<uint8_t>(h);
      out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
}

__global__ void fp16_unpack_kernel(const uint8_t* __restrict__ in, int64_t n, float scale,
                                   float* __restrict__ acc) {
  const bool aligned = (reinterpret_cast<uintptr_t>(in) & 1) == 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint16_t h = aligned ? reinterpret_cast<const uint16_t*>(in)[i]
                               : static_cast<uint16_t>(in[2 * i] | (in[2 * i + 1] << 8));
    acc[i] = __fmaf_rn(scale, __half2float(__ushort_as_half(h)), acc[i]);
  }
}

// ---- qsgd ------------------------------------------------------------------------------------

// Mirrors qsgd_code in baseline_cpu.cpp: |v| * s is exact in double, one rounded division.
__device__ __forceinline__ uint32_t qsgd_code(float v, float norm, int levels, uint32_t word) {
  if (!(norm > 0.0f) || !isfinite(norm)) return 0;
  const double s = levels;
  double r = __ddiv_rn(__dmul_rn(fabs(static_cast<double>(v)), s), static_cast<double>(norm));
  if (!(r >= 0.0)) r = 0.0;
  if (r > s) r = s;
  const double fl = floor(r);
  uint32_t level = static_cast<uint32_t>(fl);
  if (level < static_cast<uint32_t>(levels) &&
      static_cast<double>(uniform01(word)) < __dsub_rn(r, fl))
    ++level;
  return level == 0 ? 0u : (level << 1) | (v < 0.0f ? 1u : 0u);
}

__device__ __forceinline__ float qsgd_value(uint32_t code, float norm, int levels) {
  const double d = __ddiv_rn(__dmul_rn(static_cast<double>(norm), static_cast<double>(code >> 1)),
                             static_cast<double>(levels));
  const float f = __double2float_rn(d);
  return (code & 1u) ? -f : f;
}

__global__ void qsgd_pack_kernel(const float* __restrict__ g, int64_t n, int levels, int64_t bucket,
                                 int w, int64_t stride, uint64_t seed, uint64_t stream,
                                 uint8_t* __restrict__ out) {
  __shared__ double smem[32];
  __shared__ float norm_s;
  const int64_t b = blockIdx.x;
  const int64_t start = b * bucket;
  const int64_t len = min(bucket, n - start);
  const float* v = g + start;
  uint8_t* o = out + b * stride;

  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const double x = v[j];
    sq = sq + x * x;  // exact square: an FMA here gives the same bits
  }
  sq = cuda::block_reduce(sq, 0.0, SumD(), smem);
  if (threadIdx.x == 0) {
    norm_s = __double2float_rn(sqrt(sq));  // IEEE sqrt, like std::sqrt
    store_f32(o, norm_s);
  }
  __syncthreads();
  const float norm = norm_s;

  uint8_t* codes = o + 4;
  const int64_t code_bytes = (len * w + 7) / 8;
  const int64_t groups = (len + 7) / 8;
  for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
    const int64_t j0 = 8 * k, j1 = min(j0 + 8, len);
    uint8_t* dst = codes + k * w;  // group k = bytes k*w .. k*w+w-1
    const int64_t dst_end = min(static_cast<int64_t>(w), code_bytes - k * w);
    int64_t written = 0;
    uint64_t bits = 0;
    int nbits = 0;
    Philox4 r{};
    uint64_t cur_block = ~0ull;
    for (int64_t j = j0; j < j1; ++j) {
      const uint64_t i = static_cast<uint64_t>(start + j);
      if ((i >> 2) != cur_block) {
        cur_block = i >> 2;
        r = philox_block(seed, stream, cur_block);
      }
      bits |= static_cast<uint64_t>(qsgd_code(v[j], norm, levels, r.v[i & 3])) << nbits;
      nbits += w;
      while (nbits >= 8) {
        dst[written++] = static_cast<uint8_t>(bits);
        bits >>= 8;
        nbits -= 8;
      }
    }
    if (nbits > 0 && written < dst_end) dst[written] = static_cast<uint8_t>(bits);
  }
}

__global__ void qsgd_unpack_kernel(const uint8_t* __restrict__ in, int64_t n, int levels,
                                   int64_t bucket, int w, int64_t stride, float scale,
                                   float* __restrict__ acc) {
  const int64_t groups_per_bucket = (bucket + 7) / 8;
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int64_t total = buckets * groups_per_bucket;
  const uint32_t mask = (1u << w) - 1u;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total;
       q += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = q / groups_per_bucket, k = q % groups_per_bucket;
    const int64_t start = b * bucket, len = min(bucket, n - start);
    const int64_t j0 = 8 * k;
    if (j0 >= len) continue;  // past the end of the last, partial bucket
    const int64_t j1 = min(j0 + 8, len);
    const uint8_t* o = in + b * stride;
    const float norm = load_f32(o);
    const uint8_t* src = o + 4 + k * w;
    uint64_t bits = 0;
    int nbits = 0;
    for (int64_t j = j0; j < j1; ++j) {
      while (nbits < w) {
        bits |= static_cast<uint64_t>(*src++) << nbits;
        nbits += 8;
      }
      const uint32_t code = static_cast<uint32_t>(bits) & mask;
      bits >>= w;
      nbits -= w;
      const int64_t i = start + j;
      acc[i] = __fmaf_rn(scale, qsgd_value(code, norm, levels), acc[i]);
    }
  }
}

// ---- onebit ----------------------------------------------------------------------------------

struct OnebitWorkspace {
  double* pos;     // [chunks]
  double* neg;     // [chunks]
  long long* cnt;  // [chunks]
  float* means;    // [2]: pos, neg
};

__global__ void onebit_chunk_kernel(const float* __restrict__ g, float* __restrict__ residual,
                                    int64_t n, OnebitWorkspace ws) {
  __shared__ double smem_d[32];
  __shared__ long long smem_l[32];
  const int64_t start = blockIdx.x * detail::kOnebitChunk;
  const int64_t len = min(detail::kOnebitChunk, n - start);
  double pos = 0.0, neg = 0.0;
  long long cnt = 0;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const int64_t i = start + j;
    const float v = __fadd_rn(g[i], residual[i]);
    residual[i] = v;
    const bool ge = v >= 0.0f;
    pos = pos + (ge ? static_cast<double>(v) : 0.0);
    neg = neg + (ge ? 0.0 : static_cast<double>(v));
    cnt += ge;
  }
  pos = cuda::block_reduce(pos, 0.0, SumD(), smem_d);
  neg = cuda::block_reduce(neg, 0.0, SumD(), smem_d);
  cnt = cuda::block_reduce(cnt, 0LL, SumLL(), smem_l);
  if (threadIdx.x == 0) {
    ws.pos[blockIdx.x] = pos;
    ws.neg[blockIdx.x] = neg;
    ws.cnt[blockIdx.x] = cnt;
  }
}

__global__ void onebit_means_kernel(int64_t chunks, int64_t n, OnebitWorkspace ws,
                                    uint8_t* __restrict__ out) {
  __shared__ double smem_d[32];
  __shared__ long long smem_l[32];
  double pos = 0.0, neg = 0.0;
  long long cnt = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    pos = pos + ws.pos[c];
    neg = neg + ws.neg[c];
    cnt += ws.cnt[c];
  }
  pos = cuda::block_reduce(pos, 0.0, SumD(), smem_d);
  neg = cuda::block_reduce(neg, 0.0, SumD(), smem_d);
  cnt = cuda::block_reduce(cnt, 0LL, SumLL(), smem_l);
  if (threadIdx.x == 0) {
    const long long neg_cnt = n - cnt;
    const float pm = cnt > 0 ? __double2float_rn(__ddiv_rn(pos, static_cast<double>(cnt))) : 0.0f;
    const float nm =
        neg_cnt > 0 ? __double2float_rn(__ddiv_rn(neg, static_cast<double>(neg_cnt))) : 0.0f;
    ws.means[0] = pm;
    ws.means[1] = nm;
    store_f32(out, pm);
    store_f32(out + 4, nm);
  }
}

__global__ void onebit_bits_kernel(float* __restrict__ residual, int64_t n,
                                   const float* __restrict__ means, uint8_t* __restrict__ bits) {
  const float pm = means[0], nm = means[1];
  const int64_t nbytes = (n + 7) / 8;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < nbytes;
       k += (int64_t)gridDim.x * blockDim.x) {
    const int64_t end = min(8 * k + 8, n);
    uint32_t byte = 0;
    for (int64_t i = 8 * k; i < end; ++i) {
      const float v = residual[i];
      const bool ge = v >= 0.0f;
      byte |= static_cast<uint32_t>(ge) << (i & 7);
      residual[i] = __fsub_rn(v, ge ? pm : nm);
    }
    bits[k] = static_cast<uint8_t>(byte);
  }
}

__global__ void onebit_unpack_kernel(const uint8_t* __restrict__ in, int64_t n, float scale,
                                     float* __restrict__ acc) {
  const float pm = load_f32(in), nm = load_f32(in + 4);
  const uint8_t* bits = in + 8;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    acc[i] = __fmaf_rn(scale, ((bits[i >> 3] >> (i & 7)) & 1) ? pm : nm, acc[i]);
}

}  // namespace

// ============================================ fp16 =============================================

void fp16_pack_cuda(const float* g, int64_t n, uint8_t* out) {
  check_n(n, "fp16_pack_cuda");
  if (n == 0) return;
  fp16_pack_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(g, n, out);
  TG_CUDA_LAUNCH_CHECK();
}

void fp16_unpack_accumulate_cuda(const uint8_t* in, int64_t n, float scale, float* acc) {
  check_n(n, "fp16_unpack_accumulate_cuda");
  if (n == 0) return;
  fp16_unpack_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(
      in, n, scale, acc);
  TG_CUDA_LAUNCH_CHECK();
}

// ============================================ qsgd =============================================

void qsgd_pack_cuda(const float* g, int64_t n, int levels, int64_t bucket, uint64_t seed,
                    uint64_t stream, uint8_t* out) {
  check_qsgd(n, levels, bucket, "qsgd_pack_cuda");
  if (n == 0) return;
  const int w = qsgd_code_bits(levels);
  const int64_t buckets = (n + bucket - 1) / bucket;
  TG_CHECK(buckets <= 0x7FFFFFFFLL, "qsgd_pack_cuda: ", buckets,
           " buckets exceed the grid limit 2^31 - 1; use a larger bucket");
  const int64_t stride = 4 + (bucket * w + 7) / 8;
  const int threads = detail::qsgd_reduce_threads(bucket);
  qsgd_pack_kernel<<<static_cast<unsigned>(buckets), threads, 0, cuda::current_stream()>>>(
      g, n, levels, bucket, w, stride, seed, stream, out);
  TG_CUDA_LAUNCH_CHECK();
}

void qsgd_unpack_accumulate_cuda(const uint8_t* in, int64_t n, int levels, int64_t bucket,
                                 float scale, float* acc) {
  check_qsgd(n, levels, bucket, "qsgd_unpack_accumulate_cuda");
  if (n == 0) return;
  const int w = qsgd_code_bits(levels);
  const int64_t stride = 4 + (bucket * w + 7) / 8;
  const int64_t total = (n + bucket - 1) / bucket * ((bucket + 7) / 8);
  qsgd_unpack_kernel<<<cuda::grid_for(total, kThreads), kThreads, 0, cuda::current_stream()>>>(
      in, n, levels, bucket, w, stride, scale, acc);
  TG_CUDA_LAUNCH_CHECK();
}

// =========================================== onebit ============================================

void onebit_pack_cuda(const float* g, float* residual, int64_t n, uint8_t* out) {
  check_n(n, "onebit_pack_cuda");
  cudaStream_t s = cuda::current_stream();
  if (n == 0) {
    TG_CUDA_CHECK(cudaMemsetAsync(out, 0, 8, s));  // both means 0.0f
    return;
  }
  const int64_t chunks = (n + detail::kOnebitChunk - 1) / detail::kOnebitChunk;
  TG_CHECK(chunks <= 0x7FFFFFFFLL, "onebit_pack_cuda: n = ", n, " is too large for one grid");
  int dev = 0;
  TG_CUDA_CHECK(cudaGetDevice(&dev));
  CachingAllocator& alloc = allocator_for(Device::cuda(dev));
  // Layout: pos[chunks] (double), neg[chunks] (double), cnt[chunks] (long long), means[2] (float).
  const size_t bytes = static_cast<size_t>(chunks) * 24 + 8;
  char* raw = static_cast<char*>(alloc.allocate(bytes));
  OnebitWorkspace ws{reinterpret_cast<double*>(raw), reinterpret_cast<double*>(raw + 8 * chunks),
                     reinterpret_cast<long long*>(raw + 16 * chunks),
                     reinterpret_cast<float*>(raw + 24 * chunks)};
  // Freed right after the launches: the caching allocator hands blocks out in stream order.
  struct Release {
    CachingAllocator& a;
    void* p;
    ~Release() { a.deallocate(p); }
  } release{alloc, raw};

  onebit_chunk_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(g, residual, n, ws);
  TG_CUDA_LAUNCH_CHECK();
  onebit_means_kernel<<<1, kThreads, 0, s>>>(chunks, n, ws, out);
  TG_CUDA_LAUNCH_CHECK();
  const int64_t nbytes = (n + 7) / 8;
  onebit_bits_kernel<<<cuda::grid_for(nbytes, kThreads), kThreads, 0, s>>>(residual, n, ws.means,
                                                                           out + 8);
  TG_CUDA_LAUNCH_CHECK();
}

void onebit_unpack_accumulate_cuda(const uint8_t* in, int64_t n, float scale, float* acc) {
  check_n(n, "onebit_unpack_accumulate_cuda");
  if (n == 0) return;
  onebit_unpack_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0, cuda::current_stream()>>>(
      in, n, scale, acc);
  TG_CUDA_LAUNCH_CHECK();
}

}  // namespace tg::tern
