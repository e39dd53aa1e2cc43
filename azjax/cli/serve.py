"""`azjax-serve`: play in the browser against baselines and trained checkpoints.

    azjax-serve --runs runs            # then open http://127.0.0.1:8000

Checkpoints are found in any folder with checkpoints under `--runs` (three levels deep).
The server binds to 127.0.0.1 unless told otherwise; it has no authentication.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="azjax-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="runs", help="folder searched for checkpoints (runs)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--no-eval", action="store_true", help="skip the evaluation shown with each agent move"
    )
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}; anyone who can reach it can play", file=sys.stderr)

    import uvicorn

    from azjax.web.app import create_app

    app = create_app(args.runs, evaluate=not args.no_eval)
    print(f"azjax: open http://{args.host}:{args.port}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
