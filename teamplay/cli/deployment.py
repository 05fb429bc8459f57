"""``teamplay serve`` and ``teamplay export``: a trained team outside the trainer, behind an
OpenAI-compatible API or as PEFT adapters with a ``team.yaml`` and a model card."""

from __future__ import annotations

from pathlib import Path

import typer

from teamplay.cli.app import ConfigOpt, SetOpt, command, console, err_console
from teamplay.config import EvalConfig, load_config
from teamplay.errors import TeamplayError


def _served_name(run_or_export: Path | None, config: Path | None) -> str:
    """The model id a served team answers to by default: its folder's name (``RUN-step-N`` for a
    checkpoint folder), else the config file's name."""
    if run_or_export is not None:
        path = run_or_export.resolve()
        return f"{path.parent.parent.name}-{path.name}" if path.parent.name == "checkpoints" else path.name
    return config.stem if config is not None else "teamplay"


@command("serve")
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
        from teamplay.serving.episodes.engine import build_team_engine
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
    engine = build_team_engine(cfg)
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


@command("export")
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

