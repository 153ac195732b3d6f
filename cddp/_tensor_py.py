"""The few Tensor attributes that are plain Python over C methods: transposed views as
properties, and pickling / deepcopy (cold paths: DataLoader workers, copy.deepcopy(model))."""
import numpy as np

from . import _C
from ._C import Tensor


def _to_array(t):
    """A NumPy copy of t's values; bfloat16 (no NumPy dtype) as its int16 bit patterns."""
    t = t.detach()
    if t.dtype == _C.bfloat16:
        return t.reshape(-1).view(_C.int16).numpy().reshape(tuple(t.shape)).copy()
    return np.array(t.numpy(), copy=True)


def _from_array(array, bf16=False):
    t = _C.from_numpy(np.array(array, copy=True))
    return t.view(_C.bfloat16) if bf16 else t


def _rebuild(array, requires_grad, cls=None, bf16=False):
    t = _from_array(array, bf16)
    if cls is not None and cls is not Tensor:
        t = Tensor._make_subclass(cls, t, requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    return t


def _reduce_ex(self, proto):
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                           "pickling and deepcopy; detach() it first")
    state = self.__dict__ if type(self) is not Tensor and self.__dict__ else None
    args = (_to_array(self), self.requires_grad, type(self), self.dtype == _C.bfloat16)
    return (_rebuild, args, state) if state else (_rebuild, args)


def _deepcopy(self, memo):
    if id(self) in memo:
        return memo[id(self)]
    func, args, *state = _reduce_ex(self, 4)
    new = func(*args)
    if state:
        new.__dict__.update(__import__("copy").deepcopy(state[0], memo))
    if self.grad is not None:
        new.grad = self.grad.clone()
    memo[id(self)] = new
    return new


Tensor.__reduce_ex__ = _reduce_ex
Tensor.__deepcopy__ = _deepcopy


def _T(self):
    return self.permute(*reversed(range(self.ndim))) if self.ndim > 1 else self


def _mT(self):
    return self.transpose(-2, -1)


Tensor.T = property(_T, doc="the tensor with its dimensions reversed")
Tensor.mT = property(_mT, doc="the last two dimensions transposed")
Tensor.__array_priority__ = 1000  # NumPy defers binary ops to Tensor


class _HookHandle:
    """What Tensor.register_hook returns (torch.utils.hooks.RemovableHandle): remove()."""
    __slots__ = ("_list", "_fn")

    def __init__(self, pair):
        self._list, self._fn = pair

    def remove(self):
        for i, h in enumerate(self._list):
            if h is self._fn:
                del self._list[i]
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_c_register_hook = Tensor.register_hook
_c_register_post = Tensor.register_post_accumulate_grad_hook


def _register_hook(self, hook):
    """hook(grad) -> Tensor | None runs when this tensor's gradient is computed."""
    return _HookHandle(_c_register_hook(self, hook))


def _register_post_accumulate_grad_hook(self, hook):
    """hook(tensor) runs after a leaf's .grad has been accumulated."""
    return _HookHandle(_c_register_post(self, hook))


Tensor.register_hook = _register_hook
Tensor.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook


# ---- shared memory (Hogwild): the C method moves the storage; the first call registers the
# file-descriptor reducers (cddp/multiprocessing/reductions.py) so the tensor crosses
# multiprocessing boundaries by fd, not by value
_c_share_memory_ = Tensor.share_memory_


def _share_memory_(self):
    """Move the storage into shared memory (in place); fork children and processes it is sent
    to through (cddp.)multiprocessing see and update the same memory."""
    from .multiprocessing.reductions import init_reductions
    init_reductions()
    return _c_share_memory_(self)


Tensor.share_memory_ = _share_memory_
