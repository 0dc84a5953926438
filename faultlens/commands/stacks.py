"""faultlens stacks: read one stack dump per rank and name the suspects and the parallel group to evict."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

from tqdm import tqdm

from faultlens.diagnosis.hang.recorder import read_hang
from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.diagnosis.stacks.outliers import NotInTopology, StackConfig, cluster_stacks
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.env_number import env_number
from faultlens.events.envelope import InvalidEvent
from faultlens.events.topology import Topology

log = logging.getLogger(__name__)

HELP = "read per-rank py-spy dumps and print the diagnosis: suspect ranks, their group and nodes"
DESCRIPTION = """\
Reads DIR/<rank>.txt (one `py-spy dump` or faulthandler dump per rank), DIR/<rank>.fr.json (torch
Flight Recorder dumps, the JSON of `_dump_fr_trace_json()`; the recorder's pickle too, also as
<rank>.fr.pkl or NCCL's nccl_trace_rank_<rank>) when there are any, and the job topology FILE
(a topology event's `data` as JSON: {"tp", "pp", "dp", "ranks": [{"rank", "node", "tp", "pp", "dp"}]};
a whole topology event is accepted too). Prints ONE diagnosis as a JSON line.

--fault job_hang (default) reads the dumps as the streaming hang detector does: each rank is
waiting in a communication call (collective, send/recv, barrier, NCCL/gloo wait) or not; the
wait-for chains are followed through the topology (recv → the stage that should send, a
collective → the group members not in the same call) and the ranks outside communication at
their ends are the suspects (rule "wait-chain"). When that names nobody, ranks are grouped by
stack, the dominant stacks taken as healthy and the outliers are the suspects (rule
"outlier-clustering"). --fault fail_slow uses the outlier clustering only, as the fail-slow rounds do.

The diagnosis: action evict, ranks = suspects, nodes = the machines of the parallel group (PP,
TP or DP) they share, group (e.g. "pp:3"), confidence, and a detail that names the rule and its
evidence (the chains and frames, or the stack groups). When every rank waits in the same
collective and nobody is behind, it is fault job_hang, action stop_time_diagnosis, no node:
nothing to evict.

With recorder dumps, --fault job_hang first matches them per process group (rule
"flight-recorder"): the ranks that never entered the collective their group peers wait in, and
transitively the ranks those wait on (a stage whose stack waits in an unrecorded isend/irecv
leads on to its neighbour), are the suspects when their own stacks wait in nothing. When stacks
and recorder disagree (a suspect's stack waits in a collective the recorder does not show in
flight), too many ranks never joined, or ranks wait on each other inside collectives the others
never entered (collectives entered in different orders: a divergent branch, not a machine), it
is fault job_hang, action alert, no node. When every member of the held groups joined (joined
but stuck) the stacks decide as above, with what the recorder read in the detail.

When nothing can be localised the diagnosis is fault `unknown`, action `none`, with the reason. Empty, garbled or truncated dumps are reported in the detail, never fatal.

Exit status: 0 with a diagnosis; 1 when DIR or FILE cannot be used or the dumps name ranks the
topology does not have.

Environment: FAULTLENS_STACKS_HEALTHY_SHARE, FAULTLENS_STACKS_MAX_EDITS set the flag defaults."""

_RANK_FILE = re.compile(r"^(\d+)\.txt$")
_RECORDER_FILE = re.compile(r"^(\d+)\.fr\.(?:json|pkl)$|^nccl_trace_rank_(\d+)$")
_MAX_RECORDER_BYTES = 64 * 1024 * 1024  # a full 20,000-entry buffer with frames stays well below
_DEFAULTS = StackConfig()
_MAX_DUMP_BYTES = 4 * 1024 * 1024  # a dump is a few KB; anything far larger is not one


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", type=Path, help="folder of <rank>.txt dumps (and <rank>.fr.json)")
    parser.add_argument("--topology", metavar="FILE", type=Path, required=True, help="topology JSON (event data)")
    parser.add_argument("--job", default=None, help="job id (default: the topology file's, else 'unknown')")
    parser.add_argument("--fault", choices=("job_hang", "fail_slow"), default="job_hang",
                        help="fault class of the diagnosis (default job_hang)")
    parser.add_argument("--healthy-share", type=float,
                        default=env_number("FAULTLENS_STACKS_HEALTHY_SHARE", _DEFAULTS.healthy_share, on_bad="warn"),
                        help="besides the largest, stack groups with at least this share of ranks are healthy "
                             "(default %(default)s)")
    parser.add_argument("--max-edits", type=int,
                        default=int(env_number("FAULTLENS_STACKS_MAX_EDITS", _DEFAULTS.max_frame_edits, on_bad="warn")),
                        help="frame edits between stacks that still group together (default %(default)s)")


def _load_topology(path: Path) -> tuple[Topology, str | None]:
    obj = json.loads(path.read_text(encoding="utf-8"))
    job = None
    if isinstance(obj, dict) and isinstance(obj.get("data"), dict) and obj.get("source") == "job":
        job = obj.get("job")
        obj = obj["data"]
    if isinstance(obj, dict) and isinstance(obj.get("job"), str):
        job = obj["job"]
    return Topology.from_data(obj), job


def _read_dumps(folder: Path) -> tuple[dict[int, str], dict[int, bytes], dict[int, str], list[str], float | None]:
    """rank → stack text, rank → recorder bytes, rank → recorder file name, names skipped (neither, or
    unreadable), earliest stack mtime."""
    dumps: dict[int, str] = {}
    recorders: dict[int, bytes] = {}
    recorder_names: dict[int, str] = {}
    skipped: list[str] = []
    first: float | None = None
    entries = sorted(os.scandir(folder), key=lambda e: e.name)
    for entry in tqdm(entries, desc="reading dumps", unit="file", disable=None, file=sys.stderr):
        m = _RANK_FILE.match(entry.name)
        fr = None if m else _RECORDER_FILE.match(entry.name)
        if fr and entry.is_file():
            recorder_names[int(fr.group(1) or fr.group(2))] = entry.name
            try:
                if entry.stat().st_size > _MAX_RECORDER_BYTES:
                    raise OSError("too large for a recorder dump")
                with open(entry.path, "rb") as fh:
                    recorders[int(fr.group(1) or fr.group(2))] = fh.read()
            except OSError as exc:
                log.warning("cannot read %s: %s", entry.path, exc)
                recorders[int(fr.group(1) or fr.group(2))] = b""  # reported as unreadable for that rank
            continue
        if not m or not entry.is_file():
            skipped.append(entry.name)
            continue
        try:
            stat = entry.stat()
            if stat.st_size > _MAX_DUMP_BYTES:
                raise OSError(f"{stat.st_size} bytes is too large for a stack dump")
            with open(entry.path, "rb") as fh:
                dumps[int(m.group(1))] = fh.read().decode("utf-8", errors="replace")
            first = stat.st_mtime if first is None else min(first, stat.st_mtime)
        except OSError as exc:
            log.warning("cannot read %s: %s", entry.path, exc)
            dumps[int(m.group(1))] = ""  # reported as a bad dump for that rank
    return dumps, recorders, recorder_names, skipped, first


def _evidence(ranks, dumps: dict, recorder_names: dict) -> tuple[str, ...]:
    return tuple(name for r in ranks for name in ((f"{r}.txt" if r in dumps else None), recorder_names.get(r)) if name)


def run(args: argparse.Namespace) -> int:
    try:
        topology, topo_job = _load_topology(args.topology)
    except (OSError, ValueError, InvalidEvent) as exc:
        print(f"faultlens stacks: cannot use topology {args.topology}: {exc}", file=sys.stderr)
        return 1
    if not args.dir.is_dir():
        print(f"faultlens stacks: {args.dir} is not a folder of <rank>.txt dumps", file=sys.stderr)
        return 1
    dumps, recorders, recorder_names, skipped, first_mtime = _read_dumps(args.dir)
    if skipped:
        log.warning("ignored %d file(s) not named <rank>.txt or <rank>.fr.json: %s", len(skipped), ", ".join(skipped[:5]))
    job = args.job or topo_job or "unknown"
    now = time.time()
    if not dumps and not (recorders and args.fault == "job_hang"):
        print(f"faultlens stacks: no <rank>.txt dump in {args.dir}", file=sys.stderr)
        return 1
    config = StackConfig(healthy_share=args.healthy_share, max_frame_edits=max(0, args.max_edits))
    try:
        if args.fault == "fail_slow":
            verdict = cluster_stacks(dumps, topology, config)
        elif recorders:
            verdict = read_hang(dumps, recorders, topology, config)
        else:
            verdict = read_hang_stacks(dumps, topology, config)
    except NotInTopology as exc:
        print(f"faultlens stacks: the topology {args.topology} does not match the dumps: {exc}", file=sys.stderr)
        return 1
    onset = min(first_mtime or now, now)
    fault = FaultClass(args.fault)  # one of --fault's choices
    if verdict.localized:
        diagnosis = Diagnosis(
            job=job, ts=now, onset=onset, fault=fault, action=Action.EVICT, nodes=verdict.nodes,
            ranks=verdict.outlier_ranks, group=verdict.group, confidence=verdict.confidence,
            evidence=_evidence(verdict.outlier_ranks[:256], dumps, recorder_names), detail=verdict.detail,
        )
    elif verdict.alert:
        diagnosis = Diagnosis(
            job=job, ts=now, onset=onset, fault=fault, action=Action.ALERT, ranks=verdict.outlier_ranks,
            confidence=0.0, detail=verdict.detail,
        )
    elif verdict.no_suspect:
        diagnosis = Diagnosis(
            job=job, ts=now, onset=onset, fault=fault, action=Action.STOP_TIME_DIAGNOSIS, confidence=0.0,
            detail=verdict.detail,
        )
    else:
        diagnosis = Diagnosis(
            job=job, ts=now, onset=onset, fault=FaultClass.UNKNOWN, action=Action.NONE, confidence=0.0,
            detail=f"nothing to localise: {verdict.detail}",
        )
    sys.stdout.write(json.dumps(diagnosis.to_dict()) + "\n")
    return 0
