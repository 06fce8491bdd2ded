"""The recipe lab: which lever buys τ per CPU minute. Each recipe makes the demo verifier's draft from nothing at an
equal budget of data + training minutes on this machine, and is scored on MT-bench's 80 first turns and on 64
held-out ShareGPT prompts, each with a 95 % interval.

    .venv/bin/python bench/recipe.py [--budget 5] [--only NAME,NAME]
        [--frontier 3,5,8,12 --best NAME+NAME [--scale-data] [--keep-rows]] [--work DIR]

Budget: a recipe's data minutes (regeneration, engine start included, and hidden states, measured once per data
recipe and reused by every recipe on the same data) plus its training minutes; the training steps fill what the
data leaves, at the seconds a step of that recipe's shape takes (timed on 4 steps of it first). The rows, their
minutes and τ go to ``--out`` (read by :mod:`eagle3kit.evaluate.recipes`, which notebook 06 and the doctor use);
``bench/results/recipe.md`` is written beside it. ``--frontier`` runs the best recipe at those budgets.
Results are cached in ``--work`` by recipe, so an interrupted lab resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.data import conversations as conv  # noqa: E402
from eagle3kit.data.dataset import build_dataset  # noqa: E402
from eagle3kit.data.regenerate import SPARE_PROMPTS, distinct_prompts, regenerate  # noqa: E402
from eagle3kit.draft.config import DraftSpec  # noqa: E402
from eagle3kit.evaluate import acceptance as ev  # noqa: E402
from eagle3kit.evaluate import benchmarks, recipes, scores  # noqa: E402
from eagle3kit.logs import quiet  # noqa: E402
from eagle3kit.tables import markdown_table  # noqa: E402
from eagle3kit.train.session import TrainSession  # noqa: E402
from eagle3kit.verifier import load_model, load_tokenizer, resolve  # noqa: E402

HELD_OUT = 16  # conversations the demo keeps out of its data (notebook 04)
EVAL_NEW_TOKENS = 64
EVAL_HELD_OUT = 64  # held-out ShareGPT prompts scored (seed-1 order, none a training prompt of any recipe)
TRAIN_PROMPTS_MAX = 4000  # no recipe trains on more ShareGPT conversations than this (the held-out exclusion)


@dataclass(frozen=True)
class Data:
    """How a recipe's training data is made."""

    replies: str = "vllm"  # "vllm" | "transformers": the verifier's greedy replies; "sharegpt": ShareGPT's own; "mix"
    n_conversations: int = 256
    reply_tokens: int = 96
    prompt_tokens: int = 128
    seq_length: int = 1024
    draft_vocab_size: int = 2048
    aux_layer_ids: tuple[int, ...] | None = None
    supervise: str = "replies"  # "all": every token's next-token distribution is a target, not only the replies'

    def key(self) -> str:
        return hashlib.sha1(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:10]

    def work_key(self) -> str:
        """What the data costs to make: the replies and the verifier forward over the same tokens. The aux layers
        stored and the vocab mapping do not change that work, so recipes differing only there are charged the same
        data minutes (round 1 timed each apart, and their budgets differed by the machine's noise)."""
        fields = {k: v for k, v in dataclasses.asdict(self).items()
                  if k not in ("draft_vocab_size", "aux_layer_ids", "supervise")}
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Recipe:
    name: str
    lever: str
    what: str
    data: Data = Data()
    train: tuple = ()  # TrainSettings fields (items), on top of BASE_TRAIN
    ttt_steps: int = 3
    budget: float | None = None  # minutes of data + training; None: --budget
    steps: int | None = None  # fixed steps instead of a budget (the demo as it was)
    draft: tuple = ()  # DraftSpec fields (items): fc_norm, norm_output, norm_before_fc
    steps_like: str | None = None  # train as many steps as that recipe did at the same budget (equal steps)
    score_k: tuple[int, ...] = (3,)  # draft tokens a round it is scored at (the first is the table's)

    def settings(self) -> dict:
        return {**BASE_TRAIN, **dict(self.train)}


