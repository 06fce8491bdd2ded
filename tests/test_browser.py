"""The notebooks in a real JupyterLab, in Debian's chromium: widgets render and respond to a person's clicks.

Run: ``.venv/bin/pytest -m browser -s tests/test_browser.py`` (``-s`` prints the screenshot folder and step times).
Skipped only when /usr/bin/chromium is absent (``make browser`` installs it). ``EAGLE3KIT_DOC_IMAGES=1`` also
refreshes docs/img/mask_explorer.png and docs/img/training_stepper.png.
"""

from __future__ import annotations

import os
import re
import time

import pytest

pytest.register_assert_rewrite("browser_support")
from browser_support import (  # noqa: E402
    REPO,
    Notebook,
    Widgets,
    copy_notebook,
    needs_chromium,
    pixel_difference,
    save_small_png,
    wait_for,
)

pytest_plugins = ["browser_support"]  # fixtures: lab (JupyterLab), browser (chromium), page, steps
pytestmark = [pytest.mark.browser, needs_chromium]
NOTEBOOKS = REPO / "notebooks"
DOC_IMAGES = REPO / "docs" / "img"


def _stage(lab, number: str, overrides: dict) -> str:
    """Copy notebook ``number`` into the lab root with the ci preset plus ``overrides``; its path in the lab."""
    from eagle3kit.runner import notebook_parameters, notebooks

    found = notebooks(NOTEBOOKS, [number])
    if not found:
        pytest.fail(f"notebook {number} is missing from {NOTEBOOKS}")
    source = found[0]
    params = notebook_parameters(source, "ci", overrides, lab.root / f"work_{number}")
    copy_notebook(source, lab.root / source.name, params)
    return source.name


def _doc_image(steps, locator, name: str) -> None:
    """Keep a small PNG of ``locator`` beside the screenshots; copy it to docs/img when EAGLE3KIT_DOC_IMAGES=1."""
    page, size = steps.page, steps.page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 1800})  # the whole widget, inside the notebook
    try:
        time.sleep(0.5)
        locator.scroll_into_view_if_needed()
        png = locator.screenshot()
    finally:
        page.set_viewport_size(size)
    small = save_small_png(png, steps.folder / f"{name}.png")
    if os.environ.get("EAGLE3KIT_DOC_IMAGES") == "1":
        save_small_png(small.read_bytes(), DOC_IMAGES / f"{name}.png")
    print(f"  doc image {small} ({small.stat().st_size:,} bytes)")


def test_harness_runs_notebook_01(lab, page, steps):
    """Notebook 01 runs to the end through Run > Run All Cells, and an ipywidget renders (the harness itself)."""
    import nbformat

    with steps("stage-notebook-01"):
        name = _stage(lab, "01", {"verifier": "tiny", "forward_tokens": 64})
        nb = nbformat.read(lab.root / name, as_version=4)
        slider = "import ipywidgets\nipywidgets.IntSlider(value=7, description='harness')"
        nb.cells.append(nbformat.v4.new_code_cell(slider))
        nbformat.write(nb, lab.root / name)
        book = Notebook(page, lab, name)
    with steps("open-notebook-01"):
        book.open()
    with steps("run-all"):
        book.run_all()
        state = book.wait_run_complete(timeout=240)
        assert len(state["counts"]) == sum(c.cell_type == "code" for c in nb.cells)
    with steps("widget-renders"):
        book.assert_widgets_rendered()
        assert Widgets(page).value("harness") == "7"
        steps.shot("notebook-01-done")


def _open_and_run(lab, page, steps, number: str, params: dict, timeout: int):
    """Stage notebook ``number`` with ``params``, open it, Run All, and wait until its widgets have rendered."""
    with steps(f"stage-notebook-{number}"):
        book = Notebook(page, lab, _stage(lab, number, params))
    with steps(f"open-notebook-{number}"):
        book.open()
    with steps("run-all"):
        book.run_all()
        book.wait_run_complete(timeout=timeout)
        book.assert_widgets_rendered()
    return book


