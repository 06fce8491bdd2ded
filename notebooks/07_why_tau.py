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
# # 07 · Why τ is what it is: every token's fate, where the draft fails, and τ against context length
#
# **Headline.** Notebook 06 gave the verdict; this notebook is the diagnosis. It colours every token of the verifier's
# reply by what the draft did with it and counts where the draft fails by kind of token, so you know what more
# training has to fix; it ends with a first look at τ as the context grows (a few prompts a length: a pointer to the
# full measurement, `eagle3kit evaluate --bench long-context`, not a result).
#
# Notebook 06 measured *how much* the draft is accepted: τ per prompt, per category, per draft position. This notebook
# shows *what* is accepted and where it breaks, for the very draft 06 exported and the very replies it scored (nothing
# is trained or served again):
#
# * **every token's fate** in the verifier's greedy reply, from the same simulation `eagle3kit evaluate` runs: accepted
#   from the draft (and at which depth of its round), the verifier's own token after a rejection (hover: what the
#   draft proposed instead), or the bonus token; beside it vLLM's per-request counts where 06 served the draft;
# * **where the draft fails, by token class**: word starts, numbers, punctuation, code, tokens outside the draft's
#   vocabulary. Counted, not guessed;
# * **τ against context length**: drafts are trained on short packs and served on long chats. A few held-out
#   multi-turn histories at each length, marked with the length the draft was trained at and its sliding window
#   (`eagle3kit evaluate --bench long-context` measures the full curve).

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"        # used when notebook 06 did not run in this workdir
held_out_index = None       # the held-out prompt shown first (None: nearest the set's median τ, its reply not a loop)
bench_index = 0             # the named set's prompt shown second
n_class_prompts = 8         # prompts of each set counted by token class (0: all of them)
context_per_bucket = 2      # long-context prompts at each length (the full curve: bench/long_context.py)
context_longest = 2048      # the longest context measured here, in tokens
context_new_tokens = 32     # the verifier's reply to each long-context prompt
bench = "mt-bench"          # the named set shown when notebook 06 did not run (06's own otherwise)
fallback_steps = 20         # without notebook 06: steps trained here first
fallback_prompts = 4        # without notebook 06: held-out prompts, and prompts of `bench`
max_new_tokens = 48         # without notebook 06: the verifier's reply to each prompt
seed = 0
workdir = "../runs/interactive/work"

# %%
# %matplotlib inline
import time

from IPython.display import HTML

from eagle3kit.doctor.checks.draft_loader import sliding_window, trained_length
from eagle3kit.evaluate import context_curve, long_context, token_classes, vocab_cap
from eagle3kit.evaluate.benchmarks import HELD_OUT
from eagle3kit.evaluate.conventions import TAU_CONVENTION
from eagle3kit.evaluate.fates import beside_its_set, same_counts, typical
from eagle3kit.evaluate.token_page import comparison_table, legend_html, one_round_more, prompt_html, vllm_line
from eagle3kit.evaluate.token_viewer import SetViews, TokenViewer
from eagle3kit.figures import show_widget
from eagle3kit.notebook import scored_by_06, setup, short
from eagle3kit.evaluate.recipes import read_lab
from eagle3kit.runner import read_summary, record_summary

workdir = setup(workdir, seed=seed)
started = time.perf_counter()

# %% [markdown]
# ## Notebook 06's draft and the replies it scored
#
# Notebook 06 exported its draft and kept, for each prompt set, the prompts, the verifier's greedy continuations its
# simulation read and, when vLLM served the draft, vLLM's per-request acceptance. Each view below is one forward of the
# draft over a prompt and its reply (and one of the verifier, the first time a sequence is looked at).

# %%
run = scored_by_06(workdir, verifier, fallback_steps, fallback_prompts, bench, fallback_prompts, max_new_tokens, seed)
print(run.how)
draft, tokenizer, sets, k = run.draft, run.tokenizer, run.sets, run.k
views = SetViews(run.verifier, draft, sets, k, run.states)  # 06's verifier states: the draft runs alone
named = next((name for name in sets if name != HELD_OUT), None)
print(f"draft {short(run.draft_dir, workdir)}: k = {k}, draft vocab {draft.config.draft_vocab_size}; {TAU_CONVENTION}")

