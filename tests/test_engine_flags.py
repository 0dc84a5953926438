"""One engine config: every command that runs the engine takes the same flags, builds the same
EngineConfig from them, and the offline ones give identical diagnoses for the same trace."""

from __future__ import annotations

import orjson
import pytest

from faultlens.cli import build_parser, main
from faultlens.engine_flags import engine_config
from faultlens.events.trace import labels_path, write_labels, write_trace
from faultlens.simulator.config import SimConfig
from faultlens.simulator.plan import FaultPlan
from faultlens.simulator.run import simulate

FLAGS = ["--hang-floor", "15", "--hang-k", "3", "--max-lateness", "600", "--grace", "12"]


def _argv(command: str, trace: str = "t.parquet") -> list[str]:
    return {
        "diagnose": ["diagnose"],
        "up": ["up"],
        "analyze": ["analyze", trace],
        "score": ["score", trace],
        "history": ["history", "--from-trace", trace],
        "check": ["check", trace],
    }[command]


COMMANDS = ("diagnose", "up", "analyze", "score", "history", "check")


def test_every_engine_command_builds_the_same_config():
    parser = build_parser()
    configs = {c: engine_config(parser.parse_args([*_argv(c), *FLAGS])) for c in COMMANDS}
    assert len(set(configs.values())) == 1, configs
    config = configs["diagnose"]
    assert config.implicit_config.hang.floor_s == 15 and config.implicit_config.hang.k == 3
    assert config.max_lateness_s == 600 and config.grace_s == 12
    # and without flags, every command agrees on the defaults
    assert len({engine_config(parser.parse_args(_argv(c))) for c in COMMANDS}) == 1


def test_environment_reaches_every_command(monkeypatch):
    monkeypatch.setenv("FAULTLENS_HANG_FLOOR_S", "22")
    monkeypatch.setenv("FAULTLENS_NO_IMPLICIT", "1")
    parser = build_parser()
    for c in COMMANDS:
        config = engine_config(parser.parse_args(_argv(c)))
        assert config.implicit_config.hang.floor_s == 22 and not config.implicit, c
    # a flag still wins over the environment
    assert engine_config(parser.parse_args(["analyze", "t", "--hang-floor", "30"])).implicit_config.hang.floor_s == 30


@pytest.fixture(scope="module")
def hang_trace(tmp_path_factory):
    run = simulate(SimConfig(nodes=8, gpus=4, seed=5), FaultPlan().fail_at("job_hang", t=150, node="n002"))
    path = tmp_path_factory.mktemp("flags") / "hang.parquet"
    write_trace(path, run.events())
    write_labels(labels_path(path), run.labels)
    return path


def _analyze(capsys, trace, *flags) -> list[dict]:
    assert main(["analyze", str(trace), "--no-progress", *flags]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_offline_commands_agree_for_the_same_flags(hang_trace, tmp_path, capsys):
    early = _analyze(capsys, hang_trace, *FLAGS)
    late = _analyze(capsys, hang_trace)
    hangs_early = [d for d in early if d["fault"] == "job_hang"]
    hangs_late = [d for d in late if d["fault"] == "job_hang"]
    assert hangs_early and hangs_late
    # the flag took effect: a 15 s floor calls the hang sooner than the default 60 s
    assert min(d["ts"] for d in hangs_early) < min(d["ts"] for d in hangs_late) - 10

    # history --from-trace with the same flags stores exactly the diagnoses analyze printed
    import duckdb

    db = tmp_path / "h.duckdb"
    assert main(["history", "--from-trace", str(hang_trace), "--db", str(db), "--no-progress", *FLAGS]) == 0
    capsys.readouterr()
    with duckdb.connect(str(db), read_only=True) as conn:
        stored = {row[0] for row in conn.execute("SELECT id FROM diagnoses").fetchall()}
    assert stored == {d["id"] for d in early}

    # score with the same flags scores those diagnoses: its hang latency is analyze's
    assert main(["score", str(hang_trace), "--json", *FLAGS]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    hang_row = next(r for r in rows if r.get("fault") == "job_hang")
    onset = next(orjson.loads(line) for line in labels_path(hang_trace).read_bytes().splitlines())["onset"]
    # score counts a verdict that acts on a machine: an alert for a person (a hang seen on one capture) is not one
    acting = [d for d in hangs_early if d["action"] not in ("capture_stacks", "none", "alert")]
    assert hang_row["detected"] == 1
    assert hang_row["detection_latency_p50_s"] == pytest.approx(min(d["ts"] for d in acting) - onset, abs=0.01)
