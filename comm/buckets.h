// The layout of a flat gradient and the buckets the Reducer (comm/reducer.h) cuts it into.
//
// A flat gradient (f32 [total], the parameter arena's grad buffer) is a list of slots, one per
// parameter tensor, back to back in layout order. A bucket is a contiguous run of slots: what
// one exchange of a data-parallel step moves, and what a communication hook is handed.
//
// Buckets: slots in REVERSE layout order (backward produces the last layers' gradients first),
// each bucket a contiguous slot range. As in PyTorch DDP, a bucket closes once its f32 bytes
// reach the cap: `first_bucket_bytes` for the first, so that the first exchange starts early,
// then `bucket_bytes`. Two rules of our own:
//  - a bucket also closes after any slot of at least `first_bucket_bytes`, so that a large
//    layer's exchange never waits for the backward pass of the layers below it (with DDP's rule
//    alone, LeNet's 4.9 MB fc3 would wait in one bucket with both convolutions);
//  - a bucket of at least `first_bucket_bytes` closes before a slot that would take it past its
//    cap; a smaller one (a bias, a small top layer) goes with that slot instead, so that it
//    never travels alone: every exchange pays a latency, and on a link with a queue a tiny one
//    costs milliseconds (measured in bench/README's fp32 race).
// A bucket is therefore at most its cap plus one slot's bytes, or one slot. The buckets depend
// on the layout and the caps only, never on the number of processes.
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
