"""A real browser for the tests in this folder: Debian's Chromium driven by Playwright.

* ``browser`` (one per session): Chromium from ``GRADER_CHROMIUM`` or the first of
  ``chromium``/``chromium-browser`` on PATH, launched through the Python ``playwright``
  package with ``executable_path`` (Playwright's own browser downloads are never used).
  ``bash .ci/setup dev`` installs both (the Debian package ``chromium``, ``playwright`` from the
  ``dev`` extra). Where either is missing the test is skipped with a one-line reason; a
  Chromium that is there but does not start fails the test.
* ``page``: a fresh browser context and page per test. When the test fails, a screenshot of
  the page is saved under the test's ``tmp_path`` and its path printed, with the browser console.
* ``jupyter``: starts a JupyterLab server (``JupyterServer``) on a free localhost port with a
  token and a temporary HOME, waits until it answers, and always stops it (its kernels too)
  when the test ends; when the test fails, the end of each server's log is printed.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

# What Chromium needs on these machines (no GPU, a closed network, running as root).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_executable() -> tuple[str | None, str]:
    """(path, how it was found) of the Chromium to drive; path None when there is none."""
    forced = os.environ.get("GRADER_CHROMIUM")
    if forced:
        return (forced if os.access(forced, os.X_OK) else None), f"GRADER_CHROMIUM={forced} is not an executable"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found, name
    return None, "neither chromium nor chromium-browser is on PATH"


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Fixtures read item.rep_call to know whether the test failed (for their diagnostics).
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def _failed(request) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed  # no report: setup or the test itself did not finish


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the Python package playwright is not installed (pip install -e '.[dev]', or bash .ci/setup dev)")
    path, how = chromium_executable()
    if path is None:
        pytest.skip(f"no Chromium to drive: {how} (Debian: apt-get install chromium, or bash .ci/setup dev)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, request, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    pg = context.new_page()
    console = []
    pg.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    yield pg
    if _failed(request):
        shot = tmp_path / "page.png"
        try:
            pg.screenshot(path=str(shot), full_page=True)
            print(f"\nscreenshot of the page when the test failed: {shot}")
        except Exception as err:  # noqa: BLE001  (the page may be gone)
            print(f"\nno screenshot ({err})")
        if console:
            print("browser console (last 20):\n  " + "\n  ".join(console[-20:]))
    context.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    """A ``jupyter lab`` (or ``python -m grader lab``) process on localhost with its own token
    and HOME. ``url(path)`` adds the token; ``tail()`` is the end of its log."""

    def __init__(self, argv: list[str], cwd: Path, home: Path, log: Path, env: dict | None = None):
        self.port, self.token, self.log = free_port(), secrets.token_hex(16), log
        self.base = f"http://127.0.0.1:{self.port}"
        # A fresh HOME whose JupyterLab does not ask about news (a toast over the page).
        settings = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
        # Hermetic: no Jupyter settings of the person running the tests, nothing but loopback.
        environ = {k: v for k, v in (env or os.environ).items() if not k.startswith("JUPYTER")}
        environ.update(HOME=str(home), PYTHONUNBUFFERED="1")
        args = [*argv, "--no-browser", f"--port={self.port}", "--ServerApp.ip=127.0.0.1",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        self._log = open(log, "w")
        self.proc = subprocess.Popen(args, cwd=cwd, env=environ, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}/{path.lstrip('/')}{sep}token={self.token}"

    def wait_ready(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter exited with {self.proc.returncode} before answering:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"jupyter did not answer on {self.base} within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        if not self._log.closed:
            self._log.flush()
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """Shut the server down through its API (which stops its kernels), then end its process
        group: SIGTERM, and SIGKILL when it is still there after 10 s."""
        if self.proc.poll() is None:
            try:
                req = urllib.request.Request(self.url("api/shutdown"), method="POST")
                urllib.request.urlopen(req, timeout=5).close()
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self._log.close()


@pytest.fixture
def jupyter(request, tmp_path):
    """``jupyter(argv, cwd, env=None)`` starts a server (see :class:`JupyterServer`), waits until
    it answers and returns it; every server started is stopped when the test ends."""
    servers = []

    def start(argv, cwd, env=None, name="jupyter"):
        server = JupyterServer(argv, Path(cwd), tmp_path / f"{name}-home", tmp_path / f"{name}.log", env)
        servers.append((name, server))
        server.wait_ready()
        return server

    yield start
    failed = _failed(request)
    for name, server in servers:
        server.stop()
        if failed:
            print(f"\n--- {name} server log ({server.log}), last lines:\n{server.tail()}")
