"""Scenario inputs several test files start from (one copy, so a change to essay 001's hardware is made once).

Essay 001's sale-day napkin: an 8B model (32 layers, 8 KV heads of 128, 16 GB of fp16 weights) on an 80 GB GPU
with 2 TB/s and 150 TFLOP/s at $2.00/hour, block size 1, 3 ms of step overhead.
"""

#: Essay 001's model, GPU and serving settings, without a workload or a promise.
ESSAY_001_HARDWARE = {
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
    "gpu": {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s", "price_per_hour": 2.0},
    "serving": {"engine": "ideal", "memory_utilization": 0.90, "block_size": 1, "max_model_len": 32768,
                "step_overhead": "3 ms"},
}

#: Essay 001's hardware with its request shape: 1,000 prompt tokens, 300 answer tokens.
ESSAY_001 = {**ESSAY_001_HARDWARE, "workload": {"prompt_tokens": 1000, "output_tokens": 300}}

#: Essay 001 under its promise, TPOT <= 50 ms.
ESSAY_001_TPOT_50 = {**ESSAY_001, "slo": {"tpot": "50 ms"}}

#: A scenario where no request fits: 60k-token prompts in an L4's memory after llama-3-8b's bf16 weights.
NOTHING_FITS = """
name: nothing fits, llama-3-8b bf16 on 1 x L4 with 60k-token prompts
model: {name: llama-3-8b, weight_dtype: bf16, kv_dtype: bf16}
gpu: {name: l4}
serving: {memory_utilization: 0.90, block_size: 16, max_model_len: 65536, step_overhead: "2 ms"}
workload: {prompt_tokens: 60000, output_tokens: 500, arrival_rate: 0.1}
slo: {tpot: "100 ms"}
"""


def promise_too_tight(arrival_line: str = "") -> str:
    """Essay 001's hardware with a TPOT promise of 5 ms that no load keeps (one sequence alone needs 11 ms);
    ``arrival_line`` adds e.g. ``", arrival_rate: 3"`` to the workload."""
    return f"""
name: promise too tight, essay 001 hardware with TPOT 5 ms
model: {{layers: 32, kv_heads: 8, head_dim: 128, params: 8e9, weights: "16 GB", kv_dtype: fp16}}
gpu: {{memory: "80 GB", bandwidth: "2 TB/s", flops: "150 TFLOP/s", price_per_hour: 2.0}}
serving: {{engine: ideal, memory_utilization: 0.90, block_size: 16, max_model_len: 4096, step_overhead: "3 ms"}}
workload: {{prompt_tokens: 1000, output_tokens: 300{arrival_line}}}
slo: {{tpot: "5 ms", ttft: "1 s"}}
"""
