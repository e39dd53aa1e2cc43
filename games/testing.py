"""`check_game(game)`: the whole game contract, checked on random games.

Run it first on a new game (and in its tests):

    from games.testing import check_game
    check_game(MyGame())

It raises AssertionError naming the first thing that broke.
"""

from __future__ import annotations

import functools
import traceback
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from games.core import Game, IllegalMoveError, State

_FIELDS = ("current_player", "legal_action_mask", "terminated", "rewards")


def check_game(game: Game, num_games: int = 16, key: jax.Array | None = None) -> None:
    """Check `game` against the contract on `num_games` random games played to the end.

    Checked: attributes (`players`, `colours`, `marks`, `sizes`, `move_order`); `init`,
    `step`, `observe` and `board` eagerly, under jit and under vmap, `heuristic` under both;
    the State's contract fields and the observation's shape and dtype; games end within
    `max_game_length`; rewards are zero-sum, +-1 or 0, and only on the final transition;
    stepping a finished game is a no-op with zero rewards; an illegal action makes the mover
    lose; symmetries commute with `step`; notation round-trips; `render` and `svg` give text;
    chance (`chance_outcomes`, one certain outcome for a deterministic game): the outcomes'
    probabilities at every afterstate sum to one, every outcome is reachable, each outcome
    gives one State, and every `step` is `step_chance` of `afterstate` with an outcome of
    positive probability.
    """
    key = jax.random.key(0) if key is None else key
    _check_attributes(game)
    init_keys = jax.random.split(jax.random.fold_in(key, 0), num_games)
    _check_init(game, init_keys)
    actions, states = _call(
        game,
        "playing random games under jit and vmap",
        _random_games,
        game,
        init_keys,
        jax.random.fold_in(key, 1),
    )
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    _check_fields(game, states)
    # The checks below need the plies up to the first where every game has ended and one
    # no-op ply after it: the rest repeat it (a long `max_game_length` costs nothing more).
    end = int(np.argmax(states.terminated.all(axis=1)))
    actions, states = actions[: end + 1], _index(states, slice(0, end + 2))
    _check_rewards(game, states)
    _check_eager_matches_batched(game, init_keys[0], actions[:, 0], _index(states, slice(None), 0))
    obs = _check_views(game, states)
    _check_terminal_noop(game, _index(states, -1))
    _check_illegal_action(game, states)
    _check_symmetries(game, init_keys, actions, states, obs)
    _check_notation(game, states)
    _check_chance(game, actions, states)


# ----------------------------------------------------------------------------- helpers


def _require(condition: Any, game: Game, what: str) -> None:
    if not bool(condition):
        raise AssertionError(f"{game.name}: {what}")


def _index(tree: State, *idx: Any) -> State:
    return jax.tree.map(lambda x: x[idx], tree)


def _same(a: State, b: State) -> bool:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def _call(game: Game, what: str, fn: Any, *args: Any) -> Any:
    """`fn(*args)`, an exception turned into one AssertionError naming `what` and the game's
    method it came from (a Python `if` on a traced value gets how to write it instead)."""
    try:
        return fn(*args)
    except AssertionError:
        raise
    except Exception as err:
        frames = [
            f for f, _ in traceback.walk_tb(err.__traceback__) if f.f_locals.get("self") is game
        ]
        where = f" in {type(game).__name__}.{frames[-1].f_code.co_name}" if frames else ""
        text = (str(err).strip().splitlines() or [""])[0]
        if isinstance(err, jax.errors.ConcretizationTypeError):
            text = (
                "Python control flow on an array value (`if`, `and`, `bool()`, `int()`) cannot "
                "run under jit or vmap: use jnp.where, jax.lax.cond or jax.lax.while_loop"
            )
        message = f"{game.name}: {what} failed{where}: {type(err).__name__}: {text}"
    raise AssertionError(message)


def _random_action(key: jax.Array, mask: jax.Array) -> jax.Array:
    logits = jnp.where(mask, 0.0, -jnp.inf)
    return jnp.where(mask.any(), jax.random.categorical(key, logits), 0).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=0)
