"""cddp.utils._pytree (torch.utils._pytree's helpers): leaves, order, rebuilding, maps over
several trees, is_leaf, registered classes; the same results as torch's on the same trees."""
from collections import OrderedDict, namedtuple

import pytest

import cddp
from cddp.utils import _pytree as P

Pair = namedtuple("Pair", "x y")


def _tree():
    return {"a": [1, (2, 3)], "b": OrderedDict([("z", 4), ("y", Pair(5, [6]))]), "c": None}


def test_flatten_unflatten_map():
    leaves, spec = P.tree_flatten(_tree())
    assert leaves == [1, 2, 3, 4, 5, 6, None]
    assert P.tree_unflatten(leaves, spec) == _tree()
    assert P.tree_map(lambda v: None if v is None else v * 10, _tree())["b"]["y"] == Pair(50, [60])
    assert P.tree_map(lambda a, b: a + b, {"p": 1, "q": 2}, {"q": 20, "p": 10}) == {"p": 11, "q": 22}
    assert P.tree_leaves(_tree(), is_leaf=lambda v: isinstance(v, tuple)) == [1, (2, 3), 4, Pair(5, [6]), None]
    assert P.tree_map_only(int, lambda v: -v, [1, "s", 2.0]) == [-1, "s", 2.0]
    assert P.tree_all(lambda v: v is None or v > 0, _tree())
    assert P.tree_any_only(int, lambda v: v == 6, _tree())
    seen = []
    assert P.tree_map_(seen.append, [1, [2]]) == [1, [2]] and seen == [1, 2]
    t = cddp.ones(2)
    assert P.tree_leaves({"t": t})[0] is t
    with pytest.raises(ValueError, match="Tree structures do not match"):
        P.tree_map(lambda a, b: a, [1, 2], (1, 2))
    with pytest.raises(ValueError, match="has length 2"):
        P.tree_unflatten([1, 2], P.tree_structure([1, 2, 3]))


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def test_registered_class():
    P.register_pytree_node(Point, lambda p: ([p.x, p.y], "pt"), lambda kids, ctx: Point(*kids))
    out = P.tree_map(lambda v: v + 1, [Point(1, 2), {"k": Point(3, 4)}])
    assert (out[0].x, out[0].y, out[1]["k"].x) == (2, 3, 4)
    leaves, spec = P.tree_flatten(Point(7, [8, 9]))
    assert leaves == [7, 8, 9] and P.tree_unflatten([0, 1, 2], spec).y == [1, 2]
    with pytest.raises(ValueError, match="already registered"):
        P.register_pytree_node(Point, lambda p: ([], None), lambda k, c: None)


def test_same_as_torch():
    tp = pytest.importorskip("torch.utils._pytree")
    for tree in (_tree(), [], {"x": []}, (1,), Pair([1, 2], {"u": (3,)})):
        assert P.tree_leaves(tree) == tp.tree_leaves(tree)
        assert P.treespec_pprint(P.tree_structure(tree)) == \
            tp.treespec_pprint(tp.tree_structure(tree))
        f = (lambda v: (v, "x") if v is not None else v)
        assert P.tree_map(f, tree) == tp.tree_map(f, tree)
