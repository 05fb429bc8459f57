"""Reading and checking answers: the final answer of a completion and whether it equals the reference.

Text tails and ``The answer is`` (``text``), LaTeX and ``\\boxed{}`` (``latex``), numbers and
arithmetic expressions (``numeric``, ``expression``), choice letters (``letters``), math_verify in
a worker process under a deadline (``math_verifier``, ``_math_worker``) and lm-eval's own metrics
(``lm_eval_compat``). Nothing here knows a task or a data file.
"""
