"""Which measured deployments of ``silicon_train.csv`` the planner can express as scenarios, and why not the rest.

Each row of the data set (one measured deployment: model, system, precision, parallelism, aggregated or split
prefill/decode pools, prompt and answer lengths) is written as a scenario mapping (``row_mapping``) and read by
``Scenario.from_dict`` (a split-pool row: each pool's scenario, ``capacity.split_pools``). A row is expressible
when every scenario it needs validates with every setting of the row honoured; otherwise the first problem is
its reason, grouped into a short label (``reason_label``).

Column conventions (the data set's, as in aiconfigurator and TensorRT-LLM): ``tp_size`` attention
tensor-parallel GPUs, ``attention_dp_size`` attention data-parallel ranks (GPUs per replica = tp x attention dp
x pp), ``moe_tp_size`` x ``moe_ep_size`` = the same GPUs split for the experts; ``prefill_*`` / ``decode_*`` the
same per pool with ``*_num_workers`` replicas of each pool (1,121 split rows leave the worker counts empty: one
replica of each pool is assumed; the per-replica rates do not depend on it).

Run: ``python -m validation.silicon_expressible [CSV]`` (from the checkout's root); prints the share and the
refused rows by reason.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The data set: the project's copy (validation/silicon/, with its attribution), else the shared original.
DEFAULT_CSV = next((p for p in (Path(__file__).resolve().parent / "silicon" / "silicon_train.csv",
                                Path(__file__).resolve().parents[2] / "shared" / "data" / "silicon_train.csv")
                    if p.exists()), Path(__file__).resolve().parent / "silicon" / "silicon_train.csv")

#: The data set's quantisation modes -> quantisation scheme (``capacity.formulas.quantisation.SCHEMES``). fp8_block
#: (128 x 128 blocks, one fp32 scale per 16,384 weights) is 1 + 4/16384 B per weight: read as fp8.
QUANT_SCHEME = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4", "bf16": "bf16",
                "fp16": "fp16", "int4_wo": "w4a16-int4-g32"}

#: Backend names of the data set -> ``serving.engine``.
ENGINE = {"trtllm": "tensorrt-llm", "sglang": "sglang", "vllm": "vllm"}


def _int(value: Any, default: int = 1) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(number) else int(number)


#: Sources of the data set (``silicon_data_source``: ``source_file=...`` or ``db-dump/...``) that state an aggregated
#: expert-parallel layout with its GPUs multiplied (``restate_layout``).
MULTIPLIED_EP_SOURCES = ("source_file=2026-04-06.csv", "db-dump/")


def restate_layout(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with an aggregated expert-parallel layout of ``MULTIPLIED_EP_SOURCES`` restated as the engine ran it.

    Those two sources write such a layout with the engine's GPUs multiplied (by the EP size, or by the attention DP
    size for vLLM): ``tp_size`` 64, ``moe_tp_size`` 8, ``moe_ep_size`` 8 for SGLang's tp 8 x ep 8;
    ``attention_dp_size`` 64 for TensorRT-LLM's attention DP 8 x ep 8; ``attention_dp_size`` 4, ``moe_ep_size`` 16
    for vLLM's tp 4 x ep 4. The evidence (docs/fidelity.md, "Measured deployments"): their own ids name the layout
    the engine ran (``..._c256_tp8_ep8_965`` for tp 1 x dp 64); 123 of their 356 expert-parallel rows appear again in
    the file's other sources (2026-03-25.csv, the gap analyses) with the same TTFT and TPOT to the last digit, and
    every one of those twins states the smaller layout, GPUs / EP (64/1/8/8 -> 8/1/1/8, 1/64/8/8 -> 1/8/1/8,
    16/1/4/4 -> 4/1/1/4, 4/4/1/16 -> 4/1/1/4); their 357 rows without expert parallelism that have a twin state the
    same layout as it, every one. The engine's GPUs ``G`` are ``moe_tp_size`` where > 1 (else ``tp_size``), all of
    them expert-parallel (``moe_ep_size = G``, ``moe_tp_size = 1``, as every twin states), attention tensor
    parallel over them where ``tp_size`` > 1, else data parallel; the users per engine are unchanged
    (``batch_size x attention_dp_size``, the row's ``silicon_concurrency``), so ``batch_size`` is restated per rank.
    Other rows (and split-pool rows, whose pools state ``moe_tp x ep = tp x dp`` with ``moe_tp`` 1) as they are."""
    source = str(row.get("silicon_data_source") or "")
    ep = _int(row.get("moe_ep_size"))
    if str(row.get("mode")) == "disagg" or ep <= 1 or not any(s in source for s in MULTIPLIED_EP_SOURCES):
        return dict(row)
    tp, dp, moe_tp = _int(row.get("tp_size")), _int(row.get("attention_dp_size")), _int(row.get("moe_tp_size"))
    gpus = moe_tp if moe_tp > 1 else tp
    new_tp, new_dp = (gpus, 1) if tp > 1 else (1, gpus)
    out = {**row, "tp_size": new_tp, "attention_dp_size": new_dp, "moe_tp_size": 1, "moe_ep_size": gpus}
    batch = row.get("batch_size")
    if batch not in (None, "") and not (isinstance(batch, float) and math.isnan(batch)):
        out["batch_size"] = float(batch) * dp / new_dp
    return out


