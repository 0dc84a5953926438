"""The policy's stop-time checks and dual-phase reproductions: asking machines for their checks, asking
again, settling on their results, and settling on a reproduction's outcome.

Functions of the :class:`~faultlens.remediation.policy.Policy` they act for (it holds what is under way
per job); the verdicts themselves are pure (remediation.stop_checks, remediation.reproduction).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.remediation.decision import Decision, command_id
from faultlens.remediation.ladder import Step
from faultlens.remediation.lemon import LEMON_STATE
from faultlens.remediation.reproduction import judge_reproduction
from faultlens.remediation.stop_checks import PendingChecks, judge_checks

if TYPE_CHECKING:
    from faultlens.remediation.policy import Policy

log = logging.getLogger(__name__)


def ask_checks(policy: Policy, d: Diagnosis, then: Step, nodes: tuple[str, ...], now: float) -> tuple[Decision, Command | None]:
    earlier = policy.pending_checks.pop(d.job, None)  # settled: only taken-out machines were still awaited
    if earlier is not None:
        log.info(
            "job %s: new checks; machines %s did not answer the last ones",
            d.job,
            ",".join(n for n in earlier.recheck if n not in earlier.results),
        )
    if not nodes:
        return policy._act(d, then, now)  # no machine known to ask: the rung goes ahead as before
    recheck = tuple(n for n in sorted(policy.taken_out.get(d.job) or {}) if n not in nodes)
    pending = PendingChecks(
        d.job, d.to_dict(), then, tuple(nodes), recheck, asked_at=now, deadline=now + policy.config.checks_wait_s
    )
    policy.pending_checks[d.job] = pending
    return _send_checks(policy, d, pending, pending.asked, now)


def _send_checks(
    policy: Policy, d: Diagnosis, pending: PendingChecks, nodes: tuple[str, ...], now: float
) -> tuple[Decision, Command | None]:
    again = len(pending.requests)
    step = Step(
        "stop_time_checks",
        "run_checks",
        nodes,
        f"{d.fault}: stop-time checks on {len(nodes)} machine(s)"
        + (f", ask {again + 1}" if again else "")
        + f"; then {pending.then.rung.replace('_', ' ')} if all pass",
        {
            "then": pending.then.rung,
            "wait_s": policy.config.checks_wait_s,
            **({"recheck": list(pending.recheck)} if pending.recheck else {}),
        },
    )
    key = d.id if not again else f"{d.id}:ask{again + 1}"
    decision, command = policy._act(d, step, now, key=key)
    pending.requests.append(command_id(key, "run_checks"))
    return decision, command


def settle_checks(policy: Policy, job: str, now: float) -> list[tuple[Decision, Command | None]]:
    pending = policy.pending_checks[job]
    verdict = judge_checks(pending, now, policy.config.checks_asks)
    if verdict is None:
        return []
    d = Diagnosis.from_dict(pending.diagnosis)
    if verdict.reask:
        pending.asks += 1
        pending.deadline = now + policy.config.checks_wait_s
        log.warning("job %s: no check results from %s; asking again", job, ",".join(verdict.reask))
        return [_send_checks(policy, d, pending, verdict.reask, now)]
    if verdict.keep_open:
        pending.settled = True
    else:
        del policy.pending_checks[job]
    policy._lemons(policy._fleet.observe_checks(job, d.id, pending.results, now, policy.config.mode(job)), now)
    out = []
    for step in verdict.steps:
        if step.rung == "bring_back":
            policy.refresh_fleet(now)  # another member may have made one a lemon since the last tick
            passed = step.nodes
            step = _not_lemons(policy, step)
            if policy.config.mode(job) == "act":
                policy._fleet.brought_back(step.nodes, now)
            for n in passed:  # a lemon is not asked again either: it waits for a person
                policy.taken_out.get(job, {}).pop(n, None)
            if not policy.taken_out.get(job):
                policy.taken_out.pop(job, None)
        out.append(policy._act(d, step, now))
    return out


def _not_lemons(policy: Policy, step: Step) -> Step:
    """A lemon that passed its checks stays out: only a person brings it back."""
    lemons = policy._fleet.lemons() & set(step.nodes)
    if not lemons:
        return step
    back = tuple(n for n in step.nodes if n not in lemons)
    return Step(
        step.rung,
        step.action,
        back,
        step.reason + f"; not {', '.join(sorted(lemons))}: {LEMON_STATE}, back only by `faultlens nodes resume`",
        {**step.params, "bring_back": list(back)},
    )


def settle_reproduction(policy: Policy, event: Envelope, now: float) -> list[tuple[Decision, Command | None]]:
    repro = policy.reproductions[event.job]
    # Read from ``data``, not the typed payload: an outcome its Struct refuses is dead-lettered at
    # the consumer's intake and still an answer here (inconclusive: a person looks).
    if event.data.get("command_id") != repro.command_id:
        return []
    del policy.reproductions[event.job]
    d = Diagnosis.from_dict(repro.diagnosis)
    fh, fv = event.data.get("failing_horizontal"), event.data.get("failing_vertical")
    if not (isinstance(fh, list) and isinstance(fv, list) and all(isinstance(i, int) for i in fh + fv)):
        step = Step(
            "replay_inconclusive",
            None,
            (),
            f"{d.fault}: reproduction outcome unreadable ({fh!r}, {fv!r}); no eviction, a person should look",
        )
    else:
        step = judge_reproduction(repro, fh, fv)
    return [policy._act(d, step, now)]
