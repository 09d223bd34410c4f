"""The formulas: one quantity per function, in explicit units, for scalars or numpy arrays."""
