# shellcheck shell=bash
# paper/common.sh: shared code of the paper's runners (paper/figure3.sh, table1.sh, table2.sh,
# table3.sh, figure2.sh). Sourced, not run. A runner defines TABLE, CONFIG, the rows (row_add) and
# its data check, then calls pr_main "$@".
#
# Each row of the paper is one `terngrad train` run (or `terngrad measure-bounds` run) of the
# paper's config with the row's settings as --set overrides, in $RUNS/$TABLE/<row>/:
#   summary.json present        -> finished, skipped
#   checkpoint.tgckpt present   -> resumed (--resume, same overrides)
#   metrics.jsonl only          -> an interrupted run with no checkpoint: refused (delete the dir)
#   nothing                     -> started
# Next to the run the runner writes command.txt (the exact command, the commit, the machine) and
# log.txt (the run's stdout and stderr, appended on resume). paper/collect.py reads them.

set -euo pipefail

PAPER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$PAPER_DIR/.." && pwd)"

# ---- options: environment first, flags override -------------------------------------------------
TERNGRAD="${TERNGRAD:-$REPO_DIR/build/cmd/terngrad}"
DATA="${DATA:-}"
ROWS="${ROWS:-}"
DEVICE="${DEVICE:-}"
NPROC="${NPROC:-}"
RUNS="${RUNS:-$REPO_DIR/runs}"
DRY_RUN="${DRY_RUN:-0}"
EXTRA_ARGS=()

ROW_NAMES=()            # all rows, in the paper's order
DEFAULT_ROWS=()         # rows run when ROWS is empty
declare -A ROW_SETS=()  # row -> its overrides, "key=value key=value ..."
declare -A ROW_DESC=()  # row -> one line: what the paper's row is
declare -A ROW_KIND=()  # row -> train | measure-bounds
declare -A ROW_HIST=()  # measure-bounds row -> its --histograms tensors (optional)

# row_add NAME KIND DEFAULT(1|0) "DESCRIPTION" key=value...
row_add() {
  local name="$1" kind="$2" dflt="$3" desc="$4"
  shift 4
  ROW_NAMES+=("$name")
  [[ "$dflt" == 1 ]] && DEFAULT_ROWS+=("$name")
  ROW_KIND[$name]="$kind"
  ROW_DESC[$name]="$desc"
  ROW_SETS[$name]="$*"
}

die() {
  echo "$(basename "$0"): error: $*" >&2
  exit 2
}

note() { echo "$(basename "$0"): $*" >&2; }

pr_usage() {
  cat <<EOF
Usage: paper/$(basename "$0") [options] [-- extra terngrad options]

$USAGE_TEXT

Each row is one run of $(realpath --relative-to="$REPO_DIR" "$CONFIG" 2>/dev/null || echo "$CONFIG")
with the row's settings (--set), written to RUNS/$TABLE/<row>/. Finished rows (summary.json) are
skipped, rows with a checkpoint are resumed. Then: paper/collect.py $TABLE

Options (each also an environment variable):
  --rows A,B,...     ROWS      rows to run (default: $(IFS=,; echo "${DEFAULT_ROWS[*]}"))
  --data DIR         DATA      dataset directory (default: $DATA_DEFAULT)
  --device DEV       DEVICE    cpu, cuda or cuda:N (default: the config's, ${CONFIG_DEVICE})
  --nproc P          NPROC     run each row as P processes (terngrad train --nproc P); the row's
                               workers.count must be a multiple of P
  --terngrad PATH    TERNGRAD  the binary (default: build/cmd/terngrad)
  --runs DIR         RUNS      where runs go (default: runs/, i.e. runs/$TABLE/<row>)
  --dry-run          DRY_RUN=1 print the plan and the commands, run nothing
  --list                       list the rows and exit
  -h, --help                   this help
Anything after -- is passed to every terngrad command (e.g. -- --set train.eval_every=5000).
Note: overrides that change the recipe (train.iterations, ...) make rows differ from the paper;
paper/collect.py flags rows whose iteration count is not the paper's.
EOF
}

pr_list() {
  local r mark
  printf '%-16s %-4s %s\n' row run "paper's row; settings"
  for r in "${ROW_NAMES[@]}"; do
    mark=" "
    [[ " ${DEFAULT_ROWS[*]} " == *" $r "* ]] && mark="*"
    printf '%-16s %-4s %s\n' "$r" "$mark" "${ROW_DESC[$r]}"
    if [[ "${ROW_KIND[$r]}" == missing ]]; then printf "%-16s %-4s   %s\n" "" "" "(not runnable)"; else printf "%-16s %-4s   %s\n" "" "" "${ROW_SETS[$r]:-(config as is)}"; fi
  done
  echo "(* = run by default)"
}

pr_parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h | --help) pr_usage; exit 0 ;;
      --list) pr_list; exit 0 ;;
      --dry-run) DRY_RUN=1 ;;
      --rows | --data | --device | --nproc | --terngrad | --runs)
        [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"
        case "$1" in
          --rows) ROWS="$2" ;;
          --data) DATA="$2" ;;
          --device) DEVICE="$2" ;;
          --nproc) NPROC="$2" ;;
          --terngrad) TERNGRAD="$2" ;;
          --runs) RUNS="$2" ;;
        esac
        shift ;;
      --rows=* | --data=* | --device=* | --nproc=* | --terngrad=* | --runs=*)
        local key="${1%%=*}" val="${1#*=}"
        [[ -n "$val" ]] || die "$key needs a value (see --help)"
        case "$key" in
          --rows) ROWS="$val" ;;
          --data) DATA="$val" ;;
          --device) DEVICE="$val" ;;
          --nproc) NPROC="$val" ;;
          --terngrad) TERNGRAD="$val" ;;
          --runs) RUNS="$val" ;;
        esac ;;
      --) shift; EXTRA_ARGS=("$@"); break ;;
      *) die "unknown option '$1' (expected --rows, --data, --device, --nproc, --terngrad, --runs, --dry-run, --list, -h; terngrad options go after --)" ;;
    esac
    shift
  done
}

