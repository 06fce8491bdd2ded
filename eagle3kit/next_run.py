"""What the next run should be, from the recipe lab and this run's own counts: what more minutes buy (the lab's
frontier as a table, the break-even it reaches, whether its minutes are this CPU's), the options that rerun a lab row
in the notebooks, and what this run's diagnosis asks to change. Notebook 06's conclusion (:mod:`eagle3kit.course`)
prints them."""

from __future__ import annotations

import re

from eagle3kit import presets
from eagle3kit.evaluate import vocab_cap
from eagle3kit.evaluate.recipes import BEFORE_HOST, Lab, LabRow

FIRST_STEPS_KEY, RUN_STEPS_KEY, TRAIN_STEPS_KEY = "first_steps", "run_steps", "train_steps"

MEMORISED_GAP = 0.1  # first-guess accuracy on the training split above the validation split's by this much: memorised


def recipe_of(row: LabRow, lab: Lab) -> dict[str, object]:
    """The data and training settings of the preset the lab made from ``row`` (its ``context``), empty if none."""
    name = row.name.split("*")[0]  # a frontier point with its data scaled is named NAME*CONVERSATIONS
    for made in lab.context.values():
        if isinstance(made, dict) and made.get("recipe") == name:
            return {**made.get("data", {}), **made.get("train", {})}
    return {}


def conversations(row: LabRow, lab: Lab) -> int | None:
    """The conversations a lab row trained on: as the lab recorded them, else stated in its description, else its
    preset's, else the demo's (a summary written before the lab recorded them)."""
    if row.conversations:
        return row.conversations
    found = re.search(r"(\d+) conversations", row.what)
    if found:
        return int(found.group(1))
    return recipe_of(row, lab).get("n_conversations") or lab.context.get("demo", {}).get("data", {}).get(
        "n_conversations")


def frontier_table(lab: Lab, minutes: float | None = None, tau: float | None = None, on: str = "held-out",
                   conversations_here: int | None = None, steps: int | None = None,
                   bench_tau: float | None = None) -> str:
    """The lab's best recipe at each budget as a Markdown table (what more minutes buy), and this run's row: ``tau``,
    its headline τ (its own held-out prompts, another set than the lab's), and ``bench_tau``, its MT-bench τ (the
    lab's same 80 prompts, the column to compare)."""
    head = ["CPU minutes (data + training)", "conversations", "training steps", f"τ {on} [95 %]",
            "τ mt-bench [95 %]", "to run it"]
    rows = []
    for r in points(lab):
        rows.append([point_label(r, lab), str(conversations(r, lab) or "?"), str(r.steps),
                     *(str(r.tau[s]) if s in r.tau else "" for s in (on, "mt-bench")), run_it(r, lab)])
    if minutes is not None and tau is not None:
        rows.append([f"{minutes:.1f} (this run, this CPU)", str(conversations_here or ""), str(steps or ""),
                     f"{tau:.3f} (the headline τ, on its own held-out prompts: another set)",
                     f"{bench_tau:.3f} (compare this column)" if bench_tau is not None else "", ""])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def points(lab: Lab) -> list[LabRow]:
    """The frontier's points and the levers measured on top of them (``beside``), by minutes, the frontier's first."""
    return sorted([*lab.frontier, *lab.beside], key=lambda r: (r.minutes, r in lab.beside))


def point_label(row: LabRow, lab: Lab) -> str:
    """A point's minutes, and for a lever on top of the frontier its name (``15.0 + more-data``)."""
    lever = row.name.split("*")[0].split("+")[-1] if row in lab.beside else ""
    return f"{row.minutes:.1f}" + (f" + `{lever}`" if lever else "")


def prompt_sets(lab: Lab, held_out_here: int | None, on: str = "held-out") -> str:
    """That the lab's held-out prompts and this run's are different sets, each with its count (MT-bench's are one)."""
    theirs = max((r.prompts.get(on, 0) for r in lab.frontier), default=0)
    return (f"The lab's {on} τ is simulated on its own {theirs or 'held-out'} prompts, this run's on its "
            f"{held_out_here or '?'} (a different set: compare the MT-bench column, the same 80 turns in both).")


