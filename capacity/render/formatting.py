"""Human-readable values with units, shared by the command line, the app and reports."""

from __future__ import annotations

import math

from capacity.inputs.units import format_bytes, format_time
from capacity.model.analysis import RESULTS
from capacity.model.speculative import SPEC_RESULTS
from capacity.model.split_pools import SPLIT_RESULTS
from capacity.planning.sizing import SIZING_RESULTS


def format_value(key: str, value: float | str | bool | None, binary: bool = False) -> str:
    """Format result ``key`` with its unit from ``RESULTS`` or ``sizing.SIZING_RESULTS`` (bytes as GB or GiB, seconds
    as ms or s, money with its period)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or not math.isfinite(value):
        return "n/a"
    unit = (RESULTS.get(key) or SIZING_RESULTS.get(key) or SPLIT_RESULTS.get(key) or SPEC_RESULTS.get(key)
            or ("",))[0]
    if unit in ("GPUs", "replicas"):
        return f"{value:,.0f} {unit}"
    if unit == "W":
        return f"{value:,.0f} W"
    if unit in ("kWh", "kW"):
        return f"{value:,.3g} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    if unit in ("$/h", "$/month"):
        return f"${value:,.2f}{unit[1:]}"
    if unit == "B":
        return format_bytes(value, binary=binary)
    if unit == "s":
        return format_time(value)
    if unit in ("blocks", "requests") and key != "goodput_in_flight":
        return f"{value:,.0f} {unit}"
    if unit == "$":
        return f"${value:,.3f}"
    if unit in ("-", "x"):
        return f"{value:,.3f}" if unit == "-" else f"{value:,.1f}x"
    return f"{value:,.2f} {unit}"


#: Results grouped the way the table and the app present them.
SECTIONS: dict[str, list[str]] = {
    "Memory": ["kv_bytes_per_token", "weight_bytes_per_gpu", "pool_bytes", "pool_blocks", "blocks_per_request",
               "shared_blocks", "private_blocks"],
    "Concurrency": ["max_requests_contiguous", "max_requests_paged", "max_requests_shared_prefix", "batch_max",
                    "batch_limit"],
    "Roofline": ["context_tokens", "decode_memory_s", "decode_compute_s", "decode_step_s", "decode_bound",
                 "prefill_tokens", "prefill_s", "critical_batch", "single_stream_tokens_per_s"],
    "Ceiling": ["gpu_time_per_request_s", "ceiling_rps", "output_tokens_per_s_at_ceiling", "decode_share",
                "tpot_at_ceiling_s", "batching_gain"],
    "Promise": ["max_rate_for_tpot_rps", "max_rate_for_ttft_rps", "goodput_rps", "goodput_limit",
                "goodput_in_flight", "tpot_at_goodput_s", "ttft_at_goodput_s", "capacity_given_up",
                "output_tokens_per_s_at_goodput"],
    "Load": ["load_fraction", "tpot_at_load_s", "ttft_at_load_s"],
    "Closed loop": ["closed_loop_throughput_rps", "closed_loop_tokens_per_s", "closed_loop_load_fraction",
                    "closed_loop_batch", "closed_loop_tpot_s", "closed_loop_ttft_s", "closed_loop_slot_wait_s"],
    "Cost": ["cost_per_million_tokens", "cost_per_million_tokens_at_ceiling"],
    "Power": ["replica_power_watts", "energy_per_million_tokens_kwh", "energy_cost_per_million_tokens",
              "energy_cost_per_hour"],
}

#: The answer (``sizing.Sizing``): the layout chosen, the fleet, the load per replica and the cost, after the results.
ANSWER_SECTION: list[str] = list(SIZING_RESULTS)


#: Base unit -> (human unit, factor to divide by) for exports in human units: one unit per kind, so a sweep's
#: column keeps one unit on every row. Bytes follow the scenario's ``units`` (GB = 1e9 B or GiB = 2^30 B).
HUMAN_UNITS: dict[str, tuple[str, float]] = {"s": ("ms", 1e-3), "B/s": ("GB/s", 1e9), "FLOP/s": ("TFLOP/s", 1e12)}


def human_unit(unit: str, binary: bool = False) -> tuple[str, float]:
    """The human unit of a base unit and the factor a base value is divided by: B -> GB (1e9) or GiB (2^30),
    s -> ms, B/s -> GB/s, FLOP/s -> TFLOP/s; any other unit stays (factor 1)."""
    if unit == "B":
        return ("GiB", 2.0**30) if binary else ("GB", 1e9)
    return HUMAN_UNITS.get(unit, (unit, 1.0))


#: Byte counts per token or per value stay in bytes in human units (131,072 B, not 0.0001311 GB).
SMALL_BYTES = frozenset({"kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "kv_bytes_per_value"})


def human_unit_of(key: str, unit: str, binary: bool = False) -> tuple[str, float]:
    """``human_unit`` for quantity ``key``, except the per-token and per-value byte counts (``SMALL_BYTES``)."""
    return (unit, 1.0) if key in SMALL_BYTES else human_unit(unit, binary)


def human_number(value: float, significant: int = 4) -> float:
    """``value`` rounded to ``significant`` digits, whole numbers kept whole: 60.908206 -> 60.91, 40.264 -> 40.26,
    123456.7 -> 123457. Non-finite values pass through."""
    if not math.isfinite(value) or value == 0:
        return value
    digits = max(0, significant - 1 - math.floor(math.log10(abs(value))))
    return round(value, digits)


def to_human(value: float, unit: str, binary: bool = False) -> tuple[float, str]:
    """A base-unit value in its human unit, rounded by ``human_number``: (60908206489.6, 'B') -> (60.91, 'GB')."""
    name, factor = human_unit(unit, binary)
    return human_number(value / factor), name
