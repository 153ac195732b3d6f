"""cddp.distributed.tensor._api — DTensor: a tensor whose global value is laid out over a
DeviceMesh by one placement per mesh dimension, holding only this rank's part.

    t = distribute_tensor(full, mesh, [Shard(0)])     # this rank's chunk of rows
    t.to_local(); t.full_tensor(); t.redistribute(mesh, [Replicate()])

Contract:
- A DTensor is a cddp Tensor subclass (Tensor._make_subclass) whose storage IS this rank's
  local part: C kernels (optimizer steps, in-place ops, autograd accumulation) see the local
  tensor directly. The layout lives in `_spec` (DTensorSpec: mesh, placements, global shape).
- Shard(d) uses torch.chunk's layout: over W ranks, ceil(n / W) slices of dim d per rank, the
  trailing ranks fewer or none. Gathers pad every rank's part to ceil(n / W) slices, run one
  all_gather_into_tensor over the mesh dimension's group and drop the padding.
- distribute_tensor(tensor, mesh=None, placements=None, *, src_data_rank=0): rank 0 of the
  mesh broadcasts its tensor (src_data_rank=None: every rank's own is used, no
  communication), then each rank keeps its part (a copy). Default mesh: 1-D over the world;
  default placements: Replicate on every mesh dimension.
- DTensor.from_local(local, mesh=None, placements=None, *, run_check=False, shape=None,
  stride=None) aliases `local` (no copy); without shape the global size of a sharded
  dimension is local size x mesh size, as torch assumes.
- to_local() is a plain tensor view of the local part (differentiable: gradients reach the
  DTensor); _local_tensor is the same storage, detached. full_tensor() (collective) returns
  the global value as a new plain tensor; redistribute(mesh, placements) (collective) goes
  through the full value and keeps the new placements' part; Partial is reduced
  (all_reduce with its op) on the way.

Differences from torch:
- .shape / .size() / .numel() / .dim() / .stride() and every op report and act on the LOCAL
  part (cddp's Tensor cannot carry a global shape over local storage). The global shape is
  `t._spec.shape` (and full_tensor().shape). Arithmetic on a DTensor is the local
  arithmetic, giving a plain tensor: there is no sharding propagation (no DTensor op
  dispatch); in-place ops keep the object, hence its DTensor type.
- full_tensor, redistribute and from_local are not differentiable (torch's are); training
  goes through fully_shard, whose gather / reduce-scatter are one autograd node.
- redistribute always passes through the full value (torch picks cheaper transforms);
  Replicate -> Partial("sum") keeps the value on coordinate 0 of the mesh dimension and
  zeros elsewhere, as torch.
- No distribute_module, tensor-parallel styles, DTensor factories (zeros, ones, randn ...),
  _StridedShard, or uneven shapes in from_local other than through shape=.
- Pickling a DTensor raises (its mesh holds process groups); save to_local() or
  full_tensor(), or use torch.distributed.checkpoint.
"""
import copy

from ... import _C
from ...autograd.grad_mode import no_grad
from ...nn.parameter import Parameter
from .. import distributed_c10d as _c10d
from ..device_mesh import DeviceMesh
from .placement_types import Partial, Placement, Replicate, Shard

__all__ = ["DTensor", "DTensorSpec", "distribute_tensor"]

Tensor = _C.Tensor

_OPS = {"sum": _c10d.ReduceOp.SUM, "avg": _c10d.ReduceOp.AVG,
        "max": _c10d.ReduceOp.MAX, "min": _c10d.ReduceOp.MIN}


class DTensorSpec:
    """A DTensor's layout: mesh, placements (one per mesh dimension), global shape."""
    __slots__ = ("mesh", "placements", "shape")

    def __init__(self, mesh, placements, shape):
        self.mesh, self.placements, self.shape = mesh, tuple(placements), tuple(shape)

    @property
    def ndim(self):
        return len(self.shape)

    def __eq__(self, other):
        return isinstance(other, DTensorSpec) and (self.mesh, self.placements, self.shape) \
            == (other.mesh, other.placements, other.shape)

    def __hash__(self):
        return hash((self.mesh, self.placements, self.shape))

    def __repr__(self):
        return f"DTensorSpec(mesh={self.mesh!r}, placements={self.placements}, " \
               f"shape={list(self.shape)})"


# ---- layout arithmetic ------------------------------------------------------------------------

