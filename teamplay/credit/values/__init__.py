"""The values credit methods are computed from, and their arithmetic.

Group normalisation (``group``), Shapley values (``shapley``), characteristic functions ``v(S)``
over one episode's agents (``characteristic``; a generative judge's, ``generative_judge``), the
coverage game of embeddings (``coverage``), per-message process scores (``prm``) and the queries a
replay engine answers (``replay_query``). Nothing here registers a method or imports one: the
methods (``teamplay.credit.methods``, the token methods of ``teamplay.credit.token``) and the
registry sit above.
"""
