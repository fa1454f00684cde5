#include "datasets/pipeline.h"

#include <algorithm>
#include <span>

#include "nn/core/error.h"

namespace tg::data {

// One step's batches and the pieces still loading them. `pending` and `error` are guarded by the
// pipeline's mutex; the tensors are written by the threads, each piece its own rows.
struct BatchPipeline::Job {
  int64_t step = 0;
  std::vector<BatchRequest> requests;
  std::vector<HostBatch> batches;
  int64_t pending = 0;
  bool dropped = false;  // passed by get(): its pieces are skipped
  std::exception_ptr error;
};

BatchPipeline::BatchPipeline(const Dataset& dataset, Plan plan, PipelineOptions options)
    : dataset_(dataset), plan_(std::move(plan)), options_(options) {
  TG_CHECK(options_.threads >= 1, "input pipeline: threads = ", options_.threads,
           " (expected at least 1)");
  TG_CHECK(options_.depth >= 0, "input pipeline: depth = ", options_.depth,
           " (expected 0 or more)");
  threads_.reserve(static_cast<size_t>(options_.threads));
  for (int t = 0; t < options_.threads; ++t) threads_.emplace_back([this] { work(); });
}

BatchPipeline::~BatchPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

// Allocates the step's batches and queues their pieces: about two per thread and batch, so the
// threads stay busy when examples cost unevenly (JPEGs of different sizes); a piece is never
// empty, and one thread takes whole batches.
void BatchPipeline::submit(int64_t step) {
  auto job = std::make_shared<Job>();
  job->step = step;
  job->requests = plan_(step);
  const DatasetInfo& in = dataset_.info();
  std::vector<Piece> pieces;
  for (size_t b = 0; b < job->requests.size(); ++b) {
    const int64_t n = static_cast<int64_t>(job->requests[b].indices.size());
    const auto alloc = [&](const Shape& shape, DType dtype) {
      return options_.allocate ? options_.allocate(shape, dtype) : Tensor::empty(shape, dtype);
    };
    job->batches.push_back(
        {alloc({n, in.channels, in.height, in.width}, DType::f32), alloc({n}, DType::i32)});
    const int64_t parts = threads() == 1 ? 1 : 2 * static_cast<int64_t>(threads());
    const int64_t size = std::max<int64_t>(1, (n + parts - 1) / parts);
    for (int64_t first = 0; first < n; first += size)
      pieces.push_back({job, b, first, std::min(size, n - first)});
  }
  job->pending = static_cast<int64_t>(pieces.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Piece& p : pieces) queue_.push_back(std::move(p));
  }
  ready_.notify_all();
  jobs_[step] = std::move(job);
}

void BatchPipeline::work() {
  while (true) {
    Piece p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      if (p.job->dropped) {
        --p.job->pending;
        continue;
      }
    }
    std::exception_ptr error;
    try {
      const BatchRequest& r = p.job->requests[p.batch];
      HostBatch& out = p.job->batches[p.batch];
      const int64_t row = out.x.numel() / std::max<int64_t>(out.y.numel(), 1);
      dataset_.load(std::span<const int64_t>(r.indices.data() + p.first, p.count), options_.augment,
                    options_.seed, r.key_base + static_cast<uint64_t>(p.first),
                    out.x.data<float>() + p.first * row, out.y.data<int32_t>() + p.first);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !p.job->error) p.job->error = error;
      --p.job->pending;
    }
    done_.notify_all();
  }
}

std::vector<HostBatch> BatchPipeline::get(int64_t step, int64_t end) {
  // Steps before this one will not be asked for: their pieces are skipped.
  for (auto it = jobs_.begin(); it != jobs_.end() && it->first < step;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      it->second->dropped = true;
    }
    it = jobs_.erase(it);
  }
  if (!jobs_.count(step)) submit(step);
  for (int64_t ahead = step + 1; ahead <= step + options_.depth && ahead < end; ++ahead)
    if (!jobs_.count(ahead)) submit(ahead);
  std::shared_ptr<Job> job = jobs_.at(step);
  jobs_.erase(step);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return job->pending == 0; });
  }
  if (job->error) std::rethrow_exception(job->error);
  return std::move(job->batches);
}

}  // namespace tg::data
