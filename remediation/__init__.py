"""Remediation: the escalation ladder, safety limits, warm standbys, and signed commands."""
