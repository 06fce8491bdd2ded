"""eagle3kit: build, debug and train EAGLE-3 draft models with speculators, on a CPU first.

The stages, in the notebooks' order (docs/layout.md also draws the layers their imports form):

``draft``       01  the draft config built from a verifier, explained; warm start
``doctor``      02  findings (what, why, fix), the crash-isolated probe, draft folders, the failure catalogue
``masks``       03  the EAGLE-3 BlockMask: views, statistics, plots, the explorer widget
``data``        04  conversations -> verifier hidden states in speculators' layout (``DataDir``), vocab mapping
``train``       05  ``TrainSession``, checkpoints, the stepper widget, speculators' trainer launched and rehearsed
``evaluate``    06  acceptance length τ, the decode loop, export, serving in vLLM
``plan``            disk, GPU memory, time and served speedup of the GPU run (notebook 01's last section)
``cli``             the ``eagle3kit`` command, one module per subcommand

What the stages share, below them all:

``verifier``    the verifier every stage measures against: resolved (smollm2, tiny, presets, HF dirs, hub ids), loaded
``attention``   ``block_sparse_cpu``: training attention at the BlockMask's sparsity on a CPU (forward and backward)
``errors``      :class:`UserError`, the mistake a user can fix (one line, exit 2)
``atomic``      atomic writes: a file or folder appears complete or not at all
``logs``        the one place that quiets library output
``progress``    progress bars: tqdm.auto's, and none in a headless notebook run
``device``      the device and the dtype data and training use
``figures``     Figures as PNG in IPython and in widgets
``tables``      terminal tables that fit the width, Markdown tables
``assets``      offline assets from PyPI packages (the SmolLM2 GGUF, ShareGPT, benchmark prompts)
``validate``    the rule of each named value
``outputs``     the places a command writes, checked first
``params``      a notebook's parameters cell: types, value checks
``processes``   processes started in their own session (vLLM), stopped as a group
``vllm_env``    vLLM's CPU build in its own virtual environment

What the notebooks share, above the stages:

``notebook``    the first cell's setup, the workdir places notebooks hand each other
``presets``     named parameter presets (``ci``, ``demo``, ``full``), each for the CPU it runs on
``runner``      the notebooks run in order with papermill
``course``      notebook 06's conclusion, generated from the run's summaries, the recipe lab and the presets
``gpu_steps``   notebook 06's GPU hand-off: the commands from a plan to a served draft, for the user's own data
``next_run``    what the next run should be: the lab's frontier as a table, the options that rerun a row, the levers
"""

__version__ = "0.1.0"

from eagle3kit.figures import show_figures_as_png  # noqa: E402

show_figures_as_png()  # in a notebook, the library's Figures display as images whatever the backend
