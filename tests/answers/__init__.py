"""The answer in words."""
