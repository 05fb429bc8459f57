"""Playing episodes: rollouts (``rollout``), counterfactual re-executions (``replay``) and the true
advantages they give (``oracle``), the speak/skip controllers (``controllers``) and the regret
matching they learn by (``regret``), evaluation and its team metrics (``evaluation``,
``team_metrics``) and the policy's probability of the gold answer after a prefix
(``answer_probability``).

The bottom floor of ``teamplay.training`` with ``store`` and ``learn``: it imports no other room.
"""
