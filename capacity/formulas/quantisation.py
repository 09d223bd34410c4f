"""Weight quantisation schemes: bytes per weight with their scales, what stays 16-bit, which tensor cores run.

A dtype (``weight_dtype: int4``) says one number per weight; a scheme (``model.quantization: w4a16-gptq``) says
what a checkpoint of that format really holds and runs:

* **bytes per quantised weight, scales included.** GPTQ and AWQ pack eight 4-bit weights in an int32 and keep,
  per group of ``group_size`` input channels and per output channel, one fp16 scale and one 4-bit zero point
  (``qweight``/``qzeros``/``scales`` tensors of the AutoGPTQ and AutoAWQ formats): ``0.5 + (2 + 0.5) / g`` B.
  NVFP4 stores E2M1 values with one FP8 (E4M3) scale per 16 values (plus one fp32 per tensor, negligible):
  ``0.5 + 1/16`` B (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025).
  MXFP4 (OCP Microscaling Formats v1.0) stores E2M1 values with one E8M0 scale per 32: ``0.5 + 1/32`` B.
  FP8 and int8 keep one scale per channel or tensor: 1 B.
* **what stays in 16 bit.** Quantisers leave the token embedding and the output head (``lm_head``) in bf16/fp16
  (llm-compressor and AutoGPTQ/AutoAWQ quantise the decoder's Linear layers only; ModelOpt's FP8/NVFP4
  checkpoints list ``lm_head`` under ``exclude_modules``). Their size is ``vocab x hidden`` each (one when tied).
* **the tensor cores the matmuls use.** Weight-only schemes (W4A16, W8A16) dequantise to bf16 and run bf16
  matmuls (Marlin, Machete kernels); W8A8-fp8 runs fp8 tensor cores where the GPU has them (A100 has none:
  vLLM runs FP8 checkpoints there as W8A16 with the Marlin kernel); W8A8-int8 runs int8; NVFP4/MXFP4 run fp4
  tensor cores on Blackwell, and elsewhere as W4A16.

Without a scheme the dtype convention of the essays holds (every parameter x the dtype's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas.memory import routed_expert_params  # noqa: F401  (re-exported: specs)

#: Bytes of one 16-bit weight (embeddings and lm_head of a quantised checkpoint).
SIXTEEN_BIT = 2.0


@dataclass(frozen=True, slots=True)
class Scheme:
    """One weight format: bytes per quantised weight (scales included), matmul peak key, fallback peak key."""

    key: str
    bytes_per_weight: float
    flops_key: str            # catalog FLOP/s key of the tensor cores the matmuls run on
    fallback_flops_key: str   # where the GPU lacks ``flops_key`` (e.g. fp8 on A100: W8A16 on bf16 cores)
    storage_dtype: str        # the dtype name that describes it (for display and the KV default)
    description: str
    experts_only: bool = False  # only the routed experts quantised; attention, shared experts, dense MLPs 16 bit


def _group(bits: float, group: int, scale_bytes: float) -> float:
    return bits / 8.0 + scale_bytes / group


SCHEMES: dict[str, Scheme] = {s.key: s for s in (
    Scheme("bf16", 2.0, "flops_bf16", "flops_bf16", "bf16", "16-bit weights, bf16 tensor cores"),
    Scheme("fp16", 2.0, "flops_bf16", "flops_bf16", "fp16", "16-bit weights, fp16 tensor cores"),
    Scheme("fp8", 1.0, "flops_fp8", "flops_bf16", "fp8",
           "W8A8 fp8 (per-channel/tensor scales); A100 and older run it as W8A16 on bf16 cores"),
    Scheme("w8a8-int8", 1.0, "flops_int8", "flops_bf16", "int8", "W8A8 int8 (SmoothQuant-style), int8 tensor cores"),
    Scheme("w8a16", 1.0, "flops_bf16", "flops_bf16", "int8", "weight-only int8, dequantised to bf16 matmuls"),
    Scheme("w4a16-gptq", _group(4, 128, 2.5), "flops_bf16", "flops_bf16", "int4",
           "GPTQ int4, group 128: fp16 scale + 4-bit zero per group; bf16 matmuls (Marlin)"),
    Scheme("w4a16-awq", _group(4, 128, 2.5), "flops_bf16", "flops_bf16", "int4",
           "AWQ int4, group 128: fp16 scale + 4-bit zero per group; bf16 matmuls (Marlin)"),
    Scheme("nvfp4", _group(4, 16, 1.0), "flops_fp4", "flops_bf16", "fp4",
           "NVFP4: E2M1 + FP8 scale per 16 values; fp4 tensor cores on Blackwell, else W4A16"),
    Scheme("mxfp4", _group(4, 32, 1.0), "flops_fp4", "flops_bf16", "fp4",
           "MXFP4: E2M1 + E8M0 scale per 32 values; fp4 tensor cores on Blackwell, else W4A16"),
    # Kimi K2 / K2.5 as released: compressed-tensors pack-quantized, int4 symmetric (no zero point), one bf16
    # scale per group of 32, on the routed experts only (quantization_config ignores lm_head, self_attn,
    # shared_experts and the dense MLP): 0.5 + 2/32 B per expert weight, bf16 matmuls (Marlin MoE kernels).
    Scheme("w4a16-int4-g32", _group(4, 32, 2.0), "flops_bf16", "flops_bf16", "int4",
           "int4 weight-only, group 32, symmetric (Kimi K2/K2.5): routed experts only, the rest bf16; bf16 matmuls",
           experts_only=True),
)}

#: The scheme an engine profile reads a plain ``weight_dtype`` as (a checkpoint of that dtype as engines load it).
SCHEME_FOR_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "w8a8-int8", "int4": "w4a16-gptq",
                    "fp4": "nvfp4"}


def embedding_params(vocab_size: ArrayLike, hidden_size: ArrayLike, tied: ArrayLike) -> np.ndarray:
    """Parameters of the token embedding and the output head: ``vocab x hidden x (1 if tied else 2)`` [params]."""
    return np.asarray(vocab_size, float) * np.asarray(hidden_size, float) * np.where(np.asarray(tied, bool), 1.0, 2.0)


def weight_bytes(params: ArrayLike, bytes_per_weight: ArrayLike, sixteen_bit_params: ArrayLike = 0.0) -> np.ndarray:
    """Weights of a quantised checkpoint: ``(N - N_16) x b + N_16 x 2`` [B].

    ``N`` all parameters, ``N_16`` those kept in 16 bit (embeddings, lm_head), ``b`` the scheme's bytes per
    weight with its scales. Llama-3.1-8B as GPTQ int4 (g128): N_16 = 2 x 128,256 x 4,096 = 1.05e9, so
    (8.03e9 - 1.05e9) x 0.5195 + 1.05e9 x 2 = 5.73e9 B, where 8.03e9 x 0.516 = 4.14e9 B counts all as int4.
    """
    n, n16 = np.asarray(params, float), np.asarray(sixteen_bit_params, float)
    return (n - n16) * np.asarray(bytes_per_weight, float) + n16 * SIXTEEN_BIT


def flops_key(scheme: Scheme, available: set[str] | frozenset[str]) -> str:
    """The catalog FLOP/s key the scheme's matmuls use on a GPU whose catalog entry has the keys ``available``."""
    return scheme.flops_key if scheme.flops_key in available else scheme.fallback_flops_key
