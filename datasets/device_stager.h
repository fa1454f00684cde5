// Input off the GPU's critical path: a step's batches are copied to the device on a copy stream
// while the previous step computes, from page-locked memory the loader threads wrote them into
// (PyTorch's pin_memory + non_blocking copies on a side stream, DALI's prefetch queue).
//
// For step s the stager owns one device slot per local worker (x and y) in a ring of two: step s
// reads slot s % 2 while the copy of step s + 1 fills the other. Order, all by events (no host
// waits on the critical path):
//   get(s)          the main stream waits for slot s % 2's copy (only that one); "step s - 1
//                   done" is recorded on the main stream, after every kernel of step s - 1
//   prefetch(s + 1) the copy stream waits for "step s - 1 done" (the last reader of slot
//                   (s + 1) % 2), then copies step s + 1's batches into it
// The host batches of a slot are released (their pinned blocks back to the pool, for the loader
// threads to refill) only after that slot's copy has completed.
//
// Memory: 2 x (the local batches' bytes) on the device, and the pipeline's pinned batches on the
// host. A step asked for out of order (or the first) is copied when asked, and waited for.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "datasets/pipeline.h"
#include "nn/core/device.h"

namespace tg::data {

struct StagerStats {
  int64_t bytes = 0;             // copied so far
  int64_t staged_ahead = 0;      // steps whose copy was issued during the previous step
  int64_t copied_on_demand = 0;  // steps copied when asked (the first, or out of order)
};

class DeviceStager {
 public:
  // `device` must be a CUDA device; `pipeline` outlives the stager.
  DeviceStager(BatchPipeline& pipeline, Device device);
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // PipelineOptions::allocate for the pipeline feeding this stager: page-locked host tensors.
  static std::function<Tensor(const Shape&, DType)> host_allocator();

  // Step `step`'s batches on the device (x f32, y i32 per local worker), ordered before the
  // caller's next work on the main stream. `end` as BatchPipeline::get.
  std::vector<HostBatch> get(int64_t step, int64_t end);
  // Starts copying `step`'s batches (no-op at or past `end`, or when already staged). Call after
  // the previous step's work was issued; returns once the copies are queued.
  void prefetch(int64_t step, int64_t end);

  StagerStats stats() const { return stats_; }

 private:
  struct Slot;
  void stage(int64_t step, int64_t end);
  Slot& slot_of(int64_t step);

  BatchPipeline& pipeline_;
  Device device_;
  std::vector<std::unique_ptr<Slot>> slots_;  // two
  StagerStats stats_;
};

}  // namespace tg::data
