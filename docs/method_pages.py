"""One docs page per registered credit method, from one template (``docs/gen_reference.py`` writes them).

A page holds, in this order: what the method estimates (its card's estimand and assumptions: the
card is declared where the method registers, and ``teamplay.credit.audit.cards`` collects it from
the registry), when to use it (``docs/method_notes.py``), its options (a table of
its registered options model), what it logs (the step metrics every method gets, and those of the
resources it uses under which options), its card (cost, protocols, the tests that would catch it,
where it fails), and its papers with the config values that set their choices.

Message-level methods go to ``credit/methods/NAME.md``, token-level ones to
``credit/methods/token/NAME.md``; ``docs/hooks.py`` lists both folders in the navigation. Only the
built-in methods get a page (a user's method registered in the same process, a test's, is not
teamplay's); one registered later gets its page from this template the next time the generator runs.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from method_notes import NOTES, Note, Paper

DOCS = Path(__file__).resolve().parent
METHOD_DIR = DOCS / "credit" / "methods"
TOKEN_DIR = METHOD_DIR / "token"
NO_NOTES = ("No notes have been written for this method yet: its card above says what it estimates, and "
            "`docs/method_notes.py` is where its notes go.")

#: what every message-level method's steps log in metrics.jsonl
MESSAGE_METRICS = (
    ("adv_mean", "per role: the mean advantage of its messages"),
    ("credit_share", "per role: its share of the step's summed |advantage| (the part of the learning signal it got)"),
    ("adv_min, adv_max", "the step's smallest and largest message advantage (credit that blows up shows here first)"),
    ("zero_variance_groups", "groups whose rewards were all equal (no signal for a group-centred method)"),
)
#: what a token-level method adds
TOKEN_METRICS = (
    ("token_credit_messages", "messages whose tokens got their own advantages"),
    ("token_adv_relative_spread", "mean within-message std of the token advantages over |message advantage| "
                                  "(0: uniform tokens, as message-level credit)"),
    ("token_adv_min, token_adv_max", "the range of the token advantages"),
)


@dataclass(frozen=True)
class Entry:
    """A registered built-in method.

    Fields:
        name: its registered name.
        level: ``"message"`` (``credit.method``) or ``"token"`` (``credit.token.method``).
        method: its registry entry (a ``CreditMethod`` or a ``TokenMethod``).
    """

    name: str
    level: str
    method: Any

    @property
    def path(self) -> Path:
        return (METHOD_DIR if self.level == "message" else TOKEN_DIR) / f"{self.name}.md"

    @property
    def root(self) -> str:
        """The way up from this page to the docs root."""
        return "../" * len(self.path.relative_to(DOCS).parts[:-1])


def entries() -> list[Entry]:
    """Every built-in method, message-level first, each level in registry order."""
    from teamplay.credit import credit_methods
    from teamplay.credit.token import token_methods

    out = [Entry(n, "message", m) for n, m in credit_methods().items() if m.fn.__module__.startswith("teamplay.")]
    out += [Entry(n, "token", m) for n, m in token_methods().items() if m.fn.__module__.startswith("teamplay.")]
    return out


def page(entry: Entry, options_table: typing.Callable[[type[BaseModel]], list[str]], header: str) -> str:
    """The page of one method (``header``: the generated-file comment)."""
    from teamplay.credit.audit.cards import card_for, protocols_line

    card = card_for(entry.name)
    note = NOTES.get(entry.name)
    field = "credit.method" if entry.level == "message" else "credit.token.method"
    out = [header, "", f"# `{entry.name}`", "",
           f"**{entry.level.capitalize()}-level credit** (`{field}: {entry.name}`): {card.summary}", "",
           f"All methods side by side: [credit methods]({entry.root}credit/methods.md). The card in a "
           f"terminal: `teamplay credit --card {entry.name}`.", "",
           "## What it estimates", "", card.estimand, ""]
    if card.assumptions:
        out += ["It identifies that quantity when:", "", *[f"- {a}" for a in card.assumptions], ""]
    out += ["## When to use it", "", _linked(note.when, entry) if note else NO_NOTES, ""]
    out += ["## Options", "",
            f"Set under `{'credit.options' if entry.level == 'message' else 'credit.token.options'}`; "
            "an unknown option or a value out of range is one `error:` line naming it.", "",
            *options_table(entry.method.options), ""]
    out += ["## What it logs", "", *logs(entry), ""]
    out += ["## Card", "", f"**Cost.** {card.cost}", "",
            f"**Protocols.** {protocols_line(card.protocols, card.traits)}", ""]
    if card.falsified_by:
        out += ["**Falsified by** (tests that fail if it does not compute its estimand):", "",
                *[f"- `{t}`" for t in card.falsified_by], ""]
    if card.fails_where:
        out += ["**Where it fails:**", "", *[f"- {f}" for f in card.fails_where], ""]
    out += papers(entry, note)
    return "\n".join(out).rstrip() + "\n"


def _linked(text: str, entry: Entry) -> str:
    return text.replace("{root}", entry.root)


def logs(entry: Entry) -> list[str]:
    """What a run with this method writes beyond every run's lines: the credit metrics of each
    training step (metrics.jsonl), those of the resources it uses (and under which options), and
    each logged episode's ``credit`` record (episodes.jsonl)."""
    if entry.level == "token":
        rows = TOKEN_METRICS
        lead = ("Each training step's line in `metrics.jsonl` holds, beside the message-level method's "
                "credit metrics:")
    else:
        rows = MESSAGE_METRICS
        lead = "Each training step's line in `metrics.jsonl` holds:"
    out = [lead, "", *[f"- {_keys(k)}: {text}" for k, text in rows]]
    for resource, when in resources_used(entry).items():
        keys = RESOURCE_METRICS.get(resource)
        if keys:
            out.append(f"- {_keys(', '.join(keys()))}: what the {resource} spent this step ({when})")
    if entry.level == "message":
        out += ["", "Each episode logged to `episodes.jsonl` (`log_episodes` per step) has its message "
                "advantages and a `credit` record: the method and its options"
                + (", and every counterfactual value behind the advantages (`replay_values`) when it replays."
                   if "replay" in resources_used(entry) else ".")]
    else:
        out += ["", "Each episode logged to `episodes.jsonl` has each message's token advantages and token "
                "text, which `teamplay report` shades."]
    return out


