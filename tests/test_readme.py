"""The README's first lines are what a new user and CI run: keep them and .ci/run in step; every
other `faultlens ...` command the README shows parses with today's CLI; the docs it links exist."""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def readme_commands() -> list[str]:
    head = README[: README.index("\n## ")]  # the first screen, before the first section
    return re.findall(r"```sh\n(.+?)\n```", head)


def test_readme_opens_with_the_two_fresh_machine_commands():
    main_job, tests = readme_commands()[:2]
    assert main_job.startswith("python3 -m venv .venv") and "faultlens demo" in main_job
    assert tests.startswith("python3 -m venv .venv") and "pytest" in tests


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == readme_commands()[1]


def test_torch_is_pinned_in_an_extra():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'torch = ["torch==2.13.0", "numpy>=1.26"]' in text  # pinned; numpy beside it (no NumPy warning)
    deps = text[text.index("dependencies = ["): text.index("]", text.index("dependencies = ["))]
    assert "torch" not in deps


def _shown_commands() -> list[list[str]]:
    out = []
    for block in re.findall(r"```sh\n(.+?)\n```", README, flags=re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("faultlens "):
                out.append(shlex.split(line)[1:])
    return out


@pytest.mark.parametrize("argv", _shown_commands(), ids=lambda a: " ".join(a[:2]))
def test_every_command_the_readme_shows_parses(argv):
    from faultlens.cli import build_parser

    args = build_parser(only=argv[0]).parse_args(argv)
    assert args.command == argv[0] and callable(args._run)


def test_the_readme_sections_and_linked_docs_exist():
    for section in ("## Deployed", "## Offline", "## Replay tests", "## More"):
        assert section in README
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert len(links) >= 8
    for link in links:
        assert (ROOT / link).is_file(), link