def test_mask_explorer_redraws_in_jupyterlab(lab, page, steps):
    """Notebook 03: the MaskExplorer renders; changing TTT steps (a slider) and the lengths (a text box) redraws."""
    book = _open_and_run(lab, page, steps, "03", {}, timeout=300)
    explorer = Widgets.box_of(page, "label.widget-label:text-is('TTT steps')")
    ui = Widgets(page, explorer)
    images = explorer.locator("img")
    figure = images.first
    status = explorer.locator(".widget-html").last

    def redraw(change, expect_status):
        before_src, before_px, before_status = figure.get_attribute("src"), figure.screenshot(), status.text_content()
        change()
        wait_for(lambda: re.search(expect_status, status.text_content()) and status.text_content() != before_status,
                 30, lambda: f"status never matched {expect_status!r} (it reads {status.text_content()!r})")
        wait_for(lambda: figure.count() and figure.get_attribute("src") != before_src, 30, "the figure was not redrawn")
        book.wait_kernel_idle(30)
        time.sleep(1)
        assert images.count() == shown, f"{shown} figures before the change, {images.count()} after it"
        after_px = figure.screenshot()
        diff = pixel_difference(before_px, after_px)
        print(f"    figure pixels changed: {diff:.1%}")
        assert diff > 0.005, f"the redrawn figure looks the same ({diff:.2%} of pixels changed)"

    with steps("explorer-rendered"):
        explorer.scroll_into_view_if_needed()
        figure.wait_for()
        shown = images.count()
        print(f"    figures shown: {shown}")
        ttt = int(ui.value("TTT steps"))
        assert f"{ttt} TTT steps" in status.text_content()
        steps.shot("explorer-before")
    with steps("change-ttt-steps"):
        new_ttt = 2 if ttt != 2 else 3
        redraw(lambda: ui.set("TTT steps", new_ttt), rf"\b{new_ttt} TTT steps")
        assert ui.value("TTT steps") == str(new_ttt)
        steps.shot("explorer-ttt-changed")
    with steps("change-document-lengths"):
        redraw(lambda: ui.set("lengths", "200, 90, 330"), r"\b3 documents")
        assert ui.value("documents") == "3"
        steps.shot("explorer-lengths-changed")
    with steps("doc-image"):
        _doc_image(steps, explorer, "mask_explorer")


def _stepper_state(box) -> tuple[int | None, int | None, bool, str]:
    """(step, total steps, running?, text) from the stepper's status line; step is None while it says 'stopping'."""
    text = " ".join((box.text_content() or "").split())
    match = re.search(r"step (\d+) of (\d+)", text)
    if not match:
        return None, None, "running" in text or "stopping" in text, text
    return int(match[1]), int(match[2]), "running" in text, text


