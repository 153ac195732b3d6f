"""cddp.func's differentiating transforms — grad, grad_and_value, vjp, jvp, jacrev, jacfwd,
hessian — with torch.func's signatures, result structures and error messages, built on
reverse-mode autograd (cddp.autograd.grad) instead of functorch's levels.

Each call runs func on stand-ins for the differentiated inputs: a fresh leaf for an input
that does not require grad, and a differentiable alias (x.view_as(x)) for one that does, so a
graph the caller is building through x is kept. No .grad attribute is written.

Nesting: when the result can be seen by an outer differentiation — grad mode is on at the
call, and func's output reaches a tensor requiring grad other than the stand-ins (an input
that requires grad, an outer transform's stand-in, a closed-over parameter) — the gradients
are built with create_graph=True and keep that dependence, so grad(grad(f)), MAML-style
meta-gradients and loss.backward() through a grad all see through. Otherwise the results are
plain tensors with no graph, as torch's are.

jvp is the double-vjp trick (the vjp u -> J^T u is linear in u; its derivative in u along a
tangent is J v). jacrev takes one vjp per output element; jacfwd takes one such
Jacobian-vector product per input element when the inputs are fewer than the outputs (forward
mode's cost), else jacrev's rows. There is no forward-mode AD underneath, and jacfwd's
randomness flag only decides whether func may draw random numbers (its single forward pass is
all the draws there are).
"""
import functools

from .. import _C
from .. import autograd as _autograd
from ..autograd._higher.formula import Unsupported as _Unsupported
from ..autograd.function import _raise_on_backward
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ._pytree import tree_flatten, tree_unflatten

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "functionalize"]

Tensor = _C.Tensor

RANDOMNESS_ERROR = ("vmap: called random operation while in randomness error mode. Please "
                    "either use the 'same' or 'different' randomness flags on vmap or perform "
                    "the randomness operation out of vmap")


