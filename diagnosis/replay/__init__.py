"""What a recorded trace should give: expected verdicts (`faultlens check`) and scores against a
trace's ground truth (docs/design.md §8). Pure.
"""
