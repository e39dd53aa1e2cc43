"""The browser-play server: one static page and a small JSON API (Starlette).

    GET  /api/options            games, sizes, opponents (baselines, zoo, checkpoints)
    POST /api/games              {"game", "kwargs", "opponent", "human": 0|1} -> a new game
    GET  /api/games/{id}         the game's current view
    POST /api/games/{id}/move    {"action": int, "ply": int} -> the view after the reply
    POST /api/games/{id}/undo    {"ply": int}
    POST /api/games/{id}/hint    {"ply": int} -> an analysis of your position by the `analyst`
    POST /api/warm               {"game", "kwargs", "opponent"} -> compile it in the background

`ply` is the number of moves the page has seen: a request on an older position is refused (409),
so that two tabs cannot play over each other. Errors are `{"error": message}` with a 4xx status.
Legal moves with no click target (Othello's pass; every move of a pgx game) come as `buttons`.
Agents are compiled once per (game, spec) and shared (`azjax.session.prepare`); `view["ready"]`
says whether the opponent is compiled.
"""

from __future__ import annotations

import collections
import inspect
import json
import pathlib
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

import jax
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import games
from azjax import agents, checkpoint, zoo
from azjax.checks import check_seed, size_values
from azjax.config import config_to_dict
from azjax.export import headline
from azjax.model import load as load_model
from azjax.session import (
    FALLBACK_OPPONENT,
    Advice,
    Ply,
    Session,
    default_opponent,
    in_background,
    prepare,
    prepared,
)
from games import IllegalMoveError, svg

STATIC = pathlib.Path(__file__).resolve().parent / "static"
MAX_BODY = 4096  # bytes; every request of this API fits in far less
MAX_DEPTH = 4  # levels of nested lists and objects; this API's requests use two
BASELINES = ("random", "greedy", "alphabeta:2", "alphabeta:4", "mcts:100", "mcts:200", "mcts:400")


def sizes(name: str) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Game `name`'s size keywords: keyword -> (default, accepted values)."""
    parameters = inspect.signature(type(games.make(name))).parameters
    return {key: (parameters[key].default, values) for key, values in size_values(name).items()}


def default_kwargs(name: str) -> dict[str, int]:
    """Game `name`'s default size keywords ({} for a game this azjax does not have)."""
    return {k: d for k, (d, _) in sizes(name).items()} if name in games.names() else {}


def _depth(data: Any) -> int:
    """How deeply lists and objects nest in parsed JSON (a scalar: 0), iteratively."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend(
                (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


async def read_json(request: Request) -> dict[str, Any]:
    """The request's JSON object, refusing bodies over MAX_BODY bytes (413), a Content-Length
    that is no count of bytes, bodies not JSON or nested deeper than MAX_DEPTH (400)."""
    too_large = HTTPException(413, f"request body too large: at most {MAX_BODY} bytes")
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise HTTPException(400, f"Content-Length must be a count of bytes, got {declared!r}")
    if declared is not None and int(declared) > MAX_BODY:
        raise too_large
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise too_large
    too_deep = f"request body is nested too deeply: at most {MAX_DEPTH} levels of [] and {{}}"
    try:
        data = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise HTTPException(400, f"request body is not JSON: {err}") from None
    except RecursionError:
        raise HTTPException(400, too_deep) from None
    if _depth(data) > MAX_DEPTH:
        raise HTTPException(400, too_deep)
    if not isinstance(data, dict):
        raise HTTPException(400, f"expected a JSON object, got {type(data).__name__}")
    return data


def fields(data: dict[str, Any], **spec: tuple[type, bool]) -> dict[str, Any]:
    """Check `data` against `name=(type, required)`: no unknown keys, right types."""
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise HTTPException(400, f"unknown field(s) {unknown}; expected {sorted(spec)}")
    for name, (kind, required) in spec.items():
        if name not in data:
            if required:
                raise HTTPException(400, f"missing field {name!r}")
        elif not isinstance(data[name], kind) or (kind is int and isinstance(data[name], bool)):
            got = type(data[name]).__name__
            raise HTTPException(400, f"field {name!r} must be {kind.__name__}, got {got}")
    return data


def game_kwargs(name: str, given: dict) -> dict[str, int]:
    """Validated size keywords for game `name`, defaults filled in."""
    if name not in games.names():
        raise HTTPException(400, f"unknown game {name!r}; expected one of {games.names()}")
    allowed = sizes(name)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise HTTPException(
            400, f"unknown size keyword(s) {unknown} for {name}; expected {sorted(allowed)}"
        )
    out = {}
    for key, (default, values) in allowed.items():
        out[key] = value = given.get(key, default)
        if isinstance(value, bool) or value not in values:
            raise HTTPException(400, f"{name} {key} must be one of {list(values)}, got {value!r}")
    return out


_CHECKED: dict[tuple[str, int], dict[str, Any] | None] = {}


def _checkpoint_game(run: pathlib.Path, step: int) -> dict[str, Any] | None:
    """Checkpoint `step` of `run`'s game config (None if it cannot load), read once per mtime."""
    folder = run.resolve() / checkpoint.CHECKPOINT_DIR / str(step)
    try:
        key = (str(folder), folder.stat().st_mtime_ns)
    except OSError:  # removed since it was listed
        return None
    if key not in _CHECKED:
        try:
            _CHECKED[key] = config_to_dict(load_model(f"{run}@{step}").config)["game"]
        except ValueError:
            _CHECKED[key] = None
    return _CHECKED[key]