# %% [markdown]
# ## Every token's fate: a held-out prompt
#
# Green tokens came from the draft (darker: earlier in the round); each round ends with one token of the verifier's
# own, red after a rejected proposal (hover over it for what the draft proposed instead), blue when every proposal
# was accepted (the bonus token). τ of the prompt is counted from these marks, and it is the τ notebook 06 scored.

# %%
scored = sets[HELD_OUT].simulated
if held_out_index is None:  # a typical prompt, not the easiest: a looping reply is easy to draft
    held_out_index = typical(scored, [tokenizer.decode(c) for c in sets[HELD_OUT].conts]) if scored else 0
shown = views.view(HELD_OUT, held_out_index)
if scored is not None:
    r = scored[held_out_index]
    same = "the same" if same_counts([shown], [r]) else "DIFFERENT counts"
    print(f"notebook 06 scored this prompt {r.accepted} accepted / {r.rounds} rounds (τ {r.tau:.3f}); the page counts "
          f"{shown.accepted} / {shown.rounds}: {same}; {beside_its_set(scored, held_out_index)}")
HTML(legend_html(k) + prompt_html(shown, tokenizer))

# %% [markdown]
# ## An MT-bench prompt
#
# Where notebook 06 served the draft in vLLM, its per-request counters stand beside the simulation. The same reply
# need not make the same count, for two reasons. vLLM counts a round's accepted draft tokens before it cuts the output
# at the token limit, so a reply's last round can count tokens past its end; and each proposal is the draft's top
# token over the verifier's hidden states, which vLLM computes with its own kernels in a batch (a near tie can go
# the other way). The line under the class table below counts where the two differ, and how many the first reason
# explains.

# %%
if named is not None:
    other = views.view(named, bench_index)
    display(HTML(prompt_html(other, tokenizer)))
else:
    print("skipped: notebook 06 scored no named set")

# %% [markdown]
# ## Pick another prompt
#
# Every prompt notebook 06 scored, of both sets; a prompt's view is computed when it is first picked.

# %%
viewer = TokenViewer(views.labels(), views.view_at, tokenizer, k)
show_widget(viewer.widget)  # a saved notebook shows a line of text; the two replies above are static

# %% [markdown]
# ## Where the draft fails, by token class
#
# A *target* is a reply token the draft was asked for (accepted, or rejected in favour of the verifier's own token);
# a *failure* is a rejected one. Each target is counted in every class it belongs to: a word start (a letter after
# whitespace), a number (any digit), punctuation, code (inside a fenced block) and a token outside the draft's
# vocabulary, which the draft can never propose. A token can be in several classes (a word start inside code) or in
# none (the middle of a word), so the "share of failures" column need not add up to 1.
#
# Below the table, τ on all the held-out prompts as the sum it is: one token of the verifier's own a round, plus the
# draft tokens accepted a round at each depth. Every later depth needs the first proposal accepted, so the count that
# follows, how often the first proposal was rejected and how many of those tokens lie outside the draft vocab, says
# where τ is lost.

# %%
counted = views.views(HELD_OUT, n_class_prompts) + (views.views(named, n_class_prompts) if named else [])
classes = token_classes.class_table(counted, tokenizer, token_classes.draft_vocab_mask(draft))
worst = token_classes.worst_line(classes)
n_named = len(counted) - len(views.views(HELD_OUT, n_class_prompts))
print(f"{len(counted)} prompts ({len(counted) - n_named} held-out, {n_named} {named or 'named'}; "
      f"{sum(len(v.fates) for v in counted)} reply tokens). {worst}")
classes

# %%
held_views = views.views(HELD_OUT)
adds_up = token_classes.how_tau_adds_up(held_views, tokenizer, token_classes.draft_vocab_mask(draft))
print(adds_up)
if scored is not None:
    check = f"{same_counts(held_views, scored)}/{len(scored)}"
    print(f"the token fates count notebook 06's simulated rounds and accepted tokens on {check} held-out prompts")
else:
    check = None
    print("skipped: notebook 06 did not run here, so there are no scores of its to compare")
