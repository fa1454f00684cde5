// The layout of a flat gradient and the buckets the Reducer (comm/reducer.h) cuts it into.
//
// A flat gradient (f32 [total], the parameter arena's grad buffer) is a list of slots, one per
// parameter tensor, back to back in layout order. A bucket is a contiguous run of slots: what
// one exchange of a data-parallel step moves, and what a communication hook is handed.
//
// Buckets: slots in REVERSE layout order (backward produces the last layers' gradients first),
// each bucket a contiguous slot range whose gradients add up to at most `bucket_bytes` (f32
// bytes), the first bucket at most `first_bucket_bytes` so that the first exchange starts early;
// a slot larger than the cap is a bucket of its own, and a bucket also closes after any slot of
// at least `first_bucket_bytes`, so that a large layer's exchange never waits for the backward
// pass of the layers below it (with PyTorch DDP's rule, LeNet's 4.9 MB fc3 waits in one bucket
// with both convolutions, and nothing overlaps). The buckets depend on the layout and the caps
// only, never on the number of processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tg::comm {

// One parameter tensor's slice of the flat gradient.
struct GradSlot {
  std::string name;
  int64_t offset = 0, numel = 0;
  // The slot's tensor index in the compressors' random streams (rng_stream(ternarize, step,
  // worker, index)); -1: its position in the layout. A caller whose layouts hold a changing
  // subset of the parameters (python/src/terngrad_torch.cpp: DDP's buckets) gives each
  // parameter a fixed index, so its random numbers do not depend on the bucket it is in.
  int64_t rng_index = -1;
};

// A contiguous run of slots [first, last) of a layout.
struct SlotRange {
  size_t first = 0, last = 0;
  size_t size() const { return last - first; }
  bool operator==(const SlotRange&) const = default;
};

// The buckets of `layout` (see above): slot ranges in launch order, the last slots first. Throws
// unless both caps are > 0.
std::vector<SlotRange> make_buckets(const std::vector<GradSlot>& layout, int64_t bucket_bytes,
                                    int64_t first_bucket_bytes);

}  // namespace tg::comm
