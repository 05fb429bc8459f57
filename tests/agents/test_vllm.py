"""The vllm backend: its wiring checked on CPU against a fake ``vllm`` module (tests/agents/fake_vllm.py),
and its one-line refusals. Generation against a real engine (CPU build or CUDA) is in test_vllm_real.py."""

import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from teamplay.agents.models import load_model
from teamplay.agents.roles import Role, Team
from teamplay.agents.team_model import TeamModel
from teamplay.config import BackendConfig, EvalConfig, ModelConfig, TrainConfig, build_config
from teamplay.errors import ConfigError, ModelLoadError, TeamplayError
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from teamplay.training.wiring.backend import build_backend
from tests.agents import fake_vllm
from tests.tiny import save_tiny

CHAT = (ChatMessage("system", "s"), ChatMessage("user", "2+2?"), ChatMessage("user", "Go"))
TEAM = Team(roles=[Role(name="proposer"), Role(name="reviewer")])


def request(adapter: str | None, agent: str = "a_0") -> TurnRequest:
    return TurnRequest(agent=agent, role="proposer", stage="propose", round=0, adapter=adapter, chat=CHAT)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def team_model(folder, dtype: str = "bfloat16", r: int = 4) -> TeamModel:
    model, tokenizer = load_model(str(folder), dtype=dtype)
    return TeamModel(model, tokenizer, ("proposer", "reviewer"), r=r, alpha=8)


def backend(monkeypatch, tmp_path, folder, **kwargs):
    from teamplay.agents.backends.vllm import VLLMBackend

    fake = fake_vllm.install(monkeypatch, **{k: kwargs.pop(k) for k in ("version", "fail", "script", "cpu")
                                             if k in kwargs})
    b = VLLMBackend(team_model(folder), adapter_dir=tmp_path / "adapters", **kwargs)
    return b, fake


def test_without_vllm_construction_names_the_install_command(monkeypatch):
    from teamplay.agents.backends import get_backend

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ModelLoadError, match="pip install"):
        get_backend("vllm", team_model=None)


def test_engine_arguments_come_from_the_config(monkeypatch, tiny_folder):
    fake = fake_vllm.install(monkeypatch)
    cfg = BackendConfig(name="vllm", max_prompt_tokens=100, gpu_memory_utilization=0.3, enforce_eager=True)
    b = build_backend(ModelConfig(dtype="bfloat16"), cfg, TEAM, team_model=team_model(tiny_folder, r=4),
                      max_new_tokens=20)
    (engine,) = fake.engines
    assert engine.kwargs == {  # exact: config values passed through unchanged
        "model": str(tiny_folder), "tokenizer": str(tiny_folder), "dtype": "bfloat16",
        "max_model_len": 120,  # max_prompt_tokens 100 + max_new_tokens 20
        "gpu_memory_utilization": 0.3, "enforce_eager": True, "logprobs_mode": "processed_logprobs",
        "enable_lora": True, "max_loras": 2,  # proposer and reviewer in one batch
        "max_lora_rank": 8,  # r=4 rounded up to vLLM's smallest allowed maximal rank
    }
    b.close()


def test_engine_options_of_the_config_reach_the_engine(monkeypatch, tiny_folder):
    fake = fake_vllm.install(monkeypatch)
    cfg = build_config(TrainConfig, {"backend": {"name": "vllm", "max_prompt_tokens": 100, "engine": {
        "max_num_batched_tokens": 16384, "enable_chunked_prefill": False, "max_num_seqs": 64, "seed": 3}},
        "model": {"dtype": "bfloat16"}}).backend
    b = build_backend(ModelConfig(dtype="bfloat16"), cfg, TEAM, team_model=team_model(tiny_folder), max_new_tokens=20)
    (engine,) = fake.engines
    # the ones set, and nothing else: unset options keep vLLM's defaults
    assert {k: engine.kwargs[k] for k in ("max_num_batched_tokens", "enable_chunked_prefill", "max_num_seqs",
                                          "seed")} == {"max_num_batched_tokens": 16384,
                                                       "enable_chunked_prefill": False, "max_num_seqs": 64, "seed": 3}
    assert "tensor_parallel_size" not in engine.kwargs and "swap_space" not in engine.kwargs
    b.close()


