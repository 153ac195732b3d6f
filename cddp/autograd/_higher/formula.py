"""The registry of double-backward formulas and the context they read a node through.

A formula differentiates one node's backward: it gets the node's incoming gradients and
returns the gradients of the node's inputs, computed with cddp ops while grad mode is on, so
the result has a history of its own (torch's derivatives.yaml, in Python):

    @formula("MulBackward0")
    def _mul(ctx, g):                     # g: [grad of output 0, ...] (None: no gradient)
        a, b = ctx.input(0, 0), ctx.input(1, 1)
        return g[0] * b, g[0] * a         # one entry per edge of the node (None: no gradient)

The node's slots (saved tensors, scalars, integers) mean what the op's C file put there;
each formula names that file. ctx.input checks that a saved tensor really is the forward's
input (not a copy): a formula that read a copy would differentiate a constant and return a
silently wrong second derivative, so that case raises instead.
"""
from ... import _C
from ..function import Function
from ..grad_mode import enable_grad

FORMULAS = {}


def formula(*names):
    """Register fn(ctx, g) -> tuple of input gradients as the formula of these node names."""
    def deco(fn):
        for n in names:
            FORMULAS[n] = fn
        return fn
    return deco


class Unsupported(NotImplementedError):
    pass


def _sink(t):
    """(node, input_nr) an edge to t points at: its grad_fn and output number, or a leaf's
    AccumulateGrad (read off the edge of a fresh alias, wired as any op's edge to a leaf);
    (None, 0) when t needs no gradient."""
    if t.grad_fn is not None:
        return t.grad_fn, t.output_nr
    if not t.requires_grad:
        return None, 0
    with enable_grad():
        return t.view_as(t).grad_fn.next_functions[0]


class Ctx:
    """A node as its formula sees it."""

    def __init__(self, node):
        self.node = node
        self.name = node.name()
        self.next = node.next_functions
        self._meta = None
        self._scalars = None

    def _read_scalars(self):
        if self._scalars is None:           # most formulas read none: built on first use
            self._scalars = self.node._scalars()
        return self._scalars

    d = property(lambda self: self._read_scalars()[0], doc="the node's 4 float slots")
    i = property(lambda self: self._read_scalars()[1], doc="the node's integer slots")
    extra = property(lambda self: self._read_scalars()[2], doc="the node's object slot")

    def needs(self, edge):
        """Whether input `edge` wants a gradient (its edge leads somewhere)."""
        return self.next[edge][0] is not None

    def meta(self, edge):
        """(shape, dtype) of input `edge` in the forward."""
        if self._meta is None:
            self._meta = self.node._input_meta()
        shape, dtype = self._meta[edge]
        return tuple(shape), getattr(_C, dtype)

    def saved(self, slot):
        """A saved slot as is (a tensor that needs no gradient, or a non-tensor)."""
        return self.node._saved(slot)

    def input(self, slot, edge):
        """Saved slot `slot`, which must be the forward's input `edge`: with its history when
        that input wants a gradient (so the formula's result is differentiable in it)."""
        t = self.node._saved(slot)
        if t is None:
            raise Unsupported(f"cddp: double backward through {self.name}: its saved input "
                              f"{slot} was not kept")
        want = self.next[edge]
        # a checkpoint's recomputed tensor (utils/checkpoint.py) carries the recomputation's
        # history instead of the forward's: the same function of the same inputs
        if want[0] is not None and not getattr(t, "_cddp_recomputed", False):
            got = _sink(t)
            if got[0] is not want[0] or got[1] != want[1]:
                raise Unsupported(f"cddp: double backward through {self.name}: saved slot "
                                  f"{slot} is a copy of its input, not the input itself")
        return t

    def output(self, slot, k=0):
        """Saved slot `slot`, the node's output k, made differentiable again (its history is
        this node, as torch's saved outputs are)."""
        t = self.node._saved(slot)
        if t is None:
            raise Unsupported(f"cddp: double backward through {self.name}: its saved output "
                              "was not kept")
        return self.node._as_output(t, k)


class _Adjoint(Function):
    """L^T g for a linear op L as a differentiable op: L is `fn`, a differentiable cddp callable
    of one tensor of in_shape. The forward runs L's first-order backward (the C engine, on a
    zero point: L is linear, so any point gives the same map); the backward is L itself, so
    every further order goes through L's own node again."""

    @staticmethod
    def forward(ctx, g, fn, in_shape, dtype):
        from ..._extras import grad
        ctx.fn = fn
        with enable_grad():
            x0 = _C.zeros(in_shape, dtype=dtype).requires_grad_(True)
            y = fn(x0)
        return grad(y, x0, g)[0]

    @staticmethod
    def backward(ctx, gg):
        return ctx.fn(gg), None, None, None


def adjoint(fn, g, in_shape, dtype):
    """The gradient of a linear op's input (shape in_shape), L^T g, differentiable in g."""
    return _Adjoint.apply(g, fn, tuple(in_shape), dtype)


def shared(name, test, fn):
    """Register fn for the nodes named `name` that pass test(ctx) (ops that borrow another
    op's node name); the others keep the formula registered before under that name."""
    prev = FORMULAS.get(name)

    def run(ctx, g):
        if test(ctx):
            return fn(ctx, g)
        if prev is None:
            raise Unsupported(f"cddp: double backward (create_graph=True) through {name} is "
                              "not supported yet")
        return prev(ctx, g)
    FORMULAS[name] = run


def sum_to(t, shape):
    """t summed over the dimensions broadcasting added or stretched to reach shape (the
    reverse of broadcasting an input of `shape`)."""
    shape = tuple(shape)
    if tuple(t.shape) == shape:
        return t
    lead = t.dim() - len(shape)
    if lead > 0:
        t = t.sum(dim=tuple(range(lead)))
    dims = tuple(d for d, n in enumerate(shape) if n == 1 and t.shape[d] != 1)
    if dims:
        t = t.sum(dim=dims, keepdim=True)
    return t.reshape(shape)


def operand(ctx, i, slot=None):
    """Elementwise input i (ops/elementwise/elementwise.c cddp_ew_record): the saved tensor
    in slot i (or `slot`), or the Python scalar the forward took (node.d[1 + i])."""
    if ctx.next[i][0] is None and ctx.node._saved(i if slot is None else slot) is None:
        return ctx.d[1 + i]
    return ctx.input(i if slot is None else slot, i)
