#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Figure 2 of the paper: histograms of AlexNet's gradients along training (one conv layer, one fc
# layer; panels (a) original, (b) clipped, (c) ternary, (d) averaged), on two workers, and the
# clipping statistics quoted beside it (length changes by 1-1.5%, direction by 2-3 degrees).
#
# Row:
#   clipstats   `terngrad measure-bounds` on Table 2's 2-worker TernGrad recipe, sampling worker 0's
#               raw gradient every BOUNDS_EVERY iterations (default 1000): per tensor (conv3_1/w,
#               fc6/w, ...) the clipped fraction, length ratio and angle of clipping, the scaler and
#               the code sparsity (bounds.jsonl), and the histograms of the figure for conv3_1/w and
#               fc6/w, panels (a)-(d) (histograms.jsonl; paper/histograms.py draws them). Needs
#               ImageNet and a GPU like table2.sh. The schedule is epoch-based, so
#               `-- --set train.iterations=20000` measures exactly the first 20K iterations.
# Results page: paper/figure2.md.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=figure2
CONFIG="$PAPER_DIR/configs/alexnet_imagenet.toml"
DATA_DEFAULT="data/imagenet"
USAGE_TEXT="Figure 2: AlexNet gradient histograms and the clipping statistics beside them (row
clipstats: measure-bounds --histograms on Table 2's 2-worker TernGrad recipe; needs ImageNet and a
CUDA GPU). BOUNDS_EVERY=K samples every K iterations; paper/histograms.py draws the figure."

# shellcheck disable=SC2086
row_add clipstats measure-bounds 1 "gradient histograms (a)-(d) of conv3_1/w and fc6/w, clipping statistics and code sparsity per tensor along training (AlexNet, 2 workers, TernGrad recipe)" \
  train.lr=0.01 train.batch_size=256 workers.count=2 train.iterations=370000 \
  compression.method=terngrad compression.min_size=9217 compression.quantize_logits=false model.dropout=0.2
ROW_HIST[clipstats]="conv3_1/w,fc6/w"

check_data() { check_imagenet "$1"; }

pr_main "$@"
