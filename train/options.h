// What a Config resolves to in the libraries below train/: the net's, the dataset's, the
// compressor's, the optimizer's and the learning-rate schedule's options, and the checks that a
// dataset fits a net. One place, so training, evaluation and the benchmarks build the same run.
#pragma once

#include <cstdint>
#include <vector>

#include "datasets/dataset.h"
#include "nn/nets/net.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"
#include "train/config.h"

namespace tg::train {

NetOptions net_options(const Config& c);
data::DataOptions data_options(const Config& c);
// train_size: examples in the training split (the floating-gradient epoch counts in them).
tern::CompressionOptions compression_options(const Config& c, int64_t train_size);
OptimizerOptions optimizer_options(const Config& c);
LrScheduleOptions lr_schedule_options(const Config& c, int64_t train_size);
// One compressor slot per parameter tensor of the net, in arena order.
std::vector<tern::GradSlot> grad_layout(const Net& net);

// Throws unless the dataset's images and labels fit the net.
void check_compatible(const Net& net, const data::Dataset& ds);

}  // namespace tg::train
