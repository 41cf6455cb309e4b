"""aisimulate: GPU-free simulation of LLM inference serving (EXPERIMENTAL).

The public API lives in the layer packages: ``aisimulate.catalog`` (facts),
``aisimulate.perf`` (latency and memory), and later ``aisimulate.replay`` and
``aisimulate.spica``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
