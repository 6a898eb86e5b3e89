"""packtool.idle: work done at the next wait, once, in order; a failure is dropped."""

from __future__ import annotations

from packtool import idle


def test_pending_work_runs_once_in_order_and_a_failure_is_dropped():
    idle.clear()
    ran = []
    idle.later(lambda: ran.append(1))
    idle.later(lambda: 1 / 0)
    idle.later(lambda: ran.append(3))
    assert idle.pending()
    idle.run()
    idle.run()
    assert ran == [1, 3] and not idle.pending()


def test_meanwhile_drops_work_no_wait_ran():
    idle.clear()
    ran = []
    with idle.meanwhile(lambda: ran.append(1)):
        assert idle.pending()
    assert not idle.pending() and ran == []
    with idle.meanwhile(None):
        assert not idle.pending()
