// The batch kernels of terngrad/ternary_batch.h run on the CPU through nn/core/simt.h, as
// ternary_cuda.cu launches them on the GPU (the same plans, grids and bodies): the reference for
// ternary_batch_test.cpp on any machine and for the GPU's bits in ternary_cuda_test.cpp.
#pragma once

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "nn/core/simt.h"
#include "terngrad/ternary_batch.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

inline void emulated_pack(const std::vector<PackTask>& tasks, uint64_t seed, PackFormat f) {
  for (const batch::PackArgs& a : batch::plan_pack(tasks.data(), tasks.size(), seed, f))
    simt::launch({a.blocks, 1, 1}, {batch::kPackThreads, 1, 1},
                 [&](const simt::Dim3& b, const simt::Dim3& th) {
                   if (f == PackFormat::two_bit && a.residual)
                     batch::pack_thread<batch::TwoBit, true>(a, b.x, th.x);
                   else if (f == PackFormat::two_bit)
                     batch::pack_thread<batch::TwoBit, false>(a, b.x, th.x);
                   else if (a.residual)
                     batch::pack_thread<batch::Base3, true>(a, b.x, th.x);
                   else
                     batch::pack_thread<batch::Base3, false>(a, b.x, th.x);
                 });
}

// Runs the stats batch on the emulated GPU; out[t] for every task (n = 0: zeros). With
// scalers: the clipped launches, whose sum_sq is clipped_sum_sq at scalers[t].
inline std::vector<TensorStats> emulated_stats(const std::vector<StatsTask>& tasks,
                                               const float* scalers = nullptr) {
  std::vector<size_t> index;
  std::vector<batch::StatsArgs> plans =
      batch::plan_stats(tasks.data(), tasks.size(), index, scalers);
  std::vector<TensorStats> out(tasks.size());
  std::vector<unsigned> done(batch::kMaxSlots, 0);
  size_t k = 0;
  for (batch::StatsArgs& a : plans) {
    const uint32_t blocks = a.blocks;
    std::vector<double> partial(4 * static_cast<size_t>(blocks), std::nan("")), res(4 * a.count);
    a.partial = partial.data();
    a.out = res.data();
    a.done = done.data();
    simt::launch({blocks, 1, 1}, {batch::kStatsThreads, 1, 1},
                 [&](const simt::Dim3& b, const simt::Dim3& th) {
                   if (a.clipped)
                     batch::stats_block<true>(a, b.x, th.x);
                   else
                     batch::stats_block<false>(a, b.x, th.x);
                 });
    for (unsigned d : done) EXPECT_EQ(d, 0u) << "a counter was left non-zero";
    for (int s = 0; s < a.count; ++s, ++k) {
      TensorStats& o = out[index[k]];
      o.n = tasks[index[k]].n;
      o.sum = res[4 * s];
      o.sum_sq = res[4 * s + 1];
      o.l1 = res[4 * s + 2];
      o.max_abs = res[4 * s + 3];
    }
  }
  return out;
}

inline void emulated_scale(const std::vector<ScaleTask>& tasks) {
  for (const batch::ScaleArgs& a : batch::plan_scale(tasks.data(), tasks.size()))
    simt::launch(
        {a.blocks, 1, 1}, {batch::kScaleThreads, 1, 1},
        [&](const simt::Dim3& b, const simt::Dim3& th) { batch::scale_thread(a, b.x, th.x); });
}

inline void emulated_unpack(const std::vector<UnpackTask>& tasks, PackFormat f) {
  for (const batch::UnpackArgs& a : batch::plan_unpack(tasks.data(), tasks.size(), f))
    simt::launch({a.blocks, 1, 1}, {batch::kUnpackThreads, 1, 1},
                 [&](const simt::Dim3& b, const simt::Dim3& th) {
                   if (f == PackFormat::two_bit)
                     batch::unpack_thread<4>(a, b.x, th.x);
                   else
                     batch::unpack_thread<5>(a, b.x, th.x);
                 });
}

}  // namespace tg::tern
