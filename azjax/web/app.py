"""The browser-play server: one static page and a small JSON API (Starlette).

    GET  /api/options                 games, sizes, opponents (baselines, zoo, checkpoints)
    POST /api/games                   {"game", "kwargs", "opponent", "human": 0|1} -> a new game
    GET  /api/games/{id}              the game's current view
    POST /api/games/{id}/move         {"action": int, "ply": int} -> the view after the reply
    POST /api/games/{id}/undo         {"ply": int}
    POST /api/games/{id}/hint         {"ply": int} -> an analysis of your position, by the
                                      game's `analyst` (a checkpoint's search, else pure MCTS)
    POST /api/warm                    {"game", "kwargs", "opponent"} -> compile that opponent
                                      in the background (the page asks when one is chosen)

Legal moves with no click target on the board's drawing (Othello's pass; every move of a pgx
game, drawn by pgx) are offered as `buttons`, which the page lists as buttons or, when there
are many, as one menu.

`ply` is the number of moves the page has seen; a request made on an older position is refused
(409) so that two tabs cannot play over each other. Every error is a JSON body
`{"error": message}` with a 4xx status. Games are independent (one lock each); agents are
compiled once per (game, spec) and shared by all games; `view["ready"]` says whether the
opponent has moved on this server before (else its first move compiles it), and the server can
compile the usual opponents ahead (`create_app(warm=True)`).
"""

from __future__ import annotations

import atexit
import collections
import inspect
import json
import pathlib
import re
import secrets
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import games
from azjax import agents, checkpoint, zoo
from azjax.card import headline
from azjax.checks import check_seed, size_values
from azjax.config import config_to_dict
from azjax.model import load as load_model
from azjax.session import Advice, Session, default_opponent
from games import IllegalMoveError, svg

STATIC = pathlib.Path(__file__).resolve().parent / "static"
MAX_BODY = 4096  # bytes; every request of this API fits in far less
MAX_DEPTH = 4  # levels of nested lists and objects; this API's requests use two
BASELINES = ("random", "greedy", "alphabeta:2", "alphabeta:4", "mcts:100", "mcts:400")


def sizes(name: str) -> dict[str, tuple[int, tuple[int, ...]]]:
    """The size keywords of game `name`: keyword -> (default, accepted values), from the game's
    constructor's defaults and `checks.size_values`."""
    parameters = inspect.signature(type(games.make(name))).parameters
    return {key: (parameters[key].default, values) for key, values in size_values(name).items()}


def default_kwargs(name: str) -> dict[str, int]:
    """The default size keywords of game `name` (none for a game this azjax does not have)."""
    if name not in games.names():
        return {}
    return {key: default for key, (default, _) in sizes(name).items()}


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


# ----------------------------------------------------------------------------- requests


