"""cddp.autograd.forward_ad — torch.autograd.forward_ad: dual tensors (a primal carrying a
tangent) and the Jacobian-vector products of what is computed from them.

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        jvp = forward_ad.unpack_dual(y).tangent        # J_f(primal) @ tangent

How: cddp has no per-op forward derivatives, so a tangent is not pushed through each op.
make_dual returns the primal as a tensor that requires grad (a fresh leaf, or a view of the
primal when it requires grad already, so backward still reaches it); the ops record the
reverse graph as usual; unpack_dual(y) computes J @ t from that graph with two reverse passes
(the double-vjp identity: u -> J^T u is linear, so differentiating <J^T u, t> with respect to
u gives J t), summed over every dual of the level. Values are torch's; what differs:
- the ops between make_dual and unpack_dual must run with grad mode on (under no_grad no graph
  is recorded and the tangent is lost: unpack_dual gives None);
- a dual and what is computed from it report requires_grad=True (torch: the primal's flag);
  unpack_dual's primal is detached unless a dual's primal required grad;
- each unpack_dual of a computed tensor costs two backward passes (create_graph), and every
  node on the way needs a double-backward formula (cddp/autograd/_higher: a node without one
  raises NotImplementedError naming it);
- a custom Function's jvp staticmethod is used when a dual goes in: its outputs become duals
  of their own with the tangents jvp returns, cut from the reverse graph (so no backward
  through that Function inside the level).
One level at a time, as torch (nesting raises torch's error).
"""
from collections import namedtuple

from .. import _C
from .grad_mode import enable_grad

__all__ = ["UnpackedDualTensor", "enter_dual_level", "exit_dual_level", "make_dual",
           "unpack_dual", "dual_level"]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _Level:
    __slots__ = ("index", "duals")

    def __init__(self, index):
        self.index = index
        self.duals = {}               # id(dual) -> (dual, tangent, primal required grad)


_levels = []


def enter_dual_level():
    """Open the forward-AD level (torch supports one at a time); returns its index."""
    if _levels:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _levels.append(_Level(0))
    return 0


def exit_dual_level(*, level=None):
    """Close the level: its duals lose their tangents."""
    if not _levels or (level is not None and level != _levels[-1].index):
        raise RuntimeError("Trying to exit a forward AD level that was not the last one "
                           "that was created. This is not supported.")
    _levels.pop()


class dual_level:
    """Context manager (and decorator) for a forward-AD level."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with dual_level():
                return fn(*args, **kwargs)
        return wrapper


def _current(level, what):
    if not _levels or (level is not None and level != _levels[-1].index):
        if what == "make":
            raise RuntimeError("Trying to create a dual Tensor for forward AD but no level "
                               "exists, make sure to enter_dual_level() first.")
        return None
    return _levels[-1]


def make_dual(tensor, tangent, *, level=None):
    """tensor as a dual carrying `tangent` (same size) in the current level."""
    lvl = _current(level, "make")
    if not isinstance(tensor, _C.Tensor) or not isinstance(tangent, _C.Tensor):
        raise TypeError("make_dual expects Tensors for the primal and the tangent")
    if not tensor.is_floating_point():
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"torch.{str(tensor.dtype).split('.')[-1]}")
    if not tangent.is_floating_point():
        raise ValueError(f"Expected tangent to be floating point or complex, but got: "
                         f"torch.{str(tangent.dtype).split('.')[-1]}")
    if tuple(tensor.shape) != tuple(tangent.shape):
        raise RuntimeError("Trying to set a forward gradient that has a different size than "
                           "that of the original Tensor, this is not supported. Tensor is of "
                           f"size {list(tensor.shape)} while the given forward gradient is of "
                           f"size {list(tangent.shape)}.")
    needs = tensor.requires_grad
    with enable_grad():
        dual = tensor.view_as(tensor) if needs else tensor.detach().requires_grad_()
    lvl.duals[id(dual)] = (dual, tangent, needs)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent) of tensor in the level: the tangent given to make_dual, the
    Jacobian-vector product for a tensor computed from duals, None for anything else (and
    for everything once the level is closed)."""
    lvl = _current(level, "unpack")
    if lvl is None or not isinstance(tensor, _C.Tensor):
        return UnpackedDualTensor(tensor, None)
    entry = lvl.duals.get(id(tensor))
    if entry is not None and entry[0] is tensor:
        dual, tangent, needs = entry
        return UnpackedDualTensor(dual if needs else dual.detach(), tangent)
    keep_graph = any(needs for _, _, needs in lvl.duals.values())
    primal = tensor if keep_graph else tensor.detach()
    if tensor.grad_fn is None or not tensor.is_floating_point():
        return UnpackedDualTensor(primal, None)
    return UnpackedDualTensor(primal, _jvp(tensor, lvl))


