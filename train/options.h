// What a Config resolves to in the libraries below train/: their option structs as the config
// holds them, completed with what the run derives (the seed every random choice is keyed by, the
// epoch length, the schedule's decay period), and the checks that a dataset fits a net. One
// place, so training, evaluation and the benchmarks build the same run. The optimizer's, the
// process group's, the reducer's and the exchange's options need nothing derived: the run reads
// them straight from the config (c.train.optimizer, c.comm.group, c.comm.reducer,
// c.comm.exchange).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "comm/reducer.h"
#include "config/config.h"
#include "datasets/dataset.h"
#include "nn/nets/net.h"
#include "nn/optim/ema.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/optimizer.h"
#include "terngrad/compressor.h"
#include "terngrad/exchange/aggregate.h"

namespace tg::train {

using config::Config;

NetOptions net_options(const Config& c);
data::DataOptions data_options(const Config& c);
// train_size: examples in the training split (the floating-gradient epoch counts in them).
tern::CompressionOptions compression_options(const Config& c, int64_t train_size);
// train_size: as above (train.lr_decay_epochs counts in epochs); train.lr_decay_steps = 0 is
// train.iterations.
LrScheduleOptions lr_schedule_options(const Config& c, int64_t train_size);

// The config as every rank of a run must see it, TOML text: the keys that neither change the
// numbers nor decide when collectives run may differ between ranks and are left out (data.path,
// e.g. per node; data.prefetch; data.loader_threads; comm.timeout; comm.interface;
// train.checkpoint_minutes and train.keep_checkpoints, which rank 0 alone acts on;
// comm.max_restarts, the launcher's), and the device is reduced to its kind ("cuda:1" and "cuda:0"
// are the same run). Everything else must match: the logging, evaluation and checkpoint intervals
// too, since each of them is a collective step.
std::string config_fingerprint(const Config& c);

// One compressor slot per parameter tensor of the net, in arena order.
std::vector<tern::GradSlot> grad_layout(const Net& net);

// The model side of a run as a Config describes it, built one way for the trainer, bench_train
// and perf-model's measured step: the net, the optimizer, the EMA shadow (train.ema_decay > 0)
// and the compressor (several workers or any compression; none for one worker without
// compression, which is the same math without the compressor's rounds). A TrainStep (step.h)
// over them takes c.train.weight_decay and c.train.seed.
struct RunParts {
  std::unique_ptr<Net> net;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<Ema> ema;
  std::unique_ptr<tern::Compressor> compressor;  // null: one worker, no compression
};
// `train_size`: as for compression_options. `initialize` false: the net's parameters are left
// unset (a resume overwrites every one of them, so the random initial values would be drawn for
// nothing).
RunParts build_run(const Config& c, const Device& device, int64_t train_size,
                   bool initialize = true);

// Throws unless the dataset's images and labels fit the net.
void check_compatible(const Net& net, const data::Dataset& ds);

}  // namespace tg::train