def _depth(data: Any) -> int:
    """How deeply lists and objects nest in parsed JSON (a scalar: 0), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            values = item.values() if isinstance(item, dict) else item
            stack.extend((v, level + 1) for v in values)
    return deepest


async def read_json(request: Request) -> dict[str, Any]:
    """The request's JSON object, refusing bodies over MAX_BODY bytes (413), a Content-Length
    that is no count of bytes, bodies not JSON or nested deeper than MAX_DEPTH (400)."""
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise ApiError(400, f"Content-Length must be a count of bytes, got {declared!r}")
    if declared is not None and int(declared) > MAX_BODY:
        raise ApiError(413, f"request body too large: at most {MAX_BODY} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise ApiError(413, f"request body too large: at most {MAX_BODY} bytes")
    too_deep = f"request body is nested too deeply: at most {MAX_DEPTH} levels of [] and {{}}"
    try:
        data = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(400, f"request body is not JSON: {err}") from None
    except RecursionError:
        raise ApiError(400, too_deep) from None
    if _depth(data) > MAX_DEPTH:
        raise ApiError(400, too_deep)
    if not isinstance(data, dict):
        raise ApiError(400, f"expected a JSON object, got {type(data).__name__}")
    return data


def fields(data: dict[str, Any], **spec: tuple[type, bool]) -> dict[str, Any]:
    """Check `data` against `name=(type, required)`: no unknown keys, right types."""
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise ApiError(400, f"unknown field(s) {unknown}; expected {sorted(spec)}")
    out = {}
    for name, (kind, required) in spec.items():
        if name not in data:
            if required:
                raise ApiError(400, f"missing field {name!r}")
            continue
        value = data[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ApiError(
                400, f"field {name!r} must be {kind.__name__}, got {type(value).__name__}"
            )
        out[name] = value
    return out


# ----------------------------------------------------------------------------- runs


_CHECKED: dict[tuple[str, int, int], dict[str, Any] | None] = {}


def _checkpoint_game(run: pathlib.Path, step: int) -> dict[str, Any] | None:
    """The game config of checkpoint `step` of `run`, or None when it cannot be loaded (its
    meta or parameters damaged). Each checkpoint is read once per server (again if rewritten)."""
    folder = run.resolve() / checkpoint.CHECKPOINT_DIR / str(step)
    try:
        key = (str(folder), step, folder.stat().st_mtime_ns)
    except OSError:  # removed since it was listed
        return None
    if key not in _CHECKED:
        try:
            game = config_to_dict(load_model(f"{run}@{step}").config)["game"]
        except ValueError:
            game = None
        _CHECKED[key] = game
    return _CHECKED[key]


def _newest_usable(run: pathlib.Path, steps: list[int]) -> tuple[int, dict[str, Any]] | None:
    """(index in `steps`, game config) of the newest checkpoint that loads, or None."""
    for i in reversed(range(len(steps))):
        game = _checkpoint_game(run, steps[i])
        if game is not None:
            return i, game
    return None


def find_runs(runs_dir: str | None, depth: int = 3) -> list[dict[str, Any]]:
    """Training runs (folders with checkpoints) under `runs_dir`: path, game, kwargs, steps.

    `steps` ends at the newest checkpoint that loads: newer damaged ones are left out."""
    if runs_dir is None or not pathlib.Path(runs_dir).is_dir():
        return []
    found = []
    frontier = [pathlib.Path(runs_dir)]
    for _ in range(depth):
        nxt = []
        for folder in frontier:
            for child in sorted(p for p in folder.iterdir() if p.is_dir()):
                steps = checkpoint.list_steps(child)
                if not steps:
                    nxt.append(child)
                    continue
                usable = _newest_usable(child, steps)
                if usable is None:  # every checkpoint damaged: not offered
                    continue
                newest, game = usable
                kwargs = default_kwargs(game["name"])
                kwargs.update(game.get("kwargs") or {})  # defaults filled in, to compare
                found.append(
                    {
                        "path": str(child),
                        "game": game["name"],
                        "kwargs": kwargs,
                        "steps": steps[: newest + 1],
                    }
                )
        frontier = nxt
    return found


def headline_figure(card: dict[str, Any]) -> str:
    """One strength figure of a model as it plays by default (`zoo:NAME`), for a short label:
    its first recorded match score, or its solver best-move share ("" when it has none)."""
    for key, figures in card.get("strength", {}).items():
        if figures.get("agent") != f"zoo:{card.get('name')}":
            continue
        if "score" in figures:
            return f"{figures['score']:.0%} vs {key.split(' vs ', 1)[-1].split(',', 1)[0]}"
        if "best_move" in figures:
            return f"solver best move {figures['best_move']:.0%}"
    return ""


def find_zoo() -> list[dict[str, Any]]:
    """The zoo's models (azjax.zoo): name, game, kwargs (defaults filled in), a short label
    (`headline_figure`), the card's whole strength record and the default choice."""
    found = []
    for name in zoo.names():
        try:
            card = zoo.card(name)
            game = card["game"]["name"]
            kwargs = default_kwargs(game)
            kwargs.update(card["game"]["kwargs"])
            default = zoo.default(games.make(game, **kwargs)) == name  # the page's first choice
        except ValueError:  # damaged, or a game this azjax does not have: not offered
            continue
        found.append(
            {
                "name": name,
                "game": game,
                "kwargs": kwargs,
                "label": headline_figure(card),
                "strength": headline(card),
                "default": default,
            }
        )
    return found


def baselines(name: str) -> list[str]:
    """The baseline agents that can play game `name`: alpha-beta, which would read the dice to
    come, cannot play a game with chance."""
    if not games.make(name).has_chance:
        return list(BASELINES)
    return [spec for spec in BASELINES if agents.parse_spec(spec).kind != "alphabeta"]


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


