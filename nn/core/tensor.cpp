#include "nn/core/tensor.h"

#include <cstring>

#include "nn/core/allocator.h"
#include "nn/core/checked.h"
#include "nn/core/copy_kernels.h"
#include "nn/core/cuda_runtime.h"

namespace tg {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device).allocate(nbytes);
}

Storage::~Storage() {
  if (data_ && owned_) allocator_for(device_).deallocate(data_);
}

// A contiguous tensor's metadata (shape, dtype and device checked), without storage yet; bytes
// is set to its size. empty() allocates the storage, borrow() wraps the caller's.
Tensor Tensor::unallocated(const Shape& shape, DType dtype, Device device, int64_t& bytes) {
  for (int64_t d : shape) TG_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  TG_CHECK(static_cast<int>(shape.size()) <= kMaxDims, "shape ", shape_str(shape),
           " has more than ", kMaxDims, " dimensions");
  check_device_usable(device);
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  bytes = checked_mul<int64_t>(numel_of(shape), static_cast<int64_t>(element_size(dtype)),
                               "tensor byte size");
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  int64_t bytes = 0;
  Tensor t = unallocated(shape, dtype, device, bytes);
  t.storage_ = checked_alloc("a tensor of shape " + shape_str(shape), static_cast<uint64_t>(bytes),
                             [&] { return std::make_shared<Storage>(bytes, device); });
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  int64_t bytes = 0;
  Tensor t = unallocated(shape, dtype, device, bytes);
  TG_CHECK(data != nullptr || bytes == 0, "borrow: null pointer for shape ", shape_str(shape));
  t.storage_ =
      std::make_shared<Storage>(data, static_cast<size_t>(bytes), device, Storage::Borrowed{});
  return t;
}

