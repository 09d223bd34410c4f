"""Readers for ``capacity calibrate``: a user's own vLLM runs as calibration rows.

Two sources besides the benchmark CSV (``calibration.read_benchmark_csv``), both read through the bounded
readers of ``safe_load`` (regular files only, size limit, no NaN, no duplicate keys, bounded integers):

**``vllm bench serve --save-result`` JSON.** vLLM's serving benchmark (``vllm/benchmarks/serve.py``, formerly
``benchmarks/benchmark_serving.py``) writes one JSON object per run: the setup (``request_rate``, a number or
the string ``"inf"``; ``max_concurrency``, an integer or null; ``num_prompts``; ``model_id``; any
``--metadata KEY=VALUE`` pairs as text) merged with the results (``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``output_throughput``,
``mean/median/std/p99_{ttft,tpot,itl,e2el}_ms``; ``input_lens``/``output_lens`` only with
``--save-detailed``). ``--append-result`` appends further objects, one per line. Each run becomes one row:

    prompt_tokens = total_input_tokens / completed          output_tokens = total_output_tokens / completed
    load:   request_rate finite -> open loop at that rate;  else max_concurrency -> closed loop;  else offline
    points: TPOT = mean_tpot_ms;  output tokens/s = output_throughput;
            TTFT = mean_ttft_ms at a rate or a max_concurrency (the library's queue and closed loop predict it,
            request latency included); not offline, where the wait depends on how many requests were sent
    tensor parallel: metadata ``tensor_parallel_size`` (or ``tp``), else the scenario's ``gpu.count``

**A Prometheus text scrape of vLLM's ``/metrics``** (``vllm/v1/metrics/loggers.py``), optionally minus an
earlier scrape (``since``) so that only the benchmark window counts. Counters and histograms are summed over
their label sets (engines); with Δ the change since the earlier scrape (or since the server started):

    mean decode batch   B = Δ vllm:generation_tokens_total / Δ vllm:iteration_tokens_total_count
                        (each running sequence emits one generation token per engine step)
    mean ITL            Δ vllm:inter_token_latency_seconds_sum / Δ ..._count
                        (vllm:time_per_output_token_seconds in versions without it)
    prompt, output      Δ vllm:request_prompt_tokens_sum / Δ _count,  Δ vllm:request_generation_tokens_sum / Δ _count
    point               TPOT = mean ITL at concurrency B (closed loop)

The gauges ``vllm:num_requests_running`` and ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc``
before vLLM 0.9) and the ``num_gpu_blocks`` label of ``vllm:cache_config_info`` are read and reported in the
notes, not fitted: a snapshot says little about a whole run; the engine's block count is there to set beside
the planner's ``pool_blocks``.
Every error is one line naming the file, the run or line, and the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capacity.errors import ScenarioError, clean_line, show
from capacity.fileio.safe_load import parse_json, parse_json_list, read_text
from capacity.inputs.numbers import NUMBER, WHOLE_MAX, parse_whole
from capacity.planning.calibration import BenchmarkRow

#: Largest ``vllm bench serve`` result file [B]: a summary is a few kB; ``--save-detailed`` adds per-request
#: lists (tens of bytes a request, generated texts aside).
MAX_BENCH_JSON_BYTES = 20_000_000
#: Largest metrics scrape [B] (a vLLM scrape is 20 to 100 kB) and most lines read from it.
MAX_SCRAPE_BYTES, MAX_SCRAPE_LINES = 5_000_000, 100_000
#: Longest line of a scrape [characters]: a vLLM sample line with its labels is a few hundred; one regex match of a
#: 4.9 MB line took 851 MB.
MAX_SCRAPE_LINE = 16_384
#: Largest mean decode batch a scrape may give [sequences] (vLLM's max_num_seqs is at most a few thousand).
MAX_MEAN_BATCH = 1_000_000
#: Largest total of one counter over its series: 1e18 tokens or seconds, beyond any server's life.
MAX_COUNTER = 1e18
#: Most runs one result file may hold (``--append-result``); the fit's own limit is ``MAX_CSV_ROWS``.
MAX_RUNS = 10_000


def sniff(text: str) -> str:
    """'json', 'prometheus' or 'csv' from a file's text (its first non-blank character and lines)."""
    start = text.lstrip()[:1]
    if start in ("{", "["):
        return "json"
    head = text[:20_000]
    if re.search(r"^(# (TYPE|HELP) |vllm:)", head, re.MULTILINE):
        return "prometheus"
    return "csv"


