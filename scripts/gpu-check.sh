#!/usr/bin/env bash
# The GPU check, run on a GPU machine from the folder scripts/gpu-bundle.sh made (no build step):
#   bash gpu-bundle/gpu-check.sh [--results DIR] [--budget SECONDS] [--only a,b,...] [--help]
# Results: $OUT if set, else ./gpu-results (summary.md, results.jsonl, log.txt, two archives).
# Exit: 0 all passed, 1 a step failed, 2 the bundle could not start, 3 no CUDA device.
# The steps themselves are in gpu_check.py beside this file (its --help lists them); this wrapper
# only finds a Python 3 to run it, preferring the one that has PyTorch (step d compares with it).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${TG_PYTHON:-}
if [ -z "$py" ]; then
  for c in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3 python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; then
      py=$c
      break
    fi
  done
fi
if [ -z "$py" ]; then
  echo "gpu-check: no Python 3.8+ found (set TG_PYTHON)" >&2
  exit 2
fi
[ -f "$here/gpu_check.py" ] || { echo "gpu-check: $here/gpu_check.py is missing: copy the whole bundle folder" >&2; exit 2; }
exec "$py" "$here/gpu_check.py" "$@"
