"""What zoo:othello's losses to alphabeta:4 have in common (docs/results.md, Othello's blind spot).

    python docs/bench/othello_losses.py [--openings 100] [--games /tmp/othello_games.npz]

Plays `zoo:othello` (its 256 simulations) against `alphabeta:4` from `--openings` random 2-ply
openings, each with both colours, recording every ply (about 40 minutes on two CPU cores; the
games are kept in `--games` and reused), then compares lost and won games.
"""

from __future__ import annotations

import argparse
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

import games
from azjax import agents, model
from azjax.search import network_evaluator, run_search
from games.core import random_legal_action

PLIES = 130  # more than any Othello game with its passes
CORNERS = [0, 7, 56, 63]
X_SQUARES = {9: 0, 14: 7, 49: 56, 54: 63}  # diagonal to a corner: giving it away


def play(openings: int) -> dict[str, np.ndarray]:
    game = games.make("othello")
    found = model.load("zoo:othello", game)
    search, evaluate = found.config.playing_search(), network_evaluator(found.network)
    referee = agents.make("alphabeta:4", game)

    def one(key: jax.Array, colour: jax.Array):
        opening_key, game_key = jax.random.split(key)
        state = game.init(jax.random.key(0))
        for i in range(2):
            move = random_legal_action(jax.random.fold_in(opening_key, i), state.legal_action_mask)
            state = game.step(state, move)

        def ply(state, key):
            net_key, referee_key = jax.random.split(key)
            batch = jax.tree.map(lambda x: x[None], state)
            out = run_search(game, evaluate, found.params, batch, net_key, search, explore=False)
            mine, live = state.current_player == colour, ~state.terminated
            action = jnp.where(mine, out.action[0], referee.fn(None, state, referee_key))
            record = {
                "action": jnp.where(live, action, -1),
                "mine": mine & live,
                "value": jnp.where(mine & live, out.root_value[0], jnp.nan),
                "board": game.board(state).astype(jnp.int8).reshape(-1),
            }
            after = game.step(state, action)
            return jax.tree.map(lambda a, s: jnp.where(live, a, s), after, state), record

        keys = jax.random.split(game_key, PLIES)
        final, records = jax.lax.scan(ply, state, keys)
        return records | {"final": game.board(final).reshape(-1), "reward": final.rewards[colour]}

    keys = jnp.repeat(jax.random.split(jax.random.key(2026), openings), 2, axis=0)
    colours = jnp.tile(jnp.array([0, 1]), openings)  # each opening with both colours
    games_ = jax.device_get(jax.jit(jax.vmap(one))(keys, colours))
    return {k: np.asarray(v) for k, v in games_.items()} | {"colour": np.asarray(colours)}


def report(g: dict[str, np.ndarray]) -> None:
    sign = np.where(g["colour"] == 0, 1, -1)[:, None]  # the net's discs positive
    final, board = g["final"] * sign, g["board"] * sign[:, :, None]
    lost, won = g["reward"] < 0, g["reward"] > 0
    length = (g["action"] >= 0).sum(1)
    print(f"{len(lost)} games: the net won {won.sum()}, lost {lost.sum()}")
    for name, sel in (("lost", lost), ("won", won)):
        wiped = ((final[sel] > 0).sum(1) == 0).sum()
        discs = [
            f"{(board[sel, p] > 0).sum(1).mean():.1f}/{(board[sel, p] < 0).sum(1).mean():.1f}"
            for p in (14, 20, 26)
        ]
        corners = (
            (final[sel][:, CORNERS] > 0).sum(1).mean(),
            (final[sel][:, CORNERS] < 0).sum(1).mean(),
        )
        gave = sum(
            1
            for i in np.flatnonzero(sel)
            for t in np.flatnonzero(g["mine"][i])
            if g["action"][i, t] in X_SQUARES and board[i, t, X_SQUARES[g["action"][i, t]]] == 0
        )
        seen = []  # plies before the end when the net's own value first fell below -0.2
        for i in np.flatnonzero(sel):
            below = np.flatnonzero(g["mine"][i] & (g["value"][i] < -0.2))
            seen.append(length[i] - (below[0] if len(below) else length[i]))
        print(
            f"{name}: {length[sel].mean():.1f} plies, {final[sel].sum(1).mean():+.1f} discs, "
            f"the net wiped out in {wiped}; discs net/referee at plies 14, 20, 26: "
            f"{', '.join(discs)}; corners net/referee {corners[0]:.2f}/{corners[1]:.2f}; "
            "X-squares by an empty corner "
            f"{gave / sel.sum():.2f} a game; the net's value below -0.2 {np.mean(seen):.1f} plies "
            "before the end"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openings", type=int, default=100)
    parser.add_argument(
        "--games", type=pathlib.Path, default=pathlib.Path("/tmp/othello_games.npz")
    )
    args = parser.parse_args()
    if not args.games.exists():
        np.savez(args.games, **play(args.openings))
    report(dict(np.load(args.games)))


if __name__ == "__main__":
    main()
