"""torch.nn.modules.utils: the argument normalisers layer code imports (_pair & co.) and
consume_prefix_in_state_dict_if_present (a DDP checkpoint's "module." prefix removed)."""
import collections.abc
from itertools import chain

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n, name="parse"):
    """A normaliser: an iterable becomes the tuple of its items, anything else n copies."""
    def parse(x):
        return tuple(x) if isinstance(x, collections.abc.Iterable) else (x,) * n
    parse.__name__ = name
    return parse


_single, _pair, _triple, _quadruple = (_ntuple(k, name) for k, name in enumerate(
    ("_single", "_pair", "_triple", "_quadruple"), start=1))


def _reverse_repeat_tuple(t, n):
    """t reversed, each entry n times: a layer's padding in F.pad's (last dim first) order."""
    return tuple(chain.from_iterable((x,) * n for x in t[::-1]))


def _list_with_default(out_size, defaults):
    """An adaptive pool's output size with None entries taken from the input's sizes."""
    if isinstance(out_size, int):
        return out_size
    if len(defaults) <= len(out_size):
        raise ValueError(f"Input dimension should be at least {len(out_size) + 1}")
    return [v if v is not None else d for v, d in zip(out_size, defaults[-len(out_size):])]


def consume_prefix_in_state_dict_if_present(state_dict, prefix):
    """Strip `prefix` from the keys that start with it, in place (and from the keys of the
    state dict's _metadata, where the prefix's own module entry becomes the root "")."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        state_dict[key[len(prefix):]] = state_dict.pop(key)
    meta = getattr(state_dict, "_metadata", None)
    if meta is not None:
        for key in list(meta):
            if key and (key == prefix.replace(".", "") or key.startswith(prefix)):
                meta[key[len(prefix):]] = meta.pop(key)
