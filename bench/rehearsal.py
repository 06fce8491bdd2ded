"""speculators' own trainer rehearsed on this machine beside TrainSession, in one table (issue 35's numbers).

    python bench/rehearsal.py [--out runs/bench_rehearsal] [--steps 5]

On the tiny verifier's data (as the tests make it: 12 ShareGPT conversations, 256 tokens, draft vocab 512), the YAML
``eagle3kit launch`` writes (sdpa, eager loss, float32), it runs speculators' trainer (``eagle3kit rehearse``) in
one process, under torchrun with 2 ranks, and with 2 ranks and FSDP2; trains ``TrainSession`` on each run (the same
number of ranks) and reports the largest |Δloss| per TTT step, the seconds each took, the final weights against the
session's bf16 export, and τ of both exports on the held-out prompts. Then a preempted 2-rank FSDP run (rank 1 killed
with SIGKILL after the step after a checkpoint), rerun into its save path, against the uninterrupted run. Prints the
machine's load beside the times. Writes ``bench/results/rehearsal.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/bench_rehearsal")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import pandas as pd
    import torch

    from eagle3kit.cli import main as cli
    from eagle3kit.data.dataset import build_dataset
    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.evaluate.export import reload
    from eagle3kit.tables import markdown_table
    from eagle3kit.train.rehearsal import compare
    from eagle3kit.train.rehearsal.resume import preempt
    from eagle3kit.train.rehearsal.run import rehearse
    from eagle3kit.verifier import load_model, load_tokenizer, resolve

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    out = Path(args.out)
    data = out / "data"
    build_dataset("tiny", data, n_conversations=12, seq_length=256, held_out=2, draft_vocab_size=512, progress=False)
    assert cli(["launch", "--data", data, "--out", out / "launch", "--gpus", 2, "--total-seq-len", 256, "--max-steps",
                8, "--epochs", 1, "--warmup-steps", 0, "--attn", "sdpa", "--loss-implementation", "eager",
                "--hidden-states-dtype", "float32"]) == 0
    yaml = out / "launch" / "run.yaml"
    verifier = resolve("tiny")
    model, tok = load_model(verifier), load_tokenizer(verifier)
    prompts = ev.chat_prompts(tok, held_out_conversations(data), 2, 128)
    conts = ev.continuations(model, prompts, 32, progress=False)

    rows = []
    for name, ranks, fsdp in (("1 process", 1, False), ("2 ranks (DDP)", 2, False), ("2 ranks (FSDP2)", 2, True)):
        run = rehearse(yaml, out / name.split()[0] / ("fsdp" if fsdp else "ddp"), ranks=ranks, fsdp=fsdp,
                       steps=args.steps, progress=False)
        assert run.ok, run.log_tail()
        t0 = time.perf_counter()
        session = compare.session_for(run)
        session.run(len(run.metrics()))
        session_s = time.perf_counter() - t0
        summary = compare.summary(compare.side_by_side(run, session))
        exported = session.export(out / f"session_{ranks}_{int(fsdp)}", dtype="bfloat16")
        taus = {k: ev.simulate(model, reload(d), prompts, conts, session.ttt_steps, progress=False).tau
                for k, d in (("speculators", run.checkpoint()), ("session", exported))}
        rows.append({"run": name, "steps": summary["steps"],
                     **{f"max abs Δloss, TTT {k}": v for k, v in summary["max_abs_diff"].items()},
                     "within tolerance": summary["within"], "weights equal": compare.weights(exported,
                                                                                             run.checkpoint()).equal,
                     "τ speculators": round(taus["speculators"], 4), "τ session": round(taus["session"], 4),
                     "trainer s": round(run.seconds, 1), "session s": round(session_s, 1),
                     "load": round(os.getloadavg()[0], 1)})
        print(rows[-1], flush=True)
    p = preempt(yaml, out / "preempt", ranks=2, fsdp=True, steps=5, checkpoint_step=2, progress=False)
    resume = {**p.summary(), "load": round(os.getloadavg()[0], 1)}
    print(resume)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rehearsal.json").write_text(json.dumps({"runs": rows, "preempt": resume}, indent=2, default=str))
    (RESULTS / "rehearsal.md").write_text(
        "# speculators' trainer rehearsed beside TrainSession (tiny verifier, float32, sdpa, eager loss)\n\n"
        + markdown_table(pd.DataFrame(rows)) + "\n\n## Preempted (2 ranks, FSDP2), rerun into the same save path\n\n"
        + markdown_table(pd.DataFrame([{"measure": k, "value": str(v)} for k, v in resume.items()])) + "\n")
    print((RESULTS / "rehearsal.md").read_text())


if __name__ == "__main__":
    main()