def check_randomness_arg(randomness):
    """vmap's and jacfwd's randomness flag: torch's three modes only."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError("Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")


def rng_snapshot():
    """The CPU generator's state as bytes (through the tensor's buffer): comparing two costs a
    memcmp, where Tensor.equal on the state tensors runs several kernels (vmap and jacfwd
    check it around every call)."""
    return bytes(_C.get_rng_state())


def _autograd_grad(outputs, inputs, grad_outputs, **kw):
    return _autograd.grad(outputs, inputs, grad_outputs=grad_outputs, allow_unused=True, **kw)


def _stand_in(x, outer):
    """What func sees for a differentiated input x: an alias keeping the caller's graph when
    x requires grad and that graph is live (outer), else a fresh leaf sharing x's data."""
    if not isinstance(x, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    if outer and x.requires_grad:
        return x.view_as(x)
    return x.detach().requires_grad_(True)


def _reaches_outside(tensors, own):
    """Whether any of tensors has a history reaching a leaf that requires grad and is not one
    of own (the transform's fresh leaves): an outer differentiation could see through it."""
    own_ids = {id(t) for t in own}
    stack, seen = [], {}
    for t in tensors:
        if isinstance(t, Tensor) and t.requires_grad:
            if t.grad_fn is None:
                if id(t) not in own_ids:
                    return True
            else:
                stack.append(t.grad_fn)
    while stack:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen[key] = node                            # held: ids stay unique during the walk
        nexts = node.next_functions
        if not nexts:                               # a leaf's node has no inputs to follow
            if node.name() == "AccumulateGrad" and id(node.variable) not in own_ids:
                return True
            continue
        for m, _ in nexts:                          # a loop: extend(genexpr) costs more
            if m is not None:
                stack.append(m)
    return False


def _outer_sees(outer, originals, outputs, own):
    """Whether results must be built with create_graph (see the module docstring)."""
    return outer and (any(isinstance(x, Tensor) and x.requires_grad for x in originals) or
                      _reaches_outside(outputs, own))


def _unwrap(tree, own, outer):
    """tree (of tensors only, as torch insists for outputs and aux) with each tensor that only
    this transform could differentiate detached: results keep the caller's graph, never the
    transform's own stand-ins. outer False (nothing outside can see them, e.g. the caller's
    _outer_sees already said so for these outputs) detaches without walking any graph."""
    leaves, spec = tree_flatten(tree)
    for x in leaves:
        if not isinstance(x, Tensor):
            raise RuntimeError(f"Expected tensors, got unsupported type {type(x)}")
    return tree_unflatten([x.detach() if x.requires_grad and
                           not (outer and _reaches_outside([x], own)) else x
                           for x in leaves], spec)


def _vjp(outputs, inputs, cotangents, create_graph, retain_graph=True):
    """sum_i cotangent_i^T d output_i / d input for each input; zeros where nothing flows.
    create_graph through an op without a double-backward formula (an LSTM, CTC loss): the
    gradients are taken without it and carry _RaiseOnBackward, so first derivatives work
    and only an actual second differentiation fails, naming the op."""
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
    got = [None] * len(inputs)
    if pairs:
        outs, cts = [o for o, _ in pairs], [c for _, c in pairs]
        prev = _C._set_grad_enabled(True)      # enable_grad's switch, without its object
        try:
            try:
                got = _autograd_grad(outs, inputs, cts, retain_graph=retain_graph or create_graph,
                                     create_graph=create_graph)
            except _Unsupported as e:
                if not create_graph:
                    raise
                got = _raise_on_backward(
                    str(e), list(_autograd_grad(outs, inputs, cts, retain_graph=retain_graph)),
                    outs)
        finally:
            _C._set_grad_enabled(prev)
    return [_C.zeros_like(x) if g is None else g for x, g in zip(inputs, got)]


def _wrap_argnums(argnums, num_args):
    """argnums checked against the positional arguments, negatives wrapped."""
    if type(argnums) is int and -num_args <= argnums < num_args:
        return argnums % num_args                   # the usual case, without the closure

    def one(a):
        if not isinstance(a, int):
            raise RuntimeError(f"argnum must be int, got: {type(a)}")
        if -num_args <= a < num_args:
            return a % num_args
        raise RuntimeError(f"Got argnum={a}, but only {num_args} positional inputs")
    if isinstance(argnums, int):
        return one(argnums)
    if not isinstance(argnums, tuple):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    nums = tuple(one(a) for a in argnums)
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    if len(set(nums)) != len(nums):
        raise RuntimeError(f"argnums elements must be unique, got {nums}")
    return nums


def _run(func, args, kwargs, argnums, outer):
    """func called (grad mode on) with stand-ins for the arguments at argnums (every
    argument when argnums is None): (output, stand-ins, originals, spec of the differentiated
    arguments: one pytree for an int argnums, a tuple of them otherwise)."""
    if argnums is None:
        diff = args
    else:
        nums = _wrap_argnums(argnums, len(args))
        diff = args[nums] if isinstance(nums, int) else tuple(args[i] for i in nums)
    originals, spec = tree_flatten(diff)
    prev = _C._set_grad_enabled(True)          # enable_grad's switch, without its object
    try:
        own = [_stand_in(x, outer) for x in originals]
        new = tree_unflatten(own, spec)
        if argnums is None:
            args = new
        elif isinstance(nums, int):
            args = args[:nums] + (new,) + args[nums + 1:]
        else:
            args = tuple(new[nums.index(i)] if i in nums else a for i, a in enumerate(args))
        out = func(*args, **kwargs)
    finally:
        _C._set_grad_enabled(prev)
    return out, own, originals, spec


def _split_aux(out, has_aux, api):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) if "
                           "has_aux is True")
    return out


