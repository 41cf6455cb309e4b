import numpy as np
import pytest

from aisimulate.errors import ConfigError
from aisimulate.perf import BatchShape, TablePerfModel

CSV = """phase,tokens,active_kv_tokens,context_length,latency_ms
prefill,1000,,,20
prefill,2000,,,50
decode,,0,100,5
decode,,0,1100,7
decode,,10000,100,9
decode,,10000,1100,15
"""


def _decode(model, active, context, n=4):
    return model.pass_time_ms(
        BatchShape(decode_requests=n, decode_context_tokens=n * context, active_kv_tokens=active)
    )


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    return TablePerfModel.from_file(path)


def test_exact_at_measured_points(table):
    assert table.pass_time_ms(BatchShape(prefill_tokens=1000, prefill_requests=1)) == 20
    assert _decode(table, 10000, 1100) == 15


def test_linear_between_and_beyond(table):
    assert table.pass_time_ms(BatchShape(prefill_tokens=1500, prefill_requests=2)) == pytest.approx(35)
    assert table.pass_time_ms(BatchShape(prefill_tokens=3000, prefill_requests=1)) == pytest.approx(80)
    assert _decode(table, 5000, 600) == pytest.approx((5 + 7 + 9 + 15) / 4)
    assert _decode(table, 20000, 100) == pytest.approx(13)  # extrapolated along active KV


def test_decode_floor_is_one_ms(tmp_path):
    path = tmp_path / "fast.csv"
    path.write_text(CSV.replace(",5\n", ",0.1\n").replace(",7\n", ",0.1\n"))
    assert _decode(TablePerfModel.from_file(path), 0, 100) == 1.0


def test_npz_round_trip(tmp_path, table):
    path = tmp_path / "t.npz"
    np.savez(
        path,
        prefill_isl=np.array([1000, 2000]),
        prefill_ttft_ms=np.array([20.0, 50.0]),
        decode_active_kv_tokens=np.array([0, 10000]),
        decode_context_length=np.array([100, 1100]),
        decode_itl=np.array([[5.0, 7.0], [9.0, 15.0]]),
    )
    npz = TablePerfModel.from_file(path)
    for active, context in [(0, 100), (2500, 300), (10000, 1100)]:
        assert _decode(npz, active, context) == pytest.approx(_decode(table, active, context))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (CSV.replace("decode,,10000,1100,15\n", ""), "fill the grid"),
        (CSV.replace("prefill,2000,,,50", "prefill,2000,,,fast"), r"t.csv:3"),
        (CSV.replace("prefill,2000", "warmup,2000"), "phase must be"),
        ("a,b\n1,2\n", "header"),
    ],
)
def test_bad_tables_name_file_and_line(tmp_path, text, match):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        TablePerfModel.from_file(path)


def test_missing_or_wrong_kind_of_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        TablePerfModel.from_file(tmp_path / "nope.csv")
    other = tmp_path / "t.txt"
    other.write_text("x")
    with pytest.raises(ConfigError, match=r"\.csv or \.npz"):
        TablePerfModel.from_file(other)
