"""The XLSX formulas recalculated by a real spreadsheet engine (LibreOffice headless) agree with the library.

Two checks: (1) every workbook, with its cached values removed so only the formulas can produce numbers, is
recalculated by LibreOffice and every named result cell compared with the library; (2) input cells are edited
with openpyxl (memory utilisation, prompt length, TPOT promise), LibreOffice recalculates, and the results are
compared with the library on the changed scenario. Skipped only where ``soffice`` is absent (CI installs it).
"""

import io
import math
import re
import shutil
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import openpyxl
import pytest

from capacity import RESULTS
from capacity.render.report import report_for
from capacity.render.xlsx import workbook_bytes
from tests.render.test_report import SCENARIO_IDS, all_scenarios
from tests.render.test_xlsx import NAMED_FORMULAS, SOLVER_IDS, library_values, matches, named_cells, solver_scenarios

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
pytestmark = pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed; .ci/run installs it")

#: LibreOffice keeps an XLSX file's cached values on load unless told to recalculate; this profile setting
#: (Tools > Options > Calc > Formula > "Recalculation on file load": Always) makes it recalculate every formula.
RECALC_ALWAYS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse">
<value>0</value></prop></item>
</oor:items>
"""


def recalculate(files: list[Path], out: Path, profile: Path) -> dict[str, Path]:
    """Open each file in LibreOffice headless, recalculate, save as XLSX under ``out``; name -> new path."""
    (profile / "user").mkdir(parents=True, exist_ok=True)
    (profile / "user" / "registrymodifications.xcu").write_text(RECALC_ALWAYS, encoding="utf-8")
    subprocess.run([SOFFICE, f"-env:UserInstallation={profile.as_uri()}", "--headless", "--norestore",
                    "--convert-to", "xlsx", "--outdir", str(out), *map(str, files)],
                   check=True, capture_output=True, timeout=600)
    converted = {f.name: out / f.name for f in files}
    missing = [name for name, path in converted.items() if not path.exists()]
    assert missing == [], f"LibreOffice did not convert {missing}"
    return converted


def without_cached_values(data: bytes) -> bytes:
    """The same XLSX with every formula's cached value removed: only a recalculation can fill those cells."""
    source, target = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for item in source.infolist():
            body = source.read(item.filename)
            if item.filename.startswith("xl/worksheets/"):
                body = re.sub(rb"(<f>[^<]*</f>)<v>[^<]*</v>", rb"\1", body)
                body = re.sub(rb' t="(?:str|e|b)"(?=[^>]*>\s*<f>)', b"", body)
            out.writestr(item, body)
    return target.getvalue()


#: Results of the chunked-prefill root solves: the library finds them to ``serving_modes.RTOL`` (1e-9 relative), and
#: the Solver sheet, iterating the same method on LibreOffice's arithmetic, may stop one step apart within it.
CHUNK_SOLVED = ("chunk_", "chunked_", "solver_chunk")


def _agrees(key: str, got: object, want: object) -> bool:
    from capacity.model.serving_modes import RTOL

    if matches(got, want):
        return True
    numbers = isinstance(got, (int, float)) and isinstance(want, (int, float)) and math.isfinite(want)
    return key.startswith(CHUNK_SOLVED) and numbers and math.isclose(got, want, rel_tol=2 * RTOL)


def differences(path: Path, report) -> dict[str, tuple]:
    """Named result cells whose recalculated value differs from the library's; empty when all agree (to 1e-12, and
    to the solve's own tolerance for the chunked-prefill solves: ``CHUNK_SOLVED``)."""
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    want = library_values(report)
    assert set(RESULTS) <= set(cells) and set(NAMED_FORMULAS) <= set(cells)
    return {key: (cells[key].value, want[key]) for key in NAMED_FORMULAS
            if not _agrees(key, cells[key].value, want[key])}


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lo-profile")


def _recalculated(scenarios: dict, folder: Path, profile: Path) -> dict:
    """Each scenario's workbook without cached values, recalculated by LibreOffice in one run: key -> (report, xlsx)."""
    reports, files = {}, []
    for key, scenario in scenarios.items():
        reports[key] = report_for(scenario)
        path = folder / f"{key}.xlsx"
        path.write_bytes(without_cached_values(workbook_bytes(reports[key])))
        files.append(path)
    converted = recalculate(files, folder / "out", profile)
    return {key: (reports[key], converted[f"{key}.xlsx"]) for key in reports}


@pytest.fixture(scope="module")
def recalculated(tmp_path_factory, profile):
    """Every scenario's workbook without cached values, recalculated by LibreOffice in one run."""
    return _recalculated(all_scenarios(), tmp_path_factory.mktemp("xlsx"), profile)


