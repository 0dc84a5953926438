"""Detectors: pure functions from events to diagnoses, plus the thin consumers that run them."""
