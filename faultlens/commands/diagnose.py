"""faultlens diagnose (placeholder until issue 4 lands)."""

import argparse

from faultlens.commands._unbuilt import not_built

HELP = "(not built yet: issue 4)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    return not_built("diagnose", "issue 4")
