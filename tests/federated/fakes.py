"""An in-process stand-in for Flower's Grid, so server tests run without Ray.

``FakeGrid`` hands each ``train`` message to a function of (message, site) and returns the replies
in the order the test chooses: sites' real ``handle_train`` (``real_sites``), or replies the test
makes up (``made_up_reply``). Node ids are ``NODE0 + site``. Tests using it take the
``flower_identity`` fixture (``conftest.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict

from tests.tiny import save_tiny

NODE0 = 1000
FRACTIONAL_TASK = str(Path(__file__).with_name("fractional_task.py")) + ":FractionalArith"


class FakeGrid:
    """``get_node_ids``, ``push_messages`` and ``pull_messages`` of a Grid whose node ``NODE0 + k``
    is site k.

    ``answer(message, site) -> list of replies`` (none: a timeout); ``order(round, replies)``
    reorders a round's replies (arrival order). Pushing runs every site at once, in this process;
    the first pull returns every reply. A site that does not answer is a timeout that has already
    passed: its message id is not returned by the push, so the server does not wait for it."""

    def __init__(self, clients: int, answer: Callable[[Message, int], list[Message]],
                 order: Callable[[int, list[Message]], list[Message]] = lambda rnd, replies: replies) -> None:
        self.sites = {NODE0 + k: k for k in range(clients)}
        self.answer, self.order = answer, order
        self.replies: list[Message] = []

    def get_node_ids(self) -> list[int]:
        return list(self.sites)

    def push_messages(self, messages) -> list[str]:
        messages = list(messages)
        rnd = int(messages[0].metadata.group_id)
        for k, message in enumerate(messages):  # as Flower's push does: a reply names the id it answers
            message.metadata.__dict__["_message_id"] = f"round-{rnd}-message-{k}"
        replies = [r for m in messages for r in self.answer(m, self.sites[m.metadata.dst_node_id])]
        self.replies = self.order(rnd, replies)
        return sorted({r.metadata.reply_to_message_id for r in self.replies})

    def pull_messages(self, message_ids) -> list[Message]:
        wanted = set(message_ids)
        arrived = [r for r in self.replies if r.metadata.reply_to_message_id in wanted]
        self.replies = [r for r in self.replies if r.metadata.reply_to_message_id not in wanted]
        return arrived


def real_sites(state_dir: Path, skip: Callable[[int, int], str | None] = lambda rnd, site: None):
    """``answer`` running each site's real ``handle_train``. ``skip(round, site)``: None to answer;
    "late" runs the site (it saves its state) and drops the reply; "absent" never runs it."""
    from teamplay.federated.client import handle_train

    def answer(message: Message, site: int) -> list[Message]:
        how = skip(int(message.metadata.group_id), site)
        if how == "absent":
            return []
        context = Context(run_id=1, node_id=message.metadata.dst_node_id, state=RecordDict(), run_config={},
                          node_config={"partition-id": site, "state-dir": str(state_dir)})
        reply = handle_train(message, context)
        return [] if how == "late" else [reply]

    return answer


def made_up_reply(message: Message, site: int, delta: np.ndarray, **metrics: float) -> Message:
    """A well-formed dense reply of ``site`` with ``delta`` [N]; ``metrics`` override the defaults."""
    base = {"site": site, "round": int(message.metadata.group_id), "shard_size": 2, "signal": 0.1 * (site + 1),
            "reward_mean": 0.5, "groups": 1, "steps": 1, "site_step": 1, "type_sum/1": 1.0, "type_count/1": 2}
    content = RecordDict({"update": ArrayRecord({"values": Array(delta.astype(np.float32))}),
                          "metrics": MetricRecord({**base, **metrics})})
    return Message(content, reply_to=message)


def tiny_config(tmp_path: Path, task: str = "arith", **federated) -> dict:
    """A federated config (as data) on the tiny random model: 2 problems per site, 2 episodes each."""
    model = tmp_path / "tiny"
    if not model.exists():
        save_tiny(model)
    clients = federated.get("clients", 3)
    return {
        "model": {"name": str(model), "lora": {"r": 2, "alpha": 4}},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": task, "split": "train", "limit": 2 * clients},
        "protocol": {"name": "single"},
        "rollout": {"problems_per_step": 1, "group_size": 2},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0},
        "tensorboard": False, "output_dir": str(tmp_path / "run"),
        "federated": {"clients": clients, "rounds": 1, **federated},
    }


def log_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "federated.jsonl").read_text().splitlines()]
