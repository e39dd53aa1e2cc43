"""`azjax-export`: a run's checkpoint as one portable model file, or as ONNX.

    azjax-export runs/connect4 --out connect4.azjax                  # the newest checkpoint
    azjax-export runs/connect4 --step 200 --dtype bfloat16 --out connect4.azjax
    azjax-export runs/connect4 --resumable --out piece.azjax         # train.init_from continues it
    azjax-export zoo:connect4 --format onnx --out connect4.onnx      # from a run or a model
    azjax-export --card-only connect4.azjax --strength match.json    # file azjax-eval figures
    azjax-export --card-only connect4.azjax --simulations 512        # its default search
    azjax-export --card-only azjax/zoo/NAME.azjax --strength m.json  # a zoo model's (not zoo:NAME)

Model files and cards: azjax.export. `--strength` takes `azjax-eval --json` output.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence

from azjax.checks import WriteFailure
from azjax.cli import FAILED, INTERRUPTED, OK, bad_input, run_command, use_compilation_cache
from azjax.cli.args import ArgumentParser, load_game_modules
from azjax.specs import SOURCE_HELP, check_simulations, parse_source

RESUMABLE_POSITIONS = 100_000  # replay positions a resumable model file carries by default


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="azjax-export",
        description="Export a trained network as a portable model file or as ONNX.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "source",
        metavar="SOURCE",
        help=f"a run, WORKDIR[@STEP]; for ONNX any model: {SOURCE_HELP}; for --card-only a "
        "model file (FILE.azjax, also a zoo's file: zoo:NAME is refused)",
    )
    add("--step", type=int, help="checkpoint iteration (default: the newest)")
    add("--out", type=pathlib.Path, help="NAME.azjax, or NAME.onnx for ONNX")
    add("--format", choices=("azjax", "onnx"), default="azjax")
    add("--dtype", choices=("float32", "bfloat16"), default="float32", help="parameter storage")
    add("--batch", type=int, help="ONNX: a fixed batch size (default symbolic)")
    add("--command", help="card: how the run was trained (with --card-only: replaces it)")
    device = "card: what it was trained on, e.g. '1x H100' (with --card-only: replaces it)"
    add("--device", help=device)
    add(
        "--simulations",
        type=int,
        metavar="N",
        help="the search simulations the model plays with by default (default: the run's "
        "evaluation simulations; with --card-only: changes them)",
    )
    card_only = "SOURCE is a model file: rewrite its card (NAME.card.json), filing any --strength"
    add("--card-only", action="store_true", help=card_only)
    add(
        "--strength",
        action="append",
        default=[],
        type=pathlib.Path,
        metavar="EVAL.json",
        help="with --card-only: an azjax-eval --json result to file in the card (repeatable)",
    )
    add(
        "--resumable",
        nargs="?",
        const=RESUMABLE_POSITIONS,
        type=int,
        metavar="N",
        help="also store where the run stopped (iteration, optimizer and learning-rate schedule, "
        f"metrics, the newest N replay positions; default {RESUMABLE_POSITIONS:,}), so that "
        "train.init_from=OUT continues the run on another machine",
    )
    force = "overwrite an existing --out (and its card, with any strength figures filed in it)"
    add("--force", action="store_true", help=force)
    return parser


def _check(args: argparse.Namespace) -> None:
    """Refuse (ValueError) options that do not apply or go together, before any work."""
    if args.strength and not args.card_only:
        raise ValueError("--strength needs --card-only")
    if args.card_only:  # SOURCE's card is rewritten in place
        given = {"--out": args.out, "--step": args.step, "--batch": args.batch}
        given["--dtype"] = args.dtype if args.dtype != "float32" else None
        given["--format"] = args.format if args.format != "azjax" else None
        if option := next((o for o, value in given.items() if value is not None), None):
            raise ValueError(
                f"{option} does not apply to --card-only, which rewrites SOURCE's own card"
            )
    elif args.batch is not None and args.format != "onnx":
        raise ValueError("--batch is for --format onnx (a model file holds no batch size)")
    elif args.dtype != "float32" and args.format == "onnx":
        raise ValueError("--dtype is for a model file: ONNX stores and computes in float32")
    if args.simulations is not None:
        check_simulations(args.simulations, "--simulations")
    if args.resumable is not None and args.resumable < 0:
        raise ValueError(f"--resumable takes a count of positions >= 0, got {args.resumable}")
    if args.resumable is not None and (args.card_only or args.format == "onnx"):
        raise ValueError("--resumable is for a model file exported from a run")


def _card_only(args: argparse.Namespace) -> int:
    """Rewrite SOURCE's card; the command's status."""
    from azjax import export, model  # flax, orbax: loaded after --help

    file = model.model_file(args.source)
    if file is None:
        raise ValueError(f"--card-only needs a model file, not the run {args.source}")
    if parse_source(args.source).kind == "zoo":  # an easy slip: the installed model's own card
        raise ValueError(
            f"--card-only would rewrite the card of the installed zoo model {args.source}; "
            f"copy {file} out and give the copy, or give {file} itself to file figures in the zoo"
        )
    if args.command is not None or args.device is not None:
        export.set_provenance(args.source, args.command, args.device)
    if args.simulations is not None:
        export.set_simulations(args.source, args.simulations)
    for path in args.strength:
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--strength {path}: not a readable JSON file ({err})") from None
        entry = result if isinstance(result, dict) else {}
        if not any(isinstance(entry.get(k), dict) for k in ("match", "accuracy")):
            got = f"keys {sorted(result)}" if isinstance(result, dict) else type(result).__name__
            raise ValueError(
                f"--strength {path}: not an azjax-eval --json result of a match or of --solver "
                f"(expected a 'match' or 'accuracy' object, got {got})"
            )
        export.record_strength(args.source, result)
    card = export.write_card(args.source)  # also when nothing changed: written afresh
    print(f"wrote {export.card_path(args.source)}: {export.headline(card)}")
    return OK


def _export(args: argparse.Namespace) -> int:
    """Write the model file or ONNX graph; the command's status."""
    from azjax import export, model, resume  # flax, orbax: loaded after --help
    from azjax.onnx_export import OnnxMismatch, export_onnx

    if args.out is None:
        raise ValueError("--out is needed: NAME.azjax, or NAME.onnx with --format onnx")
    text = args.source
    if args.step is not None:  # folded into SOURCE: WORKDIR@STEP
        source = parse_source(text)
        if source.kind != "run":
            raise ValueError(f"--step is for a run directory, not the model {args.source}")
        if source.step is not None:
            raise ValueError(f"{args.source} names its step already: drop --step {args.step}")
        text = f"{source.path}@{args.step}"
    if args.out.exists() and not args.force:
        raise ValueError(
            f"{args.out} exists (with any strength figures filed in its card); "
            "give another --out, or --force to overwrite it"
        )
    if args.format == "azjax":
        if (run := parse_source(text)).kind != "run":
            raise ValueError(f"{args.source} is already a model file; give a run directory")
        workdir, snapshot, carried = model.run_directory(run), None, ""
        if args.resumable is not None:
            snapshot = resume.run_snapshot(workdir, run.step, args.resumable)
            positions = len(snapshot["replay"][0]) if snapshot["replay"] else 0
            carried = f", resumable with {positions:,} replay positions"
        card_args = (args.dtype, args.command, args.device, args.simulations, snapshot)
        card = export.export_run(workdir, args.out, run.step, *card_args)
        print(
            f"wrote {args.out} (iteration {card['iteration']}, {card['parameters']} parameters "
            f"stored as {args.dtype}{carried}) and {export.card_path(args.out)}"
        )
        return OK
    if args.simulations is not None:
        raise ValueError("--simulations is for a model file: ONNX holds the network alone")
    found = model.load(text)
    try:
        difference = export_onnx(found.config, found.params, args.out, args.batch, found.card)
    except OnnxMismatch as err:  # the converter's fault, not the input's
        print(f"azjax-export: {err}", file=sys.stderr)
        return FAILED
    print(f"wrote {args.out}; onnxruntime matches JAX to {difference:.1e} (max abs difference)")
    return OK


def main(argv: Sequence[str] | None = None) -> int | None:
    return run_command("azjax-export", _main, argv)


def _main(argv: Sequence[str] | None) -> int:
    load_game_modules("azjax-export")
    args = _parser().parse_args(argv)
    try:
        _check(args)
        use_compilation_cache()
        return _card_only(args) if args.card_only else _export(args)
    except (ValueError, ImportError) as err:  # bad runs, models, files; no ONNX packages
        return bad_input("azjax-export", str(err))
    except WriteFailure as err:  # a full or failing disk: the file is left as it was
        print(f"azjax-export: {err}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        onnx = args.format == "onnx" and args.out is not None and not args.card_only
        kept = f"; {args.out} is left as it was" if onnx else ""
        print(f"\nazjax-export: interrupted{kept}", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
