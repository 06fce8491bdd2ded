"""Drive a real JupyterLab in Debian's chromium: a server fixture, a browser fixture and notebook helpers.

The server runs from this project's environment on 127.0.0.1 with a free port and a random token, with its own
config/data/runtime/settings folders (so nothing of the user's leaks in or out), and is stopped at the end with no
process left behind. The browser is ``/usr/bin/chromium`` launched by playwright (no browser download).
A test names its steps with :class:`Steps`; a failing step keeps its screenshot and the error names the step.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                    reason="/usr/bin/chromium is absent: install Debian's chromium (`make browser`)")


# --------------------------------------------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> set[int]:
    """All live descendants of ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class LabServer:
    """A running JupyterLab; ``url(path)`` gives an authenticated address."""

    root: Path
    port: int
    token: str
    proc: subprocess.Popen
    log: Path
    known: set[int] = field(default_factory=set)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "lab") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}/{path.lstrip('/')}{sep}token={self.token}"

    def api(self, path: str, method: str = "GET", timeout: float = 5.0):
        req = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def remember_processes(self) -> None:
        """Note the server's descendants (kernels run in their own sessions, so a group kill misses them)."""
        self.known |= descendants(self.proc.pid)

    def stop(self) -> list[int]:
        """Shut down kernels and server; kill whatever survives. Returns the pids that had to be killed."""
        self.remember_processes()
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                for kernel in self.api("kernels"):
                    self.api(f"kernels/{kernel['id']}", method="DELETE", timeout=15)
            with contextlib.suppress(Exception):
                self.api("shutdown", method="POST")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        killed = []
        for pid in sorted(self.known | {self.proc.pid}):
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        return killed


