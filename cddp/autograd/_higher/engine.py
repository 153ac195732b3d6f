"""The higher-order backward engine: what backward / autograd.grad run with create_graph=True.

The C engine (csrc/autograd/engine.c) runs each node's C backward with grad mode off, so its
results are constants. Here the same walk runs in Python and each node is differentiated by
its formula (formula.py: cddp ops with grad mode on), so every gradient it produces has a
history and can be differentiated again. The order is the C engine's (torch's): the ready
node created last runs first, a leaf's AccumulateGrad as soon as all its gradient arrived.

Only nodes that lead to what is wanted run (the inputs of autograd.grad, or the leaves for
backward): a node without a formula raises only when its gradient is needed. Saved tensors
stay with the graph (create_graph implies retain_graph, as in torch).
"""
import heapq
import itertools
import threading

from ... import _C
from ..grad_mode import enable_grad
from ..function import BackwardCFunction
from .formula import FORMULAS, Ctx, Unsupported, _sink, sum_to
from . import pointwise, reduce, shape, linalg, nn  # noqa: F401  (register their formulas)
from .shape import index_plan


_state = threading.local()


def capturing():
    """Whether this thread is inside a run() that captures gradients (autograd.grad) rather
    than accumulating them."""
    return getattr(_state, "capturing", 0) > 0


class _Grads(dict):
    """A node's incoming gradients by output number; a missing one reads as None."""

    def __missing__(self, k):
        return None


def _root_sink(t, i):
    node, nr = _sink(t)
    if node is None:
        raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                           "a grad_fn")
    return node, nr


def _run_hooks(hooks, g):
    for h in hooks or ():
        r = h(g)
        if r is not None:
            if not isinstance(r, _C.Tensor):
                raise TypeError(f"hook should return None or a Tensor, got {type(r).__name__}")
            g = r
    return g


def _add(a, b):
    return b if a is None else a + b


def run(roots, seeds, targets=None):
    """Propagate seeds (one gradient per root, each possibly with history) back through the
    graph with formulas. targets: None to accumulate into the leaves' .grad (backward), else
    a list of (node, output_nr) whose incoming gradient is captured and returned in order."""
    start = [_root_sink(t, i) for i, t in enumerate(roots)]
    want = {}
    for j, (node, nr) in enumerate(targets or ()):
        want.setdefault((id(node), nr), []).append(j)
    want_nodes = {k[0] for k in want}

    # the reachable graph, and which nodes lead to something wanted
    nodes, edges = {}, {}
    stack = [n for n, _ in start]
    while stack:
        n = stack.pop()
        if id(n) in nodes:
            continue
        nodes[id(n)] = n
        edges[id(n)] = [e for e in n.next_functions if e[0] is not None]
        stack.extend(e[0] for e in edges[id(n)])
    # needed: leads to something wanted (iterative post-order: graphs can be deep)
    needed = {}
    for root, _ in start:
        todo = [(root, False)]
        while todo:
            n, done = todo.pop()
            key = id(n)
            if key in needed:
                continue
            if not done:
                todo.append((n, True))
                todo.extend((m, False) for m, _ in edges[key] if id(m) not in needed)
                continue
            needed[key] = (key in want_nodes or
                           (targets is None and n.name() == "AccumulateGrad") or
                           any(needed[id(m)] for m, _ in edges[key]))
    deps = dict.fromkeys(nodes, 0)
    for key, es in edges.items():
        if needed[key]:
            for m, _ in es:
                deps[id(m)] += 1

    bufs, captured = {}, [None] * len(targets or ())
    for (n, nr), g in zip(start, seeds):
        b = bufs.setdefault(id(n), _Grads())
        b[nr] = _add(b[nr], g)
    tie = itertools.count()
    ready, queued = [], set()
    for n, _ in start:
        if deps[id(n)] == 0 and needed[id(n)] and id(n) not in queued:
            queued.add(id(n))
            heapq.heappush(ready, (-n._sequence_nr(), next(tie), n))
    _state.capturing = getattr(_state, "capturing", 0) + (targets is not None)
    try:
        _walk(ready, bufs, edges, needed, deps, queued, tie, want, captured, targets is None)
    finally:
        _state.capturing -= targets is not None
    return captured


def _walk(ready, bufs, edges, needed, deps, queued, tie, want, captured, accumulate):
    """Run the ready nodes in order, handing each one's input gradients on."""
    with enable_grad():
        while ready:
            n = heapq.heappop(ready)[2]
            g = bufs.pop(id(n), _Grads())
            # a captured input's own node runs only when something past it is wanted
            onward = any(needed[id(m)] for m, _ in edges[id(n)])
            for m, nr, r in _step(n, g, want, captured, accumulate, onward):
                key = id(m)
                if not needed[key]:
                    continue
                if r is not None:
                    b = bufs.setdefault(key, _Grads())
                    b[nr] = _add(b[nr], r)
            for m, _ in edges[id(n)]:
                key = id(m)
                if needed[key]:
                    deps[key] -= 1
                    if deps[key] == 0 and key not in queued:
                        queued.add(key)
                        heapq.heappush(ready, (-m._sequence_nr(), next(tie), m))


