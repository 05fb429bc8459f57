"""The ``teamplay`` command: train, sweep, federate, eval, play, serve, export, credit, report, list.

Every user error (bad config, missing file, unknown name, damaged checkpoint, a run folder in use)
and every file-system failure (full disk, read-only folder, an output path that is a file) is
printed as one ``error:`` line with exit status 2, never wrapped, even when stderr is a pipe; a
traceback means a bug in teamplay. teamplay's warnings (a damaged checkpoint skipped by
``--resume auto``, a torn metrics line dropped by ``report``) are one ``warning:`` line each.
SIGTERM or SIGINT during ``train``, ``sweep`` or ``federate`` stops at the next safe point with a
checkpoint, one ``warning:`` line and exit status 75 (``teamplay.training.run.preemption``).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from teamplay.config import EvalConfig, load_config
from teamplay.errors import TeamplayError, TeamplayWarning
from teamplay.registry import is_plugin_spec
from teamplay.training.run.preemption import Interrupted, Preempted

# transformers 5 warns about its own deprecated attribute each time peft builds LoRA layers: noise
# for a user, nothing they can change.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train and evaluate teams of cooperating LLM agents.")
console = Console()
err_console = Console(stderr=True)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a TeamplayError, or an OSError of the file system (a full disk, a read-only folder, an
    output path that is a file), into one ``error:`` line with exit status 2; show teamplay's own
    warnings (a skipped damaged checkpoint) as one ``warning:`` line each."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", TeamplayWarning)
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except (Preempted, Interrupted) as exc:  # SIGTERM/SIGINT: a clean stop (75), or at once on a second one
            _one_line("warning", str(exc))
            raise typer.Exit(exc.exit_status) from None
        except TeamplayError as exc:
            _one_line("error", str(exc))
            raise typer.Exit(2) from None
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            _one_line("error", f"{exc.strerror or exc}{where}")
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted: results written so far are kept")
            raise typer.Exit(130) from None

    return wrapper


def _one_line(label: str, message: str) -> None:
    """``label: message`` on stderr as ONE line: rich would wrap it at the width it guesses (80
    columns when stderr is a pipe), and a log reader or ``grep error:`` would get half a message."""
    message = " ".join(message.split())
    err_console.print(f"[bold red]{label}:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, TeamplayWarning):
        _one_line("warning", str(message))
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err_console,
                    transient=False)


def _shortcut_overrides(**flags: Any) -> list[str]:
    """CLI shortcut flags (``--task gsm8k``) as ``--set`` overrides; None means not given."""
    return [f"{key}={json.dumps(value) if not isinstance(value, str) else value}"
            for key, value in flags.items() if value is not None]


def build_eval_team(cfg: EvalConfig, item_limit: int | None = None, controller_mode: str | None = None):
    """What ``eval`` and ``play`` both build from an EvalConfig: the task and its items, the
    controllers (tables from ``model.checkpoint``), the env factory, the team and the backend.
    ``item_limit`` replaces ``task.limit``; ``controller_mode`` overrides the configured mode."""
    from teamplay.training.wiring.setup import build_backend, env_factory, load_controllers, load_items

    task_cfg = cfg.task if item_limit is None else cfg.task.model_copy(update={"limit": item_limit})
    task_obj, items = load_items(task_cfg)
    controllers = load_controllers(cfg.controllers, cfg.model.checkpoint) if cfg.controllers.enabled else None
    make_env, team = env_factory(task_obj, cfg.protocol, cfg.team,
                                 controller=controllers.controller(controller_mode) if controllers else None)
    backend_obj = build_backend(cfg.model, cfg.backend, team, max_new_tokens=cfg.sampling.max_new_tokens)
    return task_obj, items, controllers, make_env, team, backend_obj


ConfigOpt = typer.Option(None, "--config", "-c", help="YAML config file (see configs/).")
SetOpt = typer.Option([], "--set", help="Override a config field: --set sampling.temperature=0.7")
TeamOpt = typer.Option(None, "--team", help="A team folder instead of --config: an export (teamplay export) "
                                            "or a run folder; its task, team, adapters, controllers and "
                                            "decoding (change them with --set and the flags).")


def _eval_config(config: Path | None, team: Path | None, checkpoint: str | None, overrides: list[str]) -> EvalConfig:
    """The EvalConfig of ``eval`` and ``play``: ``--config`` (or the defaults), or the team folder of
    ``--team`` (``load_team_config``), which brings its own config and adapters."""
    if team is None:
        return load_config(EvalConfig, config, overrides)
    if checkpoint is not None:
        raise TeamplayError("--team and --checkpoint both name the adapters to load; give one (--team loads "
                            "them from its folder)")
    if config is not None:
        raise TeamplayError("--team brings its own config; drop --config (change fields with --set)")
    from teamplay.serving.files.export import load_team_config

    return load_team_config(team, overrides)


@app.command("eval")
@user_errors
def eval_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    task: str | None = typer.Option(None, help="Task: arith, gsm8k, math, math500, gpqa."),
    split: str | None = typer.Option(None, help="Split to evaluate."),
    source: str | None = typer.Option(None, help="Local data file (or 'level=N' for arith)."),
    limit: int | None = typer.Option(None, help="Evaluate the first N problems."),
    protocol: str | None = typer.Option(None, help="Protocol name or file (teamplay list)."),
    model: str | None = typer.Option(None, help="Hub id, local path or 'smollm2-135m'."),
    backend: str | None = typer.Option(None, help="hf, vllm or scripted."),
    policy: str | None = typer.Option(None, help="Scripted policy: oracle, wrong, ..."),
    samples: int | None = typer.Option(None, help="Episodes per problem."),
    temperature: float | None = typer.Option(None, help="Sampling temperature (0 = greedy)."),
    max_new_tokens: int | None = typer.Option(None, help="Tokens per message at most."),
    seed: int | None = typer.Option(None, help="Seed."),
    checkpoint: str | None = typer.Option(None, help="Evaluate the adapters (and controller tables) "
                                                     "of a trained run."),
    team: Path | None = TeamOpt,
    output: str | None = typer.Option(None, "--output", "-o", help="Output folder."),
    compare_always_speak: bool = typer.Option(
        True, "--compare-always-speak/--no-compare-always-speak",
        help="With controllers enabled: also run the same team with always_speak on the same items "
             "and print both side by side."),
) -> None:
    """Evaluate a team on a benchmark: accuracy, cost and correction metrics."""
    from teamplay.training.play.evaluation import evaluate
    from teamplay.training.play.rollout import RolloutRunner
    from teamplay.training.wiring.setup import env_factory, sampling_params

    overrides = _shortcut_overrides(**{
        "task.name": task, "task.split": split, "task.source": source, "task.limit": limit,
        "protocol.name": protocol, "model.name": model, "backend.name": backend,
        "backend.policy": policy, "samples": samples, "sampling.temperature": temperature,
        "sampling.max_new_tokens": max_new_tokens, "seed": seed, "model.checkpoint": checkpoint,
        "output_dir": output}) + list(set_)
    cfg = _eval_config(config, team, checkpoint, overrides)
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():  # before the model loads
        raise TeamplayError(f"output {out} is a file, not a folder; pass a folder as --output")
    task_obj, items, controllers, make_env, team, backend_obj = build_eval_team(cfg)
    out.mkdir(parents=True, exist_ok=True)
    # the always-speak baseline: same team, items, seed and backend; only the controller differs
    runs = {"metrics": (make_env, "transcripts.jsonl", cfg.controllers.mode if controllers else "")}
    if controllers is not None and compare_always_speak and cfg.controllers.mode != "always_speak":
        baseline_env, _ = env_factory(task_obj, cfg.protocol, team, controller=controllers.controller("always_speak"))
        runs["always_speak"] = (baseline_env, "always_speak_transcripts.jsonl", "always_speak")
    results: dict[str, Any] = {"config": cfg.model_dump(mode="json")}
    measured = {}
    with progress_bar() as bar:
        for key, (factory, transcripts, label) in runs.items():
            runner = RolloutRunner(factory, backend_obj, sampling_params(cfg.sampling),
                                   max_batch=cfg.backend.max_batch)
            job = bar.add_task(f"eval {cfg.task.name}/{cfg.protocol.name} {label}".rstrip(),
                               total=len(items) * cfg.samples)
            _, measured[key] = evaluate(runner, task_obj, items, samples=cfg.samples, seed=cfg.seed,
                                        transcripts_path=out / transcripts,
                                        on_episode=lambda _, job=job: bar.advance(job))
            results[key] = measured[key].to_dict()
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    metrics = measured["metrics"]
    console.print(metrics_table(f"{cfg.task.name} ({len(items)} problems) / {cfg.protocol.name}", metrics))
    if "always_speak" in measured:
        console.print(controller_table(f"speak/skip controllers ({cfg.controllers.mode}) vs always_speak",
                                       cfg.controllers.mode, metrics, measured["always_speak"]))
    console.print(f"wrote {out / 'results.json'} and {', '.join(str(out / r[1]) for r in runs.values())}")


def controller_table(title: str, mode: str, controlled, always) -> Table:
    """Accuracy, cost and speak rates of a controlled team next to the same team always speaking."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column(mode, justify="right")
    table.add_column("always_speak", justify="right")
    table.add_row("team accuracy", f"{controlled.team_accuracy:.3f}", f"{always.team_accuracy:.3f}")
    table.add_row("tokens / problem", f"{controlled.tokens_per_problem:.1f}", f"{always.tokens_per_problem:.1f}")
    table.add_row("model calls / problem", f"{controlled.calls_per_problem:.2f}",
                  f"{always.calls_per_problem:.2f}")
    rates, base = controlled.extra.get("speak_rate", {}), always.extra.get("speak_rate", {})
    for key in sorted(set(rates) | set(base)):
        shown = (f"{rates[key]:.3f}" if key in rates else "-", f"{base[key]:.3f}" if key in base else "-")
        table.add_row(f"  speak rate {key}", *shown)
    saved = always.tokens_per_problem - controlled.tokens_per_problem
    share = f" ({saved / always.tokens_per_problem:.0%})" if always.tokens_per_problem > 0 else ""
    table.add_row("tokens saved / problem", f"{saved:.1f}{share}", "")
    return table


