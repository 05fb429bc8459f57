"""One training step's stages (``stages``): the credit method's advantages (``credit_stage``), token
credit (``token_stage``), the step's metrics (``step_metrics``) and its episodes.jsonl lines
(``episode_log``).

Above ``learn``, ``play`` and ``wiring``; the run shell (``run``) calls it.
"""
