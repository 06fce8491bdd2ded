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
# # 04 · Training data from the real verifier, in speculators' own format
#
# **Headline.** A draft learns to predict the verifier from the verifier's own hidden states, so its data is made by
# running the verifier. This notebook makes that data here, in exactly the folder layout `speculators train` reads, and
# checks the parts that fail silently: the loss mask, the pre-norm last state, the vocabulary mapping.
#
# An EAGLE-3 draft learns from the verifier's hidden states: three *aux* layers as input, the last layer as target.
# `speculators` normally gets them from a vLLM server. Here the HF verifier makes the same data on this machine (CPU or
# GPU) and writes it in the layout `speculators train --data-path` reads, so the folder made here trains here
# (notebook 05) **and** on a GPU cluster, unchanged.
#
# Steps: ShareGPT conversations (optionally with the verifier's own replies) →
# chat template + assistant loss mask → verifier hidden states →
# `hidden_states/hs_{i}.safetensors` + Arrow dataset + `token_freq.pt` → draft vocab mapping `d2t`/`t2d`.
#
# One training sample here is short: the first user turn of a ShareGPT conversation, cut to
# `regenerate_prompt_tokens` tokens, and the verifier's own greedy reply of at most `regenerate_tokens` tokens (the
# loss is on the reply), so a few hundred tokens at most; `seq_length` only caps a sample. That is the longest context
# this demo's draft ever trains on, which notebook 07 comes back to.

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"       # "smollm2" | "tiny" | an HF directory
n_conversations = 12       # training conversations (ShareGPT V3, chosen by seed)
held_out = 4               # conversations kept out for evaluation (notebook 06)
seq_length = 384           # tokens per conversation (longer ones are cut)
draft_vocab_size = 4096    # 0: the verifier's full vocab
regenerate_tokens = 0      # > 0: the verifier rewrites each reply (greedy, up to this many tokens)
regenerate_prompt_tokens = 256  # the user turn it answers is cut to this many tokens
regenerate_engine = "auto"  # "auto": vLLM's CPU build offline when `make vllm` installed it, else transformers
batch_size = 4
dtype = "float32"          # hidden states: "float32" | "bfloat16" | "native" (bf16 where the device computes it)
total_seq_len = 512        # packed tokens a batch below: notebook 05's training packs
seed = 0
workdir = "../runs/interactive/work"

# %%
# %matplotlib inline
import inspect
import time

import pandas as pd
import torch
from IPython.display import display

from eagle3kit.data import conversations as conv
from eagle3kit.data.loops import LOOP_SHARE, loops
from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.loader import held_out_conversations, held_out_coverage, make_loader
from eagle3kit.data.directory import DataDir, DataError
from eagle3kit.data.hidden_states import extract
from eagle3kit.data.targets import describe_targets, verify_targets
from eagle3kit.data import plots as data_plots
from eagle3kit.data.loss_mask_plot import plot_loss_mask, window_start
from eagle3kit.data import vocab
from eagle3kit.data.regenerate import SPARE_PROMPTS, regenerate
from eagle3kit.notebook import DATA, folded, setup, short
from eagle3kit.runner import record_summary
from eagle3kit.verifier import load_tokenizer

workdir = setup(workdir, seed=seed)
data_dir = workdir / DATA            # notebooks 05 and 06 read the data from here
dvs = draft_vocab_size or None

# %% [markdown]
# ## Whose replies? Optional self-distillation
#
# The draft will be asked to predict *this verifier's* text. ShareGPT's replies were written by other models, so with
# `regenerate_tokens > 0` the verifier first answers each conversation's first user turn itself (greedy), as
# speculators' `regenerate-responses` does. Which engine writes them (`regenerate_engine`):
#
# | engine | what it is | when |
# |---|---|---|
# | `"vllm"` | vLLM's CPU build offline (`vllm.LLM`: every core, all prompts decoded together, bf16 where the CPU computes it natively) | `"auto"`, when `make vllm` installed it |
# | `"vllm-served"` | the same engine behind a server, as `regenerate-responses` calls it (a server's start and HTTP on top) | asked for |
# | `"transformers"` | a batched loop in this process | `"auto"` without vLLM |
#
# All three write the rows `regenerate-responses` writes (`bench/regeneration_engines.py` measures their speed). The
# replies are saved as they come: an interrupted run resumes.
#
# The verifier answers a few more prompts than the training and held-out sets need (`SPARE_PROMPTS`, printed below),
# since a prompt it answers with nothing is dropped. Below, two of its replies: the first that does not loop and the
# first that does (either may land in the held-out part). A small verifier decoding greedily often falls into a loop,
# repeating one sentence with a counter that grows ("1. The first step is ... 2. The second step is ..."). That is not
# a bug in the data: it is what this verifier writes, so it is what the draft must learn to predict and what it will
# be served on (notebook 07 shows a typical reply first, not a loop). The count says how many of the replies loop.