# Round 2 (this file's rows): round 1's best lever (lr 1e-3, now TrainSettings' default) is the base, and every row
# trains on the block-sparse step (TrainSession's default on a CPU). Round 1's rows and results, measured on another
# host with the dense step, stay in bench/results/recipe.json under "round1".
BASE_TRAIN = {"lr": 1e-3, "warm_start_layer": -1, "hidden_states_dtype": "native", "total_seq_len": 1024}
D = Data()
RECIPES = [
    Recipe("base", "reference", "lr 1e-3 (round 1's best), 256 replies by vLLM, 1024-token packs, 3 TTT steps, "
           "AdamW; the budget filled with steps", score_k=(3, 5)),
    # the field's own defaults and the levers round 1 did not try
    Recipe("muon", "optimizer", "speculators' trainer default: Muon on the 2D weights (muon_lr = lr, "
           "match_rms_adamw) + AdamW on the rest", train=(("optimizer", "muon"),)),
    Recipe("muon-equal-steps", "optimizer", "Muon as above at base's steps (equal steps, not equal minutes: torch's "
           "Muon orthogonalizes in bf16, which a CPU without native bf16 emulates)", train=(("optimizer", "muon"),),
           steps_like="base"),
    Recipe("fc-norm", "norms", "Eagle 3.1's fc_norm (a norm per aux layer before fc; it replaces norm_before_fc, "
           "which speculators refuses beside it)", draft=(("fc_norm", True), ("norm_before_fc", False))),
    Recipe("no-norm-output", "norms", "norm_output off (speculators' eagle3 default is on)",
           draft=(("norm_output", False),)),
    Recipe("no-norm-before-fc", "norms", "norm_before_fc off (speculators' eagle3 default is on)",
           draft=(("norm_before_fc", False),)),
    Recipe("loss-rkl", "loss", "reverse KL (speculators' `rkl`)", train=(("loss_fn", "rkl"),)),
    Recipe("loss-jsd", "loss", "Jensen-Shannon (speculators' `jsd`)", train=(("loss_fn", "jsd"),)),
    Recipe("loss-tv", "loss", "total variation, 1 - acceptance (speculators' `tv`)", train=(("loss_fn", "tv"),)),
    Recipe("loss-ce", "loss", "cross-entropy on the verifier's top token (speculators' `ce`)",
           train=(("loss_fn", "ce"),)),
    Recipe("loss-lk", "loss", "speculators' `lk_hybrid` (KL blended into acceptance-rate TV)",
           train=(("loss_fn", "lk_hybrid"),)),
    Recipe("loss-mix", "loss", "0.9 KL + 0.1 CE (a speculators weighted mix)",
           train=(("loss_fn", '{"kl_div": 0.9, "ce": 0.1}'),)),
    Recipe("ttt-curriculum-0.5", "TTT", "1 TTT step for the first half of the steps, then 3",
           train=(("ttt_curriculum", 0.5),), score_k=(3, 5)),
    Recipe("ttt-curriculum-0.8", "TTT", "1 TTT step for the first 80 % of the steps, then 3",
           train=(("ttt_curriculum", 0.8),), score_k=(3, 5)),
    Recipe("no-ttt", "TTT", "1 TTT step throughout (served at k 3)", ttt_steps=1, score_k=(3, 5)),
    # round 1's rows left unrun, and its confounded ones made fair
    Recipe("less-data", "data vs epochs", "half the verifier's replies (128), more epochs", Data(n_conversations=128)),
    Recipe("more-data", "data vs epochs", "2x the verifier's replies (512), fewer epochs", Data(n_conversations=512)),
    Recipe("more-data-3x", "data vs epochs", "3x the verifier's replies (768), fewer epochs still",
           Data(n_conversations=768)),
    Recipe("vocab-1024", "draft vocab", "draft vocab 1024 (the same data minutes: only the mapping differs)",
           Data(draft_vocab_size=1024)),
    Recipe("vocab-8192", "draft vocab", "draft vocab 8192 (the same data minutes: only the mapping differs)",
           Data(draft_vocab_size=8192)),
    Recipe("pack-512", "packing length", "512 tokens a step", train=(("total_seq_len", 512),)),
    Recipe("pack-2048", "packing length", "2048 tokens a step", train=(("total_seq_len", 2048),)),
    Recipe("all-tokens", "supervision", "every token's next-token distribution a target (prompt tokens too)",
           Data(supervise="all")),
    Recipe("last-layer", "EAGLE-3 ablation: fused features", "one aux layer (the last decoder layer's input); the "
           "same verifier forward, so the same data minutes and steps as base", Data(aux_layer_ids=(29,))),
    Recipe("decay-0.8", "ttt_step_loss_decay", "ttt_step_loss_decay 0.8 (EAGLE-3's weighting)",
           train=(("ttt_step_loss_decay", 0.8),)),
    Recipe("random-init", "warm start", "speculators' random init (no warm start)",
           train=(("warm_start_layer", None),)),
    # the step this round made faster, undone: what the block-sparse step buys, as τ at equal minutes
    Recipe("dense-step", "training step", "speculators' own dense sdpa forward (TrainSettings.attention "
           "'speculators'), as every CPU step was before the block-sparse one", train=(("attention", "speculators"),)),
]
ALWAYS_CHECKED = {"base"}  # run at the second budget whatever its Δ (the reference)
NOT_CHECKS = {"dense-step"}  # not a lever to adopt: the step this round replaced, measured at the first budget