def test_stripping_really_removes_the_cached_values(tmp_path):
    path = tmp_path / "stripped.xlsx"
    path.write_bytes(without_cached_values(workbook_bytes(report_for(all_scenarios()["essay-001-sale-day"]))))
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    assert all(cells[key].value is None for key in NAMED_FORMULAS)


@pytest.mark.parametrize("key", SCENARIO_IDS)
def test_libreoffice_recalculates_every_result_as_the_library(recalculated, key):
    report, path = recalculated[key]
    assert differences(path, report) == {}


def test_recalculated_essay_numbers(recalculated):
    _, path = recalculated["essay-000-paging"]
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    assert (cells["max_requests_contiguous"].value, cells["max_requests_paged"].value,
            cells["max_requests_shared_prefix"].value) == (14, 253, 752)  # essay 000
    _, path = recalculated["essay-001-sale-day"]
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    assert cells["max_requests_paged"].value == 328 and round(cells["goodput_rps"].value, 1) == 5.9  # essay 001
    assert round(cells["decode_step_s"].value * 1e3, 1) == 38.0 and cells["goodput_limit"].value == "tpot"


#: Input edits, typed as a user types them in the Inputs sheet's human units: (scenario id, new memory_utilization,
#: new prompt_tokens, new TPOT promise in ms or None to clear it). The library gets ms / 1000, the spreadsheet's
#: own conversion.
EDITS = [
    ("essay-001-sale-day", 0.80, 1500, 80),
    ("essay-000-paging", 0.70, 1500, 100),  # essay 000 at utilisation 0.70: 181 paged requests; TPOT newly set
    ("capped-batch", 0.95, 900, None),  # clearing the TPOT promise leaves the TTFT promise
    ("chat-llama-3.1-8b-h100", 0.85, 2000, 30),
    ("ttft-bound-70b", 0.92, 3000, 60),
    ("mla-moe-deepseek-v3", 0.88, 2500, 80),  # MoE: the Solver sheet's bisections recompute
    ("window-pipeline-gemma-2", 0.80, 3000, 50),
]


def test_edited_inputs_recalculate_as_the_library_on_the_changed_scenario(tmp_path, profile):
    files, expected = [], {}
    for key, utilisation, prompt, tpot in EDITS:
        scenario = all_scenarios()[key]
        wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(scenario))))
        cells = named_cells(wb)
        cells["memory_utilization"].value = utilisation
        cells["prompt_tokens"].value = prompt
        cells["tpot_slo_s"].value = tpot
        path = tmp_path / f"edited-{key}.xlsx"
        wb.save(path)  # openpyxl keeps the formulas and drops every cached value
        changed = scenario.with_changes(serving={"memory_utilization": utilisation},
                                        workload={"prompt_tokens": prompt},
                                        slo={"tpot_s": None if tpot is None else tpot / 1000})
        expected[path.name] = report_for(changed)
        files.append(path)
    converted = recalculate(files, tmp_path / "out", profile)
    for name, report in expected.items():
        assert differences(converted[name], report) == {}, name
    cells = named_cells(openpyxl.load_workbook(converted["edited-essay-000-paging.xlsx"], data_only=True))
    assert cells["max_requests_paged"].value == 181  # essay 000: 181 requests at utilisation 0.70
    cells = named_cells(openpyxl.load_workbook(converted["edited-capped-batch.xlsx"], data_only=True))
    # No TPOT promise left; the batched-prefill TTFT model stays finite up to the ceiling, where this scenario's
    # 2 s promise still holds, so capacity (not TTFT) sets the goodput, as the library says for the edit.
    assert cells["max_rate_for_tpot_rps"].value == "#N/A" and cells["goodput_limit"].value == "capacity"
    assert expected["edited-capped-batch.xlsx"].results["goodput_limit"] == "capacity"


# --- the Solver sheet: TTFT bound, chunked-prefill batches and MoE TPOT solves, recalculated -----------------------

@pytest.fixture(scope="module")
def recalculated_solver_scenarios(tmp_path_factory, profile):
    """``test_xlsx.solver_scenarios`` (TTFT binding with the serving options set, a compute piece through the origin,
    random variants with 17-digit inputs), without cached values, recalculated by LibreOffice in one run."""
    return _recalculated(solver_scenarios(), tmp_path_factory.mktemp("xlsx-solver"), profile)