def _random_games(game: Game, init_keys: jax.Array, key: jax.Array) -> tuple[jax.Array, State]:
    """Random games of `max_game_length + 1` plies: actions [T, B], states [T + 1, B]."""

    def ply(states: State, key: jax.Array) -> tuple[State, tuple[jax.Array, State]]:
        keys = jax.random.split(key, init_keys.shape[0])
        actions = jax.vmap(_random_action)(keys, states.legal_action_mask)
        nxt = jax.vmap(game.step)(states, actions)
        return nxt, (actions, nxt)

    first = jax.vmap(game.init)(init_keys)
    keys = jax.random.split(key, game.max_game_length + 1)
    _, (actions, rest) = jax.lax.scan(ply, first, keys)
    return actions, jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)


@functools.partial(jax.jit, static_argnums=0)
def _replay(game: Game, init_keys: jax.Array, actions: jax.Array) -> tuple[State, jax.Array]:
    """States [T + 1, B] of games that play `actions` [T, B] from `init(init_keys)`, and
    their observations."""

    def ply(states: State, actions: jax.Array) -> tuple[State, State]:
        nxt = jax.vmap(game.step)(states, actions)
        return nxt, nxt

    first = jax.vmap(game.init)(init_keys)
    _, rest = jax.lax.scan(ply, first, actions)
    states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    return states, jax.vmap(jax.vmap(game.observe))(states)


def _over_states(fn: Any) -> Any:
    """`fn` jitted and mapped over leading [T, B] axes of states."""
    return jax.jit(jax.vmap(jax.vmap(fn)))


# ----------------------------------------------------------------------------- checks


def _check_attributes(game: Game) -> None:
    name = getattr(game, "name", None)
    if not isinstance(name, str) or not name:
        raise AssertionError(f"{type(game).__name__}: `name` must be a non-empty str")
    _require(isinstance(game, Game), game, "is not a games.Game")
    for attr in ("num_actions", "max_game_length"):
        value = getattr(game, attr, None)
        _require(
            isinstance(value, int) and value > 0, game, f"`{attr}` must be a positive int: {value}"
        )
    shape = getattr(game, "observation_shape", None)
    _require(
        isinstance(shape, tuple) and len(shape) == 3 and all(isinstance(n, int) for n in shape),
        game,
        f"`observation_shape` must be a tuple of three ints (H, W, C): {shape!r}",
    )
    for attr in ("players", "colours", "marks"):
        value = getattr(game, attr)
        _require(
            isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value),
            game,
            f"`{attr}` must be a pair of str: {value!r}",
        )
    order = np.asarray(game.move_order())
    _require(
        sorted(order.tolist()) == list(range(game.num_actions)),
        game,
        "move_order() must be a permutation of the actions",
    )
    _require(
        all(
            isinstance(low, int) and isinstance(high, int) and low <= high
            for low, high in game.sizes.values()
        ),
        game,
        f"`sizes` must map keywords to (min, max) ints: {game.sizes!r}",
    )


def _check_init(game: Game, keys: jax.Array) -> None:
    eager = _call(game, "init(key) eagerly", game.init, keys[0])
    jitted = _call(game, "jax.jit(init)", jax.jit(game.init), keys[0])
    batched = _call(game, "jax.jit(jax.vmap(init))", jax.jit(jax.vmap(game.init)), keys)
    for field in _FIELDS:
        _require(hasattr(eager, field), game, f"the State has no `{field}` field")
    for path, leaf in jax.tree_util.tree_flatten_with_path(eager)[0]:
        kind = leaf.dtype
        _require(
            kind.itemsize <= 4,  # typed PRNG keys are 8 or 16
            game,
            f"State{jax.tree_util.keystr(path)} must hold bools, integers or floats of at most "
            f"4 bytes (a key as its uint32 `jax.random.key_data`), got {kind}",
        )
    _require(_same(eager, jitted), game, "init(key) differs eagerly and under jit")
    _require(_same(eager, _index(batched, 0)), game, "init(key) differs eagerly and under vmap")
    _require(int(eager.current_player) == 0, game, "player 0 must move first")
    _require(not bool(eager.terminated), game, "the start position is terminated")
    _require(np.asarray(eager.legal_action_mask).any(), game, "no legal action at the start")
    _require(not np.asarray(eager.rewards).any(), game, "rewards at the start must be zero")


