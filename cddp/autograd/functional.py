"""cddp.autograd.functional — torch.autograd.functional: vjp and jacobian (reverse mode: one
backward pass per output element, sharing one forward), and through double backward
(create_graph, cddp/autograd/_higher) jvp (the double-vjp trick), vhp, hvp and hessian.
With create_graph=True the results stay differentiable in the caller's inputs, as torch's."""
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


def _prepare(inputs, create_graph):
    """Leaves of our own, so the user's tensors keep their graph and .grad; with
    create_graph an input that requires grad is an alias still connected to the user's graph
    (torch's _grad_preprocess)."""
    return tuple(x.view_as(x) if create_graph and x.requires_grad
                 else x.detach().requires_grad_(True) for x in inputs)


def _run(func, inputs, create_graph, fn):
    """Fresh leaf inputs, and func's outputs on them with grad enabled: (in_tuple, inputs,
    out_tuple, outputs)."""
    in_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    with enable_grad():
        inputs = _prepare(inputs, create_graph)
        outputs = func(*inputs)
    out_tuple, outs = _as_tuple(outputs, "outputs of the user-provided function", fn)
    return in_tuple, inputs, out_tuple, outs


def _grads(outputs, inputs, grad_outputs, strict, what, create_graph=False):
    from .._extras import grad
    needed = [o for o in outputs if o.requires_grad]
    if not needed:
        if strict:
            raise RuntimeError("The output of the user-provided function does not require "
                               "gradients. The outputs must be computed in a differentiable "
                               "manner from the input when running in strict mode.")
        return tuple(_C.zeros_like(x) for x in inputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    with enable_grad():
        got = grad([o for o, _ in pairs], list(inputs), grad_outputs=[g for _, g in pairs],
                   retain_graph=True, allow_unused=True, create_graph=create_graph)
    out = []
    for i, (x, g) in enumerate(zip(inputs, got)):
        if g is None:
            if strict:
                raise RuntimeError(f"The output of the user-provided function is independent "
                                   f"of input {i}. This is not allowed in strict mode.")
            g = _C.zeros_like(x)
        out.append(g)
    return tuple(out)


def _post(ts, create_graph):
    """Results detached unless create_graph (torch's _grad_postprocess)."""
    return tuple(t if create_graph else t.detach() for t in ts)


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
    gs = _post(_grads(outs, inputs, vs, strict, "vjp", create_graph), create_graph)
    outputs = _post(outs, create_graph)
    return (outputs if out_tuple else outputs[0]), (gs if in_tuple else gs[0])


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """d func(inputs) / d inputs: for one output and one input a tensor of shape
    output.shape + input.shape; tuples of them when func returns or takes tuples
    (jacobian[i][j] is output i by input j)."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode". '
                             'Hint: If your function has more outputs than inputs, '
                             '"forward-mode" tends to be more performant. Otherwise, prefer to '
                             'use "reverse-mode".')
    if strategy == "forward-mode":
        # torch's conditions; the Jacobian itself is the same matrix either way (cddp's forward
        # mode is two reverse passes, so the reverse-mode loop below is the cheaper route)
        if create_graph:
            raise NotImplementedError("torch.autograd.functional.jacobian: `create_graph=True` "
                                      'and `strategy="forward-mode"` are not supported together '
                                      "(yet). Please either set `create_graph=False` or "
                                      '`strategy="reverse-mode"`.')
        if strict:
            raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and "
                               '`strategy="forward-mode"` are not supported together (yet). '
                               'Please either set `strict=False` or `strategy="reverse-mode"`.')
        if not vectorize:
            raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-"
                                      "reverse Hessian isonly implemented for `vectorize=True`.")
    in_tuple, inputs, out_tuple, outs = _run(func, inputs, create_graph, "jacobian")
    rows = []
    for i, o in enumerate(outs):
        per_input = [[] for _ in inputs]
        flat = o.reshape(-1)
        for k in range(flat.numel()):
            if o.requires_grad:
                seed = _C.zeros(flat.numel(), dtype=o.dtype)
                seed[k] = 1
                gs = _grads((o,), inputs, (seed.reshape(o.shape),), strict, "jacobian",
                            create_graph)
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
            blocks.append(_C.stack(_post(per_input[j], create_graph)).reshape(shape)
                          if per_input[j] else _C.zeros(shape, dtype=x.dtype))
        rows.append(tuple(blocks))
    if not out_tuple and not in_tuple:
        return rows[0][0]
    if not out_tuple:
        return rows[0]
    if not in_tuple:
        return tuple(r[0] for r in rows)
    return tuple(rows)


def _check_v(v, like, what, fn):
    _, vs = _as_tuple(v, "v", fn)
    if len(vs) != len(like):
        raise RuntimeError(f"The given v should contain a single Tensor for each of the "
                           f"{what}: expected {len(like)}, got {len(vs)}.")
    for i, (a, b) in enumerate(zip(vs, like)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"Entry {i} in v has invalid size: should be "
                               f"{tuple(b.shape)} but got {tuple(a.shape)}.")
    return vs


def _input_v(v, inputs, fn):
    """v (one tensor per input, of its shape), or ones for a single one-element input."""
    if v is not None:
        return _check_v(v, inputs, "inputs", fn)
    if len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError("The vector v can only be None if the input to the user-provided "
                           "function is a single Tensor with a single element.")
    return (_C.ones_like(inputs[0]),)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v) by the double-vjp trick: the vjp u -> J^T u is linear in u, so
    differentiating it with respect to u along v gives J v."""
    in_tuple, inputs, out_tuple, outs = _run(func, inputs, create_graph, "jvp")
    vs = _input_v(v, inputs, "jvp")
    with enable_grad():
        us = tuple(_C.zeros_like(o).requires_grad_(True) for o in outs)
        gs = _grads(outs, inputs, us, strict, "jvp", create_graph=True)
        pairs = [(g, w) for g, w in zip(gs, vs) if g.requires_grad]
        from .._extras import grad
        if pairs:
            got = grad([g for g, _ in pairs], list(us), grad_outputs=[w for _, w in pairs],
                       create_graph=create_graph, allow_unused=True)
        else:
            got = [None] * len(us)
    res = _post(tuple(_C.zeros_like(o) if r is None else r for o, r in zip(outs, got)),
                create_graph)
    outputs = _post(outs, create_graph)
    return (outputs if out_tuple else outputs[0]), (res if out_tuple else res[0])


def _scalar_output(outs, fn):
    if len(outs) != 1 or outs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn} should contain "
                           "a single element")
    return outs[0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) for a function with one scalar output."""
    in_tuple, inputs, _, outs = _run(func, inputs, create_graph, "vhp")
    out = _scalar_output(outs, "vhp")
    vs = _input_v(v, inputs, "vhp")
    with enable_grad():
        jac = _grads((out,), inputs, (_C.ones_like(out),), strict, "vhp", create_graph=True)
        res = _grads(jac, inputs, vs, strict, "vhp", create_graph)
    return _post((out,), create_graph)[0], (_post(res, create_graph) if in_tuple
                                            else _post(res, create_graph)[0])


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v) for a function with one scalar output: the Hessian of a twice
    differentiable function is symmetric, so H v = (v^T H)^T, computed as vhp."""
    return vhp(func, inputs, v, create_graph, strict)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a function with one scalar output: the jacobian of its gradient
    (shape input.shape + input.shape; a tuple of tuples for tuple inputs)."""
    in_tuple, _ = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def grad_fn(*xs):
        _, _, _, outs = _run(func, xs, True, "hessian")
        out = _scalar_output(outs, "hessian")
        return _grads((out,), xs, (_C.ones_like(out),), strict, "hessian", create_graph=True)

    res = jacobian(grad_fn, inputs, create_graph=create_graph, strict=strict,
                   vectorize=vectorize, strategy=outer_jacobian_strategy)
    if not in_tuple:
        return res[0]
    return res
