"""cddp.func.vmap — torch.func.vmap as a Python loop over the batch: correct, not fast.

Each mapped input is sliced along its in_dim (Tensor.select: a view, so an in-place op on a
slice writes the caller's tensor, as in torch), func is called once per index with the
slices (unmapped inputs and keyword arguments as they are), and each output leaf is stacked
along its out_dim. in_dims / out_dims follow torch: an int, or a pytree prefix of the
arguments / outputs whose leaves are ints or None (None: not mapped). Argument checks and
their messages are torch's.

Where a loop cannot tell what torch's batched tensors tell:
- out_dim None: torch refuses an output that depends on a mapped input; here a tensor output
  is refused when the calls returned different values, else the first call's is returned.
- a batch of size 0 calls func once on zero-filled unbatched slices to learn the outputs'
  shapes (torch also runs func once), then returns them with an empty batch dimension.
- randomness is watched through the CPU generator (cddp.get_rng_state around each call):
  'error' refuses a call that moved it, 'same' rewinds it before each call, so every sample
  sees the same draws and the generator ends as after one call, 'different' lets each call
  draw on (values other than torch's single batched draw). Draws from an explicit Generator
  object are not seen.
- func must return the same output structure at every index.
- an in-place write into an unmapped input (in_dims None) would happen once per sample:
  refused after the first call that made one (the input's version counter moved), where
  torch refuses a batched value and applies an unbatched one once.
- in-place updates of state outside the inputs happen once per sample (a BatchNorm's running
  statistics in training mode), where torch refuses them.
"""
import functools

from .. import _C
from ._pytree import LEAF, broadcast_prefix, tree_flatten, tree_unflatten
from ._transforms import RANDOMNESS_ERROR, check_randomness_arg, rng_snapshot

__all__ = ["vmap"]

Tensor = _C.Tensor


def _name(func):
    return getattr(func, "__name__", repr(func))


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """func mapped over a dimension of its inputs (see the module docstring); chunk_size is
    checked and otherwise moot, the loop holding one sample at a time anyway."""
    check_randomness_arg(randomness)
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        return _vmap_call(func, in_dims, out_dims, randomness, args, kwargs)
    return wrapped


def _check_out_dims(out_dims, func):
    leaves, _ = tree_flatten(out_dims)
    if any(not (d is None or isinstance(d, int)) for d in leaves):
        raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims}): `out_dims` must be an "
                         "int, None or a python collection of ints representing where in the "
                         "outputs the vmapped dimension should appear.")


