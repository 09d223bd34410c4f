"""The library's formula functions from spreadsheet cells: each documents its Excel formula, and LibreOffice
computes the same number from it.

Every formula function that ``capacity`` exports has ``Excel: ``=...```` in its docstring, written over named
cells that carry the function's parameter names (``pieces`` of the TPOT functions are the named cells
``a_mem, m_mem, a_comp, m_comp``), or says why no one-cell formula exists. The test writes each formula into a
workbook whose defined names hold sample inputs, has LibreOffice headless recalculate it, and compares every
cell with the Python function on the same inputs (to 1e-12 relative). Sample inputs are essay 000's and essay
001's numbers; ``floor_count`` also gets a count one ulp short of 3, which a plain FLOOR would round to 2.
"""

import inspect
import re
import shutil

import numpy as np
import openpyxl
import pytest
from openpyxl.workbook.defined_name import DefinedName

import capacity

#: Exported names that are not formulas of numbers (a scenario pipeline, tables, text).
NOT_FORMULAS = {"analyse", "evaluate_frame", "fleet_for_load", "fleet_options", "format_bytes", "format_time",
                "load_scenario", "parse_quantity"}
#: Formulas with no one-cell form, and the docstring must say so ("Excel: none ...").
NO_CELL_FORMULA = {"max_rate_for_ttft_rps"}

EXCEL = re.compile(r"Excel(?: \([^)]*\))?: ``(=[^`]+)``")
GIB = 2.0**30


def formula_functions() -> dict[str, object]:
    return {name: getattr(capacity, name) for name in capacity.__all__
            if inspect.isfunction(getattr(capacity, name)) and name not in NOT_FORMULAS}


def excel_formula(function) -> str | None:
    """The docstring's Excel formula, whitespace removed (docstrings wrap long formulas)."""
    found = EXCEL.search(inspect.getdoc(function) or "")
    return re.sub(r"\s+", "", found.group(1)) if found else None


def _samples() -> list[dict[str, float]]:
    """Two consistent sets of inputs: essay 000 (binary units, prefix) and essay 001 (decimal, block size 1)."""
    out = []
    for memory, weights, bs, prompt, prefix in ((80 * GIB, 16 * GIB, 16, 1500, 1200), (80e9, 16e9, 1, 1000, 0)):
        kv = float(capacity.kv_bytes_per_token(32, 8, 128, 2))
        pool = float(capacity.pool_bytes(memory, 0.9, weights))
        blocks = float(capacity.pool_blocks(pool, bs, kv))
        tokens = prompt + 300
        fits = float(capacity.max_requests_shared_prefix(blocks, tokens, prefix, bs))
        context = prompt + 150
        # the dense step's two lines, t_step(B) = max(a_mem + m_mem B, a_comp + m_comp B), by hand
        a_mem, m_mem, a_comp, m_comp = weights / 2e12 + 0.003, context * kv / 2e12, 0.003, 2 * 8e9 / 150e12
        step = float(capacity.decode_step_s(weights, fits, context, kv, 2e12, 8e9, 150e12, 0.003))
        uncached = prompt - prefix // bs * bs
        prefill = float(capacity.prefill_s(weights, uncached, 8e9, 2e12, 150e12, 0.003))
        ceiling = float(capacity.ceiling_rps(prefill, step, fits, 300))
        share = float(capacity.decode_share(prefill, step, fits, 300))
        out.append({
            "layers": 32, "kv_heads": 8, "head_dim": 128, "bytes_per_value": 2, "tokens": tokens,
            "block_size": bs, "gpu_memory_bytes": memory, "memory_utilization": 0.9, "weight_bytes": weights,
            "pool_bytes": pool, "kv_bytes_per_token": kv, "pool_blocks": blocks, "max_model_len": 32768,
            "tokens_per_request": tokens, "prefix_tokens": prefix, "params": 8e9, "bytes_per_weight": 2,
            "x": pool / (bs * kv), "batch": fits, "context_tokens": context, "bandwidth": 2e12, "flops": 150e12,
            "step_overhead_s": 0.003, "prompt_tokens": prompt, "prefill_s": prefill, "decode_step_s": step,
            "output_tokens": 300, "decode_share": share, "ceiling_rps": ceiling, "max_rate_for_tpot_rps": 0.8 * ceiling,
            "max_rate_for_ttft_rps": 0.9 * ceiling, "arrival_rate": 0.6 * ceiling, "tpot_s": 0.05, "tpot_slo_s": 0.05,
            "a_mem": float(a_mem), "m_mem": float(m_mem), "a_comp": float(a_comp), "m_comp": float(m_comp),
            "prefill_compute_s": uncached * 2 * 8e9 / 150e12, "price_per_hour": 2.0, "gpus": 4, "rate_rps": 5.9,
            # attention's arithmetic (engine profiles): llama-3.1-8b's 32 heads x 2 x 128 at the FLOP/s above
            "attention_s": 0.01, "attention_dim": 8192, "attention_flops": 150e12, "query_tokens": uncached,
            "per_pair_s": 2 * 8192 * 32 / (4 * 150e12)})
    out[1]["x"] = 3.0 - 2.0**-51  # one ulp short of 3: the tolerant floor gives 3, FLOOR would give 2
    return out


