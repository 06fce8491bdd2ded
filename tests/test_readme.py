"""The README's "I have GPUs" recipe, run command by command on this CPU with the tiny verifier.

The recipe's variables point at the tiny verifier and this test's folders; the only other changes are in
:data:`SHRINK` (sizes a 2-core CPU can run in seconds). The two GPU lines are checked against what eagle3kit prints:
the ``torchrun`` line must be the one ``launch`` printed, and it is then run as speculators' own trainer would run it
here (``eagle3kit rehearse`` on the same YAML, into the YAML's save path); the ``vllm serve`` line must be the one
:func:`eagle3kit.evaluate.export.serve_line` gives for the checkpoint it names (the tiny verifier's head_dim 16 has no
kernel in vLLM's CPU build; ``tests/test_vllm.py`` serves a speculators-trained SmolLM2 checkpoint there).
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path


from eagle3kit.cli import main
from eagle3kit.data.conversations import read_sharegpt, write_jsonl
from eagle3kit.evaluate.export import serve_line
from eagle3kit.train.launch import validate_yaml
from eagle3kit.train.rehearsal.run import save_path as rehearsal_save_path

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- gpu-recipe -->"
SHRINK = {"--draft-vocab-size 32000": "--draft-vocab-size 512", "--seq-length 2048": "--seq-length 256",
          "--samples 50000": "--samples 1000", "--gpu H100-80GB": "--gpu H100-80GB --total-seq-len 512"}


def recipe() -> tuple[dict[str, str], list[str]]:
    """The recipe's variables (name -> value) and its commands, continuation lines joined, comments left out."""
    text = (REPO / "README.md").read_text().split(MARKER, 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1).replace("\\\n", " ")
    variables: dict[str, str] = {}
    commands = []
    for line in block.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if re.fullmatch(r"(\w+=\S+\s*)+", line):
            variables.update(pair.split("=", 1) for pair in line.split())
        else:
            commands.append(" ".join(line.split()))
    return variables, commands


def test_the_recipe_is_short_and_names_each_stage():
    variables, commands = recipe()
    assert set(variables) == {"VERIFIER", "DATA", "RUN"}
    tools = [c.split()[:2] for c in commands]
    assert tools == [["eagle3kit", "plan"], ["eagle3kit", "data"], ["eagle3kit", "doctor"], ["eagle3kit", "launch"],
                     ["eagle3kit", "rehearse"], ["torchrun", "--standalone"], ["eagle3kit", "doctor"],
                     ["vllm", "serve"]]
    assert len((REPO / "README.md").read_text().splitlines()) <= 120


def test_the_gpu_recipe_runs_on_this_cpu(tiny_verifier, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "chats.jsonl", read_sharegpt()[:40])
    values = {"VERIFIER": str(tiny_verifier.path), "DATA": str(tmp_path / "data"), "RUN": str(tmp_path / "run")}
    _, commands = recipe()
    for command in commands:
        for big, small in SHRINK.items():
            command = command.replace(big, small)
        command = re.sub(r"\$(\w+)", lambda m: values[m[1]], command)
        argv = shlex.split(command)
        started = time.perf_counter()
        if argv[0] == "eagle3kit":
            capsys.readouterr()
            code = main(argv[1:])
            out, err = capsys.readouterr()
            assert code == 0, f"{command}\n{out[-3000:]}\n{err[-2000:]}"
            if argv[1] == "launch":
                printed = out
        elif argv[0] == "torchrun":
            assert command in printed, (command, printed[-2000:])
            config = argv[argv.index("--config") + 1]
            save = Path(validate_yaml(config).flatten()["save_path"])
            out = save.parent  # the rehearsal writes speculators' checkpoints into OUT/checkpoints
            assert rehearsal_save_path(out) == save
            ranks = ["--ranks", "2"] + (["--fsdp"] if "--fsdp-shard" in argv else [])
            assert main(["rehearse", "--config", config, "--out", str(out), *ranks, "--steps", "2"]) == 0
        else:
            assert command == serve_line(argv[2])
        print(f"{time.perf_counter() - started:6.1f} s  {command[:80]}", file=sys.__stdout__)


def test_every_page_the_readme_links_exists():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)", text)
    assert "docs/data-format.md" in links
    assert any(link.endswith(".png") for link in links)  # a picture of the toolkit at work, in the repository
    assert [link for link in links if not link.startswith("http") and not (REPO / link).exists()] == []
