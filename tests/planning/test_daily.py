"""Load over a day, queue limits and what they reject, the inspect-first table, and ``capacity curve``."""

import json
import math

import numpy as np
import pytest

from capacity import Scenario
from capacity.answers.guidance import inspect_first, queue_limits, rejected_share
from capacity.cli import main
from capacity.model.mix import mix_model
from capacity.model.mix_curves import concurrency_curve, knee, load_curve
from capacity.planning.daily import check_profile, diurnal_rates, plan_day, plan_scenario_day
from capacity.planning.simulated_percentiles import ANALYTIC_ENGINE


def test_a_peak_factor_gives_a_day_from_trough_to_peak():
    rates = diurnal_rates(40.0, 10.0)
    assert rates[12] == pytest.approx(40.0) and rates[0] == pytest.approx(4.0)
    assert rates.mean() == pytest.approx(22.0)  # the cosine averages out over 24 whole hours
    assert rates[6] == pytest.approx(22.0) and rates[18] == pytest.approx(22.0)
    with pytest.raises(ValueError, match="peak factor"):
        diurnal_rates(40.0, 0.5)


def test_gpus_per_hour_and_the_cost_of_provisioning_for_the_peak():
    rates = [1.0] * 12 + [12.0] * 12  # half the day at 1 request/s, half at 12
    plan = plan_day(rates, replica_rps=5.0, gpus_per_replica=2, price_per_gpu_hour=3.0)
    assert list(plan.hours["replicas"][:12]) == [1] * 12 and list(plan.hours["replicas"][12:]) == [3] * 12
    assert plan.peak_gpus == 6 and plan.gpu_hours == 12 * 2 + 12 * 6 and plan.peak_gpu_hours == 24 * 6
    assert plan.saving == pytest.approx(1 - 96 / 144)
    summary = plan.summary()
    assert summary["cost_per_day"] == 96 * 3.0 and summary["peak_cost_per_day"] == 144 * 3.0
    with pytest.raises(ValueError, match="24 hourly rates"):
        check_profile([1.0] * 23)
    with pytest.raises(ValueError, match="hour 3"):
        check_profile([1.0, 1.0, 1.0, -2.0] + [1.0] * 20)


def test_essay_001_day_on_the_percentile_and_the_mean_goodput(essay001):
    p99 = Scenario.from_dict({**essay001.raw, "slo": {"tpot": "50 ms", "percentile": 99}})
    rates = diurnal_rates(40.0, 10.0)
    mean = plan_scenario_day(p99, rates, mean_based=True)
    tail = plan_scenario_day(p99, rates)
    assert mean.replica_rps == pytest.approx(5.8967, abs=1e-4)
    assert mean.peak_gpus == math.ceil(40 / mean.replica_rps) == 7
    assert tail.peak_gpus == math.ceil(40 / tail.replica_rps) == 9  # the p99 promise costs two GPUs at noon
    assert tail.gpu_hours == sum(math.ceil(r / tail.replica_rps - 1e-9) for r in rates)


def test_queue_limit_is_ttft_times_prefill_throughput(essay001):
    mix = mix_model(essay001)
    t_p = 0.003 + 1000 * 16e9 / 150e12  # 109.7 ms
    limits = queue_limits(mix, 2.0)
    assert limits["prefill_tokens_per_s"] == pytest.approx(1000 / t_p)
    assert limits["max_queued_tokens"] == math.floor(2.0 * 1000 / t_p) == 18_237
    assert limits["max_queued_requests"] == math.floor(2.0 / t_p) == 18


def test_what_a_queue_limit_rejects_rises_with_load_and_falls_with_the_limit(essay001):
    mix = mix_model(essay001)
    shares = [rejected_share(mix, f * mix.ceiling_rps, 2) for f in (0.3, 0.6, 0.9, 1.0, 1.5)]
    assert shares == sorted(shares) and shares[0] > 0
    assert [rejected_share(mix, 0.9 * mix.ceiling_rps, k) for k in (1, 2, 4, 8)] == \
        sorted([rejected_share(mix, 0.9 * mix.ceiling_rps, k) for k in (1, 2, 4, 8)], reverse=True)
    # past the ceiling a generous limit refuses the excess
    assert rejected_share(mix, 2 * mix.ceiling_rps, 1000) == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize("limit, fraction", [(2, 0.8), (4, 0.9)])
