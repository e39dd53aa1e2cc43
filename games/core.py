"""The game contract shared by every game: the `Game` base class, symmetries, text helpers.

A game is an immutable object whose methods are pure functions over a small State pytree:

    state = game.init(key)               # jax PRNG key
    state = game.step(state, action)     # int32 action; jit- and vmap-able
    obs = game.observe(state)            # float32 [H, W, C] from the mover's point of view

Every game's State subclasses `State` here, which declares the fields all of them carry:
`current_player` (int32, 0 or 1), `legal_action_mask` (bool[num_actions], all False once
terminated), `terminated` (bool) and `rewards` (float32[2], each player's reward for the
transition into this state).

`Game.step` implements the rules every game shares: stepping a terminated state returns it
unchanged with zero rewards, and an illegal (or out-of-range) action makes the mover lose.
Subclasses implement `_apply`, the effect of a legal action on a live state. Every public
function is safe to call eagerly in a loop (see `eager_jit`).

Chance. A game with dice sets `chance_outcomes` above 1 and splits a move in two: `afterstate`
plays the move and stops before the chance event that follows it (the roll), `chance_probs`
gives the outcomes' probabilities there and `step_chance` applies one. `step` plays both, the
outcome drawn from a key the State carries. Search steps `afterstate` and `step_chance`, so it
never reads a roll to come. Deterministic games need nothing: one certain outcome that changes
nothing, and `afterstate` is `step`.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

if TYPE_CHECKING:
    from games.svg import Picture

Array = jax.Array


@struct.dataclass
class State:
    """The fields every game's State has; a game's State subclasses this and adds its board."""

    current_player: Array  # int32, 0 or 1
    legal_action_mask: Array  # bool[num_actions], all False once terminated
    terminated: Array  # bool
    rewards: Array  # float32[2]: each player's reward for the transition into this state


def mover_rewards(mover: Array, reward: Array) -> Array:
    """float32[2]: `reward` for `mover` and its negation for the other player."""
    return jnp.where(jnp.arange(2) == mover, reward, -reward).astype(jnp.float32)


def discount(state: State, child: State) -> Array:
    """float32 discount of the edge `state` -> `child`: 0 into a final state, +1 when the same
    player moves again, -1 when the player to move changes."""
    same = child.current_player == state.current_player
    return jnp.where(child.terminated, 0.0, jnp.where(same, 1.0, -1.0)).astype(jnp.float32)


def player_planes(obs: Array, state: State, player: Array) -> tuple[Array, Array]:
    """(own, opponent) planes of `player` from an observation whose planes 0 and 1 are the
    mover's and the opponent's pieces."""
    same = state.current_player == player
    return jnp.where(same, obs[..., 0], obs[..., 1]), jnp.where(same, obs[..., 1], obs[..., 0])


class IllegalMoveError(ValueError):
    """A move typed by a person (or passed to `Game.checked_step` or `Game.format_action`) that
    is not legal here, or not an action of the game at all."""


def tree_where(pred: Array, on_true: State, on_false: State) -> State:
    """Select between two pytrees of identical structure with a scalar boolean."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def random_legal_action(key: Array, legal: Array) -> Array:
    """A uniformly random legal action (0 when none is legal)."""
    logits = jnp.where(legal, 0.0, -jnp.inf)
    return jnp.where(legal.any(), jax.random.categorical(key, logits), 0).astype(jnp.int32)


def eager_jit(method: Callable) -> Callable:
    """A game method that, called eagerly, runs as one `jax.jit` compiled once per game and
    argument shapes; under a transformation (jit, vmap, scan...) it is traced inline as before.

    Why: eager JAX runs a function op by op, and an op that carries functions of its own (a
    `lax.scan` or `while_loop` body, `lax.platform_dependent` branches, a `custom_vmap`) is
    traced from the Python function it is given and compiled, the executable kept in JAX's
    per-op cache (4096 entries) keyed by that trace. Game code builds such functions afresh on
    every call (closures over the state), so every eager Othello or Chain Reaction call compiled
    new programs and kept them: hundreds of MB per hundred calls. Compiled as a whole, the
    method's trace is cached once per game and shapes.
    """
    jitted = jax.jit(method, static_argnums=0)

    @functools.wraps(method)
    def call(self: Game, *args: Any) -> Any:
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(args)):
            return method(self, *args)
        return jitted(self, *args)

    return call