def chunk_range(n, world, index):
    """(start, length, chunk) of part `index` of n slices chunked over `world` (torch.chunk:
    chunk = ceil(n / world) per part, the trailing parts shorter or empty)."""
    chunk = -(-n // world) if n else 0
    start = min(index * chunk, n)
    return start, min(start + chunk, n) - start, chunk


def _default_mesh():
    from ..device_mesh import init_device_mesh
    if not _c10d.is_initialized():
        _c10d.init_process_group()
    world = _c10d.GroupMember.WORLD
    cached = _mesh_cache.get("mesh")
    if cached is None or cached[0] is not world:      # a new default group: a new mesh
        cached = _mesh_cache["mesh"] = (world, init_device_mesh("cpu", (_c10d.get_world_size(),)))
    return cached[1]


_mesh_cache = {}      # "mesh": (the default group it was built over, the 1-D world mesh)


def _normalize(mesh, placements, ndim):
    if mesh is None:
        mesh = _default_mesh()
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"expected a DeviceMesh, got {type(mesh).__name__}")
    if placements is None:
        placements = [Replicate()] * mesh.ndim
    placements = list(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"`placements` must have the same length as `device_mesh.ndim`! "
                         f"Found placements length: {len(placements)}, and device_mesh.ndim: "
                         f"{mesh.ndim}.")
    for i, p in enumerate(placements):
        if not isinstance(p, Placement):
            raise TypeError(f"placement {i} must be a Shard, Replicate or Partial, got {p!r}")
        if isinstance(p, Shard):
            if p.dim < -ndim or p.dim >= max(ndim, 1) or ndim == 0:
                raise IndexError(f"Shard(dim={p.dim}) is out of range for a tensor of "
                                 f"{ndim} dimensions")
            if p.dim < 0:
                placements[i] = Shard(p.dim + ndim)
    return mesh, tuple(placements)


def _take_part(full, dim, world, index):
    """This part of `full` along dim (a new contiguous tensor)."""
    start, length, _ = chunk_range(full.shape[dim], world, index)
    part = full.narrow(dim, start, length)
    return part.clone() if part.is_contiguous() else part.contiguous()


def _gather_dim(local, dim, n, group, world):
    """The full tensor (n along dim) from every rank's chunk-layout part: pad to the chunk,
    one all_gather_into_tensor, drop the padding."""
    if world == 1:
        return local.clone()
    _, _, chunk = chunk_range(n, world, 0)
    shape = list(local.shape)
    rows = shape[dim]
    padded = local
    if rows < chunk:
        shape[dim] = chunk - rows
        padded = _C.cat([local, local.new_zeros(tuple(shape))], dim)
    padded = padded.contiguous()
    out = padded.new_empty((world,) + tuple(padded.shape))
    _c10d.all_gather_into_tensor(out, padded, group=group)
    if dim == 0:    # rank r's rows sit at r * chunk: the first n rows are the tensor
        rest = tuple(padded.shape[1:])
        return out.reshape((world * chunk,) + rest).narrow(0, 0, n).contiguous()
    pieces = []
    for r in range(world):
        _, length, _ = chunk_range(n, world, r)
        pieces.append(out[r].narrow(dim, 0, length))
    return _C.cat(pieces, dim)


def _level_shapes(spec):
    """Shape before applying placement i, for each mesh dimension i, and the local shape."""
    shapes, cur = [], list(spec.shape)
    for i, p in enumerate(spec.placements):
        shapes.append(tuple(cur))
        if isinstance(p, Shard):
            _, length, _ = chunk_range(cur[p.dim], spec.mesh.size(i),
                                       spec.mesh.get_local_rank(i))
            cur[p.dim] = length
    return shapes, tuple(cur)


def local_shape(spec):
    """The shape of this rank's part of a DTensor with this spec."""
    return _level_shapes(spec)[1]


def _local_part(full, mesh, placements):
    """This rank's part of the global value `full` (replicated on every rank)."""
    t = full
    for i, p in enumerate(placements):
        if isinstance(p, Shard):
            t = _take_part(t, p.dim, mesh.size(i), mesh.get_local_rank(i))
        elif isinstance(p, Partial) and p.reduce_op == "sum" and mesh.get_local_rank(i) != 0:
            t = _C.zeros_like(t)
    return t.clone() if t is full else t


def _full(local, spec):
    """The global value from every rank's part (collective over the mesh)."""
    shapes, _ = _level_shapes(spec)
    t = local.detach()
    for i in reversed(range(len(spec.placements))):
        p = spec.placements[i]
        group, world = spec.mesh.get_group(i), spec.mesh.size(i)
        if isinstance(p, Shard):
            t = _gather_dim(t.contiguous(), p.dim, shapes[i][p.dim], group, world)
        elif isinstance(p, Partial):
            t = t.clone()
            if world > 1:
                _c10d.all_reduce(t, op=_OPS[p.reduce_op], group=group)
    return t if t is not local else t.clone()


# ---- the tensor -------------------------------------------------------------------------------

