"""Agentdesk settings: one module, read from the environment.

Every knob is an environment variable with a default that works for
`make run` (the embedded PostgreSQL and Redis set DATABASE_URL / REDIS_URL
before anything imports this module).
"""

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import keepalive
from config.env import env_bool, env_float, env_int, env_json, env_list, env_str
from config.security import DEV_SECRET_KEY, DEV_WEBHOOK_SECRET, refuse_insecure_production

BASE_DIR = Path(__file__).resolve().parent.parent

# --- Security ---------------------------------------------------------------
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
# Production (DEBUG off) speaks HTTPS only: the redirect, secure cookies and
# HSTS. AGENTDESK_PLAIN_HTTP turns all three off (a trial on localhost, the
# test suite); `check --deploy` then says so.
AGENTDESK_PLAIN_HTTP = env_bool("AGENTDESK_PLAIN_HTTP", DEBUG)
_HTTPS = not AGENTDESK_PLAIN_HTTP
# Behind a proxy that terminates TLS, Django sees plain HTTP; the proxy's
# X-Forwarded-Proto says what the browser used. Only with a proxy that always
# sets (or strips) that header: anyone else could claim https with it.
AGENTDESK_TLS_PROXY = env_bool("AGENTDESK_TLS_PROXY", False)
if AGENTDESK_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = _HTTPS
# Machine callers inside the deployment (the helpdesk's signed webhook, the
# messages API, Prometheus) call web directly: a redirect would lose a POST's
# body, and their credential has been sent by the time it could be refused.
SECURE_REDIRECT_EXEMPT = [r"^api/", r"^metrics$"]
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _HTTPS
SECURE_HSTS_SECONDS = env_int("AGENTDESK_HSTS_SECONDS", 31_536_000) if _HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AGENTDESK_HSTS_INCLUDE_SUBDOMAINS", True)
# Preload asks browsers to hard-code HTTPS for the domain, a decision for its
# owner (hstspreload.org), not a default; security.W021 says it is off.
SECURE_HSTS_PRELOAD = env_bool("AGENTDESK_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "ninja",  # its Swagger UI assets, served from our static files (no CDN)
    "axes",
    "agents",
    "approvals",
    "capabilities",
    "dashboard",
    "api",
    "integrations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "api.middleware.ProblemDetailsMiddleware",  # errors under /api/v1/ as RFC 9457
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "dashboard.inputs.RefuseNulMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "dashboard.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Data stores ----------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentdesk")
# Every process borrows its connections from a small pool of its own
# (Django's psycopg pool): a worker's slots borrow one for each claim and
# record and give it back before every network wait (agents/runtime/store/
# pool.py), Daphne's request threads for each request. So a process holds at
# most AGENTDESK_DB_POOL_SIZE connections (a worker one more: its liveness
# lock, agents/runtime/ownership.py) however many sessions or requests it
# has in flight. Pooling replaces persistent connections (CONN_MAX_AGE 0).
AGENTDESK_DB_POOL_SIZE = env_int("AGENTDESK_DB_POOL_SIZE", 8)
DATABASES = {
    # Health checks: the pool pings a connection as it hands it out.
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=0, conn_health_checks=env_bool("AGENTDESK_DB_POOL_CHECK", True)
    )
}
# Django's backend with a health check that skips a connection given back
# moments ago (config/postgres/base.py).
DATABASES["default"]["ENGINE"] = "config.postgres"
DATABASES["default"].setdefault("OPTIONS", {}).update(
    # Parameters bound by the server, and statements seen 5 times on a
    # connection prepared (Django's default turns psycopg's preparing off): the
    # engine's record statements are then planned once per pooled connection.
    server_side_binding=True,
    prepare_threshold=5,
    pool={
        "min_size": min(2, AGENTDESK_DB_POOL_SIZE),
        "max_size": AGENTDESK_DB_POOL_SIZE,
        # A borrower waits this long for a free connection, then fails its step
        # (retried): only a pool far too small for its process waits at all.
        "timeout": env_float("AGENTDESK_DB_POOL_TIMEOUT_S", 30.0),
        # Connections idle this long are closed, down to min_size.
        "max_idle": 300.0,
    },
)
# Which process a connection belongs to, in pg_stat_activity (unless the URL
# names it: ?application_name=...).
DATABASES["default"]["OPTIONS"].setdefault("application_name", f"agentdesk pid={os.getpid()}")
# A database gone silent (a host cut off by the network) is given up on
# within seconds, at both ends (config/keepalive.py says why): libpq's
# timeouts and keepalives here, and the same keepalives asked of the server
# for each connection, so that it frees a silent host's liveness locks and
# row locks. The liveness connection (agents/runtime/ownership.py) is made
# with these same parameters. The URL's own (?connect_timeout=...) win.
AGENTDESK_DB_CONNECT_TIMEOUT_S = env_int(
    "AGENTDESK_DB_CONNECT_TIMEOUT_S", keepalive.CONNECT_TIMEOUT_S
)
AGENTDESK_DB_KEEPALIVE_IDLE_S = env_int("AGENTDESK_DB_KEEPALIVE_IDLE_S", keepalive.IDLE_S)
AGENTDESK_DB_KEEPALIVE_INTERVAL_S = env_int(
    "AGENTDESK_DB_KEEPALIVE_INTERVAL_S", keepalive.INTERVAL_S
)
AGENTDESK_DB_KEEPALIVE_COUNT = env_int("AGENTDESK_DB_KEEPALIVE_COUNT", keepalive.COUNT)
AGENTDESK_DB_TCP_USER_TIMEOUT_MS = env_int(
    "AGENTDESK_DB_TCP_USER_TIMEOUT_MS", keepalive.USER_TIMEOUT_MS
)
# Off behind a pooler that refuses startup `options` (PgBouncer): then set
# the server's (or the pooler's) keepalives in its own configuration.
AGENTDESK_DB_SERVER_KEEPALIVE = env_bool("AGENTDESK_DB_SERVER_KEEPALIVE", True)
_DB_LINK = (
    AGENTDESK_DB_KEEPALIVE_IDLE_S,
    AGENTDESK_DB_KEEPALIVE_INTERVAL_S,
    AGENTDESK_DB_KEEPALIVE_COUNT,
    AGENTDESK_DB_TCP_USER_TIMEOUT_MS,
)
for _name, _value in keepalive.client_options(AGENTDESK_DB_CONNECT_TIMEOUT_S, *_DB_LINK).items():
    DATABASES["default"]["OPTIONS"].setdefault(_name, _value)
