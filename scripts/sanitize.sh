#!/usr/bin/env bash
# Builds the CPU-only tree under sanitizers and runs tests in it; any report fails the run.
#   bash scripts/sanitize.sh [asan|tsan|all] [--tests REGEX] [--fuzz-seconds N] [--build-root DIR]
#                            [--jobs N]
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included) over the
#         input-handling, communication, data-loader, checkpoint/config, CLI and fault tests, less
#         the long end-to-end training runs (--tests all: every cpu-labelled test built in the
#         tree; --tests REGEX: those); with clang++ the same tree also builds the
#         libFuzzer targets of tests/fuzz/ and runs each for --fuzz-seconds (default 10; 0: not
#         at all) through scripts/fuzz.sh
#   tsan  ThreadSanitizer over the tests that run communication threads (reducer, collectives,
#         Gloo, the process group's failure watcher, the local group, the aggregation)
#   all   both (the default)
# Trees: <build-root>/asan and <build-root>/tsan (default build-root: build-sanitize), built with
# Ninja when it is installed. Exit: 0 clean, 1 a test failed or a sanitizer reported.
# Suppressions (third-party code only, each with its reason) are in tests/sanitize/.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=all
tests=""
fuzz_seconds=10
root=build-sanitize
jobs=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    asan | tsan | all) mode=$1 ;;
    --tests) tests=$2; shift ;;
    --fuzz-seconds) fuzz_seconds=$2; shift ;;
    --build-root) root=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done

here=$(pwd)
supp=$here/tests/sanitize

# The tests each mode runs (ctest -R), and the test executables that hold them (built alone:
# a sanitized build of the whole tree is not needed for them).
ASAN_TESTS='Checkpoint|Config|Json|Launch|Idx|Cifar|ImageFolder|Registry|Sampler|Store|Gloo|LocalComm|NodeLayout|Aggregate|Reducer|CompressionHook|Ternary|SumRadix|Compressor|Baseline|ErrorFeedback|Grid|Rescale|fuzz_|TrainDistributed|TrainCli|Cli|HostilePeer|Faults|TrainRestart'
# ... less the end-to-end training runs and the ternarizer's statistical tests, which check
# numerics rather than input handling (minutes under ASan; the plain ctest run has them; --tests
# all runs them too): the error paths of the CLI,
# the launcher (its restarts too), lost, hostile and stopped peers, the disk faults and the
# checkpoint fallbacks stay in. The memory plan's CLI test compares the plan with the process's
# peak resident set, which ASan's shadow memory and quarantine inflate: it runs in the plain ctest.
# Two checkpoint-policy tests (which files a run keeps, and --resume into a directory without
# one) train several short runs each for what is file bookkeeping, 44 s under ASan: the plain
# ctest has them, and ASan keeps the checkpoint tests that read damaged, foreign and missing files.
ASAN_EXCLUDE='TheNewestKCheckpointsAreKept|ResumeStartsARunThatHasNoCheckpointYet|CannotFitInMemory|TernaryStats|InterruptedRunResumes|ResumeAfterKill9|FourWorkersAgree|SigtermSaves|BucketsOverlapAndFp16|Fp32ReduceScatterMatches|SlurmEnvironment|RanksMeetThroughRedis|TwoProcessesMatch|OneRankWithARendezvous|EmulatedTernGradWorkers|RingAllreduceIsOptIn|WritesSummaryMetrics|EvalReproduces|RestartsAndEndsBitIdentical|CheckpointsByTheClock|ShardedAndHierarchicalRoutesKeep|Fp32FoldsAlongTheNodes'
ASAN_TARGETS=(terngrad train_checkpoint_test config_config_test nn_core_json_test comm_launch_test
  datasets_idx_test datasets_cifar10_test datasets_image_folder_test datasets_registry_test
  datasets_sampler_test comm_store_test comm_gloo_comm_test comm_local_comm_test comm_process_group_test
  comm_reducer_test comm_topology_test terngrad_exchange_aggregate_test
  terngrad_exchange_comm_hook_test terngrad_exchange_ternary_collectives_test terngrad_ternary_test
  terngrad_sum_radix_test terngrad_compressor_test terngrad_compressor_state_test terngrad_baseline_test
  terngrad_error_feedback_test terngrad_grid_test terngrad_rescale_test cmd_train_distributed_test cmd_train_test cmd_faults_test
  cmd_restart_test)
