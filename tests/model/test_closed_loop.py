"""Closed-loop load (workload.concurrency): C users in flight, each sending its next request Z after its answer.

The model (``analysis.closed_loop``) is the interactive response time law X = C / (TTFT + (A - 1) TPOT + Z) with
the model's own latencies at X; users beyond what the ceiling holds wait for a slot. Checked here by hand on essay
001 with one user, by invariants (the law itself, monotone throughput, the ceiling as a wall), and against the
simulator run closed-loop (``arrival: closed``), the independent source: within 10% on throughput, mean TTFT and
mean TPOT from 30% to 90% of the ceiling, on three request shapes with no think time (what ``vllm bench serve
--max-concurrency`` does) and on two with an exponential think time of 2 s.
"""

import math

import numpy as np
import pytest

from capacity import Scenario
from capacity.errors import ScenarioError
from capacity.model.analysis import closed_loop, replica_stages, users_keeping_promises
from tests.shared_inputs import ESSAY_001

#: Essay 001 by hand: prefill of 1,000 tokens t_p = 16e9 x 1,000 / 150e12 + 3 ms; the decode step at batch B is
#: memory-bound below the critical batch: a + m B with a = 16 GB / 2 TB/s + 3 ms, m = 1,150 x 131,072 B / 2 TB/s.
T_P = 1000 * 16e9 / 150e12 + 0.003
A_MEM, M_MEM = 16e9 / 2e12 + 0.003, 1150 * 131072 / 2e12


def essay001(**workload):
    return Scenario.from_dict({**ESSAY_001, "workload": {**ESSAY_001["workload"], **workload}})


def loop_of(scenario, users, think=0.0):
    model, mem, prefill, ceiling = replica_stages({**scenario.inputs(), "think_time_s": think})
    return closed_loop(model, prefill, scenario.workload.output_tokens, mem.batch_max, ceiling, users, think), ceiling


def test_one_user_alone_by_hand():
    """One user, no think time: nobody else prefills, so TTFT is its own prefill and TPOT the step at the batch the
    loop holds, B = X A TPOT (Little's law; under one: the user is prefilling part of the time), X = 1 / (t_p + 299
    TPOT). Solved here by plain iteration of TPOT = a + m B."""
    tpot = A_MEM
    for _ in range(200):
        x = 1.0 / (T_P + 299 * tpot)
        tpot = A_MEM + M_MEM * x * 300 * tpot
    point, _ = loop_of(essay001(), 1)
    assert float(point.ttft_s) == pytest.approx(T_P, rel=1e-12)
    assert float(point.tpot_s) == pytest.approx(tpot, rel=1e-9)
    assert float(point.throughput_rps) == pytest.approx(1.0 / (T_P + 299 * tpot), rel=1e-9)
    # 109.7 ms prefill, 11.07 ms per token: 3.42 s per answer, 0.2924 requests/s
    assert float(point.tpot_s) == pytest.approx(0.01107, abs=1e-5)
    assert float(point.throughput_rps) == pytest.approx(0.2924, abs=1e-4)


def test_response_time_law_holds_everywhere_and_the_ceiling_is_a_wall():
    users = np.array([1, 2, 5, 20, 60, 120, 250, 328, 400, 800, 2000], dtype=float)
    for think in (0.0, 3.0):
        point, ceiling = loop_of(essay001(), users, think)
        x = point.throughput_rps
        law = x * (point.ttft_s + 299 * point.tpot_s + think)
        assert np.allclose(law, users, rtol=1e-9)
        assert np.all(np.diff(x) >= 0) and np.all(x <= ceiling * (1 + 1e-12))
        assert np.all(np.diff(point.ttft_s) >= -1e-12) and np.all(np.diff(point.tpot_s) >= -1e-12)
        # Users beyond the ceiling wait for a slot; below it nobody does.
        assert np.all(x[point.slot_wait_s > 0] >= ceiling * (1 - 1e-6))
        assert np.all(point.slot_wait_s[x < ceiling * (1 - 1e-6)] == 0)
        assert np.all(point.batch <= 328)
    # 2,000 users on a replica that runs 328 at once: 2,000 / 6.92 requests/s = 289 s a cycle, most of it waiting.
    point, ceiling = loop_of(essay001(), 2000.0)
    assert float(point.throughput_rps) == pytest.approx(float(ceiling), rel=1e-12)
    assert float(point.slot_wait_s) == pytest.approx(2000 / float(ceiling) - float(point.ttft_s - point.slot_wait_s)
                                                     - 299 * float(point.tpot_s), rel=1e-9)


