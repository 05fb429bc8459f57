"""teamplay as a user gets it: the wheel builds without packaging warnings, installs into a fresh
venv and its `teamplay` command runs from outside the repository.

The fresh venv sees the third-party packages already installed here (torch, typer, ...) through a
filtered copy of this interpreter's site-packages that leaves out teamplay itself (its editable
install is a `__editable__.teamplay-*.pth` hook plus a finder module and a dist-info), so
the only teamplay it can import is the one from the wheel. Nothing is fetched: the build uses this
environment's setuptools (no build isolation) and the install is `--no-deps --no-index`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the editable install's pieces and the repository's own metadata: none may reach the fresh venv
TEAMPLAY_ENTRY = re.compile(r"^(teamplay\b|__editable__[._]+teamplay)", re.IGNORECASE)
PACKAGING_WARNING = re.compile(r"warning|deprecat", re.IGNORECASE)
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "runs", "*.egg-info", "__pycache__",
                                     "*.pyc", ".pytest_cache", ".hypothesis", ".ruff_cache")

pytestmark = pytest.mark.slow


def _git_files(*args: str) -> list[str] | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", *args], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line for line in out.splitlines() if line]


def _source_copy(dest: Path) -> Path:
    """The checkout as git sees it (tracked plus untracked, not ignored), so a stale `build/` or
    egg-info in the working tree cannot leak into the wheel and the build writes nothing there."""
    files = _git_files("--cached", "--others", "--exclude-standard")
    if files is None:  # not a git checkout (e.g. an unpacked sdist): copy the tree without build outputs
        shutil.copytree(ROOT, dest, ignore=COPY_IGNORE)
        return dest
    for name in files:
        src = ROOT / name
        if src.is_file():  # tracked but deleted in the working tree: skip
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _run(cmd: list, cwd: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_wheel_installs_and_the_cli_runs_outside_the_repo(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP") and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               PYTHONNOUSERSITE="1", COLUMNS="200", NO_COLOR="1", OMP_NUM_THREADS="1")

    # 1. build, no isolation, no network, from a clean copy of the checkout
    src = _source_copy(tmp_path / "src")
    wheel_dir = tmp_path / "wheel"
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "--no-cache-dir", "-w", wheel_dir, src], cwd=tmp_path, env=env)
    build_log = build.stdout + build.stderr
    assert build.returncode == 0, build_log
    warnings = [line for line in build_log.splitlines() if PACKAGING_WARNING.search(line)]
    assert not warnings, "packaging warnings in the build:\n" + build_log
    (wheel,) = wheel_dir.glob("teamplay-*.whl")

    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    assert f"{dist_info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    # every file of the package (modules and any data the CLI reads at runtime) is in the wheel
    tracked = _git_files("--", "teamplay")
    if tracked is not None:
        missing = [n for n in tracked if (ROOT / n).is_file() and n not in names]
        assert not missing, f"files of the package missing from the wheel: {missing}"

    # 2. a fresh venv that sees this environment's third-party packages but not teamplay
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    new_site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         cwd=tmp_path, env=env).stdout.strip())
    assert new_site.is_dir() and new_site.resolve().is_relative_to(env_dir.resolve())
    shared = tmp_path / "shared-site-packages"
    shared.mkdir()
    for site_dir in dict.fromkeys(Path(p) for p in (sysconfig.get_paths()["purelib"],
                                                    sysconfig.get_paths()["platlib"])):
        for entry in site_dir.iterdir():
            if not TEAMPLAY_ENTRY.match(entry.name) and not (shared / entry.name).exists():
                (shared / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    # addsitedir (not a bare path line) so the other packages' own .pth hooks still run there
    (new_site / "_teamplay_test_shared.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(env_dir)
    probe = _run([python, "-c", "import importlib.util as u; print(u.find_spec('teamplay'), u.find_spec('typer'))"],
                 cwd=tmp_path, env=env)
    assert probe.returncode == 0 and probe.stdout.startswith("None "), probe.stdout + probe.stderr

    # 3. install the wheel (pip is the shared one, installing into the fresh venv)
    install = _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", wheel],
                   cwd=tmp_path, env=env)
    assert install.returncode == 0, install.stdout + install.stderr
    where = _run([python, "-c", "import teamplay; print(teamplay.__file__)"], cwd=tmp_path, env=env)
    assert where.returncode == 0, where.stderr
    teamplay_file = Path(where.stdout.strip()).resolve()
    assert teamplay_file.is_relative_to(env_dir.resolve()), teamplay_file
    assert not teamplay_file.is_relative_to(ROOT), teamplay_file

    # 4. the installed command, run from outside the repository
    teamplay = bindir / ("teamplay.exe" if os.name == "nt" else "teamplay")
    assert teamplay.is_file()
    listed = _run([teamplay, "list"], cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    for name in ("gsm8k", "arith", "proposer_reviewer", "debate", "vote", "shapley", "grpo"):
        assert name in listed.stdout, listed.stdout
    played = _run([teamplay, "play", "--task", "arith", "--protocol", "proposer_reviewer", "--backend", "scripted",
                   "--policy", "truthful"], cwd=tmp_path, env=env)
    assert played.returncode == 0, played.stdout + played.stderr
    assert "proposer_0" in played.stdout and "reviewer_0" in played.stdout
    assert "reward 1.00" in played.stdout
    assert "Traceback" not in played.stderr
