"""PerProcess: one object per process, made again in a forked child."""

from __future__ import annotations

import os

from agents.per_process import PerProcess


def test_a_forked_child_makes_its_own_object_and_the_parent_keeps_its():
    made = []
    per_process = PerProcess(lambda: made.append(os.getpid()) or object())
    parent_object = per_process.get()
    assert per_process.get() is parent_object and per_process.current() is parent_object

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reports what it sees, then leaves at once
        try:
            fresh = per_process.current() is None
            child_object = per_process.get()
            ok = fresh and child_object is not parent_object and made[-1] == os.getpid()
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    assert answer == b"ok"
    assert per_process.get() is parent_object and made == [os.getpid()]
