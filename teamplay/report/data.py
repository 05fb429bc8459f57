"""Loading a training run folder or an eval folder into typed records for the report.

Two folder kinds are recognised (see ``load_folder``):

* a **run** folder written by ``teamplay train`` (``teamplay/training/run/trainer.py``):
  ``config.yaml``, ``metrics.jsonl`` (one ``{"step": s, ...}`` object per line) and, optionally,
  ``episodes.jsonl`` (one credited episode per line: ``{"step": s, **Episode.to_dict(),
  "advantages": [one float per message]}``, with token-level credit also ``"token_advantages"``
  and ``"token_pieces"``: per message ``null`` or one float / one text piece per token);
* an **eval** folder written by ``teamplay eval -o DIR``: ``results.json`` (``{"config": ...,
  "metrics": EvalMetrics dict}``) and, optionally, ``transcripts.jsonl`` (``Episode.to_dict()`` plus
  ``"prompt"`` and ``"reference"`` per line, no advantages).

Every malformed line raises ``DataError`` naming the file and the 1-based line number, so a report
never silently shows a run with holes in it; the one exception is a torn last line of a run that
was killed while appending it, which is dropped with a warning that names it. Empty and partial runs load: a run with no
``metrics.jsonl`` lines yet has no steps; a run without held-out evaluation has no held-out points.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from teamplay.config import read_yaml
from teamplay.errors import DataError, TeamplayError, TeamplayWarning
from teamplay.json_files import read_json
from teamplay.records import Episode
from teamplay.training.play.evaluation import EvalMetrics

RUN_MARKERS = ("metrics.jsonl", "config.yaml")
EVAL_MARKER = "results.json"


@dataclass(frozen=True)
class StepMetrics:
    """The training metrics of one step (one line of ``metrics.jsonl`` with training fields).

    Fields:
        step: the step number the trainer logged (1-based: the state after the step).
        scalars: every finite numeric top-level field of the line (reward_mean, reward_std,
            accuracy, kl, clip_fraction, clip_fraction_epoch1, tokens, seconds, ...). A metric the
            trainer did not log (``kl`` when the KL weight is 0) is absent, never NaN.
        adv_mean: mean advantage of each role's messages this step, {role: x}.
        credit_share: sum |advantage| of the role's messages / sum over all messages, {role: x};
            the shares of a step sum to 1 (or are all 0 when every advantage was 0).
        speak_rate: fraction of turns each speak/skip controller spoke, {agent_or_role/stage: x};
            empty when the run has no controllers.
    """

    step: int
    scalars: Mapping[str, float]
    adv_mean: Mapping[str, float]
    credit_share: Mapping[str, float]
    speak_rate: Mapping[str, float]

    def __post_init__(self) -> None:
        for name in ("scalars", "adv_mean", "credit_share", "speak_rate"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def get(self, name: str) -> float | None:
        """The scalar ``name`` of this step, or None when it was not logged."""
        return self.scalars.get(name)


@dataclass(frozen=True)
class HeldoutPoint:
    """One held-out evaluation of a run: ``step`` 0 is before training; ``final`` marks the
    evaluation after the last step (logged as ``heldout_final``)."""

    step: int
    metrics: EvalMetrics
    final: bool = False


@dataclass(frozen=True)
class LoggedEpisode:
    """One episode shown in the transcript browser.

    Fields:
        episode: the episode as the environment recorded it.
        step: training step it was sampled in (None for an eval transcript).
        advantages: one advantage per message, shape [len(episode.messages)], or None when the
            episode was not credited (eval transcripts).
        prompt, reference: the problem text and gold answer (eval transcripts carry them; run
            episodes do not, so they are None there).
        credit: how the advantages were computed (training runs): ``method``, ``options`` and, for
            replay-based methods, ``replay_values`` (each counterfactual value behind them:
            ``kept`` agents, ``start`` prefix, ``removal``, ``remove_turn``, ``value``, ``samples``).
        tokens: for runs with token-level credit, per message ``None`` or its tokens as
            ``((text piece, advantage), ...)`` (the pieces concatenate to the decoded message).
        withheld: for evaluations run with ``withhold_messages``, per message ``None`` (a skipped
            turn) or what withholding it did (``teamplay.training.play.withholding.WithheldMessage``
            as a dict: ``replayed``, ``answer``, ``changed``, ``right_before``, ``right_after``).
    """

    episode: Episode
    step: int | None
    advantages: tuple[float, ...] | None
    prompt: str | None = None
    reference: str | None = None
    credit: Mapping[str, Any] | None = None
    tokens: tuple[tuple[tuple[str, float], ...] | None, ...] | None = None
    withheld: tuple[Mapping[str, Any] | None, ...] | None = None

    def __post_init__(self) -> None:
        if self.advantages is not None and len(self.advantages) != len(self.episode.messages):
            raise ValueError(f"episode {self.episode.problem_id}: {len(self.advantages)} advantages for "
                             f"{len(self.episode.messages)} messages")


@dataclass(frozen=True)
class RunData:
    """A training run folder: its config, per-step metrics, held-out evaluations and episodes.

    ``steps`` is sorted by step and holds only lines with training metrics; ``heldout`` holds every
    held-out evaluation in step order (step 0 before training, intermediate ones, the final one).
    """

    path: Path
    config: Mapping[str, Any]
    steps: tuple[StepMetrics, ...]
    heldout: tuple[HeldoutPoint, ...]
    episodes: tuple[LoggedEpisode, ...]

    kind = "run"

    @property
    def roles(self) -> list[str]:
        """Roles that received credit in any step, in first-seen order."""
        seen: dict[str, None] = {}
        for s in self.steps:
            seen.update(dict.fromkeys(s.credit_share))
            seen.update(dict.fromkeys(s.adv_mean))
        return list(seen)

    @property
    def final_heldout(self) -> EvalMetrics | None:
        """The last held-out evaluation (the final one when it was logged), or None."""
        return self.heldout[-1].metrics if self.heldout else None

    @property
    def initial_heldout(self) -> EvalMetrics | None:
        """The held-out evaluation before training (step 0), or None."""
        first = self.heldout[0] if self.heldout else None
        return first.metrics if first is not None and first.step == 0 and not first.final else None


@dataclass(frozen=True)
class EvalData:
    """An eval folder: its config, summary metrics and transcripts."""

    path: Path
    config: Mapping[str, Any]
    metrics: EvalMetrics
    episodes: tuple[LoggedEpisode, ...]

    kind = "eval"


def load_folder(path: Path) -> RunData | EvalData:
    """Load a run folder or an eval folder (see the module docstring for both layouts).

    Raises TeamplayError when ``path`` is neither (naming the files that were expected) and
    DataError (a TeamplayError) for a malformed file, naming the file and line.
    """
    path = Path(path)
    if not path.is_dir():
        raise TeamplayError(f"report: {path} is not a folder; expected a run folder (teamplay train -o) "
                            f"or an eval folder (teamplay eval -o)")
    if (path / EVAL_MARKER).is_file():
        return load_eval(path)
    if any((path / marker).is_file() for marker in RUN_MARKERS):
        return load_run(path)
    raise TeamplayError(
        f"report: {path} is neither a run folder (expected {' and '.join(RUN_MARKERS)}, written by "
        f"teamplay train) nor an eval folder (expected {EVAL_MARKER}, written by teamplay eval -o)")


def load_run(path: Path) -> RunData:
    """Load a run folder; ``metrics.jsonl`` and ``episodes.jsonl`` may be missing or empty."""
    config = read_yaml(path / "config.yaml") if (path / "config.yaml").is_file() else {}
    steps: list[StepMetrics] = []
    heldout: list[HeldoutPoint] = []
    metrics_path = path / "metrics.jsonl"
    for line_no, row in _read_jsonl(metrics_path):
        where = f"{metrics_path} line {line_no}"
        step = _int_field(row, "step", where)
        if "heldout" in row:
            heldout.append(HeldoutPoint(step, _eval_metrics(row["heldout"], f"{where}, field 'heldout'")))
        if "heldout_final" in row:
            heldout.append(HeldoutPoint(step, _eval_metrics(row["heldout_final"],
                                                            f"{where}, field 'heldout_final'"), final=True))
        if "reward_mean" in row:  # a training line (the others only carry held-out results)
            steps.append(_step_metrics(row, step, where))
    steps.sort(key=lambda s: s.step)
    heldout.sort(key=lambda h: (h.step, h.final))
    episodes_path = path / "episodes.jsonl"
    episodes = tuple(_logged_episode(row, f"{episodes_path} line {line_no}", credited=True)
                     for line_no, row in _read_jsonl(episodes_path))
    return RunData(path=path, config=config, steps=tuple(steps), heldout=tuple(heldout), episodes=episodes)


def load_eval(path: Path) -> EvalData:
    """Load an eval folder; ``transcripts.jsonl`` may be missing (then no transcripts are shown)."""
    results_path = path / EVAL_MARKER
    results = read_json(results_path, DataError, fix="rerun teamplay eval to rewrite it")
    if not isinstance(results, dict) or "metrics" not in results:
        raise DataError(f"{results_path}: expected an object with 'config' and 'metrics' "
                        f"(as written by teamplay eval -o)")
    config = results.get("config") or {}
    if not isinstance(config, dict):
        raise DataError(f"{results_path}: field 'config' must be an object")
    metrics = _eval_metrics(results["metrics"], f"{results_path}, field 'metrics'")
    transcripts_path = path / "transcripts.jsonl"
    episodes = tuple(_logged_episode(row, f"{transcripts_path} line {line_no}", credited=False)
                     for line_no, row in _read_jsonl(transcripts_path))
    return EvalData(path=path, config=config, metrics=metrics, episodes=episodes)


# ----------------------------------------------------------------------------------- parsing
def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for each non-blank line; a missing file has no lines.

    A last line that is not valid JSON is what a run killed while appending leaves behind: it is
    dropped with a ``TeamplayWarning`` naming it, and every whole line before it is kept. A bad
    line anywhere else is a ``DataError``.
    """
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    last = max((i for i, line in enumerate(lines, start=1) if line.strip()), default=0)
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if line_no == last:
                warnings.warn(TeamplayWarning(
                    f"{path} line {line_no}: dropped a torn last line ({exc.msg}, column {exc.colno}; the "
                    f"run was stopped while writing it); the report shows the {len(rows)} whole lines "
                    f"before it"), stacklevel=2)
                break
            raise DataError(
                f"{path} line {line_no}: not valid JSON ({exc.msg}, column {exc.colno}); a torn last line "
                f"of a killed run is dropped by `teamplay train --resume auto`, otherwise fix or delete "
                f"the line") from None
        if not isinstance(row, dict):
            raise DataError(f"{path} line {line_no}: expected a JSON object, got {type(row).__name__}")
        rows.append((line_no, row))
    return rows