def minutes_caveat(lab: Lab) -> str:
    """Whether the lab's frontier minutes and this CPU's are one clock: the lab says if the frontier's CPU had native
    bf16 (without it a step costs about twice as long, docs/demo.md); empty where the lab does not say."""
    from eagle3kit.device import native_bf16

    theirs = lab.frontier_machine.get("native_bf16")
    if theirs is None:
        return ""
    mine = native_bf16()
    kind = {True: "with native bf16", False: "without native bf16 (AVX2 only)"}
    if theirs == mine:
        return f"The lab's frontier minutes and this run's are both a 2-core CPU's {kind[mine]}."
    return (f"The lab measured its frontier's minutes on a 2-core CPU {kind[theirs]}; this CPU is one {kind[mine]}, so "
            f"compare this run with the lab by its conversations and steps, not its minutes.")


def row_options(row: LabRow, lab: Lab) -> dict[str, object]:
    """The notebook parameters that make the demo run a lab row's recipe: its conversations and its steps, split
    between notebook 05 (``first_steps`` + ``run_steps``) and notebook 06 (``train_steps``) as the demo splits them;
    its packs only where they differ from the demo's."""
    first = int(presets.parameters("demo", "05").get(FIRST_STEPS_KEY, 1))
    in_05 = row.steps // 2
    packs = recipe_of(row, lab).get("total_seq_len") or _default_packs()
    options = {"n_conversations": conversations(row, lab), "max_steps": row.steps,
               RUN_STEPS_KEY: max(1, in_05 - first), TRAIN_STEPS_KEY: row.steps - in_05,
               "total_seq_len": packs if packs != presets.parameters("demo", "05").get("total_seq_len",
                                                                                     _default_packs()) else None}
    return {k: v for k, v in options.items() if v is not None}


def set_options(row: LabRow, lab: Lab) -> str:
    """:func:`row_options` as ``--set`` options."""
    return " ".join(f"--set {k}={v}" for k, v in row_options(row, lab).items())


def _default_packs() -> int:
    """The typed default of ``total_seq_len`` (what the demo runs when its preset does not set it)."""
    return int(presets.typed_defaults()["total_seq_len"])


def reaches(lab: Lab, tau: float | None, on: str = "held-out") -> str:
    """How many of the lab's CPU minutes the best recipe needed to reach ``tau`` (the break-even), or that it did not
    within the frontier's longest budget."""
    if tau is None or not lab.frontier:
        return ""
    rows = sorted((r for r in lab.frontier if on in r.tau), key=lambda r: r.minutes)
    hit = first_reaching(lab, tau, on)
    if hit:
        sure = "" if hit.tau[on].low >= tau else ", not yet a sure one: its interval reaches below"
        other = next((s for s in hit.tau if s != on), None)
        beside = (f"; on {other} {hit.tau[other]}, {'above' if hit.tau[other].mean >= tau else 'below'} it"
                  if other else "")
        return (f"By its mean τ the lab first reached {tau:.2f}, the planned GPU run's break-even, at "
                f"{hit.minutes:.1f} CPU minutes ({point_label(hit, lab)}: {hit.tau[on]} on its own {on} prompts"
                f"{sure}{beside}); on this verifier, not a forecast for that run: {run_it(hit, lab)}.")
    before = sorted((r for r in lab.frontier_before if on in r.tau), key=lambda r: r.minutes)
    old = next((r for r in before if r.tau[on].mean >= tau), None)
    then = (f" The lab's first round, drawn faint in the figure, did reach it at {old.minutes:.0f} minutes "
            f"(τ {old.tau[on].mean:.2f}), on {BEFORE_HOST}, so the two are not one curve." if old else "")
    return (f"Within the lab's {rows[-1].minutes:.0f} CPU minutes the best recipe did not reach τ {tau:.2f}, where the "
            f"planned GPU run pays (it reached {rows[-1].tau[on].mean:.2f}); longer budgets were not measured with "
            f"the current training step.{then}")


def first_reaching(lab: Lab, tau: float, on: str = "held-out") -> LabRow | None:
    """The point (:func:`points`) of the fewest minutes whose mean τ on ``on`` reaches ``tau`` (of two at those
    minutes, the higher τ), None if none does."""
    rows = sorted((r for r in points(lab) if on in r.tau), key=lambda r: (r.minutes, -r.tau[on].mean))
    return next((r for r in rows if r.tau[on].mean >= tau), None)


