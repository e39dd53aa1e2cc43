"""`azjax-eval`: matches between agents, Elo ladders and perfect-play accuracy.

    azjax-eval --game connect4 --a alphabeta:4 --b mcts:100 --games 100 --json out.json
    azjax-eval --game chain_reaction --size rows=6,cols=9 --a greedy --b random
    azjax-eval --game othello --round-robin random,greedy,alphabeta:2,mcts:100 --games 40
    azjax-eval --ladder runs/connect4 --games 40        # every checkpoint + the baselines
    azjax-eval --ladder runs/connect4 --steps 200,400   # chosen checkpoints only
    azjax-eval --ladder models/                         # models exported from a run's checkpoints
    azjax-eval --solver search:runs/connect4            # Connect4 accuracy against perfect play
    azjax-eval --solver greedy --game dots_and_boxes    # the same on Dots and Boxes 3x3
    azjax-eval --solver policy-zoo:tictactoe            # every Tic-Tac-Toe position
    azjax-eval --zoo                                    # the trained models shipped with azjax
    azjax-eval --zoo --game othello                     # those of one game (--size: one size)

Agents are spec strings (azjax.specs); colours alternate game by game.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import pathlib
import sys
from collections.abc import Callable

import jax
from tqdm import tqdm

import games
from azjax.checks import SEED_RANGE, add_game_arguments, check_writable_file, parse_size, seed_arg
from azjax.cli import INTERRUPTED, OK, check_interrupt, run_command, use_compilation_cache
from azjax.cli.args import ArgumentParser, chosen_game, load_game_modules
from azjax.specs import MODEL_SUFFIX, SPEC_HELP, parse_spec

DEFAULT_BASELINES = "random,greedy,alphabeta:2,mcts:100"
GAME_BATCH = 32  # games a match plays at once unless --batch says otherwise
GAMES = 100  # games per match unless --games says otherwise
Outcome = tuple[dict, Callable[[], object]]  # (the --json data, what prints the results)


class UsageError(ValueError):
    """A bad command line (reported without a traceback)."""


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="azjax-eval",
        description="Play agents against each other, rate checkpoints, measure perfect play.",
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode, add = parser.add_mutually_exclusive_group(required=True).add_argument, parser.add_argument
    mode("--a", metavar="SPEC", help="agent A of a match (needs --b)")
    mode("--round-robin", metavar="SPECS", help="comma-separated specs: every pair plays; Elo fit")
    mode(
        "--ladder",
        metavar="WORKDIR",
        help="rate every checkpoint of a run (or every model of a folder of azjax-export files)",
    )
    mode(
        "--solver",
        metavar="SPEC",
        help="perfect-play accuracy of SPEC (Connect4 by default, Dots and Boxes 3x3, "
        "Tic-Tac-Toe); Connect4 also: mistake rates in Pascal Pons' six test groups",
    )
    mode("--zoo", action="store_true", help="list the zoo's models (zoo:NAME)")
    add("--b", metavar="SPEC", help="agent B of a match")
    add_game_arguments(
        parser, default="the game of the checkpoint or zoo model played; --zoo: every game"
    )
    add("--games", type=int, help=f"games per match (default {GAMES})")
    add("--opening-moves", type=int, help="random plies to start (default 0)")
    add(
        "--batch",
        type=int,
        help=f"games played at once (default {GAME_BATCH}: a batch lasts as long as its slowest "
        "game, which makes large batches slow with rollout agents such as mcts:SIMS); --solver: "
        "positions searched at once, with a progress bar and Ctrl-C keeping the finished batches "
        "(default all at once: batches can change a close move through the arithmetic)",
    )
    add("--seed", type=seed_arg, default=0, help=f"PRNG seed, {SEED_RANGE} (default 0)")
    add("--baselines", help=f"--ladder: baseline specs (default {DEFAULT_BASELINES})")
    add(
        "--kind",
        choices=("search", "policy"),
        help="--ladder: checkpoints play with search (default) or the policy alone",
    )
    add(
        "--steps",
        help="--ladder: comma-separated checkpoint steps to rate (default: every checkpoint)",
    )
    add("--png", type=pathlib.Path, help="--ladder: plot (default WORKDIR/elo.png)")
    add("--positions", help="--solver: position file (default: the shipped set)")
    add("--json", type=pathlib.Path, help="write the results as JSON here")
    add("--quiet", action="store_true", help="no progress bar")
    return parser


# Options that only some modes read: given with another, they would be silently ignored.
MATCHES = ("a", "round_robin", "ladder")
MODE_OPTIONS = (
    {"b": ("a",)}
    | dict.fromkeys(("baselines", "kind", "steps", "png"), ("ladder",))
    | {"positions": ("solver",), "games": MATCHES, "opening_moves": MATCHES}
)


def _check_mode_options(args: argparse.Namespace) -> None:
    for option, modes in MODE_OPTIONS.items():
        if getattr(args, option) is not None and all(getattr(args, m) is None for m in modes):
            names = [f"--{name.replace('_', '-')}" for name in (option, *modes)]
            where = names[1] if len(modes) == 1 else f"{', '.join(names[1:-1])} and {names[-1]}"
            raise UsageError(f"{names[0]} applies to {where} only")


def _nonempty(text: str, option: str) -> str:
    """`text` stripped, refusing an empty agent spec given to `option`."""
    if not text.strip():
        raise UsageError(f"{option}: empty agent spec; expected {SPEC_HELP}")
    return text.strip()


SLOW_SEARCH = 10**7  # positions per move above which a depth-first search is called slow


def _agent(spec: str, game):
    """The agent of `spec` for `game` (every agent azjax-eval plays), with one line on stderr
    when alphabeta:DEPTH is likely to take minutes a move: alpha-beta with a fair move order
    searches about b^(3d/4) positions, b the legal moves at the start."""
    from azjax import agents  # flax, mctx, orbax: deferred so that --help answers at once

    agent, depth = agents.make(spec, game), agents.parse_spec(spec).number
    if agent.name.startswith("alphabeta:"):
        branching = len(game.legal_actions(game.init(jax.random.key(0))))
        plies = min(depth, game.max_game_length)
        if (positions := float(branching) ** (0.75 * plies)) > SLOW_SEARCH:
            print(
                f"azjax-eval: warning: alphabeta:{depth} searches about {positions:.0e} "
                f"positions a move in {game.name} ({branching} moves at the start, {plies} "
                "plies deep): each move can take minutes; a smaller depth is much faster",
                file=sys.stderr,
            )
    return agent


@contextlib.contextmanager
def _progress(args: argparse.Namespace, total: int, desc: str, unit: str = "game"):
    """A progress bar's callback for a batch loop: the bar moves, then a Ctrl-C whose
    KeyboardInterrupt was dropped stops the loop."""
    with tqdm(total=total, desc=desc, unit=unit, disable=args.quiet, file=sys.stderr) as bar:

        def advance(n: int) -> None:
            bar.update(n)
            check_interrupt()

        yield advance


def _print_results(results, ratings=None) -> None:
    """The matches' table, then any notes on repeated games, then the fitted `ratings`."""
    width = max(len(f"{r.name_a} vs {r.name_b}") for r in results)
    print(
        f"{'match':{width}}  {'W':>5} {'D':>5} {'L':>5}  {'score [95% interval]':20}  "
        "as first   as second"
    )
    for r in results:
        first, second = "/".join(map(str, r.first)), "/".join(map(str, r.second))
        label, (low, high) = f"{r.name_a} vs {r.name_b}", r.interval
        print(
            f"{label:{width}}  {r.wins:5d} {r.draws:5d} {r.losses:5d}  "
            f"{r.score:.3f} [{low:.3f}, {high:.3f}]  {first:9s} {second}"
        )
    for r in results:
        if r.distinct is not None and r.distinct < r.games:
            print(
                f"note: {r.name_a} vs {r.name_b}: {r.distinct} distinct games of {r.games} "
                "(the same opening and colours replay a game); the interval counts each once: "
                "more --opening-moves give more distinct games"
            )
    if ratings is not None:
        print(f"\nElo (maximum likelihood, {ratings.anchor} = 0; ± one standard error):")
        for name, rating, err in ratings.table():
            print(f"  {name:40s} {rating:8.1f} ± {err:.1f}")


