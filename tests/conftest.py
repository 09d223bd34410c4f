import os
from pathlib import Path

import pytest

# Arrow's default allocator (mimalloc) reserves address space a gigabyte at a time, which fails under the memory
# limits tests/limits.py sets; the system allocator counts what is used. Set before anything allocates.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from capacity import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


@pytest.fixture
def scenario_dir() -> Path:
    return SCENARIOS


@pytest.fixture(scope="module")
def essay000():
    """Essay 000's worked example (binary units, blocks of 16, 1,200-token shared prefix)."""
    return load_scenario(SCENARIOS / "essay-000-paging.yaml")


@pytest.fixture(scope="module")
def essay001():
    """Essay 001's sale-day napkin (decimal units, block size 1, TPOT <= 50 ms)."""
    return load_scenario(SCENARIOS / "essay-001-sale-day.yaml")
