"""One module per `faultlens` subcommand; each defines HELP, add_arguments(parser) and run(args) -> int."""

# Order is the order `faultlens --help` lists them in.
COMMAND_NAMES = (
    "demo",
    "up",
    "broker",
    "collect",
    "run",
    "status",
    "tail",
    "diagnose",
    "remediate",
    "nodes",
    "keys",
    "history",
    "simulate",
    "record",
    "replay",
    "analyze",
    "score",
    "check",
    "rules",
    "parse",
    "stacks",
    "report",
    "ettr",
)
