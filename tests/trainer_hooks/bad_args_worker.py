"""A training script given an option it does not take: argparse exits 2 in every rank at start."""

import argparse

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.parse_args(["--stpes", "10"])
