"""Parallel shape of one worker and how a model's parts split over its GPUs.

Convention (as in AIConfigurator and TRT-LLM): a worker has ``tp * attention_dp * pp`` GPUs.
Attention runs tensor-parallel over ``tp`` inside each of ``attention_dp`` data-parallel ranks;
the MoE block of a pipeline stage spans all ``tp * attention_dp`` GPUs of that stage, split
``moe_tp`` ways inside each expert and ``moe_ep`` ways over experts, so
``moe_tp * moe_ep == tp * attention_dp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisimulate.catalog.models import ModelSpec
from aisimulate.errors import ConfigError, InfeasibleError


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelShape:
    tp: int = 1
    pp: int = 1
    attention_dp: int = 1
    moe_tp: int | None = None  # None: experts split like the attention (moe_tp = tp * attention_dp)
    moe_ep: int | None = None  # None: 1, or what moe_tp leaves over

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "attention_dp", "moe_tp", "moe_ep"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"`{field} >= 1` must hold, but got {field}={value!r}", where=field)

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.attention_dp

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_stage * self.pp

    @property
    def expert_split(self) -> tuple[int, int]:
        """(moe_tp, moe_ep) with defaults filled in."""
        stage, moe_tp, moe_ep = self.gpus_per_stage, self.moe_tp, self.moe_ep
        if moe_tp is None and moe_ep is None:
            return stage, 1
        if moe_tp is None:
            assert moe_ep is not None
            return max(stage // moe_ep, 1), moe_ep
        if moe_ep is None:
            return moe_tp, max(stage // moe_tp, 1)
        return moe_tp, moe_ep

    def describe(self, *, moe: bool = True) -> str:
        text = f"tp={self.tp}, pp={self.pp}"
        if not moe:
            return text
        moe_tp, moe_ep = self.expert_split
        return f"{text}, attention_dp={self.attention_dp}, moe_tp={moe_tp}, moe_ep={moe_ep}"


def check_shape(model: ModelSpec, shape: ParallelShape) -> None:
    """Raise :class:`InfeasibleError` when the model cannot be split this way."""
    tp = shape.tp
    if model.num_heads % tp:
        raise InfeasibleError(
            f"`num_heads % tp == 0` must hold for model {model.name!r}, but got "
            f"(num_heads={model.num_heads}, tp={tp})",
            where="tp",
        )
    if not model.is_mla and model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise InfeasibleError(
            f"tp must divide num_kv_heads or be a multiple of it for model {model.name!r}, "
            f"but got (num_kv_heads={model.num_kv_heads}, tp={tp})",
            where="tp",
        )
    if shape.pp > model.num_layers:
        raise InfeasibleError(f"pp={shape.pp} exceeds the model's {model.num_layers} layers", where="pp")
    if not model.is_moe:
        if shape.attention_dp > 1 or (shape.moe_tp or 1) > 1 or (shape.moe_ep or 1) > 1:
            raise InfeasibleError(
                f"attention_dp/moe_tp/moe_ep need an MoE model, and {model.name!r} is dense "
                "(use more replicas instead of attention_dp)",
                where="attention_dp",
            )
        return
    moe_tp, moe_ep = shape.expert_split
    if moe_tp * moe_ep != shape.gpus_per_stage:
        raise InfeasibleError(
            f"`moe_tp * moe_ep == tp * attention_dp` must hold, but got "
            f"(moe_tp={moe_tp}, moe_ep={moe_ep}, tp={tp}, attention_dp={shape.attention_dp})",
            where="moe_ep",
        )
    if model.num_experts % moe_ep:
        raise InfeasibleError(
            f"`num_experts % moe_ep == 0` must hold for model {model.name!r}, but got "
            f"(num_experts={model.num_experts}, moe_ep={moe_ep})",
            where="moe_ep",
        )
    if model.moe_intermediate_size % moe_tp:
        raise InfeasibleError(
            f"`moe_intermediate_size % moe_tp == 0` must hold for model {model.name!r}, but got "
            f"(moe_intermediate_size={model.moe_intermediate_size}, moe_tp={moe_tp})",
            where="moe_tp",
        )


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads a GPU stores: split over tp, replicated once tp exceeds the KV heads."""
    return max(model.num_kv_heads // tp, 1)
