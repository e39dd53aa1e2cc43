"""`azjax-train --config configs/X.yaml --workdir runs/X [dotted.key=value ...]`.

Trains (or resumes) the run in `--workdir`, with a progress bar, `metrics.jsonl`, TensorBoard
files and a final summary. Multi-host clusters are joined automatically (see azjax.parallel).
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import shlex
import shutil
import sys
import time
from collections.abc import Sequence

import jax  # already loaded before --help: the game modules import it

from azjax import cli, parallel
from azjax.cli.args import ArgumentParser, load_game_modules
from azjax.config import Config, ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="azjax-train",
        description="Train an AlphaZero agent; resumes from the newest checkpoint in --workdir.",
    )
    parser.add_argument("--config", required=True, help="YAML file, e.g. configs/connect4.yaml")
    parser.add_argument("--workdir", required=True, help="run directory (checkpoints, metrics)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted overrides, e.g. search.num_simulations=64 train.iterations=10",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--cpu-devices",
        type=int,
        metavar="N",
        help="JAX CPU devices, one per core (default: every available core, as many as divide "
        "the batch sizes); they only compute where there is no accelerator",
    )
    return parser


def main(argv: list[str] | None = None) -> int | None:
    return cli.run_command("azjax-train", _main, argv)


def _main(argv: list[str] | None) -> int:
    load_game_modules("azjax-train")
    # overrides may stand before, between or after the options
    args = _parser().parse_intermixed_args(argv)
    try:  # configuration errors stop the run before JAX touches a device
        # the CPU devices are set from the unchecked sizes: checking makes the game, and making
        # a pgx game imports pgx, which starts JAX's backends (one CPU device ever after)
        sizes = load_config(args.config, args.overrides, check=False).split_sizes()
        try:
            parallel.use_cpu_cores(sizes, args.cpu_devices)
        except ValueError as err:
            return cli.bad_input("azjax-train", f"--cpu-devices: {err}")
        config = load_config(args.config, args.overrides)
    except ConfigError as err:
        return cli.bad_input("azjax-train", f"configuration error: {err}")
    cli.use_compilation_cache()
    joined = parallel.initialize_distributed()
    try:
        status = _train(config, args)
    finally:
        if joined:  # every process leaves together, before Python tears itself down (left
            # to exit, process 0 may close the cluster's service while the others still use it)
            jax.distributed.shutdown()
    if joined:  # its files are written and closed: end without the runtime's teardown, which
        # could wait 150 s for a peer that had already gone (tests/test_multihost.py saw it)
        cli.leave(status)
    return status


def _train(config: Config, args: argparse.Namespace) -> int:
    """The run of a checked `config`, on the devices of this process (and its cluster)."""
    from azjax.checkpoint import WorkdirError, WorkdirInUse, list_steps  # Orbax: not for --help
    from azjax.train import TrainingError, train_and_evaluate  # the same

    devices = jax.devices()
    if jax.process_index() == 0:
        print(
            f"azjax-train: {config.game.name} on {len(devices)} {devices[0].platform} device(s) "
            f"({jax.process_count()} process(es)), workdir {args.workdir}",
            flush=True,
        )
    start, existed = time.perf_counter(), pathlib.Path(args.workdir).exists()
    try:
        final = train_and_evaluate(config, args.workdir, progress=not args.quiet)
    except WorkdirError as err:  # a file, or not the user's to write: left as it is
        return cli.bad_input("azjax-train", str(err))
    except (OSError, WorkdirInUse) as err:  # a full or failing disk, another run's: left as is
        print(f"azjax-train: {err}", file=sys.stderr)
        return cli.FAILED
    except TrainingError as err:
        _remove_unstarted(args.workdir, existed)
        print(f"azjax-train: {err}", file=sys.stderr)
        return cli.FAILED
    except ValueError as err:  # CheckpointError, ConfigError: what the run was given
        _remove_unstarted(args.workdir, existed)
        return cli.bad_input("azjax-train", str(err))
    except KeyboardInterrupt:  # before the loop took the signal: while compiling or restoring
        steps = list_steps(args.workdir)
        kept = f"; checkpoint {steps[-1]} is kept" if steps else " before the first checkpoint"
        _remove_unstarted(args.workdir, existed)
        kept += "; rerun the same command to " + ("resume" if steps else "start")
        print(f"azjax-train: interrupted{kept}", file=sys.stderr)
        return cli.INTERRUPTED
    if final.get("interrupted"):  # its line is printed: interrupted at iteration N; ...
        return cli.stopped()
    if jax.process_index() == 0 and not final.get("finished"):
        seconds = time.perf_counter() - start
        print(summary(final, seconds, args.workdir, config.eval.opponents))
    return cli.OK


def _remove_unstarted(workdir: str, existed: bool) -> None:
    """Remove what a run that stopped before its first checkpoint left: an empty checkpoint
    folder and, when this command made the workdir, the workdir with the files the run wrote
    (its config, log and TensorBoard events). A run with a checkpoint is left as it is."""
    from azjax.checkpoint import list_steps  # Orbax loads slowly: not for --help

    folder = pathlib.Path(workdir)
    if list_steps(folder):
        return
    with contextlib.suppress(OSError):
        if not existed:
            for name in ("config.yaml", "metrics.jsonl"):
                (folder / name).unlink(missing_ok=True)
            shutil.rmtree(folder / "tensorboard", ignore_errors=True)
        for path in (folder / "checkpoints", *(() if existed else (folder,))):
            path.rmdir()  # only when empty


def summary(final: dict, seconds: float, workdir: str, opponents: Sequence[str] = ()) -> str:
    """The closing report of a run: this session's iterations and time, after a resume the
    whole run's wall clock, and the final evaluation against `opponents`."""
    from azjax.runlog import results  # TensorBoard's writer: not for --help

    iteration, first = final.get("iteration", 0), final.get("start_iteration", 0)
    lines = [f"done: {iteration - first} iterations in {seconds / 60:.1f} min"]
    if first:
        lines[0] += (
            f", resumed at iteration {first}; the whole run: {iteration} iterations in "
            f"{final.get('elapsed_minutes', 0):.1f} min"
        )
    if "train/loss" in final:
        lines.append(
            f"  last loss {final['train/loss']:.4f} (policy {final['train/policy_loss']:.4f}, "
            f"value {final['train/value_loss']:.4f})"
        )
    lines += [f"  {line}" for line in results(final, opponents)]
    hint = f"agents.make('search:{workdir}', game)"
    lines.append(f"  checkpoint: {workdir}/checkpoints (load with {hint})")
    lines.append(f"  play it: azjax-play --opponent {shlex.quote(f'search:{workdir}')}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
