"""teamplay.atomic: a file or folder is replaced whole or not at all, and no temporary is left behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from teamplay.atomic import atomic_file, recover_folders, replace_folder, staged_folder, write_atomically


def test_write_atomically_writes_text_as_utf8_and_bytes_as_they_are(tmp_path):
    write_atomically(tmp_path / "a.txt", "é\n")
    write_atomically(tmp_path / "b.bin", b"\x00\xff")
    assert (tmp_path / "a.txt").read_bytes() == "é\n".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin"]


def test_a_failed_write_atomically_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    path.write_text("old\n")

    def die(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("teamplay.atomic.os.fsync", die)
    with pytest.raises(OSError, match="No space"):
        write_atomically(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_atomic_file_puts_what_was_written_in_place(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    with atomic_file(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp != path
        with tmp.open("w", encoding="utf-8") as f:
            json.dump({"round": 2}, f)
        assert path.read_text() == "old"  # nothing is in place before the with ends
    assert json.loads(path.read_text()) == {"round": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_an_exception_inside_atomic_file_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="killed"), atomic_file(path) as tmp:
        tmp.write_text("half of the ne")
        raise RuntimeError("killed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_write_of_a_new_file_leaves_no_file(tmp_path, monkeypatch):
    path = tmp_path / "round-000001.pt"

    def die(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("teamplay.atomic.os.fsync", die)
    with pytest.raises(OSError, match="No space"), atomic_file(path) as tmp:
        tmp.write_bytes(b"payload")
    assert list(tmp_path.iterdir()) == []


def test_atomic_file_with_nothing_written_raises_and_leaves_nothing(tmp_path):
    # a writer that never created the temporary file: the fsync fails, nothing is put in place
    with pytest.raises(FileNotFoundError), atomic_file(tmp_path / "x.json"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_replace_folder_puts_the_staged_folder_in_place_of_the_old_one(tmp_path, monkeypatch):
    final = tmp_path / "step-000002"
    (final / "old").mkdir(parents=True)
    (final / "old" / "stale.txt").write_text("stale")
    staged = tmp_path / ".tmp-step-000002-1"
    (staged / "adapters").mkdir(parents=True)
    (staged / "adapters" / "a.bin").write_bytes(b"a")
    (staged / "state.json").write_text("{}")
    synced = []
    monkeypatch.setattr("teamplay.atomic.os.fsync", synced.append)
    replace_folder(staged, final)
    assert len(synced) == 2  # every file of the staged folder
    assert sorted(str(p.relative_to(final)) for p in final.rglob("*")) == ["adapters", "adapters/a.bin",
                                                                           "state.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000002"]


def test_replace_folder_creates_a_missing_folder(tmp_path):
    staged = tmp_path / ".staged"
    staged.mkdir()
    (staged / "f").write_text("x")
    replace_folder(staged, tmp_path / "final")
    assert (tmp_path / "final" / "f").read_text() == "x"
    assert not staged.exists()


def test_replace_folder_keeps_the_old_folder_whole_when_the_rename_fails(tmp_path, monkeypatch):
    final = tmp_path / "adapters"
    final.mkdir()
    (final / "a.bin").write_bytes(b"old")
    staged = tmp_path / ".staged"
    staged.mkdir()
    (staged / "a.bin").write_bytes(b"new")
    real_replace = os.replace

    def fail_on_staged(src, dst):
        if Path(src) == staged:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr("teamplay.atomic.os.replace", fail_on_staged)
    with pytest.raises(OSError, match="No space"):
        replace_folder(staged, final)
    assert (final / "a.bin").read_bytes() == b"old"  # moved aside, then back
    assert sorted(p.name for p in tmp_path.iterdir()) == [".staged", "adapters"]


def test_staged_folder_puts_what_was_written_in_place_of_the_old_folder(tmp_path):
    final = tmp_path / "adapters"
    (final / "stale").mkdir(parents=True)
    with staged_folder(final) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and list(tmp.iterdir()) == []
        (tmp / "a").mkdir()
        (tmp / "a" / "w.bin").write_bytes(b"w")
        assert (final / "stale").is_dir()  # nothing is in place before the with ends
    assert sorted(str(p.relative_to(final)) for p in final.rglob("*")) == ["a", "a/w.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["adapters"]


def test_an_exception_inside_staged_folder_keeps_the_old_folder_and_no_staging(tmp_path):
    final = tmp_path / "model"
    final.mkdir()
    (final / "config.json").write_text("old")
    with pytest.raises(RuntimeError, match="killed"), staged_folder(final) as tmp:
        (tmp / "config.json").write_text("half of the ne")
        raise RuntimeError("killed")
    assert (final / "config.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_without_sync_a_folder_is_put_in_place_the_same_with_no_fsync(tmp_path, monkeypatch):
    # sync=False: for folders whose caller fsyncs the whole tree (adapters inside a checkpoint)
    final = tmp_path / "adapters"
    (final / "stale.txt").parent.mkdir(parents=True)
    (final / "stale.txt").write_text("stale")
    synced = []
    monkeypatch.setattr("teamplay.atomic.os.fsync", synced.append)
    with staged_folder(final, sync=False) as tmp:
        (tmp / "a.bin").write_bytes(b"a")
    assert synced == []
    assert [p.name for p in final.iterdir()] == ["a.bin"] and (final / "a.bin").read_bytes() == b"a"
    assert [p.name for p in tmp_path.iterdir()] == ["adapters"]  # no staging or old folder left


def test_recover_folders_cleans_up_after_killed_staged_and_replaced_folders(tmp_path):
    def folder(name: str, text: str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(text)

    # named as staged_folder names its staging folder; a kill leaves it (the finally never runs)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-step-3-", dir=tmp_path))
    folder("step-1", "in place")
    folder(".old-step-1-4242", "replaced")  # killed after the new step-1 was in place
    folder(".old-step-2-4242", "only copy")  # killed between replace_folder's two renames
    folder(".old-other-4242", "not ours")
    folder(".tmp-other-abc", "not ours")
    deleted = recover_folders(tmp_path, lambda name: name.startswith("step-"))
    assert sorted(p.name for p in deleted) == [".old-step-1-4242", staging.name]
    assert (tmp_path / "step-2" / "f.txt").read_text() == "only copy"
    assert (tmp_path / "step-1" / "f.txt").read_text() == "in place"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".old-other-4242", ".tmp-other-abc", "step-1", "step-2"]
    assert recover_folders(tmp_path / "missing", lambda name: True) == []
