"""The rule for each value a user sets by name: its type and range, in one place for every caller.

:class:`~eagle3kit.draft.config.DraftSpec`, :class:`~eagle3kit.train.session.TrainSettings`,
:func:`~eagle3kit.data.dataset.build_dataset`, the regeneration, launch, mask and evaluation functions check their
values with these rules; the command line checks every parsed option and the notebook runner every ``--set`` and
preset value against the same rules, before any work starts. A name without a rule is checked by type only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle3kit.errors import UserError

FLOAT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")  # what hidden states are stored and trained in

TYPE_NAMES = {int: "an integer", float: "a number", str: "a text", bool: "true or false"}


@dataclass(frozen=True)
class Rule:
    """What a value may be: its type, an inclusive ``minimum`` (or exclusive ``above``), an inclusive ``maximum``,
    a set of ``choices``, whether None is allowed, and ``note`` (what a special value means)."""

    kind: type
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    none: bool = False
    note: str = ""

    def allowed(self) -> str:
        """``an integer >= 1``, ``one of 'llama', 'qwen3'``, ``a number > 0 or none`` ..."""
        if self.choices:
            text = "one of " + ", ".join(map(repr, self.choices))
        else:
            bounds = [f">= {self.minimum:g}" if self.minimum is not None else "",
                      f"> {self.above:g}" if self.above is not None else "",
                      f"<= {self.maximum:g}" if self.maximum is not None else ""]
            text = " and ".join(filter(None, [TYPE_NAMES[self.kind], *filter(None, bounds)]))
            text = text.replace(" and ", " ", 1) if self.minimum is not None or self.above is not None else text
        text += " or none" if self.none else ""
        return text + (f" ({self.note})" if self.note else "")

    def fits(self, value: Any) -> bool:
        """True when ``value`` is allowed (an int counts as a number; a bool counts as neither)."""
        if value is None:
            return self.none
        if isinstance(value, bool) or not isinstance(value, self.kind if self.kind is not float else (int, float)):
            return self.kind is bool and isinstance(value, bool)
        if self.choices:
            return value in self.choices
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return ((self.minimum is None or value >= self.minimum) and (self.above is None or value > self.above)
                and (self.maximum is None or value <= self.maximum))


def _at_least(minimum: int, note: str = "", none: bool = False) -> Rule:
    return Rule(int, minimum=minimum, none=none, note=note)


def _positive(note: str = "", none: bool = False) -> Rule:
    return Rule(float, above=0, none=none, note=note)


# The rules by name. A notebook parameter or a command-line option of this name follows it; ALIASES map other
# names of the same quantity onto one rule.
RULES: dict[str, Rule] = {
    # the draft (DraftSpec)
    "num_layers": _at_least(1, "a draft needs at least one decoder layer"),
    "ttt_steps": _at_least(1, "training-time-test (TTT) steps"),
    "draft_arch": Rule(str, choices=("llama", "qwen3"), note="the EAGLE-3 drafts vLLM serves"),
    "draft_vocab_size": _at_least(1, none=True, note="none: the verifier's whole vocab"),
    "sliding_window": _at_least(0, "0: full attention"),
    # training (TrainSettings)
    "lr": _positive(),
    "muon_lr": _positive(none=True, note="none: lr"),
    "weight_decay": Rule(float, minimum=0),
    "total_seq_len": _at_least(2, "packed tokens per step, a few hundred or more"),
    "epochs": _at_least(1),
    "max_steps": _at_least(0, "0 or none: epochs x batches", none=True),
    "warmup_steps": _at_least(0, "none: 1% of the schedule", none=True),
    "scheduler_type": Rule(str, choices=("linear", "cosine", "none")),
    "ttt_step_loss_decay": Rule(float, minimum=0),
    "ttt_curriculum": Rule(float, minimum=0, maximum=1, note="the fraction of steps trained with 1 TTT step first"),
    "train_data_ratio": Rule(float, above=0, maximum=1),
    "hidden_states_dtype": Rule(str, choices=("auto", "native", *FLOAT_DTYPES)),
    "checkpoint_every": _at_least(1, none=True),
    "steps": _at_least(0),
    "warm_start_layer": Rule(int, none=True, note="-1: the verifier's last layer; none: random init"),
    "n_gpus": _at_least(1),
    "ranks": _at_least(1, "data-parallel ranks (processes) the run is trained as"),
    "rehearse_ranks": _at_least(0, "processes of speculators' trainer under torchrun; 0: skip the rehearsal"),
    # data (build_dataset, regenerate)
    "n_conversations": _at_least(1),
    "seq_length": _at_least(2, "tokens per conversation"),
    "held_out": _at_least(0),
    "batch_size": _at_least(1),
    "dtype": Rule(str, choices=("auto", *FLOAT_DTYPES, "native"), note="auto: bfloat16 on CUDA, float32 on a CPU"),
    "max_new_tokens": _at_least(1),
    "max_prompt_tokens": _at_least(1),
    "reply_tokens": _at_least(1),
    "verify": _at_least(0, "0: skip the check"),
    # evaluation, the probe, the overfit check
    "n_prompts": _at_least(1),
    "n_decode_prompts": _at_least(0, "0: all"),
    "k": _at_least(0, "0: the draft's ttt_steps"),
    "threshold": Rule(float, minimum=0),
    "timeout": _positive("seconds"),
    "repeats": _at_least(1),
    # notebooks only
    "forward_tokens": _at_least(1),
    "n_documents": _at_least(1),
    "regenerate_tokens": _at_least(0, "0: keep the source's replies"),
    "first_steps": _at_least(0),
    "run_steps": _at_least(0),
    "overfit_steps": _at_least(0, "0: skip the check"),
    "train_steps": _at_least(0),
}
ALIASES = {"seq_len": "total_seq_len", "long_seq_len": "total_seq_len", "check_seq_len": "total_seq_len",
           "gpus": "n_gpus", "probe_timeout": "timeout", "regenerate_prompt_tokens": "max_prompt_tokens",
           "overfit_reply_tokens": "reply_tokens", "rehearse_steps": "steps"}


def rule_for(name: str) -> Rule | None:
    """The rule of a value called ``name`` (or of the quantity it is another name of), if it has one."""
    return RULES.get(ALIASES.get(name, name))


def problem(name: str, value: Any, rule: Rule | None = None) -> str | None:
    """Why ``value`` is not allowed for ``name`` (``"ttt_steps=0: use an integer >= 1 ..."``), or None."""
    rule = rule or rule_for(name)
    if rule is None or rule.fits(value):
        return None
    return f"{name}={value!r}: use {rule.allowed()}"


def check(name: str, value: Any, fix: str = "") -> Any:
    """``value`` when its rule allows it; else a :class:`UserError` naming it, what is allowed and ``fix`` (by
    default the option of that name with an allowed value, e.g. ``--draft-arch llama``)."""
    why = problem(name, value)
    if why:
        rule = rule_for(name)
        example = rule.choices[0] if rule.choices else f"{rule.minimum:g}" if rule.minimum is not None else None
        flag = "--" + name.replace("_", "-")
        fix = fix or (f"e.g. `{flag} {example}`." if example else f"pass such a value to `{flag}`.")
        raise UserError(f"{why}; {fix}")
    return value


def check_all(values: Mapping[str, Any]) -> None:
    """:func:`check` every value of ``values`` that has a rule."""
    for name, value in values.items():
        check(name, value)
