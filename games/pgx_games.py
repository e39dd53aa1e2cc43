"""Two-player pgx environments as azjax games: `games.make("pgx:<env_id>")`.

pgx (https://github.com/sotetsuk/pgx) is an optional extra: `pip install 'azjax[pgx]'`.
`game_class(env_id)` builds one `PgxGame` subclass per environment, named `pgx:<env_id>`, so
that `games.register("pgx:hex", game_class("hex"))` lists it like any other game.

The wrapped pgx state rides in the State beside azjax's four fields. What differs from pgx:

- Players. pgx draws at `init` which player id moves first; azjax's player 0 always moves
  first. The State keeps `first`, pgx's id of player 0: player p is pgx's `p ^ first`.
- Rewards. pgx's final rewards are reduced to their sign (+1, -1 or 0): backgammon's gammons
  become a plain win or loss.
- Hidden information. Environments where a player holds private state (the poker games) are
  refused (`HIDDEN_INFORMATION`): the search reads the whole State it is given.
- Length. `max_game_length` is pgx's own step limit where it has one (Go, the chess and shogi
  games end there) or a bound from the rules (`MAX_GAME_LENGTH`); other environments get
  `DEFAULT_MAX_GAME_LENGTH`. A game still live at `max_game_length` moves, or one that pgx
  truncates, ends as a draw, so the bound holds for every environment.
- Chance. Backgammon declares its roll (`CHANCE`): the 21 rolls of two dice, a double at
  1/36 and any other at 2/36. `afterstate` plays a move with pgx and leaves the next turn's
  dice unrolled (`chance_due`); `step_chance` sets them; `step` draws them with the key
  `fold_in(key(seed), n)` after `n` moves, `seed` a uint32 drawn at `init`, so games are
  reproducible from the `init` key while a search, which steps `afterstate` and
  `step_chance`, never reads a roll to come.
- Views. Observations are pgx's (already from the mover's view) as float32; a flat one of N
  features is shaped (1, 1, N). Backgammon's are TD-Gammon's units instead of pgx's checker
  counts (`games.backgammon.features`). `board` is observation plane 0 minus plane 1, signed for
  player 0: the stones in tic_tac_toe, connect_four, hex, othello and go, whose planes 0 and 1
  are the mover's and the opponent's; a placeholder for the others. The heuristic is
  Backgammon's pip count lead (`HEURISTICS`), 0 for the others; there is no symmetry but the
  identity. `svg` is pgx's own drawing of the State.
- Backgammon follows the standard rules (`games.backgammon.standard_mask`): pgx checks each
  die on its own, so it let a turn leave a playable die unused or play the smaller die where
  only one could be. Player 0 is Black (pgx colours the first mover at random).
- Notation. Backgammon: one die's move in the mover's numbering (13/7, bar/22, 6/off). Hex,
  Tic-Tac-Toe, Othello and Go: cells a1.. (column letter, row from the top) and 'swap' (Hex) or
  'pass'. Connect Four: columns a-g. Chess and Gardner chess: squares from and to (e2e4) from
  the mover's side. Others: 'move' and pgx's action number (move17). `render` draws the
  board as text with the same names (Backgammon: the points, bar, checkers off and dice).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from games import PGX_PREFIX, core
from games.core import Array, Game, Symmetry, grid_symmetries, letters, render_grid


class MissingPgxError(ImportError, ValueError):
    """pgx is not installed. A ValueError too, as `games.make` raises for a game it cannot
    make, so that configs and command lines report it as they report an unknown game."""


try:
    import pgx
except ImportError as err:
    raise MissingPgxError(
        f"pgx games need pgx, an optional extra: pip install 'azjax[pgx]' ({err})"
    ) from err

from games import backgammon  # noqa: E402 (after pgx, whose absence is reported above)

# The longest game of an environment in moves: pgx's step limit, or a bound from the rules.
MAX_GAME_LENGTH = {
    "tic_tac_toe": 9,  # nine cells
    "connect_four": 42,  # 42 cells
    "hex": 122,  # 121 cells and one swap
    "othello": 121,  # 60 discs, and a pass is followed by a disc or ends the game (two passes)
    "go_9x9": 162,  # pgx: 2 * 9 * 9
    "go_19x19": 722,  # pgx: 2 * 19 * 19
    "animal_shogi": 256,  # pgx
    "gardner_chess": 256,  # pgx
    "chess": 512,  # pgx, after AlphaZero
    "shogi": 512,  # pgx, after AlphaZero
}
DEFAULT_MAX_GAME_LENGTH = 1000  # environments without a bound from the rules (backgammon)

# pgx environments of imperfect information, refused until the trainer has a method for them:
# search steps the State it is given, and pgx's State holds what one player must not see.
# pgx does not mark them, hence the table.
HIDDEN_INFORMATION = {
    "kuhn_poker": "each player's card is private",
    "leduc_holdem": "each player's private card is hidden from the other",
}


@struct.dataclass
class State(core.State):
    env: Any  # the pgx State
    first: Array  # int32: pgx's player id of player 0
    seed: Array  # uint32: the keys of `step`'s chance outcomes derive from it
    chance_due: Array  # bool: an afterstate whose chance event (the next roll) is still to come


@dataclasses.dataclass(frozen=True)
class ChanceEvent:
    """The chance event of a pgx environment: which moves it follows and what each outcome sets."""

    probs: np.ndarray  # float32[C]: the outcomes' probabilities
    due: Callable[[Any, Any], Array]  # (pgx state before a move, after it) -> bool
    apply: Callable[[Any, Array], Any]  # (pgx state, int32 outcome) -> the pgx state it makes


# Backgammon's roll: the 21 unordered pairs of dice (pgx's faces 0-5), the lower die first.
_ROLLS = np.array([(a, b) for a in range(6) for b in range(a, 6)], np.int32)


def _roll(env: Any, outcome: Array) -> Any:
    """A backgammon pgx state whose mover has just rolled `_ROLLS[outcome]`, as pgx's turn
    change sets it but for the legal moves, which the game's rules set (`PgxGame._rules`)."""
    from pgx import backgammon

    dice = jnp.asarray(_ROLLS)[outcome]
    return env.replace(
        _dice=dice,
        _playable_dice=backgammon._set_playable_dice(dice),
        _played_dice_num=jnp.int32(0),
    )