def test_evaluate_reports_the_closed_loop_and_nothing_without_one():
    r = essay001(concurrency=100).evaluate()
    point, ceiling = loop_of(essay001(), 100.0)
    assert r["closed_loop_throughput_rps"] == pytest.approx(float(point.throughput_rps), rel=1e-12)
    assert r["closed_loop_tokens_per_s"] == pytest.approx(300 * r["closed_loop_throughput_rps"], rel=1e-12)
    assert r["closed_loop_load_fraction"] == pytest.approx(r["closed_loop_throughput_rps"] / r["ceiling_rps"])
    assert r["closed_loop_slot_wait_s"] == 0
    assert math.isnan(essay001().evaluate()["closed_loop_tpot_s"])
    assert math.isnan(essay001(arrival_rate=3).evaluate()["closed_loop_ttft_s"])


@pytest.mark.parametrize("workload, problem", [
    ({"concurrency": 10, "arrival_rate": 2}, "give one load"),
    ({"think_time": "2 s"}, "needs workload.concurrency"),
    ({"concurrency": 0}, "workload.concurrency"),
    ({"concurrency": 2.5}, "workload.concurrency"),
    ({"concurrency": 10, "think_time": "-1 s"}, "workload.think_time"),
])
def test_one_load_per_scenario(workload, problem):
    with pytest.raises(ScenarioError) as err:
        essay001(**workload)
    assert problem in " ".join(err.value.problems)


def test_users_a_replica_holds_keep_the_promises_and_no_more():
    scenario = Scenario.from_dict({**ESSAY_001, "slo": {"tpot": "50 ms", "ttft": "300 ms"}})
    users, point = users_keeping_promises(scenario.inputs())
    assert float(point.tpot_s) == pytest.approx(0.05, rel=1e-6)  # the TPOT promise binds at 89 users
    assert float(point.ttft_s) < 0.3 and float(point.slot_wait_s) == 0
    # X at those users is the open loop's goodput under the same TPOT promise (the same TPOT fixed point, with
    # the other users' prefills), within a user's share.
    assert float(point.throughput_rps) == pytest.approx(scenario.evaluate()["goodput_rps"], rel=0.02)
    more, _ = loop_of(scenario, float(users) * 1.01)
    assert float(more.tpot_s) > 0.05


def test_the_answer_sizes_concurrent_users():
    from capacity.answers.sentence import answer
    from capacity.planning.sizing import size

    data = {**ESSAY_001, "workload": {**ESSAY_001["workload"], "concurrency": 1000}, "slo": {"tpot": "50 ms"},
            "fleet": {"tensor_parallel": [1]}}
    z = size(Scenario.from_dict(data))
    users, _ = users_keeping_promises(Scenario.from_dict(data).inputs())
    assert z.replicas == math.ceil(1000 / float(users)) and z.users == 1000
    assert z.users_per_replica == pytest.approx(1000 / z.replicas) and z.tpot_at_load_s <= 0.05
    point, _ = loop_of(Scenario.from_dict(data), 1000 / z.replicas)
    assert z.load_rps == pytest.approx(z.replicas * float(point.throughput_rps), rel=1e-9)
    assert "1,000 concurrent users" in answer(z)
    fewer, _ = loop_of(Scenario.from_dict(data), 1000 / (z.replicas - 1))
    assert float(fewer.tpot_s) > 0.05  # one replica fewer breaks the promise


# --- against the simulator run closed-loop --------------------------------------------------------------------

SHAPES = {"essay 001": {}, "short prompts, long answers": {"prompt_tokens": 200, "output_tokens": 800},
          "long prompts, short answers": {"prompt_tokens": 4000, "output_tokens": 200}}
CASES = [(shape, 0.0) for shape in SHAPES] + [("essay 001", 2.0), ("short prompts, long answers", 2.0)]


