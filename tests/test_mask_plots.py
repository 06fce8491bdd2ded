"""Mask figures, the MaskExplorer widget (no kernel), the ``eagle3kit masks`` command and notebook 03's parameters."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from eagle3kit import presets
from eagle3kit.cli import main
from eagle3kit.masks import plots as mask_plots
from eagle3kit.masks.eagle_mask import MaskInputError, build_mask, document_ids_from_lengths
from eagle3kit.masks.explorer import MaskExplorer, parse_lengths
from eagle3kit.runner import declared_parameters

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.fixture(scope="module")
def mask():
    return build_mask([300, 200, 77], 640, ttt_steps=3)


def _image(ax) -> np.ndarray:
    return np.asarray(ax.get_images()[0].get_array())


def test_token_heatmap_panels_show_the_tile_fractions(mask):
    fig = mask_plots.plot_token_mask(mask, max_pixels=160)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.get_images() and ax.get_title()]
    assert [ax.get_title() for ax in panels][1:] == ["keys added at TTT step 1", "keys added at TTT step 2"]
    tile = mask_plots.choose_tile(640, 640, 160)
    assert tile == 4
    for copy, ax in enumerate(panels):
        frac = mask.fractions(-1, (0, 640, copy * 640, (copy + 1) * 640), tile).numpy()
        expected = np.where(frac > 0, np.maximum(frac, mask_plots.FLOOR), 0)  # any attended pair: at least FLOOR
        np.testing.assert_allclose(_image(ax), expected)
    assert len(panels[0].collections) > 0  # boundary lines were drawn


def test_zoomed_heatmap_is_the_exact_token_view(mask):
    fig = mask_plots.plot_token_mask(mask, region=(250, 350, 250, 350), step=1)
    panels = [ax for ax in fig.axes if ax.get_images() and ax.get_title()]
    assert len(panels) == 2
    np.testing.assert_array_equal(_image(panels[0]), mask.token_view(1, (250, 350, 250, 350)).double().numpy())
    np.testing.assert_array_equal(_image(panels[1]), mask.token_view(1, (250, 350, 890, 990)).double().numpy())


def test_block_map_and_stats_panel(mask):
    fig = mask_plots.plot_block_map(mask, step=2)
    np.testing.assert_array_equal(_image(fig.axes[0]), mask.block_classes(2).numpy())
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[1] == f"partial ({int((mask.block_classes(2) == 1).sum())})"
    fig = mask_plots.plot_stats(mask)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert len(fig.axes[0].patches) == 3 and len(fig.axes[1].patches) == 9


def test_stats_bars_start_at_zero_and_carry_their_own_values(mask):
    from eagle3kit.masks.stats import stats

    table = stats(mask)
    left, right = mask_plots.plot_stats(mask, table).axes
    assert left.get_ylim()[0] == 0  # a sparsity axis from 83 % made 93 % look like a third of 98 %
    assert [t.get_text() for t in left.texts] == [f"{v:.1%}" for v in table["sparsity"]]  # not the pair counts
    labels = [t.get_text() for t in right.texts]
    assert len(labels) == 9 and labels[0] == mask_plots._bytes(table["blockmask_bytes"].iloc[0])
    assert labels[-1].endswith("MB") or labels[-1].endswith("KB")


@pytest.fixture(scope="module")
def full_length():
    return build_mask([310, 520, 95, 700, 240, 410, 150, 330], 3072, ttt_steps=3)


def test_full_length_views_keep_the_ttt_diagonals_visible(full_length):
    fig = mask_plots.plot_token_mask(full_length)
    panels = [ax for ax in fig.axes if ax.get_images() and ax.get_title()]
    for ax in panels[1:]:  # the TTT blocks: one attended pair per query, 1/tile of each diagonal tile
        image = ax.get_images()[0]
        shades = np.asarray(image.norm(image.get_array()))
        diagonal = np.diagonal(shades)
        assert (diagonal >= 0.5).all(), diagonal.min()  # a mid shade or darker, not a near-white 1/tile
        assert (shades[np.triu_indices_from(shades, 2)] == 0).all()  # empty tiles stay empty
        height_px = ax.get_position().height * fig.get_figheight() * fig.dpi
        assert shades.shape[0] <= height_px  # no image row dropped when drawn (a one-tile line would break up)
        assert not any(c.get_linestyle()[0][1] for c in ax.collections)  # no dotted block grid over it
    strip, ax = mask_plots.plot_layout_thumbnail(full_length.document_ids, 3, mask=full_length).axes
    image = ax.get_images()[0]
    shades = np.asarray(image.norm(image.get_array()))
    tiles = shades.shape[0]
    for copy in (1, 2):
        assert (np.diagonal(shades[:, copy * tiles:(copy + 1) * tiles]) >= 0.5).all()


def test_layout_thumbnail_from_a_collator_document_ids_tensor():
    ids = document_ids_from_lengths([100, 250, 30], 512)[None]  # [1, T] as speculators' collator returns it
    fig = mask_plots.plot_layout_thumbnail(ids, ttt_steps=2)
    strip, ax = fig.axes
    assert "3 documents, 132 padding tokens, 512 tokens x 2 TTT steps" == strip.get_title()
    assert len(strip.collections) == 4 * 2  # three documents and the padding, once per block of keys
    tile = mask_plots.choose_tile(512, 1024, 256)
    assert tile == 4 and _image(ax).shape == (128, 256)
    frac = build_mask(document_ids=ids, ttt_steps=2).fractions(-1, None, 4).numpy()
    np.testing.assert_allclose(_image(ax), np.where(frac > 0, np.maximum(frac, mask_plots.FLOOR), 0))
    with pytest.raises(MaskInputError, match="multiple of 128"):
        mask_plots.plot_layout_thumbnail(torch.zeros(1, 300, dtype=torch.long), ttt_steps=3)


def test_explorer_redraws_when_a_control_changes():
    explorer = MaskExplorer([300, 200, 77, 500], documents=2, padding=10, ttt_steps=2)
    assert explorer.error is None and explorer.mask.total_seq_len == 512
    # 500 tokens of documents and 10 asked: 512, so 12 padding tokens, and the status says why not 10
    assert "12 padding tokens (10 asked, up to the next multiple of 128)" in explorer.status.value
    first, first_png = explorer.figure, explorer.token_image.value
    explorer.ttt_steps.value = 3
    assert explorer.token_image.value[:8] == b"\x89PNG\r\n\x1a\n" and explorer.token_image.value != first_png
    assert explorer.figure is not first and explorer.mask.ttt_steps == 3
    assert len([ax for ax in explorer.figure.axes if ax.get_title()]) == 3
    explorer.documents.value = 3
    assert explorer.lengths.value == "300, 200, 77" and explorer.mask.segments()[2] == (2, 500, 577)
    explorer.sliding_window.value = 16
    assert explorer.mask.sliding_window == 16 and "window 16" in explorer.status.value
    explorer.zoom.value = 64
    explorer.zoom_start.value = 280
    panel = explorer.figure.axes[0]
    assert panel.get_xlim() == (280.0, 344.0)
    explorer.lengths.value = "100, -3"
    assert explorer.error == "Document lengths must be positive integers; length #1 is -3."
    assert "color:#c0392b" in explorer.status.value
    explorer.lengths.value = "100, 30"
    assert explorer.error is None and explorer.documents.value == 2


def test_explorer_shows_a_static_fallback_where_no_widget_state_is_saved():
    from eagle3kit.figures import WIDGET_NOTE, widget_bundle

    explorer = MaskExplorer([300, 200], documents=2, padding=10, ttt_steps=2)
    bundle = widget_bundle(explorer.widget, explorer.figure)
    assert "application/vnd.jupyter.widget-view+json" in bundle  # a live front end renders the widget
    assert bundle["text/plain"] == WIDGET_NOTE and "VBox" not in bundle["text/plain"]
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"  # a saved notebook shows its figure


def test_parse_lengths():
    assert parse_lengths("300, 512 77") == [300, 512, 77]
    assert parse_lengths("") == []
    with pytest.raises(MaskInputError, match="whole numbers"):
        parse_lengths("3 x")


def test_masks_command_prints_stats_and_writes_a_png(tmp_path, capsys):
    png = tmp_path / "mask.png"
    assert main(["masks", "--lengths", "300,100", "--total-seq-len", "512", "--ttt-steps", "2",
                 "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "2 documents, total_seq_len 512, 2 TTT steps" in out and "attended_pairs" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["masks", "--lengths", "300,100", "--total-seq-len", "300"]) == 2
    assert "not a multiple of 128" in capsys.readouterr().err


def test_notebook_03_declares_the_preset_parameters():
    declared = declared_parameters(NOTEBOOK_DIR / "03_blockmask_patterns.ipynb")
    for preset in presets.NAMES:
        assert set(presets.parameters(preset, "03")) <= declared
    assert {"workdir", "seed", "verifier"} <= declared


def _tick_label_collisions(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of x tick labels, within a panel or across panels, whose boxes overlap once the figure is drawn."""
    import itertools

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        lo, hi = sorted(ax.get_xlim())
        for tick in ax.xaxis.get_major_ticks():
            label = tick.label1
            if label.get_visible() and label.get_text() and lo <= tick.get_loc() <= hi:
                boxes.append((f"{ax.get_title()}: {label.get_text()}", label.get_window_extent(renderer)))
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def test_token_mask_key_tick_labels_do_not_collide():
    # a zoom whose edges fall on round keys (1750..1950, then 4950..5150): the demo's "1950" ran into "9950"
    mask = build_mask([1850, 800, 500], 3200, ttt_steps=3)
    zoom = mask_plots.around(1850, half=100)
    for region, step in ((None, -1), (zoom, -1), (zoom, 0)):
        assert _tick_label_collisions(mask_plots.plot_token_mask(mask, region=region, step=step)) == []


def test_the_window_table_counts_each_ttt_steps_pairs_and_what_the_window_keeps():
    """Notebook 03's sliding-window table: one row a TTT step, labelled as such, the pairs with thousands separated
    and the share the window keeps (all of it for a document shorter than the window, less for a longer one)."""
    from eagle3kit.masks.eagle_mask import build_mask
    from eagle3kit.masks.stats import stats, window_pairs

    full, windowed = build_mask([300, 100], 512, ttt_steps=2), build_mask([300, 100], 512, 2, 64)
    table = window_pairs(full, windowed)
    assert table.index.name == "TTT step" and len(table) == 2
    assert list(table.columns) == ["full attention", "window 64", "the window keeps"]
    first = int(stats(full)["attended_pairs"].iloc[0])
    assert table["full attention"].iloc[0] == f"{first:,}" and table["the window keeps"].iloc[0].endswith("%")
    assert int(table["the window keeps"].iloc[0][:-1]) < 100  # 300 tokens against a window of 64: the band bites
    short = window_pairs(build_mask([50, 40], 128, 2), build_mask([50, 40], 128, 2, 64))
    assert set(short["the window keeps"]) == {"100%"}  # documents shorter than the window: nothing cut
