#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Past the paper: can a TernGrad variant close TernGrad's accuracy gap to FP32 on a harder task at
# the same wire bytes? LeNet on Fashion-MNIST with the MNIST recipe
# (configs/lenet_fashion_mnist.toml: total batch 64 over N workers, 10K iterations, momentum 0.9,
# LR 0.01 polynomial to zero, wd 5e-4, EMA evaluation), N in {2, 4, 8}, seeds 123 and 7, for:
#   fp32   the baseline (compression.method = none)
#   tern   TernGrad as published (c = 2.5, scaler shared by max)
#   ef     TernGrad with error feedback (compression.error_feedback = true; same wire bytes)
#   own    TernGrad with each worker its own scaler (compression.scaler_sharing = none; +4 bytes
#          per tensor, allgathered)
#   q4     the 4-level grid {-3, -1, 1, 3} s / 3 (compression.levels = 4): TernGrad's 2 bits per
#          element with every state used, exact integer sums
#   q4ef   q4 with error feedback
#   q5     the 5-level grid {-2, ..., 2} s / 2 (compression.levels = 5; 3 per byte, 2.67 bits)
#   rs     TernGrad with the norm-preserving rescale (compression.rescale = true: each tensor's
#          aggregate divided by the largest ||clip(g)|| / ||g|| over the workers)
# Each run takes 8-10 min on one CPU core (OMP_NUM_THREADS=1). Results page: paper/beyond.md;
# numbers: paper/collect.py beyond.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=beyond
CONFIG="$PAPER_DIR/configs/lenet_fashion_mnist.toml"
DATA_DEFAULT="/usr/share/datasets/fashion-mnist"
USAGE_TEXT="Past the paper: LeNet/Fashion-MNIST, FP32 vs TernGrad vs TernGrad variants; rows
fm_n<N>_s<seed>_<variant>, variant = fp32 | tern | ef | own | q4 | q4ef | q5 | rs (see the header of
this script).
Fashion-MNIST here: apt-get install dataset-fashion-mnist (the default DATA)."

for n in 4 2 8; do
  for seed in 123 7; do
    base="workers.count=$n train.seed=$seed"
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_fp32" train 1 "N=$n, seed $seed, FP32 baseline" $base
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_tern" train 1 "N=$n, seed $seed, TernGrad (c=2.5, shared scaler)" \
      $base compression.method=terngrad
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_ef" train 1 "N=$n, seed $seed, TernGrad + error feedback" \
      $base compression.method=terngrad compression.error_feedback=true
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_own" train 1 "N=$n, seed $seed, TernGrad, own scalers" \
      $base compression.method=terngrad compression.scaler_sharing=none
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_q4" train 1 "N=$n, seed $seed, 4-level grid (2 bits)" \
      $base compression.method=terngrad compression.levels=4
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_q4ef" train 1 "N=$n, seed $seed, 4-level grid + error feedback" \
      $base compression.method=terngrad compression.levels=4 compression.error_feedback=true
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_q5" train 1 "N=$n, seed $seed, 5-level grid (2.67 bits)" \
      $base compression.method=terngrad compression.levels=5
    # shellcheck disable=SC2086
    row_add "fm_n${n}_s${seed}_rs" train 1 "N=$n, seed $seed, TernGrad, norm-preserving rescale" \
      $base compression.method=terngrad compression.rescale=true
  done
done

check_data() { check_mnist "$1"; }

pr_main "$@"
