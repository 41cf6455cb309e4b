"""A measured row as the replay that reproduces it: the checkpoint, the worker shape and the
closed-loop synthetic benchmark, or the reason it cannot be replayed.

Model ids resolve through the catalog (``-Instruct`` ids and vendor-quantised checkpoints are
aliases and variants there). The ``precision`` / ``gemm_quant`` / ``moe_quant`` columns pick
the checkpoint: blank means the model's own; otherwise the bundled variant of the same model
whose weights are in that format family. gpt-oss publishes MXFP4 experts only, so its "fp4"
rows are its own checkpoint whatever fp4 flavour the file names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from aisimulate.catalog import ModelSpec, get_model, get_system, list_models
from aisimulate.catalog.backends import BACKENDS
from aisimulate.errors import UnknownNameError
from aisimulate.fidelity.client import (
    client_of,
    sglang_recv_interval,
    trtllm_agg_launch,
    vllm_max_num_batched_tokens,
)
from aisimulate.fidelity.measured import MeasuredRow, RecordedWorkers
from aisimulate.fidelity.sglang_recipes import (
    sglang_recipe_engine,
    sglang_recipe_moe_a2a_backend,
    sglang_single_node_recipe,
)
from aisimulate.perf.calibration import e2e_osl_spread
from aisimulate.replay.plan import DeploymentPlan, EngineSpec, SglangOptions
from aisimulate.workload import LengthDistribution, SyntheticWorkload

# Format family of a quantisation label -> weight dtypes that belong to it, best match first.
FAMILIES: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "fp8": ("fp8", "fp8_block"),
    "fp8_block": ("fp8_block", "fp8"),
    "fp4": ("nvfp4", "mxfp4"),
    "nvfp4": ("nvfp4", "mxfp4"),
    "mxfp4": ("mxfp4", "nvfp4"),
    "int4": ("int4",),
    "int4_wo": ("int4",),  # AIConfigurator's weight-only int4 (W4A16)
}
# vLLM schedules asynchronously by default from 0.14 on (vllm-project/vllm#27614), released on
# 2026-01-17; older releases ran synchronously unless told otherwise, and the benchmark files do
# not record the flag. A row measured before that day cannot have run an asynchronous default.
VLLM_ASYNC_DEFAULT_SINCE = (0, 14)
DEFAULT_MAX_NUM_SEQS: int = EngineSpec.model_fields["max_num_seqs"].default
VLLM_ASYNC_DEFAULT_RELEASED = date(2026, 1, 17)


@dataclass(frozen=True, kw_only=True)
class ReplayCase:
    """What to replay for one row: its aggregated workers, or its prefill and decode pools,
    under the row's closed loop."""

    row: MeasuredRow
    model: str  # the catalog name of the checkpoint that ran
    plan: DeploymentPlan
    workload: SyntheticWorkload


@dataclass(frozen=True, kw_only=True)
class Skipped:
    row: MeasuredRow
    reason: str


def _family(label: str) -> tuple[str, ...] | None:
    return FAMILIES.get(label)


def _checkpoint(row: MeasuredRow, spec: ModelSpec) -> str | Skipped:
    """The catalog name of the checkpoint in the row's precision, or why there is none."""
    labels = {"precision": row.precision, "gemm_quant": row.gemm_quant}
    if spec.is_moe:
        labels["moe_quant"] = row.moe_quant
    for column, label in labels.items():
        if label and _family(label) is None:
            return Skipped(row=row, reason=f"unknown {column} {label!r} (known: {', '.join(FAMILIES)})")
    wanted = row.precision or row.gemm_quant
    if not wanted:
        return spec.name
    family = _family(wanted)
    assert family is not None
    if row.moe_quant and spec.is_moe and set(_family(row.moe_quant) or ()) != set(family):
        return Skipped(
            row=row, reason=f"mixed precision {wanted}/{row.moe_quant} (dense/experts) is not modelled"
        )
    if spec.weight_dtype in family:
        return spec.name
    variants = [get_model(name) for name in list_models()]
    same = [v for v in variants if v.source == spec.source and v.weight_dtype in family]
    if not same:
        return Skipped(row=row, reason=f"no {wanted} checkpoint of {spec.name} in the catalog")
    best = min(same, key=lambda v: (family.index(v.weight_dtype), v.name))
    return best.name