def _match(args: argparse.Namespace) -> Outcome:
    from azjax import arena  # flax, mctx, orbax: deferred so that --help answers at once

    spec_a = _nonempty(args.a, "--a")
    if args.b is None:
        raise UsageError("--a needs --b (the opponent's spec)")
    spec_b = _nonempty(args.b, "--b")
    game = chosen_game(args.game, args.size, [spec_a, spec_b], "an agent")
    a, b = _agent(spec_a, game), _agent(spec_b, game)
    key, batch, stopped = jax.random.key(args.seed), args.batch or GAME_BATCH, {}
    try:
        with _progress(args, args.games, f"{a.name} vs {b.name}") as advance:
            result = arena.match(game, a, b, args.games, key, args.opening_moves, batch, advance)
    except arena.MatchInterrupted as stop:  # Ctrl-C: the finished batches still count
        result, stopped = stop.result, {"interrupted": True, "planned_games": stop.planned}
    match = {**result.to_dict(), "opening_moves": args.opening_moves, "seed": args.seed}
    return {"game": game.name, "match": {**match, **stopped}}, lambda: _print_results([result])


def _rate(args, game, players, pairs, desc: str, **head: object):
    """Play the pairs and fit Elo: (the ratings, the --json data with `head` after the game,
    what prints the results); with --json, the finished matches are saved after each one."""
    from azjax import arena  # flax, mctx, orbax: deferred so that --help answers at once

    done: list = []

    def save_partial(result) -> None:
        done.append(result)
        if args.json is not None:
            partial = [r.to_dict() for r in done]
            args.json.write_text(json.dumps({"game": game.name, "partial": partial}, indent=2))

    try:
        with _progress(args, args.games * len(pairs), desc) as advance:
            ratings, results = arena.ladder(
                game,
                players,
                args.games,
                jax.random.key(args.seed),
                pairs,
                anchor=players[0].name,
                opening_moves=args.opening_moves,
                batch_size=args.batch or GAME_BATCH,
                progress=advance,
                on_result=save_partial,
            )
    except KeyboardInterrupt:  # Ctrl-C: the finished matches are shown (and kept with --json)
        if done:
            _print_results(done)
        raise
    fitted = {"elo": ratings.ratings, "elo_stderr": ratings.stderr, "anchor": ratings.anchor}
    data = {"game": game.name, **head, "matches": [r.to_dict() for r in results], **fitted}
    return ratings, data, lambda: _print_results(results, ratings)


