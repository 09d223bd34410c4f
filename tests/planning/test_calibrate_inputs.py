"""`capacity calibrate` from a user's own vLLM runs: `vllm bench serve --save-result` JSON and /metrics scrapes.

The fixtures are written here by hand from the roofline (docs/model.md): Llama 3.1 8B in fp16 on one H100 SXM,
N = 8,030,261,248 parameters (2N bytes of weights), 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B of KV
per token, 3.35 TB/s and 989.5 TFLOP/s peak (gpu_catalog.yaml). At batch B and average context c a decode
step reads (2N + B c 131,072) B, memory-bound here, and a prefill of P tokens does P 2N FLOPs, compute-bound:

    t_step(B) = (2N + B c kv) / (BW e_bw) + o          t_prefill(P) = P 2N / (F e_fl) + o
    closed loop at concurrency C, about:  TPOT = t_step(C) + (C - 1) t_prefill(P) / A,
                                          tokens/s = A / (t_prefill + (A - 1) TPOT) at C = 1

with c = P + A / 2. The "measured" values use e_bw = 0.8, e_fl = 0.5, o = 2 ms; the fit starts from the
catalog defaults and must find those three numbers. Users in flight are measured as the library's closed loop
predicts them at those factors (``looped``: ``analysis.closed_loop``, the one composition calibration fits through),
which the hand formulas match to 0.1% at one user and 1% at eight (``test_the_hand_roofline_is_the_closed_loop``).
"""

import argparse
import functools
import json
import math

import pytest
import yaml

from capacity import ScenarioError
from capacity.cli.calibrate_command import add_calibrate_command, run_calibrate
from capacity.planning.calibrate_inputs import parse_scrape, rows_from_scrape, rows_from_vllm_bench, sniff
from capacity.planning.calibration import calibrate, read_measurements

N, KV, BW, F = 8_030_261_248, 131_072, 3.35e12, 989.5e12
E_BW, E_FL, OVERHEAD = 0.8, 0.5, 0.002
SCENARIO = "model: llama-3.1-8b\ngpu: h100-sxm\nserving: {engine: ideal, max_model_len: 16384}\n" \
           "workload: {prompt_tokens: 1024, output_tokens: 256}\n"


def step_s(batch, prompt, output):
    return (2 * N + batch * (prompt + output / 2) * KV) / (BW * E_BW) + OVERHEAD


def prefill_s(prompt):
    return prompt * 2 * N / (F * E_FL) + OVERHEAD


def tpot_s(concurrency, prompt, output):
    return step_s(concurrency, prompt, output) + (concurrency - 1) * prefill_s(prompt) / output


@functools.cache
def looped(concurrency, prompt, output, latency=0.0):
    """(TPOT [s], TTFT [s], output tokens/s) of ``concurrency`` users in flight: the library's closed loop on the
    scenario at the true factors (and a request latency [s])."""
    from capacity import Scenario

    data = yaml.safe_load(SCENARIO)
    data["gpu"] = {"name": "h100-sxm", "bandwidth_efficiency": E_BW, "flops_efficiency": E_FL}
    data["serving"].update(step_overhead=OVERHEAD, request_latency=latency)
    data["workload"] = {"prompt_tokens": prompt, "output_tokens": output, "concurrency": concurrency}
    r = Scenario.from_dict(data).evaluate()
    return float(r["closed_loop_tpot_s"]), float(r["closed_loop_ttft_s"]), float(r["closed_loop_tokens_per_s"])


def test_the_hand_roofline_is_the_closed_loop():
    tpot, ttft, rate = looped(1, 1000, 200)
    assert ttft == pytest.approx(prefill_s(1000), rel=1e-9)  # one user: the prefill
    assert tpot == pytest.approx(step_s(1, 1000, 200), rel=1e-3)
    assert rate == pytest.approx(200 / (prefill_s(1000) + 199 * step_s(1, 1000, 200)), rel=1e-3)
    assert looped(8, 2000, 250)[0] == pytest.approx(tpot_s(8, 2000, 250), rel=1e-2)