def preset_changes(preset: str = "full", base: str = "demo") -> dict[str, dict[str, object]]:
    """What ``preset`` sets otherwise than ``base``, per notebook."""
    out = {}
    for nn in presets.NOTEBOOKS:
        mine, theirs = presets.parameters(preset, nn), presets.parameters(base, nn)
        changed = {k: v for k, v in mine.items() if theirs.get(k) != v}
        if changed:
            out[nn] = changed
    return out


OUTSIDE_VOCAB_CAP = 0.1  # a share of held-out reply tokens outside the draft vocab worth naming as a lever


def levers(s06: dict, s04: dict, lab: Lab) -> list[str]:
    """What this run's own diagnosis asks to change (empty where nothing shows), each as the recipe lab's evidence
    says: where the draft memorised (:data:`MEMORISED_GAP`), more conversations with the minutes to train on them (the
    lab's replies-at-equal-minutes rows say how far replies alone go); where many reply tokens lie outside the draft
    vocab (:data:`OUTSIDE_VOCAB_CAP`), a larger vocab only where a lab row measured one gain, else keep it."""
    out = []
    trained_acc, val_acc, n = s06.get("train_full_acc_0"), s06.get("val_full_acc_0"), s04.get("samples")
    if trained_acc is not None and val_acc is not None and trained_acc - val_acc >= MEMORISED_GAP and n:
        more = sorted((r for r in lab.beside if "+more-data" in r.name and "held-out" in r.delta),
                      key=lambda r: (r.budget, r.conversations or 0))
        said = ", ".join(f"{r.delta['held-out'].mean:+.3f} with {r.conversations} replies at {r.budget:g} min"
                         + ("" if r.delta["held-out"].low > 0 else " (no measured gain: its interval spans 0)")
                         for r in more)
        out.append(f"**More conversations, with the minutes to train on them** (the **Next** line's point): it "
                   f"memorised (first guess {trained_acc:.2f} on its training split, {val_acc:.2f} on validation)."
                   + (f" At equal minutes the recipe lab measured held-out τ {said}, each against its frontier "
                      "(intervals in the appendix)." if more else ""))
    outside, vocab = s06.get("outside_vocab_share"), s04.get("draft_vocab_size")
    if outside and outside >= OUTSIDE_VOCAB_CAP and vocab:
        head = f"{outside:.0%} of held-out reply tokens lie outside the {vocab}-token vocab, a cap on τ"
        to, why = vocab_cap.advice(lab, vocab)
        said = vocab_cap.evidence(lab) or "no lab row has measured another size"
        out.append(f"**`--set draft_vocab_size={to}`**: {head}, yet {said}: {why}." if to else
                   f"**Keep the {vocab}-token vocab**: {head}, but {said}: {why}.")
    return out


def to_change(lab: Lab, s06: dict | None = None, s04: dict | None = None) -> list[str]:
    """The exact parameters to change: what this run's diagnosis asks (:func:`levers`) and what the ``full`` preset
    changes (each frontier point's options are in :func:`frontier_table`'s last column)."""
    full = preset_changes()
    said = "; ".join(f"notebook {nn}: " + ", ".join(f"{k}={v}" for k, v in c.items()) for nn, c in full.items())
    lines = levers(s06 or {}, s04 or {}, lab)
    lines.append("`eagle3kit run-notebooks --preset demo` runs the demo; `--preset full` "
                 + (f"changes {said}." if said else "currently sets the demo's values."))
    return lines


def run_it(row: LabRow, lab: Lab) -> str:
    """How the notebooks run a frontier point: the preset that is its recipe on this CPU, else the demo with the
    point's ``--set`` options."""
    same = next((name for name in ("demo", "full") if _is_preset(row_options(row, lab), name)), None)
    return f"`--preset {same}` (its recipe on this CPU)" if same else f"`--preset demo {set_options(row, lab)}`"


def _is_preset(options: dict[str, object], preset: str) -> bool:
    """Whether ``options`` (on top of the demo) give ``preset``'s values on this CPU."""
    mine = {k: v for nn in presets.NOTEBOOKS for k, v in presets.parameters(preset, nn).items() if k in options}
    return mine == options
