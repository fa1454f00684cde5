#include "train/run_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "comm/process_group.h"
#include "train/checkpoint.h"

namespace tg::train {

namespace fs = std::filesystem;

Record eval_record(const EvalResult& r, int64_t step, int64_t num_classes, const char* weights) {
  Record o("eval", step);
  o.add("test_accuracy", r.accuracy);
  if (num_classes > 5) o.add("test_top5_accuracy", r.top5_accuracy);
  o.add("test_loss", r.loss).add("examples", r.examples).add("weights", weights);
  return o;
}

void RunLog::open(const std::string& dir, bool tensorboard, int64_t resumed_at) {
  path_ = (fs::path(dir) / kMetricsName).string();
  out_.open(path_, std::ios::app);
  TG_CHECK(out_.good(), "cannot open ", path_, " for writing: ", std::strerror(errno));
  if (!tensorboard) return;
  events_.emplace(dir);
  if (resumed_at >= 0) events_->restart(resumed_at + 1);
}

void RunLog::write(const Record& r) {
  if (!out_.is_open()) return;
  out_ << r.json() << '\n';
  out_.flush();
  TG_CHECK(out_.good(), "cannot write ", path_, ": ", std::strerror(errno));
  if (events_) events_->scalars(r.step(), r.scalars());
}

void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    try {
      json::Value v = json::parse(line);
      if (v.has("step") && v["step"].as_number() > static_cast<double>(step)) continue;
      kept += line + "\n";
    } catch (const Error&) {
      // torn write from a killed process
    }
  }
  write_file_atomic(path, kept);
}

void StepTotals::add_step(uint64_t s, uint64_t r) {
  sent += static_cast<double>(s);
  received += static_cast<double>(r);
  ++steps;
}

void StepTotals::add_inter(const comm::WireBytes& w) {
  inter_sent += static_cast<double>(w.sent);
  inter_received += static_cast<double>(w.received);
}

void StepTotals::add_times(const StepTimes& t) {
  compute_s += t.transfer_s + t.forward_s + t.backward_s + t.update_s;
  compress_s += t.compress_s;
  comm_s += t.comm_s;
  exposed_s += t.reduce_wait_s;
  ++timed_steps;
}

IterationCost StepTotals::per_iter(comm::ProcessGroup* group, int total_workers) const {
  const double timed = static_cast<double>(std::max<int64_t>(timed_steps, 1));
  std::vector<double> v = {sent,           received,          compute_s / timed, compress_s / timed,
                           comm_s / timed, exposed_s / timed, inter_sent,        inter_received};
  const int p = group ? group->size() : 1;
  if (group) v = group->sum(v);
  const double per = static_cast<double>(std::max<int64_t>(steps, 1)) * total_workers;
  IterationCost c;
  c.wire_sent = v[0] / per;
  c.wire_received = v[1] / per;
  c.timed = timed_steps > 0;
  c.compute_s = v[2] / p;
  c.compression_s = v[3] / p;
  c.communication_s = v[4] / p;
  c.comm_exposed_s = group ? v[5] / p : 0.0;  // one process: no communication to wait for
  c.across_nodes = group != nullptr && group->nodes().nodes() > 1;
  c.inter_sent = v[6] / per;
  c.inter_received = v[7] / per;
  return c;
}

}  // namespace tg::train
