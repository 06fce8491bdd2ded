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
# # 03 · The EAGLE-3 training mask: tokens, blocks and TTT steps
#
# **Headline.** The draft is trained on several conversations packed into one row and on its own earlier output
# hidden states (TTT steps), and one attention mask keeps all of that apart. This notebook draws that mask, built by speculators'
# own functions, from an 8-token example up to the full length, and checks that every backend gets the same one.

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"      # its tokenizer turns ShareGPT conversations into token lengths
n_documents = 24          # conversations sampled from ShareGPT V3
total_seq_len = 3072      # the packed batch (a multiple of 128, as speculators' flex path needs)
ttt_steps = 3
sliding_window = 256      # for the sliding-window variant
long_seq_len = 4096       # the long-context view (presets: eagle3kit.presets)
check_seq_len = 1024      # the dense equivalence check builds Q x KV masks: keep it modest
train_seq_len = 512       # notebook 05's packed length (the training scale)
prompt_tokens = 128       # a training sample's user turn is cut to this many tokens (notebook 04)
reply_tokens = 96         # and its reply to this many
seed = 0
workdir = "../runs/interactive/work"

# %%
# %matplotlib inline
import time

import pandas as pd
from IPython.display import display

from eagle3kit.draft.config import DraftSpec
from eagle3kit.figures import show_widget
from eagle3kit.masks import plots as mask_plots
from eagle3kit.masks.explorer import MaskExplorer
from eagle3kit.data.layouts import exchange_lengths, pack, sharegpt_lengths
from eagle3kit.masks.refusals import verdicts
from eagle3kit.masks.tiny import plot_tiny, sees, tiny_mask
from eagle3kit.masks.stats import blocks_line, equivalence, stats, window_pairs
from eagle3kit.masks.eagle_mask import COMPILE_ABOVE, build_mask
from eagle3kit.notebook import folded, setup
from eagle3kit.runner import record_summary
from eagle3kit.verifier import load_tokenizer

workdir = setup(workdir, seed=seed)
tokenizer = load_tokenizer(verifier)

# %% [markdown]
# ## The mask in miniature: 8 tokens, 2 documents, 3 TTT steps
#
# Before the real sizes, the same mask (built by speculators' functions) on 8 tokens: document 0 is tokens 0–2,
# document 1 tokens 3–7. At TTT step 2 the keys come in three blocks, one per step so far, numbered as in notebook 01
# (step *s* reads the hidden states step *s − 1* produced):
#
# - block 0: the positions as the verifier fed them (step 0);
# - block 1: step 1's keys, made from the states step 0 produced (the draft's own output, fed back);
# - block 2: step 2's keys, made from the states step 1 produced.
#
# The sentence under the figure reads the outlined row off the mask.

# %%
tiny = tiny_mask()
display(plot_tiny(tiny))
print(sees(tiny))

# %% [markdown]
# What the picture shows, as the three rules speculators' `Eagle3DraftModel` builds its mask from. During training the
# draft sees a **packed** batch: several conversations back to back, padded with document id `-1` up to
# `total_seq_len`.
#
# * **causal ∧ same document**: query *q* sees key *k ≤ q* of its own document (and, with a sliding window, only the
#   last `window` of them); padding queries see no document;
# * **diagonal**: `k mod total_seq_len == q`, so every query (padding included) sees itself;
# * **one block of keys per TTT step**: at step *s* the draft attends to the hidden states it computed itself at the
#   earlier steps (the tokens it reads are the verifier's: teacher forcing), so the key axis grows by
#   `total_seq_len` per step. The new block holds only the diagonal because at serving time position *q*'s state at
#   step *s* continues *q*'s own chain: the states computed at other positions belong to other continuations (later
#   positions' even to the future), so they are hidden.
#
# The mask is built **by speculators' own functions** (`create_combined_mask_mod`, `extend_mask_for_draft_tokens`,
# torch's `create_block_mask`; `create_mask` / `create_float_mask` for sdpa / eager) and looked at here at token,
# block and TTT-step level.

