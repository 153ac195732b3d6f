"""torch.autograd.gradcheck / gradgradcheck: check autograd's gradients against central
finite differences (torch's slow mode).

For each input that requires grad, the numerical Jacobian perturbs one element at a time by
±eps (in place, restored exactly afterwards) and takes (f(x + eps) - f(x - eps)) / (2 eps);
the analytical one runs one backward per output element with a one-hot grad_output. Both
are (input numel, output numel) matrices compared with allclose(analytical, numerical,
rtol, atol); a mismatch raises GradcheckError with torch's message (or gives False with
raise_exception=False). Backward is run twice to check it is reentrant (nondet_tol).

check_forward_ad: the Jacobian again through forward-mode AD (one dual per input element,
cddp.autograd.forward_ad), against the same finite differences. check_batched_grad: a backward
with two random grad_outputs batched (is_grads_batched) against one backward per grad_output;
check_batched_forward_grad: vmap over two tangents against one forward-AD call per tangent.
What cddp leaves out: check_undefined_grad (accepted, not run), fast_mode (accepted; the full
Jacobians are compared, which is what fast mode approximates). gradgradcheck is
gradcheck of the function (inputs, grad_outputs) -> autograd.grad(..., create_graph=True), as
torch's: the second derivatives come from double backward (cddp/autograd/_higher).

The loops run over input and output elements as torch's do: each step is one call of func
or one backward, with the arithmetic in tensor ops.
"""
import warnings

from .. import _C
from .._extras import allclose
from .grad_mode import enable_grad, no_grad

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]

Tensor = _C.Tensor


class GradcheckError(RuntimeError):
    """Error raised by gradcheck and gradgradcheck."""


def _as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _differentiable_outputs(x):
    return tuple(o for o in _as_tuple(x) if isinstance(o, Tensor) and o.requires_grad)


def _check_inputs(tupled_inputs):
    any_input_requiring_grad = False
    for idx, inp in enumerate(tupled_inputs):
        if isinstance(inp, Tensor) and inp.requires_grad:
            if inp.dtype != _C.float64:
                warnings.warn(f"Input #{idx} requires gradient and is not a double precision "
                              "floating point or complex. This check will likely fail if all "
                              "the inputs are not of double precision floating point or "
                              "complex. ", stacklevel=3)
            if not all(st > 0 or sz <= 1 for st, sz in zip(inp.stride(), inp.shape)):
                raise RuntimeError(
                    f"The {idx}th input has a dimension with stride 0. gradcheck only supports "
                    "inputs that are non-overlapping to be able to compute the numerical "
                    "gradients correctly. You should call .contiguous on the input before "
                    "passing it to gradcheck.")
            any_input_requiring_grad = True
    if not any_input_requiring_grad:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of them have requires_grad=True.")


def _unravel(k, shape):
    idx = []
    for n in reversed(shape):
        idx.append(k % n)
        k //= n
    return tuple(reversed(idx))


def _flat_outputs(func, inputs):
    """func's tensor outputs, detached and flattened (copies: the inputs move after)."""
    return [o.detach().reshape(-1).clone() for o in _as_tuple(func(*inputs))
            if isinstance(o, Tensor)]


def _numerical_jacobian(func, inputs, eps):
    """{input index: [J for each tensor output]}, J of shape (input numel, output numel)."""
    jacobians = {}
    for i, x in enumerate(inputs):
        if not (isinstance(x, Tensor) and x.requires_grad):
            continue
        xd = x.detach()         # same storage: func sees the perturbed values
        shape = tuple(x.shape)
        rows = []
        for k in range(x.numel()):
            idx = _unravel(k, shape)
            with no_grad():
                orig = xd[idx].clone()
                xd[idx] = orig - eps
                before = _flat_outputs(func, inputs)
                xd[idx] = orig + eps
                after = _flat_outputs(func, inputs)
                xd[idx] = orig
            rows.append([(b - a) / (2 * eps) for a, b in zip(before, after)])
        n_out = len(rows[0]) if rows else len(_flat_outputs(func, inputs))
        jacobians[i] = [_C.stack([r[o] for r in rows]) if rows else None
                        for o in range(n_out)]
    return jacobians


def _analytical_jacobian(outputs, diff_inputs, check_grad_dtypes):
    """[[J for each diff input] for each output], J of shape (input numel, output numel)."""
    from . import grad as autograd_grad
    jacobians = []
    for o in outputs:
        columns = [[] for _ in diff_inputs]
        for k in range(o.numel()):
            g = _C.zeros(o.numel(), dtype=o.dtype)
            g[k] = 1
            grads = autograd_grad(o, diff_inputs, g.reshape(tuple(o.shape)),
                                  retain_graph=True, allow_unused=True)
            for j, (x, gx) in enumerate(zip(diff_inputs, grads)):
                if gx is None:
                    gx = _C.zeros(x.numel(), dtype=x.dtype)
                else:
                    if check_grad_dtypes and gx.dtype != x.dtype:
                        raise GradcheckError("Gradient has dtype mismatch")
                    if tuple(gx.shape) != tuple(x.shape):
                        raise GradcheckError("Analytical gradient has incorrect size")
                columns[j].append(gx.detach().reshape(-1).clone())
        jacobians.append([_C.stack(c, 1) if c else _C.zeros(x.numel(), 0, dtype=o.dtype)
                          for c, x in zip(columns, diff_inputs)])
    return jacobians


