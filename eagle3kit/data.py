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

API (the notebooks keep the directory at ``{workdir}/data``)::

    info = build_dataset("smollm2", out_dir, n_conversations=64, seq_length=512, draft_vocab_size=8192)
    t2d, d2t = load_vocab_mapping(out_dir, 8192)          # (None, None) for the full vocab
    loader = make_loader(out_dir, total_seq_len=1024, aux_layer_ids=build.aux_layer_ids)   # packed batches
    prompts = held_out_prompts(out_dir)                  # chat turns up to the first reply, for evaluation
    verify_targets(out_dir, n_samples=2)                 # the pre-norm proof, for any speculators data dir

Rows: one per conversation (all its assistant turns supervised), not speculators' one row per assistant turn; a
conversation whose replies all lie beyond ``seq_length`` is dropped and counted, and the next one is taken, so
``n_conversations`` is the number of rows. Extraction is resumable: finished files are skipped, bad ones
(truncated, NaN, wrong tokens) are made again, every file is written atomically.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from eagle3kit import conversations as conv
from eagle3kit import hidden_states as hs
from eagle3kit import vocab
from eagle3kit.atomic import write_text
from eagle3kit.hidden_states import extract, verify_targets  # noqa: F401  (public re-exports)
from eagle3kit.manifest import (  # noqa: F401  (public re-exports)
    MANIFEST,
    DataError,
    check_compatible,
    default_aux_layer_ids,
    read_manifest,
    require_manifest,
    verifier_identity,
)
from eagle3kit.verifier import Verifier, load_tokenizer, resolve

HELD_OUT = "held_out.jsonl"
FORMAT_VERSION = 1


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
    tokens_per_s: float | None = None
    draft_vocab_size: int | None = None
    coverage: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- building
def _arrow_present(out: Path) -> bool:
    return (out / "state.json").exists() and (out / "dataset_info.json").exists() and any(out.glob("data-*.arrow"))


_OURS = ("data-*.arrow", "dataset_info.json", "state.json", "token_freq.pt", "d2t-*.npy", "t2d-*.npy", HELD_OUT,
         MANIFEST, ".*.tmp*", "hidden_states")


def _only_ours(out: Path) -> bool:
    """True when every entry of ``out`` is something build_dataset writes (an interrupted first build)."""
    return all(any(p.match(pattern) for pattern in _OURS) for p in out.iterdir())


def _clear(out: Path) -> None:
    for pattern in _OURS:
        for p in out.glob(pattern):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def _write_arrow(out: Path, rows: list[conv.Tokenized]):
    """Save the Arrow dataset into ``out`` (via a temporary folder, files moved in when complete)."""
    from datasets import Dataset

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


def _tokenize(v: Verifier, request: dict, out: Path, progress: bool) -> dict:
    """Conversations -> tokens + loss mask -> Arrow dataset, token_freq.pt, held_out.jsonl. Returns counts."""
    from datasets import load_from_disk
    from tqdm.auto import tqdm

    tokenizer = load_tokenizer(v)
    n, seq_length = request["n_conversations"], request["seq_length"]
    counts = {"skipped_unusable": 0}
    stream = conv.ordered(conv.read(request["source"]), request["seed"], counts)
    held = list(itertools.islice(stream, request["held_out"]))  # first, so it does not depend on n
    rows, dropped, truncated = [], 0, 0
    with tqdm(total=n, desc="tokenize", disable=not progress) as bar:
        for turns in stream:
            t = conv.tokenize(tokenizer, turns, seq_length)
            if sum(t.loss_mask) == 0:  # every assistant token lies beyond seq_length
                dropped += 1
                continue
            truncated += t.truncated
            rows.append(t)
            bar.update()
            if len(rows) == n:
                break
    if len(rows) < n:
        raise DataError(
            f"Only {len(rows)} conversations with assistant tokens within seq_length={seq_length} are left after "
            f"{len(held)} held-out ones ({dropped} dropped as empty); ask for fewer "
            f"(n_conversations<={len(rows)}), a larger seq_length or a bigger source."
        )
    out.mkdir(parents=True, exist_ok=True)
    conv.write_jsonl(out / HELD_OUT, held)
    _write_arrow(out, rows)
    vocab.save_token_freq(load_from_disk(str(out)), out)
    return {"skipped_unusable": counts["skipped_unusable"], "dropped_empty": dropped, "truncated": truncated,
            "n_samples": len(rows), "n_held_out": len(held),
            "tokens": sum(len(r.input_ids) for r in rows), "assistant_tokens": sum(sum(r.loss_mask) for r in rows)}


