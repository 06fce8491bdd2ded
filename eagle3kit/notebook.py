"""What the notebooks share: the first cell's :func:`setup`, :func:`folded` appendix tables, and the workdir places
they hand each other.

Notebook 01 saves the draft config to ``workdir/draft_config`` (05 takes its shape); 04 writes the training data to
``workdir/data`` (05 and 06 train on it); 05 checkpoints to ``workdir/checkpoint_05`` (06 resumes it); 06 exports its
draft to ``workdir/draft_06`` and keeps what it scored in ``workdir/scored_06.json`` (07 looks at both,
:func:`scored_by_06`). Run without 04, 05 and 06 share one small set in ``workdir/data_small``, built once by
:func:`training_data` with :data:`SMALL_DATA` (the one home of its size).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.directory import DataDir
from eagle3kit.runner import read_summary

MAX_COLWIDTH = 120  # characters of a table cell before pandas cuts it (the repository's line length)
TABLE_WIDTH = 200  # characters of a table's text line before pandas wraps its columns below each other
DRAFT_CONFIG = "draft_config"  # notebook 01's draft config.json folder in the workdir
DATA = "data"  # notebook 04's data directory
CHECKPOINT_05 = "checkpoint_05"  # notebook 05's checkpoint, which 06 resumes
CHECKPOINT_06 = "checkpoint_06"  # notebook 06's checkpoint (its session's, after its own steps)
DRAFT_06 = "draft_06"  # notebook 06's export, which 07 looks at
SCORED_06 = "scored_06.json"  # what notebook 06 scored (eagle3kit.evaluate.scored), which 07 looks at token by token
DRAFT_07 = "draft_07"  # notebook 07 alone (no 06 in this workdir): the draft it trains for itself
SMALL_DATA_DIR = "data_small"  # the small set 05 and 06 build when 04's data is missing
SMALL_DATA = {"n_conversations": 8, "seq_length": 256, "draft_vocab_size": 2048, "held_out": 4}
DATA_SUMMARY_KEYS = ("regenerate_seconds", "hidden_states_seconds")  # notebook 04's summary: its data minutes


def setup(workdir: str | os.PathLike, seed: int | None = None, threads: int | None = None) -> Path:
    """The first code cell of every notebook: seed torch, set the thread count (``None``: torch's own, which follows
    ``OMP_NUM_THREADS``), widen pandas' table cells, make ``workdir``; return it as a Path.

    Library log lines are silenced where they happen (:func:`eagle3kit.logs.quiet`, inside eagle3kit's loaders), as
    are warnings that state the expected on a CPU (:func:`eagle3kit.logs.silence_expected`); figures display as
    images once ``eagle3kit`` is imported (:func:`eagle3kit.figures.show_figures_as_png`)."""
    from eagle3kit.logs import silence_expected

    silence_expected()
    if seed is not None:
        torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    pd.set_option("display.max_colwidth", MAX_COLWIDTH)
    pd.set_option("display.width", TABLE_WIDTH)  # a saved table's text wraps less
    path = Path(workdir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def folded(obj: Any, summary: str) -> Any:
    """A long appendix table (a DataFrame or Styler) or text folded under a one-line ``summary``: Jupyter shows the
    line and opens the rest on a click (HTML ``<details>``), so an appendix reads as a list of what it holds."""
    import html

    from IPython.display import HTML

    body = obj.to_html() if hasattr(obj, "to_html") else f"<pre>{html.escape(str(obj))}</pre>"
    return HTML(f"<details><summary>{html.escape(summary)}</summary>{body}</details>")


def short(path: str | os.PathLike, workdir: str | os.PathLike) -> str:
    """``path`` as a reader needs it: under ``workdir`` as ``workdir/...``, under the home folder as ``~/...``, else
    as it is (a notebook prints where it wrote, not this machine's folders)."""
    path = Path(path).resolve()
    for base, said in ((Path(workdir).resolve(), "workdir"), (Path.home().resolve(), "~")):
        if path.is_relative_to(base):
            return str(Path(said) / path.relative_to(base))
    return str(path)


def training_data(workdir: str | os.PathLike, verifier: str, seed: int = 0, rebuild: bool = False,
                  progress: bool = True) -> DataDir:
    """Notebook 04's data when it is complete (and not ``rebuild``); else the small set of :data:`SMALL_DATA` in
    ``workdir/data_small``, built here (resumable: files already written are kept; ``rebuild``: made again)."""
    theirs = DataDir(Path(workdir) / DATA)
    if not rebuild and theirs.complete:
        return theirs
    small = Path(workdir) / SMALL_DATA_DIR
    build_dataset(verifier, small, seed=seed, overwrite=rebuild, progress=progress, **SMALL_DATA)
    return DataDir(small)


def minutes_to_make(workdir: str | os.PathLike, history: list[dict]) -> tuple[float, float]:
    """Minutes this run spent making its draft: (data, training). Data: notebook 04's regeneration and hidden states,
    from its summary (0 without one); training: every step in ``history`` (a session's, 05's steps included)."""
    made = read_summary(workdir, "04") or {}
    return sum(made.get(key, 0) for key in DATA_SUMMARY_KEYS) / 60, sum(r["seconds"] for r in history) / 60


def continue_or_start(workdir: str | os.PathLike, resume: bool, verifier: str, seed: int = 0, progress: bool = True,
                      **settings):
    """Notebook 06's session: notebook 05's checkpoint continued when ``resume`` and it is there (same data, draft
    and optimizer state), else a new session on :func:`training_data` with ``settings``; and a line saying which.
    ``progress``: progress bars while building data and training."""
    from eagle3kit.train.checkpoint import SESSION_FILE
    from eagle3kit.train.session import TrainSession

    checkpoint = Path(workdir) / CHECKPOINT_05
    if resume and (checkpoint / SESSION_FILE).exists():
        session = TrainSession.resume(checkpoint, progress=progress)
        return session, f"resumed notebook 05's session at step {session.global_step}"
    data = training_data(workdir, verifier, seed=seed, progress=progress)
    session = TrainSession(data, seed=seed, progress=progress, **settings)
    return session, f"new session on {data.path}"



@dataclass
class Scored:
    """Notebook 07's material: a draft (its folder, reloaded), the verifier, the prompt sets scored with it, the data
    directory it was trained on, and a line saying where they came from."""

    draft_dir: Path
    draft: Any
    verifier: Any
    tokenizer: Any
    sets: dict
    data_dir: Path | None
    how: str
    states: dict  # the verifier's hidden states of the scored sequences that 06 kept, else empty

    @property
    def k(self) -> int:
        return int(self.draft.config.speculators_config.proposal_methods[0].speculative_tokens)


def scored_by_06(workdir: str | os.PathLike, verifier: str, fallback_steps: int, n_prompts: int, bench: str,
                 n_bench_prompts: int, max_new_tokens: int, seed: int = 0) -> Scored:
    """Notebook 06's export and what it scored (:data:`SCORED_06`), nothing made again; when 06 did not run in
    ``workdir``, a draft trained here for ``fallback_steps`` steps (05's session continued when there, else one on
    :func:`training_data` from the verifier's last layer), its held-out prompts and ``n_bench_prompts`` of ``bench``
    with the verifier's continuations. Models are loaded quietly (no progress bars)."""
    from eagle3kit.evaluate.export import reload
    from eagle3kit.evaluate.scored import read_scored
    from eagle3kit.evaluate.verifier_states import load_states
    from eagle3kit.logs import quiet
    from eagle3kit.train.checkpoint import SESSION_FILE, read_session
    from eagle3kit.verifier import load_model, load_tokenizer

    work = Path(workdir)
    with quiet():
        if (work / SCORED_06).exists() and (work / DRAFT_06 / "config.json").exists():
            sets, about = read_scored(work / SCORED_06)
            data = (Path(read_session(work / CHECKPOINT_06)["data_dir"])
                    if (work / CHECKPOINT_06 / SESSION_FILE).exists() else None)
            draft_dir, how = work / DRAFT_06, (
                f"notebook 06's draft ({about.get('steps')} steps) and what it scored: " + ", ".join(
                    f"{s.name} ({len(s.prompts)} prompts, continuations by {s.continuations_from})"
                    for s in sets.values()))
        else:
            session, start = continue_or_start(work, True, verifier, seed=seed, progress=False, warm_start_layer=-1)
            session.run(fallback_steps)
            draft_dir, data = session.export(work / DRAFT_07), session.data.path
            sets = _score_here(session, n_prompts, bench, n_bench_prompts, max_new_tokens)
            how = (f"notebook 06 did not run here: {start}, trained {fallback_steps} more steps "
                   f"({session.global_step} in all)")
        draft = reload(draft_dir)
        name = draft.config.speculators_config.verifier.name_or_path
        verifier = load_model(name)
        return Scored(draft_dir, draft, verifier, load_tokenizer(name), sets, data, how,
                      load_states(work / SCORED_06, verifier.name_or_path))  # {} when 06 kept none


def _score_here(session, n_prompts: int, bench: str, n_bench_prompts: int, max_new_tokens: int) -> dict:
    """The held-out prompts and ``bench``'s, with the verifier's greedy continuations (transformers)."""
    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.evaluate import benchmarks
    from eagle3kit.evaluate.acceptance import continuations
    from eagle3kit.evaluate.defaults import MAX_PROMPT_TOKENS
    from eagle3kit.evaluate.scored import ScoredSet
    from eagle3kit.verifier import load_model, load_tokenizer

    tok, model = load_tokenizer(session.build.verifier), load_model(session.build.verifier)
    held = [benchmarks.cut_user_turn(tok, p, MAX_PROMPT_TOKENS)
            for p in benchmarks.held_out_set(held_out_conversations(session.data.path), n_prompts)]
    sets = {benchmarks.HELD_OUT: held, **({bench: benchmarks.load_set(bench, n_bench_prompts)} if bench else {})}
    out = {}
    for name, prompts in sets.items():
        ids = benchmarks.render(tok, prompts, model)
        conts = continuations(model, [torch.tensor([i]) for i in ids], max_new_tokens, tok.eos_token_id, False)
        out[name] = ScoredSet(name, prompts, ids, conts, "transformers (float32)")
    return out
