// What `terngrad measure-bounds` records while a run trains: TernGrad's bound quantities
// (terngrad/analysis/bounds.h) of sampled gradients as JSON lines plus their summary tables, and
// the histograms of the paper's Figure 2 (terngrad/analysis/histograms.h).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "nn/core/tensor.h"
#include "terngrad/analysis/bounds.h"
#include "terngrad/analysis/histograms.h"
#include "terngrad/compressor.h"
#include "train/tensorboard.h"

namespace tg::cli {

// One scaling rule and clipping factor to evaluate the bounds under.
struct BoundsCombo {
  tern::Scaling scaling;
  double clip;
};

// "c=2.5"
std::string clip_label(double clip);

// Collects the rows of every sample and writes them as they come.
class BoundsRecorder {
 public:
  // events_dir: also write each sample's per-tensor scaler, sparsity, realized_sparsity and
  // bound_ratio as TensorBoard scalars "<quantity>/<tensor>/<scaling>_c=<clip>" at the sampled
  // iteration, to a new event file there; "" = no TensorBoard.
  BoundsRecorder(std::vector<tern::GradSlot> layout, std::vector<bool> ternarized,
                 std::vector<BoundsCombo> combos, uint64_t seed, const std::string& rows_path,
                 const std::string& events_dir = "");

  // g: one worker's flat gradient on the host.
  void sample(int64_t step, int worker, std::span<const float> g);

  // Scaler sharing (the paper's Section 3.2: every worker ternarizes with the largest scaler):
  // call for every worker of a sampled iteration (workers 0 .. workers - 1, any order). Once the
  // last has arrived, writes one row per worker and ternarized tensor with its own layer scaler
  // (c * sigma at `clip`, or max|g| for clip 0), the shared one (the max over the workers), their
  // ratio shared_to_own and the expected fraction of zero codes under each: the cost of sharing
  // to a quiet worker. Rows: {"record": "sharing", "iteration", "worker", "tensor", "numel",
  // "clip", "own_scaler", "shared_scaler", "shared_to_own", "own_sparsity", "shared_sparsity"}.
  void sharing_sample(int64_t step, int worker, int workers, double clip, std::span<const float> g);

  int64_t samples() const { return samples_; }
  int64_t rows() const { return rows_; }

  // The two summary tables.
  std::string table() const;

 private:
  int64_t total() const;
  double med(const std::string& tensor, size_t combo, double (tern::BoundStats::*f)() const) const;

  std::vector<tern::GradSlot> layout_;
  std::vector<bool> ternarized_;
  std::vector<BoundsCombo> combos_;
  uint64_t seed_;
  std::string path_;
  std::ofstream out_;
  std::optional<train::tensorboard::EventWriter> events_;
  int64_t samples_ = 0, rows_ = 0;
  std::vector<std::pair<std::string, int64_t>> tensors_;  // row order of the first sample
  std::map<std::pair<std::string, size_t>, std::vector<tern::BoundStats>> stats_;
  // Scaler sharing: the sampled iteration's own scalers and |g| per worker, and
  // per tensor the ratios and shared sparsities written so far (for the table).
  struct OwnScaler {
    float scaler = 0;
    std::vector<float> abs;  // |g_i|, for the sparsities under each scaler
  };
  int64_t sharing_step_ = -1;
  double sharing_clip_ = 0;
  std::map<int, std::vector<OwnScaler>> sharing_workers_;  // worker -> per ternarized tensor
  std::map<std::string, std::vector<double>> ratios_, shared_sparsity_;
  void write_sharing(int64_t step);
};

// Figure 2's histograms: collects every worker's gradient of a sampled iteration (the hook sees
// them one by one) and, once all have arrived, writes the four panels of each chosen tensor.
class HistogramRecorder {
 public:
  HistogramRecorder(std::vector<tern::GradSlot> layout, tern::CompressionOptions copts,
                    std::vector<size_t> slots, int workers, int worker, int bins,
                    const std::string& path);

  void add(int64_t step, int worker, const Tensor& grad);

  int64_t rows() const { return rows_; }

 private:
  std::vector<tern::GradSlot> layout_;
  tern::CompressionOptions copts_;
  std::vector<size_t> slots_;
  std::vector<Tensor> grads_;
  int worker_, bins_;
  std::string path_;
  std::ofstream out_;
  int64_t step_ = -1, rows_ = 0;
  int arrived_ = 0;
};

// The slots named by a --histograms spec ("all": every ternarized one), in layout order.
std::vector<size_t> histogram_slots(const std::string& spec,
                                    const std::vector<tern::GradSlot>& layout,
                                    const std::vector<bool>& ternarized);

}  // namespace tg::cli
