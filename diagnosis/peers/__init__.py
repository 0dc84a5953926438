"""Gray failures by peer comparison: feature windows, the ML peer model, slow drift of GPUs and
NICs, and fail-slow localisation by stack rounds. Pure.
"""
