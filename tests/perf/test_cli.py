import json
import subprocess
import sys

import pytest

from aisimulate.perf.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_memory_json(capsys):
    code, out, _ = run(
        capsys, "memory", "--model", "meta-llama/Llama-3.1-8B", "--system", "h200_sxm", "--tp", "1", "--json"
    )
    assert code == 0
    data = json.loads(out)
    for key in (
        "weights_bytes_per_gpu",
        "kv_bytes_per_token_per_gpu",
        "kv_tokens_per_rank",
        "num_gpu_blocks",
        "feasible",
    ):
        assert key in data
    assert data["kv_bytes_per_token_per_gpu"] == 131072
    assert data["num_gpu_blocks"] == data["kv_tokens_per_rank"] // 64
    assert data["feasible"] is True


def test_latency_json(capsys):
    code, out, _ = run(
        capsys,
        "latency",
        "--model",
        "meta-llama/Llama-3.1-8B",
        "--system",
        "h200_sxm",
        "--prefill-tokens",
        "2048",
        "--decode-batch",
        "64",
        "--decode-context",
        "1024",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    parts = data["breakdown"]
    assert set(parts) >= {"gemm_ms", "attention_ms", "moe_ms", "comm_ms", "overhead_ms"}
    assert data["total_ms"] == pytest.approx(sum(v for k, v in parts.items() if k.endswith("_ms")))


def test_latency_async_scheduling_switch(capsys):
    argv = ("latency", "--model", "meta-llama/Llama-3.1-8B", "--system", "h200_sxm", "--decode-batch", "4")
    _, out, _ = run(capsys, *argv, "--json")
    _, sync_out, _ = run(capsys, *argv, "--no-async-scheduling", "--json")
    default, sync = json.loads(out), json.loads(sync_out)
    assert default["async_scheduling"] is True and sync["async_scheduling"] is False
    assert default["total_ms"] < sync["total_ms"]
    assert default["breakdown"]["overhead_ms"] < sync["breakdown"]["overhead_ms"]


def test_latency_prices_sglang_deepep_experts_on_request(capsys):
    # An SGLang attention-DP decode rank with DeepSeek's FP8 experts over 32 GPUs: DeepEP's own
    # expert kernels (measured apart) against SGLang's default MoE kernel; nothing else moves.
    argv = (
        "latency",
        "--model",
        "deepseek-ai/DeepSeek-R1",
        "--system",
        "gb300",
        "--backend",
        "sglang",
        "--attention-dp",
        "32",
        "--moe-ep",
        "32",
        "--kv-dtype",
        "fp8",
        "--decode-batch",
        "16",
        "--decode-context",
        "2048",
        "--json",
    )
    _, out, _ = run(capsys, *argv)
    default = json.loads(out)
    _, out, _ = run(capsys, *argv, "--moe-a2a-backend", "deepep")
    deepep = json.loads(out)
    assert (default["moe_a2a_backend"], deepep["moe_a2a_backend"]) == ("none", "deepep")
    assert deepep["breakdown"]["moe_ms"] < 0.6 * default["breakdown"]["moe_ms"]
    for part in ("gemm_ms", "attention_ms", "comm_ms", "overhead_ms"):
        assert deepep["breakdown"][part] == default["breakdown"][part]


def test_latency_with_polynomial_provider(capsys):
    code, out, _ = run(
        capsys,
        "latency",
        "--model",
        "qwen3-8b",
        "--system",
        "h100_sxm",
        "--prefill-tokens",
        "1024",
        "--perf",
        "polynomial",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["total_ms"] == pytest.approx(32.49, abs=0.01)


def test_readable_tables(capsys):
    code, out, _ = run(
        capsys,
        "memory",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--system",
        "h200_sxm",
        "--tp",
        "8",
        "--moe-ep",
        "8",
    )
    assert code == 0 and "KV tokens per rank" in out
    code, out, _ = run(
        capsys,
        "latency",
        "--model",
        "qwen3-30b-a3b",
        "--system",
        "h200_sxm",
        "--decode-batch",
        "8",
        "--decode-context",
        "100",
    )
    assert code == 0 and "moe" in out and "total" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["memory", "--model", "llama-9b", "--system", "h200_sxm"], "unknown model"),
        (["memory", "--model", "qwen3-32b", "--system", "h201"], "unknown system"),
        (["memory", "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm", "--tp", "3"], "num_heads % tp"),
        (
            ["latency", "--model", "qwen3-8b", "--system", "h200_sxm", "--decode-batch", "-4"],
            "--decode-batch must be >= 0",
        ),
        (
            ["memory", "--model", "qwen3-8b", "--system", "h200_sxm", "--gpu-memory-utilization", "1.5"],
            "(0, 1]",
        ),
        (["latency", "--model", "qwen3-8b", "--system", "h200_sxm", "--perf", "table"], "perf_table"),
        (
            [
                "latency",
                "--model",
                "qwen3-8b",
                "--system",
                "h200_sxm",
                "--backend",
                "sglang",
                "--async-scheduling",
            ],
            "vLLM's switch",
        ),
        (
            ["latency", "--model", "qwen3-8b", "--system", "h200_sxm", "--moe-a2a-backend", "deepep"],
            "SGLang's switch",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        code = main(argv)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_module_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "aisimulate.perf", "memory", "--model", "nope", "--system", "h200_sxm"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown model 'nope'") and "Traceback" not in proc.stderr
