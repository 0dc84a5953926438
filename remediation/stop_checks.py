"""Stop-time diagnosis (docs/design.md §4, step 3): ask the job's machines to run their checks, wait for
every answer, then judge — evict only the machines whose checks failed, carry on with the ladder's
rung (reattempt / rollback) when all passed, and bring back machines taken out earlier that pass.

Pure: :class:`PendingChecks` holds what was asked and what came back; :func:`judge_checks` turns
it into steps once every machine answered or the deadline passed. Silence is never evidence: a
machine that does not answer is asked again, then reported to a person (and named a suspect in
the rung that follows), never evicted for it — a dead machine is the heartbeat's business
(`node_silent`). The Policy (remediation.policy) sends the commands and keeps these per job.

Time: an answer counts whenever it is read, as long as the wait is open; the deadline is judged
on the remediation consumer's clock at its ticks. A consumer far behind on `telemetry.checks`
may so close a wait before reading answers that were on time: the cost is a second ask or a
reattempt with those machines named suspects, never an eviction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from faultlens.events.envelope import Envelope
from faultlens.remediation.ladder import Step


def step_to_dict(step: Step) -> dict[str, Any]:
    return {"rung": step.rung, "action": step.action, "nodes": list(step.nodes), "reason": step.reason,
            "params": dict(step.params)}


def step_from_dict(data: Mapping[str, Any]) -> Step:
    if not isinstance(data, Mapping) or not isinstance(data.get("rung"), str):
        raise ValueError(f"a step must be an object with a rung, got {data!r:.80}")
    action = data.get("action")
    if action is not None and not isinstance(action, str):
        raise ValueError(f"step action must be a string or null, got {action!r}")
    return Step(data["rung"], action, tuple(str(n) for n in data.get("nodes") or ()), str(data.get("reason", "")),
                dict(data.get("params") or {}))


@dataclass
class PendingChecks:
    """One job's stop-time checks under way."""

    job: str
    diagnosis: dict[str, Any]  # the Diagnosis (to_dict) that asked: commands and decisions name it
    then: Step  # the ladder's rung, carried out once every machine passed
    nodes: tuple[str, ...]  # the job's machines: each must answer
    recheck: tuple[str, ...] = ()  # machines taken out earlier, asked whether they may come back
    requests: list[str] = field(default_factory=list)  # run_checks command ids sent (first ask, re-asks)
    asked_at: float = 0.0
    deadline: float = 0.0
    asks: int = 1
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # node → what its agent reported
    # The job's machines are judged (its rung went ahead); only taken-out machines are still awaited,
    # so the job's restart never waits on a machine that is out of it.
    settled: bool = False

    @property
    def asked(self) -> tuple[str, ...]:
        return (*self.nodes, *self.recheck)

    def record(self, event: Envelope) -> bool:
        """Keep a `check`/`result` answering one of our requests, or a `check`/`command_ack` refusing
        one; the first answer per machine counts."""
        # Read from ``data``, not the typed payload: a malformed answer is dead-lettered at the
        # consumer's intake and must cost only itself here (skipped, never raised).
        data = event.data
        if event.kind == "command_ack":
            return self._refused(event)
        if event.job != self.job or data.get("request_id") not in self.requests:
            return False
        if event.node not in self.asked or event.node in self.results:
            return False
        passed = data.get("passed")
        if not isinstance(passed, bool):
            return False
        failed = [c for c in data.get("checks") or () if isinstance(c, Mapping) and c.get("passed") is False]
        if not passed and not failed:
            failed = [{"name": "?", "detail": "failed, naming no check", "inconclusive": True}]
        self.results[event.node] = {
            "passed": passed, "ts": event.ts, "request_id": data["request_id"], "event_id": event.id,
            "failed": [str(c.get("name")) for c in failed],
            # A check that could not run is no evidence against the machine.
            "conclusive": [str(c.get("name")) for c in failed if c.get("inconclusive") is not True],
            "detail": "; ".join(f"{c.get('name')}: {c.get('detail', '')}" for c in failed)[:1000]}
        return True

    def _refused(self, event: Envelope) -> bool:
        """A machine's agent refused our `run_checks` (collectors.command_ack): it will run nothing, so
        the wait for it ends; the refusal is no evidence against the machine (its gate, its clock or
        the keys are at fault, not its hardware), so it counts as checks that could not run."""
        data = event.data
        if event.job != self.job or data.get("command_id") not in self.requests or data.get("obeyed") is not False:
            return False
        if data.get("addressed") is False or event.node not in self.asked or event.node in self.results:
            return False
        reason = str(data.get("reason") or "no reason given")
        self.results[event.node] = {
            "passed": False, "ts": event.ts, "request_id": data["command_id"], "event_id": event.id,
            "failed": ["refused"], "conclusive": [], "detail": f"the agent refused run_checks: {reason}"[:1000]}
        return True

    def silent(self) -> tuple[str, ...]:
        return tuple(n for n in self.nodes if n not in self.results)

    def done(self) -> bool:
        return not self.silent()

    def failing(self) -> tuple[str, ...]:
        """Machines with a check that ran and failed: the evidence to evict on."""
        return tuple(n for n in self.nodes if n in self.results and not self.results[n]["passed"]
                     and self.results[n].get("conclusive", self.results[n]["failed"]))

    def unclear(self) -> tuple[str, ...]:
        """Machines that did not pass only because a check could not run."""
        return tuple(n for n in self.nodes if n in self.results and not self.results[n]["passed"]
                     and n not in self.failing())

    def passing_recheck(self) -> tuple[str, ...]:
        return tuple(n for n in self.recheck if n in self.results and self.results[n]["passed"])

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "diagnosis": self.diagnosis, "then": step_to_dict(self.then),
                "nodes": list(self.nodes), "recheck": list(self.recheck), "requests": list(self.requests),
                "asked_at": self.asked_at, "deadline": self.deadline, "asks": self.asks,
                "results": {n: dict(r) for n, r in self.results.items()},
                "settled": self.settled}

    @classmethod
    def from_dict(cls, data: Any) -> "PendingChecks":
        """Raises ValueError for anything :meth:`to_dict` does not write."""
        if not isinstance(data, Mapping):
            raise ValueError(f"pending checks must be an object, got {type(data).__name__}")
        try:
            job, diagnosis = data["job"], data["diagnosis"]
            times = [float(data[k]) for k in ("asked_at", "deadline")]
            asks, results = int(data["asks"]), data["results"]
            lists = {k: [str(x) for x in data[k]] for k in ("nodes", "recheck", "requests")}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"pending checks: {exc!r}") from None
        if not isinstance(job, str) or not isinstance(diagnosis, Mapping) or not isinstance(results, Mapping):
            raise ValueError("pending checks: job must be a string, diagnosis and results objects")
        if not all(math.isfinite(t) for t in times):
            raise ValueError("pending checks: times must be finite")
        return cls(job, dict(diagnosis), step_from_dict(data["then"]), tuple(lists["nodes"]), tuple(lists["recheck"]),
                   lists["requests"], times[0], times[1], asks, {str(k): dict(v) for k, v in results.items()},
                   bool(data.get("settled", False)))