# ----------------------------------------------------------------------------- views


def game_kwargs(name: str, given: dict) -> dict[str, int]:
    """Validated size keywords for game `name` (defaults filled in); the request's fields are
    already a str and an object."""
    if name not in games.names():
        raise ApiError(400, f"unknown game {name!r}; expected one of {games.names()}")
    allowed = sizes(name)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ApiError(
            400, f"unknown size keyword(s) {unknown} for {name}; expected {sorted(allowed)}"
        )
    out = {}
    for key, (default, values) in allowed.items():
        value = given.get(key, default)
        if isinstance(value, bool) or value not in values:
            raise ApiError(400, f"{name} {key} must be one of {list(values)}, got {value!r}")
        out[key] = value
    return out


class BrowserGame:
    """A browser game: a Session, its size keywords, a lock, and the agent's analyses by the
    number of plies played when each was shown (so that Undo shows the earlier one again)."""

    def __init__(self, session: Session, kwargs: dict[str, int]) -> None:
        self.session, self.kwargs = session, kwargs
        self.lock = threading.Lock()
        self.analyses: dict[int, Advice] = {}


_READY: set[tuple[games.Game, str]] = set()  # (game, spec) of agents that have moved here
_READY_LOCK = threading.Lock()


def ready(game: games.Game, spec: str) -> bool:
    """Whether agent `spec` has moved in `game` on this server (its next move is not compiled)."""
    return (game, spec) in _READY


def mark_ready(session: Session) -> None:
    if any(p.by == "agent" for p in session.plies):
        with _READY_LOCK:
            _READY.add((session.game, session.opponent))


def warm(game: games.Game, spec: str, analyse: bool) -> None:
    """Compile agent `spec` for `game` (and its analysis) by playing its opening move."""
    if ready(game, spec):
        return
    session = Session(game, spec, human=1)
    session.reply(analyse)
    mark_ready(session)


_WARMING: list[threading.Thread] = []
_STOP_WARMING = threading.Event()


@atexit.register
def _stop_warming() -> None:
    """At exit, let each warm-up finish the compile it is in and stop: a compile still running
    while the interpreter tears JAX down crashes the process."""
    _STOP_WARMING.set()
    for thread in _WARMING:
        thread.join()


def warm_in_background(pairs: list[tuple[games.Game, str]], analyse: bool) -> None:
    """`warm` each (game, spec) in turn, in a daemon thread; failures are left to the game."""

    def run() -> None:
        for game, spec in pairs:
            if _STOP_WARMING.is_set():
                return
            try:
                warm(game, spec, analyse)
            except ValueError:  # an opponent that cannot be made: a new game reports it
                continue

    thread = threading.Thread(target=run, daemon=True, name="azjax-warm")
    _WARMING[:] = [t for t in _WARMING if t.is_alive()] + [thread]
    thread.start()


def own_analysis(spec: str) -> bool:
    """Whether the analysis shown against `spec` is the agent's own search (a network played
    with search) rather than a separate analysis (`azjax.session.analyst`)."""
    return agents.parse_spec(spec).kind in ("search", "zoo")


def board_svg(session: Session, index: int | None = None, clickable: bool = False) -> str:
    game = session.game
    index = len(session.plies) if index is None else index
    last = session.plies[index - 1].action if index > 0 else None
    return game.svg(session.states[index], last_action=last, clickable=clickable)


def ply_frames(session: Session, index: int) -> list[str]:
    """Pictures of ply `index` being played: Chain Reaction's explosion levels, then the result."""
    game, ply = session.game, session.plies[index]
    frames = []
    if hasattr(game, "chain_levels"):
        levels = game.chain_levels(session.states[index], ply.action)
        frames = [game.svg(board=b, last_action=ply.action) for b in levels[:-1]]
    return [*frames, board_svg(session, index + 1)]


