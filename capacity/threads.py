"""Work spread over threads: numpy's array loops and Arrow's kernels release the GIL, so slices of one table
evaluated on several threads run on several cores.

``default_threads()`` is how many the process may use; ``ordered_map`` keeps a bounded number of items in
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
    """Threads for work split into slices: the CPUs this process may run on."""
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
