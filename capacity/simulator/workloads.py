"""Request streams: arrival times and token counts, generated for a seed or replayed from a trace.

Arrival processes (the first request arrives at t = 0; rate λ in requests/s):

* ``fixed``: one request every ``1/λ`` s.
* ``poisson``: exponential gaps of mean ``1/λ``.
* ``gamma``: gamma gaps of mean ``1/λ`` and coefficient of variation ``burstiness``
  (shape ``1/cv²``; cv = 1 is Poisson, larger is burstier).
* ``on_off``: Poisson at λ during ``on`` seconds, then ``off`` seconds of silence.
* ``instant``: every request at t = 0 (a flood, to measure saturated throughput).
* ``closed``: a closed loop of ``concurrency`` clients; each sends its next request ``client_think_time`` after
  its previous one finished (or was refused), the first ones at t = 0 (``vllm bench serve --max-concurrency``).
  The arrivals are made by the engine as answers come (``Engine.client_free``), not drawn here.
* ``trace``: a CSV or JSONL file with ``arrival_s, prompt_tokens, output_tokens`` and
  optional ``prefix_id, prefix_tokens, priority`` per request.

Lengths are fixed, uniform integers or lognormal (``mu = ln(mean) - sigma²/2`` so the
mean is ``mean``). Everything comes from one ``numpy.random.Generator(seed)``.

Workload classes (a scenario's ``workloads:`` list, ``capacity/model/mix.py``): each request draws its class by
share, then its lengths from the class's distributions; it carries the class's shared prefix (prefix id =
class index) with probability ``prefix_hit_rate``, else none. ``RequestTable.workload_class`` says which.

Multi-turn sessions (``turns > 1``): sessions start as the arrival process says at ``rate / turns``; each
later turn comes an exponential think time (mean ``think_time``) after the one before (open loop: the gap
does not wait for the answer) with the whole conversation so far as its prompt prefix plus ``turn_tokens``
new tokens. The history is the turn's shared prefix (prefix id = session), so a replica that served the
session's earlier turns finds it cached; ``RequestTable.session`` says which session a request belongs to.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capacity.errors import ScenarioError, show
from capacity.fileio.safe_load import parse_json, read_bytes
from capacity.inputs.lengths import LengthDist
from capacity.simulator.config import SimulationConfig

#: Default number of synthetic requests when the simulation block does not say.
DEFAULT_REQUESTS = 1000
REQUIRED_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS = ("prefix_id", "prefix_tokens", "priority")
MAX_TRACE_PROBLEMS = 10
#: Most requests a trace may hold (the simulator's own limit of requests per run).
MAX_TRACE_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class RequestTable:
    """One array per request attribute, in arrival order. ``prefix_id`` -1 means no shared prefix."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray
    prefix_tokens: np.ndarray
    priority: np.ndarray
    workload_class: np.ndarray | None = None  # index into the scenario's workload classes; None: one shape
    session: np.ndarray | None = None  # multi-turn session of each request; None: independent requests

    def __len__(self) -> int:
        return len(self.arrival_s)

    def take(self, index: np.ndarray | slice) -> RequestTable:
        """The rows ``index`` of every column (in that order)."""
        return RequestTable(*(None if getattr(self, f) is None else getattr(self, f)[index]
                              for f in RequestTable.__dataclass_fields__))


def arrival_times(kind: str, n: int, rate: float, rng: np.random.Generator, burstiness: float = 2.0,
                  on_s: float = 1.0, off_s: float = 0.0) -> np.ndarray:
    """Arrival times [s] of ``n`` requests, the first at 0."""
    if kind in ("instant", "closed") or n == 0:  # closed: placeholders, the clients set them (``Engine.client_free``)
        return np.zeros(n)
    if kind == "fixed":
        return np.arange(n) / rate
    if kind == "gamma":
        shape = 1.0 / burstiness**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    else:
        gaps = rng.exponential(1.0 / rate, size=n)
    times = np.cumsum(gaps) - gaps[0]
    if kind == "on_off":
        times = times + np.floor(times / on_s) * off_s
    return times


def lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token counts drawn from ``dist`` [tokens], each >= 1."""
    if dist.kind == "fixed":
        return np.full(n, dist.value, dtype=np.int64)
    if dist.kind == "uniform":
        return rng.integers(dist.low, dist.high + 1, size=n, dtype=np.int64)
    mu = np.log(dist.mean) - dist.sigma**2 / 2.0
    return np.clip(np.rint(rng.lognormal(mu, dist.sigma, size=n)), dist.low, dist.high).astype(np.int64)


def generate(config: SimulationConfig) -> RequestTable:
    """The synthetic request stream of a simulation block (deterministic for ``config.seed``)."""
    rng = np.random.default_rng(config.seed)
    n = config.requests if config.requests is not None else DEFAULT_REQUESTS
    arrivals = arrival_times(config.arrival, n, config.rate, rng, config.burstiness, config.on_s, config.off_s)
    if config.turns > 1:
        return _generate_sessions(config, rng)
    if config.classes:
        return _generate_classes(config, arrivals, rng)
    prompts = lengths(config.prompt_tokens, n, rng)
    outputs = lengths(config.output_tokens, n, rng)
    if config.shared_prefix_tokens > 0:
        groups = rng.integers(0, config.prefix_groups, size=n) if config.prefix_groups > 1 else np.zeros(n, int)
        prefix_tokens = np.minimum(config.shared_prefix_tokens, prompts)
    else:
        groups, prefix_tokens = np.full(n, -1), np.zeros(n, dtype=np.int64)
    if len(config.priorities) > 1:
        weights = np.asarray(config.priority_weights or [1.0] * len(config.priorities), dtype=float)
        priority = rng.choice(np.asarray(config.priorities), size=n, p=weights / weights.sum())
    else:
        priority = np.full(n, config.priorities[0])
    return RequestTable(arrivals, prompts, outputs, groups.astype(np.int64), prefix_tokens.astype(np.int64),
                        priority.astype(np.int64))


def _generate_classes(config: SimulationConfig, arrivals: np.ndarray, rng: np.random.Generator) -> RequestTable:
    """Requests of the scenario's workload classes: class by share, its lengths, its prefix at its hit rate."""
    n, classes = len(arrivals), config.classes
    klass = rng.choice(len(classes), size=n, p=np.array([c.share for c in classes]))
    prompts, outputs = np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64)
    prefix_id, prefix_tokens = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    hit = rng.random(n)
    for j, c in enumerate(classes):
        rows = np.flatnonzero(klass == j)
        prompts[rows] = lengths(c.prompt, len(rows), rng)
        outputs[rows] = lengths(c.output, len(rows), rng)
        if c.shared_prefix_tokens > 0:
            shares = rows[hit[rows] < c.prefix_hit_rate]
            prefix_id[shares] = j
            prefix_tokens[shares] = np.minimum(c.shared_prefix_tokens, prompts[shares])
    return RequestTable(arrivals, prompts, outputs, prefix_id, prefix_tokens, np.full(n, config.priorities[0]),
                        klass.astype(np.int64))


