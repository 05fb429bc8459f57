"""The server: a Flower ServerApp that runs the rounds, evaluates, logs and checkpoints.

The round policy is a Flower ``Strategy``, ``teamplay.federated.team_strategy.TeamStrategy``; the server
drives it round by round (``Strategy.start`` would not resume, checkpoint, or stop on a signal while
it waits). One round:

    1. ``configure_train``: every site (Flower node) gets a ``train`` message: the global adapter
       vector, its upload budget, the round it restores its state of, the calibration table and
       the run's config;
    2. wait up to ``federated.round_timeout`` for the replies (as Flower's ``send_and_receive``);
    3. ``aggregate_train``: failures (a site raised, or no reply in time) and refusals (the checks
       of ``teamplay.federated.screen``: wrong shapes, NaN or inf, a count beyond its shard,
       another round, an outlying norm; one ``warning:`` line each) are left out and counted in
       the round's log line; the round goes on with the rest, and stops the run with one error
       when fewer than ``federated.min_sites`` are left; the weighted, robust aggregate of the
       valid deltas becomes the global adapters, and the calibration table takes the round's
       per-type mean rewards;
    4. held-out accuracy of the global team; one line in ``federated.jsonl`` (weights, signals,
       bytes per site and in total, compression ratio, failures, refusals); an atomic checkpoint
       ``checkpoints/step-<round>/`` (the global adapters in PEFT format, so `teamplay eval
       --checkpoint RUN` works, and the strategy's ``server_state.json``), refused if the adapters
       are not finite.

``--resume auto`` reads the latest checkpoint and continues with the next round; each site
restores its own state of the last round the server aggregated it in (``teamplay.federated.client``).

SIGTERM or SIGINT stops the run cleanly (``teamplay.training.run.preemption``, as ``teamplay train``):
the round under way is abandoned at its next safe point before its checkpoint (while the server
waits for replies, before it aggregates them, before each turn of its held-out evaluation) and
nothing of it is kept; a round past its evaluation is logged and checkpointed first. Abandoning is
safe because every completed round is checkpointed as it ends and a site always restores its state
of the last round the server aggregated it in, whatever it wrote since: ``--resume auto`` runs the
abandoned round again exactly as it would have run. Why not wait for the replies: the wait lasts
up to ``round_timeout``, and a Ctrl-C reaches the sites of a whole process group too, whose
failures must not shape an aggregate. The run stops with ``Preempted`` (one ``warning:`` line,
exit status 75); a second signal stops at once (``Interrupted``) and a checkpoint being written is
left in its temporary folder, the previous one intact.

Repeatable: two runs of one config and seed log the same rounds (all but ``seconds`` and Flower's
node ids, random per run) and end with the same adapters, provided the same sites are left out of
the same rounds. Everything the strategy computes from a round's replies is ordered by site, never
by arrival, and the calibration table's sums are exact (``math.fsum``), so the order in which sites
finish does not reach the numbers; a round a site was left out of is undone at that site, so
whether a late site finished in the background does not either.

The server loads the task's training pool once, to know each site's shard size (the checks of a
claimed example count); the partition is the config's, so the server can compute it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from flwr.app import Array, ArrayRecord, ConfigRecord

from teamplay.agents.roles import NO_TRAINABLE_ROLE
from teamplay.atomic import write_atomically
from teamplay.config import FederatedConfig
from teamplay.errors import ConfigError
from teamplay.federated.team_strategy import ServerState, TeamStrategy
from teamplay.federated.wire import get_vector, param_layout, set_vector
from teamplay.training.run.preemption import Preempted, Preemption, StopRequested, preemption_handlers

#: seconds between polls for a round's replies, the longest a signal waits to abandon the wait
#: (Flower's own ``send_and_receive`` polls every 0.1 s in simulation, every 3 s in deployment)
POLL_SECONDS = 0.5
#: a server checkpoint's state file, and the files it must hold
SERVER_STATE = "server_state.json"
SERVER_FILES = (SERVER_STATE, "config.yaml")


class FederatedServer:
    """The global team, the run's rounds and its checkpoints; ``run(grid)`` is the ServerApp's main.
    ``strategy`` (a ``TeamStrategy``) is the round policy."""

    def __init__(self, cfg: FederatedConfig, resume: str | None = None, on_round=None) -> None:
        from teamplay.federated.client import shards
        from teamplay.training.play.rollout import RolloutRunner
        from teamplay.training.wiring.backend import build_backend
        from teamplay.training.wiring.envs import env_factory, load_items
        from teamplay.training.wiring.model import build_team_model
        from teamplay.training.wiring.placement import Placement, model_device
        from teamplay.training.wiring.sampling import sampling_params
        from teamplay.training.wiring.wired_run import seed_everything

        refuse_unsupported_logs(cfg)  # before any data, model or site
        self.cfg = cfg
        self.run_dir = Path(cfg.output_dir)
        self.on_round = on_round
        seed_everything(cfg.seed)
        task, site_shards = shards(cfg)
        shard_sizes = tuple(len(shard) for shard in site_shards)
        make_env, team = env_factory(task, cfg.protocol, cfg.team)
        self.eval_items: list = []
        if cfg.eval_task is not None:
            eval_task, self.eval_items = load_items(cfg.eval_task)
            make_env, _ = env_factory(eval_task, cfg.protocol, team)
            self.eval_task = eval_task
        self.team_model = build_team_model(cfg.model, team, cfg.seed,
                                           device=model_device(Placement.IN_PROCESS, cfg.model))
        self.trainable = [a for a in self.team_model.adapter_names if a not in self.team_model.frozen]
        if not self.trainable:
            raise ConfigError(NO_TRAINABLE_ROLE)
        self.layout = param_layout(self.team_model, self.trainable)
        backend = build_backend(cfg.model, cfg.backend, team, team_model=self.team_model,
                                max_new_tokens=cfg.eval_sampling.max_new_tokens)
        # before each turn of a held-out evaluation: a safe point to abandon the round at
        self.runner = RolloutRunner(make_env, backend, sampling_params(cfg.eval_sampling),
                                    max_batch=cfg.backend.max_batch, before_generate=lambda: self.preemption.check())
        self.strategy = TeamStrategy(cfg.federated, self.layout.size, shard_sizes)
        #: set by SIGTERM/SIGINT while ``run`` runs (``teamplay.training.run.preemption``)
        self.preemption = Preemption()
        #: the round of the checkpoint written or restored last (0: none)
        self.saved_round = 0
        if resume:
            self._resume(resume)

    @property
    def state(self) -> ServerState:
        """The strategy's state: rounds done, calibration table, signals, restore rounds."""
        return self.strategy.state

    # ------------------------------------------------------------------------------ rounds
    def run(self, grid) -> None:
        """Run the rounds up to ``federated.rounds``: the ServerApp's main.

        SIGTERM or SIGINT abandons the round under way, or lets it end if it is past its
        evaluation, and raises ``Preempted`` (module doc); a second one raises ``Interrupted``.
        """
        try:
            with preemption_handlers() as self.preemption:
                self._run(grid)
        except StopRequested:
            raise self.preempted(self.preemption.signum) from None
        finally:
            self.preemption = Preemption()  # the handlers are gone: nothing sets this one

    def _run(self, grid) -> None:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.run_dir / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        log = self.run_dir / "federated.jsonl"
        _truncate(log, self.state.round if self.state.round else -1)  # a fresh start keeps no line of an earlier one
        if self.state.round == 0 and self.eval_items:
            _append(log, {"round": 0, "heldout": self._evaluate()})
        self.strategy.summary()
        while self._go_on():
            record = self.round(grid, self.state.round + 1, log)
            if self.on_round is not None:
                self.on_round(record)

    def _go_on(self) -> bool:
        """Whether another round runs: not after the last, and not once a signal asked for a stop
        (``StopRequested``: also after the last round, as ``teamplay train`` stops after its last step)."""
        self.preemption.check()
        return self.state.round < self.cfg.federated.rounds

    def round(self, grid, rnd: int, log: Path) -> dict[str, Any]:
        """Run round ``rnd`` (steps 1-4 of the module doc), log it, checkpoint; returns its record.

        The log line goes first: a kill before the checkpoint leaves a line that resume drops."""
        t0 = time.perf_counter()
        arrays = ArrayRecord({"vector": Array(get_vector(self.team_model, self.layout, self.trainable))})
        run_config = ConfigRecord({"run_config": json.dumps(self.cfg.model_dump(mode="json"))})
        messages = list(self.strategy.configure_train(rnd, arrays, run_config, grid))
        replies = _exchange(grid, messages, self.cfg.federated.round_timeout, self.preemption.check)
        # the last safe point before anything of the round is applied: sites the same signal
        # reached (a Ctrl-C reaches a process group) may have failed, and must not shape the aggregate
        self.preemption.check()
        new, _ = self.strategy.aggregate_train(rnd, replies)
        set_vector(self.team_model, self.layout, self.trainable, new["vector"].numpy())
        record = self.strategy.log_fields()
        if self.eval_items:
            record["heldout"] = self._evaluate()
        record["seconds"] = time.perf_counter() - t0
        _append(log, record)
        self._checkpoint()
        return record

    def preempted(self, signum: int) -> Preempted:
        """The clean stop for signal ``signum``: after the last checkpointed round (every completed
        round is checkpointed as it ends, so there is nothing left to write)."""
        done = self.saved_round
        if done == 0:
            return Preempted(signum, "before round 1 finished; no checkpoint written yet")
        from teamplay.training.store.checkpoint import checkpoint_dir

        return Preempted(signum, f"after round {done}; checkpoint {checkpoint_dir(self.run_dir, done).name} written")

    def _evaluate(self) -> dict[str, Any]:
        from teamplay.training.play.evaluation import evaluate

        _, metrics = evaluate(self.runner, self.eval_task, self.eval_items, seed=self.cfg.seed)
        return metrics.to_dict()

    # ------------------------------------------------------------------------- checkpoints
    def _checkpoint(self) -> None:
        """The global adapters, the server state and the config, in a checkpoint folder of the trainer's
        format (``checkpoint.write_checkpoint``: written whole or not at all, with a manifest of
        SHA-256 sums), named by round."""
        from teamplay.training.learn.nonfinite import check_finite_adapters
        from teamplay.training.store.checkpoint import write_checkpoint

        params = {a: self.team_model.adapter_parameters(a) for a in self.trainable}
        check_finite_adapters(params, f"checkpoint round {self.state.round}")

        def fill(folder: Path) -> None:
            self.team_model.save_adapters(folder / "adapters")
            (folder / SERVER_STATE).write_text(json.dumps(self.state.__dict__), encoding="utf-8")
            (folder / "config.yaml").write_text(yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False),
                                                encoding="utf-8")

        write_checkpoint(self.run_dir, self.state.round, fill, self.cfg.keep_checkpoints)
        self.saved_round = self.state.round

    def _resume(self, resume: str) -> None:
        """Continue from the newest intact checkpoint (``auto``; damaged ones are skipped with a
        warning) or the one at ``resume``; a damaged or foreign folder is a one-line error."""
        from teamplay.training.store.checkpoint import verify_checkpoint
        from teamplay.training.store.resume import resume_path

        path = resume_path(self.run_dir, resume, SERVER_FILES)  # "auto": verified already
        if path is None:
            return  # nothing to resume: a fresh run
        if resume != "auto":
            if not (path / SERVER_STATE).is_file():
                raise ConfigError(f"--resume {resume}: {path} is not a federated checkpoint (no {SERVER_STATE})")
            verify_checkpoint(path, SERVER_FILES)
        self.team_model.load_adapters(path / "adapters")
        saved = json.loads((path / SERVER_STATE).read_text(encoding="utf-8"))
        # written before sites restored their last aggregated round: the last round's sites restore it
        saved.setdefault("restore", {str(s): saved["round"] for s in saved.get("aggregated", [])})
        self.strategy.state = ServerState(**saved)
        self.saved_round = self.state.round


