#include "train/summary.h"

#include "nn/ops/cuda_options.h"

namespace tg::train {

std::vector<std::pair<const char*, double>> iteration_cost_fields(const IterationCost& c) {
  std::vector<std::pair<const char*, double>> f = {
      {"wire_bytes_sent_per_worker_per_iter", c.wire_sent},
      {"wire_bytes_received_per_worker_per_iter", c.wire_received}};
  if (c.across_nodes)
    f.insert(f.end(), {{"wire_bytes_sent_across_nodes_per_worker_per_iter", c.inter_sent},
                       {"wire_bytes_received_across_nodes_per_worker_per_iter", c.inter_received}});
  if (!c.timed) return f;
  f.insert(f.end(), {{"compute_seconds_per_iter", c.compute_s},
                     {"compression_seconds_per_iter", c.compression_s},
                     {"communication_seconds_per_iter", c.communication_s},
                     {"comm_exposed_seconds_per_iter", c.comm_exposed_s}});
  return f;
}

void add_iteration_cost(json::Object& o, const IterationCost& c) {
  for (const auto& [key, value] : iteration_cost_fields(c)) o.add(key, value);
}

std::string to_json(const TrainSummary& s) {
  json::Object o;
  if (s.test) {
    o.add("test_accuracy", s.test->accuracy);
    if (s.num_classes > 5) o.add("test_top5_accuracy", s.test->top5_accuracy);
    o.add("test_loss", s.test->loss).add("test_examples", s.test->examples);
    o.add("eval_weights", s.eval_weights);
  }
  if (s.interrupted) o.add("interrupted", true);
  o.add("iterations", s.iterations).add("start_iteration", s.start_iteration);
  o.add("restarts", s.restarts);
  o.add("train_loss", s.train_loss);
  o.add("images_per_sec", s.images_per_sec);
  o.add("train_seconds", s.train_seconds).add("wall_seconds", s.wall_seconds);
  o.add("workers", s.workers).add("compression", s.compression);
  o.add("processes", s.processes);
  o.add("workers_per_process", s.workers_per_process);
  o.add("threads_per_process", s.threads_per_process).add("threads_from", s.threads_from);
  o.add("loader_threads", s.loader_threads).add("loader_threads_from", s.loader_threads_from);
  if (s.distributed) {
    o.add("comm_backend", s.comm_backend).add("comm_algorithm", s.comm_algorithm);
    o.add("rendezvous", s.rendezvous).add("comm_authenticated", s.comm_authenticated);
    o.add("sched_batch", s.sched_batch);
    o.add("comm_buckets", s.buckets).add("comm_overlap", s.overlap);
    std::string routes = "[";
    for (const std::string& r : s.bucket_routes) {
      if (routes.size() > 1) routes += ',';
      routes += json::quote(r);
    }
    routes += ']';
    o.add_raw("comm_bucket_routes", routes);
    json::Object nodes;
    nodes.add("count", s.nodes.nodes()).add("from", s.nodes_from);
    std::string of_rank = "[";
    for (int n : s.nodes.node_of) {
      if (of_rank.size() > 1) of_rank += ',';
      of_rank += std::to_string(n);
    }
    of_rank += ']';
    nodes.add_raw("node_of_rank", of_rank);
    o.add_raw("nodes", nodes.str());
  }
  // What one worker's message holds per iteration (the message plus the shared scalers it
  // contributes); fp32 is the uncompressed gradient, for the ratio.
  o.add("payload_bytes_per_worker_per_iter", s.payload_bytes_per_worker_per_iter);
  o.add("fp32_bytes_per_worker_per_iter", s.fp32_bytes_per_worker_per_iter);
  o.add("compression_ratio", s.compression_ratio());
  add_iteration_cost(o, s.per_iter);
  o.add("device", s.device);
  o.add("device_name", s.device_name);
  if (!s.conv_algorithms.empty()) {
    // As an object, and as the cuda.conv_algorithms value that pins them all (bit-for-bit redo).
    json::Object algos;
    for (const auto& [key, algo] : s.conv_algorithms) algos.add(key, algo);
    o.add_raw("conv_algorithms", algos.str());
    o.add("conv_algorithms_pins", conv2d_pins_string(s.conv_algorithms));
  }
  json::Object cpu;
  cpu.add("model", s.cpu.model).add("compiled_isa", s.cpu.compiled_isa);
  cpu.add("avx512", s.cpu.avx512).add("openblas_core", s.cpu.openblas_core);
  cpu.add("openblas_config", s.cpu.openblas_config);
  o.add_raw("cpu", cpu.str());
  o.add("model", s.model).add("num_params", s.num_params);
  o.add("peak_rss_mb", s.peak_rss_mb).add("planned_peak_mb", s.planned_peak_mb);
  o.add("params_sha256", s.params_sha256);
  if (s.skip_bad_files) {
    o.add("bad_files_replaced", s.bad_files_replaced);
    std::string list = "[";
    for (const auto& [file, why] : s.bad_files) {
      if (list.size() > 1) list += ",";
      list += json::Object().add("file", file).add("error", why).str();
    }
    o.add_raw("bad_files", list + "]");
  }
  if (!s.ema_sha256.empty()) o.add("ema_sha256", s.ema_sha256);
  o.add_raw("config", to_json(s.config));
  return o.str();
}

}  // namespace tg::train