def test_training_stepper_steps_runs_and_stops_in_jupyterlab(lab, page, steps):
    """Notebook 05 with small parameters: Step twice advances the count and the loss plot; Run N then Stop stops."""
    # the tiny verifier: the small data set (eagle3kit.notebook.SMALL_DATA) built in the notebook in seconds
    # max_steps: room for a Run N that outlasts the click on Stop (tiny steps take ~0.1 s; the widget redraws every
    # ~2 s while it runs)
    # rehearse_ranks / overfit_steps 0: the notebook's later cells that do not touch the stepper (the ci run of every
    # notebook executes them; here they would add two torchrun ranks and a second training run to a widget test)
    small = {"verifier": "tiny", "total_seq_len": 256, "first_steps": 1, "run_steps": 2, "max_steps": 5000,
             "rehearse_ranks": 0, "overfit_steps": 0}
    book = _open_and_run(lab, page, steps, "05", small, timeout=420)
    stepper = Widgets.box_of(page, ".widget-button:text-is('Run N')")
    ui = Widgets(page, stepper)
    plot = stepper.locator("img").first

    with steps("stepper-rendered"):
        stepper.scroll_into_view_if_needed()
        plot.wait_for()
        start, total, running, text = _stepper_state(stepper)
        assert start is not None, f"no 'step k of n' in the stepper: {text[:300]!r}"
        assert not running and total - start >= 12, f"the stepper needs room for 12 steps (step {start} of {total})"
        steps.shot("stepper-before")
    # later cells of the notebook step the same session without refreshing the widget: the first click may jump
    counts = [start]
    for k in (1, 2):
        with steps(f"click-step-{k}"):
            before_src, before_px = plot.get_attribute("src"), plot.screenshot()
            ui.button("Step").click()
            wait_for(lambda: (_stepper_state(stepper)[0] or 0) > counts[-1], 120,
                     lambda: f"the step count did not advance from {counts[-1]}: {_stepper_state(stepper)[3][:200]!r}")
            counts.append(_stepper_state(stepper)[0])
            if k == 2:
                assert counts[2] == counts[1] + 1, f"one click on Step took {counts[2] - counts[1]} steps"
            wait_for(lambda src=before_src: plot.get_attribute("src") != src, 30, "the loss plot was not redrawn")
            book.wait_kernel_idle(60)
            diff = pixel_difference(before_px, plot.screenshot())
            print(f"    loss plot pixels changed: {diff:.1%}")
            assert diff > 0.001, f"the loss plot looks the same after Step {k} ({diff:.2%} of pixels changed)"
    steps.shot("stepper-after-two-steps")
    with steps("doc-image"):
        _doc_image(steps, stepper, "training_stepper")
    with steps("run-n-then-stop"):
        now = _stepper_state(stepper)[0]
        n = total - now  # more than can finish before Stop
        ui.set("N", n)
        ui.button("Run N").click()
        wait_for(lambda: (_stepper_state(stepper)[0] or 0) >= now + 1 and ui.button("Stop").is_enabled(), 120,
                 "Run N did not start training (no step taken or Stop not enabled)")
        steps.shot("stepper-running")
        ui.button("Stop").click()

        def stopped_state():
            count, _, running, text = _stepper_state(stepper)
            return (f"status {text[:160]!r} (count {'absent' if count is None else count}, says running: {running}); "
                    f"Step enabled: {ui.button('Step').is_enabled()}, Stop disabled: {ui.button('Stop').is_disabled()}")

        wait_for(lambda: _stepper_state(stepper)[0] is not None and not _stepper_state(stepper)[2]
                 and ui.button("Step").is_enabled() and ui.button("Stop").is_disabled(), 60,
                 lambda: f"the stepper did not settle after Stop: {stopped_state()}")
        stopped = _stepper_state(stepper)[0]
        time.sleep(3)
        after, _, running, text = _stepper_state(stepper)
        assert after == stopped and not running, f"training went on after Stop ({stopped} -> {after})"
        assert now < stopped < now + n, f"Run N was not stopped early: {now} -> {stopped} of N={n}"
        assert "Error" not in text, f"the stepper shows an error: {text[:300]!r}"
        print(f"    Run N={n} from step {now} stopped at step {stopped}")
        steps.shot("stepper-stopped")


def test_token_view_picks_another_prompt_in_jupyterlab(lab, page, steps):
    """Notebook 07 alone (no 06 in its workdir: it trains its own small SmolLM2 draft first): the token view shows a
    reply marked token by token, a corrected token says on hover what the draft proposed, and picking another prompt
    in the dropdown redraws the view with that prompt's reply."""
    small = {"verifier": "smollm2", "fallback_steps": 30, "fallback_prompts": 3, "context_longest": 256,
             "n_class_prompts": 2}
    book = _open_and_run(lab, page, steps, "07", small, timeout=600)
    viewer = Widgets.box_of(page, "label.widget-label:text-is('prompt')")
    ui = Widgets(page, viewer)
    view = viewer.locator(".widget-html").last

    def shown() -> tuple[str, int]:
        first = view.locator("div.prompt").first
        return (first.get_attribute("data-id") or "", first.locator("span[data-kind]").count())

    with steps("token-view-rendered"):
        viewer.scroll_into_view_if_needed()
        view.locator("span[data-kind]").first.wait_for()
        start_id, tokens = shown()
        assert tokens > 0 and start_id, f"no marked reply in the token view ({start_id!r}, {tokens} tokens)"
        corrected = view.locator("span[data-kind='corrected']")
        if corrected.count():
            assert "the draft proposed" in (corrected.first.get_attribute("title") or "")
            corrected.first.hover()
        steps.shot("token-view-before")
    with steps("doc-image"):
        _doc_image(steps, viewer, "token_view")
    with steps("pick-another-prompt"):
        options = viewer.locator("select option").all_text_contents()
        assert len(options) >= 2, f"the dropdown offers {options}"
        ui.set("prompt", options[-1])
        wait_for(lambda: shown()[0] and shown()[0] != start_id, 120,
                 lambda: f"the view still shows {shown()[0]!r} after picking {options[-1]!r}")
        book.wait_kernel_idle(60)
        assert shown()[0] in options[-1] and shown()[1] > 0
        steps.shot("token-view-after")
