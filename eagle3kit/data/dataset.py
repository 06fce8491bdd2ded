"""Training data from the real verifier, in speculators' own on-disk format (``speculators train --data-path DIR``).

Directory layout written by :func:`build_dataset` (everything speculators reads is in its own format)::

    DIR/
      data-00000-of-00001.arrow, dataset_info.json, state.json
                              Arrow dataset (``save_to_disk``, torch format), one row per conversation:
                              input_ids [seq] int64, loss_mask [seq] int64 (1 = assistant token), seq_len int
      hidden_states/hs_{i}.safetensors
                              row i: hidden_states [seq, n_aux + 1, hidden] (aux layers, then the last decoder
                              layer's output BEFORE the final norm) and token_ids [seq] int64
      token_freq.pt           {token id: count} over assistant tokens (speculators' counter)
      d2t-{N}.npy, t2d-{N}.npy
                              draft vocab mapping for draft vocab size N (speculators' function)
      held_out.jsonl          conversations kept out of training, {"messages": [...]} per line, for evaluation
      eagle3kit_data.json     manifest: verifier identity, aux layer ids, settings, counts, timings
                              (read and written through eagle3kit.data.directory: DataDir, Manifest)

API (the notebooks keep the directory at ``{workdir}/data``)::

    info = build_dataset("smollm2", out_dir, n_conversations=64, seq_length=512, draft_vocab_size=8192)
    loader = make_loader(out_dir, total_seq_len=1024, aux_layer_ids=build.aux_layer_ids)   # eagle3kit.data.loader
    prompts = held_out_prompts(out_dir)                  # eagle3kit.data.loader: chat turns up to the first reply
    verify_targets(out_dir, n_samples=2)                 # eagle3kit.data.targets: the pre-norm proof

Rows: one per conversation (all its assistant turns supervised), not speculators' one row per assistant turn, unless
the chat template re-renders history replies (Qwen3's thinking template): then one row per reply, as speculators makes
them (:func:`eagle3kit.data.conversations.rows`; counted as ``per_reply``). A row whose replies all lie beyond
``seq_length`` is dropped and counted, and the next one is taken, so ``n_conversations`` is the number of rows.
Extraction is resumable: finished files are skipped, bad ones (truncated, NaN, wrong tokens) are made again, every
file is written atomically. A directory ``speculators prepare-data`` made is not rebuilt here: its hidden states are
filled by :func:`eagle3kit.data.fill.fill_hidden_states` (``eagle3kit data --out DIR`` does it).
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path


from datasets import Dataset, load_from_disk

from eagle3kit.data import conversations as conv
from eagle3kit.data import hidden_states as hs
from eagle3kit.data import vocab
from eagle3kit import validate
from eagle3kit.data.directory import DataDir, DataError
from eagle3kit.data.manifest import Manifest, Request, verifier_identity
from eagle3kit.data.regenerate import in_seeded_order
from eagle3kit.device import resolve_device, resolve_dtype
from eagle3kit.draft.config import check_draft_vocab_size, resolve_aux_layer_ids
from eagle3kit.progress import tqdm
from eagle3kit.verifier import Verifier, load_tokenizer, resolve


@dataclass
class DatasetInfo:
    """What :func:`build_dataset` made (also stored in the manifest)."""

    path: str
    verifier: str
    verifier_path: str | None
    aux_layer_ids: list[int]
    hidden_size: int
    seq_length: int
    dtype: str
    n_samples: int
    n_held_out: int
    tokens: int
    assistant_tokens: int
    counts: dict = field(default_factory=dict)  # skipped_unusable, dropped_empty, truncated
    files: dict = field(default_factory=dict)  # written, skipped, remade
    remade: dict = field(default_factory=dict)  # {hidden-state file: why it was made again}
    tokens_per_s: float | None = None
    draft_vocab_size: int | None = None
    coverage: float = 1.0
    source_conversations: int | None = None  # records in the source (None: a directory made before it was counted)
    device: str | None = None  # the one device the verifier ran on to make the hidden states

    @classmethod
    def made(cls, path: Path, v: Verifier, manifest: Manifest, extraction: dict, draft_vocab_size: int | None,
             coverage: float, device: str) -> DatasetInfo:
        """What :func:`build_dataset` reports from the manifest it completed and the extraction it ran."""
        c, r = manifest.counts, manifest.request
        return cls(path=str(path), verifier=v.name, verifier_path=v.path, aux_layer_ids=manifest.aux_layer_ids,
                   hidden_size=v.text_config.hidden_size, seq_length=r.seq_length, dtype=r.dtype,
                   n_samples=c["n_samples"], n_held_out=c["n_held_out"], tokens=c["tokens"],
                   assistant_tokens=c["assistant_tokens"],
                   counts={k: c[k] for k in ("skipped_unusable", "dropped_empty", "truncated")},
                   files=extraction["files"], remade=extraction["remade"], tokens_per_s=extraction["tokens_per_s"],
                   draft_vocab_size=draft_vocab_size, coverage=coverage,
                   source_conversations=c.get("source_conversations"),
                   device=(manifest.extraction or {}).get("device", device))

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """What the directory holds, in one line (every field: :meth:`to_dict`)."""
        speed = f", {self.tokens_per_s:.0f} tokens/s" if self.tokens_per_s else ""
        vocab = (f"; a {self.draft_vocab_size}-token draft vocab covers {self.coverage:.1%} of the reply tokens"
                 if self.draft_vocab_size else "")
        return (f"{self.n_samples} training samples + {self.n_held_out} held out: {self.tokens:,} tokens, "
                f"{self.assistant_tokens:,} of them reply (the loss); hidden states of layers {self.aux_layer_ids} "
                f"and the last, in {self.dtype} ({self.files.get('written', 0)} files written, "
                f"{self.files.get('skipped', 0)} kept{speed}){vocab}")

    def train_command(self) -> str:
        """The ``speculators train`` line that trains on this directory (with its draft vocab when it wrote one)."""
        return (f"speculators train --data-path {self.path} --verifier-name-or-path {self.verifier_path}"
                + (f" --draft-vocab-size {self.draft_vocab_size}" if self.draft_vocab_size else ""))


def input_id_rows(data_dir: str | os.PathLike) -> list[list[int]]:
    """Every row's ``input_ids`` as plain lists (read without the torch format: about 100x faster)."""
    return load_from_disk(str(data_dir)).with_format(None)["input_ids"]


