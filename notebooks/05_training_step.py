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
# # 05 · Train the draft one step at a time
#
# **Headline.** This notebook trains the draft on notebook 04's data with speculators' own model and loss, one step at
# a time, then proves the run is sound: it resumes bit for bit, it overfits one conversation, and speculators' own
# trainer runs the very same configuration: the model, loss and settings a GPU cluster trains, at a CPU's scale.
#
# `TrainSession` trains speculators' own `Eagle3DraftModel` on the data directory of notebook 04, one packed batch per
# `step()`, exactly as one iteration of speculators' `Trainer` would on one GPU: same batches (`ArrowDataset` +
# multipack sampler + `CollateFn`), same forward and loss, `clip_grad_norm_(1.0)`, AdamW and a linear warmup/decay
# schedule. Each step reports the loss (speculators' distillation loss against the verifier, **summed over the TTT
# steps**: the `loss` column holds all of them), the **full accuracy** `full_acc_i` (the share of positions whose
# draft tokens at TTT steps 0 … i all equal the verifier's top token: cumulative) and the **conditional accuracy**
# (step *i* right, among positions whose earlier TTT steps were right) for every TTT step.
#
# Then: run N steps with live plots, checkpoint and resume bit for bit, export the draft in speculators' format, and
# hand the very same run to `speculators train` on N GPUs.

# %% tags=["parameters"]
# Defaults for a run by hand; `eagle3kit run-notebooks --preset NAME` writes its values here in the executed copy.
verifier = "smollm2"        # used when the data has to be built here
data_dir = ""               # "": notebook 04's workdir/data if complete, else the small set (shared with 06) built here
rebuild_data = False        # build the small data set here (again) even if notebook 04's exists
use_notebook_01 = True      # take the draft's shape from notebook 01's workdir/draft_config when present
total_seq_len = 384         # packed tokens per step, at least the longest sample
lr = 1e-3
max_steps = 0               # the LR schedule's horizon; 0: speculators' default (epochs x batches per epoch)
hidden_states_dtype = "auto"  # "auto": float32 on CPU, bf16 on CUDA; "native": bf16 where the hardware has it
warm_start_layer = None     # None: speculators' random init; N / -1: start the draft from verifier layer N / the last
first_steps = 2             # steps taken one by one
run_steps = 3               # steps taken by Run N
tau_every = 10              # every this many steps, τ simulated on 4 held-out prompts (0: never)
n_gpus = 8                  # for the scale-out command
rehearse_ranks = 2          # speculators' own trainer run here under torchrun with this many ranks (0: skip it)
rehearse_steps = 3          # its steps (within one epoch)
overfit_steps = 40          # the overfit check: steps on one conversation (0: skip it)
overfit_reply_tokens = 64   # the overfit check: length of the verifier's reply it memorises
seed = 0
workdir = "../runs/interactive/work"

# %%
# %matplotlib inline
import dataclasses
import time

import torch

from eagle3kit.data.directory import DataDir
from eagle3kit.evaluate import recipes
from eagle3kit.data.loader import held_out_conversations
from eagle3kit.data.plots import plot_batch
from eagle3kit.draft.config import DraftSpec
from eagle3kit.figures import show_widget
from eagle3kit.logs import quiet
from eagle3kit.notebook import CHECKPOINT_05, DRAFT_CONFIG, folded, setup, short, training_data
from eagle3kit.runner import record_summary
from eagle3kit.train import launch, live_tau
from eagle3kit.train.anatomy import open_step, path_line, path_seconds, step_loop, ttt_loop
from eagle3kit.train.checkpoint import CheckpointError, resume_matches, saved_step
from eagle3kit.train.live_tau import milestones, trajectory
from eagle3kit.train.overfit import overfit, plot_overfit
from eagle3kit.train.plots import plot_metrics, plot_step
from eagle3kit.train.session import TrainingDiverged, TrainSession, step_columns
from eagle3kit.train.stepper import TrainingStepper
from eagle3kit.train.validation import sets_table

workdir = setup(workdir, seed=seed)