# ----------------------------------------------------------------------------- symmetries


@dataclasses.dataclass(frozen=True, eq=False)
class Symmetry:
    """One symmetry of a game as index maps ("gathers") over board cells and actions.

    `cell_source[i]` is the flat cell (row * width + col) whose contents land in cell `i`;
    `action_source[j]` is the action whose probability lands on action `j`. Both are plain
    numpy arrays so that the replay buffer can stack them and gather a random element per
    sample in one op.
    """

    name: str
    height: int
    width: int
    cell_source: np.ndarray  # int32 [H * W]
    action_source: np.ndarray  # int32 [num_actions]

    @property
    def action_map(self) -> np.ndarray:
        """`action_map[a]` is the image of action `a` under this symmetry."""
        return np.argsort(self.action_source).astype(np.int32)

    def observation(self, obs: Array) -> Array:
        """Transform observations of shape [..., H, W, C]."""
        lead, channels = obs.shape[:-3], obs.shape[-1]
        flat = obs.reshape((*lead, self.height * self.width, channels))
        return jnp.take(flat, jnp.asarray(self.cell_source), axis=-2).reshape(obs.shape)

    def policy(self, policy: Array) -> Array:
        """Transform a distribution (or mask, or logits) over actions, shape [..., A]."""
        return jnp.take(policy, jnp.asarray(self.action_source), axis=-1)

    def action(self, action: Array) -> Array:
        """The image of an action (int32)."""
        return jnp.asarray(self.action_map)[action]


_DIHEDRAL = {
    "identity": lambda g: g,
    "rot90": lambda g: np.rot90(g, 1),
    "rot180": lambda g: np.rot90(g, 2),
    "rot270": lambda g: np.rot90(g, 3),
    "flip_lr": lambda g: g[:, ::-1],
    "flip_ud": lambda g: g[::-1, :],
    "transpose": lambda g: g.T,
    "anti_transpose": lambda g: np.rot90(g, 2).T,
}


def dihedral_names(height: int, width: int) -> tuple[str, ...]:
    """The dihedral transforms that map an H x W grid onto itself (8 if square, else 4)."""
    if height == width:
        return tuple(_DIHEDRAL)
    return ("identity", "rot180", "flip_lr", "flip_ud")


def grid_symmetries(
    action_grid: np.ndarray, num_actions: int, names: Sequence[str] | None = None
) -> tuple[Symmetry, ...]:
    """Symmetries of a game whose observation lives on the grid of `action_grid`.

    `action_grid[r, c]` is the action that belongs to cell (r, c), or -1 for none; an action
    may own several cells (Connect4: a column) as long as the transform maps them
    consistently. Actions owning no cell (Othello's pass) map to themselves. `names` picks the
    transforms the rules allow, "identity" first, from "identity", "rot90", "rot180",
    "rot270", "flip_lr" (mirror left-right), "flip_ud" (upside down), "transpose" and
    "anti_transpose"; None takes all that map the grid onto itself (`dihedral_names`: 8 on a
    square, 4 otherwise). Connect4 allows only ("identity", "flip_lr"): gravity has a
    direction. ValueError when a transform splits an action's cells.
    """
    action_grid = np.asarray(action_grid)
    height, width = action_grid.shape
    cells = np.arange(height * width).reshape(height, width)
    out = []
    for name in names or dihedral_names(height, width):
        transform = _DIHEDRAL[name]
        cell_source = np.ascontiguousarray(transform(cells)).reshape(-1).astype(np.int32)
        action_map = np.arange(num_actions)
        for a in range(num_actions):
            owned = action_grid == a
            if not owned.any():
                continue
            images = np.unique(action_grid[np.ascontiguousarray(transform(owned))])
            if len(images) != 1:
                raise ValueError(f"{name} does not map action {a} onto a single action")
            action_map[a] = images[0]
        action_source = np.argsort(action_map).astype(np.int32)
        out.append(Symmetry(name, height, width, cell_source, action_source))
    return tuple(out)


def stack_symmetries(symmetries: Sequence[Symmetry]) -> tuple[np.ndarray, np.ndarray]:
    """[G, H*W] cell sources and [G, A] action sources, for a random element per sample."""
    return (
        np.stack([s.cell_source for s in symmetries]),
        np.stack([s.action_source for s in symmetries]),
    )


# ----------------------------------------------------------------------------- text