def start_lab(root: Path, home: Path, timeout: float = 90.0) -> LabServer:
    """Start JupyterLab from this environment serving ``root``; ``home`` holds its private config folders."""
    port, token = free_port(), secrets.token_hex(24)
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl")]:
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / sub)
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "2")
    settings = home / "lab-settings"
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    cmd = [str(VENV_BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.open_browser=False",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={home / 'workspaces'}",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.expose_app_in_browser=True", "--ServerApp.terminals_enabled=False"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = home / "jupyterlab.log"
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(root, port, token, proc, log)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}; log:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            if server.api("status", timeout=2) is not None:
                return server
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"JupyterLab did not answer within {timeout:.0f}s; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


# --------------------------------------------------------------------------------------------------- notebooks
def copy_notebook(source: Path, target: Path, parameters: dict) -> Path:
    """Copy a notebook with ``parameters`` injected after its parameters cell, the way papermill does it."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = parameterize_notebook(load_notebook_node(str(source)), parameters)
    for cell in nb.cells:  # papermill bookkeeping the browser run does not need
        cell.metadata.pop("papermill", None)
        if not cell.metadata.get("tags"):
            cell.metadata.pop("tags", None)
    nb.metadata.pop("papermill", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return target


# --------------------------------------------------------------------------------------------------- the page
class StepFailed(AssertionError):
    pass


class Steps:
    """Named steps with screenshots: ``with steps("name"): ...``; a failure keeps ``FAILED-<name>.png``."""

    def __init__(self, page, folder: Path):
        self.page, self.folder, self.done = page, folder, []
        folder.mkdir(parents=True, exist_ok=True)
        self.n = 0

    def shot(self, name: str) -> Path:
        path = self.folder / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.n += 1
        label = f"{self.n:02d}-{name}"
        t0 = time.perf_counter()
        try:
            yield
        except Exception as exc:
            shot = None
            with contextlib.suppress(Exception):
                shot = self.shot(f"FAILED-{label}")
            raise StepFailed(f"browser step {label!r} failed after {time.perf_counter() - t0:.1f}s: "
                             f"{type(exc).__name__}: {exc}\n  screenshot: {shot}\n  folder: {self.folder}") from exc
        self.done.append((label, time.perf_counter() - t0))
        print(f"  step {label}: {time.perf_counter() - t0:.1f}s", flush=True)


class Notebook:
    """One notebook open in JupyterLab, driven through its menus, toolbar and widgets."""

    def __init__(self, page, server: LabServer, path: str):
        self.page, self.server, self.path = page, server, path

    def open(self, timeout: float = 120) -> None:
        self.page.goto(self.server.url(f"lab/tree/{self.path}?reset"), wait_until="domcontentloaded")
        self.page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").first.wait_for(timeout=timeout * 1000)
        self.wait_kernel_idle(timeout)

    def kernel_status(self) -> str:
        return self.page.evaluate("""() => {
            const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
            return k ? k.status : 'no-kernel';
        }""")

    def wait_kernel_idle(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.kernel_status() != "idle":
            if time.monotonic() > deadline:
                raise TimeoutError(f"kernel not idle after {timeout:.0f}s (status {self.kernel_status()!r})")
            time.sleep(0.25)

    def run_all(self) -> None:
        """Run > Run All Cells, through the menu bar as a person does."""
        self.page.get_by_role("menuitem", name="Run", exact=True).click()
        self.page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    def cells_state(self) -> dict:
        """Execution counts, pending cells and error outputs of the notebook model shown in the page."""
        return self.page.evaluate("""() => {
            const w = window.jupyterapp.shell.currentWidget;
            const cells = w.content.widgets.filter(c => c.model.type === 'code');
            const out = {counts: [], pending: 0, errors: []};
            for (const c of cells) {
                out.counts.push(c.model.executionCount);
                if (c.promptNode && c.promptNode.textContent.includes('*')) out.pending += 1;
                for (let i = 0; i < c.model.outputs.length; i++) {
                    const o = c.model.outputs.get(i).toJSON();
                    if (o.output_type === 'error') out.errors.push(o.ename + ': ' + o.evalue);
                }
            }
            return out;
        }""")

    def wait_run_complete(self, timeout: float = 300) -> dict:
        """Wait until every code cell has run (an execution count, no ``[*]``, the last cell's count the highest)
        and the kernel has stayed idle for a second; fail at once on an error output."""
        deadline, idle_since = time.monotonic() + timeout, None
        while True:
            state = self.cells_state()
            if state["errors"]:
                raise AssertionError(f"a cell raised: {state['errors'][0]}")
            counts = state["counts"]
            done = (counts and all(c is not None for c in counts) and not state["pending"]
                    and counts[-1] == max(counts))
            if done and self.kernel_status() == "idle":
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= 1.0:
                    return state
            else:
                idle_since = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"notebook not finished after {timeout:.0f}s: {state}")
            time.sleep(0.25)

    def assert_widgets_rendered(self, timeout: float = 30) -> None:
        """ipywidgets views exist in the page (the jupyterlab_widgets extension is live), none stuck loading."""
        self.page.locator(".jp-OutputArea-output .jupyter-widgets").first.wait_for(timeout=timeout * 1000)
        body = " ".join(self.page.locator(".jp-NotebookPanel:visible .jp-OutputArea").all_text_contents())
        for bad in ("Loading widget...", "Error displaying widget", "model not found"):
            assert bad not in body, f"the page shows {bad!r}: the widget did not render"


class Widgets:
    """ipywidgets controls found by their description, as a person finds them on screen.

    ``within`` is a CSS selector or a playwright Locator (default: the notebook shown).
    """

    def __init__(self, page, within=".jp-NotebookPanel:visible"):
        self.page = page
        self.root = page.locator(within) if isinstance(within, str) else within

    @staticmethod
    def box_of(page, selector: str):
        """The innermost widget VBox that contains ``selector`` (e.g. one widget's whole UI)."""
        return page.locator(f".jp-NotebookPanel:visible .widget-vbox:has({selector})").last

    def control(self, description: str):
        """The control row (label + input) whose label reads ``description``."""
        xpath = ("xpath=.//div[contains(concat(' ', @class, ' '), ' widget-inline-hbox ')]"
                 f"[./label[contains(@class, 'widget-label') and normalize-space()={_xpath_str(description)}]]")
        return self.root.locator(xpath).last

    def button(self, description: str):
        return self.root.locator(".widget-button").filter(
            has_text=re.compile(rf"^\s*{re.escape(description)}\s*$")).last

    def value(self, description: str) -> str:
        box = self.control(description)
        classes = box.get_attribute("class") or ""
        if "widget-slider" in classes:
            return (box.locator(".widget-readout").text_content() or "").strip()
        if box.locator("select").count():
            return box.locator("select").input_value()
        return box.locator("input").first.input_value()

    def set(self, description: str, value) -> None:
        """Change a slider, dropdown, text/number box, checkbox or toggle buttons the way a person would."""
        box = self.control(description)
        box.scroll_into_view_if_needed()
        classes = box.get_attribute("class") or ""
        if "widget-slider" in classes:
            readout = box.locator(".widget-readout")
            readout.click()
            self.page.keyboard.press("Control+A")
            self.page.keyboard.type(str(value))
            self.page.keyboard.press("Enter")
        elif box.locator("select").count():
            box.locator("select").select_option(label=str(value))
        elif "widget-toggle-buttons" in classes:
            box.get_by_role("button", name=str(value), exact=True).click()
        elif "widget-checkbox" in classes:
            box.locator("input[type=checkbox]").set_checked(bool(value))
        else:
            field = box.locator("input, textarea").first
            field.fill(str(value))
            field.press("Enter")
            field.blur()


def _xpath_str(text: str) -> str:
    if "'" not in text:
        return f"'{text}'"
    return "concat('" + "', \"'\", '".join(text.split("'")) + "')"


def wait_for(predicate, timeout: float, what, interval: float = 0.25):
    """Poll ``predicate`` until it returns something truthy; its value, or a TimeoutError naming ``what``
    (a string, or a callable giving one, evaluated at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what() if callable(what) else what} (waited {timeout:.0f}s)")
        time.sleep(interval)


def save_small_png(png: bytes, path: Path, max_width: int = 1000, limit: int = 200_000) -> Path:
    """Write a screenshot as a small palette PNG (for docs/img); fails if it stays over ``limit`` bytes."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if image.width > max_width:
        image = image.resize((max_width, round(image.height * max_width / image.width)), Image.LANCZOS)
    small = image.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    small.save(buffer, format="PNG", optimize=True)
    assert buffer.tell() < limit, f"{path.name} is {buffer.tell():,} bytes after compression (limit {limit:,})"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(path)
    return path


def pixel_difference(a: bytes, b: bytes) -> float:
    """Fraction of pixels that differ between two PNG screenshots (1.0 when the sizes differ)."""
    from PIL import Image, ImageChops

    ia, ib = Image.open(io.BytesIO(a)).convert("RGB"), Image.open(io.BytesIO(b)).convert("RGB")
    if ia.size != ib.size:
        return 1.0
    diff = ImageChops.difference(ia, ib).convert("L").point(lambda v: 255 if v > 16 else 0)
    return sum(diff.histogram()[255:]) / (ia.size[0] * ia.size[1])


# --------------------------------------------------------------------------------------------------- fixtures
SHOTS = REPO / "runs" / "browser"
_FOLDERS: list[Path] = []


def pytest_terminal_summary(terminalreporter) -> None:
    """Name the screenshot folders at the end of the run, with or without ``-s``."""
    if _FOLDERS:
        terminalreporter.section("browser screenshots")
        for folder in _FOLDERS:
            terminalreporter.write_line(str(folder))


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[LabServer]:
    """JupyterLab serving a fresh temporary root; stopped at the end, no process left behind."""
    base = tmp_path_factory.mktemp("lab")
    root, home = base / "root", base / "home"
    root.mkdir()
    t0 = time.perf_counter()
    server = start_lab(root, home)
    print(f"\nJupyterLab {server.base} (root {root}) answered in {time.perf_counter() - t0:.1f}s", flush=True)
    try:
        yield server
    finally:
        t0 = time.perf_counter()
        killed = server.stop()
        left = [pid for pid in server.known | {server.proc.pid} if alive(pid)]
        print(f"JupyterLab stopped in {time.perf_counter() - t0:.1f}s; force-killed {killed or 'none'}; "
              f"left alive: {left or 'none'}", flush=True)
        assert not left, f"processes left behind after stopping JupyterLab: {left}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's chromium driven by playwright, with a fresh user data dir."""
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        context.set_default_timeout(60_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser, lab):
    """A new tab; closed (and its kernels shut down) after the test."""
    tab = browser.new_page()
    try:
        yield tab
    finally:
        lab.remember_processes()
        tab.close()
        with contextlib.suppress(Exception):
            for kernel in lab.api("kernels"):
                lab.api(f"kernels/{kernel['id']}", method="DELETE", timeout=15)


@pytest.fixture
def steps(page, request) -> Steps:
    """Named steps for one test; screenshots in ``runs/browser/<test name>/``."""
    folder = SHOTS / request.node.name
    if folder.exists():
        for old in folder.glob("*.png"):
            old.unlink()
    print(f"\nscreenshots: {folder}", flush=True)
    _FOLDERS.append(folder)
    return Steps(page, folder)
