"""speculators' own trainer, rehearsed on this machine before the GPU job (``eagle3kit rehearse``, notebook 05).

``cpu``      the CPU presented to speculators' trainer as its accelerator (only where there is none), piece by piece
``entry``    the process a rehearsal runs, alone or under torchrun: speculators' ``main``, its per-step records
``run``      ``rehearse(run.yaml)``: one process or N ranks, FSDP or not, the overrides a CPU needs, :class:`Rehearsal`
``compare``  speculators' trainer beside ``TrainSession`` on the same run; two checkpoints tensor by tensor
``resume``   a preempted rank: killed, rerun, resumed from speculators' checkpoint, against the uninterrupted run
``plots``    both loss curves per TTT step and their difference
"""