def _mapped_inputs(func, in_dims, args):
    """(batch size, flat args, their in_dims made non-negative, args' spec)."""
    where = f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>)"
    if not isinstance(in_dims, (int, tuple)):
        raise ValueError(f"{where}: expected `in_dims` to be int or a (potentially nested) "
                         f"tuple matching the structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({_name(func)})(<inputs>): got no inputs. Maybe you forgot to add "
                         "inputs, or you are trying to vmap over a function with no inputs. The "
                         "latter is unsupported.")
    flat, spec = tree_flatten(args)
    dims = broadcast_prefix(in_dims, spec)
    if dims is None:
        raise ValueError(f"{where}: in_dims is not compatible with the structure of `inputs`. "
                         f"in_dims has structure {tree_flatten(in_dims)[1]} but inputs has "
                         f"structure {spec}.")
    for i, (x, d) in enumerate(zip(flat, dims)):
        if d is None:
            continue
        if not isinstance(d, int):
            raise ValueError(f"{where}: Got in_dim={d} for an input but in_dim must be either an "
                             "integer dimension or None.")
        if not isinstance(x, Tensor):
            raise ValueError(f"{where}: Got in_dim={d} for an input but the input is of type "
                             f"{type(x)}. We cannot vmap over non-Tensor arguments, please use "
                             "None as the respective in_dim")
        if not -x.dim() <= d < x.dim():
            raise ValueError(f"{where}: Got in_dim={d} for some input, but that input is a "
                             f"Tensor of dimensionality {x.dim()} so expected in_dim to satisfy "
                             f"-{x.dim()} <= in_dim < {x.dim()}.")
        dims[i] = d % x.dim()
    sizes = [x.shape[d] for x, d in zip(flat, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError("vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return sizes[0], flat, dims, spec


def _sample(x, d, i):
    """Input x at batch index i (i None: a zero-filled stand-in for an empty batch)."""
    if d is None:
        return x
    if i is None:
        return x.new_zeros(tuple(s for k, s in enumerate(x.shape) if k != d))
    return x.select(d, i)


def _per_argument(flat, dims, spec):
    """[(argument's spec, its leaves, their in_dims)] per positional argument: a tensor
    argument is then sliced directly, and only container arguments are rebuilt per sample
    (fresh containers at every call, as the whole-tree rebuild gave)."""
    plan, start = [], 0
    for s in spec.children:                     # args is a tuple: one child per argument
        end = start + s.num_leaves
        plan.append((s, flat[start:end], dims[start:end]))
        start = end
    return plan


def _arguments(plan, index):
    if index is None:
        return [tree_unflatten([_sample(x, d, None) for x, d in zip(xs, ds)], s)
                for s, xs, ds in plan]
    args = []                          # _sample inlined: this runs once per sample
    for s, xs, ds in plan:
        if s.type is None:
            x, d = xs[0], ds[0]
            args.append(x if d is None else x.select(d, index))
        else:
            args.append(tree_unflatten([x if d is None else x.select(d, index)
                                        for x, d in zip(xs, ds)], s))
    return args


def _call(func, plan, kwargs, index, randomness, start, untouched):
    """func on the sample at index, under the randomness mode (start: the generator state
    before the first call, for 'same'; untouched: its bytes then, for 'error', which is also
    the state before every later call, since a call that moved it has raised)."""
    if randomness == "same":
        _C.set_rng_state(start)
    out = func(*_arguments(plan, index), **kwargs)
    if untouched is not None and untouched != rng_snapshot():
        raise RuntimeError(RANDOMNESS_ERROR)
    return out


def _out_dims_for(out_dims, spec, func):
    """One out_dim per output leaf (torch's rules: a lone tensor takes an int, a 1-tuple or
    None; otherwise out_dims is a prefix of the outputs' structure)."""
    dims = None
    if spec == LEAF:
        if isinstance(out_dims, int) or out_dims is None:
            dims = [out_dims]
        elif isinstance(out_dims, tuple) and len(out_dims) == 1:
            dims = list(out_dims)
    else:
        dims = broadcast_prefix(out_dims, spec)
    if dims is None:
        raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims})(<inputs>): out_dims is "
                         "not compatible with the structure of `outputs`. out_dims has structure "
                         f"{tree_flatten(out_dims)[1]} but outputs has structure {spec}.")
    return dims


def _join(func, column, d, empty):
    """One output leaf over the batch (column: its value per call) placed at out_dim d."""
    name = _name(func)
    first = column[0]
    if d is None:
        if isinstance(first, Tensor) and not all(first.equal(c) for c in column[1:]):
            raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when "
                             "out_dim is None")
        return first
    if not all(isinstance(c, Tensor) for c in column):
        bad = next(c for c in column if not isinstance(c, Tensor))
        raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type "
                         f"{type(bad)}. Did you mean to set out_dims= to None for output?")
    if empty:
        return first.unsqueeze(d).narrow(d, 0, 0)
    return _C.stack(column, d)


def _vmap_call(func, in_dims, out_dims, randomness, args, kwargs):
    """One vmapped call: the arguments checked as torch checks them, then the loop."""
    _check_out_dims(out_dims, func)
    size, flat, dims, spec = _mapped_inputs(func, in_dims, args)
    start = _C.get_rng_state() if randomness == "same" or size == 0 else None
    untouched = rng_snapshot() if randomness == "error" else None
    plan = _per_argument(flat, dims, spec)
    unmapped = [(k, x, x._version) for k, (x, d) in enumerate(zip(flat, dims))
                if d is None and isinstance(x, Tensor)]
    results, out_spec = [], None
    for i in range(size) if size else [None]:
        leaves, s = tree_flatten(_call(func, plan, kwargs, i, randomness, start, untouched))
        for k, x, v in unmapped:
            if x._version != v:
                raise RuntimeError(
                    f"vmap({_name(func)}, ...): `{_name(func)}` wrote in place into input {k}, "
                    "which is not mapped (in_dims None); cddp's vmap calls the function once "
                    "per sample, so the write would be applied once per sample. Pass a copy, "
                    "or map that input")
        if out_spec is None:
            out_spec = s
        elif s != out_spec:
            raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` returned outputs of "
                             f"structure {out_spec} at batch index 0 but {s} at index {i}")
        results.append(leaves)
    if size == 0:
        _C.set_rng_state(start)                # no sample, so no draws
    out_leaf_dims = _out_dims_for(out_dims, out_spec, func)
    joined = [_join(func, list(col), d, size == 0)
              for col, d in zip(zip(*results), out_leaf_dims)]
    return tree_unflatten(joined, out_spec)
