// The training runtime behind `terngrad train`, as a library: a Trainer owns one run's net,
// optimizer, compressor, data, learning-rate schedule, process group and output directory (the
// shape of Caffe's Solver: step(), evaluate(), save()/restore(), run()).
//
// One iteration is train/step.h's TrainStep: each of the `workers.count` workers (this process's
// share of them in a group) computes the gradient of its slice of the global batch, the
// compressor of `[compression]` aggregates them (shared scalers, packed codes, exact sums), and
// one optimizer step and EMA update follow.
// Every random choice (data order, augmentation, dropout) is keyed by (seed, step, ...) and every
// piece of state (optimizer slots, EMA, batch-norm statistics, each worker's compressor state such
// as 1-bit SGD's residual) is checkpointed, so a run resumed from a checkpoint ends bit-identical
// to an uninterrupted one, for any number of processes and threads.
//
// Output directory (optional; rank 0 writes it): metrics.jsonl (one JSON object per logged step,
// per evaluation), checkpoint.tgckpt (every train.checkpoint_every iterations, every
// train.checkpoint_minutes minutes and at the end, atomic; the train.keep_checkpoints - 1 before
// it as checkpoint-<iteration>.tgckpt), summary.json (at the end, atomic), config.toml (the
// resolved config), and with
// train.tensorboard an events.out.tfevents.* file per start (train/tensorboard.h: every number of
// metrics.jsonl as the scalar "<type>/<key>" at the record's step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/launch.h"
#include "config/config.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/step.h"
#include "train/summary.h"

namespace tg::train {

using config::Config;

// What a front end shows of a run (the CLI's progress line). Called on rank 0 only.
class TrainListener {
 public:
  virtual ~TrainListener() = default;
  virtual void message(const std::string& line) {}  // threads, processes, routes, interruption
  virtual void started(int64_t first_step) {}
  virtual void stepped(int64_t steps_done, double images_per_sec) {}
  virtual void logged(int64_t steps_done, double loss, double lr, double images_per_sec) {}
  virtual void evaluated(int64_t steps_done, const EvalResult& r, bool ema_weights) {}
  virtual void finished() {}
};

struct TrainOptions {
  std::string out_dir;  // "" = write nothing
  // Continue from the newest intact checkpoint of out_dir (train/checkpoint.h CheckpointFiles);
  // with none there yet, start from iteration 0.
  bool resume = false;
  // This process's place in a multi-process run (comm/launch.h discover_rank); the default is a
  // world of one. In a world of P, this rank hosts workers.count / P of the workers; rank 0 alone
  // writes out_dir; every rank reads out_dir's checkpoint on resume.
  comm::RankEnv rank;
  std::string job_id = "run";  // the rendezvous store's key prefix (comm/process_group.h)
  int threads = 0;             // CPU threads of this process; 0 = the thread policy
  // How many times this run was restarted after a failure (the launcher's TG_RESTARTS), for
  // summary.json.
  int64_t restarts = 0;
  // Sees every local worker's gradient of every step (TrainStep::set_gradient_hook).
  TrainStep::GradientHook gradient_hook;
  TrainListener* listener = nullptr;  // not owned; null = silent
};

class Trainer {
 public:
  // Builds the run: checks the config against the world, opens the data, builds the net,
  // optimizer and compressor, restores the checkpoint on resume, joins the process group and
  // picks the thread count. Throws tg::Error on anything wrong, before any output is written.
  Trainer(const Config& config, const TrainOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains from the current iteration to train.iterations, logging, evaluating and saving as the
  // config says, then evaluates and writes summary.json. After SIGINT/SIGTERM (on any rank) it
  // stops every rank at the same iteration, saves a checkpoint and returns a summary with
  // `interrupted` set.
  TrainSummary run();

  // One iteration, with its metrics record, evaluation and checkpoint when they are due.
  // Collective in a group.
  void step();
  // The test-split evaluation with the current weights (EMA weights when the run keeps an EMA);
  // written to metrics.jsonl. Collective in a group.
  EvalResult evaluate();
  // Writes out_dir/checkpoint.tgckpt for the current iteration (collective in a group: rank 0
  // gathers every worker's compressor state). No-op without an output directory in one process.
  void save();
  // Loads a checkpoint's state into the run (the constructor does this on resume).
  void restore(const Checkpoint& ckpt);

  int64_t iteration() const;  // iterations completed
  bool finished() const;      // iteration() == train.iterations
  Net& net();
  const Config& config() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tg::train
