"""Who owns each KV block when the pool is full: a map for the block-pool picture.

Blocks are laid out in order: the shared prefix (stored once), then each running
request's private blocks (its last block partly used when its private tokens are
not a multiple of the block size), then free blocks.
"""

from __future__ import annotations

import math

import numpy as np

from capacity.model.scenario import Results

FREE, SHARED, PRIVATE, PARTIAL = 0, 1, 2, 3
LABELS = {FREE: "free", SHARED: "shared prefix", PRIVATE: "private (full)", PARTIAL: "private, partly used last block"}


def owners_at(blocks: np.ndarray, pool_blocks: int, requests: int, shared_blocks: int, private_blocks: int,
              last_block_partial: bool) -> np.ndarray:
    """Owner code (FREE, SHARED, PRIVATE, PARTIAL) of the blocks at indices ``blocks`` [int8 array].

    Block k is SHARED below the shared prefix s (stored once, when any request runs); PRIVATE or PARTIAL in the
    next ``requests x private`` blocks (PARTIAL: the last block of a request whose private tokens do not fill
    it); FREE after. O(len(blocks)): the pool itself (up to 10^9 blocks for a tiny model) is never built.
    """
    k = np.asarray(blocks, dtype=np.int64)
    used_shared = min(shared_blocks, pool_blocks) if requests > 0 else 0
    end = min(used_shared + requests * private_blocks, pool_blocks)
    owners = np.full(k.shape, FREE, dtype=np.int8)
    owners[k < used_shared] = SHARED
    mine = (k >= used_shared) & (k < end)
    owners[mine] = PRIVATE
    if last_block_partial and private_blocks:
        owners[mine & ((k - used_shared) % private_blocks == private_blocks - 1)] = PARTIAL
    return owners


def owner_counts(pool_blocks: int, requests: int, shared_blocks: int, private_blocks: int,
                 last_block_partial: bool) -> dict[str, int]:
    """Blocks per owner label over the whole pool, counted without building it (the layout of ``owners_at``)."""
    used_shared = min(shared_blocks, pool_blocks) if requests > 0 else 0
    held = max(0, min(used_shared + requests * private_blocks, pool_blocks) - used_shared)
    partial = held // private_blocks if (last_block_partial and private_blocks) else 0
    return {LABELS[FREE]: max(0, pool_blocks - used_shared - held), LABELS[SHARED]: used_shared,
            LABELS[PRIVATE]: held - partial, LABELS[PARTIAL]: partial}


def block_owners(pool_blocks: int, requests: int, shared_blocks: int, private_blocks: int,
                 last_block_partial: bool) -> np.ndarray:
    """Owner code of every block of the pool [int8 array of pool_blocks] (``owners_at`` of every index)."""
    return owners_at(np.arange(max(pool_blocks, 0)), pool_blocks, requests, shared_blocks, private_blocks,
                     last_block_partial)


def pool_map(results: Results, max_cells: int = 2400) -> tuple[np.ndarray, int, dict[str, int]]:
    """The pool at full concurrency, downsampled to at most ``max_cells`` cells.

    Returns (owner code per cell, blocks per cell, block count per owner label). Each cell
    shows the owner of the block at its centre, so a cell stands for ``blocks per cell`` blocks.
    Work and memory are O(max_cells) whatever the pool's size.
    """
    w = results.scenario.workload
    bs = results.scenario.serving.block_size
    pool = int(results["pool_blocks"])
    shared = int(results["shared_blocks"])
    private = int(results["private_blocks"])
    requests = int(results["batch_max"])
    partial = (w.tokens_per_request - shared * bs) % bs != 0
    counts = owner_counts(pool, requests, shared, private, partial)
    if pool <= 0:
        return np.zeros(0, dtype=np.int8), 1, counts
    per_cell = max(1, math.ceil(pool / max_cells))
    cells = math.ceil(pool / per_cell)
    centres = np.minimum(((np.arange(cells) + 0.5) * pool / cells).astype(np.int64), pool - 1)
    return owners_at(centres, pool, requests, shared, private, partial), per_cell, counts