def test_rejections_agree_with_the_simulator_within_a_factor_of_1_6(essay001, limit, fraction):
    from capacity.simulator import simulate

    mix = mix_model(essay001)
    rate = fraction * mix.ceiling_rps
    sim = simulate(essay001, **{**ANALYTIC_ENGINE, "requests": 10_000, "seed": 0, "rate": rate,
                                "max_queued_requests": limit}).summary()
    simulated = sim["requests_rejected"] / sim["requests_submitted"]
    assert simulated > 0.005
    assert 1 / 1.6 < rejected_share(mix, rate, limit) / simulated < 1.6


def test_inspect_first_carries_the_scenario_numbers(essay001):
    table = inspect_first(essay001, rate_rps=5.0, ttft_s=2.0)
    assert list(table["symptom"]) == ["TTFT rises", "TPOT rises", "503 errors", "concurrency ceiling"]
    assert table.loc[0, "inspect_first"].startswith("arrival rate and queue depth")
    assert "batch size" in table.loc[1, "inspect_first"] and "KV" in table.loc[1, "inspect_first"]
    assert "queue limit 18 requests / 18,237 tokens" in table.loc[2, "expected"]
    assert "328 conversations fit" in table.loc[3, "expected"]
    assert "no TTFT promise" in inspect_first(essay001, rate_rps=5.0).loc[2, "expected"]


def test_concurrency_falls_inversely_with_context(essay001):
    table = concurrency_curve(essay001, [1300, 2600, 32768])
    assert list(table["max_requests_paged"]) == [math.floor(56e9 / 131072 / t) for t in (1300, 2600, 32768)]
    assert table["max_requests_paged"][0] == 328


def test_the_knee_is_the_most_power(essay001):
    curve = load_curve(essay001, np.linspace(0.1, 0.95, 18))
    best = knee(curve)
    assert best["power"] == curve["power"].max()
    assert 0.1 < best["load_fraction"] < 0.95  # an interior maximum: throughput first, latency after
    assert (np.diff(curve["all_p99_tpot_s"]) > 0).all() and (np.diff(curve["output_tokens_per_s"]) > 0).all()


def test_capacity_curve_command(scenario_dir, capsys):
    mix = str(scenario_dir / "mix-chat-rag-h100.yaml")
    assert main(["curve", mix, "--kind", "classes", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["class"] for r in rows] == ["chat", "rag", "all"]
    assert main(["curve", mix, "--kind", "knee", "--points", "4", "--format", "json"]) == 0

    def strict(name):
        raise ValueError(f"{name} is not JSON")

    knee_row = json.loads(capsys.readouterr().out, parse_constant=strict)["summary"]["knee"]
    assert 0 < knee_row["load_fraction"] < 1
    assert main(["curve", mix, "--kind", "knee", "--points", "4", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("rate_rps,load_fraction,output_tokens_per_s")
    assert main(["curve", mix, "--kind", "daily", "--peak-rps", "30"]) == 0
    assert "peak_gpus" in capsys.readouterr().out
    assert main(["curve", mix, "--kind", "guidance", "--ttft", "1 s"]) == 0
    assert "max_queued_requests" in capsys.readouterr().out
    assert main(["curve", mix, "--kind", "concurrency"]) == 0
    capsys.readouterr()
    assert main(["curve", mix, "--kind", "daily"]) == 2
    assert "needs --profile" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # refused by the option's reader, before the scenario is read
        main(["curve", mix, "--kind", "daily", "--profile", "1,2,3"])
    assert exit_.value.code == 2
    assert "--profile: must be 24 comma-separated finite numbers in [0, 1e+09], got 3" in capsys.readouterr().err


def test_concurrency_curve_below_the_prefix_is_finite(scenario_dir):
    """Contexts shorter than the shared prefix (essay 000: 1,200 tokens) keep one private block per request:
    a 256-token context shares 255 tokens (15 full blocks of 16) and holds one block of its own."""
    from capacity import load_scenario
    from capacity.model.mix_curves import concurrency_curve

    scenario = load_scenario(scenario_dir / "essay-000-paging.yaml")
    curve = concurrency_curve(scenario).set_index("context_tokens")
    blocks = scenario.evaluate()["pool_blocks"]
    assert curve.loc[256, "max_requests_shared_prefix"] == blocks - 255 // 16  # one private block each
    assert (curve["max_requests_shared_prefix"] >= curve["max_requests_paged"]).all()
