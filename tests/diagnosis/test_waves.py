"""Waves (diagnosis/engine/waves.py) and debounce (diagnosis/engine/debounce.py): the pure logic, on findings."""

from __future__ import annotations

import dataclasses

import pytest

from faultlens.diagnosis.engine.debounce import Debounce
from faultlens.diagnosis.engine.thresholds import ThresholdsError, WaveConfig, load, shipped
from faultlens.diagnosis.engine.waves import FLEET_WIDE, Waves, shared_cause
from faultlens.diagnosis.rules.base import Finding

WAVE = WaveConfig(window_s=60.0, min_nodes=4, min_share=0.25, classes=frozenset({"nvlink", "nic", "app_fault"}),
                  causes=(("nvlink", ("nvlink_domain", "rack")), ("default", ("rack",))))
MACHINES = {f"n{i:02d}": {"rack": f"r{i // 8}", "nvlink_domain": f"nvl{i // 4}"} for i in range(16)}


def xid74(ts: float, node: str, **kw) -> Finding:
    return Finding(job="j", ts=ts, fault="nvlink", action="evict", nodes=(node,), entity="gpu:0",
                   evidence=(f"e-{node}-{ts}",), detail="Xid 74", **kw)


def run(waves: Waves, findings: list[Finding], until: float, step: float = 1.0):
    """Findings in event-time order with a tick every ``step`` s, as the engine gives them."""
    passed, diags = [], []
    pending = sorted(findings, key=lambda f: f.ts)
    t = min(f.ts for f in findings)
    while t <= until:
        while pending and pending[0].ts <= t:
            passed += waves.admit(pending.pop(0))
        released, out = waves.tick(t)
        passed += released
        diags += out
        t += step
    return passed, diags


def final(diags):
    return list({d.id: d for d in diags}.values())


def test_a_fabric_reset_is_one_alert_naming_the_domain_and_holds_every_eviction():
    waves = Waves(WAVE, job_size=lambda job: 16, machines=lambda job: MACHINES)
    wave = [xid74(100 + i * 5, f"n{i:02d}") for i in range(4, 8)]  # the 4 machines of NVLink domain nvl1
    passed, diags = run(waves, wave, until=300)
    assert passed == []
    [d] = final(diags)
    assert (d.fault, d.action, d.nodes, d.group) == ("nvlink", "alert", (), "wave:nvlink_domain=nvl1")
    assert d.count == 4 and d.onset == 120 and "n04 n05 n06 n07" in d.detail


def test_a_fault_of_its_own_class_alone_is_judged_after_the_window_with_its_onset():
    waves = Waves(WAVE, job_size=lambda job: 16)
    passed, diags = run(waves, [xid74(100, "n01"), xid74(110, "n02"), xid74(250, "n03")], until=400)
    assert diags == [] and [f.nodes for f in passed] == [("n01",), ("n02",), ("n03",)]
    # held one window of event time (the bounded delay), judged with its first evidence as onset
    assert [(f.ts, f.onset) for f in passed] == [(160, 100), (170, 110), (310, 250)]


def test_too_small_a_share_of_the_job_is_no_wave():
    waves = Waves(WAVE, job_size=lambda job: 100)  # 4 of 100 < 25 %
    passed, diags = run(waves, [xid74(100 + i, f"n{i:02d}") for i in range(4)], until=300)
    assert diags == [] and len(passed) == 4


def test_evidence_of_its_own_passes_at_once_and_is_named_in_the_wave():
    waves = Waves(WAVE, job_size=lambda job: 16)
    lost = Finding(job="j", ts=105, fault="gpu_lost", action="evict", nodes=("n02",), entity="gpu_lost")
    passed, diags = run(waves, [xid74(100 + i, f"n{i:02d}") for i in range(8)] + [lost], until=300)
    assert passed == [lost]
    [d] = final(diags)
    assert d.group == f"wave:{FLEET_WIDE}" or d.group.startswith("wave:")
    assert "judged alone on evidence of their own: n02" in d.detail


