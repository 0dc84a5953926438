"""Reading stacks and collective state: one dump per rank, who waits on whom, who never came,
and the outlier ranks' parallel group (docs/design.md §5). Pure.
"""
