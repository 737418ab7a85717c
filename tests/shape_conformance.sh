#!/usr/bin/env bash
# JIT against the reference over benchdnn shape files (../shared/shapes, or
# the repository's bench/shapes), minibatch 1 so a whole set stays a few
# minutes. Usage:
#   shape_conformance.sh SWEEP SHAPES_DIR FILE_GLOB... -- SWEEP_OPTIONS...
# Exits 77 (ctest: skipped) when the shapes directory is absent.
set -uo pipefail
sweep=$1 dir=$2
shift 2
globs=()
while (($#)) && [[ $1 != -- ]]; do globs+=("$1"); shift; done
shift  # --
[[ -d $dir ]] || { echo "no shape directory at $dir: skipped"; exit 77; }
status=0 files=0
for g in "${globs[@]}"; do
  for f in "$dir"/$g; do
    [[ -f $f ]] || continue
    files=$((files + 1))
    out=$("$sweep" --batch="$f" --mb=1 --mode=C "$@" 2>&1)
    rc=$?
    echo "${f#"$dir"/}: $(tail -n 1 <<<"$out")"
    if ((rc != 0)); then
      grep -E '^(FAIL|ERROR)' <<<"$out" | head -n 20
      status=1
    fi
  done
done
((files > 0)) || { echo "no shape files matched"; exit 1; }
exit $status
