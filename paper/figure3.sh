#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Figure 3 of the paper: LeNet on MNIST, test accuracy vs the number of workers N in
# {2, 4, 8, 16, 32, 64}, FP32 baseline vs TernGrad, (a) momentum 0.9 with LR 0.01, (b) vanilla SGD
# with LR 0.1 (Figure 3). Total batch 64 split over the N workers, 10K iterations, polynomial
# LR (power 0.5), wd 5e-4, all tensors ternarized, c = 2.5, EMA evaluation. 24 runs; each takes
# 6-15 min on one CPU core (OMP_NUM_THREADS=1), ~3 min with 2 cores.
# Results page: paper/figure3.md; numbers: paper/collect.py figure3; plot: paper/figure3.py.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=figure3
CONFIG="$PAPER_DIR/configs/lenet_mnist.toml"
DATA_DEFAULT="data/mnist"
USAGE_TEXT="Figure 3: LeNet/MNIST test accuracy vs workers N, FP32 vs TernGrad, momentum (a) and
vanilla SGD (b); rows <opt>_<grad>_n<N>, opt = mom | sgd, grad = fp32 | tern.
MNIST: DATA=data/mnist (the default; terngrad data fetch mnist puts it there)."

for opt in mom sgd; do
  if [[ $opt == mom ]]; then
    optsets=""
    optdesc="(a) momentum 0.9, LR 0.01"
  else
    optsets="train.optimizer=sgd train.lr=0.1"
    optdesc="(b) vanilla SGD, LR 0.1"
  fi
  for n in 2 4 8 16 32 64; do
    # shellcheck disable=SC2086
    row_add "${opt}_fp32_n$n" train 1 "$optdesc, N=$n, FP32 baseline" $optsets "workers.count=$n"
    # shellcheck disable=SC2086
    row_add "${opt}_tern_n$n" train 1 "$optdesc, N=$n, TernGrad (c=2.5, shared scaler)" $optsets \
      "workers.count=$n" compression.method=terngrad
  done
done
# Ablations recorded in paper/README.md (not in the paper's figure): run only when named in ROWS.
row_add mom_tern_n8_noclip train 0 "(a) N=8 TernGrad without clipping (scaler max|g|), ablation" \
  workers.count=8 compression.method=terngrad compression.clip=0
row_add mom_tern_n8_noshare train 0 "(a) N=8 TernGrad, each worker its own scaler, ablation" \
  workers.count=8 compression.method=terngrad compression.scaler_sharing=none

check_data() { check_mnist "$1"; }

pr_main "$@"
