"""Continuous batching alone (no HTTP): a request that arrives while others run joins them at the
next turn and is answered as soon as its own episodes end, before the run it arrived during; a
request whose caller gives up frees its slots at the next turn; a request whose model call fails
fails alone; at most ``max_batch`` episodes run, oldest request first."""

from __future__ import annotations

import asyncio
import time

import pytest

from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.config import EvalConfig, build_config
from teamplay.serving.episodes.engine import EpisodeRequest, TeamEngine
from teamplay.serving.episodes.scheduler import BatcherClosed, ContinuousBatcher
from teamplay.training.wiring.envs import env_factory, load_items
from teamplay.training.wiring.sampling import sampling_params


class LoggingBackend(ScriptedBackend):
    """A scripted team that logs each ``generate`` call's questions, taking ``turn_s`` per call;
    a question containing "boom" makes its call raise."""

    def __init__(self, turn_s: float = 0.02) -> None:
        super().__init__("truthful")
        self.turn_s = turn_s
        self.calls: list[list[str]] = []

    def generate(self, requests, sampling, *args, **kwargs):
        self.calls.append([r.item.prompt for r in requests])
        time.sleep(self.turn_s)
        if any("boom" in r.item.prompt for r in requests):
            raise ValueError("this question breaks the model")
        return super().generate(requests, sampling, *args, **kwargs)