# %% [markdown]
# ## The data and the draft
#
# The data directory is speculators' own layout (Arrow dataset, `hidden_states/hs_*.safetensors`, `d2t/t2d`), made by
# the real verifier in notebook 04. The draft's shape comes from notebook 01's `config.json` when it is there; its
# vocabulary is the data's draft vocab.

# %%
t0 = time.perf_counter()
data = DataDir(data_dir) if data_dir else training_data(workdir, verifier, seed=seed, rebuild=rebuild_data)
config_01 = workdir / DRAFT_CONFIG
from_01 = use_notebook_01 and (config_01 / "config.json").exists()
session = TrainSession(data, config_01 if from_01 else None, lr=lr, total_seq_len=total_seq_len, seed=seed,
                       max_steps=max_steps or None, hidden_states_dtype=hidden_states_dtype,
                       warm_start_layer=warm_start_layer)
b = session.build
if from_01:
    print("draft shape from notebook 01:", config_01)
print(f"data: {data} ({len(session.batches.dataset)} of its {data.n_samples} samples train, the rest is speculators' "
      f"validation split (train_data_ratio {session.settings.train_data_ratio}); {len(session.batches)} packed batches "
      f"of {total_seq_len} tokens in the first epoch: the sampler packs each epoch anew, so later ones hold a few "
      "more or fewer)")
print(f"draft: {b.spec.num_layers} layer(s), aux layers {b.aux_layer_ids}, draft vocab {b.config.draft_vocab_size}, "
      f"attention {b.attention.implementation} (the draft's config, what vLLM and speculators' trainer build), loss "
      f"{session.settings.loss_implementation}, device {session.device}; the training forward here: {session.attention}")
display(sets_table(session, len(held_out_conversations(session.data)), live_tau.PROMPTS))
if warm_start_layer is not None:
    print(f"warm start: the draft layer, fc and norm start from verifier layer {warm_start_layer} "
          "(eagle3kit.draft.warm_start); speculators' random init instead: "
          + (recipes.evidence(recipes.read_lab(), "random-init") or "not measured by the recipe lab")
          + "; not yet tried on the frontier's recipe this preset runs, so the preset keeps the warm start")
taken_here = first_steps + run_steps
print(f"schedule: {session.total_steps} steps ({session.settings.scheduler_type}: a short warmup, then the LR decays "
      f"to 0); this notebook takes {taken_here} of them ({taken_here / session.total_steps:.0%} of the way down) and "
      f"notebook 06 trains on from its checkpoint; ready in {time.perf_counter() - t0:.1f}s")

# %% [markdown]
# ## Before a long run: can the draft overfit one conversation?
#
# A check SpecForge (another EAGLE-3 trainer, SGLang's) recommends before spending GPU hours: train a fresh draft for a
# few dozen steps on **one** conversation (a prompt and the verifier's own greedy reply), then run the real speculative
# decode loop on that prompt. A draft wired correctly (aux hidden states, pre-norm targets, `d2t`/`t2d`, the TTT mask)
# learns it, and the decode loop then accepts as many draft tokens as its training accuracy predicts (τ near `k + 1`
# once memorised; how far it gets in a few dozen steps depends on the conversation, so that is what the verdict compares
# with). A draft that learned but is not accepted trained on states the verifier does not give when serving; one that
# cannot learn one sample will not be helped by more data: something is wired wrong.

# %%
if overfit_steps:
    check_overfit = overfit(b.spec.verifier, workdir / "overfit_05", steps=overfit_steps, k=session.ttt_steps,
                            reply_tokens=overfit_reply_tokens, seed=seed, spec=b.spec)
    print(check_overfit.message)
    display(plot_overfit(check_overfit))
else:
    check_overfit = None
    print("skipped: overfit_steps = 0")

