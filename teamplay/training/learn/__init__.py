"""The policy update: samples (``samples``), the objective (``losses``), minibatches and AdamW steps
(``update``), token statistics (``token_stats``) and skipped non-finite updates (``nonfinite``).

The bottom floor of ``teamplay.training`` with ``store`` and ``play``: it imports no other room.
"""
