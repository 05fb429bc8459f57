"""Every shipped config validates: its sections, its protocol and team, its credit options; and every
config re-validates from its own dump to itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from teamplay.config import EvalConfig, FederatedConfig, TrainConfig, build_config, load_config, read_yaml
from teamplay.credit import get_credit
from teamplay.credit.registry import credit_methods, parse_options
from teamplay.credit.token import token_methods
from teamplay.envs.protocols import get_protocol
from teamplay.envs.tasks import get_task
from teamplay.errors import ConfigError
from teamplay.training.wiring.envs import env_factory

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RUN_CONFIGS = sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "protocols")
PROTOCOL_FILES = sorted((CONFIGS / "protocols").iterdir())


def test_configs_are_found():
    # guards the parametrisations below against silently testing nothing
    names = {p.relative_to(CONFIGS).as_posix() for p in RUN_CONFIGS}
    assert {"demo.yaml", "gsm8k_proposer_reviewer.yaml", "gsm8k_debate.yaml", "eval/math500.yaml",
            "eval/gpqa_diamond.yaml", "federated_demo.yaml"} <= names
    assert len(PROTOCOL_FILES) >= 2


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_run_config_validates(path):
    data = read_yaml(path)
    is_train = "steps" in data or "federated" in data
    cfg = load_config(FederatedConfig if "federated" in data else TrainConfig if is_train else EvalConfig, path)
    task = get_task(cfg.task.name, **cfg.task.options)
    _, team = env_factory(task, cfg.protocol, cfg.team)
    assert team.roles
    if is_train:
        parse_options(get_credit(cfg.credit.method), cfg.credit.options)
        assert cfg.eval_task is not None, "a training config should name its held-out task"
        get_task(cfg.eval_task.name, **cfg.eval_task.options)


@pytest.mark.parametrize("path", PROTOCOL_FILES, ids=lambda p: p.name)
def test_protocol_example_loads(path):
    protocol = get_protocol(str(path))
    assert protocol.name


@pytest.mark.parametrize("objective,needle", [
    ({"name": "gspo", "kl_beta": 0.1}, "objective.kl_beta: the gspo objective has no KL term, so it does not "
                                       "apply to name 'gspo'"),
    ({"name": "gspo", "loss_agg": "token_mean"}, "objective.loss_agg: gspo aggregates per sequence"),
    ({"name": "gspo", "dual_clip": 3.0}, "objective.dual_clip: dual-clip is defined for the token ratio"),
    ({"name": "grpo", "logratio_clamp": 2.0}, "objective.logratio_clamp: only the gspo objective"),
    ({"name": "grpo", "kl_clamp": 10.0}, "objective.kl_clamp: needs kl_beta > 0"),
    ({"name": "grpo", "norm_tokens": 64}, "objective.norm_tokens: the constant"),
    ({"name": "grpo", "dual_clip": 0.5}, "objective.dual_clip"),
])
def test_objective_combinations_without_meaning_are_refused(objective, needle):
    from teamplay.config import TrainConfig, build_config
    from teamplay.errors import ConfigError
    with pytest.raises(ConfigError, match=re.escape(needle)):
        build_config(TrainConfig, {"objective": objective})


def test_objective_meaningful_combinations_load():
    from teamplay.config import TrainConfig, build_config
    cfg = build_config(TrainConfig, {"objective": {"name": "grpo", "kl_beta": 0.1, "kl_clamp": 10,
                                                   "loss_agg": "seq_mean_token_sum_norm",
                                                   "norm_tokens": 128, "dual_clip": 3}})
    assert cfg.objective.norm_tokens == 128
    assert build_config(TrainConfig, {"objective": {"name": "gspo", "kl_beta": 0}}).objective.name == "gspo"
    # gspo's own behaviour spelled out (its defaults, as every dump of a gspo config holds them)
    spelled = {"name": "gspo", "kl_beta": 0.0, "kl_clamp": None, "loss_agg": "seq_mean_token_mean",
               "norm_tokens": None, "dual_clip": None}
    assert build_config(TrainConfig, {"objective": spelled}).objective == build_config(
        TrainConfig, {"objective": {"name": "gspo"}}).objective


# ---- a dumped config re-validates to itself ------------------------------------------------------
# Every consumer of a run reads its config back from a full dump (``model_dump``): the federated
# sites (the server sends ``run_config``), ``--resume``, ``export``, ``eval --team``, sweeps and
# ``credit`` on a run folder. A rule that depends on which fields were *given* breaks that: a dump
# gives every field.

@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_run_config_round_trips_through_its_dump(path):
    data = read_yaml(path)
    cls = FederatedConfig if "federated" in data else TrainConfig if "steps" in data else EvalConfig
    cfg = load_config(cls, path)
    assert build_config(cls, cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("cls", [TrainConfig, FederatedConfig])
@pytest.mark.parametrize("objective", [
    {"name": "grpo"},
    {"name": "gspo"},
    {"name": "gspo", "clip_low": 3e-4, "clip_high": 4e-4, "logratio_clamp": 2.0},
    {"name": "grpo", "kl_beta": 0.1, "kl_clamp": 10.0, "dual_clip": 3.0},
    {"name": "grpo", "loss_agg": "seq_mean_token_sum_norm", "norm_tokens": 128},
])
def test_each_objective_round_trips_through_its_dump(cls, objective):
    cfg = build_config(cls, {"objective": objective})
    assert build_config(cls, cfg.model_dump(mode="json")) == cfg


def _objective_sections():
    """Objective sections of every shape: each field absent, at its default or at another value
    (many combinations are refused; the test keeps those that load)."""
    maybe = lambda *values: st.sampled_from(values)  # noqa: E731
    return st.fixed_dictionaries({"name": st.sampled_from(["grpo", "gspo"])}, optional={
        "clip_low": maybe(0.2, 3e-4), "clip_high": maybe(None, 4e-4),
        "kl_beta": maybe(0.0, 0.1), "kl_clamp": maybe(None, 10.0),
        "loss_agg": maybe("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"),
        "norm_tokens": maybe(None, 128), "dual_clip": maybe(None, 3.0), "logratio_clamp": maybe(None, 2.0)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(cls=st.sampled_from([TrainConfig, FederatedConfig]), objective=_objective_sections(),
       credit=st.sampled_from(sorted(credit_methods())), token=st.sampled_from([None, *sorted(token_methods())]))
def test_every_config_that_loads_round_trips_through_its_dump(cls, objective, credit, token):
    data = {"objective": objective, "credit": {"method": credit, "token": token and {"method": token}}}
    try:
        cfg = build_config(cls, data)
    except ConfigError:
        assume(False)
    assert build_config(cls, cfg.model_dump(mode="json")) == cfg
    assert build_config(cls, json.loads(json.dumps(cfg.model_dump(mode="json")))) == cfg  # as sent to a site