# %% [markdown]
# ## One step at a time
#
# `step()` trains one step and returns its record; the table has a row a step.
#
# - **Learning rate:** speculators' schedule (`scheduler_type`): a linear warmup over `warmup_steps` (by default 1 % of
#   the horizon, rounded down), then a decay to 0 (linear or cosine; `"none"` keeps `lr`). Warmup step *i* (from 0)
#   runs at `lr * i / warmup_steps`, as in speculators' trainer, so with any warmup the first step runs at LR 0 and
#   moves no weight. Each row's `lr` is the LR that step used; the cell prints this run's warmup.
# - **What to expect at this scale:** one decoder layer on notebook 04's few hundred conversations (tens of thousands
#   of tokens), where a real draft sees tens to hundreds of millions. The loss falls but stays high.
# - **Accuracy** (`full_acc_0`: the draft's first guess is the verifier's top token): from speculators' random init
#   (`warm_start_layer = None`) it starts near zero and climbs slowly. Warm-started from a verifier layer (-1: the
#   last) it also starts near zero (the half of its attention that reads token embeddings is random), and climbs
#   over the first few hundred steps (the live plot below); the later TTT steps trail behind.
# - **`grad_norm`** is the gradient's norm before clipping: speculators clips it to 1.0, so large values in the first
#   steps (hundreds) are normal; they fall as the loss does.
# - **Healthy or not:** a loss that falls over the first steps is healthy; a flat, rising or NaN loss is not. Whether
#   the *wiring* is sound shows in the overfit check above, not in this loss. These accuracies are on training
#   batches; notebook 06 sets the validation split's beside them (the gap: how much the draft memorised).

# %%
print(f"warmup: {session.warmup_steps} of {session.total_steps} steps (scheduler {session.settings.scheduler_type})")
for _ in range(first_steps - 1):
    session.step()
opened = open_step(session)  # the last of these steps, with hooks on the draft's modules (below)
record = opened.record
table = session.history_frame()[step_columns(session.ttt_steps)].set_index("step")
display(table.style.format({"lr": "{:.2e}", "loss": "{:.3f}", "grad_norm": "{:.3f}", "seconds": "{:.2f}"}
                           | {f"full_acc_{k}": "{:.3f}" for k in range(session.ttt_steps)}))
plot_step(record)

# %% [markdown]
# ## One step, opened up
#
# What that last step computes, call by call: forward hooks on the draft's own modules recorded each call's input and
# output shapes (batch × positions × features) in speculators' own forward on the step's batch, what a GPU runs:
# every one of the pack's `total_seq_len` positions at every call.
#
# - **Once a step:** `fc` turns the verifier's aux hidden states (three layers, concatenated) into one hidden vector
#   a position; the verifier's own head turns its stored last state into the **targets**, its next-token
#   distribution at every position.
# - **Then once per TTT step *s*:** each position reads the token *s* places ahead (`embed_tokens`; teacher forcing:
#   the verifier's own next tokens stand in for the draft's guesses); the decoder layer reads [embedding, hidden
#   state] under notebook 03's mask (at *s* > 0 the hidden state is its own output from step *s* − 1: the
#   training-time test); `lm_head` gives the draft's logits.
# - **The loss:** step *s*'s logits at position *i* are trained toward the verifier's distribution at *i* + *s*; one
#   KL divergence a TTT step, added up (the line under the table).
#
# **A CPU note** (the two lines under the loss): this CPU trained the step on eagle3kit's block-sparse path, which
# computes fewer rows with the same loss and gradients (tests hold it to the dense forward at 1e-5): it drops the
# padding after the last document (`fc` keeps the `ttt_steps` − 1 padding rows a still-correct draft can reach), runs the decoder layer only on rows whose chain of TTT steps can still reach
# a loss (a prompt token far from any reply cannot), and `lm_head` only on rows that carry loss. The last line times
# both paths on this very batch, forward and backward, in this run's precision.

# %%
display(opened.dense())
print(opened.losses(session.ttt_steps))
if opened.cpu_line():
    print(opened.cpu_line())
    print(path_line(path_seconds(session, opened.batch)))  # no weight moves: the gradients are cleared after

