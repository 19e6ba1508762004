"""Test settings: the real services on this machine, a separate Redis db;
the embedded PostgreSQL / Redis when nothing answers there.

DEBUG stays off, as in production; secrets made up for this run (and plain
HTTP) go into os.environ, so the workers and Daphne processes the tests
start with config.settings inherit them.
"""

import os

from config import embedded
from config.security import use_local_defaults

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentdesk")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
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
