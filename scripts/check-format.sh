#!/usr/bin/env bash
# Lists the C++/CUDA files (*.cpp, *.h, *.cu, *.cuh) that do not follow the checked-in
# .clang-format, one per line. The tree was formatted with clang-format 14; another major
# version may disagree on a few lines.
#
# Usage: scripts/check-format.sh [REPO_DIR]     (default: the repository this script is in)
#   CLANG_FORMAT=clang-format-14 picks the binary (default: clang-format).
# Exit: 0 all formatted, 1 some file is not (fix: clang-format -i FILE...), 77 no clang-format.
set -euo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cf="${CLANG_FORMAT:-clang-format}"
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "check-format: '$cf' not found; install clang-format (14) or set CLANG_FORMAT" >&2
  exit 77
fi
cd "$repo"
# Tracked files when this is a git checkout (build trees and bundles are ignored), else a find
# that skips them.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -d '' files < <(git ls-files -z -- '*.cpp' '*.h' '*.cu' '*.cuh')
else
  mapfile -d '' files < <(find . \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
    -not -path './build*' -not -path './gpu-bundle/*' -not -path './.git/*' -print0)
fi
bad=$(printf '%s\0' "${files[@]}" | xargs -0 "$cf" --dry-run 2>&1 |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: warning: .*/\1/p' | sort -u)
if [[ -n "$bad" ]]; then
  echo "$bad"
  echo "check-format: $(wc -l <<<"$bad") file(s) not formatted ($("$cf" --version)); run" \
    "clang-format -i on them" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
