"""What a command that is not built yet does: says so and fails, never prints fake output."""

import sys


def not_built(name: str, issue: str) -> int:
    print(f"faultlens {name}: not built yet ({issue}); nothing was done.", file=sys.stderr)
    return 2
