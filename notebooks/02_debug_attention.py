# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Debug the draft's attention: replay a real failure
#
# **Headline.** The attention setting decides whether a draft trains at all, and a wrong one fails at the first
# training step: on a cluster, after the data, the queue and the model load. This notebook replays a real failure step by step, shows the **doctor** predicting each step before it runs,
# and measures every attention backend on this machine to pick the setting.
#
# **The failure replayed here** is one a user really hit while training an EAGLE-3 draft on a CPU (the first entry of
# the doctor's catalogue of failures, [docs/failures.md](../docs/failures.md)); the code calls it the "seed" replay:
# the failure the catalogue grew from, no relation to the random `seed` parameter.
#
# The failure, in four steps:
#
# 1. A user builds the draft's decoder config by hand and never sets `_attn_implementation`. speculators then builds
#    the draft for **flex attention**, whose mask is a `BlockMask` (a sparse, block-by-block map of which query may
#    see which key). Training fails on the CPU.
# 2. The user switches the built draft to `"sdpa"` (PyTorch's dense attention). But the *mask builder* was chosen when
#    the model was built: sdpa now receives a BlockMask it cannot read.
# 3. The fix: choose the attention implementation **before** building (flex attention on a GPU, sdpa on a CPU).
# 4. A twist from speculators 0.9.0: transformers' own `"flex_attention"`, the fix for older speculators, now gets a
#    *dense* mask and kills the process.
#
# Every failure below is real, caught and printed. The doctor (`eagle3kit.doctor.checks.run.check`) reads the config or
# model without running it. Terms: [docs/glossary.md](../docs/glossary.md).

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"     # the verifier whose shape the draft copies
seq_len = 256            # total_seq_len of the packed batch (the replayed steps and the probe)
ttt_steps = 3
probe_timeout = 120      # seconds per probe cell before it is killed
repeats = 3              # timed steps per probe cell (median)
draft_vocab_size = 0     # probe and step 4 only. 0: the full verifier vocab; N: a cheaper draft over the first N ids
seed = 0
workdir = "../runs/interactive/work"

# %%
import pandas as pd
import torch

from eagle3kit.doctor.catalogue import live, seed_replay
from eagle3kit.doctor.probe import matrix as probe
from eagle3kit.device import resolve_device
from eagle3kit.doctor.catalogue.rows import catalogue_frame
from eagle3kit.doctor.probe.plots import plot_timings
from eagle3kit.doctor.probe.recommend import (probe_row, recommendation_lines, recommendations, setting_configs,
                                              settings_table, speed_ratios, warm_ups)
from eagle3kit.notebook import folded, setup, short
from eagle3kit.runner import record_summary

# %matplotlib inline

workdir = setup(workdir, seed=seed)
device = resolve_device("auto")
print("device:", device, "| torch", torch.__version__)
replay = seed_replay.SeedReplay(verifier, seq_len=seq_len, ttt_steps=ttt_steps, seed=seed, device=device)
print(f"one packed batch of {seq_len} tokens (two documents + padding), {ttt_steps} TTT steps; every step below uses "
      "the same draft weights and compares with eager attention")

# %% [markdown]
# ## 1 · The hand-built config: attention left unset
#
# `seed_replay.hand_built_config` writes the draft's decoder config as that user did. Nothing sets
# `_attn_implementation`, so it stays `None`; speculators turns `None` into its own `simple_flex_attention` and builds
# a BlockMask. The doctor warns about the unset value and, on a CPU, predicts that training fails (flex attention has
# no backward pass there). Below: the BlockMask the draft built (its 128-token blocks: █ computed, blank skipped), a
# forward without gradients, then a training step.

# %%
print("hand-built _attn_implementation =", repr(replay.config.transformer_layer_config._attn_implementation))
unset = replay.unset()
print(unset.render())
print(replay.mask_picture(None))

# %% [markdown]
# ## 2 · What the user did next: switch the built draft to sdpa
#
# The user sets `"sdpa"` on the draft they already built. The layers now call sdpa, but the mask builder was fixed when
# the model was built: sdpa gets a BlockMask. The doctor, given the model as it now is, sees the mismatch.

# %%
switched = replay.switch_to_sdpa()
print(switched.render())

