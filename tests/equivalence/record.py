"""Record the numbers of three short runs through the command line: a single-process
``teamplay train``, a ``teamplay train`` on a local Ray cluster (``distributed:``) and a
``teamplay federate`` (Flower's simulation), all on the tiny random model.

Usage::

    python tests/equivalence/record.py OUT [single] [distributed] [federated]

writes ``OUT/<run>.json`` for each run named (all three by default). Each holds the run's command
and config (its paths replaced by ``<model>``, ``<run>`` and ``<fractional_task>``), every line of
its log (``metrics.jsonl``, or ``federated.jsonl`` for the federated run) without its wall-clock
times and Flower node ids, and the sum and sum of squares of every adapter tensor of its final
checkpoint (the global team's, for the federated run).

Only the command line and config fields that exist before and after the run-shell redesign are
used, so this one file records either codebase: the CLI runs as ``python -m teamplay.cli`` with
``PYTHONPATH`` set to the root of the ``teamplay`` package this interpreter imports (an old
worktree first on ``PYTHONPATH`` is recorded, not the installed tree).

The task gives every completion a fractional reward (``fractional_task.py``), so the tiny model's
groups have unequal rewards and every step updates the adapters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import teamplay

#: the repository whose ``teamplay`` this interpreter imports (its ``tests`` package comes along)
CODE_ROOT = Path(teamplay.__file__).resolve().parents[1]
TASK = str(Path(__file__).resolve().with_name("fractional_task.py")) + ":FractionalArith"
RUNS = ("single", "distributed", "federated")


def varies(key: str) -> bool:
    """The fields of log lines (at any depth) that differ between two runs of one config: wall-clock
    times (``seconds``, ``rollout_seconds``, ``tokens_per_second``) and the node id Flower's simulation
    draws for each site (``node``). Every other field is a function of the config and seed."""
    return key in ("seconds", "node") or key.endswith(("_seconds", "_per_second"))


def base_config(model: Path, run: Path) -> dict[str, Any]:
    """What the three runs share: the tiny model in float32, a proposer/reviewer team (propose, review,
    propose again) with a rank-2 LoRA adapter per role, 2 problems x 2 episodes of at most 3 sampled
    tokens a message per step, a held-out evaluation of 2 problems."""
    return {
        "model": {"name": str(model), "dtype": "float32", "lora": {"r": 2, "alpha": 4}},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": TASK, "split": "train", "limit": 8},
        "eval_task": {"name": TASK, "split": "test", "limit": 2},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "rollout": {"problems_per_step": 2, "group_size": 2},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": 3},
        "optim": {"lr": 0.01, "minibatch_size": 4},
        "tensorboard": False, "seed": 0, "output_dir": str(run),
    }


def run_config(name: str, model: Path, run: Path) -> tuple[str, dict[str, Any]]:
    """The command and config of run ``name``."""
    data = base_config(model, run)
    if name == "single":  # Shapley over coalitions replayed by the model: the replay engine runs
        return "train", {**data, "steps": 2, "credit": {"method": "shapley", "options": {"value": "replay"}}}
    if name == "distributed":  # 2 rollout workers and 1 learner rank on a cluster started in the run
        # grpo, not a per-agent method: since the per-agent zero-variance rule (a group is kept for an
        # agent whose advantages are not all zero) a per-agent method such as tracer_roles trains on
        # fewer messages than 0800a82 did, by design; grpo's numbers are unchanged by that rule
        return "train", {**data, "steps": 2, "credit": {"method": "grpo"}, "distributed": {
            "address": "local", "local_cpus": 2, "rollout_workers": 2, "learner_workers": 1,
            "resources": {"rollout": {"num_cpus": 0.5}, "learner": {"num_cpus": 1}}}}
    if name == "federated":  # 2 sites, 2 rounds of 1 local step, Fed-GRPO with dense uploads
        return "federate", {**data, "protocol": {"name": "single"}, "credit": {"method": "grpo"},
                            "federated": {"clients": 2, "rounds": 2, "local_steps": 1}}
    raise ValueError(f"unknown run {name!r}; one of {RUNS}")


def without_varying(value: Any) -> Any:
    """``value`` without the ``varies`` fields of any mapping in it."""
    if isinstance(value, dict):
        return {k: without_varying(v) for k, v in value.items() if not varies(k)}
    if isinstance(value, list):
        return [without_varying(v) for v in value]
    return value


def adapter_sums(run: Path) -> dict[str, dict[str, float]]:
    """Per tensor of the newest checkpoint's adapters (``<adapter>/<tensor>``): sum and sum of squares."""
    from safetensors.torch import load_file

    newest = max((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    out = {}
    for file in sorted((newest / "adapters").rglob("*.safetensors")):
        prefix = file.parent.relative_to(newest / "adapters").as_posix()
        for key, tensor in sorted(load_file(file).items()):
            t = tensor.double()
            out[f"{prefix}/{key}"] = {"sum": float(t.sum()), "sum_sq": float((t * t).sum())}
    return out


def placeholders(value: Any, paths: dict[str, str]) -> Any:
    """``value`` with each string equal to a key of ``paths`` replaced by its value."""
    if isinstance(value, dict):
        return {k: placeholders(v, paths) for k, v in value.items()}
    return paths.get(value, value) if isinstance(value, str) else value


def record(name: str, work: Path, backend: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``name`` in the empty folder ``work`` (the tiny model, the config, the run folder) and
    return its record. ``backend``: fields added to the run's backend section that the record's
    config does not show (a field today's code needs to run as the recorded code did)."""
    from tests.tiny import save_tiny

    model = save_tiny(work / "tiny", seed=0)
    run = work / "run"
    command, data = run_config(name, model, run)
    config = work / "config.yaml"
    written = {**data, "backend": {**data["backend"], **(backend or {})}}
    config.write_text(json.dumps(written, indent=1))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT), "OMP_NUM_THREADS": "1",
           "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}  # the last one silences a Ray FutureWarning
    imported = subprocess.run([sys.executable, "-c", "import teamplay; print(teamplay.__file__)"], env=env,
                              cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(imported).resolve().is_relative_to(CODE_ROOT):  # the CLI would run other code
        raise RuntimeError(f"the CLI imports {imported}, not the teamplay of {CODE_ROOT}")
    done = subprocess.run([sys.executable, "-m", "teamplay.cli", command, "--config", str(config)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: teamplay {command} exited {done.returncode}:\n{done.stderr[-4000:]}")
    log = run / ("federated.jsonl" if command == "federate" else "metrics.jsonl")
    return {
        "command": command,
        "config": placeholders(data, {str(model): "<model>", str(run): "<run>", TASK: "<fractional_task>"}),
        "log": [without_varying(json.loads(line)) for line in log.read_text().splitlines() if line.strip()],
        "adapters": adapter_sums(run),
    }


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    sys.path.insert(0, str(CODE_ROOT))  # tests.tiny of the recorded tree (a script's folder is on the path, not it)
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:] or RUNS:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"teamplay-{name}-") as work:
            result = record(name, Path(work))
        (out / f"{name}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {time.monotonic() - start:.0f} s, {len(result['log'])} log lines, "
              f"teamplay from {CODE_ROOT}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
