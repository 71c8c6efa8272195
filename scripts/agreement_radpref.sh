#!/usr/bin/env bash
# RadPref end to end: the pairs through `radmatch-audit evaluate`, the two single-call
# baselines (count, enumerate) and `radmatch-audit agreement`, one table (docs/agreement.md).
#
#   scripts/agreement_radpref.sh [N] [judge options...]
#
# N: pairs to run (default 200, all of RadPref); the first N/2 cases, both candidates of
# each, so that studies stay whole. Judge options go to evaluate and to both baselines,
# e.g. `--base-url http://127.0.0.1:8000/v1 --model radmatch-judge`; without them the
# embedded CPU judge (SmolLM2-135M) runs, which only exercises the harness.
#
# Environment: RADPREF_DIR, a RadPref folder (preference_data.json, user_{1,2,3}.json:
# the RadPref folder of the public CRIMSON repository, MIT licence, 100 cases); default
# tests/data/radpref, the 11-case subset shipped here (22 pairs);
# OUT (default ${TMPDIR:-/tmp}/radmatch-agreement-radpref, created owner-only: the
# records hold report text), RESAMPLES (bootstrap resamples, default 2000).
# Reruns resume: evaluate keeps finished records, the baselines' answers are cached.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-200}"
[[ $# -gt 0 ]] && shift
if ! [[ "$N" =~ ^[0-9]+$ ]] || (( N < 2 )); then
    echo "usage: $0 [N >= 2] [judge options...]" >&2
    exit 2
fi
RADPREF_DIR="${RADPREF_DIR:-$here/tests/data/radpref}"
OUT="${OUT:-${TMPDIR:-/tmp}/radmatch-agreement-radpref}"
RESAMPLES="${RESAMPLES:-2000}"
radmatch="${RADMATCH:-$here/.venv/bin/radmatch-audit}"
[[ -x "$radmatch" ]] || radmatch="radmatch-audit"

umask 077
mkdir -p "$OUT"
chmod 700 "$OUT"

"$radmatch" agreement --annotations "$RADPREF_DIR" --emit-pairs "$OUT/pairs_all.jsonl"
lines=$(( (N + 1) / 2 * 2 ))  # whole cases: C1 and C2 of a case are adjacent
head -n "$lines" "$OUT/pairs_all.jsonl" > "$OUT/pairs.jsonl"
pairs=$(wc -l < "$OUT/pairs.jsonl")
echo "== $pairs RadPref pairs in $OUT/pairs.jsonl" >&2

declare -A took
step() {  # step NAME COMMAND...: run it, time it; a run with failed pairs (exit 1) goes on
    local name="$1" start code=0
    shift
    start=$(date +%s)
    "$@" || code=$?
    took[$name]=$(( $(date +%s) - start ))
    if (( code > 1 )); then
        echo "== $name failed (exit $code)" >&2
        exit "$code"
    fi
    echo "== $name: ${took[$name]} s for $pairs pairs (exit $code)" >&2
}

step radmatch "$radmatch" evaluate "$OUT/pairs.jsonl" -o "$OUT/radmatch.jsonl" --resume -q "$@"
step count "$radmatch" baseline "$OUT/pairs.jsonl" --method count -o "$OUT/count.jsonl" "$@"
step enumerate "$radmatch" baseline "$OUT/pairs.jsonl" --method enumerate -o "$OUT/enumerate.jsonl" "$@"

records=("$OUT/radmatch.jsonl" "$OUT/count.jsonl" "$OUT/enumerate.jsonl")
"$radmatch" agreement "${records[@]}" --annotations "$RADPREF_DIR" --resamples "$RESAMPLES" \
    --json > "$OUT/agreement.json"
"$radmatch" agreement "${records[@]}" --annotations "$RADPREF_DIR" --resamples "$RESAMPLES" \
    | tee "$OUT/agreement.md"

echo
echo "Wall time (s) for $pairs pairs, and per pair:"
for name in radmatch count enumerate; do
    awk -v n="$name" -v t="${took[$name]}" -v p="$pairs" 'BEGIN { printf "  %-10s %6d s  %7.1f s/pair\n", n, t, t / p }'
done
echo "Table: $OUT/agreement.md, JSON: $OUT/agreement.json"
