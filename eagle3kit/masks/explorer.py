"""``MaskExplorer``: ipywidgets controls over :func:`~eagle3kit.masks.eagle_mask.build_mask` and the mask plots.

All logic lives in plain methods (``layout``, ``redraw``); the controls only call them. Tests set a control's
``.value`` and read ``.figure`` / ``.error`` without a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
from matplotlib.figure import Figure

from eagle3kit.figures import png_bytes
from eagle3kit.masks import plots as mask_plots
from eagle3kit.masks.eagle_mask import BLOCK, EagleMask, MaskInputError, build_mask, round_up_to_block

ZOOMS = [("whole sequence", 0), ("64 tokens", 64), ("128 tokens", 128), ("256 tokens", 256), ("512 tokens", 512),
         ("1024 tokens", 1024), ("2048 tokens", 2048)]


def parse_lengths(text: str) -> list[int]:
    """``"300, 512 77"`` -> ``[300, 512, 77]``; one clear sentence for anything else."""
    items = [t for t in text.replace(",", " ").split() if t]
    try:
        return [int(t) for t in items]
    except ValueError:
        raise MaskInputError(f"Document lengths must be whole numbers separated by commas, got {text!r}.") from None


class MaskExplorer:
    """Documents (count and lengths), padding, TTT steps, sliding window and a zoom window over the EAGLE-3 mask.

    ``pool`` supplies document lengths: the ``documents`` slider takes its first *k* (e.g. ShareGPT lengths).
    ``total_seq_len`` is the lengths plus ``padding``, rounded up to a multiple of 128 as speculators' flex path needs.
    """

    def __init__(self, pool: Sequence[int], documents: int = 4, padding: int = 64, ttt_steps: int = 3,
                 sliding_window: int = 0, max_pixels: int = 240):  # 240: a panel's pixels at 80 dpi
        self.pool = [int(n) for n in pool] or [BLOCK]
        self.max_pixels = max_pixels
        self.mask: EagleMask | None = None
        self.figure: Figure | None = None
        self.block_figure: Figure | None = None
        self.error: str | None = None
        self.redraws = 0
        self._syncing = False
        style = {"description_width": "110px"}
        self.documents = widgets.IntSlider(min(documents, len(self.pool)), 1, len(self.pool), description="documents",
                                           style=style)
        self.lengths = widgets.Text(self._pool_text(self.documents.value), description="lengths", style=style,
                                    continuous_update=False, layout=widgets.Layout(width="520px"))
        self.padding = widgets.IntSlider(padding, 0, 4096, description="padding", style=style)
        self.ttt_steps = widgets.IntSlider(ttt_steps, 1, 6, description="TTT steps", style=style)
        self.sliding_window = widgets.IntText(sliding_window, description="window (0=off)", style=style)
        self.zoom = widgets.Dropdown(options=ZOOMS, value=0, description="zoom", style=style)
        self.zoom_start = widgets.IntText(0, description="zoom start", style=style)
        self.status = widgets.HTML()
        # PNG bytes in Image widgets: render in any frontend, no pyplot/inline backend needed, testable headless.
        self.token_image = widgets.Image(format="png")
        self.block_image = widgets.Image(format="png")
        self.output = widgets.HBox([self.token_image, self.block_image])
        self.documents.observe(self._on_documents, "value")
        self.lengths.observe(self._on_lengths, "value")
        for control in (self.padding, self.ttt_steps, self.sliding_window, self.zoom, self.zoom_start):
            control.observe(lambda _change: self.redraw(), "value")
        self.widget = widgets.VBox([
            widgets.HBox([self.documents, self.padding]), self.lengths,
            widgets.HBox([self.ttt_steps, self.sliding_window]), widgets.HBox([self.zoom, self.zoom_start]),
            self.status, self.output,
        ])
        self.redraw()

    def _pool_text(self, k: int) -> str:
        return ", ".join(str(n) for n in self.pool[:k])

    def _on_documents(self, change) -> None:
        if self._syncing:
            return
        self._syncing = True
        self.lengths.value = self._pool_text(change["new"])
        self._syncing = False
        self.redraw()

    def _on_lengths(self, _change) -> None:
        if self._syncing:
            return
        try:
            count = len(parse_lengths(self.lengths.value))
        except MaskInputError:
            count = 0
        if 1 <= count <= self.documents.max:
            self._syncing = True
            self.documents.value = count
            self._syncing = False
        self.redraw()

    def layout(self) -> tuple[list[int], int]:
        """The document lengths and total_seq_len the controls describe."""
        lengths = parse_lengths(self.lengths.value)
        if self.padding.value < 0:
            raise MaskInputError(f"padding must be 0 or more tokens, got {self.padding.value}.")
        used = sum(n for n in lengths if n > 0)
        return lengths, max(BLOCK, round_up_to_block(used + self.padding.value))

    def region(self, total_seq_len: int) -> tuple[int, int, int, int] | None:
        """The zoom window in step-0 coordinates (the same window in every block of keys), or None."""
        size = self.zoom.value
        if not size:
            return None
        start = min(max(0, self.zoom_start.value), max(0, total_seq_len - size))
        return (start, start + size, start, start + size)

    def redraw(self) -> Figure | None:
        """Rebuild the mask from the controls and redraw; a bad input is shown as one sentence in ``status``."""
        try:
            lengths, total = self.layout()
            window = self.sliding_window.value or None
            self.mask = build_mask(lengths, total, self.ttt_steps.value, window)
            self.figure = mask_plots.plot_token_mask(self.mask, self.region(total), max_pixels=self.max_pixels)
            self.block_figure = mask_plots.plot_block_map(self.mask)
            self.error = None
        except MaskInputError as exc:
            self.error = str(exc)
        self.redraws += 1
        self._show()
        return self.figure

    def _show(self) -> None:
        if self.error:
            self.status.value = f"<b style='color:#c0392b'>{self.error}</b>"
        else:
            m = self.mask
            padding = int((m.document_ids == -1).sum())
            docs = len({d for d, _, _ in m.segments() if d >= 0})
            rounded = (f" ({self.padding.value} asked, up to the next multiple of {BLOCK})"
                       if padding != self.padding.value else "")
            self.status.value = (f"{docs} documents, {padding} padding tokens{rounded}, "
                                 f"total_seq_len {m.total_seq_len}, {m.ttt_steps} TTT steps, "
                                 f"window {m.sliding_window or 'off'}; built in {m.build_seconds:.2f}s")
        if not self.error:
            self.token_image.value = png_bytes(self.figure)
            self.block_image.value = png_bytes(self.block_figure)
