"""The discrete-event simulator."""