line = vllm_line(views.computed())
if line:
    print(line)
    # the prompts the last round does not explain (the line above counts the rest)
    odd = [v for v in views.computed() if not (v.vllm_same_output and one_round_more(v))]
    differing = comparison_table(odd, only_differing=True)
    display(differing if len(differing) else "every difference is the last round's, as the line above says")
else:
    print("skipped: notebook 06 did not serve the draft in vLLM (vllm_check = False), so there are no per-request "
          "counts to set beside")

# %% [markdown]
# ## The vocabulary's cap, in one table
#
# A token outside the draft's vocabulary can never be proposed, so it caps τ. Notebooks 04, 06 and this one each
# counted the share of such tokens over what they looked at, and the shares differ because the tokens differ: every
# token of a reply, only the tokens the draft was asked for, only the first proposals it lost. One table, then what
# the recipe lab's `vocab-N` rows say about the size.

# %%
in_vocab = token_classes.draft_vocab_mask(draft)
if in_vocab is not None:
    counted_sets = {HELD_OUT: counted[:len(counted) - n_named], **({named: counted[len(counted) - n_named:]}
                                                                   if n_named else {})}
    display(vocab_cap.cap_table(read_summary(workdir, "04") or {}, read_summary(workdir, "06") or {}, counted_sets,
                                classes, held_views, tokenizer, in_vocab))
    print(vocab_cap.why_this_size(read_lab(), draft.config.draft_vocab_size))
else:
    print("the draft predicts over the verifier's whole vocabulary: no token lies outside it")

# %% [markdown]
# ## τ against context length
#
# The `long-context` set: multi-turn ShareGPT histories (and long pasted documents) cut at a user turn, from the end of
# ShareGPT's order and never a conversation this run trained on, at 256, 1k, 2k, 4k tokens and the verifier's limit.
# Here a few prompts at each length up to `context_longest`; the verifier writes its reply and its hidden states in one
# pass, then the draft is simulated as above. The dashed line is the longest context the draft was trained at
# (its pack, or its longest document), the dotted one its sliding window.

# %%
exclude = long_context.training_prompts(run.data_dir) if run.data_dir else set()
limit = run.verifier.config.max_position_embeddings
lengths = [b for b in long_context.buckets(limit) if b <= context_longest]
prompts = long_context.long_context_set(tokenizer, limit, context_per_bucket, exclude, lengths=lengths)
_ids, _conts, records = long_context.score(run.verifier, {"draft": draft}, tokenizer, prompts, context_new_tokens, k,
                                           views.states, progress=False)
curve = context_curve.curve_table(records["draft"])
trained, window = trained_length(run.draft_dir), sliding_window(draft.config)
found = context_curve.fall(curve, trained) if trained else None
print(found.describe() if found else f"no length measured here lies on both sides of the training length ({trained})")
if found is not None and found.falls:
    print(found.line(window))
display(curve.round(3))
context_curve.plot_context_curve(curve, trained, window, f"τ against context length ({len(prompts)} prompts)")

# %%
record_summary(workdir, "07", tau_shown_held_out=round(shown.tau, 3),
               tau_shown_bench=round(other.tau, 3) if named else None, class_prompts=len(counted),
               failure_rates={c: float(classes.loc[c, "failure rate"]) for c in classes.index},
               same_as_06=check,
               context_tau={c: round(float(t), 3) for c, t in curve["tau"].items()}, trained_length=trained,
               sliding_window=window, falls_past_training=None if found is None else found.falls,
               seconds=round(time.perf_counter() - started, 1),
               closing=[f"Why τ (notebook 07): {adds_up} {worst}",
                        "τ against context: " + ", ".join(f"{c} {t:.2f}" for c, t in curve["tau"].items())
                        + (f"; {found.describe()}" if found else "")])
print(f"notebook 07 took {time.perf_counter() - started:.0f}s after its imports")

# %% [markdown]
# **What you have now:** which tokens the draft misses and a first look at τ at longer contexts. **What to do
# next:** the levers in notebook 06's conclusion (more conversations with the minutes to train on them: the recipe
# lab's frontier), then the GPU hand-off it lists: `eagle3kit plan` → `eagle3kit launch` → `torchrun`.
