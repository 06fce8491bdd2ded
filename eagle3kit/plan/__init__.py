"""Plan the GPU run from the CPU rehearsal: disk, GPU memory per rank and time for the real verifier.

``gpu_plan``   :func:`plan_run` -> :class:`Plan` (``.table()``, ``.commands``, ``.assumptions``, ``.problems()``);
               :func:`compare_plans` (several side by side)
``figure``     :func:`plan_figure`: memory per rank by part, eager vs fused, and disk
``published_costs``  :func:`published_checks`: speculators' 268 MB/sample, PR 951's loss peaks, EAGLE issue 30's 740 GB
``serving_speed``  what the draft buys when served on GPUs: step times from bytes and FLOPs, engine overheads,
                   the published checks
``published_speedups``  published EAGLE-3 (τ, speedup) pairs with their sources (vLLM, SGLang)
``commands``   the torchrun command for a run's YAML (``eagle3kit launch`` writes it too)
``fit``        the check ``eagle3kit launch`` runs before writing anything
``disk``       hidden-state and checkpoint bytes
``memory``     GPU memory per rank by part, the longest sequence that fits
``timing``     data generation and training time at a stated utilisation
``gpus``       named GPUs (memory, memory bandwidth, bf16 throughput)
``shapes``     the verifier's and draft's shapes, counted from the real objects
"""

from eagle3kit.plan.figure import plan_figure
from eagle3kit.plan.gpus import GPUS
from eagle3kit.plan.published_costs import published_checks
from eagle3kit.plan.gpu_plan import Plan, compare_plans, plan_run

__all__ = ["GPUS", "Plan", "compare_plans", "plan_figure", "plan_run", "published_checks"]
