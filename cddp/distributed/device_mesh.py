"""cddp.distributed.device_mesh — torch's DeviceMesh: an n-dimensional array of global ranks
with one process group per dimension, the way FSDP (HYBRID_SHARD), DDP and hand-written 2-D
(data x model) parallel code take their groups.

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    mesh["tp"].get_group()      # this rank's row: the 4 ranks sharing its dp coordinate
    mesh.get_group("dp")        # this rank's column
    mesh.get_coordinate()       # (dp index, tp index)

Contract:
- Construction is collective over the default group (it is initialised from the environment
  first when it is not, as torch): for every dimension, every line of the mesh along it
  becomes a group (new_group, called by all ranks in the same order); a line that is the
  whole world in rank order reuses the default group. A rank outside the mesh gets no
  groups and get_coordinate() None.
- mesh[names] slices without creating groups: the submesh through this rank's coordinates,
  its dimensions (named in the mesh's order, as torch requires) each with the parent's group. mesh._flatten(name)
  merges dimensions into one (collective: new groups for every merged line) and registers
  it on the root mesh, so root[name] and root.get_group(name) find it.
- DeviceMesh.from_group wraps existing groups (no new ones).
- Groups are cddp process groups of the default group's backend; device_type is recorded
  ("cpu", "cuda" ...: no device is selected, cddp tensors live on the CPU here).

Differences from torch: only the minimal DTensor of cddp.distributed.tensor on top (no
tensor-parallel API); backend_override is refused; the mesh tensor is int32 as torch's,
built from the ranks given.
"""
import itertools
import math
import os

from .. import _C
from . import distributed_c10d as _c10d

__all__ = ["DeviceMesh", "init_device_mesh"]


def _as_rank_array(mesh):
    """(nested list of ints, shape) from a tensor, array or nested list of global ranks."""
    if isinstance(mesh, _C.Tensor):
        mesh = mesh.tolist()
    elif hasattr(mesh, "tolist"):
        mesh = mesh.tolist()
    shape, level = [], mesh
    while isinstance(level, (list, tuple)):
        shape.append(len(level))
        level = level[0] if level else None
    flat = list(_flatten_list(mesh, len(shape)))
    if len(flat) != math.prod(shape):
        raise ValueError(f"DeviceMesh: the mesh {mesh} is not a rectangular array of ranks")
    return flat, tuple(shape)


def _flatten_list(x, depth):
    if depth == 0:
        yield int(x)
        return
    if not isinstance(x, (list, tuple)):
        raise ValueError(f"DeviceMesh: the mesh is not a rectangular array of ranks ({x!r})")
    for item in x:
        yield from _flatten_list(item, depth - 1)


def _strides(shape):
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return tuple(reversed(out))


