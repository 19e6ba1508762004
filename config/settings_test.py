"""Test settings: the real services on this machine, a separate Redis db;
the embedded PostgreSQL / Redis when nothing answers there.

DEBUG stays off, as in production; secrets made up for this run (and plain
HTTP) go into os.environ, so the workers and Daphne processes the tests
start with config.settings inherit them.
"""

import os
from urllib.parse import urlsplit, urlunsplit

from config import embedded
from config.security import use_local_defaults

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentdesk")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
# Under pytest-xdist each worker (gw0, gw1, ...) gets its own Redis db next to
# the configured one, as pytest-django gives it its own test database: tests
# flush their db and start Celery workers on it, which must not reach another
# worker's tests. Set before the embedded fallback, which keeps the path.
_XDIST = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST.startswith("gw") and not os.environ.get("AGENTDESK_TEST_REDIS_SPLIT"):
    _url = urlsplit(os.environ["REDIS_URL"])
    _db = int(_url.path.strip("/") or 0) + int(_XDIST[2:])
    os.environ["REDIS_URL"] = urlunsplit(_url._replace(path=f"/{_db}"))
    os.environ["AGENTDESK_TEST_REDIS_SPLIT"] = _XDIST  # processes we start keep it
# A fresh machine (nothing answers there): the embedded servers `make run` uses.
embedded.for_tests()
# Webhook receivers in tests listen on loopback (tests of the refusal clear it).
os.environ.setdefault("AGENTDESK_EGRESS_ALLOW", "127.0.0.0/8,::1/128")
use_local_defaults()

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Rate-limit counters live in Redis for a minute; user ids restart with each
# new test database, so a run must not count the previous run's requests.
CACHES["default"]["KEY_PREFIX"] += f".{os.getpid()}"  # noqa: F405