# %% [markdown]
# ## At the training scale: one pack of short samples
#
# Notebook 05 trains on packs of `train_seq_len` tokens, each holding a few short samples: a user turn cut short and
# the verifier's reply (notebook 04 writes them). Here ShareGPT's first exchanges are cut the same way
# (`prompt_tokens`, `reply_tokens`; ShareGPT's own reply stands in for the verifier's, which notebook 04 writes) and
# packed as speculators' collator packs them. Notebook 05 draws one of its real batches the same way.
#
# **Blocks.** Flex attention works on blocks of 128 queries × 128 keys, and the mask it gets (a `BlockMask`) is mostly
# a table: for each query block, the list of key blocks worth visiting (`kv_indices`, their number `kv_num_blocks`;
# `full_kv_indices` for the blocks attended whole). A key block in neither list is *empty*: flex skips it. A *full*
# block is computed without asking pair by pair. In a *partial* block flex calls the `mask_mod`, a small function
# `mask_mod(b, h, q, kv) -> bool` (here speculators' `create_combined_mask_mod`: the three rules above), for each
# query-key pair. The line under the block map counts the three kinds; the CPU training step of notebooks 02 and 05
# (`block_sparse_cpu`) skips the same empty blocks.

# %%
exchanges = exchange_lengths(tokenizer, n=32, seed=seed, prompt_tokens=prompt_tokens, reply_tokens=reply_tokens)
train_pack = pack(exchanges, train_seq_len)
train_mask = build_mask(train_pack, train_seq_len, ttt_steps)
print(f"{len(train_pack)} samples of {', '.join(map(str, train_pack))} tokens + {train_seq_len - sum(train_pack)} "
      "tokens of padding")
display(mask_plots.plot_token_mask(train_mask))
display(mask_plots.plot_block_map(train_mask))
print(blocks_line(train_mask))

# %% [markdown]
# ## At GPU scale: whole conversations in one long pack
#
# A GPU run packs whole conversations into much longer rows. Lengths are real: conversations from ShareGPT V3 through
# the verifier's chat template, packed whole, in order, until the next one would not fit; the rest is padding. The
# rest of this notebook looks at this pack.

