// Reverse-mode autograd on a tape.
//
// Every differentiable op that sees an input requiring grad appends one Node to the thread's
// tape: its inputs, its outputs, and a closure that maps output gradients to input gradients.
// The tape is in execution order, i.e. topologically sorted, so backward() is one reverse
// loop over it (iterative; no recursion however deep the network). Gradients accumulate with
// += through accumulate_grad(), the one checked helper. backward() consumes the tape.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "nn/core/tensor.h"

namespace tg {

struct AutogradMeta {
  bool requires_grad = false;
  bool is_leaf = true;
  // Leaves of a ParamArena own a preallocated grad view (never replaced, always +=).
  bool grad_preallocated = false;
  // True while `grad` may alias a tensor handed out by a backward closure: the next accumulate
  // must then allocate instead of adding in place.
  bool grad_borrowed = false;
  // A preallocated grad whose contents are stale and stand for zero (ParamArena::
  // zero_grad_lazily): the first gradient is written into it, not added, which saves the memset
  // and one read of every parameter per backward pass.
  bool grad_pending_zero = false;
  Tensor grad;
};

// ---- grad mode -------------------------------------------------------------------------
bool grad_enabled();
// While alive, ops record nothing (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// ---- recording ------------------------------------------------------------------------
class BackwardContext {
 public:
  // Gradient flowing into output i (undefined if no gradient reached it: treat as zero).
  const Tensor& grad_output(size_t i) const { return grad_outputs_[i]; }
  bool needs_input_grad(size_t i) const;
  // Adds g into input i's gradient (shape, dtype and device are checked).
  void accumulate(size_t i, const Tensor& g);
  // Where to compute input i's gradient before accumulate(i, ...): the input's own preallocated
  // grad while it stands for zero (the op must then overwrite all of it; accumulate() of that
  // very tensor only marks it written), else a new uninitialized f32 tensor of `shape` on
  // `device`. Ops whose gradient is a large product (linear and convolution weights) write it
  // in place this way instead of through a temporary and an add.
  Tensor grad_buffer(size_t i, const Shape& shape, const Device& device) const;

 private:
  friend void backward(const Tensor&, const Tensor&,
                       const std::function<void(const AutogradMeta&)>&);
  std::vector<Tensor> grad_outputs_;
  const std::vector<std::shared_ptr<AutogradMeta>>* inputs_ = nullptr;
};

using BackwardFn = std::function<void(BackwardContext&)>;

// True if grad mode is on and any input requires grad: only then should an op record.
bool any_requires_grad(std::span<const Tensor* const> inputs);
inline bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  return any_requires_grad(std::span<const Tensor* const>(inputs.begin(), inputs.size()));
}

// Appends a node to the tape and marks `outputs` as requiring grad (non-leaf). Inputs that are
// undefined or do not require grad are kept as null slots, so the closure's indices stay those of
// the op's argument list. The closure may capture (save) inputs and outputs by value; they are
// released when backward() has run the node, or by clear_tape().
// The span form serves ops with a variable number of inputs (concat).
void record(std::span<const Tensor* const> inputs, std::initializer_list<Tensor*> outputs,
            BackwardFn fn);
inline void record(std::initializer_list<const Tensor*> inputs,
                   std::initializer_list<Tensor*> outputs, BackwardFn fn) {
  record(std::span<const Tensor* const>(inputs.begin(), inputs.size()), outputs, std::move(fn));
}

// Runs the tape backward from `root`, seeding its gradient with `seed` (default: ones of
// root's shape, so a scalar loss needs none). Consumes the whole tape.
void backward(const Tensor& root, const Tensor& seed = Tensor());
// The same, calling `ready(leaf)` as soon as a leaf's gradient is final: right after the last
// node that adds into it has run (the earliest node on the tape reading it). Leaves no node reads
// are never reported. A data-parallel reducer starts exchanging gradients from here while the
// rest of the backward pass runs (comm/reducer.h).
using LeafGradReady = std::function<void(const AutogradMeta& leaf)>;
void backward(const Tensor& root, const Tensor& seed, const LeafGradReady& ready);

// Number of nodes on this thread's tape; clear_tape drops them (a forward pass not followed by
// backward, e.g. an evaluation run without NoGradGuard).
size_t tape_size();
void clear_tape();

// The checked += used for every gradient: meta.grad += g (meta.grad = g while it is pending
// zero; nothing to do when g is that grad itself, written in place through grad_buffer()).
void accumulate_grad(AutogradMeta& meta, const Tensor& g);

}  // namespace tg
