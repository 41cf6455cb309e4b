"""aisimulate: GPU-free simulation of LLM inference serving (EXPERIMENTAL).

The public API lives in the layer packages: ``aisimulate.catalog`` (facts: GPUs, models,
backends), ``aisimulate.perf`` (latency and memory), ``aisimulate.workload`` (traffic),
``aisimulate.planner`` (autoscaling decisions), ``aisimulate.replay`` (the serving simulation),
``aisimulate.fidelity`` (measured benchmarks replayed) and ``aisimulate.spica`` (the deployment
search, EXPERIMENTAL); ``docs/overview.md`` maps them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
