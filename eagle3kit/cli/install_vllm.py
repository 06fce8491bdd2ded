"""``install-vllm``: vLLM's CPU build in its own environment (``.venv-vllm``), once."""

from __future__ import annotations

import argparse

from eagle3kit.cli.args import signature_options


def install_vllm_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.vllm_env import VENV_VAR, install_vllm_env

    signature_options(p, install_vllm_env, {"path": f"the environment's folder (None: ${VENV_VAR}, else .venv-vllm)"})


def cmd_install_vllm(args: argparse.Namespace) -> int:
    """install vLLM's CPU build in its own environment (once; a few minutes) and print its folder"""
    from eagle3kit.vllm_env import install_vllm_env

    print(install_vllm_env(args.path))
    return 0
