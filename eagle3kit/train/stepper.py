"""``TrainingStepper``: Step, Run N and Stop buttons over a :class:`~eagle3kit.train.session.TrainSession`.

With live plots, and τ when the session measures it live (:meth:`TrainSession.track_tau`).

The logic lives in plain methods (``step``, ``run``, ``stop``, ``wait``, ``refresh``); the buttons only call them,
so tests click buttons without a kernel. ``Run N`` trains in a background thread and checks a stop flag between
steps, so ``Stop`` works in a live JupyterLab while the kernel stays responsive. Figures are rendered to PNG into
``ipywidgets.Image`` widgets (thread-safe; no pyplot state).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ipywidgets as w
from matplotlib.figure import Figure

from eagle3kit.data.plots import plot_batch
from eagle3kit.figures import png_bytes
from eagle3kit.train.live_tau import tau_points
from eagle3kit.train.plots import plot_metrics
from eagle3kit.train.session import TrainSession


class TrainingStepper:
    """Step / Run N / Stop over ``session``; ``.widget`` is the box to display."""

    def __init__(self, session: TrainSession, n: int = 10, redraw_seconds: float = 2.0):
        self.session = session
        # during Run N the plots are redrawn at most every redraw_seconds, and never more than ~10% of the time
        # (drawing two PNGs costs ~0.3 s on 2 cores: after every step it would slow short steps several-fold)
        self.redraw_seconds = redraw_seconds
        self._drawn_at = 0.0
        self._draw_cost = 0.0
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        self.step_button = w.Button(description="Step", icon="step-forward", tooltip="train on the next batch")
        self.run_button = w.Button(description="Run N", icon="play", tooltip="train N steps in the background")
        self.stop_button = w.Button(description="Stop", icon="stop", disabled=True, tooltip="stop after this step")
        self.n_input = w.BoundedIntText(value=n, min=1, max=100_000, description="N", layout=w.Layout(width="150px"))
        self.status = w.HTML()
        self.metrics_image = w.Image(format="png")
        self.batch_image = w.Image(format="png")
        self.step_button.on_click(lambda _b: self.step())
        self.run_button.on_click(lambda _b: self.run(self.n_input.value))
        self.stop_button.on_click(lambda _b: self.stop())
        controls = w.HBox([self.step_button, self.n_input, self.run_button, self.stop_button])
        self.widget = w.VBox([controls, self.status, self.metrics_image, w.HTML("<b>next batch</b>"),
                              self.batch_image])
        self.refresh()

    # ------------------------------------------------------------------------------------------- actions
    @property
    def running(self) -> bool:
        thread = self._thread  # the worker itself asks while finishing: it is not "running" any more then
        return thread is not None and thread.is_alive() and thread is not threading.current_thread()

    def step(self) -> dict[str, Any] | None:
        """One training step (ignored while Run N is running); errors are shown, not raised."""
        if self.running:
            return None
        record = self._guarded(self.session.step)
        self.refresh()
        return record

    def run(self, n: int, background: bool = True) -> None:
        """Train ``n`` steps (in a worker thread unless ``background=False``); ``stop()`` ends it early."""
        if self.running:
            return
        self._set_running(True)
        if not background:
            self._run(n)
            return
        self._thread = threading.Thread(target=self._run, args=(n,), daemon=True, name="eagle3kit-train")
        self._thread.start()

    def _run(self, n: int) -> None:
        try:
            self._guarded(self.session.run, n, callback=self._on_record)
        finally:
            self._set_running(False)
            self.refresh()

    def stop(self) -> None:
        """Ask the running Run N to stop after its current step."""
        self.session.request_stop()
        self.status.value = "stopping after this step..."

    def wait(self, timeout: float | None = None) -> None:
        """Block until a background run has finished (for scripts and tests)."""
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------------------------------------- display
    def _on_record(self, record: dict) -> None:
        if time.monotonic() - self._drawn_at >= max(self.redraw_seconds, 10 * self._draw_cost):
            self.refresh()

    def _guarded(self, fn, *args, **kwargs):
        try:
            self.error = None
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - shown in the widget, kept in .error
            self.error = f"{type(exc).__name__}: {exc}"
            return None

    def _set_running(self, running: bool) -> None:
        self.step_button.disabled = running
        self.run_button.disabled = running
        self.stop_button.disabled = not running

    def metrics_figure(self) -> Figure:
        """The metric plot the widget shows: loss and accuracies per TTT step, EMA-smoothed over the raw values, and
        the live τ beside them when the session measures it."""
        return plot_metrics(list(self.session.history))

    def refresh(self) -> None:
        """Redraw the metric plot, the next batch's layout and the status line."""
        start = time.monotonic()
        s = self.session
        history = list(s.history)
        self.metrics_image.value = png_bytes(self.metrics_figure())
        try:
            batch = s.peek_batch()
            self.batch_image.value = png_bytes(plot_batch(batch["document_ids"].cpu(), s.ttt_steps,
                                                     batch["loss_mask"].cpu()))
        except Exception as exc:  # noqa: BLE001 - e.g. the run is complete
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        last = history[-1] if history else None
        text = f"step {s.global_step} of {s.total_steps} &middot; epoch {s.position[0]} batch {s.position[1]}"
        if last:
            text += (f" &middot; loss {last['loss']:.4f} &middot; full_acc_0 {last['full_acc_0']:.3f}"
                     f" &middot; {last['tokens_per_s']:.0f} tokens/s &middot; lr {last['lr']:.2e}")
        tau_steps, taus = tau_points(history)
        if taus:
            from eagle3kit.evaluate.conventions import TAU_LABEL

            text += f" &middot; {TAU_LABEL} {taus[-1]:.3f} at step {tau_steps[-1]} (held-out, simulated)"
        if self.running:
            text += " &middot; <i>running</i>"
        if self.error:
            text += f"<br><span style='color:#b00'>{self.error}</span>"
        self.status.value = text
        self._drawn_at = time.monotonic()
        self._draw_cost = self._drawn_at - start
