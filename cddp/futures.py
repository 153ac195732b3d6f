"""cddp.futures.Future — torch.futures.Future, the one Future of cddp: what Work.get_future()
returns, what DDP comm hooks return, and what a user makes by hand.

    fut = Future()                  pending until fut.set_result(v) or fut.set_exception(e)
    fut.wait() / fut.value()        the value (blocks until complete); raises the exception
    fut.done()                      complete yet?
    fut.then(cb) -> Future          completed with cb(fut) when fut completes (or cb's exception)
    fut.add_done_callback(cb)       cb(fut) once fut completes; at once when it already has

Note [lazy completion]: cddp runs no Python on its worker threads, so a Future over asynchronous
work (Work.get_future(), then()) is completed by whichever thread first asks for it: wait() and
value() run its `produce` step (Work.wait() then Work.result(); a then() callback over its parent),
and done() runs it as soon as its `ready` poll says the work has finished. Callbacks therefore run
on the thread that waits for or polls the result, which is where DDP consumes them anyway. A
hand-made Future is completed by set_result / set_exception, from any thread; wait() blocks until
then. Every Future is completed exactly once (a second set_result is an error, as in torch).
"""
import threading

_lock = threading.Lock()     # guards every Future's completion, callbacks and waiter event


class Future:
    def __init__(self, *, devices=None):
        # devices: torch's CUDA-stream option; cddp's tensors live on the CPU
        self._done = False
        self._value = self._exc = None
        self._callbacks = []
        self._produce = None     # callable computing the value on first wait() (lazy completion)
        self._ready = None       # callable: True once _produce would not block (polled by done())
        self._event = None       # made when a thread has to block on a hand-made Future

    @classmethod
    def _deferred(cls, produce, ready=None):
        """A Future completed by produce() when first waited for, or by done() once ready()."""
        fut = cls()
        fut._produce, fut._ready = produce, ready
        return fut

    # -- completion ----------------------------------------------------------------------------
    def _complete(self, value, exc):
        with _lock:
            if self._done:
                raise RuntimeError("Future can only be marked completed once")
            self._value, self._exc, self._done = value, exc, True
            self._produce = self._ready = None
            event, callbacks, self._callbacks = self._event, self._callbacks, []
        if event is not None:
            event.set()
        for cb in callbacks:
            cb(self)

    def _run(self):
        """Run the produce step unless another call already took it; never blocks."""
        with _lock:
            produce, self._produce = self._produce, None
        if produce is None:
            return
        try:
            value = produce()
        except Exception as e:  # noqa: BLE001 — stored, raised by wait()/value()
            self._complete(None, e)
        except BaseException:                           # Ctrl-C: the next wait() runs it again
            self._produce = produce
            raise
        else:
            self._complete(value, None)

    def _settle(self):
        """Complete this Future (run its produce step, or wait for set_result or for the thread
        running the step); never raises the Future's own exception."""
        if not self._done:
            self._run()
        if self._done:
            return
        with _lock:
            if self._done:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        event.wait()

    def set_result(self, result):
        self._complete(result, None)

    def set_exception(self, result):
        self._complete(None, result)

    # -- reading -------------------------------------------------------------------------------
    def wait(self):
        self._settle()
        if self._exc is not None:
            raise self._exc
        return self._value

    def value(self):
        return self.wait()

    def done(self):
        if not self._done:
            ready = self._ready
            if ready is not None and ready():
                self._settle()
        return self._done

    # -- chaining ------------------------------------------------------------------------------
    def then(self, callback):
        """A Future holding callback(self), run as soon as this Future completes (with a value
        or an exception: callback's own fut.value() raises it, and the new Future then holds
        it); inline when this Future has already completed."""
        def produce():
            self._settle()
            return callback(self)
        child = Future._deferred(produce, ready=self.done)
        self.add_done_callback(lambda _: child._run())
        return child

    def add_done_callback(self, callback):
        with _lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)


def wait_all(futures):
    """Wait for every future; their values in order (the first error raises, as torch's)."""
    return [f.wait() for f in futures]