def _pip_lead(env: Any) -> Array:
    """Backgammon: the opponent's pip count minus the mover's (pgx's board is the mover's view:
    the mover's checkers positive on points 0-23 run up to 24, the opponent's negative run down
    to -1, each side's bar 25 pips from home)."""
    board = env._board
    points = jnp.arange(24)
    own = (jnp.maximum(board[:24], 0) * (24 - points)).sum() + 25 * jnp.maximum(board[24], 0)
    opp = (jnp.maximum(-board[:24], 0) * (points + 1)).sum() + 25 * jnp.maximum(-board[25], 0)
    return (opp - own).astype(jnp.float32)


# An environment's static evaluation from its mover's view, where one is known.
HEURISTICS: dict[str, Callable[[Any], Array]] = {"backgammon": _pip_lead}

CHANCE = {
    "backgammon": ChanceEvent(
        probs=np.where(_ROLLS[:, 0] == _ROLLS[:, 1], 1 / 36, 2 / 36).astype(np.float32),
        due=lambda before, after: after._turn != before._turn,  # the turn passed: a new roll
        apply=_roll,
    ),
}


@functools.cache
def _chess_moves(env_id: str) -> tuple[str, ...]:
    """Chess and Gardner chess: each action as its squares from and to, and an underpromotion's
    piece (e2e4, a7a8n), squares from the mover's side as pgx turns the board; () elsewhere."""
    if env_id == "chess":
        from pgx._src.games.chess import FROM_PLANE as table
    elif env_id == "gardner_chess":
        from pgx._src.gardner_chess_utils import TO_MAP as table
    else:
        return ()
    table = np.asarray(table)
    n = math.isqrt(len(table))
    square = [f"{letters(n)[s // n]}{s % n + 1}" for s in range(n * n)]
    return tuple(
        f"{square[source]}{square[to]}{'rbn'[plane // 3] if plane < 9 else ''}"
        if to >= 0
        else f"none{source * table.shape[1] + plane}"  # no move: never legal
        for (source, plane), to in np.ndenumerate(table)
    )


