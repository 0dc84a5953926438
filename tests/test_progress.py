"""tests/progress.py: a wait fails when the work stops moving, never because it is slow."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.progress import Stalled, Watched, cpu_ticks, run_watched, stop_proc, thread_ticks, wait_until


def test_a_slow_process_that_keeps_printing_outlives_its_stall_bound():
    # 6 s in all, a line every 0.5 s: longer than the stall bound, never still for it (the bound
    # leaves a busy machine room to start the interpreter).
    script = "import time\nfor i in range(12):\n    print(i, flush=True); time.sleep(0.5)\n"
    proc = run_watched([sys.executable, "-c", script], stall_s=4.0, limit_s=120)
    assert proc.returncode == 0 and proc.stdout.split() == [str(i) for i in range(12)]


def test_a_process_that_stops_moving_is_stopped_and_its_output_shown():
    script = "import sys, time\nprint('started', flush=True); print('on stderr', file=sys.stderr, flush=True)\ntime.sleep(300)\n"
    t0 = time.monotonic()
    with pytest.raises(Stalled, match=r"no progress for 4 s(.|\n)*on stderr(.|\n)*started"):
        run_watched([sys.executable, "-c", script], stall_s=4.0, limit_s=600)
    assert time.monotonic() - t0 < 200  # stopped at the stall, not when the sleep ends


def test_repeated_lines_whose_key_does_not_move_are_no_progress():
    script = "import time\nwhile True:\n    print('status: 0 done', flush=True); time.sleep(0.1)\n"
    with pytest.raises(Stalled, match="no progress"):
        run_watched([sys.executable, "-c", script], stall_s=1.0, limit_s=60, line_key=lambda line: line.split(":")[1].strip())


def test_a_file_that_grows_is_progress(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = f"import time\nfor i in range(12):\n    open({str(out / 'f')!r}, 'a').write('x'); time.sleep(0.5)\n"
    assert run_watched([sys.executable, "-c", script], stall_s=4.0, limit_s=120, watch=[out]).returncode == 0
    assert (out / "f").read_text() == "x" * 12


def test_wait_until_returns_the_condition_and_fails_on_a_counter_that_stops():
    counter = iter(range(10**6))
    moving = [0]

    def progress():
        moving[0] = next(counter) if moving[0] < 5 else moving[0]
        return moving[0]

    assert wait_until(lambda: moving[0] >= 5 and "done", progress=progress, stall_s=5, what="count", poll_s=0.01) == "done"
    with pytest.raises(Stalled, match="count: no progress"):
        wait_until(lambda: False, progress=progress, stall_s=0.3, what="count", poll_s=0.01)
    with pytest.raises(Stalled, match="outer limit"):
        wait_until(lambda: False, progress=time.monotonic, stall_s=5, limit_s=0.3, what="clock", poll_s=0.01)


def test_cpu_time_is_progress_for_a_process_that_prints_only_at_its_end():
    # 2.5 s of work with no output until the end, against a 1.5 s stall bound: its CPU clock moves
    # (a core burnt for less time than before, when it was 6 s against 4: the same check).
    script = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2.5: pass\nprint('done')\n"
    proc = run_watched([sys.executable, "-c", script], stall_s=1.5, limit_s=120, cpu=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "done"
    blocked = "import time\ntime.sleep(300)\n"  # no output and no CPU: stalled
    with pytest.raises(Stalled, match="no progress for 2 s"):  # the bound, rounded
        run_watched([sys.executable, "-c", blocked], stall_s=1.5, limit_s=600, cpu=True)


def test_watched_waits_for_a_line_then_for_its_stop_and_names_a_line_that_never_comes():
    # Prints 'ready' after a slow start (a busy machine's interpreter), then runs until SIGTERM,
    # which it answers with a last line after a second of cleaning up.
    script = (
        "import signal, sys, time\ntime.sleep(1)\nprint('noise', flush=True); print('ready', flush=True)\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1), print('bye', flush=True), sys.exit(3)))\n"
        "while True: time.sleep(0.1)\n"
    )
    with Watched([sys.executable, "-c", script], cpu=True) as proc:
        assert proc.wait_line(lambda line: line == "ready", stall_s=30, limit_s=120) == "ready"
        done = proc.stop(stall_s=30, limit_s=120)
    assert done.returncode == 3 and done.stdout.split() == ["noise", "ready", "bye"]
    with Watched([sys.executable, "-c", "print('something else')"]) as proc:
        with pytest.raises(Stalled, match=r"ended \(exit 0\) without that line(.|\n)*something else"):
            proc.wait_line(lambda line: line == "ready", stall_s=30, limit_s=120)


def test_watched_that_stops_moving_is_killed_with_its_group(tmp_path):
    pid_file = tmp_path / "child"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True); time.sleep(300)\n"
    )
    proc = Watched([sys.executable, "-c", script])
    proc.wait_line(lambda line: line == "started", stall_s=60, limit_s=120)
    with pytest.raises(Stalled, match="no progress for 2 s"):
        proc.wait_exit(stall_s=2, limit_s=120)
    child = int(pid_file.read_text())
    assert proc.popen.poll() is not None
    wait_until(lambda: not _alive(child), progress=lambda: None, stall_s=30, what="the child to be reaped")


def _alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie waits for init to reap it: it is gone


def test_stop_proc_waits_for_a_slow_clean_stop_while_it_logs(tmp_path):
    from faultlens.demo.processes import Proc

    # Cleans up for 6 s after SIGTERM, logging as it goes: longer than the 4 s stall bound, never still for it.
    script = (
        "import signal, sys, time\n"
        "def bye(*a):\n    for i in range(24):\n        print('cleaning', i, file=sys.stderr, flush=True); time.sleep(0.25)\n"
        "    sys.exit(0)\n"
        'signal.signal(signal.SIGTERM, bye)\nprint(\'{"event": "ready"}\', flush=True)\n'
        "while True: time.sleep(0.1)\n"
    )
    proc = Proc("slow", [sys.executable, "-c", script], dict(os.environ), tmp_path / "slow.log")
    wait_until(
        lambda: proc.find(lambda line: line.get("event") == "ready"),
        progress=lambda: cpu_ticks(proc.popen.pid),
        stall_s=60,
        what="ready",
    )
    assert stop_proc(proc, stall_s=4, limit_s=120) == 0
    assert "cleaning 23" in proc.tail()


def test_thread_ticks_move_while_a_thread_computes_and_stop_when_it_blocks():
    import threading

    release, computed = threading.Event(), threading.Event()

    def work():
        t = time.thread_time()
        while time.thread_time() - t < 0.5:  # half a second of CPU, however long that takes here
            pass
        computed.set()
        release.wait()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    wait_until(computed.is_set, progress=lambda: thread_ticks(thread), stall_s=60, what="the computing thread")
    spent = thread_ticks(thread)
    assert spent >= 25  # 0.5 s at 100 ticks a second, with room for the clock's rounding
    with pytest.raises(Stalled, match="blocked thread: no progress"):
        wait_until(lambda: False, progress=lambda: thread_ticks(thread), stall_s=1, what="the blocked thread")
    release.set()
    thread.join(60)
    assert thread_ticks(thread) == 0  # gone


def test_others_ticks_count_other_threads_and_children_not_the_caller():
    # Measured in a fresh interpreter: in a test worker, a child another test left behind can end
    # between the two readings and take its ticks with it (CI saw 124 -> 126 across a 0.5 s child).
    root = Path(__file__).resolve().parents[1]
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "from tests.progress import Watched, others_ticks\n"
        "before = others_ticks()\n"
        "t = time.thread_time()\n"
        "while time.thread_time() - t < 0.5: pass\n"  # the caller's own CPU: not counted
        "print('caller', others_ticks() - before, flush=True)\n"
        "child = 'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass\\nprint(\\'done\\', flush=True)\\ntime.sleep(300)\\n'\n"
        "with Watched([sys.executable, '-c', child]) as c:\n"
        "    c.wait_line(lambda line: line == 'done', stall_s=60, limit_s=240)\n"
        "    print('child', others_ticks() - before, flush=True)\n"
    )
    proc = run_watched([sys.executable, "-c", script], stall_s=120, limit_s=480)
    seen = dict(line.split() for line in proc.stdout.splitlines() if line.startswith(("caller", "child")))
    assert int(seen["caller"]) < 20
    assert int(seen["child"]) >= 25  # 0.5 s at 100 ticks a second, with room for the clock's rounding
