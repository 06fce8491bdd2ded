"""Stage 05 — training the draft step by step, checkpoints, and the hand-off to speculators' trainer (notebook 05).

``session``     :class:`TrainSession`: ``step()`` / ``run(n)`` over speculators' model, losses and batches
``settings``    :class:`TrainSettings`: what defines a run besides the draft and the data, resolved for a device
``forward``     the training forward: block-sparse on a CPU (same loss and gradients), or speculators' own
``loop``        the one optimizer step (``train_step``) the session and the plain parity loop both call
``batches``     the packed batches at an exact, resumable position
``checkpoint``  save / resume (weights, optimizer, scheduler, RNG, data position)
``validation``  the draft's accuracy on the training and the validation split, counted with no step taken
``anatomy``     one training step opened up: each draft module's call and shapes, the loss per TTT step
``live_tau``    τ while training: simulated on a few held-out prompts every N steps, draft forwards only
``plots``       training curves per TTT step, the next batch
``stepper``     the Step / Run N / Stop widget
``overfit``     train on one conversation, then decode it with the draft
``measured_memory`` measured CPU peaks (a training step, the loss alone): what ``eagle3kit.plan`` is checked against
``launch``      speculators ``TrainConfig`` YAML + the torchrun / FSDP command, and its dry run
``handoff``     a launch YAML as the session's settings and draft, speculators' per-step records read back
``rehearsal``   speculators' own trainer run here on that YAML (1 process / torchrun / FSDP), beside the session
"""
