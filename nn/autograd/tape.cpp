#include "nn/autograd/tape.h"

#include <unordered_map>

#include "nn/core/blas.h"
#include "nn/core/profile.h"

namespace tg {

namespace {

struct Node {
  std::vector<std::shared_ptr<AutogradMeta>> inputs;  // null where no grad is needed
  std::vector<std::shared_ptr<AutogradMeta>> outputs;
  BackwardFn fn;
  const char* layer = "";  // profile::current_layer() when recorded
};

thread_local std::vector<Node> t_tape;
thread_local bool t_grad_enabled = true;

}  // namespace

bool grad_enabled() {
  return t_grad_enabled;
}
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = previous_;
}

size_t tape_size() {
  return t_tape.size();
}
void clear_tape() {
  t_tape.clear();
}

bool any_requires_grad(std::span<const Tensor* const> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record(std::span<const Tensor* const> inputs, std::initializer_list<Tensor*> outputs,
            BackwardFn fn) {
  Node n;
  n.inputs.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    n.inputs.push_back(t && t->defined() && t->requires_grad() ? t->autograd_meta() : nullptr);
  }
  for (Tensor* t : outputs) {
    auto m = std::make_shared<AutogradMeta>();
    m->requires_grad = true;
    m->is_leaf = false;
    t->set_autograd_meta(m);
    n.outputs.push_back(std::move(m));
  }
  n.fn = std::move(fn);
  n.layer = profile::current_layer();
  t_tape.push_back(std::move(n));
}

bool BackwardContext::needs_input_grad(size_t i) const {
  return i < inputs_->size() && (*inputs_)[i] != nullptr;
}

void BackwardContext::accumulate(size_t i, const Tensor& g) {
  if (!needs_input_grad(i)) return;
  accumulate_grad(*(*inputs_)[i], g);
}

Tensor BackwardContext::grad_buffer(size_t i, const Shape& shape, const Device& device) const {
  if (needs_input_grad(i)) {
    const AutogradMeta& meta = *(*inputs_)[i];
    if (meta.grad_pending_zero && meta.grad.shape() == shape && meta.grad.device() == device &&
        meta.grad.is_contiguous())
      return meta.grad;
  }
  return Tensor::empty(shape, DType::f32, device);
}

void accumulate_grad(AutogradMeta& meta, const Tensor& g) {
  TG_CHECK(g.defined(), "accumulate_grad: undefined gradient");
  TG_CHECK(g.dtype() == DType::f32, "accumulate_grad: gradients must be f32, got ", g.str());
  if (!meta.grad.defined()) {
    // First contribution: keep the handle (no copy). It may alias another node's gradient,
    // so a later contribution must not add into it in place.
    meta.grad = g;
    meta.grad_borrowed = true;
    return;
  }
  check_same_shape(meta.grad, g, "accumulated gradient", "incoming gradient");
  TG_CHECK(meta.grad.device() == g.device(), "accumulate_grad: gradient on ", g.device().str(),
           " but accumulator on ", meta.grad.device().str());
  if (meta.grad_pending_zero) {
    meta.grad_pending_zero = false;
    if (g.is_contiguous() && g.numel() > 0 && g.data<float>() == meta.grad.data<float>())
      return;  // written in place (grad_buffer)
    meta.grad.copy_from(g);
    return;
  }
  if (meta.grad_borrowed) {
    meta.grad = meta.grad.clone();
    meta.grad_borrowed = false;
  }
  Tensor gc = g.contiguous();
  TG_CHECK(meta.grad.is_contiguous(), "accumulate_grad: accumulator must be contiguous");
  axpy(g.device(), g.numel(), 1.0f, gc.data<float>(), meta.grad.data<float>());
}

void backward(const Tensor& root, const Tensor& seed) {
  backward(root, seed, LeafGradReady());
}

void backward(const Tensor& root, const Tensor& seed, const LeafGradReady& ready) {
  TG_CHECK(root.defined() && root.requires_grad(),
           "backward: the root tensor does not require grad (no op on the tape produced it "
           "from a parameter)");
  Tensor s = seed;
  if (!s.defined()) {
    s = Tensor::full(root.shape(), 1.0, DType::f32, root.device());
  } else {
    check_same_shape(root, s, "backward root", "seed gradient");
  }
  accumulate_grad(*root.autograd_meta(), s);

  std::vector<Node> tape;
  tape.swap(t_tape);  // consume: nothing recorded during backward lands on this tape
  // For `ready`: the leaves whose last contribution comes from node k (the earliest reader).
  std::vector<std::vector<const AutogradMeta*>> final_at;
  if (ready) {
    final_at.resize(tape.size());
    std::unordered_map<const AutogradMeta*, size_t> earliest;
    for (size_t k = 0; k < tape.size(); ++k)
      for (const auto& in : tape[k].inputs)
        if (in && in->is_leaf) earliest.try_emplace(in.get(), k);
    for (const auto& [leaf, k] : earliest) final_at[k].push_back(leaf);
  }
  NoGradGuard no_grad;
  BackwardContext ctx;
  for (size_t k = tape.size(); k-- > 0;) {
    Node& n = tape[k];
    bool any = false;
    ctx.grad_outputs_.clear();
    for (auto& o : n.outputs) {
      ctx.grad_outputs_.push_back(o->grad);
      any = any || o->grad.defined();
    }
    if (any) {
      ctx.inputs_ = &n.inputs;
      if (profile::enabled()) {
        const double t0 = profile::now();
        n.fn(ctx);
        profile::add(n.layer, profile::Phase::backward, profile::now() - t0);
      } else {
        n.fn(ctx);
      }
    }
    // Intermediate gradients and saved activations are dead once their node ran.
    for (auto& o : n.outputs) o->grad = Tensor();
    ctx.grad_outputs_.clear();
    n.fn = nullptr;
    if (ready)
      for (const AutogradMeta* leaf : final_at[k]) ready(*leaf);
  }
}

// ---- Tensor's autograd accessors ----------------------------------------------------------

bool Tensor::requires_grad() const {
  return meta_ && meta_->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (!meta_) meta_ = std::make_shared<AutogradMeta>();
  TG_CHECK(meta_->is_leaf, "set_requires_grad on a non-leaf tensor (an op's output)");
  TG_CHECK(!on || dtype_ == DType::f32, "only f32 tensors can require grad, got ", str());
  meta_->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  return meta_ ? meta_->grad : Tensor();
}

}  // namespace tg
