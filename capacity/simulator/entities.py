"""The simulator's entities: a request in flight and the records the engine keeps while it runs."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field


@dataclass(slots=True)
class Request:
    """A request inside the engine (created at arrival, dropped when it completes).

    ``generated`` output tokens so far; a decoding request holds KV for ``prompt + generated``
    tokens. ``growth_c`` is that length minus the decode step counter at which it joined
    decoding, so its length at step ``G`` is ``growth_c + G``. ``epoch`` changes on preemption
    (stale entries in the finish heap are skipped).
    """

    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_id: int
    prefix_blocks: int
    priority: int
    generated: int = 0
    to_prefill: int = 0
    private_blocks: int = 0
    growth_c: int = 0
    seq: int = 0
    epoch: int = 0
    seg_window: int = 0
    seg_first_s: float = 0.0
    last_token_s: float = 0.0
    preemptions: int = 0
    itl_extra_s: float = 0.0


@dataclass(slots=True)
class Windows:
    """Decode windows: runs of ``k`` decode steps with a fixed batch, one entry per window.

    ``first_end_s`` end of the window's first step [s]; ``max_step_s`` its longest step [s];
    ``gap_s`` the longest wait between two tokens of a sequence that was also in the previous
    window: ``max(first_end - previous window's end, max_step)`` (prefill steps in between count).
    """

    first_end_s: array[float] = field(default_factory=lambda: array("d"))
    max_step_s: array[float] = field(default_factory=lambda: array("d"))
    gap_s: array[float] = field(default_factory=lambda: array("d"))
    step_ends: list[object] = field(default_factory=list)  # per-step end times, only when recording tokens


@dataclass(slots=True)
class Segments:
    """Decode segments: request ``rid`` decoded through windows ``[lo, hi)`` after a token at ``first_s``."""

    rid: array[int] = field(default_factory=lambda: array("q"))
    lo: array[int] = field(default_factory=lambda: array("q"))
    hi: array[int] = field(default_factory=lambda: array("q"))
    first_s: array[float] = field(default_factory=lambda: array("d"))


class Timeline:
    """Engine state sampled at events, thinned by stride doubling to between ``limit`` and ``2 limit`` rows."""

    __slots__ = ("limit", "stride", "seen", "rows")

    def __init__(self, limit: int = 2000) -> None:
        self.limit = limit
        self.stride = 1
        self.seen = 0
        self.rows: list[tuple[float, int, int, int]] = []

    def add(self, time_s: float, running: int, queued: int, kv_blocks_used: int) -> None:
        """Keep one sampled row (the caller counts events in ``seen`` and skips all but one in ``stride``)."""
        self.rows.append((time_s, running, queued, kv_blocks_used))
        if len(self.rows) >= 2 * self.limit:
            self.rows = self.rows[1::2]
            self.stride *= 2
