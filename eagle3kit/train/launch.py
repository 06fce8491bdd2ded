"""Scale a run out through speculators' own trainer: a ``TrainConfig`` YAML, the torchrun command, and a dry run.

The YAML states every value that defines the run (draft shape, data, loss, optimizer, schedule) explicitly, is
validated by speculators' ``TrainConfig`` (the same resolution ``speculators train --config`` uses), and runs on N
GPUs with ``torchrun --nproc_per_node=N -m speculators.train --config run.yaml`` (``--fsdp-shard`` to shard with
FSDP2; several nodes rendezvous through c10d). Paths may be written as the cluster sees them (``cluster_data``,
``cluster_save``, a cluster verifier) while the run is checked here with the local ones (:attr:`LaunchPlan.local`).
:func:`cluster_settings` gives a GPU run speculators' own packed length instead of a CPU session's. :func:`dry_run`
runs ``speculators train --dry-run`` on it here, on the CPU, and :func:`round_trip` compares the ``config.json`` it
writes with eagle3kit's own draft, field by field.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import torch
import yaml
from speculators.train.config import TrainConfig
from speculators.train.config.resolution import DECODER_SHAPING_FLAGS
from speculators.train.config.schema import nest_flat

from eagle3kit import validate
from eagle3kit.atomic import write_text
from eagle3kit.draft.config import DraftBuild, draft_ttt_steps
from eagle3kit.errors import UserError
from eagle3kit.data.vocab import build_for_data
from eagle3kit.draft.model import save_draft
from eagle3kit.masks.eagle_mask import check_block_size
from eagle3kit.plan.commands import TOTAL_SEQ_LEN, check_rendezvous, torchrun_command
from eagle3kit.plan.fit import run_problems
from eagle3kit.train.loop import optimizer_args
from eagle3kit.train.settings import TrainSettings

# Why eagle3kit writes a value that differs from the speculators CLI default (the explanation table shows them).
_WHY = {
    "optimizer": "the session's optimizer (TrainSettings.optimizer: eagle3kit defaults to AdamW, the speculators CLI "
                 "to Muon, an optimizer that orthogonalises each 2D weight's update, + AdamW on the rest)",
    "muon_lr": "the Muon group's LR written out (speculators resolves unset to lr)",
    "total_seq_len": "the packed length asked for (--total-seq-len); without it a GPU run gets speculators' default",
    "seed": "eagle3kit's seed (TrainSettings.seed, 0 unless --seed): a TrainSession or `eagle3kit rehearse` with it "
            "packs and initialises the same",
    "on_missing": "the data directory is complete (made by the HF verifier); no vLLM server generates on demand",
    "draft_vocab_size": "the pruned draft vocab of the data directory's d2t/t2d",
    "target_layer_ids": "the aux layers the data directory was made with",
    "verifier_name_or_path": "this machine's verifier directory: the cluster needs it at this path (else "
                             "--cluster-verifier)",
    "data_path": "this machine's data directory: the cluster needs it at this path (else --cluster-data)",
    "save_path": "this machine's path under --out: the cluster writes checkpoints there (else --cluster-save)",
    "log_dir": "beside the checkpoints (save_path/logs)",
    "num_workers": "dataloader workers per GPU; the small data sets here need few",
    "max_steps": "the step budget, also the LR schedule's horizon (notebook 05: the session's packs over N ranks)",
    "lr": "the session's learning rate",
    "from_pretrained": "the draft warm-started from a verifier layer (eagle3kit.draft.warm_start)",
}


@dataclasses.dataclass
class LaunchPlan:
    """A run for speculators' trainer: the validated config, its YAML and the command that runs it."""

    config: Any  # speculators.train.config.TrainConfig
    yaml_path: Path
    n_gpus: int  # per node
    fsdp: bool
    nodes: int = 1
    rdzv_endpoint: str | None = None
    # flat fields the YAML writes as the cluster sees them -> this machine's value (the dry run uses these)
    local: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)  # what of it will not fit (eagle3kit.plan.fit)

    @property
    def fit(self) -> str:
        """One line: the run fits its GPUs and disk, or what of it will not."""
        return "will not fit: " + "; ".join(self.problems) if self.problems else "fits its GPUs and disk"

    @property
    def yaml(self) -> str:
        return self.yaml_path.read_text()

    def head(self, lines: int = 12) -> str:
        """The YAML's first ``lines`` lines and where the rest is (:func:`explain_plan` lists every field)."""
        text = self.yaml.splitlines()
        rest = len(text) - lines
        return "\n".join(text[:lines] + ([f"… {rest} more lines in {self.yaml_path}"] if rest > 0 else []))

    @property
    def command(self) -> str:
        return torchrun_command(self.yaml_path, self.n_gpus, self.fsdp, self.nodes, self.rdzv_endpoint)

    @property
    def local_data_path(self) -> str:
        return self.local.get("data_path", self.config.data.data_path)


