"""Move the package into sub-packages by layer (issue 27) and rewrite every reference to the old paths.

    python tools/relayout.py          # rewrite references only (safe to rerun, e.g. after merging a branch)
    python tools/relayout.py --move   # once: git mv the modules and tests, then rewrite

Relative imports inside ``capacity/`` are read in the old layout (``from .analysis import``: the old
top-level module) and written as absolute imports in the new one; absolute names ``capacity.OLD`` become
``capacity.NEW`` in code, strings and docs; test modules move to ``tests/<layer>/``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Old top-level module of ``capacity`` -> its new dotted path under ``capacity``.
MODULES: dict[str, str] = {
    # formulas: one quantity per function, scalars or arrays
    "memory": "formulas.memory", "roofline": "formulas.roofline", "slo": "formulas.slo",
    "percentiles": "model.percentiles", "solve": "formulas.solve", "_numeric": "formulas._numeric",
    "quantisation": "formulas.quantisation", "offload": "model.offload",
    # inputs and catalogs: what a scenario says, validated; catalogs, engine profiles, units
    "specs": "inputs.specs", "catalog": "inputs.catalog", "hf_config": "inputs.hf_config",
    "engines": "inputs.engines", "profiles": "inputs.profiles", "checks": "model.checks",
    "lengths": "inputs.lengths", "units": "inputs.units",
    # the model: the formulas composed into a scenario's results
    "analysis": "model.analysis", "scenario": "model.scenario", "options": "model.serving_modes",
    "mix": "model.mix", "curves": "model.curves", "workload_curves": "model.mix_curves", "frame": "model.frame",
    "daily": "planning.daily", "pool_picture": "model.pool_picture",
    # planning: the answer's sizing and what searches over scenarios
    "sizing": "planning.sizing", "fleet": "planning.fleet", "search": "planning.search",
    "sweep": "planning.sweep", "calibration": "planning.calibration",
    "calibrate_inputs": "planning.calibrate_inputs", "compare": "planning.compare",
    "promises": "planning.simulated_percentiles",
    # answers in words
    "answer": "answers.sentence", "fleet_answer": "answers.fleet_answer", "verdict": "answers.verdict",
    "guidance": "answers.guidance",
    # renderers: the one answer as JSON, CSV, XLSX, HTML, engine flags, text with units
    "report": "render.report", "customer_report": "render.customer_report", "engine_flags": "render.engine_flags",
    "formatting": "render.formatting", "xlsx": "render.xlsx",
    # files: bounded reading, atomic writing, CSV and Parquet streams
    "files": "fileio.files", "safe_load": "fileio.safe_load", "yamlfile": "fileio.yamlfile",
    "csv_safe": "fileio.csv_safe", "parquet_stream": "fileio.parquet_stream",
    # running work: time budgets and threads
    "budget": "runtime.budget", "threads": "runtime.threads",
    # the command line (``capacity.cli`` stays the package holding the parser and the registry)
    "curve_command": "cli.curve_command", "fleet_command": "cli.fleet_command",
    "report_command": "cli.report_command",
}
#: Modules of the old sub-packages that move out of them.
SUBMODULES: dict[str, str] = {"simulator.command": "cli.simulate_command"}

PACKAGES: dict[str, str] = {
    "formulas": "The formulas: one quantity per function, in explicit units, for scalars or numpy arrays.",
    "inputs": "Inputs: the scenario's fields validated, the catalogs, engine profiles, model configs and units.",
    "model": "The model: the formulas composed, in named stages, into a scenario's results.",
    "planning": "Planning: the one answer's sizing, fleets, sweeps, searches and calibration over scenarios.",
    "answers": "Answers in words: the sentence, the fleet answer, the verdict and the operating guidance.",
    "render": "Renderers: the one answer as JSON, CSV, XLSX, the customer's HTML report and engine flags.",
    "fileio": "Files: bounded reading of user files, atomic writing, CSV neutralising and Parquet streams.",
    "runtime": "Running work: time budgets per request and work spread over threads.",
}

#: Old test module -> new path under tests/ (without .py).
TESTS: dict[str, str] = {
    "test_percentiles": "model/test_percentiles", "test_solve_compaction": "formulas/test_solve",
    "test_numeric_select": "formulas/test_numeric", "test_vector_exact": "formulas/test_vector_exact",
    "test_ttft_model": "formulas/test_ttft_model", "test_tpot_at_goodput": "formulas/test_tpot_at_goodput",
    "test_efficiency_curves": "formulas/test_efficiency_curves", "test_hand_derived": "formulas/test_hand_derived",
    "test_invariants": "formulas/test_invariants", "test_excel_formulas": "formulas/test_excel_formulas",
    "test_architectures": "inputs/test_architectures", "test_catalogs": "inputs/test_catalog",
    "test_catalog_refresh": "inputs/test_catalog_refresh", "test_engines": "inputs/test_engines",
    "test_evaluate_many": "model/test_scenario", "test_frame": "model/test_frame", "test_workloads": "model/test_mix",
    "test_mix_engine_profiles": "model/test_mix_engine_profiles", "test_fleet_options": "model/test_serving_modes",
    "test_daily_guidance": "planning/test_daily", "test_pinned_results": "model/test_pinned_results",
    "test_essays": "model/test_essays",
    "test_sizing": "planning/test_sizing", "test_fleet": "planning/test_fleet", "test_search": "planning/test_search",
    "test_search_pools": "planning/test_search_pools", "test_sweep": "planning/test_sweep",
    "test_sweep_chart": "planning/test_sweep_chart", "test_sweep_csv_axes": "planning/test_sweep_csv_axes",
    "test_sweep_stream": "planning/test_sweep_stream", "test_calibration": "planning/test_calibration",
    "test_calibrate_inputs": "planning/test_calibrate_inputs", "test_validation": "planning/test_validation",
    "test_answer": "answers/test_sentence",
    "test_report": "render/test_report", "test_customer_report": "render/test_customer_report",
    "test_report_browser": "render/test_report_browser", "test_engine_flags": "render/test_engine_flags",
    "test_csv_units": "render/test_csv_units", "test_xlsx": "render/test_xlsx",
    "test_xlsx_engine_profiles": "render/test_xlsx_engine_profiles",
    "test_xlsx_libreoffice": "render/test_xlsx_libreoffice", "test_workload_reports": "render/test_workload_reports",
    "test_parquet_stream": "fileio/test_parquet_stream", "test_safe_load_count": "fileio/test_safe_load",
    "test_threads": "runtime/test_threads",
    "test_simulator": "simulator/test_simulator", "test_simulator_compiled": "simulator/test_compiled",
    "test_simulator_estimate": "simulator/test_estimate", "test_simulator_inputs": "simulator/test_inputs",
    "test_simulator_invariants": "simulator/test_invariants", "test_simulator_merge": "simulator/test_router",
    "test_simulator_pinned": "simulator/test_pinned", "test_simulator_pools": "simulator/test_pools",
    "test_retries": "simulator/test_retries", "test_sessions": "simulator/test_sessions",
    "test_cli_and_errors": "cli/test_cli", "test_fuzz": "cli/test_fuzz", "test_hostile": "cli/test_hostile",
    "test_startup": "cli/test_startup",
    "test_app": "app/test_app", "test_app_budget": "app/test_app_budget", "test_app_exports": "app/test_app_exports",
    "test_app_fleet_plan": "app/test_app_fleet_plan", "test_app_fuzz": "app/test_app_fuzz",
    "test_app_property": "app/test_app_property", "test_app_silent_values": "app/test_app_silent_values",
    "test_app_workloads": "app/test_app_workloads", "test_fleet_view": "app/test_fleet_view",
    "test_browser": "app/test_browser", "test_browser_hostile": "app/test_browser_hostile",
    "test_browser_silent_values": "app/test_browser_silent_values",
    "test_browser_workloads": "app/test_browser_workloads",
}
TEST_HELPERS = ("limits", "shared_inputs", "simulator_reference", "conftest")
TEST_LAYERS = {
    "formulas": "The formulas against hand derivations, published numbers and invariants.",
    "inputs": "Scenario fields, catalogs, engine profiles and model configs.",
    "model": "The composed model: scenarios, mixes, serving modes, curves, the essays and pinned results.",
    "planning": "Sizing, fleets, sweeps, searches, calibration and validation.",
    "answers": "The answer in words.",
    "render": "Reports: JSON, CSV, XLSX (with LibreOffice), the customer's HTML and engine flags.",
    "fileio": "Bounded reading and streamed writing.",
    "runtime": "Threads and budgets.",
    "simulator": "The discrete-event simulator.",
    "cli": "The command line: output, errors, hostile input, start-up.",
    "app": "The Streamlit app: AppTest and a real browser.",
}

OLD_SUB = ("simulator", "xlsx")  # the old sub-packages: a relative ``.NAME`` inside them is a sibling


def new_module(old: str) -> str | None:
    """``capacity.OLD[.rest]`` -> ``capacity.NEW[.rest]``; None when the name does not move."""
    parts = old.split(".")
    if len(parts) >= 2 and ".".join(parts[:2]) in SUBMODULES:
        return ".".join([SUBMODULES[".".join(parts[:2])], *parts[2:]])
    if parts[0] in MODULES:
        return ".".join([MODULES[parts[0]], *parts[1:]])
    return None


def old_location(path: Path) -> str | None:
    """The old dotted package a file under capacity/ sat in ('' for the top level), read from its place."""
    rel = path.relative_to(ROOT / "capacity").with_suffix("")
    parts = list(rel.parts)
    if parts[0] in OLD_SUB:
        return parts[0]
    if parts[0] == "render" and len(parts) > 1 and parts[1] == "xlsx":
        return "xlsx"
    return ""


_ABS = re.compile(r"\bcapacity\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


def rewrite_absolute(text: str) -> str:
    def sub(match: re.Match) -> str:
        dotted = match.group(1)
        head = dotted.split(".")
        if len(head) >= 2 and ".".join(head[:2]) in SUBMODULES:
            return "capacity." + ".".join([SUBMODULES[".".join(head[:2])], *head[2:]])
        if head[0] in MODULES:
            return "capacity." + ".".join([MODULES[head[0]], *head[1:]])
        return match.group(0)

    return _ABS.sub(sub, text)


_FROM_PKG = re.compile(r"^(?P<indent>[ \t]*)from capacity import (?P<names>\([^)]*\)|[^\n]*)", re.M)


def split_package_imports(text: str) -> str:
    """``from capacity import a, Scenario`` with ``a`` a moved module -> one import per new home."""

    def sub(match: re.Match) -> str:
        raw = match.group("names")
        comment = ""
        if not raw.startswith("(") and "#" in raw:
            raw, comment = raw.split("#", 1)
            comment = "  #" + comment
        names = [n.strip() for n in raw.strip("()").replace("\n", " ").split(",") if n.strip()]
        moved: dict[str, list[str]] = {}
        kept: list[str] = []
        for name in names:
            base = name.split(" as ")[0].strip()
            target = new_module(base)
            if target is None:
                kept.append(name)
            else:
                package, _, module = target.rpartition(".")
                alias = name.split(" as ")[1].strip() if " as " in name else None
                module_text = module if alias is None and module == base else f"{module} as {alias or base}"
                moved.setdefault(package, []).append(module_text)
        if not moved:
            return match.group(0)
        indent = match.group("indent")
        lines = [f"{indent}from capacity import {', '.join(kept)}"] if kept else []
        lines += [f"{indent}from capacity.{package} import {', '.join(mods)}" for package, mods in moved.items()]
        return "\n".join(lines) + comment

    return _FROM_PKG.sub(sub, text)


_REL = re.compile(r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<mod>[A-Za-z_][A-Za-z0-9_.]*)? import ", re.M)


def absolutise(text: str, location: str) -> str:
    """Relative imports read in the old layout -> absolute ``capacity.`` imports (then moved)."""

    def sub(match: re.Match) -> str:
        dots, mod = match.group("dots"), match.group("mod") or ""
        if location:  # inside an old sub-package
            base = ["capacity", location] if len(dots) == 1 else ["capacity"]
        else:
            base = ["capacity"]
        target = ".".join(base + ([mod] if mod else []))
        return f"{match.group('indent')}from {target} import "

    return _REL.sub(sub, text)


def rewrite_tests(text: str) -> str:
    text = re.sub(r"\btests\.(test_[A-Za-z0-9_]+)\b",
                  lambda m: "tests." + TESTS[m.group(1)].replace("/", ".") if m.group(1) in TESTS else m.group(0),
                  text)
    text = re.sub(r"\btests/(test_[A-Za-z0-9_]+)\.py\b",
                  lambda m: f"tests/{TESTS[m.group(1)]}.py" if m.group(1) in TESTS else m.group(0), text)
    text = re.sub(r"^(?P<i>[ \t]*)from (?P<m>test_[A-Za-z0-9_]+) import ",
                  lambda m: (f"{m.group('i')}from tests.{TESTS[m.group('m')].replace('/', '.')} import "
                             if m.group("m") in TESTS else m.group(0)), text, flags=re.M)
    text = re.sub(r"^(?P<i>[ \t]*)from (?P<m>limits|shared_inputs|simulator_reference) import ",
                  r"\g<i>from tests.\g<m> import ", text, flags=re.M)
    text = re.sub(r"^(?P<i>[ \t]*)import (?P<m>limits|shared_inputs|simulator_reference)\b",
                  r"\g<i>from tests import \g<m>", text, flags=re.M)
    return text


def rewrite_paths(text: str) -> str:
    """``capacity/OLD.py`` and ``capacity/xlsx/...`` file paths in docs, comments and strings."""

    def sub(match: re.Match) -> str:
        dotted = match.group(1).replace("/", ".")
        head = dotted.split(".")
        if len(head) >= 2 and ".".join(head[:2]) in SUBMODULES:
            moved = SUBMODULES[".".join(head[:2])].split(".") + head[2:]
        elif head[0] in MODULES:
            moved = MODULES[head[0]].split(".") + head[1:]
        else:
            return match.group(0)
        return "capacity/" + "/".join(moved) + match.group(2)

    text = re.sub(r"\bcapacity/cli\.py\b", "capacity/cli/__init__.py", text)
    return re.sub(r"\bcapacity/([A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*)(\.py|/)", sub, text)


def move() -> None:
    git = ["git", "-C", str(ROOT)]
    for package, doc in PACKAGES.items():
        (ROOT / "capacity" / package).mkdir(exist_ok=True)
        init = ROOT / "capacity" / package / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{doc}"""\n')
            subprocess.run([*git, "add", str(init)], check=True)
    for old, new in MODULES.items():
        source = ROOT / "capacity" / (old if old == "xlsx" else f"{old}.py")
        target = ROOT / "capacity" / (new.replace(".", "/") + ("" if old == "xlsx" else ".py"))
        subprocess.run([*git, "mv", str(source), str(target)], check=True)
    for old, new in SUBMODULES.items():
        subprocess.run([*git, "mv", str(ROOT / "capacity" / (old.replace(".", "/") + ".py")),
                        str(ROOT / "capacity" / (new.replace(".", "/") + ".py"))], check=True)
    (ROOT / "capacity" / "cli").mkdir(exist_ok=True)
    subprocess.run([*git, "mv", str(ROOT / "capacity" / "cli.py"), str(ROOT / "capacity" / "cli" / "__init__.py")],
                   check=True)
    tests = ROOT / "tests"
    if not (tests / "__init__.py").exists():
        (tests / "__init__.py").write_text('"""The test suite: one sub-package per layer of ``capacity``."""\n')
        subprocess.run([*git, "add", str(tests / "__init__.py")], check=True)
    for layer, doc in TEST_LAYERS.items():
        (tests / layer).mkdir(exist_ok=True)
        init = tests / layer / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{doc}"""\n')
            subprocess.run([*git, "add", str(init)], check=True)
    for old, new in TESTS.items():
        if (tests / f"{old}.py").exists():
            subprocess.run([*git, "mv", str(tests / f"{old}.py"), str(tests / f"{new}.py")], check=True)


def fix_test_roots(path: Path, text: str) -> str:
    """A test moved one level down: its ``parent.parent`` (the repository) is now ``parents[2]``."""
    if path.parent.parent != ROOT / "tests":
        return text
    text = text.replace("Path(__file__).resolve().parent.parent", "Path(__file__).resolve().parents[2]")
    text = text.replace('Path(__file__).resolve().parent / "data"', 'Path(__file__).resolve().parents[1] / "data"')
    return text


def main(argv: list[str]) -> int:
    relative_before: dict[Path, str] = {}
    if "--move" in argv:
        # relative imports are read where each file sits now, before it moves
        for path in (ROOT / "capacity").rglob("*.py"):
            relative_before[path] = absolutise(path.read_text(), old_location(path))
        for path, text in relative_before.items():
            path.write_text(text)
        move()
    skip = {Path(__file__).resolve()}
    files = [p for pattern in ("**/*.py", "**/*.md", "**/*.toml", "**/*.yaml", ".ci/*", "**/*.cfg", "**/*.txt")
             for p in ROOT.glob(pattern)
             if ".git" not in p.parts and "node_modules" not in p.parts and p.resolve() not in skip
             and ".venv" not in p.parts and p.is_file()]
    changed = 0
    for path in sorted(set(files)):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = text
        if path.suffix == ".py" and (ROOT / "capacity") in path.parents:
            new = absolutise(new, old_location(path))
        if path.suffix == ".py":
            new = split_package_imports(new)
        new = rewrite_absolute(new)
        new = rewrite_paths(new)
        new = rewrite_tests(new)
        if path.suffix == ".py" and (ROOT / "tests") in path.parents:
            new = fix_test_roots(path, new)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"relayout: {changed} files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
