"""Time a whole Llama-3-8B-shaped forward pass on a real GPU: decode steps by batch and context, and prefills.

What the planner's roofline predicts as ``max(t_mem, t_compute)`` is, on a GPU, a chain of kernels: per layer an
RMSNorm, the fused QKV product, the KV-cache write, attention over the cache, the output product, a residual,
RMSNorm, the fused gate/up product, SiLU x up, the down product and a residual; then the final norm and the
lm_head. This script builds that chain in PyTorch with random bf16 weights of Llama-3-8B's shapes (32 layers,
hidden 4,096, 32 query / 8 KV heads of 128, MLP 14,336, vocabulary 128,256; rotary embeddings left out, they
are elementwise) and times it inside a CUDA graph (launch overhead removed, as engines do for decode), so the
numbers are the GPU-side floor of a step, without an engine's scheduling, sampling or detokenisation:

- decode: one new token for each of B sequences whose caches hold ``context`` tokens;
- prefill: one prompt of P tokens (causal attention over the prompt).

    python3 benchmarks/gpu_decode_step.py OUT.json
"""

from __future__ import annotations

import datetime as dt
import json
import sys

import torch
import torch.nn.functional as F
from gpu_microbench import graph_time_s  # same directory: one timer for both scripts

DEV, DT = torch.device("cuda"), torch.bfloat16
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 32, 4096, 32, 8, 128, 14336, 128256


class Weights:
    def __init__(self) -> None:
        def w(*shape):
            return torch.randn(*shape, device=DEV, dtype=DT) * 0.02
        self.qkv = [w(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM) for _ in range(LAYERS)]
        self.o = [w(HEADS * HEAD_DIM, HIDDEN) for _ in range(LAYERS)]
        self.gate_up = [w(HIDDEN, 2 * MLP) for _ in range(LAYERS)]
        self.down = [w(MLP, HIDDEN) for _ in range(LAYERS)]
        self.norm = torch.ones(HIDDEN, device=DEV, dtype=DT)
        self.embed = w(VOCAB, HIDDEN)
        self.lm_head = w(HIDDEN, VOCAB)

    def bytes(self) -> int:
        tensors = [*self.qkv, *self.o, *self.gate_up, *self.down, self.embed, self.lm_head]
        return sum(t.numel() * t.element_size() for t in tensors)


def mlp(x: torch.Tensor, wt: Weights, layer: int) -> torch.Tensor:
    h = F.rms_norm(x, (HIDDEN,), wt.norm)
    gate, up = (h @ wt.gate_up[layer]).chunk(2, dim=-1)
    return x + (F.silu(gate) * up) @ wt.down[layer]


def decode_step(wt: Weights, tokens: torch.Tensor, caches: list, context: int) -> torch.Tensor:
    batch = tokens.shape[0]
    x = wt.embed[tokens]
    for layer in range(LAYERS):
        h = F.rms_norm(x, (HIDDEN,), wt.norm)
        q, k, v = (h @ wt.qkv[layer]).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        kc, vc = caches[layer]
        kc[:, :, context] = k.view(batch, KV_HEADS, HEAD_DIM)
        vc[:, :, context] = v.view(batch, KV_HEADS, HEAD_DIM)
        a = F.scaled_dot_product_attention(q.view(batch, HEADS, 1, HEAD_DIM), kc, vc, enable_gqa=True)
        x = x + a.reshape(batch, HEADS * HEAD_DIM) @ wt.o[layer]
        x = mlp(x, wt, layer)
    return torch.argmax(F.rms_norm(x, (HIDDEN,), wt.norm) @ wt.lm_head, dim=-1)


def prefill(wt: Weights, tokens: torch.Tensor) -> torch.Tensor:
    p = tokens.shape[0]
    x = wt.embed[tokens]
    for layer in range(LAYERS):
        h = F.rms_norm(x, (HIDDEN,), wt.norm)
        q, k, v = (h @ wt.qkv[layer]).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        a = F.scaled_dot_product_attention(q.view(1, p, HEADS, HEAD_DIM).transpose(1, 2),
                                           k.view(1, p, KV_HEADS, HEAD_DIM).transpose(1, 2),
                                           v.view(1, p, KV_HEADS, HEAD_DIM).transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(p, HEADS * HEAD_DIM) @ wt.o[layer]
        x = mlp(x, wt, layer)
    return torch.argmax(F.rms_norm(x[-1:], (HIDDEN,), wt.norm) @ wt.lm_head, dim=-1)


def main(path: str) -> None:
    torch.manual_seed(0)
    wt = Weights()
    result = {"date": dt.date.today().isoformat(), "device": torch.cuda.get_device_properties(0).name,
              "torch": torch.__version__, "model": "llama-3-8b shapes, random bf16 weights, no rotary",
              "weight_bytes": wt.bytes(), "kv_bytes_per_token": 2 * LAYERS * KV_HEADS * HEAD_DIM * 2,
              "method": "one CUDA graph per shape (gpu_microbench.graph_time_s), median of 5 replays",
              "decode": [], "prefill": []}
    with torch.inference_mode():
        for context in (512, 2048):
            for batch in (1, 8, 32, 64, 128, 256):
                if batch * context > 2**19:
                    continue
                caches = [(torch.zeros(batch, KV_HEADS, context + 1, HEAD_DIM, device=DEV, dtype=DT),
                           torch.zeros(batch, KV_HEADS, context + 1, HEAD_DIM, device=DEV, dtype=DT))
                          for _ in range(LAYERS)]
                tokens = torch.randint(0, VOCAB, (batch,), device=DEV)
                t = graph_time_s(lambda tokens=tokens, caches=caches, context=context:
                                 decode_step(wt, tokens, caches, context), inner=1, replays=5)
                result["decode"].append({"batch": batch, "context": context, "seconds": t})
                print(f"decode B={batch} c={context}: {t * 1e3:.2f} ms", flush=True)
                del caches
                torch.cuda.empty_cache()
        for p in (128, 512, 2048, 8192):
            tokens = torch.randint(0, VOCAB, (p,), device=DEV)
            t = graph_time_s(lambda tokens=tokens: prefill(wt, tokens), inner=1, replays=5)
            result["prefill"].append({"prompt_tokens": p, "seconds": t})
            print(f"prefill P={p}: {t * 1e3:.2f} ms", flush=True)
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpu_decode_step.json")