def metrics_table(title: str, metrics) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("team accuracy (teamplay verifier)", f"{metrics.team_accuracy:.3f}")
    # lm-evaluation-harness-compatible scores of the same completions: compare these, not team
    # accuracy, with published lm-eval numbers (README, "Evaluation")
    for key, value in metrics.lm_eval.items():
        table.add_row(f"  lm-eval 0.4.13 {key}", f"{value:.3f}")
    for role, acc in metrics.role_accuracy.items():
        table.add_row(f"  {role} accuracy", f"{acc:.3f}")
    table.add_row("any agent right", f"{metrics.any_agent_right:.3f}")
    table.add_row("initial accuracy", f"{metrics.initial_accuracy:.3f}")
    table.add_row("wrong -> right", f"{metrics.wrong_to_right:.3f}")
    table.add_row("right -> wrong", f"{metrics.right_to_wrong:.3f}")
    team = metrics.extra.get("team", {})
    for role, acc in team.get("first_answer_accuracy", {}).items():
        table.add_row(f"  {role} first-answer accuracy", f"{acc:.3f}")
    for key, label in (("verdict_accuracy", "review verdict accuracy"),
                       ("wrong_caught", "  wrong answers caught"), ("right_rejected", "  right answers rejected"),
                       ("correction_rate", "correction rate (of wrong)"), ("harm_rate", "harm rate (of right)"),
                       ("toward_majority", "debate: toward majority"),
                       ("away_from_majority", "debate: away from majority")):
        if key in team:
            table.add_row(label, f"{team[key]:.3f}")
    table.add_row("tokens / problem", f"{metrics.tokens_per_problem:.1f}")
    table.add_row("model calls / problem", f"{metrics.calls_per_problem:.2f}")
    table.add_row("wall time (s)", f"{metrics.seconds:.1f}")
    table.add_row("tokens / s", f"{metrics.tokens_per_second:.1f}")
    return table


