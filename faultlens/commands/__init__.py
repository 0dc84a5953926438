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


def about(path: object, exc: BaseException) -> str:
    """An error about a file, naming the file once: most of the project's errors name it already."""
    said = str(exc)
    return said if str(path) in said else f"{path}: {said}"