def grad_and_value(func, argnums=0, has_aux=False):
    """func's gradient with respect to the arguments at argnums (pytrees of tensors, the
    gradient in the same structure) and its value: (grad, value), or (grad, (value, aux))."""
    api = "grad_and_value(f)(*args)"

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        outer = is_grad_enabled()
        out, own, originals, spec = _run(func, args, kwargs, argnums, outer)
        out, aux = _split_aux(out, has_aux, api)
        if not isinstance(out, Tensor):
            raise RuntimeError(f"{api}: Expected f(*args) to return a Tensor, got {type(out)}")
        if out.dim() != 0:
            raise RuntimeError(f"{api}: Expected f(*args) to return a scalar Tensor, got "
                               f"tensor with {out.dim()} dims. Maybe you wanted to use the vjp "
                               "or jacrev APIs instead?")
        keep = _outer_sees(outer, originals, [out], own)
        g = tree_unflatten(_vjp([out], own, [_C.ones_like(out)], keep), spec)
        value = out if keep else out.detach()
        if has_aux:
            return g, (value, _unwrap(aux, own, outer))
        return g, value
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """The gradient of func (returning a 0-dim tensor) with respect to the arguments at
    argnums: grad, or (grad, aux) with has_aux."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def _check_outputs(flat_out, api):
    if not flat_out:
        raise RuntimeError(f"{api}: Expected f to be a function that has non-empty output (got "
                           f"output = {flat_out})")
    for o in flat_out:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"{api}: expected f(*primals) to return only tensors, got "
                               f"unsupported type {type(o)}")


def _check_float(flat_out):
    """Reverse mode needs cotangents of the outputs' dtypes: no integer outputs."""
    for o in flat_out:
        if not (o.is_floating_point() or o.dtype.is_complex):
            raise RuntimeError(f"vjp(f, ...): All outputs of f must be floating-point or complex "
                               f"Tensors, got Tensor with dtype {o.dtype}")


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn[, aux]): vjp_fn(cotangents), cotangents shaped as the output,
    returns one vector-Jacobian product per primal, in the primals' structures."""
    api = "vjp(f, *primals)"
    outer = is_grad_enabled()
    out, own, originals, spec = _run(func, primals, {}, None, outer)
    out, aux = _split_aux(out, has_aux, api)
    flat_out, out_spec = tree_flatten(out)
    _check_outputs(flat_out, api)
    _check_float(flat_out)
    keep = _outer_sees(outer, originals, flat_out, own)

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        """create_graph (default: grad mode is on) lets the result keep a dependence on
        cotangents that require grad and on the caller's graph; there is nothing else for it
        to depend on."""
        flat_ct, ct_spec = tree_flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               "pytree structure of outputs to the function. cotangents: "
                               f"{ct_spec.pprint()}, primal output: {out_spec.pprint()}")
        allowed = is_grad_enabled() if create_graph is None else create_graph
        build = allowed and (keep or any(isinstance(c, Tensor) and c.requires_grad
                                         for c in flat_ct))
        return tree_unflatten(_vjp(flat_out, own, flat_ct, build, retain_graph), spec)

    result = _unwrap(out, own, keep)            # keep: _outer_sees over these outputs
    if has_aux:
        return result, vjp_fn, _unwrap(aux, own, outer)
    return result, vjp_fn


