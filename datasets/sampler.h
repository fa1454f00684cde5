// Which examples make up each global batch, and which slice of it each data-parallel worker
// gets. The stream of examples is the concatenation of epochs, each a Philox-keyed permutation
// of [0, size) (identity when shuffle is off); global batch `step` is positions
// [step * B, (step + 1) * B) of that stream, so a batch can straddle two epochs and any step can
// be computed directly (resume needs no replay). Worker w of N gets the contiguous slice
// [w * B / N, (w + 1) * B / N) of the global batch: the N slices are disjoint and cover it.
#pragma once

#include <cstdint>
#include <vector>

namespace tg::data {

class BatchSampler {
 public:
  // Throws unless size > 0, global_batch > 0.
  BatchSampler(int64_t size, int64_t global_batch, uint64_t seed, bool shuffle = true);

  // Example indices of worker `worker`'s slice of global batch `step`. Throws unless
  // 0 <= worker < num_workers and global_batch % num_workers == 0.
  std::vector<int64_t> indices(int64_t step, int worker = 0, int num_workers = 1) const;
  // Position of the first example of that slice in the example stream (use as the
  // augmentation key_base of Dataset::load).
  uint64_t first_position(int64_t step, int worker = 0, int num_workers = 1) const;
  // Epoch (0-based, fractional) reached after `steps` steps.
  double epoch(int64_t steps) const;

  int64_t size() const { return size_; }
  int64_t global_batch() const { return batch_; }

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  int64_t size_, batch_;
  uint64_t seed_;
  bool shuffle_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_perm_;
  mutable int64_t cached_epoch2_ = -1;
  mutable std::vector<int64_t> cached_perm2_;
};

}  // namespace tg::data
