"""The one door to trained models: a run's checkpoint, a model file or a zoo model as a `Model`.

    model = load("runs/connect4")             # the run's newest checkpoint
    model = load("runs/connect4@200")         # checkpoint 200
    model = load("connect4.azjax")            # a model file (azjax-export)
    model = load("zoo:connect4", game)        # a zoo model, refused unless trained for `game`
    game = game_of("zoo:connect4")            # the game alone, without reading parameters

Agents, `train.init_from`, `azjax-eval`, `azjax-export` and the browser page all load models
here, and `check` is the one place that refuses a model trained for another game or shape.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from azjax import checkpoint, export, zoo
from azjax.checks import size_kwargs
from azjax.config import Config
from azjax.network import make_network
from azjax.specs import Source, parse_source, source_takes_no_simulations
from games.core import Game


@dataclasses.dataclass(frozen=True)
class Model:
    """A trained network, ready to play or to start a run."""

    config: Config  # the run's resolved config: game, network, search
    network: Any  # the flax module of `config.network` for `config.game`
    params: Any
    card: dict[str, Any] | None  # a model file's card; None for a checkpoint
    name: str  # the source as agents name it: WORKDIR@STEP, FILE.azjax or zoo:NAME
    step: int | None = None  # the checkpoint's iteration, or the one its card names

    @property
    def game(self) -> Game:
        return self.config.game.make()


def run_directory(source: Source) -> str:
    """A run source's directory; ValueError when it is missing but its name up to its last ':'
    is there: a SIMS given to a model source, which takes none (agent specs take it)."""
    head, colon, tail = source.path.rpartition(":")
    missing = not pathlib.Path(source.path).exists()
    if colon and tail.isdigit() and missing and pathlib.Path(head).exists():
        raise ValueError(source_takes_no_simulations(head, tail))
    return source.path


def model_file(text: str) -> pathlib.Path | None:
    """The model file a source names (a zoo model's is in the zoo's folder); None for a run."""
    source = parse_source(text)
    if source.kind == "run":
        return None
    return zoo.path(source.path) if source.kind == "zoo" else pathlib.Path(source.path)


def game_of(text: str) -> Game:
    """The game (and size) source `text`'s model was trained for, read without its parameters."""
    source = parse_source(text)
    if source.kind == "run":
        return checkpoint.read_config(run_directory(source), source.step).game.make()
    return export.card_game(export.read_card(model_file(text)))


def _label(model: Model) -> str:
    """How errors name a model: checkpoint WORKDIR@STEP, model FILE.azjax or zoo model NAME."""
    if model.card is None:
        return f"checkpoint {model.name}"
    return f"zoo model {model.name[4:]}" if model.name.startswith("zoo:") else f"model {model.name}"


def _game(game: Game) -> str:
    """How errors name a game: its name and sizes, e.g. "othello size=6" or "connect4"."""
    sizes = ",".join(f"{key}={value}" for key, value in size_kwargs(game).items())
    return f"{game.name} {sizes}" if sizes else game.name


def _net(config: Config) -> str:
    return f"a {config.network.blocks}x{config.network.channels} net of {_game(config.game.make())}"


def check(model: Model, game: Game | None = None, config: Config | None = None) -> None:
    """Refuse `model` (ValueError naming it) when it was trained for another game than `game`,
    or, given the `config` of a run, for another game or network shape than that run's."""
    if config is not None:
        game = config.game.make()
        shape = export.shapes(checkpoint.abstract_params(config))
        if model.game is not game or export.shapes(model.params) != shape:
            raise ValueError(
                f"{_label(model)} is {_net(model.config)}; expected {_net(config)} "
                "(the same game and network shape)"
            )
    if game is not None and model.game is not game:
        raise ValueError(
            f"{_label(model)} was trained on {_game(model.game)}, not on the {_game(game)} "
            "game asked for"
        )


def load(text: str, game: Game | None = None, config: Config | None = None) -> Model:
    """The model at source `text` (WORKDIR, WORKDIR@STEP, FILE.azjax or zoo:NAME), checked by
    `check` against `game` or a run's `config` when given; ValueError naming what is wrong."""
    source = parse_source(text)
    if source.kind == "run":
        path = run_directory(source)
        step = checkpoint.pick_step(path, source.step)
        trained, params = checkpoint.load_for_inference(path, step)
        card, name = None, f"{path}@{step}"
    else:
        trained, params, card = export.load_model(model_file(text))
        step = card.get("iteration") if isinstance(card.get("iteration"), int) else None
        name = f"zoo:{source.path}" if source.kind == "zoo" else source.path
    network = make_network(trained.game.make(), trained.network)
    model = Model(trained, network, params, card, name, step)
    check(model, game, config)
    return model
