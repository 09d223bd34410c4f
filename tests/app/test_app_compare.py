"""The Compare view through AppTest (issue 30): which GPU for the entered load, by monthly cost, is the library's
``compare_fleets`` on the sizing on screen, the answer's row marked, no consumer or export-only parts by default."""

from __future__ import annotations

from pathlib import Path

import yaml

from capacity.inputs import catalog
from capacity.model.scenario import Scenario
from capacity.planning.compare import compare_fleets
from tests.app.test_app import choose, saved, start

ROOT = Path(__file__).resolve().parents[2]
RAG = yaml.safe_load((ROOT / "scenarios" / "rag-llama-3.1-70b-4xh100.yaml").read_text())["name"]


def test_compare_ranks_each_gpus_fleet_by_monthly_cost_as_the_library_does():
    at = choose(start(), RAG)
    at.button_group(key="view").set_value("Compare").run()
    assert not at.exception, at.exception
    shown = at.table[0].value
    assert list(shown.columns[:4]) == ["", "GPU", "layout", "GPUs"] and "$ per month" in shown.columns
    gpus = at.multiselect(key="compare_fleet_gpus").value
    assert gpus and not {"rtx-4090", "rtx-5090", "h20"} & set(gpus)  # data-center parts only by default
    scenario = Scenario.from_dict(saved(at))
    own = [scenario.gpu.name] if scenario.gpu.name in catalog.gpus() else []
    expected = compare_fleets(scenario, tuple(dict.fromkeys([*own, *gpus])))
    assert list(shown["GPU"]) == list(expected["GPU" if "GPU" in expected else "gpu"])
    first = expected.iloc[0]
    assert shown.iloc[0]["$ per month"] == f"${first['cost_per_month']:,.0f}"
    assert list(shown[""]).count("answer") == 1
    text = " ".join(m.value for m in at.markdown)
    assert f"${first['cost_per_month']:,.0f} per month" in text


def test_consumer_cards_on_request():
    at = choose(start(), RAG)
    at.button_group(key="view").set_value("Compare").run()
    at.checkbox(key="compare_all_gpus").check().run()
    assert not at.exception
    at.multiselect(key="compare_fleet_gpus").select("rtx-4090").run()
    assert "rtx-4090" in list(at.table[0].value["GPU"])
