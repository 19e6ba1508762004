"""What the campaign measures while it runs: processes that died by
themselves, worker connections and memory, transactions held open, and
runnable sessions nobody works on (invariants 4, 5, 9 and 10).

A mixin of Campaign (campaign.py), which owns the state these read and
fill: workers, redis, postgres, sandbox, nemesis, started, samples,
process_deaths, long_transactions, link_transactions, lock_waits,
host_by_address, idle_runnable and idle_untriggered.
"""

from __future__ import annotations

import json
import os
import time

import psutil

from agents.runtime.ownership import LIVE_PROCESSES_SQL
from bench.chaos import stack

# A host's transactions stay open on the server while its link is down and
# after: keepalive notices a silent client in ~5 s, and the client's TCP
# retransmits up to one backoff (several seconds) after the link heals.
LINK_GRACE_S = 10.0
IDLE_NOTE_S = 10.0  # a runnable session idle this long is reported...
# ...and idle this long with no trigger for it anywhere in the broker (queued
# or held by a worker) is a violation (invariant 4): its work was dropped, and
# the sweeper (interval 1 s, grace 1.5 s here) should have re-sent it long
# before. A session whose trigger waits in the routine queue is not stalled,
# it is waiting for a free worker; the report counts those separately.
IDLE_FAIL_S = float(os.environ.get("CHAOS_IDLE_FAIL_S") or 20)
IDLE_RUNNABLE_SQL = f"""
    SELECT s.id, extract(epoch FROM now() - r.updated_at) FROM agents_session s
    JOIN agents_sessionruntime r ON r.session_id = s.id
    WHERE s.status = 'running' AND (r.wake_at IS NULL OR r.wake_at <= now())
      AND r.updated_at < now() - make_interval(secs => %s)
      AND (r.owner = '' OR r.owner_process NOT IN ({LIVE_PROCESSES_SQL}))
"""  # noqa: S608 (constants, no input)