def python_value(function, sample: dict[str, float]) -> float:
    """The function on the sample: its parameters by name, ``pieces`` from the a/m cells, defaults left alone."""
    args = []
    for name, parameter in inspect.signature(function).parameters.items():
        if name == "pieces":
            args.append(((sample["a_mem"], sample["m_mem"]), (sample["a_comp"], sample["m_comp"])))
        elif name in sample:
            args.append(sample[name])
        else:
            assert parameter.default is not inspect.Parameter.empty, f"no sample for {function.__name__}({name})"
            break
    return float(np.asarray(function(*args)))


def test_every_formula_function_documents_its_excel_formula():
    functions = formula_functions()
    assert len(functions) >= 25
    missing = [name for name, f in functions.items() if excel_formula(f) is None and name not in NO_CELL_FORMULA]
    assert missing == []
    for name in NO_CELL_FORMULA:
        assert "Excel: none" in inspect.getdoc(functions[name])


def test_excel_formulas_use_only_the_parameters_and_known_functions():
    """A formula names only its function's parameters (``pieces`` -> a_mem...) and spreadsheet functions."""
    known = {"MAX", "MIN", "INT", "ABS", "IF", "CEILING", "NA", "E"}
    for name, function in formula_functions().items():
        formula = excel_formula(function)
        if formula is None:
            continue
        parameters = set(inspect.signature(function).parameters) - {"pieces"}
        if "pieces" in inspect.signature(function).parameters:
            parameters |= {"a_mem", "m_mem", "a_comp", "m_comp"}
        words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", re.sub(r"\d+(\.\d+)?[Ee]-?\d+", "", formula)))
        assert words - parameters - known == set(), (name, words - parameters - known)


SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")


@pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed; .ci/run installs it")
def test_libreoffice_computes_the_library_value_from_each_formula(tmp_path):
    from tests.render.test_xlsx_libreoffice import recalculate

    functions = {name: f for name, f in formula_functions().items() if excel_formula(f)}
    samples = _samples()
    files = []
    for index, sample in enumerate(samples):
        wb = openpyxl.Workbook()
        inputs = wb.active
        inputs.title = "Inputs"
        for row, (name, value) in enumerate(sample.items(), 1):
            inputs.cell(row, 1, name)
            inputs.cell(row, 2, float(value))
            wb.defined_names[name] = DefinedName(name, attr_text=f"Inputs!$B${row}")
        out = wb.create_sheet("Formulas")
        for row, (name, function) in enumerate(functions.items(), 1):
            out.cell(row, 1, name)
            out.cell(row, 2, excel_formula(function))
        path = tmp_path / f"formulas{index}.xlsx"
        wb.save(path)
        files.append(path)
    converted = recalculate(files, tmp_path / "out", tmp_path / "profile")
    for index, sample in enumerate(samples):
        sheet = openpyxl.load_workbook(converted[files[index].name], data_only=True)["Formulas"]
        for row, (name, function) in enumerate(functions.items(), 1):
            assert sheet.cell(row, 1).value == name
            got, want = sheet.cell(row, 2).value, python_value(function, sample)
            if not np.isfinite(want):
                assert got == "#N/A", (name, index, got)
                continue
            assert isinstance(got, (int, float)), (name, index, got)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (name, index, got, want)