def _check_fields(game: Game, states: State) -> None:
    """Shapes and dtypes of the contract fields over [T + 1, B] states, and their invariants."""
    lead = states.terminated.shape
    expected = {
        "current_player": (lead, np.int32),
        "legal_action_mask": ((*lead, game.num_actions), np.bool_),
        "terminated": (lead, np.bool_),
        "rewards": ((*lead, 2), np.float32),
    }
    for field, (shape, dtype) in expected.items():
        value = getattr(states, field)
        _require(
            value.shape == shape and value.dtype == dtype,
            game,
            f"State.{field} must be {np.dtype(dtype).name}{list(shape[2:])}, "
            f"got {value.dtype}{list(value.shape[2:])}",
        )
    _require(np.isin(states.current_player, (0, 1)).all(), game, "current_player not 0 or 1")
    live = ~states.terminated
    has_move = states.legal_action_mask.any(axis=-1)
    _require(
        (has_move == live).all(),
        game,
        "a live state must have a legal action, a terminated one none",
    )
    _require(
        (states.terminated[:-1] <= states.terminated[1:]).all(),
        game,
        "a terminated game came back to life",
    )
    _require(
        states.terminated[game.max_game_length].all(),
        game,
        f"a random game lasted longer than max_game_length={game.max_game_length} moves",
    )


def _check_rewards(game: Game, states: State) -> None:
    rewards = states.rewards
    _require(np.isfinite(rewards).all(), game, "rewards are not finite")
    _require((rewards[..., 0] == -rewards[..., 1]).all(), game, "rewards are not zero-sum")
    # Rewards come only with the transition into a terminated state.
    ended = np.concatenate([states.terminated[:1], states.terminated[1:] & ~states.terminated[:-1]])
    _require(
        not rewards[~ended].any(),
        game,
        "rewards must be zero except on the move that ends the game (and on a finished game)",
    )
    _require(np.isin(rewards, (-1.0, 0.0, 1.0)).all(), game, "final rewards must be +1, -1 or 0")


def _check_eager_matches_batched(
    game: Game, init_key: jax.Array, actions: np.ndarray, states: State
) -> None:
    """One game stepped eagerly (plus one no-op ply) equals the jitted, vmapped one."""
    state = game.init(init_key)
    for t, action in enumerate(actions):
        state = _call(game, "step(state, action) eagerly", game.step, state, int(action))
        _require(
            _same(state, _index(states, t + 1)),
            game,
            f"step differs eagerly and under jit/vmap at ply {t + 1}",
        )
        if bool(state.terminated) and t + 1 < len(actions):
            _require(
                _same(game.step(state, int(action)), _index(states, t + 2)),
                game,
                "stepping a finished game eagerly differs from under jit/vmap",
            )
            break
    for fn in ("observe", "board"):
        eager = _call(game, f"{fn}(state) eagerly", getattr(game, fn), state)
        jitted = _call(game, f"jax.jit({fn})", jax.jit(getattr(game, fn)), state)
        _require(np.array_equal(eager, jitted), game, f"{fn} differs eagerly and under jit")
    _require(isinstance(game.render(state), str), game, "render(state) must return a str")
    picture = _call(game, "svg(state)", game.svg, state)
    _require(isinstance(picture, str) and "<svg" in picture, game, "svg(state) is not SVG text")


def _check_views(game: Game, states: State) -> np.ndarray:
    """observe, board and heuristic over every state, under jit and vmap; the
    observations."""
    obs = _call(game, "jax.jit(jax.vmap(observe))", _over_states(game.observe), states)
    shape = (*states.terminated.shape, *game.observation_shape)
    _require(
        obs.shape == shape and obs.dtype == jnp.float32,
        game,
        f"observe must give float32{list(game.observation_shape)}, "
        f"got {obs.dtype}{list(obs.shape[2:])}",
    )
    _require(np.isfinite(obs).all(), game, "observations are not finite")
    board = _call(game, "jax.jit(jax.vmap(board))", _over_states(game.board), states)
    _require(
        board.shape[2:] == game.observation_shape[:2] and jnp.issubdtype(board.dtype, jnp.integer),
        game,
        f"board must be an integer array of the grid shape {game.observation_shape[:2]}, "
        f"got {board.dtype}{list(board.shape[2:])}",
    )
    for player in (0, 1):
        value = _call(
            game,
            f"jax.jit(jax.vmap(heuristic)) for player {player}",
            _over_states(lambda s, p=player: game.heuristic(s, jnp.int32(p))),
            states,
        )
        _require(
            value.shape == states.terminated.shape and value.dtype == jnp.float32,
            game,
            f"heuristic(state, player) must be a float32 scalar, got {value.dtype}"
            f"{list(value.shape[2:])}",
        )
        _require(np.isfinite(value).all(), game, "heuristic is not finite")
    return np.asarray(obs)