# --- vllm bench serve JSON --------------------------------------------------------------------------------------

def _number(run: Mapping[str, Any], key: str, where: str, problems: list[str], positive: bool = True,
            required: bool = True, whole: bool = False) -> float | None:
    """A finite number of at most ``WHOLE_MAX`` (``whole``: a whole number, as counts are) from a run's ``key``;
    one problem line naming the run and the field otherwise."""
    value = run.get(key)
    if value is None:
        if required:
            problems.append(f"{where}: {key} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        problems.append(f"{where}: {key} must be a finite number, got {show(value)}")
        return None
    if value < 0 or (positive and value == 0) or value > WHOLE_MAX or (whole and value != math.floor(value)):
        kind = "a whole number" if whole else "a number"
        problems.append(f"{where}: {key} must be {kind} in [{'1' if whole and positive else '0'}, {WHOLE_MAX:.0e}]"
                        f"{' (> 0)' if positive and not whole else ''}, got {show(value)}")
        return None
    return float(value)


def _runs(text: str, origin: str) -> list[Any]:
    """The JSON objects of a result file: one object, a list of objects, or one object per line; more than
    ``MAX_RUNS`` is refused while reading, before the rest is parsed."""
    stripped = text.strip()
    too_many = f"{origin} holds over {MAX_RUNS:,} runs; calibration takes at most {MAX_RUNS:,}"
    if stripped.startswith("["):
        runs = parse_json_list(stripped, origin, MAX_RUNS, "runs")
    else:
        try:
            runs = [parse_json(stripped, origin)]
        except ScenarioError:
            if "\n" not in stripped:
                raise
            runs = []
            for number, match in enumerate(re.finditer(r"[^\n]+", stripped), start=1):
                line = match.group()
                if not line.strip():
                    continue
                if len(runs) >= MAX_RUNS:
                    raise ScenarioError(too_many) from None
                runs.append(parse_json(line, f"{origin} line {number}"))
    if not runs:
        raise ScenarioError(f"{origin} holds no benchmark run")
    return runs


def _rate(value: Any, where: str, problems: list[str]) -> float:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("inf", "infinity")):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        problems.append(f"{where}: request_rate must be a positive number or \"inf\", got {show(value)}")
        return math.inf
    return float(value)


def _tensor_parallel(run: Mapping[str, Any], where: str, problems: list[str]) -> float | None:
    for key in ("tensor_parallel_size", "tensor_parallel", "tp"):
        if key in run:
            try:  # ASCII digits only: "²" passes str.isdigit and "٣" reads as 3 with int()
                return float(parse_whole(run[key], f"{where}: {key}", 1, 1024))
            except ScenarioError as exc:
                problems.extend(exc.problems)
                return None
    return None


