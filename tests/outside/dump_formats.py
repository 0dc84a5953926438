"""The dump formats the hung jobs of tests/outside/dump_shapes.py send, written from the tools' own
output formats, not from faultlens's code:

- py-spy text: the format `py-spy dump` prints (benfred/py-spy src/dump.rs, print_traces);
- py-spy `--json`: the JSON list of `StackTrace` that `py-spy dump --json` prints instead
  (benfred/py-spy src/dump.rs and src/stack_trace.rs);
- torch Flight Recorder JSON: the NCCL recorder's dump as torch 2.10 writes it (the shape of
  pytorch's tools/flight_recorder readers and of tests/fixtures/real_gpu/gpu40/fr_nccl.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

SITE = "/opt/conda/lib/python3.11/site-packages/"

# A stack, innermost frame first (as both py-spy forms list them): (function, file, line).
Stack = list[tuple[str, str, int]]


def pyspy_text(pid: int, cmd: str, stack: Stack) -> str:
    """`py-spy dump --pid PID`: the process line, the Python line, then each thread, innermost frame first."""
    lines = [f"Process {pid}: {cmd}", "Python v3.11.9 (/opt/conda/bin/python3.11)", "", f'Thread {pid} (idle): "MainThread"']
    lines += [f"    {name} ({path}:{line})" for name, path, line in stack]
    lines += [
        "",
        f'Thread {pid + 7} (idle): "Thread-2 (_pin_memory_loop)"',
        "    wait (threading.py:331)",
        "    get (queue.py:180)",
        "    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:54)",
        "    run (threading.py:982)",
        "    _bootstrap_inner (threading.py:1045)",
        "    _bootstrap (threading.py:1002)",
    ]
    return "\n".join(lines) + "\n"


def pyspy_json(pid: int, stack: Stack) -> str:
    """`py-spy dump --pid PID --json`: a list of StackTrace, the main thread first."""

    def frames(items: Stack) -> list[dict]:
        return [
            {
                "name": name,
                "filename": (path if "/" not in path or path.startswith("/") else SITE + path),
                "module": None,
                "short_filename": path,
                "line": line,
                "locals": None,
            }
            for name, path, line in items
        ]

    threads = [
        {
            "pid": pid,
            "thread_id": 139_872_000_000_000 + pid,
            "thread_name": "MainThread",
            "os_thread_id": pid,
            "active": False,
            "owns_gil": False,
            "frames": frames(stack),
            "process_info": None,
        },
        {
            "pid": pid,
            "thread_id": 139_871_000_000_000 + pid,
            "thread_name": "Thread-2 (_pin_memory_loop)",
            "os_thread_id": pid + 7,
            "active": False,
            "owns_gil": False,
            "process_info": None,
            "frames": frames(
                [
                    ("wait", "threading.py", 331),
                    ("get", "queue.py", 180),
                    ("_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py", 54),
                    ("run", "threading.py", 982),
                    ("_bootstrap_inner", "threading.py", 1045),
                    ("_bootstrap", "threading.py", 1002),
                ]
            ),
        },
    ]
    return json.dumps(threads, indent=2)


# --- Flight Recorder dumps -----------------------------------------------------------------------
@dataclass
class Group:
    name: str
    ranks: list[int]


def recorder_json(rank: int, groups: list[Group], done: dict[str, int], held: dict[str, tuple[str, list]], base_ns: int) -> str:
    """One rank's NCCL recorder: per group it belongs to, collectives 1..done[g] completed, then the one
    it is held in (``held[g]``: op and input sizes) scheduled and not retired."""
    entries, status, config = [], {}, {}
    record = 0
    for local, g in enumerate(x for x in groups if rank in x.ranks):
        config[g.name] = {"name": g.name, "desc": "", "ranks": json.dumps(g.ranks)}
        last = done[g.name]
        for seq in range(max(1, last - 9), last + 1):
            entries.append(_entry(record, local, g.name, seq, "all_reduce", [[4096, 1024]], True, base_ns + seq))
            record += 1
        if g.name in held:
            op, sizes = held[g.name]
            entries.append(_entry(record, local, g.name, last + 1, op, sizes, False, base_ns + last + 1))
            record += 1
        enq = last + (1 if g.name in held else 0)
        status[str(local)] = {
            "last_enqueued_collective": str(enq),
            "last_started_collective": str(last),
            "last_completed_collective": str(last),
        }
    return json.dumps(
        {
            "version": "2.10",
            "comm_lib_version": "2.21.5",
            "pg_config": config,
            "pg_status": status,
            "nccl_comm_state": {},
            "entries": entries,
        }
    )


def _entry(record: int, pg_id: int, pg: str, seq: int, op: str, sizes: list, retired: bool, ns: int) -> dict:
    return {
        "record_id": record,
        "pg_id": pg_id,
        "process_group": [pg, ""],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": ns * 1_000_000,
        "input_sizes": sizes,
        "input_dtypes": ["BFloat16"],
        "output_sizes": sizes,
        "output_dtypes": ["BFloat16"],
        "state": "completed" if retired else "scheduled",
        "retired": retired,
        "timeout_ms": 600000,
        "is_p2p": False,
        "duration_ms": 1.8 if retired else None,
        "frames": [],
        "time_discovered_started_ns": ns * 1_000_000 + 10 if retired else None,
        "time_discovered_completed_ns": ns * 1_000_000 + 900 if retired else None,
    }