def _step(n, g, want, captured, accumulate, onward):
    """Run node n on its gradients g: hooks, capture, accumulation or (when onward: some
    node past it is wanted) its formula. Returns [(next node, input_nr, gradient or None)]."""
    pre, retain, leaf_hooks, post, fn_pre, fn_post = n._hooks()
    for k in list(g):
        if g[k] is None:
            continue
        if pre and k in pre:
            g[k] = _run_hooks(pre[k], g[k])
        ref = retain.get(k) if retain else None
        t = ref() if ref is not None else None
        if t is not None:
            t.grad = g[k] if t.grad is None else t.grad + g[k]
        for j in want.get((id(n), k), ()):
            captured[j] = _add(captured[j], g[k])
    n_out = max(g) + 1 if g else 0
    for h in list(fn_pre.values()) if fn_pre else ():      # the node's register_prehook
        r = h(tuple(g.get(k) for k in range(n_out)))
        if r is not None:
            for k, v in enumerate(r):
                g[k] = v
    name = n.name()
    if name == "AccumulateGrad":
        if accumulate and g[0] is not None:
            leaf = n.variable
            r = _run_hooks(leaf_hooks, g[0])
            leaf.grad = r if leaf.grad is None else leaf.grad + r
            for h in post or ():
                h(leaf)
            for h in list(fn_post.values()) if fn_post else ():
                h((), (g[0],))
        return []
    if not onward or all(v is None for v in g.values()):
        return []
    ctx = Ctx(n)
    plan = None if isinstance(n, BackwardCFunction) else _C._index_plan(n)
    if isinstance(n, BackwardCFunction):
        out = _function(n, g, ctx)
    elif plan is not None:
        out = index_plan(ctx, plan, g)          # indexing nodes, whatever their name
    else:
        fn = FORMULAS.get(name)
        if fn is None:
            raise Unsupported(f"cddp: double backward (create_graph=True) through {name} is "
                              "not supported yet")
        out = fn(ctx, g)
    if not isinstance(out, (tuple, list)):
        out = (out,)
    for h in list(fn_post.values()) if fn_post else ():     # the node's register_hook
        r = h(tuple(out), tuple(g.get(k) for k in range(n_out)))
        if r is not None:
            out = tuple(r)
    if len(out) != len(ctx.next):
        raise RuntimeError(f"double backward formula of {name} returned {len(out)} gradients; "
                           f"the node has {len(ctx.next)} inputs")
    res = []
    for e, ((m, nr), r) in enumerate(zip(ctx.next, out)):
        if m is None or r is None:
            continue
        shp, dt = ctx.meta(e)
        if tuple(r.shape) != shp:
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {e} - "
                               f"got {list(r.shape)} but expected shape compatible with "
                               f"{list(shp)}")
        if r.dtype != dt:
            r = r.to(dt)
        res.append((m, nr, r))
    return res


def _function(n, g, ctx):
    """A custom autograd.Function's node: its user backward, called with grad mode on (as
    torch does under create_graph), its result checked and mapped onto the node's edges as
    csrc/autograd/function.c does for the C engine."""
    grads = []
    mat = getattr(n, "materialize_grads", True)
    for k, m in enumerate(n._output_meta):
        v = g[k]
        if v is None and mat and m is not None:
            v = _C.zeros(m[0], dtype=getattr(_C, m[1]))
        grads.append(v)
    res = n.apply(*grads)
    res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
    input_of = n._input_of
    while len(res) > len(input_of) and res[-1] is None:
        res = res[:-1]
    if len(res) != len(input_of):
        raise RuntimeError(f"function {ctx.name} returned an incorrect number of gradients "
                           f"(expected {len(input_of)}, got {len(res)})")
    out = [None] * len(ctx.next)
    for p, (i, r) in enumerate(zip(input_of, res)):
        if i < 0:
            if r is not None:
                raise RuntimeError(f"function {ctx.name} returned a gradient different than "
                                   f"None at position {p + 1}, but the corresponding forward "
                                   "input was not a Variable")
            continue
        if r is None or not ctx.needs(i):
            continue
        want = ctx.meta(i)[0]
        if tuple(r.shape) != want:
            r = sum_to(r, want)         # broadcastable results are summed down, as in C
        out[i] = r
    return out