@dataclass
class Scored:
    name: str
    minutes: dict
    steps: int
    sec_per_step: float
    tables: dict = field(default_factory=dict)  # set -> records (dicts)


class LabRunner:
    def __init__(self, work: Path, budget: float, verifier: str = "smollm2"):
        self.work, self.budget = work, budget
        self.work.mkdir(parents=True, exist_ok=True)
        self.v = resolve(verifier)
        self.tok = load_tokenizer(self.v)
        self.model = load_model(self.v)
        self.eval = self._eval_set()
        self.states: ev.VerifierStates = {}  # the verifier's hidden states of the scored sequences, computed once

    # -------------------------------------------------------------------------------------------- evaluation
    def _eval_set(self) -> dict:
        """The prompts and the verifier's greedy continuations every recipe is scored on (made once, cached)."""
        path = self.work / "eval.json"
        if path.exists():
            return json.loads(path.read_text())
        trained = {tuple(ids) for _, ids in distinct_prompts(self.tok, None, 0, TRAIN_PROMPTS_MAX, 128)}
        fresh = [turns for turns, ids in distinct_prompts(self.tok, None, 1, TRAIN_PROMPTS_MAX + EVAL_HELD_OUT, 128)
                 if tuple(ids) not in trained][:EVAL_HELD_OUT]
        sets = {"mt-bench": benchmarks.load_set("mt-bench"),
                "held-out": [benchmarks.cut_user_turn(self.tok, p, 128) for p in benchmarks.held_out_set(fresh)]}
        out = {}
        for name, prompts in sets.items():
            ids = benchmarks.render(self.tok, prompts)
            conts = ev.continuations(self.model, [torch.tensor([i]) for i in ids], EVAL_NEW_TOKENS,
                                     self.tok.eos_token_id, progress=False)
            out[name] = {"prompts": [dataclasses.asdict(p) for p in prompts], "ids": ids, "conts": conts}
        path.write_text(json.dumps(out))
        return out

    def score(self, draft, ks: tuple[int, ...] = (3,)) -> dict:
        """Per set (and per k after the first, as ``SET k5``): every prompt's simulated record."""
        tables = {}
        for k in ks:
            for name, s in self.eval.items():
                prompts = [benchmarks.BenchPrompt(p["id"], p["category"], tuple(p["messages"])) for p in s["prompts"]]
                parts = ev.simulate_each(self.model, draft, [torch.tensor([i]) for i in s["ids"]], s["conts"], k,
                                         progress=False, states=self.states)
                key = name if k == ks[0] else f"{name} k{k}"
                tables[key] = [dataclasses.asdict(r) for r in scores.from_simulation(prompts, parts)]
        return tables

    # -------------------------------------------------------------------------------------------- data
    def data(self, d: Data) -> tuple[Path, float]:
        """The data directory of ``d`` and the seconds its work costs (measured once per :meth:`Data.work_key`, then
        read back: recipes that differ only in the aux layers or the vocab mapping pay the same minutes)."""
        out = self.work / f"data-{d.key()}"
        made = out / "lab_cost.json"
        if not made.exists():
            if d.supervise == "all":
                base, _ = self.data(dataclasses.replace(d, supervise="replies"))
                supervise_all(base, out)
                phases = {"as": "the same data, its loss mask set to 1 (no cost of its own)"}
            else:
                phases = self._build(d, out)
            made.write_text(json.dumps({"phases": phases, "data": dataclasses.asdict(d)}))
        work = self.work / f"work-{d.work_key()}.json"
        if not work.exists():
            phases = json.loads(made.read_text())["phases"]
            seconds = sum(p["seconds"] for p in phases.values() if isinstance(p, dict))
            work.write_text(json.dumps({"seconds": seconds, "measured_for": d.key()}))
        return out, json.loads(work.read_text())["seconds"]

    def _regen(self, d: Data, n: int) -> tuple[Path, dict]:
        """The verifier's replies to ``n`` training prompts (+ the held-out ones), and what writing them cost (measured
        when they were written, kept beside them)."""
        path = self.work / f"regen-{d.replies if d.replies != 'mix' else 'vllm'}-{n}-{d.reply_tokens}.jsonl"
        sidecar = path.with_suffix(".cost.json")
        if path.exists() and sidecar.exists():
            return path, json.loads(sidecar.read_text())
        for stale in self.work.glob(path.name + "*"):
            stale.unlink()
        load, t0 = os.getloadavg()[0], time.perf_counter()
        regenerate(self.v, path, n_conversations=n + HELD_OUT + SPARE_PROMPTS, max_new_tokens=d.reply_tokens,
                   max_prompt_tokens=d.prompt_tokens, progress=False,
                   engine="transformers" if d.replies == "transformers" else "vllm")
        cost = {"seconds": time.perf_counter() - t0, "load": [round(load, 2), round(os.getloadavg()[0], 2)]}
        sidecar.write_text(json.dumps(cost))
        return path, cost

    def _build(self, d: Data, out: Path) -> dict:
        """Build ``d``'s data directory; the seconds of each phase and the load average around it."""
        shutil.rmtree(out, ignore_errors=True)
        phases: dict = {}
        source = None
        if d.replies in ("vllm", "transformers", "mix"):
            n_regen = d.n_conversations // 2 if d.replies == "mix" else d.n_conversations
            regen, phases["regenerate"] = self._regen(d, n_regen)
            source = str(regen)
            if d.replies == "mix":
                source = mix_source(regen, d.n_conversations - n_regen, self.work / f"mix-{d.key()}.jsonl")
        load, t0 = os.getloadavg()[0], time.perf_counter()
        build_dataset(self.v, out, n_conversations=d.n_conversations, seq_length=d.seq_length,
                      draft_vocab_size=d.draft_vocab_size, held_out=HELD_OUT, dtype="native", batch_size=4,
                      source=source, aux_layer_ids=list(d.aux_layer_ids) if d.aux_layer_ids else None,
                      progress=False)
        phases["hidden_states"] = {"seconds": time.perf_counter() - t0,
                                   "load": [round(load, 2), round(os.getloadavg()[0], 2)]}
        return phases

    # -------------------------------------------------------------------------------------------- a recipe
    def session(self, r: Recipe, data_dir: Path, steps: int) -> TrainSession:
        spec = DraftSpec(verifier=self.v.path, draft_vocab_size=r.data.draft_vocab_size, device="cpu",
                         ttt_steps=r.ttt_steps, aux_layer_ids=list(r.data.aux_layer_ids) if r.data.aux_layer_ids
                         else None, **dict(r.draft))
        return TrainSession(data_dir, spec, progress=False, max_steps=steps, **r.settings())

    def seconds_per_step(self, r: Recipe, data_dir: Path) -> float:
        """Seconds a training step of this recipe's shape takes: measured once per shape (median of 4 steps after a
        first one) and kept in ``calibration.json``, so that every recipe of one shape gets the same steps for the
        same training minutes, whatever else the machine did while it ran. A TTT curriculum's step is the mean of
        its two shapes, weighted by the share of steps each takes. The norms' few extra parameters are not a shape."""
        s = r.settings()
        curriculum = s.get("ttt_curriculum", 0.0)
        if curriculum:
            plain = dataclasses.replace(r, train=tuple((k, v) for k, v in r.train if k != "ttt_curriculum"))
            one = dataclasses.replace(plain, ttt_steps=1)
            return (curriculum * self.seconds_per_step(one, data_dir)
                    + (1 - curriculum) * self.seconds_per_step(plain, data_dir))
        parts = [r.data.draft_vocab_size, s["total_seq_len"], r.ttt_steps, len(r.data.aux_layer_ids or (0, 0, 0)),
                 s.get("loss_fn", "kl_div"), s.get("optimizer", "adamw")]
        shape = json.dumps(parts + ([s["attention"]] if s.get("attention", "auto") != "auto" else []))
        path = self.work / "calibration.json"
        table = json.loads(path.read_text()) if path.exists() else {}
        if shape not in table:
            probe = self.session(r, data_dir, 100)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                probe.step()
                times.append(time.perf_counter() - t0)
            table[shape] = {"seconds": statistics.median(times[1:]), "load": round(os.getloadavg()[0], 2)}
            path.write_text(json.dumps(table, indent=1))
        return table[shape]["seconds"]

    def run(self, r: Recipe, budget: float | None = None) -> dict:
        budget = budget or r.budget or self.budget
        tag = f"{r.name}@{budget:g}" if r.steps is None else r.name
        cached = self.work / f"result-{tag}.json"
        if cached.exists():
            return json.loads(cached.read_text())
        torch.manual_seed(0)
        data_dir, data_s = self.data(r.data)
        per_step = self.seconds_per_step(r, data_dir)
        steps = r.steps or (self.run(next(x for x in RECIPES if x.name == r.steps_like), budget)["steps"]
                            if r.steps_like else int((budget * 60 - data_s) / per_step))
        if steps < 1:
            raise RuntimeError(f"{r.name}: the data took {data_s / 60:.1f} of {budget} minutes; nothing left to train")
        session = self.session(r, data_dir, steps)
        t0 = time.perf_counter()
        session.run(steps)
        train_s = time.perf_counter() - t0
        session.model.eval()
        result = {"name": r.name, "lever": r.lever, "what": r.what, "budget": None if r.steps else budget,
                  "steps_like": r.steps_like,
                  "data": dataclasses.asdict(r.data), "train": {**r.settings(), "ttt_steps": r.ttt_steps},
                  "draft": dict(r.draft), "attention": session.attention,
                  "steps": steps, "sec_per_step": round(per_step, 3),
                  "epochs": round(steps * session.settings.total_seq_len / max(1, self.tokens(data_dir)), 2),
                  "minutes": {"data": round(data_s / 60, 2), "train": round(train_s / 60, 2),
                              "train_planned": round(steps * per_step / 60, 2)},
                  "load": round(os.getloadavg()[0], 2), "records": self.score(session.model, r.score_k)}
        cached.write_text(json.dumps(result))
        return result

    @staticmethod
    def tokens(data_dir: Path) -> int:
        from eagle3kit.data.directory import DataDir

        return DataDir(data_dir).manifest.counts["tokens"]