def _exchange(grid, messages: list, timeout: float, check: Callable[[], None]) -> list:
    """What ``grid.send_and_receive(messages, timeout=timeout)`` returns (the replies that came
    within ``timeout`` s, in arrival order), calling ``check()`` before each poll: a stop asked for
    by a signal abandons the wait (``StopRequested``) instead of sitting out ``round_timeout``."""
    waiting = set(grid.push_messages(messages))
    deadline = time.monotonic() + timeout
    replies: list = []
    while True:
        check()
        arrived = list(grid.pull_messages(waiting))
        replies += arrived
        waiting -= {reply.metadata.reply_to_message_id for reply in arrived}
        if not waiting or time.monotonic() >= deadline:
            return replies
        time.sleep(POLL_SECONDS)


def refuse_unsupported_logs(cfg: FederatedConfig) -> None:
    """A config asking for TensorBoard or wandb logs is one ``ConfigError`` line: the server logs each
    round to ``federated.jsonl`` only and the sites log nothing, so they would be silently missing."""
    for field, asked in (("tensorboard", cfg.tensorboard), ("wandb_project", cfg.wandb_project)):
        if asked:
            raise ConfigError(f"{field}: a federated run writes no TensorBoard or wandb logs (each round is one "
                              f"line of federated.jsonl in the run folder); drop {field}")


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _truncate(path: Path, rounds_done: int) -> None:
    """Drop lines of rounds after the last completed one (lost with an interrupted process)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["round"] <= rounds_done]
    path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