def _tensor_list(xs, what):
    api = "jvp(f, primals, tangents)"
    if not xs:
        raise RuntimeError(f"{api}: Expected {what} to contain at least one Tensor.")
    for x in xs:
        if not isinstance(x, Tensor):
            raise RuntimeError(f"{api}: Expected {what} to only contain Tensors, got {type(x)}")


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), J tangents[, aux]): the Jacobian-vector product, through two reverse
    passes (the double-vjp trick; see the module docstring)."""
    api = "jvp(f, primals, tangents)"
    if not isinstance(primals, tuple):
        raise RuntimeError(f"{api}: Expected primals to be a tuple. E.g. it should be valid to "
                           "call f(*primals).")
    flat_p, p_spec = tree_flatten(primals)
    flat_t, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(f"{api}: Expected primals and tangents to have the same python "
                           "structure. For example, if primals is a tuple of 3 tensors, "
                           f"tangents also must be. Got primals with structure {p_spec} and "
                           f"tangents with structure {t_spec}")
    _tensor_list(flat_p, "primals")
    _tensor_list(flat_t, "tangents")
    for p, t in zip(flat_p, flat_t):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError("Trying to set a forward gradient that has a different size than "
                               "that of the original Tensor, this is not supported. Tensor is "
                               f"of size {list(p.shape)} while the given forward gradient is of "
                               f"size {list(t.shape)}.")
    outer = is_grad_enabled()
    out, own, originals, _ = _run(func, primals, {}, None, outer)
    out, aux = _split_aux(out, has_aux, api)
    flat_out, out_spec = tree_flatten(out)
    for o in flat_out:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"{api}: expected f(*primals) to return only tensors, got "
                               f"unsupported type {type(o)}")
    keep = _outer_sees(outer, originals + flat_t, flat_out, own)
    live = [i for i, o in enumerate(flat_out) if o.requires_grad]
    found = {}
    if live:
        with enable_grad():
            us = [_C.zeros_like(flat_out[i]).requires_grad_(True) for i in live]
            gs = _autograd_grad([flat_out[i] for i in live], own, us, create_graph=True)
            pairs = [(g, t) for g, t in zip(gs, flat_t) if g is not None and g.requires_grad]
            if pairs:
                jv = _autograd_grad([g for g, _ in pairs], us, [t for _, t in pairs],
                                    create_graph=keep)
                found = {i: r for i, r in zip(live, jv) if r is not None}
    tangents_out = []
    for i, o in enumerate(flat_out):
        if i not in found and strict:
            raise RuntimeError("jvp(f, primals, tangents, strict=True): The output of f is "
                               "independent of the inputs. This is not allowed with "
                               "strict=True.")
        tangents_out.append(found.get(i, _C.zeros_like(o)))
    result = (_unwrap(out, own, keep), tree_unflatten(tangents_out, out_spec))
    return result + (_unwrap(aux, own, outer),) if has_aux else result


def _jacobian(func, argnums, has_aux, forward, randomness=None):
    """The function computing func's Jacobian, as jacrev / jacfwd (forward) return it: per
    output leaf (output structure outside), per differentiated argument (argnums structure
    inside), a tensor of shape output.shape + input.shape, of the input's dtype (a gradient)
    or for jacfwd the output's (a tangent); one vjp per output element (rows) or one
    Jacobian-vector product per input element (columns: jacfwd with fewer inputs than
    outputs)."""
    api = "jvp(f, primals, tangents)" if forward else "vjp(f, *primals)"
    jac_api = "jacfwd" if forward else "jacrev"

    @functools.wraps(func)
    def wrapper(*args):
        if randomness is not None:
            check_randomness_arg(randomness)
        outer = is_grad_enabled()
        state = rng_snapshot() if randomness == "error" else None
        out, own, originals, spec = _run(func, args, {}, argnums, outer)
        if state is not None and state != rng_snapshot():
            raise RuntimeError(RANDOMNESS_ERROR)
        out, aux = _split_aux(out, has_aux, api)
        flat_out, out_spec = tree_flatten(out)
        _check_outputs(flat_out, api)
        if not forward:
            _check_float(flat_out)
        for what, xs in (("inputs", originals), ("outputs", flat_out)):
            for i, x in enumerate(xs):
                if x.dtype.is_complex:
                    raise RuntimeError(f"{jac_api}: Expected all {what} to be real but received "
                                       f"complex tensor at flattened input idx: {i}")
        keep = _outer_sees(outer, originals, flat_out, own)
        n_in = sum(x.numel() for x in own)
        if forward and n_in < sum(o.numel() for o in flat_out):
            blocks = _jacobian_by_columns(flat_out, own, keep)
        else:
            blocks = _jacobian_by_rows(flat_out, own, keep)
        jac = []
        for o, row in zip(flat_out, blocks):
            dtype = [o.dtype if forward else x.dtype for x in own]
            jac.append(tree_unflatten([b.to(d) for b, d in zip(row, dtype)], spec))
        jac = tree_unflatten(jac, out_spec)
        return (jac, _unwrap(aux, own, outer)) if has_aux else jac
    return wrapper


def _basis(t, k):
    e = _C.zeros(t.numel(), dtype=t.dtype, device=t.device)
    e[k] = 1
    return e.reshape(t.shape)


def _jacobian_by_rows(flat_out, own, keep):
    """Blocks [output][input] of shape output.shape + input.shape, one vjp per output
    element (reverse mode: cost grows with the outputs)."""
    blocks = []
    for o in flat_out:
        rows = [_vjp([o], own, [_basis(o, k)], keep) for k in range(o.numel())]
        blocks.append([_C.stack([r[j] for r in rows]).reshape(tuple(o.shape) + tuple(x.shape))
                       if rows else _C.zeros(tuple(o.shape) + tuple(x.shape), dtype=x.dtype,
                                             device=x.device)
                       for j, x in enumerate(own)])
    return blocks


def _jacobian_by_columns(flat_out, own, keep):
    """The same blocks, one Jacobian-vector product per input element (forward mode's cost,
    for jacfwd of a function with fewer inputs than outputs): with g = J^T u from one
    create_graph backward against dummy cotangents u, J e_k = d(g . e_k)/du."""
    live = [i for i, o in enumerate(flat_out) if o.requires_grad]
    cols = [[None] * len(flat_out) for _ in own]      # [input][output] -> list over k
    with enable_grad():
        us = [_C.zeros_like(flat_out[i]).requires_grad_(True) for i in live]
        gs = (_autograd_grad([flat_out[i] for i in live], own, us, create_graph=True)
              if live else [None] * len(own))
        for j, (x, g) in enumerate(zip(own, gs)):
            if g is None or not g.requires_grad:
                continue
            per_k = [_autograd_grad([g], us, [_basis(x, k)], retain_graph=True,
                                    create_graph=keep) for k in range(x.numel())]
            for slot, i in enumerate(live):
                cols[j][i] = [_C.zeros_like(flat_out[i]) if r[slot] is None else r[slot]
                              for r in per_k]
    blocks = []
    for i, o in enumerate(flat_out):
        row = []
        for j, x in enumerate(own):
            shape = tuple(o.shape) + tuple(x.shape)
            if cols[j][i] is None or x.numel() == 0:
                row.append(_C.zeros(shape, dtype=o.dtype, device=o.device))
            else:                                    # (x.numel(), o.numel()) -> o x x
                row.append(_C.stack(cols[j][i]).reshape(x.numel(), o.numel()).t()
                           .reshape(shape))
        blocks.append(row)
    return blocks


def linearize(func, *primals):
    """(func(*primals), jvp_fn): jvp_fn(*tangents) is J tangents at primals (torch.func's
    linearize; here each call re-runs jvp rather than replaying a traced graph)."""
    out = func(*primals)
    flat_p, p_spec = tree_flatten(primals)

    def jvp_fn(*tangents):
        flat_t, t_spec = tree_flatten(tangents)
        if t_spec != p_spec:
            raise RuntimeError(f"linearize: expected tangents with the structure of primals "
                               f"{p_spec}, got {t_spec}")
        for p, t in zip(flat_p, flat_t):
            if isinstance(p, _C.Tensor) and (not isinstance(t, _C.Tensor) or
                                             tuple(t.shape) != tuple(p.shape)):
                raise RuntimeError(f"linearize: a tangent of shape "
                                   f"{tuple(getattr(t, 'shape', ()))} for a primal of shape "
                                   f"{tuple(p.shape)}")
        return jvp(func, primals, tangents)[1]
    return out, jvp_fn


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """The function computing func's Jacobian with respect to the arguments at argnums by
    reverse mode (see _jacobian for the result's structure); chunk_size, which in torch bounds
    how many vjps are batched at once, is checked and otherwise moot (one vjp at a time)."""
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")
    return _jacobian(func, argnums, has_aux, False)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """torch's forward-mode Jacobian, same results and structure as jacrev: by columns (one
    double-vjp Jacobian-vector product per input element) when the inputs are fewer than the
    outputs, else by jacrev's rows (there is no forward-mode AD in cddp). randomness='error' refuses a func that
    draws random numbers, as torch's vmap over the tangents would (an unknown flag is refused
    at the call, as in torch)."""
    return _jacobian(func, argnums, has_aux, True, randomness)


def hessian(func, argnums=0):
    """The Hessian of func with respect to the arguments at argnums: jacfwd(jacrev(func)),
    shape output.shape + input.shape + input.shape per block."""
    return jacfwd(jacrev(func, argnums), argnums)


def functionalize(func, *, remove="mutations"):
    """func itself: cddp has no functionalization pass (torch's rewrites in-place and view ops
    into out-of-place ones for tracing; run eagerly, the results are the same)."""
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(
            f"functionalize(f, remove='mutations'): received invalid argument for remove={remove}."
            " Valid options are:\n     remove='mutations': all inplace and out= operators will be "
            "removed from the program, and replaced with their out-of-place equivalents.\n     "
            "remove='mutations_and_views': In addition to the above, all aliasing operators "
            "{view} will be replaced with their non-aliasing counterparts, {view}_copy.\n")
    return func