def find_runs(runs_dir: str | None, depth: int = 3) -> list[dict[str, Any]]:
    """Runs under `runs_dir`: path, game, kwargs, steps up to the newest that loads (if any)."""
    if runs_dir is None or not pathlib.Path(runs_dir).is_dir():
        return []
    found, frontier = [], [pathlib.Path(runs_dir)]
    for _ in range(depth):
        deeper = []
        for child in (c for f in frontier for c in sorted(f.iterdir()) if c.is_dir()):
            steps = checkpoint.list_steps(child)
            if not steps:
                deeper.append(child)
            for i in reversed(range(len(steps))):
                game = _checkpoint_game(child, steps[i])
                if game is not None:
                    kwargs = {**default_kwargs(game["name"]), **(game.get("kwargs") or {})}
                    run = {"path": str(child), "game": game["name"], "kwargs": kwargs}
                    found.append({**run, "steps": steps[: i + 1]})
                    break
        frontier = deeper
    return found


def headline_figure(card: dict[str, Any]) -> str:
    """A zoo model's first match score or solver best-move share as `zoo:NAME` ("" if none)."""
    for key, figures in card.get("strength", {}).items():
        if figures.get("agent") != f"zoo:{card.get('name')}":
            continue
        if "score" in figures:
            return f"{figures['score']:.0%} vs {key.split(' vs ', 1)[-1].split(',', 1)[0]}"
        if "best_move" in figures:
            return f"solver best move {figures['best_move']:.0%}"
    return ""


def find_zoo() -> list[dict[str, Any]]:
    """The zoo's models: name, game, kwargs, label, strength and whether it is the default."""
    found = []
    for name in zoo.names():
        try:
            card = zoo.card(name)
            game = card["game"]["name"]
            kwargs = {**default_kwargs(game), **card["game"]["kwargs"]}
            default = zoo.default(games.make(game, **kwargs)) == name  # the page's first choice
        except ValueError:  # damaged, or a game this azjax does not have: not offered
            continue
        found.append({"name": name, "game": game, "kwargs": kwargs, "default": default})
        found[-1].update(label=headline_figure(card), strength=headline(card))
    return found


def baselines(name: str) -> list[str]:
    """The baselines that can play game `name` (alpha-beta would read a chance game's dice)."""
    chance = games.make(name).has_chance
    return [s for s in BASELINES if not chance or agents.parse_spec(s).kind != "alphabeta"]


def opponents(runs: list[dict[str, Any]], name: str, kwargs: dict[str, int]) -> list[str]:
    """The agent specs offered for a game of this size."""
    specs = baselines(name)
    for model in find_zoo():
        if model["game"] == name and model["kwargs"] == kwargs:
            specs += [f"zoo:{model['name']}", f"policy-zoo:{model['name']}"]
    for run in runs:  # the newest checkpoint, named, so a newer one is a new opponent
        if run["game"] == name and run["kwargs"] == kwargs:
            at = f"{run['path']}@{run['steps'][-1]}"
            specs += [f"search:{at}", f"policy:{at}"]
    return specs


def first_choice(runs: list[dict[str, Any]], name: str, kwargs: dict[str, int]) -> str:
    """The page's first opponent (as app.js): the zoo's model, a run's search, else MCTS."""
    game = games.make(name, **kwargs)
    trained = [s for s in opponents(runs, name, kwargs) if s.startswith("search:")]
    return trained[0] if zoo.default(game) is None and trained else default_opponent(game)


def warm_in_background(pairs: list[tuple[games.Game, str]], analyse: bool) -> None:
    """`prepare` each (game, spec) and draw its first board (pgx's takes seconds) in a thread;
    a failure is left to the game that asks for it."""

    def run(game: games.Game, spec: str) -> None:
        try:
            prepare(game, spec, analyse)
            game.svg(game.init(jax.random.key(0)))
        except ValueError:  # an opponent that cannot be made: a new game reports it
            pass

    for game, spec in pairs:
        if not prepared(game, spec):
            in_background(("warm", game, spec), lambda g=game, s=spec: run(g, s))


