"""Checks of values people type, shared by the command lines and the browser server.

Each check raises ValueError with one line naming the bad value and what was expected; the
`*_arg` forms are argparse `type=` functions (argparse prints the line and exits with 2).
"""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Callable

SEED_LIMIT = 2**63  # jax.random.key takes a signed 64-bit seed
SEED_RANGE = "0 <= seed < 2**63"


def check_seed(value: object, name: str = "seed") -> int:
    """`value` as a PRNG seed: an integer with 0 <= seed < 2**63."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{name} must be an integer with {SEED_RANGE}, got {value!r}")
    return value


def check_port(value: object, name: str = "port") -> int:
    """`value` as a TCP port: 1..65535, or 0 for any free port."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{name} must be from 1 to 65535 (0: any free port), got {value!r}")
    return value


def check_writable_file(path: str, name: str) -> None:
    """Refuse a file path that cannot be written (missing folder, a folder, no permission)
    before any work is done; a file created to find out is removed again."""
    target = pathlib.Path(path)
    if target.is_dir():
        raise ValueError(f"{name} {path} is a folder; expected a file name")
    if not target.parent.is_dir():
        raise ValueError(f"{name} {path}: there is no folder {target.parent}")
    existed = target.exists()
    try:
        with open(target, "a"):
            pass
    except OSError as err:
        raise ValueError(f"{name} {path}: cannot write there ({err.strerror})") from None
    if not existed:
        target.unlink()


def _argparse_type(check: Callable[[object, str], int], name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value: object = int(text)
        except ValueError:
            value = text
        try:
            return check(value, name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


seed_arg = _argparse_type(check_seed, "seed")
port_arg = _argparse_type(check_port, "port")