def view(gid: str, entry: BrowserGame, first_new: int, analyse: bool) -> dict[str, Any]:
    """Everything the page shows, with the plies from `first_new` on to animate."""
    session = entry.session
    game, state = session.game, session.state
    board = board_svg(session, clickable=session.human_to_move)
    drawn = {int(a) for a in re.findall(r'data-action="(\d+)"', board)}
    legal = game.legal_actions(state)
    plies = len(session.plies)
    if session.analysis is not None:
        entry.analyses[plies] = session.analysis
    advice = entry.analyses.get(plies)
    analysis = None
    if analyse and advice is not None:
        played = next((p.notation for p in reversed(session.plies) if p.by == "agent"), None)
        analysis = {
            "source": advice.source,
            "own": own_analysis(session.opponent),
            "played": played,
            "value": advice.value,
            "moves": [{"move": m, "share": p} for m, p in advice.moves],
        }
    return {
        "id": gid,
        "game": game.name,
        "kwargs": entry.kwargs,
        "opponent": session.opponent,
        "analyst": session.analyst,
        "ready": ready(game, session.opponent),
        "human": session.human,
        "players": game.players,
        "ply": len(session.plies),
        "to_move": None if session.over else int(state.current_player),
        "score": svg.score(game, game.board(state)),
        "over": session.over,
        "result": session.result(),
        "svg": board,
        "legal": [game.format_action(a) for a in legal],
        "buttons": [  # legal moves with no click target on the board (Othello's pass, pgx)
            {"action": a, "label": game.format_action(a)} for a in legal if a not in drawn
        ]
        if session.human_to_move
        else [],
        "moves": [{"player": p.player, "notation": p.notation, "by": p.by} for p in session.plies],
        "new": [
            {
                "player": p.player,
                "notation": p.notation,
                "by": p.by,
                "frames": ply_frames(session, i),
            }
            for i, p in enumerate(session.plies)
            if i >= first_new
        ],
        "analysis": analysis,
    }


# ----------------------------------------------------------------------------- the app