_CLUSTER_WHY = {  # why, when the YAML holds the cluster's path (LaunchPlan.local has this machine's)
    "verifier_name_or_path": "the verifier as the cluster sees it (--cluster-verifier)",
    "data_path": "the data directory as the cluster sees it (--cluster-data); copy it there",
    "save_path": "where the cluster writes checkpoints (--cluster-save)",
    "log_dir": "beside the cluster's checkpoints (save_path/logs)",
}


def cluster_settings(**given: Any) -> TrainSettings:
    """The settings of a GPU run: ``given`` (the options passed), speculators' own ``total_seq_len`` unless given
    (not a CPU session's shorter one), resolved for CUDA."""
    return TrainSettings(**{"total_seq_len": TOTAL_SEQ_LEN, **given}).resolved("cuda")


def flat_config(build: DraftBuild, settings, data_dir: str | os.PathLike, save_path: str | os.PathLike,
                attn_implementation: str = "simple_flex_attention", hidden_states_dtype: str = "bfloat16",
                loss_implementation: str = "fused", num_workers: int = 4, verifier: str | None = None,
                log_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The run as speculators' flat ``TrainConfig`` fields (GPU defaults: flex attention, bf16, fused loss)."""
    spec, cfg = build.spec, build.config
    vocab = build.verifier.text_config.vocab_size
    flat = {
        "speculator_type": "eagle3", "seed": settings.seed,
        "verifier_name_or_path": verifier or build.verifier.require_path(),
        "num_layers": spec.num_layers, "draft_arch": spec.draft_arch, "draft_hidden_act": spec.hidden_act,
        "sliding_window": spec.sliding_window, "full_attention_indices": list(spec.full_attention_indices),
        "target_layer_ids": list(build.aux_layer_ids),
        "draft_vocab_size": cfg.draft_vocab_size if cfg.draft_vocab_size != vocab else None,
        "norm_before_residual": cfg.norm_before_residual, "norm_before_fc": cfg.norm_before_fc,
        "fc_norm": cfg.fc_norm, "norm_output": cfg.norm_output, "embed_requires_grad": cfg.embed_requires_grad,
        "draft_attn_impl": attn_implementation,
        "data_path": str(Path(data_dir).resolve()), "total_seq_len": settings.total_seq_len,
        "train_data_ratio": settings.train_data_ratio, "hidden_states_dtype": hidden_states_dtype,
        "num_workers": num_workers, "on_missing": "raise",
        "loss_implementation": loss_implementation, "loss_fn": settings.loss_fn,
        "ttt_steps": draft_ttt_steps(cfg),
        "ttt_step_loss_decay": settings.ttt_step_loss_decay,
        **_optimizer_fields(settings),
        "scheduler_type": settings.scheduler_type, "scheduler_warmup_steps": settings.warmup_steps,
        "epochs": settings.epochs, "max_steps": settings.max_steps,
        "save_path": str(Path(save_path).resolve()),
        "log_dir": str(Path(log_dir).resolve()) if log_dir else str(Path(save_path).resolve() / "logs"),
    }
    return flat


def _optimizer_fields(settings) -> dict[str, Any]:
    """speculators' optimizer fields of the run (the Muon ones only when it steps Muon)."""
    fields = optimizer_args(settings).model_dump()
    return fields if fields["optimizer"] == "muon" else {k: v for k, v in fields.items() if not k.startswith("muon")}


def validate_yaml(path: str | os.PathLike):
    """Resolve a YAML exactly as ``speculators train --config`` does; unknown keys are an error here."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = TrainConfig.from_sources(cli={}, config_path=str(path),
                                       argv=["speculators", "train", "--config", str(path)])
    unknown = [str(w.message) for w in caught if "unrecognised keys" in str(w.message)]
    if unknown:
        raise UserError(unknown[0] + f"; remove them from {path} (speculators would silently ignore them).")
    return cfg


def write_plan(build: DraftBuild, settings, data_dir: str | os.PathLike, out_dir: str | os.PathLike,
               n_gpus: int = 8, fsdp: bool = False, gpu: str | None = None, nodes: int = 1,
               rdzv_endpoint: str | None = None, cluster_data: str | None = None, cluster_save: str | None = None,
               warn: bool = True, **options: Any) -> LaunchPlan:
    """Write ``out_dir/run.yaml`` (atomically), validate it with speculators' ``TrainConfig``, return the plan.

    ``n_gpus`` ranks on each of ``nodes`` nodes (several: a c10d rendezvous at ``rdzv_endpoint``). ``cluster_data``
    / ``cluster_save``: the data directory and checkpoint folder as the cluster sees them, written into the YAML
    instead of this machine's paths (``data_dir``, ``out_dir/checkpoints``). ``options`` go to :func:`flat_config`
    (attention, dtype, loss implementation, workers, ``verifier``: its path on the cluster). Before anything is
    written, a run that will not fit a ``gpu`` (a name of :data:`eagle3kit.plan.gpus.GPUS`; default an H100-80GB),
    with FSDP sharded over all ``nodes x n_gpus`` ranks, or the disk under ``out_dir`` (when the checkpoints land
    there) is found (:mod:`eagle3kit.plan.fit`): warned about when ``warn``, and kept in ``LaunchPlan.problems``.
    """
    validate.check("n_gpus", n_gpus, "e.g. `--gpus 8`.")
    check_rendezvous(nodes, rdzv_endpoint)
    if getattr(settings, "ttt_curriculum", 0.0):
        warnings.warn(f"ttt_curriculum={settings.ttt_curriculum:g}: speculators' trainer has no TTT curriculum, so "
                      f"the YAML trains {draft_ttt_steps(build.config)} TTT steps at every step.", stacklevel=2)
    attn = options.get("attn_implementation", "simple_flex_attention")
    if attn == "simple_flex_attention":
        check_block_size(settings.total_seq_len, draft_ttt_steps(build.config))
    problems = run_problems(build, settings.total_seq_len, options.get("loss_implementation", "fused"),
                            settings.optimizer, settings.epochs, out_dir, n_gpus=n_gpus * nodes, fsdp=fsdp, gpu=gpu,
                            attention=attn, disk=cluster_save is None)
    for text in problems if warn else ():
        warnings.warn(f"This run will not fit: {text}.", stacklevel=2)
    out = Path(out_dir)
    flat = flat_config(build, settings, data_dir, out / "checkpoints", **options)
    local = {}
    if options.get("verifier"):
        local["verifier_name_or_path"] = build.verifier.require_path()
    if cluster_data:
        local["data_path"], flat["data_path"] = flat["data_path"], cluster_data
    if cluster_save:
        local.update(save_path=flat["save_path"], log_dir=flat["log_dir"])
        flat["save_path"], flat["log_dir"] = cluster_save, str(PurePosixPath(cluster_save) / "logs")
    if getattr(settings, "warm_start_layer", None) is not None:  # speculators starts from these weights
        flat["from_pretrained"] = str(write_warm_start(build, data_dir, out / "warm_start",
                                                       settings.warm_start_layer, settings.seed).resolve())
        for key in DECODER_SHAPING_FLAGS:  # the saved draft defines the decoder; speculators refuses both
            flat.pop(key, None)
    flat = {k: v for k, v in flat.items() if v is not None}
    path = out / "run.yaml"
    write_text(path, yaml.safe_dump({"train": nest_flat(flat)}, sort_keys=False, default_flow_style=False))
    return LaunchPlan(validate_yaml(path), path, n_gpus, fsdp, nodes, rdzv_endpoint, local, problems)


def explain_plan(plan: LaunchPlan) -> pd.DataFrame:
    """Every field the YAML sets: value, the speculators CLI default, and why eagle3kit's value differs."""
    written = _flatten_nested(yaml.safe_load(plan.yaml)["train"])
    defaults = TrainConfig().flatten()
    rows = []
    for key, value in written.items():
        default = defaults.get(key)
        same = value == default
        why = _CLUSTER_WHY.get(key) if key in plan.local else _why(key)
        rows.append({"field": key, "value": _short(value), "speculators default": _short(default),
                     "differs": "" if same else "yes", "why": "" if same else why or "the session's setting"})
    return pd.DataFrame(rows)


LAB_ROWS = {"optimizer": "muon"}  # a field whose eagle3kit default the recipe lab's row of that name measured


def _why(key: str) -> str | None:
    """Why eagle3kit writes its own value of ``key``, with the recipe lab's measurement where a row tried it."""
    from eagle3kit.evaluate import recipes

    why = _WHY.get(key)
    if key in LAB_ROWS:
        try:
            measured = recipes.evidence(recipes.read_lab(), LAB_ROWS[key])
        except FileNotFoundError:
            measured = None
        why = f"{why}; {measured}" if why and measured else why
    return why


def _flatten_nested(nested: dict) -> dict:
    out = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            out.update(value)
        else:
            out[key] = value
    return out


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else "..." + text[-57:]


def write_warm_start(build: DraftBuild, data_dir: str | os.PathLike, out_dir: str | os.PathLike, layer: int,
                     seed: int = 0) -> Path:
    """The warm-started draft (:mod:`eagle3kit.draft.warm_start`) saved for ``speculators train --from-pretrained``,
    seeded as a :class:`~eagle3kit.train.session.TrainSession` with that ``seed`` seeds it: the same starting weights
    (the random token half of the first layer's q/k/v included)."""
    torch.manual_seed(seed)
    return save_draft(build_for_data(build, data_dir, layer), out_dir)


def dry_run(plan: LaunchPlan, out_dir: str | os.PathLike, timeout: float = 600) -> Path:
    """Run ``speculators train --config run.yaml --dry-run`` on the CPU; return the directory it saved the draft to.

    speculators builds the draft from the YAML, loads the verifier's weights and the vocab mapping, saves an
    initialised checkpoint (in ``hidden_states_dtype``) and exits before training.
    """
    out = Path(out_dir).resolve()
    cmd = [sys.executable, "-m", "speculators.train", "--config", str(plan.yaml_path), "--dry-run",
           "--save-path", str(out), "--log-dir", str(out / "logs")]
    for key, value in plan.local.items():  # this machine's data and verifier where the YAML names the cluster's
        if key not in ("save_path", "log_dir"):  # the dry run writes into out_dir
            cmd += [f"--{key.replace('_', '-')}", value]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0 or not (out / "config.json").exists():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"speculators train --dry-run failed (exit {proc.returncode}):\n{tail}")
    return out


