"""Work spread over threads: numpy's array loops and Arrow's kernels release the GIL, so slices of one table
evaluated on several threads run on several cores.

``default_threads()`` is how many the process may use (the environment variable ``CAPACITY_THREADS`` caps it, e.g.
at 1 where several processes share the machine's cores already); ``ordered_map`` keeps a bounded number of items in
flight and yields the results in the order of the items, so a stream written from it stays in order and its
memory bounded whatever its length.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")
R = TypeVar("R")


def default_threads() -> int:
    """Threads for work split into slices: ``CAPACITY_THREADS`` where it is set, else the CPUs this process may run
    on."""
    text = os.environ.get("CAPACITY_THREADS", "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            from capacity.errors import ScenarioError

            raise ScenarioError(f"CAPACITY_THREADS must be a whole number of threads, 1 or more; got {text!r}")
        return int(text)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def ordered_map(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """``fn(item)`` for each item, in the items' order, computed on ``threads`` threads (1: here, one by one).

    At most ``threads + 1`` results are computed ahead of the one being consumed; an error in ``fn`` is raised
    when its item's turn comes, and closing the iterator early cancels what has not started.
    """
    if threads <= 1:
        yield from map(fn, items)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="capacity-slices") as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


__all__ = ["default_threads", "ordered_map"]
