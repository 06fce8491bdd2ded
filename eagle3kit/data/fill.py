"""Hidden states for a dataset ``speculators prepare-data`` made, written by the verifier on this machine.

speculators fills such a directory with ``speculators generate-offline-data`` against a vLLM server that extracts
hidden states; on vLLM's CPU build that server starts but cannot write (its connector needs CUDA: docs/vllm.md).
:func:`fill_hidden_states` writes the same files with the HF verifier instead:
``hidden_states/hs_{i}.safetensors`` for Arrow row ``i`` (``hidden_states`` [seq, n_aux + 1, hidden]: the aux layers'
inputs, then the last decoder layer's output before the final norm; ``token_ids``), resumable like ``eagle3kit data``.
Like speculators' own pipeline it writes no eagle3kit manifest, so the directory stays what speculators'
pipeline leaves, and every command takes it with ``--verifier`` and ``--aux-layer-ids``
(:class:`eagle3kit.data.directory.DataDir`). It also counts the supervised tokens (``token_freq.pt``, speculators'
counter) when prepare-data did not, and writes ``d2t-N``/``t2d-N`` for a draft vocab.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from datasets import load_from_disk

from eagle3kit import validate
from eagle3kit.data import hidden_states as hs
from eagle3kit.data import vocab
from eagle3kit.data.dataset import input_id_rows
from eagle3kit.data.directory import DataDir, DataError
from eagle3kit.device import resolve_device, resolve_dtype
from eagle3kit.draft.config import check_draft_vocab_size, resolve_aux_layer_ids
from eagle3kit.verifier import Verifier, resolve


@dataclass
class FillInfo:
    """What :func:`fill_hidden_states` did."""

    path: str
    verifier_path: str
    aux_layer_ids: list[int]
    rows: int
    written: int
    skipped: int
    remade: int
    tokens_per_s: float | None
    draft_vocab_size: int | None
    coverage: float | None

    def to_dict(self) -> dict:
        return asdict(self)

    def next_commands(self) -> list[str]:
        """The commands that train on the directory and doctor it (it has no manifest: the verifier and aux ids are
        passed)."""
        told = f"--verifier {self.verifier_path} --aux-layer-ids {' '.join(map(str, self.aux_layer_ids))}"
        vocab_flag = f" --draft-vocab-size {self.draft_vocab_size}" if self.draft_vocab_size else ""
        return [f"eagle3kit doctor --data {self.path} --verifier {self.verifier_path}",
                f"eagle3kit train --data {self.path} {told}{vocab_flag} --steps 10 --save CKPT --export DRAFT",
                f"speculators train --data-path {self.path} --verifier-name-or-path {self.verifier_path}"
                + vocab_flag + f" --target-layer-ids {' '.join(map(str, self.aux_layer_ids))}"]


def fill_hidden_states(verifier: Verifier | str, out_dir: str | os.PathLike, aux_layer_ids: list[int] | None = None,
                       draft_vocab_size: int | None = None, dtype: str = "auto", device: str = "auto",
                       batch_size: int = 4, progress: bool = True) -> FillInfo:
    """Write the hidden states of every row of the prepared dataset in ``out_dir`` (see the module doc).
    ``aux_layer_ids``: None for speculators' default ``[2, L//2, L-3]`` (its ``--target-layer-ids`` default)."""
    validate.check_all({"dtype": dtype, "batch_size": batch_size, "draft_vocab_size": draft_vocab_size})
    data = DataDir.open(out_dir)
    if not data.prepared_elsewhere:
        raise DataError(f"{out_dir} holds no dataset `speculators prepare-data` wrote (an Arrow dataset without an "
                        "eagle3kit manifest); run prepare-data first, or make the data with `eagle3kit data`.")
    v = resolve(verifier)
    aux = resolve_aux_layer_ids(v, aux_layer_ids)
    check_draft_vocab_size(draft_vocab_size, v.text_config.vocab_size)
    data.check_compatible(v)  # files an earlier run wrote must be this verifier's
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    samples = input_id_rows(data.path)
    state, stats = hs.fill(v, data.hidden_states_dir, samples, aux, dtype, device, batch_size, progress)
    if not data.token_freq_path.exists():  # prepare-data skips it by default (--skip-token-freq)
        vocab.save_token_freq(load_from_disk(str(data.path)), data.path)
    coverage = None
    if draft_vocab_size is not None:
        t2d, _d2t = vocab.build_mapping(data.path, draft_vocab_size, v.text_config.vocab_size)
        coverage = round(vocab.coverage(vocab.load_token_freq(data.path), t2d), 6)
    return FillInfo(str(data.path), v.path or v.name, aux, len(samples), stats["written"], len(state["done"]),
                    len(state["bad"]), stats.get("tokens_per_s"), draft_vocab_size, coverage)
