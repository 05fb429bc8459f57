"""The OpenAI-compatible HTTP surface over ``episodes``: request and response shapes (``schema``),
rendering a team's episode as a reply (``render``), ``stream: true`` chunks (``streaming``), the
bearer API key (``auth``), Prometheus ``/metrics`` (``metrics``), draining at SIGTERM
(``shutdown``) and the FastAPI app (``server``).

Above ``files`` and ``episodes`` in ``teamplay.serving``.
"""
