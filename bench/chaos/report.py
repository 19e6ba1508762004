"""Recovery times from the event log, and the text report.

Recovery after a worker death: for each session the dead process owned
(SessionRuntime.owner = `hostname:pid` when it was killed), the seconds from
the SIGKILL to that session's next event (the `recovery` event of the claim
that takes over, or whatever the session did next). One sample per
(death, owned session).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.chaos.checks import Findings, World
from bench.chaos.nemesis import Window


@dataclass
class Recovery:
    deaths: int = 0
    deaths_owning: int = 0
    samples: list[float] = field(default_factory=list)
    unrecovered: list[str] = field(default_factory=list)
    via_recovery_event: int = 0
    details: list[tuple[float, str]] = field(default_factory=list)
    # Seconds from the kill to the sweeper's re-enqueue of the session (from
    # the workers' logs), for the samples the sweeper recovered.
    noticed: list[float] = field(default_factory=list)
    # The samples no other fault overlapped (from this fault to the
    # session's next event): a kill inside a Redis outage waits for the
    # broker whatever the runtime does, and shows in `samples` alone.
    alone: list[float] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        rank = max(1, math.ceil(p / 100 * len(ordered)))  # nearest rank
        return ordered[rank - 1]


SWEEP_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): .*sweeper re-enqueued \d+ session\(s\): \[([\d, ]*)"
)


def sweeper_enqueues(log_dir: Path) -> dict[int, list[float]]:
    """When the sweeper re-enqueued each session (epoch seconds), from the
    workers' logs (it names up to 20 sessions a line)."""
    out: dict[int, list[float]] = {}
    for path in log_dir.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            match = SWEEP_LINE.match(line)
            if not match:
                continue
            at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            for ident in filter(None, (x.strip() for x in match[2].split(","))):
                out.setdefault(int(ident), []).append(at)
    return out


KILLS = ("worker_sigkill", "pool_child_sigkill")
# Issue 26's "model calls paid twice per database fault" counts these: the
# database went away under a worker that was otherwise fine, and a completed
# model call lost to that is the runtime's doing.
DATABASE_FAULTS = ("postgres_crash", "pg_terminate_all", "pg_terminate_backend")
# A host cut off from the rest (nemesis.PARTITION_KINDS): its model streams
# go with its link (the provider is behind it too: "model stream broke"), and
# what it learned while cut off is fenced when it comes back (the other host
# took its sessions), so a call in flight is paid again whatever the runtime
# does. Counted apart.


CLAIM_LOST = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): .*session (\d+): claim lost, stopping"
)
FENCE_WINDOW_S = 60.0  # a faulted host's slot finds its claim gone within this of the heal


@dataclass
class Takeover:
    """Per partition kind: sessions the faulted host owned when its link
    went; of those, moved (an event by another process while the link was
    down: the other host took it over) and fenced (the faulted host's slot
    logged "claim lost" for it afterwards: its stale write matched no row)."""

    owned: int = 0
    moved: int = 0
    fenced: int = 0


def claims_lost(log_dir: Path, slot_hosts: dict[str, str]) -> dict[str, list[tuple[float, int]]]:
    """host -> (epoch seconds, session) of every "claim lost" its workers logged."""
    out: dict[str, list[tuple[float, int]]] = {}
    for path in log_dir.glob("*.log"):
        host = slot_hosts.get(path.stem.rsplit("-", 1)[0])
        if host is None:
            continue
        for line in path.read_text(errors="replace").splitlines():
            if match := CLAIM_LOST.match(line):
                at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out.setdefault(host, []).append((at, int(match[2])))
    return out


def partition_takeovers(
    probes: list[Any], world: World, log_dir: Path, slot_hosts: dict[str, str]
) -> dict[str, Takeover]:
    lost = claims_lost(log_dir, slot_hosts)
    out: dict[str, Takeover] = {}
    for probe in probes:
        if not probe.kind.startswith("partition_"):
            continue
        host = probe.target.removeprefix("host-")
        took = out.setdefault(probe.kind, Takeover())
        for session_id in probe.sessions:
            took.owned += 1
            during = [
                e
                for e in world.events[session_id]
                if probe.began < e.created_at.timestamp() < probe.at
            ]
            writers = {_actor_pid(e.actor) for e in during} - {None}
            took.moved += bool(writers - set(probe.pids))
            took.fenced += any(
                s == session_id and probe.began <= at <= probe.at + FENCE_WINDOW_S
                for at, s in lost.get(host, [])
            )
    return out


def _actor_pid(actor: str) -> int | None:
    """`host:pid/slot` (a worker slot) -> pid; people and triggers -> None."""
    try:
        return int(actor.rsplit(":", 1)[1].split("/", 1)[0])
    except (IndexError, ValueError):
        return None


