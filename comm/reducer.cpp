#include "comm/reducer.h"

#include <omp.h>

#include <algorithm>
#include <optional>

#include "nn/core/clock.h"
#include "nn/core/error.h"

namespace tg::comm {

std::vector<SlotRange> make_buckets(const std::vector<GradSlot>& layout, int64_t bucket_bytes,
                                    int64_t first_bucket_bytes) {
  TG_CHECK(bucket_bytes > 0 && first_bucket_bytes > 0, "reducer: bucket sizes must be > 0, got ",
           bucket_bytes, " and ", first_bucket_bytes);
  const int64_t large = std::min(first_bucket_bytes, bucket_bytes);
  std::vector<SlotRange> out;
  size_t last = layout.size();  // the open bucket is [first, last)
  int64_t bytes = 0;
  for (size_t t = layout.size(); t-- > 0;) {
    const int64_t b = layout[t].numel * static_cast<int64_t>(sizeof(float));
    const int64_t cap = out.empty() ? large : bucket_bytes;
    // Close the open bucket before slot t when it would overflow and is worth an exchange of its
    // own; what is smaller than the first cap (biases, a small top layer) waits for slot t.
    if (t + 1 < last && bytes >= large && bytes + b > cap) {
      out.push_back({t + 1, last});
      last = t + 1;
      bytes = 0;
    }
    bytes += b;
    // Full, or closed by a large slot: its exchange does not wait for the next layers.
    if (t > 0 && (bytes >= cap || b >= large)) {
      out.push_back({t, last});
      last = t;
      bytes = 0;
    }
  }
  if (last > 0) out.push_back({0, last});
  return out;
}

int64_t ReducerOptions::bucket_bytes() const {
  return std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * (1 << 20)));
}

Reducer::Reducer(const std::vector<GradSlot>& layout, Communicator& comm, CommHook& hook,
                 ReducerOptions options)
    : comm_(comm), hook_(hook), slots_(layout.size()) {
  const int64_t cap = options.bucket_bytes();
  buckets_ = make_buckets(layout, cap, std::min(options.first_bucket_bytes, cap));
  bucket_of_slot_.assign(slots_, 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t t = buckets_[b].first; t < buckets_[b].last; ++t) bucket_of_slot_[t] = b;
  if (!options.overlap || buckets_.empty()) return;
  if (comm_.device().is_cuda()) {
    gpu_ = comm_.device().index;
    { cuda::SideStreamScope create(gpu_); }  // a failure to create it is reported here
    for (size_t b = 0; b < buckets_.size(); ++b) launch_events_.emplace_back(gpu_);
    done_event_.emplace(gpu_);
  }
  thread_ = std::thread(&Reducer::thread_main, this, omp_get_max_threads());
}

Reducer::~Reducer() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Reducer::begin(int64_t step, std::span<const Tensor> local_grads, Tensor out) {
  TG_CHECK(!local_grads.empty(), "reducer: no local gradients");
  std::lock_guard<std::mutex> lock(mu_);
  TG_CHECK(launched_ == done_ && queue_.empty(), "reducer: begin() before the last step finished");
  step_ = step;
  grads_.assign(local_grads.begin(), local_grads.end());
  out_ = std::move(out);
  pending_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].size());
  ready_.assign(slots_, false);
  launched_ = done_ = 0;
  busy_s_ = 0;
  error_ = nullptr;
}

void Reducer::mark_ready(size_t slot) {
  TG_CHECK(slot < ready_.size(), "reducer: slot ", slot, " out of range");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_[slot]) return;
    ready_[slot] = true;
    --pending_[bucket_of_slot_[slot]];
    if (thread_.joinable()) launch_ready_buckets();
  }
  cv_.notify_all();
}

void Reducer::launch_ready_buckets() {
  while (launched_ < buckets_.size() && pending_[launched_] == 0) {
    if (gpu_ >= 0) launch_events_[launched_].record();  // after the kernels of its gradients
    queue_.push_back(launched_++);
  }
}

void Reducer::exchange(size_t b) {
  const auto t0 = Clock::now();
  GradBucket bucket;
  bucket.step = step_;
  bucket.index = b;
  bucket.count = buckets_.size();
  bucket.slots = buckets_[b];
  bucket.local_grads = grads_;
  bucket.out = out_;
  hook_.run(comm_, bucket);
  busy_s_ += seconds_since(t0);
}

void Reducer::thread_main(int omp_threads) {
  omp_set_num_threads(omp_threads);
  // On a GPU this thread works on the device's side stream (created by the constructor).
  std::optional<cuda::DeviceGuard> device;
  std::optional<cuda::SideStreamScope> side;
  std::exception_ptr setup_error;
  if (gpu_ >= 0) {
    try {
      device.emplace(gpu_);
      side.emplace(gpu_);
    } catch (...) {
      setup_error = std::current_exception();
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const size_t b = queue_.front();
    queue_.pop_front();
    if (setup_error && !error_) error_ = setup_error;
    const bool failed = error_ != nullptr;
    lock.unlock();
    if (!failed) {  // after an error the communicator is broken: the rest only count as done
      try {
        if (gpu_ >= 0) launch_events_[b].wait();  // the side stream waits for the gradients
        exchange(b);
        if (gpu_ >= 0) done_event_->record();
      } catch (...) {
        lock.lock();
        if (!error_) error_ = std::current_exception();
        lock.unlock();
      }
    }
    lock.lock();
    ++done_;
    cv_.notify_all();
  }
}

ReduceStats Reducer::finish() {
  const auto t0 = Clock::now();
  if (thread_.joinable()) {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t t = 0; t < ready_.size(); ++t)
      if (!ready_[t]) {
        ready_[t] = true;
        --pending_[bucket_of_slot_[t]];
      }
    launch_ready_buckets();
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_ == buckets_.size(); });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    if (gpu_ >= 0) done_event_->wait();  // the main stream continues after every exchange
  } else {
    for (size_t b = 0; b < buckets_.size(); ++b) exchange(b);
    launched_ = done_ = buckets_.size();
  }
  ReduceStats rs;
  rs.wait_s = seconds_since(t0);
  rs.busy_s = busy_s_;
  rs.buckets = static_cast<int64_t>(buckets_.size());
  grads_.clear();
  out_ = Tensor();
  return rs;
}

}  // namespace tg::comm
