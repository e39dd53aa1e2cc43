"""The training loop on the host: `train_and_evaluate(config, workdir)`.

Each iteration runs these steps in order (`_Session`'s methods):

    iterate        one jitted call of the trainer (azjax.trainer): self-play, replay, learning
    check_finite   stop, without saving, when the loss or the parameters stopped being finite
    evaluate       every `eval.every` iterations, the arena against `eval.opponents`
    gate           every `gate.every` iterations, the latest parameters against the best
    log            one record in metrics.jsonl and TensorBoard (azjax.runlog)
    checkpoint     every `checkpoint.every` iterations, or when asked to stop (azjax.checkpoint)

and a final evaluation closes the run. Metrics leave the device once per iteration.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from tqdm.auto import tqdm

from azjax import agents, arena, parallel, resume
from azjax.checkpoint import Checkpointer, StopRequest, WorkdirLock, read_config
from azjax.config import Config, ConfigError, config_to_dict, differences, dump_config
from azjax.runlog import RunLog, eval_line, metrics_name, postfix, read_metrics, scalars
from azjax.selfplay import chunk_evaluations
from azjax.trainer import Trainer, TrainState, make_trainer

Array = jax.Array
Params = Any


class TrainingError(RuntimeError):
    """A run that cannot go on (its loss or parameters stopped being finite)."""


def _say(text: str, file: Any = None) -> None:
    """Print on process 0 only (every process runs the same loop)."""
    if jax.process_index() == 0:
        print(text, file=file, flush=True)


def train_and_evaluate(
    config: Config, workdir: str | pathlib.Path, progress: bool = True
) -> dict[str, Any]:
    """Train `config` in `workdir`, resuming from its newest checkpoint; return final metrics.

    A finished run (train.iterations reached, final evaluation logged) is left as it is.
    Raises WorkdirError (not a directory the user may write), WriteFailure (azjax.checks: the
    disk fails), WorkdirInUse (another run holds it), CheckpointError (a damaged checkpoint or
    another run's), ConfigError (an `eval.opponents` agent that cannot be built) or
    TrainingError (training diverged).
    """
    with (
        WorkdirLock(workdir) as lock,
        Checkpointer(lock.workdir, config.checkpoint.keep) as checkpointer,
    ):
        iteration = checkpointer.latest_step()
        if iteration is not None and iteration >= config.train.iterations:
            checkpointer.check(config, iteration)  # another run's checkpoint is refused
            if _finished(lock.workdir, config, iteration):
                _say(
                    f"the run in {lock.workdir} is finished (iteration {iteration} of "
                    f"train.iterations={config.train.iterations}); raise train.iterations "
                    "to train further"
                )
                return {"iteration": iteration, "finished": True}
        return _Session(config, lock.workdir, checkpointer, progress).run()


def _finished(workdir: pathlib.Path, config: Config, iteration: int) -> bool:
    """Whether the final evaluation of `iteration`, if any, is logged."""
    if not config.eval.final_num_games:
        return True
    path = workdir / "metrics.jsonl"
    records = read_metrics(path) if path.exists() else []
    return any(r.get("final") and r.get("iteration") == iteration for r in records)


def _resumed(config: Config, checkpointer: Checkpointer) -> tuple[Config, list[str]]:
    """`config` for resuming the run in `checkpointer`'s workdir, and the settings it changes
    since the newest checkpoint ("key old -> new"). The run keeps the `train.init_from` it
    started from: it continues from its checkpoint, so another one is ignored, with a warning."""
    saved = read_config(checkpointer.workdir, checkpointer.latest_step())
    first = saved.train.init_from
    if first != config.train.init_from:
        _say(
            f"warning: train.init_from={config.train.init_from!r} is ignored: the run in "
            f"{checkpointer.workdir} resumes from its checkpoint, and keeps "
            f"train.init_from={first!r}",
            sys.stderr,
        )
        train = dataclasses.replace(config.train, init_from=first)
        config = dataclasses.replace(config, train=train)
    return config, _changes(saved, config)


def _changes(before: Config, after: Config) -> list[str]:
    """The settings of a continued run that differ from those it ran with ("key old -> new"),
    `train.init_from` aside (a snapshot names its model there)."""
    return [
        f"{key} {old!r} -> {new!r}"
        for key, old, new in differences(config_to_dict(before), config_to_dict(after))
        if key != "train.init_from"
    ]


class _Session:
    """One session of a run on the host (a first start or a resume): the steps of an
    iteration and what they share."""

    def __init__(
        self, config: Config, workdir: pathlib.Path, checkpointer: Checkpointer, progress: bool
    ) -> None:
        resuming = checkpointer.latest_step() is not None
        changed: list[str] = []
        if resuming:
            config, changed = _resumed(config, checkpointer)
        self.config, self.checkpointer = config, checkpointer
        # A resumed run starts from its checkpoint: the model file it started from is not read
        # (a previous piece's model may be gone from a fresh machine). A first start reads it
        # before any compiling, so that a bad one stops the run at once.
        start = resume.Start() if resuming else resume.start(config)
        self.shown = progress and jax.process_index() == 0  # the progress bars and notes
        if self.shown:  # what the wait before the bar moves is
            cache = jax.config.jax_compilation_cache_dir
            where = f"; JAX's cache in {cache} speeds up the next ones" if cache else ""
            print(f"compiling: the first start of a config takes longest{where}", flush=True)
        self.opponents = make_opponents(config)  # a bad one stops the run before compiling
        self.trainer = make_trainer(config)
        self.iteration, saved = 0, []
        if resuming:
            self.iteration, self.state = resume.from_checkpoint(self.trainer, checkpointer)
            saved = checkpointer.records(self.iteration)
            _say(f"resuming from iteration {self.iteration} in {workdir}")
        else:
            self.state = self.trainer.init(jax.random.key(config.train.seed), start.params)
            if start.snapshot is not None:  # a model file of a stopped run: continue it
                self.iteration, self.state = resume.from_snapshot(
                    self.trainer, self.state, start.snapshot
                )
                saved = json.loads(start.snapshot["records"])
                changed = _changes(start.config, config)
                origin = config.train.init_from
                _say(f"continuing the run of {origin} from iteration {self.iteration}")
        if jax.process_index() == 0:
            if changed:  # they apply from here on; the earlier checkpoints keep the old ones
                print(f"settings changed since then: {'; '.join(changed)}", flush=True)
            (workdir / "config.yaml").write_text(dump_config(config))
            if warning := parallel.emulation_warning(config.network.dtype):
                print(f"warning: {warning}", file=sys.stderr, flush=True)
        self.log_file = RunLog(workdir, self.iteration, saved)
        self.start_iteration = self.iteration
        self.pending: list[dict] = []  # records since the last checkpoint
        self.eval_key = jax.random.key(config.train.seed + 1)
        self.gate_key = jax.random.fold_in(self.eval_key, 2**31 - 1)  # iterations never reach it
        self.bar = tqdm(
            total=config.train.iterations,
            initial=self.iteration,
            desc=self.trainer.game.name,
            unit="it",
            disable=not self.shown,
            dynamic_ncols=True,
        )
        self.stop = StopRequest()
        self.started = time.perf_counter()

    def run(self) -> dict[str, Any]:
        """Iterate until `train.iterations` or a stop, then `finish`."""
        record: dict[str, Any] = {}
        stopping = False  # agreed by every process, once per iteration
        steps = (self.check_finite, self.evaluate, self.gate, self.log)
        try:
            while self.iteration < self.config.train.iterations and not stopping:
                record = self.iterate()
                for step in steps:
                    step(record)
                stopping = self.checkpoint(record)
        except BaseException:
            self.log_file.close()
            raise
        finally:
            self.stop.restore()
            self.bar.close()
        return self.finish(record, stopping or parallel.any_process(self.stop.requested))

    def elapsed_minutes(self) -> float:
        """The whole run's wall clock, across resumes."""
        return self.log_file.minutes_before + (time.perf_counter() - self.started) / 60

    def iterate(self) -> dict[str, Any]:
        """One jitted iteration; its record (waits for the device)."""
        start = time.perf_counter()
        self.state, metrics = self.trainer.iterate(self.state)
        record = {"iteration": self.iteration + 1, **scalars(metrics)}
        if not record["train/trained"]:  # the buffer is still filling: no losses to log
            kept = ("train/trained", "train/step")
            record = {k: v for k, v in record.items() if k in kept or not k.startswith("train/")}
        self.iteration += 1
        elapsed, c = time.perf_counter() - start, self.config
        moves = c.selfplay.batch_size * c.selfplay.chunk_moves
        record["seconds"] = elapsed
        record["positions_per_second"] = record["replay/added"] / elapsed  # into the buffer
        record["moves_per_second"] = moves / elapsed
        played = record["selfplay/full_search_fraction"]
        evaluations = chunk_evaluations(self.trainer.game, c.search, c.selfplay, played)
        record["evaluations_per_second"] = evaluations / elapsed  # self-play's network rows
        record["train/learning_rate"] = float(self.trainer.schedule(record["train/step"]))
        return record

    def check_finite(self, record: dict[str, Any]) -> None:
        """TrainingError when the loss or the parameters stopped being finite (nothing saved)."""
        if not record["train/trained"]:
            return
        loss = record["train/loss"]
        if math.isfinite(loss) and parallel.to_host(_all_finite(self.state.params)):
            return
        checkpoint = self.checkpointer.latest_step()
        kept = f"checkpoint {checkpoint} is kept" if checkpoint else "no checkpoint was saved"
        raise TrainingError(
            f"training diverged at iteration {self.iteration} (loss {loss}): stopped "
            f"without saving it, {kept}. Lower optim.learning_rate "
            f"(now {record['train/learning_rate']:g}) or raise optim.warmup_steps, and run again"
        )

    def evaluate(self, record: dict[str, Any]) -> None:
        """Every `eval.every` iterations (but the last: the final evaluation), the arena."""
        every, total = self.config.eval.every, self.config.train.iterations
        if not every or self.iteration % every or self.iteration >= total:
            return
        key = jax.random.fold_in(self.eval_key, self.iteration)
        params, games = self.state.params, self.config.eval.num_games
        opponents = ", ".join(self.config.eval.opponents)
        self.bar.set_postfix_str(f"evaluating: {games} games against {opponents}")
        record.update(evaluate(self.trainer, self.opponents, params, key, games))
        self.bar.write(eval_line(self.iteration, record, self.config.eval.opponents))

    def gate(self, record: dict[str, Any]) -> None:
        """Every `gate.every` iterations, the latest parameters against the best."""
        every = self.config.gate.every
        if not every or self.iteration % every:
            return
        key = jax.random.fold_in(self.gate_key, self.iteration)
        self.bar.set_postfix_str(f"gate: {self.config.gate.games} games against the best")
        self.state, gated = gate(self.trainer, self.state, key)
        record.update(gated)
        verdict = "becomes the best" if gated["gate/promoted"] else "is not better"
        self.bar.write(
            f"iteration {self.iteration}: gate: the latest scored {gated['gate/score']:.2f} "
            f"against the best and {verdict}"
        )

    def log(self, record: dict[str, Any]) -> None:
        record["elapsed_minutes"] = self.elapsed_minutes()
        self.log_file.write(record)
        self.pending.append(record)

    def checkpoint(self, record: dict[str, Any]) -> bool:
        """Save when due or asked to stop; whether to stop. Every process decides alike (a
        signal may reach one host only), and a stop asked while saving is honoured."""
        iteration = self.iteration
        due = iteration % self.config.checkpoint.every == 0
        due = due or iteration == self.config.train.iterations
        stopping = parallel.any_process(self.stop.requested)
        if self.pending and (due or stopping):
            params, rest = self.state.params, self.state.replace(params=None)
            with self.stop.saving():
                self.checkpointer.save(iteration, params, rest, self.config, self.pending)
            self.pending = []
            stopping = parallel.any_process(self.stop.requested)  # asked while saving
        self.bar.set_postfix(postfix(record), refresh=False)
        self.bar.update(1)
        return stopping

    def finish(self, record: dict[str, Any], stopping: bool) -> dict[str, Any]:
        """The final evaluation (unless stopped), and the session's closing metrics."""
        final: dict[str, Any] = {"iteration": self.iteration}
        try:
            if stopping:
                print(
                    f"interrupted at iteration {self.iteration}; checkpoint saved; rerun the same "
                    "command to resume",
                    flush=True,
                )
                final["interrupted"] = True
            elif self.config.eval.final_num_games:
                final.update(self.final_evaluation())
                final["final"] = True
                final["elapsed_minutes"] = self.elapsed_minutes()
                self.log_file.write(final)
        finally:
            self.log_file.close()
        return {**record, **final, **self.clocks()}

    def final_evaluation(self) -> dict[str, Any]:
        """`eval.final_num_games` games against each opponent, behind a progress bar."""
        games = self.config.eval.final_num_games
        total = games * len(self.config.eval.opponents)
        key = jax.random.fold_in(self.eval_key, 0)
        with tqdm(total=total, desc="final evaluation", unit="game", disable=not self.shown) as bar:
            return evaluate(self.trainer, self.opponents, self.state.params, key, games, bar.update)

    def clocks(self) -> dict[str, Any]:
        """Where this session started and the run's wall clock so far (for the summary)."""
        return {"start_iteration": self.start_iteration, "elapsed_minutes": self.elapsed_minutes()}


@jax.jit
def _all_finite(tree: Any) -> Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


# ----------------------------------------------------------------------------- the arena


def make_opponents(config: Config) -> tuple[agents.Agent, ...]:
    """The `eval.opponents` agents; ConfigError naming a spec that cannot be built (say, a
    `search:WORKDIR` without checkpoints)."""
    game, out = config.game.make(), []
    for i, spec in enumerate(config.eval.opponents):
        try:
            out.append(agents.make(spec, game))
        except ValueError as err:
            raise ConfigError(f"eval.opponents[{i}]={spec!r}: {err}") from None
    return tuple(out)


def gate(trainer: Trainer, state: TrainState, key: Array) -> tuple[TrainState, dict[str, Any]]:
    """Arena gating: the latest parameters (the candidate) against the best, both with search;
    the candidate becomes the best (self-play's parameters) when it scores >= `gate.threshold`."""
    config, game, network = trainer.config.gate, trainer.game, trainer.network
    search = trainer.config.playing_search()
    candidate = agents.search_agent(game, network, parallel.to_host(state.params), search)
    best = agents.search_agent(game, network, parallel.to_host(state.best), search)
    result = arena.match(
        game, candidate, best, config.games, key, opening_moves=config.opening_moves
    )
    promoted = arena.gate(result, config.threshold)
    if promoted:
        state = state.replace(best=jax.tree.map(jnp.copy, state.params))
    return state, {"gate/score": float(result.score), "gate/promoted": int(promoted)}


def evaluate(
    trainer: Trainer,
    opponents: tuple[agents.Agent, ...],
    params: Params,
    key: Array,
    num_games: int,
    progress: Callable[[int], Any] | None = None,
) -> dict[str, float]:
    """Net + search (no exploration) against each `eval.opponents` agent, via the arena;
    `progress(n)` after each batch of `n` games (`arena.match`'s)."""
    config = trainer.config.eval
    search = trainer.config.playing_search()
    player = agents.search_agent(trainer.game, trainer.network, parallel.to_host(params), search)
    out: dict[str, float] = {}
    for i, (spec, opponent) in enumerate(zip(config.opponents, opponents, strict=True)):
        key_i, plies = jax.random.fold_in(key, i), config.opening_moves
        result = arena.match(
            trainer.game, player, opponent, num_games, key_i, opening_moves=plies, progress=progress
        )
        figures = {"score": float(result.score), "win_rate": result.wins / result.games}
        figures |= {k: int(getattr(result, k)) for k in ("wins", "draws", "losses")}
        out |= {f"eval/{metrics_name(spec)}/{k}": v for k, v in figures.items()}
    return out
