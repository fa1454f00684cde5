#include "nn/autograd/arena.h"

#include "nn/autograd/tape.h"

namespace tg {

size_t ParamArena::add(const std::string& name, const Shape& shape, Initializer init) {
  TG_CHECK(!allocated(), "ParamArena::add('", name, "') after allocate()");
  for (const Entry& e : entries_)
    TG_CHECK(e.name != name, "ParamArena: parameter '", name, "' registered twice");
  Entry e;
  e.name = name;
  e.shape = shape;
  e.offset = total_;
  e.numel = numel_of(shape);
  e.init = std::move(init);
  total_ += e.numel;  // packed back to back: the flat buffer is exactly the parameters
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

void ParamArena::allocate(const Device& device, bool initialize) {
  TG_CHECK(!allocated(), "ParamArena::allocate called twice");
  Tensor host = Tensor::zeros({total_}, DType::f32, Device::cpu());
  for (Entry& e : entries_) {
    Tensor v = host.slice(0, e.offset, e.offset + e.numel).view(e.shape);
    if (e.init && initialize) e.init(v);
  }
  params_ = host.to(device);
  grads_ = Tensor::zeros({total_}, DType::f32, device);
  for (Entry& e : entries_) {
    e.param = params_.slice(0, e.offset, e.offset + e.numel).view(e.shape);
    e.param.set_requires_grad(true);
    auto& meta = *e.param.autograd_meta();
    meta.grad = grads_.slice(0, e.offset, e.offset + e.numel).view(e.shape);
    meta.grad_preallocated = true;
    meta.grad_borrowed = false;
  }
}

const Tensor& ParamArena::param(size_t i) const {
  TG_CHECK(i < entries_.size(), "ParamArena: index ", i, " out of range (", entries_.size(),
           " parameters)");
  TG_CHECK(allocated(), "ParamArena: param() before allocate()");
  return entries_[i].param;
}

const Tensor& ParamArena::param(const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return param(i);
  TG_THROW("ParamArena: no parameter named '", name, "'");
}

void ParamArena::zero_grad() {
  TG_CHECK(allocated(), "ParamArena: zero_grad() before allocate()");
  for (Entry& e : entries_) e.param.autograd_meta()->grad_pending_zero = false;
  (bound_.defined() ? bound_ : grads_).zero_();
}

void ParamArena::zero_grad_lazily() {
  TG_CHECK(allocated(), "ParamArena: zero_grad_lazily() before allocate()");
  for (Entry& e : entries_) e.param.autograd_meta()->grad_pending_zero = true;
}

void ParamArena::settle_grad(size_t i) {
  TG_CHECK(i < entries_.size(), "ParamArena: index ", i, " out of range");
  AutogradMeta& meta = *entries_[i].param.autograd_meta();
  if (!meta.grad_pending_zero) return;
  meta.grad.zero_();
  meta.grad_pending_zero = false;
}

void ParamArena::settle_grads() {
  for (size_t i = 0; i < entries_.size(); ++i) settle_grad(i);
}

void ParamArena::bind_grads(const Tensor& flat) {
  TG_CHECK(allocated(), "ParamArena: bind_grads() before allocate()");
  const Tensor& to = flat.defined() ? flat : grads_;
  TG_CHECK(to.dtype() == DType::f32 && to.ndim() == 1 && to.numel() == total_ &&
               to.device() == grads_.device() && to.is_contiguous(),
           "ParamArena: bind_grads needs a contiguous f32 [", total_, "] buffer on ",
           grads_.device().str(), ", got ", to.str());
  for (Entry& e : entries_) {
    AutogradMeta& meta = *e.param.autograd_meta();
    meta.grad = to.slice(0, e.offset, e.offset + e.numel).view(e.shape);
  }
  bound_ = flat;
}

}  // namespace tg