@app.command("play")
@user_errors
def play_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    task: str | None = typer.Option(None, help="Task name."),
    source: str | None = typer.Option(None, help="Local data file (or 'level=N' for arith)."),
    index: int = typer.Option(0, help="Which problem of the split to play."),
    protocol: str | None = typer.Option(None, help="Protocol name or file."),
    model: str | None = typer.Option(None, help="Hub id, local path or 'smollm2-135m'."),
    backend: str | None = typer.Option(None, help="hf, vllm or scripted."),
    policy: str | None = typer.Option(None, help="Scripted policy."),
    temperature: float | None = typer.Option(None, help="Sampling temperature (0 = greedy)."),
    seed: int | None = typer.Option(None, help="Seed."),
    checkpoint: str | None = typer.Option(None, help="Play with the adapters (and controller tables) "
                                                     "of a trained run."),
    team: Path | None = TeamOpt,
) -> None:
    """Run one problem and print the dialogue as it happens."""
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.wiring.setup import sampling_params

    overrides = _shortcut_overrides(**{
        "task.name": task, "task.source": source, "protocol.name": protocol, "model.name": model,
        "backend.name": backend, "backend.policy": policy, "sampling.temperature": temperature,
        "seed": seed, "model.checkpoint": checkpoint}) + list(set_)
    cfg = _eval_config(config, team, checkpoint, overrides)
    if index < 0:
        raise TeamplayError(f"--index must be >= 0, got {index}")
    _, items, _, make_env, _, backend_obj = build_eval_team(cfg, item_limit=index + 1)
    if index >= len(items):
        raise TeamplayError(f"--index {index}: the split has only {len(items)} problems")
    item = items[index]
    console.rule(f"[bold]{item.id}")
    console.print(item.prompt, highlight=False)
    console.print(f"[dim]reference: {item.reference}[/]")

    def show(_: int, request, generation) -> None:
        console.rule(f"[cyan]{request.agent}[/] · {request.stage} · round {request.round}")
        console.print(generation.text, highlight=False, markup=False)
        sys.stdout.flush()

    runner = RolloutRunner(make_env, backend_obj, sampling_params(cfg.sampling))
    [episode] = runner.run([RolloutJob(item=item, group_id=f"{item.id}#play")], seed=cfg.seed, on_message=show)
    for message in episode.messages:
        if not message.spoke:
            console.print(f"[dim]{message.agent} skipped its {message.stage} turn in round {message.round} "
                          f"(speak/skip controller)[/]")
    console.rule("[bold]result")
    verdict = "[green]right[/]" if episode.reward > 0.5 else "[red]wrong[/]"
    console.print(f"final answer: {episode.final_answer!r} ({verdict}, reward {episode.reward:.2f}); "
                  f"{episode.tokens} tokens, {episode.calls} model calls")
    for agent in episode.agents:
        console.print(f"  {agent}: answer {episode.agent_answers.get(agent)!r}, "
                      f"correct {episode.agent_correct.get(agent, 0.0):.0f}")


