"""Verifier hidden states exactly as vLLM hands them to speculators, written as ``hidden_states/hs_{i}.safetensors``.

Conventions (checked by :func:`eagle3kit.data.targets.verify_targets`):

* aux layer id ``i`` is the *input* of decoder layer ``i`` = HF ``output_hidden_states[i]`` (0 = embeddings);
* the last stored state is the final decoder layer's output *before* the final norm (speculators applies
  ``verifier_norm`` itself). transformers' ``output_hidden_states[-1]`` is already normed, so it is taken from a
  forward pre-hook on the final norm instead.

Each file holds ``hidden_states`` ``[seq, n_aux + 1, hidden]`` and ``token_ids`` ``[seq]`` and is written atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from speculators.data_generation.offline import (
    check_hidden_states,
    find_corrupt_hidden_state_indices,
    get_existing_hidden_state_indices,
)

from eagle3kit.atomic import atomic_file
from eagle3kit.outputs import check_output
from eagle3kit.progress import tqdm
from eagle3kit.verifier import load_model, resolve


def hs_path(hs_dir: str | os.PathLike, index: int) -> Path:
    return Path(hs_dir) / f"hs_{index}.safetensors"


def final_norm(model) -> torch.nn.Module:
    """The decoder's final norm (``model.model.norm`` for Llama-like verifiers)."""
    base = getattr(model, "model", model)
    norm = getattr(base, "norm", None)
    if norm is None:
        raise ValueError(
            f"{type(model).__name__} has no final norm at model.model.norm, so the pre-norm last state cannot be "
            "captured; eagle3kit supports Llama/Qwen-style decoders."
        )
    return norm


