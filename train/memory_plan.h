// The peak host memory of a CPU training run, planned before its first step, and the memory the
// process may use: a run that would not fit is refused with both numbers instead of being killed
// by the kernel's OOM killer part-way (or thrashing the machine's swap).
//
// The plan: what the process holds already (VmRSS after the data and the net are loaded and the
// probes below have run: the datasets, the parameters and their gradients, the EMA shadow, the
// libraries and their buffers), plus what training adds:
//   - activations: what one worker's forward and backward at its batch, and the evaluation's
//     forward at data.eval_batch_size, make the caching allocator hold. A freed block is kept for
//     its size class and the sizes of a pass are nearly all distinct, so a pass adds every block
//     it allocates, not just the most it has in use at once (nn/core/allocator.h). Measured on
//     the run's own net at 1 and 2 images from an empty cache, and drawn as a straight line in
//     the batch;
//   - the convolutions' scratch, apart: it grows with the batch only up to its chunk
//     (nn/ops/conv2d_kernels.h), and training and evaluation share the blocks of one size;
//   - with compression or several workers: the workers' gradients the exchange reads and their
//     sum (one copy of the parameters per worker of this process) and the exchange's buffers
//     (about one more), and error feedback's residuals (one more per worker);
//   - the optimizer's slots (momentum: one copy of the parameters, adam: two; allocated at the
//     first step);
//   - the input pipeline's batches (data.prefetch steps ahead, plus one per loader thread at
//     work, each this rank's images of a step as f32).
// Measured against the peak resident set (summary.json peak_rss_mb) on the 2-core Xeon VM:
// LeNet (MNIST) at batch 64 and 512, CifarNet and AlexNet (synthetic) at two batches each, within
// 0.93-1.05x (README, "Memory"; bench/memory_plan.sh).
// The probe leaves no trace in the run: batch-norm running statistics are restored, dropout masks
// are keyed by their context (nn/ops/dropout.h), the parameter gradients it wrote are zeroed
// before the first step's backward (ParamArena::zero_grad_lazily), its cached blocks are freed.
//
// The limit: the smallest of MemAvailable (/proc/meminfo), the room left in this process's
// cgroup and its ancestors (v2 memory.max - memory.current, v1 memory.limit_in_bytes -
// memory.usage_in_bytes) and, when set, TG_MEMORY_LIMIT_MB (the most this process may hold in
// all, e.g. a scheduler's allocation per task) less its resident set. All are what is left, so
// they are compared with what training adds, not with the peak. Ranks sharing a host share its
// memory: the trainer multiplies what each adds by the ranks on the host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/core/device.h"
#include "nn/nets/net.h"
#include "nn/ops/conv2d_kernels.h"

namespace tg::train {

struct MemoryLimit {
  int64_t bytes = -1;  // -1: nothing known (no /proc)
  std::string source;  // "MemAvailable", "cgroup /sys/fs/cgroup/... (memory.max ...)", ...
};

// Parsers of the kernel's text (tested on fixtures): bytes, or -1 when absent or unbounded.
int64_t meminfo_available_bytes(const std::string& meminfo);  // "MemAvailable: N kB"
int64_t meminfo_rss_bytes(const std::string& status);         // /proc/self/status "VmRSS: N kB"
int64_t cgroup_room_bytes(const std::string& limit, const std::string& usage);  // "max" = -1

// What this process may still allocate, from the sources above (the smallest wins).
MemoryLimit memory_limit();
// This process's resident set now (VmRSS), or -1.
int64_t resident_bytes();

// Bytes a forward (and, for training, backward) pass makes the caching allocator hold: fixed +
// per_image * images, besides its convolutions' scratch (convs: the shapes it ran).
struct ActivationBytes {
  int64_t fixed = 0;
  double per_image = 0;
  std::vector<Conv2dShape> convs;
  int64_t at(int64_t images) const;
};
// The convolutions' scratch of training at `train_images` per worker and of evaluation at
// `eval_images`: blocks of one size serve both (the scratch reaches its cap, the same for a
// layer at any batch past its chunk, nn/ops/conv2d_kernels.h), so each size counts once.
int64_t conv_workspace_bytes(const ActivationBytes& train, int64_t train_images,
                             const ActivationBytes& eval, int64_t eval_images);
// On `net` itself (see above for why it changes nothing); CPU nets.
ActivationBytes probe_training_activations(Net& net);
ActivationBytes probe_eval_activations(Net& net);

struct MemoryPlan {
  int64_t resident = 0, gradients = 0, optimizer = 0, train_activations = 0, eval_activations = 0,
          workspace = 0, input = 0;
  int64_t images_per_worker = 0, eval_batch = 0;
  // What training adds to `resident`.
  int64_t added() const {
    return gradients + optimizer + train_activations + eval_activations + workspace + input;
  }
  int64_t peak() const { return resident + added(); }
  // "1.20 GB: resident 254 MB, activations 610 MB (64 images per worker), ..."
  std::string describe() const;
};

// "254 MB", "1.20 GB".
std::string format_bytes(int64_t bytes);

}  // namespace tg::train