def _tangents(func, inputs, tangents):
    """The tangents of func's tensor outputs (zeros where none) when input i carries
    tangents[i] (inputs without one enter as they are), through forward-mode AD."""
    from . import forward_ad as fwAD
    with fwAD.dual_level():
        args = [fwAD.make_dual(a.detach(), tangents[i]) if i in tangents else a
                for i, a in enumerate(inputs)]
        outs = [o for o in _as_tuple(func(*args)) if isinstance(o, Tensor)]
        got = [fwAD.unpack_dual(o).tangent for o in outs]      # once each: computed lazily
        return [_C.zeros_like(o) if t is None else t.detach().clone() for o, t in zip(outs, got)]


def _forward_jacobian(func, inputs, diff_idx):
    """{input index: [J for each tensor output]} through forward-mode AD: row k of J is the
    tangent of the outputs when input i's element k carries tangent 1."""
    jacobians = {}
    for i in diff_idx:
        x = inputs[i]
        rows = []
        for k in range(x.numel()):
            basis = _C.zeros(x.numel(), dtype=x.dtype)
            basis[k] = 1
            ts = {j: basis.reshape(tuple(x.shape)) if j == i else _C.zeros_like(inputs[j])
                  for j in diff_idx}
            rows.append([t.reshape(-1) for t in _tangents(func, inputs, ts)])
        jacobians[i] = [_C.stack([r[o] for r in rows]) for o in range(len(rows[0]))] \
            if rows else []
    return jacobians


def _check_forward_ad(func, inputs, numerical, diff_idx, rtol, atol):
    forward = _forward_jacobian(func, inputs, diff_idx)
    for i in diff_idx:
        for o, (a, n) in enumerate(zip(forward[i], numerical[i])):
            if n is None:
                continue
            if not allclose(a, n.to(a.dtype), rtol, atol):
                raise GradcheckError(_notallclose_msg(a, n, o, i).replace(
                    "Jacobian mismatch", "Jacobian computed with forward mode mismatch"))


def _check_batched_grad(outputs, diff_inputs, rtol, atol):
    """One backward with two stacked grad_outputs (is_grads_batched) against two backwards."""
    from . import grad as autograd_grad
    for oi, o in enumerate(outputs):
        vs = _C.randn(2, *tuple(o.shape), dtype=o.dtype)
        batched = autograd_grad(o, diff_inputs, vs, retain_graph=True, allow_unused=True,
                                is_grads_batched=True)
        for b in range(2):
            single = autograd_grad(o, diff_inputs, vs[b], retain_graph=True, allow_unused=True)
            for j, (g1, g2) in enumerate(zip(batched, single)):
                if (g1 is None) != (g2 is None) or (
                        g1 is not None and not allclose(g1[b], g2, rtol, atol)):
                    raise GradcheckError(
                        f"For output {oi} and input {j}:\nWhile "
                        "computing batched gradients, got: batched and unbatched backward "
                        "disagree")


def _check_batched_forward_grad(func, inputs, diff_idx, rtol, atol):
    """vmap over two tangents per input against one forward-AD call per tangent."""
    from ..func import vmap

    def tangent_out(*ts):
        return tuple(_tangents(func, inputs, dict(zip(diff_idx, ts))))
    ts = [_C.randn(2, *tuple(inputs[i].shape), dtype=inputs[i].dtype) for i in diff_idx]
    batched = vmap(tangent_out)(*ts)
    for b in range(2):
        single = tangent_out(*[t[b] for t in ts])
        for o, (g1, g2) in enumerate(zip(batched, single)):
            if not allclose(g1[b], g2, rtol, atol):
                raise GradcheckError(f"For output {o}:\nWhile computing batched gradients, "
                                     "got: batched and unbatched forward AD disagree")


def _notallclose_msg(analytical, numerical, output_idx, input_idx):
    return (f"Jacobian mismatch for output {output_idx:d} with respect to input "
            f"{input_idx:d},\nnumerical:{numerical}\nanalytical:{analytical}\n")