def _keys(names: str) -> str:
    return ", ".join(f"`{k.strip()}`" for k in names.split(","))


def _replay_keys() -> list[str]:
    from teamplay.training.play.replay import ReplayStats

    return list(ReplayStats().to_dict())


def _judge_keys() -> list[str]:
    from teamplay.training.play.judge import JudgeStats

    return list(JudgeStats().to_dict())


#: the resources whose use a step logs, and the keys it logs them under
RESOURCE_METRICS = {"replay": _replay_keys, "judge": _judge_keys}


def resources_used(entry: Entry) -> dict[str, str]:
    """Each resource the method needs, with when: ``"always"`` or the options that ask for it (each
    option tried alone at each value of a ``Literal`` or ``bool`` type, and an ``int`` one above its
    default). Token methods read token statistics only and declare no resources here."""
    if entry.level != "message":
        return {}
    method = entry.method
    try:
        always = method.requires(method.options())
    except Exception:  # noqa: BLE001  (options with required fields: nothing is known at the defaults)
        always = frozenset()
    out = {r: "always" for r in sorted(always)}
    for name, field in method.options.model_fields.items():
        for value in _trial_values(field):
            try:
                needed = method.requires(method.options(**{name: value}))
            except Exception:  # noqa: BLE001  (a value the options refuse alone)
                continue
            for resource in sorted(needed - always):
                shown = f"`{name}: {yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}`"
                out[resource] = f"{out[resource]} or {shown}" if resource in out else f"with {shown}"
    return out


def _trial_values(field: Any) -> list[Any]:
    annotation = field.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if annotation is bool:
        return [True, False]
    if annotation is int and isinstance(field.default, int):
        return [field.default + 1]
    if any(typing.get_origin(a) is typing.Literal for a in args):
        return [v for a in args if typing.get_origin(a) is typing.Literal for v in typing.get_args(a)]
    return []


def papers(entry: Entry, note: Note | None) -> list[str]:
    """The papers section: each paper with the config fragment that sets its choices."""
    out = ["## Papers and the config that reproduces their setting", ""]
    if note is None or not note.papers:
        out += ["No paper: " + (note.origin if note is not None else
                                "none recorded for this method yet (`docs/method_notes.py`)."), ""]
    for paper in note.papers if note else ():
        out += [f"**{paper.cite}**" + (f" ([paper]({paper.url}))" if paper.url else "") + ".", "",
                _linked(paper.setting, entry), "", *fragment(paper), ""]
    if note is not None and note.measured:
        out += [f"**Measured in teamplay:** {_linked(note.measured, entry)}", ""]
    return out


def fragment(paper: Paper) -> list[str]:
    """The paper's config fragment as a YAML block (``tests/docs`` loads it into a TrainConfig)."""
    text = yaml.safe_dump(paper.config, sort_keys=False, default_flow_style=None, width=100)
    return ["```yaml", text.rstrip(), "```"]


PAPERS_PAGE = DOCS / "credit" / "papers.md"


def papers_page(header: str) -> str:
    """Every paper a built-in method follows, with the method and the config that sets the paper's
    choices (the method pages hold the same entries; this is the index across them)."""
    out = [header, "", "# Paper index", "",
           "The papers teamplay's credit methods follow, each with the method that implements it and the",
           "config values that set the paper's choices, as far as teamplay has them (what a fragment does",
           "not reproduce is said under it). Each fragment goes into a training config; the tests load",
           "every one and check the method's options and protocol. Methods that follow no paper: their",
           "pages say where they come from.", ""]
    for entry in entries():
        note = NOTES.get(entry.name)
        for paper in note.papers if note else ():
            page = entry.path.relative_to(PAPERS_PAGE.parent).as_posix()
            out += [f"## {paper.cite}", "",
                    f"Method: [`{entry.name}`]({page})" + (f" · [the paper]({paper.url})" if paper.url else ""),
                    "", paper.setting.replace("{root}", "../"), "",
                    *fragment(paper), ""]
    return "\n".join(out).rstrip() + "\n"
