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
# Rows fm_n<N>_s<seed>_<variant> run on Fashion-MNIST (DATA); rows mn_n8_s123_<variant> run the
# same recipe on MNIST (data.name = mnist, the directory MNIST_DATA, default data/mnist: where
# `terngrad data fetch mnist` puts it; a path without spaces), N = 8, seed 123: does a variant that
# helps on Fashion-MNIST cost anything where TernGrad already matches FP32?
# Each run takes 8-16 min on one CPU core (OMP_NUM_THREADS=1). Results page: paper/beyond.md;
# numbers: paper/collect.py beyond.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=beyond
CONFIG="$PAPER_DIR/configs/lenet_fashion_mnist.toml"
DATA_DEFAULT="/usr/share/datasets/fashion-mnist"
MNIST_DATA="${MNIST_DATA:-$REPO_DIR/data/mnist}"
USAGE_TEXT="Past the paper: LeNet/Fashion-MNIST, FP32 vs TernGrad vs TernGrad variants; rows
fm_n<N>_s<seed>_<variant> (Fashion-MNIST, N = 2, 4, 8, seeds 123 and 7) and mn_n8_s123_<variant>
(MNIST, N = 8), variant = fp32 | tern | ef | own | q4 | q4ef | q5 | rs (see the header of this
script).
Fashion-MNIST here: apt-get install dataset-fashion-mnist (the default DATA). MNIST rows read
MNIST_DATA (environment; default data/mnist, currently $MNIST_DATA)."

# rows_add PREFIX N SEED key=value...: the eight variants of one (dataset, N, seed).
rows_add() {
  local p="$1" n="$2" seed="$3"
  shift 3
  local base="$* workers.count=$n train.seed=$seed" d=Fashion-MNIST
  [[ "$p" == mn ]] && d=MNIST
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_fp32" train 1 "$d, N=$n, seed $seed, FP32 baseline" $base
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_tern" train 1 \
    "$d, N=$n, seed $seed, TernGrad (c=2.5, shared scaler)" $base compression.method=terngrad
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_ef" train 1 "$d, N=$n, seed $seed, TernGrad + error feedback" \
    $base compression.method=terngrad compression.error_feedback=true
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_own" train 1 "$d, N=$n, seed $seed, TernGrad, own scalers" \
    $base compression.method=terngrad compression.scaler_sharing=none
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_q4" train 1 "$d, N=$n, seed $seed, 4-level grid (2 bits)" \
    $base compression.method=terngrad compression.levels=4
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_q4ef" train 1 "$d, N=$n, seed $seed, 4-level grid + error feedback" \
    $base compression.method=terngrad compression.levels=4 compression.error_feedback=true
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_q5" train 1 "$d, N=$n, seed $seed, 5-level grid (2.67 bits)" \
    $base compression.method=terngrad compression.levels=5
  # shellcheck disable=SC2086
  row_add "${p}_n${n}_s${seed}_rs" train 1 \
    "$d, N=$n, seed $seed, TernGrad, norm-preserving rescale" \
    $base compression.method=terngrad compression.rescale=true
}

for n in 4 2 8; do
  for seed in 123 7; do
    rows_add fm "$n" "$seed"
  done
done
# The MNIST rows' overrides are split on spaces like every row's (common.sh).
[[ "$MNIST_DATA" != *[[:space:]]* ]] || die "MNIST_DATA must be a path without spaces: '$MNIST_DATA'"
rows_add mn 8 123 data.name=mnist "data.path=$(realpath -m "$MNIST_DATA")"

# Fashion-MNIST (DATA) if an fm_ row is selected, MNIST (MNIST_DATA) if an mn_ row is.
check_data() {
  local row fm=0 mn=0 ok=0
  for row in "${SELECTED[@]}"; do
    case "$row" in fm_*) fm=1 ;; mn_*) mn=1 ;; esac
  done
  if [[ $fm == 1 ]] && ! check_mnist "$1"; then ok=1; fi
  if [[ $mn == 1 ]] && ! check_mnist "$MNIST_DATA"; then
    echo "  (the mn_ rows read MNIST_DATA, not DATA)" >&2
    ok=1
  fi
  return $ok
}

pr_main "$@"
