"""Model architectures: bundled HF ``config.json`` facts, local configs, and derived numbers.

A bundled file holds the publisher's config plus our index data (name, aliases, quantised
variants). Derived facts (parameter counts, weight bytes, KV bytes per token) live here so every
layer above computes them the same way.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from aisimulate.catalog.backends import backend_profile
from aisimulate.catalog.dtypes import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM
from aisimulate.errors import ConfigError, UnknownNameError

_DENSE_TYPES = {"llama", "qwen3", "qwen2", "mistral"}
_MOE_TYPES = {"qwen3_moe", "mixtral", "gpt_oss", "minimax_m2", "deepseek_v3", "kimi_k2", "glm4_moe"}
_MLA_TYPES = {"deepseek_v3", "kimi_k2"}


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
    num_dense_layers: int = 0  # leading layers with a dense MLP in an MoE model
    # Sliding-window attention (gpt-oss): those layers keep at most `sliding_window` tokens.
    sliding_window: int = 0
    num_sliding_layers: int = 0
    num_nextn_layers: int = 0
    weight_dtype: str = "bf16"
    base_dtype: str = "bf16"
    quant_scope: str = "all_linear"  # or "experts": only routed experts are quantised
    checkpoint_kv_dtype: str | None = None
    note: str | None = None

    # ---- shape facts -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

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
            attn = h * self.head_dim * (self.num_heads + 2 * self.num_kv_heads)
            attn += self.num_heads * self.head_dim * h
        expert = 3 * h * self.moe_intermediate_size
        moe_layer = self.num_experts * expert + self.num_shared_experts * expert + h * self.num_experts
        mtp_mlp = moe_layer if self.is_moe else 3 * h * self.intermediate_size
        return ParamCounts(
            attention_per_layer=attn,
            dense_mlp_per_layer=3 * h * self.intermediate_size,
            expert_per_expert=expert,
            shared_expert_per_layer=self.num_shared_experts * expert,
            router_per_layer=h * self.num_experts,
            embedding=self.vocab_size * h,
            lm_head=0 if self.tie_word_embeddings else self.vocab_size * h,
            mtp_per_layer=attn + mtp_mlp + 2 * h * h,
        )

    def _mlp_params(self, experts_counted: int) -> int:
        p = self.params
        dense = (self.num_layers if not self.is_moe else self.num_dense_layers) * p.dense_mlp_per_layer
        per_moe = experts_counted * p.expert_per_expert + p.shared_expert_per_layer + p.router_per_layer
        return dense + self.num_moe_layers * per_moe

    @property
    def total_params(self) -> int:
        """All weights of the main model (the optional MTP modules are not included)."""
        p = self.params
        return (
            self.num_layers * p.attention_per_layer
            + self._mlp_params(self.num_experts)
            + p.embedding
            + p.lm_head
        )

    @property
    def active_params(self) -> int:
        """Weights one token touches: routed experts count top-k times, the embedding once."""
        p = self.params
        attn = self.num_layers * p.attention_per_layer
        return (
            attn
            + self._mlp_params(self.experts_per_token)
            + p.lm_head
            + (p.embedding if p.lm_head == 0 else 0)
        )

    def linear_dtype(self, *, expert: bool) -> str:
        """Storage dtype of a linear layer's weights in this checkpoint."""
        if self.quant_scope == "experts" and not expert:
            return self.base_dtype
        return self.weight_dtype

    @property
    def weight_bytes(self) -> float:
        """Checkpoint size of the main model, embeddings and lm-head in the base dtype."""
        p = self.params
        base = WEIGHT_BYTES_PER_PARAM[self.base_dtype]
        routed = self.num_moe_layers * self.num_experts * p.expert_per_expert
        other_linear = self.total_params - routed - p.embedding - p.lm_head
        return (
            routed * WEIGHT_BYTES_PER_PARAM[self.linear_dtype(expert=True)]
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

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """KV bytes one token occupies in the full-attention layers (the part that grows with context)."""
        elements = self.kv_elements_per_token_per_layer * self.num_full_attention_layers
        return elements * KV_BYTES_PER_ELEMENT[kv_dtype]

    def sliding_kv_bytes_per_sequence(self, kv_dtype: str = "bf16") -> float:
        """KV bytes a sequence holds in sliding-window layers: capped at the window, per sequence."""
        per_token = (
            self.kv_elements_per_token_per_layer * self.num_sliding_layers * KV_BYTES_PER_ELEMENT[kv_dtype]
        )
        return per_token * self.sliding_window

    def with_quantization(
        self, *, weight_dtype: str | None = None, kv_cache_dtype: str | None = None
    ) -> ModelSpec:
        if weight_dtype is not None and weight_dtype not in WEIGHT_BYTES_PER_PARAM:
            raise ConfigError(
                f"unknown weight dtype {weight_dtype!r}; known: {', '.join(WEIGHT_BYTES_PER_PARAM)}"
            )
        scope = self.quant_scope
        if weight_dtype in ("nvfp4", "mxfp4") and self.is_moe:
            scope = "experts"
        elif weight_dtype is not None and weight_dtype not in ("nvfp4", "mxfp4"):
            scope = "all_linear"
        return replace(
            self,
            weight_dtype=weight_dtype or self.weight_dtype,
            quant_scope=scope,
            checkpoint_kv_dtype=kv_cache_dtype or self.checkpoint_kv_dtype,
        )


# ---- parsing HF configs -------------------------------------------------------------------


def _quantization(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> tuple[str, str, str | None]:
    """(weight dtype, quant scope, declared KV dtype) from quantization_config / hf_quant_config."""
    if hf_quant:
        q = hf_quant.get("quantization", hf_quant)
        algo = str(q.get("quant_algo") or "").upper()
        kv = "fp8" if str(q.get("kv_cache_quant_algo") or "").upper() == "FP8" else None
        if algo == "NVFP4":
            return "nvfp4", "all_linear", kv
        if algo.startswith("FP8"):
            return ("fp8_block" if "BLOCK" in algo else "fp8"), "all_linear", kv
    qc = config.get("quantization_config") or {}
    method = str(qc.get("quant_method") or "").lower()
    if method == "mxfp4":
        return "mxfp4", "experts", None
    if method == "fp8":
        return ("fp8_block" if qc.get("weight_block_size") else "fp8"), "all_linear", None
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(qc.get("quant_algo") or "").upper()
        kv = "fp8" if str(qc.get("kv_cache_quant_algo") or "").upper() == "FP8" else None
        return ("nvfp4" if "FP4" in algo else "fp8"), "all_linear", kv
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        for group in groups.values():
            w = group.get("weights") or {}
            if w.get("num_bits") == 8 and w.get("type") == "float":
                return "fp8", "all_linear", None
            if w.get("num_bits") == 4 and w.get("type") == "float":
                return "nvfp4", "all_linear", None
    return "bf16", "all_linear", None


def _req(config: dict[str, Any], key: str, where: str) -> Any:
    if key not in config:
        raise ConfigError(f"missing field {key!r} in model config", where=where)
    value = config[key]
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"field {key!r} must be >= 0, got {value}", where=where)
    return value


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
    model_type = str(config.get("model_type", ""))
    if model_type not in _DENSE_TYPES | _MOE_TYPES:
        known = ", ".join(sorted(_DENSE_TYPES | _MOE_TYPES))
        raise ConfigError(
            f"unsupported model_type {model_type!r} (supported: {known})", where=f"{where}: model_type"
        )
    heads = int(_req(config, "num_attention_heads", where))
    hidden = int(_req(config, "hidden_size", where))
    weight_dtype, scope, kv_dtype = _quantization(config, hf_quant)
    base = {"float16": "fp16"}.get(str(config.get("torch_dtype", "bfloat16")), "bf16")
    fields: dict[str, Any] = dict(
        name=name,
        source=source,
        model_type=model_type,
        num_layers=int(_req(config, "num_hidden_layers", where)),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate_size=int(_req(config, "intermediate_size", where)),
        vocab_size=int(_req(config, "vocab_size", where)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        max_context_tokens=int(config.get("max_position_embeddings") or 0),
        num_nextn_layers=int(config.get("num_nextn_predict_layers") or 0),
        weight_dtype=weight_dtype,
        base_dtype=base,
        quant_scope=scope,
        checkpoint_kv_dtype=kv_dtype,
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
    if model_type in _MOE_TYPES:
        experts = (
            config.get("n_routed_experts") or config.get("num_experts") or config.get("num_local_experts")
        )
        top_k = config.get("num_experts_per_tok") or config.get("experts_per_token")
        if not experts or not top_k:
            raise ConfigError("an MoE config needs the expert count and experts per token", where=where)
        # Mixtral, gpt-oss and MiniMax name the expert width `intermediate_size`.
        expert_inter = config.get("moe_intermediate_size") or config["intermediate_size"]
        fields.update(
            num_experts=int(experts),
            experts_per_token=int(top_k),
            moe_intermediate_size=int(expert_inter),
            num_shared_experts=int(config.get("n_shared_experts") or 0),
            num_dense_layers=int(config.get("first_k_dense_replace") or 0),
        )
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
