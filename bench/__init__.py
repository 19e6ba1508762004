"""Benchmarks that print figures (`make bench`); not timed tests. See bench/README.md."""

# The bench runs with DEBUG off, as production does, so it needs secrets that
# are not the public development defaults: made up for this run, inherited by
# every process it starts (config/security.py).
from config.security import use_local_defaults

use_local_defaults()
