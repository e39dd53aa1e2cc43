"""Agent specs (move choosers, azjax.agents) and model sources (trained networks,
azjax.model) as text, parsed and bounded without importing JAX:

    random | greedy | alphabeta:DEPTH | mcts:SIMS                          baselines
    policy:SOURCE | search:SOURCE[:SIMS] | zoo:NAME[:SIMS] | policy-zoo:NAME  trained networks
    SOURCE: WORKDIR (its newest checkpoint), WORKDIR@STEP, FILE.azjax or zoo:NAME
"""

from __future__ import annotations

import dataclasses
import re

SPEC_HELP = (
    "random, greedy, alphabeta:DEPTH, mcts:SIMS, policy:WORKDIR[@STEP], "
    "search:WORKDIR[@STEP][:SIMS], search:FILE.azjax[:SIMS], zoo:NAME[:SIMS] or policy-zoo:NAME"
)
SOURCE_HELP = "WORKDIR, WORKDIR@STEP, FILE.azjax or zoo:NAME"
MODEL_SUFFIX = ".azjax"  # an exported model file (azjax.export)
MAX_SIMULATIONS = 100_000  # a search tree holds SIMS + 1 nodes per game, on the device
MAX_DEPTH = 64  # alpha-beta keeps a stack of DEPTH positions
MAX_STEP = 2**31 - 1  # checkpoint iterations are int32 on the device
# STEP and SIMS: whatever follows the last "@" or ":" past the last "/", an integer or not
STEP_TAIL, SIMS_TAIL = r"(.*)@([^/@]*)", r"(.*):([^/:]*)"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A parsed agent spec."""

    kind: str  # random | greedy | alphabeta | mcts | policy | search | zoo | policy-zoo
    number: int | None = None  # depth, or simulations
    workdir: str | None = None  # a run directory or a model file (policy, search)
    step: int | None = None
    model: str | None = None  # a zoo model's name

    @property
    def source(self) -> str | None:
        """The model source of a spec naming a trained network (see azjax.model), else None."""
        if self.model is not None:
            return f"zoo:{self.model}"
        if self.workdir is None:
            return None
        return self.workdir if self.step is None else f"{self.workdir}@{self.step}"


@dataclasses.dataclass(frozen=True)
class Source:
    """A parsed model source: a run's checkpoint, a model file or a zoo model."""

    kind: str  # run | file | zoo
    path: str  # the run directory or model file; the model's name for zoo
    step: int | None = None  # a run's checkpoint; None: its newest


def check_simulations(number: int, what: str) -> int:
    """`number` if it is in [1, MAX_SIMULATIONS] simulations, else ValueError naming `what`."""
    if not 1 <= number <= MAX_SIMULATIONS:
        raise ValueError(f"{what} must be in [1, {MAX_SIMULATIONS}] simulations, got {number}")
    return number


def _bounded(text: str, low: int, high: int, label: str) -> tuple[int | None, str]:
    """(the integer `text`, "") when it is in [low, high], else (None, why)."""
    kind = "a positive integer" if low == 1 else f"an integer >= {low}"
    if not re.fullmatch(r"\d+", text) or int(text) < low:
        return None, f"needs {kind} {label}, got {text!r}"
    if int(text) > high:
        return None, f"needs {label} <= {high}, got {text}"
    return int(text), ""