class DeviceMesh:
    """torch.distributed.device_mesh.DeviceMesh(device_type, mesh, *, mesh_dim_names=None)."""

    def __init__(self, device_type, mesh=None, *, mesh_dim_names=None, backend_override=None,
                 _init_backend=True):
        if not isinstance(device_type, str) or (device_type and not device_type.isalpha()):
            raise RuntimeError(f"Device type with index is not supported but got {device_type}. "
                               "If you maintained a 'torch.device' object, it's recommended to "
                               "pass in 'device.type'.")
        if backend_override is not None and any(o not in (None, (None, None))
                                                for o in backend_override):
            raise NotImplementedError("DeviceMesh(backend_override=...): cddp's mesh groups "
                                      "use the default group's backend")
        if mesh is None:
            raise ValueError("DeviceMesh: a mesh of global ranks is required")
        self._flat, self._shape = _as_rank_array(mesh)
        if len(set(self._flat)) != len(self._flat):
            raise RuntimeError(f"DeviceMesh: the mesh {self._nested()} repeats a rank")
        if mesh_dim_names is not None:
            mesh_dim_names = tuple(mesh_dim_names)
            if len(set(mesh_dim_names)) != len(mesh_dim_names):
                raise RuntimeError("Each mesh_dim_name must be unique. Found repeated "
                                   f"mesh_dim_name in mesh_dim_names {mesh_dim_names}")
            if len(mesh_dim_names) != len(self._shape):
                raise RuntimeError("mesh_shape and mesh_dim_names should have same length! "
                                   f"Found len(mesh_dim_names): {len(mesh_dim_names)} and "
                                   f"len(mesh_shape):{len(self._shape)}.")
        self.device_type = device_type
        self._mesh_dim_names = mesh_dim_names
        self._root = self
        self._flatten_mapping = {}
        self._groups = [None] * len(self._shape)
        if _init_backend:
            if not _c10d.is_initialized():
                _c10d.init_process_group()
            world = _c10d.get_world_size()
            if len(self._flat) > world:
                raise RuntimeError(f"Mesh should not be bigger than default world size {world}, "
                                   f"but found {len(self._flat)} ranks!")
            bad = [r for r in self._flat if not 0 <= r < world]
            if bad:
                raise RuntimeError(f"DeviceMesh: rank {bad[0]} is not in the default group of "
                                   f"{world} ranks")
            self._groups = [self._make_dim_groups(d) for d in range(len(self._shape))]
        self._coordinate = self._coordinate_of(_c10d.get_rank() if _c10d.is_initialized()
                                               else -1)

    # ---- geometry -----------------------------------------------------------------------

    def _index(self, coord):
        return sum(c * s for c, s in zip(coord, _strides(self._shape)))

    def _coordinate_of(self, rank):
        if rank not in self._flat:
            return None
        pos, coord = self._flat.index(rank), []
        for s in _strides(self._shape):
            coord.append(pos // s)
            pos %= s
        return tuple(coord)

    def _lines(self, dims):
        """Every line of the mesh through `dims` (the other coordinates fixed), as rank lists in
        the order of dims' coordinates."""
        others = [d for d in range(len(self._shape)) if d not in dims]
        for fixed in itertools.product(*(range(self._shape[d]) for d in others)):
            line = []
            for moving in itertools.product(*(range(self._shape[d]) for d in dims)):
                coord = [0] * len(self._shape)
                for d, c in zip(others, fixed):
                    coord[d] = c
                for d, c in zip(dims, moving):
                    coord[d] = c
                line.append(self._flat[self._index(coord)])
            yield line

    def _make_dim_groups(self, *dims):
        """The group of this rank's line through dims (None outside the mesh); every rank
        creates every line's group, in the same order."""
        me, mine = _c10d.get_rank(), None
        world = _c10d.get_world_size()
        for line in self._lines(list(dims)):
            if line == list(range(world)):
                g = _c10d.group.WORLD            # the whole world in rank order: reuse it
            else:
                g = _c10d.new_group(line)
            if me in line:
                mine = g
        return mine

    def _nested(self):
        def build(offset, dims):
            if not dims:
                return self._flat[offset]
            step = math.prod(dims[1:])
            return [build(offset + i * step, dims[1:]) for i in range(dims[0])]
        return build(0, list(self._shape))

    # ---- torch's API ---------------------------------------------------------------------

    @property
    def mesh(self):
        return _C.tensor(self._nested(), dtype=_C.int32)

    @property
    def mesh_dim_names(self):
        return self._mesh_dim_names

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def shape(self):
        return tuple(self._shape)

    def size(self, mesh_dim=None):
        return len(self._flat) if mesh_dim is None else self._shape[self._dim(mesh_dim)]

    def _dim(self, mesh_dim):
        if isinstance(mesh_dim, str):
            if not self._mesh_dim_names or mesh_dim not in self._mesh_dim_names:
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh "
                               f"dimensions are: mesh_dim_names={self._mesh_dim_names}")
            return self._mesh_dim_names.index(mesh_dim)
        if not isinstance(mesh_dim, int) or not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"DeviceMesh: mesh_dim {mesh_dim!r} is out of range for a "
                             f"{self.ndim}-D mesh")
        return mesh_dim % self.ndim

    def get_group(self, mesh_dim=None):
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional "
                                   "kwarg `mesh_dim` needs to be specified when "
                                   "device_mesh.ndim > 1. If you want to get the list of all "
                                   "the ProcessGroups in the DeviceMesh, please use "
                                   "`get_all_groups()` instead.")
            mesh_dim = 0
        if isinstance(mesh_dim, str) and mesh_dim in self._root._flatten_mapping:
            return self._root._flatten_mapping[mesh_dim].get_group()
        group = self._groups[self._dim(mesh_dim)]
        if group is None:
            raise RuntimeError(f"DeviceMesh: rank {_c10d.get_rank()} is not part of this mesh "
                               f"{self._nested()}")
        return group

    def get_all_groups(self):
        return [self.get_group(d) for d in range(self.ndim)]

    def get_rank(self):
        return _c10d.get_rank()

    def get_local_rank(self, mesh_dim=None):
        if self.ndim > 1 and mesh_dim is None:
            raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional "
                               "kwarg `mesh_dim` needs to be specified when "
                               "device_mesh.ndim > 1.")
        return _c10d.get_rank(self.get_group(0 if mesh_dim is None else mesh_dim))

    def get_coordinate(self):
        return self._coordinate

    def __getitem__(self, mesh_dim_names):
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
        if names == self._mesh_dim_names:
            return self
        if len(names) == 1 and names[0] in self._root._flatten_mapping:
            return self._root._flatten_mapping[names[0]]
        missing = [n for n in names if n not in self._mesh_dim_names]
        if missing:
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Valid mesh_dim_names "
                           f"are {self._mesh_dim_names}.")
        if len(set(names)) != len(names):
            raise KeyError(f"Invalid mesh_dim_names {names}: a dimension is named twice")
        dims = [self._mesh_dim_names.index(n) for n in names]
        if dims != sorted(dims):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Mesh dim indices should "
                           "be in ascending order.")
        if self._coordinate is None:
            raise RuntimeError(f"DeviceMesh: rank {_c10d.get_rank()} is not part of the mesh "
                               f"{self._nested()} and has no submesh")
        line = self._line_through_me(dims)
        sub = DeviceMesh(self.device_type, _reshape(line, [self._shape[d] for d in dims]),
                         mesh_dim_names=names, _init_backend=False)
        sub._groups = [self._groups[d] for d in dims]
        sub._root = self._root
        return sub

    def _line_through_me(self, dims):
        for line in self._lines(dims):
            if _c10d.get_rank() in line:
                return line
        raise RuntimeError("DeviceMesh: this rank is not part of the mesh")

    def _flatten(self, mesh_dim_name=None, backend_override=None):
        """A 1-D mesh over all of this mesh's dimensions (collective: makes its groups),
        registered on the root under mesh_dim_name (default: the names joined by "_")."""
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot flatten a DeviceMesh without mesh_dim_names!")
        name = mesh_dim_name or "_".join(self._mesh_dim_names)
        if self.ndim == 1 and name in self._mesh_dim_names:
            return self
        root = self._root
        if name in root._flatten_mapping:
            return root._flatten_mapping[name]
        if root._mesh_dim_names and name in root._mesh_dim_names:
            raise RuntimeError(f"{name} already exists for submesh of the {root}. The mesh_dim_"
                               "names of submesh and flattened mesh are reserved.")
        # every rank of the root makes the groups of every flattened line
        dims = [root._mesh_dim_names.index(n) for n in self._mesh_dim_names]
        group = root._make_dim_groups(*dims)
        if root._coordinate is None:
            return None
        flat = DeviceMesh(self.device_type, root._line_through_me(dims),
                          mesh_dim_names=(name,), _init_backend=False)
        flat._groups = [group]
        flat._root = root
        root._flatten_mapping[name] = flat
        return flat

    @staticmethod
    def from_group(group, device_type, mesh=None, *, mesh_dim_names=None):
        """A mesh over existing groups: one group (1-D; mesh defaults to its ranks) or a list
        (mesh and mesh_dim_names required, one group per dimension)."""
        if not isinstance(group, (list, tuple)):
            ranks = _c10d.get_process_group_ranks(group)
            if mesh is not None and _as_rank_array(mesh)[0] != ranks:
                raise ValueError(f"Invalid mesh {mesh} for ProcessGroup with ranks {ranks}")
            out = DeviceMesh(device_type, ranks, mesh_dim_names=mesh_dim_names,
                             _init_backend=False)
            out._groups = [group]
            return out
        groups = list(group)
        if not groups:
            raise ValueError("Expects at least one ProcessGroup to be passed")
        if mesh is None:
            raise ValueError("Must pass mesh if passing multiple ProcessGroups")
        if mesh_dim_names is None:
            raise ValueError("Must pass mesh_dim_names if passing multiple ProcessGroups")
        out = DeviceMesh(device_type, mesh, mesh_dim_names=mesh_dim_names, _init_backend=False)
        if out.ndim != len(groups):
            raise ValueError("Expects mesh with ndim equal to number of ProcessGroups but got "
                             f"mesh {out._nested()} and {len(groups)} ProcessGroups")
        out._groups = groups
        return out

    def _stride(self):
        """Each dimension's step in global ranks (torch's layout strides)."""
        out = []
        for d, n in enumerate(self._shape):
            if n > 1:
                unit = [0] * len(self._shape)
                unit[d] = 1
                out.append(self._flat[self._index(unit)] - self._flat[0])
            else:
                out.append(math.prod(self._shape[d + 1:]))
        return tuple(out)

    def __repr__(self):
        dims = (f"({', '.join(f'{k}={v}' for k, v in zip(self._mesh_dim_names, self._shape))})"
                if self._mesh_dim_names else f"{self.shape}")
        text = f"DeviceMesh({dims}, '{self.device_type}', stride={self._stride()}"
        if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "") == "DETAIL":
            text += f", Mesh: {self._nested()}"
        return text + ")"

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, DeviceMesh):
            return False
        return ((self._flat, self._shape, self.device_type, self._mesh_dim_names)
                == (other._flat, other._shape, other.device_type, other._mesh_dim_names))

    def __hash__(self):
        return hash((tuple(self._flat), self._shape, self.device_type, self._mesh_dim_names))


