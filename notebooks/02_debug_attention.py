# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Debug the draft's attention: replay the flex-attention correction
#
# The costly bug this toolkit exists for: a programmatically built `LlamaConfig` leaves `_attn_implementation` unset,
# the EAGLE-3 draft builds a flex-attention `BlockMask`, and `"sdpa"` — which looked like the safe default — was wrong;
# the fix was flex attention. With speculators 0.9.0 the rules moved: *unset* now means speculators' own
# `simple_flex_attention`, and transformers' `"flex_attention"` — the old fix — gets a dense mask.
#
# This notebook replays the story on the real verifier. For each setting it shows the mask the draft builds, what
# happens on this device (measured by the **probe**, each step in a subprocess, so a segfault becomes a table row and
# not a dead kernel) and what the **doctor** says before anything runs. It ends with the recommended setting, derived
# from the measurements.

# %% tags=["parameters"]
verifier = "smollm2"     # the verifier whose shape the draft copies
seq_len = 256            # total_seq_len of the probe's packed batch
ttt_steps = 3
probe_timeout = 120      # seconds per probe cell before it is killed
repeats = 3              # timed steps per probe cell (median)
draft_vocab_size = 0     # 0: the verifier's full vocab; N: a cheaper draft over the first N ids (attention unchanged)
seed = 0
workdir = "../runs/interactive/work"

# %%
import copy
from pathlib import Path

import pandas as pd
import torch
from transformers import LlamaConfig

from eagle3kit.doctor import checks as doctor
from eagle3kit.doctor import probe
from eagle3kit.draft.config import build_config, resolve_device
from eagle3kit.runner import record_summary

# %matplotlib inline

pd.set_option("display.max_colwidth", 110)
torch.manual_seed(seed)
workdir = Path(workdir)
workdir.mkdir(parents=True, exist_ok=True)
device = resolve_device("auto")
print("device:", device, "| torch", torch.__version__)

# %% [markdown]
# ## 1 · The hand-built config: attention left unset
#
# This is what a user writes when building the draft's decoder config by hand from the verifier's numbers. Nothing
# sets `_attn_implementation`, so it stays `None`.

# %%
build = build_config(verifier=verifier, ttt_steps=ttt_steps, device="cpu")  # speculators' own EAGLE-3 config
tl = build.config.transformer_layer_config
hand_built = LlamaConfig(
    vocab_size=tl.vocab_size, hidden_size=tl.hidden_size, intermediate_size=tl.intermediate_size,
    num_hidden_layers=1, num_attention_heads=tl.num_attention_heads, num_key_value_heads=tl.num_key_value_heads,
    head_dim=tl.head_dim, rms_norm_eps=tl.rms_norm_eps, max_position_embeddings=tl.max_position_embeddings,
    rope_parameters=tl.rope_parameters,
)
print("hand_built._attn_implementation =", repr(hand_built._attn_implementation))
unset = copy.deepcopy(build.config)
unset.transformer_layer_config = hand_built
facts = doctor.attention_facts(unset)
print(f"speculators resolves it to {facts['resolved']!r} and builds a {facts['mask']}")
doctor.to_frame(doctor.check(unset, device=device, training=True, seq_len=seq_len))

# %% [markdown]
# ## 2 · The four settings of the story
#
# The same hand-built config with `_attn_implementation` unset, then `"sdpa"` (the seed's first guess), then
# transformers' `"flex_attention"` (the seed's fix, right for older speculators), then speculators'
# `"simple_flex_attention"`. The doctor judges each from the config alone; the mask kind is measured by asking
# speculators' own model code to build a small mask.

# %%
settings = {"unset": None, "sdpa": "sdpa", "flex_attention": "flex_attention",
            "simple_flex_attention": "simple_flex_attention"}
