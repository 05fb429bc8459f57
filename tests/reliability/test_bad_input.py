"""Class 6: every bad input is one line, fast (no wait on an unreachable hub)."""

from __future__ import annotations

import pytest

from tests.reliability.helpers import error_line, invoke

#: an endpoint that refuses connections at once (port 9, "discard", is closed on test machines)
DEAD_HUB = "http://127.0.0.1:9"


@pytest.mark.parametrize("yaml_text, field", [
    ("optim:\n  lr: .inf\n", "optim.lr: Input should be a finite number"),
    ("sampling:\n  temperature: .inf\n", "sampling.temperature: Input should be a finite number"),
    ("sampling:\n  temperature: 1e400\n", "sampling.temperature: Input should be a finite number"),
    ("controllers:\n  price_per_token: .nan\n", "controllers.price_per_token: Input should be a finite number"),
    ("optim:\n  lr: 0.0001\n  epochs: 2\n  lr: 1.0\n", "line 4, column 3: duplicate key 'lr' (first given on line 2)"),
])
def test_meaningless_config_values_are_refused(tmp_path, yaml_text, field):
    config = tmp_path / "run.yaml"
    config.write_text(yaml_text)
    line = error_line(invoke("train", "--config", config, "-o", tmp_path / "run"))
    assert field in line
    assert not (tmp_path / "run").exists()


def test_an_error_line_is_not_wrapped_when_stderr_is_a_pipe(tmp_path):
    # CliRunner's stderr is not a terminal, as in `teamplay ... 2> log` or a CI job: rich would
    # wrap at 80 columns
    taken = tmp_path / ("a-long-folder-name-" * 6) / "results.txt"
    taken.parent.mkdir()
    taken.write_text("")
    line = error_line(invoke("eval", "--task", "arith", "--limit", 1, "--backend", "scripted", "-o", taken))
    assert len(line) > 120 and str(taken) in line


@pytest.fixture
def dead_hub(monkeypatch):
    """No network: the hub endpoint refuses connections; HF_HUB_OFFLINE is off (as for a user)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_ENDPOINT", DEAD_HUB)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def test_an_unknown_model_alias_is_refused_without_hub_retries(tmp_path, dead_hub, monkeypatch):
    import transformers

    online = []  # from_pretrained calls that may touch the network (and retry for about a minute)

    def recording(real):
        def call(*args, **kwargs):
            if not kwargs.get("local_files_only"):
                online.append(args[0])
            return real(*args, **kwargs)
        return call

    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", recording(cls.from_pretrained))
    line = error_line(invoke("eval", "--task", "arith", "--limit", 1, "--backend", "hf", "--model", "smollm2-360m",
                             "-o", tmp_path / "ev"))
    assert "'smollm2-360m'" in line and "unreachable" in line and "'smollm2-135m'" in line
    assert online == []


def test_a_hub_dataset_without_source_is_refused_without_hub_retries(tmp_path, dead_hub, monkeypatch):
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("load_dataset would retry the unreachable hub")

    monkeypatch.setattr(datasets, "load_dataset", never)
    line = error_line(invoke("eval", "--task", "gsm8k", "--limit", 1, "--backend", "scripted", "-o", tmp_path / "ev"))
    assert "gsm8k" in line and "unreachable" in line and "--source" in line
