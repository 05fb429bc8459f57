"""Byzantine sites: how far one bad site of five pulls the global model, per aggregation rule.

The federation's own aggregation code (``teamplay.federated.aggregation.aggregate`` with each
``federated.robust.aggregator``, and the server's norm check ``screen.outlying_norms``) runs on a
synthetic problem whose deltas are cheap: the "adapters" are a logistic-regression weight vector
(D = 200), each of K = 5 sites holds its own non-IID shard (features shifted by a site-specific
mean, 100 to 300 examples) and trains ``LOCAL_STEPS`` full-batch gradient steps from the global
vector per round; the delta is local minus global, weighted by shard size (FedAvg).

Site 4 misbehaves in every round:

    x(-10)   sends -10 x its honest delta;
    x(-3)    sends -3 x its honest delta: a smaller lie, under the server's norm check (10 x median);
    noise    sends Gaussian noise with 10 x the norm of its honest delta.

After ``rounds`` rounds, each rule's global vector is compared with the all-honest FedAvg run
(same seed): distance = ||theta - theta_honest|| / ||theta_honest - theta_0|| (0: as if every site
were honest; 1: as far as the whole training moved), and held-out accuracy on 2,000 examples drawn
from the sites' mixture. Mean over seeds.

    python -m benchmarks federated_byzantine
    python -m benchmarks federated_byzantine --quick
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.common import EMBEDDED_MODEL, Result, markdown_table, script_main
from teamplay.federated.aggregation import AggregatorOptions, aggregate, fedavg_weights, update_norms
from teamplay.federated.screen import outlying_norms

K, D, LOCAL_STEPS, LR = 5, 200, 5, 1.0
ATTACKER = 4
ATTACKS = ("honest", "x(-10)", "x(-3)", "noise")
#: row name -> (aggregator, server norm check ratio or None)
RULES: dict[str, tuple[str, float | None]] = {
    "FedAvg (mean)": ("mean", None),
    "mean + norm check (k=10)": ("mean", 10.0),
    "median": ("median", None),
    "trimmed mean (20%)": ("trimmed_mean", None),
    "norm clipping (1x median)": ("clipped_mean", None),
}
OPTIONS = AggregatorOptions(trim_fraction=0.2, clip_factor=1.0)


def sizes(quick: bool) -> dict[str, int]:
    return {"rounds": 3, "seeds": 1} if quick else {"rounds": 30, "seeds": 10}


@dataclass(frozen=True)
class Problem:
    """Site shards ``x[k]`` [n_k, D], ``y[k]`` [n_k] in {0, 1}, and the held-out set."""

    x: tuple[np.ndarray, ...]
    y: tuple[np.ndarray, ...]
    x_test: np.ndarray
    y_test: np.ndarray


def make_problem(seed: int) -> Problem:
    rng = np.random.default_rng([seed, 11])
    w_true = rng.standard_normal(D) / np.sqrt(D)
    shifts = 1.5 * rng.standard_normal((K, D)) / np.sqrt(D)  # each site's features sit elsewhere

    def draw(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.standard_normal((n, D)) + shifts[k]
        return x, (x @ w_true + 0.3 * rng.standard_normal(n) > 0).astype(np.float64)

    shards = [draw(int(n), k) for k, n in enumerate(rng.integers(100, 301, size=K))]
    test = [draw(400, k) for k in range(K)]
    return Problem(tuple(s[0] for s in shards), tuple(s[1] for s in shards),
                   np.concatenate([t[0] for t in test]), np.concatenate([t[1] for t in test]))


def local_delta(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``LOCAL_STEPS`` gradient steps of the mean logistic loss from ``theta``; local - global.  [D]."""
    local = theta.astype(np.float64)
    for _ in range(LOCAL_STEPS):
        p = 0.5 * (1.0 + np.tanh(0.5 * (x @ local)))  # [n] the sigmoid, without exp's overflow
        local -= LR * x.T @ (p - y) / len(y)
    return (local - theta).astype(np.float32)


def attack(delta: np.ndarray, how: str, rng: np.random.Generator) -> np.ndarray:
    if how.startswith("x("):
        return np.float32(float(how[2:-1])) * delta
    if how == "noise":
        noise = rng.standard_normal(delta.shape)
        return (noise * 10 * np.linalg.norm(delta) / np.linalg.norm(noise)).astype(np.float32)
    return delta