# ----------------------------------------------------------------------------------------------- building
def _write_arrow(out: Path, rows: list[conv.Tokenized]):
    """Save the Arrow dataset into ``out`` (via a temporary folder, files moved in when complete)."""
    ds = Dataset.from_dict({"input_ids": [r.input_ids for r in rows], "loss_mask": [r.loss_mask for r in rows],
                            "seq_len": [len(r.input_ids) for r in rows]})
    ds.set_format(type="torch")
    tmp = out / ".arrow.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    ds.save_to_disk(str(tmp))
    for p in out.glob("data-*.arrow"):
        p.unlink()
    for p in sorted(tmp.iterdir(), key=lambda p: p.name == "state.json"):  # state.json last
        os.replace(p, out / p.name)
    tmp.rmdir()


def training_rows(tokenizer, request: Request, counts: dict | None = None
                  ) -> tuple[list[conv.Turns], Iterator[tuple[conv.Turns, conv.Tokenized]]]:
    """The held-out conversations, and the stream of ``(turns, row)`` a directory made with ``request`` holds, in
    order (row ``i`` is the directory's row ``i``): a conversation whose assistant tokens all lie beyond
    ``seq_length`` is dropped and counted in ``counts["dropped_empty"]``."""
    counts = counts if counts is not None else {}
    conversations = conv.read(request.source)
    counts["source_conversations"] = len(conversations)
    # a regenerated source is already a seeded sample, in an order whose head does not depend on its size: kept as is,
    # so the held-out conversations (taken first) do not depend on n, nor on how many replies were regenerated
    stream = conv.ordered(conversations, request.seed, counts, shuffle=not in_seeded_order(request.source))
    held = list(itertools.islice(stream, request.held_out))

    def rows() -> Iterator[tuple[conv.Turns, conv.Tokenized]]:
        for turns in stream:
            made = conv.rows(tokenizer, turns, request.seq_length)
            if len(made) > 1:  # the template re-renders history replies: one row per reply
                counts["per_reply"] = counts.get("per_reply", 0) + 1
            for t in made:
                if sum(t.loss_mask) == 0:  # every assistant token lies beyond seq_length
                    counts["dropped_empty"] = counts.get("dropped_empty", 0) + 1
                    continue
                yield turns, t

    return held, rows()


def _tokenize(v: Verifier, request: Request, data: DataDir, progress: bool) -> dict:
    """Conversations -> tokens + loss mask -> Arrow dataset, token_freq.pt, held_out.jsonl. Returns counts.
    ``request.n_conversations`` None: every usable conversation of the source."""
    out = data.path
    n, seq_length = request.n_conversations, request.seq_length
    counts = {"skipped_unusable": 0, "dropped_empty": 0}
    held, stream = training_rows(load_tokenizer(v), request, counts)
    rows, truncated = [], 0
    with tqdm(total=n, desc="tokenize", disable=not progress) as bar:
        for _turns, t in stream:
            truncated += t.truncated
            rows.append(t)
            bar.update()
            if len(rows) == n:
                break
    dropped = counts["dropped_empty"]
    if len(rows) < (n or 1):
        raise DataError(
            f"Only {len(rows)} conversations with assistant tokens within seq_length={seq_length} are left after "
            f"{len(held)} held-out ones ({dropped} dropped as empty); ask for fewer "
            f"(n_conversations<={len(rows)}), fewer held out, a larger seq_length or a bigger source."
        )
    out.mkdir(parents=True, exist_ok=True)
    conv.write_jsonl(data.held_out_path, held)
    _write_arrow(out, rows)
    vocab.save_token_freq(load_from_disk(str(out)), out)
    return {"skipped_unusable": counts["skipped_unusable"], "dropped_empty": dropped, "truncated": truncated,
            "source_conversations": counts["source_conversations"],
            "n_samples": len(rows), "n_held_out": len(held),
            "tokens": sum(len(r.input_ids) for r in rows), "assistant_tokens": sum(sum(r.loss_mask) for r in rows)}


