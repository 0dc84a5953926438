"""The policy's stop-time checks and dual-phase reproductions: asking machines for their checks, asking
again, settling on their results, and settling on a reproduction's outcome.

:class:`PolicyChecks` is a base of :class:`~faultlens.remediation.policy.Policy` (it holds what is under
way per job); the verdicts themselves are pure (remediation.stop_checks, remediation.reproduction).
"""

from __future__ import annotations

import logging

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.remediation.decision import Decision, PolicyConfig, command_id
from faultlens.remediation.fleet import Fleet, Lemon
from faultlens.remediation.ladder import Step
from faultlens.remediation.lemon import LEMON_STATE
from faultlens.remediation.reproduction import PendingReproduction, judge_reproduction
from faultlens.remediation.stop_checks import PendingChecks, judge_checks

log = logging.getLogger(__name__)


class PolicyChecks:
    """Stop-time checks and reproductions under way, per job, and what follows from their answers."""

    # The policy's, set as its dataclass fields.
    config: PolicyConfig
    pending_checks: dict[str, PendingChecks]
    reproductions: dict[str, PendingReproduction]
    taken_out: dict[str, dict[str, str]]

    @property
    def _fleet(self) -> Fleet:
        raise NotImplementedError  # the policy's fleet record

    def _act(self, d: Diagnosis, step: Step, now: float, key: str | None = None) -> tuple[Decision, Command | None]:
        raise NotImplementedError  # the policy's: gate a step by safety and make its command

    def _lemons(self, lemons: list[Lemon], now: float) -> None:
        raise NotImplementedError  # the policy's: each new lemon a decision to drain it

    def refresh_fleet(self, now: float) -> None:
        raise NotImplementedError  # the policy's: what other members wrote to the fleet record

    def _ask_checks(self, d: Diagnosis, then: Step, nodes: tuple[str, ...], now: float) -> tuple[Decision, Command | None]:
        earlier = self.pending_checks.pop(d.job, None)  # settled: only taken-out machines were still awaited
        if earlier is not None:
            log.info(
                "job %s: new checks; machines %s did not answer the last ones",
                d.job,
                ",".join(n for n in earlier.recheck if n not in earlier.results),
            )
        if not nodes:
            return self._act(d, then, now)  # no machine known to ask: the rung goes ahead as before
        recheck = tuple(n for n in sorted(self.taken_out.get(d.job) or {}) if n not in nodes)
        pending = PendingChecks(
            d.job, d.to_dict(), then, tuple(nodes), recheck, asked_at=now, deadline=now + self.config.checks_wait_s
        )
        self.pending_checks[d.job] = pending
        return self._send_checks(d, pending, pending.asked, now)

    def _send_checks(
        self, d: Diagnosis, pending: PendingChecks, nodes: tuple[str, ...], now: float
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
                "wait_s": self.config.checks_wait_s,
                **({"recheck": list(pending.recheck)} if pending.recheck else {}),
            },
        )
        key = d.id if not again else f"{d.id}:ask{again + 1}"
        decision, command = self._act(d, step, now, key=key)
        pending.requests.append(command_id(key, "run_checks"))
        return decision, command

    def _settle_checks(self, job: str, now: float) -> list[tuple[Decision, Command | None]]:
        pending = self.pending_checks[job]
        verdict = judge_checks(pending, now, self.config.checks_asks)
        if verdict is None:
            return []
        d = Diagnosis.from_dict(pending.diagnosis)
        if verdict.reask:
            pending.asks += 1
            pending.deadline = now + self.config.checks_wait_s
            log.warning("job %s: no check results from %s; asking again", job, ",".join(verdict.reask))
            return [self._send_checks(d, pending, verdict.reask, now)]
        if verdict.keep_open:
            pending.settled = True
        else:
            del self.pending_checks[job]
        self._lemons(self._fleet.observe_checks(job, d.id, pending.results, now, self.config.mode(job)), now)
        out = []
        for step in verdict.steps:
            if step.rung == "bring_back":
                self.refresh_fleet(now)  # another member may have made one a lemon since the last tick
                passed = step.nodes
                step = self._not_lemons(step)
                if self.config.mode(job) == "act":
                    self._fleet.brought_back(step.nodes, now)
                for n in passed:  # a lemon is not asked again either: it waits for a person
                    self.taken_out.get(job, {}).pop(n, None)
                if not self.taken_out.get(job):
                    self.taken_out.pop(job, None)
            out.append(self._act(d, step, now))
        return out

    def _not_lemons(self, step: Step) -> Step:
        """A lemon that passed its checks stays out: only a person brings it back."""
        lemons = self._fleet.lemons() & set(step.nodes)
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

    def _settle_reproduction(self, event: Envelope, now: float) -> list[tuple[Decision, Command | None]]:
        repro = self.reproductions[event.job]
        # Read from ``data``, not the typed payload: an outcome its Struct refuses is dead-lettered at
        # the consumer's intake and still an answer here (inconclusive: a person looks).
        if event.data.get("command_id") != repro.command_id:
            return []
        del self.reproductions[event.job]
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
        return [self._act(d, step, now)]
