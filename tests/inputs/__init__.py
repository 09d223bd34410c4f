"""Scenario fields, catalogs, engine profiles and model configs."""
