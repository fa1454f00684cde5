// BatchSampler (see sampler.h). Epoch e's permutation is a Fisher-Yates shuffle driven by the
// Philox stream rng_stream(RngPurpose::shuffle, e) under `seed`: draw t (for position
// i = size - 1 - t) is the 64-bit value of words 2t, 2t+1 mapped to [0, i] by multiply-shift
// (bias < size / 2^64). The two most recent permutations are cached, which is all a batch that
// straddles an epoch boundary needs (N x size per cached epoch: 10 MB for ImageNet).
#include "datasets/sampler.h"

#include <algorithm>
#include <numeric>

#include "nn/core/error.h"
#include "nn/core/philox.h"

namespace tg::data {
namespace {

void shuffle_epoch(uint64_t seed, int64_t epoch, std::vector<int64_t>& perm) {
  std::iota(perm.begin(), perm.end(), int64_t{0});
  const uint64_t stream = rng_stream(RngPurpose::shuffle, static_cast<uint64_t>(epoch));
  const int64_t n = static_cast<int64_t>(perm.size());
  Philox4 block{};
  for (int64_t t = 0, i = n - 1; i > 0; ++t, --i) {
    if ((t & 1) == 0) block = philox_block(seed, stream, static_cast<uint64_t>(t >> 1));
    const uint32_t* w = block.v + 2 * (t & 1);
    const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    const int64_t j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(perm[i], perm[j]);
  }
}

}  // namespace

BatchSampler::BatchSampler(int64_t size, int64_t global_batch, uint64_t seed, bool shuffle)
    : size_(size), batch_(global_batch), seed_(seed), shuffle_(shuffle) {
  TG_CHECK(size > 0, "BatchSampler: dataset size ", size, " must be positive");
  TG_CHECK(global_batch > 0, "BatchSampler: global batch ", global_batch, " must be positive");
}

const std::vector<int64_t>& BatchSampler::permutation(int64_t epoch) const {
  if (epoch == cached_epoch_) return cached_perm_;
  if (epoch == cached_epoch2_) return cached_perm2_;
  // Keep the most recent one as the second slot and compute into the first.
  std::swap(cached_perm_, cached_perm2_);
  std::swap(cached_epoch_, cached_epoch2_);
  cached_perm_.resize(static_cast<size_t>(size_));
  shuffle_epoch(seed_, epoch, cached_perm_);
  cached_epoch_ = epoch;
  return cached_perm_;
}

static void check_slice(int64_t step, int worker, int num_workers, int64_t batch) {
  TG_CHECK(step >= 0, "BatchSampler: step ", step, " is negative (expected >= 0)");
  TG_CHECK(num_workers >= 1, "BatchSampler: num_workers ", num_workers, " must be >= 1");
  TG_CHECK(worker >= 0 && worker < num_workers, "BatchSampler: worker ", worker,
           " is out of range (expected 0 <= worker < ", num_workers, ")");
  TG_CHECK(batch % num_workers == 0, "BatchSampler: global batch ", batch, " is not divisible by ",
           num_workers, " workers (expected equal per-worker slices)");
}

uint64_t BatchSampler::first_position(int64_t step, int worker, int num_workers) const {
  check_slice(step, worker, num_workers, batch_);
  return static_cast<uint64_t>(step) * static_cast<uint64_t>(batch_) +
         static_cast<uint64_t>(worker) * static_cast<uint64_t>(batch_ / num_workers);
}

std::vector<int64_t> BatchSampler::indices(int64_t step, int worker, int num_workers) const {
  const uint64_t first = first_position(step, worker, num_workers);
  const int64_t count = batch_ / num_workers;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  uint64_t pos = first;
  while (static_cast<int64_t>(out.size()) < count) {
    const int64_t epoch = static_cast<int64_t>(pos / static_cast<uint64_t>(size_));
    const int64_t offset = static_cast<int64_t>(pos % static_cast<uint64_t>(size_));
    const int64_t take = std::min(count - static_cast<int64_t>(out.size()), size_ - offset);
    if (shuffle_) {
      const std::vector<int64_t>& perm = permutation(epoch);
      out.insert(out.end(), perm.begin() + offset, perm.begin() + offset + take);
    } else {
      for (int64_t k = 0; k < take; ++k) out.push_back(offset + k);
    }
    pos += static_cast<uint64_t>(take);
  }
  return out;
}

double BatchSampler::epoch(int64_t steps) const {
  return static_cast<double>(steps) * static_cast<double>(batch_) / static_cast<double>(size_);
}

}  // namespace tg::data
