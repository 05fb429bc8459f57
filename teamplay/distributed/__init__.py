"""Scale-out on Ray (optional extra ``teamplay[ray]``).

- ``cluster``: connect to a local or running Ray cluster (``distributed.address``).
- ``rollout``: rollout workers as Ray actors, each running the lock-step runner on its share of a
  step's jobs; a pool that restarts dead workers and re-runs their shard.
- ``learner``: the data-parallel learner, one Ray actor per torch.distributed rank.
- ``weights``: adapter-only, versioned weight sync.
- ``trainer``: ``DistributedTrainer``, the single-process trainer's step on those parts.

Nothing here is imported by the single-process path; a config without ``distributed:`` never
imports ray.
"""
