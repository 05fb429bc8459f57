"""``teamplay serve`` under load: requests per second and latency at 1, 8 and 32 concurrent clients,
next to ``teamplay eval`` running the same problems as one batch.

The embedded model (SmolLM2-135M-Instruct, one LoRA adapter per role, HF backend, greedy, 24 new
tokens per message) plays proposer/reviewer (3 rounds: propose, review, propose) on N arith
level-1 test problems. In one process, with the model loaded once and warmed up by one request:

* ``eval``: the problems through one ``RolloutRunner`` evaluation (``evaluate``, as ``teamplay
  eval`` runs them): every episode in lock step, the best batching there is;
* ``serve`` at C clients: the server of ``teamplay serve`` (``build_team_engine`` + ``create_app``,
  uvicorn on 127.0.0.1 in a thread) and C client threads, each posting one problem at a time to
  ``/v1/chat/completions`` until all N are answered. Continuous batching steps every running
  episode in one lock-step turn, and a request joins at the next turn.

Reported per row: wall time, requests per second, latency p50/p95 (seconds from a request's post
to its answer), the lock-step turns it took (turns with model calls), and how many final answers equal
eval's (greedy decoding; a difference would be float rounding of a differently padded batch,
counted, not hidden). Clients, server and model share one process (and its GIL), so the HTTP
overhead shown is an upper bound of what a separate client machine would see.

    python -m benchmarks serve_throughput            # 32 problems; 1, 8, 32 clients
    python -m benchmarks.serve_throughput --quick    # 4 problems; 1 and 4 clients
    python -m benchmarks.serve_throughput --short    # 32 problems at 32 clients, 8 of them at 1 client

``--short`` is for a busy machine: one client's rate is measured on the first 8 problems only
(a rate per request, the same kind of problem), the 8-client row is left out, and eval runs before
and after the serve rows, the faster kept.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main

MODEL_ID = "bench-team"


def team_config(model: str, n: int) -> dict[str, Any]:
    """The served (and evaluated) team: proposer/reviewer on the first ``n`` arith level-1 test problems."""
    return {"task": {"name": "arith", "split": "test", "limit": n, "options": {"level": 1}},
            "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
            "team": {"roles": [{"name": "proposer"}, {"name": "reviewer"}]},
            "model": {"name": model, "device": "cpu"},
            "backend": {"name": "hf", "max_prompt_tokens": 768},
            "sampling": {"max_new_tokens": 24, "temperature": 0.0}}


def measure_eval(engine, items) -> dict[str, Any]:
    """The problems as ``teamplay eval`` runs them: one evaluation through a ``RolloutRunner``."""
    from teamplay.training.play.evaluation import evaluate
    from teamplay.training.play.rollout import RolloutRunner

    runner = RolloutRunner(engine.make_env, engine.backend, engine.sampling, max_batch=engine.generate_batch)
    start = time.perf_counter()
    episodes, _ = evaluate(runner, engine.task, items, seed=0)
    seconds = time.perf_counter() - start
    return {"episodes": len(episodes), "seconds": seconds, "requests_per_s": len(items) / seconds,
            "answers": [ep.final_answer for ep in episodes]}


def measure_serve(url: str, batcher, items, clients: int) -> dict[str, Any]:
    """``clients`` threads posting the problems one request at a time until all are answered."""
    import httpx

    todo: queue.Queue[int] = queue.Queue()
    for k in range(len(items)):
        todo.put(k)
    latencies: list[float] = [0.0] * len(items)
    answers: list[str | None] = [None] * len(items)
    failures: list[str] = []
    before = batcher.stats

    def client(http: httpx.Client) -> None:
        while True:
            try:
                k = todo.get_nowait()
            except queue.Empty:
                return
            t0 = time.perf_counter()
            resp = http.post(f"{url}/v1/chat/completions", json={
                "model": MODEL_ID, "messages": [{"role": "user", "content": items[k].prompt}]})
            latencies[k] = time.perf_counter() - t0
            if resp.status_code != 200:
                failures.append(f"{resp.status_code}: {resp.text[:200]}")
                continue
            answers[k] = resp.json()["teamplay"]["episodes"][0]["final_answer"]

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    with httpx.Client(timeout=600, limits=limits) as http:
        threads = [threading.Thread(target=client, args=(http,)) for _ in range(clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
    turns = batcher.stats.turns - before.turns
    return {"clients": clients, "requests": len(items), "failures": len(failures), "failure_samples": failures[:3],
            "seconds": seconds, "requests_per_s": len(items) / seconds,
            "p50_s": float(np.percentile(latencies, 50)), "p95_s": float(np.percentile(latencies, 95)),
            "turns": turns,
            "answers": answers}


def run(quick: bool = False, model: str = EMBEDDED_MODEL, short: bool = False) -> Result:
    """``quick``: 4 problems at 1 and 4 clients; ``short``: 32 problems at 32 clients and the first 8
    at 1 client; otherwise 32 problems at 1, 8 and 32 clients."""
    from teamplay.config import EvalConfig, build_config
    from teamplay.serving.api.server import ServeLimits, create_app, running
    from teamplay.serving.episodes.engine import build_team_engine

    n, levels = (4, (1, 4)) if quick else (32, (1, 8, 32))
    if short:
        levels = (1, 32)
    engine = build_team_engine(build_config(EvalConfig, team_config(model, n)))
    items = engine.task.load("test", limit=n)
    data: dict[str, Any] = {"problems": n, "serve": []}
    app = create_app(engine, MODEL_ID, ServeLimits(max_batch=64, timeout_s=3600))
    with running(app) as url:
        measure_serve(url, app.state.batcher, items[:1], 1)  # warm-up of the model and the HTTP path, untimed
        data["eval"] = measure_eval(engine, items)
        for clients in levels:
            some = items[:8] if short and clients == 1 else items
            data["serve"].append(measure_serve(url, app.state.batcher, some, clients))
        if short:  # eval again after the serve rows and the faster kept: a busy machine's load drifts
            again = measure_eval(engine, items)
            data["eval_repeat_seconds"] = [data["eval"]["seconds"], again["seconds"]]
            if again["seconds"] < data["eval"]["seconds"]:
                data["eval"] = again
    return _result(data)


def _result(data: dict[str, Any]) -> Result:
    ev, rows, n = data["eval"], data["serve"], data["problems"]
    same = [sum(a == b for a, b in zip(r["answers"], ev["answers"], strict=False)) for r in rows]
    table_rows = [["`teamplay eval` (one batch)", "-", n, f"{ev['seconds']:.1f}", f"{ev['requests_per_s']:.2f}",
                   "-", "-", 1, f"{n}/{n}"]]
    table_rows += [[f"`teamplay serve`, {r['clients']} client(s)", r["clients"], r["requests"], f"{r['seconds']:.1f}",
                    f"**{r['requests_per_s']:.2f}**", f"{r['p50_s']:.2f}", f"{r['p95_s']:.2f}", r["turns"],
                    f"{s}/{r['requests']}"] for r, s in zip(rows, same, strict=True)]
    table = markdown_table(["variant", "clients", "requests", "s", "requests/s", "latency p50 (s)",
                            "latency p95 (s)", "lock-step turns", "same answer as eval"], table_rows)
    top, one = rows[-1], rows[0]
    notes = (f"proposer/reviewer (3 rounds) of the untrained team on {n} arith level-1 test problems, greedy, "
             f"24 new tokens per message, HF backend, one process (server, clients and model share it). "
             f"A client sends one problem per request and the next when it has the answer; the server steps "
             f"every running episode in one lock-step turn and a request joins at the next turn (at most 64 "
             f"episodes at once). Failed requests: "
             f"{sum(r['failures'] for r in rows)}.",)
    rate = top["requests_per_s"]
    headline = (f"at {top['clients']} concurrent clients `teamplay serve` answers {rate:.2f} requests/s (p95 "
                f"latency {top['p95_s']:.1f} s), {fmt_ratio(rate / one['requests_per_s'])} one client's rate and "
                f"{fmt_ratio(rate / ev['requests_per_s'])} the rate of "
                f"`teamplay eval` running the same {n} problems as one batch.")
    return Result("serve_throughput", table, headline, None, notes, data)


def _main() -> None:
    import sys

    if "--short" in sys.argv:  # the script_main options, plus --short
        sys.argv.remove("--short")
        script_main(lambda quick, model: run(quick, model, short=True), "teamplay serve, short")
    else:
        script_main(run, "teamplay serve: requests/s and latency at 1, 8, 32 clients vs teamplay eval")


if __name__ == "__main__":
    _main()