def bench_run(prompt, output, completed=50, concurrency=1, rate="inf", latency=0.0):
    """A `vllm bench serve --save-result` object (vllm/benchmarks/serve.py field names) for one run (the timing
    values are the library's closed loop at the true factors, ``looped``, at a concurrency; at concurrency None
    they only need to be valid)."""
    if concurrency:
        tpot, ttft, throughput = looped(concurrency, prompt, output, latency)
    else:
        tpot, ttft = tpot_s(64, prompt, output), prefill_s(prompt)
        throughput = output / (ttft + output * tpot)
    return {"date": "20261130-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
            "model_id": "meta-llama/Llama-3.1-8B", "tokenizer_id": "meta-llama/Llama-3.1-8B", "num_prompts": completed,
            "request_rate": rate, "burstiness": 1.0, "max_concurrency": concurrency, "duration": 100.0,
            "completed": completed, "failed": 0, "total_input_tokens": prompt * completed,
            "total_output_tokens": output * completed, "request_throughput": 0.5,
            "output_throughput": throughput, "total_token_throughput": 1.0,
            "mean_ttft_ms": ttft * 1e3, "median_ttft_ms": ttft * 1e3, "std_ttft_ms": 0.0, "p99_ttft_ms": ttft * 1e3,
            "mean_tpot_ms": tpot * 1e3, "median_tpot_ms": tpot * 1e3, "std_tpot_ms": 0.0, "p99_tpot_ms": tpot * 1e3,
            "mean_itl_ms": tpot * 1e3, "median_itl_ms": tpot * 1e3, "std_itl_ms": 0.0, "p99_itl_ms": tpot * 1e3,
            "max_output_tokens_per_s": 100.0, "max_concurrent_requests": concurrency}


