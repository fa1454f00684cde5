// The specification the aggregation and reducer tests check against: tern::aggregate_emulated
// over all n workers in one process.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/core/tensor.h"
#include "terngrad/compressor.h"

namespace tg::comm {

// Worker `worker`'s flat gradient at `step` for `layout`.
using WorkerGradFn =
    std::function<Tensor(const std::vector<tern::GradSlot>& layout, int64_t worker, int64_t step)>;

// out of aggregate_emulated over workers 0 .. n - 1 at steps 0 .. steps - 1, with one compressor
// (so 1-bit SGD's residuals carry over from step to step): [step] = out.
inline std::vector<std::vector<float>> emulated_outputs(const tern::CompressionOptions& o,
                                                        const std::vector<tern::GradSlot>& layout,
                                                        int n, int steps,
                                                        const WorkerGradFn& grad) {
  auto c = tern::make_compressor(o, layout);
  std::vector<std::vector<float>> outs;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<Tensor> grads;
    for (int g = 0; g < n; ++g) grads.push_back(grad(c->layout(), g, step));
    Tensor out = Tensor::empty({c->total()});
    tern::aggregate_emulated(*c, grads, step, out);
    outs.push_back(out.to_vector<float>());
  }
  return outs;
}

}  // namespace tg::comm
