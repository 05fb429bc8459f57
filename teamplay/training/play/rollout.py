"""RolloutRunner: many team episodes in lock step, one batched generation per turn.

The episodes of training, evaluation and the benchmarks come from here (the server of
``teamplay serve`` runs its own continuous-batching loop over the same envs and backends:
``teamplay.serving.episodes.scheduler``). The runner builds one ``TeamEnv`` per (problem,
sample), then repeats until every env is finished:

    1. advance each env past agents that are done (AEC convention: ``step(None)``);
    2. collect the ``TurnRequest`` of each env's selected agent;
    3. hand all requests to the backend in ONE ``generate`` call (the backend groups them by
       adapter: one batched forward pass per adapter);
    4. step each env with its ``Generation`` (text + token ids + behaviour log-probs).

Because the envs only exchange text and the backend is called on whole turns, a batch of 32
episodes costs about as many model calls as one episode has turns, not 32 times that.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teamplay.agents.backends.base import GenerationBackend
from teamplay.envs.protocols.driver import ReplaySpec
from teamplay.envs.team_env import TeamEnv
from teamplay.records import Episode, Generation, SamplingParams, TaskItem, TurnRequest


@dataclass(frozen=True)
class RolloutJob:
    """One episode to run: the problem and the group it belongs to.

    Episodes of the same problem sampled in the same step share ``group_id``; credit methods
    compare episodes within a group. ``replay`` (the replay engine's jobs) re-executes a recorded
    prefix with some agents removed. ``env_seed`` seeds this episode's env ``reset`` in place of the
    run's ``seed + i`` (the server gives a seeded request's episodes their own seeds in a shared run).
    """

    item: TaskItem
    group_id: str
    replay: ReplaySpec | None = None
    env_seed: int | None = None


def step_jobs(problems: Sequence[TaskItem], step: int, group_size: int) -> list[RolloutJob]:
    """A training step's jobs: ``group_size`` per problem, in problem order, one group per problem
    position (``s{step}:{k}:{id}``): a problem drawn twice in one step (a small training set) makes
    two groups, not one group of 2G."""
    return [RolloutJob(item=item, group_id=f"s{step}:{k}:{item.id}")
            for k, item in enumerate(problems) for _ in range(group_size)]


@dataclass(frozen=True)
class RolloutStats:
    """What a ``run`` cost.

    Fields:
        episodes: number of episodes produced.
        generate_calls: backend ``generate`` calls issued (one per lock-step turn).
        requests: turn requests answered (model calls summed over episodes).
        tokens: completion tokens generated.
        seconds: wall time of the whole run; ``generate_seconds`` the part spent in the backend.
    """

    episodes: int
    generate_calls: int
    requests: int
    tokens: int
    seconds: float
    generate_seconds: float


#: the seed of turn t in a run seeded s is s * SEED_STRIDE + t: distinct for every run and turn while
#: a run has fewer than SEED_STRIDE turns
SEED_STRIDE = 1_000_003


class RolloutRunner:
    """Steps many ``TeamEnv``s in lock step against one generation backend.

    Args:
        make_env: builds a fresh env (``TeamEnv(task, protocol, team)``); called once per job.
        backend: the generation backend.
        sampling: decoding settings; ``sampling.seed`` (if set) is offset per lock-step turn so
            two turns never reuse one random stream.
        max_batch: most requests per ``generate`` call (``None`` = all active episodes); memory
            bound for large runs.
        before_generate: called before each ``generate`` call, a safe point: an exception raised
            there abandons the run (the trainer's held-out evaluation stops there when a stop was
            asked for, ``teamplay.training.run.preemption``).
    """

    def __init__(self, make_env: Callable[[], TeamEnv], backend: GenerationBackend,
                 sampling: SamplingParams, max_batch: int | None = None,
                 before_generate: Callable[[], None] | None = None) -> None:
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.make_env = make_env
        self.backend = backend
        self.sampling = sampling
        self.max_batch = max_batch
        self.before_generate = before_generate
        self.last_stats: RolloutStats | None = None

    def run(self, jobs: Sequence[RolloutJob], seed: int = 0,
            on_episode: Callable[[Episode], None] | None = None,
            on_message: Callable[[int, TurnRequest, Generation], None] | None = None) -> list[Episode]:
        """Run every job to the end; returns episodes in job order.

        ``seed`` seeds each env's ``reset`` (job ``i`` gets ``seed + i``, or its ``env_seed``) and, for sampled
        decoding without an explicit ``sampling.seed``, the backend's random streams.
        ``on_episode`` is called as each episode finishes (progress bars, streaming writers);
        ``on_message(job_index, request, generation)`` after each generated turn (``teamplay play``).
        """
        start = time.perf_counter()
        envs = [self.make_env() for _ in jobs]
        for i, (env, job) in enumerate(zip(envs, jobs, strict=True)):
            options = {"item": job.item, "group_id": job.group_id}
            if job.replay is not None:
                options["replay"] = job.replay
            env.reset(seed=seed + i if job.env_seed is None else job.env_seed, options=options)
        episodes: list[Episode | None] = [None] * len(jobs)
        generate_calls = requests_total = 0
        generate_seconds = 0.0
        base_seed = self.sampling.seed if self.sampling.seed is not None else seed
        turn = 0
        while True:
            pending: list[tuple[int, TurnRequest]] = []
            for i, env in enumerate(envs):
                if episodes[i] is not None:
                    continue
                request = env.next_turn()
                if request is None:
                    episodes[i] = env.episode()
                    if on_episode is not None:
                        on_episode(episodes[i])
                else:
                    pending.append((i, request))
            if not pending:
                break
            chunk = self.max_batch or len(pending)
            for lo in range(0, len(pending), chunk):
                part = pending[lo:lo + chunk]
                if self.before_generate is not None:
                    self.before_generate()
                sampling = self.sampling.for_call(base_seed * SEED_STRIDE + turn)
                turn += 1
                t0 = time.perf_counter()
                generations = self.backend.generate([r for _, r in part], sampling)
                generate_seconds += time.perf_counter() - t0
                generate_calls += 1
                requests_total += len(part)
                if len(generations) != len(part):
                    raise RuntimeError(f"backend {self.backend.name!r} returned {len(generations)} "
                                       f"generations for {len(part)} requests")
                for (i, request), generation in zip(part, generations, strict=True):
                    envs[i].step(generation)
                    if on_message is not None:
                        on_message(i, request, generation)
        done = [ep for ep in episodes if ep is not None]
        self.last_stats = RolloutStats(
            episodes=len(done), generate_calls=generate_calls, requests=requests_total,
            tokens=sum(ep.tokens for ep in done), seconds=time.perf_counter() - start,
            generate_seconds=generate_seconds)
        return done
