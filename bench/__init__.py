"""Benchmarks that print figures (`make bench`); not timed tests. See bench/README.md."""
