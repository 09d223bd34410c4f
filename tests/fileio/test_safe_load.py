"""The YAML reader's first pass: it counts the values a document writes from the parser's events and refuses a
document over the limit before any node is built (a file of 15,000 unknown keys took 0.2 s to compose and check,
which pushed the refusal past the hostile-input tests' CPU bound on a loaded machine)."""

from __future__ import annotations

import random

import pytest
import yaml

from capacity.errors import ScenarioError
from capacity.fileio import safe_load


def _written_values(text: str) -> int:
    """Values the first pass counts: one per scalar, list, mapping or alias event."""
    return sum(isinstance(e, safe_load._VALUE_EVENTS) for e in yaml.parse(text, Loader=safe_load.SAFE_LOADER))


def _random_document(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([1, 2.5, "x", True, None])
    if roll < 0.7:
        return [_random_document(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _random_document(rng, depth + 1) for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(40))
def test_the_count_equals_check_nodes_without_aliases(seed):
    text = yaml.safe_dump({"root": _random_document(random.Random(seed))})
    node = yaml.compose(text, Loader=safe_load.SAFE_LOADER)
    assert _written_values(text) == safe_load.check_nodes(node, "x")


def test_with_aliases_the_count_stays_at_or_below_the_expanded_size():
    # a: [1, 2] is 3 values, b (an alias of it) expands to 3 more, c: {d: e} is 3: 1 + 2 keys + 3 + 3 + 1 + 3 = 13
    text = "a: &x [1, 2]\nb: *x\nc: {d: e}\n"
    assert safe_load.check_nodes(yaml.compose(text, Loader=safe_load.SAFE_LOADER), "x") == 13
    assert _written_values(text) == 1 + 3 + 3 + 1 + 1 + 2  # the alias counts once: 11


def test_a_document_over_the_limit_is_refused_before_any_node_is_built(monkeypatch):
    def no_composing(*_args, **_kwargs):
        raise AssertionError("composed a document the count should have refused")

    monkeypatch.setattr(safe_load.SAFE_LOADER, "get_single_node", no_composing)
    limit = 50
    over = "".join(f"k{i}: 1\n" for i in range(limit // 2)) + "last: 1\n"  # 2 x 25 + 2 + the mapping = 53 values
    with pytest.raises(ScenarioError, match="holds over 50 values"):
        safe_load.parse_yaml(over, max_nodes=limit)


def test_at_the_limit_the_document_is_read():
    text = "".join(f"k{i}: {i}\n" for i in range(10))  # 1 mapping + 10 keys + 10 values = 21 values
    assert safe_load.parse_yaml(text, max_nodes=21) == {f"k{i}": i for i in range(10)}
    with pytest.raises(ScenarioError, match="holds over 20 values"):
        safe_load.parse_yaml(text, max_nodes=20)