def supervise_all(base: Path, out: Path) -> None:
    """``base``'s data with every loss-mask entry 1 (hidden states hard-linked, not copied)."""
    from datasets import load_from_disk

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out, copy_function=os.link, ignore=shutil.ignore_patterns("data-*.arrow", "state.json",
                                                                                      "dataset_info.json",
                                                                                      "lab_cost.json"))
    ds = load_from_disk(str(base)).with_format(None)
    ds = ds.map(lambda row: {"loss_mask": [1] * len(row["loss_mask"])}).with_format("torch")  # as build_dataset saves
    tmp = out / ".arrow"
    ds.save_to_disk(str(tmp))
    for p in tmp.iterdir():
        os.replace(p, out / p.name)
    tmp.rmdir()


def mix_source(regenerated: Path, n_sharegpt: int, out: Path) -> str:
    """The regenerated conversations followed by ``n_sharegpt`` ShareGPT conversations with their own replies that
    were not among the regenerated prompts, as one JSONL (the data's held-out ones come first, from the former)."""
    regen = conv.read_jsonl(regenerated)
    asked = {r[0]["content"] for r in regen}
    # half as many again: a ShareGPT conversation whose first reply lies beyond seq_length is dropped by the build
    own = [t for t in conv.ordered(conv.read(None), 0) if t[0]["content"] not in asked][:n_sharegpt * 3 // 2]
    conv.write_jsonl(out, regen + own)
    return str(out)


RAW = Path(__file__).parent / "results" / "recipe.json"  # every prompt's record, each round's


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=5.0, help="minutes of data + training per recipe")
    ap.add_argument("--only", default="", help="recipe names, comma-separated (default: all)")
    ap.add_argument("--skip", default="", help="recipe names left out, comma-separated, each with why after a colon "
                    "(NAME:WHY,NAME:WHY): recorded in the results' context and the report")
    ap.add_argument("--check", type=float, default=10.0, help="the second budget the strongest levers run at")
    ap.add_argument("--check-top", type=int, default=3, help="how many levers (by held-out Δ) --check reruns")
    ap.add_argument("--frontier", default="", help="budgets (minutes) to run --best at, comma-separated")
    ap.add_argument("--best", default="", help="the recipe (a name, or NAME+NAME to combine) for --frontier")
    ap.add_argument("--scale-data", action="store_true", help="--frontier: the conversations grow with the budget "
                    "(n x budget / --budget), so data and training keep their shares; otherwise only the steps grow")
    ap.add_argument("--work", default=str(Path.home() / ".cache" / "eagle3kit" / "recipe-lab"))
    ap.add_argument("--demo", default="", help="the recipe the demo preset adopts (a name, NAME+NAME, or NAME@MINUTES: "
                    "a --scale-data frontier point), recorded in the results' context in the presets' words "
                    "(tests/test_recipes.py holds the preset to it); --full: the same for the full preset")
    ap.add_argument("--full", default="", help="as --demo, for the full preset; with --keep-rows both are recorded "
                    "under frontier_presets, for the kind of CPU the frontier ran on")
    ap.add_argument("--prepare", action="store_true", help="only make every recipe's data and time a step of every "
                    "shape (the phases whose minutes the budget counts: run it on a quiet machine), then stop")
    ap.add_argument("--beside", default="", help="recipes (NAME+NAME, comma-separated) run at the --beside-at budgets "
                    "(their data scaled as --scale-data scales the frontier's), each Δ paired against the frontier "
                    "point of its budget: levers on top of the best recipe; NAME@4/5 runs that one at 4 and 5 "
                    "minutes instead")
    ap.add_argument("--beside-at", default="10", help="budgets (minutes) for --beside, comma-separated")
    ap.add_argument("--keep-rows", action="store_true", help="run only --frontier (on this machine, recorded as "
                    "frontier_machine); the rows and checks already in recipe.json stay as they were measured")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    runner = LabRunner(Path(args.work), args.budget)
    if args.prepare:
        for r in RECIPES:
            if not args.only or r.name in args.only.split(","):
                data_dir, seconds = runner.data(r.data)
                print(f"{r.name}: data {seconds / 60:.2f} min, a step {runner.seconds_per_step(r, data_dir):.3f} s",
                      flush=True)
        return 0
    raw = json.loads(RAW.read_text()) if RAW.exists() else {}
    if args.keep_rows:  # the frontier alone (on this machine): the rows, checks and their context stay as measured
        rows, checks, context = raw.get("rows", []), raw.get("checks", []), dict(raw.get("context", {}))
    else:
        rows, checks, context = lab_rows(runner, args)
    frontier = []
    if args.frontier:
        best = combine(args.best or "base")
        frontier = [runner.run(scaled(best, float(b) / args.budget) if args.scale_data else best, float(b))
                    for b in args.frontier.split(",")]
        context["frontier_machine"] = machine()
    elif args.keep_rows:
        frontier = raw.get("frontier", [])
    beside = raw.get("beside", []) if args.keep_rows else []
    if args.beside:
        at = [(name, b) for entry in args.beside.split(",") for name, budgets in [(entry.split("@") + [""])[:2]]
              for b in (budgets.split("/") if budgets else args.beside_at.split(","))]
        beside = [runner.run(scaled(combine(name), float(b) / args.budget) if args.scale_data else combine(name),
                             float(b)) for name, b in at]
    for key, chosen in (("demo", args.demo), ("full", args.full)):
        if chosen and args.keep_rows:  # a preset chosen from this frontier, for the kind of CPU it ran on
            context.setdefault("frontier_presets", {})[key] = demo_view(chosen, args.budget, frontier + beside,
                                                                        args.scale_data)
        elif chosen:
            context[key] = demo_view(chosen, args.budget, rows + checks + frontier, args.scale_data)
    round1 = raw.get("round1") or {k: raw[k] for k in ("context", "rows", "frontier") if k in raw}
    RAW.write_text(json.dumps({"round1": round1, "context": context, "rows": rows, "checks": checks,
                               "frontier": frontier, "beside": beside}) + "\n")
    lab = recipes.Lab(recipes.with_deltas([recipes.LabRow.from_result(r) for r in rows]),
                      recipes.with_deltas([recipes.LabRow.from_result(r) for r in checks]),
                      [recipes.LabRow.from_result(r) for r in frontier],
                      [recipes.LabRow.from_result(r) for r in round1.get("frontier", [])],
                      {k: v for k, v in context.items() if k != "regeneration"})
    lab.beside = beside_rows(beside, lab.frontier)
    recipes.write_summary(lab)
    RAW.with_suffix(".md").write_text(report(lab, context, round1))
    print(f"written to {RAW}, {RAW.with_suffix('.md')} and {recipes.SUMMARY}")
    return 0


