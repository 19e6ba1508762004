"""docker-compose.yml's shape for metrics: web and workers in separate
containers share one PROMETHEUS_MULTIPROC_DIR volume, and /metrics (web)
sums what every worker counted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from tests.deploy import image as img
from tests.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]

# One "container": its own pid namespace (so this process is pid 1, as every
# container's first process is) and its own host name, counting one recovery
# once told to go. It makes its counter first, then waits: both containers
# hold a value read before either counted, which is when two processes
# writing one file lose a count.
CONTAINER = """
import os, pathlib, socket, sys, time
assert os.getpid() == 1, os.getpid()
from agents.observability import metrics
sync = pathlib.Path(sys.argv[1])
(sync / socket.gethostname()).touch()
while not (sync / "go").exists():
    time.sleep(0.01)
metrics.RECOVERIES.inc()
"""


def _recoveries(path: Path) -> float:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "agentdesk_recoveries_total":
                return sample.value
    return 0.0


def test_workers_in_two_containers_both_reach_metrics(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give each process a pid 1 of its own")
    shared = tmp_path / "prometheus"  # the volume
    sync = tmp_path / "sync"
    shared.mkdir()
    sync.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            ["unshare", "--pid", "--fork", "--uts", "sh", "-c"]
            + [f'hostname {name} && exec "$0" -c "$1" "$2"', sys.executable, CONTAINER, str(sync)],
            cwd=ROOT,
            env=env,
        )
        for name in ("worker-a", "worker-b")
    ]
    try:
        wait_for(lambda: len(list(sync.iterdir())) == 2, timeout=30, what="both containers")
        (sync / "go").touch()
        for proc in procs:
            assert proc.wait(30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert _recoveries(shared) == 2.0
    assert sorted(p.name for p in shared.iterdir()) == [
        "counter_worker-a-1.db",
        "counter_worker-b-1.db",
        "histogram_worker-a-1.db",
        "histogram_worker-b-1.db",
    ]


def test_compose_gives_web_and_worker_one_metrics_volume():
    compose = img.compose_file()
    services = compose["services"]
    dirs, mounts = {}, {}
    for name in ("web", "worker"):
        service = services[name]
        dirs[name] = service["environment"]["PROMETHEUS_MULTIPROC_DIR"]
        mounts[name] = [v for v in service.get("volumes", []) if v.endswith(":" + dirs[name])]
    assert dirs["web"] == dirs["worker"]
    assert mounts["web"] == mounts["worker"] and len(mounts["web"]) == 1
    volume = mounts["web"][0].split(":")[0]
    assert volume in compose["volumes"]
    # The directory exists in the image, owned by the app user: a named
    # volume starts as a copy of it (Dockerfile).
    assert f"mkdir /data {dirs['web']}" in (ROOT / "Dockerfile").read_text()