@pytest.mark.parametrize(("backend_section", "message"), [
    ({"name": "vllm", "engine": {"max_num_batched_token": 8}}, "max_num_batched_token"),  # a typo
    ({"name": "vllm", "engine": {"max_num_seqs": 0}}, "max_num_seqs"),
    ({"name": "vllm", "engine": {"model": "other"}}, "engine.model"),  # derived by the backend
    ({"name": "hf", "engine": {"max_num_seqs": 8}}, "backend.engine: vLLM engine arguments, but backend.name is 'hf'"),
])
def test_bad_engine_options_are_refused_in_one_line_at_load(backend_section, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        build_config(TrainConfig, {"backend": backend_section, "model": {"dtype": "bfloat16"}})
    assert "\n" not in str(info.value)


def test_on_vllms_cpu_build_prefills_are_never_chunked(monkeypatch, tmp_path, tiny_folder):
    # a chunked prefill of a seeded request kills the CPU engine ("CPU Generator does not use offset")
    _, fake = backend(monkeypatch, tmp_path, tiny_folder, cpu=True, max_prompt_tokens=100, max_new_tokens=20)
    assert {k: fake.engines[0].kwargs[k] for k in ("enable_chunked_prefill", "max_num_batched_tokens")} == {
        "enable_chunked_prefill": False, "max_num_batched_tokens": 16384}
    # a budget of the config is kept when a whole prefill fits in it
    _, fake = backend(monkeypatch, tmp_path, tiny_folder, cpu=True, max_prompt_tokens=100, max_new_tokens=20,
                      max_num_batched_tokens=512)
    assert fake.engines[0].kwargs["max_num_batched_tokens"] == 512
    # on a GPU build nothing is added
    _, fake = backend(monkeypatch, tmp_path, tiny_folder, cpu=False)
    assert "enable_chunked_prefill" not in fake.engines[0].kwargs


@pytest.mark.parametrize(("engine", "message"), [
    ({"enable_chunked_prefill": True}, "enable_chunked_prefill: vLLM's CPU engine dies on a seeded request"),
    ({"max_num_batched_tokens": 64}, "max_num_batched_tokens=64: without chunked prefill"),
])
def test_engine_options_the_cpu_build_cannot_run_are_refused_in_one_line(monkeypatch, tmp_path, tiny_folder, engine,
                                                                         message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        backend(monkeypatch, tmp_path, tiny_folder, cpu=True, max_prompt_tokens=100, max_new_tokens=20, **engine)


def test_trainer_sizes_the_engine_for_its_longest_sampling_section(monkeypatch, tmp_path, tiny_folder):
    from teamplay.training.run.trainer import Trainer
    from tests.training.fixtures import FirstTokenTask

    fake = fake_vllm.install(monkeypatch)
    cfg = build_config(TrainConfig, {
        "backend": {"name": "vllm", "max_prompt_tokens": 64}, "model": {"dtype": "bfloat16"},
        "sampling": {"max_new_tokens": 8, "temperature": 1.0}, "eval_sampling": {"max_new_tokens": 30},
        "rollout": {"group_size": 2}, "protocol": {"name": "proposer_reviewer"},
        "output_dir": str(tmp_path / "run"), "tensorboard": False})
    task = FirstTokenTask("ab")
    trainer = Trainer(cfg, team_model=team_model(tiny_folder), task=task, items=task.load("train", limit=2))
    assert fake.engines[0].kwargs["max_model_len"] == 64 + 30  # eval's 30 new tokens > training's 8
    trainer.close()
    assert fake.engines[0].shut_down  # the engine the run started


def test_a_trainer_stops_the_engine_its_run_started_and_never_one_passed_in(monkeypatch, tmp_path, tiny_folder):
    from teamplay.agents.backends.vllm import VLLMBackend
    from teamplay.training.run.trainer import Trainer
    from tests.training.fixtures import FirstTokenTask

    fake = fake_vllm.install(monkeypatch)
    task = FirstTokenTask("ab")

    def train(name: str, **kwargs) -> None:
        cfg = build_config(TrainConfig, {
            "backend": {"name": "vllm", "max_prompt_tokens": 512}, "model": {"dtype": "bfloat16"}, "steps": 1,
            "sampling": {"max_new_tokens": 4, "temperature": 1.0}, "eval_sampling": {"max_new_tokens": 4},
            "rollout": {"problems_per_step": 1, "group_size": 2}, "protocol": {"name": "proposer_reviewer"},
            "output_dir": str(tmp_path / name), "tensorboard": False})
        Trainer(cfg, task=task, items=task.load("train", limit=2), **kwargs).train()

    train("built", team_model=team_model(tiny_folder))
    assert [e.shut_down for e in fake.engines] == [True]  # the run started it: stopped when train returned
    mine = VLLMBackend(team_model(tiny_folder), adapter_dir=tmp_path / "adapters", max_new_tokens=4)
    train("passed", team_model=mine.team_model, backend=mine)
    assert [e.shut_down for e in fake.engines] == [True, False]  # the caller's engine stays up for the caller
    mine.close()
    assert fake.engines[1].shut_down


def test_routing_and_mixed_backends_close_the_backends_they_wrap(monkeypatch, tmp_path, tiny_folder):
    from teamplay.agents.backends.mixed import MixedBackend
    from teamplay.agents.backends.routing import RoutingBackend

    b, fake = backend(monkeypatch, tmp_path, tiny_folder)
    RoutingBackend({"base": MixedBackend(b, {})}, {}).close()
    assert fake.engines[0].shut_down


def test_float32_with_adapters_is_refused_in_one_line_before_the_engine_starts(monkeypatch, tmp_path, tiny_folder):
    from teamplay.agents.backends.vllm import VLLMBackend

    fake = fake_vllm.install(monkeypatch)
    with pytest.raises(ConfigError, match=r"model\.dtype: .*bfloat16 or float16.*set model\.dtype: bfloat16") as info:
        VLLMBackend(team_model(tiny_folder, dtype="float32"), adapter_dir=tmp_path / "a")
    assert "\n" not in str(info.value)
    assert fake.engines == []


@pytest.mark.parametrize("model", [EvalConfig, TrainConfig])
def test_the_config_refuses_vllm_with_a_float32_model_before_anything_loads(model):
    with pytest.raises(ConfigError) as info:
        build_config(model, {"backend": {"name": "vllm"}, "model": {"dtype": "float32"}})
    assert str(info.value).startswith("model.dtype: the vllm backend serves LoRA adapters only in bfloat16 or "
                                      "float16") and "\n" not in str(info.value)
    for backend, dtype in (("vllm", "bfloat16"), ("vllm", "float16"), ("hf", "float32")):
        assert build_config(model, {"backend": {"name": backend}, "model": {"dtype": dtype}}).model.dtype == dtype


class EngineConfigError(Exception):
    """Like vLLM's own validation errors: derives from neither ValueError nor RuntimeError."""


@pytest.mark.parametrize("error", [EngineConfigError("max_model_len 4096 exceeds\nthe model's 1024\n\n  see docs"),
                                   AssertionError("LoRA kernels need fp16/bf16"), KeyError("rope_scaling")])
def test_any_engine_construction_error_becomes_one_model_load_error_line(monkeypatch, tmp_path, tiny_folder, error):
    with pytest.raises(ModelLoadError) as info:
        backend(monkeypatch, tmp_path, tiny_folder, fail=error)
    message = str(info.value)
    assert "\n" not in message
    assert type(error).__name__ in message and "vLLM could not start" in message
    assert "max_model_len=2304" in message  # the defaults: 2048 prompt + 256 new tokens


@pytest.mark.parametrize("version", ["0.6.3", "0.10.1", "0.10.1.1"])
def test_vllm_older_than_0_10_2_is_refused(monkeypatch, tmp_path, tiny_folder, version):
    with pytest.raises(ModelLoadError, match=rf"vLLM >= 0\.10\.2 .*found {re.escape(version)}"):
        backend(monkeypatch, tmp_path, tiny_folder, version=version)


@pytest.mark.parametrize("version", ["0.10.2", "0.11.1.dev12+g0123abc", "1.0.0rc1"])
def test_vllm_from_0_10_2_on_is_accepted(monkeypatch, tmp_path, tiny_folder, version):
    b, fake = backend(monkeypatch, tmp_path, tiny_folder, version=version)
    assert len(fake.engines) == 1


def test_derived_engine_arguments_cannot_be_overridden(monkeypatch, tmp_path, tiny_folder):
    with pytest.raises(ConfigError, match=r"\['dtype', 'max_model_len'\]"):
        backend(monkeypatch, tmp_path, tiny_folder, max_model_len=99, dtype="float32")


def test_generate_sends_one_call_per_kind_of_policy_and_reads_the_sampled_tokens_logprobs(monkeypatch, tmp_path,
                                                                                        tiny_folder):
    b, fake = backend(monkeypatch, tmp_path, tiny_folder, max_new_tokens=4)
    reqs = [request("proposer"), request("reviewer"), request(None), request("proposer")]
    out = b.generate(reqs, SamplingParams(max_new_tokens=3, temperature=0.7, seed=5))
    # the base-policy request goes alone: on vLLM's CPU build a request without an adapter batched
    # with LoRA requests is served the last LoRA slot's adapter; every LoRA request shares one call
    lora, base = fake.engines[0].calls
    assert base.loras == [None]
    assert [r.lora_name for r in lora.loras] == ["proposer@1", "reviewer@1", "proposer@1"]
    assert lora.loras[0] is lora.loras[2] and lora.loras[0].lora_int_id != lora.loras[1].lora_int_id
    assert lora.loras[0].lora_path.endswith("v000000/proposer")
    params = [p.kwargs for p in base.params + lora.params]
    # exact: config values passed through unchanged
    assert {(p["max_tokens"], p["temperature"], p["logprobs"], p["top_k"]) for p in params} == {(3, 0.7, 0, -1)}
    assert len({p["seed"] for p in params}) == 4  # one seed per request, so identical prompts differ
    # each request keeps the seed of its position in the batch, whichever call it went into
    alone = b.generate([request(None)], SamplingParams(max_new_tokens=3, temperature=0.7, seed=5))
    assert fake.engines[0].calls[-1].params[0].kwargs["seed"] != base.params[0].kwargs["seed"]
    assert base.params[0].kwargs["seed"] == b._sampling(SamplingParams(max_new_tokens=3, temperature=0.7, seed=5),
                                                        2).kwargs["seed"]
    assert len(alone) == 1
    for g in out:
        # the sampled token's entries (-0.1, -0.2, -0.3), never the decoy's -0.01
        assert g.logprobs == pytest.approx((-0.1, -0.2, -0.3))
        assert len(g.completion_ids) == 3 and g.prompt_ids == tuple(lora.prompts[0])
    assert [g.adapter for g in out] == ["proposer", "reviewer", None, "proposer"]


def test_a_batch_of_only_lora_or_only_base_requests_is_one_engine_call(monkeypatch, tmp_path, tiny_folder):
    b, fake = backend(monkeypatch, tmp_path, tiny_folder, max_new_tokens=4)
    b.generate([request("proposer"), request("reviewer")], SamplingParams(max_new_tokens=2))
    b.generate([request(None), request(None)], SamplingParams(max_new_tokens=2))
    assert [len(c.loras) for c in fake.engines[0].calls] == [2, 2]


def test_a_completion_cut_by_the_context_before_max_new_tokens_is_an_error(monkeypatch, tmp_path, tiny_folder):
    def cut(prompt_ids, params, lora):
        return [5, 6], "length"  # 2 tokens although max_tokens asked for more: the context ran out

    b, _ = backend(monkeypatch, tmp_path, tiny_folder, script=cut)
    assert len(b.generate([request("proposer")], SamplingParams(max_new_tokens=2))[0].completion_ids) == 2
    with pytest.raises(TeamplayError, match=r"after 2 of max_new_tokens=3 tokens \(finish_reason 'length'"):
        b.generate([request("proposer")], SamplingParams(max_new_tokens=3))


def test_a_stopped_completion_shorter_than_max_new_tokens_is_data(monkeypatch, tmp_path, tiny_folder):
    b, _ = backend(monkeypatch, tmp_path, tiny_folder, script=lambda p, params, lora: ([7, 2], "stop"))
    assert b.generate([request(None)], SamplingParams(max_new_tokens=5))[0].completion_ids == (7, 2)


def test_asking_for_more_new_tokens_than_the_engine_was_sized_for_is_refused(monkeypatch, tmp_path, tiny_folder):
    b, _ = backend(monkeypatch, tmp_path, tiny_folder, max_new_tokens=4)
    with pytest.raises(ConfigError, match="max_new_tokens=5 is more than the 4"):
        b.generate([request(None)], SamplingParams(max_new_tokens=5))


@pytest.mark.parametrize("temperature", [0.005, 2.5])
def test_generate_refuses_temperatures_vllm_would_change_or_refuse(monkeypatch, tmp_path, tiny_folder, temperature):
    b, fake = backend(monkeypatch, tmp_path, tiny_folder)
    with pytest.raises(ConfigError, match=r"use 0 \(greedy\) or a value in \[0.01, 2.0\]"):
        b.generate([request(None)], SamplingParams(max_new_tokens=2, temperature=temperature))
    assert fake.engines[0].calls == []


def test_each_sync_serves_a_fresh_lora_request_and_deletes_the_previous_folder(monkeypatch, tmp_path, tiny_folder):
    b, fake = backend(monkeypatch, tmp_path, tiny_folder)
    ids = set()
    for version in range(1, 6):  # more syncs than vLLM keeps adapters on the CPU (max_loras=2)
        b.generate([request("proposer"), request("reviewer")], SamplingParams(max_new_tokens=1))
        loras = fake.engines[0].calls[-1].loras
        assert [r.lora_name for r in loras] == [f"proposer@{version}", f"reviewer@{version}"]
        ids.update(r.lora_int_id for r in loras)
        b.sync_adapters()
    assert len(ids) == 10  # 5 versions x 2 adapters, no id reused
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["v000005"]
    b.close()
    assert (tmp_path / "adapters").exists()  # a folder the caller gave is the caller's


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=10))
def test_config_accepts_exactly_greedy_or_vllms_temperature_range(temperature):
    ok = temperature == 0 or 0.01 <= temperature <= 2
    for model, section in ((EvalConfig, "sampling"), (TrainConfig, "eval_sampling")):
        try:
            build_config(model, {section: {"temperature": temperature}})
        except ConfigError as err:
            assert not ok, err
            assert str(err).startswith(f"{section}.temperature: ") and "\n" not in str(err)
        else:
            assert ok


