"""Model architectures: bundled HF ``config.json`` facts, local configs, and derived numbers.

A bundled file holds the publisher's config plus our index data (name, aliases, quantised
variants). Derived facts (parameter counts, weight bytes, KV bytes per token) live here so every
layer above computes them the same way.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.dtypes import (
    KV_BYTES_PER_ELEMENT,
    STATE_BYTES_PER_ELEMENT,
    WEIGHT_BYTES_PER_PARAM,
)
from aisimulate.errors import ConfigError, UnknownNameError

_DENSE_TYPES = {"llama", "qwen3", "qwen2", "mistral"}
_MOE_TYPES = {
    "qwen3_moe",
    "qwen3_5_moe_text",
    "mixtral",
    "gpt_oss",
    "minimax_m2",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k2",
    "glm4_moe",
    "glm_moe_dsa",
}
_MLA_TYPES = {"deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"}
# How unevenly each architecture's router spreads tokens over its experts: the power-law alpha
# AIConfigurator's model of that architecture prices its experts at (aiconfigurator-core 0.12,
# ``_power_law_alpha`` of ``sdk/models``): DeepSeekModel (DeepSeek-V3/R1, Kimi-K2/K2.5) and
# DeepSeekV32Model (DeepSeek-V3.2, GLM-5) route at 1.01; its generic MOEModel (Qwen3, MiniMax-M2,
# gpt-oss, Mixtral) and Qwen35Model at 1.2, which an architecture it has no model of (GLM-4.5) takes.
_ROUTING_ALPHA = {"deepseek_v3": 1.01, "deepseek_v32": 1.01, "kimi_k2": 1.01, "glm_moe_dsa": 1.01}
_GENERIC_ROUTING_ALPHA = 1.2
# Multimodal wrappers whose language model sits in `text_config` (that is what is served).
_WRAPPER_TYPES = {"kimi_k25": "kimi_k2", "qwen3_5_moe": "qwen3_5_moe_text"}
# The DSA indexer caches its keys as fp8 with one fp32 scale per 128 values, whatever the KV
# dtype: vLLM's DeepseekV32IndexerCache and SGLang's NSA/DSA token pool
# (index_head_dim + index_head_dim // 128 * 4 bytes, uint8).
_INDEXER_QUANT_BLOCK = 128
# FlashMLA's sparse fp8 layout (vLLM `fp8_ds_mla`, SGLang's NSA fp8 pool): the latent in fp8 with
# one fp32 scale per 128 values, the rope key in bf16 -- 656 bytes for DeepSeek-V3.2.
_SPARSE_MLA_FP8_TILE = 128
_HF_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_QUANT_SCOPES = ("all_linear", "mlp", "experts")


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamCounts:
    """Parameters by where they live, because each part is split differently over GPUs."""

    attention_per_layer: int
    dense_mlp_per_layer: int
    expert_per_expert: int  # one routed expert (gate, up, down) of one MoE layer
    shared_expert_per_layer: int
    router_per_layer: int
    embedding: int
    lm_head: int
    mtp_per_layer: int  # one multi-token-prediction module, excluding shared embedding/head
    # Parts of the attention above, because engines place them differently:
    indexer_per_layer: int = 0  # DSA indexer (wq_b, wk, weights_proj), inside attention_per_layer
    linear_attention_per_layer: int = 0  # one Gated DeltaNet layer's mixer, in place of attention


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Architecture facts of one checkpoint. Sizes are per model, not per GPU."""

    name: str
    source: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_context_tokens: int
    # MLA (DeepSeek-style latent attention); zero when the model uses GQA/MHA.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE; zero experts means dense.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    # Width of one shared expert where it differs from the routed ones (Qwen's
    # `shared_expert_intermediate_size`); 0 = `moe_intermediate_size`.
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0  # leading layers with a dense MLP in an MoE model
    # Routing facts (they change quality, not cost): softmax or sigmoid scores, a score-correction
    # bias for top-k choice (DeepSeek's noaux_tc, MiniMax's routing bias), routed-output scaling.
    router_scoring_func: str = "softmax"
    router_score_bias: bool = False
    routed_scaling_factor: float = 1.0
    # DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): a lightning indexer of
    # `index_n_heads` x `index_head_dim` scores every cached token, and MLA then attends to the
    # best `index_topk` only.
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # Hybrid linear attention (Qwen3.5's Gated DeltaNet): these layers keep a fixed-size
    # recurrent state per request instead of a KV cache.
    num_linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    linear_state_dtype: str = "fp32"  # the recurrent state (config `mamba_ssm_dtype`)
    attn_output_gate: bool = False  # full attention gates its output: q_proj is twice as wide
    # QK norm over all heads at once (MiniMax-M2's `qk_norm_type: per_layer`): under tensor
    # parallelism every layer all-reduces each token's q and k variances.
    qk_norm_across_heads: bool = False
    # Sliding-window attention (gpt-oss): those layers keep at most `sliding_window` tokens.
    sliding_window: int = 0
    num_sliding_layers: int = 0
    num_nextn_layers: int = 0
    # Documented mean tokens a decode step emits with 1, 2, ... MTP draft tokens (the catalog
    # entry's `mtp_accepted_tokens`, with its source); empty: not documented for this model.
    mtp_accepted_tokens: tuple[float, ...] = ()
    # Acceptance on random-token prompts as a fraction of the documented per-position acceptance
    # (the entry's `mtp_random_prompt_acceptance`: fitted, with what it was fitted on); 1: none.
    mtp_random_prompt_acceptance: float = 1.0
    weight_dtype: str = "bf16"
    base_dtype: str = "bf16"
    # Which linear layers carry `weight_dtype`: all_linear, mlp (attention stays in base_dtype) or
    # experts (routed experts only); see `linear_dtype`.
    quant_scope: str = "all_linear"
    checkpoint_kv_dtype: str | None = None
    note: str | None = None

    # ---- speculative decoding ----------------------------------------------------------
    def mtp_accept_rates(self, nextn: int, *, random_prompts: bool = False) -> list[float] | None:
        """Per-position conditional acceptance of ``nextn`` chained MTP drafts, from the documented
        accepted lengths; None when the model documents none (the engine's default applies).

        Draft i is accepted with the product of the first i rates, so the mean tokens per step at
        depth k is 1 + the sum of those products, the length documented at k. Depths beyond the
        documented ones repeat the last step's ratio. ``random_prompts``: the prompts are random
        tokens (a benchmark's random dataset), each rate scaled by the model's
        ``mtp_random_prompt_acceptance``."""
        lengths = self.mtp_accepted_tokens
        if not nextn or not lengths:
            return None
        reach = [b - a for a, b in itertools.pairwise((1.0, *lengths))]
        rates = [reach[0]] + [b / a if a > 0 else 0.0 for a, b in itertools.pairwise(reach)]
        rates += [rates[-1]] * (nextn - len(rates))
        scale = self.mtp_random_prompt_acceptance if random_prompts else 1.0
        return [scale * rate for rate in rates[:nextn]]

    # ---- shape facts -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_routing_alpha(self) -> float:
        """The power-law skew of this architecture's expert routing (``_ROUTING_ALPHA``)."""
        return _ROUTING_ALPHA.get(self.model_type, _GENERIC_ROUTING_ALPHA)

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_full_attention_layers(self) -> int:
        """Layers with a KV cache that grows with context (no sliding-window or linear layers)."""
        return self.num_layers - self.num_sliding_layers - self.num_linear_attention_layers

    @property
    def is_sparse_attention(self) -> bool:
        return self.index_topk > 0

    @property
    def is_hybrid_linear(self) -> bool:
        return self.num_linear_attention_layers > 0

    @property
    def shared_expert_width(self) -> int:
        """Intermediate width of all shared experts of one MoE layer together."""
        return self.num_shared_experts * (self.shared_expert_intermediate_size or self.moe_intermediate_size)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the causal convolution over q, k and v of a Gated DeltaNet layer."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token and layer: K and V heads, or the MLA latent plus rope key."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    # ---- parameters ---------------------------------------------------------------------
    @functools.cached_property
    def params(self) -> ParamCounts:
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk
                if self.q_lora_rank
                else h * self.num_heads * qk
            )
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv += self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            attn = q + kv + self.num_heads * self.v_head_dim * h
        else:
            # A gated output doubles q_proj: queries and their sigmoid gates (Qwen3.5).
            q_width = (2 if self.attn_output_gate else 1) * self.num_heads * self.head_dim
            attn = h * (q_width + 2 * self.num_kv_heads * self.head_dim)
            attn += self.num_heads * self.head_dim * h
        indexer = 0
        if self.is_sparse_attention:
            # Indexer queries from the q latent, one shared key, and per-head weights.
            idx = self.index_n_heads * self.index_head_dim
            indexer = (self.q_lora_rank or h) * idx + h * self.index_head_dim + h * self.index_n_heads
            attn += indexer
        expert = 3 * h * self.moe_intermediate_size
        shared = 3 * h * self.shared_expert_width
        moe_layer = self.num_experts * expert + shared + h * self.num_experts
        mtp_mlp = moe_layer if self.is_moe else 3 * h * self.intermediate_size
        return ParamCounts(
            attention_per_layer=attn,
            dense_mlp_per_layer=3 * h * self.intermediate_size,
            expert_per_expert=expert,
            shared_expert_per_layer=shared,
            router_per_layer=h * self.num_experts,
            embedding=self.vocab_size * h,
            lm_head=0 if self.tie_word_embeddings else self.vocab_size * h,
            mtp_per_layer=attn + mtp_mlp + 2 * h * h,
            indexer_per_layer=indexer,
            linear_attention_per_layer=self._gated_deltanet_params(),
        )

    def _gated_deltanet_params(self) -> int:
        """One Gated DeltaNet mixer: q/k/v and output-gate projections, the per-head decay and
        beta projections, the depthwise convolution, and the output projection."""
        if not self.is_hybrid_linear:
            return 0
        h, nv = self.hidden_size, self.linear_num_value_heads
        in_proj = h * (self.linear_conv_dim + self.linear_value_dim + 2 * nv)
        conv = self.linear_conv_dim * self.linear_conv_kernel_dim
        return in_proj + conv + 2 * nv + self.linear_value_head_dim + self.linear_value_dim * h

    @property
    def attention_params(self) -> int:
        """Attention weights of all layers: full, sliding and linear-attention mixers."""
        p = self.params
        full = self.num_layers - self.num_linear_attention_layers
        return full * p.attention_per_layer + self.num_linear_attention_layers * p.linear_attention_per_layer

    def _mlp_params(self, experts_counted: int) -> int:
        p = self.params
        dense = (self.num_layers if not self.is_moe else self.num_dense_layers) * p.dense_mlp_per_layer
        per_moe = experts_counted * p.expert_per_expert + p.shared_expert_per_layer + p.router_per_layer
        return dense + self.num_moe_layers * per_moe

    @property
    def total_params(self) -> int:
        """All weights of the main model (the optional MTP modules are not included)."""
        p = self.params
        return self.attention_params + self._mlp_params(self.num_experts) + p.embedding + p.lm_head

    @property
    def active_params(self) -> int:
        """Weights one token touches: routed experts count top-k times, the embedding once."""
        p = self.params
        return (
            self.attention_params
            + self._mlp_params(self.experts_per_token)
            + p.lm_head
            + (p.embedding if p.lm_head == 0 else 0)
        )

    def linear_dtype(self, *, expert: bool, attention: bool = False) -> str:
        """Storage dtype of a linear layer's weights in this checkpoint.

        `quant_scope` says which layers the checkpoint quantised: `all_linear`; `mlp` (every MLP
        and expert, attention kept in the base dtype, as NVIDIA's NVFP4 GLM-5 and Kimi-K2.5); or
        `experts` (routed experts only, as gpt-oss's MXFP4 and Kimi-K2.5's INT4).
        """
        if self.quant_scope == "experts" and not expert:
            return self.base_dtype
        if self.quant_scope == "mlp" and attention:
            return self.base_dtype
        return self.weight_dtype

    @property
    def weight_bytes(self) -> float:
        """Checkpoint size of the main model, embeddings and lm-head in the base dtype."""
        p = self.params
        base = WEIGHT_BYTES_PER_PARAM[self.base_dtype]
        routed = self.num_moe_layers * self.num_experts * p.expert_per_expert
        attention = self.attention_params
        other_linear = self.total_params - routed - attention - p.embedding - p.lm_head
        return (
            routed * WEIGHT_BYTES_PER_PARAM[self.linear_dtype(expert=True)]
            + attention * WEIGHT_BYTES_PER_PARAM[self.linear_dtype(expert=False, attention=True)]
            + other_linear * WEIGHT_BYTES_PER_PARAM[self.linear_dtype(expert=False)]
            + (p.embedding + p.lm_head) * base
        )

    # ---- KV cache -----------------------------------------------------------------------
    def resolve_kv_dtype(self, kv_cache_dtype: str = "auto", backend: str = "vllm") -> str:
        """Resolve ``kv_cache_dtype: auto``.

        TRT-LLM follows the checkpoint's declared KV quantisation (ModelOpt's
        ``kv_cache_quant_algo``); vLLM and SGLang keep the model's activation dtype unless told
        otherwise (``--kv-cache-dtype fp8``), as their ``auto`` does.
        """
        if kv_cache_dtype != "auto":
            if kv_cache_dtype not in KV_BYTES_PER_ELEMENT:
                raise ConfigError(
                    f"kv_cache_dtype must be one of auto, {', '.join(KV_BYTES_PER_ELEMENT)}, "
                    f"but got {kv_cache_dtype!r}",
                    where="kv_cache_dtype",
                )
            return kv_cache_dtype
        if backend_profile(backend).auto_kv_dtype == "checkpoint" and self.checkpoint_kv_dtype:
            return self.checkpoint_kv_dtype
        return self.base_dtype

    def kv_bytes_per_token_per_layer(self, kv_dtype: str = "bf16") -> float:
        """Cache bytes of one token in one full-attention layer, without the DSA indexer keys."""
        if self.is_mla and self.is_sparse_attention and kv_dtype == "fp8":
            tiles = self.kv_lora_rank // _SPARSE_MLA_FP8_TILE
            return self.kv_lora_rank + 4 * tiles + self.qk_rope_head_dim * KV_BYTES_PER_ELEMENT["bf16"]
        return self.kv_elements_per_token_per_layer * KV_BYTES_PER_ELEMENT[kv_dtype]

    @property
    def indexer_key_bytes_per_token(self) -> float:
        """The DSA indexer's own key cache, per token over all layers (fp8 keys + fp32 scales)."""
        if not self.is_sparse_attention:
            return 0.0
        per_layer = self.index_head_dim + self.index_head_dim // _INDEXER_QUANT_BLOCK * 4
        return float(per_layer * self.num_full_attention_layers)

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """Cache bytes one token occupies in the full-attention layers (the part that grows with
        context), the DSA indexer's keys included."""
        per_layer = self.kv_bytes_per_token_per_layer(kv_dtype)
        return per_layer * self.num_full_attention_layers + self.indexer_key_bytes_per_token

    def linear_state_bytes_per_request(self, state_dtype: str | None = None) -> float:
        """Fixed state one running request holds in the linear-attention layers, whatever its length.

        Per layer: the causal-conv window, `conv_dim x (kernel - 1)` in the activation dtype, and the
        recurrent state, `value_heads x key_head_dim x value_head_dim` in `state_dtype` (default:
        the config's `mamba_ssm_dtype`, fp32 for Qwen3.5). This is what vLLM
        (MambaStateShapeCalculator.gated_delta_net_state_shape; Qwen3.5 sets
        `mamba_ssm_cache_dtype` from `mamba_ssm_dtype`) and SGLang (Mamba2StateShape; conv bf16,
        temporal from `mamba_ssm_dtype`, else fp32) allocate per request slot.
        """
        if not self.is_hybrid_linear:
            return 0.0
        dtype = state_dtype or self.linear_state_dtype
        if dtype not in STATE_BYTES_PER_ELEMENT:
            raise ConfigError(
                f"state dtype must be one of {', '.join(STATE_BYTES_PER_ELEMENT)}, but got {dtype!r}",
                where="state_dtype",
            )
        conv_bytes = STATE_BYTES_PER_ELEMENT[self.base_dtype]
        conv = self.linear_conv_dim * (self.linear_conv_kernel_dim - 1) * conv_bytes
        recurrent = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        per_layer = conv + recurrent * STATE_BYTES_PER_ELEMENT[dtype]
        return float(per_layer * self.num_linear_attention_layers)

    def sliding_kv_bytes_per_sequence(self, kv_dtype: str = "bf16") -> float:
        """KV bytes a sequence holds in sliding-window layers: capped at the window, per sequence."""
        per_token = (
            self.kv_elements_per_token_per_layer * self.num_sliding_layers * KV_BYTES_PER_ELEMENT[kv_dtype]
        )
        return per_token * self.sliding_window

    def with_expert_slots(self, slots: int, *, where: str = "moe_expert_slots") -> ModelSpec:
        """This model as a server holding ``slots`` physical experts per MoE layer: the routed
        experts plus redundant copies of hot ones (EPLB), the load spread over every slot."""
        if not self.is_moe or slots < self.num_experts:
            raise ConfigError(
                f"expert slots need an MoE model and at least its {self.num_experts} experts, "
                f"but got {slots} for {self.name!r}",
                where=where,
            )
        return replace(self, num_experts=slots)

    def with_quantization(
        self,
        *,
        weight_dtype: str | None = None,
        kv_cache_dtype: str | None = None,
        quant_scope: str | None = None,
    ) -> ModelSpec:
        """This architecture in another checkpoint format; `quant_scope` as the checkpoint's
        exclusion list has it (default: 4-bit MoE checkpoints quantise the routed experts only)."""
        if weight_dtype is not None and weight_dtype not in WEIGHT_BYTES_PER_PARAM:
            raise ConfigError(
                f"unknown weight dtype {weight_dtype!r}; known: {', '.join(WEIGHT_BYTES_PER_PARAM)}"
            )
        if quant_scope is not None and quant_scope not in _QUANT_SCOPES:
            raise ConfigError(
                f"quant_scope must be one of {', '.join(_QUANT_SCOPES)}, but got {quant_scope!r}",
                where="quant_scope",
            )
        scope = self.quant_scope
        if weight_dtype in ("nvfp4", "mxfp4", "int4") and self.is_moe:
            scope = "experts"
        elif weight_dtype is not None and weight_dtype not in ("nvfp4", "mxfp4", "int4"):
            scope = "all_linear"
        scope = quant_scope or scope
        return replace(
            self,
            weight_dtype=weight_dtype or self.weight_dtype,
            quant_scope=scope,
            checkpoint_kv_dtype=kv_cache_dtype or self.checkpoint_kv_dtype,
        )


