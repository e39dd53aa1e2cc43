"""`azjax-serve`: play in the browser against baselines and trained checkpoints.

    azjax-serve --runs runs            # then open http://127.0.0.1:8000
    azjax-serve --games pgx:hex        # also offer games beyond the built-in ones

Checkpoints are found up to three levels under `--runs`; the games the zoo has models for are
offered where they can be played (pgx's with the pgx extra installed). Opponents compile in the
background (the first game's at start-up, others as the page chooses them) into JAX's
persistent cache.
The server binds to 127.0.0.1 unless told otherwise; it has no authentication.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence

import games
from azjax.cli import bad_input, run_command, use_compilation_cache
from azjax.cli.args import ArgumentParser, load_game_modules, port_arg


def main(argv: Sequence[str] | None = None) -> None:
    if status := run_command("azjax-serve", _main, argv):
        sys.exit(status)


def _main(argv: Sequence[str] | None) -> int | None:
    load_game_modules("azjax-serve")
    parser = ArgumentParser(prog="azjax-serve", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--runs", help="folder searched for checkpoints (default runs, when there is one)")
    add("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    add(
        "--port",
        type=port_arg,
        default=8000,
        help="TCP port to listen on, 1-65535, or 0 for any free one (default 8000)",
    )
    add("--no-analysis", action="store_true", help="skip the analysis shown with each agent move")
    add(
        "--games",
        default="",
        metavar="NAME,...",
        help="more games to offer besides the registered ones, e.g. pgx:hex (needs azjax[pgx])",
    )
    args = parser.parse_args(argv)
    if args.runs is not None and not os.path.isdir(args.runs):
        return bad_input("azjax-serve", f"--runs {args.runs}: no such folder")
    try:
        offer(args.games)
    except (ValueError, ImportError) as err:
        return bad_input("azjax-serve", f"--games: {err}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}; anyone who can reach it can play", file=sys.stderr)

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:  # bound here, so that the address printed is the one served (--port 0 included)
        sock.bind((args.host, args.port))
    except OSError as err:
        sys.exit(f"azjax-serve: cannot listen on {args.host}:{args.port}: {err.strerror}")

    import uvicorn  # the web stack: loaded once the port is bound, so bad input is said at once

    from azjax.web.app import create_app, find_zoo  # JAX, agents, flax, orbax: once bound too

    offer(",".join(model["game"] for model in find_zoo()))  # those that can be made here
    use_compilation_cache()  # a restarted server finds its agents compiled
    app = create_app(args.runs or "runs", analyse=not args.no_analysis, warm_up=True)
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    print(f"azjax: open http://{host}:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def offer(names: str) -> None:
    """Register the comma-separated games (e.g. `pgx:hex`) so that the browser lists them."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name not in games.names():
            games.register(name, type(games.make(name)))


if __name__ == "__main__":
    main()
