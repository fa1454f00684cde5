#include "train/input.h"

#include <cstdio>

#include "comm/process_group.h"
#include "train/options.h"

namespace tg::train {

TrainInput::TrainInput(const Config& cfg, const Say& say)
    : seed_(static_cast<uint64_t>(cfg.train.seed)) {
  data::DataOptions dopts = data_options(cfg);
  const data::DataLocation where = data::locate_dataset(dopts);
  if (dopts.path.empty() && !where.path.empty()) {
    dopts.path = where.path;
    say("data: " + dopts.name + " from " + where.path + " (no data.path: found in " + where.source +
        ")");
  }
  train_ = data::open_dataset(dopts, data::Split::train);
  test_ = data::open_dataset(dopts, data::Split::test);
  const int64_t size = train_size();
  TG_CHECK(cfg.train.batch_size <= size, "train.batch_size = ", cfg.train.batch_size,
           " is larger than the training split of ", dopts.name, " (", size,
           " examples): a batch would hold examples twice; use at most ", size);
  sampler_.emplace(size, cfg.train.batch_size, seed_, /*shuffle=*/true);
}

void TrainInput::start(const Config& cfg, Device device, int first, int local, int workers,
                       int sharing, const Say& say) {
  loader_threads_ = choose_loader_threads(cfg.data.loader_threads, sharing);
  data::PipelineOptions po;
  po.threads = loader_threads_.count;
  po.depth = static_cast<int>(cfg.data.prefetch);
  po.augment = cfg.data.dataset.augment;
  po.seed = seed_;
  const bool staged = device.is_cuda() && cfg.data.pin_memory;
  if (staged) po.allocate = data::DeviceStager::host_allocator();
  pipeline_.emplace(
      *train_,
      [this, first, local, workers](int64_t s) {
        std::vector<data::BatchRequest> r;
        for (int w = first; w < first + local; ++w)
          r.push_back({sampler_->indices(s, w, workers), sampler_->first_position(s, w, workers)});
        return r;
      },
      po);
  if (staged) stager_.emplace(*pipeline_, device);
  say(plural(loader_threads_.count, "loader thread") + ", " + plural(cfg.data.prefetch, "step") +
      " ahead (" + loader_threads_.why + ")" +
      (staged ? "; batches in pinned memory, copied to the GPU a step ahead on a copy stream"
              : ""));
}

std::vector<data::HostBatch> TrainInput::get(int64_t step, int64_t iterations) {
  if (!stager_) return pipeline_->get(step, iterations);
  std::vector<data::HostBatch> batches = stager_->get(step, iterations);
  stager_->prefetch(step + 1, iterations);
  return batches;
}

data::BadFiles TrainInput::note_bad_files(int rank, comm::ProcessGroup* group, const Say& say) {
  data::BadFiles all = train_->bad_files();
  const data::BadFiles test = test_->bad_files();
  all.replaced += test.replaced;
  all.files.insert(all.files.end(), test.files.begin(), test.files.end());
  for (; bad_said_ < all.files.size(); ++bad_said_) {
    const std::string line = "data: replacing unreadable " + all.files[bad_said_].second;
    if (rank == 0)
      say(line);
    else
      std::fprintf(stderr, "rank %d: %s\n", rank, line.c_str());
  }
  if (group)
    all.replaced = static_cast<int64_t>(group->sum({static_cast<double>(all.replaced)})[0]);
  return all;
}

}  // namespace tg::train
