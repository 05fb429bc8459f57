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
- ``parts``: the trainer's ``Runner`` and ``Learner`` on those actors (``ray_parts``).
- ``compose``: ``make_trainer(cfg)``, the composition root every entry point trains through: the
  in-process parts without ``distributed:``, the Ray parts with it.
- ``sweep``: a sweep's runs in parallel, each a Ray task.

A config without ``distributed:`` never imports ray (``compose`` imports ``parts`` only for a
distributed run).
"""