class PgxGame(Game):
    """A two-player pgx environment; one subclass per environment (`game_class`)."""

    env_id: ClassVar[str]
    pgx_env: ClassVar[Any]  # the pgx Env

    chance: ClassVar[ChanceEvent | None]  # the environment's chance event (`CHANCE`), if any

    def __init__(self) -> None:
        example = jax.eval_shape(self.pgx_env.init, jax.random.key(0))
        shape = tuple(int(n) for n in example.observation.shape)
        self.num_actions = int(example.legal_action_mask.shape[0])
        self.observation_shape = shape if len(shape) == 3 else (1, 1, math.prod(shape))
        self.max_game_length = MAX_GAME_LENGTH.get(self.env_id, DEFAULT_MAX_GAME_LENGTH)
        # Moves named by the board: its cells row by row (and a last move, `_extra`), or its
        # columns (Connect Four); else by pgx's action number.
        cells = math.prod(self.observation_shape[:2])
        self._cells = cells if shape[0] > 1 and self.num_actions - cells in (0, 1) else 0
        self._columns = self.num_actions == self.observation_shape[1] > 1
        self._extra = "swap" if self.env_id == "hex" else "pass"

    def init(self, key: Array) -> State:
        env_key, seed_key = jax.random.split(key)
        env = self.pgx_env.init(env_key)
        seed = jax.random.bits(seed_key, dtype=jnp.uint32)
        return self._wrap(env, env.current_player.astype(jnp.int32), seed, jnp.bool_(False))

    def _apply(self, state: State, action: Array) -> State:
        key = jax.random.fold_in(jax.random.key(state.seed), state.env._step_count)
        if self.chance is None:
            env = self.pgx_env.step(state.env, action, key)
            return self._wrap(env, state.first, state.seed, jnp.bool_(False))
        after = self._apply_move(state, action)
        outcome = jax.random.categorical(key, jnp.log(self.chance_probs(after)))
        return self.step_chance(after, outcome)

    def _apply_move(self, state: State, action: Array) -> State:
        # pgx rolls the next turn's dice from the key: any fixed key, the roll is `step_chance`'s.
        env = self.pgx_env.step(state.env, action, jax.random.key(0))
        after = self._wrap(env, state.first, state.seed, jnp.bool_(False))
        due = self.chance.due(state.env, env) & ~after.terminated
        return after.replace(chance_due=due, legal_action_mask=after.legal_action_mask & ~due)

    def chance_probs(self, afterstate: State) -> Array:
        if self.chance is None:
            return super().chance_probs(afterstate)
        none = jnp.zeros(self.chance_outcomes, jnp.float32).at[0].set(1.0)
        return jnp.where(afterstate.chance_due, jnp.asarray(self.chance.probs), none)

    def step_chance(self, afterstate: State, outcome: Array | int) -> State:
        if self.chance is None:
            return super().step_chance(afterstate, outcome)
        env = self.chance.apply(afterstate.env, jnp.asarray(outcome, jnp.int32))
        env = env.replace(observation=self.pgx_env.observe(env))
        rolled = self._wrap(env, afterstate.first, afterstate.seed, jnp.bool_(False))
        return core.tree_where(afterstate.chance_due, rolled, afterstate)

    def _wrap(self, env: Any, first: Array, seed: Array, chance_due: Array) -> State:
        """The azjax State of pgx state `env`: players mapped, the length bounded."""
        env = self._rules(env)
        over = env.terminated | env.truncated | (env._step_count >= self.max_game_length)
        rewards = jnp.where(env.terminated, jnp.sign(env.rewards), 0.0)
        return State(
            current_player=(env.current_player ^ first).astype(jnp.int32),
            legal_action_mask=env.legal_action_mask & ~over,
            terminated=over,
            rewards=rewards[jnp.arange(2) ^ first].astype(jnp.float32),
            env=env,
            first=first,
            seed=seed,
            chance_due=chance_due,
        )

    def _rules(self, env: Any) -> Any:
        """pgx state `env` with its legal moves as azjax's rules have them (pgx's, but for
        Backgammon's)."""
        return env

    def observe(self, state: State) -> Array:
        return state.env.observation.astype(jnp.float32).reshape(self.observation_shape)

    def board(self, state: State) -> Array:
        obs = self.observe(state)
        sign = jnp.where(state.current_player == 0, 1, -1)
        return (sign * jnp.sign(obs[..., 0] - obs[..., 1])).astype(jnp.int32)

    def svg(self, state: State | None = None, **options: Any) -> str:
        """pgx's own drawing of `state` (`games.svg.pgx_svg`: Hex's hexagons, Backgammon's
        points and dice) with `_marks` over it; no marked last move. A bare `board` (no state)
        is drawn as the default grid."""
        if state is None:
            return super().svg(state, **options)
        from games import svg

        picture = svg.pgx_svg(state.env, f"{self.name} board")
        end = picture.rindex("</g></g></svg>")  # the end of pgx's board group
        return picture[:end] + "".join(self._marks(state, **options)) + picture[end:]

    def _marks(self, state: State, **options: Any) -> list[str]:
        """SVG elements drawn over pgx's picture in its units (coordinates, clickable cells)."""
        return []

    def heuristic(self, state: State, player: Array) -> Array:
        """The environment's evaluation (`HEURISTICS`: Backgammon's pip count lead) from
        `player`'s view; 0 where none is known."""
        evaluate = HEURISTICS.get(self.env_id)
        if evaluate is None:
            return super().heuristic(state, player)
        lead = evaluate(state.env)
        return jnp.where(player == state.current_player, lead, -lead).astype(jnp.float32)

    def render(self, state: State) -> str:
        """The board as a grid of the players' marks; where moves name cells or columns, with
        their labels."""
        height, width = self.observation_shape[:2]
        rows = [str(r + 1) for r in range(height)] if self._cells else None
        return render_grid(
            np.asarray(self.board(state)),
            {1: self.marks[0], -1: self.marks[1], 0: "."},
            col_labels=letters(width) if self._cells or self._columns else None,
            row_labels=rows,
        )

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        no_actions = np.full(self.observation_shape[:2], -1)
        return grid_symmetries(no_actions, self.num_actions, names=("identity",))

    def _parse(self, text: str) -> int:
        width = self.observation_shape[1]
        if self._cells:
            if text == self._extra:
                return self._cells
            column, row = text[:1], text[1:]
            if column in letters(width) and row.isdigit() and 1 <= int(row) <= self._cells // width:
                return (int(row) - 1) * width + letters(width).index(column)
            last = f"{letters(width)[-1]}{self._cells // width}"
            more = f" or {self._extra!r}" if self.num_actions > self._cells else ""
            raise ValueError(f"expected a cell a1-{last}{more}")
        if self._columns:
            if len(text) == 1 and text in letters(width):
                return letters(width).index(text)
            raise ValueError(f"expected a column a-{letters(width)[-1]}")
        if text in _chess_moves(self.env_id):
            return _chess_moves(self.env_id).index(text)
        if text.startswith("move") and text[4:].isdigit():
            return int(text[4:])
        raise ValueError(f"expected 'move' and pgx's action number 0-{self.num_actions - 1}")

    def format_action(self, action: int) -> str:
        action, width = self._action_index(action), self.observation_shape[1]
        if self._cells:
            if action == self._cells:
                return self._extra
            return f"{letters(width)[action % width]}{action // width + 1}"
        if self._columns:
            return letters(width)[action]
        names = _chess_moves(self.env_id)
        return names[action] if names else f"move{action}"

    def notation_help(self) -> str:
        width = self.observation_shape[1]
        if self._cells:
            extra = f", or {self._extra!r}" if self.num_actions > self._cells else ""
            cells = f"a1-{letters(width)[-1]}{self._cells // width}"
            return f"A move is a cell, column letter and row number from the top ({cells}){extra}."
        if self._columns:
            return f"A move is a column letter, a-{letters(width)[-1]} from the left."
        if _chess_moves(self.env_id):
            return (
                "A move is its squares from and to, seen from your side (your back rank is 1), "
                "and an underpromotion's piece (r, b or n): b1c3, a7a8n."
            )
        last = self.num_actions - 1
        return f"A move is 'move' and pgx's action number of {self.env_id}: move0-move{last}."