def build_serve_engine(cfg: EvalConfig):
    """The ``TeamEngine`` that ``serve`` puts behind its API: the team ``eval`` would evaluate
    (``build_eval_team``), the task's items indexed for reference look-up."""
    from teamplay.serving.episodes.engine import TeamEngine
    from teamplay.training.wiring.setup import sampling_params

    task_obj, items, _, make_env, _, backend_obj = build_eval_team(cfg)
    return TeamEngine(task_obj, items, make_env, backend_obj, sampling_params(cfg.sampling), cfg.protocol.name,
                      generate_batch=cfg.backend.max_batch, seed=cfg.seed)


def _served_name(run_or_export: Path | None, config: Path | None) -> str:
    """The model id a served team answers to by default: its folder's name (``RUN-step-N`` for a
    checkpoint folder), else the config file's name."""
    if run_or_export is not None:
        path = run_or_export.resolve()
        return f"{path.parent.parent.name}-{path.name}" if path.parent.name == "checkpoints" else path.name
    return config.stem if config is not None else "teamplay"


@app.command("serve")
@user_errors
def serve_command(
    run_or_export: Path | None = typer.Argument(None, show_default=False,
                                                help="A run folder, one of its checkpoints, or an export."),
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port (0: a free one, printed)."),
    model_name: str | None = typer.Option(None, "--model-name", help="The model id clients send (default: "
                                                                     "the folder's or config's name)."),
    max_batch: int = typer.Option(64, "--max-batch", help="Most episodes running at once (continuous batching)."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds a request may wait for its answer (then 504)."),
    drain: float = typer.Option(30.0, "--drain-timeout", help="At SIGTERM, seconds the requests in flight may "
                                                             "take to finish before they are cancelled."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="TEAMPLAY_API_KEY", show_default=False,
                                       help="Every route but /health wants 'Authorization: Bearer KEY' "
                                            "(the environment variable keeps it out of shell history)."),
) -> None:
    """Serve a team behind an OpenAI-compatible API: POST /v1/chat/completions, GET /v1/models.
    RUN_OR_EXPORT: a run folder, one of its checkpoints, or an export; or give --config instead."""
    if run_or_export is not None and config is not None:
        raise TeamplayError("serve: give a RUN_OR_EXPORT folder or --config, not both")
    try:
        from teamplay.serving.api.auth import exposure_warning
        from teamplay.serving.api.server import ServeLimits, create_app, serve
    except ImportError as exc:  # fastapi/uvicorn missing: the serve extra is optional
        raise TeamplayError(f"teamplay serve needs FastAPI and uvicorn: pip install 'teamplay[serve]' "
                            f"({exc})") from None
    if api_key is not None and not api_key.strip():
        raise TeamplayError("serve: the API key (--api-key or TEAMPLAY_API_KEY) is empty")
    try:
        limits = ServeLimits(max_batch=max_batch, timeout_s=timeout, drain_s=drain)
    except ValueError as exc:
        raise TeamplayError(f"serve: {exc}") from None
    if run_or_export is not None:
        from teamplay.serving.files.export import load_team_config

        cfg = load_team_config(run_or_export, list(set_))
    else:
        cfg = load_config(EvalConfig, config, list(set_))
    name = model_name or _served_name(run_or_export, config)
    engine = build_serve_engine(cfg)
    app_ = create_app(engine, name, limits, api_key=api_key)
    warning = exposure_warning(host, api_key)
    if warning is not None:
        typer.echo(warning, err=True)  # one line, never wrapped

    def ready(url: str) -> None:
        typer.echo(f"serving {name} at {url}/v1 (POST /v1/chat/completions, GET /v1/models, GET /health); "
                   f"Ctrl-C or SIGTERM stops")

    try:
        serve(app_, host, port, on_ready=ready)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on: the normal way to stop
        pass
    finally:  # the backend serve built (a vLLM engine's processes, a model's memory) goes with it,
        # once the worker has left its last model call
        if app_.state.batcher.join(timeout_s=60):
            engine.backend.close()
        else:
            typer.echo("warning: the last model call did not end within 60 s; the backend was not closed",
                       err=True)
    err_console.print(f"stopped serving {name}")


@app.command("train")
@user_errors
def train_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    resume: str | None = typer.Option(None, help="'auto' continues the latest checkpoint of the run "
                                                 "folder; or a checkpoint folder."),
    output: str | None = typer.Option(None, "--output", "-o", help="Run folder."),
    steps: int | None = typer.Option(None, help="Training steps."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the run already in the run folder "
                                                              "(its checkpoints and metrics) and start anew."),
) -> None:
    """Train a team: rollouts, credit, per-role LoRA updates, held-out eval, checkpoints."""
    from teamplay.config import TrainConfig
    from teamplay.distributed.compose import make_trainer
    from teamplay.training.store.run_folder import check_run_folder

    overrides = _shortcut_overrides(**{"output_dir": output, "steps": steps}) + list(set_)
    cfg = load_config(TrainConfig, config, overrides)
    check_run_folder(Path(cfg.output_dir), resume, overwrite)  # before the model loads

    def on_eval(label: str) -> None:
        err_console.print(f"held-out evaluation ({label}) ...")

    bar = progress_bar()  # shown once entered, below
    job = bar.add_task("train", total=cfg.steps)

    def on_step(step: int, metrics: dict) -> None:
        bar.update(job, completed=step, description=(
            f"train · reward {metrics['reward_mean']:.2f} · {metrics['seconds']:.0f}s/step"))

    # built before the progress bar shows: a run that cannot work is refused before anything is shown
    # (with `distributed:`, rollout workers and learner ranks on a Ray cluster)
    trainer = make_trainer(cfg, on_eval=on_eval, on_step=on_step)
    with bar:
        bar.update(job, completed=trainer.state.step)
        result = trainer.train(resume=resume, overwrite=overwrite)
    table = Table(title=f"held-out {cfg.eval_task.name if cfg.eval_task else '-'}: before and after")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    if result.eval_after is not None:
        before = result.eval_before
        for name in ("team_accuracy", "any_agent_right", "tokens_per_problem", "calls_per_problem"):
            b = f"{getattr(before, name):.3f}" if before is not None else "(resumed)"
            table.add_row(name.replace("_", " "), b, f"{getattr(result.eval_after, name):.3f}")
        console.print(table)
    console.print(f"{result.steps} steps in {result.seconds:.0f} s; run folder {result.run_dir}")


