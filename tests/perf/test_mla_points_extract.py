"""The MLA prefill points the MLA fits are fitted on, extracted from a tiny database in
AIConfigurator's layout (CSV instead of parquet)."""

import csv

from tests.scripts import load_script

COLUMNS = ("kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step")
COLUMNS += ("latency",)
ROWS = [
    ("default", "bfloat16", "fp8", 128, 1, 8192, 0, 1.627),  # kept
    ("default", "bfloat16", "bfloat16", 128, 1, 8192, 0, 1.925),  # kept, the bf16 cache
    ("default", "bfloat16", "fp8", 4, 1, 8192, 0, 0.09),  # 4 heads a GPU: DeepSeek beyond TP 16
    ("default", "bfloat16", "fp8", 128, 1, 16, 0, 0.02),  # 16 prompt tokens: launch-bound
    ("default", "fp8", "fp8", 128, 1, 8192, 0, 1.2),  # an fp8 MLA kernel: not the one served
    ("default", "bfloat16", "fp8", 128, 64, 64, 0, 0.350853),  # in the held-out sample
]


def test_points_keep_served_kernels_and_leave_the_held_out_sample_out(tmp_path):
    script = load_script("benchmarks/extract_mla_points.py")
    table = tmp_path / "b300_sxm" / "mla" / "trtllm" / "1.3.0rc20" / "context_mla_perf.csv"
    table.parent.mkdir(parents=True)
    with table.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(ROWS)
    points = script.extract(tmp_path)
    assert sorted((p["kv_dtype"], p["latency_ms"]) for p in points) == [("bf16", 1.925), ("fp8", 1.627)]
    assert {(p["system"], p["backend"], p["isl"], p["num_heads"]) for p in points} == {
        ("b300_sxm", "trtllm", 8192, 128)
    }
