"""Dots and Boxes on `rows` x `cols` boxes (default 3x3; non-square boards supported).

Actions follow OpenSpiel: the (rows + 1) * cols horizontal lines first, row-major (line from
dot (r, c) to dot (r, c + 1) is `r * cols + c`), then the rows * (cols + 1) vertical lines,
row-major (line from dot (r, c) to dot (r + 1, c) is `(rows + 1) * cols + r * (cols + 1) + c`).
Drawing the fourth side of a box (or of two boxes) wins it and keeps the turn; otherwise the
turn passes. The game ends when every line is drawn; more boxes wins, equal counts draw.

The position lives on the (2 * rows + 1, 2 * cols + 1) lattice of dots, lines and boxes: dot
(r, c) at (2r, 2c), horizontal line (r, c) at (2r, 2c + 1), vertical line (r, c) at
(2r + 1, 2c), box (r, c) at (2r + 1, 2c + 1). On it the board symmetries are plain grid maps.
"""

from __future__ import annotations

import re
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from flax import struct

from games import core
from games.core import Array, Game, Symmetry, grid_symmetries
from games.svg import INK, Picture, Shape, margin

MAX_SIZE = 10
_MOVE = re.compile(r"([hv])\s*(\d+)(?:\s*,\s*|\s+)(\d+)")
_MARKS = {1: "X", -1: "O", 0: " "}


@struct.dataclass
class State(core.State):
    lines: Array  # bool[num_lines]: drawn lines, indexed by action
    boxes: Array  # int8[rows * cols]: +1 player 0's box, -1 player 1's, 0 open (row-major)
    scores: Array  # int32[2]: boxes won by each player


