// `terngrad measure-bounds`: the paper's argument for layer-wise ternarizing and gradient
// clipping (Assumption 3, Figure 2), measured on a real network. While training with a config (or
// at one checkpoint), every K iterations it takes one worker's raw gradient (before compression,
// weight decay included: train/step.h's gradient hook) and computes terngrad/analysis/bounds.h's
// statistics for each tensor the compressor ternarizes and for the model as a whole, under the
// four combinations {layer, model} scaling x {clip c of the config, no clipping}.
//
// Output in --out DIR (which must not hold an earlier measurement: nothing is overwritten):
//   bounds.jsonl  one JSON object per (iteration, tensor or "model", scaling, clip) with
//                 iteration, worker, tensor, numel, scaling, clip, scaler, bound_ratio,
//                 inf_l1_ratio, g_sq, g_l1, g_inf, inf_l1, h_sq, h_l1, second_moment, variance,
//                 sparsity, realized_sparsity, clipped_fraction, length_ratio, angle_deg
//                 (definitions: terngrad/analysis/bounds.h)
//   bounds.txt    the summary tables (also printed on stdout): per tensor, the median over the
//                 sampled iterations of bound_ratio for each combination, and of the clipping
//                 statistics and sparsity under layer scaling
//   histograms.jsonl  with --histograms: Figure 2's histograms
//                 (terngrad/analysis/histograms.h) of the named tensors at every sampled
//                 iteration, four rows per tensor, `panel` = original | clipped (equal-width
//                 bins: lo, hi, counts) or ternary | averaged (levels k*step: step, kmax,
//                 levels, counts); also iteration, worker, workers, tensor, numel, scaler. The
//                 ternary and averaged panels are the real compressor's codes and aggregate of
//                 that step over all workers.count workers
//   train/        the training run's own output (metrics.jsonl, summary.json, checkpoint, ...);
//                 absent with --checkpoint
// paper/bounds.py draws the figures from bounds.jsonl, paper/histograms.py the ridge plots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tg::cli {

struct MeasureBoundsArgs {
  std::string config_path;             // "" = built-in defaults (or the checkpoint's config)
  std::vector<std::string> overrides;  // --set section.key=value
  std::string out_dir;                 // "" = a new runs/measure-bounds-<UTC time>
  int64_t every = 100;                 // K: sample iterations 0, K, 2K, ...
  int worker = 0;                      // whose gradient (global worker index)
  std::string checkpoint;              // one gradient at this checkpoint's parameters
  std::string device;                  // shortcut for --set device=...
  std::string histograms;              // "" = none; "all" or comma-separated tensor names
  int bins = 101;                      // bins of the original and clipped panels
  bool progress_on = false, progress_off = false;
};

// Adds the `measure-bounds` subcommand with its options bound to `args`; returns it.
CLI::App* add_measure_bounds_command(CLI::App& app, MeasureBoundsArgs& args);

// Runs it: training progress on stderr, the summary tables on stdout. Returns the exit code
// (130 when training was interrupted; the rows sampled so far are kept). Throws tg::Error on bad
// input: a config error (naming the key), --every < 1, an unknown or not ternarized tensor in
// --histograms (listing the ternarized ones), --worker outside [0, workers.count), an
// output file that already exists, a checkpoint that cannot be read or does not fit the config.
int run_measure_bounds(const MeasureBoundsArgs& args);

}  // namespace tg::cli
