#!/usr/bin/env bash
# Self-play throughput of an earlier revision and of this checkout, side by side on one machine in
# one call (a lent or rented GPU: nothing else runs between the two, so the ratio is fair).
#
#   scripts/compare_selfplay.sh BASELINE OUT [bench.py selfplay options ...]
#
#   BASELINE  an earlier revision's files, made where git is:
#             mkdir -p B && git archive REV azjax games scripts configs | tar -x -C B
#   OUT       receives baseline.json, current.json (bench.py selfplay's reports) and compare.txt
#
# The options go to both sides; CURRENT_ARGS adds options to this checkout's side alone (e.g.
# CURRENT_ARGS="--norms layer,none --trace /tmp/trace"). PYTHON picks the interpreter (default
# python3). Both sides run from their folders without installing azjax.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
if [[ ! -f $1/scripts/bench.py ]]; then
    echo "compare_selfplay.sh: BASELINE must hold a revision's scripts/bench.py, got '$1'" >&2
    exit 2
fi
baseline=$(cd "$1" && pwd) out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
if [[ $py == */* ]]; then  # a path: made absolute, as each side runs from its own folder
    py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
extra_path=${PYTHONPATH:+:$PYTHONPATH}  # kept behind each side's own folder (wheels, say)

echo "== $(date -u +%H:%M:%S) baseline: $baseline"
(cd "$baseline" && PYTHONPATH="$baseline$extra_path" "$py" scripts/bench.py selfplay "$@" \
    --out "$out/baseline.json")
echo "== $(date -u +%H:%M:%S) current: $root"
read -r -a extra <<<"${CURRENT_ARGS:-}"
(cd "$root" && PYTHONPATH="$root$extra_path" "$py" scripts/bench.py selfplay "$@" "${extra[@]}" \
    --out "$out/current.json")

"$py" - "$out/baseline.json" "$out/current.json" <<'EOF' | tee "$out/compare.txt"
import json
import sys

base, current = (json.load(open(path))["results"] for path in sys.argv[1:])
key = ("game", "net", "dtype", "batch", "sims", "algorithm")
reference = {tuple(row[k] for k in key): row for row in base}
print(f"{'game':<12}{'net':>7}{'B':>6}{'sims':>5}{'alg':>7}  {'norm':>10}{'evals/s':>11}"
      f"{'x base':>7}{'% peak':>7}{'ratio':>6}{'k/level':>8}{'kern/sim':>9}")
for side, row in [("base", row) for row in base] + [("now", row) for row in current]:
    old = reference.get(tuple(row[k] for k in key))
    evals = row.get("evaluations_per_s")
    gain = f"{evals / old['evaluations_per_s']:.2f}" if evals and old and side == "now" else "-"
    peak, ratio = row.get("fraction_of_peak"), row.get("ratio")  # none with --kernels-only
    print(f"{row['game']:<12}{row['net']:>7}{row['batch']:>6}{row['sims']:>5}"
          f"{row['algorithm']:>7}  {side + ' ' + row.get('norm', '?'):>10}"
          f"{f'{evals:.0f}' if evals else '-':>11}{gain:>7}"
          f"{'-' if peak is None else f'{100 * peak:.1f}':>7}"
          f"{'-' if ratio is None else f'{ratio:.2f}':>6}"
          f"{(row.get('simulation_step_kernels') or {}).get('data_dependent_loop_kernels', '-'):>8}"
          f"{row.get('kernels_per_simulation_step') or '-':>9}")
EOF
