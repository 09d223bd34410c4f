"""Bounded reading and streamed writing."""
