"""Thin wrapper: `python scripts/play.py ...` is `azjax-play ...` (see azjax/cli/play.py)."""

from azjax.cli.play import main

if __name__ == "__main__":
    main()