def _engine(backend, rounds_by_question: dict[str, int]) -> TeamEngine:
    """A team whose episode length depends on the question (a fake for episodes of different
    lengths: proposer/reviewer with that many rounds, built when the episode's env is made)."""
    cfg = build_config(EvalConfig, {"task": {"name": "arith", "limit": 3}})
    task, items = load_items(cfg.task)
    factories = {r: env_factory(task, build_config(EvalConfig, {
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": r}}}).protocol, None)[0]
        for r in set(rounds_by_question.values())}
    order: list[str] = []  # the question of each env the scheduler is about to make, in order

    def make_env():
        return factories[rounds_by_question[order.pop(0)]]()

    engine = TeamEngine(task, items, make_env, backend, sampling_params(cfg.sampling), "proposer_reviewer")
    real_seeds = engine.env_seeds

    def env_seeds(request):  # called just before the request's envs are made, one per seed
        seeds = real_seeds(request)
        order.extend([request.item.prompt] * len(seeds))
        return seeds

    engine.env_seeds = env_seeds
    return engine


def _ask(engine: TeamEngine, question: str, n: int = 1) -> EpisodeRequest:
    item, _ = engine.item_for(question)
    return EpisodeRequest(request_id=question, item=item, n=n, sampling=engine.sampling)


def test_a_request_arriving_mid_run_is_answered_before_the_run_ends():
    """A long request (6 turns) runs; a short one (1 turn) arrives after its first turn: the short
    one shares A's second turn and is answered while A still runs; A is not held up."""
    backend = LoggingBackend()
    engine = _engine(backend, {"long?": 6, "short?": 1})

    async def main():
        batcher = ContinuousBatcher(engine, max_batch=8, max_queue=8)
        await batcher.start()
        long_ = batcher.enqueue(_ask(engine, "long?"))
        long_task = asyncio.ensure_future(batcher.wait(long_))
        for _ in range(500):  # until A's first model call is under way (bounded)
            if backend.calls:
                break
            await asyncio.sleep(0.001)
        short = await batcher.wait(batcher.enqueue(_ask(engine, "short?")))
        long_running = not long_task.done()
        episodes = await long_task
        await batcher.close()
        return short, episodes, long_running

    short, long_episodes, long_running = asyncio.run(main())
    assert long_running  # the short request was answered before the long one's run ended
    assert [len(e.messages) for e in short] == [1] and [len(e.messages) for e in long_episodes] == [6]
    assert backend.calls[0] == ["long?"] and ["long?", "short?"] in backend.calls[1:3]  # joined at the next turn
    assert sum("long?" in c for c in backend.calls) == 6  # A took its 6 turns, one call each
    assert len(backend.calls) == 6  # the short request took no call of its own


def test_a_caller_that_gives_up_frees_its_slots_at_the_next_turn():
    """max_batch 2: A (2 episodes, 6 turns) fills the batch, B waits; A's caller gives up after
    its first turn: A takes no more model calls and B runs in its place."""
    backend = LoggingBackend()
    engine = _engine(backend, {"A?": 6, "B?": 2})

    async def main():
        batcher = ContinuousBatcher(engine, max_batch=2, max_queue=8)
        await batcher.start()
        a = asyncio.ensure_future(batcher.wait(batcher.enqueue(_ask(engine, "A?", n=2))))
        b = batcher.enqueue(_ask(engine, "B?", n=2))
        for _ in range(500):
            if backend.calls:
                break
            await asyncio.sleep(0.001)
        assert (batcher.queued, batcher.running, batcher.running_size) == (1, 1, 2)
        a.cancel()
        episodes = await batcher.wait(b)
        await batcher.close()
        return episodes

    episodes = asyncio.run(main())
    assert [len(e.messages) for e in episodes] == [2, 2]
    assert sum("A?" in c for c in backend.calls) <= 2  # the call under way, at most one more
    assert backend.calls[-2:] == [["B?", "B?"], ["B?", "B?"]]


def test_a_failing_request_fails_alone_and_the_others_go_on():
    backend = LoggingBackend()
    engine = _engine(backend, {"fine?": 3, "boom?": 3})

    async def main():
        batcher = ContinuousBatcher(engine, max_batch=8, max_queue=8)
        await batcher.start()
        fine = batcher.enqueue(_ask(engine, "fine?"))
        boom = batcher.enqueue(_ask(engine, "boom?"))
        results = await asyncio.gather(batcher.wait(fine), batcher.wait(boom), return_exceptions=True)
        after = await batcher.wait(batcher.enqueue(_ask(engine, "fine?")))  # the worker lives on
        await batcher.close()
        return results, after

    (fine, boom), after = asyncio.run(main())
    assert isinstance(boom, ValueError) and "breaks the model" in str(boom)
    assert [len(e.messages) for e in fine] == [3] and [len(e.messages) for e in after] == [3]


def test_admission_is_oldest_first_within_max_batch_and_cancel_all_fails_everything():
    backend = LoggingBackend()
    engine = _engine(backend, {"a?": 2, "b?": 2, "c?": 2, "big?": 2})

    async def main():
        batcher = ContinuousBatcher(engine, max_batch=3, max_queue=8)
        await batcher.start()
        asks = [batcher.enqueue(_ask(engine, q, n)) for q, n in (("a?", 2), ("big?", 4), ("c?", 1))]
        results = await asyncio.gather(*(batcher.wait(p) for p in asks))
        await batcher.close()
        with pytest.raises(BatcherClosed):
            batcher.enqueue(_ask(engine, "a?"))
        return results

    results = asyncio.run(main())
    assert [len(r) for r in results] == [2, 4, 1]
    # "big?" (4 > max_batch) runs alone once "a?" is done; "c?" (1 would fit beside "a?") waits its
    # turn behind "big?": never reordered
    assert backend.calls == [["a?", "a?"], ["a?", "a?"], ["big?"] * 4, ["big?"] * 4, ["c?"], ["c?"]]


def test_requests_that_arrive_together_at_an_idle_server_share_their_first_turn():
    """max_wait_s: the first request waits for the second (sent 5 ms later) instead of taking a
    turn alone (without the wait it takes one: the first test)."""
    def calls(max_wait_s: float) -> list[list[str]]:
        backend = LoggingBackend(turn_s=0.0)
        engine = _engine(backend, {"one?": 1, "two?": 1})

        async def main():
            batcher = ContinuousBatcher(engine, max_batch=8, max_queue=8, max_wait_s=max_wait_s)
            await batcher.start()
            one = batcher.enqueue(_ask(engine, "one?"))
            await asyncio.sleep(0.005)
            two = batcher.enqueue(_ask(engine, "two?"))
            await asyncio.gather(batcher.wait(one), batcher.wait(two))
            await batcher.close()

        asyncio.run(main())
        return backend.calls

    assert calls(max_wait_s=1.0) == [["one?", "two?"]]  # 1 s: far more than the 5 ms apart


def test_a_seeded_sampled_request_shares_the_turns_and_keeps_its_episodes(tmp_path):
    """On a backend with row streams (hf) a seeded sampled request takes part in the shared
    ``generate`` call of each turn (one call per turn for all requests) and gets the episodes it
    gets alone; a seeded request sampled on a backend without row streams (scripted) keeps its
    own call, as before."""
    from dataclasses import replace

    from teamplay.serving.episodes.engine import build_team_engine
    from tests.tiny import save_tiny

    model = save_tiny(tmp_path / "model")
    engine = build_team_engine(build_config(EvalConfig, {
        "task": {"name": "arith", "split": "test", "limit": 20},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "model": {"name": str(model), "device": "cpu"}, "backend": {"name": "hf", "max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": 6}}))
    assert engine.backend.row_seeds
    sampled = engine.sampling_for(None, 1.0, None)

    def ask(question: str, seed: int | None, n: int = 2) -> EpisodeRequest:
        item, _ = engine.item_for(question)
        return EpisodeRequest(request_id=question, item=item, n=n, sampling=sampled, seed=seed)

    def serve(requests: list[EpisodeRequest]):
        async def main():
            batcher = ContinuousBatcher(engine, max_batch=16, max_queue=16, max_wait_s=0.5)
            await batcher.start()
            pendings = [batcher.enqueue(r) for r in requests]
            out = await asyncio.gather(*(batcher.wait(p) for p in pendings))
            await batcher.close()
            return out, batcher.stats

        return asyncio.run(main())

    def texts(episodes):
        return [[m.text for m in e.messages] for e in episodes]

    (alone,), _ = serve([ask("What is 23 + 95?", seed=7)])
    together, stats = serve([ask("What is 7 + 8?", None), ask("What is 23 + 95?", seed=7),
                             ask("What is 4 + 4?", seed=3, n=1)])
    assert texts(together[1]) == texts(alone)
    assert stats.generate_calls == stats.turns  # one shared call per turn, seeded requests included
    assert texts(serve([ask("What is 23 + 95?", seed=8)])[0][0]) != texts(alone)  # the seed matters

    scripted = _engine(LoggingBackend(turn_s=0.0), {"a?": 2, "b?": 2})
    assert not scripted.backend.row_seeds

    async def main():
        batcher = ContinuousBatcher(scripted, max_batch=8, max_queue=8, max_wait_s=0.5)
        await batcher.start()
        seeded = replace(_ask(scripted, "a?"), seed=5, sampling=replace(scripted.sampling, temperature=1.0))
        pendings = [batcher.enqueue(seeded), batcher.enqueue(_ask(scripted, "b?"))]
        await asyncio.gather(*(batcher.wait(p) for p in pendings))
        await batcher.close()
        return batcher.stats

    stats = asyncio.run(main())
    assert stats.generate_calls == 2 * stats.turns  # its own call beside the shared one, each turn
