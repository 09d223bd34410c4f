"""The formulas against hand derivations, published numbers and invariants."""
