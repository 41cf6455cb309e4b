import pytest

from aisimulate.catalog import get_system, list_systems
from aisimulate.catalog.systems import load_system_file
from aisimulate.errors import ConfigError, UnknownNameError

REQUIRED = ["a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "l40s"]


def test_required_systems_are_bundled():
    assert set(REQUIRED) <= set(list_systems())


@pytest.mark.parametrize("name", REQUIRED)
def test_every_bundled_system_validates(name):
    system = get_system(name)
    assert system.name == name
    assert system.hbm_bytes > 0 and system.hbm_gbps > 0
    assert system.tflops["bf16"] > 0
    assert system.nvlink_domain >= system.gpus_per_node


def test_h200_matches_published_specs():
    h200 = get_system("h200_sxm")
    assert h200.hbm_gib == 141.0
    assert h200.hbm_gbps == 4800
    assert h200.tflops == {"bf16": 989.0, "fp8": 1978.0}
    assert h200.nvlink_gbps == 450


def test_fp4_only_on_blackwell():
    assert "fp4" in get_system("b200_sxm").math_dtypes
    assert "fp4" not in get_system("h100_sxm").math_dtypes
    assert "fp8" not in get_system("a100_sxm").math_dtypes


def test_nvl72_fabric_spans_the_rack():
    assert get_system("gb200").nvlink_domain == 72
    assert get_system("h200_sxm").nvlink_domain == 8


def test_nccl_buffers_grow_with_group_size():
    h100 = get_system("h100_sxm")
    assert h100.nccl_bytes(1) == 0
    assert h100.nccl_bytes(2) == 342 * 2**20
    assert h100.nccl_bytes(16) == 392 * 2**20


def test_names_are_forgiving_about_case_and_dashes():
    assert get_system("H200-SXM").name == "h200_sxm"


def test_unknown_system_lists_close_names():
    with pytest.raises(UnknownNameError) as err:
        get_system("h200")
    assert "h200_sxm" in str(err.value)
    assert isinstance(err.value, ConfigError)


def test_bad_system_file_names_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    source = get_system("h100_sxm").model_dump()
    source["hbm_gbps"] = -1
    import yaml

    path.write_text(yaml.safe_dump(source))
    with pytest.raises(ConfigError) as err:
        load_system_file(path)
    assert "hbm_gbps" in str(err.value) and str(path) in str(err.value)


def test_custom_system_file_by_path(tmp_path):
    import yaml

    data = get_system("h100_sxm").model_dump()
    data["name"] = "my_gpu"
    data["price_per_gpu_hour_usd"] = 2.5
    path = tmp_path / "my_gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    system = get_system(str(path))
    assert system.name == "my_gpu" and system.price_per_gpu_hour_usd == 2.5