TSAN_TESTS='Reducer|CompressionHook|LocalComm|Gloo|ProcessGroup|Aggregate|TernaryBucket|TernaryCollectives|TernaryAggregate'
TSAN_TARGETS=(comm_reducer_test comm_local_comm_test comm_gloo_comm_test comm_process_group_test
  terngrad_exchange_aggregate_test terngrad_exchange_comm_hook_test
  terngrad_exchange_ternary_collectives_test)

generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
configure() {  # dir cmake-args...
  local dir=$1; shift
  # -O1: sanitizer reports keep readable frames, and the build is faster than at -O2.
  cmake -S . -B "$dir" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DTG_ENABLE_CUDA=OFF -DTG_BUILD_BENCH=OFF "$@" \
    ${TG_CMAKE_ARGS:-} > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
}

# Builds the targets, plus the tree's fuzz targets (libFuzzer binaries, or the corpus replays of a
# gcc tree) when with_fuzz is yes. A listed target the tree does not have is an error: a test
# that was moved or renamed would otherwise drop out of the sanitizer pass without a word.
build() {  # dir with_fuzz targets...
  local dir=$1 with_fuzz=$2; shift 2
  local have=()
  local all
  # Target names: Makefiles list them as "... name", Ninja as "name: phony".
  all=$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p; s/^\([^ :]*\): .*/\1/p')
  for t in "$@"; do
    if ! grep -qx "$t" <<< "$all"; then
      echo "sanitize: no target '$t' in $dir (renamed or moved? update scripts/sanitize.sh)" >&2
      exit 1
    fi
    have+=("$t")
  done
  if [ "$with_fuzz" = yes ]; then
    for t in $(grep -E '_fuzz(_replay)?$' <<< "$all" || true); do have+=("$t"); done
  fi
  echo "sanitize: building ${#have[@]} targets in $dir"
  cmake --build "$dir" -j "$jobs" --target "${have[@]}"
}

run_ctest() {  # regex exclude-regex dir
  local regex=$1 exclude=$2
  if [ "$regex" = all ]; then regex='.'; exclude='^$'; fi
  # Only the executables built above have discovered tests; the rest are "not run" and skipped.
  ctest --test-dir "$3" -L cpu -R "$regex" -E "$exclude" -j "$jobs" --output-on-failure \
    --no-tests=error \
    2>&1 | grep -v 'Could not find executable\|Looked in the following places\|^  *[^ ]*Release\|^  *[^ ]*Debug\|^  *[^ ]*Deployment\|^  *[^ ]*Development\|^Unable to find executable' || true
}

status=0
if [ "$mode" = asan ] || [ "$mode" = all ]; then
  dir=$root/asan
  mkdir -p "$root"
  fuzz=no
  if command -v clang++ > /dev/null; then
    # One clang tree for both: TG_FUZZ compiles everything with ASan + UBSan (and the coverage
    # hooks libFuzzer needs), so its unit tests run under the sanitizers and its fuzz targets
    # are real fuzzers.
    configure "$dir" -DCMAKE_CXX_COMPILER=clang++ -DTG_FUZZ=ON
    fuzz=yes
  else
    configure "$dir" -DTG_SANITIZE=address,undefined
  fi
  build "$dir" yes "${ASAN_TARGETS[@]}"
  echo "sanitize: ASan + UBSan tests"
  export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  if [ -n "$tests" ]; then
    out=$(run_ctest "$tests" '^$' "$dir")
  else
    out=$(run_ctest "$ASAN_TESTS" "$ASAN_EXCLUDE" "$dir")
  fi
  echo "$out" | tail -n 40
  grep -q '100% tests passed' <<< "$out" || status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
  if [ "$fuzz" = yes ] && [ "$fuzz_seconds" -gt 0 ]; then
    echo "sanitize: each fuzz target for ${fuzz_seconds} s"
    bash scripts/fuzz.sh --build-dir "$dir" --seconds "$fuzz_seconds" --jobs "$jobs" || status=1
  elif [ "$fuzz" = no ]; then
    echo "sanitize: no clang++: fuzz targets not run (their corpora are replayed by ctest)"
  fi
fi
if [ "$mode" = tsan ] || [ "$mode" = all ]; then
  dir=$root/tsan
  mkdir -p "$root"
  configure "$dir" -DTG_SANITIZE=thread
  build "$dir" no "${TSAN_TARGETS[@]}"
  echo "sanitize: ThreadSanitizer tests"
  # libgomp is not instrumented: with one OpenMP thread its regions run on the calling thread and
  # TSan sees every access; the communication threads under test are ours.
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
  out=$(run_ctest "${tests:-$TSAN_TESTS}" '^$' "$dir")
  echo "$out" | tail -n 40
  grep -q '100% tests passed' <<< "$out" || status=1
fi
exit $status
