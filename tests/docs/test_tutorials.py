"""Every code block the documentation tells a reader to run runs here, so the pages cannot rot.

The convention of the pages under ``docs/`` (fenced blocks):

* a block with a title (```` ```python title="my_credit.py" ````) is a file the reader writes: it
  is written to that path, in the page's working folder, before the blocks after it run;
* an untitled ``bash`` block is run command by command (``\\`` continues a line, ``#`` starts a
  comment): ``teamplay ...`` through the CLI in this process (exit status 0 required), ``python
  FILE ARGS`` as a script; any other command must be marked as not run;
* an untitled ``python`` block is executed; the blocks of one page share one namespace;
* an untitled ``yaml`` block is a config fragment: it must load into a ``TrainConfig`` and its
  credit method must accept its options;
* ``text`` and ``json`` blocks without a title are output or data shown, not run;
* a block right after ``<!-- not run: REASON -->`` is not run; the reason is required.

Each page runs in a fresh folder holding links to the repository's ``configs/`` and ``examples/``,
in the order of its blocks. Where a page uses the embedded model (``smollm2-135m``: on the command
line, in a file the page writes, or in the ``--config`` file a command names), a tiny random model
(``tests/tiny.py``) stands in for it, and model runs generate 4 tokens a message, train
one step on one problem and evaluate on two (a sweep keeps its first two seeds), so the whole
file runs in seconds.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.config import TrainConfig, build_config
from teamplay.credit import get_credit
from teamplay.credit.registry import parse_options
from tests.tiny import save_tiny

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md"))
EMBEDDED = "smollm2-135m"
#: appended to commands that run a model, for speed (the tiny model's text is noise anyway)
FAST = {"train": ("sampling.max_new_tokens=4", "eval_sampling.max_new_tokens=4", "steps=1",
                  "rollout.problems_per_step=1", "eval_task.limit=2"),
        "eval": ("sampling.max_new_tokens=4", "task.limit=2"), "play": ("sampling.max_new_tokens=4",),
        # a warm start's own settings stay the page's: `teamplay train` after it must find the same ones
        "sft": ("sampling.max_new_tokens=4", "eval_sampling.max_new_tokens=4", "eval_task.limit=2")}
FAST["sweep"] = FAST["train"]  # every run of a sweep as one fast training run
RUN_LANGS = {"bash", "python", "yaml"}
SHOWN_LANGS = {"text", "json", ""}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")

runner = CliRunner()


@dataclass(frozen=True)
class Block:
    lang: str
    title: str | None
    body: str
    line: int
    not_run: str | None  # the reason, for a block marked as not run ("" when the marker has none)


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        title = re.search(r'title="([^"]+)"', m.group("attrs"))
        before = text[:m.start()].rstrip("\n").splitlines()
        marker = NOT_RUN.search(before[-1]) if before else None
        body = "\n".join(line[len(m.group("indent")):] for line in m.group("body").splitlines())
        out.append(Block(m.group("lang"), title.group(1) if title else None, body,
                         text[:m.start()].count("\n") + 1, marker.group("reason") if marker else None))
    return out


def label(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.not_run is None and (b.title or b.lang in RUN_LANGS)]


def commands(body: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", body)
    return [args for line in joined.splitlines() if (args := shlex.split(line, comments=True))]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "model"))


def run_command(args: list[str], tiny: str, where: str) -> None:
    if args[0] == "teamplay":
        args = [a.replace(EMBEDDED, tiny) for a in args[1:]]
        uses_model = tiny in " ".join(args) or "--team" in args or args[0] in ("train", "sft", "sweep")
        if uses_model and args[0] in FAST:
            args += [x for s in FAST[args[0]] for x in ("--set", s)]
        if config_names_the_embedded_model(args):
            args += ["--set", f"model.name={tiny}"]
        if args[0] == "sweep" and "--seeds" in args:  # two seeds are a pair, enough to check the reading
            k = args.index("--seeds") + 1
            args[k] = ",".join(args[k].split(",")[:2])
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 0, f"{where}: teamplay {' '.join(args)}\n{result.output}"
    elif args[0] == "python" and args[1].endswith(".py"):
        argv = sys.argv
        sys.argv = [a.replace(EMBEDDED, tiny) for a in args[1:]]
        try:
            runpy.run_path(args[1], run_name="__main__")
        finally:
            sys.argv = argv
    else:
        pytest.fail(f"{where}: `{' '.join(args)}` is neither `teamplay ...` nor `python FILE`; "
                    f"mark the block <!-- not run: REASON --> or change the command")


def config_names_the_embedded_model(args: list[str]) -> bool:
    """True for a command whose ``--config`` file (``configs/demo.yaml``) loads the embedded model."""
    if "--config" not in args:
        return False
    path = Path(args[args.index("--config") + 1])
    return path.is_file() and EMBEDDED in path.read_text(encoding="utf-8")


def check_fragment(body: str, where: str) -> None:
    import yaml

    data = yaml.safe_load(body)
    cfg = build_config(TrainConfig, data)  # raises ConfigError naming the field
    parse_options(get_credit(cfg.credit.method), cfg.credit.options)
    assert isinstance(data, dict), where


def run_page(page: Path, folder: Path, tiny: str, monkeypatch) -> int:
    for name in ("configs", "examples"):
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(folder)
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for block in runnable(page):
        where = f"{label(page)}:{block.line}"
        if block.title:
            path = folder / block.title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.body.replace(EMBEDDED, tiny) + "\n", encoding="utf-8")
        elif block.lang == "bash":
            for args in commands(block.body):
                run_command(args, tiny, where)
        elif block.lang == "python":
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(block.body, where, "exec"), namespace)  # noqa: S102  (the page's own code)
        elif block.lang == "yaml":
            check_fragment(block.body, where)
        ran += 1
    return ran


PAGES_WITH_CODE = [p for p in PAGES if runnable(p)]


def test_the_pages_are_found():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES_WITH_CODE}
    assert {"index.md", "tutorials/first-run.md", "tutorials/train-a-team.md", "tutorials/custom-protocol.md",
            "tutorials/credit-comparison.md", "how-to/credit-method.md",
            "how-to/protocol.md", "how-to/task.md", "how-to/evaluate.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_block_is_run_shown_or_marked_with_a_reason(page):
    for block in blocks(page):
        where = f"{label(page)}:{block.line}"
        if block.not_run is not None:
            assert len(block.not_run.split()) >= 2, f"{where}: a not-run marker needs its reason"
        elif not block.title:
            assert block.lang in RUN_LANGS | SHOWN_LANGS, f"{where}: a ```{block.lang} block is neither run nor marked"


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_runs(page, tmp_path, tiny, monkeypatch):
    assert run_page(page, tmp_path, tiny, monkeypatch) > 0


def test_a_failing_command_fails_the_page(tmp_path, tiny, monkeypatch):
    page = tmp_path / "bad.md"
    page.write_text("```bash\nteamplay eval --task no_such_task --backend scripted\n```\n")
    (tmp_path / "work").mkdir()
    with pytest.raises(AssertionError, match="no_such_task"):
        run_page(page, tmp_path / "work", tiny, monkeypatch)


def test_a_marker_without_a_reason_is_found(tmp_path):
    page = tmp_path / "bad.md"
    page.write_text("<!-- not run: -->\n```bash\nmake demo\n```\n")
    assert blocks(page)[0].not_run == ""