# %%
source = None
if regenerate_tokens:
    regen = regenerate(verifier, workdir / "regenerated.jsonl", engine=regenerate_engine,
                       n_conversations=n_conversations + held_out + SPARE_PROMPTS,
                       max_new_tokens=regenerate_tokens, max_prompt_tokens=regenerate_prompt_tokens, seed=seed)
    source = regen.path
    print(regen.line(), f"({n_conversations} to train + {held_out} held out + {SPARE_PROMPTS} spare prompts asked)")
    display(folded(pd.Series(vars(regen)).to_frame("value"), "every field of the regeneration (click to open)"))
    replies = conv.read_jsonl(source)
    looping = [loops(r) for r in replies]
    print(f"each sample: the first user turn cut to {regenerate_prompt_tokens} tokens + the verifier's reply of at most "
          f"{regenerate_tokens} (seq_length {seq_length} only caps a sample; these stay short)")
    print(f"{sum(looping)} of {len(replies)} replies loop (more than {LOOP_SHARE:.0%} of their 4-word runs "
          "repeat an earlier one)")
    for what, loop in (("the first reply that does not loop", False), ("the first that loops", True)):
        if loop in looping:
            example = replies[looping.index(loop)]
            print(f"\n{what}:\nUSER: {example[-2]['content'][:200]}\nVERIFIER: {example[-1]['content'][:300]}")
else:
    print("Training on ShareGPT's own replies (set regenerate_tokens > 0 for the verifier's).")

# %% [markdown]
# ## Build the data directory
#
# `build_dataset` is resumable: finished `hs_{i}.safetensors` files are skipped, truncated or corrupt ones (NaN, wrong
# token ids, unreadable header) are found with speculators' own checks and made again, and every file is written to a
# temporary name and renamed, so Ctrl-C loses at most the file in flight.
#
# **What is captured, per sample** (the conventions vLLM uses too): aux layer id *i* is the **input** of decoder layer
# *i* (= HF `hidden_states[i]`, 0 = embeddings); the last stored state is the final decoder layer's output **before**
# the final norm, because speculators applies `verifier_norm` itself. The function that does it, as `build_dataset`
# calls it for every batch of samples, is printed under the summary: one verifier forward, nothing else.

# %%
request = dict(n_conversations=n_conversations, seq_length=seq_length, draft_vocab_size=dvs, seed=seed,
               held_out=held_out, dtype=dtype, batch_size=batch_size, source=source)
t0 = time.perf_counter()
info = build_dataset(verifier, data_dir, **request)
hidden_states_seconds = time.perf_counter() - t0
print(info.line())
display(folded(pd.Series(info.to_dict()).to_frame("value"), "every field of the data directory (click to open)"))
print(inspect.getsource(extract))

# %%
print("files in", short(data_dir, workdir))
display(DataDir(data_dir).files_table())
print("run again:", build_dataset(verifier, data_dir, **request, progress=False).files)

# %% [markdown]
# ## What trains: one conversation and its loss mask
#
# The draft is trained only where the loss mask is 1: on the **assistant's** tokens (green below). The system prompt,
# the user's turns and the chat template's markers (grey) are context: the draft reads them (through the verifier's
# hidden states) but is never asked to predict them, because at serving time they come from the prompt.
#
# Which tokens are "the assistant's"? speculators' **render-boundary rule**: render the chat up to the reply (with the
# generation prompt), render it again with the reply; the tokens the second adds are the reply. The table checks that
# each green run decodes to exactly the assistant's text plus the template's end-of-turn marker.

# %%
tokenizer = load_tokenizer(verifier)
turns, sample = conv.first_supervised(tokenizer, held_out_conversations(data_dir), seq_length)
report = pd.DataFrame(conv.mask_report(tokenizer, turns, sample))
display(report.assign(reply=report["reply"].str[:50], masked=report["masked"].str[:50]))
assert (report["equal"] | report["cut at seq_length"]).all(), "a masked run is not the assistant's text"
plot_loss_mask(tokenizer, sample.input_ids, sample.loss_mask, max_tokens=250)

# %% [markdown]
# ## The targets check: is the last state really pre-norm?
#
# speculators computes the draft's targets as `verifier_lm_head(verifier_norm(h_last))`. If `h_last` were already
# normed (transformers' `output_hidden_states[-1]` is), the norm would apply twice and the draft would learn the wrong
# distribution, silently. The check runs speculators' own target head on the stored states and compares with the
# verifier's logits (restricted to the draft vocab).

# %%
check = verify_targets(data_dir, n_samples=2, draft_vocab_size=dvs)
print(describe_targets(check))
assert check["ok"], "the stored last state does not reproduce the verifier's logits"

# %% [markdown]
# ## Hidden-state norms per stored layer
#
# What the draft reads: `fc` takes these three layers' states concatenated, so their scales matter. Residual-stream
# norms grow with depth, and the first token (the *attention sink*: many heads attend to it by default) stands out by
# orders of magnitude, which is why a layer's mean can sit above its 99th percentile. Nothing to fix: speculators
# feeds the states as stored. What would be wrong is a NaN, which training stops on (notebook 05 names the step and
# the data), or a layer all zeros.

# %%
display(data_plots.hidden_state_norms(data_dir, n_samples=4))
data_plots.plot_hidden_state_norms(data_dir, sample=0)