@dataclass(frozen=True)
class ChecksVerdict:
    """What the wait came to: machines to ask again, or the steps to take (in order)."""

    reask: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()
    keep_open: bool = False  # taken-out machines may still answer: wait for them (settled)


def _bring_back(p: PendingChecks) -> list[Step]:
    back = p.passing_recheck()
    if not back:
        return []
    return [Step("bring_back", None, back,
                 f"{', '.join(back)} passed every stop-time check after being taken out: bring back",
                 {"bring_back": list(back)})]


def judge_checks(p: PendingChecks, now: float, max_asks: int = 2) -> ChecksVerdict | None:
    """None while some machine may still answer; else the verdict."""
    recheck_waiting = [n for n in p.recheck if n not in p.results] and now < p.deadline
    if p.settled:
        return None if recheck_waiting else ChecksVerdict(steps=tuple(_bring_back(p)))
    if not p.done() and now < p.deadline:
        return None
    silent = p.silent()
    if silent and p.asks < max_asks:
        return ChecksVerdict(reask=silent)
    fault = p.diagnosis.get("fault", "?")
    steps: list[Step] = []
    failing = p.failing()
    if failing:
        evidence = {n: p.results[n].get("conclusive", p.results[n]["failed"]) for n in failing}
        steps.append(Step("checks_failed", "evict", failing,
                          f"{fault}: stop-time checks failed on {', '.join(failing)} — "
                          + "; ".join(f"{n}: {p.results[n]['detail']}" for n in failing),
                          {"restart": "warm_standby", "failed_checks": evidence,
                           "evidence": [p.results[n]["event_id"] for n in failing]}))
    if not recheck_waiting:
        steps += _bring_back(p)
    unclear = p.unclear()
    if unclear:
        steps.append(Step("checks_unclear", None, unclear,
                          f"{fault}: checks could not run on {', '.join(unclear)} — "
                          + "; ".join(f"{n}: {p.results[n]['detail']}" for n in unclear)
                          + "; no evidence against them, not evicted; a person should look",
                          {"suspects": list(unclear)}))
    if silent:
        steps.append(Step("checks_silent", None, silent,
                          f"{fault}: no check results from {', '.join(silent)} after {p.asks} ask(s); not "
                          "evicted on silence alone — a person should look at these machines",
                          {"suspects": list(silent)}))
    if not failing:
        # Every machine that answered passed: the ladder's rung goes ahead (the eviction above
        # restarts the job itself when some failed).
        params = dict(p.then.params)
        params["checks_passed"] = sorted(n for n, r in p.results.items() if r["passed"])
        if silent or unclear:
            params["suspects"] = [*silent, *unclear]
        steps.append(Step(p.then.rung, p.then.action, p.then.nodes, p.then.reason + " (stop-time checks passed)",
                          params))
    return ChecksVerdict(steps=tuple(steps), keep_open=bool(recheck_waiting))