def _round_robin(args: argparse.Namespace) -> Outcome:
    specs = [s.strip() for s in args.round_robin.split(",") if s.strip()]
    if len(specs) < 2:
        raise UsageError(f"--round-robin needs at least two specs, got {args.round_robin!r}")
    game = chosen_game(args.game, args.size, specs, "an agent")
    players = [_agent(s, game) for s in specs]
    names = [p.name for p in players]
    if len(set(names)) < len(names):
        raise UsageError(f"--round-robin: agent names must be distinct, got {names}")
    # Pairs in the order the specs were given (each new player meets the earlier ones), so a
    # list from cheap to expensive finishes its cheap matches first.
    pairs = sorted(itertools.combinations(range(len(players)), 2), key=lambda p: (p[1], p[0]))
    return _rate(args, game, players, pairs, game.name)[1:]


def _checkpoints(workdir: str) -> dict[int, str]:
    """{iteration: path for specs} of a run's checkpoints, or of the models (`azjax-export`
    files) in a folder without checkpoints, by the iteration on each model's card."""
    from azjax import checkpoint, export  # flax, orbax: deferred so that --help answers at once

    if steps := checkpoint.list_steps(workdir):
        return {step: f"{workdir}@{step}" for step in steps}
    models = {}
    for path in sorted(pathlib.Path(workdir).glob(f"*{MODEL_SUFFIX}")):
        step = export.read_card(path).get("iteration")
        if not isinstance(step, int) or step in models:
            raise UsageError(
                f"--ladder: model {path} has iteration {step!r} on its card; the models of a "
                "ladder need distinct iterations"
            )
        models[step] = str(path)
    return dict(sorted(models.items()))


