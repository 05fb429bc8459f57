"""Exporting a trained team (adapters, team.yaml, model card) and loading it back as the run it came from.

The run folder is built by hand from a tiny random model: adapters with random (non-zero) LoRA B
matrices so that every role's adapter changes its logits, written by the trainer's own
``save_checkpoint`` with controller tables in which the reviewer learned to stay silent on the last
review of a 3-round dialogue, and a metrics.jsonl with a held-out evaluation before and after.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from peft import PeftModel
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from teamplay.agents.roles import Role, Team
from teamplay.cli import app
from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.serving.files.card import card_metadata, default_license
from teamplay.serving.files.export import describe_team, export_team, find_run, load_team_config
from teamplay.serving.files.team_file import TeamFile, read_team_file
from teamplay.training.play.controllers import TeamControllers
from teamplay.training.play.evaluation import EvalMetrics
from teamplay.training.store.checkpoint import TrainerState, save_checkpoint
from teamplay.training.wiring.controllers import load_controllers
from teamplay.training.wiring.model import build_team_model
from tests.tiny import save_tiny

TEAM = Team(roles=(Role(name="proposer"), Role(name="reviewer")))
STEPS = 2


def _config(root: Path, model: Path) -> TrainConfig:
    return build_config(TrainConfig, {
        "model": {"name": str(model), "lora": {"r": 4, "alpha": 8}, "device": "cpu"},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": "arith", "split": "train", "limit": 8},
        "eval_task": {"name": "arith", "split": "test", "limit": 3},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "team": TEAM.model_dump(mode="json", exclude_none=True),
        "controllers": {"enabled": True},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": 4},
        "steps": STEPS, "tensorboard": False, "output_dir": str(root / "run"),
    })


def _heldout(accuracy: float) -> dict:
    return EvalMetrics(episodes=3, team_accuracy=accuracy, role_accuracy={"proposer": accuracy},
                       any_agent_right=accuracy, initial_accuracy=accuracy, wrong_to_right=0.0,
                       right_to_wrong=0.0, tokens_per_problem=9.0, calls_per_problem=2.5).to_dict()


def make_run(root: Path) -> Path:
    """A run folder of ``STEPS`` steps: config.yaml, metrics.jsonl, one verified checkpoint."""
    cfg = _config(root, save_tiny(root / "tiny"))
    team_model = build_team_model(cfg.model, TEAM)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in team_model.model.named_parameters():
            if ".lora_B." in name:  # B starts at zero: an untrained adapter is the base model
                param.copy_(0.5 * torch.randn(param.shape, generator=generator))
    controllers = TeamControllers(cfg.controllers)
    for _ in range(2):  # the reviewer learned silence on the last review (as in tests/controllers)
        controllers.matcher("reviewer_0", "review").update(("controller", "vote_0", "last"), [1.0, -1.0])
    optimizer = torch.optim.AdamW(team_model.trainable_parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    run = Path(cfg.output_dir)
    state = TrainerState(step=STEPS, data_order=tuple(range(8)), data_cursor=4, data_epoch=0)
    save_checkpoint(run, state, team_model, optimizer, scheduler, {"controllers": controllers.state_dict()},
                    cfg.model_dump(mode="json"), keep=1)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    rows = [{"step": 0, "heldout": _heldout(0.25)}, {"step": 1, "reward_mean": 0.5},
            {"step": 2, "reward_mean": 0.75}, {"step": STEPS, "heldout_final": _heldout(0.75)}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("export"))


# ----------------------------------------------------------------------------- load_team_config
def test_a_run_folder_loads_as_its_held_out_evaluation(run):
    cfg = load_team_config(run, ["task.limit=2"])
    checkpoint = run / "checkpoints" / f"step-{STEPS:06d}"
    assert cfg.model.checkpoint == str(checkpoint)
    assert (cfg.task.split, cfg.task.limit) == ("test", 2)  # eval_task, then the override
    assert cfg.sampling.temperature == 0 and cfg.sampling.max_new_tokens == 4  # eval_sampling
    assert cfg.controllers.enabled and cfg.protocol.options == {"rounds": 3}
    assert [r.name for r in cfg.team.roles] == ["proposer", "reviewer"]
    # one checkpoint folder of the run gives the same team
    assert load_team_config(checkpoint) == load_team_config(run)


@pytest.mark.parametrize("make, message", [
    (lambda p: p, "is not a run folder"),
    (lambda p: p / "missing", "no such folder"),
    (lambda p: (p / "config.yaml").write_text("steps: 1\n") and p, "has no checkpoint yet"),
])
def test_what_is_not_a_team_is_refused(tmp_path, make, message):
    with pytest.raises(ConfigError, match=message):
        load_team_config(make(tmp_path))


# ----------------------------------------------------------------------------------- the export
@pytest.fixture(scope="module")
def exported(run) -> Path:
    return export_team(run, run.parent / "export")


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits  # [1, L, V]


def test_each_exported_adapter_loads_with_plain_peft_and_matches_teamplay(run, exported):
    cfg = load_team_config(run)
    ours = build_team_model(cfg.model, cfg.team)  # teamplay's own loading of the run's checkpoint
    base_path = cfg.model.name
    ids = torch.tensor([[5, 80, 81, 90, 12, 40, 41, 7]])
    base = _logits(AutoModelForCausalLM.from_pretrained(base_path).eval(), ids)
    seen = {}
    for name in ("proposer", "reviewer"):
        peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path),
                                               exported / "adapters" / name).eval()
        ours.set_adapter(name)
        seen[name] = _logits(peft_model, ids)
        torch.testing.assert_close(seen[name], _logits(ours.model, ids), rtol=0, atol=1e-6)
        assert (seen[name] - base).abs().max() > 1e-2  # the adapter changes the model
    assert (seen["proposer"] - seen["reviewer"]).abs().max() > 1e-2  # and each role has its own


def _messages(folder: Path) -> list[list[tuple]]:
    rows = [json.loads(line) for line in (folder / "transcripts.jsonl").read_text().splitlines()]
    return [[(m["agent"], m["stage"], m["spoke"], m["text"]) for m in row["messages"]] for row in rows]


def test_the_export_plays_the_same_greedy_dialogues_as_its_run_without_the_run(run, exported, tmp_path):
    flags = ["--limit", "3", "--no-compare-always-speak", "--set", "sampling.temperature=0"]
    from_run = runner.invoke(app, ["eval", "--team", str(run), *flags, "-o", str(tmp_path / "run")])
    assert from_run.exit_code == 0, from_run.output
    moved = run.with_name("run-elsewhere")
    run.rename(moved)  # the export must not need its run
    try:
        from_export = runner.invoke(app, ["eval", "--team", str(exported), *flags, "-o", str(tmp_path / "ex")])
        tables = load_controllers(load_team_config(exported).controllers, exported).state_dict()
    finally:
        moved.rename(run)
    assert from_export.exit_code == 0, from_export.output
    dialogues = _messages(tmp_path / "run")
    assert len(dialogues) == 3 and all(len(d) >= 2 for d in dialogues)
    assert _messages(tmp_path / "ex") == dialogues
    assert any(not spoke for d in dialogues for _, _, spoke, _ in d)  # the learned silence was used
    saved = json.loads((run / "checkpoints" / f"step-{STEPS:06d}" / "extra_state.json").read_text())
    assert tables == saved["controllers"]  # the speak/skip tables came from team.yaml, exactly


def test_team_yaml_round_trips_and_describes_the_team(run, exported):
    team = read_team_file(exported)
    assert team == describe_team(find_run(run))
    assert TeamFile.model_validate(yaml.safe_load(team.to_yaml())) == team
    assert [(r.name, r.adapter) for r in team.team.roles] == [("proposer", "proposer"), ("reviewer", "reviewer")]
    assert all(r.prompt for r in team.team.roles)  # the protocol's default prompts, written out
    assert team.task.answer_format.startswith("End with 'The answer is")
    assert team.decoding.temperature == 0 and team.protocol.options == {"rounds": 3}
    config = json.loads((exported / "adapters" / "proposer" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == team.base_model and config["r"] == 4
    # the loaded EvalConfig points at the export, not at the run
    assert load_team_config(exported).model.checkpoint == str(exported)


def test_an_export_plays_with_every_protocol_field_of_its_run(exported):
    # the channel and the rule for cut messages travel with the team, not the name and options alone
    team = read_team_file(exported)
    silent = team.model_copy(update={"protocol": team.protocol.model_copy(
        update={"channel": False, "score_cut_messages": False})})
    protocol = silent.eval_data(exported)["protocol"]
    assert protocol["channel"] is False and protocol["score_cut_messages"] is False
    assert protocol["options"] == {"rounds": 3}
    assert read_team_file(exported).eval_data(exported)["protocol"]["score_cut_messages"] is True  # as it trained


def test_the_model_card_has_hub_metadata_and_the_runs_results(exported):
    text = (exported / "README.md").read_text()
    assert text.startswith("---\n")
    header, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(header)
    assert meta["base_model"] == read_team_file(exported).base_model
    assert meta["library_name"] == "peft" and meta["license"] == "other"
    assert {"teamplay", "multi-agent", "lora"} <= set(meta["tags"])
    assert "| before training | 0 | 0.250 |" in body and "| after training | 2 | 0.750 |" in body
    assert "Credit method `grpo`" in body and "```yaml\ntask:" in body


def test_the_embedded_model_is_named_by_its_hub_id_and_license(exported):
    team = read_team_file(exported)
    embedded = team.model_copy(update={"base_model": "smollm2-135m", "adapters": {
        name: entry.model_copy(update={"base_model": "smollm2-135m"}) for name, entry in team.adapters.items()}})
    meta = card_metadata(embedded, default_license(embedded))
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and meta["license"] == "apache-2.0"


# --------------------------------------------------------------------------------- refusals, CLI
runner = CliRunner()


def _one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1, result.output


def test_export_cli_writes_the_folder_and_refuses_bad_input(run, exported, tmp_path):
    out = tmp_path / "cli"
    ok = runner.invoke(app, ["export", str(run), "-o", str(out)])
    assert ok.exit_code == 0, ok.output
    assert read_team_file(out) == read_team_file(exported)
    _one_line_error(runner.invoke(app, ["export", str(run), "-o", str(out)]), "exists and is not empty")
    assert runner.invoke(app, ["export", str(run), "-o", str(out), "--force"]).exit_code == 0
    _one_line_error(runner.invoke(app, ["export", str(run), "-o", str(run.parent), "--force"]),
                    "--force would delete it")
    _one_line_error(runner.invoke(app, ["export", str(tmp_path / "nothing"), "-o", str(tmp_path / "x")]),
                    "no such folder")
    _one_line_error(runner.invoke(app, ["export", str(tmp_path), "-o", str(tmp_path / "x")]), "is not a run folder")
    _one_line_error(runner.invoke(app, ["export", str(out), "-o", str(tmp_path / "x")]), "is an export already")
    _one_line_error(runner.invoke(app, ["export", str(run), "-o", str(tmp_path / "x"), "--private"]),
                    "--private applies to")
    assert not (tmp_path / "x").exists()
    empty = tmp_path / "no-adapters"  # a checkpoint folder whose adapters/ holds none
    (empty / "adapters").mkdir(parents=True)
    shutil.copy(run / "config.yaml", empty / "config.yaml")
    _one_line_error(runner.invoke(app, ["export", str(empty), "-o", str(tmp_path / "x")]), "holds no LoRA adapters")


def test_team_refuses_checkpoint_and_config(run):
    _one_line_error(runner.invoke(app, ["eval", "--team", str(run), "--checkpoint", str(run)]),
                    "--team and --checkpoint")
    _one_line_error(runner.invoke(app, ["play", "--team", str(run), "--config", "x.yaml"]), "drop --config")


def test_play_takes_a_team(exported):
    result = runner.invoke(app, ["play", "--team", str(exported)])
    assert result.exit_code == 0, result.output
    assert "proposer_0" in result.output and "final answer" in result.output


class _FailingHub:
    """An HfApi whose every call fails as an unreachable hub does."""

    calls: list = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        raise ConnectionError("[Errno 111] Connection refused\nretries exhausted")

    def upload_folder(self, **kwargs):  # pragma: no cover - never reached
        raise AssertionError("upload after a failed create_repo")


def test_push_to_hub_failures_are_one_line(run, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "HfApi", _FailingHub)
    result = runner.invoke(app, ["export", str(run), "-o", str(tmp_path / "a"), "--push-to-hub", "me/team",
                                 "--private"])
    assert result.exit_code == 2 and "wrote" in result.output  # the export itself is complete
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "--push-to-hub me/team: the upload failed (ConnectionError" in error[0]
    assert _FailingHub.calls == [("create_repo", "me/team", {"private": True, "exist_ok": True,
                                                             "repo_type": "model"})]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = runner.invoke(app, ["export", str(run), "-o", str(tmp_path / "b"), "--push-to-hub", "me/team"])
    assert result.exit_code == 2 and "HF_HUB_OFFLINE is set" in result.output
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    result = runner.invoke(app, ["export", str(run), "-o", str(tmp_path / "c"), "--push-to-hub", "me/team"])
    assert result.exit_code == 2 and "--push-to-hub needs huggingface_hub" in result.output
