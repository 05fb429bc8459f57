"""``teamplay eval`` and ``teamplay play``: a team on a benchmark's problems, or one problem
played out on screen."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from teamplay.atomic import write_atomically
from teamplay.cli.app import (
    BackendOpt,
    ConfigOpt,
    ModelOpt,
    SeedOpt,
    SetOpt,
    SourceOpt,
    TeamOpt,
    TemperatureOpt,
    command,
    console,
    err_console,
    shortcut_overrides,
)
from teamplay.cli.progress import EvalProgress
from teamplay.cli.tables import controller_table, metrics_table
from teamplay.config import EvalConfig, load_config
from teamplay.errors import TeamplayError


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


@command("eval")
def eval_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    task: str | None = typer.Option(None, help="Task: arith, gsm8k, math, math500, gpqa."),
    split: str | None = typer.Option(None, help="Split to evaluate."),
    source: str | None = SourceOpt,
    limit: int | None = typer.Option(None, help="Evaluate the first N problems."),
    protocol: str | None = typer.Option(None, help="Protocol name or file (teamplay list)."),
    model: str | None = ModelOpt,
    backend: str | None = BackendOpt,
    policy: str | None = typer.Option(None, help="Scripted policy: truthful, wrong, ..."),
    samples: int | None = typer.Option(None, help="Episodes per problem."),
    temperature: float | None = TemperatureOpt,
    max_new_tokens: int | None = typer.Option(None, help="Tokens per message at most."),
    seed: int | None = SeedOpt,
    checkpoint: str | None = typer.Option(None, help="Evaluate the adapters (and controller tables) "
                                                     "of a trained run."),
    team: Path | None = TeamOpt,
    output: str | None = typer.Option(None, "--output", "-o", help="Output folder."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the evaluation already in the output "
                                                              "folder (its results.json and transcripts)."),
    compare_always_speak: bool = typer.Option(
        True, "--compare-always-speak/--no-compare-always-speak",
        help="With controllers enabled: also run the same team with always_speak on the same items "
             "and print both side by side."),
) -> None:
    """Evaluate a team on a benchmark: accuracy, cost and correction metrics."""
    from teamplay.training.play.evaluation import evaluate
    from teamplay.training.play.rollout import RolloutRunner
    from teamplay.training.wiring.eval_team import build_eval_team
    from teamplay.training.wiring.sampling import sampling_params

    overrides = shortcut_overrides(**{
        "task.name": task, "task.split": split, "task.source": source, "task.limit": limit,
        "protocol.name": protocol, "model.name": model, "backend.name": backend,
        "backend.policy": policy, "samples": samples, "sampling.temperature": temperature,
        "sampling.max_new_tokens": max_new_tokens, "seed": seed, "model.checkpoint": checkpoint,
        "output_dir": output}) + list(set_)
    cfg = _eval_config(config, team, checkpoint, overrides)
    out = Path(cfg.output_dir)
    check_eval_folder(out, overwrite)  # before the model loads
    built = build_eval_team(cfg)
    items = built.items
    out.mkdir(parents=True, exist_ok=True)
    # the always-speak baseline: same team, items, seed and backend; only the controller differs
    runs = {"metrics": (built.make_env, "transcripts.jsonl", cfg.controllers.mode if built.controllers else "")}
    if built.controllers is not None and compare_always_speak and cfg.controllers.mode != "always_speak":
        runs["always_speak"] = (built.always_speak_env(), "always_speak_transcripts.jsonl", "always_speak")
    results: dict[str, Any] = {"config": cfg.model_dump(mode="json")}
    measured = {}
    with EvalProgress(err_console) as progress:  # a bar on a terminal, else a line per batch
        for key, (factory, transcripts, label) in runs.items():
            runner = RolloutRunner(factory, built.backend, sampling_params(cfg.sampling),
                                   max_batch=cfg.backend.max_batch, before_generate=progress.batch)
            progress.begin(f"eval {cfg.task.name}/{cfg.protocol.name} {label}".rstrip(), len(items) * cfg.samples)
            primary = key == "metrics"  # the opt-in measurements are of the configured team only
            _, measured[key] = evaluate(runner, built.task, items, samples=cfg.samples, seed=cfg.seed,
                                        transcripts_path=out / transcripts, on_episode=progress.episode,
                                        withhold=cfg.withhold_messages and primary,
                                        solo=solo_baseline(cfg, built) if primary else None)
            progress.end()
            results[key] = measured[key].to_dict()
    write_atomically(out / "results.json", json.dumps(results, indent=2))
    metrics = measured["metrics"]
    console.print(metrics_table(f"{cfg.task.name} ({len(items)} problems) / {cfg.protocol.name}", metrics))
    if "always_speak" in measured:
        console.print(controller_table(f"speak/skip controllers ({cfg.controllers.mode}) vs always_speak",
                                       cfg.controllers.mode, metrics, measured["always_speak"]))
    console.print(f"wrote {out / 'results.json'} and {', '.join(str(out / r[1]) for r in runs.values())}")


#: what an eval folder holds once written: another evaluation there would replace it
EVAL_FILES = ("results.json", "transcripts.jsonl")


def check_eval_folder(out: Path, overwrite: bool) -> None:
    """Refuse an output that is a file, or a folder holding an evaluation already (its
    ``results.json`` or transcripts) unless ``overwrite``: as ``train`` refuses a run folder in use,
    an evaluation is never replaced silently."""
    if out.exists() and not out.is_dir():
        raise TeamplayError(f"output {out} is a file, not a folder; pass a folder as --output")
    held = [name for name in EVAL_FILES if (out / name).exists()]
    if held and not overwrite:
        raise TeamplayError(f"output {out} already holds an evaluation ({', '.join(held)}); pass --overwrite "
                            f"to replace it, or another --output")


def solo_baseline(cfg: EvalConfig, built):
    """The self-consistency baseline of ``cfg`` (None when ``self_consistency`` is off): the answering
    role of ``built`` (an ``EvalTeam``) alone, on its backend, at ``self_consistency_temperature``."""
    if not cfg.self_consistency:
        return None
    from dataclasses import replace

    from teamplay.training.play.rollout import RolloutRunner
    from teamplay.training.play.self_consistency import SoloBaseline
    from teamplay.training.wiring.sampling import sampling_params

    make_env, role = built.solo_env()
    sampling = replace(sampling_params(cfg.sampling), temperature=cfg.self_consistency_temperature)
    runner = RolloutRunner(make_env, built.backend, sampling, max_batch=cfg.backend.max_batch)
    return SoloBaseline(runner, role.name, None if cfg.backend.name == "scripted" else role.adapter_name,
                        max_samples=cfg.self_consistency_max_samples)


@command("play")
def play_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    task: str | None = typer.Option(None, help="Task name."),
    source: str | None = SourceOpt,
    index: int = typer.Option(0, help="Which problem of the split to play."),
    protocol: str | None = typer.Option(None, help="Protocol name or file."),
    model: str | None = ModelOpt,
    backend: str | None = BackendOpt,
    policy: str | None = typer.Option(None, help="Scripted policy."),
    temperature: float | None = TemperatureOpt,
    max_new_tokens: int | None = typer.Option(None, help="Tokens per message at most."),
    seed: int | None = SeedOpt,
    checkpoint: str | None = typer.Option(None, help="Play with the adapters (and controller tables) "
                                                     "of a trained run."),
    team: Path | None = TeamOpt,
) -> None:
    """Run one problem and print the dialogue as it happens."""
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.wiring.eval_team import build_eval_team
    from teamplay.training.wiring.sampling import sampling_params

    overrides = shortcut_overrides(**{
        "task.name": task, "task.source": source, "protocol.name": protocol, "model.name": model,
        "backend.name": backend, "backend.policy": policy, "sampling.temperature": temperature,
        "sampling.max_new_tokens": max_new_tokens, "seed": seed, "model.checkpoint": checkpoint}) + list(set_)
    cfg = _eval_config(config, team, checkpoint, overrides)
    if index < 0:
        raise TeamplayError(f"--index must be >= 0, got {index}")
    built = build_eval_team(cfg, item_limit=index + 1)
    items = built.items
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

    runner = RolloutRunner(built.make_env, built.backend, sampling_params(cfg.sampling))
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

