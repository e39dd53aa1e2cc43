"""Checks of values people type, shared by the command lines, the scripts and the browser server:
seeds, output files, and the game flags every command line takes (`--game NAME --size K=V,...`).

Each check raises ValueError with one line naming the bad value and what was expected; the
`*_arg` forms are argparse `type=` functions (argparse prints the line and exits with 2).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
from collections.abc import Callable
from errno import EACCES, EINVAL, EISDIR, ELOOP, ENAMETOOLONG, ENOTDIR, EPERM

import games

SEED_LIMIT = 2**63  # jax.random.key takes a signed 64-bit seed
SEED_RANGE = "0 <= seed < 2**63"
SIZE_EXAMPLE = "rows=6,cols=9"
# OS errors that giving another path mends (bad input), e.g. permission denied, or EINVAL for a
# name the file system refuses; any other (full disk, I/O error, read-only mount) is a failure.
PATH_ERRORS = frozenset({ENOTDIR, EISDIR, EACCES, EPERM, ENAMETOOLONG, ELOOP, EINVAL})


class WriteFailure(OSError):
    """A file or folder the machine fails to write where the path given is not at fault (a full
    disk, an I/O error, a read-only mount): a failure, not bad input."""


def write_error(message: str, err: OSError, refused: type[ValueError]) -> Exception:
    """`message` as `refused` (bad input) for an error in PATH_ERRORS, else as WriteFailure."""
    return refused(message) if err.errno in PATH_ERRORS else WriteFailure(message)


def check_seed(value: object, name: str = "seed") -> int:
    """`value` as a PRNG seed: an integer with 0 <= seed < 2**63."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{name} must be an integer with {SEED_RANGE}, got {value!r}")
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
        open(target, "a").close()
    except OSError as err:
        raise ValueError(f"{name} {path}: cannot write there ({err.strerror})") from None
    if not existed:
        target.unlink()


def argparse_type(check: Callable[[object, str], int], name: str) -> Callable[[str], int]:
    """An argparse `type=` function: the text as an int (else as given) through `check`."""

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


seed_arg = argparse_type(check_seed, "seed")


@functools.cache
def size_values(game: str) -> dict[str, tuple[int, ...]]:
    """Game `game`'s size keywords -> the values its constructor takes, in the ranges of its
    `sizes` (Othello: size (6, 8), no 7)."""
    game_cls = type(games.make(game))
    out = {}
    for key, (low, high) in game_cls.sizes.items():
        values = []
        for value in range(low, high + 1):
            try:
                game_cls(**{key: value})
            except ValueError:
                continue
            values.append(value)
        out[key] = tuple(values)
    return out


def _spans(values: tuple[int, ...]) -> str:
    """Values as runs, e.g. "2-12" or "6, 8"."""
    runs: list[list[int]] = []
    for value in values:
        if runs and runs[-1][-1] == value - 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _taken(game: str) -> str:
    """Game `game`'s sizes and the values it takes, e.g. "rows 2-12, cols 2-12" or "size 6, 8"."""
    return ", ".join(f"{key} {_spans(values)}" for key, values in size_values(game).items())


def parse_size(text: str | None, game: str) -> dict[str, int]:
    """`--size` text such as "rows=6,cols=9" as keyword arguments of game `game` (a name);
    ValueError names the bad pair and the game's accepted sizes (and an unknown game)."""
    sizes = size_values(game)
    if text is None:
        return {}
    if not sizes:
        raise ValueError(f"--size: {game} has no sizes, got {text!r}")
    accepted = f"{game} sizes: {_taken(game)}"
    out: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key or not value:
            raise ValueError(
                f"--size: expected KEY=VALUE pairs like {SIZE_EXAMPLE}, got {part!r} ({accepted})"
            )
        if key not in sizes:
            raise ValueError(f"--size: {game} has no size {key!r} ({accepted})")
        if key in out:
            raise ValueError(f"--size: {key} is given twice")
        try:
            number = int(value)
        except ValueError:
            number = None
        if number not in sizes[key]:
            raise ValueError(f"--size {key}={value}: {game} {key} takes {_spans(sizes[key])}")
        out[key] = number
    return out


def size_kwargs(game: games.Game) -> dict[str, int]:
    """The size keywords that make `game` again, e.g. {"size": 6} for Othello 6x6."""
    return {key: getattr(game, key) for key in game.sizes if hasattr(game, key)}


def add_game_arguments(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """`--game NAME` (required unless `default` says where the game comes from otherwise) and
    `--size K=V,...`; read them back with `parse_size(args.size, args.game)`."""
    names = games.names()
    game = f"the game: {', '.join(names)}" + (f" (default: {default})" if default else "")
    parser.add_argument("--game", required=default is None, metavar="NAME", help=game)
    sized = [f"{name}: {_taken(name)}" for name in names if games.make(name).sizes]
    size = f"the game's size, e.g. {SIZE_EXAMPLE} (default: the game's own; {'; '.join(sized)})"
    parser.add_argument("--size", metavar="K=V,...", help=size)
