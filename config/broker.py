"""Living through a broker outage (issue 26).

Redis is a delivery path, not the source of truth (every task re-reads
Postgres; the sweeper re-sends what a lost message left behind), so a worker
must outlive any Redis outage: keep driving the sessions it holds, reconnect
with backoff, say so in its log and in /metrics, and never exit for it.

Three things stood in the way, all fixed here or in settings:

1. **celery 5.7 / kombu 5.7 exit on the first outage with work in hand.**
   `Consumer.on_connection_error_after_connected` (celery 5.7) first runs
   `connection.collect()`, which closes the transport and sets its `client`
   to None, and then `connection.close()`. If the first pass could not close
   the default channel (its BRPOP read raised: Redis is gone), the second
   pass closes it again and, with unacknowledged messages in hand (every
   running `acks_late` task), `restore_unacked_once` asks the channel for a
   new Redis client: `Channel._connparams` reads `self.connection.client
   .hostname` on None, and the AttributeError, not being a connection
   error, escapes `ignore_errors` and stops the worker ("Unrecoverable
   error: AttributeError ... 'hostname'"). With nothing in hand there is
   nothing to restore and the bug does not show, which is why an idle
   worker survives. Patched below: a channel whose transport is closed
   raises a redis ConnectionError instead, which the cleanup ignores as it
   means to. What it would have restored is gone with Redis anyway; our
   triggers are resent by the sweeper (agents/runtime/sweeper.py).
   Upstream: the same AttributeError on a closed transport is
   celery/kombu#582 (2016, on gossip's restart); it came back with 5.7's
   collect-then-close. Remove this patch once kombu guards `_connparams`
   (check with tests/agents/runtime/test_broker_outage.py).
2. `broker_connection_max_retries` (100 by default) made a long outage
   fatal: settings set it to None (retry for ever, backoff capped by
   celery at `broker_connection_timeout`-like steps of 2 s up to 30 s).
3. `worker_cancel_long_running_tasks_on_connection_loss=True` cancels the
   running tasks on a connection loss: in the thread pool it cannot (it
   logs a failure per task), in a prefork pool it kills the children,
   throwing away model calls in flight. Our tasks are triggers and every
   step is fenced, so a task that outlives its message is harmless: off.

4. Celery's reconnect backoff grows by 2 s a try up to 30 s, so a worker
   could sit idle half a minute after Redis is back. `Consumer` retries
   every 1, 2 ... at most 5 s instead: a try costs one refused connect.

5. kombu makes a new redis client (`Channel._create_client`) for every
   publish, every delivery's bookkeeping and every ack: about 95 µs of CPU
   each with redis-py 8 (it copies the response callbacks), three per
   task, on the consumer thread that a busy worker's slots starve of the
   GIL (py-spy: 9% of a worker's GIL time at 500 sessions in flight).
   Patched below: one client per channel and connection pool, which is
   what those clients were anyway (a redis client is thread-safe: every
   command borrows a connection from the pool).

`BrokerWatch` (a consumer bootstep) logs the loss and the return and
counts them in /metrics: agentdesk_broker_disconnects_total,
agentdesk_broker_reconnects_total and agentdesk_broker_down (how many live
processes are without their broker now).
"""

from __future__ import annotations

import functools
import logging
import time
import warnings

from celery import bootsteps
from celery.exceptions import CPendingDeprecationWarning
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

log = logging.getLogger("agentdesk.broker")

_connparams = kombu_redis.Channel._connparams


def _connparams_of_open_transport(self, asynchronous=False):
    if self.connection is None or self.connection.client is None:
        # The transport was closed under this channel (see 1. above): a
        # connection error, which the cleanup that got here ignores.
        raise RedisConnectionError("the broker connection is closed")
    return _connparams(self, asynchronous=asynchronous)


def patch_kombu() -> None:
    if kombu_redis.Channel._connparams is not _connparams_of_open_transport:
        kombu_redis.Channel._connparams = _connparams_of_open_transport
    if kombu_redis.Channel._create_client is not _client_of_pool:
        _client_of_pool.made_by = kombu_redis.Channel._create_client
        kombu_redis.Channel._create_client = _client_of_pool


def _client_of_pool(self, asynchronous: bool = False):
    """kombu's `_create_client`, made once per channel and pool (5. above);
    a new pool (after a reconnect) gets a new client."""
    if asynchronous:
        return _client_of_pool.made_by(self, asynchronous=True)
    pool = self.pool
    kept = self.__dict__.get("_agentdesk_client")
    if kept is None or kept.connection_pool is not pool:
        kept = _client_of_pool.made_by(self)
        self.__dict__["_agentdesk_client"] = kept
    return kept


def quiet_cancel_warning() -> None:
    """Called when the worker is ready: celery's log setup has just asked
    for every one of its deprecation warnings, always."""
    # Celery warns on every connection loss that the cancel setting will
    # change in Celery 6: ours is set explicitly, off on purpose (3. above).
    warnings.filterwarnings(
        "ignore", category=CPendingDeprecationWarning, message=r"(?s).*connection loss"
    )


# The reconnect backoff (see 4. above).
RECONNECT_FIRST_S = 1.0
RECONNECT_STEP_S = 1.0
RECONNECT_MAX_S = 5.0


class Consumer(CeleryConsumer):
    """Celery's consumer, reconnecting with a shorter backoff (settings:
    CELERY_WORKER_CONSUMER)."""

    def ensure_connected(self, conn):
        conn.ensure_connection = functools.partial(
            conn.ensure_connection,
            interval_start=RECONNECT_FIRST_S,
            interval_step=RECONNECT_STEP_S,
            interval_max=RECONNECT_MAX_S,
        )
        return super().ensure_connected(conn)


class BrokerWatch(bootsteps.StartStopStep):
    """Runs after the consumer's Connection step: `start` is each
    (re)connection, `stop` in a running blueprint is a lost connection
    (celery restarts the consumer's steps to reconnect)."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def __init__(self, c, **kwargs):
        self.lost_at: float | None = None
        super().__init__(c, **kwargs)

    def start(self, c):
        if self.lost_at is None:
            return
        away = time.monotonic() - self.lost_at
        self.lost_at = None
        from agents.observability import metrics

        metrics.BROKER_RECONNECTS.labels("worker").inc()
        metrics.BROKER_DOWN.labels("worker").set(0)
        log.warning("broker connection back after %.1fs; consuming again", away)

    def stop(self, c):
        from celery.bootsteps import RUN

        if c.blueprint.state != RUN or self.lost_at is not None:
            return  # a shutdown, not a loss; or already counted
        self.lost_at = time.monotonic()
        from agents.observability import metrics

        metrics.BROKER_DISCONNECTS.labels("worker").inc()
        metrics.BROKER_DOWN.labels("worker").set(1)
        log.warning(
            "broker connection lost; running sessions go on, reconnecting with backoff "
            "(the sweeper resends what the broker lost)"
        )
