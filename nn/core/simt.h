// Kernel code that compiles both as CUDA and as plain C++, so a kernel's indexing, tiling and
// summation order can be tested on a machine without a GPU.
//
// A kernel body is a function of (block index, thread index) that uses TG_SHARED for its
// shared-memory arrays and TG_SYNC() for __syncthreads(). Under nvcc these are the real thing.
// In a C++ translation unit, simt::launch() runs the body as a CUDA launch would: the blocks one
// after another, each block's threads as real threads that meet at a std::barrier on TG_SYNC(),
// and TG_SHARED is `static`, so every thread of the running block sees the same arrays. Float
// arithmetic is written with fmaf (one rounding, as on the GPU), so an emulated kernel computes
// the GPU's bits: the emulation is a reference for the GPU run, not only for the indexing.
// TG_ATOMIC_ADD_U32 and TG_FENCE() (a device-wide fence) are atomics on the host: since the
// blocks run one after another, a "last block done" election elects the last block in order.
// mma_tf32_m16n8k8 is PTX's warp-wide tensor-core MMA (mma_tf32_tiles, a grid of them); on the
// host the 32 threads of each warp (consecutive thread indices) pool their fragments, meet, and
// each computes its own outputs by the instruction's documented fragment layout, so a kernel's
// fragment indexing is tested too.
// Within one MMA the emulation adds the 8 products in k order in fp32; the tensor core's order
// and rounding of those additions are its own, so emulated TF32 results match the GPU's to
// rounding, not bit for bit.
//
// Slow (a context switch per thread per TG_SYNC): for tests on small shapes only.
#pragma once

#if defined(__CUDACC__)

#define TG_HD __host__ __device__ __forceinline__
#define TG_DEV __device__ __forceinline__  // uses TG_SHARED / TG_SYNC
#define TG_UNROLL _Pragma("unroll")        // before a loop of constant trip count
#define TG_SHARED __shared__
#define TG_SHARED16 __shared__ __align__(16)  // 16-byte aligned (vector loads)
#define TG_SYNC() __syncthreads()
#define TG_FENCE() __threadfence()                   // device-wide memory fence
#define TG_ATOMIC_ADD_U32(p, v) atomicAdd((p), (v))  // returns the old value

#include <cstdint>

namespace tg {

// x rounded to TF32 (10 mantissa bits; to nearest, ties away from zero), as an fp32 value.
__device__ __forceinline__ float tf32_round(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
#else
  __trap();
  return x;
#endif
}

// d += A * B for the warp's 16 x 8 tile D, A 16 x 8 and B 8 x 8 in TF32 (the fragment layout of
// PTX's mma.m16n8k8 .row.col: lane = 4 * group + t; a = A[group][t], A[group + 8][t],
// A[group][t + 4], A[group + 8][t + 4]; b = B[t][group], B[t + 4][group]; d = D[group][2t],
// D[group][2t + 1], D[group + 8][2t], D[group + 8][2t + 1]). Every lane of the warp calls it.
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&d)[4], const float (&a)[4],
                                                 const float (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
#else
  __trap();
#endif
}

// The MI x NI tiles of a warp's block of outputs: d[i][j] += A_i * B_j.
template <int MI, int NI>
__device__ __forceinline__ void mma_tf32_tiles(float (&d)[MI][NI][4], const float (&a)[MI][4],
                                               const float (&b)[NI][2]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) mma_tf32_m16n8k8(d[i][j], a[i], b[j]);
}

}  // namespace tg

#else

#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define TG_HD inline
#define TG_DEV inline
#define TG_UNROLL
#define TG_SHARED static
#define TG_SHARED16 alignas(16) static
#define TG_SYNC() ::tg::simt::sync()
#define TG_FENCE() std::atomic_thread_fence(std::memory_order_seq_cst)
#define TG_ATOMIC_ADD_U32(p, v) std::atomic_ref<unsigned>(*(p)).fetch_add(v)

namespace tg::simt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

inline thread_local std::barrier<>* t_block_barrier = nullptr;

inline void sync() {
  t_block_barrier->arrive_and_wait();
}

