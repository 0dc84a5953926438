"""pytest plugin (entry point `faultlens`, group pytest11): every ``*.expect.jsonl`` under the folders
pytest collects is one test: its trace (the same path without the suffix) is replayed through the
detectors and must give the expected verdicts (`faultlens check`).

    python -m pytest incidents/            # incidents/a.parquet + incidents/a.parquet.expect.jsonl ...
    python -m pytest incidents/ -o faultlens_check_args="--hang-floor 20"     # your thresholds

A failure shows the readable diff of `faultlens check`. An expect file whose trace is missing fails too.
"""

from __future__ import annotations

import argparse
import shlex

import pytest

from faultlens.diagnosis.replay.expect import EXPECT_SUFFIX


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("faultlens_check_args", "diagnosis engine flags for the *.expect.jsonl replay tests "
                  "(those of `faultlens check --help`, e.g. --hang-floor 20 --rules my.toml)", default="")


def pytest_collect_file(file_path, parent):
    if file_path.name.endswith(EXPECT_SUFFIX):
        return ExpectFile.from_parent(parent, path=file_path)
    return None


class ExpectMismatch(Exception):
    """The trace's verdicts differ from its expect file; the message is the readable diff."""


class ExpectFile(pytest.File):
    def collect(self):
        yield ExpectItem.from_parent(self, name=self.path.name[: -len(EXPECT_SUFFIX)])


class ExpectItem(pytest.Item):
    def runtest(self) -> None:
        from faultlens.engine_flags import add_engine_arguments, engine_config
        from faultlens.replay_check import check_trace, render

        flags = argparse.ArgumentParser(prog="faultlens_check_args", add_help=False)
        add_engine_arguments(flags)
        config = engine_config(flags.parse_args(shlex.split(self.config.getini("faultlens_check_args") or "")))
        check = check_trace(self.path.with_name(self.name), config)
        if not check.ok:
            raise ExpectMismatch(render(check))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ExpectMismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"faultlens check {self.name}"
