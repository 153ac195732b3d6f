"""cddp.futures.Future, torch.futures.Future's semantics: hand-made futures (set_result /
set_exception, wait from another thread), lazily completed ones (what Work.get_future() and
then() build), then() chains and done callbacks. torch is the oracle when importable.
(Work.get_future() over real collectives: tests/test_pg.py; DDP comm hooks: tests/test_ddp.py.)
"""
import threading

import pytest

from cddp.futures import Future

try:
    import torch.futures as torch_futures
except ImportError:
    torch_futures = None

MAKERS = [("cddp", Future)] + ([("torch", torch_futures.Future)] if torch_futures else [])


@pytest.mark.parametrize("name,make", MAKERS)
def test_hand_made_future(name, make):
    fut = make()
    assert not fut.done()
    seen = []
    fut.add_done_callback(lambda f: seen.append(("cb", f.value())))
    child = fut.then(lambda f: seen.append(("then", f.value())) or f.value() * 2)
    fut.set_result(21)                                            # runs both callbacks
    assert sorted(seen) == [("cb", 21), ("then", 21)] and child.done()
    assert fut.done() and fut.wait() == 21 and fut.value() == 21 and child.wait() == 42
    assert fut.then(lambda f: f.value() + 1).done()               # complete: then() runs inline
    fut.add_done_callback(lambda f: seen.append("late"))        # already complete: runs at once
    assert seen[-1] == "late"
    with pytest.raises(RuntimeError):
        fut.set_result(1)                                         # completed only once


@pytest.mark.parametrize("name,make", MAKERS)
def test_exceptions_reach_wait_and_then(name, make):
    fut = make()
    child = fut.then(lambda f: f.value() + 1)                     # value() raises the error
    fut.set_exception(ValueError("boom"))
    assert fut.done()
    with pytest.raises(ValueError, match="boom"):
        fut.wait()
    # a callback's error completes its Future (torch wraps it in a RuntimeError naming it)
    with pytest.raises(Exception, match="boom"):
        child.wait()
    failing = make()
    child = failing.then(lambda f: 1 / 0)
    failing.set_result(0)
    with pytest.raises(Exception, match="division by zero"):
        child.wait()


@pytest.mark.parametrize("name,make", MAKERS)
def test_wait_blocks_until_another_thread_sets_the_result(name, make):
    fut = make()
    timer = threading.Timer(0.05, fut.set_result, args=("late",))
    timer.start()
    try:
        assert fut.wait() == "late"
    finally:
        timer.join(10)


def test_deferred_future_completes_on_wait_or_when_polled_ready():
    calls, ready = [], [False]
    fut = Future._deferred(lambda: calls.append(1) or "v", ready=lambda: ready[0])
    child = fut.then(lambda f: f.value().upper())
    seen = []
    fut.add_done_callback(lambda f: seen.append(f.value()))
    assert not fut.done() and not child.done() and calls == []   # work not finished: no run
    ready[0] = True
    assert child.done() and fut.done()                             # polling completes the chain
    assert calls == [1] and seen == ["v"] and child.value() == "V"
    assert fut.wait() == "v" and calls == [1]                      # produced once

    failing = Future._deferred(lambda: 1 / 0)                      # no poll: done on wait()
    assert not failing.done()
    with pytest.raises(ZeroDivisionError):
        failing.wait()
    assert failing.done()