def rows_from_vllm_bench(text: str, origin: str) -> list[BenchmarkRow]:
    """One ``BenchmarkRow`` per ``vllm bench serve`` run in ``text`` (see the module docstring); ScenarioError naming
    the run and the field for every problem."""
    origin = clean_line(origin, 120)
    runs = _runs(text, origin)
    rows, problems = [], []
    for i, run in enumerate(runs, start=1):
        where = f"{origin} run {i}" if len(runs) > 1 else origin
        if not isinstance(run, dict):
            problems.append(f"{where} must be a JSON object (a vllm bench serve result), got {show(run)}")
            continue
        if "completed" not in run or not ("mean_tpot_ms" in run or "output_throughput" in run):
            problems.append(f"{where} is not a vllm bench serve result: it needs completed and mean_tpot_ms or "
                            f"output_throughput (written by vllm bench serve --save-result)")
            continue
        before = len(problems)
        completed = _number(run, "completed", where, problems, whole=True)
        total_in = _number(run, "total_input_tokens", where, problems, whole=True)
        total_out = _number(run, "total_output_tokens", where, problems, whole=True)
        rate = _rate(run.get("request_rate"), where, problems)
        concurrency = _number(run, "max_concurrency", where, problems, required=False, whole=True)
        tp = _tensor_parallel(run, where, problems)
        tpot = _number(run, "mean_tpot_ms", where, problems, required=False)
        throughput = _number(run, "output_throughput", where, problems, required=False)
        ttft = _number(run, "mean_ttft_ms", where, problems, required=False)
        if len(problems) > before or completed is None or total_in is None or total_out is None:
            continue
        setup: dict[str, float] = {"prompt_tokens": float(max(1, round(total_in / completed))),
                                   "output_tokens": float(max(1, round(total_out / completed)))}
        if tp is not None:
            setup["tensor_parallel"] = tp
        notes = []
        if math.isfinite(rate):
            setup["request_rate"] = rate
            if concurrency is not None:
                notes.append(f"{where}: max_concurrency {concurrency:g} with request_rate {rate:g}/s is "
                             f"predicted as the open loop at that rate")
        elif concurrency is not None:
            setup["concurrency"] = concurrency
        measured: dict[str, float] = {}
        if tpot is not None and setup["output_tokens"] > 1:
            measured["tpot_s"] = tpot * 1e-3
        if throughput is not None:
            measured["output_tokens_per_s"] = throughput
        if ttft is not None and ("request_rate" in setup or "concurrency" in setup):
            measured["ttft_s"] = ttft * 1e-3
        if not measured:
            problems.append(f"{where}: no measured value (mean_tpot_ms or output_throughput)")
            continue
        failed = run.get("failed")
        if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0:
            notes.append(f"{where}: {failed:,} requests failed; the means cover the {completed:,.0f} completed")
        rows.append(BenchmarkRow(len(rows) + 1, setup, measured, where, tuple(notes)))
    if problems:
        raise ScenarioError(*problems)
    return rows


def read_vllm_bench(path: str | Path) -> list[BenchmarkRow]:
    """``rows_from_vllm_bench`` of a result file (a regular file of at most ``MAX_BENCH_JSON_BYTES``)."""
    return rows_from_vllm_bench(read_text(path, MAX_BENCH_JSON_BYTES, "vllm bench serve result"), str(path))


# --- Prometheus text scrape -------------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)(?:\s+-?\d+)?\s*$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

#: Samples read from a scrape, summed over label sets (counters and histogram sums/counts).
SUMMED = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:iteration_tokens_total_count",
          "vllm:iteration_tokens_total_sum", "vllm:inter_token_latency_seconds_sum",
          "vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_sum",
          "vllm:time_per_output_token_seconds_count", "vllm:time_to_first_token_seconds_sum",
          "vllm:time_to_first_token_seconds_count", "vllm:request_prompt_tokens_sum",
          "vllm:request_prompt_tokens_count", "vllm:request_generation_tokens_sum",
          "vllm:request_generation_tokens_count")
#: Gauges reported (summed over engines for the running requests; the largest for the KV usage).
GAUGES = ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True, slots=True)
class Scrape:
    """What a scrape says: summed samples by name, gauges, and the engine's KV blocks (``cache_config_info``)."""

    sums: dict[str, float]
    gauges: dict[str, float]
    num_gpu_blocks: float | None
    block_size: float | None


