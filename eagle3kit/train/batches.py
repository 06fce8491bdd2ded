"""What a :class:`~eagle3kit.train.session.TrainSession` trains on: its batches at an exact, resumable position.

They come from :func:`eagle3kit.data.loader.make_loader`: speculators' ``ArrowDataset`` +
``MultipackDistributedBatchSamplerV2`` + ``CollateFn`` (eagle3 ``shift_batch``), i.e. the very batches
``speculators train`` packs on one GPU for the same ``total_seq_len``, ``seed`` and ``train_data_ratio``. They are
driven here the way a ``DataLoader`` with ``num_workers=0`` drives them, so that the position (epoch, batch index)
can be saved and sought without replaying. With ``ranks`` > 1, each position holds one batch per data-parallel rank,
drawn by that rank's sampler, as the processes of ``torchrun --nproc_per_node=ranks -m speculators.train`` draw them.
"""

from __future__ import annotations

from typing import Any

import torch

from eagle3kit.data.loader import batch_sampler, make_loader
from eagle3kit.data.directory import DataDir, DataError


class Batches:
    """Packed training batches of ``data`` by (epoch, index); epoch ``e`` is shuffled with ``seed + e``; one batch
    per rank at each position. ``data`` is already checked for ``build``'s draft (:meth:`DataDir.for_draft`)."""

    def __init__(self, data: DataDir, build, total_seq_len: int, seed: int, train_ratio: float, dtype: torch.dtype,
                 ranks: int = 1):
        data_dir = data.path
        rows = data.n_samples
        if not rows:
            raise DataError(f"{data_dir} holds no training samples; build it with more conversations.")
        if int(rows * train_ratio) == 0:
            raise DataError(
                f"{data_dir} has {rows} sample(s): train_data_ratio={train_ratio} leaves none for training; "
                "build it with more conversations (or raise train_data_ratio)."
            )
        loader = make_loader(data, total_seq_len, dtype, train_ratio=train_ratio, split="train", seed=seed)
        self.dataset, self.collate = loader.dataset, loader.collate_fn
        self.samplers = [loader.batch_sampler] if ranks == 1 else [
            batch_sampler(self.dataset, total_seq_len, seed, ranks, rank) for rank in range(ranks)]
        lengths = list(self.dataset.approx_lengths)
        if max(lengths) > total_seq_len:
            longest = max(range(len(lengths)), key=lengths.__getitem__)
            raise DataError(
                f"Sample {longest} of {data_dir} has {lengths[longest]} tokens, more than total_seq_len="
                f"{total_seq_len}; use total_seq_len >= {max(lengths)} or rebuild the data with a smaller seq_length."
            )
        self.device = build.device
        self.epoch, self.index = 0, 0
        self._epoch_batches: tuple[int, list] = (-1, [])
        self._cached: tuple[tuple[int, int], list[dict[str, Any]]] | None = None
        if len(self._batches(0)) == 0:
            raise DataError(f"{data_dir} has {len(self.dataset)} training sample(s), too few to give each of {ranks} "
                            "ranks a batch; build it with more conversations (or train with fewer ranks).")

    @property
    def ranks(self) -> int:
        return len(self.samplers)

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self._batches(0))

    def _batches(self, epoch: int) -> list[list[list[int]]]:
        """Per position of ``epoch``: the rows of each rank's batch."""
        if self._epoch_batches[0] != epoch:
            per_rank = []
            for sampler in self.samplers:
                sampler.set_epoch(epoch)
                per_rank.append([list(map(int, b)) for b in sampler])
            self._epoch_batches = (epoch, [list(ranks) for ranks in zip(*per_rank, strict=True)])
        return self._epoch_batches[1]

    def indices(self, epoch: int | None = None, index: int | None = None, rank: int = 0) -> list[int]:
        """Dataset rows packed into ``rank``'s batch ``index`` of ``epoch`` (default: the current position)."""
        epoch = self.epoch if epoch is None else epoch
        return self._batches(epoch)[self.index if index is None else index][rank]

    def peek(self) -> dict[str, Any]:
        """The collated batch at the current position (rank 0's; tensors only, on the session's device)."""
        return self.peek_ranks()[0]

    def peek_ranks(self) -> list[dict[str, Any]]:
        """The collated batch of each rank at the current position."""
        key = (self.epoch, self.index)
        if self._cached is None or self._cached[0] != key:
            batches = [self.collate([self.dataset[i] for i in self.indices(rank=r)]) for r in range(self.ranks)]
            tensors = [{k: v.to(self.device) for k, v in b.items() if isinstance(v, torch.Tensor)} for b in batches]
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
