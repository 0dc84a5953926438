"""What-if ETTR: project a job's effective training time ratio before it runs (docs/ettr.md).

`model` holds the inputs (frozen dataclasses), `presets` the published parameter sets,
`closed_form` and `monte_carlo` the two engines that must agree, `sources` reads this pipeline's
own measurements (`faultlens score --json`, a fault history), `inputs_toml` a TOML file checked by
type and range, `provenance` marks every input (published, measured, assumed) and gives the ETTR band
over the assumed ranges, `sensitivity` ranks what to fix.
"""