# ---- parsing HF configs -------------------------------------------------------------------


_ATTENTION_PROJ = re.compile(
    r"(self_attn|linear_attn)(\*|\.\*|\.(q_proj|k_proj|v_proj|o_proj|q_a_proj|q_b_proj|"
    r"kv_a_proj_with_mqa|kv_b_proj)\b)"
)


def _scope(excluded: list[str]) -> str:
    """Which layers a checkpoint quantised, from the modules it lists as left unquantised."""
    if any("shared_expert" in name for name in excluded):
        return "experts"
    if any(_ATTENTION_PROJ.search(name) for name in excluded):
        return "mlp"
    return "all_linear"


def _kv_quant(algo: Any) -> str | None:
    return "fp8" if str(algo or "").upper() == "FP8" else None


def _quantization(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> tuple[str, str, str | None]:
    """(weight dtype, quant scope, declared KV dtype) from quantization_config / hf_quant_config."""
    if hf_quant:
        q = hf_quant.get("quantization", hf_quant)
        algo = str(q.get("quant_algo") or "").upper()
        kv = _kv_quant(q.get("kv_cache_quant_algo"))
        scope = _scope(list(q.get("exclude_modules") or []))
        if algo == "NVFP4":
            return "nvfp4", scope, kv
        if algo.startswith("FP8"):
            return ("fp8_block" if "BLOCK" in algo else "fp8"), scope, kv
    qc = config.get("quantization_config") or {}
    method = str(qc.get("quant_method") or "").lower()
    excluded = list(qc.get("modules_to_not_convert") or qc.get("ignore") or qc.get("exclude_modules") or [])
    if method == "mxfp4":
        return "mxfp4", "experts", None
    if method == "fp8":
        return ("fp8_block" if qc.get("weight_block_size") else "fp8"), _scope(excluded), None
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(qc.get("quant_algo") or "").upper()
        kv = _kv_quant(qc.get("kv_cache_quant_algo"))
        if kv is None and (qc.get("kv_cache_scheme") or {}).get("num_bits") == 8:
            kv = "fp8"
        return ("nvfp4" if "FP4" in algo else "fp8"), _scope(excluded), kv
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        for group in groups.values():
            w = group.get("weights") or {}
            if w.get("num_bits") == 8 and w.get("type") == "float":
                return "fp8", _scope(excluded), None
            if w.get("num_bits") == 4 and w.get("type") == "float":
                return "nvfp4", _scope(excluded), None
            if w.get("num_bits") == 4 and w.get("type") == "int":
                # W4A16: int4 weights with a bf16 scale per group, 16-bit activations.
                return "int4", _scope(excluded), None
    return "bf16", "all_linear", None


def _req(config: dict[str, Any], key: str, where: str) -> Any:
    if key not in config:
        raise ConfigError(f"missing field {key!r} in model config", where=where)
    value = config[key]
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"field {key!r} must be >= 0, got {value}", where=where)
    return value