def _gradcheck_helper(func, inputs, eps, atol, rtol, nondet_tol, check_grad_dtypes,
                      backward_ad=True, forward_ad=False, batched_grad=False,
                      batched_forward_grad=False):
    tupled_inputs = _as_tuple(inputs)
    _check_inputs(tupled_inputs)
    numerical = _numerical_jacobian(func, tupled_inputs, eps)
    if forward_ad or batched_forward_grad:
        fidx = [i for i, x in enumerate(tupled_inputs)
                if isinstance(x, Tensor) and x.requires_grad]
        if forward_ad:
            _check_forward_ad(func, tupled_inputs, numerical, fidx, rtol, atol)
        if batched_forward_grad:
            _check_batched_forward_grad(func, tupled_inputs, fidx, rtol, atol)
    if not backward_ad:
        return True
    # called after the perturbations, which bump the inputs' version counters
    func_out = func(*tupled_inputs)
    outputs = _differentiable_outputs(func_out)
    if not outputs:
        # no output requires grad: the function must not depend on the inputs
        for per_output in numerical.values():
            for n in per_output:
                if n is not None and not bool((n == 0).all()):
                    raise GradcheckError("Numerical gradient for function expected to be zero")
        return True
    all_outputs = [o for o in _as_tuple(func_out) if isinstance(o, Tensor)]
    diff_idx = [i for i, x in enumerate(tupled_inputs)
                if isinstance(x, Tensor) and x.requires_grad]
    diff_inputs = [tupled_inputs[i] for i in diff_idx]
    analytical = _analytical_jacobian(outputs, diff_inputs, check_grad_dtypes)
    again = _analytical_jacobian(outputs, diff_inputs, check_grad_dtypes)
    # numerical Jacobians are indexed by all tensor outputs; keep the differentiable ones
    keep = [k for k, o in enumerate(all_outputs) if o.requires_grad]
    for out_pos, (a_row, a2_row) in enumerate(zip(analytical, again)):
        for j, i in enumerate(diff_idx):
            a = a_row[j]
            n = numerical[i][keep[out_pos]]
            if n is None:       # an input without elements
                continue
            n = n.to(a.dtype)
            if not allclose(a, n, rtol, atol):
                raise GradcheckError(_notallclose_msg(a, n, out_pos, i))
            if not bool(((a - a2_row[j]).abs() <= nondet_tol).all()):
                raise GradcheckError(
                    "Backward is not reentrant, i.e., running backward with same input and "
                    "grad_output multiple times gives different values, although analytical "
                    "gradient matches numerical gradient.The tolerance for nondeterminism was "
                    f"{nondet_tol}.")
    if batched_grad:
        _check_batched_grad(outputs, diff_inputs, rtol, atol)
    return True


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """True when the analytical gradients of func at inputs (the tensors that require grad)
    match finite differences; GradcheckError (or False) otherwise."""
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad "
                             "to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError("Setting check_batched_grad=True requires check_backward_ad to "
                             "be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError("Setting check_batched_forward_grad=True requires "
                             "check_forward_ad to be True")
    try:
        return _gradcheck_helper(func, inputs, eps, atol, rtol, nondet_tol,
                                 check_grad_dtypes, check_backward_ad, check_forward_ad,
                                 check_batched_grad, check_batched_forward_grad)
    except GradcheckError:
        if raise_exception:
            raise
        return False


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False, check_rev_over_rev=True,
                  fast_mode=False, masked=False):
    """True when the second derivatives of func (its first-order gradients taken with
    create_graph=True, differentiated again in the inputs and the grad_outputs) match finite
    differences of those gradients; random grad_outputs (float64 normal, a fixed seed of
    their own) when not given."""
    from .._extras import grad
    tupled_inputs = _as_tuple(inputs)
    if grad_outputs is None:
        outputs = _differentiable_outputs(func(*tupled_inputs))
        gen = _C.Generator().manual_seed(0)
        grad_outputs = tuple(_C.randn(tuple(o.shape), dtype=o.dtype, generator=gen)
                             .requires_grad_(True) for o in outputs)
    tupled_grads = _as_tuple(grad_outputs)
    n_out = len(tupled_grads)

    def new_func(*args):
        # grad mode on even where gradcheck evaluates under no_grad: the first derivatives
        # need their graph
        with enable_grad():
            ins, gos = args[:-n_out], args[-n_out:]
            outputs = _differentiable_outputs(func(*ins))
            diff = tuple(x for x in ins if isinstance(x, Tensor) and x.requires_grad)
            got = grad(outputs, diff, gos, create_graph=True, allow_unused=True)
        return tuple(g for g in got if g is not None)

    return gradcheck(new_func, tupled_inputs + tupled_grads, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_undefined_grad=check_undefined_grad,
                     check_grad_dtypes=check_grad_dtypes, fast_mode=fast_mode,
                     check_batched_grad=check_batched_grad,
                     check_forward_ad=check_fwd_over_rev,
                     check_backward_ad=check_rev_over_rev)
