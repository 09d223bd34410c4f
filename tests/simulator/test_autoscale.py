"""The autoscaler's control loop, its delays, the HPA rule and the router, on a replica whose figures are stated."""

import numpy as np
import pytest

from capacity.simulator.autoscale import (
    DayResult,
    Delays,
    Policy,
    ReplicaModel,
    control,
    route,
)

#: A replica that serves 5 requests/s within its promises and 6 at its ceiling, with a flat 0.2 s TTFT.
REPLICA = ReplicaModel(goodput_rps=5.0, ceiling_rps=6.0, gpus=2, rates_rps=np.linspace(0, 6, 7),
                       ttft_s=np.full(7, 0.2), ttft_promise_s=2.0)


def steps(*pieces):
    """Arrivals per second: (rate, seconds) pieces one after another."""
    return np.concatenate([np.full(seconds, float(rate)) for rate, seconds in pieces])


def test_scale_up_delay_adds_provisioning_weight_loading_and_warm_up():
    # a 70B model in bf16 (140 GB of weights) over a 10 Gb/s link (1.25 GB/s): 112 s of loading
    d = Delays(provision_s=180, weight_bytes=140e9, load_bandwidth=1.25e9, warmup_s=30)
    assert d.weight_load_s == pytest.approx(112.0)
    assert d.scale_up_s == pytest.approx(180 + 112 + 30)
    assert Delays(weight_bytes=140e9).weight_load_s == 0.0  # no bandwidth stated: loading is free, and said so


def test_a_step_in_load_is_served_one_interval_plus_the_scale_up_delay_later():
    """10 requests/s then 30: the throughput rule wants ceil(10/5) = 2 then ceil(30/5) = 6 replicas. The first
    evaluation to see 30/s is at 615 s (its window 600-615 s); the new replicas serve from 615 + 120 s."""
    policy = Policy(tolerance=0.0)
    s = control(steps((10, 600), (30, 600)), policy, Delays(provision_s=120, scale_down_s=0), REPLICA)
    assert s.ready[0] == 2 and s.ready[734] == 2 and s.ready[735] == 6
    assert s.alive[614] == 2 and s.alive[615] == 6   # paid from the request
    # meanwhile the fleet is over its ceiling (12 requests/s) and the backlog grows 18 requests a second
    assert s.backlog[735] == pytest.approx(18 * (735 - 600))


def test_scale_down_waits_for_the_stabilisation_window():
    """The HPA scales down to the largest desired of the last 300 s: the last evaluation asking for 6 is at 1200 s,
    so 6 replicas stay until 1515 s, the first evaluation whose window no longer holds it."""
    s = control(steps((30, 1200), (10, 900)), Policy(tolerance=0.0), Delays(), REPLICA)
    assert s.alive[1514] == 6 and s.alive[1515] == 2
    assert Delays().scale_down_s == 300.0


def test_hpa_scale_up_limit_doubles_or_adds_four_per_evaluation():
    """From 2 replicas to a load wanting 20: at most max(2 x 2, 2 + 4) = 6, then 12, then 20 (Kubernetes' default
    scale-up behaviour)."""
    s = control(steps((10, 600), (100, 600)), Policy(tolerance=0.0), Delays(scale_down_s=0), REPLICA)
    assert [d[2] for d in s.decisions[:3]] == [6, 12, 20]


def test_tolerance_keeps_the_fleet_within_ten_percent():
    """10.5 requests/s on 2 replicas is 1.05 of the target: within the HPA's 0.1 tolerance nothing moves; with no
    tolerance the rule asks ceil(10.5 / 5) = 3."""
    a = steps((10, 600), (10.5, 600))
    assert control(a, Policy(), Delays(scale_down_s=0), REPLICA).alive.max() == 2
    assert control(a, Policy(tolerance=0.0), Delays(scale_down_s=0), REPLICA).alive.max() == 3


def test_fluid_wait_is_the_backlog_over_the_fleet_ceiling():
    """One replica (ceiling 6/s) under 10/s: the backlog grows 4 a second, an arrival at second k waits 4k / 6."""
    s = control(steps((10, 100)), Policy(), Delays(), REPLICA, static=1)
    k = np.arange(100)
    assert np.allclose(s.backlog, 4 * k)
    assert np.allclose(s.ttft_s, 4 * k / 6 + 0.2)


def test_queue_and_ttft_policies_react_to_the_backlog_the_throughput_rule_ignores():
    """A burst from 10 to 40 requests/s with a 120 s scale-up: every policy asks for ceil(40/5) = 8 replicas at once;
    the backlog built meanwhile then makes the queue policy ask for more, which the throughput rule never does."""
    a = steps((10, 600), (40, 600))
    d = Delays(provision_s=120, scale_down_s=300)
    runs = {k: control(a, Policy(kind=k, tolerance=0.0), d, REPLICA) for k in ("throughput", "queue", "ttft")}
    assert runs["throughput"].alive.max() == 8
    assert runs["queue"].alive.max() > 8 and runs["ttft"].alive.max() > 8
    assert runs["queue"].backlog[900:].max() < runs["throughput"].backlog[900:].max()


def test_every_request_goes_to_a_replica_routable_at_its_arrival():
    rng = np.random.default_rng(5)
    a = rng.poisson(np.repeat(rng.uniform(2, 40, 20), 180)).astype(float)
    s = control(a, Policy(kind="queue"), Delays(provision_s=60, scale_down_s=60), REPLICA)
    times = np.sort(rng.uniform(0, len(a), 20000))
    where = route(times, s, REPLICA.ceiling_rps)
    assert (where >= 0).all()
    assert np.all(s.ready_s[where] <= times) and np.all(times < s.removed_s[where])


def test_the_router_takes_turns_when_every_replica_is_idle():
    """Three replicas, one request a second (each takes 1/6 s): every replica is idle at each arrival, so requests
    go round in turn, 100 each."""
    s = control(np.full(300, 1.0), Policy(), Delays(), REPLICA, static=3)
    where = route(np.arange(300.0), s, REPLICA.ceiling_rps)
    assert np.bincount(where).tolist() == [100, 100, 100]


def test_a_fleet_kept_all_day_is_paid_for_the_whole_day():
    s = control(np.full(3600, 1.0), Policy(), Delays(), REPLICA, static=3)
    n = 10
    day = DayResult(s, np.arange(n, dtype=float), np.zeros(n), np.zeros(n), np.arange(n) + 1.0,
                    np.zeros(n, dtype=np.int64), REPLICA.gpus, 3600.0)
    assert day.gpu_hours == pytest.approx(3 * 2 * 1.0)   # 3 replicas x 2 GPUs x 1 h
    assert day.paid_replicas().min() == 3


def test_a_removed_replica_is_paid_until_its_last_request_leaves():
    s = control(steps((30, 600), (5, 1200)), Policy(tolerance=0.0), Delays(scale_down_s=0), REPLICA)
    removed = np.flatnonzero(np.isfinite(s.removed_s))
    assert removed.size
    r = int(removed[0])
    # one request on that replica, finishing 50 s after its removal
    day = DayResult(s, np.array([s.removed_s[r] - 1]), np.zeros(1), np.zeros(1), np.array([s.removed_s[r] + 50]),
                    np.array([r]), 1, 1800.0)
    assert day.paid_until_s[r] == s.removed_s[r] + 50