@app.command("sweep")
@user_errors
def sweep_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    grid: list[str] = typer.Option([], "--grid", help="KEY=V1,V2 over a dotted config path, e.g. "
                                                      "--grid credit.method=grpo,shapley (repeatable: "
                                                      "the cartesian product)."),
    seeds: str = typer.Option("0", help="Comma-separated trainer seeds, e.g. 0,1,2."),
    output: str | None = typer.Option(None, "--output", "-o", help="Sweep folder (default: the config's "
                                                                   "output_dir)."),
    steps: int | None = typer.Option(None, help="Training steps of every run."),
    parallel: int = typer.Option(1, "--parallel", "-j", help="Runs at once, each a Ray task in its own "
                                                             "process (needs the ray extra); 1 = one after "
                                                             "another in this process."),
    address: str = typer.Option("local", help="With --parallel: 'local' (a Ray cluster in this process), "
                                              "'auto' or HOST:PORT of a running cluster."),
    threads: int = typer.Option(1, help="With --parallel: torch threads per run."),
) -> None:
    """Train every grid point x seed (resumable) and tabulate mean ± 95% CI over seeds."""
    from teamplay.config import TrainConfig, read_yaml
    from teamplay.distributed.compose import make_trainer
    from teamplay.errors import ConfigError
    from teamplay.training.experiments.sweep import parse_grid, parse_seeds, plan, run_sweep, write_results

    if parallel < 1:
        raise ConfigError(f"--parallel: at least 1 run at a time, got {parallel}")
    if parallel == 1 and (address != "local" or threads != 1):
        raise ConfigError("--address and --threads apply to runs in parallel; add --parallel N (N >= 2)")
    base = read_yaml(config) if config else {}
    overrides = _shortcut_overrides(**{"steps": steps}) + list(set_)
    folder = Path(output) if output else Path(load_config(TrainConfig, config, overrides).output_dir)
    sweep = plan(folder, base, parse_grid(grid), parse_seeds(seeds), overrides)

    def train(cfg, resume):
        with progress_bar() as bar:
            job = bar.add_task(Path(cfg.output_dir).name, total=cfg.steps)
            trainer = make_trainer(cfg, on_step=lambda step, m: bar.update(
                job, completed=step, description=f"{Path(cfg.output_dir).name} · reward {m['reward_mean']:.2f}"))
            bar.update(job, completed=trainer.state.step)
            trainer.train(resume=resume)

    def announce(run, status):
        shown = {"skip": "done, skipped", "resume": "resuming from its checkpoint", "start": "starting"}[status]
        err_console.print(f"[{sweep.runs.index(run) + 1}/{len(sweep.runs)}] {run.name}: {shown}")

    if parallel > 1:
        from teamplay.distributed.sweep import run_sweep_parallel

        run_sweep_parallel(sweep, parallel, address=address, threads=threads, on_run=announce,
                           on_done=lambda run: err_console.print(f"{run.name}: done"))
    else:
        run_sweep(sweep, train, on_run=announce)
    results = write_results(sweep)
    table = Table(title=f"sweep {folder}: mean ± 95% CI over seeds")
    table.add_column("metric")
    for label in results.labels:
        table.add_column(f"{label} (n={len(results.seeds_done[label])})", justify="right")
    for metric in results.metrics:
        table.add_row(metric, *(results.cells[label][metric].text() if metric in results.cells[label] else "-"
                                for label in results.labels))
    console.print(table)
    console.print(f"wrote {folder / 'results.md'}, results.csv, results.json")


