"""``TokenViewer``: pick a prompt, see every token's fate (:func:`eagle3kit.evaluate.token_page.prompt_html`), over
:class:`SetViews`: the prompt sets a run scored (:mod:`eagle3kit.evaluate.scored`), each prompt's view computed when
first asked for (one draft forward; the verifier's too unless its states are cached) and kept.

The logic lives in plain methods (``show``); the dropdown only calls it, so tests set ``.picker.value`` without a
kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ipywidgets as w

from eagle3kit.evaluate.benchmarks import balanced
from eagle3kit.evaluate.fates import PromptView, views_of
from eagle3kit.evaluate.scored import ScoredSet
from eagle3kit.evaluate.token_page import legend_html, prompt_html


class SetViews:
    """The views of every prompt of ``sets`` for one draft, computed on demand and kept; ``states`` caches the
    verifier's hidden states (shared with other measurements of the same sequences)."""

    def __init__(self, verifier, draft, sets: dict[str, ScoredSet], k: int, states: dict | None = None):
        self.verifier, self.draft, self.sets, self.k = verifier, draft, sets, k
        self.states = {} if states is None else states
        self.entries = [(name, i) for name, s in sets.items() for i in range(len(s.prompts))]
        self._views: dict[tuple[str, int], PromptView] = {}

    def view(self, name: str, i: int) -> PromptView:
        if (name, i) not in self._views:
            s = self.sets[name]
            vllm = None if s.vllm is None else (s.vllm[0][i:i + 1], s.vllm[1][i:i + 1])
            self._views[name, i] = views_of(self.verifier, self.draft, s.prompts[i:i + 1], s.ids[i:i + 1],
                                            s.conts[i:i + 1], self.k, self.states, vllm=vllm)[0]
        return self._views[name, i]

    def views(self, name: str, n: int | None = None) -> list[PromptView]:
        """The views of ``n`` prompts of set ``name``, its categories in turn (all when ``n`` is None or 0)."""
        prompts = self.sets[name].prompts
        return [self.view(name, prompts.index(p)) for p in balanced(prompts, n or None)]

    def computed(self) -> list[PromptView]:
        """Every view computed so far, in the sets' order."""
        return [self._views[e] for e in self.entries if e in self._views]

    def labels(self) -> list[str]:
        return [f"{name}: {self.sets[name].prompts[i].id} ({self.sets[name].prompts[i].category})"
                for name, i in self.entries]

    def view_at(self, j: int) -> PromptView:
        return self.view(*self.entries[j])


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
