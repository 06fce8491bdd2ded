"""Stage 02 — the doctor: each integration mistake, why, and its fix; the crash-isolated probe (notebook 02).

``checks``        ``check(subject)`` -> findings; ``check_data_dir``
``findings``      :class:`Finding` and its table / terminal renderings
``facts``         what a draft config, build or model says about attention (set value, resolution, mask kind)
``probe``         the measured backend matrix, each cell in a subprocess (``probe_worker`` runs there)
"""
