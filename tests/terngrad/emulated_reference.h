// The specification the aggregation, hook and reducer tests check against: the three rounds of
// terngrad/compressor.h folded over all n workers in one place, in worker order, written as the
// naive loop (terngrad/exchange/aggregate.h states its contract as this fold):
//   shared = max over workers of local_meta;  for w: encode_w, accumulate;  finalize over n.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "nn/core/tensor.h"
#include "terngrad/compressor.h"

namespace tg::tern {

// Round 1 of the fold: the elementwise max over the workers of local_meta of range r.
inline std::vector<float> shared_meta(const Compressor& c, std::span<const Tensor> worker_grads,
                                      SlotRange r = {}) {
  std::vector<float> shared(static_cast<size_t>(c.num_meta(r))), meta(shared.size());
  for (size_t w = 0; w < worker_grads.size(); ++w) {
    c.local_meta(worker_grads[w], meta.data(), r);
    for (size_t i = 0; i < meta.size(); ++i)
      shared[i] = w == 0 ? meta[i] : std::max(shared[i], meta[i]);
  }
  return shared;
}

// out at r's slots = the fold above of worker_grads (n flat f32 gradients, one device).
inline void reference_aggregate(Compressor& c, std::span<const Tensor> worker_grads, int64_t step,
                                Tensor& out, SlotRange r = {}) {
  const int n = static_cast<int>(worker_grads.size());
  const Device d = worker_grads[0].device();
  const std::vector<float> shared = shared_meta(c, worker_grads, r);
  Accumulator acc = c.make_accumulator(d);
  Tensor msg = Tensor::empty({static_cast<int64_t>(c.payload_bytes(step, r))}, DType::u8, d);
  for (int w = 0; w < n; ++w) {
    c.encode(worker_grads[w], shared.data(), step, w, msg, r);
    c.accumulate(msg, shared.data(), step, acc, r);
  }
  c.finalize(acc, shared.data(), step, n, out, r);
}

// Worker `worker`'s flat gradient at `step` for `layout`.
using WorkerGradFn =
    std::function<Tensor(const std::vector<GradSlot>& layout, int64_t worker, int64_t step)>;

// out of reference_aggregate over workers 0 .. n - 1 at steps 0 .. steps - 1, with one compressor
// (so 1-bit SGD's and error feedback's residuals carry over from step to step): [step] = out.
inline std::vector<std::vector<float>> emulated_outputs(const CompressionOptions& o,
                                                        const std::vector<GradSlot>& layout, int n,
                                                        int steps, const WorkerGradFn& grad) {
  auto c = make_compressor(o, layout);
  std::vector<std::vector<float>> outs;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<Tensor> grads;
    for (int g = 0; g < n; ++g) grads.push_back(grad(c->layout(), g, step));
    Tensor out = Tensor::empty({c->total()});
    reference_aggregate(*c, grads, step, out);
    outs.push_back(out.to_vector<float>());
  }
  return outs;
}

}  // namespace tg::tern