// What the 32 threads of a warp pool for MMAs: each lane's A and B fragments, in two pools
// used in turn, so one meeting per call suffices (a lane that reaches call i + 1's meeting has
// read call i's pool; the pool it then writes was last read before call i's meeting).
struct Warp {
  static constexpr int kMaxFloats = 64;  // a lane's fragments: MI * 4 + NI * 2 floats
  std::barrier<> meet{32};
  float pool[2][32][kMaxFloats];
  int phase[32] = {};
};
inline thread_local Warp* t_warp = nullptr;
inline thread_local int t_lane = 0;

// Runs body(block, thread) for every block of `grid` (x fastest) and every thread of `block`
// (x fastest), the threads of one block concurrently, the blocks in order.
inline void launch(Dim3 grid, Dim3 block,
                   const std::function<void(const Dim3& block_idx, const Dim3& thread_idx)>& body) {
  const unsigned threads = block.x * block.y * block.z;
  std::barrier<> bar(static_cast<std::ptrdiff_t>(threads));
  // MMAs need whole warps; a block of another size has none.
  const std::unique_ptr<Warp[]> warps =
      threads % 32 == 0 ? std::make_unique<Warp[]>(threads / 32) : nullptr;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      t_block_barrier = &bar;
      t_warp = warps ? &warps[t / 32] : nullptr;
      t_lane = static_cast<int>(t % 32);
      const Dim3 tid{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
      for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
          for (unsigned bx = 0; bx < grid.x; ++bx) {
            body(Dim3{bx, by, bz}, tid);
            bar.arrive_and_wait();  // the next block reuses the shared arrays
          }
    });
  }
  for (std::thread& th : pool) th.join();
}

}  // namespace tg::simt

namespace tg {

// The host forms of the device functions above (mma_tf32_m16n8k8 only as part of the tiles).
inline float tf32_round(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN: unchanged
  u = (u + 0x1000u) & 0xffffe000u;                 // half an ulp on the magnitude, then cut
  return std::bit_cast<float>(u);
}

// d[i][j] += A_i * B_j for MI x NI tiles, every lane of the warp calling it with its fragments
// (mma_tf32_tiles below): one meeting of the warp for all MI * NI MMAs.
template <int MI, int NI>
void mma_tf32_tiles_host(float (&d)[MI][NI][4], const float (&a)[MI][4], const float (&b)[NI][2]) {
  static_assert(MI * 4 + NI * 2 <= simt::Warp::kMaxFloats, "fragments exceed the warp's pool");
  simt::Warp* w = simt::t_warp;
  const int lane = simt::t_lane;
  float(*pool)[simt::Warp::kMaxFloats] = w->pool[w->phase[lane]];
  w->phase[lane] ^= 1;
  for (int i = 0; i < MI; ++i)
    for (int r = 0; r < 4; ++r) pool[lane][i * 4 + r] = a[i][r];
  for (int j = 0; j < NI; ++j)
    for (int r = 0; r < 2; ++r) pool[lane][MI * 4 + j * 2 + r] = b[j][r];
  w->meet.arrive_and_wait();
  // The tensor core reads an operand's TF32 bits only; the product of two TF32 values is exact
  // in fp32.
  const auto tf32 = [](float v) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffffe000u);
  };
  const int group = lane / 4, t = lane % 4;
  for (int i = 0; i < MI; ++i) {
    for (int j = 0; j < NI; ++j) {
      for (int q = 0; q < 4; ++q) {
        const int row = group + q / 2 * 8, col = 2 * t + q % 2;
        float sum = d[i][j][q];
        for (int k = 0; k < 8; ++k) {
          const float av = pool[row % 8 * 4 + k % 4][i * 4 + row / 8 + k / 4 * 2];
          const float bv = pool[col * 4 + k % 4][MI * 4 + j * 2 + k / 4];
          sum += tf32(av) * tf32(bv);
        }
        d[i][j][q] = sum;
      }
    }
  }
}

template <int MI, int NI>
inline void mma_tf32_tiles(float (&d)[MI][NI][4], const float (&a)[MI][4],
                           const float (&b)[NI][2]) {
  mma_tf32_tiles_host<MI, NI>(d, a, b);
}

}  // namespace tg

#endif
