"""Scale-out on Ray (optional extra ``teamplay[ray]``).

- ``cluster``: connect to a local or running Ray cluster (``distributed.address``).
- ``rollout``: rollout workers as Ray actors, each running the lock-step runner on its share of a
  step's jobs; a pool that restarts dead workers and re-runs their shard.
- ``groups``: one rollout worker group per base model (heterogeneous teams); the lock-step runner
  stays in the driver and routes each generate call to the group of the request's adapter.
- ``learner``: the data-parallel learner, one Ray actor per torch.distributed rank.
- ``sharding``: FSDP2 sharding of a learner rank's model (``learner_strategy: fsdp``) and the
  gathers that keep checkpoints in the single-process format.
- ``weights``: adapter-only, versioned weight sync.
- ``trainer``: ``DistributedTrainer``, the single-process trainer's step on those parts.

Nothing here is imported by the single-process path; a config without ``distributed:`` never
imports ray.
"""
