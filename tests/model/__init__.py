"""The composed model: scenarios, mixes, serving modes, curves, the essays and pinned results."""