def parse_source(text: str) -> Source:
    """Parse a model source; ValueError naming the bad part and the accepted forms."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"bad model source {text!r}: expected {SOURCE_HELP}")
    text = text.strip()
    if text.startswith("zoo:"):
        name = text.removeprefix("zoo:")
        if simulations := re.fullmatch(r"([\w.-]+):(\d+)", name):
            raise ValueError(source_takes_no_simulations(f"zoo:{simulations[1]}", simulations[2]))
        if not re.fullmatch(r"[\w.-]+", name):
            raise ValueError(f"bad model source {text!r}: zoo needs a model NAME; got {name!r}")
        return Source("zoo", name)
    path, step = text, None
    if match := re.fullmatch(STEP_TAIL, text):
        path, step_text = match.groups()
        step, why = _bounded(step_text, 0, MAX_STEP, "STEP")
        if step is None:
            raise ValueError(f"bad model source {text!r}: @STEP {why}")
        if not path:
            raise ValueError(f"bad model source {text!r}: no run directory before @{step}")
    if path.endswith(MODEL_SUFFIX):
        if step is not None:
            raise ValueError(f"bad model source {text!r}: a model file has one step: drop @{step}")
        return Source("file", path)
    return Source("run", path, step)


def source_takes_no_simulations(source: str, sims: str) -> str:
    """Why the model source `source:sims` is refused, naming the agent spec that takes SIMS."""
    spec = f"{source}:{sims}" if source.startswith("zoo:") else f"search:{source}:{sims}"
    return (
        f"bad model source '{source}:{sims}': a model source takes no SIMS, got {sims} "
        f"(the agent spec {spec} searches {source} with {sims} simulations)"
    )


def _no_simulations(kind: str, head: str, tail: str) -> str:
    """Why a `policy` or `policy-zoo` spec ending in `:tail` is refused, and what was meant."""
    searched = {"policy": "search", "policy-zoo": "zoo"}[kind]
    if re.fullmatch(r"\d+", tail):
        meant = f"{searched}:{head}:{tail} searches with {tail} simulations"
        why = f"{kind} takes no SIMS, got {tail}; {meant}"
    else:
        why = f"{kind} takes no SIMS, got {tail!r} after the last ':'"
    if kind == "policy":
        why += f" (a WORKDIR named {head}:{tail} is written {head}:{tail}/)"
    return why


def parse_spec(spec: str) -> Spec:
    """Parse an agent spec; ValueError naming the bad part and the accepted forms."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"bad agent spec {spec!r}: expected {SPEC_HELP}")
    text = spec.strip()
    kind, _, rest = text.partition(":")

    def bad(why: str) -> ValueError:
        return ValueError(f"bad agent spec {spec!r}: {why}; expected {SPEC_HELP}")

    def number_of(text: str, label: str, high: int, low: int = 1) -> int:
        number, why = _bounded(text, low, high, label)
        if number is None:
            raise bad(f"{kind} {why}")
        return number

    if kind in ("random", "greedy"):
        if rest:
            raise bad(f"{kind} takes no argument")
        return Spec(kind)
    if kind == "alphabeta":
        return Spec(kind, number=number_of(rest, "DEPTH", MAX_DEPTH))
    if kind == "mcts":
        return Spec(kind, number=number_of(rest, "SIMS", MAX_SIMULATIONS))
    number = None
    zoo = "zoo:" if kind in ("policy", "search") and rest.startswith("zoo:") else ""  # a SOURCE
    match = re.fullmatch(SIMS_TAIL, rest.removeprefix(zoo))
    if match and kind in ("search", "zoo"):
        rest, number = zoo + match.group(1), number_of(match.group(2), "SIMS", MAX_SIMULATIONS)
    elif match and kind in ("policy", "policy-zoo"):
        raise bad(_no_simulations(kind, zoo + match.group(1), match.group(2)))
    if kind in ("policy", "search"):
        step = None
        if match := re.fullmatch(STEP_TAIL, rest):
            rest, step = match.group(1), number_of(match.group(2), "STEP", MAX_STEP, 0)
        if not rest:
            raise bad(f"{kind} needs a run directory (WORKDIR)")
        if step is not None and rest.endswith(MODEL_SUFFIX):
            raise bad(f"a model file has one step: drop @{step}")
        return Spec(kind, number=number, workdir=rest, step=step)
    if kind in ("zoo", "policy-zoo"):
        if not re.fullmatch(r"[\w.-]+", rest):
            raise bad(f"{kind} needs a zoo model NAME (azjax-eval --zoo lists them), got {rest!r}")
        return Spec(kind, number=number, model=rest)
    raise bad(f"unknown agent kind {kind!r}")