class DotsAndBoxes(Game):
    """Dots and Boxes with `rows` x `cols` boxes, each between 1 and MAX_SIZE."""

    name = "dots_and_boxes"
    sizes: ClassVar[dict[str, tuple[int, int]]] = {"rows": (1, MAX_SIZE), "cols": (1, MAX_SIZE)}
    players = ("Red", "Blue")
    colours = ("#d1495b", "#2e86ab")

    def __init__(self, rows: int = 3, cols: int = 3) -> None:
        for label, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int | np.integer) or isinstance(value, bool):
                raise ValueError(f"dots_and_boxes {label} must be an integer, got {value!r}")
            if not 1 <= value <= MAX_SIZE:
                raise ValueError(
                    f"dots_and_boxes {label}={value} is out of range; expected 1 to {MAX_SIZE}"
                )
        self.rows, self.cols = int(rows), int(cols)
        self.num_horizontal = (self.rows + 1) * self.cols
        self.num_actions = self.num_horizontal + self.rows * (self.cols + 1)
        self.num_boxes = self.rows * self.cols
        self.height, self.width = 2 * self.rows + 1, 2 * self.cols + 1
        self.observation_shape = (self.height, self.width, 6)
        self.max_game_length = self.num_actions
        self._build_tables()

    def _build_tables(self) -> None:
        """Index tables: lines around each box, boxes beside each line, lattice positions."""
        rows, cols = self.rows, self.cols
        self._line_cell = np.zeros((self.num_actions, 2), np.int32)  # lattice (row, col)
        for a in range(self.num_actions):
            kind, r, c = self._line_coords(a)
            self._line_cell[a] = (2 * r, 2 * c + 1) if kind == "h" else (2 * r + 1, 2 * c)
        # The four sides of box (r, c): top, bottom, left, right.
        box_lines = np.zeros((self.num_boxes, 4), np.int32)
        for r in range(rows):
            for c in range(cols):
                box_lines[r * cols + c] = [
                    r * cols + c,
                    (r + 1) * cols + c,
                    self.num_horizontal + r * (cols + 1) + c,
                    self.num_horizontal + r * (cols + 1) + c + 1,
                ]
        self._box_lines = box_lines
        # For each line, its (at most two) boxes and their other three sides; a missing box is
        # the out-of-range index num_boxes with `_adjacent_valid` False.
        adjacent = np.full((self.num_actions, 2), self.num_boxes, np.int32)
        others = np.zeros((self.num_actions, 2, 3), np.int32)
        for b, sides in enumerate(box_lines):
            for line in sides:
                k = 0 if adjacent[line, 0] == self.num_boxes else 1
                adjacent[line, k] = b
                others[line, k] = [s for s in sides if s != line]
        self._adjacent = adjacent
        self._adjacent_valid = adjacent < self.num_boxes
        self._other_sides = others
        # Lattice gathers: flat cell -> line (num_actions if none) and -> box (num_boxes if none).
        cell_line = np.full((self.height, self.width), self.num_actions, np.int32)
        cell_line[self._line_cell[:, 0], self._line_cell[:, 1]] = np.arange(self.num_actions)
        cell_box = np.full((self.height, self.width), self.num_boxes, np.int32)
        cell_box[1::2, 1::2] = np.arange(self.num_boxes).reshape(rows, cols)
        self._cell_line = cell_line.reshape(-1)
        self._cell_box = cell_box.reshape(-1)

    def _line_coords(self, action: int) -> tuple[str, int, int]:
        """("h" | "v", dot row, dot col) of a line, 0-based."""
        if action < self.num_horizontal:
            return ("h", *divmod(action, self.cols))
        return ("v", *divmod(action - self.num_horizontal, self.cols + 1))

    # -- pure functions ------------------------------------------------------------------

    def init(self, key: Array) -> State:
        del key
        return self._new_game(
            State,
            lines=jnp.zeros(self.num_actions, jnp.bool_),
            boxes=jnp.zeros(self.num_boxes, jnp.int8),
            scores=jnp.zeros(2, jnp.int32),
        )

    def _apply(self, state: State, action: Array) -> State:
        mover = state.current_player
        # The drawn line was open, so its boxes are open; each closes iff its other three
        # sides are already drawn.
        completed = jnp.asarray(self._adjacent_valid)[action] & jnp.all(
            state.lines[jnp.asarray(self._other_sides)[action]], axis=-1
        )
        won = jnp.any(
            (jnp.arange(self.num_boxes)[None, :] == jnp.asarray(self._adjacent)[action][:, None])
            & completed[:, None],
            axis=0,
        )
        sign = jnp.where(mover == 0, 1, -1).astype(jnp.int8)
        boxes = state.boxes + won.astype(jnp.int8) * sign
        gained = completed.sum(dtype=jnp.int32)
        scores = state.scores + jnp.where(jnp.arange(2) == mover, gained, 0)
        lines = state.lines | (jnp.arange(self.num_actions) == action)
        terminated = jnp.all(lines)
        margin = jnp.sign(scores[0] - scores[1]).astype(jnp.float32)
        rewards = jnp.where(terminated, jnp.stack([margin, -margin]), 0.0)
        return State(
            current_player=jnp.where(gained > 0, mover, 1 - mover).astype(jnp.int32),
            legal_action_mask=~lines,
            terminated=terminated,
            rewards=rewards.astype(jnp.float32),
            lines=lines,
            boxes=boxes,
            scores=scores,
        )

    def observe(self, state: State) -> Array:
        """Planes on the lattice: drawn lines, open lines, the mover's boxes, the opponent's
        boxes, each box's drawn sides / 4, and the score margin (mover minus opponent) divided
        by the number of boxes on every cell."""
        sign = jnp.where(state.current_player == 0, 1, -1).astype(jnp.int8)
        padded_lines = jnp.concatenate([state.lines, jnp.zeros(1, jnp.bool_)])
        is_line = jnp.asarray(self._cell_line < self.num_actions)
        drawn = padded_lines[jnp.asarray(self._cell_line)]
        padded_boxes = jnp.concatenate([state.boxes * sign, jnp.zeros(1, jnp.int8)])
        owner = padded_boxes[jnp.asarray(self._cell_box)]
        sides = state.lines[jnp.asarray(self._box_lines)].sum(axis=-1, dtype=jnp.int32)
        padded_sides = jnp.concatenate([sides, jnp.zeros(1, jnp.int32)])
        mover_score = jnp.where(state.current_player == 0, state.scores[0], state.scores[1])
        margin = (2 * mover_score - state.scores.sum()) / self.num_boxes
        planes = jnp.stack(
            [
                drawn.astype(jnp.float32),
                (is_line & ~drawn).astype(jnp.float32),
                (owner > 0).astype(jnp.float32),
                (owner < 0).astype(jnp.float32),
                padded_sides[jnp.asarray(self._cell_box)] / 4.0,
                jnp.full(self.height * self.width, margin, jnp.float32),
            ],
            axis=-1,
        )
        return planes.reshape(self.observation_shape)

    def heuristic(self, state: State, player: Array) -> Array:
        """Box difference; each open box with three sides drawn counts for the player to move
        (who can take it), so a move that hands the opponent a box scores lower."""
        scores = state.scores.astype(jnp.float32)
        margin = scores[player] - scores[1 - player]
        takeable = (state.lines[jnp.asarray(self._box_lines)].sum(-1) == 3).sum()
        return margin + jnp.where(state.current_player == player, takeable, -takeable)

    # -- for people and tests ------------------------------------------------------------

    def board(self, state: State) -> Array:
        """int32 [2 * rows + 1, 2 * cols + 1] lattice: 1 on each drawn line, +1 / -1 on boxes
        won by player 0 / player 1, 0 on dots, open lines and open boxes."""
        lattice = jnp.zeros((self.height, self.width), jnp.int32)
        cells = jnp.asarray(self._line_cell)
        lattice = lattice.at[cells[:, 0], cells[:, 1]].set(state.lines.astype(jnp.int32))
        boxes = state.boxes.astype(jnp.int32).reshape(self.rows, self.cols)
        return lattice.at[1::2, 1::2].set(boxes)

    def counts(self, board: np.ndarray) -> tuple[int, int]:
        """Boxes: player 0's, player 1's."""
        boxes = board[1::2, 1::2]
        return int((boxes > 0).sum()), int((boxes < 0).sum())

    def render(self, state: State) -> str:
        """Dots `+`, lines `---` / `|`, boxes marked X (player 0) or O (player 1); dots are
        labelled 1-based as in the notation; a last line gives the score and the mover."""
        lattice = np.asarray(self.board(state))
        labels = [str(c + 1).ljust(4) for c in range(self.cols + 1)]
        width = len(str(self.rows + 1))
        out = [" " * (width + 1) + "".join(labels).rstrip()]
        for i in range(self.height):
            if i % 2 == 0:
                cells = [
                    "+" if j % 2 == 0 else ("---" if lattice[i, j] else "   ")
                    for j in range(self.width)
                ]
                prefix = str(i // 2 + 1).rjust(width)
            else:
                cells = [
                    ("|" if lattice[i, j] else " ")
                    if j % 2 == 0
                    else f" {_MARKS[int(lattice[i, j])]} "
                    for j in range(self.width)
                ]
                prefix = " " * width
            out.append((prefix + " " + "".join(cells)).rstrip())
        scores = np.asarray(state.scores)
        status = (
            "game over" if bool(state.terminated) else f"{'XO'[int(state.current_player)]} to move"
        )
        out.append(f"X {scores[0]}  O {scores[1]}  ({status})")
        return "\n".join(out)

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        grid = np.full((self.height, self.width), -1, np.int32)
        grid[self._line_cell[:, 0], self._line_cell[:, 1]] = np.arange(self.num_actions)
        return grid_symmetries(grid, self.num_actions)

    def _parse(self, text: str) -> int:
        match = _MOVE.fullmatch(text)
        if match is None:
            raise ValueError("expected 'h ROW COL' or 'v ROW COL'")
        kind, r, c = match.group(1), int(match.group(2)) - 1, int(match.group(3)) - 1
        max_r, max_c = (self.rows + 1, self.cols) if kind == "h" else (self.rows, self.cols + 1)
        if not (0 <= r < max_r and 0 <= c < max_c):
            raise ValueError(
                f"{kind} lines have ROW 1-{max_r} and COL 1-{max_c} on this "
                f"{self.rows}x{self.cols} board"
            )
        if kind == "h":
            return r * self.cols + c
        return self.num_horizontal + r * (self.cols + 1) + c

    def format_action(self, action: int) -> str:
        kind, r, c = self._line_coords(self._action_index(action))
        return f"{kind} {r + 1} {c + 1}"

    def notation_help(self) -> str:
        return (
            "A move is 'h ROW COL' (the horizontal line from dot ROW,COL to the dot on its right) "
            "or 'v ROW COL' (the vertical line from dot ROW,COL to the dot below); dots are "
            "numbered from 1 at the top left."
        )

    def draw(
        self, board: np.ndarray, legal: np.ndarray, last_action: int | None, cell: float
    ) -> Picture:
        rows, cols = self.rows, self.cols
        m = margin(cell)
        tint = {1: "#f6d3d8", -1: "#cfe4ef"}
        shapes: list[Shape] = []

        def point(r: int, c: int) -> tuple[float, float]:
            return m + c * cell, m + r * cell

        for c in range(cols + 1):  # dots are numbered from 1, as in the notation
            shapes.append(Shape("text", (m + c * cell, m * 0.4, m * 0.45), INK, text=str(c + 1)))
        for r in range(rows + 1):
            shapes.append(Shape("text", (m * 0.4, m + r * cell, m * 0.45), INK, text=str(r + 1)))
        for r in range(rows):  # claimed boxes first, under the lines
            for c in range(cols):
                owner = int(np.sign(board[2 * r + 1, 2 * c + 1]))
                if owner:
                    x, y = point(r, c)
                    shapes.append(Shape("rect", (x, y, cell, cell), tint[owner]))
                    colour = self.colours[0 if owner > 0 else 1]
                    centre = (x + cell / 2, y + cell / 2, cell * 0.16)
                    shapes.append(Shape("circle", centre, colour))
        for a in range(self.num_actions):
            kind, r, c = self._line_coords(a)
            end = (r, c + 1) if kind == "h" else (r + 1, c)
            (x1, y1), (x2, y2) = point(r, c), point(*end)
            if board[tuple(self._line_cell[a])] != 0:
                colour = "#e0a100" if a == last_action else INK
                shapes.append(Shape("line", (x1, y1, x2, y2), None, colour, 5))
                continue
            shapes.append(Shape("line", (x1, y1, x2, y2), None, "#e6e6e6", 3))
            if legal[a]:
                pad = cell * 0.18
                box = (
                    (x1 + pad, y1 - pad, cell - 2 * pad, 2 * pad)
                    if kind == "h"
                    else (x1 - pad, y1 + pad, 2 * pad, cell - 2 * pad)
                )
                shapes.append(Shape("rect", box, "transparent", action=a))
        for r in range(rows + 1):
            for c in range(cols + 1):
                shapes.append(Shape("circle", (*point(r, c), cell * 0.08), INK))
        return Picture(cols * cell + 1.5 * m, rows * cell + 1.5 * m, "#ffffff", tuple(shapes))
