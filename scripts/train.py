"""Train an agent: `python scripts/train.py --config configs/X.yaml --workdir runs/X [k=v ...]`.

A thin wrapper around `azjax.cli.train` (also installed as `azjax-train`).
"""

import sys

from azjax.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
