"""A game that defines only the rules gets every other piece of game knowledge by default."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from azjax import agents
from games import core, svg


@struct.dataclass
class LineState(core.State):
    cells: jax.Array  # int32[4]: +1 player 0, -1 player 1, 0 empty


class Line(core.Game):
    """Players take turns filling cells of a row of four; whoever fills the last one wins."""

    name = "line"

    def __init__(self) -> None:
        self.num_actions = 4
        self.observation_shape = (1, 4, 2)
        self.max_game_length = 4

    def init(self, key: jax.Array) -> LineState:
        del key
        return self._new_game(LineState, cells=jnp.zeros(4, jnp.int32))

    def _apply(self, state: LineState, action: jax.Array) -> LineState:
        sign = jnp.where(state.current_player == 0, 1, -1)
        cells = state.cells.at[action].set(sign)
        done = jnp.all(cells != 0)
        return LineState(
            current_player=1 - state.current_player,
            legal_action_mask=(cells == 0) & ~done,
            terminated=done,
            rewards=core.mover_rewards(state.current_player, jnp.where(done, 1.0, 0.0)),
            cells=cells,
        )

    def observe(self, state: LineState) -> jax.Array:
        sign = jnp.where(state.current_player == 0, 1, -1)
        planes = jnp.stack([state.cells == sign, state.cells == -sign], axis=-1)
        return planes.astype(jnp.float32).reshape(1, 4, 2)

    def board(self, state: LineState) -> jax.Array:
        return state.cells.reshape(1, 4)

    def render(self, state: LineState) -> str:
        return core.render_grid(self.board(state), {1: "X", -1: "O", 0: "."})

    @property
    def symmetries(self) -> tuple[core.Symmetry, ...]:
        return core.grid_symmetries(np.arange(4).reshape(1, 4), 4)

    def _parse(self, text: str) -> int:
        return int(text) - 1

    def format_action(self, action: int) -> str:
        return str(self._action_index(action) + 1)


def test_a_bare_game_has_the_defaults():
    game = Line()
    state = game.step(game.init(jax.random.key(0)), 2)
    assert game.sizes == {}
    assert len(game.players) == len(game.colours) == len(game.marks) == 2
    assert float(game.heuristic(state, jnp.int32(0))) == 0.0
    assert game.move_order().tolist() == [0, 1, 2, 3]
    assert game.counts(np.asarray(game.board(state))) is None
    text = game.svg(state, last_action=2, clickable=True)
    assert text.startswith("<svg") and f'fill="{game.colours[0]}"' in text
    pic = svg.picture(game, state)
    assert sorted(s.action for s in pic.shapes if s.action is not None) == [0, 1, 3]
    jax.vmap(game.board)(jax.tree.map(lambda x: jnp.stack([x, x]), state))


def test_baselines_play_a_bare_game():
    game = Line()
    state = game.init(jax.random.key(0))
    for spec in ("greedy", "alphabeta:2"):
        action = jax.jit(agents.make(spec, game))(state, jax.random.key(1))
        assert bool(state.legal_action_mask[action])


def test_a_text_board_aligns_its_cells_under_their_labels():
    # Cells widen to the widest label or count, and rows to the widest row label.
    board = np.array([[1, 0], [0, -12]])
    labelled = core.render_grid(board, col_labels=["a", "bb"], row_labels=["9", "10"])
    assert labelled.splitlines() == ["     a  bb", " 9  1x   .", "10   . 12o"]
    wide = core.render_grid(board[:1], {1: "X", 0: "."}, col_labels=["10", "11"])
    assert wide.splitlines() == ["10 11", " X  ."]
