"""Threads and budgets."""