def build_dataset(
    verifier: Verifier | str = "smollm2",
    out_dir: str | os.PathLike = "data",
    n_conversations: int | None = 64,
    seq_length: int = 512,
    draft_vocab_size: int | None = None,
    seed: int = 0,
    held_out: int = 8,
    source: str | os.PathLike | None = None,
    dtype: str = "auto",
    device: str = "auto",
    batch_size: int = 4,
    aux_layer_ids: list[int] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    verifier_model=None,
) -> DatasetInfo:
    """Conversations -> verifier hidden states -> speculators' data directory (resumable; see the module doc).

    ``n_conversations`` None: every usable conversation of the source (after ``held_out``). ``dtype`` ``"auto"``:
    bfloat16 on CUDA, float32 on a CPU (:func:`eagle3kit.device.resolve_dtype`). The verifier runs whole on one
    ``device``. ``verifier_model``: the verifier already loaded, used instead of loading it again when it is in that
    dtype on that device."""
    validate.check_all({"dtype": dtype, "seq_length": seq_length, "held_out": held_out, "batch_size": batch_size,
                        "draft_vocab_size": draft_vocab_size})
    if n_conversations is not None:  # None: all
        validate.check("n_conversations", n_conversations, "e.g. `--n-conversations 64` or `--n-conversations all`.")
    v = resolve(verifier)
    aux = resolve_aux_layer_ids(v, aux_layer_ids)
    check_draft_vocab_size(draft_vocab_size, v.text_config.vocab_size)
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)  # the verifier runs and stores in it
    request = Request(n_conversations=n_conversations, seq_length=seq_length, seed=seed, held_out=held_out,
                      source=str(Path(source).resolve()) if source is not None else None, dtype=dtype)

    data = DataDir(out_dir)
    manifest = data.prepare_build(request, v, aux, overwrite)  # the manifest of a build to resume, else None
    if manifest is None or not manifest.tokenized or not data.has_arrow:
        manifest = Manifest(verifier=verifier_identity(v), aux_layer_ids=aux, request=request,
                            counts=_tokenize(v, request, data, progress))
        manifest.write(data.path)
    extraction = _extract(v, data, manifest, aux, dtype, device, batch_size, progress, verifier_model)
    coverage = _map_vocab(data, manifest, draft_vocab_size, v.text_config.vocab_size)
    manifest.complete = True
    manifest.write(data.path)
    return DatasetInfo.made(data.path, v, manifest, extraction, draft_vocab_size, coverage, device)


def _extract(v: Verifier, data: DataDir, manifest: Manifest, aux: list[int], dtype: str, device: str, batch_size: int,
             progress: bool, model=None) -> dict:
    """Every row's hidden states (resumable: finished files are kept, bad ones made again); a run that wrote files
    records its speed in ``manifest``. Returns the files written, skipped and remade (with why), and the speed."""
    state, stats = hs.fill(v, data.hidden_states_dir, input_id_rows(data.path), aux, dtype, device, batch_size,
                           progress, model)
    if stats["written"]:
        manifest.extraction = {"tokens_per_s": round(stats["tokens_per_s"], 1), "device": device,
                               "batch_size": batch_size, "seconds": round(stats["seconds"], 2)}
    return {"files": {"written": stats["written"], "skipped": len(state["done"]), "remade": len(state["bad"])},
            "remade": {str(data.hidden_state_file(i)): why for i, why in sorted(state["bad"].items())},
            "tokens_per_s": stats["tokens_per_s"] if stats["written"] else
            (manifest.extraction or {}).get("tokens_per_s")}


def _map_vocab(data: DataDir, manifest: Manifest, draft_vocab_size: int | None, vocab_size: int) -> float:
    """The d2t / t2d mapping for ``draft_vocab_size`` (speculators' function) and the share of supervised tokens it
    covers, recorded in ``manifest``; 1.0 for the full vocab (no mapping)."""
    if draft_vocab_size is None:
        return 1.0
    t2d, _d2t = vocab.build_mapping(data.path, draft_vocab_size, vocab_size)
    coverage = vocab.coverage(vocab.load_token_freq(data.path), t2d)
    manifest.vocab[draft_vocab_size] = round(coverage, 6)
    return coverage