# %% [markdown]
# The loop itself, as speculators writes it (its installed source, comments and line breaks removed): per TTT step the
# embedding of the token each position reads, the decoder layer over [embedding, hidden state] (whose output is the
# next step's hidden state), the logits, the loss terms (`compute_metrics`), teacher forcing (`input_ids` shifted one
# more place), and the mask extended for one more step. This is what a GPU runs; on this CPU eagle3kit's block-sparse
# forward computes the same loss and gradients with fewer rows (`eagle3kit.train.forward`, held to this loop at 1e-5
# by its tests).

# %%
print(ttt_loop())

# %% [markdown]
# And the optimizer step around that forward, as `step()` runs it (speculators' `Trainer` does the same): clear the
# gradients, forward and backward on each rank's batch, clip the gradient norm to 1.0 (`grad_norm` in the table above
# is the norm before clipping), then the optimizer and the LR schedule take one step.

# %%
print(step_loop())

# %% [markdown]
# ## The next batch and its mask
#
# Several conversations are packed into one row of `total_seq_len` tokens; `document_ids` keeps them apart (-1 is
# padding). The thumbnail shows the documents and the EAGLE-3 attention mask at the last TTT step.

# %%
batch = session.peek_batch()
print("dataset rows packed into the next batch:", session.batches.indices())
plot_batch(batch["document_ids"], session.ttt_steps, batch["loss_mask"])

# %% [markdown]
# ## Run N steps, with live plots
#
# In JupyterLab, the buttons drive the same session: **Step**, **Run N** (in a background thread, so **Stop** works
# between steps) and **Stop**. Headless, the cell calls the method the Run N button calls.
#
# Loss and accuracy are not what the draft is for: **τ** is. Every `tau_every` steps the session measures the draft's
# simulated τ on a few held-out prompts (the verifier's replies are written once, here; later measurements run the
# draft alone), as SpecForge picks checkpoints by its simulated acceptance (which leaves the verifier's own token out).
# The stepper draws it beside loss and accuracy. On a few prompts it is a rough guide: one measurement moves by a few
# tokens' luck. `eagle3kit train --eval-every N --keep-best-tau` keeps the checkpoint of the best live τ, worth it only
# with more prompts than the few here.
#
# Under the run, the table reads it at a glance: the first step, each live τ and the last, each row's loss and
# accuracies the mean of the 50 steps up to it (one batch's figures move with the batch: its lengths, how much of it is
# reply), and the figure draws every step, smoothed. Loss and accuracy are read on training batches; live τ on prompts
# the draft never saw, a few short replies (the line above the table gives their lengths). Notebook 06 measures τ on
# all the held-out prompts and asks whether the draft learnt the language or its training replies.

# %%
if tau_every:
    print("live:", session.track_tau(tau_every).describe())
stepper = TrainingStepper(session, n=run_steps)
show_widget(stepper.widget)  # a saved notebook shows a line of text; the figure below is the run's
t0 = time.perf_counter()
stepper.run(run_steps, background=False)
if stepper.error:
    print("stopped:", stepper.error)
print(f"{run_steps} steps in {time.perf_counter() - t0:.0f} s")
display(milestones(session.history, session.ttt_steps))  # the first step, each live τ, the last
if trajectory(session.history):
    print(trajectory(session.history))
plot_metrics(session.history)

# %% [markdown]
# ## Checkpoint and resume
#
# `save()` writes speculators' model directory (`save_pretrained`) with the optimizer, scheduler, RNG and data position
# alongside, atomically. A session resumed from it continues exactly where this one is: the next step is the same,
# bit for bit.

# %%
checkpoint = session.save(workdir / CHECKPOINT_05)
print("checkpoint:", sorted(p.name for p in checkpoint.iterdir()))
resumed = TrainSession.resume(checkpoint, progress=False)
match = resume_matches(session, resumed)  # one more step in each, then loss and every weight compared
print(f"next step after resume: loss {match.resumed_loss:.6f} vs {match.loss:.6f} uninterrupted; "
      f"bit-identical loss: {match.loss == match.resumed_loss}, weights: {match.same_weights}")

