"""The dialogue picture: a few of a team's episodes as a conversation, each message with what it was worth.

Each message is a speech bubble (the agent, its role, its text, its answer) with a tag beside it:

* in a training run's logged episodes, the **credit** the run gave it (its advantage, shaded as in
  the transcript browser: green helped, red blamed);
* in an evaluation run with ``withhold_messages``, the **withholding effect** (``withheld_mark``):
  whether the team's final answer changes when this message is withheld, and to what; "needed"
  when the team was right with it and wrong without it, "misled" the other way; "not read" when no
  teammate reads it (withholding it cannot change the answer).

Which episodes (``pick_dialogues``, at most ``DIALOGUES`` per input): for an evaluation, those whose
withholding changed the answer first (team right before wrong), then the rest in file order; for a
run, the episodes of its last logged step, team right first. Every string is escaped (``esc``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from teamplay.records import Message
from teamplay.report.analysis import SUCCESS, advantage_scale, shade
from teamplay.report.data import LoggedEpisode
from teamplay.report.markup import MISSING, esc, fmt, fmt_signed, note

DIALOGUES = 3
"""Dialogues shown per report input."""

TEXT_LIMIT = 700
"""Characters of a message shown in a bubble (the transcript browser has the whole text)."""

CSS = """
.dialogues { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 14px; }
figure.dialogue { margin: 0; background: var(--card); border: 1px solid var(--line); border-radius: 10px;
                  padding: 12px 14px; }
figure.dialogue figcaption { display: flex; flex-wrap: wrap; gap: 8px; align-items: baseline; margin-bottom: 10px;
                             font-size: 12.5px; }