if AGENTDESK_DB_SERVER_KEEPALIVE:
    DATABASES["default"]["OPTIONS"]["options"] = keepalive.startup_options(
        keepalive.server_gucs(*_DB_LINK), DATABASES["default"]["OPTIONS"].get("options", "")
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
# Redis pub/sub: a group send is one PUBLISH whatever the number of viewers,
# and delivery is at-most-once, which is all live pushes need (viewers fill
# gaps from Postgres by seq). Pub/sub channels ignore the Redis db number, so
# the prefix carries it: stacks sharing a Redis server on different dbs
# (tests, parallel runs) never hear each other.
_REDIS_DB = urlsplit(REDIS_URL).path.strip("/") or "0"
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": f"agentdesk.db{_REDIS_DB}."},
    }
}

# Django's cache, shared by every web process through Redis: the per-user
# rate limits (dashboard/views/common.py) count there. The key prefix names
# the database, so stacks sharing a Redis db never count each other's users.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"agentdesk.{DATABASES['default'].get('NAME', '')}",
        "TIMEOUT": 300,
        # A Redis outage must not take the desk down with it: limits fail
        # open (RATELIMIT_FAIL_OPEN) and a cache read gives up quickly.
        "OPTIONS": {"socket_timeout": 1, "socket_connect_timeout": 1},
    }
}

