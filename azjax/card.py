"""Model cards: what a trained model is, how it was trained and how strong it plays.

A card holds the game and its size keywords, the network, the parameter count and storage
dtype, the search the model plays with by default, the training iteration, positions seen (the
sum of `replay/added` in the run's metrics.jsonl), wall-clock minutes (its `elapsed_minutes`),
the training command and device when given, and `strength`: figures filed from `azjax-eval
--json` results, empty at export. It travels inside the model file (azjax.export) and beside
it as `NAME.card.json`, for people to read.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

import azjax
import games
from azjax.config import Config, config_to_dict
from azjax.runlog import read_metrics
from azjax.specs import MODEL_SUFFIX, parse_spec

CARD_SUFFIX = ".card.json"
Params = Any


class ModelError(ValueError):
    """A model file that cannot be read or written, or figures that do not fit its card."""


def card_path(path: str | pathlib.Path) -> pathlib.Path:
    """Where the card of the model at `path` is written for people: `NAME.card.json`."""
    path = pathlib.Path(path)
    return path.with_name(path.name.removesuffix(MODEL_SUFFIX) + CARD_SUFFIX)


def make_card(
    config: Config,
    params: Params,
    name: str,
    iteration: int | None = None,
    *,
    positions_seen: int | None = None,
    wall_clock_minutes: float | None = None,
    command: str | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """A model card for `params` trained with `config`, with what is known of the run."""
    return {
        "name": name,
        "game": {"name": config.game.name, "kwargs": dict(config.game.kwargs)},
        "network": config_to_dict(config.network),
        "parameters": int(sum(np.size(x) for x in jax.tree.leaves(params))),
        "search": {
            "algorithm": config.search.algorithm,
            "simulations": config.playing_search().num_simulations,
        },
        "iteration": iteration,
        "positions_seen": positions_seen,
        "wall_clock_minutes": wall_clock_minutes,
        "command": command,
        "device": device,
        "azjax_version": azjax.__version__,
        "strength": {},
    }


def run_figures(workdir: pathlib.Path, step: int) -> dict[str, Any]:
    """Positions seen and wall-clock minutes up to iteration `step`, from metrics.jsonl."""
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return {"positions_seen": None, "wall_clock_minutes": None}
    records = {  # the last record of each iteration, final evaluations aside
        r["iteration"]: r
        for r in read_metrics(path)
        if not r.get("final") and isinstance(r.get("iteration"), int) and r["iteration"] <= step
    }
    positions = sum(int(r.get("replay/added", 0)) for r in records.values())
    minutes = records[step].get("elapsed_minutes") if step in records else None
    return {"positions_seen": positions if records else None, "wall_clock_minutes": minutes}


def card_game(card: Mapping[str, Any]) -> games.Game:
    """The game (and size) a card's model was trained for, as `games.make` returns it; ValueError
    for a game or size this azjax does not know."""
    return games.make(card["game"]["name"], **card["game"]["kwargs"])


def with_simulations(card: Mapping[str, Any], simulations: int) -> dict[str, Any]:
    """`card` playing with `simulations` by default, the old default named in the figures filed
    for it (`zoo:NAME` becomes `zoo:NAME:OLD`), so that each figure still names the search
    that earned it."""
    old = card["search"]["simulations"]
    strength = {}
    for key, figures in card.get("strength", {}).items():
        agent = figures.get("agent", "")
        try:
            spec = parse_spec(agent)
        except ValueError:
            spec = None
        renamed = spec is not None and spec.kind in ("zoo", "search") and spec.number is None
        if renamed and simulations != old:
            key = f"{agent}:{old}" + key.removeprefix(agent)
            figures = {**figures, "agent": f"{agent}:{old}"}
        strength[key] = figures
    return {**card, "search": {**card["search"], "simulations": simulations}, "strength": strength}


def strength_entry(result: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The card entry for one `azjax-eval --json` result: a match (the model as agent A) or a
    perfect-play accuracy, with the mistake rates in the Pons groups where it has them."""
    if isinstance(result.get("match"), Mapping):
        m = result["match"]
        keys = ("games", "distinct_games", "wins", "draws", "losses", "score", "ci95")
        opening = m.get("opening_moves", 0)
        key = f"{m['a']} vs {m['b']}" + (f", {opening} random opening plies" if opening else "")
        figures = {"agent": m["a"], "opening_moves": opening, **{k: m[k] for k in keys}}
        return key, figures
    if isinstance(result.get("accuracy"), Mapping):
        if result.get("interrupted"):  # the set's first positions: not a sample of it
            raise ModelError(
                f"the --solver result was interrupted after {result.get('positions')} of "
                f"{result.get('planned_positions')} positions; file a finished one"
            )
        a = result["accuracy"]
        keys = ("positions", "best_move", "keeps_result")
        key = f"{result['agent']} on the solver positions"
        pons = {"pons": result["pons"]} if "pons" in result else {}  # Connect4's six groups
        return key, {"agent": result["agent"], **{k: a[k] for k in keys}, **pons}
    raise ModelError(
        "expected an azjax-eval --json result of a match (--a MODEL --b OPPONENT) or of "
        f"--solver, got one with keys {sorted(result)}"
    )


def headline(card: Mapping[str, Any]) -> str:
    """The strength figures of a card in one line ("-" when none were recorded): those of the
    model as it plays by default (`zoo:NAME`) and of its raw policy (`policy-zoo:NAME`), with a
    count of the figures at other settings (other simulations) that the card also holds. Of
    the Pons mistake rates, the group with the most is shown."""
    figures = card.get("strength", {})
    name = card.get("name")
    default = {f"zoo:{name}": "", f"policy-zoo:{name}": "policy "}
    shown = {k: f for k, f in figures.items() if f.get("agent") in default} or figures
    parts = []
    raw_policy_last = sorted(
        shown.items(), key=lambda kv: kv[1].get("agent") == f"policy-zoo:{name}"
    )
    for key, f in raw_policy_last:
        who = default.get(f.get("agent"), f"{f.get('agent')} ")
        if "score" in f:
            opponent = key.split(" vs ", 1)[-1].split(",", 1)[0]
            plies = f.get("opening_moves", 0)
            opening = f", {plies} opening pl{'y' if plies == 1 else 'ies'}" if plies else ""
            parts.append(f"{who}vs {opponent} {f['score']:.1%} of {f['games']}{opening}")
        elif "best_move" in f:
            kept = f", result kept {f['keeps_result']:.1%}" if "keeps_result" in f else ""
            groups = f.get("pons", {}).items()  # the Pons group with the most mistakes
            worst = max(groups, key=lambda kv: kv[1]["mistake_rate"], default=None)
            pons = f", Pons {worst[0]} {worst[1]['mistake_rate']:.1%} mistakes" if worst else ""
            parts.append(f"{who}solver best move {f['best_move']:.1%}{kept}{pons}")
    if len(shown) < len(figures):
        parts.append(f"{len(figures) - len(shown)} more in the card")
    return "; ".join(parts) or "-"
