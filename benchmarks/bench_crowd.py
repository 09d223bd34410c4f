"""Benchmark: the app's server under a crowd (issue 32): many sessions at once on one ``streamlit run app.py``.

One server (headless, a free port) and browser-like clients, each in its own process. A client speaks Streamlit's
own protocol, as the browser does: it opens ``ws://HOST:PORT/_stcore/stream`` (subprotocol ``streamlit``), sends a
``BackMsg`` asking for a run of the script with the page's query string, and reads the ``ForwardMsg`` protobufs
until the script has finished. Its **first number** is the time from opening the connection to the delta that
carries the headline's figures (the "Requests that fit" table, ``app_views.figures``); it then changes the prompt
length as a user would (one rerun with the ``prompt_tokens`` widget's new value, a sizing no other session asked
for: no cache hit) and closes. The browser's own work (fetching and running Streamlit's JavaScript, drawing) is
not in these figures; ``bench_app_browser.py`` measures that.

Phases, in one run:

1. **Warm-up**: one landing session and one heavy session (below; tried again if a busy machine stopped it at its
   time budget), so that what a server loads once (libraries,
   catalogs, the simulator's compiled loop) is loaded; then the server idles until it is quiet and its memory is
   read: **RSS at start**. The fresh server's RSS before any session is printed beside it.
2. **Alone**: ``--lone`` sessions one after another: first number, and the server's CPU seconds per session
   (user + system of the server and its child processes, read with psutil before and after).
3. **Crowd**: ``--sessions`` clients (default 50) released at once: the same figures. Targets: CPU per session
   within 1.5x of a lone session's.
4. **Heavy**: ``--heavy`` clients each open the Simulator view on the largest simulation its controls allow (a new
   seed every session, so no cache answers it) and start the next as soon as one ends; once each has finished one
   (the server as busy as they keep it), ``--lone`` ordinary sessions open one after another. Target: their median
   first number within 2x of the lone median. Printed beside it: the heavy sessions' own time (queue included),
   any the server's limits refused (with its message) and the CPU the workers and the server used meanwhile.
5. **Closed**: every session has ended; the server idles for ``--settle`` seconds. Target: its RSS back within
   20% of the start (the peak over all phases is printed beside it).

RSS is the server's plus its child processes' (a worker pool's), sampled every 50 ms. The clients share the
machine with the server (and, on a shared machine, with whatever else runs there): the figures are the server's
under that load, and the ratios (crowd against alone, measured in the same run) are the stable figures.

    python benchmarks/bench_crowd.py [--sessions 50] [--lone 5] [--heavy 4] [--settle 30] [--root DIR]
                                     [--json benchmarks/results/crowd-DATE.json]

``--root`` runs another checkout's app.py (e.g. the code before a change) with this benchmark.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parent.parent
#: The headline's figures table (``app_views.main.headline``): the first number a user reads.
MARKER = "Requests that fit"
#: The heavy session: the Simulator view on the largest simulation its controls allow (``app_views.simulator``).
HEAVY_REQUESTS = 100_000
#: Targets (issue 32): CPU per session in the crowd / alone, first number beside heavy sessions / alone, RSS after
#: all sessions closed / at start.
TARGET_CPU, TARGET_HEAVY, TARGET_RSS = 1.5, 2.0, 1.2
#: Seconds a session may take before the client gives up on it (counted as failed).
SESSION_TIMEOUT_S = 300.0


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _server(root: Path) -> Iterator[tuple[str, psutil.Process]]:
    """``streamlit run app.py`` of ``root`` on a free port (its own ``.streamlit/config.toml``); yields the URL and
    the server's process once it answers its health check."""
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(root)}
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(root / "app.py"),
                               "--server.headless", "true", "--server.port", str(port),
                               "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
                               "--browser.gatherUsageStats", "false"],
                              cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(f"http://{url}/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            raise SystemExit("the server did not answer its health check in 2 minutes")
        yield url, psutil.Process(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return [proc]


def cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of the server, its live children and the children it has waited for."""
    return sum(cpu_parts(proc))


def cpu_parts(proc: psutil.Process) -> tuple[float, float]:
    """CPU seconds (user + system) of the server itself and of its child processes, live or waited for."""
    parts = [0.0, 0.0]
    for i, p in enumerate(_tree(proc)):
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        parts[min(i, 1)] += t.user + t.system
        if i == 0:
            parts[1] += t.children_user + t.children_system
    return parts[0], parts[1]


def rss_bytes(proc: psutil.Process) -> int:
    """Resident memory of the server and its child processes [bytes]."""
    return sum(rss_parts(proc))


def rss_parts(proc: psutil.Process) -> tuple[int, int]:
    """Resident memory of the server itself and of its child processes (a worker pool) [bytes]."""
    parts = [0, 0]
    for i, p in enumerate(_tree(proc)):
        try:
            parts[min(i, 1)] += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return parts[0], parts[1]


def _mb(parts: tuple[int, int]) -> str:
    return f"{sum(parts) / 1e6:,.0f} MB ({parts[0] / 1e6:,.0f} + workers {parts[1] / 1e6:,.0f})"


class RssMonitor:
    """The server's RSS sampled every 50 ms on a thread: the peak since it started."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc, self.peak, self._stop = proc, rss_bytes(proc), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.proc))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


# ---------------------------------------------------------------- one browser-like session


def _rerun_msg(query: str, page_hash: str = "", widgets: dict[str, int] | None = None) -> bytes:
    msg = BackMsg()
    state = msg.rerun_script
    state.query_string = query
    state.page_script_hash = page_hash
    for widget_id, value in (widgets or {}).items():
        widget = state.widget_states.widgets.add()
        widget.id, widget.int_value = widget_id, value
    return msg.SerializeToString()


def _read_run(ws: Any, start: float, deadline: float, seen: dict[str, Any]) -> float | None:
    """Read ForwardMsgs until the script run ends; returns seconds from ``start`` to the headline's figures (None
    if the run drew none). Notes the page's query string, page hash, the prompt widget's id and error texts."""
    first = None
    while True:
        msg = ForwardMsg()
        msg.ParseFromString(ws.recv(timeout=max(0.1, deadline - time.perf_counter())))
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            seen["page_hash"] = msg.new_session.page_script_hash
        elif kind == "page_info_changed":
            seen["query"] = msg.page_info_changed.query_string
        elif kind == "script_finished":
            if msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return first
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            element = msg.delta.new_element
            which = element.WhichOneof("type")
            if which == "markdown" and first is None and MARKER in element.markdown.body:
                first = time.perf_counter() - start
            elif which == "number_input" and element.number_input.id.endswith("-prompt_tokens"):
                seen["prompt_id"] = element.number_input.id
            elif which == "alert" and element.alert.format == element.alert.ERROR:
                seen.setdefault("errors", []).append(element.alert.body)
            elif which == "exception":
                seen.setdefault("errors", []).append(f"exception: {element.exception.message}")


def session(url: str, query: str = "", prompt: int | None = None) -> dict[str, Any]:
    """One browser-like session: open the page at ``query``, read its run, optionally set the prompt length to
    ``prompt`` (one rerun), close. Returns seconds to the first number and to the edit's new number, the run's
    error texts and a failure's text."""
    out: dict[str, Any] = {"first_s": None, "done_s": None, "rerun_s": None, "errors": [], "failed": None}
    start = time.perf_counter()
    deadline = start + SESSION_TIMEOUT_S
    seen: dict[str, Any] = {}
    try:
        with connect(f"ws://{url}/_stcore/stream", subprotocols=["streamlit"], max_size=None,
                     open_timeout=SESSION_TIMEOUT_S, close_timeout=5) as ws:
            ws.send(_rerun_msg(query))
            out["first_s"] = _read_run(ws, start, deadline, seen)
            out["done_s"] = time.perf_counter() - start
            if prompt is not None and "prompt_id" in seen:
                edit = time.perf_counter()
                ws.send(_rerun_msg(seen.get("query", query), seen.get("page_hash", ""), {seen["prompt_id"]: prompt}))
                out["rerun_s"] = _read_run(ws, edit, deadline, seen)
    except Exception as exc:  # noqa: BLE001 (a failed session is a result: counted and named)
        out["failed"] = f"{type(exc).__name__}: {exc}"[:300]
    out["errors"] = seen.get("errors", [])
    return out


def heavy_query(seed: int) -> str:
    """The link of a heavy session: the Simulator view on the largest simulation, seed ``seed``."""
    extra = json.dumps({"simulation": {"requests": HEAVY_REQUESTS, "seed": seed}}, separators=(",", ":"))
    return urllib.parse.urlencode({"view": "Simulator", "extra": extra})


# ---------------------------------------------------------------- clients in their own processes


def _client(url: str, query: str, prompt: int | None, go: Any, results: Any) -> None:
    go.wait()
    results.put(session(url, query, prompt))


def _heavy_client(url: str, first_seed: int, stop: Any, results: Any) -> None:
    seed = first_seed
    while not stop.is_set():
        results.put(session(url, heavy_query(seed)))
        seed += 1000


def crowd(url: str, n: int, prompts: list[int], query: str = "") -> tuple[list[dict[str, Any]], float]:
    """``n`` sessions in ``n`` processes released at once; their results and the seconds until the last ended."""
    ctx = multiprocessing.get_context("fork")
    go, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(url, query, prompts[i], go, results)) for i in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.5 + 0.02 * n)  # every client forked and waiting
    start = time.perf_counter()
    go.set()
    out = [results.get(timeout=SESSION_TIMEOUT_S + 60) for _ in procs]
    took = time.perf_counter() - start
    for p in procs:
        p.join(timeout=30)
    return out, took