# %% [markdown]
# Two mistakes, caught: resuming a checkpoint into a session with another configuration, and a loss that turns NaN
# (here a weight is poisoned on purpose): the step is refused, the weights stay at the last good step and the last good
# checkpoint is kept.

# %%
try:
    other = {**dataclasses.asdict(session.settings), "lr": session.settings.lr / 2}  # the same run but its lr
    TrainSession(data, b.spec, progress=False, **other).load(checkpoint)
except CheckpointError as exc:
    print("refused:", exc)
with torch.no_grad():
    resumed.model.fc.weight[0, 0] = float("nan")
try:
    resumed.run(2, checkpoint_dir=workdir / CHECKPOINT_05)
except TrainingDiverged as exc:
    print("stopped:", exc)
print("checkpoint still at step", saved_step(checkpoint))

# %% [markdown]
# ## Export
#
# The draft alone, in speculators' format: `SpeculatorModel.from_pretrained` loads it (and fetches the verifier-owned
# weights from the verifier recorded in its config); vLLM serves it.

# %%
from speculators.model import SpeculatorModel

exported = session.export(workdir / "draft_05")
with quiet():  # speculators' loader logs every file it opens
    loaded = SpeculatorModel.from_pretrained(str(exported))
print(type(loaded).__name__, "loaded from", short(exported, workdir), "- fc weights equal:",
      torch.equal(loaded.fc.weight, session.model.fc.weight))

# %% [markdown]
# ## The same run on N GPUs, through speculators' own trainer
#
# The run becomes a speculators `TrainConfig` YAML, validated by speculators itself; every value that defines it is
# written out. Below: whether it fits (the step's memory on one H100-80GB a rank, and the disk its checkpoints need
# under the plan's folder), the YAML's head and its path, the command, and a table of the fields the YAML sets where
# eagle3kit's value differs from the `speculators train` default, with why. The command runs it with `torchrun` (add
# `--fsdp-shard` to shard with FSDP2: each GPU holds a slice of the weights, gradients and optimizer state). On N ranks
# each step takes N packs (one a rank), so the YAML keeps the packs this session sees: `max_steps` / N steps, and the
# fewest `epochs` that hold them, so that `max_steps`, the LR schedule's horizon, is what ends the run (the line under
# the command says after how many epochs).

# %%
on_gpus = session.settings.for_ranks(len(session.batches), n_gpus)  # the packs this session sees, on n_gpus ranks
plan = launch.write_plan(session.build, on_gpus, data, workdir / "launch_05", n_gpus=n_gpus, warn=False)
print(plan.fit)  # its GPU memory a rank, and the disk its checkpoints need here
display(folded(plan.head(), "the YAML's first lines (click to open; all of it: plan.yaml_path)"))
print(plan.command)
print(on_gpus.ending(len(session.batches), n_gpus))  # speculators stops at max_steps or after epochs, the first
fields = launch.explain_plan(plan)
differs = fields[fields["differs"] == "yes"]
folded(differs, f"{len(fields)} fields written; {len(fields) - len(differs)} are speculators' defaults, the "
       f"{len(differs)} that are not, each with why (click to open; `launch.explain_plan(plan)` lists every one)")

# %% [markdown]
# ### Rehearse it here: speculators' own trainer, on this CPU, under torchrun
#
# `eagle3kit rehearse` runs speculators' own trainer, unchanged, on the very YAML above, here, with `rehearse_ranks`
# processes under `torchrun`, for a few steps. Then `TrainSession` trains the same run and the two loss curves are
# drawn on each other; the doctor reads the trainer's records and log. (`speculators train --config run.yaml
# --dry-run` only builds and saves the draft: where no rehearsal runs, the check below runs that instead.)
#
# *Advanced: how a GPU trainer runs on a CPU.* The ranks talk over gloo (PyTorch's CPU backend for collectives).
# speculators picks its device through `torch.accelerator`; on a machine without one, `eagle3kit.train.rehearsal.cpu`
# presents the CPU as its accelerator, piece by piece (each piece says what in speculators needs it). What a CPU cannot
# train (flex attention's backward, the fused loss, a Triton GPU kernel, bf16 compared exactly) is passed as flags,
# never edited into the YAML, and listed. `TrainSession` trains as `rehearse_ranks` data-parallel ranks (one sampler per
# rank, gradients averaged).

