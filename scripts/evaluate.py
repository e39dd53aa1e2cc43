"""Evaluate agents: `python scripts/evaluate.py --game G --a SPEC --b SPEC [--games N]`.

A thin wrapper around `azjax.cli.evaluate` (also installed as `azjax-eval`); see --help for
round robins, checkpoint ladders (--ladder runs/X) and Connect4 solver accuracy (--solver).
"""

import sys

from azjax.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
