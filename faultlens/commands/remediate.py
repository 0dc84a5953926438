"""faultlens remediate (placeholder until issue 5 lands)."""

import argparse

from faultlens.commands._unbuilt import not_built

HELP = "(not built yet: issue 5)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    return not_built("remediate", "issue 5")
