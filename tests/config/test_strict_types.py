"""Config types never guess: every field of every config model refuses a value of the wrong type.

The models are found from the run configs and from ``Section``'s subclasses, through every nested
field (optional, list, tuple and dict fields too), so a section added later is walked without
being listed here. For each field, the values of (True, 1, 2.5, "3", "yes") whose type the field
does not take must be refused with an error at that field: a boolean is not a number, a number is
not a boolean, and a string is neither.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.config import EvalConfig, FederatedConfig, TrainConfig, build_config, load_config
from teamplay.config.base import Section
from teamplay.config.loader import _is_model, _options  # the loader's own walk of a field's types
from teamplay.credit import CREDIT
from teamplay.errors import ConfigError

RUNS = (EvalConfig, TrainConfig, FederatedConfig)
#: one value of each kind a YAML scalar can be: a boolean, an int, a float, a quoted number, a word
CANDIDATES: tuple[Any, ...] = (True, 1, 2.5, "3", "yes")



def _nested(annotation: Any) -> list[type[BaseModel]]:
    """The models inside an annotation (through unions and containers)."""
    found = []
    for option in _options(annotation):
        if _is_model(option):
            found.append(option)
        for arg in typing.get_args(option) if typing.get_origin(option) is not Literal else ():
            found.extend(_nested(arg))
    return found


def _subclasses(cls: type) -> list[type]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


def all_models() -> list[type[BaseModel]]:
    """Every config model reachable from the run configs and Section's subclasses."""
    seen: dict[type[BaseModel], None] = {}
    todo = [*RUNS, *(cls for cls in _subclasses(Section) if cls is not Section)]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen[model] = None
        todo.extend(nested for field in model.model_fields.values() for nested in _nested(field.annotation))
    return sorted(seen, key=lambda m: f"{m.__module__}.{m.__qualname__}")


def _takes(annotation: Any, value: Any) -> bool:
    """Whether ``value``'s type is one ``annotation`` legitimately takes (an int for a float too)."""
    for option in _options(annotation):
        if option is Any:
            return True
        if typing.get_origin(option) is Literal:
            if any(type(arg) is type(value) for arg in typing.get_args(option)):
                return True
        elif option is float and type(value) in (int, float):
            return True
        elif option in (bool, int, str) and type(value) is option:
            return True
    return False


def wrong_values(annotation: Any) -> list[Any]:
    return [value for value in CANDIDATES if not _takes(annotation, value)]


FIELDS = [(model, name) for model in all_models() for name in model.model_fields]


def test_the_walk_finds_every_section_and_the_team():
    names = {model.__name__ for model in all_models()}
    # a sample of each depth: run configs, sections, sections inside sections, inside lists, the team
    assert {"TrainConfig", "SamplingConfig", "WorkerResources", "FailureDrill", "Role", "Team",
            "ControllerConfig", "VLLMEngineConfig", "TokenCreditConfig"} <= names
    assert len(FIELDS) > 150