def _generate_sessions(config: SimulationConfig, rng: np.random.Generator) -> RequestTable:
    """Multi-turn sessions: ``requests / turns`` sessions whose turns carry the conversation so far as prefix."""
    n = config.requests if config.requests is not None else DEFAULT_REQUESTS
    sessions, turns = max(1, n // config.turns), config.turns
    starts = arrival_times(config.arrival, sessions, config.rate / turns, rng, config.burstiness, config.on_s,
                           config.off_s)
    gaps = rng.exponential(config.think_time_s, size=(sessions, turns - 1))
    arrival = starts[:, None] + np.concatenate([np.zeros((sessions, 1)), np.cumsum(gaps, axis=1)], axis=1)
    first = lengths(config.prompt_tokens, sessions, rng)
    new = lengths(config.turn_tokens or config.prompt_tokens, sessions * (turns - 1), rng).reshape(sessions, -1)
    outputs = lengths(config.output_tokens, sessions * turns, rng).reshape(sessions, turns)
    history = np.zeros((sessions, turns), dtype=np.int64)  # tokens of the conversation before each turn
    prompts = np.zeros((sessions, turns), dtype=np.int64)
    prompts[:, 0] = first
    for k in range(1, turns):
        history[:, k] = prompts[:, k - 1] + outputs[:, k - 1]
        prompts[:, k] = history[:, k] + new[:, k - 1]
    session = np.repeat(np.arange(sessions), turns).reshape(sessions, turns)
    order = np.argsort(arrival.reshape(-1), kind="stable")
    flat = {"arrival": arrival.reshape(-1)[order], "prompt": prompts.reshape(-1)[order],
            "output": outputs.reshape(-1)[order], "history": history.reshape(-1)[order],
            "session": session.reshape(-1)[order]}
    prefix_id = np.where(flat["history"] > 0, flat["session"], -1).astype(np.int64)
    return RequestTable(flat["arrival"] - flat["arrival"][0], flat["prompt"], flat["output"], prefix_id,
                        flat["history"].astype(np.int64), np.full(len(order), config.priorities[0]), None,
                        flat["session"].astype(np.int64))


def _too_many(file: str) -> ScenarioError:
    return ScenarioError(f"{file} holds over {MAX_TRACE_ROWS:,} requests; a trace is limited to {MAX_TRACE_ROWS:,} "
                         f"(simulate a slice of it)")


def _rows_csv(text: str, file: str) -> tuple[list[int], list[dict[str, str]], list[str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = [c.strip() for c in (reader.fieldnames or [])]
    reader.fieldnames = columns
    lines, rows = [], []
    for row in reader:
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue
        if len(rows) >= MAX_TRACE_ROWS:
            raise _too_many(file)
        lines.append(reader.line_num)
        rows.append(row)
    return lines, rows, columns


def _rows_jsonl(text_: str, file: str) -> tuple[list[int], list[dict[str, object]], list[str]]:
    lines, rows, problems = [], [], []
    for number, text in enumerate(text_.splitlines(), start=1):
        if not text.strip():
            continue
        if len(rows) >= MAX_TRACE_ROWS:
            raise _too_many(file)
        try:
            row = parse_json(text, f"{file} line {number}", max_depth=2)
        except ScenarioError as exc:  # "t.jsonl line 2 is not valid JSON at line 1, column 2: ..." reads better as
            where = f"{file} line {number}"  # "t.jsonl line 2: not valid JSON at column 2: ..."
            problems.extend(p.replace(f"{where} is not valid JSON at line 1, ", f"{where}: not valid JSON at ")
                            for p in exc.problems)
            if len(problems) >= MAX_TRACE_PROBLEMS:
                break
            continue
        if not isinstance(row, dict):
            problems.append(f"{file} line {number}: expected a JSON object, got {show(text.strip()[:40])}")
            continue
        missing = [c for c in REQUIRED_COLUMNS if c not in row]
        if missing:
            problems.append(f"{file} line {number}: missing {', '.join(missing)} "
                            f"(each line needs {', '.join(REQUIRED_COLUMNS)})")
            continue
        lines.append(number)
        rows.append(row)
        if len(problems) >= MAX_TRACE_PROBLEMS:
            break
    if problems:
        raise ScenarioError(*problems)
    return lines, rows, sorted({k for row in rows for k in row})


def _number_column(name: str, raw: list[object], lines: list[int], file: str, problems: list[str],
                   integer: bool, minimum: float) -> np.ndarray:
    """Parse one column; append a problem naming the line for each bad value (first few only)."""
    values = np.empty(len(raw))
    for i, item in enumerate(raw):
        try:
            if isinstance(item, bool) or item is None:
                raise ValueError
            number = float(item.strip() if isinstance(item, str) else item)  # type: ignore[arg-type]
            if not np.isfinite(number) or (integer and not number.is_integer()) or number < minimum:
                raise ValueError
        except (TypeError, ValueError):
            kind = f"a whole number >= {minimum:g}" if integer else f"a number >= {minimum:g}"
            problems.append(f"{file} line {lines[i]}: {name} must be {kind}, got {show(item)}")
            if len(problems) >= MAX_TRACE_PROBLEMS:
                break
            number = np.nan
        values[i] = number
    return values


#: Largest trace read [bytes]: a million requests of CSV take about 30 MB.
MAX_TRACE_BYTES = 100_000_000




def read_trace(path: str | Path, max_model_len: int | None, base_dir: str | Path | None = None) -> RequestTable:
    """Read a CSV (header row) or JSONL trace; ScenarioError naming the file and line of each problem.

    Checks: required columns present, lengths whole and >= 1 (prefix_tokens >= 0 and <= prompt),
    arrivals >= 0 and in time order, ``prompt_tokens + output_tokens <= max_model_len``.
    """
    path = Path(path)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    file = path.name
    try:
        data = read_bytes(path, MAX_TRACE_BYTES, "trace")
    except ScenarioError as exc:
        raise ScenarioError(*(f"simulation.trace: {p}" for p in exc.problems)) from None
    try:
        text = data.decode("utf-8-sig")
        if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
            lines, rows, columns = _rows_jsonl(text, file)
        else:
            lines, rows, columns = _rows_csv(text, file)
    except UnicodeDecodeError:
        raise ScenarioError(f"simulation.trace: {file} is not UTF-8 text; a trace is a CSV or JSONL file") from None
    except csv.Error as exc:
        raise ScenarioError(f"simulation.trace: {file} is not a readable CSV file: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:  # name only the trace columns found and count the rest: never echo text of some other file
        known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
        named = [c for c in columns if c in known]
        others = sum(1 for c in columns if c not in known)
        found = ", ".join(named) if named else "none of the trace columns"
        if others:
            found += f" and {others:,} other column{'s' if others > 1 else ''}" if named else \
                f" ({others:,} other column{'s' if others > 1 else ''}, not shown)"
        raise ScenarioError(f"{file} line 1: missing column(s) {', '.join(missing)}; found {found} "
                            f"(a trace needs a header line with {', '.join(REQUIRED_COLUMNS)})")
    if not rows:
        raise ScenarioError(f"{file}: the trace has no requests")
    problems: list[str] = []

    def column(name: str, integer: bool, minimum: float, default: float | None = None) -> np.ndarray:
        raw = [row.get(name, default) if row.get(name) not in ("", None) else default for row in rows]
        return _number_column(name, raw, lines, file, problems, integer, minimum)

    arrival = column("arrival_s", False, 0.0)
    prompt = column("prompt_tokens", True, 1)
    output = column("output_tokens", True, 1)
    prefix_tokens = column("prefix_tokens", True, 0, 0) if "prefix_tokens" in columns else np.zeros(len(rows))
    priority = column("priority", True, -1e9, 0) if "priority" in columns else np.zeros(len(rows))
    if not problems:
        back = np.flatnonzero(np.diff(arrival) < 0)
        for i in back[:MAX_TRACE_PROBLEMS]:
            problems.append(f"{file} line {lines[i + 1]}: arrival_s {arrival[i + 1]:g} is earlier than line "
                            f"{lines[i]}'s {arrival[i]:g}; a trace must be in arrival order")
        too_long = np.flatnonzero(prompt + output > max_model_len) if max_model_len else []
        for i in too_long[:MAX_TRACE_PROBLEMS]:
            problems.append(f"{file} line {lines[i]}: prompt_tokens + output_tokens = {prompt[i] + output[i]:,.0f}"
                            f" exceeds serving.max_model_len ({max_model_len:,})")
        over = np.flatnonzero(prefix_tokens > prompt)
        for i in over[:MAX_TRACE_PROBLEMS]:
            problems.append(f"{file} line {lines[i]}: prefix_tokens ({prefix_tokens[i]:.0f}) exceeds "
                            f"prompt_tokens ({prompt[i]:.0f})")
    if problems:
        raise ScenarioError(*problems[:MAX_TRACE_PROBLEMS])
    if "prefix_id" in columns:
        names = [str(row.get("prefix_id") or "") for row in rows]
        ids: dict[str, int] = {}
        prefix_id = np.array([ids.setdefault(nm, len(ids)) if nm else -1 for nm in names], dtype=np.int64)
        prefix_tokens = np.where(prefix_id >= 0, prefix_tokens, 0)
    else:
        prefix_id = np.full(len(rows), -1, dtype=np.int64)
        prefix_tokens = np.zeros(len(rows))
    return RequestTable(arrival - arrival[0], prompt.astype(np.int64), output.astype(np.int64), prefix_id,
                        prefix_tokens.astype(np.int64), priority.astype(np.int64))


def request_table(config: SimulationConfig, max_model_len: int | None,
                  base_dir: str | Path | None = None) -> RequestTable:
    """The requests of a simulation: the trace if one is named, else the generated stream."""
    if config.arrival == "trace":
        assert config.trace is not None
        table = read_trace(config.trace, max_model_len, base_dir)
        if config.requests is not None and config.requests < len(table):
            return table.take(slice(0, config.requests))
        return table
    return generate(config)
