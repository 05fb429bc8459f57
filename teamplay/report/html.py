"""The self-contained report page: one HTML file, inline CSS and JS, figures as data URIs.

``render_page`` lays out the sections for one input (a run or an eval folder) or two (a
comparison): summary, training curves, credit (share per role, mean advantage, free riders),
controllers, evaluation metrics, transcripts and configs. The page needs no network: it loads
from ``file://`` anywhere. A Content-Security-Policy allows only the page's own script (by hash),
inline styles and ``data:`` images, so even a string that escaped ``esc`` could not run code.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from teamplay.report.analysis import FREE_RIDER_THRESHOLD, agent_credit
from teamplay.report.data import EvalData, RunData, is_number
from teamplay.report.dialogue import CSS as DIALOGUE_CSS
from teamplay.report.dialogue import dialogue_section
from teamplay.report.markup import MISSING, esc, fmt, fmt_signed, note, table
from teamplay.report.plots import PALETTE, Plot
from teamplay.report.transcripts import BROWSER_SCRIPT, transcript_browser
from teamplay.report.warm_start import WarmStartLog, load_warm_start
from teamplay.training.play.evaluation import EvalMetrics

Input = RunData | EvalData


@dataclass(frozen=True)
class Figures:
    """The figures of a page, by section (each list in display order)."""

    training: Sequence[Plot]
    credit: Sequence[Plot]
    controllers: Plot | None
    evaluation: Plot | None
    #: the warm start's loss curve (runs with a warm start only)
    warm_start: Plot | None = None


CSS = """
:root { --ink: #0f172a; --muted: #64748b; --line: #e2e8f0; --bg: #f1f5f9; --card: #ffffff;
        --accent: #0072B2; --ok: #15803d; --bad: #b91c1c; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
       font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif; }
