"""Stage 02 — the doctor: each integration mistake, why, and its fix; the crash-isolated probe (notebook 02).

Four rooms over one shared piece:

``findings``   :class:`Finding` (severity, what, why, fix, check), its table and terminal renderings, and ``Guard``:
               the one try -> Finding wrapper every check runs under
``checks``     the checks of draft configs, builds and models, data directories, draft folders and trainer rehearsals
``probe``      the attention probe: the measured backend matrix (each cell a subprocess), what it recommends, its plots
``tau``        the τ verdict: why a trained draft's τ is low, and whether it falls past its training length
``catalogue``  the failure catalogue (package data ``failures.md``), and its rows broken live for notebook 02
"""