# The rows to run, validated: SELECTED.
pr_select_rows() {
  SELECTED=()
  if [[ -z "$ROWS" ]]; then
    SELECTED=("${DEFAULT_ROWS[@]}")
    return
  fi
  local r
  for r in ${ROWS//,/ }; do
    [[ -n "${ROW_KIND[$r]+x}" ]] ||
      die "unknown row '$r' in ROWS/--rows (rows of $TABLE: ${ROW_NAMES[*]})"
    [[ " ${SELECTED[*]} " == *" $r "* ]] || SELECTED+=("$r")
  done
  [[ ${#SELECTED[@]} -gt 0 ]] || die "ROWS/--rows names no row (rows of $TABLE: ${ROW_NAMES[*]})"
}

pr_check_options() {
  if [[ -n "$NPROC" ]]; then
    [[ "$NPROC" =~ ^[1-9][0-9]*$ ]] || die "NPROC/--nproc must be a positive integer, got '$NPROC'"
  fi
  if [[ -n "$DEVICE" ]]; then
    [[ "$DEVICE" =~ ^(cpu|cuda|cuda:[0-9]+)$ ]] ||
      die "DEVICE/--device must be cpu, cuda or cuda:N, got '$DEVICE'"
  fi
  if [[ ! -x "$TERNGRAD" ]]; then
    die "no terngrad binary at $TERNGRAD (build it: cmake -S . -B build && cmake --build build -j --target terngrad; or set TERNGRAD=/path/to/terngrad)"
  fi
}

# The workers.count of a row (its --set, else the config's).
row_workers() {
  local kv
  for kv in ${ROW_SETS[$1]}; do
    [[ "$kv" == workers.count=* ]] && { echo "${kv#*=}"; return; }
  done
  awk '/^\[workers\]/{w=1;next} /^\[/{w=0} w && $1=="count"{print $3; exit}' "$CONFIG"
}

# The device a run will use: DEVICE, else the config's.
effective_device() { echo "${DEVICE:-$CONFIG_DEVICE}"; }

# GPU check for device cuda*: nvidia-smi must list a GPU.
pr_check_gpu() {
  local dev
  dev="$(effective_device)"
  [[ "$dev" == cuda* ]] || return 0
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "this machine has no NVIDIA GPU (nvidia-smi lists none), and the rows run on '$dev'." >&2
    echo "  $TABLE needs a CUDA GPU and a terngrad built with -DTG_ENABLE_CUDA=ON;" >&2
    echo "  DEVICE=cpu would run it on the CPU (see the time estimates in paper/$TABLE.md)." >&2
    return 1
  fi
}

pr_machine() {
  local cpu gpu
  cpu="$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)"
  echo "host: $(uname -n) ($(uname -sr), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"))"
  echo "cpu: ${cpu:-unknown}, $(nproc --all) cores"
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | paste -sd';' || true)"
    echo "gpu: ${gpu:-none}"
  else
    echo "gpu: none"
  fi
  echo "OMP_NUM_THREADS: ${OMP_NUM_THREADS:-unset}"
}

# The command of a row as an array: CMD.
row_command() {
  local row="$1" dir="$2" resume="$3" kv
  CMD=("$TERNGRAD")
  if [[ "${ROW_KIND[$row]}" == measure-bounds ]]; then
    CMD+=(measure-bounds --every "${BOUNDS_EVERY:-1000}")
    [[ -n "${ROW_HIST[$row]:-}" ]] && CMD+=(--histograms "${ROW_HIST[$row]}")
  else
    CMD+=(train)
  fi
  CMD+=(--config "$CONFIG" --set "data.path=$DATA_ABS")
  for kv in ${ROW_SETS[$row]}; do CMD+=(--set "$kv"); done
  [[ -n "$DEVICE" ]] && CMD+=(--device "$DEVICE")
  [[ -n "$NPROC" && "${ROW_KIND[$row]}" == train ]] && CMD+=(--nproc "$NPROC")
  CMD+=(--out "$dir")
  [[ "$resume" == 1 ]] && CMD+=(--resume)
  if [[ ${#EXTRA_ARGS[@]} -gt 0 ]]; then CMD+=("${EXTRA_ARGS[@]}"); fi
  return 0
}

# State of a row's directory: finished | resume | partial | new.
row_state() {
  local row="$1" dir="$2"
  if [[ "${ROW_KIND[$row]}" == measure-bounds ]]; then
    if [[ -f "$dir/bounds.txt" && -f "$dir/train/summary.json" ]]; then echo finished
    elif [[ -e "$dir/bounds.jsonl" || -e "$dir/train" ]]; then echo partial
    else echo new; fi
    return
  fi
  if [[ -f "$dir/summary.json" ]]; then echo finished
  elif [[ -f "$dir/checkpoint.tgckpt" ]]; then echo resume
  elif [[ -f "$dir/metrics.jsonl" ]]; then echo partial
  else echo new; fi
}

pr_main() {
  CONFIG_DEVICE="$(awk -F'"' '/^device *=/{print $2; exit}' "$CONFIG")"
  CONFIG_DEVICE="${CONFIG_DEVICE:-cpu}"
  pr_parse_args "$@"
  pr_select_rows
  if declare -F pr_precheck >/dev/null; then pr_precheck; fi
  pr_check_options
  [[ -n "$DATA" ]] || DATA="$DATA_DEFAULT"

  # Plan: every row's state, and whether any would be refused, before anything starts.
  local row dir state w bad=0 todo=()
  for row in "${SELECTED[@]}"; do
    dir="$RUNS/$TABLE/$row"
    state="$(row_state "$row" "$dir")"
    if [[ -n "$NPROC" && "${ROW_KIND[$row]}" == train ]]; then
      w="$(row_workers "$row")"
      if (( w % NPROC != 0 )); then
        note "row $row: workers.count $w is not a multiple of NPROC=$NPROC"
        bad=1
      fi
    fi
    if [[ "$state" == partial ]]; then
      if [[ "${ROW_KIND[$row]}" == measure-bounds ]]; then
        note "row $row: $dir holds an unfinished measure-bounds run (measure-bounds cannot resume); delete $dir to start it again"
      else
        note "row $row: $dir holds an interrupted run without a checkpoint (metrics.jsonl, no checkpoint.tgckpt); delete $dir to start it again"
      fi
      bad=1
    fi
    [[ "$state" != finished ]] && todo+=("$row")
  done
  [[ $bad == 0 ]] || die "nothing started"

  if [[ ${#todo[@]} -eq 0 ]]; then
    note "all selected rows are finished in $RUNS/$TABLE (${SELECTED[*]}); results: paper/collect.py $TABLE"
    return 0
  fi

  # Data (and GPU) checks, up front: exit non-zero without starting anything.
  local data_ok=1
  if ! check_data "$DATA"; then data_ok=0; fi
  if ! pr_check_gpu; then data_ok=0; fi
  if [[ $data_ok == 0 && "$DRY_RUN" != 1 ]]; then
    die "nothing started ($TABLE needs the above; see paper/$TABLE.md)"
  fi
  DATA_ABS="$(realpath -m "$DATA")"

  local n=0
  for row in "${SELECTED[@]}"; do
    dir="$RUNS/$TABLE/$row"
    state="$(row_state "$row" "$dir")"
    n=$((n + 1))
    if [[ "$state" == finished ]]; then
      note "[$n/${#SELECTED[@]}] $row: finished ($dir), skipped"
      continue
    fi
    row_command "$row" "$dir" "$([[ $state == resume ]] && echo 1 || echo 0)"
    if [[ "$DRY_RUN" == 1 ]]; then
      echo "# [$n/${#SELECTED[@]}] $row ($state): ${ROW_DESC[$row]}"
      printf '%q ' "${CMD[@]}"
      echo
      continue
    fi
    note "[$n/${#SELECTED[@]}] $row ($([[ $state == resume ]] && echo resuming || echo starting)): ${ROW_DESC[$row]}"
    mkdir -p "$dir"
    {
      echo "# $TABLE row $row: ${ROW_DESC[$row]}"
      echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $([[ $state == resume ]] && echo resumed || echo started)"
      echo "# commit: $(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO_DIR" diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
      pr_machine | sed 's/^/# /'
      printf '%q ' "${CMD[@]}"
      echo
    } >>"$dir/command.txt"
    local rc=0
    "${CMD[@]}" 2>&1 | tee -ai "$dir/log.txt" || rc=$?
    if [[ $rc != 0 ]]; then
      die "row $row failed (exit $rc); its output is in $dir/log.txt. Run the script again to resume it."
    fi
  done
  [[ "$DRY_RUN" == 1 ]] && [[ $data_ok == 0 ]] && note "dry run: the data/GPU checks above fail, a real run would stop before starting"
  [[ "$DRY_RUN" == 1 ]] || note "done: paper/collect.py $TABLE prints the results beside the paper's"
  return 0
}

# ---- data checks (each prints what is missing and returns 1) -----------------------------------

check_mnist() {
  local d="$1" f missing=()
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [[ -f "$d/$f" || -f "$d/$f.gz" ]] || missing+=("${f}[.gz]")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "MNIST not found in $d (missing: ${missing[*]})." >&2
  echo "  Get it with: $TERNGRAD data fetch mnist --dir $d   (or point DATA/--data at a directory with the four IDX files)" >&2
  return 1
}

check_cifar10() {
  local d="$1" dir f missing=()
  dir="$d"
  [[ -f "$d/test_batch.bin" ]] || dir="$d/cifar-10-batches-bin"
  for f in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
    [[ -f "$dir/$f" ]] || missing+=("$f")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "CIFAR-10 not found in $d (missing: ${missing[*]}; looked in $d and $d/cifar-10-batches-bin)." >&2
  echo "  Table 1 needs the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin, 163 MB unpacked)." >&2
  echo "  Get it with: $TERNGRAD data fetch cifar10 --dir $d" >&2
  echo "  or download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html, unpack it" >&2
  echo "  and set DATA/--data to the cifar-10-batches-bin directory (or its parent)." >&2
  return 1
}

# ImageNet as JPEG folders: DATA/train/<class>/*.JPEG and DATA/val/<class>/*.JPEG, 1000 classes
# (labels 1..1000 with label_offset 1). Counts classes, samples one image per split; does not walk
# all 1.33 M files.
check_imagenet() {
  local d="$1" split n bad=0 first img
  for split in train val; do
    if [[ ! -d "$d/$split" ]]; then
      echo "ImageNet: no directory $d/$split" >&2
      bad=1
      continue
    fi
    n="$(find "$d/$split" -mindepth 1 -maxdepth 1 -type d | wc -l)"
    if [[ "$n" -eq 0 ]]; then
      echo "ImageNet: $d/$split has no class sub-directories" >&2
      bad=1
      continue
    fi
    if [[ "$n" -ne 1000 ]]; then
      echo "ImageNet: $d/$split has $n class directories, expected 1000 (the nets have 1001 outputs, label_offset 1)" >&2
      [[ "$n" -gt 1000 ]] && bad=1
    fi
    first="$(find "$d/$split" -mindepth 1 -maxdepth 1 -type d | sort | head -1)"
    img="$(find "$first" -maxdepth 1 -type f \( -iname '*.jpg' -o -iname '*.jpeg' \) -print -quit)"
    if [[ -z "$img" ]]; then
      echo "ImageNet: no .jpg/.JPEG image in $first (each class directory holds that class's images)" >&2
      bad=1
    fi
  done
  if [[ -d "$d/train" && -d "$d/val" ]]; then
    local nt nv
    nt="$(find "$d/train" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | md5sum)"
    nv="$(find "$d/val" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | md5sum)"
    if [[ "$nt" != "$nv" ]]; then
      echo "ImageNet: the class directories of $d/train and $d/val differ (labels are assigned by sorted name in each split)" >&2
      bad=1
    fi
  fi
  [[ $bad == 0 ]] && return 0
  cat >&2 <<EOF
  $TABLE needs ImageNet (ILSVRC-2012, 1.28 M training and 50 K validation images, ~150 GB) as JPEG
  folders, one sub-directory per class, the same 1000 class names (e.g. WordNet ids) in both splits:
      $d/train/n01440764/n01440764_10026.JPEG ...
      $d/val/n01440764/ILSVRC2012_val_00000293.JPEG ...
  (the validation images sorted into class folders, as for PyTorch's ImageFolder). It is not
  downloadable here: get it from https://image-net.org (registration), then set DATA/--data.
EOF
  return 1
}
