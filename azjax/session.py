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
) -> Callable[[State, jax.Array], tuple[np.ndarray, float, int]]:
    """`analyse(state, key) -> (policy[A], value, action)` by `analyst(spec)`: the value for
    the mover, the action the search chooses (the agent's move when `own_search(spec)`)."""
    analysis = agents.analysis(game, spec)

    def analyse(state: State, key: jax.Array) -> tuple[np.ndarray, float, int]:
        policy, value, action = analysis.searched(state, key)
        return np.asarray(policy, np.float64), float(value), int(action)

    return analyse


def own_search(spec: str) -> bool:
    """Whether the hints against `spec` are its own search: one compiled search plays its
    moves and analyses them."""
    parsed = agents.parse_spec(spec)
    pure = parsed.kind == "mcts" and parsed.number == agents.ANALYSIS_SIMULATIONS
    return pure or parsed.kind in ("search", "zoo")


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


_THREADS: dict[Any, threading.Thread] = {}  # background work by key, one at a time each
_THREADS_LOCK = threading.Lock()
_STOPPING = threading.Event()
_PREPARED: set[tuple[games.Game, str]] = set()  # agents compiled
_ANALYSED: set[tuple[games.Game, str]] = set()  # their analyses compiled
_LOCKS: collections.defaultdict[tuple[games.Game, str], threading.Lock] = collections.defaultdict(
    threading.Lock
)


def in_background(key: Any, work: Callable[[], object]) -> None:
    """Run `work` in a daemon thread unless one of the same `key` still runs (XLA compiles
    without the GIL); none starts once the interpreter exits."""
    with _THREADS_LOCK:
        if not _STOPPING.is_set() and not (key in _THREADS and _THREADS[key].is_alive()):
            _THREADS[key] = threading.Thread(target=work, daemon=True, name=str(key[0]))
            _THREADS[key].start()


@atexit.register
def _join_background() -> None:
    # A compile still running while the interpreter tears JAX down crashes the process.
    _STOPPING.set()
    for thread in list(_THREADS.values()):
        thread.join()


def prepared(game: games.Game, spec: str) -> bool:
    """Whether agent `spec` of `game` is compiled: its next move compiles nothing."""
    return (game, spec) in _PREPARED


def prepare(game: games.Game, spec: str, analyse: bool = False) -> None:
    """Compile agent `spec` and the rules by playing once, once per (game, spec): a second
    caller waits for the first. With `analyse`, an analysis that is not the agent's own
    search compiles in the background. ValueError as `compiled_agent`."""
    init, step = _rules(game)
    state, key = init(jax.random.key(0)), jax.random.key(0)
    own = own_search(spec)

    def analyse_once() -> None:
        try:
            compiled_analysis(game, spec)(state, key)
            _ANALYSED.add((game, spec))
        except ValueError:  # the agent's compile reports it
            pass

    if analyse and not own and (game, spec) not in _ANALYSED:
        in_background(("analysis", game, spec), analyse_once)
    with _LOCKS[game, spec]:
        if (game, spec) in _PREPARED:
            return
        play = (compiled_analysis if own else compiled_agent)(game, spec)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            moved = pool.submit(play, state, key)
            step(state, game.legal_actions(state)[0])
            moved.result()
        _PREPARED.add((game, spec))
        if own:
            _ANALYSED.add((game, spec))


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
        self.own = own_search(opponent)  # then `agent` gives (policy, value, action)
        self.agent = (compiled_analysis if self.own else compiled_agent)(game, opponent)
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
            if self.own:  # one search: the move and its analysis
                policy, value, action = self.agent(self.state, self._next_key())
                self.analysis = self._advice(policy, value) if analyse else None
            else:
                ready = analyse and (self.game, self.opponent) in _ANALYSED
                self.analysis = self.advice() if ready else None
                if analyse and not ready:  # the keys, and so the moves, as if analysed
                    self._next_key()
                action = self.agent(self.state, self._next_key())
            plies.append(self._push(action, "agent"))
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
        analyse = compiled_analysis(self.game, self.opponent)
        return self._advice(*analyse(self.state, self._next_key())[:2], top)

    def _advice(self, policy: np.ndarray, value: float, top: int = 3) -> Advice:
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