# %% [markdown]
# ## 3 · The fix: choose the attention implementation before building
#
# On a GPU the fix is flex attention (`simple_flex_attention`: sparse, compiled, what `speculators train` uses). On a
# CPU it is the doctor's choice, sdpa, which builds a dense boolean mask. Set before building, it trains and gives the
# same loss and draft tokens as eager attention. The loss is large because this draft is untrained: speculators adds
# up one KL divergence from the verifier's next-token distribution per TTT step, and a random draft is far from it
# (notebook 05 shows it falling with training). Here only the agreement between backends matters.

# %%
fixed = replay.fix()
print(fixed.render())
gpu = replay.gpu_fix()
if gpu is not None:
    print(gpu.render())

# %% [markdown]
# ## 4 · The 0.9.0 twist: transformers' `"flex_attention"`
#
# With older speculators, `"flex_attention"` was the fix. speculators 0.9.0 builds a BlockMask only for its own
# `simple_flex_attention`; for transformers' `"flex_attention"` it builds a dense mask, which that kernel adds to its
# scores. This step runs inside the probe's worker subprocess, so if it kills the process it becomes a `crashed`
# status here instead of a dead kernel.

# %%
probe_cache = workdir / "probe_cache_02"  # cells measured once: the matrix below reads this step's two back
twist = replay.hf_flex(timeout_s=probe_timeout, draft_vocab_size=draft_vocab_size or None, repeats=repeats,
                       cache_dir=probe_cache)
print(twist.render())

# %%
steps = [s for s in (unset, switched, fixed, gpu, twist) if s is not None]
seed_replay.table(steps)

# %% [markdown]
# ## 5 · Every backend, measured: the probe
#
# Each cell of the probe builds the draft with one backend (identical weights in every cell) and runs one draft step on
# the same packed batch, without and with gradients, in a subprocess with a time limit: an exception is an `error`,
# a segfault a `crashed`, a hang a `timeout`. Beside speculators' backends it runs `block_sparse_cpu`, eagle3kit's own
# CPU training attention (`eagle3kit.attention`), which computes only the 128-token blocks the BlockMask keeps. The
# chart shows the median seconds of `repeats` steps per cell; the full table, and every setting's outcome, are in the
# appendix.

# %%
matrix = probe.probe(verifier=verifier, device=device, seq_len=seq_len, ttt_steps=ttt_steps, seed=seed,
                     timeout_s=probe_timeout, extra_cells=live.extra_cells(seq_len, ttt_steps), repeats=repeats,
                     draft_vocab_size=draft_vocab_size or None, cache_dir=probe_cache)
fig = plot_timings(matrix)
print("\n".join(w.line() for w in warm_ups(matrix).values()) or "no cell's median carries a first call's compile")
fig

# %% [markdown]
# ## 6 · The setting this machine trains with
#
# Among the backends whose cells ran and matched eager (Δ loss < 1e-4, all draft tokens equal), the fastest is
# recommended only when it beats the default (the auto rule's choice, sdpa on a CPU) by more than twice the noise
# (the repeats' spread, at least a few percent on a busy machine); when the default is the fastest, the same rule
# says whether it beat the next one or tied. Otherwise both train and the default stays. Each `why` line says which.
# The CUDA recommendation is measured only when this machine has a GPU.
#
# Two settings, not one, and they do not compete:
#
# | setting | on this CPU | who reads it |
# |---|---|---|
# | the draft *config's* attention (the line below) | `sdpa` | vLLM, speculators' trainer, `from_pretrained`: it is saved in `config.json` |
# | the training step over that config (notebook 05) | `block_sparse_cpu` | eagle3kit's training session only: the same loss and gradients as sdpa, computing only the 128-token blocks the mask keeps |
#
# This probe decides the config's attention only. At its 256 tokens the mask is 2 × 2 blocks of 128 with one skipped
# (section 1's "25% of blocks skipped"): too little to skip, so it cannot tell the two training steps apart. The
# training step is timed where it trains: notebook 05 runs both paths, forward and backward, on one of its real
# 512-token batches ("One step, opened up"); `bench/train_step.py` measures them at several lengths
# ([bench/results/train_step.md](../bench/results/train_step.md)).

