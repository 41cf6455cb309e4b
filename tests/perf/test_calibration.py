import statistics
from pathlib import Path

import pytest

from aisimulate.catalog import get_system
from aisimulate.perf.calibration import calibration_for
from aisimulate.perf.points import TARGETS, load_points, relative_errors

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "calibration"


@pytest.fixture(scope="module")
def errors():
    return relative_errors(load_points(DATA))


def test_every_family_and_gpu_is_covered(errors):
    families = {family for family, _ in errors}
    assert families == set(TARGETS)
    assert {system for _, system in errors} == {"h100_sxm", "h200_sxm", "b200_sxm"}


def test_shipped_calibration_meets_accuracy_targets(errors):
    for (family, system), values in errors.items():
        assert statistics.median(values) <= TARGETS[family], (family, system)


def test_sglang_uses_vllm_kernels_but_its_own_overhead():
    h200 = get_system("h200_sxm")
    sglang, vllm = calibration_for(h200, "sglang"), calibration_for(h200, "vllm")
    assert sglang.gemm == vllm.gemm
    assert sglang.source == "h200_sxm/vllm"


def test_calibration_carries_the_attribution():
    import json
    from importlib import resources

    data = json.loads((resources.files("aisimulate.perf") / "data" / "calibration.json").read_text())
    assert "NVIDIA AIConfigurator, Apache-2.0" in data["attribution"]