class _Hex(PgxGame):
    """Hex as pgx draws it: Black (first) joins the top and bottom rows, White the left and
    right columns; the second move may be 'swap', which makes the first stone White's,
    mirrored in the long diagonal."""

    def render(self, state: State) -> str:
        board, (x, o) = np.asarray(self.board(state)), self.marks
        player = int(state.current_player)
        if bool(state.terminated):
            player = int(np.argmax(np.asarray(state.rewards)))
        turn = f"{self.players[player]} ({self.marks[player]}) " + (
            "wins" if bool(state.terminated) else "to play"
        )
        black, white = self.players
        lines = [f"{turn}; {black} ({x}) joins top and bottom, {white} ({o}) left and right"]
        lines.append("   " + " ".join(letters(board.shape[1])))
        for r, row in enumerate(board):
            cells = " ".join({1: x, -1: o, 0: "."}[int(v)] for v in row)
            lines.append(" " * r + f"{r + 1:>2} {cells} {r + 1}")
        return "\n".join(lines)

    def _marks(self, state: State, clickable: bool = False, **options: Any) -> list[str]:
        """Coordinates, and with `clickable` a clickable hexagon over each legal cell, placed
        as pgx places its cells (15 units from centre to corner, each row half a cell right of
        the one above)."""
        width, r = self.observation_shape[1], 15.0
        legal = self.legal_actions(state) if clickable else []
        cells = []
        for action in (a for a in legal if a < width * width):
            row, col = divmod(action, width)
            x, y = (col + row / 2) * r * math.sqrt(3), row * r * 1.5
            corners = " ".join(
                f"{x + r * math.sin(i * math.pi / 3):.2f},{y + r * math.cos(i * math.pi / 3):.2f}"
                for i in range(6)
            )
            cells.append(
                f'<polygon class="move" data-action="{action}" points="{corners}" '
                f'fill="transparent"><title>{self.format_action(action)}</title></polygon>'
            )
        for i, letter in enumerate(letters(width)):  # pgx draws no coordinates: a1 top left
            cells.append(_text(i * r * math.sqrt(3), -1.9 * r, letter))
            cells.append(_text((i / 2 - 1.1) * r * math.sqrt(3), i * r * 1.5, str(i + 1)))
        return cells


