"""What a :class:`~eagle3kit.train.TrainSession` trains on: its batches at an exact, resumable position, and inputs.

They come from :func:`eagle3kit.data.make_loader`: speculators' ``ArrowDataset`` +
``MultipackDistributedBatchSamplerV2`` + ``CollateFn`` (eagle3 ``shift_batch``), i.e. the very batches
``speculators train`` packs on one GPU for the same ``total_seq_len``, ``seed`` and ``train_data_ratio``. They are
driven here the way a ``DataLoader`` with ``num_workers=0`` drives them, so that the position (epoch, batch index)
can be saved and sought without replaying. The helpers below find a session's inputs (data, verifier, draft shape).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from eagle3kit import data


class Batches:
    """Packed training batches of ``data_dir`` by (epoch, index); epoch ``e`` is shuffled with ``seed + e``."""

    def __init__(self, data_dir: str | os.PathLike, build, total_seq_len: int, seed: int, train_ratio: float,
                 dtype: torch.dtype):
        data_dir = Path(data_dir)
        data.check_compatible(data_dir, build.verifier, build.aux_layer_ids)
        manifest = data.read_manifest(data_dir)
        rows = manifest.get("counts", {}).get("n_samples")
        if not rows:
            raise data.DataError(f"{data_dir} holds no training samples; build it with more conversations.")
        if int(rows * train_ratio) == 0:
            raise data.DataError(
                f"{data_dir} has {rows} sample(s): train_data_ratio={train_ratio} leaves none for training; "
                "build it with more conversations (or raise train_data_ratio)."
            )
        loader = data.make_loader(data_dir, total_seq_len, dtype, train_ratio=train_ratio, split="train", seed=seed,
                                  verifier=build.verifier, aux_layer_ids=build.aux_layer_ids)
        self.dataset, self.sampler, self.collate = loader.dataset, loader.batch_sampler, loader.collate_fn
        lengths = list(self.dataset.approx_lengths)
        if max(lengths) > total_seq_len:
            longest = max(range(len(lengths)), key=lengths.__getitem__)
            raise data.DataError(
                f"Sample {longest} of {data_dir} has {lengths[longest]} tokens, more than total_seq_len="
                f"{total_seq_len}; use total_seq_len >= {max(lengths)} or rebuild the data with a smaller seq_length."
            )
        self.device = build.device
        self.epoch, self.index = 0, 0
        self._epoch_batches: tuple[int, list] = (-1, [])
        self._cached: tuple[tuple[int, int], dict[str, Any]] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self._batches(0))

    def _batches(self, epoch: int) -> list:
        if self._epoch_batches[0] != epoch:
            self.sampler.set_epoch(epoch)
            self._epoch_batches = (epoch, [list(map(int, b)) for b in self.sampler])
        return self._epoch_batches[1]

    def indices(self, epoch: int | None = None, index: int | None = None) -> list[int]:
        """Dataset rows packed into batch ``index`` of ``epoch`` (default: the current position)."""
        epoch = self.epoch if epoch is None else epoch
        return self._batches(epoch)[self.index if index is None else index]

    def peek(self) -> dict[str, Any]:
        """The collated batch at the current position (tensors only, on the session's device)."""
        key = (self.epoch, self.index)
        if self._cached is None or self._cached[0] != key:
            batch = self.collate([self.dataset[i] for i in self.indices()])
            tensors = {k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
            self._cached = (key, tensors)
        return self._cached[1]

    def advance(self) -> None:
        self.index += 1
        if self.index >= len(self._batches(self.epoch)):
            self.epoch, self.index = self.epoch + 1, 0

    def seek(self, epoch: int, index: int) -> None:
        if not 0 <= index < len(self._batches(epoch)):
            raise ValueError(f"Batch {index} does not exist in epoch {epoch} ({len(self._batches(epoch))} batches).")
        self.epoch, self.index = epoch, index


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence speculators' weight loader (it logs every file it opens via loguru) and its warnings."""
    from loguru import logger

    logger.disable("speculators")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.enable("speculators")


def data_verifier(data_dir: str | os.PathLike) -> str:
    """The verifier a data directory was made with (its path, else its name), from the manifest."""
    manifest = data.check_compatible(data_dir)
    v = manifest["verifier"]
    return v.get("path") or v["name"]


def spec_from_config(config_dir: str | os.PathLike, **overrides):
    """The :class:`~eagle3kit.config.DraftSpec` of a saved draft ``config.json`` (e.g. notebook 01's) + overrides."""
    import json

    from eagle3kit.config import DraftSpec

    path = Path(config_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; run notebook 01 (or eagle3kit.config.save_config) first.")
    cfg = json.loads(path.read_text())
    tl = cfg["transformer_layer_config"]
    kinds = tl.get("layer_types") or []
    spec = DraftSpec(
        verifier=cfg["speculators_config"]["verifier"]["name_or_path"], num_layers=tl["num_hidden_layers"],
        draft_arch=tl["model_type"], ttt_steps=cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"],
        aux_layer_ids=list(cfg["eagle_aux_hidden_state_layer_ids"]), hidden_act=tl["hidden_act"],
        sliding_window=tl.get("sliding_window") or 2048,
        full_attention_indices=[i for i, k in enumerate(kinds) if k == "full_attention"],
        **{k: cfg[k] for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
                                "embed_requires_grad")},
    )
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


def data_draft_vocab_size(data_dir: str | os.PathLike) -> int | None:
    """The draft vocab size the data directory has a mapping for, when it has exactly one (else None)."""
    sizes = list(data.check_compatible(data_dir).get("vocab") or {})
    return int(sizes[0]) if len(sizes) == 1 else None


def load_mappings(data_dir: str | os.PathLike, build) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(t2d, d2t) for the draft's vocab size from the data directory; (None, None) for the full vocab."""
    size = build.config.draft_vocab_size
    if size == build.verifier.text_config.vocab_size:
        return None, None
    return data.load_vocab_mapping(data_dir, size)


def find_or_build_data(workdir: str | os.PathLike, verifier: str, rebuild: bool = False, **build_kwargs) -> Path:
    """Notebook 04's data (``workdir/data``) when it is complete and ``rebuild`` is False; else a small one made
    here with :func:`eagle3kit.data.build_dataset` in ``workdir/data_05`` (resumable; ``build_kwargs`` go to it)."""
    theirs = Path(workdir) / "data"
    manifest = data.read_manifest(theirs)
    if not rebuild and manifest is not None and manifest.get("complete"):
        return theirs
    mine = Path(workdir) / "data_05"
    data.build_dataset(verifier, mine, **build_kwargs)
    return mine
