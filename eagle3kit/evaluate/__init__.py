"""Stage 06 — acceptance length, export, and serving in vLLM (notebook 06).

``acceptance``  tau simulated (teacher-forced) and by the decode loop, side by side
``decode``      a short, lossless chain speculative decode loop (HF verifier + speculators draft)
``export``      reload an exported draft with speculators, the vLLM serve command
"""