def lab_rows(runner: LabRunner, args: argparse.Namespace) -> tuple[list[dict], list[dict], dict]:
    """Every chosen recipe at ``--budget``, the strongest levers (and the reference) again at ``--check``, and the
    context they were measured in."""
    skipped = dict(part.split(":", 1) if ":" in part else (part, "") for part in args.skip.split(",") if part)
    chosen = [r for r in RECIPES if (not args.only or r.name in args.only.split(",")) and r.name not in skipped]
    rows = [x for r in chosen if (x := attempt(runner, r))]
    for row in rows:
        print(recipes.LabRow.from_result(row).name, row["steps"], "steps", flush=True)
    checks = []
    if args.check and rows:
        scored = recipes.with_deltas([recipes.LabRow.from_result(r) for r in rows])
        levers = [r for r in scored if r.name not in ALWAYS_CHECKED | NOT_CHECKS and "held-out" in r.delta]
        top = sorted(levers, key=lambda r: r.delta["held-out"].mean, reverse=True)[:args.check_top]
        checks = [x for r in chosen if r.name in ALWAYS_CHECKED | {t.name for t in top}
                  if (x := attempt(runner, r, args.check))]
    context = {"round": 2, "budget": args.budget, "check": args.check, "machine": machine(),
               "regeneration": regeneration_summary(), "not_run": skipped,
               "failed": {r.name: failures[r.name] for r in chosen if r.name in failures}}
    return rows, checks, context


