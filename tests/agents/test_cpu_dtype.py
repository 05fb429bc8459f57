"""The warning for a half-precision model on a CPU without native half-precision matrix units."""

from __future__ import annotations

import warnings

import pytest
import torch

from teamplay.agents.models import cpu_native_bfloat16, slow_cpu_dtype


def cpu(monkeypatch, avx2: bool, avx512_bf16: bool, amx: bool) -> None:
    """Describe a CPU to the probes, its kernels uncapped (whatever this process's environment caps)."""
    monkeypatch.setattr(torch.cpu, "_is_avx2_supported", lambda: avx2)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


@pytest.mark.parametrize(("aten", "onednn", "enabled"), [
    ("AVX512", None, True), ("AVX512", "AVX512_CORE_AMX", True), ("AVX512", "AVX2", False),
    ("AVX2", None, False), ("DEFAULT", None, False)])
def test_capped_kernels_leave_the_bfloat16_units_unused(monkeypatch, aten, onednn, enabled):
    cpu(monkeypatch, True, True, True)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: aten)
    if onednn is not None:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", onednn)
    assert cpu_native_bfloat16() is enabled
    assert (slow_cpu_dtype("bfloat16") is None) is enabled


@pytest.mark.parametrize(("avx512_bf16", "amx"), [(True, False), (False, True), (True, True)])
def test_bfloat16_with_native_units_or_float32_is_quiet(monkeypatch, avx512_bf16, amx):
    cpu(monkeypatch, True, avx512_bf16, amx)
    assert slow_cpu_dtype("bfloat16") is None
    assert slow_cpu_dtype(torch.float32) is None and slow_cpu_dtype("auto") is None


def test_bfloat16_without_native_units_says_why_in_one_line(monkeypatch):
    cpu(monkeypatch, True, False, False)
    note = slow_cpu_dtype(torch.bfloat16)
    assert note is not None and "\n" not in note
    assert note.startswith("model.dtype bfloat16 on a CPU without native bfloat16") and "float32" in note


def test_float16_is_slow_on_any_x86_cpu(monkeypatch):
    cpu(monkeypatch, True, True, True)
    assert "float16" in slow_cpu_dtype("float16")


def test_a_cpu_pytorch_cannot_describe_gets_no_warning(monkeypatch):
    cpu(monkeypatch, False, False, False)  # not x86 (e.g. an Arm CPU): the probes say nothing
    assert slow_cpu_dtype("bfloat16") is None


def test_building_a_bfloat16_team_on_such_a_cpu_warns_once(monkeypatch, tmp_path):
    from teamplay.agents.roles import Role, Team
    from teamplay.config import ModelConfig
    from teamplay.errors import TeamplayWarning
    from teamplay.training.wiring.model import build_team_model
    from tests.tiny import save_tiny

    cpu(monkeypatch, True, False, False)
    folder = save_tiny(tmp_path / "tiny")
    team = Team(roles=(Role(name="solver"),))
    with pytest.warns(TeamplayWarning, match="model.dtype bfloat16 on a CPU without native") as caught:
        build_team_model(ModelConfig(name=str(folder), dtype="bfloat16"), team)
    assert len([w for w in caught if issubclass(w.category, TeamplayWarning)]) == 1
    cpu(monkeypatch, True, True, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TeamplayWarning)
        build_team_model(ModelConfig(name=str(folder), dtype="bfloat16"), team)
