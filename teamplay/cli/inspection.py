"""``teamplay credit``, ``teamplay report`` and ``teamplay list``: credit on saved episodes and
the methods' cards and fidelity, HTML reports of runs, and what is registered (plugins included)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import typer
from rich.table import Table

from teamplay.cli.app import command, console
from teamplay.cli.tables import listing
from teamplay.config import load_config
from teamplay.errors import TeamplayError
from teamplay.registry import is_plugin_spec


@command("credit")
def credit_command(
    folder: Path | None = typer.Argument(None, help="An eval folder (teamplay eval -o) or a run folder."),
    method: str | None = typer.Option(None, "--method", "-m", help="Credit method (teamplay list) or "
                                                                   "path/to/file.py:function."),
    set_: list[str] = typer.Option([], "--set", help="A method option: --set value=masking"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the rows as JSON lines."),
    limit: int = typer.Option(40, help="Rows to print (all are written with --output)."),
    card: str | None = typer.Option(None, "--card", help="Print a method's card instead (what it estimates, "
                                                         "its assumptions, cost and test): a name or all."),
    check: str | None = typer.Option(None, "--check", help="Measure how far these methods (comma-separated) "
                                                           "follow the true advantage on --config's team and task."),
    config: Path | None = typer.Option(None, "--config", "-c", help="With --check: the training config."),
    problems: int = typer.Option(8, help="With --check: problems played (each by a group of episodes)."),
    group: int = typer.Option(4, help="With --check: episodes per problem."),
    samples: int = typer.Option(8, help="With --check: re-executions per prefix of the true advantage."),
) -> None:
    """Try a credit method on saved episodes: the advantage of every utterance, without training.
    With --card METHOD (or all): what the method estimates, under which assumptions, at what cost.
    With --check METHODS --config CFG: each method's agreement with the true advantage on your team."""
    if check is not None:
        if folder is not None or method is not None or card is not None or config is None:
            raise TeamplayError("credit --check METHODS needs --config CFG and takes no FOLDER, --method or --card")
        _credit_check([m.strip() for m in check.split(",") if m.strip()], config, problems, group, samples)
        return
    if card is not None:
        if folder is not None or method is not None:
            raise TeamplayError("credit --card prints a method's card; it takes no FOLDER or --method")
        from teamplay.credit.audit.cards import render_cards

        typer.echo(render_cards(card))
        return
    if folder is None or method is None:
        raise TeamplayError("credit: give FOLDER and --method to credit saved episodes, or --card METHOD|all")
    from teamplay.config import parse_overrides
    from teamplay.training.experiments.saved_credit import credit_saved

    rows = credit_saved(folder, method, dict(parse_overrides(set_)))
    console.print(credit_table(rows[:limit], f"credit {method} on {folder} ({len(rows)} utterances)", console.width))
    if len(rows) > limit:
        console.print(f"{len(rows) - limit} more rows not shown (--limit {len(rows)} prints them all; "
                      f"--output FILE writes them all as JSON lines)", highlight=False, soft_wrap=True)
    reason = zero_credit_reason(rows, method)
    if reason is not None:
        console.print(reason, highlight=False, markup=False, soft_wrap=True)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
        console.print(f"wrote {output}")


def credit_table(rows, title: str, width: int) -> Table:
    """``UtteranceCredit`` rows as a table of one line a row, fitted to ``width`` columns.

    A message wrapped over ten lines hides the column of advantages, so the text is cut to the
    width the other columns leave; the group ids lose the prefix they all share (named in the title).
    """
    groups = [r.group_id.removesuffix("#eval") for r in rows]
    shared = os.path.commonprefix(groups)
    shared = shared[:shared.rfind("/") + 1]
    if shared:
        title += f", groups {shared}…"
    heads = ("group", "ep", "agent", "stage", "round", "advantage", "reward")
    cells = [(g[len(shared):], str(r.episode), r.agent, r.stage, str(r.round), f"{r.advantage:+.3f}",
              f"{r.reward:.2f}") for g, r in zip(groups, rows, strict=True)]
    used = sum(max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads))
    room = max(12, width - used - 3 * (len(heads) + 1) - 1)  # 3 a column: its padding and border
    table = Table(title=title)
    for head in (*heads, "text"):
        table.add_column(head, justify="right" if head in ("ep", "round", "advantage", "reward") else "left",
                         no_wrap=head != "text")
    for r, row in zip(rows, cells, strict=True):
        text = " ".join((r.text if r.spoke else "(skipped)").split())
        table.add_row(*row, text if len(text) <= room else text[:room - 1] + "…")
    return table


