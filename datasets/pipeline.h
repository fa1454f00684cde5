// The input pipeline: the batches of a Dataset loaded by a pool of threads, a bounded number of
// steps ahead of the step that consumes them (PyTorch's DataLoader with num_workers and
// prefetch_factor, DALI's and FFCV's loader threads).
//
// A step's batches (one per local worker) are cut into pieces of consecutive examples, and the
// pool's threads load the pieces of the oldest step first. Every example's random numbers are
// keyed by its position in the example stream (datasets/dataset.h: key_base + position), and a
// piece is loaded with key_base + its offset, so the pixels do not depend on how a batch is cut:
// the batches are the same bytes for every thread count and depth.
//
// Memory: the batches of at most `depth` steps beyond the one being consumed, plus that one.
// Errors (a bad file) are raised by get() for the step that needed the example, naming it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "datasets/dataset.h"
#include "nn/core/tensor.h"

namespace tg::data {

// One worker's batch of one step, on the host: images N x C x H x W f32, labels N i32.
struct HostBatch {
  Tensor x, y;
};

// Which examples one batch holds, and the stream position of its first (the augmentation key
// base, BatchSampler::first_position).
struct BatchRequest {
  std::vector<int64_t> indices;
  uint64_t key_base = 0;
};

struct PipelineOptions {
  int threads = 1;  // loader threads, >= 1
  int depth = 1;    // steps loaded ahead of the one consumed; 0 = each step when it is asked for
  bool augment = false;
  uint64_t seed = 0;  // the augmentation seed (Dataset::load's aug_seed)
  // Where a batch's host memory comes from (called on get()'s thread); empty = Tensor::empty.
  // A CUDA run passes page-locked memory (DeviceStager::host_allocator), so the loader threads
  // write the batch where the asynchronous copy to the GPU reads it.
  std::function<Tensor(const Shape&, DType)> allocate{};
};

class BatchPipeline {
 public:
  // plan(step): the batches of `step`, one request per batch, called on get()'s thread only (a
  // BatchSampler is not thread-safe). Throws unless threads >= 1 and depth >= 0.
  using Plan = std::function<std::vector<BatchRequest>(int64_t step)>;
  BatchPipeline(const Dataset& dataset, Plan plan, PipelineOptions options);
  // Stops the threads after the piece each is loading (work queued for later steps is dropped).
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The batches of `step`, in plan order; then queues steps step + 1 .. step + depth (those below
  // `end`). Steps asked for out of order are loaded when asked (queued ones they pass are
  // dropped). Rethrows the first error a piece of `step` raised.
  std::vector<HostBatch> get(int64_t step, int64_t end);

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Job;
  struct Piece {
    std::shared_ptr<Job> job;
    size_t batch = 0;
    int64_t first = 0, count = 0;
  };
  void submit(int64_t step);
  void work();

  const Dataset& dataset_;
  Plan plan_;
  PipelineOptions options_;
  std::map<int64_t, std::shared_ptr<Job>> jobs_;  // queued or loading, by step (get's thread)
  std::mutex mu_;
  std::condition_variable ready_;  // a piece was queued, or stopping
  std::condition_variable done_;   // a piece finished
  std::deque<Piece> queue_;        // pieces in step order
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tg::data