failures: dict[str, str] = {}  # recipe name -> why it failed (recorded in the results' context)


def attempt(runner: LabRunner, r: Recipe, budget: float | None = None) -> dict | None:
    """One recipe's result, or None (its failure printed and kept in ``failures``) so that the others run."""
    t0 = time.perf_counter()
    try:
        out = runner.run(r, budget)
        print(f"{r.name}@{budget or runner.budget:g}: {time.perf_counter() - t0:.0f} s", flush=True)
        return out
    except Exception as exc:
        failures[r.name] = f"{type(exc).__name__}: {exc}"
        print(f"{r.name}: failed: {failures[r.name]}", flush=True)
        return None


def beside_rows(beside: list[dict], frontier: list[recipes.LabRow]) -> list[recipes.LabRow]:
    """The --beside rows, each with its Δ paired against the frontier point of its budget."""
    at = {r.budget: r for r in frontier}
    return [recipes.LabRow.from_result(r).with_delta(at.get(r["budget"])) for r in beside]


def report(lab: recipes.Lab, context: dict, round1: dict) -> str:
    """bench/results/recipe.md: the round-2 rows, the checks at the second budget, the frontier beside round 1's."""
    shown = {k: v for k, v in context.items() if k not in ("regeneration", "not_run", "failed")}
    md = ["# The recipe lab (`bench/recipe.py`), round 2", "",
          f"Context: {json.dumps(shown)}. τ: mean over prompts with a 95 % bootstrap interval (greedy, 64 new "
          f"tokens, the bonus token counted; k = 3, and k = 5 in the `k5` columns); Δ: paired over the same prompts "
          f"against `{recipes.REFERENCE}` at the same budget. Every row trains on the block-sparse step.", "",
          markdown_table(recipes.table(lab.rows))]
    for key, title in (("not_run", "Not run here"), ("failed", "Failed")):
        if context.get(key):
            md += ["", f"{title}: " + "; ".join(f"`{n}` ({why})" if why else f"`{n}`"
                                              for n, why in context[key].items()) + "."]
    if lab.checks:
        md += ["", f"## The strongest levers again at {context['check']:g} CPU minutes", "",
               markdown_table(recipes.table(lab.checks)), "",
               "Held at both budgets (held-out Δ interval above 0 at each): "
               + (", ".join(r.name for r, _ in lab.held()) or "none") + "."]
    regen = context.get("regeneration")
    if regen:
        md += ["", "## Who writes the replies (`bench/regeneration_engines.py`)", "",
               f"{regen['prompts']} prompts of the demo's regeneration; this CPU's matmul peak: "
               f"{regen['peak_gflops']} GFLOP/s.", "", markdown_table(pd.DataFrame(regen["rows"]))]
    if lab.frontier:
        on = lab.frontier_machine
        md += ["", "## The best recipe against minutes", "",
               f"On {on.get('cpus')} CPUs {'with' if on.get('native_bf16') else 'without'} native bf16 "
               f"(torch {on.get('torch')}).", "", markdown_table(recipes.table(lab.frontier))]
        if lab.beside:
            md += ["", "Levers on top of it, at the same budget (Δ paired against the frontier point of that budget):",
                   "", markdown_table(recipes.table(lab.beside))]
    if round1:
        old = [recipes.LabRow.from_result(r) for r in round1.get("frontier", [])]
        md += ["", "## Round 1 (another host: AVX512-BF16, the dense step; `round1` in recipe.json)", "",
               f"Context: {json.dumps({k: v for k, v in round1.get('context', {}).items() if k != 'regeneration'})}",
               "", markdown_table(recipes.table(recipes.with_deltas(
                   [recipes.LabRow.from_result(r) for r in round1.get("rows", [])], "demo-before"))),
               "", "Its frontier:", "", markdown_table(recipes.table(old))]
    return "\n".join(md) + "\n"


