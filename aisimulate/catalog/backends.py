"""Serving backends: one profile per engine, read by every layer that differs by backend.

The memory rule and KV dtype default (catalog, perf), the kernel fits, whether the engine has
vLLM's asynchronous-scheduling switch and which batch sizes it captures as CUDA graphs (perf),
the scheduler the replay runs (replay), and the launch command and flags of a deployment (spica)
all come from :data:`BACKEND_PROFILES`. Adding a backend is one entry here, plus, in the layers
whose behaviour is code, the entries its profile names (an admission policy, engine arguments);
tests check that every such table matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from aisimulate.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class CudaGraphRule:
    """The CUDA graphs an engine captures by default. A captured pass replays a graph recorded
    for a fixed batch, so a batch between two captured sizes runs, and costs, as the next larger
    one; past the largest captured size the pass runs eagerly at its own size.

    ``ladder``: (first size, step) segments; each runs from its first size up to the next
    segment's, the last one without end. ``pads``: "tokens" pads the tokens of any pass of at most
    the largest size (vLLM: full graphs for decode batches, piecewise graphs for mixed ones);
    "decode" pads the sequences of decode-only passes (SGLang, TRT-LLM: passes with prompt tokens
    run without graphs)."""

    ladder: tuple[tuple[int, int], ...]
    max_batch_size: int
    pads: Literal["tokens", "decode"]

    def capture_sizes(self, max_batch_size: int | None = None) -> tuple[int, ...]:
        """The captured sizes up to ``max_batch_size`` (None: the engine's default), the largest
        included as the engines add it; 0 captures nothing (eager engine)."""
        top = self.max_batch_size if max_batch_size is None else max_batch_size
        sizes: list[int] = []
        bounds = [first for first, _ in self.ladder[1:]] + [top + 1]
        for (first, step), end in zip(self.ladder, bounds, strict=True):
            sizes.extend(range(first, min(end, top + 1), step))
        if top > 0 and (not sizes or sizes[-1] != top):
            sizes.append(top)
        return tuple(sizes)


@dataclass(frozen=True, kw_only=True, slots=True)
class BackendProfile:
    name: str
    # KV budget per GPU: "of_total" = capacity x utilisation - non-KV memory (vLLM, SGLang);
    # "of_free" = (capacity - non-KV memory) x the free-memory fraction (TRT-LLM).
    kv_budget: Literal["of_total", "of_free"]
    # What the "of_total" fraction bounds: everything the engine allocates (vLLM's
    # gpu_memory_utilization: weights, activation peak, KV), or weights and KV only, the
    # activations and CUDA graphs living in the rest (SGLang's mem_fraction_static).
    fraction_covers: Literal["all", "weights_and_kv"]
    # The fraction a server starts with when none is given; None: computed from the GPU and the
    # worker's shape (SGLang, ``perf.memory.sglang_default_memory_fraction``).
    default_memory_fraction: float | None
    # kv_cache_dtype auto: the model's activation dtype, or the checkpoint's declared KV
    # quantisation when it has one (TRT-LLM follows ModelOpt's kv_cache_quant_algo).
    auto_kv_dtype: Literal["activation", "checkpoint"]
    # The engine whose measured kernels price this one's (SGLang runs vLLM-like kernels).
    kernel_backend: str
    # Whether the engine has vLLM's --async-scheduling switch (on unless turned off). The
    # others' overlap schedulers are part of their fitted per-pass overhead.
    async_switch: bool
    # The replay's admission policy (``replay.scheduler.POLICIES``) and pass shape: "mixed"
    # passes decode and prefill together (vLLM, TRT-LLM); "extend_or_decode" passes do one or the
    # other (SGLang).
    admission: str
    passes: Literal["mixed", "extend_or_decode"]
    # The batch sizes its decode passes run at (CUDA-graph padding).
    cuda_graphs: CudaGraphRule
    # Disaggregated serving: fixed latency of each prefill -> decode KV hand-off besides its bytes
    # (the request's extra hops, the transfer's setup, the decode scheduler picking the KV up).
    # Fitted: the median measured - replayed TTFT of the development split's disaggregated rows
    # of at most 16 users, rounded to 10 ms (docs/fidelity.md, "Disaggregated TTFT").
    kv_handoff_ms: float
    # Disaggregated serving: whether a context rank sends one prompt's KV at a time, each send
    # taking ``kv_send_ms`` plus the bytes at ``kv_send_gbps`` (GB/s per GPU; None: the link's
    # rate) after the sends the rank started before it. TensorRT-LLM's context executor sends
    # the KV of one request at a time unless TRTLLM_PARALLEL_CACHE_SEND=1 (default 0: its
    # disaggregated-service guide); the two costs are fitted (docs/fidelity.md, "TRT-LLM
    # disaggregated: one KV send at a time").
    serial_kv_send: bool = False
    kv_send_ms: float = 0.0
    kv_send_gbps: float | None = None
    # Asynchronous scheduling (``async_switch`` engines with it on): a request's first token
    # reaches the client this many passes (of the pass that computed it) after that pass ends.
    # Fitted on the development split's aggregated vLLM rows of asynchronous releases (0.17-0.19),
    # whose measured TTFT at 4-8 users exceeds the replay by about one prefill pass at 1k and 8k
    # prompts while their TPOT agrees; which part of vLLM's pipeline (output processing behind
    # the next pass, detokenisation and streaming in the API server) it stands for, the rows do
    # not tell (docs/fidelity.md, "vLLM aggregated: the first token comes a pass late").
    async_first_token_lag_passes: float = 0.0
    # Host time per decoder layer of a pass that runs without CUDA graphs: a pass with prompt
    # tokens, where the engine's graphs capture decode-only batches (``cuda_graphs.pads`` =
    # "decode") and no piecewise graphs cover the rest. Such a pass launches every kernel from
    # the host, so it lasts at least layers per pipeline stage x this, however little the GPU
    # has to do. TRT-LLM's PyTorch backend (its graphs run generation-only batches); fitted on
    # the development split's aggregated TRT-LLM rows, whose TTFT at few users has a floor
    # proportional to the layers and independent of the TP size and the prompt length
    # (docs/fidelity.md, "TRT-LLM aggregated: a pass with a prompt runs eagerly"). 0: none
    # (vLLM's piecewise graphs cover mixed passes; SGLang's extend passes are in its fits).
    eager_layer_ms: float = 0.0
    # The fraction of the GPU's bf16 tensor rate FlashInfer's paged-MLA kernel reaches on the
    # absorbed attention of an extend pass that SGLang runs in its piecewise CUDA graph
    # (``replay.sglang_graphs``). Fitted on the development split's aggregated SGLang DeepSeek
    # B300 rows (0.5.10.post1), the only rows that ran it (docs/fidelity.md, "SGLang aggregated on
    # B300: DeepSeek's prompts in the prefill graph"). 0: no engine of the backend runs it.
    graphed_mla_attention_efficiency: float = 0.0
    # The same host time per layer where a pipeline stage is one GPU (tensor parallel and
    # attention DP 1: no collective in its layers). ``eager_layer_ms`` was read off workers of
    # 2-8 GPUs (H100 TP4/TP8 aggregated, DeepSeek's DEP2-DEP4 context workers); TRT-LLM's
    # one-GPU context workers (gb200 gpt-oss-120b, 36 layers) show no floor above their kernels:
    # at one user a 1k prompt's whole TTFT (37.5 ms) leaves its context pass the price of its
    # kernels (16.4 ms at the mean 922 tokens) and no more. Fitted as the largest value that
    # leaves that pass at its kernels (the H100 TP1 aggregated rows lose least at the largest),
    # a bound of the development rows, not a measured launch cost (docs/fidelity.md, "TRT-LLM
    # one-GPU context workers: the eager floor").
    eager_layer_ms_one_gpu: float = 0.0
    # An overlap scheduler on aggregated workers (TRT-LLM's PyTorch executor, on unless
    # ``disable_overlap_scheduler``; AIConfigurator's generator and the recipes leave it on there
    # and turn it off on context workers): the host schedules and launches pass n + 1 while the
    # GPU runs pass n, so a request arriving during pass n joins pass n + 2 (the replay's
    # asynchronous admission), and pass n's tokens are handed out once pass n + 1 is launched: a
    # first token reaches the client this many passes (of the pass that computed it) after that
    # pass ends. None: no overlap scheduler on aggregated workers. Fitted, with the floor below,
    # on the development split's H100 TRT-LLM aggregated rows over 0, 0.5 and 1 (docs/fidelity.md,
    # "TRT-LLM aggregated: the overlap scheduler and the launch's token budget").
    overlap_first_token_lag_passes: float | None = None
    # ``eager_layer_ms`` on such an overlapped aggregated worker: the host prepares an eager pass
    # while the GPU still runs the one before, so less of its launch time shows. None: as others.
    overlap_eager_layer_ms: float | None = None
    # Whether a worker with attention DP hands each new request to its rank holding the fewest
    # requests, whatever rank the router's pick would have been: TensorRT-LLM's PyTorch executor
    # assigns a worker's new requests across its attention-DP ranks by their active requests
    # (Dynamo's router picks the worker only). The replay applies it to the decode workers of a
    # disaggregated deployment, where a capped rank (``max_num_seqs``) would otherwise queue a
    # hand-off that a free rank of the same worker could take.
    balances_attention_dp: bool = False
    # The MoE kernel format a checkpoint's expert format runs in on Blackwell (sm 100+), where the
    # engine does not run the format's own: TensorRT-LLM quantises the activations of MXFP4
    # experts to MXFP8 there and runs W4A8 kernels (``W4A8_MXFP4_MXFP8``, its default for MXFP4
    # checkpoints on Blackwell, both MoE backends; weight-only ``W4A16_MXFP4`` on Hopper:
    # TensorRT-LLM's "Deploying GPT-OSS on TensorRT-LLM" guide, "Using the MXFP4 checkpoints").
    # AIConfigurator's database measures both; at decode sizes the W4A8 kernel is 2-4x faster.
    blackwell_expert_kernels: tuple[tuple[str, str], ...] = ()
    # Expert formats whose tensor-split MoE kernel this backend runs on Blackwell is not the one
    # measured at that split, with the most tokens a pass may route for it to be priced by the
    # measured expert-parallel curve over as many GPUs instead. TensorRT-LLM runs DeepSeek's
    # block-scaled FP8 experts on its own MoE backend there (InferenceX's Blackwell FP8
    # disaggregated recipes set `moe_config.backend: TRTLLM`, `moe_expert_parallel_size: 1` on
    # their TP8 workers, e.g. srt-slurm's recipes/trtllm/b200-fp8/8k1k/stp/
    # ctx1_gen6_tp8_batch16_eplb0_mtp0_96.yaml); AIConfigurator measures block-scaled FP8 experts
    # on Blackwell with DeepGEMM only, whose tensor split (256 intermediate columns a GPU at TP8)
    # costs 1.4-2.2x its expert split of the same GPUs. Up to "a few hundred tokens" a
    # tensor-split MoE layer is bound by reading its weights (TensorRT-LLM tech blog 24, "MoE as
    # Dense GEMM"), as many bytes a GPU as under an expert split; beyond, where the kernel's own
    # math efficiency decides, the measured tensor split keeps its price (512: the last grid
    # point of the measured curves in that range; docs/fidelity.md, "B300 FP8 tensor-split
    # experts").
    tensor_split_experts_as_expert_parallel: tuple[tuple[str, int], ...] = ()
    # Whether a disaggregated deployment's decode workers hide the fitted per-pass overhead
    # behind the kernels (a pass lasts max(kernels, overhead), as under vLLM's asynchronous
    # scheduling): TensorRT-LLM's overlap scheduler prepares step n+1 while the GPU runs step n
    # (on by default; Dynamo's disaggregated TRT-LLM recipes set disable_overlap_scheduler: true
    # on the prefill worker and false on the decode worker, e.g. recipes/gpt-oss-120b/trtllm/
    # disagg), and behind Dynamo the worker streams token ids (the frontend detokenises). The
    # additive overhead was fitted on trtllm-serve's aggregated rows; the GB200 decode workers
    # of gpt-oss-120b measure their kernels alone at 1-128 users (docs/fidelity.md, "TRT-LLM
    # decode workers overlap their overhead"). Not fitted.
    decode_workers_overlap_overhead: bool = False
    # Under attention DP, whether the experts' collectives move the tokens the ranks carry, their
    # time following the sum over the ranks (TensorRT-LLM's CUTLASS MoE all-gathers and
    # reduce-scatters each rank's own count, `sizes=all_rank_num_tokens`: every GPU receives the
    # other ranks' tokens), rather than the busiest rank's times attention_dp (SGLang gathers
    # padded to the largest batch, and DeepEP's dispatch waits for the busiest sender).
    expert_comm_follows_group_sum: bool = False
    # Under attention DP with expert parallelism, whether the experts' tokens move by all-to-all
    # only over more expert ranks than a token has experts and inside one NVLink domain, and are
    # otherwise all-gathered to every rank and reduce-scattered back: TensorRT-LLM's MoE modules
    # (``select_alltoall_method_type`` of its CUTLASS and wide-EP MoE, 1.0-1.2) return
    # ``NotEnabled`` when ``moe_ep_size <= top_k``, pick the multi-node-NVLink all-to-all (MNNVL)
    # where the platform has one, DeepEP only under ``TRTLLM_CAN_USE_DEEP_EP=1`` (default "0"),
    # and else all-gather and reduce-scatter, every GPU receiving every other rank's tokens.
    experts_alltoall_needs_nvlink: bool = False
    # Whether the engine's in-node all-reduce kernel also does the residual add and RMSNorm that
    # follow it, which an all-reduce over GPUs of several nodes (NCCL) then runs as a kernel of
    # its own: TensorRT-LLM's all-reduce op (``allreduceOp.cpp``, 1.0-1.2) fuses them into its
    # one-shot/two-shot kernels and, on its NCCL path, calls ``fallbackRunSubsequentOps``
    # (``residualRmsNorm``, then any quantisation) after ``ncclAllReduce``.
    allreduce_fuses_norm: bool = False
    # Launching it: the standalone command before the model, Dynamo's worker module and service
    # name prefix, the flag that caps the context length, and the flag a prefill worker adds.
    launch_command: tuple[str, ...]
    dynamo_module: str
    service_prefix: str
    context_length_flag: str
    prefill_worker_flag: str | None = None

    def expert_kernel_format(self, weight_dtype: str, sm_version: int) -> str:
        """The format the experts of a ``weight_dtype`` checkpoint run their MoE kernels in."""
        if sm_version >= 100:
            return dict(self.blackwell_expert_kernels).get(weight_dtype, weight_dtype)
        return weight_dtype

    def expert_parallel_price_up_to_tokens(self, kernel_format: str, sm_version: int) -> int:
        """The most routed tokens at which experts of ``kernel_format`` split by tensor parallelism
        take the expert-parallel curve of as many GPUs (0: never;
        ``tensor_split_experts_as_expert_parallel``)."""
        if sm_version < 100:
            return 0
        return dict(self.tensor_split_experts_as_expert_parallel).get(kernel_format, 0)


BACKEND_PROFILES: dict[str, BackendProfile] = {
    "vllm": BackendProfile(
        name="vllm",
        kv_budget="of_total",
        fraction_covers="all",
        default_memory_fraction=0.9,  # --gpu-memory-utilization
        auto_kv_dtype="activation",
        kernel_backend="vllm",
        async_switch=True,
        admission="vllm",
        passes="mixed",
        # vLLM >= 0.11 (VllmConfig._set_cudagraph_sizes; cudagraph_mode FULL_AND_PIECEWISE):
        # [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16) tokens, max = min(2 x
        # max_num_seqs x (1 + speculative tokens), 512): 512 for the default 256 sequences.
        cuda_graphs=CudaGraphRule(
            ladder=((1, 1), (2, 2), (4, 4), (8, 8), (256, 16)), max_batch_size=512, pads="tokens"
        ),
        kv_handoff_ms=260,
        async_first_token_lag_passes=1.0,
        launch_command=("vllm", "serve"),
        dynamo_module="dynamo.vllm",
        service_prefix="Vllm",
        context_length_flag="--max-model-len",
        prefill_worker_flag="--is-prefill-worker",
    ),
    "sglang": BackendProfile(
        name="sglang",
        kv_budget="of_total",
        fraction_covers="weights_and_kv",
        default_memory_fraction=None,  # --mem-fraction-static: ServerArgs' heuristic
        auto_kv_dtype="activation",
        kernel_backend="vllm",
        async_switch=False,
        admission="sglang",
        passes="extend_or_decode",
        # SGLang 0.5 (ServerArgs._generate_cuda_graph_batch_sizes): [1, 2, 4, 8, 12] +
        # range(16, 257, 8) + range(272, 512, 16) + range(512, max + 1, 32) sequences;
        # cuda_graph_max_bs 512 on GPUs of 160 GB and more and from tp 4 on smaller ones (256
        # below tp 4, a difference only for decode batches of 257-512). Extend passes run
        # without graphs (piecewise graphs for them are opt-in).
        cuda_graphs=CudaGraphRule(
            ladder=((1, 1), (2, 2), (4, 4), (8, 4), (16, 8), (256, 16), (512, 32)),
            max_batch_size=512,
            pads="decode",
        ),
        kv_handoff_ms=70,
        graphed_mla_attention_efficiency=0.05,
        launch_command=("python", "-m", "sglang.launch_server", "--model-path"),
        dynamo_module="dynamo.sglang",
        service_prefix="Sglang",
        context_length_flag="--context-length",
    ),
    "trtllm": BackendProfile(
        name="trtllm",
        kv_budget="of_free",
        fraction_covers="all",
        default_memory_fraction=0.9,  # KvCacheConfig.free_gpu_memory_fraction
        auto_kv_dtype="checkpoint",
        kernel_backend="trtllm",
        async_switch=False,
        admission="trtllm",
        passes="mixed",
        # TRT-LLM 1.x PyTorch backend (CudaGraphConfig._generate_cuda_graph_batch_sizes) with
        # enable_padding, as its deployment recipes set it: [1, 2, 4] + multiples of 8 up to 128,
        # max_batch_size 128 unless set; graphs run generation-only batches.
        cuda_graphs=CudaGraphRule(
            ladder=((1, 1), (2, 2), (4, 4), (8, 8), (128, 64)), max_batch_size=128, pads="decode"
        ),
        # Refitted with the eager floor in place (the 90 ms fitted before it double counted the
        # context pass's host time): the median over the development split's TRT-LLM
        # disaggregated rows of at most 16 users whose decode slots do not bind (users below the
        # recipe's slots, or no recipe cap) of measured - replayed TTFT + the hand-off, 29.3 ms
        # over 36 rows (docs/fidelity.md, "TRT-LLM disaggregated: the hand-off under the floor"),
        # less the one KV send of a 1k prompt now priced apart (below).
        kv_handoff_ms=20,
        # The cache transceiver sends one request's KV at a time (TRTLLM_PARALLEL_CACHE_SEND=0).
        # Its cost, fitted on the development gb200 gpt-oss-120b rows (one TP1 context worker,
        # 1k and 8k prompts, replayed without the eager floor): a send costs about 10 ms plus
        # 4.8 ms per 1,000 tokens, the bytes as replayed (bf16 KV, 36.9 KB a token; the recipe
        # ran FP8) at 8 GB/s (docs/fidelity.md, "TRT-LLM disaggregated: one KV send at a time").
        serial_kv_send=True,
        kv_send_ms=10,
        kv_send_gbps=8,
        eager_layer_ms=1.5,
        eager_layer_ms_one_gpu=0.45,
        overlap_first_token_lag_passes=0.5,
        overlap_eager_layer_ms=0.75,
        balances_attention_dp=True,
        blackwell_expert_kernels=(("mxfp4", "mxfp4_mxfp8"),),
        tensor_split_experts_as_expert_parallel=(("fp8_block", 512),),
        decode_workers_overlap_overhead=True,
        expert_comm_follows_group_sum=True,
        experts_alltoall_needs_nvlink=True,
        allreduce_fuses_norm=True,
        launch_command=("trtllm-serve",),
        dynamo_module="dynamo.trtllm",
        service_prefix="Trtllm",
        context_length_flag="--max_seq_len",
    ),
}
BACKENDS: tuple[str, ...] = tuple(BACKEND_PROFILES)

# The backend names as a type (pydantic validates fields against it); built from the registry,
# so a type checker sees a plain string.
if TYPE_CHECKING:
    Backend = str
else:
    Backend = Literal[BACKENDS]


def backend_profile(backend: str, *, where: str = "backend") -> BackendProfile:
    """The profile of ``backend``; an unknown name is the user's mistake, said in one line."""
    profile = BACKEND_PROFILES.get(backend)
    if profile is None:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, but got {backend!r}", where=where)
    return profile
