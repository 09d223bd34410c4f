from pathlib import Path

import pytest

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