def _reshape(flat, shape):
    if len(shape) <= 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [_reshape(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A mesh of the given shape over global ranks 0 .. prod(mesh_shape) - 1 in row-major
    order, with its groups (collective over the default group)."""
    mesh_shape = tuple(int(s) for s in mesh_shape)
    if mesh_dim_names is not None:
        mesh_dim_names = tuple(mesh_dim_names)
        if len(set(mesh_dim_names)) != len(mesh_dim_names):
            raise RuntimeError("Each mesh_dim_name must be unique. Found repeated mesh_dim_name "
                               f"in mesh_dim_names {mesh_dim_names}")
        if len(mesh_shape) != len(mesh_dim_names):
            raise RuntimeError("mesh_shape and mesh_dim_names should have same length! Found "
                               f"len(mesh_dim_names): {len(mesh_dim_names)} and "
                               f"len(mesh_shape):{len(mesh_shape)}.")
    if any(s <= 0 for s in mesh_shape):
        raise RuntimeError(f"init_device_mesh: mesh_shape {mesh_shape} must be positive sizes")
    if backend_override:
        raise NotImplementedError("init_device_mesh(backend_override=...): cddp's mesh groups "
                                  "use the default group's backend")
    ranks = _reshape(list(range(math.prod(mesh_shape))), list(mesh_shape))
    return DeviceMesh(device_type, ranks, mesh_dim_names=mesh_dim_names)
