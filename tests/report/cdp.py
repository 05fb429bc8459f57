"""A minimal Chrome DevTools Protocol client for the browser tests, over ``--remote-debugging-pipe``.

Why a pipe and not a websocket: with ``--remote-debugging-pipe`` chromium reads protocol commands
from file descriptor 3 and writes responses and events to descriptor 4, one JSON object per
message, each terminated by a NUL byte. That needs no websocket package, no free TCP port (no race
with parallel test runs) and no parsing of log lines: console errors, uncaught exceptions and
dialogs arrive as typed events (``Runtime.consoleAPICalled``, ``Runtime.exceptionThrown``,
``Log.entryAdded``, ``Page.javascriptDialogOpening``), so a missed error cannot hide in a log
format change.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TRAMPOLINE = (
    "import os, sys\n"
    "r, w = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.dup2(r, 3); os.dup2(w, 4); os.close(r); os.close(w)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe")


def find_chromium() -> str | None:
    """Path of a chromium/chrome binary: $TEAMPLAY_CHROMIUM if set, else the first on PATH."""
    env = os.environ.get("TEAMPLAY_CHROMIUM")
    if env:
        return env
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    """A protocol command failed or timed out."""


@dataclass
class PageProblems:
    """What went wrong on the page, collected from protocol events."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return self.console_errors + self.exceptions + self.log_errors + self.dialogs


class Chromium:
    """One headless chromium process with one page session.

    Use as a context manager; ``open(url)`` navigates and waits for the load event; ``evaluate``
    runs an expression in the page and returns its JSON value; ``screenshot`` writes a PNG.
    """

    def __init__(self, binary: str, user_data_dir: Path, width: int = 1400, height: int = 2000,
                 timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.width, self.height = width, height
        self.problems = PageProblems()
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Chromium expects the pipe on descriptors 3 (commands in) and 4 (messages out). A tiny
        # Python trampoline moves it there from two descriptors >= 10 (which cannot collide with 3
        # or 4) and execs chromium; no preexec_fn (unsafe with threads), no shell (dash cannot
        # redirect descriptors above 9).
        child_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
        child_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
        for fd in (to_child_r, from_child_w):
            os.close(fd)
        args = [sys.executable, "-c", _TRAMPOLINE, str(child_r), str(child_w), binary, *FLAGS,
                f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}",
                "about:blank"]
        # stderr goes to a file: a pipe nobody reads would fill up and stall chromium
        self.stderr_path = user_data_dir.with_name(user_data_dir.name + "-stderr.log")
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=stderr, pass_fds=(child_r, child_w))
        os.close(child_r)
        os.close(child_w)
        self.session = self._attach()

    # ------------------------------------------------------------------------------ protocol
    def _send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode("utf-8") + b"\0")
        return self._next_id

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("timed out waiting for chromium")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                stderr = self.stderr_path.read_text(errors="replace")[-2000:]
                raise CDPError(f"chromium closed the protocol pipe; stderr tail:\n{stderr}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def _handle_event(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            self.problems.console_errors.append(" ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            exc = details.get("exception", {})
            self.problems.exceptions.append(f"{details.get('text', '')} {exc.get('description', '')}".strip())
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.problems.log_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Page.javascriptDialogOpening":
            self.problems.dialogs.append(f"{params.get('type')}: {params.get('message')}")
            # dismiss it, or the page stays blocked and every later command times out
            self._send("Page.handleJavaScriptDialog", {"accept": False}, event.get("sessionId"))
        self._events.append(event)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send a command and return its result, handling events that arrive meanwhile."""
        call_id = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == call_id:
                if "error" in message:
                    raise CDPError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._handle_event(message)

    def wait_event(self, method: str) -> dict[str, Any]:
        """Wait for the next event ``method`` of this page session (events already seen count)."""
        for i, event in enumerate(self._events):
            if event.get("method") == method and event.get("sessionId") == self.session:
                del self._events[i]
                return event
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if "method" in message:
                self._handle_event(message)
                if message["method"] == method and message.get("sessionId") == self.session:
                    self._events.remove(message)
                    return message

    def _attach(self) -> str:
        targets = self.call("Target.getTargets")["targetInfos"]
        pages = [t for t in targets if t.get("type") == "page"]
        target = pages[0]["targetId"] if pages else self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(domain, session=session)
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False}, session)
        return session

    # ------------------------------------------------------------------------------ page API
    def open(self, url: str) -> None:
        """Navigate to ``url`` and wait until its load event (scripts have run)."""
        self._events.clear()
        result = self.call("Page.navigate", {"url": url}, self.session)
        if result.get("errorText"):
            raise CDPError(f"navigation to {url} failed: {result['errorText']}")
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` evaluated in the page (exceptions raise CDPError)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, self.session)
        if "exceptionDetails" in result:
            raise CDPError(f"evaluate({expression!r}): {result['exceptionDetails']}")
        return result["result"].get("value")

    def press(self, key: str, code: str, key_code: int) -> None:
        """A real key press (keydown + keyup) delivered to the focused page."""
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": code,
                                                 "windowsVirtualKeyCode": key_code}, self.session)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """A PNG of the viewport (``width`` x ``height``), or of the whole page with ``full_page``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = int(self.evaluate("document.documentElement.scrollHeight"))
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1})
        data = self.call("Page.captureScreenshot", params, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def settle(self) -> None:
        """Process events that arrived after the last command (a round trip flushes them)."""
        self.evaluate("0")

    # ------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self._send("Browser.close")
                self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()  # only the process this client started
            self.process.wait(timeout=10)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