# --- Celery ---------------------------------------------------------------
# Redis is a delivery path, not the source of truth: every task re-reads
# Postgres, and the sweeper re-enqueues work that a lost message left behind.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a task killed mid-step is delivered again
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # ...also when the pool child dies
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # a busy worker does not hoard messages
# Many sessions in flight per worker process: each slot of a thread pool
# drives one session, and almost all of a slot's time is spent waiting on a
# model stream or a tool call, which releases the GIL and holds no database
# connection. The README ("Sizing") says how to choose the number.
CELERY_WORKER_POOL = env_str("AGENTDESK_WORKER_POOL", "threads")
# 1,000: a burst of 2,000 tickets at seconds per model call fits in two
# such processes (one per core, config/sizing.py); a thread is made only
# when a slot is first needed, and an idle one costs a stack and no CPU.
CELERY_WORKER_CONCURRENCY = env_int("AGENTDESK_WORKER_SLOTS", 1000)
# A broker outage of any length is lived through (config/broker.py): retry
# for ever (every 1, 2 ... at most 5 s: config/broker.Consumer), and leave
# running tasks running (they are triggers; every step they take is fenced).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CONSUMER = "config.broker:Consumer"  # reconnects every <= 5 s
# One advance task runs at most AGENTDESK_TASK_MAX_S of steps (one
# AGENTDESK_TASK_SLICE_S while other work waits) and then re-enqueues
# itself, so a task lives at most that plus its longest step (a model call
# with its retries). The hard time limit sits above that, and
# the visibility timeout above the time limit: Redis must never hand a
# message to a second worker while the first is still legitimately on it.
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 900)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 960)
# Two lanes in one queue (Redis priorities: 0 is served first). Routine work
# (new turns, time slices, bulk jobs) goes in at 6; the periodic sweeps and
# the re-enqueue of a session whose worker died go in at 0, so recovery never
# waits behind a backlog of routine work (see agents/runtime/dispatch.py).
CELERY_TASK_DEFAULT_PRIORITY = 6
# A broker across a cut or silent link must not hold a send (a slot's, beat's)
# or the consumer for the kernel's minutes: give up and let retries speak.
# socket_timeout bounds every blocking read, so it must stay above kombu's
# BRPOP poll (1 s: kombu's Redis transport asks BRPOP to answer within that
# when no message waits, and no polling_interval is set here); keepalive
# (the database's figures, config/keepalive.py) ends a consumer's link that
# went silent while it waited in BRPOP within about 11 s, where kombu's own
# check of an overdue BRPOP reply takes 26 s or more.
AGENTDESK_BROKER_SOCKET_TIMEOUT_S = env_float("AGENTDESK_BROKER_SOCKET_TIMEOUT_S", 5.0)
if AGENTDESK_BROKER_SOCKET_TIMEOUT_S <= 2:
    raise ImproperlyConfigured(
        "AGENTDESK_BROKER_SOCKET_TIMEOUT_S must be above 2 s: every BRPOP poll of the "
        "broker blocks up to 1 s, and a reply late past the timeout drops the connection"
    )
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
    "priority_steps": [0, 3, 6, 9],
    "queue_order_strategy": "priority",
    "socket_connect_timeout": 5,
    "socket_timeout": AGENTDESK_BROKER_SOCKET_TIMEOUT_S,
    "socket_keepalive": True,
    "socket_keepalive_options": keepalive.socket_options(),
}
CELERY_BEAT_SCHEDULE = {
    "sweep-sessions": {
        "task": "agents.sweep_sessions",
        "schedule": env_float("AGENTDESK_SWEEP_INTERVAL_S", 2.0),
        "options": {"priority": 0},
    },
    "expire-approvals": {
        "task": "approvals.expire_approvals",
        "schedule": env_float("AGENTDESK_EXPIRE_INTERVAL_S", 5.0),
        "options": {"priority": 0},
    },
    # Follow-ups, jobs and retention (agents/features/followups.py, jobs.py, retention.py):
    # each task re-reads Postgres, so a duplicate tick (two beats) is harmless.
    "fire-followups": {
        "task": "agents.fire_followups",
        "schedule": env_float("AGENTDESK_FOLLOWUP_INTERVAL_S", 5.0),
        "options": {"priority": 0},
    },
    "sweep-jobs": {
        "task": "agents.sweep_jobs",
        "schedule": env_float("AGENTDESK_JOB_SWEEP_INTERVAL_S", 30.0),
        "options": {"priority": 0},
    },
    # Sub-agents (capabilities/subagents.py): answers and cancels the
    # immediate hooks missed (a worker died between the two commits).
    "settle-subagents": {
        "task": "capabilities.settle_subagents",
        "schedule": env_float("AGENTDESK_SUBAGENT_SWEEP_S", 2.0),
        "options": {"priority": 0},
    },
    # Outbound webhooks (integrations/webhooks.py): each tick sends what is due.
    "send-webhooks": {
        "task": "integrations.send_webhooks",
        "schedule": env_float("AGENTDESK_WEBHOOK_INTERVAL_S", 2.0),
        "options": {"priority": 3},
    },
    "notify-approvals": {
        "task": "integrations.notify_approvals",
        "schedule": env_float("AGENTDESK_NOTIFY_INTERVAL_S", 2.0),
        "options": {"priority": 3},
    },
    "prune-idempotency-keys": {
        "task": "api.prune_idempotency_keys",
        "schedule": 3600.0,
        "options": {"priority": 9},  # housekeeping
    },
    "prune-sessions": {
        "task": "agents.prune_sessions",
        "schedule": env_float("AGENTDESK_PRUNE_INTERVAL_S", 3600.0),
        "options": {"priority": 9},  # housekeeping: behind everything else
    },
}

# --- Agentdesk runtime ----------------------------------------------------
SANDBOX_URL = env_str("SANDBOX_URL", "http://127.0.0.1:8100")
ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY", "")
# Without a key, the same SDK talks to the sandbox's Messages-API stand-in.
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL", "" if ANTHROPIC_API_KEY else SANDBOX_URL)
# Claude Sonnet 5 (claude-sonnet-4-5 reached its end of life on 2026-11-30).
AGENTDESK_MODEL = env_str("AGENTDESK_MODEL", "claude-sonnet-5")
# Thinking and text together: Claude Sonnet 5 thinks by default, and a limit
# sized for replies without thinking (1,024 was) cuts them short (Anthropic's
# migration guide says to raise it).
AGENTDESK_MODEL_MAX_TOKENS = env_int("AGENTDESK_MODEL_MAX_TOKENS", 16_000)
# How much the model thinks and writes for a reply (the Messages API's
# output_config.effort); empty: the model's own default (high, on Sonnet 5).
MODEL_EFFORTS = ("low", "medium", "high", "xhigh", "max")
AGENTDESK_MODEL_EFFORT = env_str("AGENTDESK_MODEL_EFFORT", "").strip().lower()
if AGENTDESK_MODEL_EFFORT and AGENTDESK_MODEL_EFFORT not in MODEL_EFFORTS:
    raise ImproperlyConfigured(
        f"AGENTDESK_MODEL_EFFORT must be one of {', '.join(MODEL_EFFORTS)} or empty "
        f"(the model's default), not {AGENTDESK_MODEL_EFFORT!r}"
    )
