"""A game between a person and an agent: the person's moves, the agent's replies, undo and hints.

The terminal (`azjax-play`) and the browser (`azjax.web`) play through `Session`. Agents and
analyses are made once per (game, spec) in small LRU caches; parameters are arguments of the
compiled functions, so all checkpoints of one network shape share one compilation.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import games
from azjax import agents, zoo
from games import IllegalMoveError

State = Any
FALLBACK_OPPONENT = "mcts:200"  # the default opponent of a game the zoo has no model for
_jit = functools.cache(jax.jit)  # one per move function: bounded by the agent kinds


@functools.lru_cache(maxsize=16)
def compiled_agent(game: games.Game, spec: str) -> Callable[[State, jax.Array], int]:
    """`agent(state, key) -> action`; ValueError for a bad spec or a checkpoint's wrong game."""
    agent = agents.make(spec, game)
    fn = _jit(agent.fn)
    return lambda state, key: int(fn(agent.params, state, key))


@functools.lru_cache(maxsize=16)
def compiled_analysis(
    game: games.Game, spec: str
) -> Callable[[State, jax.Array], tuple[np.ndarray, float]]:
    """`analyse(state, key) -> (policy[A], value)` by `analyst(spec)`, value for the mover."""
    analysis = agents.analysis(game, spec)

    def analyse(state: State, key: jax.Array) -> tuple[np.ndarray, float]:
        policy, value = analysis(state, key)
        return np.asarray(policy, np.float64), float(value)

    return analyse


def analyst(spec: str) -> str:
    """Who gives the hints against `spec`: its network with search, else pure MCTS."""
    parsed = agents.parse_spec(spec)
    if parsed.workdir is not None:
        at = "" if parsed.step is None else f"@{parsed.step}"
        return f"the network of {parsed.workdir}{at} with search"
    if parsed.model is not None:
        return f"the zoo model {parsed.model} with search"
    return f"pure MCTS with {agents.ANALYSIS_SIMULATIONS} simulations"


def default_opponent(game: games.Game) -> str:
    """`zoo:NAME` when the zoo has a model for `game`, else FALLBACK_OPPONENT."""
    name = zoo.default(game)
    return FALLBACK_OPPONENT if name is None else f"zoo:{name}"


_PREPARED: set[tuple[games.Game, str]] = set()  # agents compiled
_ANALYSED: set[tuple[games.Game, str]] = set()  # their analyses compiled
_ANALYSING: dict[tuple[games.Game, str], threading.Thread] = {}
_LOCKS: collections.defaultdict[tuple[games.Game, str], threading.Lock] = collections.defaultdict(
    threading.Lock
)


def prepared(game: games.Game, spec: str) -> bool:
    """Whether agent `spec` of `game` is compiled: its next move compiles nothing."""
    return (game, spec) in _PREPARED


def prepare(game: games.Game, spec: str, analyse: bool = False) -> None:
    """Compile agent `spec` and the rules by playing once, once per (game, spec): a second
    caller waits for the first. With `analyse`, the analysis compiles in a thread not waited
    for (XLA compiles without the GIL). ValueError as `compiled_agent`."""
    init, step = _rules(game)
    state, key = init(jax.random.key(0)), jax.random.key(0)

    def analyse_once() -> None:
        try:
            compiled_analysis(game, spec)(state, key)
            _ANALYSED.add((game, spec))
        except ValueError:  # the agent's compile reports it
            pass

    with _LOCKS[game, spec]:
        if analyse and (game, spec) not in _ANALYSING:
            _ANALYSING[game, spec] = threading.Thread(target=analyse_once, daemon=True)
            _ANALYSING[game, spec].start()
        if (game, spec) in _PREPARED:
            return
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            moved = pool.submit(compiled_agent(game, spec), state, key)
            step(state, game.legal_actions(state)[0])
            moved.result()
        _PREPARED.add((game, spec))


@atexit.register
def _finish_analyses() -> None:
    # A compile still running while the interpreter tears JAX down crashes the process.
    for thread in list(_ANALYSING.values()):
        thread.join()


@functools.cache
def _rules(game: games.Game) -> tuple[Callable[[jax.Array], State], Callable[[State, int], State]]:
    return jax.jit(game.init), jax.jit(game.step)