def parse_scrape(text: str, origin: str) -> Scrape:
    """Parse Prometheus text exposition; only the samples ``SUMMED``/``GAUGES`` name are kept (bounded memory).
    A malformed sample line of a kept metric is an error naming the line; other lines are skipped."""
    origin = clean_line(origin, 120)
    sums: dict[str, float] = {}
    gauges: dict[str, float] = {}
    blocks: float | None = None
    block_size: float | None = None
    seen = False
    series: set[tuple[str, str]] = set()
    for number, match_line in enumerate(re.finditer(r"[^\n]*\n?", text), start=1):
        line = match_line.group()
        if not line:
            break
        if number > MAX_SCRAPE_LINES:
            raise ScenarioError(f"{origin} has over {MAX_SCRAPE_LINES:,} lines; a vLLM scrape has a few thousand")
        if len(line) > MAX_SCRAPE_LINE:
            raise ScenarioError(f"{origin} line {number} is {len(line):,} characters long; a scrape line is limited "
                                f"to {MAX_SCRAPE_LINE:,}")
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(None, 1)[0]
        if name not in SUMMED and name not in GAUGES and name != "vllm:cache_config_info":
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ScenarioError(f"{origin} line {number}: not a Prometheus sample: {clean_line(line, 100)}")
        text_value = match.group(3)
        if text_value not in ("NaN", "+Inf", "-Inf", "Inf") and (len(text_value) > 40 or
                                                                 not NUMBER.fullmatch(text_value)):
            raise ScenarioError(f"{origin} line {number}: {name} value {clean_line(text_value, 40)!r} is not "
                                f"a number")
        value = float(text_value)
        if not math.isfinite(value) or value < 0:
            raise ScenarioError(f"{origin} line {number}: {name} must be a finite number >= 0, got {value!r}")
        key = (name, tuple(sorted(_LABEL.findall(match.group(2) or ""))))
        if key in series:  # one series twice is a concatenated or corrupt scrape: summing it would double it
            raise ScenarioError(f"{origin} line {number}: {name}{clean_line(match.group(2) or '', 80)} appears "
                                f"twice; a scrape holds each series once")
        series.add(key)
        seen = True
        if name == "vllm:cache_config_info":
            labels = dict(_LABEL.findall(match.group(2) or ""))
            for label, target in (("num_gpu_blocks", "blocks"), ("block_size", "size")):
                label_value = labels.get(label, "")
                if label_value.isascii() and label_value.isdigit() and len(label_value) < 16:
                    if target == "blocks":
                        blocks = (blocks or 0.0) + float(label_value)
                    else:
                        block_size = float(label_value)
        elif name in GAUGES:
            gauges[name] = max(gauges.get(name, 0.0), value) if "usage" in name else gauges.get(name, 0.0) + value
        else:
            sums[name] = sums.get(name, 0.0) + value
            if not math.isfinite(sums[name]) or sums[name] > MAX_COUNTER:
                raise ScenarioError(f"{origin} line {number}: {name} sums to over {MAX_COUNTER:.0e} over its "
                                    f"series; no vLLM server counts that far")
    if not seen:
        raise ScenarioError(f"{origin} holds no vLLM metrics (vllm:generation_tokens_total, "
                            f"vllm:inter_token_latency_seconds, ...); scrape the server's /metrics")
    return Scrape(sums, gauges, blocks, block_size)


def _delta(after: Scrape, before: Scrape | None, name: str) -> float | None:
    if name not in after.sums:
        return None
    value = after.sums[name] - (before.sums.get(name, 0.0) if before else 0.0)
    return value


