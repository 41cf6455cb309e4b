"""``python -m aisimulate.perf``: memory and pass latency of one parallel shape.

    python -m aisimulate.perf memory  --model meta-llama/Llama-3.1-8B --system h200_sxm --tp 1
    python -m aisimulate.perf latency --model meta-llama/Llama-3.1-8B --system h200_sxm \\
        --prefill-tokens 2048 --decode-batch 64 --decode-context 1024 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from aisimulate.catalog import get_model, get_system
from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.dtypes import KV_BYTES_PER_ELEMENT
from aisimulate.cli_args import CliParser
from aisimulate.errors import ConfigError
from aisimulate.perf.memory import BACKENDS, MemoryEstimate, estimate_memory
from aisimulate.perf.model import BatchShape
from aisimulate.perf.providers import PROVIDERS, async_scheduling_for, get_perf_model
from aisimulate.perf.shape import ParallelShape

GIB = 2**30


def _count(name: str, minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{name} must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"--{name} must be >= {minimum}, got {value}")
        return value

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpu-memory-utilization must be a number, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"--gpu-memory-utilization must be in (0, 1], got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="python -m aisimulate.perf", description="Memory and pass latency of one worker shape."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)
    common = CliParser(add_help=False)
    common.add_argument(
        "--model", required=True, help="HF id, alias, or path to a config.json / model folder"
    )
    common.add_argument("--system", required=True, help="GPU system, e.g. h200_sxm")
    common.add_argument("--backend", default="vllm", choices=BACKENDS)
    common.add_argument("--tp", type=_count("tp", 1), default=1)
    common.add_argument("--pp", type=_count("pp", 1), default=1)
    common.add_argument("--attention-dp", type=_count("attention-dp", 1), default=1)
    common.add_argument("--moe-tp", type=_count("moe-tp", 1), default=None)
    common.add_argument("--moe-ep", type=_count("moe-ep", 1), default=None)
    common.add_argument(
        "--gpu-memory-utilization",
        type=_fraction,
        default=None,
        help="the backend's memory fraction (default: the server's own, raised if it cannot hold the model)",
    )
    common.add_argument("--kv-dtype", default="auto", choices=["auto", *KV_BYTES_PER_ELEMENT])
    common.add_argument("--block-size", type=_count("block-size", 1), default=64)
    common.add_argument("--max-num-batched-tokens", type=_count("max-num-batched-tokens", 1), default=8192)
    common.add_argument("--max-num-seqs", type=_count("max-num-seqs", 1), default=256)
    common.add_argument("--max-model-len", type=_count("max-model-len", 1), default=None)
    common.add_argument("--nextn", type=_count("nextn", 0), default=0, help="MTP draft tokens per step")
    common.add_argument("--json", action="store_true", help="print JSON to stdout instead of a table")
    sub.add_parser("memory", parents=[common], help="KV capacity and memory breakdown per GPU")
    latency = sub.add_parser("latency", parents=[common], help="latency of one prefill/decode/mixed pass")
    latency.add_argument("--prefill-tokens", type=_count("prefill-tokens", 0), default=0)
    latency.add_argument(
        "--prefill-context",
        type=_count("prefill-context", 0),
        default=0,
        help="tokens already cached before the prefill chunk",
    )
    latency.add_argument("--decode-batch", type=_count("decode-batch", 0), default=0)
    latency.add_argument(
        "--decode-context",
        type=_count("decode-context", 0),
        default=0,
        help="context length of each decoding sequence",
    )
    latency.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vLLM: overlap the framework overhead with the pass (default: on for vllm)",
    )
    latency.add_argument(
        "--cuda-graph-padding",
        action="store_true",
        help="price the batch at the next size the backend captures as a CUDA graph",
    )
    latency.add_argument(
        "--cuda-graph-max-batch-size",
        type=_count("cuda-graph-max-batch-size", 1),
        default=None,
        help="with --cuda-graph-padding: the largest captured batch (default: the backend's)",
    )
    latency.add_argument(
        "--kernel-tables",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="analytic: price GEMMs and catalog MoE experts from measured kernel tables (default: off)",
    )
    latency.add_argument(
        "--moe-a2a-backend",
        choices=("none", "deepep"),
        default="none",
        help="sglang: the experts' all-to-all (deepep: DeepEP's own expert kernels, where measured)",
    )
    latency.add_argument("--perf", default="analytic", choices=PROVIDERS)
    latency.add_argument("--perf-table", default=None, help="CSV/NPZ table for --perf table")
    return parser


def _memory(args: argparse.Namespace) -> tuple[Any, Any, ParallelShape, MemoryEstimate]:
    model = get_model(args.model, where="--model")
    system = get_system(args.system, where="--system")
    shape = ParallelShape(
        tp=args.tp, pp=args.pp, attention_dp=args.attention_dp, moe_tp=args.moe_tp, moe_ep=args.moe_ep
    )
    estimate = estimate_memory(
        model,
        system,
        shape,
        backend=args.backend,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_dtype=args.kv_dtype,
        block_size=args.block_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        nextn=args.nextn,
    )
    return model, system, shape, estimate


def run_memory(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    _, _, _, estimate = _memory(args)
    result = estimate.to_dict()
    if not args.json:
        console.print(f"[bold]{estimate.model}[/] on {estimate.system}, {estimate.backend}, {estimate.shape}")
        table = Table()
        table.add_column("per GPU")
        table.add_column("value", justify="right")
        table.add_row("weights", f"{estimate.weights_bytes_per_gpu / GIB:.2f} GiB")
        table.add_row("activations (reserve)", f"{estimate.activation_bytes_per_gpu / GIB:.2f} GiB")
        table.add_row(
            "runtime (CUDA context, graphs, NCCL)", f"{estimate.runtime_overhead_bytes_per_gpu / GIB:.2f} GiB"
        )
        raised = " (raised: the default cannot hold the model)" if estimate.memory_fraction_raised else ""
        table.add_row("memory fraction", f"{estimate.memory_fraction:g}{raised}")
        table.add_row("KV budget", f"{estimate.kv_budget_bytes_per_gpu / GIB:.2f} GiB")
        table.add_row(
            f"KV bytes per token ({estimate.kv_cache_dtype})", f"{estimate.kv_bytes_per_token_per_gpu:,.0f}"
        )
        table.add_row("KV tokens per rank", f"{estimate.kv_tokens_per_rank:,}")
        table.add_row(f"KV blocks ({estimate.block_size} tokens)", f"{estimate.num_gpu_blocks:,}")
        if estimate.state_bytes_per_request_per_gpu:
            table.add_row(
                "recurrent state per request", f"{estimate.state_bytes_per_request_per_gpu / 2**20:.1f} MiB"
            )
            table.add_row("running requests (state pool)", f"{estimate.max_running_requests:,}")
        table.add_row("feasible", "yes" if estimate.feasible else f"no: {estimate.reason}")
        console.print(table)
    return result


def _cuda_graph_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    if args.cuda_graph_max_batch_size is not None and not args.cuda_graph_padding:
        raise ConfigError("--cuda-graph-max-batch-size needs --cuda-graph-padding")
    if not args.cuda_graph_padding:
        return ()
    return backend_profile(args.backend).cuda_graphs.capture_sizes(args.cuda_graph_max_batch_size)


def run_latency(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    async_scheduling = async_scheduling_for(args.backend, args.async_scheduling, name="--async-scheduling")
    if args.moe_a2a_backend != "none" and args.backend != "sglang":
        raise ConfigError(f"--moe-a2a-backend is SGLang's switch, not {args.backend}'s")
    model, system, shape, estimate = _memory(args)
    perf = get_perf_model(
        args.perf,
        model=model,
        system=system,
        shape=shape,
        backend=args.backend,
        kv_cache_dtype=args.kv_dtype,
        nextn=args.nextn,
        async_scheduling=async_scheduling,
        cuda_graph_sizes=_cuda_graph_sizes(args),
        kernel_tables=args.kernel_tables,
        table_path=args.perf_table,
        moe_a2a_backend=args.moe_a2a_backend,
    )
    chunks = [(args.prefill_tokens, args.prefill_context)] if args.prefill_tokens else []
    decode = [args.decode_context] * args.decode_batch
    batch = BatchShape.from_chunks(
        chunks,
        decode,
        tokens_per_step=1.0 + args.nextn,
        active_kv_tokens=sum(decode) + args.prefill_tokens + args.prefill_context,
        kv_capacity_tokens=estimate.kv_tokens_per_rank,
    )
    breakdown = perf.explain(batch).to_dict()
    total = breakdown.pop("total_ms")
    result = {
        "model": model.name,
        "system": system.name,
        "backend": args.backend,
        "shape": shape.describe(moe=model.is_moe),
        "perf_model": perf.name,
        "prefill_tokens": args.prefill_tokens,
        "prefill_context": args.prefill_context,
        "decode_batch": args.decode_batch,
        "decode_context": args.decode_context,
        "nextn": args.nextn,
        "async_scheduling": getattr(perf, "async_scheduling", None),
        "cuda_graph_sizes": list(getattr(perf, "cuda_graph_sizes", ())),
        "moe_a2a_backend": args.moe_a2a_backend,
        "total_ms": total,
        "breakdown": breakdown,
    }
    if not args.json:
        console.print(
            f"[bold]{model.name}[/] on {system.name}, {args.backend}, {result['shape']}, "
            f"perf model {perf.name}"
        )
        table = Table()
        table.add_column("component")
        table.add_column("ms", justify="right")
        for key, value in breakdown.items():
            if value:
                table.add_row(key.removesuffix("_ms"), f"{value:.3f}")
        table.add_row("total", f"{total:.3f}", style="bold")
        console.print(table)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        result = run_memory(args, console) if args.command == "memory" else run_latency(args, console)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    return 0
