"""CUDA-graph batch padding: the batch size a captured engine pass really runs at.

An engine replays a CUDA graph recorded for a fixed batch, so a pass of ``n`` sequences (or
tokens) between two captured sizes does the work of the next larger size; past the largest one
it runs eagerly at its own size. The captured sizes per backend are
:attr:`aisimulate.catalog.backends.BackendProfile.cuda_graphs`.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np


def padded_batch(n: float, sizes: tuple[int, ...]) -> float:
    """The smallest captured size at least ``n``; ``n`` itself past the largest (eager) or for an
    empty batch. A bisect over a short tuple: the cost does not grow with the batch."""
    if n <= 0:
        return n
    i = bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else n


def padded_batches(n: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """:func:`padded_batch` over an array (``sizes`` ascending, at least one)."""
    i = np.searchsorted(sizes, n)
    padded = sizes[np.minimum(i, len(sizes) - 1)]
    out: np.ndarray = np.where((i < len(sizes)) & (n > 0), padded, n)
    return out
