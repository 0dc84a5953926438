"""Job hangs: no step progress while the processes live → stacks and Flight Recorder dumps →
the rank to blame, or an alert when the evidence does not name one (docs/design.md §3-§4).
"""