figure.dialogue ol { list-style: none; padding: 0; margin: 0; display: flex; flex-direction: column; gap: 8px; }
li.bubble { max-width: 88%; border-radius: 12px; padding: 6px 10px; border: 1px solid var(--line); }
li.bubble.side-0 { align-self: flex-start; border-bottom-left-radius: 2px; background: #f8fafc; }
li.bubble.side-1 { align-self: flex-end; border-bottom-right-radius: 2px; background: #eff6ff; }
li.bubble .who { font-size: 12px; display: flex; gap: 6px; align-items: baseline; flex-wrap: wrap; }
li.bubble .who .spacer { flex: 1; }
li.bubble p.say { margin: 3px 0 0; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 13px; }
.held { font-weight: 700; font-size: 11.5px; padding: 0 7px; border-radius: 999px; background: #fff; }
.held.changed { color: #92400e; border: 1px solid #f59e0b; } .held.same, .held.unread { color: var(--muted); }
.held.needed { color: var(--bad); border: 1px solid var(--bad); }
.held.misled { color: var(--ok); border: 1px solid var(--ok); }
"""


def withheld_mark(entry: Mapping[str, Any] | None) -> str:
    """The tag of one message's withholding effect (empty for None: nothing was withheld); its
    ``data-withheld`` is ``changed``, ``same`` or ``unread``."""
    if entry is None:
        return ""
    if not entry.get("replayed", True):
        return ('<span class="held unread" data-withheld="unread" title="no teammate reads this message: '
                'withholding it cannot change the answer">not read</span>')
    if not entry.get("changed"):
        return ('<span class="held same" data-withheld="same" title="withheld, the team gives the same '
                'final answer">withheld: same answer</span>')
    answer = entry.get("answer")
    shown = esc(answer) if answer is not None else "no answer"
    mark = (f'<span class="held changed" data-withheld="changed" title="withheld, the team\'s final answer '
            f'changes">withheld: answer → {shown}</span>')
    before, after = bool(entry.get("right_before")), bool(entry.get("right_after"))
    if before and not after:
        mark += ('<span class="held needed" title="the team was right with this message and wrong without '
                 'it">needed</span>')
    elif after and not before:
        mark += ('<span class="held misled" title="the team was wrong with this message and right without '
                 'it">misled</span>')
    return mark


def _changed(logged: LoggedEpisode) -> int:
    return sum(bool(e and e.get("changed")) for e in logged.withheld or ())


def pick_dialogues(episodes: Sequence[LoggedEpisode], limit: int = DIALOGUES) -> list[LoggedEpisode]:
    """The episodes the picture shows (module docstring), at most ``limit``."""
    if any(e.advantages is not None for e in episodes):
        last = max((e.step for e in episodes if e.step is not None), default=None)
        pool = [e for e in episodes if e.advantages is not None and e.step == last]
        return sorted(pool, key=lambda e: e.episode.reward <= SUCCESS)[:limit]
    order = sorted(range(len(episodes)), key=lambda i: (_changed(episodes[i]) == 0,
                                                          episodes[i].episode.reward <= SUCCESS, i))
    return [episodes[i] for i in order[:limit]]


def _bubble(msg: Message, side: int, tag: str, background: str | None) -> str:
    """One message as a speech bubble; ``background`` (a credit shade) replaces its side's colour."""
    if not msg.spoke:
        text = '<p class="say muted">(skipped its turn)</p>'
    else:
        shown = msg.text if len(msg.text) <= TEXT_LIMIT else msg.text[:TEXT_LIMIT] + " …"
        text = f'<p class="say">{esc(shown)}</p>' if shown else '<p class="say muted">(empty message)</p>'
    answer = f'<code class="answer">{esc(msg.answer)}</code>' if msg.answer is not None else ""
    style = f' style="background: {background}"' if background is not None else ""
    return (f'<li class="bubble side-{side}"{style}>'
            f'<div class="who"><span class="agent">{esc(msg.agent)}</span><span class="role">{esc(msg.role)}</span>'
            f'{answer}<span class="spacer"></span>{tag}</div>{text}</li>')


def dialogue(logged: LoggedEpisode) -> str:
    """One episode as a ``<figure class="dialogue">``: a caption (problem, verdict, final answer,
    reference) and one bubble per message, agents alternating sides in order of first appearance."""
    ep = logged.episode
    scale = advantage_scale(logged.advantages)
    sides = {a: i % 2 for i, a in enumerate(dict.fromkeys(m.agent for m in ep.messages))}
    bubbles = []
    for t, m in enumerate(ep.messages):
        if logged.advantages is not None:
            adv = logged.advantages[t]
            background, _ = shade(adv, scale)
            sign = "pos" if adv > 0 else "neg" if adv < 0 else "zero"
            tag = (f'<span class="adv {sign}" title="advantage the credit gave this message">'
                   f'credit {fmt_signed(adv)}</span>')
        else:
            background = None
            tag = withheld_mark(logged.withheld[t] if logged.withheld is not None else None)
        bubbles.append(_bubble(m, sides[m.agent], tag, background))
    right = ep.reward > SUCCESS
    verdict = f'<span class="verdict {"right" if right else "wrong"}">{"✓ right" if right else "✗ wrong"}</span>'
    final = esc(ep.final_answer) if ep.final_answer is not None else MISSING
    reference = f" · reference <code>{esc(logged.reference)}</code>" if logged.reference is not None else ""
    step = f" · step {fmt(logged.step)}" if logged.step is not None else ""
    caption = (f"<figcaption>{verdict}<code>{esc(ep.problem_id)}</code><span>final answer "
               f"<code>{final}</code>{reference}{step}</span></figcaption>")
    return f'<figure class="dialogue">{caption}<ol>{"".join(bubbles)}</ol></figure>'


def dialogue_section(sources: Sequence[tuple[str, Sequence[LoggedEpisode]]]) -> str:
    """The picture for each labelled input (``pick_dialogues``), with a note on how to read it."""
    parts, credited, withheld = [], False, False
    for label, episodes in sources:
        shown = pick_dialogues(episodes)
        if not shown:
            continue
        credited |= any(e.advantages is not None for e in shown)
        withheld |= any(e.withheld is not None for e in shown)
        heading = f'<h3 class="muted">{esc(label)}</h3>' if len(sources) > 1 else ""
        parts.append(heading + '<div class="dialogues">' + "".join(dialogue(e) for e in shown) + "</div>")
    if not parts:
        return '<p class="empty">No dialogues: no episodes were logged or evaluated.</p>'
    notes = []
    if credited:
        notes.append("Training episodes of the last logged step: each message carries the advantage the credit "
                     "method gave it (green = credited with helping, red = blamed).")
    if withheld:
        notes.append("Evaluation episodes: each message says whether the team's final answer changes when that "
                     "message is withheld (teammates read '(no message)' and the rest is played again); 'needed' "
                     "= right with it, wrong without it; 'not read' = no teammate reads it.")
    elif not credited:
        notes.append("These evaluation transcripts were run without withhold_messages, so messages carry no "
                     "withholding effect (teamplay eval --set withhold_messages=true).")
    return "".join(parts) + "".join(note(n) for n in notes)
