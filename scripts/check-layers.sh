#!/usr/bin/env bash
# Lists every #include that climbs a floor of the layout (README "Layout"): a room may include
# only rooms on lower floors, and itself. Floors: 1 nn/; 2 comm/, datasets/; 3 terngrad/;
# 3.5 terngrad/analysis/ (the paper-analysis tools, above the rest of terngrad/: nothing else in
# terngrad/ may include them); 4 config/; 5 train/; 6 cmd/, bench/, python/ (tests/ may include
# anything). A file's room is the longest room that holds it, and so is an included header's.
#
# Usage: scripts/check-layers.sh [REPO_DIR]   (default: the repository this script is in)
# Exit: 0 no include climbs, 1 some do (each printed as FILE:LINE: ROOM (floor F) includes
# "OTHER/..." (floor G)).
set -euo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$repo"
# Floors in tenths, so that a room inside a folder can sit above the rest of it.
declare -A floor=([nn]=10 [comm]=20 [datasets]=20 [terngrad]=30 [terngrad/analysis]=35
                  [config]=40 [train]=50 [cmd]=60 [bench]=60 [python]=60)
# room_of PATH: sets room to the longest room that PATH lies in ('' when none).
room_of() {
  room=
  local r
  for r in "${!floor[@]}"; do
    if [[ $1 == "$r"/* && ${#r} -gt ${#room} ]]; then room=$r; fi
  done
}
show() { if (( $1 % 10 )); then echo "$(( $1 / 10 )).$(( $1 % 10 ))"; else echo "$(( $1 / 10 ))"; fi; }
dirs=()  # the top-level rooms; grep reads them once
for r in "${!floor[@]}"; do
  [[ $r != */* && -d $r ]] && dirs+=("$r")
done
[ "${#dirs[@]}" -gt 0 ] || { echo "check-layers: no room found in $repo" >&2; exit 2; }
bad=0
while IFS=: read -r file line text; do
  target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$text")
  room_of "$target"; other=$room
  [ -n "$other" ] || continue
  room_of "$file"
  [ "$other" = "$room" ] && continue
  if [ "${floor[$other]}" -ge "${floor[$room]}" ]; then
    echo "$file:$line: $room (floor $(show "${floor[$room]}")) includes \"$other/...\" (floor $(show "${floor[$other]}"))"
    bad=1
  fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]+/' "${dirs[@]}" \
           --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)
if [ "$bad" -eq 0 ]; then echo "check-layers: no include climbs a floor"; fi
exit "$bad"
