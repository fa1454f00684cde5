#!/usr/bin/env bash
# shellcheck disable=SC2034  # TABLE, CONFIG, DATA_DEFAULT, USAGE_TEXT are read by common.sh
# Figure 2 of the paper: histograms of AlexNet's gradients along training (one conv layer, one fc
# layer; panels (a) original, (b) clipped, (c) ternary, (d) averaged), on two workers, and the
# clipping statistics quoted beside it (length changes by 1-1.5%, direction by 2-3 degrees).
#
# Rows:
#   clipstats   runnable: `terngrad measure-bounds` on Table 2's 2-worker TernGrad recipe, sampling
#               one worker's raw gradient every BOUNDS_EVERY iterations (default 1000): per tensor
#               (conv3_1/w, fc6/w, ...) the clipped fraction, length ratio and angle of clipping,
#               the scaler and the code sparsity. Needs ImageNet and a GPU like table2.sh. The
#               schedule is epoch-based, so `-- --set train.iterations=20000` measures exactly the
#               first 20K iterations of the full run.
#   histograms  the figure itself: NOT runnable, no subcommand writes gradient histograms (see
#               paper/figure2.md for what is missing). Selecting it fails before anything starts.
# Results page: paper/figure2.md.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TABLE=figure2
CONFIG="$PAPER_DIR/configs/alexnet_imagenet.toml"
DATA_DEFAULT="data/imagenet"
USAGE_TEXT="Figure 2: AlexNet gradient histograms (row histograms: not implemented, fails with what is
missing) and the clipping statistics beside them (row clipstats: measure-bounds on Table 2's
2-worker TernGrad recipe; needs ImageNet and a CUDA GPU). BOUNDS_EVERY=K samples every K iterations."

# shellcheck disable=SC2086
row_add clipstats measure-bounds 1 "clipping statistics and code sparsity per tensor along training (AlexNet, 2 workers, TernGrad recipe)" \
  train.lr=0.01 train.batch_size=256 workers.count=2 train.iterations=370000 \
  compression.method=terngrad compression.min_size=9217 compression.quantize_logits=false model.dropout=0.2
row_add histograms missing 0 "the histograms of Fig. 2 (a)-(d): no subcommand writes them"

pr_precheck() {
  local r
  if [[ " ${SELECTED[*]} " != *" histograms "* ]]; then
    note "note: this runs the clipping statistics only; Figure 2's histograms are not implemented (ROWS=histograms says what is missing)"
  fi
  for r in "${SELECTED[@]}"; do
    [[ "$r" == histograms ]] || continue
    cat >&2 <<'MSG'
figure2.sh: Figure 2's histograms cannot be produced by this build: no terngrad subcommand writes
gradient histograms. What exists and what is missing:
  - (a) original gradients: the trainer's gradient hook (cmd/trainer.h TrainOptions::gradient_hook)
    sees every worker's raw flat gradient; `terngrad measure-bounds` uses it but writes only
    scalar statistics per tensor (norms, scaler, sparsity, clipped fraction, length ratio,
    angle), not histograms.
  - (b) clipped gradients: derivable from (a) (clip to c * sigma per tensor), not written.
  - (c) ternary gradients and (d) the averaged (aggregated) gradient: the compressor's per-worker
    codes and the aggregate are not exposed to any hook or output.
  Missing: an option (e.g. `measure-bounds --histograms conv3_1/w,fc6/w --bins 200`) that bins
  (a)-(d) for the named tensors every K iterations into bounds-style JSONL, and a plot script for
  the ridge plots. Nothing was started. The clipping statistics quoted with Figure 2 are the
  `clipstats` row: ROWS=clipstats paper/figure2.sh
MSG
    exit 3
  done
}

check_data() { check_imagenet "$1"; }

pr_main "$@"