def test_only_echoes_make_a_record_not_an_alert():
    waves = Waves(WAVE, job_size=lambda job: 8)
    xid45 = [Finding(job="j", ts=100 + i, fault="app_fault", action="none", nodes=(f"n{i:02d}",), sympathetic=True)
             for i in range(8)]
    _, diags = run(waves, xid45, until=300)
    [d] = final(diags)
    assert d.action == "none" and d.count == 8


def test_the_same_diagnoses_whatever_the_tick_cadence_or_a_flush():
    findings = [xid74(100 + 3 * i, f"n{i:02d}") for i in range(12)] + [xid74(400, "n13")]
    results = []
    for step in (0.5, 1.0, 7.0):
        waves = Waves(WAVE, job_size=lambda job: 16, machines=lambda job: MACHINES)
        passed, diags = run(waves, findings, until=600, step=step)
        results.append((sorted(f.onset for f in passed), [(d.id, d.group, d.count, d.detail) for d in final(diags)]))
    waves = Waves(WAVE, job_size=lambda job: 16, machines=lambda job: MACHINES)
    for f in findings:
        waves.admit(f)
    passed, diags = waves.flush()
    results.append((sorted(f.onset for f in passed), [(d.id, d.group, d.count, d.detail) for d in final(diags)]))
    assert all(r == results[0] for r in results)
    assert results[0][0] == [400] and len(results[0][1]) == 1


@pytest.mark.parametrize("machines, cause", [
    ({"a": {"rack": "r1", "nvlink_domain": "d1"}, "b": {"rack": "r1", "nvlink_domain": "d1"}}, "nvlink_domain=d1"),
    ({"a": {"rack": "r1", "nvlink_domain": "d1"}, "b": {"rack": "r1", "nvlink_domain": "d2"}}, "rack=r1"),
    ({"a": {"rack": "r1"}, "b": {}}, FLEET_WIDE),
    ({}, FLEET_WIDE),
])
def test_shared_cause_is_the_most_specific_thing_all_share(machines, cause):
    assert shared_cause(["a", "b"], machines, ("nvlink_domain", "rack")) == cause


def test_a_list_value_shares_any_member():
    machines = {"a": {"ib_switch": ["0x1", "0x2"]}, "b": {"ib_switch": ["0x2", "0x3"]}}
    assert shared_cause(["a", "b"], machines, ("ib_switch",)) == "ib_switch=0x2"


def grey(ts: float, node: str = "n01", entity: str = "subsystem.nvme:nvme0") -> Finding:
    return Finding(job="j", ts=ts, fault="storage", action="alert", nodes=(node,), entity=entity, evidence=(f"g{ts}",))


def test_grey_evidence_needs_two_within_the_window():
    d = Debounce(shipped())
    assert d.admit(grey(0)) == [] and d.admit(grey(700)) == []  # 700 s apart: each alone
    [f] = d.admit(grey(900))
    assert f.onset == 700 and f.evidence == ("g700", "g900") and "debounced" in f.detail
    assert d.stats["debounced"] == 2


def test_grey_evidence_with_a_second_signal_goes_on():
    d = Debounce(shipped())
    other = Finding(job="j", ts=10, fault="gpu_thermal", action="evict", nodes=("n01",), entity="thermal")
    assert d.admit(other) == [other]
    [f] = d.admit(grey(20))
    assert "second signal" in f.detail
    assert d.admit(grey(30, node="n02")) == []  # another machine: no second signal there


def test_evidence_a_rule_names_is_not_debounced():
    d = Debounce(shipped())
    f = Finding(job="j", ts=0, fault="kernel", action="evict", nodes=("n01",), entity="kernel.oops")
    assert d.admit(f) == [f]


