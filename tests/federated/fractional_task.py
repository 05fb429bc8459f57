"""arith with a fractional reward that any text earns, so the tiny random model's groups have
unequal rewards: signals, calibration sums and updates are all non-trivial floats."""

from __future__ import annotations

from teamplay.envs.tasks import ArithTask


class FractionalArith(ArithTask):
    name = "fractional_arith"

    def extract(self, completion: str) -> str | None:
        return completion or "-"

    def score(self, completion: str, item) -> float:
        # (sum of code points mod 97) / 97: k/97 is not a binary fraction, so sums of rewards
        # depend on their order unless summed exactly
        return (sum(map(ord, completion)) % 97) / 97

    def score_answer(self, answer: str | None, item) -> float:
        return 0.0 if answer is None else self.score(answer, item)
