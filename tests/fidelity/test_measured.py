import re
from datetime import date
from pathlib import Path

import pytest

from aisimulate.errors import ConfigError
from aisimulate.fidelity import read_measured

SMALL = Path(__file__).parent / "data" / "measured_small.csv"
HEADER = "system,backend,model,isl,osl,concurrency,tp,moe_tp,ttft_ms,tpot_ms\n"


def test_reads_rows_with_their_line_numbers_and_the_zero_means_one_quirk():
    rows = read_measured(SMALL)
    assert [r.id for r in rows][:2] == ["llama8b_instruct_c4", "llama8b_nvidia_fp8_c4"]
    assert [r.line for r in rows] == [2, 3, 4, 5, 6]
    nvidia = rows[1]
    assert (nvidia.moe_tp, nvidia.moe_ep, nvidia.precision) == (1, 1, "")
    gptoss = rows[3]
    assert (gptoss.precision, gptoss.gemm_quant, gptoss.moe_tp, gptoss.moe_ep) == ("fp4", "nvfp4", 2, 1)
    assert (gptoss.measured_ttft_ms, gptoss.measured_tpot_ms) == (40.0, 5.0)
    assert [r.measured_on for r in rows] == [None, date(2025, 10, 29), None, date(2026, 3, 27), None]


def test_plain_latency_column_names_and_missing_ids(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text(HEADER + "h100_sxm,vllm,meta-llama/Llama-3.1-8B,128,16,2,1,,30,4\n")
    (row,) = read_measured(path)
    assert (row.id, row.pp, row.attn_dp, row.moe_tp) == ("line2", 1, 1, 1)
    assert (row.measured_ttft_ms, row.measured_tpot_ms) == (30.0, 4.0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("h100_sxm,vllm,m,128,16,two,1,1,30,4\n", ":2: concurrency]"),
        ("h100_sxm,vllm,m,128,16,2,1,1,30,-4\n", ":2: tpot_ms]"),
        ("h100_sxm,vllm,,128,16,2,1,1,30,4\n", ":2: model]"),
        ("h100_sxm,vllm,m,128,16,2,0,1,30,4\n", ":2: tp]"),
        ("h100_sxm,vllm,m,128,16,2,1,1,30,4,last tuesday\n", ":2: measured]"),
    ],
)
def test_a_bad_cell_names_file_line_and_field(tmp_path, body, message):
    path = tmp_path / "bad.csv"
    path.write_text(HEADER.replace("\n", ",measured\n") + body)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        read_measured(path)
    assert str(path) in str(err.value)


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("system,backend,model,isl,osl,concurrency,tp,ttft_ms\nh100_sxm,vllm,m,1,1,1,1,3\n")
    with pytest.raises(ConfigError, match="missing column measured_tpot_ms or tpot_ms"):
        read_measured(path)
    path.write_text("system,model\n")
    with pytest.raises(ConfigError, match=r"missing column\(s\) backend, isl, osl, concurrency, tp"):
        read_measured(path)