AGENTDESK_MODEL_TIMEOUT_S = env_float("AGENTDESK_MODEL_TIMEOUT_S", 120.0)
AGENTDESK_MODEL_MAX_RETRIES = env_int("AGENTDESK_MODEL_MAX_RETRIES", 3)
AGENTDESK_MODEL_CLIENT = env_str("AGENTDESK_MODEL_CLIENT", "agents.llm.anthropic.AnthropicModel")

STRIPE_API_KEY = env_str("STRIPE_API_KEY", "sk_test_sandbox")
STRIPE_API_BASE = env_str("STRIPE_API_BASE", SANDBOX_URL)
HELPDESK_URL = env_str("HELPDESK_URL", SANDBOX_URL)
AGENTDESK_HTTP_TIMEOUT_S = env_float("AGENTDESK_HTTP_TIMEOUT_S", 15.0)

AGENTDESK_WEBHOOK_SECRET = env_str("AGENTDESK_WEBHOOK_SECRET", DEV_WEBHOOK_SECRET)
AGENTDESK_WEBHOOK_TOLERANCE_S = env_int("AGENTDESK_WEBHOOK_TOLERANCE_S", 300)
# The service token: it may only post messages (POST /api/v1/messages and
# the legacy /api/sessions/<key>/messages); people use their own tokens.
AGENTDESK_API_TOKEN = env_str("AGENTDESK_API_TOKEN", "")
# The machine API (api/): writes per token per window, then 429.
AGENTDESK_API_RATE_LIMIT = env_int("AGENTDESK_API_RATE_LIMIT", 120)
AGENTDESK_API_RATE_WINDOW_S = env_int("AGENTDESK_API_RATE_WINDOW_S", 60)
AGENTDESK_IDEMPOTENCY_TTL_S = env_int("AGENTDESK_IDEMPOTENCY_TTL_S", 24 * 3600)
AGENTDESK_IDEMPOTENCY_LEASE_S = env_int("AGENTDESK_IDEMPOTENCY_LEASE_S", 60)
AGENTDESK_SSE_HEARTBEAT_S = env_float("AGENTDESK_SSE_HEARTBEAT_S", 15.0)
AGENTDESK_SSE_MAX_S = env_float("AGENTDESK_SSE_MAX_S", 300.0)  # then the client reconnects
# Event streams one token, and one user over all their tokens, may hold open
# at once (api/streamcap.py); the next is a 429.
AGENTDESK_SSE_MAX_PER_TOKEN = env_int("AGENTDESK_SSE_MAX_PER_TOKEN", 4)
AGENTDESK_SSE_MAX_PER_USER = env_int("AGENTDESK_SSE_MAX_PER_USER", 8)
# Outbound webhooks (integrations/): retries with exponential backoff, then dead.
AGENTDESK_WEBHOOK_MAX_ATTEMPTS = env_int("AGENTDESK_WEBHOOK_MAX_ATTEMPTS", 8)
AGENTDESK_WEBHOOK_BACKOFF_S = env_float("AGENTDESK_WEBHOOK_BACKOFF_S", 5.0)
AGENTDESK_WEBHOOK_BACKOFF_MAX_S = env_float("AGENTDESK_WEBHOOK_BACKOFF_MAX_S", 3600.0)
AGENTDESK_WEBHOOK_TIMEOUT_S = env_float("AGENTDESK_WEBHOOK_TIMEOUT_S", 10.0)
# Networks outbound requests a user configured (webhook targets) may reach
# besides the public internet: loopback, private, link-local and the like are
# refused unless listed here (integrations/egress.py), e.g. "10.2.0.0/16".
# make run and the tests list loopback, where their receivers listen.
AGENTDESK_EGRESS_ALLOW = env_list("AGENTDESK_EGRESS_ALLOW", [])
# Notifications (integrations/notifications.py): approvers hear of a waiting
# approval by email (when EMAIL_HOST is set) and Slack (token and channel
# set), with a link to the card at AGENTDESK_BASE_URL.
AGENTDESK_BASE_URL = env_str("AGENTDESK_BASE_URL", "http://127.0.0.1:8000")
AGENTDESK_APPROVAL_REMIND_BEFORE_S = env_int("AGENTDESK_APPROVAL_REMIND_BEFORE_S", 3600)
EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Agentdesk <agentdesk@localhost>")
SLACK_BOT_TOKEN = env_str("SLACK_BOT_TOKEN", "")
SLACK_CHANNEL = env_str("SLACK_CHANNEL", "")
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/")

AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS = env_int("AGENTDESK_REFUND_APPROVAL_LIMIT_CENTS", 10_000)
AGENTDESK_APPROVE_REPLIES = env_bool("AGENTDESK_APPROVE_REPLIES", False)
AGENTDESK_APPROVAL_TTL_S = env_int("AGENTDESK_APPROVAL_TTL_S", 24 * 3600)
# Issue 19: SLA clocks and who decides (per tool in a capability profile's
# ToolPolicy; these are the defaults for profiles declared in code).
# The last fraction of an approval's time shows as a warning (inbox, session
# page, /metrics).
AGENTDESK_APPROVAL_WARN_FRACTION = env_float("AGENTDESK_APPROVAL_WARN_FRACTION", 0.2)
# An approved call must start within this long after its approval's expiry
# (a worker down meanwhile): later, it never runs, and the model is told.
AGENTDESK_APPROVAL_RUN_GRACE_S = env_float("AGENTDESK_APPROVAL_RUN_GRACE_S", 60.0)
AGENTDESK_APPROVAL_ADMIN_ABOVE_CENTS = env_int("AGENTDESK_APPROVAL_ADMIN_ABOVE_CENTS", 0) or None
AGENTDESK_APPROVAL_QUORUM_ABOVE_CENTS = env_int("AGENTDESK_APPROVAL_QUORUM_ABOVE_CENTS", 0) or None
AGENTDESK_APPROVAL_QUORUM_VOTES = env_int("AGENTDESK_APPROVAL_QUORUM_VOTES", 2)
AGENTDESK_APPROVAL_ON_EXPIRY = env_str("AGENTDESK_APPROVAL_ON_EXPIRY", "deny")
AGENTDESK_BULK_APPROVE_MAX = env_int("AGENTDESK_BULK_APPROVE_MAX", 50)
# Profiles whose sessions take approval requests from outside agents (MCP's
# request_approval with a session_key) from anyone; admins may attach one to
# any session (api/external.py).
AGENTDESK_EXTERNAL_APPROVAL_PROFILES = env_list("AGENTDESK_EXTERNAL_APPROVAL_PROFILES", [])
# Cards on one page of the approvals inbox; the page says how many it does not show.
AGENTDESK_INBOX_PAGE = env_int("AGENTDESK_INBOX_PAGE", 200)