def _check_supported(model_type: str, where: str, *, within: str = "") -> None:
    supported = _DENSE_TYPES | _MOE_TYPES
    if model_type not in supported:
        known = ", ".join(sorted(supported | set(_WRAPPER_TYPES)))
        raise ConfigError(
            f"unsupported model_type {model_type!r}{within} (supported: {known})",
            where=f"{where}: model_type",
        )


def _text_model(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The language model's config of a multimodal wrapper (Kimi-K2.5, Qwen3.5); else the config.

    Top-level facts the text part leaves out (the checkpoint's quantisation, tied embeddings)
    carry over.
    """
    model_type = str(config.get("model_type", ""))
    if model_type not in _WRAPPER_TYPES:
        return config
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(
            f"a {model_type!r} config needs a text_config object", where=f"{where}: text_config"
        )
    merged = dict(text)
    merged.setdefault("model_type", _WRAPPER_TYPES[model_type])
    for key in ("quantization_config", "tie_word_embeddings", "torch_dtype", "dtype"):
        if key in config and key not in merged:
            merged[key] = config[key]
    _check_supported(str(merged["model_type"]), where, within=f" in the text_config of {model_type!r}")
    return merged


def _linear_attention_fields(config: dict[str, Any], num_layers: int, where: str) -> dict[str, Any]:
    """Gated DeltaNet layers of a hybrid model: from `layer_types`, else every layer but each
    `full_attention_interval`-th."""
    layer_types = config.get("layer_types") or []
    linear = sum(1 for t in layer_types if t == "linear_attention")
    interval = int(config.get("full_attention_interval") or 0)
    if not layer_types and interval > 0 and "linear_num_value_heads" in config:
        linear = num_layers - num_layers // interval
    if not linear:
        return {}
    ssm_dtype = str(config.get("mamba_ssm_dtype") or "float32")
    if ssm_dtype not in _HF_STATE_DTYPES:
        raise ConfigError(
            f"mamba_ssm_dtype must be one of {', '.join(_HF_STATE_DTYPES)}, but got {ssm_dtype!r}",
            where=f"{where}: mamba_ssm_dtype",
        )
    return dict(
        num_linear_attention_layers=linear,
        linear_num_key_heads=int(_req(config, "linear_num_key_heads", where)),
        linear_num_value_heads=int(_req(config, "linear_num_value_heads", where)),
        linear_key_head_dim=int(_req(config, "linear_key_head_dim", where)),
        linear_value_head_dim=int(_req(config, "linear_value_head_dim", where)),
        linear_conv_kernel_dim=int(_req(config, "linear_conv_kernel_dim", where)),
        linear_state_dtype=_HF_STATE_DTYPES[ssm_dtype],
    )


def _moe_fields(config: dict[str, Any], where: str) -> dict[str, Any]:
    experts = config.get("n_routed_experts") or config.get("num_experts") or config.get("num_local_experts")
    top_k = config.get("num_experts_per_tok") or config.get("experts_per_token")
    if not experts or not top_k:
        raise ConfigError("an MoE config needs the expert count and experts per token", where=where)
    # Mixtral, gpt-oss and MiniMax name the expert width `intermediate_size`.
    expert_inter = config.get("moe_intermediate_size") or _req(config, "intermediate_size", where)
    shared = int(config.get("n_shared_experts") or 0)
    # Qwen's MoE has one shared expert of its own width (and a sigmoid gate on it).
    shared_inter = int(config.get("shared_expert_intermediate_size") or 0)
    if shared_inter and not shared:
        shared = 1
    dense = int(config.get("first_k_dense_replace") or len(config.get("mlp_only_layers") or []))
    if dense and not config.get("intermediate_size"):
        raise ConfigError("dense MLP layers need the field 'intermediate_size'", where=where)
    return dict(
        num_experts=int(experts),
        experts_per_token=int(top_k),
        moe_intermediate_size=int(expert_inter),
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared_inter if shared_inter != int(expert_inter) else 0,
        num_dense_layers=dense,
        router_scoring_func=str(config.get("scoring_func") or "softmax"),
        router_score_bias=config.get("topk_method") == "noaux_tc" or bool(config.get("use_routing_bias")),
        routed_scaling_factor=float(config.get("routed_scaling_factor") or 1.0),
    )


def parse_hf_config(
    config: dict[str, Any],
    *,
    name: str,
    source: str,
    where: str,
    hf_quant: dict[str, Any] | None = None,
    note: str | None = None,
) -> ModelSpec:
    """Turn a Hugging Face ``config.json`` dict into a :class:`ModelSpec`."""
    config = _text_model(config, where)
    model_type = str(config.get("model_type", ""))
    _check_supported(model_type, where)
    heads = int(_req(config, "num_attention_heads", where))
    hidden = int(_req(config, "hidden_size", where))
    num_layers = int(_req(config, "num_hidden_layers", where))
    weight_dtype, scope, kv_dtype = _quantization(config, hf_quant)
    torch_dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    base = {"float16": "fp16"}.get(torch_dtype, "bf16")
    is_moe = model_type in _MOE_TYPES
    fields: dict[str, Any] = dict(
        name=name,
        source=source,
        model_type=model_type,
        num_layers=num_layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate_size=int(config.get("intermediate_size") or 0)
        if is_moe
        else int(_req(config, "intermediate_size", where)),
        vocab_size=int(_req(config, "vocab_size", where)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        max_context_tokens=int(config.get("max_position_embeddings") or 0),
        num_nextn_layers=int(
            config.get("num_nextn_predict_layers") or config.get("mtp_num_hidden_layers") or 0
        ),
        weight_dtype=weight_dtype,
        base_dtype=base,
        quant_scope=scope,
        checkpoint_kv_dtype=kv_dtype,
        attn_output_gate=bool(config.get("attn_output_gate", False)),
        qk_norm_across_heads=bool(config.get("use_qk_norm")) and config.get("qk_norm_type") == "per_layer",
        note=note,
    )
    if model_type in _MLA_TYPES:
        fields.update(
            q_lora_rank=int(config.get("q_lora_rank") or 0),
            kv_lora_rank=int(_req(config, "kv_lora_rank", where)),
            qk_nope_head_dim=int(_req(config, "qk_nope_head_dim", where)),
            qk_rope_head_dim=int(_req(config, "qk_rope_head_dim", where)),
            v_head_dim=int(_req(config, "v_head_dim", where)),
        )
    if "index_topk" in config:
        fields.update(
            index_n_heads=int(_req(config, "index_n_heads", where)),
            index_head_dim=int(_req(config, "index_head_dim", where)),
            index_topk=int(_req(config, "index_topk", where)),
        )
    if is_moe:
        fields.update(_moe_fields(config, where))
    fields.update(_linear_attention_fields(config, num_layers, where))
    layer_types = config.get("layer_types") or []
    sliding = sum(1 for t in layer_types if t == "sliding_attention")
    if sliding and config.get("sliding_window"):
        fields.update(sliding_window=int(config["sliding_window"]), num_sliding_layers=sliding)
    return ModelSpec(**fields)


# ---- bundled catalog ----------------------------------------------------------------------


def _models_dir() -> Path:
    return Path(str(resources.files("aisimulate.catalog") / "models"))


def _read_json(path: Path, where: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"cannot read JSON: {err}", where=where) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object", where=where)
    return data


def _accepted_tokens(entry: Any, where: str) -> tuple[float, ...]:
    """A catalog entry's documented MTP accepted lengths: ``{"tokens_per_step": [...], "source"}``,
    the mean tokens per decode step at 1, 2, ... drafts (growing, at most drafts + 1)."""
    where = f"{where}: mtp_accepted_tokens"
    if not isinstance(entry, dict) or not entry.get("source"):
        raise ConfigError("expected {tokens_per_step: [...], source: ...}", where=where)
    lengths = entry.get("tokens_per_step")
    if not isinstance(lengths, list) or not lengths:
        raise ConfigError("tokens_per_step must be a non-empty list", where=where)
    previous = 1.0
    for depth, length in enumerate(lengths, start=1):
        if not isinstance(length, int | float) or not previous <= length <= depth + 1:
            raise ConfigError(
                f"tokens_per_step[{depth - 1}] = {length!r} must lie in [{previous}, {depth + 1}]",
                where=where,
            )
        previous = float(length)
    return tuple(float(x) for x in lengths)


def _random_prompt_acceptance(entry: Any, where: str) -> float:
    """A catalog entry's fitted acceptance on random-token prompts: ``{"scale", "fitted_on"}``,
    the fraction (0, 1] of each documented per-position acceptance."""
    where = f"{where}: mtp_random_prompt_acceptance"
    if not isinstance(entry, dict) or not entry.get("fitted_on"):
        raise ConfigError("expected {scale: ..., fitted_on: ...}", where=where)
    scale = entry.get("scale")
    if not isinstance(scale, int | float) or not 0 < scale <= 1:
        raise ConfigError(f"scale = {scale!r} must lie in (0, 1]", where=where)
    return float(scale)


@functools.cache
def _bundled() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    """(canonical name -> spec, lower-cased lookup key -> canonical name)."""
    specs: dict[str, ModelSpec] = {}
    index: dict[str, str] = {}
    for path in sorted(_models_dir().glob("*.json")):
        entry = _read_json(path, str(path))
        name = entry["name"]
        base = parse_hf_config(
            entry["config"], name=name, source=entry["source"], where=str(path), note=entry.get("note")
        )
        if "mtp_accepted_tokens" in entry:
            accepted = _accepted_tokens(entry["mtp_accepted_tokens"], str(path))
            base = replace(base, mtp_accepted_tokens=accepted)
        if "mtp_random_prompt_acceptance" in entry:
            scale = _random_prompt_acceptance(entry["mtp_random_prompt_acceptance"], str(path))
            base = replace(base, mtp_random_prompt_acceptance=scale)
        specs[name] = base
        for key in [name, path.stem, *entry.get("aliases", [])]:
            index[key.lower()] = name
        for variant, quant in entry.get("variants", {}).items():
            specs[variant] = replace(base.with_quantization(**quant), name=variant)
            index[variant.lower()] = variant
    return specs, index


@dataclass(frozen=True, kw_only=True, slots=True)
class PublisherConfig:
    """The publisher ``config.json`` a bundled checkpoint derives from, and the names it goes by.

    Other tools that resolve models by HF id (AIConfigurator) need the names and the raw config.
    """

    names: tuple[str, ...]  # the checkpoint's own name first, then the base model's names
    config: dict[str, Any]  # the base model's publisher config
    variant: bool  # the checkpoint is a quantised variant of that config


@functools.cache
def publisher_config(name: str) -> PublisherConfig | None:
    """The publisher config behind a bundled model or quantised variant; None for local files."""
    for path in sorted(_models_dir().glob("*.json")):
        entry = _read_json(path, str(path))
        base_names = (entry["name"], *entry.get("aliases", []))
        if name == entry["name"]:
            return PublisherConfig(names=base_names, config=entry["config"], variant=False)
        if name in entry.get("variants", {}):
            return PublisherConfig(names=(name, *base_names), config=entry["config"], variant=True)
    return None


def list_models() -> list[str]:
    """Canonical names of the bundled models and their quantised variants."""
    return sorted(_bundled()[0])


def _load_local(path: Path) -> ModelSpec:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise ConfigError("model folder has no config.json", where=str(path))
    config = _read_json(config_path, str(config_path))
    quant_path = config_path.parent / "hf_quant_config.json"
    hf_quant = _read_json(quant_path, str(quant_path)) if quant_path.is_file() else None
    name = str(config.get("_name_or_path") or config_path.parent.name)
    return parse_hf_config(
        config, name=name, source=f"local file {config_path}", where=str(config_path), hf_quant=hf_quant
    )


def get_model(name_or_path: str | ModelSpec, *, where: str | None = None) -> ModelSpec:
    """A bundled model by HF id, alias or quantised variant; or a local config.json / folder."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    specs, index = _bundled()
    key = name_or_path.strip().lower()
    if key in index:
        return specs[index[key]]
    path = Path(name_or_path).expanduser()
    if path.exists():
        return _load_local(path)
    raise UnknownNameError("model", name_or_path, list(specs), where=where)
