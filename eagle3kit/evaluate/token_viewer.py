"""``TokenViewer``: pick a prompt, see every token's fate (:func:`eagle3kit.evaluate.token_page.prompt_html`).

The logic lives in plain methods (``show``); the dropdown only calls it, so tests set ``.picker.value`` without a
kernel. A prompt's view is computed when it is first picked (one draft forward; the verifier's too unless cached)
and kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ipywidgets as w

from eagle3kit.evaluate.fates import PromptView
from eagle3kit.evaluate.token_page import legend_html, prompt_html


class TokenViewer:
    """A dropdown of prompt ``labels`` over ``view_at(i)`` (the i-th prompt's view); ``.widget`` is the box."""

    def __init__(self, labels: Sequence[str], view_at: Callable[[int], PromptView], tokenizer, k: int,
                 start: int = 0):
        self._view_at, self.tokenizer = view_at, tokenizer
        self.views: dict[int, PromptView] = {}
        self.error: str | None = None
        self.picker = w.Dropdown(options=[(label, i) for i, label in enumerate(labels)], value=start,
                                 description="prompt", layout=w.Layout(width="640px"))
        self.page = w.HTML()
        self.picker.observe(lambda change: self.show(change["new"]), names="value")
        self.widget = w.VBox([self.picker, w.HTML(legend_html(k)), self.page])
        self.show(start)

    def view(self, i: int) -> PromptView:
        if i not in self.views:
            self.views[i] = self._view_at(i)
        return self.views[i]

    def show(self, i: int) -> None:
        """Show prompt ``i``; an error is shown in place of the page, and kept in ``.error``."""
        try:
            self.error = None
            self.page.value = prompt_html(self.view(i), self.tokenizer)
        except Exception as exc:  # noqa: BLE001 - shown in the widget, kept in .error
            self.error = f"{type(exc).__name__}: {exc}"
            self.page.value = f"<span style='color: #b00'>{self.error}</span>"
