"""One probe worker process: build a tiny draft once, then run the requested attention cells, one JSON line each.

Run by :mod:`~eagle3kit.doctor.probe.matrix` as ``main(SPEC, RESULTS)`` in a process forked by the
:mod:`~eagle3kit.doctor.probe.zygote` (CPU), or as ``python -m eagle3kit.doctor.probe.worker SPEC RESULTS``. Before
each cell it writes a ``start`` line, after it a ``done`` line, so that a segfault or hang inside a cell is pinned to
that cell by the parent. All cells use the same weights (a state dict saved by the first worker, loaded by every later
one) and the same seeded batch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import warnings

import torch
from speculators.losses import resolve_loss_config
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.doctor.checks.facts import mask_kind
from eagle3kit.draft.config import DraftBuild, build_config, with_attention
from eagle3kit.draft.model import build_model
from eagle3kit.train.forward import block_sparse_forward


def _emit(out, **event) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def make_batch(seq_len: int, n_aux: int, hidden: int, vocab: int, seed: int, device: str) -> dict:
    """A packed batch like speculators' collate output: two documents plus 8 padding positions, batch dim 1."""
    g = torch.Generator().manual_seed(seed + seq_len)
    pad = min(8, seq_len // 4)
    first = (seq_len - pad) * 3 // 5
    doc = torch.tensor([0] * first + [1] * (seq_len - pad - first) + [-1] * pad).unsqueeze(0)
    batch = {
        "hidden_states": torch.randn(1, seq_len, n_aux * hidden, generator=g),
        "input_ids": torch.randint(0, vocab, (1, seq_len), generator=g),
        "document_ids": doc,
        "loss_mask": (doc != -1),
        "verifier_last_hidden_states": torch.randn(1, seq_len, hidden, generator=g),
    }
    return {k: v.to(device) for k, v in batch.items()}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0] if text else ''}".strip()
    return line if len(line) <= 160 else line[:157] + "..."


def run_cell(build, state_dict, cell: dict, batch: dict, loss_config, device: str, seed: int, row: dict,
             note=lambda **_: None) -> None:
    """Build the draft with ``cell['backend']`` (``unset``: ``_attn_implementation`` left None), run it, fill ``row``.

    ``note`` is called with the resolved backend and mask kind before the step, so that a crash still reports them.
    """
    backend = cell["backend"]
    # block_sparse_cpu with gradients: eagle3kit's training step (the draft's config keeps sdpa); without: a config
    # naming it, run by speculators' own forward, as a decode or speculators' trainer would run it
    step = backend == BLOCK_SPARSE and cell["grad"]
    config = with_attention(build.config, "sdpa" if step else None if backend == "unset" else backend)
    torch.manual_seed(seed)
    model = Eagle3DraftModel(config)
    model.load_state_dict(state_dict)
    model.to(device).train(cell["grad"])
    seq_len = batch["input_ids"].shape[1]
    if step:
        row["resolved"], row["mask"] = f"{BLOCK_SPARSE} (eagle3kit's training step)", "BlockMask"
    else:
        row["resolved"] = model._attn_impl  # noqa: SLF001
        row["mask"] = mask_kind(model._build_attn_mask(batch["document_ids"][0], seq_len, device))  # noqa: SLF001
    note(resolved=row["resolved"], mask=row["mask"])
    cuda = device.startswith("cuda")
    if cuda:  # the peak of this cell alone: the model and batch are on the GPU, nothing else of earlier cells
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for repeat in range(max(1, cell.get("repeats", 1))):
        model.zero_grad(set_to_none=True)
        row["t0"] = time.perf_counter()
        with torch.set_grad_enabled(cell["grad"]):
            if step:
                tokens = None
                loss, _metrics = block_sparse_forward(model, batch, cell["ttt_steps"], 1.0, loss_config)
            else:
                tokens, loss, _metrics = model(**batch, ttt_steps=cell["ttt_steps"], loss_config=loss_config)
            if cell["grad"]:
                loss.backward()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - row.pop("t0"))
        if repeat == 0:
            row["loss"] = float(loss.detach())
            row["tokens"] = None if tokens is None else [t[0].tolist() for t in tokens]
            if cuda:  # torch.cuda.max_memory_allocated of the first step (weights, batch, step, gradients)
                row["peak_bytes"] = torch.cuda.max_memory_allocated(device)
    row["seconds"] = sorted(times)[len(times) // 2]  # median
    row["spread"] = max(times) - min(times)  # the repeats' range: the noise a speed claim must beat


def first_tokens_mapping(build: DraftBuild) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """t2d/d2t for a reduced draft vocab (the first N token ids): attention does not depend on which tokens."""
    vocab, draft = build.verifier.text_config.vocab_size, build.config.draft_vocab_size
    if draft == vocab:
        return None, None
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:draft] = True
    return t2d, torch.zeros(draft, dtype=torch.long)


def main(spec_path: str, results_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    with open(results_path, "a") as out:
        _emit(out, event="building", pid=os.getpid())
        torch.set_num_threads(spec.get("threads", 2))
        # a stray print must not end up as the last log line, which the parent quotes when startup fails
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            build = build_config(verifier=spec["verifier"], attn_implementation="eager", device=spec["device"],
                                 ttt_steps=spec.get("build_ttt_steps") or max(c["ttt_steps"] for c in spec["cells"]),
                                 draft_vocab_size=spec.get("draft_vocab_size"))
            torch.manual_seed(spec["seed"])
            # verifier-owned weights come from the verifier, the same in every process
            draft = build_model(build, *first_tokens_mapping(build))
            weights = spec["weights"]  # the trainable ones from the first worker's file, so all cells share them
            if os.path.exists(weights):
                draft.load_state_dict(torch.load(weights, map_location="cpu"), strict=False)
            else:
                trainable = {n: p.detach().cpu() for n, p in draft.named_parameters() if p.requires_grad}
                tmp = f"{weights}.tmp-{os.getpid()}"
                torch.save(trainable, tmp)
                os.replace(tmp, weights)
            state_dict = {k: v.cpu() for k, v in draft.state_dict().items()}
            del draft
        loss_config = resolve_loss_config("kl_div", spec.get("loss_implementation", "eager"))
        tl = build.config.transformer_layer_config
        n_aux = len(build.aux_layer_ids)
        _emit(out, event="ready")
        for index in spec["run"]:
            cell = spec["cells"][index]
            batch = make_batch(cell["seq_len"], n_aux, tl.hidden_size, tl.vocab_size, spec["seed"], spec["device"])
            _emit(out, event="start", cell=index, t=time.time())
            row: dict = {}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run_cell(build, state_dict, cell, batch, loss_config, spec["device"], spec["seed"], row,
                             note=lambda _i=index, **kw: _emit(out, event="info", cell=_i, **kw))
                _emit(out, event="done", cell=index, status="ok", **row)
            except Exception as exc:  # the point of the probe: report, then go on with the next cell
                row["seconds"] = time.perf_counter() - row.pop("t0") if "t0" in row else None
                _emit(out, event="done", cell=index, status="error", error=first_line(exc), **row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
