"""Issue 30's users as load: daily active users x requests per user per day x the peak hour's share / 3,600 s is the
arrival rate sized for, shown as converted. "500 daily users, 20 requests each, 10% in the peak hour" is
500 x 20 x 0.1 / 3,600 = 0.2778 requests/s, and gives the same sizing as that arrival rate, in the library, the CLI
and the report."""

import json
import subprocess
import sys

import pytest

from capacity import Scenario
from capacity.errors import ScenarioError
from capacity.formulas.load import peak_hour_rate_rps
from capacity.planning.sizing import size

BASE = {"model": {"name": "llama-3.1-8b"}, "gpu": {"name": "l40s"}, "serving": {"max_model_len": 8192},
        "slo": {"tpot": "50 ms", "ttft": "1 s"}}
SHAPE = {"prompt_tokens": 1500, "output_tokens": 300}
DAILY = {**BASE, "workload": {**SHAPE, "daily_users": 500, "requests_per_user_per_day": 20, "peak_hour_share": 0.1}}
RATE = {**BASE, "workload": {**SHAPE, "arrival_rate": 500 * 20 * 0.1 / 3600}}


def test_the_conversion_by_hand():
    assert peak_hour_rate_rps(500, 20, 0.1) == pytest.approx(0.277778, rel=1e-6)
    assert Scenario.from_dict(DAILY).workload.arrival_rate == pytest.approx(1000 / 3600, rel=1e-12)


def test_daily_users_size_as_the_equivalent_rate():
    daily, rate = size(Scenario.from_dict(DAILY)).to_dict(), size(Scenario.from_dict(RATE)).to_dict()
    assert daily == rate
    notes = Scenario.from_dict(DAILY).evaluate().notes()
    assert any("500 daily users x 20 requests a day, 10% of them in the peak hour = 0.278 requests/s" in n
               for n in notes)


def test_cli_and_report_say_the_same(tmp_path):
    outputs = {}
    for name, data in (("daily", DAILY), ("rate", RATE)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(data))
        run = subprocess.run([sys.executable, "-m", "capacity", "evaluate", str(path), "--format", "json"],
                             capture_output=True, text=True, check=True)
        outputs[name] = {k: v for k, v in json.loads(run.stdout).items() if k.startswith("sizing_")}
    assert outputs["daily"] == outputs["rate"]
    from capacity.answers.sentence import answer

    sentence = answer(Scenario.from_dict(DAILY).evaluate())
    assert "0.278 requests/s (500 daily users x 20 requests a day, 10% in the peak hour)" in sentence
    assert sentence.replace(" (500 daily users x 20 requests a day, 10% in the peak hour)", "") == \
        answer(Scenario.from_dict(RATE).evaluate())


@pytest.mark.parametrize("workload, problem", [
    ({"daily_users": 500}, "needs all three"),
    ({"daily_users": 500, "requests_per_user_per_day": 20, "peak_hour_share": 0.1, "arrival_rate": 1}, "one load"),
    ({"daily_users": 500, "requests_per_user_per_day": 20, "peak_hour_share": 10}, "peak_hour_share"),
])
def test_one_load_and_all_three_numbers(workload, problem):
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict({**BASE, "workload": {**SHAPE, **workload}})
    assert problem in " ".join(err.value.problems)
