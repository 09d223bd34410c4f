"""Capacity planner for LLM serving: KV memory, roofline step times, goodput under promises, cost.

The formula functions are the procedural core (scalars or numpy arrays in, same out);
``Scenario`` composes them. Every formula, its units and source: docs/model.md; usage: the README.
"""

from .analysis import INPUTS, RESULTS, analyse
from .errors import ScenarioError
from .fleet import fleet_for_load, fleet_options
from .frame import evaluate_frame
from .memory import (
    blocks_for,
    floor_count,
    kv_bytes_per_token,
    max_requests_contiguous,
    max_requests_paged,
    max_requests_shared_prefix,
    pool_blocks,
    pool_bytes,
    private_blocks,
    shared_blocks,
    weight_bytes,
)
from .roofline import (
    ceiling_rps,
    critical_batch,
    decode_compute_s,
    decode_memory_s,
    decode_share,
    decode_step_s,
    gpu_time_per_request_s,
    prefill_s,
    single_stream_tokens_per_s,
    tpot_at_ceiling_s,
)
from .scenario import Results, Scenario, load_scenario
from .slo import (
    cost_per_million_tokens,
    goodput_rps,
    in_flight,
    max_rate_for_tpot_rps,
    max_rate_for_ttft_rps,
    tpot_at_rate_s,
    ttft_at_rate_s,
)
from .units import format_bytes, format_time, parse_quantity

__version__ = "0.1.0"

__all__ = [
    "INPUTS", "RESULTS", "Results", "Scenario", "ScenarioError", "analyse", "blocks_for", "ceiling_rps",
    "cost_per_million_tokens", "critical_batch", "evaluate_frame", "fleet_for_load", "fleet_options",
    "decode_compute_s", "decode_memory_s", "decode_share",
    "decode_step_s", "floor_count", "format_bytes", "format_time", "goodput_rps", "gpu_time_per_request_s",
    "in_flight", "kv_bytes_per_token", "load_scenario", "max_rate_for_tpot_rps", "max_rate_for_ttft_rps",
    "max_requests_contiguous", "max_requests_paged", "max_requests_shared_prefix", "parse_quantity",
    "pool_blocks", "pool_bytes", "prefill_s", "private_blocks", "shared_blocks", "single_stream_tokens_per_s",
    "tpot_at_ceiling_s", "tpot_at_rate_s", "ttft_at_rate_s", "weight_bytes",
]