def recovery_by_kind(
    probes: list[Any], world: World, windows: list[Window] | None = None
) -> dict[str, Recovery]:
    """Per fault kind: from the fault's end (a kill: the kill; an outage: the
    moment it was restored) to each hit session's next event."""
    kinds = sorted({p.kind for p in probes})
    return {
        k: recovery_times([p for p in probes if p.kind == k], world, windows=windows) for k in kinds
    }


def _overlapped(probe: Any, until: float, windows: list[Window]) -> bool:
    """Whether a fault other than the probe's own was on between the probe's
    time and `until` (its own: of its kind, on at its time or just before)."""
    for w in windows:
        own = w.kind == probe.kind and w.began <= probe.at <= w.ended + 1.0
        if not own and w.began < until and w.ended > probe.at:
            return True
    return False


def completed_unrecorded(stats: dict[str, Any], world: World) -> int:
    """Model calls the provider completed (and would bill) beyond the replies
    we recorded: a call asked again after its answer was lost, or one whose
    turn was canceled or ended meanwhile (repeats_by_kind counts the first
    kind alone)."""
    outcomes = stats.get("model_requests", {}).get("by_outcome", {})
    completed = sum(
        n
        for outcome, n in outcomes.items()
        if not outcome.startswith(("error_", "fault_")) and outcome != "stream_aborted"
    )
    replies = sum(
        1 for events in world.events.values() for e in events if e.kind == "model.replied"
    )
    return max(0, completed - replies)


# A paid answer is lost when a fault strikes between the call's completion
# and its record (a kill a moment after it), or while the fault lasts (the
# database down), or as it heals (a retry that runs out just after).
LOST_BEFORE_S = 2.0
LOST_AFTER_S = 5.0


def repeats_by_kind(
    repeats: list[dict[str, Any]],
    windows: list[Window],
    host_by_address: dict[str, str] | None = None,
) -> Counter[str]:
    """Each call paid twice (the sandbox's GET /_model_repeats: when the lost
    answer was completed, and the address it went to) charged to the fault
    that lost it: a partition of the host it went to, if one was near; else
    the latest fault begun by then (or just after) that had not ended long
    before, a partition of another host aside (that host's cut loses nothing
    of this one's). None near it: `no fault`, a loss the runtime made on its
    own. Without the host (the proxies' layout: every worker on loopback),
    the latest fault near it, whatever it was: a cut host's answers fenced
    after it came back were charged to a crash that began a moment later
    (115 of one crash's 174 in one run)."""
    hosts = host_by_address or {}
    charged: Counter[str] = Counter()
    for repeat in repeats:
        lost = repeat["lost_at"]
        host = hosts.get(repeat.get("lost_by", ""), "")
        near = [
            w
            for w in windows
            if w.began - LOST_BEFORE_S <= lost <= w.ended + LOST_AFTER_S
            and not (host and w.host and w.host != host)
        ]
        own_cut = [w for w in near if host and w.host == host]
        pick = own_cut or near
        charged[max(pick, key=lambda w: w.began).kind if pick else "no fault"] += 1
    return charged


def recovery_times(
    probes: list[Any],
    world: World,
    log_dir: Path | None = None,
    windows: list[Window] | None = None,
) -> Recovery:
    out = Recovery(deaths=len(probes))
    swept = sweeper_enqueues(log_dir) if log_dir else {}
    for probe in probes:
        if probe.sessions:
            out.deaths_owning += 1
        for session_id in probe.sessions:
            after = [e for e in world.events[session_id] if e.created_at.timestamp() > probe.at]
            if not after:
                out.unrecovered.append(f"{probe.target} session {session_id}")
                continue
            seconds = after[0].created_at.timestamp() - probe.at
            out.samples.append(seconds)
            if not _overlapped(probe, probe.at + seconds, windows or []):
                out.alone.append(seconds)
            sweeps = [t - probe.at for t in swept.get(session_id, []) if probe.at < t]
            if sweeps and min(sweeps) <= seconds + 0.05:
                out.noticed.append(min(sweeps))
            out.via_recovery_event += after[0].kind == "recovery"
            out.details.append(
                (seconds, f"{probe.kind} {probe.target}: session {session_id} -> {after[0].kind}")
            )
    return out


def _alone(recovery: Recovery) -> str:
    """The samples no other fault overlapped, when some were."""
    overlapped = len(recovery.samples) - len(recovery.alone)
    if not overlapped:
        return ""
    alone = Recovery(samples=recovery.alone)
    return (
        f" ({overlapped} overlapped by another fault; the other {len(alone.samples)}: "
        f"p50 {alone.percentile(50):.2f}s p99 {alone.percentile(99):.2f}s)"
    )


def _counter(counter: Counter | dict, indent: str = "    ") -> str:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0])))
    return "\n".join(f"{indent}{k}: {v}" for k, v in items) or f"{indent}(none)"