@torch.no_grad()
def extract(model, input_ids: torch.Tensor, aux_layer_ids: Sequence[int]) -> torch.Tensor:
    """``[batch, seq, n_aux + 1, hidden]``: aux states then the pre-norm last state (right padding is harmless)."""
    captured: dict[str, torch.Tensor] = {}
    handle = final_norm(model).register_forward_pre_hook(lambda _m, args: captured.__setitem__("h", args[0]))
    try:
        base = getattr(model, "model", model)
        out = base(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    states = [out.hidden_states[i] for i in aux_layer_ids] + [captured["h"]]
    return torch.stack(states, dim=2)


def write_file(path: Path, hidden_states: torch.Tensor, token_ids: torch.Tensor) -> None:
    """Write one sample atomically (temporary sibling + rename)."""
    with atomic_file(path) as tmp:
        save_file({"hidden_states": hidden_states.contiguous(), "token_ids": token_ids.to(torch.long).contiguous()},
                  str(tmp))


INT64 = 8  # token_ids are stored as int64
SAFETENSORS_DTYPE = {1: "U8", 2: "BF16", 4: "F32", 8: "F64"}


def hidden_state_bytes_per_token(hidden: int, n_states: int, width: int) -> int:
    """Payload bytes per token of the stored states: ``n_states`` (aux layers + last) x ``hidden`` x ``width``."""
    return n_states * hidden * width


def safetensors_header_bytes(tokens: int, hidden: int, n_states: int, width: int) -> int:
    """The header of one sample's file: an 8-byte length, then safetensors' JSON padded to 8 bytes."""
    ids = tokens * INT64
    header = {"token_ids": {"dtype": "I64", "shape": [tokens], "data_offsets": [0, ids]},
              "hidden_states": {"dtype": SAFETENSORS_DTYPE.get(width, "F16"), "shape": [tokens, n_states, hidden],
                                "data_offsets": [ids, ids + tokens * n_states * hidden * width]}}
    text = len(json.dumps(header, separators=(",", ":")))
    return 8 + -(-text // 8) * 8


def sample_file_bytes(tokens: int, hidden: int, n_states: int, width: int) -> int:
    """One ``hs_{i}.safetensors`` file of ``tokens`` tokens (what :func:`write_file` writes; ``eagle3kit.plan`` and
    the data command's disk check use it)."""
    payload = tokens * (hidden_state_bytes_per_token(hidden, n_states, width) + INT64)
    return payload + safetensors_header_bytes(tokens, hidden, n_states, width)


PARTIAL = (".hs_*.tmp-*", ".tmp*")  # eagle3kit's atomic sibling, and the one safetensors' own writer makes in the dir


def remove_partial(hs_dir: Path) -> int:
    """Delete temporary files a killed run left behind (:data:`PARTIAL`); return how many."""
    stale = [p for pattern in PARTIAL for p in hs_dir.glob(pattern)] if hs_dir.exists() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def first_shape(files: Sequence[Path]) -> tuple[tuple[int, ...], str] | None:
    """(shape, safetensors dtype) of ``hidden_states`` in the first readable file of ``files`` (None: none is)."""
    for p in files:
        try:
            with safe_open(str(p), "pt") as f:
                part = f.get_slice("hidden_states")
                return tuple(part.get_shape()), part.get_dtype()
        except Exception:  # a cut-off or foreign file: try the next one  # noqa: BLE001
            continue
    return None


def check_file(path: Path, token_ids: list[int], n_states: int | None = None, hidden: int | None = None) -> str | None:
    """Why ``path`` is unusable (unreadable, token ids or shape wrong, non-finite values: speculators'
    ``check_hidden_states`` decides), or None when it is fine."""
    try:
        data = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - every reason counts as "make it again"
        return f"unreadable ({str(exc).splitlines()[0][:120] or type(exc).__name__})"
    try:
        check_hidden_states(data, token_ids)
    except ValueError as exc:
        why = str(exc)
        return "its token ids differ from its dataset row" if why.startswith("Token ids") else why[:200]
    shape = tuple(data["hidden_states"].shape)
    if (n_states is not None and shape[1] != n_states) or (hidden is not None and shape[2] != hidden):
        return f"hidden_states has shape {list(shape)}, expected [seq, {n_states}, {hidden}]"
    return None


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread inside the block. speculators' check reduces each file with ``torch.aminmax``; on two
    busy cores that took 44 ms per 2.4 MB file with 2 threads and 0.13 ms with one."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def scan(hs_dir: Path, samples: Sequence[list[int]], n_states: int, hidden: int) -> dict:
    """Which files are done, missing or bad (``{index: why}``): headers first, then every file is loaded."""
    existing = set(get_existing_hidden_state_indices(hs_dir))
    bad = {i: f"unreadable header ({why})" for i, why in
           find_corrupt_hidden_state_indices(hs_dir, sorted(existing)).items()}
    with one_thread():
        for i in sorted(existing - set(bad)):
            if i < len(samples) and (why := check_file(hs_path(hs_dir, i), samples[i], n_states, hidden)):
                bad[i] = why
    done = sorted(i for i in existing if i not in bad and i < len(samples))
    missing = sorted(set(range(len(samples))) - set(done))
    return {"done": done, "missing": missing, "bad": bad}


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Fixed batches of indices, longest first (the same plan on every run, so a resume gives identical bytes)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]


def extract_to_files(
    model,
    samples: Sequence[list[int]],
    hs_dir: Path,
    aux_layer_ids: Sequence[int],
    todo: set[int],
    batch_size: int = 4,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    progress: bool = True,
    on_file: Callable[[int], None] | None = None,
) -> dict:
    """Run the verifier over the planned batches that contain a ``todo`` index; write those files."""
    hs_dir.mkdir(parents=True, exist_ok=True)
    batches = [b for b in plan_batches([len(s) for s in samples], batch_size) if todo & set(b)]
    total = sum(len(samples[i]) for b in batches for i in b)
    pad = 0
    t0 = time.perf_counter()
    written = 0
    with tqdm(total=total, unit="tok", desc="hidden states", disable=not progress) as bar:
        for batch in batches:
            width = max(len(samples[i]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            for r, i in enumerate(batch):
                ids[r, : len(samples[i])] = torch.tensor(samples[i])
            states = extract(model, ids.to(device), aux_layer_ids).to("cpu", dtype)
            for r, i in enumerate(batch):
                if i in todo:
                    n = len(samples[i])
                    write_file(hs_path(hs_dir, i), states[r, :n], ids[r, :n])
                    written += 1
                    if on_file:
                        on_file(i)
            bar.update(sum(len(samples[i]) for i in batch))
            bar.set_postfix(tok_s=f"{bar.n / max(time.perf_counter() - t0, 1e-9):.0f}")
    seconds = time.perf_counter() - t0
    return {"written": written, "tokens": total, "seconds": seconds, "tokens_per_s": total / seconds if seconds else 0}


def fill(verifier, hs_dir: Path, samples: Sequence[list[int]], aux: list[int], dtype: str, device: str,
         batch_size: int, progress: bool, model=None) -> tuple[dict, dict]:
    """Make every missing or bad ``hs_{i}.safetensors`` of ``samples`` (partial writes removed, the disk checked for
    room before the verifier loads); ``(scan state, extraction stats)``. ``model``: the verifier already loaded,
    used when it is in ``dtype`` on ``device``."""
    v = resolve(verifier)
    hidden = v.text_config.hidden_size
    remove_partial(hs_dir)
    state = scan(hs_dir, samples, len(aux) + 1, hidden)
    for i in state["bad"]:
        hs_path(hs_dir, i).unlink(missing_ok=True)
    stats = {"written": 0, "tokens_per_s": None, "seconds": 0.0}
    if state["missing"]:  # the token count is known: is there room for the files, before the verifier loads?
        width = getattr(torch, dtype).itemsize
        check_output(Path(hs_dir).parent, "out_dir", need_bytes=sum(
            sample_file_bytes(len(samples[i]), hidden, len(aux) + 1, width) for i in state["missing"]))
        weight = next(model.parameters()) if model is not None else None
        if weight is None or weight.dtype != getattr(torch, dtype) or weight.device.type != torch.device(device).type:
            model = load_model(v, dtype=dtype, device=device)  # none given, or not in this dtype on this device
        stats = extract_to_files(model, samples, hs_dir, aux, set(state["missing"]), batch_size,
                                 getattr(torch, dtype), device, progress)
    return state, stats
