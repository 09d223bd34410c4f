"""Predict the published speculative-decoding points of ``validation/speculative.yaml`` and report the errors.

    python validation/speculative.py [--file FILE]

Each point becomes a scenario of its own setup (catalog GPU and model, the engine profile it names, batch 1) with
the point's ``serving.speculative`` and the drafter's fixed costs from ``drafter_overhead_source``; the prediction
is ``model.speculative.evaluate``'s ``spec_speedup_single`` (plain TPOT over speculative TPOT at one sequence).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from capacity import Scenario  # noqa: E402
from capacity.model.speculative import evaluate  # noqa: E402

POINTS = Path(__file__).resolve().parent / "speculative.yaml"

#: The drafter's fixed costs (SpecDecode-Bench's fitted H100 profile, ``drafter_overhead_source``): 2.13526175 ms
#: per 3-token draft, so 0.7118 ms per drafter pass, and 1.20683946 ms per speculative iteration.
DRAFTER_OVERHEAD = {"draft_overhead": "0.7118 ms", "verify_overhead": "1.2068 ms"}
#: Request shape where the source states none (batch 1: the ratio moves < 1% with it).
SHAPE = {"prompt_tokens": 200, "output_tokens": 300}


def scenario_of(point: dict[str, Any]) -> Scenario:
    """The point's scenario: its GPU, model, engine and speculation, batch 1."""
    engine = "sglang" if "sglang" in str(point.get("engine", "")).lower() else "vllm"
    spec = {**point["speculative"], **(DRAFTER_OVERHEAD if point.get("drafter_overhead_source") else {})}
    return Scenario.from_dict({"name": point["id"], "model": {"name": point["catalog_model"]},
                               "gpu": {"name": point["gpu"], "count": int(point.get("tensor_parallel", 1))},
                               "serving": {"engine": engine, "max_num_seqs": 1, "speculative": spec},
                               "workload": SHAPE})


def predict(point: dict[str, Any]) -> float:
    """``spec_speedup_single`` of the point's scenario [x]."""
    s = scenario_of(point)
    return evaluate(s, s.evaluate())["spec_speedup_single"]


def rows(path: Path = POINTS) -> list[dict[str, Any]]:
    """One row per point: id, measured, predicted, error [%]."""
    out = []
    for point in yaml.safe_load(path.read_text())["points"]:
        predicted = predict(point)
        measured = float(point["value"])
        out.append({"id": point["id"], "metric": point["metric"], "measured": measured, "predicted": predicted,
                    "error_pct": (predicted / measured - 1.0) * 100.0, "source": point["source"]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=POINTS)
    args = parser.parse_args(argv)
    for r in rows(args.file):
        print(f"{r['id']:<52} {r['metric']:<15} measured {r['measured']:.3g}  predicted {r['predicted']:.3g}  "
              f"error {r['error_pct']:+.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
