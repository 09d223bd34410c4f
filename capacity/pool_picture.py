"""Who owns each KV block when the pool is full: a map for the block-pool picture.

Blocks are laid out in order: the shared prefix (stored once), then each running
request's private blocks (its last block partly used when its private tokens are
not a multiple of the block size), then free blocks.
"""

from __future__ import annotations

import math

import numpy as np

from .scenario import Results

FREE, SHARED, PRIVATE, PARTIAL = 0, 1, 2, 3
LABELS = {FREE: "free", SHARED: "shared prefix", PRIVATE: "private (full)", PARTIAL: "private, partly used last block"}


def block_owners(pool_blocks: int, requests: int, shared_blocks: int, private_blocks: int,
                 last_block_partial: bool) -> np.ndarray:
    """Owner code (FREE, SHARED, PRIVATE, PARTIAL) of every block of the pool [int8 array of pool_blocks]."""
    owners = np.zeros(pool_blocks, dtype=np.int8)
    used_shared = min(shared_blocks, pool_blocks) if requests > 0 else 0
    owners[:used_shared] = SHARED
    one = np.full(private_blocks, PRIVATE, dtype=np.int8)
    if last_block_partial and private_blocks:
        one[-1] = PARTIAL
    end = used_shared + requests * private_blocks
    owners[used_shared:end] = np.tile(one, requests)[: max(0, min(end, pool_blocks) - used_shared)]
    return owners


def pool_map(results: Results, max_cells: int = 2400) -> tuple[np.ndarray, int, dict[str, int]]:
    """The pool at full concurrency, downsampled to at most ``max_cells`` cells.

    Returns (owner code per cell, blocks per cell, block count per owner label). Each cell
    shows the owner of the block at its centre, so a cell stands for ``blocks per cell`` blocks.
    """
    w = results.scenario.workload
    bs = results.scenario.serving.block_size
    pool = int(results["pool_blocks"])
    shared = int(results["shared_blocks"])
    private = int(results["private_blocks"])
    requests = int(results["batch_max"])
    partial = (w.tokens_per_request - shared * bs) % bs != 0
    owners = block_owners(pool, requests, shared, private, partial)
    counts = {LABELS[code]: int(np.count_nonzero(owners == code)) for code in LABELS}
    if pool <= 0:
        return owners, 1, counts
    per_cell = max(1, math.ceil(pool / max_cells))
    cells = math.ceil(pool / per_cell)
    centres = np.minimum(((np.arange(cells) + 0.5) * pool / cells).astype(int), pool - 1)
    return owners[centres], per_cell, counts
