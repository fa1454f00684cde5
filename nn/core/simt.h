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

#else

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
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

// Runs body(block, thread) for every block of `grid` (x fastest) and every thread of `block`
// (x fastest), the threads of one block concurrently, the blocks in order.
inline void launch(Dim3 grid, Dim3 block,
                   const std::function<void(const Dim3& block_idx, const Dim3& thread_idx)>& body) {
  const unsigned threads = block.x * block.y * block.z;
  std::barrier<> bar(static_cast<std::ptrdiff_t>(threads));
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      t_block_barrier = &bar;
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

#endif