class BrowserGame:
    """A Session, its size keywords, a lock, and the analyses by ply (so Undo shows them)."""

    def __init__(self, session: Session, kwargs: dict[str, int]) -> None:
        self.session, self.kwargs = session, kwargs
        self.lock = threading.Lock()
        self.analyses: dict[int, Advice] = {}


def board_svg(session: Session, index: int, clickable: bool = False) -> str:
    last = session.plies[index - 1].action if index > 0 else None
    state = session.states[index]
    return session.game.svg(state, last_action=last, clickable=clickable, viewer=session.human)


def _ply(session: Session, p: Ply, i: int | None = None) -> dict[str, Any]:
    """Ply `p` for the page; with its index `i`, its pictures (Chain Reaction's explosions)."""
    out: dict[str, Any] = {"player": p.player, "notation": p.notation, "by": p.by}
    if i is not None:
        game, frames = session.game, []
        if hasattr(game, "chain_levels"):
            levels = game.chain_levels(session.states[i], p.action)
            frames = [game.svg(board=b, last_action=p.action) for b in levels[:-1]]
        out["frames"] = [*frames, board_svg(session, i + 1)]
    return out


def _advice(advice: Advice) -> dict[str, Any]:
    moves = [{"move": m, "share": p} for m, p in advice.moves]
    return {"source": advice.source, "value": advice.value, "moves": moves}


def view(gid: str, entry: BrowserGame, first_new: int, analyse: bool) -> dict[str, Any]:
    """Everything the page shows, with the plies from `first_new` on to animate."""
    session = entry.session
    game, state, plies = session.game, session.state, len(session.plies)
    board = board_svg(session, plies, clickable=session.human_to_move)
    drawn = {int(a) for a in re.findall(r'data-action="(\d+)"', board)}
    legal = game.legal_actions(state)
    if session.analysis is not None:
        entry.analyses[plies] = session.analysis
    advice = entry.analyses.get(plies) if analyse else None
    analysis = advice and _advice(advice) | {
        "own": session.own,
        "played": next((p.notation for p in reversed(session.plies) if p.by == "agent"), None),
    }
    return {
        "id": gid,
        "game": game.name,
        "kwargs": entry.kwargs,
        "opponent": session.opponent,
        "analyst": session.analyst,
        "ready": prepared(game, session.opponent),
        "human": session.human,
        "players": game.players,
        "ply": plies,
        "to_move": None if session.over else int(state.current_player),
        "score": svg.score(game, game.board(state)),
        "over": session.over,
        "result": session.result(),
        "svg": board,
        "legal": [game.format_action(a) for a in legal],
        "buttons": [  # moves with no click target (Othello's pass), all of a board pgx draws
            {"action": a, "label": game.format_action(a)}
            for a in (legal if session.human_to_move else [])
            if a not in drawn or game.name.startswith(games.PGX_PREFIX)
        ],
        "moves": [_ply(session, p) for p in session.plies],
        "new": [_ply(session, p, i) for i, p in enumerate(session.plies) if i >= first_new],
        "analysis": analysis,
    }