@dataclasses.dataclass(frozen=True)
class Ply:
    """One move played: by player 0/1, the action, its notation, by "human" or "agent"."""

    player: int
    action: int
    notation: str
    by: str


@dataclasses.dataclass(frozen=True)
class Advice:
    """Top moves as (notation, search share), the mover's value (-1..+1) and its `analyst`."""

    moves: tuple[tuple[str, float], ...]
    value: float
    source: str


class Session:
    """A game between a person (playing `human`, 0 or 1) and an agent given by its spec."""

    def __init__(self, game: games.Game, opponent: str, human: int, seed: int = 0) -> None:
        if human not in (0, 1):
            raise ValueError(f"human must be player 0 or 1, got {human!r}")
        self.game, self.opponent, self.human = game, opponent, human
        self.agent = compiled_agent(game, opponent)
        self.analyst = analyst(opponent)
        init_key, self._key = jax.random.split(jax.random.key(seed))
        self.states: list[State] = [_rules(game)[0](init_key)]
        self.plies: list[Ply] = []
        self.analysis: Advice | None = None

    @property
    def state(self) -> State:
        return self.states[-1]

    @property
    def over(self) -> bool:
        return bool(self.state.terminated)

    @property
    def human_to_move(self) -> bool:
        return not self.over and int(self.state.current_player) == self.human

    def _next_key(self) -> jax.Array:
        self._key, key = jax.random.split(self._key)
        return key

    def _push(self, action: int, by: str) -> Ply:
        state, game = self.state, self.game
        if action not in game.legal_actions(state):
            game.checked_step(state, action)  # raises the game's IllegalMoveError
        ply = Ply(int(state.current_player), action, game.format_action(action), by)
        self.states.append(_rules(game)[1](state, action))
        self.plies.append(ply)
        return ply

    def play(self, action: int) -> Ply:
        """The person's move (IllegalMoveError when illegal or not their turn)."""
        if not self.human_to_move:
            raise IllegalMoveError("it is not your turn" if not self.over else "the game is over")
        return self._push(int(action), "human")

    def reply(self, analyse: bool = False) -> list[Ply]:
        """The agent's moves until the person's turn or the end; with `analyse`, `analysis` is
        that of the position before its last move (None while the analysis compiles)."""
        plies = []
        if not self.over and not self.human_to_move:
            prepare(self.game, self.opponent, analyse)
        while not self.over and not self.human_to_move:
            if analyse and (self.game, self.opponent) in _ANALYSED:
                self.analysis = self.advice()
            elif analyse:  # not compiled yet: the move now, the analysis from a later one on
                self._next_key()  # the keys, and so the moves, as if analysed
                self.analysis = None
            plies.append(self._push(self.agent(self.state, self._next_key()), "agent"))
        return plies

    def undo(self) -> bool:
        """Take back the person's last move and the replies to it; False if none."""
        mine = [i for i, p in enumerate(self.plies) if p.by == "human"]
        if not mine:
            return False
        del self.plies[mine[-1] :]
        del self.states[mine[-1] + 1 :]
        self.analysis = None
        return True

    def advice(self, top: int = 3) -> Advice:
        """`analyst`'s analysis of the current position: its `top` moves (those of 1% or more)."""
        policy, value = compiled_analysis(self.game, self.opponent)(self.state, self._next_key())
        order = np.argsort(-policy, kind="stable")[:top]
        order = [a for a in order if policy[a] >= 0.01] or list(order[:1])  # drop the noise
        moves = tuple((self.game.format_action(int(a)), float(policy[a])) for a in order)
        return Advice(moves, value, self.analyst)

    def result(self) -> str | None:
        """ "win", "loss" or "draw" from the person's view once the game is over, else None."""
        if not self.over:
            return None
        reward = float(self.state.rewards[self.human])
        return "win" if reward > 0 else "loss" if reward < 0 else "draw"

    def record(self) -> dict[str, Any]:
        """The game as JSON-able data (`scripts/replay.py --record` reads it)."""
        return {"game": self.game.name, "moves": [p.notation for p in self.plies]}