def _jvp(y, lvl):
    """sum_i J_i t_i over the level's duals x_i, from y's reverse graph (None when y depends
    on none of them)."""
    from .._extras import grad
    duals = [(d, t) for d, t, _ in lvl.duals.values()]
    with enable_grad():
        u = _C.zeros_like(y).requires_grad_()
        vjps = grad(y, [d for d, _ in duals], u, retain_graph=True, create_graph=True,
                    allow_unused=True)
        terms = [(g * t.to(g.dtype)).sum() for g, (_, t) in zip(vjps, duals) if g is not None]
        if not terms:
            return None
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        if not total.requires_grad:          # J^T u did not depend on u: J is zero there
            return _C.zeros_like(y)
        # retain: the double-backward nodes read the forward graph's saved tensors, which a
        # second output's tangent (or the caller's own backward) still needs
        (jv,) = grad(total, [u], allow_unused=True, retain_graph=True)
    return _C.zeros_like(y) if jv is None else jv.detach()


def _function_duals(cls, args):
    """The level and the tangents of args when a custom Function with a jvp gets a dual
    (else None): Function.apply then routes through _apply_with_jvp."""
    if not _levels or cls.jvp is _default_jvp():
        return None
    lvl = _levels[-1]
    tangents = []
    found = False
    for a in args:
        entry = lvl.duals.get(id(a)) if isinstance(a, _C.Tensor) else None
        if entry is not None and entry[0] is a:
            tangents.append(entry[1])
            found = True
        elif isinstance(a, _C.Tensor) and a.grad_fn is not None and a.is_floating_point():
            t = _jvp(a, lvl)
            found = found or t is not None
            tangents.append(t)
        else:
            tangents.append(None)
    return (lvl, tangents) if found else None


def _default_jvp():
    from .function import _SingleLevelFunction
    return _SingleLevelFunction.jvp


def _apply_with_jvp(cls, args, lvl, tangents):
    """Run the Function's forward on detached inputs and its jvp on their tangents (zeros for
    tensors without one, None for non-tensors, as torch passes them); each output becomes a
    dual of the level carrying its tangent."""
    from .function import FunctionCtx, _is_setup_context_defined
    from .grad_mode import no_grad
    ctx = FunctionCtx()
    plain = [a.detach() if isinstance(a, _C.Tensor) else a for a in args]
    with no_grad():
        if _is_setup_context_defined(cls.setup_context):   # forward(*args): no ctx
            out = cls.forward(*plain)
            cls.setup_context(ctx, tuple(plain), out)
        else:
            out = cls.forward(ctx, *plain)
        # in jvp, ctx.saved_tensors are what forward saved for it (torch's save_for_forward)
        ctx.saved_tensors = tuple(getattr(ctx, "saved_for_forward", None) or
                                  getattr(ctx, "to_save", None) or ())
        tin = [(_C.zeros_like(a) if t is None else t) if isinstance(a, _C.Tensor) else None
               for a, t in zip(plain, tangents)]
        tout = cls.jvp(ctx, *tin)
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    touts = (tout,) if not isinstance(tout, tuple) else tout
    if len(touts) != len(outs):
        raise RuntimeError(f"function {cls.__name__}.jvp returned an incorrect number of "
                           f"forward gradients (expected {len(outs)}, got {len(touts)})")
    duals = []
    for o, t in zip(outs, touts):
        if isinstance(o, _C.Tensor) and o.is_floating_point() and t is not None:
            d = o.detach().requires_grad_()
            lvl.duals[id(d)] = (d, t, False)
            duals.append(d)
        else:
            duals.append(o)
    return duals[0] if single else tuple(duals)
