"""The model: the formulas composed, in named stages, into a scenario's results."""
