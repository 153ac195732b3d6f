"""RemovableHandle — what register_*_hook returns (torch.utils.hooks.RemovableHandle)."""
import itertools


class RemovableHandle:
    """handle.remove() takes the hook out of the dict or list it was added to; also a context
    manager that removes on exit."""
    _ids = itertools.count()

    def __init__(self, container, key=None):
        self._container = container
        self.id = next(self._ids) if key is None else key

    def remove(self):
        c = self._container
        if isinstance(c, dict):
            c.pop(self.id, None)
        elif isinstance(c, list):
            hook = self.id
            for i, h in enumerate(c):
                if h is hook:
                    del c[i]
                    break

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
