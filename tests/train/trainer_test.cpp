// The Trainer as a library (train/trainer.h), without the CLI: a run driven step by step, saved
// and restored by a second Trainer ends bit-identical to one run(); the listener sees the run's
// events in order; the summary is a struct whose JSON (summary.json) carries the same values.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "nn/core/json.h"
#include "tests/testing/files.h"

namespace tg::train {
namespace {

using namespace tg::config;

using tg::testing::read_text;
using tg::testing::TempDir;

Config small_run() {
  return default_config({"data.name=synthetic", "data.synthetic_size=256", "train.iterations=12",
                         "train.log_every=4", "train.eval_every=8", "train.checkpoint_every=0",
                         "workers.count=2", "compression.method=terngrad"});
}

TEST(Trainer, StepsSaveAndRestoreEndAsOneRun) {
  const Config c = small_run();
  TempDir dir;
  TrainOptions whole_opt;
  whole_opt.out_dir = dir / "whole";
  const TrainSummary whole = Trainer(c, whole_opt).run();
  ASSERT_FALSE(whole.interrupted);
  EXPECT_EQ(whole.iterations, 12);

  TrainOptions part;
  part.out_dir = dir / "parts";
  {
    Trainer t(c, part);
    EXPECT_EQ(t.iteration(), 0);
    for (int i = 0; i < 5; ++i) t.step();
    EXPECT_EQ(t.iteration(), 5);
    EXPECT_FALSE(t.finished());
    t.save();
  }
  part.resume = true;
  Trainer t(c, part);
  EXPECT_EQ(t.iteration(), 5);
  const TrainSummary resumed = t.run();
  EXPECT_TRUE(t.finished());
  EXPECT_EQ(resumed.start_iteration, 5);
  EXPECT_EQ(resumed.params_sha256, whole.params_sha256);
  EXPECT_EQ(resumed.ema_sha256, whole.ema_sha256);
  ASSERT_TRUE(resumed.test.has_value());
  EXPECT_EQ(resumed.test->correct, whole.test->correct);
  EXPECT_THROW(t.step(), Error) << "all iterations are done";
}

struct Recorder : TrainListener {
  std::vector<std::string> events;
  void message(const std::string&) override { events.push_back("message"); }
  void started(int64_t first) override { events.push_back("started " + std::to_string(first)); }
  void stepped(int64_t done, double) override { events.push_back("step " + std::to_string(done)); }
  void logged(int64_t done, double loss, double, double) override {
    events.push_back("log " + std::to_string(done));
    EXPECT_TRUE(loss > 0) << loss;
  }
  void evaluated(int64_t done, const EvalResult& r, bool ema) override {
    events.push_back("eval " + std::to_string(done));
    EXPECT_TRUE(ema);  // the default config keeps an EMA
    EXPECT_GT(r.examples, 0);
  }
  void finished() override { events.push_back("finished"); }
};

TEST(Trainer, TheListenerSeesTheRunInOrder) {
  Recorder rec;
  TrainOptions o;
  o.listener = &rec;
  const TrainSummary s = Trainer(small_run(), o).run();
  std::vector<std::string> want;
  for (const std::string& e : rec.events)
    if (e != "message") want.push_back(e);
  const std::vector<std::string> expect = {"started 0", "step 1", "step 2",   "step 3",  "step 4",
                                           "log 4",     "step 5", "step 6",   "step 7",  "step 8",
                                           "log 8",     "eval 8", "step 9",   "step 10", "step 11",
                                           "step 12",   "log 12", "finished", "eval 12"};
  EXPECT_EQ(want, expect);
  EXPECT_EQ(rec.events.front(), "message");  // the thread policy is said first
  EXPECT_TRUE(s.test.has_value());
}

TEST(Trainer, TheSummaryIsAStructAndSummaryJsonCarriesIt) {
  TempDir dir;
  TrainOptions o;
  o.out_dir = dir / "run";
  const TrainSummary s = Trainer(small_run(), o).run();
  const json::Value j = json::parse(read_text(dir / "run/summary.json"));
  EXPECT_EQ(j["params_sha256"].as_string(), s.params_sha256);
  EXPECT_EQ(j["iterations"].as_number(), static_cast<double>(s.iterations));
  EXPECT_EQ(j["test_accuracy"].as_number(), s.test->accuracy);
  EXPECT_EQ(j["compression"].as_string(), "terngrad");
  EXPECT_EQ(j["payload_bytes_per_worker_per_iter"].as_number(),
            static_cast<double>(s.payload_bytes_per_worker_per_iter));
  EXPECT_EQ(j["comm_exposed_seconds_per_iter"].as_number(), 0.0) << "one process: nothing waited";
  EXPECT_GT(j["compression_seconds_per_iter"].as_number(), 0.0);
  EXPECT_FALSE(j.has("comm_buckets")) << "one process has no communicator";
  EXPECT_EQ(to_json(s), read_text(dir / "run/summary.json").substr(0, to_json(s).size()));
}

}  // namespace
}  // namespace tg::train