def zero_credit_reason(rows, method: str) -> str | None:
    """Why every advantage of ``rows`` (``UtteranceCredit``s) is 0, or None when one is not.

    Credit is relative to the other episodes of a problem's group: a group of one episode, or one
    whose episodes all got the same reward (all right, or all wrong), holds no contrast to credit.
    A page of +0.000 rows without this line reads as a broken method.
    """
    if not rows or any(r.advantage != 0.0 for r in rows):
        return None
    rewards: dict[str, dict[int, float]] = {}
    for r in rows:
        rewards.setdefault(r.group_id, {})[r.episode] = r.reward
    single = sum(len(group) == 1 for group in rewards.values())
    flat = sum(len(group) > 1 and len(set(group.values())) == 1 for group in rewards.values())
    n = len(rewards)
    if single == n:
        return (f"every advantage is 0: each of the {n} groups holds one episode (an evaluation with samples 1), "
                f"and credit compares a problem's episodes with each other; evaluate with --samples 4 "
                f"--temperature 0.7 to give every problem a group of differing episodes")
    if single + flat == n:
        alone = f" ({single} of one episode)" if single else ""
        return (f"every advantage is 0: in every one of the {n} groups{alone} all episodes got the same reward "
                f"(all right or all wrong), so no group has a contrast to credit; sample at a temperature "
                f"(--temperature 0.7) with more samples per problem (--samples 8), or take an easier task, "
                f"so that some episodes of a problem succeed and others fail")
    return (f"every advantage is 0 although {n - single - flat} of the {n} groups have differing rewards: "
            f"{method} gave these episodes no credit with these options (teamplay credit --card {method})")


def _credit_check(methods: list[str], config: Path, problems: int, group: int, samples: int) -> None:
    """``teamplay credit --check``: the fidelity table of ``methods`` on the config's team and task."""
    from teamplay.config import TrainConfig
    from teamplay.training.experiments.fidelity_check import THRESHOLD, check_fidelity

    if not methods:
        raise TeamplayError("credit --check: name at least one method, e.g. --check grpo,shapley")
    cfg = load_config(TrainConfig, config, [])
    rows, oracle_tokens = check_fidelity(cfg, methods, problems, group, samples, cfg.seed)
    table = Table(title=f"credit fidelity on {config} ({problems} problems x {group}, true advantage from "
                        f"{samples} re-executions per prefix, {oracle_tokens} tokens)")
    for col in ("method", "Pearson r [95% CI]", "within-group r [95% CI]", "Spearman [95% CI]",
                f"sign, |A*| > {THRESHOLD}", "groups kept", "counterfactual tokens"):
        table.add_column(col)

    def ci(x: float, lo_hi: tuple[float, float]) -> str:
        if not math.isfinite(x):
            return "– (constant)"
        return f"{x:.2f} [{lo_hi[0]:.2f}, {lo_hi[1]:.2f}]"

    for r in rows:
        table.add_row(r.method, ci(r.fit.pearson, r.fit.pearson_ci), ci(r.fit.within, r.fit.within_ci),
                      ci(r.fit.spearman, r.fit.spearman_ci),
                      f"{r.fit.sign:.2f} ({r.fit.clear})", str(r.groups), str(r.counterfactual_tokens))
    console.print(table)