# A task lets go of its slot after a slice while other work waits in the
# queue; while none does it goes on, up to AGENTDESK_TASK_MAX_S in all
# (agents/runtime/engine.py: Slice).
AGENTDESK_TASK_SLICE_S = env_float("AGENTDESK_TASK_SLICE_S", 60.0)
AGENTDESK_TASK_MAX_S = env_float("AGENTDESK_TASK_MAX_S", 300.0)
AGENTDESK_MAX_STEP_ATTEMPTS = env_int("AGENTDESK_MAX_STEP_ATTEMPTS", 5)
AGENTDESK_MAX_TURN_STEPS = env_int("AGENTDESK_MAX_TURN_STEPS", 40)
# Budgets (agents/budgets.py): the defaults of a new session's limits. A turn
# that would cross a turn limit fails; a session that would cross a session
# limit pauses until an admin raises it. 0 means no limit. Money in USD.
AGENTDESK_MAX_TURN_TOKENS = env_int("AGENTDESK_MAX_TURN_TOKENS", 400_000)
AGENTDESK_MAX_TURN_COST_USD = env_float("AGENTDESK_MAX_TURN_COST_USD", 0)
AGENTDESK_MAX_TURN_SECONDS = env_int("AGENTDESK_MAX_TURN_SECONDS", 0)
AGENTDESK_MAX_SESSION_TOKENS = env_int("AGENTDESK_MAX_SESSION_TOKENS", 0)
AGENTDESK_MAX_SESSION_COST_USD = env_float("AGENTDESK_MAX_SESSION_COST_USD", 0)
# USD per million tokens [input, output], by model-name prefix (the longest
# prefix wins; "*" is the fallback). A model without a price costs 0.
AGENTDESK_PRICES = env_json(
    "AGENTDESK_PRICES",
    {
        "claude-fable-5-1": [10, 50],
        "claude-opus-5": [5, 25],
        "claude-sonnet-5": [3, 15],  # (its introductory 2 / 10 ended on 2026-08-31)
        "claude-opus-4-5": [5, 25],
        "claude-opus-4-6": [5, 25],
        "claude-opus-4-7": [5, 25],
        "claude-opus-4-8": [5, 25],
        "claude-opus-4": [15, 75],  # Opus 4 and 4.1
        "claude-sonnet-4": [3, 15],
        "claude-3-7-sonnet": [3, 15],
        "claude-haiku-4": [1, 5],
        "claude-3-5-haiku": [0.8, 4],
    },
)
# Memory (agents/runtime/memory.py): when the transcript a model call would
# read passes TRIGGER tokens (estimated as characters / 4), a summary of all
# but the last ~KEEP tokens is written first (one model call of at most
# MAX_TOKENS), and later calls read the summary plus the recent rows. 0 disables.
AGENTDESK_MEMORY_TRIGGER_TOKENS = env_int("AGENTDESK_MEMORY_TRIGGER_TOKENS", 30_000)
AGENTDESK_MEMORY_KEEP_TOKENS = env_int("AGENTDESK_MEMORY_KEEP_TOKENS", 8_000)
AGENTDESK_MEMORY_MAX_TOKENS = env_int("AGENTDESK_MEMORY_MAX_TOKENS", 1024)
AGENTDESK_SWEEP_GRACE_S = env_float("AGENTDESK_SWEEP_GRACE_S", 2.0)
# Every worker process sweeps this often on a thread of its own
# (agents/runtime/watchdog.py); beat also sends a sweep task as often.
AGENTDESK_SWEEP_INTERVAL_S = env_float("AGENTDESK_SWEEP_INTERVAL_S", 2.0)
AGENTDESK_TOOL_RETRIES = env_int("AGENTDESK_TOOL_RETRIES", 3)
# A tool whose provider refuses every quick try (NotSent: nothing left) is
# tried again this many times more, with the step backoff (2, 4, 8, 16 s),
# before the model is told it failed (runtime/engine.py, issue 26).
AGENTDESK_TOOL_UNAVAILABLE_RETRIES = env_int("AGENTDESK_TOOL_UNAVAILABLE_RETRIES", 4)
# A record that loses its database connection is tried again on a new one for
# this long while its fence holds (runtime/store/retry.py): the step's model
# call or tool call is done, and giving up would pay for it twice.
AGENTDESK_RECORD_RETRY_S = env_float("AGENTDESK_RECORD_RETRY_S", 20.0)

# --- Capabilities (capabilities/) -----------------------------------
# MCP servers, as JSON: {"docs": {"transport": "stdio", "command": ["python",
# "srv.py"], "env": {"TOKEN": "${DOCS_TOKEN}"}}, "crm": {"transport": "http",
# "url": "https://crm/mcp", "headers": {"Authorization": "Bearer ${CRM_TOKEN}"},
# "tools": {"create_case": {"kind": "idempotent_by_key"}}}}. ${VAR} is read
# from this process's environment: secrets come from configuration, never
# from the model. See capabilities/mcp.py for every key.
AGENTDESK_MCP_SERVERS = env_json("AGENTDESK_MCP_SERVERS", {})
AGENTDESK_MCP_TIMEOUT_S = env_float("AGENTDESK_MCP_TIMEOUT_S", 15.0)
AGENTDESK_MCP_LIST_TTL_S = env_float("AGENTDESK_MCP_LIST_TTL_S", 300.0)
AGENTDESK_MCP_RETRY_LIST_S = env_float("AGENTDESK_MCP_RETRY_LIST_S", 30.0)
# A resolved profile (policies, MCP tool lists) is kept this long per process.
AGENTDESK_CAPABILITY_CACHE_S = env_float("AGENTDESK_CAPABILITY_CACHE_S", 5.0)
AGENTDESK_SUBAGENT_MAX_DEPTH = env_int("AGENTDESK_SUBAGENT_MAX_DEPTH", 3)
# Code Mode (capabilities/codemode/): Monty subprocesses per worker process,
# how long a program waits for a free one, the host side's deadline per round
# trip (a subprocess that does not answer is killed), and programs' limits.
AGENTDESK_CODEMODE_PROCESSES = env_int("AGENTDESK_CODEMODE_PROCESSES", 4)
AGENTDESK_CODEMODE_CHECKOUT_S = env_float("AGENTDESK_CODEMODE_CHECKOUT_S", 10.0)
AGENTDESK_CODEMODE_REQUEST_TIMEOUT_S = env_float("AGENTDESK_CODEMODE_REQUEST_TIMEOUT_S", 15.0)
AGENTDESK_CODEMODE_INTERPRETER_S = env_float("AGENTDESK_CODEMODE_INTERPRETER_S", 5.0)
AGENTDESK_CODEMODE_WALL_S = env_float("AGENTDESK_CODEMODE_WALL_S", 120.0)
AGENTDESK_CODEMODE_MEMORY_MB = env_int("AGENTDESK_CODEMODE_MEMORY_MB", 64)
AGENTDESK_CODEMODE_HOST_CALLS = env_int("AGENTDESK_CODEMODE_HOST_CALLS", 50)