configs = {label: doctor.with_attention(unset, impl) for label, impl in settings.items()}
for label, config in configs.items():
    errors = [f for f in doctor.check(config, device=device, training=True, loss="eager", seq_len=seq_len)
              if f.severity != "info"]
    print(f"--- {label}")
    print(doctor.format_findings(errors) if errors else "no errors or warnings")

# %% [markdown]
# ## 3 · What really happens here: the probe
#
# Each cell builds the draft with one backend (identical weights in every cell: the trainable weights are saved once
# and loaded by every worker; the verifier-owned weights come from the verifier) and runs one draft step on the same
# packed batch (two documents + padding, `ttt_steps` steps), without and with gradients. The worker runs in a
# subprocess with a time limit: an exception is an `error` row, a segfault a `crashed` row, a hang a `timeout` row.
# Δ loss and token agreement compare each cell with eager in the same mode. Two extra cells use a length that is not a
# multiple of 128.

# %%
odd = seq_len + 44
extra = [probe.Cell("unset", mode, seq_len, ttt_steps) for mode in probe.MODES] + [
    probe.Cell("simple_flex_attention", "forward", odd, ttt_steps), probe.Cell("sdpa", "forward", odd, ttt_steps)]
matrix = probe.probe(verifier=verifier, device=device, seq_len=seq_len, ttt_steps=ttt_steps, seed=seed,
                     timeout_s=probe_timeout, extra_cells=extra, repeats=repeats,
                     draft_vocab_size=draft_vocab_size or None)
matrix.drop(columns=["loss"])

# %%
fig = probe.timing_figure(matrix)
fig

# %% [markdown]
# ## 4 · The story in one table
#
# Per setting: what speculators resolves it to, the mask it builds, what the backend consumes, the probe's outcome
# without and with gradients, and the doctor's errors (training on this device).

# %%
story = probe.story(configs, matrix, device=device, seq_len=seq_len)
story

# %% [markdown]
# ## 5 · Recommended setting
#
# Derived from the rows above: the fastest backend whose cells ran and matched eager (Δ loss < 1e-4, all draft tokens
# equal). The ratios below show how close the race is (median seconds relative to eager; on a busy 2-core machine a
# few percent is noise). The CUDA recommendation is measured only when this machine has a GPU.

# %%
ran = matrix[(matrix.status == "ok") & (matrix.seq_len == seq_len) & (matrix.backend != "unset")]
speed = ran.pivot(index="backend", columns="mode", values="seconds")
(speed / speed.loc["eager"]).round(2).rename(columns=lambda m: f"{m} (x eager)")

# %%
rec = {"cpu training": probe.recommend(matrix, training=True) if device == "cpu" else None,
       "cpu inference": probe.recommend(matrix, training=False) if device == "cpu" else None}
if device == "cuda":
    rec["cuda training"] = probe.recommend(matrix, training=True)
    rec["cuda inference"] = probe.recommend(matrix, training=False)
else:
    print("skipped: no CUDA (the CUDA row is not measured on this machine; the doctor's rule for CUDA is "
          f"{doctor.SET_ATTN.format(impl='simple_flex_attention')!r})")
for what, impl in rec.items():
    if impl:
        print(f"{what:15s} -> {doctor.SET_ATTN.format(impl=impl)}")


# %%
def cell(backend, mode, n=seq_len):
    rows = matrix[(matrix.backend == backend) & (matrix["mode"] == mode) & (matrix.seq_len == n)]
    return rows.iloc[0] if len(rows) else None

sdpa = cell("sdpa", "forward+backward")
flex_bwd = cell("simple_flex_attention", "forward+backward")
record_summary(workdir, "02", device=device, recommended_training=rec.get(f"{device} training"),
               sdpa_vs_eager_dloss=None if sdpa is None else sdpa.max_abs_dloss,
               flex_backward=None if flex_bwd is None else flex_bwd.status,
               hf_flex_forward=cell("flex_attention", "forward").status)
(workdir / "probe_matrix_02.csv").write_text(matrix.to_csv(index=False))
print("matrix written to", workdir / "probe_matrix_02.csv")
