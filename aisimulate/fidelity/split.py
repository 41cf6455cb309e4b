"""Which measured serving runs may be developed on, which check that work, and which are kept
for acceptance.

Predicting GPUs nobody has measured is what users ask of us, so the splits are by system. The
h200_sxm and b200_sxm runs of AIConfigurator's ``silicon_sample.csv`` are the acceptance set:
nothing is fitted, tuned or looked at row by row on them, and the benchmark holds them back
unless they are named explicitly. The development split is every other system with runs in that
file; inside it, gb300 is kept apart for validation (never fitted or tuned on), the way h200 and
b200 are kept from development: a GPU whose siblings (b300_sxm, gb200) are in the fitting part.
"""

from __future__ import annotations

from typing import Literal

Split = Literal["development", "validation", "acceptance", "other"]
SPLITS: tuple[Split, ...] = ("development", "validation", "acceptance", "other")
ACCEPTANCE_SYSTEMS = frozenset({"h200_sxm", "b200_sxm"})
VALIDATION_SYSTEMS = frozenset({"gb300"})
DEVELOPMENT_SYSTEMS = frozenset({"h100_sxm", "b300_sxm", "gb200"})


def split_of(system: str) -> Split:
    """The split a system's measured runs belong to (``other``: a system in none of them)."""
    if system in ACCEPTANCE_SYSTEMS:
        return "acceptance"
    if system in VALIDATION_SYSTEMS:
        return "validation"
    if system in DEVELOPMENT_SYSTEMS:
        return "development"
    return "other"
