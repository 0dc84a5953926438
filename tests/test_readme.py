"""The README's first lines are what a new user and CI run: keep them and .ci/run in step."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    head = text[: text.index("## Usage")]
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
    assert 'torch = ["torch==2.13.0"]' in text
    deps = text[text.index("dependencies = ["): text.index("]", text.index("dependencies = ["))]
    assert "torch" not in deps
