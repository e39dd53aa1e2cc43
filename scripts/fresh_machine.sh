#!/usr/bin/env bash
# One piece of a run on a fresh machine (a rented or preemptible GPU, a Colab runtime): bench
# self-play, train for a few minutes, export the model, draw its curve and score it against
# perfect play, leaving under OUT what the next piece and a person need.
#
#   scripts/fresh_machine.sh CONFIG OUT [MINUTES] [KEY=VALUE ...]
#
#   MINUTES    training's wall clock (default 8); then SIGTERM stops it as Ctrl-C does, saving a
#              checkpoint (a shell's background jobs ignore SIGINT; none ignores SIGTERM)
#   KEY=VALUE  config overrides, e.g. train.init_from=OUT_BEFORE/model.azjax to continue a run
#
# OUT receives bench.json, model.azjax, metrics.jsonl, curve.png and, where `azjax-eval
# --solver` has a position set for the game, solver.json. The run directory is a temporary
# folder (its checkpoints hold the whole replay buffer); model.azjax is exported resumable, so
# the next piece, given train.init_from=OUT/model.azjax, continues the run where this one
# stopped (docs/training.md). BENCH=0 or SOLVER=0 skip those steps; PYTHON picks the
# interpreter (default python3).
# Runs from a checkout without installing azjax (its dependencies installed).
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
config=$1 out=$2
minutes=${3:-8}
shift $(($# < 3 ? $# : 3))
if ! [[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || [[ $minutes =~ ^0+([.]0*)?$ ]]; then
    echo "fresh_machine.sh: MINUTES must be a positive number, got '$minutes'" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
run=$(mktemp -d)/run
step() { echo "== $(date -u +%H:%M:%S) $*"; }

if [[ ${BENCH:-1} != 0 ]]; then
    step "bench: self-play at the config's game, net, batch and simulations"
    read -r -a grid < <("$py" - "$config" "$@" <<'EOF'
import sys
from azjax.config import load_config
c = load_config(sys.argv[1], sys.argv[2:])
n = c.network
print(f"--games {c.game.name} --nets {n.blocks}x{n.channels} --dtype {n.dtype} --norms {n.norm}"
      f" --batches {c.selfplay.batch_size} --sims {c.search.num_simulations}"
      f" --algorithms {c.search.algorithm} --chunk-moves {c.selfplay.chunk_moves}")
EOF
)
    "$py" "$root/scripts/bench.py" selfplay "${grid[@]}" --chunks 2 --no-plain --out "$out/bench.json"
fi

step "train: $minutes minutes of $config"
status=0
timeout -s TERM -k 120 "${minutes}m" "$py" -m azjax.cli.train --config "$config" --workdir "$run" \
    --quiet "$@" || status=$?
if [[ $status -ne 0 && $status -ne 124 ]]; then  # 124: stopped by the clock, checkpoint saved
    echo "fresh_machine.sh: training failed (exit $status)" >&2
    exit "$status"
fi
saved=("$run"/checkpoints/[0-9]*)  # the steps saved (the pattern itself where none is)
if [[ ! -e ${saved[0]} ]]; then
    echo "fresh_machine.sh: the clock ($minutes minutes) ran out before training's first" \
        "checkpoint (compilation and the first iteration): give it more MINUTES" >&2
    exit 1
fi

step "export: $out/model.azjax"
"$py" -m azjax.cli.export "$run" --out "$out/model.azjax" --resumable
cp "$run/metrics.jsonl" "$out/metrics.jsonl"

step "curve: $out/curve.png"
"$py" "$root/scripts/plot.py" "$run" --out "$out/curve.png" --x elapsed_minutes

if [[ ${SOLVER:-1} != 0 ]]; then
    step "solver: the model against perfect play"
    "$py" -m azjax.cli.evaluate --solver "search:$out/model.azjax" --json "$out/solver.json" \
        --quiet || echo "fresh_machine.sh: no solver score (see above)"
fi
step "done: $(ls "$out" | tr '\n' ' ')"