def rows_from_scrape(after: Scrape, origin: str, before: Scrape | None = None) -> list[BenchmarkRow]:
    """One ``BenchmarkRow`` from a scrape (minus an earlier one): TPOT (mean ITL) at the mean decode batch."""
    origin = clean_line(origin, 120)
    problems: list[str] = []

    def mean(total: str, count: str, what: str) -> float | None:
        s, n = _delta(after, before, total), _delta(after, before, count)
        if s is None or n is None:
            return None
        if n <= 0 or s < 0:
            problems.append(f"{origin}: {count} did not grow{' since the earlier scrape' if before else ''}, so "
                            f"there is no {what} to read (run the benchmark between the two scrapes)")
            return None
        return s / n

    itl = mean("vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count", "inter-token time")
    if itl is None and not problems:
        itl = mean("vllm:time_per_output_token_seconds_sum", "vllm:time_per_output_token_seconds_count",
                   "time per output token")
    prompt = mean("vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens_count", "prompt length")
    output = mean("vllm:request_generation_tokens_sum", "vllm:request_generation_tokens_count", "output length")
    generated = _delta(after, before, "vllm:generation_tokens_total")
    steps = _delta(after, before, "vllm:iteration_tokens_total_count")
    missing = [name for name, value in (("vllm:inter_token_latency_seconds", itl),
                                        ("vllm:request_prompt_tokens", prompt),
                                        ("vllm:request_generation_tokens", output),
                                        ("vllm:generation_tokens_total", generated),
                                        ("vllm:iteration_tokens_total", steps)) if value is None]
    if missing and not problems:
        problems.append(f"{origin} lacks {', '.join(missing)}; calibration needs vLLM's token counters and "
                        f"latency histograms (vLLM 0.6 or later, /metrics)")
    if problems:
        raise ScenarioError(*problems)
    assert itl is not None and prompt is not None and output is not None and generated is not None
    if not steps or steps <= 0 or generated <= 0:
        raise ScenarioError(f"{origin}: no generation steps{' since the earlier scrape' if before else ''}")
    batch = generated / steps
    if not 0 < batch <= MAX_MEAN_BATCH or not 0 < itl < math.inf or not 0 < prompt < 1e12 or not 0 < output < 1e12:
        raise ScenarioError(f"{origin}: the counters give a mean decode batch of {batch:.3g} sequences, an inter-token "
                            f"time of {itl:.3g} s and {prompt:.3g} prompt / {output:.3g} output tokens a request; "
                            f"a vLLM server runs at most {MAX_MEAN_BATCH:,} sequences at once (a corrupt scrape?)")
    notes = [f"{origin}: mean decode batch {batch:,.1f} sequences (generation tokens / engine steps), mean "
             f"inter-token time {itl * 1e3:,.2f} ms over {generated:,.0f} tokens"]
    running = after.gauges.get("vllm:num_requests_running")
    usage = after.gauges.get("vllm:kv_cache_usage_perc", after.gauges.get("vllm:gpu_cache_usage_perc"))
    if running is not None or usage is not None:
        notes.append(f"{origin}: at the scrape {running if running is not None else 'n/a'} requests running, KV "
                     f"cache {usage * 100 if usage is not None else float('nan'):,.1f}% used")
    if after.num_gpu_blocks:
        notes.append(f"{origin}: the engine's KV pool holds {after.num_gpu_blocks:,.0f} blocks"
                     f"{f' of {after.block_size:,.0f} tokens' if after.block_size else ''} (vllm:cache_config_info); "
                     f"compare pool_blocks in capacity evaluate")
    setup = {"prompt_tokens": float(max(1, round(prompt))), "output_tokens": float(max(1, round(output))),
             "concurrency": max(1.0, batch)}
    return [BenchmarkRow(1, setup, {"tpot_s": itl}, f"{origin} (metrics)", tuple(notes))]


def read_scrape(path: str | Path) -> Scrape:
    """``parse_scrape`` of a file (a regular file of at most ``MAX_SCRAPE_BYTES``)."""
    return parse_scrape(read_text(path, MAX_SCRAPE_BYTES, "metrics scrape"), str(path))


__all__ = ["GAUGES", "MAX_BENCH_JSON_BYTES", "MAX_RUNS", "MAX_SCRAPE_BYTES", "MAX_SCRAPE_LINES", "SUMMED",
           "Scrape", "parse_scrape", "read_scrape", "read_vllm_bench", "rows_from_scrape", "rows_from_vllm_bench",
           "sniff"]
