"""CSV in human units (``--units human``): GB or GiB, ms, GB/s, TFLOP/s, 4 significant digits, unit named per row
(evaluate) or per column header (sweep); still tidy for pandas and still safe against formula injection."""

import io
from pathlib import Path

import pandas as pd
import pytest
import yaml

from capacity import Scenario, load_scenario
from capacity.cli import main
from capacity.planning.sweep import sweep_bytes
from capacity.render.formatting import human_number, to_human
from capacity.render.report import report_for, to_csv

ROOT = Path(__file__).resolve().parents[2]


def rows(text: str) -> pd.DataFrame:
    table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return table.set_index(["section", "quantity"])


def test_essay_001_in_human_units():
    """Essay 001: pool 80 GB x 0.9 - 16 GB = 56 GB; decode step 38.0 ms (37.99); prefill 109.7 ms;
    goodput 5.9 requests/s (5.897); overhead 3 ms; bandwidth 2 TB/s = 2,000 GB/s."""
    table = rows(to_csv(report_for(load_scenario(ROOT / "scenarios" / "essay-001-sale-day.yaml")), "human"))
    assert tuple(table.loc[("result", "pool_bytes"), ["value", "unit"]]) == ("56", "GB")
    assert tuple(table.loc[("result", "decode_step_s"), ["value", "unit"]]) == ("37.99", "ms")
    assert tuple(table.loc[("result", "prefill_s"), ["value", "unit"]]) == ("109.7", "ms")
    assert tuple(table.loc[("result", "goodput_rps"), ["value", "unit"]]) == ("5.897", "requests/s")
    assert tuple(table.loc[("result", "max_requests_paged"), ["value", "unit"]]) == ("328", "requests")
    assert tuple(table.loc[("result", "kv_bytes_per_token"), ["value", "unit"]]) == ("131072", "B")
    assert tuple(table.loc[("input", "step_overhead_s"), ["value", "unit"]]) == ("3", "ms")
    assert tuple(table.loc[("input", "bandwidth"), ["value", "unit"]]) == ("2000", "GB/s")
    assert tuple(table.loc[("input", "flops"), ["value", "unit"]]) == ("150", "TFLOP/s")
    assert table.loc[("input", "ttft_slo_s"), "value"] == ""  # not set stays blank


def test_binary_units_follow_the_scenario():
    """Essay 000 in GiB: the pool is 80 GiB x 0.9 - 16 GiB = 56 GiB."""
    table = rows(to_csv(report_for(load_scenario(ROOT / "scenarios" / "essay-000-paging.yaml")), "human"))
    assert tuple(table.loc[("result", "pool_bytes"), ["value", "unit"]]) == ("56", "GiB")
    assert tuple(table.loc[("input", "gpu_memory_bytes"), ["value", "unit"]]) == ("80", "GiB")


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_human_values_are_the_base_values_rounded(path):
    report = report_for(load_scenario(path))
    binary = report.scenario.units == "GiB"
    base, human = rows(to_csv(report)), rows(to_csv(report, "human"))
    assert list(base.index) == list(human.index)
    for (section, key), row in base.iterrows():
        if section not in ("input", "result") or row["value"] == "" or not row["unit"]:
            continue
        try:
            value = float(row["value"])
        except ValueError:
            continue
        expected, unit = to_human(value, row["unit"], binary) if key not in (
            "kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "kv_bytes_per_value") else (value, row["unit"])
        assert human.loc[(section, key), "unit"] == unit, key
        assert float(human.loc[(section, key), "value"]) == pytest.approx(expected, rel=1e-12), key


def test_human_csv_still_neutralises_formulas():
    data = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())
    data["name"] = "=HYPERLINK(\"http://x\")"
    text = to_csv(report_for(Scenario.from_dict(data)), "human")
    assert "'=HYPERLINK" in text and "\n=HYPERLINK" not in text and ",=HYPERLINK" not in text


def test_human_number_rounding():
    assert human_number(60.908206489600006) == 60.91
    assert human_number(0.0402643422 * 1e3) == 40.26
    assert human_number(123456.7) == 123457
    assert human_number(0.31404697) == 0.314


def test_sweep_csv_in_human_units():
    """Essay 000 at utilisation 0.7, 0.8, 0.9: pools of 40, 48 and 56 GiB; 181, 217, 253 paged requests."""
    scenario = load_scenario(ROOT / "scenarios" / "essay-000-paging.yaml")
    text = sweep_bytes(scenario, ["serving.memory_utilization=0.7:0.9:3"], "csv", units="human").decode()
    table = pd.read_csv(io.StringIO(text))
    assert list(table["pool_bytes [GiB]"]) == [40, 48, 56]
    assert list(table["max_requests_paged [requests]"]) == [181, 217, 253]
    assert "decode_step_s [ms]" in table.columns and "goodput_rps [requests/s]" in table.columns
    assert len(table) == 3  # one row per grid point


def test_cli_units_option(tmp_path, capsys):
    scenario = str(ROOT / "scenarios" / "essay-001-sale-day.yaml")
    out = tmp_path / "sizing.csv"
    assert main(["evaluate", scenario, "--format", "csv", "--units", "human", "-o", str(out)]) == 0
    assert "result,pool_bytes,56,GB," in out.read_text()
    assert main(["evaluate", scenario, "--format", "json", "--units", "human"]) == 2
    assert "--units human is for --format csv" in capsys.readouterr().err
    assert main(["sweep", scenario, "--vary", "slo.tpot=40ms:60ms:3", "--units", "human", "--format", "json"]) == 2