def create_app(
    runs_dir: str | None = None,
    *,
    analyse: bool = True,
    max_games: int = 256,
    warm_up: bool = False,
) -> Starlette:
    """The server. `runs_dir`: where to find checkpoints; `analyse`: analyse each agent move
    (by its own search, else a second one); `max_games`: games kept (LRU); `warm_up`: compile
    the first game's first opponent in the background (the page asks for the one chosen as it
    is chosen)."""
    store: collections.OrderedDict[str, BrowserGame] = collections.OrderedDict()
    store_lock = threading.Lock()
    if warm_up:  # in a thread: finding the runs reads their checkpoints

        def first() -> None:
            name = games.names()[0]
            spec = first_choice(find_runs(runs_dir), name, default_kwargs(name))
            warm_in_background([(games.make(name), spec)], analyse)

        in_background(("first",), first)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def options(request: Request) -> Response:
        def game(name: str) -> dict[str, Any]:
            found = {k: {"default": d, "values": v} for k, (d, v) in sizes(name).items()}
            players = games.make(name).players
            return {"name": name, "players": players, "baselines": baselines(name), "sizes": found}

        runs = await run_in_threadpool(find_runs, runs_dir)
        return JSONResponse(
            {
                "games": [game(name) for name in games.names()],
                "baselines": list(BASELINES),
                "fallback": FALLBACK_OPPONENT,  # the opponent of a game without zoo or run
                "zoo": await run_in_threadpool(find_zoo),
                "runs": runs,
            }
        )

    async def offered(request: Request, **more: tuple[type, bool]) -> tuple[dict, games.Game]:
        spec = {"game": (str, True), "kwargs": (dict, False), "opponent": (str, True), **more}
        data = fields(await read_json(request), **spec)
        kwargs = game_kwargs(data["game"], data.get("kwargs", {}))
        if data.get("human", 0) not in (0, 1):
            raise HTTPException(400, f"human must be 0 (first) or 1 (second), got {data['human']}")
        runs = await run_in_threadpool(find_runs, runs_dir)
        choices = opponents(runs, data["game"], kwargs)
        if data["opponent"] not in choices:
            raise HTTPException(400, f"unknown opponent {data['opponent']!r}; offered: {choices}")
        data["kwargs"] = kwargs
        return data, games.make(data["game"], **kwargs)

    async def new_game(request: Request) -> Response:
        data, game = await offered(request, human=(int, False), seed=(int, False))
        try:
            seed = check_seed(data.get("seed", secrets.randbits(31)))
        except ValueError as err:
            raise HTTPException(400, str(err)) from None

        def start() -> BrowserGame:
            session = Session(game, data["opponent"], data.get("human", 0), seed)
            session.reply(analyse)
            return BrowserGame(session, data["kwargs"])

        try:
            entry = await run_in_threadpool(start)
        except ValueError as err:  # a checkpoint that cannot be used
            raise HTTPException(400, str(err)) from None
        gid = secrets.token_hex(8)
        with store_lock:
            store[gid] = entry
            while len(store) > max_games:
                store.popitem(last=False)
        return JSONResponse(view(gid, entry, 0, analyse), status_code=201)

    async def warm(request: Request) -> Response:
        data, game = await offered(request)
        ready = prepared(game, data["opponent"])
        warm_in_background([(game, data["opponent"])], analyse)  # nothing to do when ready
        return JSONResponse({"ready": ready}, status_code=200 if ready else 202)

    def lookup(request: Request) -> tuple[str, BrowserGame]:
        gid = request.path_params["gid"]
        with store_lock:
            if gid not in store:
                raise HTTPException(404, f"unknown or expired game id {gid!r}; start a new game")
            store.move_to_end(gid)
            return gid, store[gid]

    async def show(request: Request) -> Response:
        gid, entry = lookup(request)

        def current() -> dict[str, Any]:
            with entry.lock:
                return view(gid, entry, len(entry.session.plies), analyse)

        return JSONResponse(await run_in_threadpool(current))

    def on_game(act: Callable[[str, BrowserGame, dict], Any], **spec: tuple[type, bool]) -> Route:
        """A POST on a game at the ply the request names (else 409), under the game's lock."""

        async def endpoint(request: Request) -> Response:
            gid, entry = lookup(request)
            data = fields(await read_json(request), **spec, ply=(int, True))

            def locked() -> Any:
                with entry.lock:
                    now = len(entry.session.plies)
                    if data["ply"] != now:
                        stale = f"stale request: made at ply {data['ply']} but the game is at ply"
                        raise HTTPException(409, f"{stale} {now}; reload it")
                    return act(gid, entry, data)

            return JSONResponse(await run_in_threadpool(locked))

        return Route(f"/api/games/{{gid}}/{act.__name__}", endpoint, methods=["POST"])

    def move(gid: str, entry: BrowserGame, data: dict) -> dict[str, Any]:
        session, action = entry.session, data["action"]
        start, legal = len(session.plies), session.game.legal_actions(session.state)
        if session.human_to_move and action not in legal:
            named = ", ".join(f"{a} ({session.game.format_action(a)})" for a in legal)
            message = f"legal actions (their notation in brackets): {named}"
            raise HTTPException(400, f"action {action} is not legal here; {message}")
        try:
            session.play(action)
        except IllegalMoveError as err:
            raise HTTPException(409 if session.over else 400, str(err)) from None
        session.reply(analyse)
        return view(gid, entry, start, analyse)

    def undo(gid: str, entry: BrowserGame, data: dict) -> dict[str, Any]:
        if not entry.session.undo():
            raise HTTPException(409, "nothing to undo: you have not moved yet")
        return view(gid, entry, len(entry.session.plies), analyse)

    def hint(gid: str, entry: BrowserGame, data: dict) -> dict[str, Any]:
        if not entry.session.human_to_move:
            raise HTTPException(409, "no hint: it is not your turn")
        return _advice(entry.session.advice())

    async def error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    routes = [
        Route("/", index),
        Route("/api/options", options),
        Route("/api/games", new_game, methods=["POST"]),
        Route("/api/games/{gid}", show),
        on_game(move, action=(int, True)),
        on_game(undo),
        on_game(hint),
        Route("/api/warm", warm, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: error})
    app.state.games = store
    return app