def scrape(generated, steps, itl_sum, itl_count, prompt_sum, output_sum, requests):
    """A vLLM /metrics text (vllm/v1/metrics/loggers.py names), two engines splitting every counter in half."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge",
             'vllm:num_requests_running{engine="0",model_name="llama"} 4.0',
             'vllm:num_requests_running{engine="1",model_name="llama"} 4.0',
             'vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.25',
             'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="27000"} 1.0',
             "# TYPE vllm:generation_tokens_total counter"]
    for engine in ("0", "1"):
        labels = f'{{engine="{engine}",model_name="llama"}}'
        lines += [f"vllm:generation_tokens_total{labels} {generated / 2}",
                  f"vllm:prompt_tokens_total{labels} {prompt_sum / 2}",
                  f"vllm:iteration_tokens_total_count{labels} {steps / 2}",
                  f"vllm:iteration_tokens_total_sum{labels} {(generated + prompt_sum) / 2}",
                  f'vllm:inter_token_latency_seconds_bucket{{engine="{engine}",le="+Inf",model_name="llama"}} '
                  f"{itl_count / 2}",
                  f"vllm:inter_token_latency_seconds_sum{labels} {itl_sum / 2}",
                  f"vllm:inter_token_latency_seconds_count{labels} {itl_count / 2}",
                  f"vllm:request_prompt_tokens_sum{labels} {prompt_sum / 2}",
                  f"vllm:request_prompt_tokens_count{labels} {requests / 2}",
                  f"vllm:request_generation_tokens_sum{labels} {output_sum / 2}",
                  f"vllm:request_generation_tokens_count{labels} {requests / 2}"]
    return "\n".join(lines) + "\n"


def test_a_bench_run_becomes_one_row_by_its_own_fields():
    rows = rows_from_vllm_bench(json.dumps(bench_run(1000, 200)), "run.json")
    assert len(rows) == 1
    row = rows[0]
    assert row.setup == {"prompt_tokens": 1000.0, "output_tokens": 200.0, "concurrency": 1.0}
    tpot, ttft, rate = looped(1, 1000, 200)
    assert row.measured["tpot_s"] == pytest.approx(tpot)
    assert row.measured["ttft_s"] == pytest.approx(ttft)  # one request in flight: TTFT is the prefill
    assert row.measured["output_tokens_per_s"] == pytest.approx(rate)


def test_bench_load_fields_map_to_the_three_kinds_of_load():
    offline = bench_run(500, 100, concurrency=None)
    concurrent = bench_run(500, 100, concurrency=16)
    rate = bench_run(500, 100, concurrency=None, rate=2.5)
    text = "\n".join(json.dumps(r) for r in (offline, concurrent, rate))  # --append-result: one object a line
    rows = rows_from_vllm_bench(text, "runs.json")
    assert [r.label for r in rows] == ["runs.json run 1", "runs.json run 2", "runs.json run 3"]
    assert "concurrency" not in rows[0].setup and "request_rate" not in rows[0].setup  # offline: the ceiling
    assert "ttft_s" not in rows[0].measured  # offline: the wait depends on how many requests were sent at once
    # users in flight and a rate: the closed loop's and the open queue's TTFT (the library predicts both)
    assert rows[1].setup["concurrency"] == 16 and rows[1].measured["ttft_s"] == pytest.approx(looped(16, 500, 100)[1])
    assert rows[2].setup["request_rate"] == 2.5 and rows[2].measured["ttft_s"] == pytest.approx(prefill_s(500))
    # total tokens / completed is the mean length, rounded to a whole token
    odd = bench_run(500, 100, completed=3)
    odd["total_input_tokens"], odd["total_output_tokens"] = 1000, 301
    assert rows_from_vllm_bench(json.dumps(odd), "x")[0].setup["prompt_tokens"] == round(1000 / 3)
    assert rows_from_vllm_bench(json.dumps(odd), "x")[0].setup["output_tokens"] == round(301 / 3)
    tagged = {**bench_run(500, 100), "tensor_parallel_size": "2"}  # vllm bench serve --metadata tensor_parallel_size=2
    assert rows_from_vllm_bench(json.dumps(tagged), "x")[0].setup["tensor_parallel"] == 2


def test_a_scrape_minus_an_earlier_one_gives_tpot_at_the_mean_batch():
    before = parse_scrape(scrape(1_000, 500, 5.0, 1_000, 10_000, 1_000, 10), "before.prom")
    prompt, output, batch = 2_000, 250, 8
    itl = tpot_s(batch, prompt, output)
    after = parse_scrape(scrape(1_000 + 40_000, 500 + 5_000, 5.0 + itl * 40_000, 1_000 + 40_000,
                                10_000 + 160 * prompt, 1_000 + 160 * output, 10 + 160), "after.prom")
    assert after.num_gpu_blocks == 27_000 and after.gauges["vllm:num_requests_running"] == 8.0
    (row,) = rows_from_scrape(after, "after.prom", before)
    assert row.setup == {"prompt_tokens": prompt, "output_tokens": output, "concurrency": 40_000 / 5_000}
    assert row.measured["tpot_s"] == pytest.approx(itl)
    assert any("8 requests running" in n or "8.0 requests running" in n for n in row.notes)
    assert any("27,000 blocks of 16 tokens" in n for n in row.notes)


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_fit_from_bench_json_and_a_scrape_gives_back_the_hand_factors(tmp_path):
    runs = [bench_run(1000, 200), bench_run(4000, 100), bench_run(300, 300)]
    bench = _write(tmp_path, "bench.json", "\n".join(json.dumps(r) for r in runs))
    prompt, output, batch = 2_000, 250, 8
    before = _write(tmp_path, "before.prom", scrape(1_000, 500, 5.0, 1_000, 10_000, 1_000, 10))
    after = _write(tmp_path, "after.prom", scrape(41_000, 5_500, 5.0 + looped(batch, prompt, output)[0] * 40_000,
                                                   41_000, 10_000 + 160 * prompt, 1_000 + 160 * output, 170))
    scenario = yaml_mapping()
    observations, default, fitted = calibrate(scenario, [bench, after], since=before)
    assert len(observations) == 3 * 3 + 1  # TPOT, TTFT, tokens/s per run; TPOT from the scrape
    assert default.mape > 5
    f = fitted.factors
    assert f.bandwidth_efficiency == pytest.approx(E_BW, rel=1e-6)
    assert f.flops_efficiency == pytest.approx(E_FL, rel=1e-6)
    assert f.step_overhead_s == pytest.approx(OVERHEAD, rel=1e-5)
    assert fitted.mape < 1e-4


def test_runs_at_users_in_flight_fit_the_request_latency_too(tmp_path):
    # vllm bench serve at 1, 8 and 32 users behind a front end that adds 40 ms to every first token: the TTFTs at
    # every concurrency are read, and the default fit takes the latency with the three step factors.
    runs = [bench_run(p, a, concurrency=c, latency=0.04) for p, a in ((1000, 200), (4000, 100)) for c in (1, 8, 32)]
    bench = _write(tmp_path, "bench.json", "\n".join(json.dumps(r) for r in runs))
    observations, _, fitted = calibrate(yaml_mapping(), [bench])
    assert sum(o.metric == "ttft_s" for o in observations) == 6
    assert "request_latency" in fitted.fitted and fitted.held == {}
    f = fitted.factors
    assert f.request_latency_s == pytest.approx(0.04, rel=1e-4)
    assert f.bandwidth_efficiency == pytest.approx(E_BW, rel=1e-4)
    assert f.flops_efficiency == pytest.approx(E_FL, rel=1e-4)
    assert f.step_overhead_s == pytest.approx(OVERHEAD, rel=1e-3)


def yaml_mapping():
    import yaml

    return yaml.safe_load(SCENARIO)


def _args(tmp_path, *benchmarks, **extra):
    parser = argparse.ArgumentParser()
    add_calibrate_command(parser.add_subparsers())
    scenario = _write(tmp_path, "s.yaml", SCENARIO)
    argv = ["calibrate", str(scenario), *map(str, benchmarks)]
    for key, value in extra.items():
        argv += [f"--{key}", str(value)]
    return parser.parse_args(argv)


def test_the_command_reads_bench_json_saves_a_profile_and_reports_notes(tmp_path):
    bench = _write(tmp_path, "bench.json", "\n".join(json.dumps(r) for r in (bench_run(1000, 200),
                                                                              bench_run(4000, 100))))
    profiles = tmp_path / "profiles.yaml"
    out = run_calibrate(_args(tmp_path, bench, save="h100-mine", profiles=profiles, format="json"))
    report = json.loads(out[: out.rindex("}") + 1])
    assert report["factors"]["bandwidth_efficiency"] == pytest.approx(E_BW, rel=1e-6)
    assert report["factors"]["step_overhead"] == pytest.approx(OVERHEAD, rel=1e-5)
    assert "saved profile" in out and profiles.exists()


def test_sniff_tells_the_kinds_apart():
    assert sniff(json.dumps(bench_run(10, 10))) == "json"
    assert sniff(scrape(1, 1, 1, 1, 1, 1, 1)) == "prometheus"
    assert sniff("prompt_tokens,output_tokens,batch_size,tpot_ms\n1,2,3,4\n") == "csv"


@pytest.mark.parametrize("text, message", [
    ('{"completed": 5, "mean_tpot_ms": 5}', "total_input_tokens is missing"),
    ('{"completed": 0, "total_input_tokens": 1, "total_output_tokens": 1, "mean_tpot_ms": 5}',
     "completed must be a whole number in [1"),
    ('{"completed": 5, "total_input_tokens": 10, "total_output_tokens": 10, "mean_tpot_ms": "fast"}',
     "mean_tpot_ms must be a finite number"),
    ('{"completed": 5, "total_input_tokens": 10, "total_output_tokens": 10, "mean_tpot_ms": 5, '
     '"request_rate": "fast"}', "request_rate must be a positive number"),
    ('{"completed": 5, "total_input_tokens": 10, "total_output_tokens": 10, "mean_tpot_ms": NaN}', "not a JSON number"),
    ('{"completed": 5, "completed": 6}', "appears twice"),
    ('{"completed": 1' + "0" * 400 + "}", "digits"),
    ('{"hello": 1}', "is not a vllm bench serve result"),
    ("[1, 2]", "must be a JSON object"),
    ('{"completed": 5, "total_input_tokens": 10, "total_output_tokens": 10, "mean_tpot_ms": 5, "tp": "two"}',
     "tp must be a whole number"),
])
def test_bench_json_errors_are_one_line_naming_the_field(text, message):
    with pytest.raises(ScenarioError) as err:
        rows_from_vllm_bench(text, "bench.json")
    assert message in str(err.value)
    assert all("\n" not in p for p in err.value.problems)


@pytest.mark.parametrize("text, message", [
    ("# TYPE x counter\nx 1\n", "holds no vLLM metrics"),
    ('vllm:generation_tokens_total{engine="0"} lots\n', "line 1: vllm:generation_tokens_total value 'lots' is not"),
    ('# HELP\nvllm:generation_tokens_total{engine="0 5\n', "line 2: not a Prometheus sample"),
    ("vllm:generation_tokens_total -5\n", "finite number >= 0"),
    ("vllm:generation_tokens_total NaN\n", "finite number >= 0"),
])
def test_scrape_errors_name_the_line(text, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scrape(text, "m.prom")


def test_a_scrape_without_the_needed_metrics_or_growth_is_refused(tmp_path):
    partial = parse_scrape("vllm:generation_tokens_total 5\n", "m.prom")
    with pytest.raises(ScenarioError, match="lacks vllm:inter_token_latency_seconds"):
        rows_from_scrape(partial, "m.prom")
    same = parse_scrape(scrape(1_000, 500, 5.0, 1_000, 10_000, 1_000, 10), "m.prom")
    with pytest.raises(ScenarioError, match="did not grow since the earlier scrape"):
        rows_from_scrape(same, "m.prom", same)


def test_since_without_a_scrape_and_special_files_are_refused(tmp_path):
    bench = _write(tmp_path, "bench.json", json.dumps(bench_run(1000, 200)))
    before = _write(tmp_path, "before.prom", scrape(1_000, 500, 5.0, 1_000, 10_000, 1_000, 10))
    with pytest.raises(ScenarioError, match="no benchmark file is a metrics scrape"):
        read_measurements([bench], since=before)
    with pytest.raises(ScenarioError, match="not a regular file"):
        read_measurements(["/dev/zero"])
    big = _write(tmp_path, "big.prom", "# TYPE vllm:x counter\n" + "vllm:x 1\n" * 700_000)
    with pytest.raises(ScenarioError, match="limited to"):
        read_measurements([big])
    assert math.isfinite(len(big.read_bytes()))
