#!/usr/bin/env bash
# Lists the lines of the committed pages (every git-tracked *.md) that name a machine-specific
# path, one `file:line: text` each. Issue 44 item 4: every command in the README and paper/*.md
# runs as written from a checkout, so a page names the binary as ./build/cmd/terngrad and data
# relative to the checkout (data/mnist, where `terngrad data fetch mnist` puts it), never the
# folder one machine happened to use. Flagged:
#   - an absolute path under /work/, /home/, /root/, /Users/, /mnt/, /scratch/ or /study/ (a
#     URL's path is not: there the slash follows a host name);
#   - a private build folder build-NAME/, other than the ones this repo's scripts make (build-cuda,
#     build-sanitize, build-cpu, build-fuzz, build-pip; plain build/ is never flagged).
# System locations a package installs (/usr/share/datasets/..., /usr/local/cuda) and /tmp are fine.
#
# Usage: scripts/check-docs.sh [FILE...]   (default: every tracked *.md of this repository;
#                                           FILEs are checked instead, e.g. a page not yet added)
# Exit: 0 no such path, 1 some page names one (fix: a path relative to the checkout), 2 a file
# could not be read.
set -euo pipefail
if (($# > 0)); then
  files=("$@")
else
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -d '' files < <(git ls-files -z -- '*.md')
  else
    mapfile -d '' files < <(find . -name '*.md' -not -path './build*' -not -path './gpu-bundle/*' \
      -not -path './.git/*' -not -path './runs/*' -print0)
  fi
fi
if ((${#files[@]} == 0)); then
  echo "check-docs: 0 pages"
  exit 0
fi
abs='(?<![A-Za-z0-9_.~-])/(?:work|home|root|Users|mnt|scratch|study)/'
private='(?<![A-Za-z0-9_.-])build-(?!(?:cuda|sanitize|cpu|fuzz|pip)/)[A-Za-z0-9_.-]+/'
status=0
bad=$(grep -nHP -- "$abs|$private" "${files[@]}") || status=$?
if ((status > 1)); then
  echo "check-docs: could not read every page (grep exit $status)" >&2
  exit 2
fi
if [[ -n "$bad" ]]; then
  sed -E 's/^([^:]*:[0-9]+):/\1: /' <<<"$bad"
  echo "check-docs: $(wc -l <<<"$bad") line(s) name a machine-specific path; write it relative" \
    "to the checkout (./build/cmd/terngrad, data/mnist)" >&2
  exit 1
fi
echo "check-docs: ${#files[@]} pages, no machine-specific paths"
