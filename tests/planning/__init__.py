"""Sizing, fleets, sweeps, searches, calibration and validation."""