# %%
rec = recommendations(matrix, device)
print("\n".join(recommendation_lines(rec, device, matrix)))

# %%
sdpa = probe_row(matrix, "sdpa", "forward+backward")
flex_bwd = probe_row(matrix, "simple_flex_attention", "forward+backward")
hf_flex = probe_row(matrix, "flex_attention", "forward")
(workdir / "probe_matrix_02.csv").write_text(matrix.to_csv(index=False))
print("matrix written to", short(workdir / "probe_matrix_02.csv", workdir))
record_summary(workdir, "02", device=device, recommended_training=rec.get(f"{device} training"),
               seed_steps_caught=all(s.caught is not False for s in steps), seed_sdpa_after_build=switched.status,
               seed_hf_flex=twist.status, sdpa_vs_eager_dloss=None if sdpa is None else sdpa.max_abs_dloss,
               flex_backward=None if flex_bwd is None else flex_bwd.status,
               hf_flex_forward=None if hf_flex is None else hf_flex.status)

# %% [markdown]
# **What you have now:** the attention setting this machine trains with, measured, and a doctor that names the seed's
# mistake before anything runs (`eagle3kit doctor`). **What to do next:** notebook 03 draws the mask that setting
# builds, token by token.
#
# ---
#
# ## Appendix · advanced, skip on a first read
#
# The probe's full table, every setting in one table, and the catalogue of failures the seed belongs to.
#
# ### The probe, cell by cell
#
# Identical weights in every cell: the trainable weights are saved once and loaded by every worker; the
# verifier-owned weights come from the verifier. Δ loss and token agreement compare each cell with eager in the same
# mode. Two extra cells use a length that is not a multiple of 128. `block_sparse_cpu` is a training-step backend:
# its `forward+backward` cell is eagle3kit's training step, while its `forward` cell names it in a config, as an
# inference engine would, and errors on purpose (`DenseMaskRefused`: speculators' own forward hands it a dense mask,
# and it says to use sdpa there). Each cell times `repeats` steps, the first one included, and shows their median.
# Flex attention compiles its kernel on its first call, so with few repeats a flex cell's median carries that compile;
# the chart above hatches such a cell and the line under it names each. The ratios under the table are the chart's
# medians relative to eager.

# %%
print(f"{matrix.attrs['cached']} of {len(matrix)} cells read back from step 4's run of the same cell and setting "
      "(eagle3kit.doctor.probe.cache)")
display(folded(probe.shown(matrix), f"all {len(matrix)} cells of the probe (click to open)"))
speed_ratios(matrix, seq_len)

# %% [markdown]
# ### Every setting in one table
#
# Per setting, each set before building: what speculators resolves it to, the mask it builds, what the backend
# consumes, the probe's outcome without and with gradients, and the doctor's errors (training on this device).

# %%
every_setting = settings_table(setting_configs(replay.config), matrix, device=device, seq_len=seq_len)
folded(every_setting, f"all {len(every_setting)} settings (click to open)")

# %% [markdown]
# ### The failure catalogue
#
# The seed's bug is one row of a catalogue: failures that users of speculators, SpecForge, EAGLE, vLLM and SGLang
# reported, or that this notebook measures. Each row names the symptom, where it was reported, the doctor's finding
# and the fix; each has a test that builds the broken artifact. Below: its first rows; the full table is
# [docs/failures.md](../docs/failures.md).

# %%
catalogue = catalogue_frame()
print(f"{len(catalogue)} rows in {catalogue.section.nunique()} sections; the first 6 below, all of them in "
      "docs/failures.md")
with pd.option_context("display.max_colwidth", None):  # every cell whole, not cut mid-word
    display(catalogue.head(6))

# %% [markdown]
# Two rows broken live, on the draft of this notebook (`eagle3kit.doctor.catalogue.live`). `verifier-weights-nan`: the
# draft is built but `load_verifier_weights()` is forgotten, so speculators' NaN placeholders for the verifier's
# embedding, lm_head and norm stay. `block-size-128`: speculators' flex path on a batch whose length is not a multiple
# of 128. The doctor reads each artifact without running it; then the artifact runs and what it does is caught and
# printed.

# %%
print(live.forgotten_verifier_weights(replay))

# %%
print(live.flex_at_odd_length(replay))

