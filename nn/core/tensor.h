// Tensor: shared storage + view metadata (shape, strides, element offset, dtype). Copying a
// Tensor copies the handle, not the data. Views (view, slice, as_strided) share storage.
// Moving between devices is explicit: to(device) is the only way data changes device.
//
// The methods here are raw: they record nothing on the autograd tape. Differentiable ops are
// the free functions of nn/ops (tg::reshape, tg::add, tg::conv2d, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/core/device.h"
#include "nn/core/dtype.h"
#include "nn/core/error.h"
#include "nn/core/shape.h"

namespace tg {

// A block of device memory from the device's caching allocator; returned to it on destruction.
// A borrowed Storage wraps memory someone else owns (Tensor::borrow) and frees nothing.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  struct Borrowed {};
  Storage(void* data, size_t nbytes, Device device, Borrowed)
      : data_(data), nbytes_(nbytes), device_(device), owned_(false) {}
  // Memory kept alive by `owner` (released with the storage), e.g. a pinned host block.
  Storage(std::shared_ptr<void> owner, size_t nbytes, Device device)
      : data_(owner.get()),
        nbytes_(nbytes),
        device_(device),
        owned_(false),
        owner_(std::move(owner)) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  std::shared_ptr<void> owner_;
};

struct AutogradMeta;  // nn/autograd/tape.h

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // Factories. Throw if the device is unusable (see check_device_usable).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor scalar(float v, Device device = Device::cpu()) {
    return full({}, v, DType::f32, device);
  }
  // A contiguous tensor over memory the caller owns and keeps alive (and unmoved) for as long as
  // the tensor or any view of it lives: another framework's buffer, used in place. Nothing is
  // copied or freed. Throws if the device is unusable or data is null for a non-empty shape.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device);
  // Wraps memory `owner` keeps alive (at least the shape's bytes): the tensor, and every view
  // of it, holds `owner` until the last is gone (a pooled pinned block, cuda::pinned_host).
  static Tensor from_owner(std::shared_ptr<void> owner, const Shape& shape, DType dtype,
                           Device device);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const { return numel_of(shape_); }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return numel() * element_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage_with(const Tensor& other) const {
    return storage_ && storage_ == other.storage_;
  }

  // Typed pointer to the first element of the view. Throws on dtype mismatch.
  template <typename T>
  T* data() const {
    TG_CHECK(dtype_v<T> == dtype_, "tensor holds ", dtype_name(dtype_), ", accessed as ",
             dtype_name(dtype_v<T>));
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // ---- views (share storage) -----------------------------------------------------------
  // Reinterprets a contiguous tensor with a new shape of the same numel; one dim may be -1.
  Tensor view(Shape shape) const;
  // Elements [start, end) along `dim`.
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // ---- copies --------------------------------------------------------------------------
  Tensor to(Device device) const;  // same handle if already there, else a contiguous copy
  Tensor contiguous() const;       // same handle if already contiguous
  Tensor clone() const;            // always a fresh contiguous copy on the same device
  // Copies `src` (same shape and dtype, any device, any strides) into this view.
  void copy_from(const Tensor& src);
  void fill_(double value);
  void zero_();

  // Host copy of the elements in row-major order (synchronizes a CUDA device).
  template <typename T>
  std::vector<T> to_vector() const;
  template <typename T>
  T item() const;

  std::string str() const;  // "Tensor(f32, cpu, [2, 3])"

  // ---- autograd (defined in nn/autograd/tape.cpp) ----------------------------------------
  bool requires_grad() const;
  // Marks a leaf as differentiable: backward() accumulates into its grad(). Returns *this.
  Tensor& set_requires_grad(bool on);
  Tensor grad() const;  // undefined until a backward pass reached this tensor
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return meta_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> m) { meta_ = std::move(m); }

 private:
  static Tensor unallocated(const Shape& shape, DType dtype, Device device, int64_t& bytes);

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
  Device device_;
  std::shared_ptr<AutogradMeta> meta_;
};

// Throws unless `t` is defined, on `device`, of dtype `dtype`; `what` names the argument.
void check_tensor(const Tensor& t, const char* what, DType dtype, const Device& device);
// Throws unless a and b have the same shape; names both.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b);

// ---- template definitions ----------------------------------------------------------------
namespace detail {
void copy_host_to_tensor(const void* src, size_t nbytes, Tensor& dst);
void copy_tensor_to_host(const Tensor& src, void* dst);
}  // namespace detail

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  TG_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
           " values for shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor t = empty(shape, dtype_v<T>, device);
  detail::copy_host_to_tensor(values.data(), values.size() * sizeof(T), t);
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  TG_CHECK(dtype_v<T> == dtype_, "to_vector: tensor holds ", dtype_name(dtype_), ", requested ",
           dtype_name(dtype_v<T>));
  std::vector<T> out(numel());
  detail::copy_tensor_to_host(*this, out.data());
  return out;
}

template <typename T>
T Tensor::item() const {
  TG_CHECK(numel() == 1, "item() on a tensor of shape ", shape_str(shape_));
  return to_vector<T>()[0];
}

}  // namespace tg
