"""`teamplay report` on federated runs: accuracy per round and bytes against accuracy, per strategy."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from teamplay.cli import app


def fake_run(folder, strategy, accuracies, round_bytes):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(json.dumps({"federated": {"strategy": strategy}}))
    lines = [{"round": 0, "heldout": {"team_accuracy": accuracies[0]}}]
    for r, (acc, b) in enumerate(zip(accuracies[1:], round_bytes, strict=True), start=1):
        lines.append({"round": r, "heldout": {"team_accuracy": acc}, "bytes_total": b, "compression": 2.0,
                      "sites": {"0": {"weight": 0.25}, "1": {"weight": 0.75}}, "failed": []})
    (folder / "federated.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_report_of_two_federated_runs(tmp_path):
    fake_run(tmp_path / "a", "fedavg", [0.1, 0.2, 0.4], [1000, 1000])
    fake_run(tmp_path / "b", "fedgrpo", [0.1, 0.3, 0.5], [100, 100])
    out = tmp_path / "rep"
    result = CliRunner().invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    assert (out / "fed_accuracy.png").is_file() and (out / "fed_bytes.png").is_file()
    assert "a (fedavg)" in page and "b (fedgrpo)" in page
    # run b, round 2: accuracy 0.500, 100 bytes, weights as logged
    assert "<td>2</td><td>0.500</td><td>100</td><td>2.0x</td><td>0: 0.25, 1: 0.75</td>" in page


def test_a_malformed_federated_log_is_one_error_line(tmp_path):
    fake_run(tmp_path / "a", "fedavg", [0.1, 0.2], [10])
    with (tmp_path / "a" / "federated.jsonl").open("a") as f:
        f.write("{not json\n")
    result = CliRunner().invoke(app, ["report", str(tmp_path / "a")])
    assert result.exit_code == 2
    assert "federated.jsonl" in result.output and "line 3: not a federated round record" in result.output
