#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Table 3 of the paper: GoogLeNet (Inception-v1 with BN, no auxiliary heads) on ImageNet,
# momentum 0.9, 64 images per worker, polynomial LR (power 0.5) to 0 (the paper, Table 3). TernGrad
# rows: c = 2.5, every tensor ternarized but the classifier (the code's quantize_logits false),
# dropout 0.08 instead of 0.2 and weight decay 1e-5 (2e-5 at 8 workers) instead of 4e-5.
# Results page: paper/table3.md; numbers: paper/collect.py table3.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=table3
CONFIG="$PAPER_DIR/configs/googlenet_imagenet.toml"
DATA_DEFAULT="data/imagenet"
USAGE_TEXT="Table 3: GoogLeNet/ImageNet top-5, FP32 vs TernGrad at 2, 4, 8 workers (6 rows).
Needs ImageNet as JPEG folders (DATA/train/<wnid>/*.JPEG, DATA/val/<wnid>/*.JPEG) and a CUDA GPU
(the config's device); ~days per row on one GPU (paper/table3.md)."

TERN="compression.method=terngrad compression.min_size=1 compression.quantize_logits=false model.dropout=0.08"
W2="train.lr=0.04 train.batch_size=128 workers.count=2 train.iterations=600000"
W4="train.lr=0.08 train.batch_size=256 workers.count=4 train.iterations=300000"
W8="train.lr=0.1 train.batch_size=512 workers.count=8 train.iterations=300000"
# shellcheck disable=SC2086
{
  row_add fp32_2w train 1 "LR 0.04, batch 128, 2 workers, 600K, floating, wd 4e-5, DR 0.2 (88.30)" $W2
  row_add tern_2w train 1 "LR 0.04, batch 128, 2 workers, 600K, TernGrad, wd 1e-5, DR 0.08 (86.77)" \
    $W2 $TERN train.weight_decay=1e-5
  row_add fp32_4w train 1 "LR 0.08, batch 256, 4 workers, 300K, floating, wd 4e-5, DR 0.2 (87.82)" $W4
  row_add tern_4w train 1 "LR 0.08, batch 256, 4 workers, 300K, TernGrad, wd 1e-5, DR 0.08 (85.96)" \
    $W4 $TERN train.weight_decay=1e-5
  row_add fp32_8w train 1 "LR 0.10, batch 512, 8 workers, 300K, floating, wd 4e-5, DR 0.2 (89.00)" $W8
  row_add tern_8w train 1 "LR 0.10, batch 512, 8 workers, 300K, TernGrad, wd 2e-5, DR 0.08 (86.47)" \
    $W8 $TERN train.weight_decay=2e-5
}

check_data() { check_imagenet "$1"; }

pr_main "$@"
