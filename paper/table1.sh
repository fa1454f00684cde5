#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Table 1 of the paper: CifarNet on CIFAR-10, Adam LR 0.0002 constant, FP32 vs TernGrad with
# 2 workers (total batch 128, 300K iterations) and 16 workers (total batch 2048, 18.75K
# iterations); everything else identical, all tensors ternarized, c = 2.5, EMA evaluation
# (the paper, Table 1). Each run is ~38.4 M images (768 epochs).
# Results page: paper/table1.md; numbers: paper/collect.py table1.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=table1
CONFIG="$PAPER_DIR/configs/cifarnet_cifar10.toml"
DATA_DEFAULT="data/cifar10"
USAGE_TEXT="Table 1: CifarNet/CIFAR-10, FP32 vs TernGrad at 2 and 16 workers (4 rows).
Needs CIFAR-10 (binary version): terngrad data fetch cifar10. A GPU is advised: DEVICE=cuda."

row_add fp32_2w train 1 "Adam 0.0002, batch 128, 300K iterations, floating, 2 workers (86.56%)"
row_add tern_2w train 1 "Adam 0.0002, batch 128, 300K iterations, TernGrad, 2 workers (85.64%)" \
  compression.method=terngrad
row_add fp32_16w train 1 "Adam 0.0002, batch 2048, 18.75K iterations, floating, 16 workers (83.19%)" \
  train.batch_size=2048 workers.count=16 train.iterations=18750
row_add tern_16w train 1 "Adam 0.0002, batch 2048, 18.75K iterations, TernGrad, 16 workers (82.80%)" \
  train.batch_size=2048 workers.count=16 train.iterations=18750 compression.method=terngrad

check_data() { check_cifar10 "$1"; }

pr_main "$@"
