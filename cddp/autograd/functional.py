"""cddp.autograd.functional — torch.autograd.functional's first-order API: vjp and jacobian
(reverse mode: one backward pass per output element, sharing one forward). The second-order
functions (hessian, hvp, vhp, jvp through the double-vjp trick) need double backward, which
cddp does not have; they raise saying so."""
from .. import _C
from .grad_mode import enable_grad

__all__ = ["vjp", "jacobian", "jvp", "hessian", "hvp", "vhp"]


def _as_tuple(x, what, fn):
    if isinstance(x, tuple):
        return True, x
    if isinstance(x, list):
        return True, tuple(x)
    if not isinstance(x, _C.Tensor):
        raise TypeError(f"The {what} given to {fn} must be either a Tensor or a tuple of "
                        f"Tensors but the value got is {type(x).__name__}.")
    return False, (x,)


def _prepare(inputs):
    """Fresh leaves that require grad, so the user's tensors keep their graph and .grad."""
    return tuple(x.detach().requires_grad_(True) for x in inputs)


def _run(func, inputs, create_graph, fn):
    """Fresh leaf inputs, and func's outputs on them with grad enabled: (in_tuple, inputs,
    out_tuple, outputs)."""
    if create_graph:
        raise NotImplementedError("cddp: create_graph=True needs double backward, which cddp "
                                  "does not support")
    in_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    inputs = _prepare(inputs)
    with enable_grad():
        outputs = func(*inputs)
    out_tuple, outs = _as_tuple(outputs, "outputs of the user-provided function", fn)
    return in_tuple, inputs, out_tuple, outs


def _grads(outputs, inputs, grad_outputs, strict, what):
    from .._extras import grad
    needed = [o for o in outputs if o.requires_grad]
    if not needed:
        return tuple(_C.zeros_like(x) for x in inputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    got = grad([o for o, _ in pairs], list(inputs), grad_outputs=[g for _, g in pairs],
               retain_graph=True, allow_unused=True)
    out = []
    for i, (x, g) in enumerate(zip(inputs, got)):
        if g is None:
            if strict:
                raise RuntimeError(f"The output of the user-provided function is independent "
                                   f"of input {i}. This is not allowed in strict mode.")
            g = _C.zeros_like(x)
        out.append(g)
    return tuple(out)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): the outputs and the vector-Jacobian product for each input."""
    in_tuple, inputs, out_tuple, outs = _run(func, inputs, create_graph, "vjp")
    if v is None:
        if len(outs) != 1 or outs[0].numel() != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function "
                               "returns a single Tensor with a single element.")
        vs = (_C.ones_like(outs[0]),)
    else:
        _, vs = _as_tuple(v, "v", "vjp")
        if len(vs) != len(outs):
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(outs)} but "
                               f"got {len(vs)}.")
        for i, (o, g) in enumerate(zip(outs, vs)):
            if tuple(o.shape) != tuple(g.shape):
                raise RuntimeError(f"Entry {i} in v has invalid size: should be "
                                   f"{tuple(o.shape)} but got {tuple(g.shape)}.")
    gs = _grads(outs, inputs, vs, strict, "vjp")
    outputs = tuple(o.detach() for o in outs)
    return (outputs if out_tuple else outputs[0]), (gs if in_tuple else gs[0])


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """d func(inputs) / d inputs: for one output and one input a tensor of shape
    output.shape + input.shape; tuples of them when func returns or takes tuples
    (jacobian[i][j] is output i by input j)."""
    if strategy != "reverse-mode":
        raise NotImplementedError("cddp: only strategy='reverse-mode' is supported (there is "
                                  "no forward-mode AD)")
    in_tuple, inputs, out_tuple, outs = _run(func, inputs, create_graph, "jacobian")
    rows = []
    for i, o in enumerate(outs):
        per_input = [[] for _ in inputs]
        flat = o.reshape(-1)
        for k in range(flat.numel()):
            if o.requires_grad:
                seed = _C.zeros(flat.numel(), dtype=o.dtype)
                seed[k] = 1
                gs = _grads((o,), inputs, (seed.reshape(o.shape),), strict, "jacobian")
            else:
                if strict:
                    raise RuntimeError(f"Output {i} of the user-provided function does not "
                                       "require gradients. The outputs must be computed in a "
                                       "differentiable manner from the input when running in "
                                       "strict mode.")
                gs = tuple(_C.zeros_like(x) for x in inputs)
            for j, g in enumerate(gs):
                per_input[j].append(g)
        blocks = []
        for j, x in enumerate(inputs):
            shape = tuple(o.shape) + tuple(x.shape)
            blocks.append(_C.stack(per_input[j]).reshape(shape) if per_input[j]
                          else _C.zeros(shape, dtype=x.dtype))
        rows.append(tuple(blocks))
    if not out_tuple and not in_tuple:
        return rows[0][0]
    if not out_tuple:
        return rows[0]
    if not in_tuple:
        return tuple(r[0] for r in rows)
    return tuple(rows)


def _second_order(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"cddp: autograd.functional.{name} needs double backward "
                                  "(create_graph=True), which cddp does not support yet")
    fn.__name__ = name
    return fn


jvp = _second_order("jvp")
hessian = _second_order("hessian")
hvp = _second_order("hvp")
vhp = _second_order("vhp")