# Jobs (agents/features/jobs.py): attempts before a job is dead, backoff between them,
# and how long a running attempt may go without progress before it is failed.
AGENTDESK_JOB_MAX_ATTEMPTS = env_int("AGENTDESK_JOB_MAX_ATTEMPTS", 3)
AGENTDESK_JOB_BACKOFF_S = env_float("AGENTDESK_JOB_BACKOFF_S", 10.0)
AGENTDESK_JOB_BACKOFF_MAX_S = env_float("AGENTDESK_JOB_BACKOFF_MAX_S", 600.0)
AGENTDESK_JOB_STALE_S = env_float("AGENTDESK_JOB_STALE_S", 900.0)
# Retention (agents/features/retention.py): closed sessions (idle, failed, canceled)
# not updated for this many days have their transcript and events archived
# (gzip JSON in agents_sessionarchive) and deleted, in batches. 0 disables.
AGENTDESK_RETENTION_DAYS = env_int("AGENTDESK_RETENTION_DAYS", 30)
AGENTDESK_RETENTION_BATCH = env_int("AGENTDESK_RETENTION_BATCH", 1000)
AGENTDESK_RETENTION_ARCHIVE = env_bool("AGENTDESK_RETENTION_ARCHIVE", True)

# --- Auth, static, i18n ---------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes, dashboard/auth.py): failures are counted per
# user name and client address together; reaching the limit locks logins for
# that name from that address (also with the right password) until the
# cool-off has passed since the last failure. So nobody can lock a user out
# from elsewhere, nor everyone behind one address. One address alone is
# locked after a higher count over a longer window (AGENTDESK_LOGIN_ADDRESS_*):
# one place trying many names is stopped too. A lockout is a 429 page with Retry-After, a
# row in the admin (Axes > Access attempts: delete it to lift the lockout), a
# `login.locked_out` audit row and agentdesk_login_lockouts in /metrics.
# Behind a proxy, run Daphne with --proxy-headers so the client address is
# the caller's, not the proxy's.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("AGENTDESK_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_float("AGENTDESK_LOGIN_COOLOFF_S", 900.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AGENTDESK_LOGIN_ADDRESS_LIMIT = env_int("AGENTDESK_LOGIN_ADDRESS_LIMIT", 50)
AGENTDESK_LOGIN_ADDRESS_WINDOW_S = env_int("AGENTDESK_LOGIN_ADDRESS_WINDOW_S", 3600)
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_LOCKOUT_CALLABLE = "dashboard.auth.locked_out"
# Per-user rate limits on the desk's writes (django-ratelimit, counted in the
# Redis cache; "N/s", "N/m", "N/h"). Over the limit: 429 with Retry-After.
AGENTDESK_DECISION_RATE = env_str("AGENTDESK_DECISION_RATE", "30/m")
AGENTDESK_POST_RATE = env_str("AGENTDESK_POST_RATE", "20/m")
RATELIMIT_FAIL_OPEN = True  # Redis away: decisions still work (they are audited anyway)
# An open WebSocket closes when its user logs out, changes password, loses a
# role or is deactivated (pushed at once: dashboard/revocation.py); before a
# push it also re-reads the login from the database when its last check is
# older than this, so a lost revocation leaves it open this long at most.
AGENTDESK_WS_RECHECK_S = env_float("AGENTDESK_WS_RECHECK_S", 2.0)
# Who else is viewing a session or a card (dashboard/presence.py): each tab
# says so every HEARTBEAT_S; one unheard of for TTL_S is gone.
AGENTDESK_PRESENCE_HEARTBEAT_S = env_float("AGENTDESK_PRESENCE_HEARTBEAT_S", 5.0)
AGENTDESK_PRESENCE_TTL_S = env_float("AGENTDESK_PRESENCE_TTL_S", 15.0)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:sessions"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads it for the X-CSRFToken header
# A forged request gets a page that says so, and an audit row (agents.AuditEntry).
CSRF_FAILURE_VIEW = "dashboard.views.common.csrf_failure"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# --- Observability (agents/observability/) ----------------------------------
# Traces go over OTLP/HTTP when this (a collector's base URL) or the standard
# OTEL_EXPORTER_OTLP_ENDPOINT is set; otherwise tracing is off.
AGENTDESK_OTLP_ENDPOINT = env_str("AGENTDESK_OTLP_ENDPOINT", "")
# /metrics wants `Authorization: Bearer <token>` when set; open when empty,
# which production allows only when told the network keeps it private.
AGENTDESK_METRICS_TOKEN = env_str("AGENTDESK_METRICS_TOKEN", "")
AGENTDESK_METRICS_OPEN = env_bool("AGENTDESK_METRICS_OPEN", False)
# "json": one JSON object per line, with session_key / turn / step during a
# step; "console": one readable line, for a person (make run). Celery keeps
# this logging setup for both instead of installing its own.
AGENTDESK_LOG_FORMAT = env_str("AGENTDESK_LOG_FORMAT", "plain")
CELERY_WORKER_HIJACK_ROOT_LOGGER = AGENTDESK_LOG_FORMAT == "plain"
# Also every line as JSON to this file, housekeeping included (make run:
# .data/logs/<process>.jsonl).
AGENTDESK_LOG_FILE = env_str("AGENTDESK_LOG_FILE", "")
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "agents.observability.logs.JsonFormatter"},
        "console": {"()": "agents.observability.logs.ConsoleFormatter"},
    },
    "filters": {
        # Routine lines of periodic work and of every task are DEBUG
        # (agents/observability/logs.py): not on the console at INFO.
        "console_housekeeping": {
            "()": "agents.observability.logs.Housekeeping",
            "level": LOG_LEVEL,
        },
        "file_housekeeping": {"()": "agents.observability.logs.Housekeeping"},
        # Every handler: no Authorization value, token or secret is written.
        "redact": {"()": "agents.observability.redact.Redact"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": AGENTDESK_LOG_FORMAT
            if AGENTDESK_LOG_FORMAT in ("json", "console")
            else "plain",
            "filters": ["redact", "console_housekeeping"],
        },
        **(
            {
                "file": {
                    "class": "logging.FileHandler",
                    "filename": AGENTDESK_LOG_FILE,
                    "formatter": "json",
                    "filters": ["redact", "file_housekeeping"],
                    "delay": True,  # no empty file for a process that logs nothing
                }
            }
            if AGENTDESK_LOG_FILE
            else {}
        ),
    },
    "root": {
        "handlers": ["console", "file"] if AGENTDESK_LOG_FILE else ["console"],
        "level": LOG_LEVEL,
    },
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "stripe": {"level": "WARNING"},
        # The MCP SDK logs the end of every stream (a normal session end) at INFO.
        "mcp": {"level": "WARNING"},
        # For a person, start-up chatter is noise (the endpoint, a broker's
        # neighbours): warnings only.
        **(
            {"daphne": {"level": "WARNING"}, "celery.worker.consumer": {"level": "WARNING"}}
            if AGENTDESK_LOG_FORMAT == "console"
            else {}
        ),
        # django-axes logs every login at INFO; failures and lockouts are WARNING.
        "axes": {"level": "WARNING"},
        # Django's own console handler on "django" (DEBUG only) wrote records,
        # django-ninja's "Unexpected auth - '<the header>'" among them, before
        # the root's handlers could redact them: its records go to the root's.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
    },
}