@pytest.mark.parametrize("shape, think", CASES)
def test_closed_loop_agrees_with_the_simulator(shape, think):
    pytest.importorskip("capacity.simulator")
    from capacity.planning.simulated_percentiles import closed_loop_validation

    table = closed_loop_validation(essay001(**SHAPES[shape]), (0.3, 0.6, 0.9), think_time_s=think)
    for column in ("throughput_error", "ttft_error", "tpot_error"):
        assert table[column].abs().max() <= 0.10, table.to_string()


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_an_engine_profile_with_a_request_latency_agrees_with_the_simulator(engine):
    """The default engine (vLLM: 33 ms of request latency behind its own server; SGLang's, TensorRT-LLM's none on
    Hopper): the simulator's clients send after the latency, so requests reach the engine at any phase of a step
    (``analysis.closed_loop_engine_ttft_s``). Within 10% to three quarters of the ceiling (TTFT -10% at 80%); at 90%
    the TTFT reads what the open-loop queue reads there (-20%; -21% with Poisson arrivals, the formula's known limit
    near the ceiling)."""
    pytest.importorskip("capacity.simulator")
    from capacity.planning.simulated_percentiles import closed_loop_validation

    scenario = Scenario.from_dict({"model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm"},
                                   "serving": {"engine": engine},
                                   "workload": {"prompt_tokens": 1000, "output_tokens": 300}})
    assert scenario.serving.request_latency_s > 0 or engine == "tensorrt-llm"
    table = closed_loop_validation(scenario, (0.3, 0.6, 0.75), requests=4000)
    for column in ("throughput_error", "ttft_error", "tpot_error"):
        assert table[column].abs().max() <= 0.10, table.to_string()


def test_users_beyond_the_batch_cap_wait_as_the_simulator_says():
    """max_num_seqs 32 holds 32 running; 48 to 96 users: the excess waits for a slot (response time law at the
    ceiling), the simulator's mean TTFT within 5%."""
    pytest.importorskip("capacity.simulator")
    from capacity.planning.simulated_percentiles import ANALYTIC_ENGINE
    from capacity.simulator import simulate

    scenario = Scenario.from_dict({**ESSAY_001, "serving": {**ESSAY_001["serving"], "max_num_seqs": 32}})
    for users in (48, 96):
        point, _ = loop_of(scenario, float(users))
        frame = simulate(scenario, **{**ANALYTIC_ENGINE, "arrival": "closed"}, concurrency=users, requests=6000,
                         output_tokens={"dist": "uniform", "low": 150, "high": 450}).requests
        steady = frame[frame["arrival_s"] >= 0.3 * frame["arrival_s"].max()]
        assert float(point.slot_wait_s) > 1.0
        assert float(point.ttft_s) == pytest.approx(steady["ttft_s"].mean(), rel=0.05)
        assert float(point.tpot_s) == pytest.approx(steady["tpot_s"].mean(), rel=0.05)


