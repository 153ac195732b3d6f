"""cddp.func._pytree — the nested containers the function transforms take and return (and
cddp.utils._pytree's core).

As torch.utils._pytree: tuples (named tuples and cddp.Size included), lists and dicts
(OrderedDict kept) are walked, dicts in insertion order, and the classes registered with
register_node (flatten_fn(x) -> (children, context), unflatten_fn(children, context) -> x);
anything else (a tensor, a number, None, a dict subclass) is a leaf.
"""
from collections import OrderedDict

from .. import _C
from .._size import Size

_Tensor = _C.Tensor


class TreeSpec:
    """The shape of a pytree without its leaves: equal specs flatten to lists that line up."""

    __slots__ = ("type", "context", "children", "num_leaves", "flat")

    def __init__(self, type_, context, children):
        self.type = type_
        self.context = context
        self.children = children
        if type_ is None:
            self.num_leaves, self.flat = 1, False
        else:                                  # a plain loop: generators cost more here
            n, flat = 0, True
            for c in children:
                n += c.num_leaves
                flat = flat and c.type is None
            self.num_leaves, self.flat = n, flat

    def __eq__(self, other):
        return (isinstance(other, TreeSpec) and self.type is other.type and
                self.context == other.context and self.children == other.children)

    def _named(self):
        return self.type not in (tuple, list, Size) and self.context is None

    def __repr__(self, indent=0):
        """torch's TreeSpec repr (error messages quote it): TreeSpec(type, context, [...])."""
        if self.type is None:
            return "*"
        name, ctx = self.type.__name__, self.context
        if self._named():
            name, ctx = "namedtuple", self.type
        kids = ""
        if self.children:
            indent += 2
            kids = (",\n" + " " * indent).join(c.__repr__(indent) for c in self.children)
        return f"TreeSpec({name}, {ctx}, [{kids}])"

    def pprint(self):
        """The structure as a Python literal with * for leaves (torch's treespec_pprint)."""
        if self.type is None:
            return "*"
        kids = [c.pprint() for c in self.children]
        if self.type is dict:
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.context, kids)) + "}"
        if self.type is OrderedDict:
            pairs = ", ".join(f"({k!r}, {c})" for k, c in zip(self.context, kids))
            return f"OrderedDict([{pairs}])"
        if self._named():
            fields = ", ".join(f"{f}={c}" for f, c in zip(self.type._fields, kids))
            return f"{self.type.__name__}({fields})"
        if self.type is list:
            return "[" + ", ".join(kids) + "]"
        return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"


    def is_leaf(self):
        return self.type is None

    @property
    def num_children(self):
        return len(self.children)

    @property
    def children_specs(self):
        return list(self.children)

    @property
    def num_nodes(self):
        return 1 + sum(c.num_nodes for c in self.children)


class LeafSpec(TreeSpec):
    """The spec of a leaf (torch's LeafSpec)."""

    __slots__ = ()

    def __init__(self):
        super().__init__(None, None, ())


LEAF = LeafSpec()

# registered container classes: cls -> (flatten_fn, unflatten_fn)
_REGISTRY = {}


def register_node(cls, flatten_fn, unflatten_fn):
    if cls in _REGISTRY or cls in (dict, OrderedDict, tuple, list, Size):
        raise ValueError(f"{cls} is already registered as pytree node.")
    _REGISTRY[cls] = (flatten_fn, unflatten_fn)


def _node(x):
    """(type, dict keys / registered context or None, children) for a container, None for a
    leaf."""
    t = type(x)
    if t is dict or t is OrderedDict:
        return t, list(x), list(x.values())
    if t is tuple or t is list or t is Size or (isinstance(x, tuple) and hasattr(t, "_fields")):
        return t, None, list(x)
    if t in _REGISTRY:                        # after the built-in containers: the hot cases
        kids, ctx = _REGISTRY[t][0](x)
        return t, _Context(ctx), list(kids)
    return None


def _flatten_into(x, leaves):
    node = _node(x)
    if node is None:
        leaves.append(x)
        return LEAF
    t, ctx, kids = node
    specs = []
    for k in kids:
        if type(k) is _Tensor:                 # the usual leaf: no call, no _node tests
            leaves.append(k)
            specs.append(LEAF)
        else:
            specs.append(_flatten_into(k, leaves))
    return TreeSpec(t, ctx, specs)


def tree_flatten(tree):
    """(leaves in order, spec). Module-level recursion, not a nested closure: a recursive
    closure is a reference cycle that would hold the leaves (tensors) until the cyclic GC."""
    leaves = []
    if type(tree) is _Tensor:
        leaves.append(tree)
        return leaves, LEAF
    return leaves, _flatten_into(tree, leaves)


class _Context:
    """A registered class's context, told apart from a dict's key list."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, _Context) and self.value == other.value

    def __repr__(self):
        return repr(self.value)


def _build(s, it):
    if s.type is None:
        return next(it)
    if s.flat:                                 # all children leaves: no recursion needed
        kids = [next(it) for _ in s.children]
    else:
        kids = [_build(c, it) for c in s.children]
    if type(s.context) is _Context:
        return _REGISTRY[s.type][1](kids, s.context.value)
    if s.context is not None:
        return s.type(zip(s.context, kids))
    if s.type in (tuple, list, Size):
        return s.type(kids)
    return s.type(*kids)                       # a named tuple


def tree_unflatten(leaves, spec):
    """The pytree of shape spec holding leaves (in tree_flatten's order)."""
    return _build(spec, iter(leaves))


def broadcast_prefix(prefix, spec):
    """One entry of prefix per leaf of spec: a non-container in prefix stands for every leaf
    below its place (vmap's in_dims and out_dims); None when prefix is no prefix of spec."""
    node = _node(prefix)
    if node is None:
        return [prefix] * spec.num_leaves
    t, ctx, kids = node
    if t is not spec.type or len(kids) != len(spec.children):
        return None
    if type(ctx) is _Context:
        if ctx != spec.context:
            return None
    elif ctx is not None:
        if set(ctx) != set(spec.context):
            return None
        kids = [prefix[k] for k in spec.context]
    out = []
    for k, s in zip(kids, spec.children):
        sub = broadcast_prefix(k, s)
        if sub is None:
            return None
        out.extend(sub)
    return out
