"""Learning curves of a sweep: the held-out curve of every finished run, the area under it (the mean
held-out accuracy over training), the figure with a band over seeds, and the compare page showing
both when the runs were evaluated during training."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from teamplay.errors import DataError
from teamplay.report import report_command
from teamplay.report.plots import learning_curve_band, plot_learning_curves
from teamplay.report.sweep_page import curve_area, has_intermediate, sweep_learning_curves
from tests.report.fake_folders import eval_metrics, write_run, write_sweep

GRPO, SHAPLEY = "credit.method=grpo", "credit.method=shapley"
#: held-out team accuracy of (label, seed) at steps 0 (before training), 4 (eval_every=4) and 8 (final)
ACCURACY = {(GRPO, 0): (0.2, 0.4, 0.4), (GRPO, 1): (0.2, 0.6, 0.8),
            (SHAPLEY, 0): (0.2, 0.2, 0.6), (SHAPLEY, 1): (0.2, 0.4, 0.6)}
T_975_1 = 12.7062047  # t_{0.975} with 1 degree of freedom (two seeds)


def write_curve_sweep(path: Path) -> Path:
    """A sweep folder as ``teamplay sweep`` leaves it: 2 grid points x seeds 0, 1, 8 steps each,
    held-out evaluations at steps 0 and 4 (the trainer puts an intermediate one into the step's
    training line) and a final one at step 8, with the team accuracies of ``ACCURACY``."""
    runs = []
    for (label, seed), (before, middle, final) in ACCURACY.items():
        name = f"{label}__seed{seed}"
        runs.append({"name": name, "label": label, "point": {"credit.method": label.split("=")[1]}, "seed": seed})
        run = write_run(path / "runs" / name, steps=8)
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        for line in lines:
            if "heldout" in line:
                line["heldout"] = eval_metrics(before)
            if "heldout_final" in line:
                line["heldout_final"] = eval_metrics(final)
            if line["step"] == 4 and "reward_mean" in line:
                line["heldout"] = eval_metrics(middle)
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
        (run / "done.json").write_text(json.dumps(runs[-1]), encoding="utf-8")
    manifest = {"base_config": {}, "grid": {"credit.method": ["grpo", "shapley"]}, "seeds": [0, 1], "runs": runs}
    (path / "sweep.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


def test_curves_per_label_and_seed(tmp_path: Path) -> None:
    curves = sweep_learning_curves(write_curve_sweep(tmp_path / "sweep"))
    assert list(curves) == [GRPO, SHAPLEY]
    # exact: values this test logged, read back
    assert curves[GRPO] == [[(0, 0.2), (4, 0.4), (8, 0.4)], [(0, 0.2), (4, 0.6), (8, 0.8)]]
    # exact: values this test logged, read back
    assert curves[SHAPLEY] == [[(0, 0.2), (4, 0.2), (8, 0.6)], [(0, 0.2), (4, 0.4), (8, 0.6)]]
    assert has_intermediate(curves)


def test_unfinished_runs_and_runs_without_heldout_are_left_out(tmp_path: Path) -> None:
    sweep = write_curve_sweep(tmp_path / "sweep")
    (sweep / "runs" / f"{GRPO}__seed1" / "done.json").unlink()  # still training
    write_run(sweep / "runs" / f"{SHAPLEY}__seed0", steps=8, heldout=False)  # finished, no eval_task
    curves = sweep_learning_curves(sweep)
    # exact: values this test logged, read back
    assert curves == {GRPO: [[(0, 0.2), (4, 0.4), (8, 0.4)]], SHAPLEY: [[(0, 0.2), (4, 0.4), (8, 0.6)]]}


def test_curves_of_another_metric_and_an_unknown_one(tmp_path: Path) -> None:
    sweep = write_curve_sweep(tmp_path / "sweep")
    # eval_metrics sets any_agent_right = min(1, accuracy + 0.125)
    # exact: logged as one IEEE sum accuracy + 0.125 in Python, read back
    assert sweep_learning_curves(sweep, "any_agent_right")[GRPO][0] == [(0, 0.325), (4, 0.525), (8, 0.525)]
    with pytest.raises(DataError, match="no numeric 'nope'"):
        sweep_learning_curves(sweep, "nope")


def test_without_intermediate_evaluations() -> None:
    assert not has_intermediate({"a": [[(0, 0.2), (5, 0.5)]], "b": []})


def test_curve_area() -> None:
    # trapezoids: (0.2 + 0.4) / 2 * 4 + (0.4 + 0.4) / 2 * 4 = 1.2 + 1.6 = 2.8; / 8 = 0.35
    assert curve_area([(0, 0.2), (4, 0.4), (8, 0.4)]) == pytest.approx(0.35, abs=1e-12)
    # (0.4 * 4 + 0.7 * 4) / 8 = 0.55
    assert curve_area([(0, 0.2), (4, 0.6), (8, 0.8)]) == pytest.approx(0.55, abs=1e-12)
    # unequal spacing: (0.1 * 2 + 0.35 * 6) / 8 = 2.3 / 8
    assert curve_area([(0, 0.0), (2, 0.2), (8, 0.5)]) == pytest.approx(2.3 / 8, abs=1e-12)
    assert curve_area([(0, 0.7)]) == 0.7  # exact: one point: its value; one point: its value
    with pytest.raises(ValueError, match="empty"):
        curve_area([])
    with pytest.raises(ValueError, match="strictly increase"):
        curve_area([(0, 0.1), (4, 0.2), (4, 0.3)])


def test_band_mean_and_t_interval() -> None:
    steps, means, widths = learning_curve_band([[(0, 0.2), (4, 0.4), (8, 0.4)], [(0, 0.2), (4, 0.6), (8, 0.8)]])
    assert steps == [0, 4, 8]
    assert means == pytest.approx([0.2, 0.5, 0.6], abs=1e-12)
    # n = 2: half-width = t * sd / sqrt(2) = t * |a - b| / 2: 0, 12.7062 * 0.1, 12.7062 * 0.2
    assert widths == pytest.approx([0.0, T_975_1 * 0.1, T_975_1 * 0.2], abs=1e-5)


def test_band_keeps_common_steps_and_has_no_width_with_one_seed() -> None:
    steps, means, _ = learning_curve_band([[(0, 0.2), (4, 0.4), (8, 0.4)], [(0, 0.4), (8, 0.6)]])
    assert steps == [0, 8] and means == pytest.approx([0.3, 0.5], abs=1e-12)
    # exact: one curve: its values, no width
    assert learning_curve_band([[(0, 0.2), (4, 0.4)]]) == ([0, 4], [0.2, 0.4], [0.0, 0.0])


def test_plot_learning_curves_writes_a_png(tmp_path: Path) -> None:
    curves = sweep_learning_curves(write_curve_sweep(tmp_path / "sweep"))
    curves["$one seed"] = [[(0, 0.1), (8, 0.3)]]  # mathtext in a label must not break the legend
    path = plot_learning_curves(curves, tmp_path / "out" / "curves.png", "Held-out accuracy", "team accuracy")
    assert path == tmp_path / "out" / "curves.png"
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    assert [p.name for p in path.parent.iterdir()] == ["curves.png"]  # no temporary file left behind
    with pytest.raises(ValueError, match="nothing to draw"):
        plot_learning_curves({"a": [], "b": [[]]}, tmp_path / "none.png", "t", "y")
    assert not (tmp_path / "none.png").exists()


def test_compare_page_shows_curves_and_areas(tmp_path: Path) -> None:
    sweep = write_curve_sweep(tmp_path / "sweep")
    html = report_command([sweep], compare=True, output=None).read_text(encoding="utf-8")
    assert (sweep / "report" / "sweep_learning_curves.png").stat().st_size > 1000
    assert 'id="fig-sweep_learning_curves"' in html
    assert not (sweep / "report" / "sweep_heldout.png").exists()  # replaced, not drawn twice
    areas = re.search(r'<table class="areas">.*?</table>', html).group(0)
    # grpo: areas 0.35 and 0.55 -> 0.45 ± 12.7062 * 0.1 = 1.271; shapley: (0.2 * 4 + 0.4 * 4) / 8 = 0.3 and
    # (0.3 * 4 + 0.5 * 4) / 8 = 0.4 -> 0.35 ± 12.7062 * 0.05 = 0.635 (final accuracy: 0.6 for both points)
    assert "<td>credit.method=grpo</td><td>2</td><td>0.450 ± 1.271</td>" in areas
    assert "<td>credit.method=shapley</td><td>2</td><td>0.350 ± 0.635</td>" in areas


def test_compare_page_without_intermediate_evaluations_keeps_its_heldout_plot(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "sweep")  # evaluated before and after training only
    html = report_command([sweep], compare=True, output=None).read_text(encoding="utf-8")
    assert (sweep / "report" / "sweep_heldout.png").is_file()
    assert "sweep_learning_curves" not in html and 'class="areas"' not in html


def test_a_run_with_a_curve_subset_gives_its_heldout_curve_points(tmp_path: Path) -> None:
    """``eval_curve_limit`` runs log ``heldout_curve`` on one fixed subset; the curve is those points,
    not the whole-set evaluations before and after training."""
    from teamplay.report.sweep_page import run_learning_curve

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 0, "heldout": {"team_accuracy": 0.5}, "heldout_curve": {"team_accuracy": 0.25}},
            {"step": 4, "reward_mean": 0.1, "heldout": {"team_accuracy": 0.3}, "heldout_curve": {"team_accuracy": 0.3}},
            {"step": 8, "heldout_final": {"team_accuracy": 0.9}, "heldout_curve": {"team_accuracy": 0.4}}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert run_learning_curve(run) == [(0, 0.25), (4, 0.3), (8, 0.4)]  # exact: values this test logged, read back
