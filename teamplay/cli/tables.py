"""The tables the commands print (rich ``Table``s): ``teamplay list``'s listings, a team's evaluation
metrics, a controlled team beside the same team always speaking, a run's held-out figures before and
after training, and a sweep's mean ± 95% CI per grid point."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.table import Table


def listing(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Table:
    """A table of ``teamplay list``: ``columns`` (the first, the name, never wraps) and one row per entry."""
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, no_wrap=i == 0)
    for row in rows:
        table.add_row(*row)
    return table


def controller_table(title: str, mode: str, controlled, always) -> Table:
    """Accuracy, cost and speak rates of a controlled team next to the same team always speaking."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column(mode, justify="right")
    table.add_column("always_speak", justify="right")
    table.add_row("team accuracy", f"{controlled.team_accuracy:.3f}", f"{always.team_accuracy:.3f}")
    table.add_row("tokens / problem", f"{controlled.tokens_per_problem:.1f}", f"{always.tokens_per_problem:.1f}")
    table.add_row("model calls / problem", f"{controlled.calls_per_problem:.2f}",
                  f"{always.calls_per_problem:.2f}")
    rates, base = controlled.extra.get("speak_rate", {}), always.extra.get("speak_rate", {})
    for key in sorted(set(rates) | set(base)):
        shown = (f"{rates[key]:.3f}" if key in rates else "-", f"{base[key]:.3f}" if key in base else "-")
        table.add_row(f"  speak rate {key}", *shown)
    saved = always.tokens_per_problem - controlled.tokens_per_problem
    share = f" ({saved / always.tokens_per_problem:.0%})" if always.tokens_per_problem > 0 else ""
    table.add_row("tokens saved / problem", f"{saved:.1f}{share}", "")
    return table


def metrics_table(title: str, metrics) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("team accuracy (teamplay verifier)", f"{metrics.team_accuracy:.3f}")
    # lm-evaluation-harness-compatible scores of the same completions: compare these, not team
    # accuracy, with published lm-eval numbers (docs/how-to/evaluate.md)
    for key, value in metrics.lm_eval.items():
        table.add_row(f"  lm-eval 0.4.13 {key}", f"{value:.3f}")
    for role, acc in metrics.role_accuracy.items():
        table.add_row(f"  {role} accuracy", f"{acc:.3f}")
    table.add_row("any agent right", f"{metrics.any_agent_right:.3f}")
    table.add_row("initial accuracy", f"{metrics.initial_accuracy:.3f}")
    table.add_row("wrong -> right", f"{metrics.wrong_to_right:.3f}")
    table.add_row("right -> wrong", f"{metrics.right_to_wrong:.3f}")
    team = metrics.extra.get("team", {})
    # a role scored on a piece of its own (relay's informants) answers no part of the team's problem
    # on its own: its first answers judged against the team's would be a meaningless 0
    pieces = set(metrics.extra.get("cooperation", {}).get("piece_roles", ()))
    for role, acc in team.get("first_answer_accuracy", {}).items():
        if role not in pieces:
            table.add_row(f"  {role} first-answer accuracy", f"{acc:.3f}")
    for key, label in (("verdict_accuracy", "review verdict accuracy"),
                       ("wrong_caught", "  wrong answers caught"), ("right_rejected", "  right answers rejected"),
                       ("correction_rate", "correction rate (of wrong)"), ("harm_rate", "harm rate (of right)"),
                       ("toward_majority", "debate: toward majority"),
                       ("away_from_majority", "debate: away from majority")):
        if key in team:
            table.add_row(label, f"{team[key]:.3f}")
    for label, value in cooperation_rows(metrics.extra.get("cooperation", {})):
        table.add_row(label, value)
    table.add_row("tokens / problem", f"{metrics.tokens_per_problem:.1f}")
    table.add_row("model calls / problem", f"{metrics.calls_per_problem:.2f}")
    table.add_row("wall time (s)", f"{metrics.seconds:.1f}")
    table.add_row("tokens / s", f"{metrics.tokens_per_second:.1f}")
    return table


def cooperation_rows(coop: dict) -> list[tuple[str, str]]:
    """(label, value) rows of ``EvalMetrics.extra["cooperation"]`` that are present: per-message
    corrections and harms (with their counts), the best member (of the roles whose answers can be
    the team's) and the team's margin over it, information use by withholding and the
    self-consistency baseline (when the evaluation measured them)."""
    rows = []
    for key, label, count in (("corrections_per_message", "corrections / message", "corrections"),
                              ("harms_per_message", "harms / message", "harms")):
        if key in coop:
            rows.append((label, f"{coop[key]:.3f} ({coop[count]} of {coop['chances']})"))
    if "best_member" in coop:
        rows.append((f"best member alone ({coop['best_member']})", f"{coop['best_member_accuracy']:.3f}"))
        rows.append(("team - best member", f"{coop['team_minus_best_member']:+.3f}"))
    rows += withholding_rows(coop.get("withholding") or {})
    solo = coop.get("self_consistency") or {}
    if solo:
        who = solo["role"] + (f", adapter {solo['adapter']}" if solo.get("adapter") else "")
        rows.append((f"self-consistency ({who}, T={solo['temperature']:g})", f"{solo['accuracy']:.3f}"))
        rows.append(("  samples / problem", f"{solo['samples_per_problem']:.2f}"))
        rows.append(("  its tokens / problem (team's)",
                     f"{solo['tokens_per_problem']:.1f} ({solo['team_tokens_per_problem']:.1f})"))
    return rows


def withholding_rows(held: dict) -> list[tuple[str, str]]:
    """(label, value) rows of ``extra["cooperation"]["withholding"]`` (empty when absent): information
    use overall and per role, right -> wrong and wrong -> right without the message, extra tokens."""
    if not held:
        return []
    rows = [("information use (answer changes without a message)",
             f"{held['information_use']:.3f} ({held['changed']} of {held['messages']})")]
    for role, r in held.get("per_role", {}).items():
        rows.append((f"  {role}", f"{r['information_use']:.3f} ({r['changed']} of {r['messages']})"))
    rows.append(("  right -> wrong without it (needed)", f"{held['right_to_wrong']:.3f}"))
    rows.append(("  wrong -> right without it (misled)", f"{held['wrong_to_right']:.3f}"))
    rows.append(("  withholding: extra tokens / problem", f"{held['extra_tokens_per_problem']:.1f}"))
    return rows


def held_out_table(task: str, before, after) -> Table:
    """A run's held-out figures before and after training (``before`` is ``None`` for a resumed
    run: its first evaluation belongs to the run that started it)."""
    table = Table(title=f"held-out {task}: before and after")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for name in ("team_accuracy", "any_agent_right", "tokens_per_problem", "calls_per_problem"):
        shown = f"{getattr(before, name):.3f}" if before is not None else "(resumed)"
        table.add_row(name.replace("_", " "), shown, f"{getattr(after, name):.3f}")
    return table


def sweep_table(folder, results) -> Table:
    """Each metric's mean ± 95% CI over seeds, one column per grid point (with its seeds done)."""
    table = Table(title=f"sweep {folder}: mean ± 95% CI over seeds")
    table.add_column("metric")
    for label in results.labels:
        table.add_column(f"{label} (n={len(results.seeds_done[label])})", justify="right")
    for metric in results.metrics:
        table.add_row(metric, *(results.cells[label][metric].text() if metric in results.cells[label] else "-"
                                for label in results.labels))
    return table
