"""`faultlens` command line: one subcommand per module in :mod:`faultlens.commands`."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import logging
import os
import re
import sys

from faultlens import __version__
from faultlens.commands import COMMAND_NAMES
from faultlens.extras import MISSING_EXTRA_EXIT, missing_extra_line

DESCRIPTION = """\
faultlens keeps large GPU training jobs running: node agents publish telemetry to Kafka,
consumers diagnose faults (explicit errors, hangs, stragglers), name the machines to blame,
and send the trainer signed commands (evict, reattempt, rollback, capture stacks, ...).

Machine-readable output is JSON lines on stdout; logs go to stderr.
Commands that talk to Kafka take --bootstrap HOST:PORT (or FAULTLENS_BOOTSTRAP); without one
they use the broker that `faultlens broker`, `up` or `demo` registered in $FAULTLENS_HOME/broker.json.
"""

_HELP_LINE = re.compile(r'^HELP\s*=\s*("(?:[^"\\\n]|\\.)*")\s*$', re.MULTILINE)


def _help_of(name: str) -> str:
    """A command's one-line HELP, read from its source so that listing every command imports none of them.

    Importing every command module up front cost ~1 s per invocation (torch-free, but pyarrow, kafka,
    duckdb, the engine); `faultlens --help`, `parse` and `stacks` must answer at once.
    """
    spec = importlib.util.find_spec(f"faultlens.commands.{name}")
    origin = spec.origin if spec is not None else None
    try:
        if origin is not None:
            with open(origin, encoding="utf-8") as fh:
                match = _HELP_LINE.search(fh.read())
            if match:
                return ast.literal_eval(match.group(1))
    except (OSError, TypeError, ValueError, SyntaxError):
        pass
    return importlib.import_module(f"faultlens.commands.{name}").HELP


def _command_in(argv: list[str]) -> str | None:
    """The subcommand argv names: the first word that is not a top-level option (they take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the other commands are listed by name and help but not imported."""
    parser = argparse.ArgumentParser(
        prog="faultlens",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"faultlens {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug); also FAULTLENS_LOG_LEVEL"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_NAMES:
        if only is not None and name != only:
            sub.add_parser(name, help=_help_of(name))
            continue
        module = importlib.import_module(f"faultlens.commands.{name}")
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", None) or module.HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def setup_logging(verbosity: int) -> None:
    env = os.environ.get("FAULTLENS_LOG_LEVEL")
    level = env.upper() if env else ("WARNING", "INFO", "DEBUG")[min(verbosity, 2)]
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # kafka-python is chatty at INFO about every reconnect; keep it to warnings unless debugging.
    if level != "DEBUG":
        logging.getLogger("kafka").setLevel(logging.ERROR)


def _missing_extra(command: str, exc: ModuleNotFoundError) -> int:
    """A command whose extra is not installed says which in one line (exit 2); any other missing module is a bug."""
    line = missing_extra_line(command, exc)
    if line is None:
        raise exc
    print(line, file=sys.stderr)
    return MISSING_EXTRA_EXIT


def _unreachable_broker_line(exc: Exception, command: str) -> str | None:
    """One line for a --bootstrap that never answered (kafka-python gives up after ~30 s with a
    traceback a user cannot act on); None for anything else, which stays a traceback (a bug)."""
    if type(exc).__module__.split(".")[0] != "kafka":
        return None
    from kafka.errors import KafkaTimeoutError

    if isinstance(exc, KafkaTimeoutError) and "bootstrap" in str(exc):
        # up and demo start the machine's embedded broker themselves when given none.
        local = "leave --bootstrap out" if command in ("up", "demo") else "run `faultlens up` here and leave --bootstrap out"
        return (
            f"no Kafka broker answered ({exc}). Check the address (--bootstrap, FAULTLENS_BOOTSTRAP or the "
            f"config file) and that the broker is up, or {local}"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_in(argv)
    try:
        parser = build_parser(only=command if command in COMMAND_NAMES else "")
        args, extra = parser.parse_known_args(argv)
        if extra:
            # A typo in a command's option: that command's usage, not the list of every command.
            (getattr(args, "_parser", None) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except ModuleNotFoundError as exc:
        return _missing_extra(command or "", exc)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    setup_logging(args.verbose)
    from faultlens.streams.broker import BrokerError

    try:
        return int(args._run(args) or 0)
    except BrokerError as exc:
        # Every command that needs Kafka says the same thing when there is none: what it looked for, what to do.
        print(f"faultlens {args.command}: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        return _missing_extra(args.command, exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `faultlens parse big.log | head` closes stdout early; that is not an error.
        sys.stderr.close()
        return 0
    except Exception as exc:  # last: the clauses above must see their own first
        config = sys.modules.get("faultlens.streams.config")  # loaded if it raised: no import for this
        if config is not None and isinstance(exc, config.ConfigError):
            print(f"faultlens {args.command}: {exc}", file=sys.stderr)
            return 2
        line = _unreachable_broker_line(exc, args.command)
        if line is None:
            raise
        print(f"faultlens {args.command}: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