@pytest.mark.parametrize("key", SOLVER_IDS)
def test_libreoffice_recalculates_the_solver_scenarios_as_the_library(recalculated_solver_scenarios, key):
    report, path = recalculated_solver_scenarios[key]
    assert differences(path, report) == {}


#: Edits of the promises, the load and the serving options, in the Inputs sheet's human units: (scenario id, TTFT
#: promise in ms or None, arrival rate or None, chunked-prefill budget, KV link in GB/s or None, output tokens).
OPTION_EDITS = [
    ("essay-001-sale-day", 200, 4.0, 512, 50, 300),  # a TTFT promise appears and binds; a load; a small budget
    ("ttft-bound-70b", None, 0.7, 4096, None, 400),  # the TTFT promise cleared
    ("long-context-mixtral-h200", 120, 2.0, 2048, 25, 500),  # MoE: TTFT bound and the MoE TPOT solves
    ("ttft-binds-options", 900, None, 8192, 10, 150),  # the load cleared: the load's solves stand down
]


def test_edited_promises_load_and_options_recalculate_as_the_library(tmp_path, profile):
    scenarios = {**all_scenarios(), **solver_scenarios()}
    files, expected = [], {}
    for key, ttft, rate, budget, link, output in OPTION_EDITS:
        scenario = scenarios[key]
        wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(scenario))))
        cells = named_cells(wb)
        cells["ttft_slo_s"].value, cells["arrival_rate"].value = ttft, rate
        cells["max_batched_tokens"].value, cells["kv_transfer_bandwidth"].value = budget, link
        cells["output_tokens"].value = output
        path = tmp_path / f"options-{key}.xlsx"
        wb.save(path)
        changed = scenario.with_changes(slo={"ttft_s": None if ttft is None else ttft / 1000},
                                        workload={"arrival_rate": rate, "output_tokens": output},
                                        serving={"max_batched_tokens": budget,
                                                 "kv_transfer_bandwidth": None if link is None else link * 1e9})
        expected[path.name] = report_for(changed)
        files.append(path)
    converted = recalculate(files, tmp_path / "out", profile)
    for name, report in expected.items():
        assert differences(converted[name], report) == {}, name
    cells = named_cells(openpyxl.load_workbook(converted["options-essay-001-sale-day.xlsx"], data_only=True))
    assert cells["goodput_limit"].value == "ttft" and round(cells["max_rate_for_ttft_rps"].value, 2) == 4.93
    cells = named_cells(openpyxl.load_workbook(converted["options-long-context-mixtral-h200.xlsx"], data_only=True))
    assert cells["max_rate_for_ttft_rps"].value < cells["ceiling_rps"].value and cells["moe_model"].value is True


# --- human units: the Summary sheet and edits of converted inputs -------------------------------------------------

#: Edits of inputs the Inputs sheet shows converted: (scenario id, GPU memory in GB or GiB as the scenario's units,
#: bandwidth in GB/s, step overhead in ms, arrival rate in requests/s).
HUMAN_EDITS = [
    ("essay-001-sale-day", 96, 2400, 4, 12.0),  # decimal GB; a load appears, so the fleet is sized
    ("essay-000-paging", 64, 1600, 2, 5.0),  # binary units: GiB
    ("chat-llama-3.1-8b-h100", 141, 2500, 1.5, 40.0),
]


