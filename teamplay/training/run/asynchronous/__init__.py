"""Asynchronous rollouts (``rollout.max_staleness``), a room of their own: the generator thread, its
adapter snapshots and the staleness bound (``rollouts``), what it generates with in one process
(``generation``: a copy of the adapters), and the asynchronous rollout source the trainer's step
takes its episodes from (``source``: ``AsyncSource``).

Above ``parts`` and ``data_order``; ``rollout_source`` and ``local_parts`` import it.
"""