def combine(names: str) -> Recipe:
    """One recipe from several levers (``a+b``): data fields and training settings of each, later ones winning."""
    parts = [next(r for r in RECIPES if r.name == n) for n in names.split("+")]
    data: dict = {}
    train: dict = {}
    ttt = 3
    for p in parts:
        data |= {k: v for k, v in dataclasses.asdict(p.data).items() if v != getattr(D, k)}
        train |= dict(p.train)
        ttt = p.ttt_steps if p.ttt_steps != 3 else ttt
    data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return Recipe(names, "best", " + ".join(p.what for p in parts), Data(**data), tuple(train.items()), ttt)


def scaled(r: Recipe, factor: float) -> Recipe:
    """``r`` with ``factor`` times its conversations (named after it, so each size is cached apart)."""
    if factor == 1:
        return r
    n = round(r.data.n_conversations * factor)
    return dataclasses.replace(r, name=f"{r.name}*{n}", what=f"{r.what}; {n} conversations",
                               data=dataclasses.replace(r.data, n_conversations=n))


def demo_view(demo: str, budget: float, results: list[dict], scale_data: bool = False) -> dict:
    """The demo's recipe (``NAME`` or ``NAME@MINUTES``: a check or frontier point, its data scaled with the budget when
    the frontier was run with --scale-data) in the presets' words, with the steps the lab trained it (``max_steps``)
    when it ran."""
    name, _, at = demo.partition("@")
    r = combine(name)
    if at and scale_data:
        r = scaled(r, float(at) / budget)
    view = preset_view(r)
    ran = [x for x in results if x["name"] == r.name and (not at or x["budget"] == float(at))]
    if ran:
        view["train"]["max_steps"] = ran[0]["steps"]
        view["minutes"] = ran[0]["budget"]
    return view