@pytest.mark.parametrize("name", ["hf", "vllm"])
@pytest.mark.parametrize("truncation", [{"top_p": 0.9}, {"top_k": 20}])
def test_training_refuses_top_p_and_top_k_for_both_backends(monkeypatch, tmp_path, name, truncation):
    fake = fake_vllm.install(monkeypatch)
    with pytest.raises(ConfigError, match="^sampling.top_p/top_k: training rollouts must sample the full") as info:
        build_config(TrainConfig, {"backend": {"name": name}, "model": {"dtype": "bfloat16"},
                                   "sampling": {"temperature": 1.0, **truncation}})
    assert "\n" not in str(info.value)
    assert fake.engines == []  # refused with the config, before any model or engine is built


def test_cli_reports_the_float32_refusal_and_engine_errors_as_one_error_line(monkeypatch, tmp_path, tiny_folder):
    from typer.testing import CliRunner

    from teamplay.cli import app

    fake_vllm.install(monkeypatch)
    args = ["eval", "--backend", "vllm", "--model", str(tiny_folder), "--limit", "1", "-o", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())  # rich wraps long lines at the terminal width
    assert "error: model.dtype: the vllm backend serves LoRA adapters only in bfloat16 or float16" in text
    # an engine error quoting pydantic-style "[type=...]" text reaches the user unmangled
    fake_vllm.install(monkeypatch, fail=EngineConfigError("1 validation error\n  bad value [type=value_error]"))
    result = CliRunner().invoke(app, [*args, "--set", "model.dtype=bfloat16"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "error: vLLM could not start" in text and "1 validation error | bad value [type=value_error]" in text
