"""Thin wrapper: `python scripts/serve.py ...` is `azjax-serve ...` (see azjax/cli/serve.py)."""

from azjax.cli.serve import main

if __name__ == "__main__":
    main()