# %% [markdown]
# ## Draft vocabulary: how much do the most frequent tokens cover?
#
# A draft that predicts over a smaller vocabulary is cheaper (its `lm_head` is the largest matrix). `t2d`/`d2t` come
# from speculators' `build_vocab_mappings_from_distribution` and are saved as `d2t-{N}.npy` / `t2d-{N}.npy`, where
# `speculators train --draft-vocab-size N` finds them. A small dataset has few distinct tokens, so coverage of its own
# replies climbs fast with N (the curve below); the held-out replies show what that vocabulary misses on text it was
# not counted on: a ceiling on τ. Here it is counted over every token of the held-out replies written above (up to
# `regenerate_tokens` each). Notebook 06 counts the same thing over the shorter continuations it scores (its
# `max_new_tokens` each), and notebook 07 per prompt set and among the tokens the draft was asked for: three counts of
# one cap, so the shares differ a little. Real runs count the vocabulary on far more data.

# %%
freq = vocab.load_token_freq(data_dir)
curve = vocab.coverage_curve(freq)
held_coverage = held_out_coverage(data_dir, tokenizer, dvs)
print(f"{len(freq):,} distinct assistant tokens, {sum(freq.values()):,} in all; "
      f"coverage at draft vocab {dvs or 'full'}: {info.coverage:.4f} of the training replies' tokens"
      + (f", {held_coverage:.4f} of the held-out replies' (the draft can never propose the rest)"
         if held_coverage is not None else ""))
data_plots.plot_coverage(curve, dvs)

# %% [markdown]
# ## Loading through speculators
#
# The proof that the format is right: speculators' own `ArrowDataset` (with `on_missing="raise"`, so nothing is
# fetched from a server), its multipack sampler (it fills each packed row with whole conversations, like bin packing), its `CollateFn` and the eagle3 `shift_batch` preprocessing give the
# packed batches the trainer consumes. Documents are packed into one row; `document_ids` separates them (-1 = padding).

# %%
loader = make_loader(data_dir, total_seq_len=total_seq_len, hidden_states_dtype=getattr(torch, info.dtype),
                     aux_layer_ids=info.aux_layer_ids)  # the states in the dtype they were stored in, as 05 reads them
batch = next(iter(loader))
display(pd.DataFrame([{"key": k, "shape": tuple(v.shape), "dtype": str(v.dtype)} for k, v in batch.items()
                      if torch.is_tensor(v)]))
print(f"{len(loader)} packed batches of {total_seq_len} tokens from all {info.n_samples} samples (notebook 05 packs the "
      "same way, from its training split: speculators keeps the last tenth of the samples for validation); hidden "
      f"states in {info.dtype}, as stored above")
data_plots.plot_batch(batch["document_ids"], loss_mask=batch["loss_mask"])

# %% [markdown]
# The bar above shows the whole row; below, a window of it as text, around the first place where one conversation ends
# and the next begins (blue bars): which tokens are in the loss, and where the next document starts (the title says
# which tokens of the row the window holds). The token ids are those of the *shifted* batch (eagle3's `shift_batch`:
# the hidden state of token *j* is paired with token *j + 1*), so the row starts one token late.

# %%
row = {k: batch[k][0] for k in ("input_ids", "loss_mask", "document_ids")}
plot_loss_mask(tokenizer, row["input_ids"], row["loss_mask"], row["document_ids"], max_tokens=240,
               start=window_start(row["document_ids"], 240), title="one packed batch row around a document boundary")

# %% [markdown]
# ## A mismatch is refused
#
# The directory records the verifier's identity and the aux layer ids. A draft built for other layers would read the
# wrong states; the loader says so instead of training on them.

# %%
try:
    make_loader(data_dir, total_seq_len=total_seq_len, aux_layer_ids=[1, 2, 3])
except DataError as exc:
    print("refused:", exc)

# %% [markdown]
# ## The same folder on a GPU cluster
#
# ```
# speculators train --data-path <data_dir> --verifier-name-or-path <verifier dir> --draft-vocab-size <N> ...
# ```

# %%
print(info.train_command())
record_summary(workdir, "04", samples=info.n_samples, tokens=info.tokens, assistant_tokens=info.assistant_tokens,
               extraction_tokens_per_s=round(info.tokens_per_s or 0), targets_ok=check["ok"],
               coverage=round(info.coverage, 4), data_dir=str(data_dir), draft_vocab_size=draft_vocab_size,
               held_out_coverage=None if held_coverage is None else round(held_coverage, 4),
               replies="verifier" if regenerate_tokens else "sharegpt",
               regenerate_tokens_per_s=round(regen.tokens_per_s or 0) if regenerate_tokens else None,
               regenerate_engine=regen.engine if regenerate_tokens else None,
               regenerate_seconds=round(regen.seconds + regen.start_seconds) if regenerate_tokens else 0,
               hidden_states_seconds=round(hidden_states_seconds))

# %% [markdown]
# **What you have now:** a data folder (`data/` in the workdir) that both notebook 05 and `speculators train` read,
# checked. **What to do next:** notebook 05 trains the draft on it, one step at a time.