def _check_terminal_noop(game: Game, final: State) -> None:
    _require(final.terminated.all(), game, "random games did not finish")
    step = jax.jit(jax.vmap(game.step))
    for action in (0, game.num_actions - 1, -1):
        after = step(final, jnp.full(final.terminated.shape, action, jnp.int32))
        _require(not np.asarray(after.rewards).any(), game, "stepping a finished game gave rewards")
        _require(
            _same(after.replace(rewards=final.rewards), final),
            game,
            f"stepping a finished game with action {action} changed the state",
        )


def _check_illegal_action(game: Game, states: State) -> None:
    live = ~states.terminated & ~states.legal_action_mask.all(axis=-1)
    found = np.argwhere(live)
    t, b = found[len(found) // 2] if len(found) else (0, 0)
    state = _index(states, t, b)
    illegal = np.flatnonzero(~state.legal_action_mask)[:1].tolist()
    mover = int(state.current_player)
    step = jax.jit(game.step)
    for action in [*illegal, -1, game.num_actions]:
        for how, after in (
            ("eagerly", game.step(state, action)),
            ("under jit", step(state, jnp.int32(action))),
        ):
            _require(
                bool(after.terminated)
                and after.rewards[mover] == -1.0
                and after.rewards[1 - mover] == 1.0
                and not np.asarray(after.legal_action_mask).any(),
                game,
                f"illegal action {action} {how} must end the game with the mover losing",
            )
        try:
            game.checked_step(state, action)
        except IllegalMoveError:
            pass
        else:
            raise AssertionError(f"{game.name}: checked_step accepted illegal action {action}")


def _check_symmetries(
    game: Game, init_keys: jax.Array, actions: np.ndarray, states: State, obs: np.ndarray
) -> None:
    """transform-then-step-with-mapped-action equals step-then-transform along whole games,
    for every symmetry that fixes the start positions."""
    syms = game.symmetries
    _require(len(syms) and syms[0].name == "identity", game, "symmetries must start with identity")
    height, width, _ = game.observation_shape
    used = []
    for sym in syms:
        _require(
            sorted(sym.action_source.tolist()) == list(range(game.num_actions))
            and sorted(sym.cell_source.tolist()) == list(range(height * width)),
            game,
            f"symmetry {sym.name} is not a permutation of the actions and cells",
        )
        if np.array_equal(sym.observation(obs[0]), obs[0]):
            used.append(sym)
    _require(
        np.array_equal(syms[0].action_source, np.arange(game.num_actions))
        and np.array_equal(syms[0].cell_source, np.arange(height * width)),
        game,
        "the identity symmetry moves something",
    )
    # Every symmetry's games in one batch: [T, G * B].
    mapped = np.concatenate([sym.action_map[actions] for sym in used], axis=1)
    keys = jnp.concatenate([init_keys] * len(used))
    replayed, sym_obs = _replay(game, keys, jnp.asarray(mapped))
    batch = actions.shape[1]
    for i, sym in enumerate(used):
        part = _index(replayed, slice(None), slice(i * batch, (i + 1) * batch))
        where = f"symmetry {sym.name} does not commute with step"
        _require(
            np.array_equal(sym_obs[:, i * batch : (i + 1) * batch], sym.observation(obs)),
            game,
            f"{where}: observations differ",
        )
        _require(
            np.array_equal(part.legal_action_mask, sym.policy(states.legal_action_mask)),
            game,
            f"{where}: legal action masks differ",
        )
        _require(
            np.array_equal(part.rewards, states.rewards)
            and np.array_equal(part.terminated, states.terminated),
            game,
            f"{where}: rewards or termination differ",
        )


def _check_notation(game: Game, states: State) -> None:
    for action in range(game.num_actions):
        text = _call(game, f"format_action({action})", game.format_action, action)
        _require(isinstance(text, str) and text, game, f"format_action({action}) is empty")
        back = _call(game, f"parse_action({text!r})", game.parse_action, text)
        _require(back == action, game, f"parse_action(format_action({action})) gave {back}")
    for bad_action in (-1, game.num_actions):
        try:
            game.format_action(bad_action)
        except IllegalMoveError:
            continue
        raise AssertionError(f"{game.name}: format_action({bad_action}) must refuse it")
    for bad in ("", "?!"):
        try:
            game.parse_action(bad)
        except IllegalMoveError:
            continue
        raise AssertionError(f"{game.name}: parse_action({bad!r}) must raise IllegalMoveError")
    state = _index(states, 1, 0) if not states.terminated[1, 0] else _index(states, 0, 0)
    legal = np.flatnonzero(state.legal_action_mask)
    illegal = np.flatnonzero(~state.legal_action_mask)
    text = game.format_action(int(legal[0]))
    _require(game.parse_action(text, state) == legal[0], game, f"legal move {text!r} refused")
    if len(illegal):
        text = game.format_action(int(illegal[0]))
        try:
            game.parse_action(text, state)
        except IllegalMoveError:
            return
        raise AssertionError(f"{game.name}: parse_action accepted illegal move {text!r}")


@functools.partial(jax.jit, static_argnums=0)
def _chance_views(game: Game, states: State, actions: jax.Array) -> tuple[jax.Array, State]:
    """The chance probabilities [T, B, C] of the afterstates of `actions` [T, B] at `states`
    [T + 1, B], and the States [C, T, B] that each outcome gives there. A deterministic game's
    afterstates are its next states (checked eagerly in `_check_chance`), not recompiled."""
    if game.has_chance:
        after = jax.vmap(jax.vmap(game.afterstate))(_index(states, slice(0, -1)), actions)
    else:
        after = _index(states, slice(1, None))
    probs = jax.vmap(jax.vmap(game.chance_probs))(after)
    outcomes = jnp.arange(game.chance_outcomes, dtype=jnp.int32)
    rolled = jax.vmap(lambda o: jax.vmap(jax.vmap(lambda a: game.step_chance(a, o)))(after))(
        outcomes
    )
    return probs, rolled


def _check_chance(game: Game, actions: np.ndarray, states: State) -> None:
    """The chance contract along the random games: see `check_game`."""
    outcomes = game.chance_outcomes
    _require(
        isinstance(outcomes, int) and outcomes >= 1,
        game,
        f"`chance_outcomes` must be a positive int: {outcomes!r}",
    )
    _require(game.has_chance == (outcomes > 1), game, "has_chance must be chance_outcomes > 1")
    probs, rolled = _call(
        game,
        "afterstate, chance_probs and step_chance under jit and vmap",
        _chance_views,
        game,
        states,
        jnp.asarray(actions),
    )
    probs = np.asarray(probs)
    _require(
        probs.shape == (*actions.shape, outcomes) and probs.dtype == np.float32,
        game,
        f"chance_probs must be float32[{outcomes}], got {probs.dtype}{list(probs.shape[2:])}",
    )
    _require((probs >= 0).all(), game, "chance_probs has a negative probability")
    _require(np.allclose(probs.sum(-1), 1.0, atol=1e-5), game, "chance_probs does not sum to one")
    unreached = np.flatnonzero(~(probs > 0).any(axis=(0, 1)))
    _require(not len(unreached), game, f"chance outcomes {unreached.tolist()} are never possible")
    # `step` is one of the outcomes: [C, T, B] where every leaf of the State matches.
    nxt = _index(states, slice(1, None))
    match = np.ones((outcomes, *actions.shape), bool)
    for leaf, want in zip(jax.tree.leaves(rolled), jax.tree.leaves(nxt), strict=True):
        equal = np.asarray(leaf) == np.asarray(want)[None]
        match &= equal.reshape((*match.shape, -1)).all(-1)
    _require(
        (match & (probs.transpose(2, 0, 1) > 0)).any(0).all(),
        game,
        "step(state, action) is not step_chance(afterstate(state, action), outcome) for any "
        "outcome of positive probability",
    )
    t, b = 0, 0
    state, action = _index(states, t, b), int(actions[t, b])
    after = _call(game, "afterstate(state, action) eagerly", game.afterstate, state, action)
    _require(
        game.has_chance or _same(after, _index(states, t + 1, b)),
        game,
        "afterstate must be step in a game without chance",
    )
    for outcome in np.flatnonzero(probs[t, b] > 0)[:2].tolist():
        once = _call(game, "step_chance eagerly", game.step_chance, after, outcome)
        _require(
            _same(once, game.step_chance(after, outcome))
            and _same(once, _index(rolled, outcome, t, b)),
            game,
            f"chance outcome {outcome} gives different States (eagerly, again, under jit/vmap)",
        )