def create_app(
    runs_dir: str | None = None,
    *,
    analyse: bool = True,
    max_games: int = 256,
    warm_up: bool = False,
) -> Starlette:
    """The server. `runs_dir`: where to look for checkpoints; `analyse`: analyse each agent
    move (an extra search per move); `max_games`: games kept (the least recently used go);
    `warm_up`: compile each game's default opponent at its default size in the background."""
    store: collections.OrderedDict[str, BrowserGame] = collections.OrderedDict()
    store_lock = threading.Lock()
    if warm_up:
        pairs = [(games.make(n), default_opponent(games.make(n))) for n in games.names()]
        warm_in_background(pairs, analyse)

    def lookup(request: Request) -> tuple[str, BrowserGame]:
        gid = request.path_params["gid"]
        with store_lock:
            if gid not in store:
                raise ApiError(404, f"unknown or expired game id {gid!r}; start a new game")
            store.move_to_end(gid)
            return gid, store[gid]

    def check_ply(entry: BrowserGame, ply: int) -> None:
        current = len(entry.session.plies)
        if ply != current:
            raise ApiError(
                409, f"stale request: made at ply {ply} but the game is at ply {current}; reload it"
            )

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def options(request: Request) -> Response:
        runs = await run_in_threadpool(find_runs, runs_dir)
        return JSONResponse(
            {
                "games": [
                    {
                        "name": name,
                        "players": games.make(name).players,
                        "baselines": baselines(name),
                        "sizes": {
                            k: {"default": d, "values": v} for k, (d, v) in sizes(name).items()
                        },
                    }
                    for name in games.names()
                ],
                "baselines": list(BASELINES),
                "zoo": await run_in_threadpool(find_zoo),
                "runs": runs,
            }
        )

    async def new_game(request: Request) -> Response:
        data = fields(
            await read_json(request),
            game=(str, True),
            kwargs=(dict, False),
            opponent=(str, True),
            human=(int, False),
            seed=(int, False),
        )
        name = data["game"]
        kwargs = game_kwargs(name, data.get("kwargs", {}))
        human = data.get("human", 0)
        if human not in (0, 1):
            raise ApiError(400, f"human must be 0 (first) or 1 (second), got {human}")
        runs = await run_in_threadpool(find_runs, runs_dir)
        offered = opponents(runs, name, kwargs)
        if data["opponent"] not in offered:
            raise ApiError(400, f"unknown opponent {data['opponent']!r}; offered: {offered}")
        try:
            seed = check_seed(data.get("seed", secrets.randbits(31)))
        except ValueError as err:
            raise ApiError(400, str(err)) from None

        def start() -> BrowserGame:
            session = Session(games.make(name, **kwargs), data["opponent"], human, seed)
            session.reply(analyse)
            mark_ready(session)
            return BrowserGame(session, kwargs)

        try:
            entry = await run_in_threadpool(start)
        except ValueError as err:  # a checkpoint that cannot be used
            raise ApiError(400, str(err)) from None
        gid = secrets.token_hex(8)
        with store_lock:
            store[gid] = entry
            while len(store) > max_games:
                store.popitem(last=False)
        return JSONResponse(view(gid, entry, 0, analyse), status_code=201)

    async def show(request: Request) -> Response:
        gid, entry = lookup(request)

        def current() -> dict[str, Any]:
            with entry.lock:
                return view(gid, entry, len(entry.session.plies), analyse)

        return JSONResponse(await run_in_threadpool(current))

    async def move(request: Request) -> Response:
        gid, entry = lookup(request)
        data = fields(await read_json(request), action=(int, True), ply=(int, True))

        def play() -> dict[str, Any]:
            with entry.lock:
                check_ply(entry, data["ply"])
                session = entry.session
                start = len(session.plies)
                legal = session.game.legal_actions(session.state)
                if session.human_to_move and data["action"] not in legal:
                    named = ", ".join(f"{a} ({session.game.format_action(a)})" for a in legal)
                    raise ApiError(
                        400,
                        f"action {data['action']} is not legal here; legal actions "
                        f"(their notation in brackets): {named}",
                    )
                try:
                    session.play(data["action"])
                except IllegalMoveError as err:
                    raise ApiError(409 if session.over else 400, str(err)) from None
                session.reply(analyse)
                mark_ready(session)
                return view(gid, entry, start, analyse)

        return JSONResponse(await run_in_threadpool(play))

    async def undo(request: Request) -> Response:
        gid, entry = lookup(request)
        data = fields(await read_json(request), ply=(int, True))

        def take_back() -> dict[str, Any]:
            with entry.lock:
                check_ply(entry, data["ply"])
                if not entry.session.undo():
                    raise ApiError(409, "nothing to undo: you have not moved yet")
                return view(gid, entry, len(entry.session.plies), analyse)

        return JSONResponse(await run_in_threadpool(take_back))

    async def hint(request: Request) -> Response:
        _, entry = lookup(request)
        data = fields(await read_json(request), ply=(int, True))

        def give_hint() -> dict[str, Any]:
            with entry.lock:
                check_ply(entry, data["ply"])
                if not entry.session.human_to_move:
                    raise ApiError(409, "no hint: it is not your turn")
                advice = entry.session.advice()
                moves = [{"move": m, "share": p} for m, p in advice.moves]
                return {"moves": moves, "value": advice.value, "source": advice.source}

        return JSONResponse(await run_in_threadpool(give_hint))

    async def warm_request(request: Request) -> Response:
        data = fields(
            await read_json(request), game=(str, True), kwargs=(dict, False), opponent=(str, True)
        )
        name = data["game"]
        kwargs = game_kwargs(name, data.get("kwargs", {}))
        runs = await run_in_threadpool(find_runs, runs_dir)
        offered = opponents(runs, name, kwargs)
        if data["opponent"] not in offered:
            raise ApiError(400, f"unknown opponent {data['opponent']!r}; offered: {offered}")
        game = games.make(name, **kwargs)
        ready_now = ready(game, data["opponent"])
        if not ready_now:
            warm_in_background([(game, data["opponent"])], analyse)
        return JSONResponse({"ready": ready_now}, status_code=200 if ready_now else 202)

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    routes = [
        Route("/", index),
        Route("/api/options", options),
        Route("/api/games", new_game, methods=["POST"]),
        Route("/api/games/{gid}", show),
        Route("/api/games/{gid}/move", move, methods=["POST"]),
        Route("/api/games/{gid}/undo", undo, methods=["POST"]),
        Route("/api/games/{gid}/hint", hint, methods=["POST"]),
        Route("/api/warm", warm_request, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    handlers = {ApiError: api_error, HTTPException: http_error}
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.state.games = store
    return app