def preset_view(r: Recipe) -> dict:
    """The recipe in the words of the demo preset (eagle3kit.presets: notebook 04's data, notebook 05's training)."""
    d = r.data
    data = {"n_conversations": d.n_conversations, "seq_length": d.seq_length, "draft_vocab_size": d.draft_vocab_size,
            "regenerate_tokens": d.reply_tokens if d.replies != "sharegpt" else 0,
            "regenerate_prompt_tokens": d.prompt_tokens}
    train = {k: v for k, v in r.settings().items() if k != "hidden_states_dtype"}
    if r.ttt_steps != 3:
        train["ttt_steps"] = r.ttt_steps
    return {"recipe": r.name, "data": data, "train": train}


def regeneration_summary() -> dict | None:
    """What bench/regeneration_engines.py measured (tokens/s per engine, the share of the matmul peak), if it ran."""
    path = Path(__file__).parent / "results" / "regeneration.json"
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    return {"prompts": raw["prompts"], "peak_gflops": raw["matmul_peak_gflops"],
            "rows": [{k: v for k, v in r.items() if k in ("engine", "tokens_per_s", "ratio_to_transformers_fp32",
                                                          "start_seconds") or k.startswith("share_of")}
                     for r in raw["rows"]]}


def machine() -> dict:
    from eagle3kit.device import native_bf16

    return {"cpus": os.cpu_count(), "native_bf16": native_bf16(), "torch": torch.__version__}


if __name__ == "__main__":
    raise SystemExit(main())