@app.command("federate")
@user_errors
def federate_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    resume: str | None = typer.Option(None, help="'auto' continues after the last completed round of the "
                                                 "run folder; or a checkpoint folder."),
    output: str | None = typer.Option(None, "--output", "-o", help="Run folder."),
    rounds: int | None = typer.Option(None, help="Federated rounds."),
) -> None:
    """Federated team training on Flower: K sites with private shards, FedAvg or Fed-GRPO."""
    from teamplay.config import FederatedConfig

    try:
        from teamplay.federated.run import run_federated
    except ImportError as exc:  # flwr missing: the federated extra is optional
        raise TeamplayError(f"teamplay federate needs Flower: pip install 'teamplay[federated]' ({exc})") from None
    overrides = _shortcut_overrides(**{"output_dir": output, "federated.rounds": rounds}) + list(set_)
    cfg = load_config(FederatedConfig, config, overrides)

    def on_round(record: dict) -> None:
        acc = record.get("heldout", {}).get("team_accuracy")
        shown = f"held-out accuracy {acc:.3f}, " if acc is not None else ""
        out = len(record["failed"]) + len(record.get("refused", []))
        failed = f", {out} site(s) left out" if out else ""
        err_console.print(f"round {record['round']}/{cfg.federated.rounds}: {shown}"
                          f"{record['bytes_total']} bytes uploaded by {len(record['sites'])} site(s){failed}",
                          highlight=False)

    server = run_federated(cfg, resume=resume, on_round=on_round)
    console.print(f"{server.state.round} rounds; run folder {cfg.output_dir} (federated.jsonl, checkpoints/)")