def test_a_users_file_overrides_what_it_names(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('[wave]\nmin_nodes = 3\n[wave.causes]\nnic = ["rack"]\n\n[[debounce]]\nmatch = "rule:model"\ncount = 1\n')
    t = load([path])
    assert hash(t) == hash(load([path]))  # a part of EngineConfig, which commands compare
    assert (t.wave.min_nodes, t.wave.window_s, t.wave.causes_of("nic")) == (3, 60.0, ("rack",))
    assert t.debounce_for("model", "storage") is None and t.debounce_for("subsystem.nvme", "storage").count == 2


@pytest.mark.parametrize("text, named", [
    ('[wave]\nmin_share = 2.0\n', "wave.min_share"),
    ('[wave]\nclasses = ["nvlnk"]\n', "wave.classes"),
    ('[wave]\nwindo_s = 3\n', "unknown key"),
    ('[[debounce]]\nmatch = "kind:x"\n', "match"),
    ('[[debounce]]\nmatch = "fault:gpu"\n', "not a fault class"),
    ('[waves]\n', "unknown table"),
    ('[wave\n', "not TOML"),
])
def test_a_bad_file_is_refused_naming_the_key(tmp_path, text, named):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ThresholdsError, match=named):
        load([path])


def test_the_shipped_classes_leave_out_a_machines_own_evidence():
    classes = shipped().wave.classes
    assert "nvlink" in classes and "nic" in classes
    assert not {"gpu_lost", "gpu_memory", "gpu_thermal"} & classes


def test_a_job_finding_is_never_a_candidate():
    waves = Waves(WAVE, job_size=lambda job: 16)
    job_wide = dataclasses.replace(xid74(0, "n01"), nodes=())
    assert waves.admit(job_wide) == [job_wide]


def test_a_held_candidate_explains_its_consequences_at_once():
    """While a wave candidate waits, the node's silence after it is its echo, as it was when the
    candidate was judged at once (diagnosis/engine/dedup.py, note_held)."""
    from faultlens.diagnosis.engine.dedup import Dedup

    dedup = Dedup(job_size=lambda job: 16)
    silent = Finding(job="j", ts=130, onset=101, fault="node_silent", action="evict", nodes=("n01",), entity="silent")
    assert dedup.admit(silent) != []  # nothing explains it
    dedup = Dedup(job_size=lambda job: 16)
    dedup.note_held(xid74(100, "n01"))
    assert dedup.admit(silent) == [] and dedup.stats["consequence"] == 1


def test_a_switch_wave_is_one_cause_the_hang_after_it_is_its_echo_and_nobody_is_evicted():
    """Eight machines' ports go down under one switch: every collective stops, and the hang that
    names the whole job is the wave's echo (a port down for good stops the job: its candidates
    explain from their own time while the wave window holds them); the wave is one alert naming
    the switch, and no machine is evicted for it."""
    from faultlens.diagnosis.engine.dedup import Dedup

    machines = {f"n{i:02d}": {"rack": f"r{i // 8}", "ib_switch": f"sw{i // 8}"} for i in range(16)}
    config = dataclasses.replace(WAVE, causes=(("nic", ("ib_switch", "rack")),))
    waves, dedup = Waves(config, job_size=lambda job: 16, machines=lambda job: machines), Dedup(job_size=lambda job: 16)
    for i in range(8):
        down = Finding(job="j", ts=160 + i, onset=100 + i, fault="nic", action="evict", nodes=(f"n{i:02d}",),
                       entity="net:mlx5_0/1", evidence=(f"e{i}",), detail="port DOWN for 60s")
        assert waves.admit(down) == []
        dedup.note_held(down)
    hang = Finding(job="j", ts=190, onset=98, fault="job_hang", action="reattempt", entity="all",
                   nodes=tuple(machines)).to_diagnosis()
    assert dedup.admit_diagnosis(hang) == [] and dedup.stats["consequence"] == 1
    released, diags = waves.flush()
    assert released == []
    [wave] = final(diags)
    assert (wave.fault, wave.action, wave.nodes, wave.group) == ("nic", "alert", (), "wave:ib_switch=sw0")
