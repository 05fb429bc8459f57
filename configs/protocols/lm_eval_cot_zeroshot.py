"""lm-evaluation-harness's zero-shot chain-of-thought GSM8K prompt, as one chat turn.

lm-eval 0.4.13's ``gsm8k_cot_zeroshot`` task asks ``Q: {question}\\nA: Let's think step by step.``
with no system prompt and no answer instruction; run with ``--apply_chat_template`` it sends that
text as the one user message of the model's chat template, which is what this protocol builds
(teamplay always uses the chat template; lm-eval without ``--apply_chat_template`` sends the raw
text instead, which suits base models, not the instruct models teamplay trains). One solver answers
once, greedily in ``configs/eval/gsm8k_cot_zeroshot.yaml``, and its completion is scored both ways:
teamplay's accuracy and lm-eval's ``gsm8k_cot_zeroshot`` strict-match / flexible-extract.

What still differs from lm-eval: its generation also stops at the text ``Q:`` (teamplay stops at
the end of the model's turn or at ``max_new_tokens``), so a model that goes on to invent a next
question is cut there by lm-eval and not here.
"""

from __future__ import annotations

from dataclasses import replace

from teamplay.agents.roles import Team
from teamplay.envs.protocols import Protocol, ProtocolState, RoleSpec, TurnSpec
from teamplay.records import ChatMessage, TurnRequest

TEMPLATE = "Q: {question}\nA: Let's think step by step."


class LmEvalCotZeroshot(Protocol):
    """One solver; its whole prompt is lm-eval's ``Q: ...\\nA: Let's think step by step.`` user turn."""

    name = "lm_eval_cot_zeroshot"
    roles = (RoleSpec("solver", "", count=1, min_count=1, max_count=1),)

    def schedule(self, team: Team) -> tuple[TurnSpec, ...]:
        return (TurnSpec(agent="solver_0", role="solver", stage="solve", round=0),)

    def instruction(self, state: ProtocolState, turn: TurnSpec) -> str:
        return TEMPLATE.format(question=state.item.prompt)

    def build_request(self, state: ProtocolState, turn: TurnSpec) -> TurnRequest:
        # the base request (adapter, item, what it expects, ...) with the chat replaced by the one turn
        request = super().build_request(state, turn)
        return replace(request, chat=(ChatMessage("user", self.instruction(state, turn)),), transcript=())

    def final_answer(self, state: ProtocolState) -> str | None:
        latest = state.latest("solver_0")
        return latest.answer if latest is not None else None
