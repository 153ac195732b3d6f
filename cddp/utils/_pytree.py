"""cddp.utils._pytree — torch.utils._pytree's public helpers over cddp.func._pytree: flatten a
nested structure of tuples / lists / dicts / named tuples (and registered classes) into its
leaves and a TreeSpec, map over the leaves, rebuild.

    from cddp.utils._pytree import tree_map
    batch = tree_map(lambda t: t.to(device), batch)

is_leaf(x) -> True stops the walk at x. Classes join with register_pytree_node(cls,
flatten_fn, unflatten_fn) (flatten_fn(x) -> (children, context); unflatten_fn(children,
context) -> x); torch's serialization arguments are accepted and unused.
"""
from ..func import _pytree as _core
from ..func._pytree import LeafSpec, TreeSpec  # noqa: F401

__all__ = ["PyTree", "TreeSpec", "LeafSpec", "register_pytree_node", "tree_flatten",
           "tree_unflatten", "tree_leaves", "tree_structure", "tree_map", "tree_map_",
           "tree_map_only", "tree_map_only_", "tree_all", "tree_any", "tree_all_only",
           "tree_any_only", "treespec_pprint", "tree_iter"]

PyTree = object


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None,
                         to_dumpable_context=None, from_dumpable_context=None,
                         flatten_with_keys_fn=None):
    _core.register_node(cls, flatten_fn, unflatten_fn)


def _flatten(tree, is_leaf, leaves):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return _core.LEAF
    node = _core._node(tree)
    if node is None:
        leaves.append(tree)
        return _core.LEAF
    t, ctx, kids = node
    return TreeSpec(t, ctx, [_flatten(k, is_leaf, leaves) for k in kids])


def tree_flatten(tree, is_leaf=None):
    """(leaves in order, TreeSpec)."""
    if is_leaf is None:
        return _core.tree_flatten(tree)
    leaves = []
    return leaves, _flatten(tree, is_leaf, leaves)


def tree_unflatten(leaves, treespec):
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but "
                         f"the spec refers to a pytree that holds {treespec.num_leaves} items "
                         f"({treespec}).")
    return _core.tree_unflatten(leaves, treespec)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_iter(tree, is_leaf=None):
    return iter(tree_leaves(tree, is_leaf))


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func, tree, *rests, is_leaf=None):
    """func applied to each leaf (with the matching leaves of rests, which must have tree's
    structure at least down to its leaves), in a tree of tree's structure."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [_leaves_like(r, spec, is_leaf) for r in rests]
    return tree_unflatten([func(*xs) for xs in zip(leaves, *others)], spec)


def _leaves_like(tree, spec, is_leaf):
    if spec.is_leaf():
        return [tree]
    node = _core._node(tree) if not (is_leaf is not None and is_leaf(tree)) else None
    if node is None or node[0] is not spec.type or len(node[2]) != len(spec.children):
        raise ValueError(f"Tree structures do not match: expected {spec}, got "
                         f"{type(tree).__name__}")
    out = []
    kids = node[2]
    if spec.type in (dict,) or (spec.context is not None and isinstance(spec.context, list)):
        if list(node[1]) != list(spec.context):
            kids = [tree[k] for k in spec.context]
    for k, s in zip(kids, spec.children):
        out += _leaves_like(k, s, is_leaf)
    return out


def tree_map_(func, tree, *rests, is_leaf=None):
    """func called on each leaf for its side effects; returns tree."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [_leaves_like(r, spec, is_leaf) for r in rests]
    for xs in zip(leaves, *others):
        func(*xs)
    return tree


def _only(types, func):
    def apply(x):
        return func(x) if isinstance(x, types) else x
    return apply


def tree_map_only(type_or_types_or_pred, func, tree, is_leaf=None):
    """func applied to the leaves of the given type(s) (or for which a predicate holds)."""
    if isinstance(type_or_types_or_pred, (type, tuple)):
        return tree_map(_only(type_or_types_or_pred, func), tree, is_leaf=is_leaf)
    pred = type_or_types_or_pred
    return tree_map(lambda x: func(x) if pred(x) else x, tree, is_leaf=is_leaf)


def tree_map_only_(type_or_types, func, tree, is_leaf=None):
    return tree_map_(_only(type_or_types, func), tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf=None):
    return all(map(pred, tree_leaves(tree, is_leaf)))


def tree_any(pred, tree, is_leaf=None):
    return any(map(pred, tree_leaves(tree, is_leaf)))


def tree_all_only(types, pred, tree, is_leaf=None):
    return all(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, types))


def tree_any_only(types, pred, tree, is_leaf=None):
    return any(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, types))


def treespec_pprint(treespec):
    return treespec.pprint()