def one_by_one(url: str, prompts: list[int], query: str = "") -> list[dict[str, Any]]:
    """Sessions one after another, each in a process of its own."""
    return [crowd(url, 1, [prompt], query)[0][0] for prompt in prompts]


def _quiet(proc: psutil.Process, seconds: float = 0.5, limit_s: float = 60.0) -> None:
    """Wait until the server spends under 5% of a core over ``seconds`` (its session clean-up done)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        before = cpu_seconds(proc)
        time.sleep(seconds)
        if cpu_seconds(proc) - before < 0.05 * seconds:
            return


def _stats(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    return statistics.median(values), values[int(0.9 * (len(values) - 1))], values[-1]


def _line(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:<44} no session drew its first number"
    med, p90, top = _stats(values)
    return (f"{label:<44} median {med * 1e3:8.0f} ms   p90 {p90 * 1e3:8.0f} ms   max {top * 1e3:8.0f} ms"
            f"   (n={len(values)})")


def _machine() -> str:
    """The CPU's model name and count (Linux), for the record."""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{os.cpu_count()} x {model}"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(sessions: int = 50, lone: int = 5, heavy: int = 4, settle: float = 30.0, root: Path = ROOT,
         json_path: Path | None = None) -> dict[str, Any]:
    """Run the phases against one server of ``root``'s app; print the figures and targets, return them."""
    report: dict[str, Any] = {"date": datetime.date.today().isoformat(), "machine": _machine(), "sessions": sessions,
                              "lone": lone,
                              "heavy": heavy, "cpus": os.cpu_count(), "load_average_before": os.getloadavg()[0]}
    with _server(root) as (url, proc):
        _quiet(proc)
        fresh = rss_parts(proc)
        monitor = RssMonitor(proc)
        warm = [session(url, "", 1500)]
        for seed in range(1, 4):  # a heavy session that ran its simulation (a busy machine may stop one)
            warm.append(session(url, heavy_query(seed)))
            if not (warm[-1]["failed"] or warm[-1]["errors"]):
                break
        if warm[0]["failed"] or warm[-1]["failed"] or warm[-1]["errors"]:
            raise SystemExit(f"warm-up failed: {[(w['failed'], w['errors']) for w in warm]}")
        _quiet(proc)
        start_parts = rss_parts(proc)
        start_rss = sum(start_parts)

        cpu0 = cpu_seconds(proc)
        alone = one_by_one(url, [1600 + i for i in range(lone)])
        _quiet(proc)
        cpu_alone = (cpu_seconds(proc) - cpu0) / lone

        cpu0 = cpu_seconds(proc)
        many, crowd_s = crowd(url, sessions, [2000 + i for i in range(sessions)])
        _quiet(proc)
        cpu_crowd = (cpu_seconds(proc) - cpu0) / sessions

        ctx = multiprocessing.get_context("fork")
        stop, heavy_results = ctx.Event(), ctx.Queue()
        heavies = [ctx.Process(target=_heavy_client, args=(url, 10 + i, stop, heavy_results)) for i in range(heavy)]
        for p in heavies:
            p.start()
        heavy_runs = []
        steady = time.monotonic() + 300
        while len(heavy_runs) < heavy and time.monotonic() < steady:  # each client's first session over: the
            try:                                                       # pool is as busy as they keep it
                heavy_runs.append(heavy_results.get(timeout=1.0))
            except queue.Empty:
                pass
        probe_cpu, probe_start = cpu_parts(proc), time.perf_counter()
        beside = one_by_one(url, [3000 + i for i in range(lone)])
        probe_wall = time.perf_counter() - probe_start
        probe_cpu = tuple(after - before for after, before in zip(cpu_parts(proc), probe_cpu, strict=True))
        stop.set()
        while any(p.is_alive() for p in heavies) or not heavy_results.empty():
            try:
                heavy_runs.append(heavy_results.get(timeout=1.0))
            except queue.Empty:  # the clients are finishing their last session
                pass
        for p in heavies:
            p.join(timeout=30)

        end = time.monotonic() + settle
        while time.monotonic() < end:
            time.sleep(0.5)
        _quiet(proc)
        end_parts = rss_parts(proc)
        end_rss = sum(end_parts)
        peak = monitor.stop()

    def firsts(runs: list[dict[str, Any]]) -> list[float]:
        return [r["first_s"] for r in runs if r["first_s"] is not None]

    alone_first, crowd_first, beside_first = firsts(alone), firsts(many), firsts(beside)
    print(f"server: {url}, {os.cpu_count()} CPUs, load average before {report['load_average_before']:.1f}")
    print(_line("first number, a lone session", alone_first))
    print(_line(f"first number, {sessions} sessions at once", crowd_first))
    print(f"    the crowd's last session ended after {crowd_s:.1f} s; failed sessions "
          f"{sum(1 for r in many if r['failed'] or r['first_s'] is None)} of {sessions}")
    reruns = [r["rerun_s"] for r in many if r["rerun_s"] is not None]
    if reruns:
        print(_line("    then the prompt edit's new number", reruns))
    cpu_ratio = cpu_crowd / cpu_alone if cpu_alone > 0 else float("inf")
    print(f"server CPU per session: alone {cpu_alone * 1e3:7.0f} ms, in the crowd {cpu_crowd * 1e3:7.0f} ms "
          f"({cpu_ratio:.2f}x; target <= {TARGET_CPU}x)   {_verdict(cpu_ratio <= TARGET_CPU)}")
    refused = [r for r in heavy_runs if r["errors"] or r["failed"]]
    print(f"heavy sessions: {heavy} clients ran {len(heavy_runs)} sessions of {HEAVY_REQUESTS:,} simulated requests "
          f"each; {len(refused)} refused or stopped")
    for text in sorted({(r["errors"] or [r["failed"]])[0][:200] for r in refused}):
        print(f"    e.g. {text}")
    done = [r["done_s"] for r in heavy_runs if r["done_s"] is not None and not r["errors"] and not r["failed"]]
    if done:
        print(_line("    a heavy session's whole run (queue included)", done))
    print(_line(f"first number beside {heavy} heavy sessions", beside_first))
    print(f"    while they ran: the workers used {probe_cpu[1]:.2f} CPU s and the server {probe_cpu[0]:.2f} CPU s in "
          f"the {probe_wall:.1f} s of these sessions")
    heavy_ratio = (statistics.median(beside_first) / statistics.median(alone_first)
                   if beside_first and alone_first else float("inf"))
    print(f"    against alone: {heavy_ratio:.2f}x (target <= {TARGET_HEAVY}x)   "
          f"{_verdict(heavy_ratio <= TARGET_HEAVY)}")
    rss_ratio = end_rss / start_rss
    print(f"server RSS: fresh {_mb(fresh)}, at start (warm) {_mb(start_parts)}, peak {peak / 1e6:,.0f} MB,")
    print(f"    {settle:g} s after every session closed {_mb(end_parts)}: {rss_ratio:.2f}x the start "
          f"(target <= {TARGET_RSS}x)   {_verdict(rss_ratio <= TARGET_RSS)}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    report.update({
        "first_number_alone_s": alone_first, "first_number_crowd_s": crowd_first,
        "first_number_beside_heavy_s": beside_first, "crowd_wall_s": crowd_s,
        "failed_sessions": sum(1 for r in many + alone + beside if r["failed"]),
        "cpu_per_session_alone_s": cpu_alone, "cpu_per_session_crowd_s": cpu_crowd, "cpu_ratio": cpu_ratio,
        "heavy_sessions_run": len(heavy_runs), "heavy_sessions_refused": len(refused), "heavy_ratio": heavy_ratio,
        "heavy_session_s": done, "probe_window_s": probe_wall, "probe_cpu_server_s": probe_cpu[0],
        "probe_cpu_workers_s": probe_cpu[1],
        "rss_fresh_bytes": sum(fresh), "rss_start_bytes": start_rss, "rss_start_workers_bytes": start_parts[1],
        "rss_end_workers_bytes": end_parts[1], "rss_peak_bytes": peak, "rss_end_bytes": end_rss,
        "rss_ratio": rss_ratio, "settle_s": settle, "load_average_after": os.getloadavg()[0],
        "pass": {"cpu": cpu_ratio <= TARGET_CPU, "heavy": heavy_ratio <= TARGET_HEAVY, "rss": rss_ratio <= TARGET_RSS},
    })
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50, help="sessions at once in the crowd (default 50)")
    parser.add_argument("--lone", type=int, default=5, help="sessions timed alone, and beside the heavy ones")
    parser.add_argument("--heavy", type=int, default=4, help="clients running heavy simulations (default 4)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds idle after the last session closed")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py runs (default: this one)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    main(args.sessions, args.lone, args.heavy, args.settle, args.root.resolve(), args.json)
