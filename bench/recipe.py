"""The recipe lab: which lever buys τ per CPU minute. Each recipe makes the demo verifier's draft from nothing at an
equal budget of data + training minutes on this machine, and is scored on MT-bench's 80 first turns and on 64
held-out ShareGPT prompts, each with a 95 % interval.

    .venv/bin/python bench/recipe.py [--budget 5] [--only NAME,NAME]
        [--frontier 3,5,8,12 --best NAME+NAME [--scale-data]] [--work DIR] [--out bench/results/recipe.json]

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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.data import conversations as conv  # noqa: E402
from eagle3kit.data.dataset import build_dataset  # noqa: E402
from eagle3kit.data.regenerate import distinct_prompts, regenerate  # noqa: E402
from eagle3kit.draft.config import DraftSpec  # noqa: E402
from eagle3kit.evaluate import acceptance as ev  # noqa: E402
from eagle3kit.evaluate import benchmarks, recipes, scores  # noqa: E402
from eagle3kit.logs import quiet  # noqa: E402
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

    def settings(self) -> dict:
        return {**BASE_TRAIN, **dict(self.train)}


BASE_TRAIN = {"lr": 2e-3, "warm_start_layer": -1, "hidden_states_dtype": "native", "total_seq_len": 1024}
D = Data()
RECIPES = [
    Recipe("demo-before", "reference", "the demo before this round: transformers writes 256 replies, 240 steps",
           Data(replies="transformers"), steps=240),
    Recipe("base", "reference", "the same recipe, replies by vLLM, the budget filled with steps"),
    Recipe("sharegpt", "replies", "ShareGPT's own replies (prefill only): 192 conversations cut to 512 tokens",
           Data(replies="sharegpt", n_conversations=192, seq_length=512)),
    Recipe("mix", "replies", "128 of the verifier's replies + 128 ShareGPT conversations (cut to 512 tokens)",
           Data(replies="mix", n_conversations=256, seq_length=512)),
    Recipe("more-data", "data vs epochs", "2x the verifier's replies (512), fewer epochs",
           Data(n_conversations=512)),
    Recipe("less-data", "data vs epochs", "half the verifier's replies (128), more epochs", Data(n_conversations=128)),
    Recipe("vocab-1024", "draft vocab", "draft vocab 1024", Data(draft_vocab_size=1024)),
    Recipe("vocab-8192", "draft vocab", "draft vocab 8192", Data(draft_vocab_size=8192)),
    Recipe("lr-5e-3", "lr and schedule", "lr 5e-3", train=(("lr", 5e-3),)),
    Recipe("lr-1e-3", "lr and schedule", "lr 1e-3", train=(("lr", 1e-3),)),
    Recipe("cosine", "lr and schedule", "cosine decay", train=(("scheduler_type", "cosine"),)),
    Recipe("decay-0.8", "ttt_step_loss_decay", "ttt_step_loss_decay 0.8 (EAGLE-3's weighting)",
           train=(("ttt_step_loss_decay", 0.8),)),
    Recipe("decay-1.25", "ttt_step_loss_decay", "ttt_step_loss_decay 1.25 (later steps weigh more)",
           train=(("ttt_step_loss_decay", 1.25),)),
    Recipe("random-init", "warm start", "speculators' random init (no warm start)",
           train=(("warm_start_layer", None),)),
    Recipe("pack-512", "packing length", "512 tokens a step", train=(("total_seq_len", 512),)),
    Recipe("pack-2048", "packing length", "2048 tokens a step", train=(("total_seq_len", 2048),)),
    Recipe("last-layer", "EAGLE-3 ablation: fused features", "one aux layer (the last decoder layer's input)",
           Data(aux_layer_ids=(29,))),
    Recipe("last-layer-245", "EAGLE-3 ablation: fused features", "one aux layer, at base's 245 steps (equal training, "
           "not equal minutes)", Data(aux_layer_ids=(29,)), steps=245),
    Recipe("no-ttt", "EAGLE-3 ablation: training-time test", "trained with 1 TTT step (served at k = 3)",
           ttt_steps=1),
    Recipe("no-ttt-lr-1e-3", "combined", "1 TTT step and lr 1e-3 (the two best single levers)", train=(("lr", 1e-3),),
           ttt_steps=1),
    Recipe("loss-ce", "loss", "cross-entropy on the verifier's top token (speculators' `ce`), not KL",
           train=(("loss_fn", "ce"),)),
    Recipe("loss-lk", "loss", "speculators' `lk_hybrid` (KL blended into acceptance-rate TV)",
           train=(("loss_fn", "lk_hybrid"),)),
    Recipe("all-tokens", "supervision", "every token's next-token distribution a target (prompt tokens too)",
           Data(supervise="all")),
]


@dataclass
class Scored:
    name: str
    minutes: dict
    steps: int
    sec_per_step: float
    tables: dict = field(default_factory=dict)  # set -> records (dicts)


class Lab:
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

    def score(self, draft, k: int = 3) -> dict:
        tables = {}
        for name, s in self.eval.items():
            prompts = [benchmarks.BenchPrompt(p["id"], p["category"], tuple(p["messages"])) for p in s["prompts"]]
            parts = ev.simulate_each(self.model, draft, [torch.tensor([i]) for i in s["ids"]], s["conts"], k,
                                     progress=False, states=self.states)
            tables[name] = [dataclasses.asdict(r) for r in scores.from_simulation(prompts, parts)]
        return tables

    # -------------------------------------------------------------------------------------------- data
    def data(self, d: Data) -> tuple[Path, float]:
        """The data directory of ``d`` and the seconds it took to make (measured once, then read back)."""
        out = self.work / f"data-{d.key()}"
        cost = out / "lab_cost.json"
        if cost.exists():
            return out, json.loads(cost.read_text())["seconds"]
        if d.supervise == "all":
            base, seconds = self.data(dataclasses.replace(d, supervise="replies"))
            supervise_all(base, out)
            phases = {"as": "the same data, its loss mask set to 1 (no cost of its own)"}
        else:
            phases = self._build(d, out)
            seconds = sum(p["seconds"] for p in phases.values())
        cost.write_text(json.dumps({"seconds": seconds, "phases": phases, "data": dataclasses.asdict(d)}))
        return out, seconds

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
        regenerate(self.v, path, n_conversations=n + HELD_OUT + 8, max_new_tokens=d.reply_tokens,
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
                         else None)
        return TrainSession(data_dir, spec, progress=False, max_steps=steps, **r.settings())

    def seconds_per_step(self, r: Recipe, data_dir: Path) -> float:
        """Seconds a training step of this recipe's shape takes: measured once per shape (median of 4 steps after a
        first one) and kept in ``calibration.json``, so that every recipe of one shape gets the same steps for the
        same training minutes, whatever else the machine did while it ran."""
        s = r.settings()
        shape = json.dumps([r.data.draft_vocab_size, s["total_seq_len"], r.ttt_steps, len(r.data.aux_layer_ids or
                                                                                          (0, 0, 0)),
                            s.get("loss_fn", "kl_div")])
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
        steps = r.steps or int((budget * 60 - data_s) / per_step)
        if steps < 10:
            raise RuntimeError(f"{r.name}: the data took {data_s / 60:.1f} of {budget} minutes; nothing left to train")
        session = self.session(r, data_dir, steps)
        t0 = time.perf_counter()
        session.run(steps)
        train_s = time.perf_counter() - t0
        session.model.eval()
        result = {"name": r.name, "lever": r.lever, "what": r.what, "budget": None if r.steps else budget,
                  "data": dataclasses.asdict(r.data), "train": {**r.settings(), "ttt_steps": r.ttt_steps},
                  "steps": steps, "sec_per_step": round(per_step, 3),
                  "epochs": round(steps * session.settings.total_seq_len / max(1, self.tokens(data_dir)), 2),
                  "minutes": {"data": round(data_s / 60, 2), "train": round(train_s / 60, 2),
                              "train_planned": round(steps * per_step / 60, 2)},
                  "load": round(os.getloadavg()[0], 2), "records": self.score(session.model)}
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=5.0, help="minutes of data + training per recipe")
    ap.add_argument("--only", default="", help="recipe names, comma-separated (default: all)")
    ap.add_argument("--frontier", default="", help="budgets (minutes) to run --best at, comma-separated")
    ap.add_argument("--best", default="", help="the recipe (a name, or NAME+NAME to combine) for --frontier")
    ap.add_argument("--scale-data", action="store_true", help="--frontier: the conversations grow with the budget "
                    "(n x budget / --budget), so data and training keep their shares; otherwise only the steps grow")
    ap.add_argument("--work", default=str(Path.home() / ".cache" / "eagle3kit" / "recipe-lab"))
    ap.add_argument("--out", default=str(recipes.RESULTS))
    ap.add_argument("--demo", default="", help="the recipe the demo preset adopts (a name, NAME+NAME, or NAME@MINUTES: "
                    "a --scale-data frontier point), recorded in "
                    "the results' context in the presets' words (tests/test_recipes.py holds the preset to it)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    lab = Lab(Path(args.work), args.budget)
    chosen = [r for r in RECIPES if not args.only or r.name in args.only.split(",")]
    rows = []
    for r in chosen:
        try:
            rows.append(lab.run(r))
        except Exception as exc:  # one recipe's failure is reported, the others run
            print(f"{r.name}: failed: {type(exc).__name__}: {exc}", flush=True)
    for row in rows:
        print(recipes.row_line(recipes.LabRow.from_result(row)), flush=True)
    frontier = []
    if args.frontier:
        best = combine(args.best or "base")
        frontier = [lab.run(scaled(best, float(b) / args.budget) if args.scale_data else best, float(b))
                    for b in args.frontier.split(",")]
    extra = {"demo": demo_view(args.demo, args.budget, rows + frontier)} if args.demo else {}
    recipes.write_lab(args.out, rows, frontier, budget=args.budget, machine=machine(), **extra,
                      regeneration=regeneration_summary())
    print(f"written to {args.out} and {Path(args.out).with_suffix('.md')}")
    return 0


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


def demo_view(demo: str, budget: float, results: list[dict]) -> dict:
    """The demo's recipe (``NAME`` or ``NAME@MINUTES``, the latter a --scale-data frontier point) in the presets'
    words, with the steps the lab trained it (``max_steps``) when it ran."""
    name, _, at = demo.partition("@")
    r = combine(name)
    if at:
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
            "rows": [{k: r[k] for k in ("engine", "tokens_per_s", "ratio_to_transformers_fp32", "share_of_bf16_peak",
                                        "start_seconds")} for r in raw["rows"]]}


def machine() -> dict:
    from eagle3kit.device import native_bf16

    return {"cpus": os.cpu_count(), "native_bf16": native_bf16(), "torch": torch.__version__}


if __name__ == "__main__":
    raise SystemExit(main())
