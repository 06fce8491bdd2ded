"""The ``eagle3kit`` command. Each subcommand is a thin wrapper over a library function."""

from __future__ import annotations

import argparse
import sys

from eagle3kit.errors import UserError


def _parse_value(text: str):
    """``--set key=value`` values: int, float, bool or string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def cmd_run_notebooks(args: argparse.Namespace) -> int:
    from eagle3kit.runner import run_notebooks, summary_table

    overrides = {}
    for item in args.set or []:
        if "=" not in item:
            raise UserError(f"--set expects KEY=VALUE, got {item!r}; e.g. --set ttt_steps=4")
        key, value = item.split("=", 1)
        overrides[key] = _parse_value(value)
    results = run_notebooks(args.out, preset=args.preset, overrides=overrides, select=args.only,
                            stop_on_failure=not args.keep_going)
    print()
    print(summary_table(results).to_string(index=False))
    print(f"\nExecuted notebooks and summary.json / summary.md in {args.out}")
    return 0 if all(r.status == "ok" for r in results) else 1


def cmd_config(args: argparse.Namespace) -> int:
    from eagle3kit.draft.config import build_config
    from eagle3kit.draft.model import build_model
    from eagle3kit.draft.report import explain

    build = build_config(verifier=args.verifier, num_layers=args.num_layers, draft_arch=args.draft_arch,
                         ttt_steps=args.ttt_steps, attn_implementation=args.attn, device=args.device)
    model = build_model(build) if args.counts else None
    with _wide():
        print(explain(build, model).to_string(index=False))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    import json

    from eagle3kit.assets import AssetMissingError
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
    import dataclasses
    import json

    from eagle3kit.data.regenerate import regenerate

    info = regenerate(args.verifier, args.out, n_conversations=args.n_conversations, max_new_tokens=args.max_new_tokens,
                      max_prompt_tokens=args.max_prompt_tokens, seed=args.seed, source=args.source,
                      batch_size=args.batch_size, device=args.device)
    print(json.dumps(dataclasses.asdict(info), indent=2))
    print(f"\nMake training data from it with: eagle3kit data --source {args.out} --verifier {args.verifier} --out DIR")
    return 0


def _train_spec(args: argparse.Namespace):
    from eagle3kit.draft.config import DraftSpec
    from eagle3kit.data.manifest import data_draft_vocab_size
    from eagle3kit.data.manifest import data_verifier

    if not args.data:
        raise ValueError("Pass --data DIR (a data directory made by `eagle3kit data`), or --resume CHECKPOINT.")
    return DraftSpec(verifier=args.verifier or data_verifier(args.data), num_layers=args.num_layers,
                     draft_vocab_size=args.draft_vocab_size or data_draft_vocab_size(args.data),
                     ttt_steps=args.ttt_steps, device=args.device)


def cmd_train(args: argparse.Namespace) -> int:
    from eagle3kit.train.session import TrainSession

    if args.resume:
        session = TrainSession.resume(args.resume, data_dir=args.data)
        args.save = args.save or args.resume  # a resumed run goes on checkpointing where it was
    else:
        session = TrainSession(args.data, _train_spec(args), lr=args.lr, total_seq_len=args.total_seq_len,
                               seed=args.seed, max_steps=args.max_steps, epochs=args.epochs,
                               hidden_states_dtype=args.hidden_states_dtype, warm_start_layer=args.warm_start_layer)
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
    from eagle3kit.train import launch
    from eagle3kit.draft.config import build_config
    from eagle3kit.train.session import TrainSettings

    build = build_config(_train_spec(args))
    settings = TrainSettings(lr=args.lr, total_seq_len=args.total_seq_len, seed=args.seed, max_steps=args.max_steps,
                             epochs=args.epochs, warm_start_layer=args.warm_start_layer).resolved("cuda")
    plan = launch.write_plan(build, settings, args.data, args.out, n_gpus=args.gpus, fsdp=args.fsdp,
                             verifier=args.cluster_verifier)
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
    from eagle3kit.doctor import checks as doctor
    from eagle3kit.draft.config import build_config
    from eagle3kit.draft.model import build_model

    build = build_config(verifier=args.verifier, num_layers=args.num_layers, ttt_steps=args.ttt_steps,
                         draft_vocab_size=args.draft_vocab_size, device="cpu", training=not args.no_training)
    if args.attn != "auto":  # set it raw, so that the doctor (not the builder) judges it
        build.config.transformer_layer_config._attn_implementation = None if args.attn == "unset" else args.attn
    subject = build_model(build) if args.model else build
    loss = None if args.loss == "default" else args.loss
    findings = doctor.check(subject, device=args.device, training=not args.no_training, loss=loss,
                            seq_len=args.seq_len)
    if args.data:
        findings += doctor.check_data_dir(args.data, args.verifier)
    with _wide():
        text = args.long or not findings
        print(doctor.format_findings(findings) if text else doctor.to_frame(findings).to_string(index=False))
    return 1 if doctor.has_errors(findings) else 0


def cmd_probe(args: argparse.Namespace) -> int:
    from eagle3kit.doctor import probe
    matrix = probe.probe(verifier=args.verifier, device=args.device, backends=args.backends, modes=args.modes,
                         seq_len=args.seq_len, ttt_steps=args.ttt_steps, timeout_s=args.timeout,
                         repeats=args.repeats, isolate_each=args.isolate_each)
    with _wide():
        print(matrix.drop(columns=["loss"]).to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    for training in (True, False):
        print(f"fastest backend matching eager ({'training' if training else 'inference'}): "
              f"{probe.recommend(matrix, training) or 'none'}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import torch

    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.draft.config import build_config
    from eagle3kit.draft.model import build_model
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
    if args.data:
        from eagle3kit.data.loader import held_out_conversations

        source = held_out_conversations(args.data)
    else:
        source = args.prompt or []
    prompts = ev.chat_prompts(tok, source, args.n_prompts, args.max_prompt_tokens)
    table, _sim, _real = ev.compare(model, tok, drafts, prompts, args.max_new_tokens, k, not args.no_decode)
    with _wide():
        print(table.to_string(index=False))
    print(f"\ntau = accepted draft tokens + 1 bonus token per round (k = {k}, {len(prompts)} prompts, "
          f"{args.max_new_tokens} greedy tokens each)")
    return 0


def cmd_masks(args: argparse.Namespace) -> int:
    from eagle3kit.masks.explorer import parse_lengths
    from eagle3kit.masks.stats import stats
    from eagle3kit.masks.eagle_mask import build_mask

    lengths = parse_lengths(args.lengths)
    mask = build_mask(lengths or [args.total_seq_len or 128], args.total_seq_len, args.ttt_steps,
                      args.sliding_window or None)
    print(f"{len(lengths)} documents, total_seq_len {mask.total_seq_len}, {mask.ttt_steps} TTT steps, window "
          f"{mask.sliding_window or 'off'}; BlockMask built in {mask.build_seconds:.2f}s "
          f"({'compiled' if mask.compiled else 'uncompiled'} create_block_mask)")
    with _wide():
        print(stats(mask).to_string(index=False))
    if args.plot:
        from eagle3kit.masks import plots as mask_plots
        from eagle3kit.atomic import atomic_file

        with atomic_file(args.plot) as tmp:
            mask_plots.plot_token_mask(mask).savefig(tmp, format="png", dpi=100)
        print(f"token heatmap written to {args.plot}")
    return 0


def cmd_install_assets(_args: argparse.Namespace) -> int:
    from eagle3kit.assets import install

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


COMMANDS = {
    "config": cmd_config,
    "data": cmd_data,
    "doctor": cmd_doctor,
    "evaluate": cmd_evaluate,
    "install-assets": cmd_install_assets,
    "launch": cmd_launch,
    "masks": cmd_masks,
    "probe": cmd_probe,
    "regenerate": cmd_regenerate,
    "run-notebooks": cmd_run_notebooks,
    "train": cmd_train,
}


def build_parser() -> argparse.ArgumentParser:
    from eagle3kit.cli_args import build_parser as build

    return build(COMMANDS, __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UserError, ValueError, FileNotFoundError) as exc:  # user mistakes: one clear line, no stack trace
        print(f"eagle3kit: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    sys.exit(main())
