"""Storage sizes of the number formats a checkpoint or KV cache can use.

Block-scaled formats carry their scale factors in the byte count: fp8_block keeps one fp32
scale per 128x128 weight block (DeepSeek-V3 style), nvfp4 one fp8 scale per 16 values, and
mxfp4 one e8m0 scale per 32 values (OCP MX spec). int4 is W4A16 as compressed-tensors packs it
(Kimi-K2.5): symmetric int4 weights with one bf16 scale per group of 32, no zero point; the
GEMMs run in 16 bits after unpacking.
"""

from __future__ import annotations

from typing import Literal

WeightDtype = Literal["bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4"]
KvDtype = Literal["bf16", "fp16", "fp8", "fp4"]
KvDtypeChoice = Literal["auto", "bf16", "fp16", "fp8", "fp4"]

WEIGHT_BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0 + 4.0 / (128 * 128),
    "nvfp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
    "int4": 0.5 + 2.0 / 32,
    # A kernel format, not a checkpoint's: MXFP4 weights with MXFP8 activations (TRT-LLM's
    # Blackwell MoE, ``catalog.backends``); the weights are stored as mxfp4.
    "mxfp4_mxfp8": 0.5 + 1.0 / 32,
}

KV_BYTES_PER_ELEMENT: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16}

# Recurrent (linear-attention) state: kept in fp32 by default, or in the activation dtype.
STATE_BYTES_PER_ELEMENT: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}

# Tensor-core math a weight format runs on when the chip supports it natively.
NATIVE_MATH: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "int4": "bf16",  # W4A16: weight-only kernels unpack to 16 bits before the MMA
    "mxfp4_mxfp8": "fp8",  # W4A8: the MMA takes both operands as MX-scaled fp8
}


def math_dtype(weight_dtype: str, supported: frozenset[str] | set[str]) -> str:
    """The tensor-core dtype GEMMs run in: native if the chip has it, else bf16.

    Chips without native fp8/fp4 (A100, or Hopper for fp4) run such checkpoints through
    weight-only kernels that dequantise to bf16: bf16 math, quantised weight reads.
    """
    native = NATIVE_MATH[weight_dtype]
    return native if native in supported else "bf16"