class Sampling:
    def _sample_all(self, phase: str) -> None:
        self._watch_processes()
        self._sample_steady(phase)
        if phase != "after":
            self._sample_transactions()
            self._sample_lock_waits()
            self._sample_idle_runnable()

    def _watch_processes(self) -> None:
        """Redis, PostgreSQL and the sandbox exit only when the nemesis stops
        them; any other exit is a finding (invariant 9)."""
        at = f"t=+{time.monotonic() - self.started:.1f}s"
        if self.redis.exited_by_itself():
            self.process_deaths.append(f"redis exited by itself at {at}")
            self.redis.stop()
            self.redis.start()
        if self.postgres is not None and self.postgres.exited_by_itself():
            self.process_deaths.append(f"postgres exited by itself at {at}")
            self.postgres.start()
        if self.sandbox is not None and self.sandbox.popen.poll() is not None:
            self.process_deaths.append(f"the sandbox exited by itself at {at}")

    def _sample_steady(self, phase: str) -> None:
        """Worker connections on the database, and each worker's memory
        (the process and its pool children): invariant 10."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = %s",
                [stack.WORKER_APP],
            )
            conns = cursor.fetchone()[0]
        rss = {}
        for slot in self.workers.slots:
            total = 0
            for pid in slot.group_pids():
                try:
                    total += psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
            if total:
                rss[slot.name] = total / 2**20
        self.samples.append((phase, conns, rss))

    def _sample_transactions(self) -> None:
        """An open transaction older than a few seconds is a transaction held
        across I/O (invariant 5): sample for one while the faults run."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, application_name, extract(epoch FROM now() - xact_start), "
                "left(query, 160), host(client_addr) FROM pg_stat_activity "
                "WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid() "
                "AND xact_start < now() - interval '5 seconds'"
            )
            rows = cursor.fetchall()
        at = f"t=+{time.monotonic() - self.started:.1f}s"
        for pid, app, age, query, client in rows:
            line = f"{at} backend {pid} ({app}) idle in a {age:.1f}s transaction: {query}"
            network = self._on_a_faulted_link(client)
            (self.link_transactions if network else self.long_transactions).append(line)

    def _sample_lock_waits(self) -> None:
        """Backends waiting on a lock (a row another transaction holds), and
        whether what holds it is a transaction on a faulted link: a cut
        host's claim keeps its session row locked on the server until the
        server gives up on the host (keepalive, about 11 s), and another
        host's claim of that session waits, holding a pooled connection."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT w.pid, extract(epoch FROM now() - w.state_change), host(b.client_addr) "
                "FROM pg_stat_activity w "
                "CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocker(pid) "
                "JOIN pg_stat_activity b ON b.pid = blocker.pid "
                "WHERE w.datname = current_database() AND w.wait_event_type = 'Lock'"
            )
            rows = cursor.fetchall()
        waiting = {pid for pid, _, _ in rows}
        behind_a_cut = {pid for pid, _, client in rows if self._on_a_faulted_link(client)}
        longest = max((float(age) for _, age, _ in rows), default=0.0)
        self.lock_waits.append((len(waiting), len(behind_a_cut), longest))

    def _on_a_faulted_link(self, client: str | None) -> bool:
        """Whether the network, not our code, may be what keeps a transaction
        open. A slowed link (partition_delay) makes a short transaction of a
        few round trips last seconds on the server. Across a veth that was
        cut or black-holed, the server hears nothing of a client's next
        statement (nor of its end) until the link heals and the client's
        TCP retransmits, or until keepalive gives up on it (about 5 s):
        transactions of that host are noted, not counted, while its link is
        faulted and LINK_GRACE_S after. (Behind proxies every client is
        127.0.0.1: the cut and the black hole reset the server's side
        within 2 s there, and only the slow link needs the allowance.)"""
        if time.time() < self.nemesis.slow_link_until:
            return True
        host = self.host_by_address.get(client or "")
        faulted_until = self.nemesis.link_faulted_until.get(host, 0.0)
        return host is not None and time.time() < faulted_until + LINK_GRACE_S

    def _sample_idle_runnable(self) -> None:
        """Runnable sessions nobody works on (no owner whose process holds its
        liveness lock on THIS database, not waiting for a retry) for longer than IDLE_NOTE_S: each
        is a stall the sweeper should have ended (invariant 4)."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(IDLE_RUNNABLE_SQL, [IDLE_NOTE_S])
            idle = cursor.fetchall()
        if not idle:
            return
        triggered = self._triggered_sessions()
        # While the broker is away (or was just flushed) no trigger can be
        # anywhere: the clock for "idle with no trigger" starts when it is
        # back, or an outage longer than IDLE_FAIL_S would fail by itself.
        since_broker = time.time() - self.nemesis.broker_back_at
        for session_id, idle_s in idle:
            seen = self.idle_runnable.get(session_id, 0.0)
            self.idle_runnable[session_id] = max(seen, float(idle_s))
            if triggered is not None and session_id not in triggered and since_broker > 0:
                seen = self.idle_untriggered.get(session_id, 0.0)
                untriggered = min(float(idle_s), since_broker)
                self.idle_untriggered[session_id] = max(seen, untriggered)

    def _triggered_sessions(self) -> set[int] | None:
        """Sessions with an `advance` trigger in the broker: waiting in a
        priority list, or delivered to a worker and not acknowledged yet
        (kombu's `unacked` hash). None when Redis cannot be read (down)."""
        import redis as redis_lib

        client = redis_lib.Redis.from_url(self.redis.url, socket_timeout=2)
        try:
            raw = [m for key in client.keys("celery*") for m in client.lrange(key, 0, -1)]
            raw += [json.loads(v)[0] for v in client.hvals("unacked")]
        except redis_lib.RedisError:
            return None
        finally:
            client.close()
        sessions = set()
        for message in raw:
            body = json.loads(message) if isinstance(message, bytes | str) else message
            headers = body.get("headers") or {}
            if headers.get("task") == "agents.advance_session":
                sessions.add(int(headers["argsrepr"].strip("(),")))
        return sessions