def render_grid(
    board: np.ndarray,
    symbols: dict[int, str] | None = None,
    col_labels: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
) -> str:
    """A text picture of a signed integer board (player 0 positive, player 1 negative).

    Without `symbols`, a cell shows its count with the owner's mark (`2x`, `3o`), as Chain
    Reaction needs; with `symbols`, each value maps to a one-character mark.
    """
    board = np.asarray(board)
    height = board.shape[0]

    def cell(v: int) -> str:
        if symbols is not None:
            return symbols[int(v)]
        return "." if v == 0 else f"{abs(int(v))}{'x' if v > 0 else 'o'}"

    cells = [[cell(v) for v in row] for row in board]
    w = max(len(c) for row in cells for c in row)
    if col_labels is not None:
        w = max(w, *(len(c) for c in col_labels))
    rw = max((len(r) for r in row_labels), default=0) if row_labels is not None else 0
    lines = []
    if col_labels is not None:
        lines.append(" " * (rw + 1 if rw else 0) + " ".join(c.rjust(w) for c in col_labels))
    for r in range(height):
        prefix = row_labels[r].rjust(rw) + " " if row_labels is not None else ""
        lines.append(prefix + " ".join(c.rjust(w) for c in cells[r]))
    return "\n".join(lines)


def letters(n: int) -> list[str]:
    """Column letters a, b, c, ... for notation and rendering."""
    return [chr(ord("a") + i) for i in range(n)]


# ----------------------------------------------------------------------------- base class