def test_simulator_closed_loop_keeps_its_clients():
    """The simulator never has more than C requests in the system, and each client's next request comes after its
    previous answer (no think time: at the same instant as some answer)."""
    pytest.importorskip("capacity.simulator")
    from capacity.simulator import simulate

    result = simulate(essay001(), arrival="closed", concurrency=7, requests=400, cost_model="roofline",
                      output_tokens={"dist": "uniform", "low": 100, "high": 500})
    df = result.requests
    assert (df["status"] == "completed").all()
    events = np.concatenate([np.stack([df["arrival_s"], np.ones(len(df))], 1),
                             np.stack([df["finish_s"], -np.ones(len(df))], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # finishes before arrivals at the same instant
    assert np.cumsum(events[:, 1]).max() == 7
    later = df["arrival_s"].to_numpy()[7:]
    assert np.isin(later, df["finish_s"].to_numpy()).all()


def test_simulator_refuses_what_a_closed_loop_cannot_run():
    from capacity.simulator import simulate

    with pytest.raises(ScenarioError, match="replicas"):
        simulate(essay001(), arrival="closed", concurrency=4, replicas=2)
    with pytest.raises(ScenarioError, match="concurrency is missing"):
        simulate(essay001(), arrival="closed")


def test_a_sweep_of_users_and_shapes_equals_each_alone():
    """The array path (a sweep over users and request shapes at once) gives each row's scalar values."""
    from capacity.model.analysis import CLOSED_LOOP_RESULTS, analyse

    base = essay001().inputs()
    users, prompts = np.array([10.0, 100.0, 500.0, 0.0]), np.array([1000.0, 200.0, 4000.0, 1000.0])
    together = analyse({**base, "concurrency": users, "prompt_tokens": prompts, "think_time_s": 1.0})
    for i in range(len(users)):
        alone = analyse({**base, "concurrency": users[i], "prompt_tokens": prompts[i], "think_time_s": 1.0})
        for key in CLOSED_LOOP_RESULTS:
            np.testing.assert_allclose(together[key][i], alone[key], rtol=1e-9, err_msg=key)
    assert math.isnan(together["closed_loop_tpot_s"][3])


@pytest.mark.parametrize("shape", SHAPES)
def test_identical_requests_move_in_lockstep_as_simulated(shape):
    """Fixed prompt and answer lengths, no think time: the users arrive, prefill, decode and finish together, waves
    that ``closed_loop_lockstep`` adds up pass by pass; the simulator's means agree within 2% (its throughput taken
    as C over the mean request time, the length of a wave)."""
    pytest.importorskip("capacity.simulator")
    from capacity.model.analysis import closed_loop_lockstep
    from capacity.planning.simulated_percentiles import ANALYTIC_ENGINE
    from capacity.simulator import simulate

    scenario = essay001(**SHAPES[shape])
    model, mem, prefill, _ = replica_stages(scenario.inputs())
    for users in (10, 30):
        point = closed_loop_lockstep(model, prefill.tokens, scenario.workload.output_tokens, mem.batch_max, 8192,
                                     float(users))
        frame = simulate(scenario, **{**ANALYTIC_ENGINE, "arrival": "closed"}, concurrency=users,
                         requests=40 * users).requests
        steady = frame[frame["arrival_s"] >= 0.3 * frame["arrival_s"].max()]
        assert float(point.ttft_s) == pytest.approx(steady["ttft_s"].mean(), rel=0.02)
        assert float(point.tpot_s) == pytest.approx(steady["tpot_s"].mean(), rel=0.02)
        assert float(point.throughput_rps) == pytest.approx(users / steady["e2e_s"].mean(), rel=0.02)
    # Essay 001, 30 users: passes of 8 prompts (8,000 of 8,192 tokens), 856.3 ms each and 643.0 ms for the last 6:
    # TTFT = (8 x 0.8563 x (1 + 2 + 3) + 6 x (3 x 0.8563 + 0.6430)) / 30 = 2.013 s, where spread phases give 0.12 s.
    if shape == "essay 001":
        full, last = 8 * (T_P - 0.003) + 0.003, 6 * (T_P - 0.003) + 0.003
        point = closed_loop_lockstep(model, prefill.tokens, 300, mem.batch_max, 8192, 30.0)
        assert float(point.ttft_s) == pytest.approx((8 * full * 6 + 6 * (3 * full + last)) / 30, rel=1e-12)
        assert float(point.ttft_s) == pytest.approx(2.0125, abs=1e-4)


# --- the running batch: blocks allocated as tokens arrive (engine profiles) -----------------------------------------

def test_engines_run_the_pool_at_the_mean_context():
    """Under vLLM's profile the running batch is the pool at P + A/2 tokens, by hand from the pool's blocks; under
    the essays' convention it is B_max. Users between the two run without a slot wait (issue 28: the engines ran
    them, the whole-context pool predicted minute-long waits)."""
    data = {"model": {"name": "llama-3.1-8b"}, "gpu": {"name": "h100-sxm", "count": 1},
            "serving": {"engine": "vllm", "max_num_seqs": 4096},
            "workload": {"prompt_tokens": 1024, "output_tokens": 8192}}
    r = Scenario.from_dict(data).evaluate()
    blocks, bs = float(r["pool_blocks"]), 16
    whole, mean = math.ceil((1024 + 8192) / bs), math.ceil((1024 + 4096) / bs)
    assert float(r["batch_max"]) == blocks // whole
    assert float(r["batch_running"]) == blocks // mean
    between = (float(r["batch_max"]) + float(r["batch_running"])) // 2
    loop = Scenario.from_dict({**data, "workload": {**data["workload"], "concurrency": between}}).evaluate()
    assert float(loop["closed_loop_slot_wait_s"]) == 0.0
    assert float(loop["closed_loop_batch"]) > float(r["batch_max"])
    ideal = Scenario.from_dict({**data, "serving": {"engine": "ideal", "block_size": 16}}).evaluate()
    assert float(ideal["batch_running"]) == float(ideal["batch_max"])


# --- users in step: fixed-length clients (workload.clustering, engines.CLOSED_LOOP_CLUSTERING) ---------------------

C_PREFILL = 1000 * 16e9 / 150e12  # essay 001: a prompt's arithmetic, c = P 2 N / F [s]


@pytest.mark.parametrize("share", [0.05, 0.3])
def test_clustered_users_share_their_prefill_pass(share):
    """With a share k of the C - 1 other users arriving in a user's step, its prefill pass carries theirs too:
    TTFT = t_p + c max(X (C - 1) / C TPOT, k (C - 1)) (``slo.ttft_at_step_ends_s``), by hand from the loop's own X
    and TPOT; the response time law still holds, and the loop runs slower than with the phases spread."""
    users = np.array([2.0, 10.0, 40.0, 100.0])
    model, mem, prefill, ceiling = replica_stages(essay001().inputs())
    spread = closed_loop(model, prefill, 300, mem.batch_max, ceiling, users)
    point = closed_loop(model, prefill, 300, mem.batch_max, ceiling, users, clustering=share)
    x, tpot = point.throughput_rps, point.tpot_s
    by_hand = T_P + C_PREFILL * np.maximum(x * (users - 1) / users * tpot, share * (users - 1))
    assert np.allclose(point.ttft_s, by_hand, rtol=1e-9)
    assert np.allclose(x * (point.ttft_s + 299 * tpot), users, rtol=1e-9)
    assert np.all(point.ttft_s > spread.ttft_s) and np.all(x < spread.throughput_rps)


def test_clustering_is_the_engine_profiles_and_only_without_think_time():
    """An engine profile sets the fitted share; the essays' convention (ideal) none; ``workload.clustering`` wins;
    a think time spreads the users, so the share changes nothing there."""
    from capacity.inputs import engines

    assert essay001(concurrency=40).workload.clustering == 0.0
    vllm = {**ESSAY_001, "serving": {**ESSAY_001["serving"], "engine": "vllm"}}
    profile = Scenario.from_dict({**vllm, "workload": {**vllm["workload"], "concurrency": 40}})
    assert profile.workload.clustering == engines.CLOSED_LOOP_CLUSTERING["dense"] > 0
    moe = Scenario.from_dict({"model": {"name": "gpt-oss-120b"}, "gpu": {"name": "h200", "count": 2},
                              "serving": {"engine": "vllm"},
                              "workload": {"prompt_tokens": 1000, "output_tokens": 500, "concurrency": 40}})
    assert moe.workload.clustering == engines.CLOSED_LOOP_CLUSTERING["moe"] > engines.CLOSED_LOOP_CLUSTERING["dense"]
    share = f"{engines.CLOSED_LOOP_CLUSTERING['moe']:.1%} of the other users"
    assert any(share in line and "MoE models" in line for line in moe.serving.engine_defaults)
    assert any("same step" in line for line in profile.serving.engine_defaults)
    mine = Scenario.from_dict({**vllm, "workload": {**vllm["workload"], "concurrency": 40, "clustering": 0}})
    assert mine.workload.clustering == 0.0
    with pytest.raises(ScenarioError, match=r"clustering must be in \[0, 1\]"):
        essay001(concurrency=40, clustering=1.5)
    model, mem, prefill, ceiling = replica_stages({**essay001().inputs(), "think_time_s": 2.0})
    a = closed_loop(model, prefill, 300, mem.batch_max, ceiling, 40.0, 2.0)
    b = closed_loop(model, prefill, 300, mem.batch_max, ceiling, 40.0, 2.0, clustering=0.5)
    assert float(a.ttft_s) == float(b.ttft_s) and float(a.throughput_rps) == float(b.throughput_rps)
