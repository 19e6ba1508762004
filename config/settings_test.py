"""Test settings: the real services on this machine, a separate Redis db."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentdesk")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Rate-limit counters live in Redis for a minute; user ids restart with each
# new test database, so a run must not count the previous run's requests.
CACHES["default"]["KEY_PREFIX"] += f".{os.getpid()}"  # noqa: F405
