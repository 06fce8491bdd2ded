"""Whether notebook 06 checks its export in vLLM: each closed gate said in one line, the serve command kept."""

from __future__ import annotations

from eagle3kit.draft.config import build_config, save_config
from eagle3kit.evaluate.export import vllm_commands
from eagle3kit import vllm_env as env
from eagle3kit.evaluate.vllm.gate import check_in_vllm

PROMPTS = [[1, 2, 3]]


def test_a_draft_vllm_cpu_cannot_serve_is_said_and_not_run(tmp_path):
    out = save_config(build_config(verifier="tiny", ttt_steps=2, device="cpu"), tmp_path / "tiny")  # head_dim 16
    gate = check_in_vllm(out, None, PROMPTS, 4, k=2, enabled=True)
    assert gate.command is None and gate.check is None
    assert gate.lines() == [gate.skipped]
    assert "cannot serve this draft" in gate.skipped and "head_dim=16" in gate.skipped


def test_a_check_not_asked_for_or_without_vllm_is_skipped_with_the_serve_command(smollm2, tmp_path, monkeypatch):
    out = save_config(build_config(verifier="smollm2", ttt_steps=2, device="cpu"), tmp_path / "draft")
    command = vllm_commands(out, 2)["long"]
    off = check_in_vllm(out, None, PROMPTS, 4, k=2, enabled=False)
    assert (off.command, off.check) == (command, None) and "vllm_check = False" in off.skipped
    assert off.lines() == [off.skipped, f"serve it: {command}"]
    monkeypatch.setenv(env.VENV_VAR, str(tmp_path / "no-vllm-here"))  # where a user without `make vllm` stands
    missing = check_in_vllm(out, None, PROMPTS, 4, k=2, enabled=True)
    assert missing.check is None and missing.skipped.startswith("skipped: No finished vLLM environment")
    assert env.MAKE_IT in missing.skipped and missing.command == command


def test_a_small_host_binds_vllm_to_every_core_a_large_one_keeps_vllm_default():
    from eagle3kit.vllm_env import SMALL_HOST, run_env

    two = run_env([0, 1])
    assert two["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and two["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    large = run_env(list(range(SMALL_HOST + 1)))
    assert large == {"VLLM_CPU_KVCACHE_SPACE": "2"}  # vLLM keeps one core for its own process there
