"""Issue 29: split pools in the one answer (``sizing.size``) and ``capacity fleet``, and the MoE layouts the layout
search tries. Numbers are derived by hand from each pool's own per-replica rates (``disagg_prefill_rps``,
``disagg_decode_rps``), or are invariants of the search."""

from __future__ import annotations

import math

import pytest

from capacity.model.scenario import Scenario
from capacity.planning.fleet import fleet_options
from capacity.planning.sizing import layout_scenarios, moe_parallel_sizes, size

#: Essay 001's shape on catalog GPUs, no engine profile: prefill on L40S, decode on H100 SXM.
SPLIT = {"name": "split", "model": "llama-3.1-8b", "gpu": {"name": "h100-sxm", "count": 1},
         "serving": {"engine": "ideal", "kv_transfer_bandwidth": "50 GB/s", "max_model_len": 8192,
                     "step_overhead": "3 ms"},
         "workload": {"prompt_tokens": 1200, "output_tokens": 250, "arrival_rate": 40},
         "slo": {"tpot": "50 ms", "ttft": "1 s"},
         "pools": {"prefill": {"gpu": {"name": "l40s"}}, "decode": {}}}


def _alone(gpu: str, tp: int = 1) -> dict:
    data = {k: v for k, v in SPLIT.items() if k != "pools"}
    return Scenario.from_dict({**data, "gpu": {"name": gpu, "count": tp}}).evaluate()


def test_split_pools_are_sized_apart_for_the_design_load():
    """Each pool carries all 40 requests/s: P = ceil(40 / λ_p) L40S replicas, D = ceil(40 / λ_d) H100 replicas,
    cost P x $/h(L40S) + D x $/h(H100); the split rows say so, and the cheapest option is the answer."""
    s = Scenario.from_dict({**SPLIT, "fleet": {"modes": ["split"], "tensor_parallel": [1]}})
    z = size(s)
    p_rate, d_rate = float(_alone("l40s")["disagg_prefill_rps"]), float(_alone("h100-sxm")["disagg_decode_rps"])
    p, d = math.ceil(40 / p_rate), math.ceil(40 / d_rate)
    l40s, h100 = _alone("l40s").scenario.gpu.price_per_hour, _alone("h100-sxm").scenario.gpu.price_per_hour
    assert z.mode == "split" and (z.prefill_gpu, z.gpu) == ("l40s", "h100-sxm")
    assert (z.prefill_replicas, z.decode_replicas, z.gpus) == (p, d, p + d)
    assert z.cost_per_hour == pytest.approx(p * l40s + d * h100, rel=1e-12)
    assert z.load_per_replica_rps == pytest.approx(40 / d) and z.prefill_load_per_replica_rps == pytest.approx(40 / p)
    assert z.cost_per_month == pytest.approx(z.cost_per_hour * 730)
    assert z.stated_layout and z.keeps_promises
    assert z.prefill_replica is not None and z.prefill_replica.scenario.gpu.name == "l40s"


def test_the_cheapest_split_is_the_cheapest_prefill_pool_with_the_cheapest_decode_pool():
    """The pools are sized apart, so among every prefill x decode layout pair the cheapest split pairs the cheapest
    prefill pool with the cheapest decode pool: the split rows (one per decode layout) hold it."""
    table = fleet_options({k: v for k, v in SPLIT.items() if k != "pools"}, target=40,
                          gpus=["l40s", "h100-sxm", "a100-80gb"], tensor_parallel=[1, 2], modes=["split"])
    ok = table[table["meets_slo"]]
    best = ok.iloc[0]
    pairs = []
    for pg, ptp in [(g, t) for g in ("l40s", "h100-sxm", "a100-80gb") for t in (1, 2)]:
        pr = _alone(pg, ptp)
        prefill = math.ceil(40 / float(pr["disagg_prefill_rps"])) * ptp * pr.scenario.gpu.price_per_hour
        for dg, dtp in [(g, t) for g in ("l40s", "h100-sxm", "a100-80gb") for t in (1, 2)]:
            dr = _alone(dg, dtp)
            if float(dr["disagg_tpot_at_goodput_s"]) > 0.05 + 1e-12:
                continue
            decode = math.ceil(40 / float(dr["disagg_decode_rps"])) * dtp * dr.scenario.gpu.price_per_hour
            pairs.append(prefill + decode)
    assert best["cost_per_hour"] == pytest.approx(min(pairs), rel=1e-9)
    assert set(ok["prefill_gpu"]) == {best["prefill_gpu"]}  # one prefill pool, the cheapest, for every decode layout


def test_a_scenario_with_pools_compares_them_with_one_pool_and_without_a_load_states_them():
    s = Scenario.from_dict(SPLIT)
    z = size(s)
    modes = set(z.options["mode"])
    assert modes == {"split", "colocated", "chunked", "disaggregated"}
    cheapest = min(float(c) for c, ok in zip(z.options["cost_per_hour"], z.options["meets_slo"], strict=True) if ok)
    assert z.cost_per_hour == pytest.approx(cheapest)
    stated = Scenario.from_dict({**SPLIT, "workload": {"prompt_tokens": 1200, "output_tokens": 250},
                                 "pools": {"prefill": {"gpu": {"name": "l40s"}, "workers": 3},
                                           "decode": {"workers": 2}}})
    z0 = size(stated)
    p_rate, d_rate = float(_alone("l40s")["disagg_prefill_rps"]), float(_alone("h100-sxm")["disagg_decode_rps"])
    assert z0.mode == "split" and (z0.prefill_replicas, z0.decode_replicas, z0.gpus) == (3, 2, 5)
    assert z0.served_rps == pytest.approx(min(3 * p_rate, 2 * d_rate), rel=1e-12)


