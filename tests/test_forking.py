"""Forking worker processes: what a worker inherits, what the parent keeps."""

from __future__ import annotations

import gc
import os
import signal

import pytest

from packtool.forking import forking_workers


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_worker_forked_in_forking_workers_inherits_a_frozen_heap_and_a_blocked_sigint():
    r, w = os.pipe()
    with forking_workers():
        pid = os.fork()
        if pid == 0:  # the worker: report, then leave without the parent's exit handlers
            blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
            os.write(w, f"{gc.get_freeze_count()} {int(blocked)}".encode())
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        frozen, blocked = (int(x) for x in f.read().split())
    assert os.waitpid(pid, 0)[1] == 0
    assert frozen > 10_000 and blocked == 1  # every module and object the parent had
    assert gc.get_freeze_count() == 0  # the parent's own objects are collected as before
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
