"""cddp.futures.Future — the small part of torch.futures.Future that DDP comm hooks use:
wait(), value(), then(callback), done(), set_result()."""


class Future:
    def __init__(self, waiter=None):
        self._waiter = waiter       # callable producing the value on first wait()
        self._done = waiter is None
        self._value = None
        self._callbacks = []

    def set_result(self, value):
        self._value = value
        self._done = True
        self._waiter = None

    def done(self):
        return self._done

    def wait(self):
        if not self._done:
            self.set_result(self._waiter())
        return self._value

    def value(self):
        return self.wait()

    def then(self, callback):
        """A Future whose value is callback(self), computed when it is waited on."""
        return Future(lambda: callback(self._settled()))

    def _settled(self):
        self.wait()
        return self
