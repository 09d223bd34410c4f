"""Inputs: the scenario's fields validated, the catalogs, engine profiles, model configs and units."""
