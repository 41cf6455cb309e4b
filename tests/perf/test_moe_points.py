"""The bundled MXFP4 MoE points are exactly what the extraction script reads from
AIConfigurator's database (the `aic` extra, which CI installs): the data can be regenerated."""

import csv
from pathlib import Path

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
POINTS = ROOT / "benchmarks" / "data" / "calibration" / "moe_points.csv"


def _script():
    return load_script("benchmarks/extract_moe_points.py")


def test_bundled_mxfp4_points_are_what_the_script_extracts():
    script = _script()
    with POINTS.open(newline="") as fh:
        bundled = [row for row in csv.DictReader(fh) if row["moe_dtype"] == script.MOE_DTYPE]
    extracted = script.extract()
    assert len(extracted) == len(bundled) > 1000
    for got, kept in zip(extracted, bundled, strict=True):
        assert {k: str(v) for k, v in got.items()} == kept
    # Every system and backend the analytic model has kernel fits for is covered.
    assert {(r["system"], r["backend"]) for r in bundled} == {
        (s, b) for s in ("h100_sxm", "h200_sxm", "b200_sxm") for b in ("vllm", "trtllm")
    }