def is_number(value: Any) -> bool:
    """A JSON number: an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int_field(row: Mapping[str, Any], name: str, where: str) -> int:
    value = row.get(name)
    if not is_number(value) or value != int(value):
        raise DataError(f"{where}: field {name!r} must be an integer, got {value!r}")
    return int(value)


def _number_map(value: Any, name: str, where: str) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(is_number(v) for v in value.values()):
        raise DataError(f"{where}: field {name!r} must be an object of numbers ({{name: x}}), got {value!r}")
    return {str(k): float(v) for k, v in value.items()}


def _step_metrics(row: Mapping[str, Any], step: int, where: str) -> StepMetrics:
    scalars = {k: float(v) for k, v in row.items()
               if k != "step" and is_number(v) and math.isfinite(v)}
    return StepMetrics(
        step=step, scalars=scalars,
        adv_mean=_number_map(row.get("adv_mean"), "adv_mean", where),
        credit_share=_number_map(row.get("credit_share"), "credit_share", where),
        speak_rate=_number_map(row.get("speak_rate"), "speak_rate", where),
    )


_EVAL_FIELDS = {f.name: f for f in fields(EvalMetrics)}
_EVAL_REQUIRED = ("episodes", "team_accuracy", "any_agent_right", "initial_accuracy", "wrong_to_right",
                  "right_to_wrong", "tokens_per_problem", "calls_per_problem")


def _eval_metrics(value: Any, where: str) -> EvalMetrics:
    """An ``EvalMetrics`` from its ``to_dict()``; keys it does not know are ignored (newer writers)."""
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected an EvalMetrics object, got {type(value).__name__}")
    missing = [name for name in _EVAL_REQUIRED if name not in value]
    if missing:
        raise DataError(f"{where}: EvalMetrics fields missing: {', '.join(missing)}")
    kwargs: dict[str, Any] = {}
    for name in _EVAL_FIELDS:
        if name not in value:
            continue
        item = value[name]
        if name in ("role_accuracy", "lm_eval"):
            kwargs[name] = _number_map(item, name, where)
        elif name == "extra":
            kwargs[name] = dict(item) if isinstance(item, dict) else {}
        elif is_number(item):
            kwargs[name] = int(item) if name == "episodes" else float(item)
        else:
            raise DataError(f"{where}: EvalMetrics field {name!r} must be a number, got {item!r}")
    kwargs.setdefault("role_accuracy", {})
    return EvalMetrics(**kwargs)


def _logged_episode(row: dict[str, Any], where: str, credited: bool) -> LoggedEpisode:
    try:
        episode = Episode.from_dict(row)
    except KeyError as exc:
        raise DataError(f"{where}: episode field {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: not a valid episode ({exc})") from None
    advantages: tuple[float, ...] | None = None
    if credited:
        raw = row.get("advantages")
        if not isinstance(raw, list) or not all(is_number(a) for a in raw):
            raise DataError(f"{where}: field 'advantages' must be a list of numbers (one per message)")
        if len(raw) != len(episode.messages):
            raise DataError(f"{where}: {len(raw)} advantages for {len(episode.messages)} messages; "
                            f"there must be one advantage per message")
        advantages = tuple(float(a) for a in raw)
    step = _int_field(row, "step", where) if "step" in row else None
    credit = row.get("credit")
    if credit is not None and not (isinstance(credit, dict) and isinstance(credit.get("method"), str)):
        raise DataError(f"{where}: field 'credit' must be an object with the credit 'method'")
    return LoggedEpisode(episode=episode, step=step, advantages=advantages,
                         prompt=_optional_str(row.get("prompt")), reference=_optional_str(row.get("reference")),
                         credit=credit, tokens=_token_rows(row, where, len(episode.messages)),
                         withheld=_withheld_rows(row, where, len(episode.messages)))


def _withheld_rows(row: dict[str, Any], where: str, n_messages: int) -> tuple[Mapping[str, Any] | None, ...] | None:
    """``withholding`` of an eval transcript line, per message index (None where none was withheld)."""
    raw = row.get("withholding")
    if raw is None:
        return None
    out: list[Mapping[str, Any] | None] = [None] * n_messages
    if not isinstance(raw, list):
        raise DataError(f"{where}: field 'withholding' must be a list (one entry per withheld message)")
    for entry in raw:
        t = entry.get("message") if isinstance(entry, dict) else None
        if not (isinstance(t, int) and 0 <= t < n_messages and isinstance(entry.get("changed"), bool)):
            raise DataError(f"{where}: a 'withholding' entry needs 'message' (an index below {n_messages}) and "
                            f"'changed' (true/false), got {entry!r}")
        out[t] = entry
    return tuple(out)


def _token_rows(row: dict[str, Any], where: str, n_messages: int):
    """``token_advantages`` and ``token_pieces`` of a line (both or neither), checked per message."""
    advs, pieces = row.get("token_advantages"), row.get("token_pieces")
    if advs is None and pieces is None:
        return None
    if not (isinstance(advs, list) and isinstance(pieces, list) and len(advs) == len(pieces) == n_messages):
        raise DataError(f"{where}: 'token_advantages' and 'token_pieces' must both be lists with one entry "
                        f"per message ({n_messages})")
    out = []
    for t, (a, p) in enumerate(zip(advs, pieces, strict=True)):
        if a is None or p is None:
            out.append(None)
            continue
        if not (isinstance(a, list) and isinstance(p, list) and len(a) == len(p)
                and all(is_number(x) for x in a) and all(isinstance(x, str) for x in p)):
            raise DataError(f"{where}: message {t}: token_advantages and token_pieces must be lists of "
                            f"numbers and strings of the same length")
        out.append(tuple((str(x), float(y)) for x, y in zip(p, a, strict=True)))
    return tuple(out)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def folder_label(data: RunData | EvalData, others: Sequence[RunData | EvalData] = ()) -> str:
    """A short name for ``data`` in legends: its folder name, or parent/name when another report
    input has the same folder name."""
    name = data.path.name or str(data.path)
    if any(o is not data and o.path.name == data.path.name for o in others):
        return f"{data.path.parent.name}/{name}"
    return name