def render(
    *,
    seed: int,
    sessions: int,
    found: Findings,
    recovery: Recovery,
    faults: Counter,
    driver_counts: Counter,
    phases: dict[str, float],
    notes: list[str],
    idle_runnable: dict[int, float],
    idle_untriggered: dict[int, float],
    by_kind: dict[str, Recovery] | None = None,
    figures: dict[str, Any] | None = None,
) -> str:
    s = found.stats
    total_faults = sum(faults.values())
    p50, p99 = recovery.percentile(50), recovery.percentile(99)
    lines = [
        "",
        f"== chaos report: seed {seed}, {sessions} sessions ==",
        "phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()),
        f"faults injected: {total_faults}",
        _counter(faults),
        f"sessions: {s['sessions']}",
        _counter(s["sessions_by_status"]),
        f"turns: {s['turns']}",
        _counter(s["turns_by_status"]),
        f"steps: {s['steps']} (model replies {s['model_replies']}, tool results "
        f"{s['steps'] - s['model_replies']}); events {s['events']}; recoveries {s['recoveries']}; "
        f"reissued tool calls {s['reissues']}; model step failures {s['model_failures']}",
        f"tool calls: {s['tool_calls']}",
        _counter(s["tool_calls_by_name"]),
        "  by status:",
        _counter(s["tool_calls_by_status"]),
        f"refunds in the sandbox: {s['refunds']} ({s['refunded_cents'] / 100:,.2f} USD)",
        "approvals:",
        _counter(s["approvals_by_status"]),
        "workload (driver):",
        _counter(driver_counts),
    ]
    if s["failed_turn_errors"]:
        lines += ["failed turns, by error:", _counter(s["failed_turn_errors"])]
    lines += [
        f"needing a human (in_doubt, listed not failed): {len(found.in_doubt)}",
        *[f"    {line}" for line in found.in_doubt],
        f"recovery after SIGKILL: {recovery.deaths} kills, {recovery.deaths_owning} owned "
        f"sessions, {len(recovery.samples)} samples ({recovery.via_recovery_event} first seen as "
        f"a recovery event): p50 {p50:.2f}s, p99 {p99:.2f}s, "
        f"max {max(recovery.samples, default=0):.2f}s" + _alone(recovery),
    ]
    if recovery.noticed:
        noticed = Recovery(samples=recovery.noticed)
        lines.append(
            f"    of which {len(recovery.noticed)} re-enqueued by the sweeper: kill -> sweeper "
            f"p50 {noticed.percentile(50):.2f}s, p99 {noticed.percentile(99):.2f}s (the rest of "
            "the recovery time is the wait in the queue for a worker)"
        )
    slowest = sorted(recovery.details, reverse=True)[:5]
    lines += [f"    {seconds:6.2f}s  {what}" for seconds, what in slowest]
    worst = sorted(((v, k) for k, v in idle_runnable.items()), reverse=True)[:5]
    lines.append(
        f"runnable sessions seen idle > 10s during the run (no live owner, no retry due; "
        f"most wait in the routine queue for a free worker): {len(idle_runnable)}"
        + "".join(f"\n    session {k}: {v:.1f}s" for v, k in worst)
    )
    worst = sorted(((v, k) for k, v in idle_untriggered.items()), reverse=True)[:5]
    lines.append(
        f"    of which with no trigger in the broker (dropped work: a violation past "
        f"CHAOS_IDLE_FAIL_S): {len(idle_untriggered)}"
        + "".join(f"\n    session {k}: {v:.1f}s" for v, k in worst)
    )
    if recovery.unrecovered:
        lines.append(f"    no event after the kill: {recovery.unrecovered}")
    if by_kind:
        lines.append("recovery by fault kind (fault over -> each hit session's next event):")
        for kind, rec in by_kind.items():
            lines.append(
                f"    {kind}: {len(rec.samples)} samples from {rec.deaths} faults: "
                f"p50 {rec.percentile(50):.2f}s p99 {rec.percentile(99):.2f}s "
                f"max {max(rec.samples, default=0):.2f}s"
                + _alone(rec)
                # No event after the fault's end: the session went on (on
                # the other host, after a reconnect) and settled during the
                # fault; one still stuck would fail invariant 4 or 8.
                + (f", {len(rec.unrecovered)} done before it ended" if rec.unrecovered else "")
            )
    for name, value in (figures or {}).items():
        lines.append(f"{name}: {value}")
    if notes:
        lines += ["notes (faults that could not apply, slow restarts):"]
        lines += [f"    {n}" for n in notes[:30]]
    lines.append(f"invariant violations: {len(found.violations)}")
    lines += [f"    {v}" for v in found.violations[:200]]
    lines.append(
        f"chaos: seed={seed} sessions={sessions} faults={total_faults} refunds={s['refunds']} "
        f"duplicate_effects={found.duplicate_effects} lost_effects={found.lost_effects} "
        f"violations={len(found.violations)} recovery_p50_s={p50:.2f} recovery_p99_s={p99:.2f}"
    )
    return "\n".join(lines)
