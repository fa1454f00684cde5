#include "datasets/device_stager.h"

#include "nn/core/cuda_runtime.h"
#include "nn/core/error.h"

namespace tg::data {

struct DeviceStager::Slot {
  explicit Slot(int device) : copied(device), released(device) {}
  int64_t step = -1;             // the step staged here, -1 = none yet
  std::vector<HostBatch> host;   // its host batches, kept until their copy has completed
  std::vector<HostBatch> dev;    // the device tensors the copies fill (kept across steps)
  cuda::Event copied;            // on the copy stream, after this slot's copies
  cuda::Event released;          // on the main stream, after the last kernel reading this slot
  bool copy_pending = false;     // `copied` recorded for `host`
  bool release_pending = false;  // `released` recorded since the slot was last filled
};

DeviceStager::DeviceStager(BatchPipeline& pipeline, Device device)
    : pipeline_(pipeline), device_(device) {
  TG_CHECK(device.is_cuda(), "DeviceStager: needs a CUDA device, got ", device.str());
  for (int i = 0; i < 2; ++i) slots_.push_back(std::make_unique<Slot>(device.index));
}

DeviceStager::~DeviceStager() {
  // The pinned blocks go back to the pool only once no copy reads them.
  for (auto& s : slots_) {
    if (s->copy_pending) {
      try {
        s->copied.synchronize();
      } catch (...) {  // a failed device: nothing to protect any more
      }
    }
  }
}

std::function<Tensor(const Shape&, DType)> DeviceStager::host_allocator() {
  return [](const Shape& shape, DType dtype) {
    const size_t bytes = element_size(dtype) * static_cast<size_t>(numel_of(shape));
    return Tensor::from_owner(cuda::pinned_host(bytes), shape, dtype, Device::cpu());
  };
}

DeviceStager::Slot& DeviceStager::slot_of(int64_t step) {
  return *slots_[static_cast<size_t>(step % 2)];
}

void DeviceStager::stage(int64_t step, int64_t end) {
  Slot& sl = slot_of(step);
  cuda::DeviceGuard guard(device_.index);
  void* const copy = cuda::copy_stream(device_.index);
  // The slot's previous host batches: their copy is long done by now (it was issued a step ago).
  if (sl.copy_pending) sl.copied.synchronize();
  sl.host.clear();
  sl.copy_pending = false;
  // Overwrite the device tensors only after the last kernel that read them.
  if (sl.release_pending) sl.released.wait_on(copy);
  sl.release_pending = false;

  std::vector<HostBatch> host = pipeline_.get(step, end);
  bool fresh = sl.dev.size() != host.size();
  for (size_t i = 0; !fresh && i < host.size(); ++i)
    fresh = sl.dev[i].x.shape() != host[i].x.shape() || sl.dev[i].y.shape() != host[i].y.shape();
  if (fresh) {
    // New device memory comes from the main stream's pool, where a block may still be in use by
    // queued kernels: the copies wait for the main stream's work so far (once per size change).
    sl.dev.clear();
    for (const HostBatch& h : host)
      sl.dev.push_back({Tensor::empty(h.x.shape(), h.x.dtype(), device_),
                        Tensor::empty(h.y.shape(), h.y.dtype(), device_)});
    cuda::Event allocated(device_.index);
    allocated.record();
    allocated.wait_on(copy);
  }
  for (size_t i = 0; i < host.size(); ++i) {
    for (auto [dst, src] :
         {std::pair{&sl.dev[i].x, &host[i].x}, std::pair{&sl.dev[i].y, &host[i].y}}) {
      const Tensor h = src->contiguous();
      cuda::copy_h2d_async(device_.index, dst->raw_data(), h.raw_data(), h.nbytes(), copy);
      stats_.bytes += static_cast<int64_t>(h.nbytes());
    }
  }
  sl.copied.record_on(copy);
  sl.copy_pending = true;
  sl.host = std::move(host);
  sl.step = step;
}

void DeviceStager::prefetch(int64_t step, int64_t end) {
  if (step >= end || slot_of(step).step == step) return;
  stage(step, end);
  ++stats_.staged_ahead;
}

std::vector<HostBatch> DeviceStager::get(int64_t step, int64_t end) {
  Slot& sl = slot_of(step);
  if (sl.step != step) {
    stage(step, end);
    ++stats_.copied_on_demand;
  }
  cuda::DeviceGuard guard(device_.index);
  sl.copied.wait();  // this thread's (main) stream waits for this step's copies only
  // Every kernel of the previous step is queued by now: the other slot is free after them.
  Slot& other = slot_of(step + 1);
  if (other.step >= 0) {
    other.released.record();
    other.release_pending = true;
  }
  return sl.dev;
}

}  // namespace tg::data
