#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Table 2 and Figure 4 of the paper: AlexNet on ImageNet, momentum 0.9, 128 images per worker,
# base LR scaled with the total batch (0.01/0.02/0.04 at 256/512/1024), x0.1 every 20 epochs,
# wd 5e-4, ~74 epochs at every batch size (Table 2). TernGrad rows: c = 2.5, tensors under
# 9217 elements (biases, BN offsets) and the classifier in FP32 (the reference script's
# size_to_binarize 9217, quantize_logits false), dropout 0.2 instead of 0.5. The noclip row: c = 0.
# Figure 4 (a) accuracy and (b) loss vs iteration come from the 4-worker rows' metrics.jsonl;
# (c) the fc6 code sparsity from the fig4c row, `terngrad measure-bounds` on the 4-worker TernGrad
# recipe (a second full 185K-iteration run that samples fc6/w's gradient every BOUNDS_EVERY
# iterations, default 1000).
# Results page: paper/table2.md; numbers: paper/collect.py table2.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=table2
CONFIG="$PAPER_DIR/configs/alexnet_imagenet.toml"
DATA_DEFAULT="data/imagenet"
USAGE_TEXT="Table 2 (7 rows) and Figure 4 (row fig4c): AlexNet/ImageNet, FP32 vs TernGrad at 2, 4, 8
workers. Needs ImageNet as JPEG folders (DATA/train/<wnid>/*.JPEG, DATA/val/<wnid>/*.JPEG) and a
CUDA GPU (the config's device); ~days per row on one GPU (paper/table2.md)."

TERN="compression.method=terngrad compression.min_size=9217 compression.quantize_logits=false model.dropout=0.2"
W2="train.lr=0.01 train.batch_size=256 workers.count=2 train.iterations=370000"
W4="train.lr=0.02 train.batch_size=512 workers.count=4 train.iterations=185000"
W8="train.lr=0.04 train.batch_size=1024 workers.count=8 train.iterations=92500"
# shellcheck disable=SC2086
{
  row_add fp32_2w train 1 "LR 0.01, batch 256, 2 workers, 370K, floating, DR 0.5 (57.33 / 80.56)" $W2
  row_add tern_2w train 1 "LR 0.01, batch 256, 2 workers, 370K, TernGrad, DR 0.2 (57.61 / 80.47)" $W2 $TERN
  row_add tern_noclip_2w train 1 "LR 0.01, batch 256, 2 workers, 370K, TernGrad no clipping, DR 0.2 (54.63 / 78.16)" \
    $W2 $TERN compression.clip=0
  row_add fp32_4w train 1 "LR 0.02, batch 512, 4 workers, 185K, floating, DR 0.5 (57.32 / 80.73); Fig. 4 (a,b)" $W4
  row_add tern_4w train 1 "LR 0.02, batch 512, 4 workers, 185K, TernGrad, DR 0.2 (57.28 / 80.23); Fig. 4 (a,b)" $W4 $TERN
  row_add fp32_8w train 1 "LR 0.04, batch 1024, 8 workers, 92.5K, floating, DR 0.5 (56.62 / 80.28)" $W8
  row_add tern_8w train 1 "LR 0.04, batch 1024, 8 workers, 92.5K, TernGrad, DR 0.2 (57.54 / 80.25)" $W8 $TERN
  row_add fig4c measure-bounds 1 "Fig. 4 (c): fc6 ternary-code sparsity vs iteration, the tern_4w recipe under measure-bounds" \
    $W4 $TERN
  ROW_HIST[fig4c]="fc6/w"  # the codes under the shared scaler, as the paper's run (figure4.py)
}

check_data() { check_imagenet "$1"; }

pr_main "$@"