def _ladder(args: argparse.Namespace) -> Outcome:
    if not (workdir := args.ladder.strip()):
        raise UsageError("--ladder: empty run directory; expected a folder with checkpoints")
    if args.steps is not None:
        try:
            chosen = sorted({int(part) for part in args.steps.split(",") if part.strip()})
        except ValueError:
            chosen = []
        if not chosen:
            raise UsageError(f"--steps {args.steps!r}: expected comma-separated integers")
    if not (found := _checkpoints(workdir)):
        raise UsageError(f"--ladder: no checkpoint (nor model files *.azjax) in {workdir}")
    steps = list(found)
    if args.steps is not None:
        if missing := [step for step in chosen if step not in found]:
            raise UsageError(f"--steps: no checkpoint at {missing} in {workdir}; it has {steps}")
        steps = chosen
    game = chosen_game(args.game, args.size, [f"policy:{found[steps[-1]]}"], "an agent")
    listed = [s.strip() for s in (args.baselines or DEFAULT_BASELINES).split(",") if s.strip()]
    baselines = ["random"] + [s for s in dict.fromkeys(listed) if s != "random"]  # anchor first
    players = [_agent(s, game) for s in baselines]
    nets = [_agent(f"{args.kind or 'search'}:{found[step]}", game) for step in steps]
    players, nb = players + nets, len(baselines)
    pairs = list(itertools.combinations(range(nb), 2))
    pairs += [(nb + i, j) for i in range(len(nets)) for j in range(nb)]
    pairs += [(nb + i + 1, nb + i) for i in range(len(nets) - 1)]
    desc = f"ladder {workdir}"
    ratings, data, show = _rate(args, game, players, pairs, desc, workdir=workdir, steps=steps)
    png = args.png or pathlib.Path(workdir) / "elo.png"
    _plot(png, ratings, baselines, nets, steps, f"{game.name} ({pathlib.Path(workdir).name})")
    return data, lambda: (show(), print(f"wrote {png}"))


def _plot(png: pathlib.Path, ratings, baselines, nets, steps, title: str) -> None:
    import matplotlib  # only --ladder plots, and matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the Agg backend

    fig, ax = plt.subplots(figsize=(8, 4.5))
    elo, err = ([table[n.name] for n in nets] for table in (ratings.ratings, ratings.stderr))
    label = "checkpoints (± one standard error)"
    ax.errorbar(steps, elo, yerr=err, marker="o", capsize=3, label=label)
    for i, name in enumerate(baselines):  # in the legend: close ratings would hide labels
        ax.axhline(ratings.ratings[name], color=f"C{(i + 1) % 10}", ls="--", lw=1, label=name)
    ax.set_xlabel("training iteration")
    ax.set_ylabel(f"Elo ({ratings.anchor} = 0)")
    ax.set_title(f"{title}: Elo over training")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def _solver(args: argparse.Namespace) -> Outcome:
    from azjax import referees  # flax, mctx, orbax: deferred so that --help answers at once

    spec = _nonempty(args.solver, "--solver")
    if args.game is None and parse_spec(spec).source is None:
        game = referees.CONNECT4.game  # the default
    else:
        game = chosen_game(args.game, args.size, [spec], "an agent")
    referee, agent = referees.referee_for(game), _agent(spec, game)
    positions = referee.load(args.positions)
    groups = referees.load_groups() if referee.groups_file is not None else {}
    flat = [p for group in groups.values() for p in group]
    total, key = len(positions) + len(flat), jax.random.key(args.seed)
    moves: list = []  # the solver set's moves, then the Pons groups' (drawn with their own key)
    stopped: dict = {}  # how far an interrupted search got
    with _progress(args, total, f"{agent.name} on the solver set", "position") as advance:
        try:
            for index, todo in enumerate((positions, flat)):
                if todo:
                    part = jax.random.fold_in(key, index) if index else key
                    moves.append(referees.agent_moves(game, agent, part, todo, args.batch, advance))
        except KeyboardInterrupt as stop:  # Ctrl-C: the finished batches still count
            if isinstance(stop, referees.MovesInterrupted):
                moves.append(stop.moves)
            if not moves:
                raise
            done = sum(map(len, moves))
            stopped = {"interrupted": True, "positions": done, "planned_positions": total}
    result = referees.score_moves(positions[: len(moves[0])], moves[0])
    data = {"game": game.name, "agent": agent.name, "accuracy": result.to_dict(), **stopped}
    text = f"{agent.name} against perfect play ({game.name}):\n{result}"
    if len(moves) > 1:  # the groups' first len(moves[1]) positions, group after group
        left, scored = len(moves[1]), {}
        for name, group in groups.items():
            if left > 0:
                scored[name], left = group[:left], left - len(group)
        rates = referees.score_mistakes(scored, moves[1])
        data["pons"] = rates.to_dict()
        text += f"\n{rates}"
    return data, lambda: print(text)


