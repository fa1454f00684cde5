// The data a training run reads: both splits of the configured dataset, the sampler that deals
// each global batch out to the workers, and the pipeline that loads this rank's workers' slices
// data.prefetch steps ahead on its own threads (on a GPU with data.pin_memory, into pinned memory
// copied to the device a step ahead). The Trainer (train/trainer.h) owns one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "datasets/dataset.h"
#include "datasets/device_stager.h"
#include "datasets/pipeline.h"
#include "datasets/sampler.h"
#include "train/threads.h"

namespace tg::comm {
class ProcessGroup;
}

namespace tg::train {

using config::Config;

class TrainInput {
 public:
  using Say = std::function<void(const std::string&)>;

  // Opens both splits (without data.path the files are looked for, and `say` names the copy
  // read) and the sampler. A batch larger than the training split is refused here, before
  // anything else is built.
  TrainInput(const Config& cfg, const Say& say);

  data::Dataset& train() { return *train_; }
  data::Dataset& test() { return *test_; }
  int64_t train_size() const { return train_->info().size; }
  int64_t test_size() const { return test_->info().size; }
  const data::BatchSampler& sampler() const { return *sampler_; }

  // Starts loading the batches of workers [first, first + local) of `workers`, with the loader
  // threads that `sharing` ranks on this host leave (choose_loader_threads).
  void start(const Config& cfg, Device device, int first, int local, int workers, int sharing,
             const Say& say);
  // This rank's workers' batches of `step` (start() first); on a GPU the next step's copy then
  // begins beside this step's compute.
  std::vector<data::HostBatch> get(int64_t step, int64_t iterations);
  const ThreadChoice& loader_threads() const { return loader_threads_; }

  // data.skip_bad_files: names the unreadable files this rank met since the last call (rank 0
  // through `say`, the others on their stderr) and returns this rank's bad files (train, then
  // test) with how many examples every rank has served from another image so far (collective in
  // a group).
  data::BadFiles note_bad_files(int rank, comm::ProcessGroup* group, const Say& say);

 private:
  std::unique_ptr<data::Dataset> train_, test_;
  std::optional<data::BatchSampler> sampler_;
  uint64_t seed_ = 0;
  std::optional<data::BatchPipeline> pipeline_;
  std::optional<data::DeviceStager> stager_;
  ThreadChoice loader_threads_;
  size_t bad_said_ = 0;  // unreadable files already named
};

}  // namespace tg::train
