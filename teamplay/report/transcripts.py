"""The transcript browser: every shown episode rendered as a (hidden) panel, a selector to switch.

Each utterance is shaded by its advantage (green positive, red negative, opacity by
|advantage| / the episode's largest |advantage|; see ``analysis.shade``); an uncredited episode
(an eval transcript) is shown neutral with "not credited". The panel also shows the verifier's
verdict (reward, right or wrong), the final answer, and the answer each agent held at the end. An
evaluation run with ``withhold_messages`` marks each message with what withholding it did
(``dialogue.withheld_mark``).

All episodes are rendered here, in Python, with every model string escaped; the page's script
only toggles the ``hidden`` attribute of panels, so no run data ever passes through JavaScript.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from teamplay.records import Message
from teamplay.report.analysis import SUCCESS, advantage_scale, shade
from teamplay.report.data import LoggedEpisode
from teamplay.report.dialogue import withheld_mark
from teamplay.report.markup import MISSING, esc, fmt, fmt_signed, table

MAX_EPISODES = 400
"""Episodes shown per input at most (a long run logs thousands); chosen evenly across the run."""

BROWSER_SCRIPT = """
(() => {
  "use strict";
  const panels = Array.from(document.querySelectorAll("article.episode"));
  const select = document.getElementById("episode-select");
  const filter = document.getElementById("episode-filter");
  const counter = document.getElementById("episode-counter");
  if (!panels.length || !select || !filter || !counter) return;
  const options = Array.from(select.querySelectorAll("option"));
  let visible = panels.map((_, i) => i);
  let current = 0;

  function show(index) {
    current = index;
    panels.forEach((panel, i) => { panel.hidden = i !== index; });
    select.value = String(index);
    const position = visible.indexOf(index);
    counter.textContent = position < 0 ? "" : `${position + 1} / ${visible.length}`;
  }
  function step(delta) {
    if (!visible.length) return;
    const position = visible.indexOf(current);
    const next = position < 0 ? 0 : (position + delta + visible.length) % visible.length;
    show(visible[next]);
  }
  function applyFilter() {
    const wanted = filter.value;
    visible = panels.map((_, i) => i).filter(
      (i) => wanted === "all" || panels[i].dataset.outcome === wanted);
    options.forEach((option) => {
      option.hidden = wanted !== "all" && option.dataset.outcome !== wanted;
    });
    if (!visible.length) {
      panels.forEach((panel) => { panel.hidden = true; });
      counter.textContent = "0 / 0";
      return;
    }
    show(visible.includes(current) ? current : visible[0]);
  }

  select.addEventListener("change", () => show(Number(select.value)));
  filter.addEventListener("change", applyFilter);
  document.getElementById("episode-prev").addEventListener("click", () => step(-1));
  document.getElementById("episode-next").addEventListener("click", () => step(1));
  document.addEventListener("keydown", (event) => {
    const tag = event.target && event.target.tagName;
    if (tag === "SELECT" || tag === "INPUT" || tag === "TEXTAREA") return;
    if (event.key === "ArrowLeft") step(-1);
    if (event.key === "ArrowRight") step(1);
  });
  show(0);
})();
"""


def pick_evenly(episodes: Sequence[LoggedEpisode], limit: int = MAX_EPISODES) -> list[LoggedEpisode]:
    """At most ``limit`` episodes spread evenly over ``episodes`` (first and last always kept),
    in their original order. ``limit`` must be >= 2."""
    if limit < 2:
        raise ValueError(f"pick_evenly: limit must be >= 2, got {limit}")
    n = len(episodes)
    if n <= limit:
        return list(episodes)
    picks = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return [episodes[i] for i in picks]


def _outcome(logged: LoggedEpisode) -> str:
    return "right" if logged.episode.reward > SUCCESS else "wrong"


def _option_text(logged: LoggedEpisode) -> str:
    ep = logged.episode
    mark = "✓" if _outcome(logged) == "right" else "✗"
    step = f"step {logged.step} · " if logged.step is not None else ""
    return f"{step}{ep.problem_id} · {mark} reward {ep.reward:.2f}"


def _verdict(reward: float) -> str:
    right = reward > SUCCESS
    label = "✓ right" if right else "✗ wrong"
    return (f'<span class="verdict {"right" if right else "wrong"}">{label}</span>'
            f'<span class="reward">reward {fmt(reward, 2)}</span>')


def _answer(value: Any) -> str:
    return f'<code class="answer">{esc(value)}</code>' if value is not None else f'<span class="muted">{MISSING}</span>'


def _metadata_rows(metadata: Mapping[str, Any]) -> list[str]:
    """Protocol extras (protocol, initial_answer, verdicts, votes, skipped, ...) as <dt>/<dd>."""
    rows = []
    for key, value in metadata.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        rows.append(f"<dt>{esc(key.replace('_', ' '))}</dt><dd><code>{esc(text)}</code></dd>")
    return rows


def _agent_table(logged: LoggedEpisode) -> str:
    ep = logged.episode
    rows = []
    for agent in ep.agents:
        idx = ep.messages_by(agent)
        role = ep.messages[idx[0]].role if idx else agent.rpartition("_")[0] or agent
        correct = ep.agent_correct.get(agent)
        if correct is None or ep.agent_answers.get(agent) is None:  # no answer: nothing was verified
            check = f'<span class="muted">{MISSING}</span>'
        else:
            check = '<span class="ok">✓</span>' if correct > SUCCESS else '<span class="bad">✗</span>'
        row = [f'<span class="agent">{esc(agent)}</span><br><span class="role">{esc(role)}</span>',
               _answer(ep.agent_answers.get(agent)), check]
        if logged.advantages is not None:
            advs = [logged.advantages[t] for t in idx]
            row.append(fmt_signed(sum(advs)) if advs else MISSING)
        rows.append(row)
    headers = ["agent", "last answer", "verifier"] + (["Σ adv"] if logged.advantages is not None else [])
    return table(headers, rows, "agents")


def _token_body(tokens: tuple[tuple[str, float], ...], scale: float) -> str:
    """The message text with every token shaded by its own advantage (same colour rule as messages,
    scaled by the episode's largest |token advantage|); the advantage is in each span's tooltip."""
    spans = []
    for piece, adv in tokens:
        background, _ = shade(adv, scale)
        spans.append(f'<span class="tok" style="background: {background}" title="{fmt_signed(adv)}">'
                     f'{esc(piece)}</span>')
    return f'<pre class="text tokens">{"".join(spans)}</pre>'


def _message(msg: Message, advantage: float | None, scale: float, index: int,
             tokens: tuple[tuple[str, float], ...] | None = None, token_scale: float = 0.0,
             method: str | None = None, withheld: Mapping[str, Any] | None = None) -> str:
    if advantage is None:
        background, border = shade(0.0, 0.0)
        badge = '<span class="adv none">not credited</span>'
    else:
        background, border = shade(advantage, scale)
        sign = "pos" if advantage > 0 else "neg" if advantage < 0 else "zero"
        by = f" · {esc(method)}" if method else ""
        badge = f'<span class="adv {sign}">adv {fmt_signed(advantage)}{by}</span>'
    answer = f'<span class="msg-answer">answer {_answer(msg.answer)}</span>' if msg.answer is not None else ""
    if msg.spoke and tokens:
        body = _token_body(tokens, token_scale)
        badge += '<span class="adv tokens">token credit</span>'
    elif msg.spoke:
        body = f'<pre class="text">{esc(msg.text)}</pre>' if msg.text else '<p class="muted">(empty message)</p>'
    else:
        body = '<p class="skipped">skipped: the speak/skip controller chose silence</p>'
    tokens = f" · {msg.n_tokens} tokens" if msg.n_tokens else ""
    return (
        f'<li class="msg" style="background: {background}; border-left-color: {border}">'
        f'<div class="msg-head"><span class="turn">#{index + 1}</span>'
        f'<span class="agent">{esc(msg.agent)}</span><span class="role">{esc(msg.role)}</span>'
        f'<span class="stage">{esc(msg.stage)} · round {msg.round}{tokens}</span>'
        f'{answer}<span class="spacer"></span>{withheld_mark(withheld)}{badge}</div>{body}</li>'
    )


def _credit_table(logged: LoggedEpisode) -> str:
    """Which method valued the messages and, for replay-based credit, the counterfactual values
    behind the advantages: one row per replayed coalition (who played, from which message, how a
    removed agent's turns were handled, the mean verifier score over k samples)."""
    credit = logged.credit
    if not credit:
        return ""
    options = ", ".join(f"{k}={v}" for k, v in sorted((credit.get("options") or {}).items()))
    head = (f'<p class="credit">credit: <code>{esc(str(credit.get("method")))}</code>'
            f'{f" <span class=muted>({esc(options)})</span>" if options else ""}</p>')
    values = credit.get("replay_values") or []
    if not values:
        return head
    rows = []
    for v in sorted(values, key=lambda v: (len(v.get("kept", [])), v.get("start") or 0)):
        kept = ", ".join(v.get("kept", [])) or "nobody"
        how = v.get("removal", "")
        if v.get("remove_turn"):
            how = f"turn #{int(v.get('start', 0)) + 1} removed ({how})"
        rows.append([esc(kept), f"#{int(v.get('start', 0)) + 1}", esc(how), fmt(float(v.get("value", 0.0))),
                     str(v.get("samples", ""))])
    caption = ('<p class="muted">replay values: the team\'s verifier score with only these agents playing '
               '(replayed from message #, the earlier messages reused), mean over k samples</p>')
    return head + caption + table(["coalition", "from", "removal", "value", "k"], rows, "replay-values")


def _legend(logged: LoggedEpisode, scale: float) -> str:
    if logged.advantages is None:
        return ('<div class="legend muted">Not credited (an evaluation transcript): messages are not '
                'shaded.</div>')
    if scale == 0:
        return '<div class="legend muted">Every advantage in this episode is 0: nothing is shaded.</div>'
    return (f'<div class="legend"><span>{fmt_signed(-scale)}</span><span class="scale"></span>'
            f'<span>{fmt_signed(scale)}</span><span class="muted">shade = advantage / max |advantage| of '
            f'this episode ({fmt(scale)})</span></div>')


def episode_panel(logged: LoggedEpisode, index: int) -> str:
    """One episode as an ``<article>``: verdict and facts on the left, shaded messages on the right."""
    ep = logged.episode
    scale = advantage_scale(logged.advantages)
    facts = [f"<dt>final answer</dt><dd>{_answer(ep.final_answer)}</dd>"]
    if logged.reference is not None:
        facts.append(f"<dt>reference</dt><dd>{_answer(logged.reference)}</dd>")
    if logged.step is not None:
        facts.append(f"<dt>step</dt><dd>{logged.step}</dd>")
    facts.append(f"<dt>group</dt><dd><code>{esc(ep.group_id)}</code></dd>")
    facts.append(f"<dt>cost</dt><dd>{fmt(ep.tokens)} tokens · {fmt(ep.calls)} calls</dd>")
    facts.extend(_metadata_rows(ep.metadata))
    prompt = ""
    if logged.prompt is not None:
        prompt = (f'<details class="prompt" open><summary>problem</summary>'
                  f'<pre class="text">{esc(logged.prompt)}</pre></details>')
    advantages = logged.advantages
    method = logged.credit.get("method") if logged.credit else None
    tokens = logged.tokens or (None,) * len(ep.messages)
    token_scale = max((abs(a) for row in tokens if row for _, a in row), default=0.0)
    withheld = logged.withheld or (None,) * len(ep.messages)
    messages = "".join(_message(m, advantages[t] if advantages is not None else None, scale, t,
                                tokens[t], token_scale, method, withheld[t])
                       for t, m in enumerate(ep.messages))
    if not ep.messages:
        messages = '<li class="muted">no messages</li>'
    return (
        f'<article class="episode" data-outcome="{_outcome(logged)}" id="episode-{index}"'
        f'{" hidden" if index else ""}>'
        f'<header class="episode-head">{_verdict(ep.reward)}<h3>{esc(ep.problem_id)}</h3></header>'
        f'<div class="episode-body"><aside class="episode-side">'
        f'<dl class="facts">{"".join(facts)}</dl>{_agent_table(logged)}{_credit_table(logged)}</aside>'
        f'<div class="episode-main">{prompt}{_legend(logged, scale)}<ol class="messages">{messages}</ol></div>'
        f"</div></article>"
    )


def transcript_browser(sources: Sequence[tuple[str, Sequence[LoggedEpisode]]], credited: bool) -> str:
    """The browser over the episodes of each labelled source (one per report input).

    ``credited`` says whether the sources are training runs (for the explanatory note). Shows at
    most ``MAX_EPISODES`` per source, and says so when it drops some.
    """
    total = sum(len(eps) for _, eps in sources)
    if total == 0:
        why = ("no episodes were logged (log_episodes = 0, no step has finished, or every group had equal "
               "rewards so none was credited)") if credited else "no transcripts.jsonl in this folder"
        return f'<p class="empty">No transcripts: {esc(why)}.</p>'
    options, panels, notes = [], [], []
    index = 0
    for label, episodes in sources:
        shown = pick_evenly(episodes)
        if len(shown) < len(episodes):
            notes.append(f"{label}: showing {len(shown)} of {len(episodes)} episodes, spread evenly over the run.")
        group = []
        for logged in shown:
            group.append(f'<option value="{index}" data-outcome="{_outcome(logged)}">'
                         f"{esc(_option_text(logged))}</option>")
            panels.append(episode_panel(logged, index))
            index += 1
        if len(sources) > 1:
            options.append(f'<optgroup label="{esc(label)}">{"".join(group)}</optgroup>')
        else:
            options.extend(group)
    controls = (
        '<div class="browser-controls">'
        '<button type="button" id="episode-prev" title="previous (←)">← prev</button>'
        f'<select id="episode-select" aria-label="episode">{"".join(options)}</select>'
        '<button type="button" id="episode-next" title="next (→)">next →</button>'
        '<span id="episode-counter" class="muted"></span>'
        '<label class="filter">show <select id="episode-filter" aria-label="filter by outcome">'
        '<option value="all">all episodes</option><option value="right">team right</option>'
        '<option value="wrong">team wrong</option></select></label></div>'
    )
    extra = "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    return f'<div class="browser" id="transcript-browser">{controls}{extra}{"".join(panels)}</div>'
