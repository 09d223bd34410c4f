"""Renderers: the one answer as JSON, CSV, XLSX, the customer's HTML report and engine flags."""
