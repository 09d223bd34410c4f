"""Planning: the one answer's sizing, fleets, sweeps, searches and calibration over scenarios."""
