"""What the reader of an executed notebook sees: small real notebooks run by papermill, then checked.

Also :func:`eagle3kit.logs.quiet` against speculators' real weight loader (it logs through loguru).
"""

from __future__ import annotations

import sys

import nbformat
import papermill
import pytest
import torch
from loguru import logger
from safetensors.torch import save_file
from speculators.utils.loading import load_model_layers
from transformers.utils import logging as hf_logging

from eagle3kit.logs import quiet
from notebook_outputs import output_problems

FIGURE = """\
from matplotlib.figure import Figure

def figure():  # as eagle3kit's plot functions make them: no pyplot
    fig = Figure(figsize=(3, 2))
    fig.subplots().plot([0, 1], [1, 0])
    return fig"""


def execute(tmp_path, name: str, cells: list[str], fails: bool = False):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    src, out = tmp_path / f"{name}.ipynb", tmp_path / f"{name}.out.ipynb"
    nbformat.write(nb, src)
    if fails:
        with pytest.raises(papermill.PapermillExecutionError):
            papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    else:
        papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    return out


def weights_dir(path):
    """A real single-file checkpoint: speculators' loader logs that it has no index file and reads this one."""
    path.mkdir(exist_ok=True)
    save_file({"model.embed_tokens.weight": torch.ones(4, 2)}, str(path / "model.safetensors"))
    return path


def at(problems: list[str], cell: int) -> list[str]:
    return [p for p in problems if f" cell {cell}: " in p]


def test_each_problem_is_named_by_its_cell(tmp_path):
    out = execute(tmp_path, "problems", [
        FIGURE,
        "figure()",  # 2: no image printer for a Figure yet (no %matplotlib inline, no pyplot)
        r"print('\x1b[31mred\x1b[0m')",  # 3
        "import logging\nlogging.basicConfig()\nlogging.getLogger('somelib').warning('narrates')",  # 4
        "import warnings\nwarnings.warn_explicit('deprecated', FutureWarning, '/x/site-packages/lib/m.py', 3)",  # 5
        "from eagle3kit.figures import show_figures_as_png\nassert show_figures_as_png()\nfigure()",  # 6: an image
        "print('plain words a user can act on')",  # 7
        "raise ValueError('boom')",  # 8
    ], fails=True)
    problems = output_problems(out)
    assert at(problems, 2) == ["problems.out.ipynb cell 2: a Figure shown as text, not an image "
                               "(<Figure size 300x200 with 1 Axes>)"]
    assert len(at(problems, 3)) == 1 and "colour codes" in at(problems, 3)[0]
    assert len(at(problems, 4)) == 1 and "logging line" in at(problems, 4)[0] and "narrates" in at(problems, 4)[0]
    assert len(at(problems, 5)) == 1 and "library warning line" in at(problems, 5)[0]
    assert at(problems, 6) == [] and at(problems, 7) == []
    assert at(problems, 8) == ["problems.out.ipynb cell 8: an error output (ValueError: boom)"]
    assert len(problems) == 5


BARS = [  # a loop drawn with a bar, as tqdm.auto, eagle3kit, transformers and datasets draw it
    "from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='plain tqdm.auto'):\n    pass",
    "from eagle3kit.progress import tqdm as bar\nfor _ in bar(range(3), desc='eagle3kit', disable=False):\n    pass",
    "from transformers.utils import logging as hf_logging\nfor _ in hf_logging.tqdm(range(3), desc='hf'):\n    pass",
    "from datasets.utils.tqdm import tqdm as datasets_tqdm\nfor _ in datasets_tqdm(range(3), desc='ds'):\n    pass",
]