def train(problem: Problem, rule: str, norm_check: float | None, how: str, rounds: int, seed: int) -> np.ndarray:
    """The global vector after ``rounds`` rounds of one rule under one attack.  -> [D]."""
    rng = np.random.default_rng([seed, 23])
    theta = np.zeros(D, np.float32)
    n = np.array([len(y) for y in problem.y], dtype=np.float64)
    for _ in range(rounds):
        deltas = [local_delta(theta, problem.x[k], problem.y[k]) for k in range(K)]
        deltas[ATTACKER] = attack(deltas[ATTACKER], how, rng)
        keep = ~outlying_norms(update_norms(np.stack(deltas).astype(np.float64)), norm_check)
        kept = [d for d, k in zip(deltas, keep, strict=True) if k]
        theta = aggregate(theta, kept, fedavg_weights(n[keep]), rule, OPTIONS)
    return theta


def accuracy(theta: np.ndarray, problem: Problem) -> float:
    return float(np.mean((problem.x_test @ theta > 0) == (problem.y_test > 0.5)))


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """The table of every rule x attack (``model`` is not used: the problem is synthetic)."""
    size = sizes(quick)
    cells: dict[str, dict[str, dict[str, list[float]]]] = {
        name: {how: {"distance": [], "accuracy": []} for how in ATTACKS} for name in RULES}
    for seed in range(size["seeds"]):
        problem = make_problem(seed)
        reference = train(problem, "mean", None, "honest", size["rounds"], seed)
        moved = float(np.linalg.norm(reference))  # theta_0 = 0
        for name, (rule, check) in RULES.items():
            for how in ATTACKS:
                theta = train(problem, rule, check, how, size["rounds"], seed)
                cells[name][how]["distance"].append(float(np.linalg.norm(theta - reference)) / moved)
                cells[name][how]["accuracy"].append(accuracy(theta, problem))
    return summarize(cells, size)


def summarize(cells: dict[str, dict[str, dict[str, list[float]]]], size: dict[str, int]) -> Result:
    mean = {name: {how: {m: float(np.mean(v)) for m, v in by.items()} for how, by in row.items()}
            for name, row in cells.items()}
    header = ["rule"] + [f"{how}: distance / accuracy" for how in ATTACKS]
    rows = [[name] + [f"{mean[name][how]['distance']:.3f} / {mean[name][how]['accuracy']:.3f}" for how in ATTACKS]
            for name in mean]
    table = markdown_table(header, rows)
    fedavg, robust = "FedAvg (mean)", [n for n in mean if n != "FedAvg (mean)"]
    parts = []
    for how in ATTACKS[1:]:
        best = min(robust, key=lambda n: mean[n][how]["distance"])
        parts.append(f"{how}: FedAvg ends {mean[fedavg][how]['distance']:.2f} from the honest run (accuracy "
                     f"{mean[fedavg][how]['accuracy']:.3f}), {best} {mean[best][how]['distance']:.2f} "
                     f"({mean[best][how]['accuracy']:.3f})")
    honest = mean[fedavg]["honest"]["accuracy"]
    headline = (f"1 of 5 sites misbehaving for {size['rounds']} rounds: " + "; ".join(parts)
                + f"; all-honest FedAvg accuracy {honest:.3f}.")
    notes = (f"Synthetic: logistic regression, D = {D}, K = {K} non-IID sites (100-300 examples each), "
             f"{LOCAL_STEPS} local gradient steps (lr {LR}) per round, {size['rounds']} rounds, mean over "
             f"{size['seeds']} seed(s); site {ATTACKER} sends -10 or -3 x its delta, or noise of 10 x its norm. "
             f"distance = ||theta - theta_honest|| / ||theta_honest - theta_0|| against the all-honest FedAvg run; "
             f"accuracy on 2,000 held-out examples. The aggregation is teamplay's own "
             f"(strategies.aggregate, screen.outlying_norms); median and trimmed mean weigh sites equally, "
             f"so they differ from FedAvg even when every site is honest.",)
    data: dict[str, Any] = {"sizes": size, "mean": mean, "runs": cells}
    return Result("federated_byzantine", table, headline, None, notes, data)


if __name__ == "__main__":
    script_main(run, __doc__.splitlines()[0])
