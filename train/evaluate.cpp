#include "train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "config/config.h"
#include "nn/autograd/tape.h"
#include "nn/core/clock.h"
#include "nn/core/json.h"
#include "nn/ops/cuda_options.h"
#include "nn/ops/softmax_xent.h"
#include "train/checkpoint.h"
#include "train/options.h"

namespace tg::train {

void EvalResult::finish() {
  const double n = static_cast<double>(std::max<int64_t>(examples, 1));
  accuracy = examples ? static_cast<double>(correct) / n : 0.0;
  top5_accuracy = examples ? static_cast<double>(correct5) / n : 0.0;
  loss = examples ? loss_sum / n : 0.0;
}

EvalResult evaluate(Net& net, const data::Dataset& ds, int64_t batch_size, int64_t limit, int shard,
                    int shards) {
  TG_CHECK(batch_size >= 1, "evaluate: batch size must be >= 1, got ", batch_size);
  TG_CHECK(shards >= 1 && shard >= 0 && shard < shards, "evaluate: shard ", shard, " of ", shards,
           " is out of range");
  NoGradGuard ng;
  const auto& in = ds.info();
  const int64_t n = limit > 0 ? std::min(limit, in.size) : in.size;
  const int64_t k = net.info().num_classes;
  EvalResult r;
  std::vector<int64_t> idx;
  for (int64_t start = shard * batch_size; start < n; start += shards * batch_size) {
    const int64_t b = std::min(batch_size, n - start);
    idx.resize(b);
    for (int64_t i = 0; i < b; ++i) idx[i] = start + i;
    Tensor x = Tensor::empty({b, in.channels, in.height, in.width});
    Tensor y = Tensor::empty({b}, DType::i32);
    ds.load(idx, false, 0, 0, x.data<float>(), y.data<int32_t>());
    ForwardContext ctx;
    ctx.training = false;
    Tensor logits = net.forward(x.to(net.device()), ctx);
    r.loss_sum +=
        static_cast<double>(softmax_cross_entropy(logits, y.to(net.device())).item<float>()) * b;
    const std::vector<float> l = logits.to_vector<float>();
    const int32_t* lab = y.data<int32_t>();
    for (int64_t i = 0; i < b; ++i) {
      const float* row = l.data() + i * k;
      const float target = row[lab[i]];
      // Rank of the true class: how many logits beat it (ties go against the prediction, so a
      // constant net never scores).
      int64_t better = 0;
      for (int64_t j = 0; j < k; ++j)
        if (j != lab[i] && row[j] >= target) ++better;
      r.correct += better == 0;
      r.correct5 += better < 5;
    }
    r.examples += b;
  }
  r.finish();
  return r;
}

CheckpointEval evaluate_checkpoint(const std::string& checkpoint_path,
                                   const std::string& config_path,
                                   const std::vector<std::string>& overrides, bool use_raw) {
  Checkpoint ck = load_checkpoint(checkpoint_path);
  Config cfg =
      config_path.empty()
          ? config::parse_config(ck.config_toml, checkpoint_path + " (embedded config)", overrides)
          : config::load_config_file(config_path, overrides);
  TG_CHECK(cfg.model.name == ck.net, checkpoint_path, ": holds model '", ck.net,
           "' but the config says '", cfg.model.name, "'");
  const Device device = parse_device(cfg.device);
  check_device_usable(device);
  apply_cuda_options(cfg.cuda);  // the config's GPU algorithms and TF32, as `train` runs them
  NetOptions no = net_options(cfg);
  no.initialize = false;  // every parameter comes from the checkpoint, just below
  std::unique_ptr<Net> net = make_net(cfg.model.name, no, device);
  const bool ema = ck.has("ema") && !use_raw;
  const Tensor& src = ck.get(ema ? "ema" : "params");
  Tensor params = net->arena().params();
  TG_CHECK(src.numel() == params.numel(), checkpoint_path, ": has ", src.numel(),
           " parameters, model '", cfg.model.name, "' has ", params.numel());
  params.copy_from(src.view(params.shape()));
  for (const auto& [name, t] : net->buffers()) {
    Tensor dst = t;
    dst.copy_from(ck.get("buffer/" + name));
  }
  auto test_ds = data::open_dataset(data_options(cfg), data::Split::test);
  check_compatible(*net, *test_ds);
  const auto t0 = Clock::now();
  CheckpointEval e;
  e.result = evaluate(*net, *test_ds, cfg.data.eval_batch_size, cfg.data.eval_limit);
  e.seconds = seconds_since(t0);
  e.checkpoint = checkpoint_path;
  e.step = ck.step;
  e.model = cfg.model.name;
  e.device = device.str();
  e.weights = ema ? "ema" : "raw";
  e.num_classes = net->info().num_classes;
  return e;
}

std::string to_json(const CheckpointEval& e) {
  json::Object o;
  o.add("checkpoint", e.checkpoint).add("step", e.step).add("model", e.model);
  o.add("test_accuracy", e.result.accuracy);
  if (e.num_classes > 5) o.add("test_top5_accuracy", e.result.top5_accuracy);
  o.add("test_loss", e.result.loss).add("test_examples", e.result.examples);
  o.add("eval_weights", e.weights).add("device", e.device);
  o.add("eval_seconds", e.seconds);
  return o.str();
}

}  // namespace tg::train