# Browser sessions (capabilities/browser/, issue 25). The storage state is
# encrypted with AGENTDESK_BROWSER_KEY (urlsafe base64 of 32 bytes; make one
# with `python -c "import base64,os;print(base64.urlsafe_b64encode(os.urandom(32)).decode())"`);
# without one a key is derived from SECRET_KEY (development only: production
# refuses the development secret anyway).
AGENTDESK_BROWSER_KEY = env_str("AGENTDESK_BROWSER_KEY", "")
AGENTDESK_BROWSER_EXECUTABLE = env_str("AGENTDESK_BROWSER_EXECUTABLE", "/usr/bin/chromium")
# Open browser contexts per worker process (one per active agent session);
# a session that finds them all busy waits up to _WAIT_S, then the call is
# retried like any request that never left.
AGENTDESK_BROWSER_MAX_CONTEXTS = env_int("AGENTDESK_BROWSER_MAX_CONTEXTS", 24)
AGENTDESK_BROWSER_CONTEXT_WAIT_S = env_float("AGENTDESK_BROWSER_CONTEXT_WAIT_S", 20.0)
AGENTDESK_BROWSER_IDLE_S = env_float("AGENTDESK_BROWSER_IDLE_S", 120.0)
# Values a profile may fill without the model ever seeing them
# (`${secret:NAME}`); the default is the sandbox carrier portal's account.
AGENTDESK_BROWSER_SECRETS = env_json(
    "AGENTDESK_BROWSER_SECRETS",
    {"carrier_username": "acme-support", "carrier_password": "parcel-desk-2026"},
)

# Last, once every value above is read: production refuses to start on a
# development secret (ImproperlyConfigured while this module is imported, so
# Daphne, Celery and every manage.py command stop alike; a system check would
# stop manage.py only).
if not DEBUG:
    refuse_insecure_production(
        secret_key=SECRET_KEY,
        webhook_secret=AGENTDESK_WEBHOOK_SECRET,
        metrics_token=AGENTDESK_METRICS_TOKEN,
        metrics_open=AGENTDESK_METRICS_OPEN,
    )