header.page { background: var(--ink); color: #f8fafc; padding: 22px 32px 18px; }
header.page h1 { margin: 0 0 6px; font-size: 22px; font-weight: 650; letter-spacing: -0.01em; }
header.page .sources { display: flex; flex-wrap: wrap; gap: 8px 18px; color: #cbd5e1; font-size: 13px; }
header.page .source b { color: #f8fafc; font-weight: 600; }
header.page .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
nav { position: sticky; top: 0; z-index: 5; background: rgba(255,255,255,0.95); border-bottom: 1px solid var(--line);
      padding: 8px 32px; display: flex; gap: 18px; font-size: 13px; }
nav a { color: var(--muted); text-decoration: none; }
nav a:hover { color: var(--accent); }
main { max-width: 1340px; margin: 0 auto; padding: 8px 24px 48px; }
section { margin-top: 26px; }
section > h2 { font-size: 17px; margin: 0 0 10px; font-weight: 650; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 12px; }
.card, .figure, .panel { background: var(--card); border: 1px solid var(--line); border-radius: 10px; }
.card { padding: 12px 14px; }
.card .label { color: var(--muted); font-size: 12px; }
.card .value { font-size: 22px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .sub { color: var(--muted); font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 14px; }
.figure { padding: 12px 14px; margin: 0; }
.figure h3 { margin: 0 0 4px; font-size: 14px; }
.figure img { width: 100%; height: auto; display: block; }
.figure figcaption, .note { color: var(--muted); font-size: 12.5px; margin: 6px 0 0; }
.figure.missing { display: flex; flex-direction: column; justify-content: center; min-height: 120px; }
.panel { padding: 14px 16px; overflow-x: auto; }
.gap { margin-top: 14px; }
.panel h3, .figure h3 { margin: 0 0 6px; font-size: 14px; }
.figure table { width: 100%; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { text-align: left; padding: 5px 12px 5px 0; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
td.num, th.num { text-align: right; }
tr.flag td { background: #fef3c7; }
.tag { display: inline-block; padding: 0 7px; border-radius: 999px; font-size: 11.5px; font-weight: 600; }
.tag.warn { background: #fde68a; color: #78350f; }
.tag.fine { background: #dcfce7; color: #14532d; }
.muted { color: var(--muted); }
.empty { color: var(--muted); font-style: italic; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
code.answer { background: #eef2ff; color: #3730a3; padding: 0 5px; border-radius: 4px; }
.ok { color: var(--ok); font-weight: 700; }
.bad { color: var(--bad); font-weight: 700; }
.better { color: var(--ok); }
.worse { color: var(--bad); }
details.config pre { max-height: 420px; overflow: auto; background: #f8fafc; padding: 10px; border-radius: 8px; }
.browser { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 16px 16px; }
.browser-controls { display: flex; flex-wrap: wrap; align-items: center; gap: 8px; padding-bottom: 10px;
                    border-bottom: 1px solid var(--line); }
.browser-controls select#episode-select { min-width: 420px; max-width: 640px; }
.browser-controls button, .browser-controls select { font: inherit; padding: 4px 10px; border: 1px solid #cbd5e1;
                    border-radius: 6px; background: #fff; color: var(--ink); }
.browser-controls button { cursor: pointer; }
.browser-controls button:hover { border-color: var(--accent); color: var(--accent); }
.browser-controls .filter { margin-left: auto; color: var(--muted); }
.episode-head { display: flex; align-items: center; gap: 10px; margin: 12px 0 10px; }
.episode-head h3 { margin: 0; font-size: 15px; font-family: ui-monospace, Menlo, "DejaVu Sans Mono", monospace;
                   overflow-wrap: anywhere; }
.verdict { padding: 2px 10px; border-radius: 999px; font-weight: 700; font-size: 12.5px; }
.verdict.right { background: #dcfce7; color: #14532d; }
.verdict.wrong { background: #fee2e2; color: #7f1d1d; }
.reward { color: var(--muted); font-variant-numeric: tabular-nums; }
.episode-body { display: grid; grid-template-columns: minmax(260px, 330px) 1fr; gap: 18px; }
.episode-side dl.facts { display: grid; grid-template-columns: auto 1fr; gap: 3px 10px; margin: 0 0 12px;
                         font-size: 12.5px; }
.episode-side dt { color: var(--muted); }
.episode-side dd { margin: 0; overflow-wrap: anywhere; }
.episode-side table { width: 100%; }
.agent { font-weight: 650; }
.role { color: var(--muted); font-size: 12px; }
.legend { display: flex; align-items: center; gap: 8px; font-size: 12px; margin-bottom: 8px; }
.legend .scale { width: 160px; height: 10px; border-radius: 3px;
                 background: linear-gradient(90deg, rgba(220,38,38,0.9), rgba(255,255,255,1), rgba(22,163,74,0.9)); }
ol.messages { list-style: none; padding: 0; margin: 0; display: flex; flex-direction: column; gap: 8px; }
li.msg { border: 1px solid var(--line); border-left: 5px solid; border-radius: 8px; padding: 8px 12px; }
.msg-head { display: flex; flex-wrap: wrap; align-items: baseline; gap: 8px; font-size: 12.5px; margin-bottom: 4px; }
.msg-head .turn { color: var(--muted); font-variant-numeric: tabular-nums; }
.msg-head .stage { color: var(--muted); }
.msg-head .spacer { flex: 1; }
.adv { font-variant-numeric: tabular-nums; font-weight: 700; padding: 0 8px; border-radius: 999px; background: #fff; }
.adv.pos { color: var(--ok); } .adv.neg { color: var(--bad); } .adv.zero, .adv.none { color: var(--muted); }
.adv.tokens { color: var(--muted); margin-left: 6px; } pre.tokens .tok { border-radius: 2px; }
pre.text { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; font: 13px/1.5 ui-monospace, Menlo,
           "DejaVu Sans Mono", monospace; max-height: 460px; overflow-y: auto; }
details.prompt { margin-bottom: 10px; background: #f8fafc; border: 1px solid var(--line); border-radius: 8px;
                 padding: 6px 10px; }
details.prompt summary { cursor: pointer; color: var(--muted); font-size: 12.5px; }
.skipped { font-style: italic; color: var(--muted); margin: 0; }
"""


def _script_hash(script: str) -> str:
    return base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def _csp(script: str) -> str:
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
            f"script-src 'sha256-{_script_hash(script)}'; base-uri 'none'; form-action 'none'")


def data_uri(plot: Plot) -> str:
    """The PNG of ``plot`` as a ``data:image/png;base64,...`` URI (``plot.path`` must be set)."""
    assert plot.path is not None, "only drawn plots have an image"
    return "data:image/png;base64," + base64.b64encode(plot.path.read_bytes()).decode("ascii")


def figure(plot: Plot) -> str:
    """A drawn plot as <figure> with its caption; an undrawn one as a card saying why."""
    if plot.path is None:
        return (f'<figure class="figure missing" id="fig-{esc(plot.key)}"><h3>{esc(plot.title)}</h3>'
                f'<p class="empty">{esc(plot.note)}</p></figure>')
    caption = f"<figcaption>{esc(plot.note)}</figcaption>" if plot.note else ""
    return (f'<figure class="figure" id="fig-{esc(plot.key)}"><h3>{esc(plot.title)}</h3>'
            f'<img alt="{esc(plot.title)}" src="{data_uri(plot)}">{caption}</figure>')


def _config_value(config, *keys: str) -> str | None:
    node = config
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return None if node is None else str(node)


def _describe(data: Input) -> list[tuple[str, str]]:
    """(name, value) facts of an input for the header, from its config."""
    cfg = data.config
    facts = [("kind", "training run" if isinstance(data, RunData) else "evaluation")]
    task = _config_value(cfg, "task", "name")
    if task:
        facts.append(("task", f"{task}/{_config_value(cfg, 'task', 'split') or '?'}"))
    for name, path in (("protocol", ("protocol", "name")), ("credit", ("credit", "method")),
                       ("objective", ("objective", "name")), ("model", ("model", "name"))):
        value = _config_value(cfg, *path)
        if value and (name not in ("credit", "objective") or isinstance(data, RunData)):
            facts.append((name, value))
    if _config_value(cfg, "backend", "name") == "scripted":  # no model ran: its unused default is not news
        policy = _config_value(cfg, "backend", "policy")
        facts = [f for f in facts if f[0] != "model"] + [("backend", f"scripted ({policy})" if policy else "scripted")]
    if isinstance(data, RunData):
        facts.append(("steps", str(len(data.steps))))
    else:
        facts.append(("episodes", str(data.metrics.episodes)))
    return facts


def _header(title: str, inputs: Sequence[tuple[str, Input]]) -> str:
    sources = []
    for i, (label, data) in enumerate(inputs):
        swatch = (f'<span class="swatch" style="background: {PALETTE[i]}"></span>' if len(inputs) > 1 else "")
        facts = " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in _describe(data))
        sources.append(f'<div class="source">{swatch}<b>{esc(label)}</b> — {facts}</div>')
    return f'<header class="page"><h1>{esc(title)}</h1><div class="sources">{"".join(sources)}</div></header>'


def _card(label: str, value: str, sub: str = "") -> str:
    sub_html = f'<div class="sub">{esc(sub)}</div>' if sub else ""
    return (f'<div class="card"><div class="label">{esc(label)}</div>'
            f'<div class="value">{esc(value)}</div>{sub_html}</div>')


def _summary_cards(label: str, data: Input) -> str:
    cards = []
    if isinstance(data, RunData):
        last = data.steps[-1] if data.steps else None
        cards.append(_card("steps logged", str(len(data.steps)),
                           f"last step {last.step}" if last else "no training step yet"))
        if last is not None:
            cards.append(_card("team reward (last step)", fmt(last.get("reward_mean")),
                               f"first step {fmt(data.steps[0].get('reward_mean'))}"))
        before, after = data.initial_heldout, data.final_heldout
        if after is not None:
            sub = f"before training {fmt(before.team_accuracy)}" if before is not None and before is not after else ""
            cards.append(_card("held-out accuracy", fmt(after.team_accuracy), sub))
        tokens = [s.get("tokens") for s in data.steps if s.get("tokens") is not None]
        if tokens:
            cards.append(_card("tokens / step", fmt(sum(tokens) / len(tokens), 0), "mean over steps"))
        seconds = [s.get("seconds") for s in data.steps if s.get("seconds") is not None]
        if seconds:
            cards.append(_card("wall time", f"{sum(seconds) / 60:.1f} min",
                               f"{sum(seconds) / len(seconds):.1f} s/step"))
        riders = [a for a in agent_credit(data.episodes) if a.free_rider]
        cards.append(_card("free riders", str(len(riders)), ", ".join(a.agent for a in riders) or "none flagged"))
    else:
        m = data.metrics
        cards.append(_card("team accuracy", fmt(m.team_accuracy), f"{m.episodes} episodes"))
        for key, value in m.lm_eval.items():
            cards.append(_card(f"lm-eval {key}", fmt(value), "lm-eval 0.4.13 definition, not teamplay's verifier"))
        cards.append(_card("any agent right", fmt(m.any_agent_right)))
        cards.append(_card("wrong → right", fmt(m.wrong_to_right), f"right → wrong {fmt(m.right_to_wrong)}"))
        cards.append(_card("tokens / problem", fmt(m.tokens_per_problem, 1), f"{fmt(m.calls_per_problem, 2)} calls"))
        cards.append(_card("wall time", f"{m.seconds:.1f} s", f"{fmt(m.tokens_per_second, 1)} tokens/s"))
    return f'<div class="cards" aria-label="summary of {esc(label)}">{"".join(cards)}</div>'


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{body}</section>'


def _grid(items: Sequence[Plot | str]) -> str:
    """Figures (and ready-made cards) in a two-column grid."""
    return f'<div class="grid">{"".join(figure(i) if isinstance(i, Plot) else i for i in items)}</div>'


# ------------------------------------------------------------------------------- tables
#: prefix of the rows of lm-evaluation-harness-compatible scores (not teamplay's own accuracy)
LM_EVAL_LABEL = "lm-eval 0.4.13 compatible:"
EVAL_ROWS = (("team_accuracy", "team accuracy", True), ("any_agent_right", "any agent right", True),
             ("initial_accuracy", "initial accuracy (after round 1)", True),
             ("wrong_to_right", "wrong → right", True), ("right_to_wrong", "right → wrong", False),
             ("tokens_per_problem", "tokens / problem", False), ("calls_per_problem", "model calls / problem", False),
             ("seconds", "wall time (s)", None), ("tokens_per_second", "tokens / s", None))
"""(EvalMetrics field, label, True if higher is better / False if lower is / None if neither)."""


def _delta(a: float | None, b: float | None, higher_better: bool | None) -> str:
    if a is None or b is None:
        return MISSING
    d = b - a
    if higher_better is None or d == 0:
        return fmt_signed(d)
    good = (d > 0) == higher_better
    return f'<span class="{"better" if good else "worse"}">{fmt_signed(d)}</span>'


def _eval_row_spec(roles: list[str], lm_eval_keys: Sequence[str] = ()
                   ) -> list[tuple[str, Callable[[EvalMetrics], float | None], bool | None]]:
    """(label, value getter, higher-is-better) per row: team accuracy, each role's accuracy, the rest."""
    def field(name: str) -> Callable[[EvalMetrics], float | None]:
        return lambda m: getattr(m, name)

    def role_accuracy(role: str) -> Callable[[EvalMetrics], float | None]:
        return lambda m: m.role_accuracy.get(role)

    def lm_eval(key: str) -> Callable[[EvalMetrics], float | None]:
        return lambda m: m.lm_eval.get(key)

    (first, first_label, first_better), *rest = EVAL_ROWS
    spec = [(first_label, field(first), first_better)]
    # lm-eval-compatible scores sit right under teamplay's accuracy, labelled as lm-eval's
    spec += [(f"{LM_EVAL_LABEL} {key}", lm_eval(key), True) for key in lm_eval_keys]
    spec += [(f"{role} accuracy", role_accuracy(role), True) for role in roles]
    spec += [(label, field(name), better) for name, label, better in rest]
    spec.append(("episodes", field("episodes"), None))
    return spec


def eval_table(columns: Sequence[tuple[str, EvalMetrics | None]]) -> str:
    """Accuracy, cost and correction metrics with one column per evaluation (``—`` where an input
    has none) and, for exactly two columns, their difference (second − first; green = better)."""
    roles: dict[str, None] = {}
    lm_eval_keys: dict[str, None] = {}
    for _, m in columns:
        if m is not None:
            roles.update(dict.fromkeys(m.role_accuracy))
            lm_eval_keys.update(dict.fromkeys(m.lm_eval))
    rows: list[list[str]] = []
    for label, getter, better in _eval_row_spec(list(roles), list(lm_eval_keys)):
        values = [getter(m) if m is not None else None for _, m in columns]
        row = [esc(label)] + [fmt(v) for v in values]
        if len(columns) == 2:
            row.append(_delta(values[0], values[1], better))
        rows.append(row)
    headers = ["metric"] + [label for label, _ in columns] + (["difference"] if len(columns) == 2 else [])
    return table(headers, rows, "metrics")


#: (path of keys into ``EvalMetrics.extra["cooperation"]``, label) of the cooperation table's number rows
COOPERATION_ROWS = ((("corrections_per_message",), "corrections / message"),
                    (("harms_per_message",), "harms / message"),
                    (("chances",), "messages that could change the answer"),
                    (("best_member_accuracy",), "best member alone"),
                    (("team_minus_best_member",), "team − best member"),
                    (("withholding", "information_use"), "information use (answer changes without a message)"),
                    (("withholding", "right_to_wrong"), "right → wrong without a message (needed)"),
                    (("withholding", "wrong_to_right"), "wrong → right without a message (misled)"),
                    (("withholding", "messages"), "messages withheld"),
                    (("withholding", "extra_tokens_per_problem"), "withholding: extra tokens / problem"),
                    (("self_consistency", "accuracy"), "self-consistency: one agent, same tokens, vote"),
                    (("self_consistency", "single_sample_accuracy"), "self-consistency: one sample"),
                    (("self_consistency", "samples_per_problem"), "self-consistency: samples / problem"),
                    (("self_consistency", "tokens_per_problem"), "self-consistency: tokens / problem"))


def _dig(value: Any, path: Sequence[str]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def cooperation_table(columns: Sequence[tuple[str, EvalMetrics | None]]) -> str:
    """The cooperation metrics (``extra["cooperation"]``), one column per evaluation; a row no
    column has is left out, a value one column lacks is ``—``. Information use per role follows
    the overall row when the evaluation withheld messages."""
    coops = [m.extra.get("cooperation", {}) if m is not None else {} for _, m in columns]
    def cell(path: Sequence[str], value: Any) -> str:
        if not is_number(value):
            return MISSING
        return fmt_signed(value) if path == ("team_minus_best_member",) else fmt(value)

    rows = []
    for path, label in COOPERATION_ROWS:
        if any(_dig(c, path) is not None for c in coops):
            rows.append([esc(label)] + [cell(path, _dig(c, path)) for c in coops])
        if path == ("withholding", "information_use"):
            roles = dict.fromkeys(r for c in coops for r in (_dig(c, ("withholding", "per_role")) or {}))
            rows += [[f"&nbsp;&nbsp;{esc(role)}"] + [cell(path, _dig(c, ("withholding", "per_role", role,
                                                                           "information_use"))) for c in coops]
                     for role in roles]
    if any("best_member" in c for c in coops):
        rows.append(["best member"] + [esc(str(c.get("best_member", MISSING))) for c in coops])
    return table(["metric"] + [label for label, _ in columns], rows, "cooperation")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


TRAIN_ROWS = (("reward_mean", "team reward", True), ("accuracy", "rollout accuracy", True),
              ("kl", "KL", None), ("clip_fraction", "clip fraction", None), ("entropy", "entropy", None),
              ("grad_norm", "grad norm", None), ("tokens", "tokens / step", False),
              ("seconds", "seconds / step", False))


def _group_share_row(runs, key: str, label: str, compare: bool) -> list[str]:
    """A summary row: per run, the share of its training groups counted under ``key`` over all its
    steps ("0.25 (3 of 12)"), laid out as the table's other rows (compare: two runs and two blanks)."""
    cells = []
    for _, r in runs:
        counted = sum(s.get(key) or 0 for s in r.steps)
        groups = sum(s.get("groups") or 0 for s in r.steps)
        cells.append(f"{fmt(counted / groups)} ({fmt(int(counted))} of {fmt(int(groups))})" if groups else MISSING)
    return [label, *cells, "", "", ""] if compare else [label, "", "", cells[0]]


def training_table(runs: Sequence[tuple[str, RunData]]) -> str:
    """Training metrics of one run (first step, last step, mean over steps) or of two runs (last
    step and mean of each, and the difference of the last steps: second − first)."""
    def series(run: RunData, name: str) -> list[float]:
        return [s.scalars[name] for s in run.steps if name in s.scalars]

    compare = len(runs) == 2
    rows: list[list[str]] = []
    for name, label, better in TRAIN_ROWS:
        values = [series(r, name) for _, r in runs]
        if not any(values):
            continue  # not logged by any run (KL without a KL term)
        lasts = [v[-1] if v else None for v in values]
        if compare:
            rows.append([esc(label), fmt(lasts[0]), fmt(lasts[1]), _delta(lasts[0], lasts[1], better),
                         fmt(_mean(values[0])), fmt(_mean(values[1]))])
        else:
            rows.append([esc(label), fmt(values[0][0]), fmt(lasts[0]), fmt(_mean(values[0]))])
    rows.append(_group_share_row(runs, "zero_variance_groups", "groups with equal rewards", compare))
    if any(s.get("stale_groups_dropped") is not None for _, r in runs for s in r.steps):  # asynchronous rollouts
        rows.append(_group_share_row(runs, "stale_groups_dropped", "groups dropped as stale (rollout.max_staleness)",
                                     compare))
    rows.insert(0, ["steps", *(fmt(len(r.steps)) for _, r in runs), "", "", ""] if compare
                else ["steps", "", fmt(len(runs[0][1].steps)), ""])
    if compare:
        (a, _), (b, _) = runs
        headers = ["metric", f"{a} (last)", f"{b} (last)", "difference", f"{a} (mean)", f"{b} (mean)"]
    else:
        headers = ["metric", "first step", "last step", "mean over steps"]
    return table(headers, rows, "metrics")


def free_rider_table(label: str, run: RunData, threshold: float = FREE_RIDER_THRESHOLD) -> str:
    """Per agent: mean advantage in successful episodes, flagged when |mean| < ``threshold``."""
    credit = agent_credit(run.episodes, threshold)
    if not credit:
        return note(f"{label}: no credited episodes were logged, so there is no per-agent credit to show.")
    rows, classes = [], []
    for a in credit:
        if a.mean_success is None:
            status = '<span class="muted">no evidence</span>'
        elif a.free_rider:
            status = '<span class="tag warn">free rider?</span>'
        else:
            status = '<span class="tag fine">credited</span>'
        rows.append([f'<span class="agent">{esc(a.agent)}</span><br><span class="role">{esc(a.role)}</span>',
                     f"{fmt(a.successes)} / {fmt(a.episodes)}", fmt_signed(a.mean_success),
                     fmt_signed(a.mean_failure), status])
        classes.append("flag" if a.free_rider else "")
    headers = ["agent", "team right", "mean adv when right", "mean adv when wrong", ""]
    return table(headers, rows, "free-riders", classes)


def _config_block(label: str, data: Input) -> str:
    text = yaml.safe_dump(dict(data.config), sort_keys=False, allow_unicode=True) if data.config else "(no config)"
    return (f'<details class="config panel"><summary><b>{esc(label)}</b> — {esc(data.path)}</summary>'
            f"<pre>{esc(text)}</pre></details>")


# --------------------------------------------------------------------------------- page
def _titled(label: str, show: bool) -> str:
    return f'<h3 class="muted">{esc(label)}</h3>' if show else ""


def _card_panel(title: str, body: str) -> str:
    """A grid item holding a table (or text) instead of a figure, so tables sit beside plots."""
    return f'<div class="figure"><h3>{esc(title)}</h3>{body}</div>'


def _summary_section(inputs: Sequence[tuple[str, Input]], figures: Figures) -> str:
    return "".join(_titled(label, len(inputs) > 1) + _summary_cards(label, d) for label, d in inputs)


def _credit_section(runs: Sequence[tuple[str, RunData]], figures: Figures) -> str:
    riders = "".join(_titled(label, len(runs) > 1) + free_rider_table(label, r) for label, r in runs)
    rider_note = note(
        f"An agent is flagged when the mean advantage of its messages in the logged episodes where the team "
        f"was right (reward > 0.5) has |mean| < {FREE_RIDER_THRESHOLD}: the team succeeded, but the credit "
        f"layer saw no contribution from it. Computed over the logged (credited) episodes only.")
    return _grid([*figures.credit, _card_panel("Free riders", riders + rider_note)])


def _controllers_section(runs: Sequence[tuple[str, RunData]], figures: Figures) -> str:
    if figures.controllers is None or figures.controllers.path is None:
        return '<p class="empty">No controllers: no speak rates were logged (every agent speaks every turn).</p>'
    return _grid([figures.controllers, _card_panel("Speak rate at the last step", _speak_table(runs))])


def _training_section(runs: Sequence[tuple[str, RunData]], figures: Figures) -> str:
    return _grid([*figures.training, _card_panel("Training metrics", training_table(runs))])


def _evaluation_section(inputs: Sequence[tuple[str, Input]], figures: Figures) -> str:
    columns = _eval_columns(inputs)
    if not any(m is not None for _, m in columns):
        return '<p class="empty">No held-out evaluation in this run (eval_task is not set).</p>'
    items: list[Plot | str] = [figures.evaluation] if figures.evaluation is not None else []
    caption = note("Accuracy, cost and correction metrics of each protocol; for a training run, its held-out "
                   "evaluations (greedy decoding). Green / red: the second column is better / worse.")
    items.append(_card_panel("Accuracy, cost and correction", eval_table(columns) + caption))
    if any(m is not None and m.extra.get("cooperation") for _, m in columns):
        items.append(_card_panel("Cooperation", cooperation_table(columns) + note(
            "Per message that could change the team's answer (an earlier round gave one): how often it "
            "turned a wrong answer right or a right one wrong; the team's accuracy against its best member "
            "alone (each agent's own last answer, among the roles whose answer can be the team's). With "
            "withhold_messages: how often the final answer changes when one message is withheld (information "
            "use). With self_consistency: the answering role alone, sampled at the team's tokens, majority vote.")))
    return _grid(items)


def _warm_start_section(runs: Sequence[tuple[str, WarmStartLog]], figures: Figures) -> str:
    """The warm start of each run: its loss curve, its fine-tuning set and the held-out evaluations
    before and after it (``teamplay.training.run.warm_start``)."""
    items: list[Plot | str] = [figures.warm_start] if figures.warm_start is not None else []
    rows = [[esc(label), fmt(log.dataset.get("episodes")), fmt(log.dataset.get("kept")),
             fmt(log.dataset.get("examples")), fmt(log.dataset.get("reward_played")), fmt(len(log.losses))]
            for label, log in runs]
    items.append(_card_panel("Fine-tuning set", table(["run", "episodes", "kept", "messages", "reward played",
                                                       "steps"], rows) + note(
        "Episodes played to build the set (a teacher team's, or the team's own before the reward filter), those "
        "kept, the messages of the warm-started roles in them, and the mean team reward of the episodes played.")))
    for label, log in runs:
        if log.before is not None or log.after is not None:
            items.append(_card_panel(f"{label}: held-out before and after the warm start",
                                     eval_table([("before", log.before), ("after", log.after)])))
    return _grid(items)


def _transcripts_section(inputs: Sequence[tuple[str, Input]], credited: bool) -> str:
    if credited:
        intro = note("Each utterance is shaded by the advantage the credit layer gave it: green = credited with "
                     "helping, red = blamed, stronger = larger |advantage|. ← / → switch episodes. Only credited "
                     "episodes are logged during training (groups whose rewards were all equal carry no signal).")
    else:
        intro = note("Evaluation transcripts are not credited, so utterances are not shaded. ← / → switch episodes.")
    return intro + transcript_browser([(label, d.episodes) for label, d in inputs], credited)


def render_page(title: str, inputs: Sequence[tuple[str, Input]], figures: Figures) -> str:
    """The whole HTML document for ``inputs`` (one, or two for a comparison) and their figures.

    Sections, in order: summary, dialogue (a few episodes with each message's credit or
    withholding effect), credit and controllers (runs only), transcripts, the warm start (runs that
    had one), training curves (runs only), evaluation, configuration. Credit comes first because it
    is what this report shows that a scalar dashboard does not.
    """
    runs = [(label, d) for label, d in inputs if isinstance(d, RunData)]
    sections: list[tuple[str, str, str, str]] = [("summary", "Summary", "Summary",
                                                  _summary_section(inputs, figures))]
    if runs:
        sections.append(("credit", "Credit", "Credit per role", _credit_section(runs, figures)))
        sections.append(("controllers", "Controllers", "Speak/skip controllers", _controllers_section(runs, figures)))
    sections.insert(1, ("dialogue", "Dialogue", "The team talking: what each message was worth",
                        dialogue_section([(label, d.episodes) for label, d in inputs])))
    sections.append(("transcripts", "Transcripts", "Transcripts", _transcripts_section(inputs, bool(runs))))
    warm = [(label, log) for label, d in runs if (log := load_warm_start(d.path)) is not None]
    if warm:
        sections.append(("warm_start", "Warm start", "Warm start before RL", _warm_start_section(warm, figures)))
    if runs:
        sections.append(("training", "Training", "Training curves", _training_section(runs, figures)))
    sections.append(("evaluation", "Evaluation", "Evaluation", _evaluation_section(inputs, figures)))
    sections.append(("config", "Config", "Configuration",
                     "".join(_config_block(label, d) for label, d in inputs)))
    nav = "<nav>" + "".join(f'<a href="#{anchor}">{esc(short)}</a>' for anchor, short, _, _ in sections) + "</nav>"
    body = "".join(_section(anchor, heading, html) for anchor, _, heading, html in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(_csp(BROWSER_SCRIPT))}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{DIALOGUE_CSS}</style></head><body>"
        f"{_header(title, inputs)}{nav}<main>{body}</main>"
        f"<script>{BROWSER_SCRIPT}</script></body></html>\n"
    )


def _eval_columns(inputs: Sequence[tuple[str, Input]]) -> list[tuple[str, EvalMetrics | None]]:
    """Columns of the evaluation table: before/after for a single run, one per input otherwise."""
    if len(inputs) == 1 and isinstance(inputs[0][1], RunData):
        run = inputs[0][1]
        before, after = run.initial_heldout, run.final_heldout
        if before is not None and after is not None and before is not after:
            return [("before training", before), ("after training", after)]
        return [("held-out", after)]
    columns = []
    for label, d in inputs:
        protocol = _config_value(d.config, "protocol", "name")
        heading = f"{label} ({protocol})" if protocol else label
        columns.append((heading, d.metrics if isinstance(d, EvalData) else d.final_heldout))
    return columns


def _speak_table(runs: Sequence[tuple[str, RunData]]) -> str:
    """Speak rate of each controller at the last step that logged it, per run."""
    keys: dict[str, None] = {}
    for _, r in runs:
        for s in r.steps:
            keys.update(dict.fromkeys(s.speak_rate))
    rows = []
    for key in keys:
        values = []
        for _, r in runs:
            logged = [s.speak_rate[key] for s in r.steps if key in s.speak_rate]
            values.append(fmt(logged[-1]) if logged else MISSING)
        rows.append([f"<code>{esc(key)}</code>"] + values)
    headers = ["controller", *(f"{label} (last step)" for label, _ in runs)]
    return table(headers, rows, "speak")
