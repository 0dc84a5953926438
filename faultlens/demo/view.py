"""The live view: a rich Live screen on a terminal, plain periodic status lines elsewhere."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from faultlens.demo.state import DemoState

COLOURS = {"healthy": "green", "suspect": "yellow", "replaced": "cyan"}
PLAIN_EVERY_S = 2.0


class Counters:
    """Events/s, lag and dead letters from the pipeline's runner stats."""

    def __init__(self, stats: Callable[[], dict[str, Any]]):
        self.stats = stats
        self._last: tuple[float, int] | None = None

    def line(self, state: DemoState) -> str:
        stats = self.stats()
        events = sum(s.records_in for name, s in stats.items() if name == "diagnose")
        now = time.monotonic()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = (events - self._last[1]) / (now - self._last[0])
        self._last = (now, events)
        lag = sum(s.lag for s in stats.values())
        dead = sum(s.dead_letters for s in stats.values())
        sim = state.sim_now - state.sim_start
        return (f"sim {sim:5.0f}/{state.sim_end - state.sim_start:.0f} s | published {state.published} | "
                f"diagnose {rate:6.0f} ev/s | lag {lag} | dead letters {dead} | diagnoses {len(state.diagnoses)} | "
                f"commands {len(state.commands)}")


def render(state: DemoState, counters: Counters, trainer_events: Callable[[], list[dict[str, Any]]]) -> Group:
    grid = Text()
    nodes = state.node_states()
    width = 32 if len(nodes) > 32 else 16
    for i, (_, st) in enumerate(nodes):
        grid.append("■ ", style=COLOURS[st])
        if (i + 1) % width == 0:
            grid.append("\n")
    grid.append(f"\nhealthy ■ suspect ■ replaced ■   evicted so far: {', '.join(state.evicted[-8:]) or '-'}")
    diags, cmds = state.recent()
    inc = Table(expand=True, title="incidents")
    for col in ("t (s)", "job", "fault", "nodes", "action", "conf"):
        inc.add_column(col)
    for d in diags:
        t = d.ts - state.sim_start if d.job == state.sim_job else 0.0
        inc.add_row(f"{t:.0f}" if d.job == state.sim_job else "live", d.job, d.fault,
                    _nodes(d.nodes), d.action, f"{d.confidence:.2f}")
    com = Table(expand=True, title="commands")
    for col in ("action", "job", "nodes", "outcome"):
        com.add_column(col)
    for c in cmds:
        cmd = c.command
        com.add_row(cmd.action if cmd else "?", cmd.job if cmd else "?", _nodes(cmd.nodes) if cmd else "",
                    "[green]obeyed[/]" if c.accepted else f"[red]refused[/]: {c.reason}")
    parts: list[Any] = [Panel(grid, title=f"{state.sim_job}: nodes"), inc, com]
    events = trainer_events()
    if state.trainer_job:
        last = " → ".join(_trainer_word(e) for e in events[-6:]) or "starting"
        parts.append(Text(f"real trainer {state.trainer_job}: {last}"))
    parts.append(Text(counters.line(state), style="bold"))
    return Group(*parts)


def _nodes(nodes: tuple[str, ...], shown: int = 4) -> str:
    return ",".join(nodes[:shown]) + (f" +{len(nodes) - shown}" if len(nodes) > shown else "")


def _trainer_word(e: dict[str, Any]) -> str:
    kind = e.get("event", "?")
    if kind == "restart":
        return f"restart ({e.get('action')}, resume {e.get('resume')})"
    return str(kind)


class LiveView:
    """Refreshes in a thread until :meth:`stop`; ``live`` False prints a status line every 2 s to stderr."""

    def __init__(self, state: DemoState, stats: Callable[[], dict[str, Any]],
                 trainer_events: Callable[[], list[dict[str, Any]]], *, live: bool):
        self.state = state
        self.counters = Counters(stats)
        self.trainer_events = trainer_events
        self.live = live
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faultlens-demo-view", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        try:
            if self.live:
                with Live(console=Console(), refresh_per_second=4, transient=False) as live:
                    while not self._stop.wait(0.25):
                        live.update(render(self.state, self.counters, self.trainer_events))
                    live.update(render(self.state, self.counters, self.trainer_events))
            else:
                while not self._stop.wait(PLAIN_EVERY_S):
                    print(self.counters.line(self.state), file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - the view must never take the demo down
            import logging

            logging.getLogger(__name__).exception("live view failed; the demo goes on without it")