def _zoo(args: argparse.Namespace) -> Outcome:
    from azjax import zoo  # flax, mctx, orbax: deferred so that --help answers at once

    found, text = [], None
    for name in zoo.names():  # a file that is not a readable model is named, not listed
        try:
            zoo.card(name)
            found.append(name)
        except ValueError as err:
            print(f"warning: {err}", file=sys.stderr)
    if args.game is not None:  # that game's models, of every size unless --size names one
        game = games.make(args.game, **parse_size(args.size, args.game))
        if args.size is None:
            found = [name for name in found if zoo.card(name)["game"]["name"] == args.game]
        else:
            found = zoo.names(game)  # those that read and fit
        if not found:
            size = f" {args.size}" if args.size else ""
            text = f"the zoo has no {args.game}{size} model ({zoo.directory()})"
    return {"zoo": [zoo.card(name) for name in found]}, lambda: print(text or zoo.table(found))


def main(argv: list[str] | None = None) -> int | None:
    return run_command("azjax-eval", _main, argv)


def _main(argv: list[str] | None) -> int:
    load_game_modules("azjax-eval")
    args = _parser().parse_args(argv)
    use_compilation_cache()
    try:
        for option, low in (("games", 1), ("batch", 1), ("opening_moves", 0)):
            if (value := getattr(args, option)) is not None and value < low:
                raise UsageError(f"--{option.replace('_', '-')} must be >= {low}, got {value}")
        if args.size is not None and args.game is None:
            raise UsageError("--size needs --game (the game it sizes)")
        _check_mode_options(args)
        args.games = GAMES if args.games is None else args.games  # unset, to tell given options
        args.opening_moves = args.opening_moves or 0
        for name, path in (("--json", args.json), ("--png", args.png)):
            if path is None:  # checked before the games, so that their results are never lost
                continue
            try:  # its folders are made as needed
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UsageError(
                    f"{name} {path}: cannot make its folder ({err.strerror})"
                ) from None
            check_writable_file(str(path), name)
        if args.a is not None:
            data, show = _match(args)
        elif args.round_robin is not None:
            data, show = _round_robin(args)
        elif args.ladder is not None:
            data, show = _ladder(args)
        elif args.zoo:
            data, show = _zoo(args)
        else:
            data, show = _solver(args)
    except (ValueError, FileNotFoundError) as err:  # bad specs, games, sizes, checkpoints
        print(f"azjax-eval: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = ""
        if args.json is not None and (args.ladder or args.round_robin) is not None:
            kept = f"; the finished matches are in {args.json}"
        print(f"azjax-eval: interrupted{kept}", file=sys.stderr)
        return INTERRUPTED
    if args.json is not None:  # first: results are kept even if printing fails
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    show()
    if args.json is not None:
        print(f"wrote {args.json}")
    match = data.get("match", {})
    if match.get("interrupted"):
        done = f"{match['games']} of {match['planned_games']} games"
    elif data.get("interrupted"):
        done = f"{data['positions']} of {data['planned_positions']} positions"
    else:
        return OK
    print(
        f"azjax-eval: interrupted after {done} (whole batches); the figures above count those",
        file=sys.stderr,
    )
    return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