def _flat_json(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat_json(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: obj}


def eagle3kit_config_json(build: DraftBuild, data_dir: str | os.PathLike, dtype: str = "bfloat16",
                          model=None) -> dict:
    """The ``config.json`` eagle3kit's own draft saves (``save_pretrained`` of the model, in ``dtype``).

    ``model``: an already built draft of ``build`` (e.g. ``TrainSession.model``; not changed)."""
    with tempfile.TemporaryDirectory() as tmp:
        save_draft(model if model is not None else build_for_data(build, data_dir), Path(tmp) / "draft", dtype)
        return json.loads((Path(tmp) / "draft" / "config.json").read_text())


def compare_configs(ours: dict, theirs: dict) -> pd.DataFrame:
    """Field by field (nested keys dotted): eagle3kit's value, speculators' value, equal or not."""
    a, b = _flat_json(ours), _flat_json(theirs)
    rows = [{"field": k, "eagle3kit": a.get(k, "<absent>"), "speculators": b.get(k, "<absent>"),
             "equal": a.get(k, "<absent>") == b.get(k, "<absent>")} for k in sorted(set(a) | set(b))]
    return pd.DataFrame(rows)


def round_trip(build: DraftBuild, plan: LaunchPlan, out_dir: str | os.PathLike, model=None,
               saved: str | os.PathLike | None = None) -> pd.DataFrame:
    """Compare the ``config.json`` speculators built from the plan with eagle3kit's draft for the same run
    (``model``: eagle3kit's draft if already built, e.g. ``TrainSession.model``): ``saved``, a checkpoint its trainer
    wrote from the plan's YAML (a rehearsal's; its checkpointer saves bf16 whatever the run's dtype, so eagle3kit's
    side is saved so too), else a dry run of the plan into ``out_dir`` (saved in the YAML's hidden-states dtype)."""
    dtype = "bfloat16" if saved is not None else plan.config.data.hidden_states_dtype
    saved = Path(saved) if saved is not None else dry_run(plan, out_dir)
    theirs = json.loads((saved / "config.json").read_text())
    ours = eagle3kit_config_json(build, plan.local_data_path, dtype, model)
    return compare_configs(ours, theirs)