@command("report")
def report_command(
    run_dirs: list[Path] = typer.Argument(..., help="Run or eval folder (two with --compare, or one sweep "
                                                    "folder); or any number of federated run folders."),
    compare: bool = typer.Option(False, "--compare", help="Put two runs or evals side by side, or every grid "
                                                          "point of a sweep folder."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Output folder (default RUN/report, "
                                                                    "or ./report-compare)."),
) -> None:
    """Write a self-contained HTML report (curves, credit per role, free riders, transcripts)."""
    from teamplay.report import report_command as write_report

    console.print(f"wrote {write_report(run_dirs, compare, output)}")


@command("list")
def list_command(
    plugin: list[str] = typer.Option([], "--plugin", help="Also list a user's entry: path/to/file.py:name "
                                                          "(a credit method, task or protocol)."),
) -> None:
    """List tasks, protocols and credit methods (and the user files given with --plugin)."""
    from teamplay.credit import CREDIT, credit_methods
    from teamplay.envs.protocols import get_protocol, protocol_names
    from teamplay.envs.protocols.registry import PROTOCOLS
    from teamplay.envs.tasks import TASKS, get_task, task_names

    plugins = _load_plugins(plugin, CREDIT, TASKS, PROTOCOLS)
    tasks = {name: get_task(name) for name in task_names() + plugins["task"]}
    console.print(listing("tasks", ("name", "splits", "how answers are read"),
                          [(_short(name), ", ".join(t.splits), t.answer_instruction) for name, t in tasks.items()]))
    protocols = {name: get_protocol(name) for name in protocol_names() + plugins["protocol"]}
    console.print(listing("protocols", ("name", "description", "traits (what credit methods ask for)"),
                          [(_short(name), _first_line(p.__doc__), ", ".join(sorted(p.traits)) or "-")
                           for name, p in protocols.items()]))
    given = {spec: CREDIT.get(spec) for spec in plugins["credit method"]}
    console.print(listing("credit methods", ("name", "what it does", "needs"),
                          [(name, method.summary, ", ".join(_credit_needs(method)) or "-")
                           for name, method in _credit_rows(credit_methods(), given)]))
    from teamplay.credit.token import token_methods

    console.print(listing("token credit methods (credit.token: after the message method, per role)",
                          ("name", "what it does", "needs"),
                          [(name, tm.summary, ", ".join(sorted(tm.needs)) or "behaviour log-probs")
                           for name, tm in token_methods().items()]))


def _first_line(doc: str | None) -> str:
    """The first line of a docstring ("" without one)."""
    lines = (doc or "").strip().splitlines()
    return lines[0] if lines else ""


def _credit_needs(method) -> list[str]:
    """What a credit method needs: its resources (with its default options) and the protocols it fits."""
    needs = sorted(method.requires(method.options()))
    fitting = method.fitting_protocols()
    if fitting is not None:
        needs.append("protocol " + "/".join(fitting))
    return needs


def _credit_rows(registered: dict, given: dict) -> list[tuple[str, object]]:
    """(shown name, method) of every credit method once: a ``--plugin`` file that registers its method
    under a name (``@register_credit("my_name")``) puts it in ``registered`` too; it is shown there,
    as ``my_name (file.py:function)``, not a second time under the path."""
    rows = {name: (name, method) for name, method in registered.items()}
    for spec, method in given.items():
        same = next((name for name, m in registered.items() if m is method), None)
        if same is None:
            rows[spec] = (_short(spec), method)
        else:
            rows[same] = (f"{same} ({_short(spec)})", method)
    return list(rows.values())


def _short(name: str) -> str:
    """A user entry as ``file.py:name`` (its folder dropped), a built-in name as it is."""
    return Path(name).name if is_plugin_spec(name) else name


def _load_plugins(specs: list[str], *registries) -> dict[str, list[str]]:
    """Sort ``--plugin`` specs by the registry whose check accepts them (credit, task, protocol)."""
    found: dict[str, list[str]] = {r.kind: [] for r in registries}
    for spec in specs:
        if ":" not in spec:
            raise TeamplayError(f"--plugin {spec!r}: expected path/to/file.py:name")
        for registry in registries:
            try:
                registry.load_plugin(spec)
            except TeamplayError:
                continue
            found[registry.kind].append(spec)
            break
        else:
            raise TeamplayError(f"--plugin {spec}: not a credit method, task or protocol")
    return found