def test_edits_in_human_units_recalculate_as_the_library_and_the_summary_sizes_the_fleet(tmp_path, profile):
    """Memory typed in GB (or GiB), bandwidth in GB/s and overhead in ms: the defined names convert (x 1E9,
    x 1073741824, / 1000) and LibreOffice's results equal the library's on the scenario with those values. The
    Summary's fleet equals ``fleet_for_load``: replicas = ceil(load / goodput), GPUs, $/h and $/month (x 730)."""
    from capacity.planning.fleet import fleet_for_load

    files, expected = [], {}
    for key, memory, bandwidth, overhead, rate in HUMAN_EDITS:
        scenario = all_scenarios()[key]
        wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(scenario))))
        cells = named_cells(wb)
        cells["gpu_memory_bytes"].value, cells["bandwidth"].value = memory, bandwidth
        cells["step_overhead_s"].value, cells["arrival_rate"].value = overhead, rate
        path = tmp_path / f"human-{key}.xlsx"
        wb.save(path)
        gib = scenario.units == "GiB"
        gpu = replace(scenario.gpu, memory_bytes=memory * (1073741824 if gib else 1e9), bandwidth=bandwidth * 1e9,
                      bandwidth_efficiency=1.0)  # the sheet's bandwidth is the effective one
        changed = replace(scenario, gpu=gpu).with_changes(serving={"step_overhead_s": overhead / 1000},
                                                           workload={"arrival_rate": rate})
        expected[path.name] = report_for(changed)
        files.append(path)
    converted = recalculate(files, tmp_path / "out", profile)
    for name, report in expected.items():
        assert differences(converted[name], report) == {}, name
        cells = named_cells(openpyxl.load_workbook(converted[name], data_only=True))
        fleet = fleet_for_load(report.results, report.scenario.workload.arrival_rate)
        assert cells["fleet_replicas"].value == fleet.replicas and cells["fleet_gpus"].value == fleet.gpus, name
        if fleet.cost_per_hour is None:
            assert cells["fleet_cost_per_hour"].value == "#N/A"
        else:
            assert cells["fleet_cost_per_hour"].value == pytest.approx(fleet.cost_per_hour, rel=1e-12)
            assert cells["fleet_cost_per_month"].value == pytest.approx(fleet.cost_per_hour * 730, rel=1e-12)
        summary = openpyxl.load_workbook(converted[name], data_only=True)["Summary"]
        shown = {row[3].value: row[1].value for row in summary.iter_rows(min_row=8) if row[3].value}
        binary = report.scenario.units == "GiB"
        assert shown["pool_bytes"] == pytest.approx(report.results["pool_bytes"] / (2**30 if binary else 1e9),
                                                    rel=1e-12)
        assert shown["decode_step_s"] == pytest.approx(report.results["decode_step_s"] * 1000, rel=1e-12)
    cells = named_cells(openpyxl.load_workbook(converted["human-essay-001-sale-day.xlsx"], data_only=True))
    assert cells["fleet_gpus"].value == fleet_for_load(expected["human-essay-001-sale-day.xlsx"].results, 12.0).gpus


def test_untouched_workbook_summary_matches_the_library(recalculated):
    """Recalculated with no edit, the Summary's fleet for the scenario's own arrival rate is the library's."""
    from capacity.planning.fleet import fleet_for_load

    report, path = recalculated["chat-llama-3.1-8b-h100"]
    cells = named_cells(openpyxl.load_workbook(path, data_only=True))
    fleet = fleet_for_load(report.results, report.scenario.workload.arrival_rate)
    assert (cells["fleet_replicas"].value, cells["fleet_gpus"].value) == (fleet.replicas, fleet.gpus)
    assert cells["fleet_cost_per_month"].value == pytest.approx(fleet.cost_per_hour * 730, rel=1e-12)
    report, path = recalculated["essay-001-sale-day"]  # no arrival rate: no fleet
    assert named_cells(openpyxl.load_workbook(path, data_only=True))["fleet_replicas"].value == "#N/A"


def test_the_answer_sentence_is_recomputed_from_its_cells_after_an_edit(tmp_path, profile):
    """Issue 30: where the live fleet is the answer (the scenario's own layout, colocated, mean promises), the
    Summary's sentence is a formula of the cells: after the load is edited, LibreOffice rewrites it with the new
    fleet. As written, its cached text is the same sentence the library gives."""
    from capacity import Scenario
    from capacity.planning.fleet import fleet_for_load

    data = {"model": "llama-3.1-8b", "gpu": {"name": "h100-sxm", "count": 1},
            "workload": {"prompt_tokens": 1200, "output_tokens": 250, "arrival_rate": 10},
            "slo": {"tpot": "50 ms"}, "fleet": {"modes": ["colocated"], "tensor_parallel": [1]}}
    report = report_for(Scenario.from_dict(data).evaluate())
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report)))
    written = wb["Summary"]["A5"].value
    assert str(written).startswith("=IF(ISNUMBER(fleet_replicas)")
    named_cells(wb)["arrival_rate"].value = 100.0
    path = tmp_path / "sentence.xlsx"
    wb.save(path)
    out = recalculate([path], tmp_path / "out", profile)[path.name]
    sentence = openpyxl.load_workbook(out, data_only=True)["Summary"]["A5"].value
    edited = Scenario.from_dict({**data, "workload": {**data["workload"], "arrival_rate": 100.0}}).evaluate()
    fleet = fleet_for_load(edited, 100.0)
    assert sentence.startswith("To serve 100.00 requests/s of 1,200-token prompts and 250-token answers")
    assert f"you need {fleet.gpus:,} x h100-sxm ({fleet.replicas:,} replicas of 1 GPU)" in sentence
    assert f"${fleet.cost_per_hour:,.2f}/hour (${fleet.cost_per_hour * 730:,.0f}/month)" in sentence
    assert f"up to {edited['goodput_rps']:,.2f} requests/s." in sentence
