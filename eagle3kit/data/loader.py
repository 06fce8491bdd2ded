"""Reading a data directory made by :func:`eagle3kit.data.dataset.build_dataset`: packed batches, held-out prompts.

``make_loader`` packs batches as ``speculators train`` does (``ArrowDataset`` -> multipack sampler ->
``CollateFn(shift_batch)``), after :func:`eagle3kit.data.health.require_healthy` checked every hidden-state file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from speculators.models.eagle3.data import shift_batch
from speculators.train.data import ArrowDataset, CollateFn
from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2
from torch.utils.data import DataLoader

from eagle3kit.data import conversations as conv
from eagle3kit.data.health import remake_command, require_healthy
from eagle3kit.data.directory import DataDir, as_data_dir, DataError
from eagle3kit.verifier import Verifier


def held_out_conversations(data_dir: str | os.PathLike) -> list[list[dict]]:
    """The held-out conversations (role/content turns) for evaluation."""
    path = Path(data_dir) / DataDir.HELD_OUT
    return conv.read_jsonl(path) if path.exists() and path.stat().st_size else []


def held_out_coverage(data_dir: str | os.PathLike, tokenizer, draft_vocab_size: int | None) -> float | None:
    """Share of the held-out conversations' reply tokens inside the draft vocab (its saved t2d; None without held-out
    replies): the vocab is counted on the training replies, so this is what the draft can reach on unseen prompts."""
    t2d_path = as_data_dir(data_dir).mapping_paths(draft_vocab_size)[1] if draft_vocab_size else None
    t2d = torch.from_numpy(np.load(t2d_path)) if t2d_path is not None and t2d_path.exists() else None
    replies = [t["content"] for turns in held_out_conversations(data_dir) for t in turns if t["role"] == "assistant"]
    ids = [i for text in replies for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    if not ids:
        return None
    return 1.0 if t2d is None else sum(bool(t2d[i]) for i in ids) / len(ids)


def held_out_prompts(data_dir: str | os.PathLike) -> list[list[dict]]:
    """The prompt of each held-out conversation (:func:`~eagle3kit.data.conversations.prompt_turns`; render it with
    ``add_generation_prompt=True``)."""
    return [p for p in map(conv.prompt_turns, held_out_conversations(data_dir)) if p]


def held_out_prompt_ids(data_dir: str | os.PathLike, n: int, max_prompt_tokens: int, train_ratio: float
                        ) -> list[torch.Tensor]:
    """Prompts ([1, P] ids) of a directory without held-out conversations (speculators' ``prepare-data`` keeps
    none): the rows of the split speculators' trainer validates on (``ArrowDataset(split="val")``: the rows after
    ``int(rows * train_ratio)``), each cut before its first supervised token, i.e. the render that ends with the
    generation prompt. Prompts longer than ``max_prompt_tokens`` are skipped (a cut would drop the template's head)."""
    from datasets import load_from_disk

    rows = load_from_disk(str(data_dir)).with_format(None)
    out = []
    for i in range(int(len(rows) * train_ratio), len(rows)):
        mask = rows[i]["loss_mask"]
        start = mask.index(1) if 1 in mask else 0
        if 0 < start <= max_prompt_tokens:
            out.append(torch.tensor([rows[i]["input_ids"][:start]]))
        if len(out) == n:
            break
    if not out:
        raise DataError(f"{data_dir} has no held-out conversations, and none of its validation rows (the last "
                        f"{1 - train_ratio:.0%}) has a prompt of at most {max_prompt_tokens} tokens; raise "
                        "--max-prompt-tokens or pass --prompt TEXT.")
    return out


def load_dataset(data_dir: str | os.PathLike, max_len: int, hidden_states_dtype: torch.dtype = torch.float32,
                 train_ratio: float = 1.0, split: str = "train"):
    """speculators' ``ArrowDataset`` over ``data_dir`` (cached files only: ``on_missing="raise"``)."""
    return ArrowDataset(max_len=max_len, datapath=str(data_dir), on_missing="raise", train_ratio=train_ratio,
                        split=split, hidden_states_dtype=hidden_states_dtype)


def batch_sampler(dataset, total_seq_len: int, seed: int, ranks: int = 1, rank: int = 0,
                  max_batches: int | None = None) -> MultipackDistributedBatchSamplerV2:
    """speculators' packing sampler for data-parallel ``rank`` of ``ranks`` (what each GPU of ``speculators train``
    with ``ranks`` processes draws)."""
    return MultipackDistributedBatchSamplerV2(batch_max_length=total_seq_len, lengths=dataset.approx_lengths,
                                              num_replicas=ranks, rank=rank, seed=seed, max_batches=max_batches)


def packs_per_epoch(data_dir: str | os.PathLike, total_seq_len: int, train_ratio: float = 1.0, seed: int = 0) -> int:
    """How many packs of ``total_seq_len`` tokens speculators' sampler makes of the training split in an epoch (on
    one rank; N ranks take N a step). Reads the lengths only: any data directory speculators reads will do."""
    return len(batch_sampler(load_dataset(data_dir, total_seq_len, train_ratio=train_ratio), total_seq_len, seed))


def make_loader(
    data_dir: str | os.PathLike,
    total_seq_len: int,
    hidden_states_dtype: torch.dtype = torch.float32,
    train_ratio: float = 1.0,
    split: str = "train",
    seed: int = 0,
    max_batches: int | None = None,
    verifier: Verifier | str | None = None,
    aux_layer_ids: list[int] | None = None,
    check: bool = True,
):
    """Packed batches as ``speculators train`` makes them: ArrowDataset -> multipack sampler -> CollateFn(shift_batch).

    Each batch: hidden_states [1, T, n_aux*hidden], input_ids, verifier_last_hidden_states, loss_mask, position_ids,
    document_ids (-1 = padding) with T = ``total_seq_len``. The directory is opened here (a :class:`DataDir` is used
    as it is);
    ``verifier`` / ``aux_layer_ids`` are checked against the directory when given.
    """
    data = as_data_dir(data_dir)
    if verifier is not None or aux_layer_ids is not None:
        data.check_compatible(verifier, aux_layer_ids)
    if not data.complete:
        raise DataError(f"{data.path} is incomplete (extraction was interrupted); finish it with: "
                        f"{remake_command(data)}")
    if check:
        require_healthy(data)
    dataset = load_dataset(data.path, total_seq_len, hidden_states_dtype, train_ratio, split)
    sampler = batch_sampler(dataset, total_seq_len, seed, max_batches=max_batches)
    collate = CollateFn(total_seq_len, data.hidden_size, num_target_layers=len(data.aux_layer_ids),
                        dtype=hidden_states_dtype, preprocess=shift_batch)
    return DataLoader(dataset, batch_sampler=sampler, num_workers=0, collate_fn=collate)