Tensor Tensor::from_owner(std::shared_ptr<void> owner, const Shape& shape, DType dtype,
                          Device device) {
  int64_t bytes = 0;
  Tensor t = unallocated(shape, dtype, device, bytes);
  TG_CHECK(owner != nullptr || bytes == 0, "from_owner: null memory for shape ", shape_str(shape));
  t.storage_ = std::make_shared<Storage>(std::move(owner), static_cast<size_t>(bytes), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

int64_t Tensor::size(int64_t dim) const {
  const int64_t n = ndim();
  if (dim < 0) dim += n;
  TG_CHECK(dim >= 0 && dim < n, "dimension ", dim, " out of range for shape ", shape_str(shape_));
  return shape_[dim];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to address: any strides will do
  int64_t expect = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * element_size(dtype_);
}

Tensor Tensor::view(Shape shape) const {
  TG_CHECK(is_contiguous(), "view of a non-contiguous tensor ", str(), "; call contiguous() first");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TG_CHECK(infer < 0, "view: more than one -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      TG_CHECK(shape[i] >= 0, "view: negative dimension in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TG_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 in ", shape_str(shape),
             " for ", numel(), " elements");
    shape[infer] = numel() / known;
  }
  TG_CHECK(numel_of(shape) == numel(), "view: shape ", shape_str(shape), " has ", numel_of(shape),
           " elements, tensor ", shape_str(shape_), " has ", numel());
  Tensor t = *this;
  t.meta_.reset();
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end) const {
  const int64_t n = ndim();
  if (dim < 0) dim += n;
  TG_CHECK(dim >= 0 && dim < n, "slice: dimension ", dim, " out of range for ", shape_str(shape_));
  TG_CHECK(0 <= start && start <= end && end <= shape_[dim], "slice: [", start, ", ", end,
           ") out of range for dimension ", dim, " of size ", shape_[dim]);
  Tensor t = *this;
  t.meta_.reset();
  t.offset_ += start * strides_[dim];
  t.shape_[dim] = end - start;
  return t;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  TG_CHECK(shape.size() == strides.size(), "as_strided: ", shape.size(), " sizes but ",
           strides.size(), " strides");
  if (numel_of(shape) > 0) {
    int64_t last = offset;
    for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * strides[i];
    const int64_t cap =
        storage_ ? static_cast<int64_t>(storage_->nbytes() / element_size(dtype_)) : 0;
    TG_CHECK(offset >= 0 && last < cap, "as_strided: view ", shape_str(shape), " at offset ",
             offset, " exceeds the storage of ", cap, " elements");
  }
  Tensor t = *this;
  t.meta_.reset();
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset;
  return t;
}

namespace {

StridedCopyShape copy_shape(const Tensor& src, const Tensor& dst) {
  StridedCopyShape s;
  s.ndim = static_cast<int>(dst.ndim());
  for (int d = 0; d < s.ndim; ++d) {
    s.sizes[d] = dst.shape()[d];
    s.src_strides[d] = src.strides()[d];
    s.dst_strides[d] = dst.strides()[d];
  }
  return s;
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  TG_CHECK(src.defined() && defined(), "copy_from: undefined tensor");
  TG_CHECK(src.dtype_ == dtype_, "copy_from: dtype ", dtype_name(src.dtype_), " into ",
           dtype_name(dtype_));
  check_same_shape(src, *this, "source", "destination");
  if (numel() == 0) return;
  const size_t es = element_size(dtype_);
  if (src.device_ == device_) {
    if (device_.is_cpu()) {
      if (src.is_contiguous() && is_contiguous()) {
        std::memmove(raw_data(), src.raw_data(), nbytes());
      } else {
        strided_copy_cpu(copy_shape(src, *this), src.raw_data(), raw_data(), es);
      }
      return;
    }
#if TG_CUDA
    cuda::DeviceGuard g(device_.index);
    if (src.is_contiguous() && is_contiguous()) {
      cuda::copy_d2d(device_.index, raw_data(), src.raw_data(), nbytes());
    } else {
      strided_copy_cuda(copy_shape(src, *this), src.raw_data(), raw_data(), es);
    }
    return;
#else
    TG_THROW("copy on ", device_.str(), ": terngrad was built without CUDA");
#endif
  }
  // Across devices: stage through a contiguous tensor on the side that needs it.
  Tensor s = src.contiguous();
  Tensor d = is_contiguous() ? *this : Tensor::empty(shape_, dtype_, device_);
  if (s.device_.is_cpu()) {
    cuda::copy_h2d(d.device_.index, d.raw_data(), s.raw_data(), nbytes());
  } else if (d.device_.is_cpu()) {
    cuda::copy_d2h(s.device_.index, d.raw_data(), s.raw_data(), nbytes());
  } else {
    cuda::copy_peer(d.device_.index, d.raw_data(), s.device_.index, s.raw_data(), nbytes());
  }
  if (!d.shares_storage_with(*this) || d.offset_ != offset_) copy_from(d);
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

void Tensor::fill_(double value) {
  if (numel() == 0) return;
  if (!is_contiguous()) {
    Tensor tmp = full(shape_, value, dtype_, device_);
    copy_from(tmp);
    return;
  }
  if (device_.is_cpu()) {
    fill_cpu(raw_data(), numel(), dtype_, value);
  } else {
#if TG_CUDA
    cuda::DeviceGuard g(device_.index);
    fill_cuda(raw_data(), numel(), dtype_, value);
#else
    TG_THROW("fill on ", device_.str(), ": terngrad was built without CUDA");
#endif
  }
}

void Tensor::zero_() {
  if (numel() == 0) return;
  if (!is_contiguous()) return fill_(0.0);
  if (device_.is_cpu()) {
    std::memset(raw_data(), 0, nbytes());
  } else {
    cuda::memset_async(device_.index, raw_data(), 0, nbytes());
  }
}

std::string Tensor::str() const {
  return detail::concat("Tensor(", dtype_name(dtype_), ", ", device_.str(), ", ", shape_str(shape_),
                        ")");
}

void check_tensor(const Tensor& t, const char* what, DType dtype, const Device& device) {
  TG_CHECK(t.defined(), what, " is undefined");
  TG_CHECK(t.dtype() == dtype, what, " must be ", dtype_name(dtype), ", got ", t.str());
  TG_CHECK(t.device() == device, what, " must be on ", device.str(), ", got ", t.str());
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b) {
  TG_CHECK(a.shape() == b.shape(), what_a, " has shape ", shape_str(a.shape()), " but ", what_b,
           " has shape ", shape_str(b.shape()));
}

namespace detail {

void copy_host_to_tensor(const void* src, size_t nbytes, Tensor& dst) {
  TG_CHECK(dst.is_contiguous(), "copy_host_to_tensor: destination must be contiguous");
  if (nbytes == 0) return;
  if (dst.device().is_cpu()) {
    std::memcpy(dst.raw_data(), src, nbytes);
  } else {
    cuda::copy_h2d(dst.device().index, dst.raw_data(), src, nbytes);
  }
}

void copy_tensor_to_host(const Tensor& src, void* dst) {
  Tensor s = src.contiguous();
  if (s.nbytes() == 0) return;
  if (s.device().is_cpu()) {
    std::memcpy(dst, s.raw_data(), s.nbytes());
  } else {
    cuda::copy_d2h(s.device().index, dst, s.raw_data(), s.nbytes());
  }
}

}  // namespace detail

}  // namespace tg