class DTensor(Tensor):
    """A distributed tensor (see the module docstring): the storage is the local part."""

    _is_dtensor = True       # a marker code outside this package tests without importing it

    def __new__(cls, *args, **kwargs):
        raise TypeError("DTensor objects are made by distribute_tensor or DTensor.from_local")

    @staticmethod
    def _make(local, spec, requires_grad=False, cls=None):
        """The DTensor sharing `local`'s storage (a leaf)."""
        t = Tensor._make_subclass(cls or DTensor, local.detach(), bool(requires_grad))
        t._spec = spec
        return t

    # torch's attributes
    @property
    def device_mesh(self):
        return self._spec.mesh

    @property
    def placements(self):
        return self._spec.placements

    @property
    def _local_tensor(self):
        return self.detach()

    def to_local(self, *, grad_placements=None):
        """This rank's part as a plain tensor view (gradients flow back to the DTensor)."""
        return self.view(tuple(self.shape))

    def full_tensor(self, *, grad_placements=None):
        """The global value, a new plain tensor (collective over the mesh)."""
        with no_grad():
            return _full(self.detach(), self._spec)

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False,
                     forward_dtype=None, backward_dtype=None):
        """The same global value laid out by `placements` (collective)."""
        mesh = device_mesh if device_mesh is not None else self._spec.mesh
        if mesh != self._spec.mesh:
            raise NotImplementedError("DTensor.redistribute to another DeviceMesh is not "
                                      "supported by cddp (torch neither)")
        mesh, placements = _normalize(mesh, placements if placements is not None
                                      else self._spec.placements, len(self._spec.shape))
        with no_grad():
            if placements == self._spec.placements:
                local = self.detach()
            else:
                local = _local_part(_full(self.detach(), self._spec), mesh, placements)
            if forward_dtype is not None:
                local = local.to(forward_dtype)
        return DTensor._make(local, DTensorSpec(mesh, placements, self._spec.shape),
                             self.requires_grad)

    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False,
                   shape=None, stride=None):
        """A DTensor over `local_tensor`'s storage (no copy, no communication)."""
        mesh, placements = _normalize(device_mesh, placements, local_tensor.dim())
        if shape is None:
            g = list(local_tensor.shape)
            for i, p in enumerate(placements):
                if isinstance(p, Shard):
                    g[p.dim] *= mesh.size(i)
            shape = g
        spec = DTensorSpec(mesh, placements, shape)
        if tuple(local_shape(spec)) != tuple(local_tensor.shape):
            raise ValueError(f"DTensor.from_local: the local tensor's shape "
                             f"{list(local_tensor.shape)} is not this rank's part "
                             f"{list(local_shape(spec))} of shape {list(shape)} under "
                             f"{placements}")
        if run_check:
            # torch's check: replicated parts must agree; here shapes across the mesh
            for i, p in enumerate(placements):
                if isinstance(p, Replicate) and mesh.size(i) > 1:
                    ref = local_tensor.detach().clone()
                    _c10d.broadcast(ref, src=_c10d.get_global_rank(mesh.get_group(i), 0),
                                    group=mesh.get_group(i))
                    with no_grad():
                        local_tensor.copy_(ref)
        return DTensor._make(local_tensor, spec, local_tensor.requires_grad)

    def _as_parameter(self, requires_grad):
        """nn.Parameter(dtensor): a DTensor parameter over the same local part (torch's)."""
        return DTensor._make(self, self._spec, requires_grad, _DTensorParameter)

    def __repr__(self):
        local = Tensor.__repr__(self.detach())
        return (f"DTensor(local_tensor={local}, device_mesh={self._spec.mesh!r}, "
                f"placements={self._spec.placements})")

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        new = DTensor._make(self.detach().clone(), self._spec, self.requires_grad, type(self))
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, proto):
        raise TypeError("a cddp DTensor cannot be pickled (its DeviceMesh holds process "
                        "groups): save .to_local() or .full_tensor(), or use "
                        "cddp.distributed.checkpoint")


class _DTensorParameter(DTensor, Parameter):
    """A DTensor parameter: isinstance(p, DTensor) and isinstance(p, nn.Parameter), as
    torch's nn.Parameter(DTensor); fully_shard's shards are these."""

    def __repr__(self):
        return "Parameter containing:\n" + DTensor.__repr__(self)


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    """Lay `tensor` (the global value) out over the mesh: rank src_data_rank's copy is
    broadcast (None: no communication, every rank's own is used), then each rank keeps its
    part (see the module docstring)."""
    if getattr(tensor, "_is_dtensor", False):
        raise ValueError("distribute_tensor: the input is already a DTensor; use "
                         "redistribute")
    mesh, placements = _normalize(device_mesh, placements, tensor.dim())
    with no_grad():
        full = tensor.detach()
        if src_data_rank is not None and mesh.size() > 1:
            full = full.contiguous().clone()
            # broadcast along each mesh dimension in turn from its index src: afterwards
            # every rank holds the value of the rank at coordinate (src, ..., src)
            for i in range(mesh.ndim):
                g = mesh.get_group(i)
                if mesh.size(i) > 1:
                    _c10d.broadcast(full, src=_c10d.get_global_rank(g, src_data_rank),
                                    group=g)
        local = _local_part(full, mesh, placements)
    return DTensor._make(local, DTensorSpec(mesh, placements, tuple(tensor.shape)),
                         tensor.requires_grad)
