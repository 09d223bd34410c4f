"""The test suite: one sub-package per layer of ``capacity``."""