# %%
from eagle3kit.doctor.findings import to_frame
from eagle3kit.doctor.checks.rehearsal import after
from eagle3kit.train.rehearsal import compare
from eagle3kit.train.rehearsal.plots import plot_side_by_side
from eagle3kit.train.rehearsal.run import overrides_table, rehearse

rehearsal, side = None, None
if rehearse_ranks:
    rehearsal = rehearse(plan.yaml_path, workdir / "rehearsal_05", ranks=rehearse_ranks, steps=rehearse_steps)
    print(f"ran in {rehearsal.seconds:.0f}s (exit {rehearsal.returncode}):", " ".join(rehearsal.command))
    display(overrides_table(plan.yaml_path, rehearsal.overrides))
    found = after(rehearsal)
    display(to_frame(found) if found else "the doctor found nothing in the trainer's records and log")
    if rehearsal.ok:
        side = compare.side_by_side(rehearsal)
        print("speculators' trainer vs TrainSession:", compare.summary(side))
        display(plot_side_by_side(side, f"speculators' trainer on {rehearse_ranks} rank(s) and TrainSession"))
        print("speculators' checkpoint:", rehearsal.checkpoint(), "(eagle3kit doctor --draft opens it)")
else:
    print("skipped: rehearse_ranks = 0")

# %% [markdown]
# The draft speculators built from the YAML (the rehearsal's checkpoint; where none ran, a dry run's) must
# equal eagle3kit's draft for the same run, `config.json` field by field.

# %%
built = rehearsal.checkpoint() if rehearsal is not None and rehearsal.ok else None  # else: a --dry-run builds it
table = launch.round_trip(session.build, plan, workdir / "launch_05" / "dry_run", model=session.model, saved=built)
print(f"{int(table['equal'].sum())} of {len(table)} config.json fields equal (speculators' "
      f"{'rehearsal checkpoint' if built else 'dry run'} against eagle3kit's draft)")
display(table[~table["equal"]] if not table["equal"].all() else table.head(12))

# %% [markdown]
# ## On a GPU
#
# With CUDA, the session picks speculators' flex attention and the fused (Triton) loss, and trains under bf16 autocast,
# as `speculators train` does.

# %%
if not torch.cuda.is_available():
    print("skipped: no CUDA")
else:
    gpu = TrainSession(data, DraftSpec(**{**b.spec.__dict__, "device": "cuda"}), lr=lr,
                       total_seq_len=total_seq_len, seed=seed, progress=False)
    for _ in range(3):
        r = gpu.step()
    print(gpu.build.attention.implementation, gpu.settings.loss_implementation, f"{r['tokens_per_s']:.0f} tokens/s")

# %%
last = session.history[-1]
record_summary(workdir, "05", steps=session.global_step, loss=round(last["loss"], 4),
               full_acc_0=round(last["full_acc_0"], 4), tokens_per_s=round(last["tokens_per_s"]),
               resume_bit_exact=match.identical, dry_run_fields_equal=bool(table["equal"].all()),
               rehearsal_ok=None if rehearsal is None else rehearsal.ok,
               rehearsal_max_abs_loss_diff=None if side is None else float(side["abs_diff"].max()),
               overfit_tau=None if check_overfit is None else round(check_overfit.tau, 3),
               overfit_steps=None if check_overfit is None else check_overfit.steps,
               overfit_passed=None if check_overfit is None else check_overfit.passed)

# %% [markdown]
# **What you have now:** a checkpoint (`checkpoint_05/`), an exported draft, speculators' YAML with its `torchrun`
# command, and three proofs that the run is sound (resume, rehearsal, overfit). **What to do next:** notebook 06
# resumes this session for its own `train_steps` more (in the demo, the second half of `max_steps`) and gives the
# verdict: τ.