@pytest.fixture(scope="module")
def loads(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loads")
    weights = weights_dir(tmp / "weights")
    load = f"load_model_layers(['model.embed_tokens.weight'], {str(weights)!r})"
    out = execute(tmp, "loads", [
        f"import eagle3kit\nfrom eagle3kit.logs import quiet\nfrom speculators.utils.loading import "
        f"load_model_layers\n{FIGURE}",
        f"with quiet():\n    {load}",  # 2
        f"with quiet():\n    with quiet():\n        pass\n    {load}",  # 3: an inner block ends, the outer stays quiet
        "figure()",  # 4
        f"{load};",  # 5: speculators' loguru lines, coloured in a kernel
        "fig = figure()\nfig.axes[0].set_yscale('log')\nfig",  # 6: log ticks are mathtext: STIX / cm fonts
        BARS[0],  # 7: tqdm.auto's bar in a kernel that papermill runs: a widget
        BARS[1],  # 8: eagle3kit's own bar, the same outside the runner
    ])
    return output_problems(out)


def test_loads_inside_quiet_show_nothing_and_outside_they_are_caught(loads):
    assert at(loads, 1) == [] and at(loads, 2) == [] and at(loads, 3) == []
    fifth = at(loads, 5)
    assert any("loguru line" in p and "Loading from local directory" in p for p in fifth), loads
    assert any("loguru line" in p and "model.safetensors.index.json" in p for p in fifth), loads
    assert any("colour codes" in p for p in fifth), loads


def test_importing_eagle3kit_makes_figures_images(loads):
    assert at(loads, 4) == [], ("a Figure showed as text after `import eagle3kit`: eagle3kit/__init__.py must call "
                                "eagle3kit.figures.show_figures_as_png()")


def test_log_scale_figures_write_nothing_to_stderr(loads):
    assert at(loads, 6) == [], loads  # a font cache without matplotlib's own fonts: findfont lines on stderr


def test_widget_bars_papermill_saves_unfinished_are_caught(loads):
    for cell, desc in ((7, "plain tqdm.auto"), (8, "eagle3kit")):
        assert len(at(loads, cell)) == 1 and "widget saved unfinished" in at(loads, cell)[0], loads
        assert desc in at(loads, cell)[0]


def test_the_runner_runs_kernels_that_draw_no_bars(tmp_path):
    """Notebooks run by eagle3kit's runner (eagle3kit.progress.headless_env) save no bar: not eagle3kit's (even asked
    for with ``disable=False``), not transformers' or datasets'. (tqdm.auto's own bar, BARS[0], is not switched off:
    tqdm's notebook bar ignores ``TQDM_DISABLE``; eagle3kit draws every bar through eagle3kit.progress.)"""
    from eagle3kit.runner import run_notebooks

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("workdir = ''")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *map(nbformat.v4.new_code_cell, BARS[1:]), nbformat.v4.new_code_cell("1 + 1")]
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, tmp_path / "nbs" / "99_bars.ipynb")
    (result,) = run_notebooks(tmp_path / "out", tmp_path / "nbs", preset="ci", progress=False)
    assert result.status == "ok", result.error
    executed = nbformat.read(tmp_path / "out" / "99_bars.ipynb", as_version=4)
    assert executed.cells[-1].outputs[0]["data"]["text/plain"] == "2"  # the kernel ran every cell
    assert output_problems(tmp_path / "out" / "99_bars.ipynb") == []
    assert all(not cell.get("outputs") for cell in executed.cells[2:-1])  # nothing at all where the bars were


def test_use_bundled_fonts_adds_what_a_partial_cache_lacks():
    import copy

    import matplotlib
    from matplotlib import font_manager

    from eagle3kit.figures import use_bundled_fonts

    partial = copy.deepcopy(font_manager.fontManager)  # as a cache written without matplotlib's own fonts lists them
    partial.ttflist = [f for f in partial.ttflist if not f.fname.startswith(matplotlib.get_data_path())]
    with pytest.raises(ValueError):
        partial.findfont("STIXGeneral", fallback_to_default=False)
    assert "STIXGeneral.ttf" in use_bundled_fonts(partial) and use_bundled_fonts(partial) == []
    assert partial.findfont("STIXGeneral", fallback_to_default=False).endswith("STIXGeneral.ttf")


def test_quiet_silences_speculators_loader_and_nests(tmp_path):
    weights = str(weights_dir(tmp_path / "w"))
    records: list[str] = []
    sink = logger.add(records.append, level="INFO", format="{name} {message}")
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    try:
        with quiet():
            with quiet():
                load_model_layers(["model.embed_tokens.weight"], weights)
            load_model_layers(["model.embed_tokens.weight"], weights)  # still inside the outer block
            assert hf_logging.get_verbosity() == hf_logging.ERROR and not hf_logging.is_progress_bar_enabled()
        assert records == []
        assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == (verbosity, bars)
        load_model_layers(["model.embed_tokens.weight"], weights)
        assert any(r.startswith("speculators.utils.loading") and "index.json" in r for r in records), records
    finally:
        logger.remove(sink)


def test_speculators_token_counter_draws_no_bar_inside_quiet(tmp_path, capsys):
    from speculators.train import vocab_mapping

    from eagle3kit.data.vocab import load_token_freq, save_token_freq

    rows = [{"input_ids": torch.tensor([5, 6, 7]), "loss_mask": torch.tensor([0, 1, 1])}]
    vocab_mapping.save_token_frequency_distribution(rows, tmp_path / "outside.pt")
    assert "Counting token frequencies" in capsys.readouterr().err  # speculators' bar, on stderr
    save_token_freq(rows, tmp_path)
    assert capsys.readouterr().err == "" and load_token_freq(tmp_path) == {6: 1, 7: 1}
    vocab_mapping.save_token_frequency_distribution(rows, tmp_path / "after.pt")
    assert "Counting token frequencies" in capsys.readouterr().err  # the bar is back once the block ends


def test_quiet_stdout_swallows_prints_only_when_asked(capsys):
    with quiet(stdout=True):
        print("speculators' config helper narrates")
    with quiet():
        print("kept", file=sys.stdout)
    assert capsys.readouterr().out == "kept\n"