def _layout(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """(gpu overrides, serving overrides) of one engine's parallelism columns (``prefix`` '' or 'prefill_')."""
    tp, pp = _int(row.get(prefix + "tp_size")), _int(row.get(prefix + "pp_size"))
    dp = _int(row.get(prefix + "attention_dp_size"))
    ep, moe_tp = _int(row.get(prefix + "moe_ep_size")), _int(row.get(prefix + "moe_tp_size"), 0)
    serving: dict[str, Any] = {}
    if dp > 1:
        serving["attention_data_parallel"] = dp
    if ep > 1:
        serving["expert_parallel"] = ep
    if moe_tp and ep > 1:
        serving["moe_tensor_parallel"] = moe_tp  # checked against tp x dp / ep by the scenario
    gpu: dict[str, Any] = {"count": tp}
    if pp > 1:
        gpu["pipeline_parallel"] = pp
    return {"gpu": gpu, "serving": serving}


def _model(row: Mapping[str, Any]) -> dict[str, Any]:
    gemm, moe = str(row.get("gemm_quant_mode") or ""), str(row.get("moe_quant_mode") or "")
    scheme = QUANT_SCHEME.get(moe) or QUANT_SCHEME.get(gemm)
    model: dict[str, Any] = {"name": str(row["model_path"])}
    if scheme:
        model["quantization"] = scheme
    elif gemm or moe:
        model["quantization"] = gemm or moe  # unknown: refused with the scheme named
    return model


def row_mapping(row: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario mapping of one aggregated row (split-pool rows: ``pool_mappings``)."""
    layout = _layout(row)
    return {"name": str(row.get("id", "silicon row")), "model": _model(row),
            "gpu": {"name": str(row["system"]), **layout["gpu"]},
            "serving": {"engine": ENGINE.get(str(row.get("backend")), str(row.get("backend"))), **layout["serving"]},
            "workload": {"prompt_tokens": _int(row["isl"]), "output_tokens": _int(row["osl"])}}


def pool_mappings(row: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario mapping of a split-pool row: the base scenario with a ``pools`` section holding each pool's
    GPU and serving overrides and its workers (``capacity.split_pools``)."""
    base = row_mapping({**row, "tp_size": 1, "pp_size": 1, "attention_dp_size": 1, "moe_ep_size": 1,
                        "moe_tp_size": 1})
    pools = {}
    for pool in ("prefill", "decode"):
        layout = _layout(row, pool + "_")
        pools[pool] = {"gpu": layout["gpu"], "serving": layout["serving"],
                       "workers": _int(row.get(pool + "_num_workers"))}
    return {**base, "pools": pools}


def express(row: Mapping[str, Any]) -> str:
    """'' when the row is expressible, else the first problem in words."""
    from capacity.errors import ScenarioError
    from capacity.model.scenario import Scenario

    split = str(row.get("mode")) == "disagg"
    sizes = ("tp_size", "attention_dp_size", "moe_ep_size", "pp_size")
    if split and not all(row.get(f"{pool}_num_workers") for pool in ("prefill", "decode")) and all(
            _int(row.get(f"{pool}_{size}")) == 1 for pool in ("prefill", "decode") for size in sizes):
        return "split-pool layout not recorded (every pool size 1, prefill_/decode_num_workers missing)"
    try:
        if split:
            from capacity.model.split_pools import pool_scenarios

            pool_scenarios(pool_mappings(row))
        else:
            Scenario.from_dict(row_mapping(row))
    except ScenarioError as exc:
        return exc.problems[0]
    return ""


def reason_label(problem: str) -> str:
    """A short label grouping problems of one kind."""
    checks = (("is not in model_catalog", "model not in the catalog"),
              ("is not in gpu_catalog", "GPU not in the catalog"),
              ("must be one of", "quantisation scheme unknown"),
              ("attention heads", "tensor parallelism does not divide the attention heads"),
              ("do not fit", "weights do not fit"),
              ("expert_parallel", "expert parallelism not expressible"),
              ("attention_data_parallel", "attention data parallelism not expressible"),
              ("moe_tensor_parallel", "MoE tensor parallelism not expressible"),
              ("not recorded", "layout not recorded in the data set"),
              ("split prefill/decode", "split pools not expressible"),
              ("pools", "split pools not expressible"))
    for needle, label in checks:
        if needle in problem:
            return label
    return problem[:90]


def _key(row: Mapping[str, Any]) -> tuple:
    """The columns that decide whether a row is expressible (rows differing only in load share one answer)."""
    skip = {"id", "silicon_data_source", "batch_size", "prefill_batch_size", "decode_batch_size",
            "silicon_ttft_ms", "silicon_tpot_ms", "backend_version"}
    return tuple((k, str(v)) for k, v in sorted(row.items()) if k not in skip)


def survey(csv: str | Path = DEFAULT_CSV) -> tuple[int, int, Counter]:
    """(rows, expressible rows, Counter of reason label -> refused rows) of the data set at ``csv``."""
    import csv as csvlib

    with open(csv, newline="") as handle:
        rows = list(csvlib.DictReader(handle))
    cache: dict[tuple, str] = {}
    reasons: Counter = Counter()
    ok = 0
    for row in rows:
        clean = restate_layout({k: (None if v == "" else v) for k, v in row.items()})
        key = _key(clean)
        if key not in cache:
            cache[key] = express(clean)
        if cache[key]:
            reasons[reason_label(cache[key])] += 1
        else:
            ok += 1
    return len(rows), ok, reasons


def main(argv: list[str]) -> int:
    total, ok, reasons = survey(argv[0] if argv else DEFAULT_CSV)
    print(f"expressible: {ok:,} of {total:,} rows ({ok / total:.1%})")
    for label, count in reasons.most_common():
        print(f"  {count:6,}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