class _Backgammon(PgxGame):
    """Backgammon by the standard rules (`games.backgammon`), Black (first) and White as pgx
    draws them, moves in the mover's numbering (13/7, bar/22, 6/off)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_shape = (1, 1, backgammon.FEATURES)

    def init(self, key: Array) -> State:
        # pgx draws whether Black or White starts; the start is the same from either side, so
        # player 0 is Black, as pgx's drawing colours the mover of `_turn` 0.
        state = super().init(key)
        return state.replace(env=state.env.replace(_turn=jnp.int32(0)))

    def _rules(self, env: Any) -> Any:
        return env.replace(legal_action_mask=backgammon.standard_mask(env))

    def observe(self, state: State) -> Array:
        return backgammon.features(state.env).reshape(self.observation_shape)

    def render(self, state: State) -> str:
        return backgammon.render(state.env, self.players, self.marks, bool(state.chance_due))

    def _parse(self, text: str) -> int:
        return backgammon.parse_move(text)

    def format_action(self, action: int) -> str:
        return backgammon.format_move(self._action_index(action))

    def notation_help(self) -> str:
        return backgammon.HELP

    def _marks(self, state: State, viewer: int = 0, **options: Any) -> list[str]:
        """The point numbers for `viewer` (0: Black) between the rows. pgx draws Black's point
        24 - i (White's i + 1) at column 12.5 - i of the bottom row, then leftwards past the
        bar, then the top row from the left, in units of 25."""
        labels = []
        for i in range(24):
            column = 12.5 - i - (i >= 6) if i < 12 else i - 11.5 + (i >= 18)
            text = str(24 - i if viewer == 0 else i + 1)
            labels.append(_text(25 * column, 25 * (7.6 if i < 12 else 6.4), text))
        return labels

    def parse_action(self, text: str, state: State | None = None) -> int:
        """`Game.parse_action`; given `state`, a bearing off named without its die (6/off) is
        the legal one with the smallest die that bears off there."""
        action = super().parse_action(text)
        if state is not None:
            if text.strip().lower().endswith("/off"):
                bigger = range(action, action - action % 6 + 6)
                action = next((a for a in bigger if state.legal_action_mask[a]), action)
            self._check_legal(state, action, text)
        return action


def _text(x: float, y: float, text: str) -> str:
    return (
        f'<text x="{x:.2f}" y="{y:.2f}" font-size="10" text-anchor="middle" '
        f'dominant-baseline="central" fill="#6c757d">{text}</text>'
    )


_CLASSES: dict[str, type[PgxGame]] = {"backgammon": _Backgammon, "hex": _Hex}
# The players' colours where pgx draws them in colours (the first moves first), and as CSS.
PLAYERS = {
    **dict.fromkeys(("backgammon", "hex", "othello", "go_9x9", "go_19x19"), ("Black", "White")),
    **dict.fromkeys(("chess", "gardner_chess"), ("White", "Black")),
}
CSS = {"Black": "#1c1c1c", "White": "#f4f4f4"}


@functools.cache
def game_class(env_id: str) -> type[PgxGame]:
    """The game class of pgx environment `env_id` (its `name` is `pgx:<env_id>`); ValueError
    for an unknown environment, one without exactly two players, or one of hidden information."""
    if env_id not in pgx.available_envs():
        playable = sorted((MAX_GAME_LENGTH.keys() | CHANCE.keys()) & set(pgx.available_envs()))
        raise ValueError(
            f"unknown pgx environment {env_id!r}; azjax plays pgx's two-player games of perfect "
            f"information: {', '.join(playable)}"
        )
    if env_id in HIDDEN_INFORMATION:
        raise ValueError(
            f"pgx environment {env_id!r} has hidden information ({HIDDEN_INFORMATION[env_id]}): "
            "azjax's search would read the opponent's private state"
        )
    env = pgx.make(env_id)
    if env.num_players != 2:
        raise ValueError(f"pgx environment {env_id!r} has {env.num_players} players, not 2")
    title = "Pgx" + "".join(part.capitalize() for part in env_id.replace("-", "_").split("_"))
    chance = CHANCE.get(env_id)
    namespace = {
        "name": PGX_PREFIX + env_id,
        "env_id": env_id,
        "pgx_env": env,
        "chance": chance,
        "chance_outcomes": 1 if chance is None else len(chance.probs),
        **(
            {"players": PLAYERS[env_id], "colours": tuple(CSS[p] for p in PLAYERS[env_id])}
            if env_id in PLAYERS
            else {}
        ),
        "__qualname__": title,
    }
    return type(title, (_CLASSES.get(env_id, PgxGame),), {"__module__": __name__, **namespace})