@app.command("report")
@user_errors
def report_command(
    run_dirs: list[Path] = typer.Argument(..., help="Run or eval folder (two with --compare, or one sweep "
                                                    "folder); or any number of federated run folders."),
    compare: bool = typer.Option(False, "--compare", help="Put two runs or evals side by side, or every grid "
                                                          "point of a sweep folder."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Output folder (default RUN/report, "
                                                                    "or ./report-compare)."),
) -> None:
    """Write a self-contained HTML report (curves, credit per role, free riders, transcripts)."""
    from teamplay.report import report_command as write_report

    console.print(f"wrote {write_report(run_dirs, compare, output)}")


@app.command("export")
@user_errors
def export_command(
    run: Path = typer.Argument(..., help="A run folder (its latest checkpoint) or one of its checkpoints/step-N "
                                         "folders."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder to write; absent or empty unless --force."),
    force: bool = typer.Option(False, "--force", help="Replace a folder that is not empty."),
    push_to_hub: str | None = typer.Option(None, "--push-to-hub", metavar="REPO",
                                           help="Then upload the folder to this Hub model repository "
                                                "(user/name; needs a token: hf auth login or HF_TOKEN)."),
    private: bool = typer.Option(False, "--private", help="With --push-to-hub: create the repository private."),
    license: str | None = typer.Option(None, "--license", help="Hub license id of the model card (default: the "
                                                               "base model's where teamplay knows it, else "
                                                               "other)."),
) -> None:
    """Export a trained team for use outside teamplay: one PEFT adapter per role, team.yaml, a model card."""
    from teamplay.serving.files.export import export_team
    from teamplay.serving.files.export import push_to_hub as push

    if private and push_to_hub is None:
        raise TeamplayError("--private applies to the repository of --push-to-hub REPO; add it or drop --private")
    out = export_team(run, output, force=force, license=license)
    console.print(f"wrote {out}: adapters/, team.yaml, README.md; evaluate it with teamplay eval --team {out}")
    if push_to_hub is not None:
        console.print(f"uploaded to {push(out, push_to_hub, private=private)}")


@app.command("credit")
@user_errors
def credit_command(
    folder: Path | None = typer.Argument(None, help="An eval folder (teamplay eval -o) or a run folder."),
    method: str | None = typer.Option(None, "--method", "-m", help="Credit method (teamplay list) or "
                                                                   "path/to/file.py:function."),
    set_: list[str] = typer.Option([], "--set", help="A method option: --set value=masking"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the rows as JSON lines."),
    limit: int = typer.Option(40, help="Rows to print (all are written with --output)."),
    card: str | None = typer.Option(None, "--card", help="Print a method's card instead (what it estimates, "
                                                         "its assumptions, cost and test): a name or all."),
    check: str | None = typer.Option(None, "--check", help="Measure how far these methods (comma-separated) "
                                                           "follow the true advantage on --config's team and task."),
    config: Path | None = typer.Option(None, "--config", "-c", help="With --check: the training config."),
    problems: int = typer.Option(8, help="With --check: problems played (each by a group of episodes)."),
    group: int = typer.Option(4, help="With --check: episodes per problem."),
    samples: int = typer.Option(8, help="With --check: re-executions per prefix of the true advantage."),
) -> None:
    """Try a credit method on saved episodes: the advantage of every utterance, without training.
    With --card METHOD (or all): what the method estimates, under which assumptions, at what cost.
    With --check METHODS --config CFG: each method's agreement with the true advantage on your team."""
    if check is not None:
        if folder is not None or method is not None or card is not None or config is None:
            raise TeamplayError("credit --check METHODS needs --config CFG and takes no FOLDER, --method or --card")
        _credit_check([m.strip() for m in check.split(",") if m.strip()], config, problems, group, samples)
        return
    if card is not None:
        if folder is not None or method is not None:
            raise TeamplayError("credit --card prints a method's card; it takes no FOLDER or --method")
        from teamplay.credit.audit.cards import render_cards

        typer.echo(render_cards(card))
        return
    if folder is None or method is None:
        raise TeamplayError("credit: give FOLDER and --method to credit saved episodes, or --card METHOD|all")
    from teamplay.config import parse_overrides
    from teamplay.training.experiments.saved_credit import credit_saved

    rows = credit_saved(folder, method, dict(parse_overrides(set_)))
    table = Table(title=f"credit {method} on {folder} ({len(rows)} utterances)")
    for col in ("group", "ep", "agent", "stage", "round", "advantage", "reward", "text"):
        table.add_column(col, justify="right" if col in ("ep", "round", "advantage", "reward") else "left")
    for r in rows[:limit]:
        text = r.text if r.spoke else "(skipped)"
        table.add_row(r.group_id, str(r.episode), r.agent, r.stage, str(r.round), f"{r.advantage:+.3f}",
                      f"{r.reward:.2f}", text.replace("\n", " ")[:60])
    console.print(table)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
        console.print(f"wrote {output}")


def _credit_check(methods: list[str], config: Path, problems: int, group: int, samples: int) -> None:
    """``teamplay credit --check``: the fidelity table of ``methods`` on the config's team and task."""
    from teamplay.config import TrainConfig
    from teamplay.training.experiments.fidelity_check import THRESHOLD, check_fidelity

    if not methods:
        raise TeamplayError("credit --check: name at least one method, e.g. --check grpo,shapley")
    cfg = load_config(TrainConfig, config, [])
    rows, oracle_tokens = check_fidelity(cfg, methods, problems, group, samples, cfg.seed)
    table = Table(title=f"credit fidelity on {config} ({problems} problems x {group}, true advantage from "
                        f"{samples} re-executions per prefix, {oracle_tokens} tokens)")
    for col in ("method", "Pearson r [95% CI]", "Spearman [95% CI]", f"sign, |A*| > {THRESHOLD}", "groups kept",
                "counterfactual tokens"):
        table.add_column(col)

    def ci(x: float, lo_hi: tuple[float, float]) -> str:
        return f"{x:.2f} [{lo_hi[0]:.2f}, {lo_hi[1]:.2f}]"

    for r in rows:
        table.add_row(r.method, ci(r.fit.pearson, r.fit.pearson_ci), ci(r.fit.spearman, r.fit.spearman_ci),
                      f"{r.fit.sign:.2f} ({r.fit.clear})", str(r.groups), str(r.counterfactual_tokens))
    console.print(table)


@app.command("list")
@user_errors
def list_command(
    plugin: list[str] = typer.Option([], "--plugin", help="Also list a user's entry: path/to/file.py:name "
                                                          "(a credit method, task or protocol)."),
) -> None:
    """List tasks, protocols and credit methods (and the user files given with --plugin)."""
    from teamplay.credit import CREDIT, credit_methods
    from teamplay.envs.protocols import get_protocol, protocol_names
    from teamplay.envs.protocols.registry import PROTOCOLS
    from teamplay.envs.tasks import TASKS, get_task, task_names

    plugins = _load_plugins(plugin, CREDIT, TASKS, PROTOCOLS)

    table = Table(title="tasks")
    table.add_column("name", no_wrap=True)
    table.add_column("splits")
    table.add_column("how answers are read")
    for name in task_names() + plugins["task"]:
        t = get_task(name)
        table.add_row(_short(name), ", ".join(t.splits), t.answer_instruction)
    console.print(table)
    table = Table(title="protocols")
    table.add_column("name", no_wrap=True)
    table.add_column("description")
    for name in protocol_names() + plugins["protocol"]:
        doc = (get_protocol(name).__doc__ or "").strip().splitlines()
        table.add_row(_short(name), doc[0] if doc else "")
    console.print(table)
    table = Table(title="credit methods")
    table.add_column("name", no_wrap=True)
    table.add_column("what it does")
    table.add_column("needs")
    methods = {**credit_methods(), **{spec: CREDIT.get(spec) for spec in plugins["credit method"]}}
    for name, method in methods.items():
        needs = sorted(method.requires(method.options()))
        if method.protocols is not None:
            needs.append("protocol " + "/".join(sorted(method.protocols)))
        table.add_row(_short(name), method.summary, ", ".join(needs) or "-")
    console.print(table)
    from teamplay.credit.token import token_methods

    table = Table(title="token credit methods (credit.token: after the message method, per role)")
    table.add_column("name")
    table.add_column("what it does")
    table.add_column("needs")
    for name, tm in token_methods().items():
        table.add_row(name, tm.summary, ", ".join(sorted(tm.needs)) or "behaviour log-probs")
    console.print(table)


def _short(name: str) -> str:
    """A user entry as ``file.py:name`` (its folder dropped), a built-in name as it is."""
    return Path(name).name if is_plugin_spec(name) else name


def _load_plugins(specs: list[str], *registries) -> dict[str, list[str]]:
    """Sort ``--plugin`` specs by the registry whose check accepts them (credit, task, protocol)."""
    found: dict[str, list[str]] = {r.kind: [] for r in registries}
    for spec in specs:
        if ":" not in spec:
            raise TeamplayError(f"--plugin {spec!r}: expected path/to/file.py:name")
        for registry in registries:
            try:
                registry.load_plugin(spec)
            except TeamplayError:
                continue
            found[registry.kind].append(spec)
            break
        else:
            raise TeamplayError(f"--plugin {spec}: not a credit method, task or protocol")
    return found


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
