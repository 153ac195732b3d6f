"""torch functions composed from cddp's C kernels (no per-element Python): allclose, isclose,
equal, sort/argsort/topk (NumPy's C sort for the order, gather for differentiable values),
Tensor.type_as, and autograd.grad."""
import warnings

import numpy as np

from . import _C
from ._ops import _return_type, numpy_names as _numpy_names

Tensor = _C.Tensor


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    # torch's rule: equal, or a finite difference within atol + rtol * |other| (an infinite
    # `other` would make any finite input "close" through rtol * inf)
    err = (input - other).abs()
    close = (err <= atol + rtol * other.abs()) & err.isfinite()
    if equal_nan:
        close = close | (input.isnan() & other.isnan())
    return close | (input == other)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def equal(input, other):  # noqa: A002
    """True when both have the same shape and the same elements."""
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all().item())


sort_result = _return_type("sort", module=__name__)       # torch.return_types.sort / topk
topk_result = _return_type("topk", module=__name__)


def _order(input, dim, descending, stable=True):  # noqa: A002
    x = input.detach()
    if x.dim() == 0:                      # a 0-d tensor is its own order: index 0, 0-d
        if dim not in (-1, 0):
            raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but "
                             f"got {dim})")
        return _C.from_numpy(np.zeros((), np.int64))
    a = x.float().numpy() if x.dtype == _C.bfloat16 else x.numpy()   # order: exact in float
    kind = "stable" if stable else "quicksort"
    if descending and a.dtype.kind == "f":
        # torch's NaN is the largest value: first when descending (NumPy's key would put it
        # last), then -a ascending; lexsort is stable, so ties keep position order
        idx = np.lexsort((-a, ~np.isnan(a)), axis=dim)
    elif descending:
        # ~a reverses bool and integer order without the wrap-around of -a at the minimum
        idx = np.argsort(~a, axis=dim, kind=kind)
    else:
        idx = np.argsort(a, axis=dim, kind=kind)
    return _C.from_numpy(np.ascontiguousarray(idx.astype(np.int64)))


def sort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    idx = _order(input, dim, descending, True)
    return sort_result((input.gather(dim, idx), idx))


def argsort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    return _order(input, dim, descending, True)


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    n = input.shape[dim] if input.dim() else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"selected index k out of range (k={k}, size {n})")
    if input.dim() == 0:                  # torch: 0-d values and index for k = 0 and 1
        idx = _order(input, dim, largest)
        return topk_result((input.clone(), idx))
    idx = _order(input, dim, largest, True).narrow(dim if dim >= 0 else input.dim() + dim, 0,
                                                  k).contiguous()     # torch's: .view()-able
    return topk_result((input.gather(dim, idx), idx))


def type_as(self, other):
    return self.to(other.dtype)


for _name in ("sort", "argsort", "topk"):           # axis= for dim=, as torch's parser
    globals()[_name] = _numpy_names(globals()[_name])
for _name in ("isclose", "allclose", "equal", "sort", "argsort", "topk"):
    setattr(Tensor, _name, globals()[_name])
Tensor.type_as = type_as


def _first_order(outputs, inputs, grad_outputs, retain_graph):
    """The gradients reaching inputs (None where none does), captured by hooks during a C
    engine run that writes no .grad."""
    captured = [None] * len(inputs)
    handles = []
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (index {i}) does not require grad")

        def hook(g, i=i):
            captured[i] = g if captured[i] is None else captured[i] + g
        handles.append(x.register_hook(hook))
    try:
        _C._backward(tuple(outputs), None if grad_outputs is None else tuple(grad_outputs),
                     bool(retain_graph), True)
    finally:
        for h in handles:
            h.remove()
    return captured


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """torch.autograd.grad: gradients of outputs w.r.t. inputs, returned instead of
    accumulated (no .grad is written). create_graph=True gives gradients with a history
    (cddp/autograd/_higher); only_inputs is accepted and ignored, as torch does."""
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                      "True). To accumulate gradient for other parts of the graph, please use "
                      "torch.autograd.backward.", FutureWarning, stacklevel=2)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if is_grads_batched:
        return _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if grad_outputs is not None and isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    if create_graph:
        from .autograd import _higher
        captured = list(_higher.grad(outputs, inputs, grad_outputs))
    else:
        captured = _first_order(outputs, inputs, grad_outputs, retain_graph)
    if not allow_unused and not materialize_grads:
        for i, g in enumerate(captured):
            if g is None:
                raise RuntimeError(f"One of the differentiated Tensors (index {i}) appears to "
                                   "not have been used in the graph. Set allow_unused=True if "
                                   "this is the desired behavior.")
    if materialize_grads:
        captured = [_C.zeros_like(x) if g is None else g for x, g in zip(inputs, captured)]
    return tuple(captured)


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    """grad(..., is_grads_batched=True): one backward per row of the grad_outputs' leading
    dimension, each input's gradients stacked along a new first dimension. torch vmaps the
    backward instead; the rows are the same vector-Jacobian products."""
    gos = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs or ())
    n_out = 1 if isinstance(outputs, Tensor) else len(outputs)
    if len(gos) != n_out or any(g is None or g.dim() == 0 for g in gos):
        raise RuntimeError("is_grads_batched=True needs a grad_output with a leading batch "
                           f"dimension for each of the {n_out} outputs")
    batch = {int(g.shape[0]) for g in gos}
    if len(batch) != 1:
        raise RuntimeError("is_grads_batched=True: the grad_outputs' batch dimensions differ: "
                           f"{[int(g.shape[0]) for g in gos]}")
    rows = batch.pop()
    single = isinstance(inputs, Tensor)
    per_row = [grad(outputs, inputs, [g[i] for g in gos],
                    retain_graph=True if i < rows - 1 else retain_graph,
                    create_graph=create_graph, allow_unused=allow_unused,
                    materialize_grads=materialize_grads) for i in range(rows)]
    xs = [inputs] if single else list(inputs)
    stacked = []
    for j, x in enumerate(xs):
        col = [r[j] for r in per_row]
        if rows and col[0] is None:
            stacked.append(None)
        else:
            stacked.append(_C.stack(col) if rows else
                           _C.zeros((0, *x.shape), dtype=x.dtype))
    return tuple(stacked)