class Game(abc.ABC):
    """Base class of every game. Instances are immutable and hashable, so jit can close over them.

    Subclasses set `name` (a class attribute, read by `games.register`), and `num_actions`,
    `observation_shape`, `max_game_length` in `__init__`, and implement
    `init`, `_apply`, `observe`, `board`, `render`, `symmetries`, `_parse` and `format_action`.
    A subclass's `init`, `observe`, `board`, `chance_probs` and `step_chance` are wrapped in
    `eager_jit`, as `step` is here.

    Everything else particular to a game has a default here, so a new game needs none of it:
    `heuristic` (0), `players`, `colours`, `marks`, `move_order` (natural order), `sizes` ({})
    and the picture `draw` (a grid of `board`).
    """

    name: ClassVar[str]
    num_actions: int
    observation_shape: tuple[int, int, int]
    max_game_length: int  # proven upper bound on the moves of one game

    # Size keywords of the constructor -> (min, max); the constructor's defaults are the defaults.
    sizes: ClassVar[dict[str, tuple[int, int]]] = {}
    players: tuple[str, str] = ("Player 1", "Player 2")  # names shown to people
    colours: tuple[str, str] = ("#d1495b", "#2e86ab")  # CSS colours of the players' pieces
    marks: tuple[str, str] = ("X", "O")  # the players' marks in `render`
    chance_outcomes: ClassVar[int] = 1  # outcomes of the chance event after a move; 1: none

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("init", "observe", "board", "chance_probs", "step_chance"):
            if name in vars(cls):
                setattr(cls, name, eager_jit(vars(cls)[name]))

    # -- pure functions ------------------------------------------------------------------

    @abc.abstractmethod
    def init(self, key: Array) -> State:
        """The start position. Player 0 moves first."""

    @abc.abstractmethod
    def _apply(self, state: State, action: Array) -> State:
        """The effect of a legal `action` on a non-terminated state (rewards set for it)."""

    @abc.abstractmethod
    def observe(self, state: State) -> Array:
        """float32 planes [H, W, C] from the point of view of the player to move."""

    def _new_game(self, state_type: type, **board: Array) -> State:
        """A fresh `state_type` with the given board fields: player 0 to move, every action
        legal, no rewards yet."""
        return state_type(
            current_player=jnp.int32(0),
            legal_action_mask=jnp.ones(self.num_actions, jnp.bool_),
            terminated=jnp.bool_(False),
            rewards=jnp.zeros(2, jnp.float32),
            **board,
        )

    def step(self, state: State, action: Array | int) -> State:
        """Play `action`, one integer of any integer type. Terminated states are returned
        unchanged with zero rewards; an illegal or out-of-range action ends the game with the
        mover losing (-1 / +1). A batch of states (use `jax.vmap(game.step)`) and non-integer
        actions are refused: eagerly at once, under a transformation at trace time."""
        self._one_state(state, "for a batch, use jax.vmap(game.step)")
        if not isinstance(action, jax.core.Tracer):
            value = self._integer(action)
            action = np.int32(value if 0 <= value < self.num_actions else -1)
        return self._step(state, action)

    @eager_jit
    def _step(self, state: State, action: Array) -> State:
        return self._ruled(state, action, self._apply)

    def _ruled(self, state: State, action: Array, apply: Callable) -> State:
        """`apply(state, action)` under the rules every game shares (see `step`)."""
        action = jnp.asarray(action)
        if action.ndim or not jnp.issubdtype(action.dtype, jnp.integer):
            raise TypeError(
                f"expected one integer action 0-{self.num_actions - 1} of {self.name}, got a "
                f"traced {action.dtype} array of shape {action.shape}"
                + ("; for a batch, use jax.vmap(game.step)" if action.ndim else "")
            )
        if action.dtype.itemsize < 4:
            action = action.astype(jnp.int32)  # every value of a narrower type fits
        # Compared in the action's own type: cast first, 2**33 would wrap to a legal 0.
        in_range = (action >= 0) & (action < self.num_actions)
        safe = jnp.clip(action, 0, self.num_actions - 1).astype(jnp.int32)
        legal = in_range & state.legal_action_mask[safe]
        played = apply(state, safe)
        mover = state.current_player
        forfeit = state.replace(
            terminated=jnp.bool_(True),
            legal_action_mask=jnp.zeros_like(state.legal_action_mask),
            rewards=jnp.where(jnp.arange(2) == mover, -1.0, 1.0).astype(jnp.float32),
        )
        done = state.replace(rewards=jnp.zeros_like(state.rewards))
        return tree_where(state.terminated, done, tree_where(legal, played, forfeit))

    # -- chance --------------------------------------------------------------------------

    @property
    def has_chance(self) -> bool:
        """Whether a move may be followed by a chance event (`chance_outcomes` > 1)."""
        return self.chance_outcomes > 1

    def afterstate(self, state: State, action: Array | int) -> State:
        """`step` stopped after the move and before the chance event that follows it, whose
        outcome is not drawn: `step(state, action)` is `step_chance(afterstate(state, action),
        o)` for an outcome `o` of `chance_probs`. The rules of `step` hold (a finished game is
        unchanged, an illegal action loses). Deterministic games: `step`."""
        if not self.has_chance:
            return self.step(state, action)
        self._one_state(state, "for a batch, use jax.vmap(game.afterstate)")
        if not isinstance(action, jax.core.Tracer):
            value = self._integer(action)
            action = np.int32(value if 0 <= value < self.num_actions else -1)
        return self._afterstate(state, action)

    @eager_jit
    def _afterstate(self, state: State, action: Array) -> State:
        return self._ruled(state, action, self._apply_move)

    def _apply_move(self, state: State, action: Array) -> State:
        """Games with chance: the effect of a legal `action` on a live state, before the chance
        event (`_apply` is this followed by a drawn outcome)."""
        raise NotImplementedError(f"{self.name} has chance_outcomes > 1 but no _apply_move")

    def chance_probs(self, afterstate: State) -> Array:
        """float32[chance_outcomes]: the probabilities of the chance outcomes at `afterstate`,
        summing to one; all on outcome 0 where no event follows the move (the mover moves
        again, or the game is over)."""
        del afterstate
        return jnp.ones(self.chance_outcomes, jnp.float32)

    def step_chance(self, afterstate: State, outcome: Array | int) -> State:
        """The State after chance `outcome` (int32) at `afterstate`; with no event due, the
        afterstate itself."""
        del outcome
        return afterstate

    # -- for people and tests (host side) ----------------------------------------------

    def heuristic(self, state: State, player: Array) -> Array:
        """float32 static evaluation of a live state from `player`'s view (larger is better,
        far below `azjax.agents.WIN`); the `greedy` and `alphabeta` baselines' leaf value."""
        del state, player
        return jnp.float32(0.0)

    def move_order(self) -> np.ndarray:
        """int32[num_actions]: the order in which alpha-beta tries moves below its root."""
        return np.arange(self.num_actions, dtype=np.int32)

    @abc.abstractmethod
    def board(self, state: State) -> Array:
        """The board as a signed integer array: player 0 positive, player 1 negative."""

    @abc.abstractmethod
    def render(self, state: State) -> str:
        """A text picture of the position."""

    @property
    @abc.abstractmethod
    def symmetries(self) -> tuple[Symmetry, ...]:
        """The symmetries of this board, identity first, as observation/action index maps."""

    @abc.abstractmethod
    def _parse(self, text: str) -> int:
        """The action named by `text` in human notation; raise ValueError if malformed."""

    @abc.abstractmethod
    def format_action(self, action: int) -> str:
        """The human notation of an action."""

    def notation_help(self) -> str:
        """One line describing the move notation (shown with errors)."""
        return ""

    def counts(self, board: np.ndarray) -> tuple[int, int] | None:
        """What each player has on a `board` where people count it (discs, boxes, orbs), or
        None where nothing is counted."""
        del board
        return None

    def draw(
        self, board: np.ndarray, legal: np.ndarray, last_action: int | None, cell: float
    ) -> Picture:
        """The picture of a signed `board` with clickable `legal` moves and `last_action`
        marked (see games/svg.py). By default: a grid of the board's cells, each holding a
        disc of its owner's colour (its count inside when above 1); cell i is action i when
        the board has a cell per action (or per action but a last one, like a pass)."""
        from games import svg

        return svg.grid_picture(board, legal, last_action, cell, self.colours)

    def svg(self, state: State | None = None, viewer: int = 0, **options: Any) -> str:
        """The position as an SVG document; options as `games.svg.to_svg` (board,
        last_action, cell, clickable). `viewer`, the player looking at it, matters to pictures
        drawn for one side (pgx's Backgammon numbers its points for them)."""
        from games import svg

        return svg.to_svg(self, state, **options)

    def legal_actions(self, state: State) -> list[int]:
        """The legal actions of a state, as Python ints."""
        self._one_state(state, "pick one state of the batch")
        return [int(a) for a in np.flatnonzero(np.asarray(state.legal_action_mask))]

    def parse_action(self, text: str, state: State | None = None) -> int:
        """Parse a move in human notation, refusing malformed or (given `state`) illegal ones."""
        cleaned = text.strip().lower()
        try:
            action = self._parse(cleaned)
        except ValueError as err:
            raise IllegalMoveError(
                f"{text!r} is not a move in {self.name}: {err}. {self.notation_help()}".strip()
            ) from None
        if not 0 <= action < self.num_actions:
            raise IllegalMoveError(f"{text!r} is off the board in {self.name}.")
        if state is not None:
            self._check_legal(state, action, text)
        return action

    def checked_step(self, state: State, action: int) -> State:
        """`step` for host code: an illegal action raises IllegalMoveError (a non-integer one
        TypeError) instead of losing the game."""
        self._one_state(state, "pick one state of the batch")
        action = self._integer(action)
        in_range = 0 <= action < self.num_actions
        self._check_legal(state, action, self.format_action(action) if in_range else str(action))
        return self.step(state, action)

    def _integer(self, action: Any) -> int:
        """A concrete action as a Python int; anything but one integer is refused, named."""
        if isinstance(action, int) and not isinstance(action, bool):
            return int(action)
        value = np.asarray(action)
        if value.ndim == 0 and value.dtype.kind in "iu":
            return int(value)
        raise TypeError(
            f"expected one integer action 0-{self.num_actions - 1} of {self.name}, got {action!r}"
        )

    def _action_index(self, action: Any) -> int:
        """`action` as a Python int, refusing non-integers (TypeError) and integers that are
        not actions of this game (IllegalMoveError)."""
        value = self._integer(action)
        if not 0 <= value < self.num_actions:
            raise IllegalMoveError(
                f"{value} is not an action of {self.name}: expected 0-{self.num_actions - 1}"
            )
        return value

    def _one_state(self, state: State, batch_hint: str) -> None:
        """Refuse a batch of states where one is expected."""
        shape = jnp.shape(state.legal_action_mask)
        if shape != (self.num_actions,):
            raise ValueError(
                f"expected one {self.name} state (legal_action_mask of shape "
                f"({self.num_actions},)), got legal_action_mask of shape {shape}; {batch_hint}"
            )

    def _check_legal(self, state: State, action: int, text: str) -> None:
        if bool(state.terminated):
            raise IllegalMoveError(f"the {self.name} game is over; no move is legal.")
        if not 0 <= action < self.num_actions or not bool(state.legal_action_mask[action]):
            legal = "; ".join(self.format_action(a) for a in self.legal_actions(state))
            raise IllegalMoveError(f"{text!r} is not legal here. Legal moves: {legal}.")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
