"""The refusals of option combinations a run meets after its config loads, all in
``teamplay.training.wiring.checks``: ``check_run`` (before the model loads) and ``check_wired`` (what
needs the wired model or backend), each one line."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from teamplay.agents.backends.hf import HFBackend
from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.wiring.checks import asynchronous, check_run, check_wired


def config(tmp_path, **data) -> TrainConfig:
    return build_config(TrainConfig, {"output_dir": str(tmp_path), **data})


def one_base(dtype: torch.dtype = torch.float32) -> SimpleNamespace:
    """A stand-in for a one-base team model: what the checks read of it (its parameters' dtype)."""
    return SimpleNamespace(model=torch.nn.Linear(1, 1).to(dtype))


def hf_backend() -> HFBackend:
    return HFBackend.__new__(HFBackend)  # the checks look at its kind only


def test_which_runs_are_asynchronous(tmp_path):
    assert not asynchronous(config(tmp_path).rollout)
    assert asynchronous(config(tmp_path, rollout={"max_staleness": 0}).rollout)


def test_local_cpus_for_a_running_cluster_is_refused_before_anything_loads(tmp_path):
    cfg = config(tmp_path, distributed={"address": "auto", "local_cpus": 2})
    with pytest.raises(ConfigError, match="distributed.local_cpus: only for address 'local'"):
        check_run(cfg)
    check_run(config(tmp_path, distributed={"address": "local", "local_cpus": 2}))


def test_asynchronous_rollouts_in_one_process_need_a_backend_that_serves_a_copy(tmp_path):
    cfg = config(tmp_path, rollout={"max_staleness": 0})
    checked = check_run(cfg)
    scripted = SimpleNamespace(name="scripted")
    with pytest.raises(ConfigError, match="asynchronous rollouts in one process need the hf or vllm backend"):
        check_wired(cfg, checked, one_base(), scripted)
    check_wired(cfg, checked, one_base(), hf_backend())
    check_wired(config(tmp_path), check_run(config(tmp_path)), one_base(), scripted)  # synchronous: any backend


def test_a_stale_bound_on_a_half_precision_model_needs_the_generations_logprobs(tmp_path):
    cfg = config(tmp_path, rollout={"max_staleness": 1})
    checked = check_run(cfg)
    with pytest.raises(ConfigError, match="objective.old_logprobs: auto resolves to trainer for this model"):
        check_wired(cfg, checked, one_base(torch.bfloat16), hf_backend())
    check_wired(cfg, checked, one_base(torch.float32), hf_backend())
    chosen = config(tmp_path, rollout={"max_staleness": 1}, objective={"old_logprobs": "generation"})
    check_wired(chosen, check_run(chosen), one_base(torch.bfloat16), hf_backend())


def test_a_team_over_several_bases_refuses_a_warm_start(tmp_path):
    cfg = config(tmp_path, warm_start={})
    several = SimpleNamespace(parts={"a": one_base(), "b": one_base()})
    with pytest.raises(ConfigError, match="warm_start: a team whose roles use several base models"):
        check_wired(cfg, check_run(cfg), several, hf_backend())


def test_sections_that_name_roles_name_the_teams_before_anything_loads(tmp_path):
    """The default protocol's default team plays a single solver: other names are refused by
    ``check_run``, before a data set or model loads."""
    with pytest.raises(ConfigError, match="credit.token.roles: nobody is not a role of the team"):
        check_run(config(tmp_path, credit={"token": {"method": "aem", "roles": ["nobody"]}}))
    with pytest.raises(ConfigError, match="warm_start.roles: nobody is not a role of the team"):
        check_run(config(tmp_path, warm_start={"roles": ["nobody"]}))


def test_a_protocol_files_own_traits_decide_which_credit_methods_a_run_takes(tmp_path):
    """A YAML protocol declares its traits; the run's check reads them off the loaded protocol, not
    off the registry (which does not hold a file's protocol): shape_max needs every_agent_answers."""
    text = (Path(__file__).resolve().parents[2] / "configs/protocols/solver_checker.yaml").read_text()
    plain, answering = tmp_path / "plain.yaml", tmp_path / "answering.yaml"
    plain.write_text(text)
    answering.write_text(text + "traits: [every_agent_answers]\n")
    with pytest.raises(ConfigError, match="needs a protocol where"):
        check_run(config(tmp_path, protocol={"name": str(plain)}, credit={"method": "shape_max"}))
    check_run(config(tmp_path, protocol={"name": str(answering)}, credit={"method": "shape_max"}))
