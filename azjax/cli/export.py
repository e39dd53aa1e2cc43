"""`azjax-export`: a run's checkpoint as one portable model file, or as ONNX.

    azjax-export runs/connect4 --out connect4.azjax                  # the newest checkpoint
    azjax-export runs/connect4 --step 200 --dtype bfloat16 --out connect4.azjax
    azjax-export connect4.azjax --format onnx --out connect4.onnx    # from a run or a model
    azjax-export --card-only connect4.azjax --strength match.json    # file azjax-eval figures
    azjax-export --card-only connect4.azjax --simulations 512        # its default search

A model file holds the parameters, the run's config and a model card, also written beside it as
NAME.card.json (see azjax.export); `azjax.export.load_model` reads it without orbax or the run.
`--strength` takes the `--json` output of `azjax-eval --a MODEL --b OPPONENT` or `--solver`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="azjax-export",
        description="Export a trained network as a portable model file or as ONNX.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", metavar="RUN", help="run directory (or, for ONNX, a model)")
    parser.add_argument("--step", type=int, help="checkpoint iteration (default: the newest)")
    parser.add_argument("--out", type=pathlib.Path, help="NAME.azjax, or NAME.onnx for ONNX")
    parser.add_argument("--format", choices=("azjax", "onnx"), default="azjax")
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32", help="parameter storage"
    )
    parser.add_argument("--batch", type=int, help="ONNX: a fixed batch size (default symbolic)")
    parser.add_argument(
        "--command", help="card: how the run was trained (with --card-only: replaces it)"
    )
    parser.add_argument(
        "--device",
        help="card: what it was trained on, e.g. '1x H100' (with --card-only: replaces it)",
    )
    parser.add_argument(
        "--simulations",
        type=int,
        metavar="N",
        help="the search simulations the model plays with by default (default: the run's "
        "evaluation simulations; with --card-only: changes them)",
    )
    parser.add_argument(
        "--card-only",
        action="store_true",
        help="RUN is a model file: rewrite its card (NAME.card.json), filing any --strength",
    )
    parser.add_argument(
        "--strength",
        action="append",
        default=[],
        type=pathlib.Path,
        metavar="EVAL.json",
        help="with --card-only: an azjax-eval --json result to file in the card (repeatable)",
    )
    return parser


def _load(source: str, step: int | None):
    """(config, params, card) of a model file or of a run's checkpoint (card None)."""
    from azjax import checkpoint, export

    if source.endswith(export.SUFFIX):
        if step is not None:
            raise ValueError(f"--step is for a run directory, not the model file {source}")
        return export.load_model(source)
    config, params = checkpoint.load_for_inference(source, step)
    return config, params, None


def _card_only(args: argparse.Namespace) -> None:
    from azjax import export

    card = export.read_card(args.source)
    if args.command is not None or args.device is not None:
        card = export.set_provenance(args.source, args.command, args.device)
    if args.simulations is not None:
        card = export.set_simulations(args.source, args.simulations)
    for path in args.strength:
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--strength {path}: not a readable JSON file ({err})") from None
        if not isinstance(result, dict):
            raise ValueError(f"--strength {path}: expected a JSON object from azjax-eval --json")
        card = export.record_strength(args.source, result)
    if not args.strength and all(v is None for v in (args.command, args.device, args.simulations)):
        card = export.write_card(args.source)
    print(f"wrote {export.card_path(args.source)}: {export.headline(card)}")


def _export(args: argparse.Namespace) -> None:
    from azjax import export

    if args.out is None:
        raise ValueError("--out is needed: NAME.azjax, or NAME.onnx with --format onnx")
    if args.format == "azjax":
        if args.source.endswith(export.SUFFIX):
            raise ValueError(f"{args.source} is already a model file; give a run directory")
        card = export.export_run(
            args.source,
            args.out,
            args.step,
            args.dtype,
            args.command,
            args.device,
            args.simulations,
        )
        print(
            f"wrote {args.out} (iteration {card['iteration']}, {card['parameters']} parameters "
            f"stored as {args.dtype}) and {export.card_path(args.out)}"
        )
        return
    if args.simulations is not None:
        raise ValueError("--simulations is for a model file: ONNX holds the network alone")
    config, params, card = _load(args.source, args.step)
    export.export_onnx(config, params, args.out, args.batch, card)
    difference = export.check_onnx(args.out, config, params)
    print(f"wrote {args.out}; onnxruntime matches JAX to {difference:.1e} (max abs difference)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.strength and not args.card_only:
        print("azjax-export: --strength needs --card-only", file=sys.stderr)
        return 2
    from azjax.cli import use_compilation_cache

    use_compilation_cache()
    try:
        if args.card_only:
            _card_only(args)
        else:
            _export(args)
    except (ValueError, ImportError) as err:  # bad runs, models, files; no ONNX packages
        print(f"azjax-export: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