# %%
lengths = sharegpt_lengths(tokenizer, n=n_documents, seed=seed)
middle = sorted(lengths)[len(lengths) // 2]
print(f"{len(lengths)} conversation lengths (tokens): shortest {min(lengths)}, median {middle}, longest {max(lengths)}")
packed = pack(lengths, total_seq_len)
mask = build_mask(packed, total_seq_len, ttt_steps)
print(f"packed {len(packed)} conversations = {sum(packed)} tokens + {total_seq_len - sum(packed)} padding; "
      f"BlockMask for {ttt_steps} TTT steps built in {mask.build_seconds:.2f}s")
mask_plots.plot_layout_thumbnail(mask.document_ids, ttt_steps, mask=mask)

# %% [markdown]
# ## Token level: every TTT step's keys side by side
#
# Each panel is one block of `total_seq_len` keys: the step-0 keys (causal within each document) and then the keys
# added at each TTT step (only the diagonal, for the reason the rules above give). Red lines: document boundaries;
# grey: padding.
#
# Full-length views are aggregated tile by tile: a pixel shows the fraction of attended pairs in its tile (power
# scale). A diagonal fills only 1/tile of each tile it crosses, so any tile holding an attended pair is drawn at least
# at the 20 % shade (the colour bar says so) and stays visible. Zoomed views are exact, with the 128-token block grid
# dotted.

# %%
mask_plots.plot_token_mask(mask)

# %%
zoom = mask_plots.around(packed[0])
print("zoom on the first document boundary, tokens", zoom[:2])
mask_plots.plot_token_mask(mask, region=zoom)

# %% [markdown]
# ## Each TTT step's mask
#
# Step *s* attends to `(s + 1) × total_seq_len` keys: the previous step's mask plus one more block of keys. The zoom
# above is the last TTT step; below, the same zoom at each earlier step. The next section's charts show what that
# costs: the attended pairs grow by exactly `total_seq_len` per step (the diagonal), the dense masks grow by a full
# `total_seq_len²`, the BlockMask by one block per query block.

# %%
for step in range(ttt_steps - 1):  # the last step is the zoom above
    display(mask_plots.plot_token_mask(mask, region=zoom, step=step, max_pixels=192))
table = stats(mask)  # what plot_stats draws below (and the summary's sparsity)

# %% [markdown]
# ## Block level: what flex attention actually skips
#
# The same block tables as at the training scale, for the long pack: the longer the pack, the larger the share of
# empty blocks, since each conversation attends only within itself.

# %%
display(mask_plots.plot_block_map(mask))
print(blocks_line(mask))
mask_plots.plot_stats(mask, table)

# %% [markdown]
# ## The sliding-window variant
#
# Draft layers listed as sliding-window layers get `kv > q - window` in the causal rule: long documents become a band.
#
# The draft notebook 01 built has this rule in every layer: speculators' default lists no full-attention layer
# (`full_attention_indices` empty), with a window of 2048 tokens (the `sliding_window` of its config, printed below).
# The CPU presets' training samples are far shorter (notebook 04 cuts the user turn and caps the verifier's reply, as
# the training-scale section above does), so on this machine the band never bites in training; a GPU run on longer
# documents (the plan's 8192-token packs) meets it. Here the
# window is this notebook's `sliding_window` (set above, smaller) so that the band shows at this length.

# %%
print(f"the draft's own window: {DraftSpec.sliding_window} tokens; this view's: {sliding_window}")
windowed = build_mask(packed, total_seq_len, ttt_steps, sliding_window)
display(mask_plots.plot_token_mask(windowed, region=mask_plots.corner(total_seq_len, 4 * sliding_window)))
window_pairs(mask, windowed)  # the query-key pairs each TTT step's mask lets attend

# %% [markdown]
# ## flex, sdpa and eager get the same mask
#
# sdpa receives speculators' dense boolean mask (`create_mask`), eager its additive float mask (`create_float_mask`,
# 0 / -inf), both extended per step by `extend_dense_mask_for_draft_tokens`. Below, each is compared pair by pair with
# what flex reads from the BlockMask, for a packed layout and its sliding-window variant.

# %%
checks = equivalence(pack(lengths, check_seq_len), check_seq_len, ttt_steps, sliding_window)
assert checks["equal_to_flex"].all(), checks
print(f"{len(checks)} comparisons, all equal: {bool(checks['equal_to_flex'].all())}")
folded(checks, f"the {len(checks)} comparisons, one a row (click to open)")

# %% [markdown]
# ## Bad layouts fail early, in one sentence
#
# Lengths past `total_seq_len`, empty documents and a `total_seq_len` that is not a multiple of 128 (speculators'
# block-wise extension would fail at TTT step 1) are refused before torch sees them; a sequence shorter than one block
# is fine without extension.

# %%
print("\n".join(verdicts()))

# %% [markdown]
# ## Long context
#
# `create_block_mask` evaluates the whole Q×KV grid: uncompiled (speculators' call) it needs about 10 GB and 27 s at
# 32k tokens on a 2-core CPU, so above `COMPILE_ABOVE` tokens eagle3kit runs it through `torch.compile` (a one-off
# compile, then about a second). Views never hold the dense mask: only partial blocks are evaluated.

# %%
long_packed = pack(lengths, long_seq_len)
t0 = time.perf_counter()
long_mask = build_mask(long_packed, long_seq_len, ttt_steps)
long_table = stats(long_mask)
long_fig = mask_plots.plot_token_mask(long_mask)
seconds = time.perf_counter() - t0
print(f"{long_seq_len} tokens x {ttt_steps} TTT steps: {'compiled' if long_mask.compiled else 'uncompiled'} "
      f"create_block_mask (threshold {COMPILE_ABOVE}); build + stats + plot {seconds:.1f}s")
last = long_table.iloc[-1]
print(f"last step: BlockMask {last.blockmask_bytes / 2**10:,.0f} KB vs dense bool "
      f"{last.dense_bool_bytes / 2**20:,.0f} MB and bf16 {last.dense_float_bytes / 2**20:,.0f} MB")
long_fig

# %% [markdown]
# ## Explorer
#
# Change the documents, padding, TTT steps, window or zoom; the figures redraw through the same plot functions. The
# explorer starts from the ShareGPT lengths above, each cut to 600 tokens so that redraws stay quick.

# %%
explorer = MaskExplorer(pool=[min(n, 600) for n in lengths], documents=4, padding=100, ttt_steps=ttt_steps)
show_widget(explorer.widget, explorer.figure)  # a saved notebook shows the explorer's first figure

# %%
print(explorer.status.value)

# %%
record_summary(workdir, "03", documents=len(packed), total_seq_len=total_seq_len,
               sparsity_last_step=round(float(table["sparsity"].iloc[-1]), 4),
               backends_equal=bool(checks["equal_to_flex"].all()), long_seq_len=long_seq_len,
               long_view_s=round(seconds, 1))

# %% [markdown]
# **What you have now:** the EAGLE-3 mask of a real packed batch, seen at token, block and TTT-step level, and checked
# to be the same for flex, sdpa and eager. **What to do next:**
#
# - notebook 04 builds the training data whose batches get this mask;
# - `eagle3kit masks --help` draws these figures for your own lengths, outside a notebook.
