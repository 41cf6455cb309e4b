"""CUDA-graph batch padding: each backend's captured sizes, and a pass priced at the size it runs."""

import json

import numpy as np
import pytest

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.backends import BACKEND_PROFILES, BACKENDS
from aisimulate.perf import AnalyticPerfModel, BatchArrays, BatchShape, ParallelShape
from aisimulate.perf.cli import main
from aisimulate.perf.cuda_graphs import padded_batch, padded_batches

H200 = get_system("h200_sxm")
QWEN_MOE = get_model("Qwen/Qwen3-30B-A3B")


def sizes(backend, max_batch_size=None):
    return BACKEND_PROFILES[backend].cuda_graphs.capture_sizes(max_batch_size)


def moe_model(backend, *, padded=True):
    graphs = sizes(backend) if padded else ()
    return AnalyticPerfModel(QWEN_MOE, H200, ParallelShape(tp=2), backend=backend, cuda_graph_sizes=graphs)


def decode(n, context=1000):
    return BatchShape(decode_requests=n, decode_context_tokens=n * context)


def test_each_backend_captures_its_documented_sizes():
    vllm, sglang, trtllm = sizes("vllm"), sizes("sglang"), sizes("trtllm")
    assert vllm[:6] == (1, 2, 4, 8, 16, 24) and vllm[-3:] == (480, 496, 512)
    assert 248 in vllm and 256 in vllm and 264 not in vllm and 272 in vllm  # step 16 from 256
    assert sglang[:7] == (1, 2, 4, 8, 12, 16, 24) and sglang[-2:] == (496, 512)
    assert 264 not in sglang and 272 in sglang
    assert trtllm == (1, 2, 4, *range(8, 129, 8))
    # A user's maximum cuts the ladder and is captured itself; 0 is an eager engine.
    assert sizes("vllm", 10) == (1, 2, 4, 8, 10)
    assert sizes("sglang", 544)[-2:] == (512, 544)
    assert sizes("trtllm", 256)[-3:] == (128, 192, 256)
    assert all(sizes(b, 0) == () for b in BACKENDS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("largest", [None, 1, 3, 12, 100, 256, 300, 1000])
def test_captured_sizes_ascend_without_repeats_up_to_the_largest(backend, largest):
    captured = sizes(backend, largest)
    assert list(captured) == sorted(set(captured))
    assert captured[0] == 1 and captured[-1] == (
        largest or BACKEND_PROFILES[backend].cuda_graphs.max_batch_size
    )


@pytest.mark.parametrize(
    ("backend", "batch", "runs_at"),
    [
        ("vllm", 3, 4),
        ("vllm", 5, 8),
        ("vllm", 257, 272),
        ("vllm", 513, 513),  # beyond the largest graph: eager, unpadded
        ("sglang", 9, 12),
        ("sglang", 500, 512),
        ("trtllm", 5, 8),
        ("trtllm", 129, 129),
        ("vllm", 0, 0),
    ],
)
def test_a_batch_runs_at_the_next_captured_size(backend, batch, runs_at):
    assert padded_batch(batch, sizes(backend)) == runs_at
    assert padded_batches(np.array([batch]), np.array(sizes(backend), dtype=float))[0] == runs_at
    assert padded_batch(batch, ()) == batch


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_pass_of_five_is_priced_as_eight(backend):
    padded, eager = moe_model(backend), moe_model(backend, padded=False)
    five, eight = padded.explain(decode(5)), padded.explain(decode(8))
    # The layers run the graph of 8; attention reads only the 5 real sequences' KV, and the
    # lm-head projects the real rows.
    assert (five.moe_ms, five.comm_ms) == (eight.moe_ms, eight.comm_ms)
    assert five.attention_ms < eight.attention_ms
    assert eager.explain(decode(5)).gemm_ms < five.gemm_ms < eight.gemm_ms
    assert eager.explain(decode(5)).moe_ms < five.moe_ms
    assert padded.pass_time_ms(decode(5)) > eager.pass_time_ms(decode(5))
    # Beyond the largest graph the pass runs eagerly and is priced as without graphs.
    big = padded.cuda_graph_sizes[-1] + 1
    assert padded.pass_time_ms(decode(big)) == eager.pass_time_ms(decode(big))


def test_only_vllm_pads_a_pass_with_prompt_tokens():
    mixed = BatchShape.from_chunks([(100, 0)], [1000] * 5)  # 105 tokens -> vLLM's graph of 112
    for backend in BACKENDS:
        padded, eager = moe_model(backend), moe_model(backend, padded=False)
        moe_ms = padded.explain(mixed).moe_ms, eager.explain(mixed).moe_ms
        if BACKEND_PROFILES[backend].cuda_graphs.pads == "tokens":
            assert moe_ms[0] > moe_ms[1]
        else:
            assert moe_ms[0] == moe_ms[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_vectorised_and_stretch_prices_pad_as_the_scalar_path(backend):
    perf = moe_model(backend)
    decoders = np.array([0, 1, 3, 5, 9, 130, 300, 600, 5], dtype=float)
    prefill = np.array([64, 0, 0, 0, 0, 0, 0, 0, 100], dtype=float)
    batches = BatchArrays(
        prefill_tokens=prefill,
        prefill_requests=(prefill > 0).astype(float),
        prefill_context_tokens=np.zeros_like(prefill),
        decode_requests=decoders,
        decode_context_tokens=decoders * 800,
    )
    scalar = [
        perf.pass_time_ms(BatchShape.from_chunks([(int(p), 0)] if p else [], [800] * int(d)))
        for p, d in zip(prefill, decoders, strict=True)
    ]
    np.testing.assert_allclose(perf.pass_times_ms(batches), scalar, rtol=1e-12)
    contexts = np.array([5 * 800.0, 5 * 900.0])
    stretch = perf.decode_times_ms(5, 1.0, 0.0, contexts)
    pricer = perf.decode_pricer(5, 1.0, 0.0)
    np.testing.assert_allclose(stretch, [pricer(c) for c in contexts], rtol=1e-12)
    assert stretch[0] == perf.pass_time_ms(decode(5, 800))


def test_the_latency_cli_pads_on_request(capsys):
    argv = ["latency", "--model", "Qwen/Qwen3-30B-A3B", "--system", "h200_sxm", "--tp", "2"]
    argv += ["--decode-batch", "5", "--decode-context", "1000", "--no-async-scheduling", "--json"]

    def total_ms(*extra):
        assert main([*argv, *extra]) == 0
        return json.loads(capsys.readouterr().out)["total_ms"]

    eager, padded = total_ms(), total_ms("--cuda-graph-padding")
    assert padded == pytest.approx(moe_model("vllm").pass_time_ms(decode(5)))
    assert eager == pytest.approx(moe_model("vllm", padded=False).pass_time_ms(decode(5)))
    assert eager < padded
    assert total_ms("--cuda-graph-padding", "--cuda-graph-max-batch-size", "4") == eager
    assert main([*argv, "--cuda-graph-max-batch-size", "4"]) == 2
    assert "needs --cuda-graph-padding" in capsys.readouterr().err
