#!/usr/bin/env bash
# Lists every #include that climbs a floor of the layout (README "Layout"): a room may include
# only rooms on lower floors, and itself. Floors: 1 nn/; 2 comm/, datasets/; 3 terngrad/;
# 4 config/; 5 train/; 6 cmd/, bench/, python/ (tests/ may include anything).
#
# Usage: scripts/check-layers.sh [REPO_DIR]   (default: the repository this script is in)
# Exit: 0 no include climbs, 1 some do (each printed as FILE:LINE: ROOM (floor F) includes
# "OTHER/..." (floor G)).
set -euo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo"
declare -A floor=([nn]=1 [comm]=2 [datasets]=2 [terngrad]=3 [config]=4 [train]=5 [cmd]=6
                  [bench]=6 [python]=6)
bad=0
for room in "${!floor[@]}"; do
  [ -d "$room" ] || continue
  while IFS=: read -r file line text; do
    other=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([a-z_]+)\/.*/\1/' <<<"$text")
    [ -n "${floor[$other]:-}" ] || continue
    [ "$other" = "$room" ] && continue
    if [ "${floor[$other]}" -ge "${floor[$room]}" ]; then
      echo "$file:$line: $room (floor ${floor[$room]}) includes \"$other/...\" (floor ${floor[$other]})"
      bad=1
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]+/' "$room" \
             --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)
done
if [ "$bad" -eq 0 ]; then echo "check-layers: no include climbs a floor"; fi
exit "$bad"
