"""Errors a user can act on: each names the field, the value and what is allowed."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario, catalog entry or input file is invalid.

    ``problems`` holds one line per problem; ``str(error)`` joins them.
    """

    def __init__(self, *problems: str) -> None:
        self.problems = [p for p in problems if p]
        super().__init__("; ".join(self.problems))
