"""Tuned tables shipped with the package (one CSV per device family)."""