def test_scenarios_without_pools_are_sized_as_before():
    """No split rows unless asked for: the modes and the chosen option of a dense scenario are the three of old."""
    s = Scenario.from_dict({k: v for k, v in SPLIT.items() if k != "pools"})
    z = size(s)
    assert set(z.options["mode"]) == {"colocated", "chunked", "disaggregated"}
    assert z.prefill_replica is None and z.prefill_gpu is None


@pytest.mark.parametrize("tp, budget, expected", [
    (1, 8, [(1, 1), (2, 1), (2, 2), (4, 1), (4, 4), (8, 1), (8, 8)]),
    (8, 8, [(1, 1), (1, 8)]),
    (4, 8, [(1, 1), (1, 4), (2, 1), (2, 8)]),
])
def test_moe_parallel_sizes_stay_within_the_gpus_tried(tp, budget, expected):
    assert moe_parallel_sizes(tp, budget) == expected
    assert all(tp * dp <= budget and (tp * dp) % ep == 0 for dp, ep in moe_parallel_sizes(tp, budget))


def test_an_moe_models_layouts_try_data_and_expert_parallel_and_a_dense_ones_do_not():
    moe = {"model": "mixtral-8x7b", "gpu": {"name": "h200", "count": 2}, "serving": {"engine": "ideal"},
           "workload": {"prompt_tokens": 1000, "output_tokens": 200, "arrival_rate": 5}}
    built, _ = layout_scenarios(moe, None, (1, 2, 4, 8))
    layouts = {(tp, s.gpu.attention_data_parallel, s.gpu.expert_parallel) for _, tp, s in built}
    assert {(1, 2, 2), (2, 4, 8), (8, 1, 8), (2, 1, 1)} <= layouts
    assert all(tp * dp <= 8 for tp, dp, _ in layouts)
    dense, _ = layout_scenarios({**moe, "model": "llama-3.1-8b"}, None, (1, 2, 4, 8))
    assert [(tp, s.gpu.attention_data_parallel, s.gpu.expert_parallel) for _, tp, s in dense] == \
        [(1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1)]


def test_deepseek_r1_at_twelve_gpus_is_offered_as_attention_data_parallel():
    """TP 12 does not divide R1's 128 heads; the layout search offers 3 ranks of TP4 with EP12 instead."""
    r1 = {"model": {"name": "deepseek-r1", "quantization": "nvfp4"}, "gpu": {"name": "b200", "count": 4},
          "serving": {"engine": "ideal", "attention_data_parallel": 3, "expert_parallel": 12},
          "workload": {"prompt_tokens": 1000, "output_tokens": 1000, "arrival_rate": 5}}
    built, skipped = layout_scenarios(r1, None, (12, 4))
    assert (4, 3, 12) in {(tp, s.gpu.attention_data_parallel, s.gpu.expert_parallel) for _, tp, s in built}
    assert all(s.gpu.count != 12 or s.gpu.attention_data_parallel > 1 for _, _, s in built)
    assert [k["tensor_parallel"] for k in skipped] == [12]


def test_a_pool_on_another_gpu_keeps_the_sites_electricity_price_and_pue():
    """The electricity price and PUE describe the site, not the GPU: a prefill pool on L40S (350 W) beside the decode
    pool on H100 SXM (700 W) pays the same $0.10 per kWh at PUE 1.5. Before, a pool naming its own GPU dropped both:
    the prefill pool counted at PUE 1 and the fleet's electricity had no price at all ("no price set")."""
    site = {**SPLIT, "gpu": {**SPLIT["gpu"], "energy_price_per_kwh": 0.10, "pue": 1.5},
            "fleet": {"modes": ["split"], "tensor_parallel": [1]}}
    z = size(Scenario.from_dict(site))
    assert z.mode == "split" and (z.prefill_gpu, z.gpu) == ("l40s", "h100-sxm")
    watts = (z.prefill_replicas * 350 + z.decode_replicas * 700) * 1.5
    assert z.power_kw == pytest.approx(watts / 1e3, rel=1e-12)
    assert z.energy_cost_per_month == pytest.approx(watts / 1e3 * 730 * 0.10, rel=1e-12)
    assert z.prefill_replica.scenario.gpu.pue == 1.5 and z.prefill_replica.scenario.gpu.energy_price_per_kwh == 0.10
    # the same on another GPU type compared for the load (capacity fleet --gpus, the Compare view)
    (_, _, l40s), *_ = layout_scenarios(site, ["l40s"], [1])[0]
    assert (l40s.gpu.name, l40s.gpu.pue, l40s.gpu.energy_price_per_kwh) == ("l40s", 1.5, 0.10)