def written(tmp_path, outputs: list[list]) -> list[str]:
    """output_problems of a notebook built with nbformat: one code cell per list of outputs (no kernel needed)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("pass", outputs=outs) for outs in outputs]
    path = tmp_path / "built.ipynb"
    nbformat.write(nb, path)
    return output_problems(path)


def stream(text: str, name: str = "stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def shown(data: dict):
    return nbformat.v4.new_output("display_data", data=data)


FINDFONT = "findfont: Font family ['STIXGeneral'] not found. Falling back to DejaVu Sans.\n"
BAR = "\rCounting token frequencies:   0%|          | 0/12 [00:00<?, ?it/s]"
DONE = "\rCounting token frequencies: 100%|██████████| 12/12 [00:00<00:00, 629.74it/s]"


def test_stderr_text_is_flagged_and_stdout_is_not(tmp_path):
    problems = written(tmp_path, [[stream(FINDFONT, "stderr"), stream(FINDFONT, "stderr")],
                                  [stream("CUDA_HOME is not set\n", "stderr")], [stream("plain words\n")]])
    assert len(at(problems, 1)) == 1 and "stderr" in at(problems, 1)[0] and "STIXGeneral" in at(problems, 1)[0]
    assert len(at(problems, 2)) == 1 and "CUDA_HOME" in at(problems, 2)[0]
    assert at(problems, 3) == []


def widget(text: str) -> dict:
    """A widget as a kernel saves it: its view and, as ``text/plain``, its first frame."""
    return {"application/vnd.jupyter.widget-view+json": {"model_id": "m", "version_major": 2, "version_minor": 0},
            "text/plain": text}


def test_progress_bars_as_text_are_flagged_and_widgets_are_not(tmp_path):
    problems = written(tmp_path, [[stream(BAR, "stderr"), stream(DONE, "stderr"), stream("\n", "stderr")],
                                  [stream(DONE)], [shown({"text/plain": DONE})], [shown(widget(DONE[1:]))],
                                  [stream("coverage 100% | 12/12 files\n40% of 10 tokens\n")]])
    assert len(at(problems, 1)) == 1 and "progress bar" in at(problems, 1)[0]
    assert "Counting token frequencies" in at(problems, 1)[0]
    assert len(at(problems, 2)) == 1 and len(at(problems, 3)) == 1  # a bar on stdout or as a result: text all the same
    assert at(problems, 4) == [] and at(problems, 5) == []  # a widget (a finished bar), and percentages in prose


def test_a_widget_bar_saved_unfinished_is_flagged(tmp_path):
    """tqdm.auto's bar in a kernel without a frontend (papermill) is saved with its first frame: "0%" for ever."""
    problems = written(tmp_path, [[shown(widget("hidden states:   0%|          | 0/1060 [00:00<?, ?tok/s]"))],
                                  [shown(widget("VBox(children=(Button(description='Step'),))"))]])
    assert len(at(problems, 1)) == 1 and "widget saved unfinished" in at(problems, 1)[0]
    assert "hidden states" in at(problems, 1)[0]
    assert at(problems, 2) == []  # a widget that is not a bar (the stepper's buttons)


def test_walls_of_text_are_flagged_and_short_or_html_outputs_are_not(tmp_path):
    wall = "".join(f"key_{i}: {i}\n" for i in range(45))
    pieces = [stream(wall[:100]), stream(wall[100:])]  # one print, sent by the kernel in two pieces
    head = "".join(f"key_{i}: {i}\n" for i in range(40))
    problems = written(tmp_path, [pieces, [shown({"text/plain": wall})], [stream(head)],
                                  [shown({"text/plain": wall, "text/html": "<table></table>"})]])
    assert len(at(problems, 1)) == 1 and "wall of 45 lines" in at(problems, 1)[0]
    assert len(at(problems, 2)) == 1
    assert at(problems, 3) == [] and at(problems, 4) == []  # 40 lines is not a wall; a table shows as HTML


def test_cpu_only_toolchain_warnings_are_quiet_after_setup_and_heard_before(tmp_path, caplog):
    """torch.compile's "No CUDA runtime is found" (notebook 03's demo run printed it to stderr) is expected on a CPU:
    notebook.setup silences that logger; before it, the same warning is emitted."""
    import logging

    from eagle3kit import logs, notebook

    name = logs.EXPECTED_ON_CPU[0]
    level = logging.getLogger(name).level
    try:
        logging.getLogger(name).setLevel(logging.NOTSET)
        with caplog.at_level(logging.WARNING):
            logging.getLogger(name).warning("No CUDA runtime is found")
        assert "No CUDA runtime" in caplog.text
        caplog.clear()
        notebook.setup(tmp_path / "work")
        logging.getLogger(name).warning("No CUDA runtime is found")
        assert "No CUDA runtime" not in caplog.text
    finally:
        logging.getLogger(name).setLevel(level)
