"""scripts/gpu_check.py on a machine without vLLM or a GPU: --help, a clear SKIP, and a dry run of
every check against a stand-in engine (tests/agents/fake_vllm.py) that generates with transformers."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents import fake_vllm

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
CHECKS = [
    "engine-version", "engine-fp32-refused", "engine-start",
    "greedy-deterministic", "greedy-logprob-per-token", "greedy-cumulative-logprob", "greedy-logprobs-match-trainer-T1",
    "sampled-logprobs-match-trainer-T0.7", "sampled-logprobs-are-processed", "sampled-seed-reproducible",
    "sampled-group-diverse", "mixed-adapters-equal-single", "mixed-adapters-differ",
    "reload-changes-only-the-changed-adapter", "reload-many-syncs", "training-step-ratio",
    "learner-on-gpu", "learner-on-gpu-step",
]


@pytest.fixture()
def gpu_check(monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_needs_neither_vllm_nor_a_gpu():
    result = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "PASS/FAIL line per assertion" in result.stdout and "--gpu-memory-utilization" in result.stdout


def test_without_vllm_it_prints_one_skip_line_and_exits_2(monkeypatch, capsys, gpu_check):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    assert gpu_check.main([]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("SKIP vllm: not installed")
    assert "pip install 'vllm>=0.10.2'" in lines[0]


def results(out: str) -> dict[str, str]:
    """``{check name: "PASS" or "FAIL"}`` from the script's output."""
    found = {}
    for line in out.splitlines():
        if line.startswith(("PASS ", "FAIL ")):
            verdict, rest = line.split(" ", 1)
            found[rest.split(":", 1)[0]] = verdict
    return found


@pytest.mark.slow
def test_dry_run_with_a_stand_in_engine_passes_every_check(monkeypatch, capsys, tmp_path, gpu_check):
    fake_vllm.install_hf_engine(monkeypatch)
    monkeypatch.setattr(gpu_check, "requirements", lambda: None)  # no CUDA here
    # a smaller training step (2 problems x 4 episodes); a group of 4 still has reward variance
    monkeypatch.setattr(gpu_check, "TRAIN_PROBLEMS", 2)
    monkeypatch.setattr(gpu_check, "TRAIN_GROUP", 4)
    # hidden 32: the stand-in has no head-size limit, and the CPU cost is the prefill's linear layers
    monkeypatch.setattr(gpu_check, "HIDDEN", 32)
    monkeypatch.setattr(gpu_check, "LOGIT_SCALE", 20.0)  # the std-0.02 head of hidden 32 spans about +-0.6
    monkeypatch.setattr(gpu_check, "LEARNER_DEVICE", "cpu")  # model.device auto without a GPU
    status = gpu_check.main(["--max-new-tokens", "2", "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert results(out) == dict.fromkeys(CHECKS, "PASS"), out
    assert status == 0 and out.splitlines()[-1].startswith(f"gpu_check: {len(CHECKS)} passed, 0 failed")


def test_log_probs_from_before_temperature_scaling_fail_the_check(monkeypatch, capsys, tmp_path, gpu_check):
    # vLLM 0.10.1's behaviour: log-probs of the T=1 distribution although T=0.7 was sampled
    fake_vllm.install_hf_engine(monkeypatch, unscaled_logprobs=True)
    monkeypatch.setattr(gpu_check, "HIDDEN", 32)
    monkeypatch.setattr(gpu_check, "LOGIT_SCALE", 20.0)
    args = gpu_check.parse_args(["--max-new-tokens", "4"])
    check = gpu_check.GPUCheck(gpu_check.Report(), tmp_path, args)
    check.check_engine()
    check.check_sampling()
    found = results(capsys.readouterr().out)
    assert found["sampled-logprobs-match-trainer-T0.7"] == found["sampled-logprobs-are-processed"] == "FAIL"
    assert found["sampled-seed-reproducible"] == found["sampled-group-diverse"] == "PASS"


def test_cpu_mode_needs_vllm_but_no_gpu(monkeypatch, gpu_check):
    import torch

    fake_vllm.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.requirements().startswith("cuda: torch sees no CUDA GPU")
    assert gpu_check.requirements(cpu=True) is None
    assert gpu_check.parse_args(["--cpu"]).cpu and not gpu_check.parse_args([]).cpu
