"""One local Ray cluster for the whole test session (actors of every test run on it)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from teamplay.training.learn.samples import PolicySample
from tests.tiny import tiny_model_and_tokenizer

REPO = Path(__file__).resolve().parents[2]

#: The largest difference allowed between an adapter entry after 2 AdamW steps (lr 0.01) taken by
#: learner ranks and the same entry after the same steps in one process. The ranks sum gradients in
#: another order, and AdamW's division by sqrt(v) magnifies that rounding for near-zero gradient
#: entries. Measured on one machine: 1.5e-7 under its native kernels (AMX), 1.1e-6 under
#: ATEN_CPU_CAPABILITY=avx2 with ONEDNN_MAX_CPU_ISA=AVX2 (2 gloo ranks and 2 FSDP ranks alike);
#: the bound is 18x the worst. The seeded wrong variant lr x 1.01 on the ranks moves an entry by
#: 1.5e-2 (the update moves entries by up to 2.0e-2), 750x the bound.
RANKS_VS_ONE_PROCESS_TOL = 2e-5


@pytest.fixture(scope="session")
def ray_cluster():
    """A local cluster with 8 logical CPUs (2 rollout workers + 3 learner ranks, then a subprocess run; the
    machine may have fewer cores: Ray's CPUs are scheduling slots). Yields its GCS address, which
    subprocess drivers join with ``distributed.address``."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silences a FutureWarning
    # workers unpickle test classes (tasks, env factories) by module path: they need the repo
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=8, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A saved tiny model (``from_pretrained`` folder) whose head is scaled x20 so a policy-gradient
    signal shows within a step or two (see tests/training/fixtures.py)."""
    return save_scaled_tiny(tmp_path_factory.mktemp("tiny-a"), seed=0)


def save_scaled_tiny(folder: Path, seed: int, hidden: int = 32) -> Path:
    model, tokenizer = tiny_model_and_tokenizer(seed=seed, hidden=hidden)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_samples(tm, seed: int, n: int = 8) -> list[PolicySample]:
    """``n`` messages alternating between the two adapters, scored under the current adapters."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        adapter = ("proposer", "reviewer")[i % 2]
        prompt = tuple(int(t) for t in rng.integers(4, 260, size=int(rng.integers(3, 8))))
        completion = tuple(int(t) for t in rng.integers(4, 260, size=int(rng.integers(1, 4))))
        with torch.no_grad():
            logp, _ = tm.completion_logprobs([prompt], [completion], adapter=adapter, temperature=1.0)
        out.append(PolicySample(adapter=adapter, role=adapter, prompt_ids=prompt, completion_ids=completion,
                                old_logprobs=tuple(float(x) for x in logp[0, :len(completion)]),
                                advantage=float(rng.normal()), group_id="g"))
    return out
