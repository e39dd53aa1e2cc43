#!/usr/bin/env bash
# One piece of a run on a fresh machine (a rented or preemptible GPU, a Colab runtime): bench
# self-play, train for a few minutes, export the model, draw its curve and score it against
# perfect play, leaving under OUT what the next piece and a person need.
#
#   scripts/fresh_machine.sh CONFIG OUT [MINUTES] [KEY=VALUE ...]
#
#   MINUTES    training's wall clock (default 8); then SIGTERM stops it as Ctrl-C does, saving a
#              checkpoint (a shell's background jobs ignore SIGINT; none ignores SIGTERM).
#              Ctrl-C (or SIGTERM to this script) stops training early the same way: what it
#              trained is still exported, the solver's score is skipped, and the exit status is 130
#   KEY=VALUE  config overrides, e.g. train.init_from=OUT_BEFORE/model.azjax to continue a run
#
# OUT receives bench.json, model.azjax, metrics.jsonl, curve.png and, where `azjax-eval
# --solver` has a position set for the game, solver.json. The run directory is a temporary
# folder, removed at the end (its checkpoints hold the whole replay buffer; it stays where
# training or the export failed, or the terminal closed); model.azjax is exported resumable,
# so the next piece, given train.init_from=OUT/model.azjax, continues the run where this one
# stopped (docs/training.md). BENCH=0 or SOLVER=0 skip those steps; PYTHON picks the
# interpreter (default: the checkout's .venv/bin/python, which `make train` makes, else
# python3). Runs from a checkout without installing azjax (its dependencies installed).
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,/^set /{/^#/p;}' "$0" | sed 's/^# \{0,1\}//' >&2
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
[[ -z ${PYTHON:-} && -x $root/.venv/bin/python ]] && py=$root/.venv/bin/python
if ! missing=$("$py" -c 'import jax, flax, mctx, optax, orbax.checkpoint' 2>&1); then
    echo "fresh_machine.sh: $py cannot run azjax (${missing##*$'\n'}): run \`make train\` once" \
        "(it makes .venv), or set PYTHON to an interpreter with azjax's dependencies" >&2
    exit 2
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
tmp=$(mktemp -d) run=$tmp/run
trap 'rm -rf "$tmp"' EXIT
# Kept where training may still want it: a failed training or export (said), and a closed
# terminal (SIGHUP: training, in a process group of its own, runs on into it).
keep() { trap - EXIT; echo "fresh_machine.sh: the run stays in $run" >&2; }
trap 'trap - EXIT; exit 129' HUP
step() { echo "== $(date -u +%H:%M:%S) $*"; }

if [[ ${BENCH:-1} != 0 ]]; then
    step "bench: self-play at the config's game, net, batch and simulations"
    read -r -a grid < <("$py" - "$config" "$@" <<'EOF'
import sys
from azjax.config import load_config
c = load_config(sys.argv[1], sys.argv[2:])
n = c.network
print(f"--games {c.game.name} --nets {n.blocks}x{n.channels} --dtype {n.dtype}"
      f" --batches {c.selfplay.batch_size} --sims {c.search.num_simulations}"
      f" --algorithms {c.search.algorithm} --chunk-moves {c.selfplay.chunk_moves}")
EOF
)
    "$py" "$root/scripts/bench.py" selfplay "${grid[@]}" --chunks 2 --no-plain --out "$out/bench.json"
fi

step "train: $minutes minutes of $config (Ctrl-C stops it early and keeps what it learned)"
# timeout runs training in a process group of its own, which a terminal's Ctrl-C does not reach:
# this script passes a Ctrl-C or SIGTERM on as one SIGTERM (a second stops training at once),
# waiting in the background, as bash runs a trap only once a foreground command has ended.
# The run directory goes when this script ends: training's "rerun the same command to resume"
# would send a person to it, so the next piece's line (at the end) is named instead.
hint='s/rerun the same command to resume/the next piece continues from the exported model/'
timeout -s TERM -k 120 "${minutes}m" "$py" -m azjax.cli.train --config "$config" --workdir "$run" \
    --quiet "$@" > >(trap '' INT; exec sed -u "$hint") 2> >(trap '' INT; exec sed -u "$hint" >&2) &
training=$! interrupted=0
trap 'interrupted=1; kill -TERM "$training" 2>/dev/null || true' INT TERM
status=
while [[ -z $status ]]; do
    wait "$training" && status=0 || status=$?
    # A wait broken off by the trap: training is still stopping, wait for its own status.
    if ((status > 128)) && kill -0 "$training" 2>/dev/null; then status=; fi
done
trap - INT TERM
saved=("$run"/checkpoints/[0-9]*)  # the steps saved (the pattern itself where none is)
if [[ ! -e ${saved[0]} ]] && ((interrupted)); then
    echo "fresh_machine.sh: interrupted before training's first checkpoint" >&2
    exit 130
fi
# 124: stopped by the clock; 130: by a signal (one sent to training itself); in both a
# checkpoint was saved, unless the stop came before the first one. Stopped here: whatever
# training's status, its newest checkpoint is exported.
if [[ $status -ne 0 && $status -ne 124 && $status -ne 130 ]] && ! ((interrupted)); then
    echo "fresh_machine.sh: training failed (exit $status)" >&2
    keep
    exit "$status"
fi
if [[ ! -e ${saved[0]} ]]; then
    if [[ $status -eq 124 ]]; then
        echo "fresh_machine.sh: the clock ($minutes minutes) ran out before training's first" \
            "checkpoint (compilation and the first iteration): give it more MINUTES" >&2
    else
        echo "fresh_machine.sh: training stopped (exit $status) before its first checkpoint" >&2
    fi
    exit 1
fi

step "export: $out/model.azjax"
"$py" -m azjax.cli.export "$run" --out "$out/model.azjax" --resumable || {
    echo "fresh_machine.sh: export failed" >&2
    keep
    exit 1
}
cp "$run/metrics.jsonl" "$out/metrics.jsonl"

step "curve: $out/curve.png"
"$py" "$root/scripts/plot.py" "$run" --out "$out/curve.png" --x elapsed_minutes

if ((interrupted)); then
    step "solver: skipped (interrupted)"
elif [[ ${SOLVER:-1} != 0 ]]; then
    step "solver: the model against perfect play"
    "$py" -m azjax.cli.evaluate --solver "search:$out/model.azjax" --json "$out/solver.json" \
        --quiet || echo "fresh_machine.sh: no solver score (see above)"
fi
step "done: $(ls "$out" | tr '\n' ' ')"
echo "the next piece: $0 $config OUT_NEXT MINUTES [the same KEY=VALUE ...]" \
    "train.init_from=$out/model.azjax"
if ((interrupted)); then
    exit 130
fi