def _engine_shape(shape: RecordedWorkers, spec: ModelSpec, backend: str = "") -> dict[str, int | None]:
    """The engine's parallel fields of a recorded worker shape.

    Our shape (AIConfigurator's and TRT-LLM's) gives a worker ``tp * attention_dp`` GPUs, and
    its MoE spans them all. Some vLLM/SGLang rows record the worker's GPUs as ``tp`` and the
    attention-DP ranks inside it (``tp 4, attention_dp 4, moe_tp 4``: 4 GPUs, one per rank);
    the expert split, which spans the worker's GPUs, tells the two readings apart. A vLLM worker
    with no expert split recorded (``tp 1, attention_dp 4`` or ``tp 4``, ``moe_tp``/``moe_ep`` 0)
    ran vLLM's default, expert parallelism off: its MoE layers are tensor-parallel across all
    DP x TP ranks.
    Expert-parallel ranks that do not divide the experts ran redundant expert slots.
    """
    tp = shape.tp
    moe_tp = shape.moe_tp
    if backend == "vllm" and spec.is_moe and shape.moe_tp == shape.moe_ep == 1:
        moe_tp = shape.tp * shape.attn_dp
    if (
        spec.is_moe
        and shape.attn_dp > 1
        and shape.moe_tp * shape.moe_ep == shape.tp
        and shape.tp % shape.attn_dp == 0
    ):
        tp = shape.tp // shape.attn_dp
    slots = None
    if spec.is_moe and spec.num_experts % shape.moe_ep:
        # Experts that do not divide over the ranks ran with redundant copies (SGLang's GB200
        # DEP48: 256 + 32 = 288, six a rank): the fewest slots the ranks share evenly.
        slots = -(-spec.num_experts // shape.moe_ep) * shape.moe_ep
    return {
        "tp": tp,
        "pp": shape.pp,
        "attention_dp": shape.attn_dp,
        "moe_tp": moe_tp if spec.is_moe else None,
        "moe_ep": shape.moe_ep if spec.is_moe else None,
        "moe_expert_slots": slots,
    }


def _async_scheduling(row: MeasuredRow) -> bool | None:
    """The scheduling mode of the row's vLLM release; None (the engine default) when unknown.

    Without a recorded version, the measurement day still bounds the release: before 0.14 was
    out, every release scheduled synchronously by default.
    """
    if row.backend != "vllm":
        return None
    release = re.match(r"v?(\d+)\.(\d+)", row.backend_version)
    if release is not None:
        return (int(release[1]), int(release[2])) >= VLLM_ASYNC_DEFAULT_SINCE
    if row.measured_on is not None and row.measured_on < VLLM_ASYNC_DEFAULT_RELEASED:
        return False
    return None


def _max_num_seqs(row: MeasuredRow, shape: RecordedWorkers) -> int:
    """Sequences one rank of the role holds at once: the run's own ``max_batch_size`` where its
    recipe names it (InferenceX's TensorRT-LLM recipes cap each decode rank at ``batch<N>``, and
    their users often outnumber the slots: the rest wait for a completion, which is most of
    their TTFT); otherwise room for every user's share, since a row records no other limit."""
    if shape.max_batch is not None:
        return shape.max_batch
    return max(DEFAULT_MAX_NUM_SEQS, -(-row.concurrency // (shape.workers * shape.attn_dp)))


def build_case(
    row: MeasuredRow,
    *,
    osl_spread: float | None = None,
    frontend_latency_ms: float | None = None,
    cuda_graph_padding: bool = False,
) -> ReplayCase | Skipped:
    """The replay of one measured row, or the reason it is skipped (never silently dropped).

    A closed loop of equal-length requests stays in lock-step waves forever in a deterministic
    replay: every user finishes in the same pass and the next wave's prompts prefill together.
    On a real server, client and tokenizer timing noise can split the waves, so that a prompt
    prefills next to running decodes instead; whether it does depends on the scheduler (one
    that prefills every waiting prompt at once merges them again). A client that drew its
    lengths (InferenceX: uniform in [0.8 L, L], see ``aisimulate.fidelity.client``) splits them
    as it did; for a client of fixed lengths, ``osl_spread`` spreads the output lengths by that
    fraction (same mean) to reproduce the split; by default it is the
    backend's value fitted by ``benchmarks/calibrate_e2e.py``. The spread is the client's, so it
    stays here; the frontend latency (client, HTTP, tokenisation) is the server's, so the plan
    leaves it to the backend's calibrated default every replay gets, unless
    ``frontend_latency_ms`` overrides it (as the fit does). A vLLM row schedules the way its
    release did by default. ``cuda_graph_padding`` is the engine switch of that name.
    """
    if row.problem:
        return Skipped(row=row, reason=row.problem)
    if row.measured_ttft_ms is None or row.measured_tpot_ms is None:
        return Skipped(row=row, reason="no measured TTFT or TPOT")
    if row.osl < 2:
        return Skipped(row=row, reason="osl 1 has no token gaps, hence no TPOT")
    if row.backend not in BACKENDS:
        return Skipped(row=row, reason=f"unknown backend {row.backend!r} (known: {', '.join(BACKENDS)})")
    try:
        get_system(row.system)
        spec = get_model(row.model)
    except UnknownNameError as err:
        return Skipped(row=row, reason=str(err))
    checkpoint = _checkpoint(row, spec)
    if isinstance(checkpoint, Skipped):
        return checkpoint
    client = client_of(row)
    isl, osl, spread = client.length(row.isl), client.length(row.osl), 0
    if client.range_ratio is None:
        if osl_spread is None:
            osl_spread = e2e_osl_spread(row.backend)
        spread = round(osl_spread * row.osl)
        if spread:  # clipped symmetrically at 3 sigma, so the mean stays the row's osl
            osl = LengthDistribution(
                mean=row.osl, std=spread, min=row.osl - 3 * spread, max=row.osl + 3 * spread
            )
    limits = {
        # The benchmark's sequences are all it must hold: a server that ran it had room for them.
        "max_model_len": row.isl + row.osl + 3 * spread,
        "async_scheduling": _async_scheduling(row),
        "cuda_graph_padding": cuda_graph_padding,
        "sglang": SglangOptions(scheduler_recv_interval=sglang_recv_interval(row, checkpoint)),
        # Speculative decoding as the run's config set it; no row records the rates its drafts
        # reached: the model's documented acceptance, or its acceptance on random-token prompts
        # where the client sent those (None: the engine's default).
        "nextn": row.nextn,
        "nextn_accept_rates": spec.mtp_accept_rates(row.nextn, random_prompts=client.random_tokens),
    }
    batched_tokens = vllm_max_num_batched_tokens(row, checkpoint)
    if batched_tokens is not None:
        limits["max_num_batched_tokens"] = batched_tokens
    shapes = {"prefill": row.prefill, "decode": row.decode} if row.mode == "disagg" else {"agg": None}
    roles = {}
    for role, recorded in shapes.items():
        shape = recorded or RecordedWorkers(
            tp=row.tp,
            pp=row.pp,
            attn_dp=row.attn_dp,
            moe_tp=row.moe_tp,
            moe_ep=row.moe_ep,
            workers=row.workers,
        )
        roles[role] = EngineSpec(
            **_engine_shape(shape, spec, row.backend),
            replicas=shape.workers,
            max_num_seqs=_max_num_seqs(row, shape),
            **limits,
            **sglang_recipe_engine(row, shape),
            **trtllm_agg_launch(row, -(-row.concurrency // (shape.workers * shape.attn_dp))),
        )
        a2a = sglang_recipe_moe_a2a_backend(row, shape)
        if a2a != "none":
            sglang = roles[role].sglang.model_copy(update={"moe_a2a_backend": a2a})
            roles[role] = roles[role].model_copy(update={"sglang": sglang})
        fields, options = sglang_single_node_recipe(row, checkpoint, shape)
        if fields:
            sglang = roles[role].sglang.model_copy(update=options)
            roles[role] = roles[role].model_copy(update={**fields, "sglang": sglang})
    plan = DeploymentPlan(
        mode="disagg" if row.mode == "disagg" else "agg",
        model=checkpoint,
        system=row.system,
        backend=row.backend,  # type: ignore[arg-type]
        frontend_latency_ms=frontend_latency_ms,
        **roles,
    )
    workload = SyntheticWorkload(
        isl=isl,
        osl=osl,
        num_requests=client.num_prompts(row.concurrency),
        concurrency=row.concurrency,
    )
    return ReplayCase(row=row, model=checkpoint, plan=plan, workload=workload)
