"""The training loop docs/integrations.md shows runs as written (issue 58): under plain torchrun
(the hook is off: no KeyError for FAULTLENS_JOB) and under `faultlens run` with no broker (the hook
spools), two gloo ranks on CPU each, to exit code 0 with its checkpoints written."""

from __future__ import annotations

import os
import re
import sys
import textwrap

import pytest

from faultlens.events.signing import write_key_pair
from faultlens.streams.broker import free_port
from tests.progress import run_watched
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT

pytestmark = [pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="needs torch"),
              pytest.mark.long(30)]

STALL_S = 120.0  # printed, computed and wrote nothing for this long: stuck, not slow


def snippet() -> str:
    """The first python block of the torchrun section, as a reader would copy it."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    section = text[text.index("## torchrun"):]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "docs/integrations.md: no python block in the torchrun section"
    return textwrap.dedent(block.group(1))


@pytest.mark.parametrize("launcher", ["torchrun", "faultlens run"])
def test_torchrun_docs_snippet_runs_as_written(launcher, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(snippet())
    ckpt = tmp_path / "ckpt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLENS_")}
    env.update(CKPT_DIR=str(ckpt), FAULTLENS_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    torchrun = ["--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.2", str(script)]
    if launcher == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *torchrun]
    else:
        _, public = write_key_pair(tmp_path / "keys")
        argv = [sys.executable, "-m", "faultlens", "run", "--job", "snippet", "--bootstrap", f"127.0.0.1:{free_port()}",
                "--verify-key", str(public), *torchrun]
    out = run_watched(argv, env=env, cwd=tmp_path, stall_s=STALL_S, cpu=True, watch=[tmp_path], limit_s=280)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.name for p in ckpt.glob("step_*.pt")) == [f"step_{s:06d}.pt" for s in (20, 40, 60, 80, 100)]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
