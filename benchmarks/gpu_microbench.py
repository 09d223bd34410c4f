"""Measure how much of a GPU's datasheet peak real kernels reach, as a function of their size.

The roofline in ``capacity`` scales datasheet peaks by efficiency factors. This script measures those factors
on a real GPU with PyTorch, so the curves the model uses (``docs/model.md``) rest on a measurement anyone can
repeat, not on a guess:

- **Memory bandwidth vs bytes read**: a float32 sum over 1 MiB .. 16 GiB (reads every byte once).
- **Matrix products vs tokens per pass**: ``[M, K] x [K, N]`` in bf16 (and fp8 through ``torch._scaled_mm``
  where the GPU has fp8 tensor cores) for the weight shapes of Llama-3-8B and Llama-3-70B, M = 1 .. 16,384.
  Each point gives the achieved FLOP/s (``2 M K N / t``) and the achieved bandwidth
  (``(K N + M K + M N) bytes / t``): small M is a weight read, large M a multiply.
- **Decode attention vs KV bytes**: ``scaled_dot_product_attention`` of one query token per sequence over a
  KV cache (GQA, 32 query / 8 KV heads of 128, bf16) for batches and contexts, as achieved KV bandwidth.

Every kernel is timed inside a CUDA graph (launch overhead removed: engines replay graphs for decode), as the
median of several replays. Run on a machine with an NVIDIA GPU:

    python3 benchmarks/gpu_microbench.py OUT.json

The JSON holds the device, driver, torch version, date and every point; ``validation/`` keeps the runs the
project's efficiency curves were fitted to.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import subprocess
import sys

import torch

DEV = torch.device("cuda")


def graph_time_s(fn, inner: int, replays: int = 7) -> float:
    """Median seconds of one call of ``fn``, timed as ``inner`` calls captured in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    del graph
    return statistics.median(times)


def inner_for(estimate_s: float) -> int:
    """Calls per graph so one replay lasts about 20 ms (at least 1, at most 2,000)."""
    return int(min(2000, max(1, 0.02 / max(estimate_s, 1e-7))))


def bandwidth_points() -> list[dict]:
    points = []
    for log2 in range(20, 35):
        nbytes = 2**log2
        x = torch.rand(nbytes // 4, device=DEV, dtype=torch.float32)
        out = torch.empty((), device=DEV, dtype=torch.float32)
        est = nbytes / 4.0e12 + 5e-6
        t = graph_time_s(lambda x=x, out=out: torch.sum(x, dim=0, out=out), inner_for(est))
        points.append({"bytes": nbytes, "seconds": t, "bytes_per_s": nbytes / t})
        del x
        torch.cuda.empty_cache()
    return points


#: (name, K, N): the weight matrices of one layer (fused QKV, output, fused gate+up, down).
SHAPES = [
    ("llama-3-8b qkv", 4096, 6144), ("llama-3-8b o", 4096, 4096), ("llama-3-8b gate_up", 4096, 28672),
    ("llama-3-8b down", 14336, 4096), ("llama-3-70b gate_up", 8192, 57344), ("llama-3-70b down", 28672, 8192),
]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def matmul_points(fp8: bool) -> list[dict]:
    points = []
    for name, k, n in SHAPES:
        if fp8:
            w = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn)  # row-major N x K, used as K x N column-major
            scale = torch.ones((), device=DEV)
        else:
            w = torch.randn(k, n, device=DEV, dtype=torch.bfloat16)
        for m in TOKENS:
            if fp8 and m % 16:
                continue
            if fp8:
                a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)

                def fn(a=a, w=w, scale=scale):
                    return torch._scaled_mm(a, w.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
                elem = 1
            else:
                a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)

                def fn(a=a, w=w):
                    return a @ w
                elem = 2
            flop = 2.0 * m * k * n
            moved = elem * (k * n + m * k) + 2 * m * n
            est = max(flop / 7e14, moved / 4e12) + 5e-6
            t = graph_time_s(fn, inner_for(est))
            points.append({"shape": name, "m": m, "k": k, "n": n, "seconds": t, "flop_per_s": flop / t,
                           "bytes": moved, "bytes_per_s": moved / t})
            del a
        del w
        torch.cuda.empty_cache()
    return points


def attention_points() -> list[dict]:
    points = []
    heads, kv_heads, dim = 32, 8, 128
    for batch in (1, 8, 32, 128):
        for context in (512, 2048, 8192, 32768):
            if batch * context > 2**20:
                continue
            q = torch.randn(batch, heads, 1, dim, device=DEV, dtype=torch.bfloat16)
            k = torch.randn(batch, kv_heads, context, dim, device=DEV, dtype=torch.bfloat16)
            v = torch.randn_like(k)

            def fn(q=q, k=k, v=v):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            kv_bytes = 2 * batch * kv_heads * context * dim * 2
            t = graph_time_s(fn, inner_for(kv_bytes / 3e12 + 1e-5))
            points.append({"batch": batch, "context": context, "kv_bytes": kv_bytes, "seconds": t,
                           "bytes_per_s": kv_bytes / t})
            del q, k, v
            torch.cuda.empty_cache()
    return points


def smi(query: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(path: str) -> None:
    props = torch.cuda.get_device_properties(0)
    result = {
        "date": dt.date.today().isoformat(), "device": props.name, "multiprocessors": props.multi_processor_count,
        "memory_bytes": props.total_memory, "torch": torch.__version__, "cuda": torch.version.cuda,
        "driver_and_clocks_before": smi("driver_version,clocks.max.sm,clocks.max.mem,power.limit"),
        "method": "CUDA-graph replays, median of 7; see benchmarks/gpu_microbench.py",
    }
    result["bandwidth"] = bandwidth_points()
    print("bandwidth done", flush=True)
    result["matmul_bf16"] = matmul_points(fp8=False)
    print("bf16 done", flush=True)
    try:
        result["matmul_fp8"] = matmul_points(fp8=True)
    except (RuntimeError, TypeError) as exc:  # no fp8 tensor cores (A100) or an older torch
        result["matmul_fp8_error"] = str(exc)[:300]
    print("fp8 done", flush=True)
    result["attention_decode"] = attention_points()
    result["clocks_after"] = smi("clocks.sm,clocks.mem,temperature.gpu,power.draw")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    peak_bw = max(p["bytes_per_s"] for p in result["bandwidth"])
    peak_fl = max(p["flop_per_s"] for p in result["matmul_bf16"])
    print(f"{props.name}: best read {peak_bw / 1e12:.2f} TB/s, best bf16 matmul {peak_fl / 1e12:.0f} TFLOP/s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpu_microbench.json")
