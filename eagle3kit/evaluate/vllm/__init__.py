"""The draft in real vLLM's CPU build, which lives in its own environment (``.venv-vllm``) and is reached through
subprocesses only (the environment itself: :mod:`eagle3kit.vllm_env`).

``serve``    check the inputs, run ``worker.py`` on the same prompts with and without the draft, the serve command
``worker``   standalone script run by the vLLM environment's python (imports only vllm and the standard library)
``gate``     whether a draft is checked in vLLM here (each reason to skip in one line), and that check
``compare``  vLLM's view of a draft beside eagle3kit's: τ, per-position acceptance, lossless, speed
"""
