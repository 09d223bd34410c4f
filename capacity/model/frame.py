"""The analytic model over a table of scenarios: a pandas DataFrame in, a DataFrame of every result out.

Columns are the flat input names of ``analysis.INPUTS`` in base units (bytes, seconds, FLOP/s, requests/s).
Optional inputs (``analysis.INPUT_DEFAULTS``) may be left out. An empty cell (NaN) means "not set" where
the scalar path uses infinity for that (no promise, no cap, no window, a free link), and "no price" for
``price_per_hour``, as ``Scenario.inputs()`` writes them. Rows are evaluated in slices small enough to stay
in the CPU cache, several slices at once on as many threads as the process has CPUs (numpy releases the GIL
inside its array loops); every row's values are those of evaluating it alone (``Scenario.evaluate``), whatever
the slices and the threads.

    >>> import pandas as pd
    >>> from capacity import load_scenario
    >>> from capacity.model.frame import evaluate_frame
    >>> row = load_scenario("scenarios/essay-001-sale-day.yaml").inputs()
    >>> round(float(evaluate_frame(pd.DataFrame([row]))["goodput_rps"].iloc[0]), 3)
    5.897
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from capacity.formulas._numeric import one_value_or
from capacity.model.analysis import INPUT_DEFAULTS, INPUTS, LABELS, RESULTS, analyse
from capacity.runtime.threads import default_threads, ordered_map

if TYPE_CHECKING:  # pandas is imported by the functions that take or return a DataFrame (sweeps need none)
    import pandas as pd

#: Inputs whose "not set" is infinity in ``analysis.INPUTS``: an empty cell means the same.
UNSET_IS_INFINITE = ("max_num_seqs", "tpot_slo_s", "ttft_slo_s", "sliding_window", "interconnect_bandwidth",
                     "kv_transfer_bandwidth")

#: Rows per ``analyse`` call: 65,536 rows of float64 are 512 KiB per column, which keeps the
#: temporaries of one formula in cache (about 20% faster than one call over a million rows).
CHUNK_ROWS = 65_536


def frame_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The flat input arrays of ``df`` (float64), defaults filled in; ValueError naming missing columns."""
    import pandas as pd

    missing = [name for name in INPUTS if name not in df.columns and name not in INPUT_DEFAULTS]
    if missing:
        raise ValueError(f"the DataFrame lacks input columns {', '.join(missing)} (see capacity.model.analysis.INPUTS)")
    n = len(df)
    x: dict[str, np.ndarray] = {}
    for name in INPUTS:
        if name in df.columns:
            column = df[name]
            if isinstance(column.dtype, np.dtype) and column.dtype.kind in "fiu":  # plain numbers: no parsing
                values = column.to_numpy(dtype=float)
            else:
                values = pd.to_numeric(column, errors="raise").to_numpy(dtype=float, na_value=np.nan)
            if name in UNSET_IS_INFINITE:
                values = np.where(np.isnan(values), np.inf, values)
        else:
            values = np.full(n, INPUT_DEFAULTS[name], dtype=float)
        x[name] = values
    return x


def evaluate_arrays(x: dict[str, np.ndarray], chunk_rows: int = CHUNK_ROWS, text: bool = True,
                    threads: int | None = None) -> dict[str, np.ndarray]:
    """``analysis.analyse`` on 1-D input arrays of one length, in slices of ``chunk_rows`` rows.

    Each slice is a view of the inputs (dense and MoE rows together: ``analyse`` solves the MoE rows apart
    on compacted arrays), its results copied into the output arrays; a table of one slice is returned as
    ``analyse`` gives it. ``text=False`` returns the text results as codes into ``analysis.LABELS``.
    ``threads``: slices evaluated at once (None: ``default_threads()``; 1: one after another in this thread).
    The first slice runs in this thread (it names the outputs); the others fill disjoint rows of them.
    """
    n = len(next(iter(x.values()))) if x else 0
    spans = [(start, min(start + chunk_rows, n)) for start in range(0, max(n, 1), chunk_rows)]

    def part(start: int, stop: int) -> dict[str, np.ndarray]:
        # An input with one value in every row of the slice goes in as a scalar: what depends on such inputs alone
        # (most of a sweep's table) is computed once, with the same arithmetic.
        return analyse({k: one_value_or(v[start:stop]) for k, v in x.items()}, text=text)

    first = part(*spans[0])
    if len(spans) == 1:
        return {key: np.broadcast_to(value, (n,)) for key, value in first.items()}
    out = {key: np.empty(n, dtype=np.asarray(value).dtype) for key, value in first.items()}

    def fill(start: int, stop: int, values: dict[str, np.ndarray] | None = None) -> None:
        for key, value in (part(start, stop) if values is None else values).items():
            out[key][start:stop] = value

    fill(*spans[0], first)
    workers = default_threads() if threads is None else max(int(threads), 1)
    for _ in ordered_map(lambda span: fill(*span), spans[1:], workers):
        pass
    return out


def evaluate_frame(df: pd.DataFrame, chunk_rows: int = CHUNK_ROWS, threads: int | None = None) -> pd.DataFrame:
    """Every ``analysis.RESULTS`` key for every row of ``df`` (same index), in base units.

    Text results (``goodput_limit``, ``decode_bound``, ``batch_limit``) are categorical columns. ``threads``: as in
    ``evaluate_arrays``.
    """
    import pandas as pd

    values = evaluate_arrays(frame_inputs(df), chunk_rows, text=False, threads=threads)
    columns = {key: pd.Categorical.from_codes(values[key], categories=LABELS[key]) if key in LABELS else values[key]
               for key in RESULTS}
    return pd.DataFrame(columns, index=df.index, copy=False)


__all__ = ["CHUNK_ROWS", "UNSET_IS_INFINITE", "evaluate_arrays", "evaluate_frame", "frame_inputs"]