def build_dataset(
    verifier: Verifier | str = "smollm2",
    out_dir: str | os.PathLike = "data",
    n_conversations: int = 64,
    seq_length: int = 512,
    draft_vocab_size: int | None = None,
    seed: int = 0,
    held_out: int = 8,
    source: str | os.PathLike | None = None,
    dtype: str = "float32",
    device: str = "auto",
    batch_size: int = 4,
    aux_layer_ids: list[int] | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> DatasetInfo:
    """Conversations -> verifier hidden states -> speculators' data directory (resumable; see the module doc)."""
    from eagle3kit.config import resolve_device

    if dtype not in ("float32", "bfloat16", "float16"):
        raise DataError(f"dtype={dtype!r}: use 'float32', 'bfloat16' or 'float16'.")
    if n_conversations < 1 or seq_length < 2 or held_out < 0 or batch_size < 1:
        raise DataError("n_conversations and batch_size must be >= 1, seq_length >= 2 and held_out >= 0.")
    v = resolve(verifier)
    text = v.text_config
    aux = list(aux_layer_ids) if aux_layer_ids is not None else default_aux_layer_ids(text.num_hidden_layers)
    if not aux or min(aux) < 0 or max(aux) > text.num_hidden_layers or len(set(aux)) != len(aux):
        raise DataError(f"aux_layer_ids={aux} must be distinct and within 0..{text.num_hidden_layers}.")
    if draft_vocab_size is not None and not 0 < draft_vocab_size <= text.vocab_size:
        raise DataError(f"draft_vocab_size={draft_vocab_size} must be in 1..{text.vocab_size} (the verifier's vocab).")
    device = resolve_device(device)
    out = Path(out_dir)
    request = {"n_conversations": n_conversations, "seq_length": seq_length, "seed": seed, "held_out": held_out,
               "source": str(Path(source).resolve()) if source is not None else None, "dtype": dtype}
    identity = verifier_identity(v)

    manifest = read_manifest(out)
    if manifest is not None and overwrite:
        _clear(out)
        manifest = None
    if manifest is not None:
        check_compatible(out, v, aux)
        changed = {k: (manifest["request"].get(k), val) for k, val in request.items()
                   if manifest["request"].get(k) != val}
        if changed:
            what = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise DataError(f"{out} was made with other settings ({what}); pass overwrite=True to rebuild it "
                            "or choose another out_dir.")
    elif out.exists() and not _only_ours(out):
        raise DataError(f"{out} is not empty and has no {MANIFEST}; choose an empty or new out_dir.")
    elif out.exists():
        _clear(out)  # a first build interrupted before its manifest: start again

    if manifest is None or not manifest.get("tokenized") or not _arrow_present(out):
        counts = _tokenize(v, request, out, progress)
        manifest = {"format": FORMAT_VERSION, "verifier": identity, "aux_layer_ids": aux, "request": request,
                    "tokenized": True, "complete": False, "counts": counts}
        write_text(out / MANIFEST, json.dumps(manifest, indent=2))

    from datasets import load_from_disk

    samples = [row.tolist() for row in load_from_disk(str(out))["input_ids"]]
    hs_dir = out / "hidden_states"
    hs.remove_partial(hs_dir)
    state = hs.scan(hs_dir, samples, len(aux) + 1, text.hidden_size, full=True)
    for i in state["bad"]:
        hs.hs_path(hs_dir, i).unlink(missing_ok=True)
    stats = {"written": 0, "tokens_per_s": manifest.get("extraction", {}).get("tokens_per_s")}
    if state["missing"]:
        from eagle3kit.verifier import load_model

        model = load_model(v, dtype=dtype, device=device)
        stats = hs.extract_to_files(model, samples, hs_dir, aux, set(state["missing"]), batch_size,
                                    getattr(torch, dtype), device, progress)
        manifest["extraction"] = {"tokens_per_s": round(stats["tokens_per_s"], 1), "device": device,
                                  "batch_size": batch_size, "seconds": round(stats["seconds"], 2)}

    cov = 1.0
    if draft_vocab_size is not None:
        t2d, _d2t = vocab.build_mapping(out, draft_vocab_size, text.vocab_size)
        cov = vocab.coverage(vocab.load_token_freq(out), t2d)
        manifest.setdefault("vocab", {})[str(draft_vocab_size)] = {"coverage": round(cov, 6)}
    manifest["complete"] = True
    write_text(out / MANIFEST, json.dumps(manifest, indent=2))
    c = manifest["counts"]
    return DatasetInfo(
        path=str(out), verifier=v.name, verifier_path=v.path, aux_layer_ids=aux, hidden_size=text.hidden_size,
        seq_length=seq_length, dtype=dtype, n_samples=c["n_samples"], n_held_out=c["n_held_out"], tokens=c["tokens"],
        assistant_tokens=c["assistant_tokens"],
        counts={k: c[k] for k in ("skipped_unusable", "dropped_empty", "truncated")},
        files={"written": stats["written"], "skipped": len(state["done"]), "remade": len(state["bad"])},
        tokens_per_s=stats.get("tokens_per_s"), draft_vocab_size=draft_vocab_size, coverage=cov,
    )


# ----------------------------------------------------------------------------------------------- reading
def load_vocab_mapping(data_dir: str | os.PathLike, draft_vocab_size: int | None
                       ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(t2d, d2t) for ``draft_vocab_size`` from ``DIR/{t2d,d2t}-N.npy`` (made from token_freq.pt if absent)."""
    m = require_manifest(data_dir)
    return vocab.load_mapping(data_dir, draft_vocab_size, m["verifier"]["vocab_size"])


def held_out_conversations(data_dir: str | os.PathLike) -> list[list[dict]]:
    """The held-out conversations (role/content turns) for evaluation."""
    path = Path(data_dir) / HELD_OUT
    return conv.read_jsonl(path) if path.exists() and path.stat().st_size else []


def held_out_prompts(data_dir: str | os.PathLike) -> list[list[dict]]:
    """Each held-out conversation up to its first assistant reply (render with ``add_generation_prompt=True``)."""
    out = []
    for turns in held_out_conversations(data_dir):
        j = next(j for j, t in enumerate(turns) if t["role"] == "assistant" and j > 0)
        out.append(turns[:j])
    return out


def check_files(data_dir: str | os.PathLike, full: bool = False) -> None:
    """Raise when a hidden-state file is missing or bad (``full`` also loads each: NaN, token ids)."""
    from datasets import load_from_disk

    m = require_manifest(data_dir)
    samples = [row.tolist() for row in load_from_disk(str(data_dir))["input_ids"]]
    state = hs.scan(Path(data_dir) / "hidden_states", samples, len(m["aux_layer_ids"]) + 1,
                    m["verifier"]["hidden_size"], full=full)
    problems = [f"hs_{i}: missing" for i in state["missing"] if i not in state["bad"]]
    problems += [f"hs_{i}: {why}" for i, why in sorted(state["bad"].items())]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; ... ({len(problems)} in all)" if len(problems) > 5 else "")
        raise DataError(f"{data_dir} has unusable hidden-state files ({shown}); run build_dataset again with the "
                        "same settings to make them again.")


def load_dataset(data_dir: str | os.PathLike, max_len: int, hidden_states_dtype: torch.dtype = torch.float32,
                 train_ratio: float = 1.0, split: str = "train"):
    """speculators' ``ArrowDataset`` over ``data_dir`` (cached files only: ``on_missing="raise"``)."""
    from speculators.train.data import ArrowDataset

    return ArrowDataset(max_len=max_len, datapath=str(data_dir), on_missing="raise", train_ratio=train_ratio,
                        split=split, hidden_states_dtype=hidden_states_dtype)


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
    document_ids (-1 = padding) with T = ``total_seq_len``. ``verifier`` / ``aux_layer_ids`` are checked against the
    manifest when given.
    """
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2
    from torch.utils.data import DataLoader

    m = check_compatible(data_dir, verifier, aux_layer_ids)
    if not m.get("complete"):
        raise DataError(f"{data_dir} is incomplete (extraction was interrupted); run build_dataset again to finish it.")
    if check:
        check_files(data_dir, full=False)
    dataset = load_dataset(data_dir, total_seq_len, hidden_states_dtype, train_ratio, split)
    sampler = MultipackDistributedBatchSamplerV2(batch_max_length=total_seq_len, lengths=dataset.approx_lengths,
                                                 num_replicas=1, rank=0, seed=seed, max_batches=max_batches)
    collate = CollateFn(total_seq_len, m["verifier"]["hidden_size"], num_target_layers=len(m["aux_layer_ids"]),
                        dtype=hidden_states_dtype, preprocess=shift_batch)
    return DataLoader(dataset, batch_sampler=sampler, num_workers=0, collate_fn=collate)
