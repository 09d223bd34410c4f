"""The essays' worked examples (docs/model.md cites them), from the shipped scenario files, through the user's
code path."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

GIB = 2**30
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"




class TestEssay000Paging:
    """80 GiB GPU, 16 GiB weights, utilisation 0.90, llama-3-8b fp16, blocks of 16, 1,800-token requests."""

    def test_kv_bytes_per_token(self, essay000):
        # 2 x 8 KV heads x 128 x 2 bytes x 32 layers
        assert essay000.evaluate().kv_bytes_per_token == 2 * 8 * 128 * 2 * 32 == 131_072

    def test_pool_is_56_gib_in_28672_blocks(self, essay000):
        r = essay000.evaluate()
        assert r.pool_bytes == pytest.approx(56 * GIB)
        assert r.pool_blocks == 28_672  # 56 GiB / (16 tokens x 128 KiB)

    def test_contiguous_reservation_fits_14_and_wastes_52_9_gib(self, essay000):
        r = essay000.evaluate()
        assert r.max_requests_contiguous == 14  # 56 GiB / 4 GiB per 32,768-token reservation
        unused = 14 * (32_768 - 1_800) * 131_072
        assert round(unused / GIB, 1) == 52.9

    def test_request_holds_113_blocks_of_0_2207_gib(self, essay000):
        r = essay000.evaluate()
        assert r.blocks_per_request == 113
        assert round(113 * 16 * 131_072 / GIB, 4) == 0.2207

    def test_paged_fits_253_that_is_18_1x_contiguous(self, essay000):
        r = essay000.evaluate()
        assert r.max_requests_paged == 253
        assert round(r.max_requests_paged / r.max_requests_contiguous, 1) == 18.1

    def test_shared_prefix_fits_752(self, essay000):
        r = essay000.evaluate()
        assert (r.shared_blocks, r.private_blocks) == (75, 38)
        assert r.max_requests_shared_prefix == 752
        assert round(752 / 253, 2) == 2.97 and round(752 / 14) == 54

    def test_utilisation_070_fits_181_losing_28_5_percent(self, essay000):
        lower = essay000.with_changes(serving={"memory_utilization": 0.70}).evaluate()
        assert lower.max_requests_paged == 181
        assert round(100 * (1 - 181 / 253), 1) == 28.5


class TestEssay001SaleDay:
    """80 GB, 2 TB/s, 150 TFLOP/s, 3 ms overhead, 16 GB weights, 1,000 + 300 tokens, TPOT <= 50 ms."""

    def test_328_conversations_fit(self, essay001):
        assert essay001.evaluate().max_requests_paged == 328

    def test_decode_step_at_328(self, essay001):
        r = essay001.evaluate()
        assert round(r.decode_memory_s * 1e3, 1) == 32.7
        assert round(r.decode_compute_s * 1e3, 1) == 35.0
        assert round(r.decode_step_s * 1e3, 1) == 38.0
        assert r.context_tokens == 1_150

    def test_prefill_and_ceiling(self, essay001):
        r = essay001.evaluate()
        assert round(r.prefill_s * 1e3, 1) == 109.7
        assert round(r.gpu_time_per_request_s * 1e3, 1) == 144.4
        assert round(r.ceiling_rps, 1) == 6.9

    def test_decode_share_and_tpot_at_ceiling(self, essay001):
        r = essay001.evaluate()
        assert round(r.decode_share, 2) == 0.24
        assert round(r.tpot_at_ceiling_s * 1e3) == 158

    def test_goodput_under_50_ms(self, essay001):
        r = essay001.evaluate()
        assert round(r.goodput_rps, 1) == 5.9
        assert round(r.goodput_in_flight) == 88
        assert round(100 * r.capacity_given_up) == 15
        assert r.goodput_limit == "tpot"

    def test_single_stream_and_batching_gain(self, essay001):
        r = essay001.evaluate()
        assert r.single_stream_tokens_per_s == pytest.approx(125)
        assert round(r.batching_gain) == 17
        lighter = essay001.with_changes(model={"weight_bytes": 14e9}).evaluate()
        assert round(lighter.single_stream_tokens_per_s) == 143

    def test_critical_batch_is_75_tokens(self, essay001):
        assert essay001.evaluate().critical_batch == pytest.approx(75)


def test_cli_json_prints_spec_keys_in_base_units(scenario_dir):
    out = subprocess.run([sys.executable, "-m", "capacity", "evaluate", str(scenario_dir / "essay-001-sale-day.yaml"),
                          "--format", "json"], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    spec_keys = ("kv_bytes_per_token pool_bytes pool_blocks blocks_per_request max_requests_contiguous "
                 "max_requests_paged max_requests_shared_prefix decode_memory_s decode_compute_s decode_step_s "
                 "prefill_s ceiling_rps decode_share tpot_at_ceiling_s goodput_rps goodput_in_flight "
                 "single_stream_tokens_per_s cost_per_million_tokens").split()
    assert set(spec_keys) <= set(got)
    assert got["pool_bytes"] == pytest.approx(56e9)  # bytes, decimal: 80 GB x 0.9 - 16 GB
    assert got["prefill_s"] == pytest.approx(0.1097, abs=5e-5)  # seconds
    # $2/h over 5.897 requests/s x 300 tokens x 3,600 s, per million tokens
    assert got["cost_per_million_tokens"] == pytest.approx(2.0 / (got["goodput_rps"] * 300 * 3600) * 1e6)