@pytest.mark.parametrize("model, name", FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_every_field_refuses_every_value_of_a_wrong_type(model, name):
    annotation = model.model_fields[name].annotation
    wrong = wrong_values(annotation)
    assert wrong, f"{model.__name__}.{name}: {annotation} takes every kind of scalar"
    for value in wrong:
        with pytest.raises(ValidationError) as caught:
            model.model_validate({name: value})
        at_field = [e for e in caught.value.errors() if e["loc"][:1] == (name,) and e["type"] != "missing"]
        assert at_field, f"{model.__name__}.{name} took {value!r}: {caught.value.errors()}"


def _dotted_paths(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, annotation) of every field reachable by ``--set`` (through nested sections,
    not through list items)."""
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append((path, field.annotation))
        for nested in _options(field.annotation):
            if _is_model(nested):
                paths.extend(_dotted_paths(nested, f"{path}."))
    return paths


@pytest.mark.parametrize("run", RUNS, ids=[run.__name__ for run in RUNS])
def test_through_the_loader_each_wrong_value_is_one_line_naming_its_field(run):
    checked = 0
    for path, annotation in _dotted_paths(run):
        for value in wrong_values(annotation):
            with pytest.raises(ConfigError) as caught:
                build_config(run, {}, [f"{path}={value!r}" if isinstance(value, str) else f"{path}={value}"])
            message = str(caught.value)
            assert "\n" not in message
            assert message.startswith(f"{path}:") or f"; {path}:" in message, (path, value, message)
            checked += 1
    assert checked > 200  # each run config has dozens of fields, most with 3 or more wrong values


runner = CliRunner()


@pytest.mark.parametrize("command, setting, field", [
    ("train", "rollout.max_staleness=true", "rollout.max_staleness"),
    ("train", "rollout.group_size=true", "rollout.group_size"),
    ("train", "optim.lr='1e-4'", "optim.lr"),
    ("train", "distributed.max_worker_lag=false", "distributed.max_worker_lag"),
    ("train", "federated_x=1", "federated_x"),
    ("eval", "controllers.enabled=1", "controllers.enabled"),
    ("eval", "task.limit='3'", "task.limit"),
    ("eval", "task.distinct=yes_please", "task.distinct"),
    ("eval", "sampling.max_new_tokens=2.5", "sampling.max_new_tokens"),
    ("eval", "sampling.temperature=true", "sampling.temperature"),
    ("eval", "team.roles=[{name: solver, count: true}]", "team.roles.0.count"),
    ("eval", "protocol.options=true", "protocol.options"),
])
def test_the_cli_prints_one_error_line_and_exits_2(tmp_path, command, setting, field):
    # backend scripted: were the value taken, a train run would stop at "training needs a model backend"
    # and an eval would not load a model
    result = runner.invoke(app, [command, "--set", "backend.name=scripted", "--set", setting,
                                 "-o", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len([line for line in lines if line.startswith("error:")]) == 1, result.output
    assert lines[-1].startswith(f"error: {field}:"), result.output
    assert "Traceback" not in result.output


def test_max_staleness_true_in_a_file_is_refused(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("rollout: {problems_per_step: 2, group_size: 2, max_staleness: true}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^rollout\.max_staleness: expected an integer, not a boolean"):
        load_config(TrainConfig, config)


def test_yaml_natural_values_still_load(tmp_path):
    config = tmp_path / "run.yaml"
    # an exponent without a dot is a float (YAML 1.2), an int is a float where one is expected, a list is a
    # tuple, yes/on are YAML booleans
    config.write_text("optim: {lr: 1e-4, grad_clip: 1}\ncontrollers: {enabled: yes, stages: [propose]}\n"
                      "tensorboard: off\n", encoding="utf-8")
    cfg = load_config(TrainConfig, config, ["sampling.temperature=1", "objective.clip_high=3e-1"])
    got = (cfg.optim.lr, cfg.optim.grad_clip, cfg.sampling.temperature, cfg.objective.clip_high)
    assert got == (1e-4, 1.0, 1.0, 0.3)  # exact: the YAML reader parses the same literals
    assert type(cfg.optim.grad_clip) is float and type(cfg.sampling.temperature) is float
    assert cfg.controllers.enabled is True and cfg.controllers.stages == ("propose",) and cfg.tensorboard is False
    fed = build_config(FederatedConfig, {"federated": {"fedgrpo": {"calibration_clip": [0.5, 2]}}})
    assert fed.federated.fedgrpo.calibration_clip == (0.5, 2.0)  # exact: the YAML reader parses the same literals


def test_a_config_round_trips_through_its_json_dump():
    cfg = build_config(TrainConfig, {"team": {"roles": [{"name": "solver"}]}, "controllers": {"enabled": False}})
    assert build_config(TrainConfig, cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("setting, needle", [
    ("sampling.tempreature=1", "sampling.tempreature: unknown field (did you mean 'temperature'?)"),
    ("distributed.resources.rollout.num_cpu=2",
     "distributed.resources.rollout.num_cpu: unknown field (did you mean 'num_cpus'?)"),
    ("team.roles=[{name: solver, cnt: 2}]", "team.roles.0.cnt: unknown field (did you mean 'count'?)"),
    ("federated_x=1", "federated_x: unknown field (check the spelling"),
    ("backend.name=vlm", "backend.name: Input should be 'hf', 'vllm' or 'scripted' (did you mean 'vllm'?)"),
])
def test_unknown_fields_and_names_suggest_the_closest(setting, needle):
    with pytest.raises(ConfigError) as caught:
        build_config(TrainConfig, {}, [setting])
    assert needle in str(caught.value)


def test_unknown_registry_names_suggest_the_closest():
    needle = r"credit\.method: unknown credit method 'shaply' \(did you mean 'shapley'\?\)"
    with pytest.raises(ConfigError, match=needle):
        CREDIT.get("shaply")
    with pytest.raises(ConfigError) as caught:
        CREDIT.get("zzzz")
    assert "did you mean" not in str(caught.value)
    result = runner.invoke(app, ["eval", "--task", "arith", "--backend", "scripted", "--protocol", "debat"])
    assert result.exit_code == 2 and "unknown protocol 'debat' (did you mean 'debate'?)" in result.output
