"""cddp.distributed.distributed_c10d — torch.distributed's collective API over cddp's C process
group (csrc/pg_*.c): init_process_group / new_group / destroy_process_group, the collectives
with torch's signatures (async_op=True returns a Work), send/recv, barriers, and the object
collectives (JSON instead of pickle: no code from a peer ever runs here).

Backends: "cpu" and "gloo" select the C engine (shared memory between ranks on one host, TCP
between hosts; CDDP_TRANSPORT=tcp forces TCP). "nccl" selects it too when no GPU is present,
after the one CUDA-to-CPU warning per process that cddp gives (CDDP_STRICT_DEVICE=1: error).
"mpi" runs the same engine on the MPI library (cddp._mpi, built when MPI was found at build
time): rank and world size come from MPI (mpirun / srun), no store is needed, subgroups are
MPI_Comm_split communicators.

Under SLURM (srun) env:// needs nothing set: SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID give
RANK, WORLD_SIZE and LOCAL_RANK, the first host of SLURM_JOB_NODELIST is MASTER_ADDR and the
job id picks MASTER_PORT (distributed/_slurm.py); the values are written to os.environ.

Tensors go to the engine as they are when contiguous; otherwise through a contiguous copy that
is copied back (at wait() for async ops). List variants (all_gather(list, t), gather, scatter,
reduce_scatter(out, list)) go through one flat buffer.

Ranks: src/dst arguments are global ranks, as in torch (group_src/group_dst: ranks within the
group). A rank outside a group gets GroupMember.NON_GROUP_MEMBER from new_group; collectives on
it warn and return None, as torch's do.
"""
import atexit
import base64
import datetime
import enum
import json
import os
import sys
import time
import warnings

import numpy as np

from .. import _C
from ..futures import Future

try:                                   # the store helper's error hierarchy, when present
    from .store import DistError as _DistErrorBase
except Exception:                      # noqa: BLE001 — any import problem: plain RuntimeError
    _DistErrorBase = RuntimeError

ProcessGroupCPU, Work, DistBackendError, DistTimeoutError = _C._pg_types(_DistErrorBase)

__all__ = [
    "Backend", "get_default_backend_for_device", "ReduceOp", "reduce_op", "GroupMember", "group", "ProcessGroup", "Work", "P2POp",
    "DistBackendError", "DistTimeoutError",
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "is_gloo_available", "is_nccl_available", "is_mpi_available", "is_ucc_available",
    "is_torchelastic_launched", "new_group", "get_rank", "get_world_size", "get_backend",
    "get_process_group_ranks", "get_global_rank", "get_group_rank",
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather",
    "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "barrier", "monitored_barrier", "Future",
    "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
    "default_pg_timeout",
]

default_pg_timeout = datetime.timedelta(minutes=30)


# ---- enums and group handles -----------------------------------------------------------------

class ReduceOp(enum.IntEnum):
    """torch.distributed.ReduceOp (numbers match the C engine)."""
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7

    def __repr__(self):
        return f"<RedOpType.{self.name}: {int(self)}>"

    def __str__(self):
        return f"RedOpType.{self.name}"


ReduceOp.RedOpType = ReduceOp          # torch spells members ReduceOp.RedOpType.SUM too


class _reduce_op:  # noqa: N801  (torch's name)
    """torch.distributed.reduce_op: the deprecated spelling of ReduceOp (its members, with
    torch's FutureWarning on each use)."""

    def __init__(self):
        for k, v in ReduceOp.__members__.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "__members__", ReduceOp.__members__)

    def __getattribute__(self, key):
        warnings.warn("`torch.distributed.reduce_op` is deprecated, please use "
                      "`torch.distributed.ReduceOp` instead", FutureWarning, stacklevel=2)
        return object.__getattribute__(self, key)


reduce_op = _reduce_op()


class Backend(str):
    """torch.distributed.Backend: Backend("GLOO") == "gloo"."""
    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    UCC = "ucc"
    MPI = "mpi"
    CPU = "cpu"

    def __new__(cls, name):
        if not isinstance(name, str):
            raise ValueError(f"Backend name must be a string, but got: {name}")
        return str.__new__(cls, name.lower())


# torch's device -> default backend table; on cddp "nccl" is the CPU engine until a GPU build
Backend.default_device_backend_map = {"cpu": Backend.GLOO, "cuda": Backend.NCCL}


def get_default_backend_for_device(device):
    """torch.distributed.get_default_backend_for_device: 'gloo' for cpu, 'nccl' for cuda."""
    kind = device if isinstance(device, str) else getattr(device, "type", None)
    if not isinstance(kind, str):
        raise TypeError(f"get_default_backend_for_device: expected a str or device, got "
                        f"{type(device).__name__}")
    kind = kind.split(":")[0]
    if kind not in Backend.default_device_backend_map:
        raise ValueError(f"Default backend not registered for device : {kind}")
    return Backend.default_device_backend_map[kind]


class _NonMember:
    def __repr__(self):
        return "GroupMember.NON_GROUP_MEMBER"


class _WorldMeta(type):
    @property
    def WORLD(cls):
        return _world.default


class GroupMember(metaclass=_WorldMeta):
    """GroupMember.WORLD: the default group (None before init); NON_GROUP_MEMBER: what
    new_group returns on ranks outside the group."""
    NON_GROUP_MEMBER = -100


class group(metaclass=_WorldMeta):     # noqa: N801 — torch's name: dist.group.WORLD
    pass


class ProcessGroup:
    """A group of ranks (torch.distributed.ProcessGroup): rank(), size(), group_name.
    Wraps the C engine object (ProcessGroupCPU) plus the group-rank <-> global-rank map."""

    def __init__(self, cpg, ranks, backend, name, store):
        self._c = cpg
        self._ranks = list(ranks)
        self._index = {g: i for i, g in enumerate(self._ranks)}
        self._backend = backend
        self._name = name
        self._store = store
        self._barrier_seq = 0

    def rank(self):
        return self._c.rank

    def size(self):
        return self._c.size

    def name(self):
        return self._backend

    @property
    def group_name(self):
        return self._name

    @property
    def transport(self):
        """'shm', 'tcp', 'hier' or 'mpi' (cddp extension)."""
        return self._c.transport

    def __repr__(self):
        return (f"ProcessGroup(name={self._name!r}, backend={self._backend!r}, "
                f"rank={self._c.rank}, size={self._c.size}, transport={self._c.transport!r})")


class _World:
    def __init__(self):
        self.default = None             # ProcessGroup
        self.store = None
        self.backend = None
        self.groups = []                # every live ProcessGroup (default first)
        self.count = 0                  # new_group calls (the same on every rank)


_world = _World()


# ---- small helpers --------------------------------------------------------------------------

_TensorT = _C.Tensor


def _Tensor():
    return _TensorT


def _check_tensor(t, name="tensor", op=None, opname=None):
    """t as the engine moves it: a complex tensor as its (..., 2) real view sharing its memory
    (torch's view_as_real), refusing the reductions complex numbers lack (op given)."""
    if isinstance(t, _TensorT):
        return t
    if getattr(t, "_is_complex_tensor", False):
        if op is not None and _red(op) not in (ReduceOp.SUM, ReduceOp.AVG):
            raise ValueError(f"{opname} does not support {_red(op)} on complex tensors")
        from .. import view_as_real
        return view_as_real(t)
    raise TypeError(f"Invalid function argument. Expected parameter `{name}` of type "
                    f"torch.Tensor but got {type(t)} instead.")


def _check_list(lst, name):
    """lst's tensors as _check_tensor gives them."""
    if not isinstance(lst, (list, tuple)) or not all(
            isinstance(t, _Tensor()) or getattr(t, "_is_complex_tensor", False) for t in lst):
        raise TypeError(f"Invalid function argument. Expected parameter `{name}` of type "
                        f"List[torch.Tensor] but got {type(lst)} instead.")
    return [_check_tensor(t, name) for t in lst]


def _np(t):
    """NumPy view of a cddp tensor's memory (no copy); bfloat16, which NumPy lacks, as its
    raw 16-bit words (int16), which is all the data-movement paths below need."""
    t = t.detach()
    if t.dtype == _bf16():
        return np.asarray(memoryview(t)).view(np.int16)
    return t.numpy()


def _bf16():
    from .. import bfloat16
    return bfloat16


def _from_np(a):
    from .. import from_numpy
    return from_numpy(a)


def _empty_flat(t, n):
    from .. import empty
    return empty(n, dtype=t.dtype)


def _timedelta(timeout, name="timeout"):
    """monitored_barrier's timeout: a timedelta, or seconds (torch converts floats too)."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return datetime.timedelta(seconds=timeout)
    raise TypeError(f"Expected {name} argument to be of type datetime.timedelta, got {type(timeout)}")


def _group_timeout(timeout, default):
    """A group's timeout as torch takes it: a positive datetime.timedelta (torch's TypeError
    for anything else, ints included), or None for `default`."""
    if timeout is None:
        return default
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got "
                        f"{timeout!r}")
    if timeout.total_seconds() <= 0:
        raise ValueError(f"timeout must be a positive duration, got {timeout} "
                         f"({timeout.total_seconds():g} s)")
    return timeout


class _NotInitializedError(ValueError, RuntimeError):
    """Use before init_process_group: torch >= 2 raises ValueError here and torch 1.x raised
    RuntimeError; scripts catch either, so this is both."""


class _ArgumentError(ValueError, RuntimeError):
    """A collective's bad argument (a root out of range, a list of the wrong length, tensors
    of the wrong size): gloo raises RuntimeError where cddp's Python checks say ValueError
    first, so this is both."""


class _ArgumentTypeError(TypeError, RuntimeError):
    """The same for a wrong dtype (TypeError here, RuntimeError from gloo)."""


def _default():
    if _world.default is None:
        raise _NotInitializedError("Default process group has not been initialized, please "
                                   "make sure to call init_process_group.")
    return _world.default


def _resolve(grp, opname):
    """The ProcessGroup for `grp` (None = default), or None when this rank is not in it
    (torch warns and the collective returns None)."""
    if grp is None:
        return _default()
    if isinstance(grp, ProcessGroup):
        if grp._c is None:
            raise RuntimeError("Invalid process group specified (it was destroyed)")
        _default()
        return grp
    if isinstance(grp, int) and grp == GroupMember.NON_GROUP_MEMBER:
        warnings.warn(f"Running {opname} on global rank {get_rank()} which does not belong to "
                      f"the given group.", stacklevel=3)
        return None
    raise TypeError(f"{opname}: group must be a ProcessGroup or None, got {type(grp).__name__}")


def _group_rank(pg, rank, group_rank, what, opname, default=None):
    """Group-local rank from a global `rank` (torch's src/dst) or a `group_rank`. With neither,
    `default` (a global rank: 0 for gather/scatter and the object ops, as torch) or torch's
    ValueError."""
    if group_rank is not None:
        if rank is not None:
            raise ValueError("Can't specify both group_rank and global_rank")
        if not 0 <= group_rank < pg.size():
            raise _ArgumentError(f"{opname}: group_{what}={group_rank} is out of range for a group "
                             f"of size {pg.size()}")
        return group_rank
    if rank is None:
        if default is None:
            raise ValueError("Must specify global_rank or group_rank")
        rank = default
    if pg is _world.default:
        if not 0 <= rank < pg.size():
            raise _ArgumentError(f"{opname}: {what}={rank} is out of range for a world of size "
                             f"{pg.size()}")
        return rank
    try:
        return pg._index[rank]
    except KeyError:
        raise ValueError(f"Global rank {rank} is not part of group {pg.group_name}") from None


def _red(op):
    if type(op) is ReduceOp:
        return op
    try:
        return ReduceOp(op)
    except ValueError:
        raise ValueError(f"unsupported reduce op {op!r} (cddp supports ReduceOp.SUM, AVG, "
                         f"PRODUCT, MIN, MAX, BAND, BOR, BXOR)") from None


class _PostWork:
    """A Work whose outputs are copied into the caller's tensors once it completes
    (non-contiguous tensors, list variants). wait() runs the copy once."""

    def __init__(self, work, post, outputs):
        self._work = work
        self._post = post
        self._outputs = outputs
        self._done = False

    def _finish(self):
        if not self._done:
            self._done = True
            self._post()

    def wait(self, timeout=None):
        self._work.wait(timeout)
        self._finish()
        return True

    synchronize = wait

    def is_completed(self):
        done = self._work.is_completed()
        if done and self._work.is_success():
            self._finish()
        return done

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def result(self):
        return list(self._outputs)

    def _source_rank(self):
        return self._work._source_rank()


def _get_future(self):
    """torch's Work.get_future(): a Future of the Work's output tensors (cddp.futures)."""
    return Future._deferred(lambda: (self.wait(), self.result())[1], ready=self.is_completed)


Work.get_future = _get_future          # the engine's Work (a C type) gains torch's get_future
_PostWork.get_future = _get_future


def _call(fn, args, async_op, post=None, outputs=()):
    """Run engine method fn(*args): synchronously (sync=True: on this thread when the group is
    idle, no Work object) or async, wrapping the Work when outputs need copying back."""
    if not async_op:
        fn(*args, True)
        if post is not None:
            post()
        return None
    w = fn(*args)
    return w if post is None else _PostWork(w, post, outputs)


def _finish(work, async_op, post=None, outputs=()):
    """Return what the collective returns: the Work (async) or None after waiting."""
    if post is None:
        if async_op:
            return work
        work.wait()
        return None
    if async_op:
        return _PostWork(work, post, outputs)
    work.wait()
    post()
    return None


def _contig(t):
    """(tensor to hand to C, copy-back function or None)."""
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, (lambda: _np(t).__setitem__(Ellipsis, _np(c)))


# ---- init / groups --------------------------------------------------------------------------

def is_available():
    return True


def is_gloo_available():
    return True


def is_nccl_available():
    """The CPU engine stands in for NCCL (init_process_group("nccl") works without a GPU)."""
    return True


def _mpi_module():
    """cddp._mpi, or None when cddp was built without MPI."""
    try:
        from .. import _mpi
    except ImportError:
        return None
    return _mpi


def is_mpi_available():
    """True when cddp was built with MPI (cddp._mpi exists)."""
    return _mpi_module() is not None


def is_ucc_available():
    return False


def is_torchelastic_launched():
    return os.getenv("TORCHELASTIC_RUN_ID") is not None


def is_initialized():
    return _world.default is not None


def _backend_name(backend):
    """'cpu' | 'gloo' | 'nccl' (warned) -> the name get_backend reports."""
    if backend is None:
        return Backend.GLOO
    b = str(backend).lower()
    if ":" in b:                                   # "cpu:gloo,cuda:nccl"
        parts = dict(p.split(":", 1) for p in b.split(",") if ":" in p)
        b = parts.get("cpu") or parts.get("cuda") or "gloo"
    if b in ("gloo", "cpu"):
        return Backend.GLOO
    if b == "nccl":
        _nccl_fallback()
        return Backend.NCCL
    if b == "mpi":
        return Backend.MPI
    raise ValueError(f"Invalid backend: '{backend}' (cddp supports 'gloo', 'cpu', 'nccl' and "
                     f"'mpi')")


def _nccl_fallback():
    """cddp has no NCCL engine: the CPU engine runs instead, after the one CUDA->CPU warning
    per process (raises under CDDP_STRICT_DEVICE=1) — the same warning .cuda() gives."""
    from .. import tensor
    tensor([0.0]).to("cuda")


def _env_int(name, method):
    v = os.environ.get(name)
    if v is None:
        raise ValueError(f"Error initializing torch.distributed using {method} rendezvous: "
                         f"environment variable {name} expected, but not set")
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"Error initializing torch.distributed using {method} rendezvous: "
                         f"environment variable {name} is not an integer: {v!r}") from None


def _slurm_env():
    """Under srun (and outside any launcher): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT from SLURM's variables where unset, written to os.environ so the script sees
    the same values."""
    from . import _slurm
    if not _slurm.in_slurm_step():
        return
    env = os.environ
    fill = {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_NTASKS"]}
    if "SLURM_LOCALID" in env:
        fill["LOCAL_RANK"] = env["SLURM_LOCALID"]
    first = _slurm.first_host(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", ""))
    if first:
        fill["MASTER_ADDR"] = first
    fill["MASTER_PORT"] = str(_slurm.default_port(env.get("SLURM_JOB_ID", "")))
    for k, v in fill.items():
        env.setdefault(k, v)


def _parse_query(q):
    out = {}
    for part in filter(None, q.split("&")):
        k, _, v = part.partition("=")
        out[k] = v
    return out


def _rendezvous(init_method, rank, world_size, timeout):
    """Build the store for init_method (env://, tcp://host:port, file:///path); returns
    (store, rank, world_size). The store classes are imported here (cddp.distributed.store)."""
    from urllib.parse import urlparse
    u = urlparse(init_method)
    q = _parse_query(u.query)
    if "rank" in q:
        rank = int(q["rank"])
    if "world_size" in q:
        world_size = int(q["world_size"])
    if u.scheme == "env":
        method = "env://"
        _slurm_env()
        if rank < 0:
            rank = _env_int("RANK", method)
        if world_size < 0:
            world_size = _env_int("WORLD_SIZE", method)
        host = os.environ.get("MASTER_ADDR")
        if host is None:
            raise ValueError(f"Error initializing torch.distributed using {method} rendezvous: "
                             f"environment variable MASTER_ADDR expected, but not set")
        port = _env_int("MASTER_PORT", method)
    elif u.scheme == "tcp":
        if rank == -1 or world_size == -1:
            raise ValueError("Error initializing torch.distributed using tcp:// rendezvous: "
                             "rank and world_size must be given (arguments or ?rank=&world_size=)")
        host, port = u.hostname, u.port
        if not host or not port:
            raise ValueError(f"tcp:// init_method needs host and port, got {init_method!r}")
    elif u.scheme == "file":
        if rank == -1 or world_size == -1:
            raise ValueError("Error initializing torch.distributed using file:// rendezvous: "
                             "rank and world_size must be given")
        _check_rank(rank, world_size)
        from .store import FileStore
        return FileStore(u.path, world_size), rank, world_size
    else:
        raise ValueError(f"No rendezvous handler for {u.scheme}://")
    _check_rank(rank, world_size)
    from .store import PrefixStore, TCPStore
    # under an agent that hosts the store itself (a multi-node cddp.run), every rank is a
    # client and each restart gets its own keys, as torch's env:// handler does
    agent = u.scheme == "env" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = TCPStore(host, port, world_size, rank == 0 and not agent, timeout=timeout)
    if agent:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = PrefixStore(f"/worker/attempt_{attempt}", store)
    return store, rank, world_size


def _check_rank(rank, world_size):
    if world_size <= 0:
        raise ValueError(f"world_size must be positive, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"Invalid rank {rank}: rank must be in [0, {world_size}) for world "
                         f"size {world_size}")


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """torch.distributed.init_process_group: the default group of world_size ranks.

    Rendezvous: `store` if given (then rank and world_size are required), else init_method
    ("env://" by default: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; SLURM_PROCID and
    SLURM_NTASKS stand in for RANK and WORLD_SIZE), "tcp://host:port" or "file:///path"."""
    if _world.default is not None:
        raise ValueError("trying to initialize the default process group twice!")
    timeout = _group_timeout(timeout, default_pg_timeout)
    name = _backend_name(backend)
    if name == Backend.MPI:
        return _init_mpi(timeout, world_size, rank, group_name or "default")
    if store is not None:
        if init_method is not None:
            raise ValueError("Cannot specify both init_method and store.")
        if world_size <= 0:
            raise ValueError("world_size must be positive if using store")
        if rank < 0:
            raise ValueError("rank must be non-negative if using store")
        _check_rank(rank, world_size)
    else:
        store, rank, world_size = _rendezvous(init_method or "env://", rank, world_size, timeout)
    cpg = ProcessGroupCPU(store, rank, world_size, timeout.total_seconds(),
                          group_name or "default")
    pg = ProcessGroup(cpg, range(world_size), name, group_name or "default", store)
    _world.default = pg
    _world.store = store
    _world.backend = name
    _world.groups = [pg]
    _world.count = 0
    return None


class _MPIState:
    atexit = False          # finalize registered
    crashed = False         # an uncaught exception is ending the process


def _init_mpi(timeout, world_size, rank, name):
    """init_process_group("mpi"): the world from MPI (no store), finalized at exit."""
    mpi = _mpi_module()
    if mpi is None:
        raise RuntimeError("Distributed package doesn't have MPI built in: cddp was built "
                           "without an MPI library. Install one (Debian/Ubuntu: apt-get install "
                           "libopenmpi-dev openmpi-bin), then reinstall cddp (pip install . or "
                           "python setup.py build_ext --inplace) so that cddp._mpi is built")
    r, n, _level = mpi.init()
    if (world_size not in (-1, n)) or (rank not in (-1, r)):
        warnings.warn(f"For MPI backend, world_size ({world_size}) and rank ({rank}) are "
                      f"ignored since they are assigned by the MPI runtime.", stacklevel=3)
    if not _MPIState.atexit:
        _MPIState.atexit = True
        atexit.register(_mpi_atexit)
        hook = sys.excepthook

        def excepthook(*a):
            _MPIState.crashed = True
            hook(*a)
        sys.excepthook = excepthook
    cpg = ProcessGroupCPU._external(mpi.transport(None, 0, timeout.total_seconds()), r, n,
                                    timeout.total_seconds(), name)
    pg = ProcessGroup(cpg, range(n), Backend.MPI, name, None)
    _world.default, _world.store, _world.backend = pg, None, Backend.MPI
    _world.groups = [pg]
    _world.count = 0
    return None


def _mpi_atexit():
    """Groups first (their queued work gets a few seconds), then MPI_Finalize — unless an
    uncaught exception is ending this rank: then the process exits non-zero without it, so
    that mpirun / srun stop the other ranks at once instead of leaving them waiting in
    MPI_Finalize or a collective for this one."""
    mpi = _mpi_module()
    for pg in reversed(_world.groups):
        try:
            _shutdown(pg, min(3.0, pg._c.timeout))
        except Exception:       # noqa: BLE001 — nothing to report to at exit
            pass
    if mpi is None or mpi.finalized() or _MPIState.crashed:
        return
    mpi.finalize()


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None, device_id=None):
    """torch.distributed.new_group: every rank of the default group must call it, in the same
    order; ranks outside `ranks` get GroupMember.NON_GROUP_MEMBER."""
    world = _default()
    _world.count += 1
    n = world.size()
    if ranks is None:
        ranks = list(range(n))
    ranks = sorted(int(r) for r in ranks)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group: duplicate ranks in {ranks}")
    for r in ranks:
        if not 0 <= r < n:
            raise ValueError(f"new_group: rank {r} is out of range for a world of size {n}")
    name_b = _backend_name(backend) if backend is not None else _world.backend
    timeout = _group_timeout(timeout, datetime.timedelta(seconds=world._c.timeout))
    me = world.rank()
    gname = f"{world.group_name}.sub{_world.count}"
    if (name_b == Backend.MPI) != (_world.backend == Backend.MPI):
        raise ValueError(f"new_group(backend={name_b!r}): the default group uses "
                         f"{_world.backend!r}; cddp makes subgroups of the default group's own "
                         f"backend only (MPI groups have no store, store groups no MPI "
                         f"communicator)")
    if not use_local_synchronization:
        _check_members(world, ranks)
    if name_b == Backend.MPI:           # collective over the world, members or not
        cap = _mpi_module().transport(0 if me in ranks else -1, ranks.index(me) if me in ranks
                                      else 0, timeout.total_seconds())
        if cap is None:
            return GroupMember.NON_GROUP_MEMBER
        cpg = ProcessGroupCPU._external(cap, ranks.index(me), len(ranks),
                                        timeout.total_seconds(), gname)
        pg = ProcessGroup(cpg, ranks, name_b, gname, None)
        _world.groups.append(pg)
        return pg
    if me not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    cpg = ProcessGroupCPU(_world.store, ranks.index(me), len(ranks), timeout.total_seconds(),
                          gname)
    pg = ProcessGroup(cpg, ranks, name_b, gname, _world.store)
    _world.groups.append(pg)
    return pg


def _check_members(world, ranks):
    """Every rank of the world passes its member list (a bit mask) through one all_gather; a
    disagreement raises DistBackendError on every rank naming the lists, instead of ranks
    building groups of different sizes that cannot meet."""
    n = world.size()
    words = (n + 63) // 64
    mask = np.zeros(words, np.uint64)
    for r in ranks:
        mask[r // 64] |= np.uint64(1) << np.uint64(r % 64)
    out = _from_np(np.zeros(n * words, np.int64))
    world._c.allgather(out, _from_np(mask.view(np.int64)), True)
    rows = _np(out).view(np.uint64).reshape(n, words)
    if (rows == rows[0]).all():
        return
    lists = {}
    for r in range(n):
        members = tuple(i for i in range(n) if int(rows[r, i // 64]) >> (i % 64) & 1)
        lists.setdefault(members, []).append(r)
    said = "; ".join(f"rank{'s' if len(who) > 1 else ''} {', '.join(map(str, who))} passed "
                     f"{list(members)}" for members, who in lists.items())
    raise DistBackendError(f"new_group #{_world.count}: the ranks disagree on the group's "
                           f"members: {said}. Every rank must make the same new_group calls with the "
                           "same ranks")


def destroy_process_group(group=None):
    """Shut down `group` (None: every group, and forget the default one). Queued work finishes
    first (up to the group's timeout), as torch's gloo drains its queue."""
    if group is None or group is _world.default:
        for pg in reversed(_world.groups):
            _shutdown(pg)
        _world.__init__()
        return
    if isinstance(group, int) and group == GroupMember.NON_GROUP_MEMBER:
        return
    _shutdown(group)
    if group in _world.groups:
        _world.groups.remove(group)


def _shutdown(pg, timeout=None):
    if pg._c is not None:
        pg._c.shutdown(timeout)


@atexit.register
def _atexit_shutdown():
    # unwaited async work gets a few seconds; a live but stuck peer must not hang the exit
    for pg in reversed(_world.groups):
        try:
            _shutdown(pg, min(3.0, pg._c.timeout))
        except Exception:       # noqa: BLE001 — nothing to report to at exit
            pass


def get_rank(group=None):
    """Rank in `group` (global rank for the default group); -1 when not a member."""
    if isinstance(group, int) and group == GroupMember.NON_GROUP_MEMBER:
        return -1
    return (_default() if group is None else group).rank()


def get_world_size(group=None):
    if isinstance(group, int) and group == GroupMember.NON_GROUP_MEMBER:
        return -1
    return (_default() if group is None else group).size()


def get_backend(group=None):
    if isinstance(group, int) and group == GroupMember.NON_GROUP_MEMBER:
        raise ValueError("Invalid process group specified")
    return (_default() if group is None else group)._backend


def get_process_group_ranks(group):
    pg = _default() if group is None else group
    return list(pg._ranks)


def get_global_rank(group, group_rank):
    pg = _default() if group is None else group
    if not 0 <= group_rank < pg.size():
        raise ValueError(f"Group rank {group_rank} is not part of group {pg.group_name}")
    return pg._ranks[group_rank]


def get_group_rank(group, global_rank):
    pg = _default() if group is None else group
    try:
        return pg._index[global_rank]
    except KeyError:
        raise ValueError(f"Global rank {global_rank} is not part of group {pg.group_name}") from None


# ---- collectives ----------------------------------------------------------------------------

def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """torch.distributed.all_reduce: tensor = op over ranks, in place."""
    pg = _world.default if group is None else None
    if pg is None:
        pg = _resolve(group, "all_reduce")
        if pg is None:
            return None
    if type(tensor) is not _TensorT:
        tensor = _check_tensor(tensor, op=op, opname="all_reduce")
    if type(op) is not ReduceOp:
        op = _red(op)
    if tensor.is_contiguous():         # the fast path: no Python work beyond this call
        if async_op:
            return pg._c.allreduce(tensor, op)
        pg._c.allreduce(tensor, op, True)
        return None
    c, back = _contig(tensor)
    return _call(pg._c.allreduce, (c, op), async_op, back, (tensor,))


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    pg = _resolve(group, "broadcast")
    if pg is None:
        return None
    tensor = _check_tensor(tensor)
    root = _group_rank(pg, src, group_src, "src", "broadcast")
    c, back = _contig(tensor)
    if back is None and not async_op:
        pg._c.broadcast(c, root, True)
        return None
    return _call(pg._c.broadcast, (c, root), async_op, back, (tensor,))


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """torch.distributed.reduce: the result lands on dst; other ranks' tensors are unchanged."""
    pg = _resolve(group, "reduce")
    if pg is None:
        return None
    tensor = _check_tensor(tensor, op=op, opname="reduce")
    root = _group_rank(pg, dst, group_dst, "dst", "reduce")
    c, back = _contig(tensor)
    if back is not None and pg.rank() != root:
        back = None
    return _call(pg._c.reduce, (c, root, _red(op)), async_op, back, (tensor,))


def _check_same(tensors, ref, opname):
    for t in tensors:
        if t.dtype != ref.dtype:
            raise _ArgumentTypeError(f"{opname}: tensors must all have dtype {ref.dtype}, got "
                                     f"{t.dtype}")
        if t.numel() != ref.numel():
            raise _ArgumentError(f"{opname}: every tensor must have {ref.numel()} elements "
                             f"(the input's), got {t.numel()}")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """torch.distributed.all_gather: tensor_list[i] = rank i's tensor."""
    pg = _resolve(group, "all_gather")
    if pg is None:
        return None
    tensor_list = _check_list(tensor_list, "tensor_list")
    tensor = _check_tensor(tensor)
    n = pg.size()
    if len(tensor_list) != n:
        raise _ArgumentError(f"all_gather: tensor_list must have world_size ({n}) tensors, got "
                         f"{len(tensor_list)}")
    _check_same(tensor_list, tensor, "all_gather")
    inp, _ = _contig(tensor)
    if all(t.is_contiguous() for t in tensor_list):     # written in place by the engine
        return _call(pg._c.allgather, (list(tensor_list), inp), async_op)
    m = tensor.numel()
    flat = _empty_flat(tensor, n * m)

    def post():
        f = _np(flat)
        for i, t in enumerate(tensor_list):
            _np(t)[...] = f[i * m:(i + 1) * m].reshape(_np(t).shape)
    return _call(pg._c.allgather, (flat, inp), async_op, post, tensor_list)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Output holds world_size x input elements (concatenated or stacked on dim 0)."""
    pg = _resolve(group, "all_gather_into_tensor")
    if pg is None:
        return None
    output_tensor = _check_tensor(output_tensor, "output_tensor")
    input_tensor = _check_tensor(input_tensor, "input_tensor")
    out, back = _contig(output_tensor)
    inp, _ = _contig(input_tensor)
    if back is None and not async_op:
        pg._c.allgather(out, inp, True)
        return None
    return _call(pg._c.allgather, (out, inp), async_op, back, (output_tensor,))


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    pg = _resolve(group, "gather")
    if pg is None:
        return None
    tensor = _check_tensor(tensor)
    root = _group_rank(pg, dst, group_dst, "dst", "gather", default=0)
    n, m = pg.size(), tensor.numel()
    inp, _ = _contig(tensor)
    if pg.rank() != root:
        if gather_list:
            raise ValueError("Argument ``gather_list`` must NOT be specified on non-destination ranks.")
        return _call(pg._c.gather, (None, inp, root), async_op)
    if gather_list is None:
        raise ValueError("Argument ``gather_list`` must be specified on destination rank.")
    gather_list = _check_list(gather_list, "gather_list")
    if len(gather_list) != n:
        raise _ArgumentError(f"gather: gather_list must have world_size ({n}) tensors, got "
                         f"{len(gather_list)}")
    _check_same(gather_list, tensor, "gather")
    if all(t.is_contiguous() for t in gather_list):
        return _call(pg._c.gather, (list(gather_list), inp, root), async_op)
    flat = _empty_flat(tensor, n * m)

    def post():
        f = _np(flat)
        for i, t in enumerate(gather_list):
            _np(t)[...] = f[i * m:(i + 1) * m].reshape(_np(t).shape)
    return _call(pg._c.gather, (flat, inp, root), async_op, post, gather_list)


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    pg = _resolve(group, "scatter")
    if pg is None:
        return None
    tensor = _check_tensor(tensor)
    root = _group_rank(pg, src, group_src, "src", "scatter", default=0)
    n = pg.size()
    out, back = _contig(tensor)
    flat = None
    if pg.rank() == root:
        if scatter_list is None:
            raise ValueError("Argument ``scatter_list`` must be specified on source rank.")
        scatter_list = _check_list(scatter_list, "scatter_list")
        if len(scatter_list) != n:
            raise _ArgumentError(f"scatter: scatter_list must have world_size ({n}) tensors, got "
                             f"{len(scatter_list)}")
        _check_same(scatter_list, tensor, "scatter")
        flat = [_contig(t)[0] for t in scatter_list]       # read in place by the engine
    elif scatter_list:
        raise ValueError("Argument ``scatter_list`` must NOT be specified on non-source ranks.")
    return _call(pg._c.scatter, (out, flat, root), async_op, back, (tensor,))


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    pg = _resolve(group, "reduce_scatter")
    if pg is None:
        return None
    output = _check_tensor(output, "output", op, "reduce_scatter")
    input_list = _check_list(input_list, "input_list")
    n = pg.size()
    if len(input_list) != n:
        raise _ArgumentError(f"reduce_scatter: input_list must have world_size ({n}) tensors, got "
                         f"{len(input_list)}")
    _check_same(input_list, output, "reduce_scatter")
    out, back = _contig(output)
    ins = [_contig(t)[0] for t in input_list]                # read in place by the engine
    return _call(pg._c.reduce_scatter, (out, ins, _red(op)), async_op, back, (output,))


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002
    pg = _resolve(group, "reduce_scatter_tensor")
    if pg is None:
        return None
    output = _check_tensor(output, "output", op, "reduce_scatter_tensor")
    input = _check_tensor(input, "input")  # noqa: A001
    out, back = _contig(output)
    inp, _ = _contig(input)
    return _call(pg._c.reduce_scatter, (out, inp, _red(op)), async_op, back, (output,))


def _rows(t, splits, name):
    n0 = t.shape[0] if t.dim() > 0 else 1
    row = t.numel() // n0 if n0 else 0
    if sum(splits) != n0:
        raise ValueError(f"all_to_all_single: {name} sums to {sum(splits)} rows but the tensor "
                         f"has {n0}")
    return row


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,  # noqa: A002
                      group=None, async_op=False):
    """Equal splits go through the engine's all_to_all; uneven ones through paired
    send/recv, all in flight together."""
    pg = _resolve(group, "all_to_all_single")
    if pg is None:
        return None
    output = _check_tensor(output, "output")
    input = _check_tensor(input, "input")  # noqa: A001
    n = pg.size()
    out, back = _contig(output)
    inp, _ = _contig(input)
    if not output_split_sizes and not input_split_sizes:
        return _call(pg._c.alltoall, (out, inp), async_op, back, (output,))
    if output.dtype != input.dtype:
        raise _ArgumentTypeError("all_to_all_single: output and input must have the same dtype")
    n_in = input.shape[0] if input.dim() else 1
    n_out = output.shape[0] if output.dim() else 1
    isz = list(input_split_sizes) if input_split_sizes else [n_in // n] * n
    osz = list(output_split_sizes) if output_split_sizes else [n_out // n] * n
    if len(isz) != n or len(osz) != n:
        raise _ArgumentError(f"all_to_all_single: split sizes must have world_size ({n}) entries")
    row = _rows(inp, isz, "input_split_sizes")
    _rows(out, osz, "output_split_sizes")
    ia, oa = _np(inp).reshape(-1), _np(out).reshape(-1)
    ioff = np.concatenate([[0], np.cumsum(isz)]) * row
    ooff = np.concatenate([[0], np.cumsum(osz)]) * row
    me = pg.rank()
    oa[ooff[me]:ooff[me + 1]] = ia[ioff[me]:ioff[me + 1]]
    works = []
    for k in range(1, n):              # pairwise order: every rank sends and receives at once
        to, frm = (me + k) % n, (me - k) % n
        s = _from_np(np.ascontiguousarray(ia[ioff[to]:ioff[to + 1]]))
        r = _from_np(oa[ooff[frm]:ooff[frm + 1]])
        works.append(pg._c.send(s, to, 0))
        works.append(pg._c.recv(r, frm, 0))
    return _finish(_WorkList(works), async_op, back, (output,))


class _WorkList:
    """Several engine Works behaving as one."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout=None):
        for w in self._works:
            w.wait(timeout)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def is_success(self):
        return all(w.is_success() for w in self._works)

    def exception(self):
        for w in self._works:
            e = w.exception()
            if e is not None:
                return e
        return None

    def result(self):
        return [t for w in self._works for t in w.result()]

    get_future = _get_future


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    pg = _resolve(group, "all_to_all")
    if pg is None:
        return None
    output_tensor_list = _check_list(output_tensor_list, "output_tensor_list")
    input_tensor_list = _check_list(input_tensor_list, "input_tensor_list")
    n = pg.size()
    if len(output_tensor_list) != n or len(input_tensor_list) != n:
        raise _ArgumentError(f"all_to_all: both lists must have world_size ({n}) tensors")
    me = pg.rank()
    _np(output_tensor_list[me])[...] = _np(input_tensor_list[me]).reshape(_np(output_tensor_list[me]).shape)
    works, posts = [], []
    for k in range(1, n):
        to, frm = (me + k) % n, (me - k) % n
        s, _ = _contig(input_tensor_list[to])
        r, back = _contig(output_tensor_list[frm])
        works.append(pg._c.send(s, to, 0))
        works.append(pg._c.recv(r, frm, 0))
        if back:
            posts.append(back)
    post = (lambda: [p() for p in posts]) if posts else None
    return _finish(_WorkList(works), async_op, post, output_tensor_list)


# ---- point to point -------------------------------------------------------------------------

_ANY = -1          # the engine's CDDP_PG_ANY: a recv from whichever rank sends first


def _p2p(tensor, peer, group, tag, group_peer, opname, what):
    pg = _resolve(group, opname)
    if pg is None:
        return None, None, None
    tensor = _check_tensor(tensor)
    if int(tag) < 0:
        raise RuntimeError("Tag must be nonnegative")
    if peer is None and group_peer is None:
        if what != "src":
            raise ValueError("Must specify global_rank or group_rank")
        return pg, _ANY, _contig(tensor)
    gp = _group_rank(pg, peer, group_peer, what, opname)
    return pg, gp, _contig(tensor)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    pg, gd, (c, _) = _p2p(tensor, dst, group, tag, group_dst, "isend", "dst")
    if pg is None:
        return None
    return pg._c.send(c, gd, int(tag))


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    pg, gs, (c, back) = _p2p(tensor, src, group, tag, group_src, "irecv", "src")
    if pg is None:
        return None
    w = pg._c.recv(c, gs, int(tag))
    return _PostWork(w, back, (tensor,)) if back else w


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    pg, gd, (c, _) = _p2p(tensor, dst, group, tag, group_dst, "send", "dst")
    if pg is not None:
        pg._c.send(c, gd, int(tag), True)


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Returns the sender's global rank, as torch."""
    pg, gs, (c, back) = _p2p(tensor, src, group, tag, group_src, "recv", "src")
    if pg is None:
        return -1
    if gs == _ANY:              # the sender is known once the message has come
        w = pg._c.recv(c, gs, int(tag), False)
        w.wait()
        gs = w._source_rank()
    else:
        pg._c.recv(c, gs, int(tag), True)
    if back:
        back()
    return pg._ranks[gs]


class P2POp:
    """torch.distributed.P2POp(op, tensor, peer, group=None, tag=0) for batch_isend_irecv."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type ``torch.distributed.isend`` "
                             "or ``torch.distributed.irecv``.")
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, peer, group, tag
        self.group_peer = group_peer


def batch_isend_irecv(p2p_op_list):
    """All sends and receives of the list in flight together; returns their Works."""
    works = []
    for p in p2p_op_list:
        if not isinstance(p, P2POp):
            raise TypeError("batch_isend_irecv: every element must be a P2POp")
        if p.op is isend:
            works.append(isend(p.tensor, p.peer, p.group, p.tag, p.group_peer))
        else:
            works.append(irecv(p.tensor, p.peer, p.group, p.tag, p.group_peer))
    return works


# ---- barriers -------------------------------------------------------------------------------

def barrier(group=None, async_op=False, device_ids=None):
    pg = _resolve(group, "barrier")
    if pg is None:
        return None
    if async_op:
        return pg._c.barrier()
    pg._c.barrier(True)
    return None


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """Rank 0 waits (up to timeout) for every other rank and names the ones that did not
    arrive: RuntimeError("[Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms").
    Runs over the store, so a failure leaves the group's data path untouched."""
    pg = _resolve(group, "monitored_barrier")
    if pg is None:
        return None
    tmo = (_timedelta(timeout) or datetime.timedelta(seconds=pg._c.timeout)).total_seconds()
    ms = int(tmo * 1000)
    store, n, me = pg._store, pg.size(), pg.rank()
    if store is None:
        raise RuntimeError("monitored_barrier needs the group's store; the MPI backend has none "
                           "(use barrier(), which raises on a rank that does not arrive within "
                           "the group's timeout)")
    pg._barrier_seq += 1
    key = f"cddp/mb/{pg.group_name}/{pg._barrier_seq}/"
    if n == 1:
        return None
    end = time.monotonic() + tmo
    if me != 0:
        from .store import DistNetworkError
        done = key + "done"
        delay = 0.0002
        try:
            store.set(key + str(me), "1")
            while not store.check([done]):
                if time.monotonic() > end:
                    raise RuntimeError(f"[Rank {me}]: monitored_barrier: rank 0 did not "
                                       f"confirm within {ms} ms")
                time.sleep(delay)
                delay = min(2 * delay, 0.005)
        except DistNetworkError as e:     # the store went with the process that hosted it
            raise DistNetworkError(f"[Rank {me}]: monitored_barrier: lost the store ({e}); rank "
                                   f"0 left the barrier (it gives up after {ms} ms, or "
                                   f"exited)") from None
        return None
    pending = list(range(1, n))
    delay = 0.0002
    while pending:
        pending = [r for r in pending if not store.check([key + str(r)])]
        if not pending:
            break
        if time.monotonic() > end:
            break
        time.sleep(delay)
        delay = min(2 * delay, 0.005)
    if pending:
        if wait_all_ranks:
            raise RuntimeError(f"[Rank 0]: Ranks {', '.join(map(str, pending))} failed to pass "
                               f"monitoredBarrier in {ms} ms")
        raise RuntimeError(f"[Rank 0]: Rank {pending[0]} failed to pass monitoredBarrier in "
                           f"{ms} ms")
    store.set(key + "done", "1")
    return None


# ---- object collectives (JSON, never pickle) ------------------------------------------------

_NOT_JSON = ("cddp does not pickle objects across ranks: {op} accepts JSON-able objects only "
             "(None, bool, int, float, str, bytes, list, tuple, dict); got {kind}")


def _encode(obj, op):
    def tag(o):
        if isinstance(o, tuple):
            return {"__cddp_tuple__": [tag(x) for x in o]}
        if isinstance(o, list):
            return [tag(x) for x in o]
        if isinstance(o, dict):
            if all(isinstance(k, str) for k in o):
                if any(k.startswith("__cddp_") for k in o):
                    return {"__cddp_items__": [[k, tag(v)] for k, v in o.items()]}
                return {k: tag(v) for k, v in o.items()}
            return {"__cddp_items__": [[tag(k), tag(v)] for k, v in o.items()]}
        if isinstance(o, (bytes, bytearray)):
            return {"__cddp_bytes__": base64.b64encode(bytes(o)).decode()}
        if o is None or isinstance(o, (bool, int, float, str)):
            return o
        raise TypeError(_NOT_JSON.format(op=op, kind=type(o).__name__))
    return json.dumps(tag(obj), separators=(",", ":")).encode()


def _decode(data, opname, sender):
    """The object `sender` (a global rank) encoded with _encode; a payload that is not one
    (a peer running other code, a corrupted message) raises naming the op and the sender."""
    def hook(d):
        if len(d) == 1:
            if "__cddp_tuple__" in d:
                return tuple(d["__cddp_tuple__"])
            if "__cddp_bytes__" in d:
                return base64.b64decode(d["__cddp_bytes__"])
            if "__cddp_items__" in d:
                return {(tuple(k) if isinstance(k, list) else k): v for k, v in d["__cddp_items__"]}
        return d
    try:
        return json.loads(bytes(data).decode(), object_hook=hook)
    except (UnicodeDecodeError, ValueError) as e:     # JSONDecodeError is a ValueError
        raise RuntimeError(f"{opname}: the {len(data)}-byte object rank {sender} sent is not a "
                           f"cddp object payload (cddp encodes objects as JSON, never "
                           f"pickle; is rank {sender} running other code?): {e}") from None


def _bytes_tensor(blobs, width):
    """One int64 tensor holding each blob in a `width`-byte row (padded)."""
    a = np.zeros((len(blobs), width), dtype=np.uint8)
    for i, b in enumerate(blobs):
        a[i, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    return _from_np(a.view(np.int64).reshape(-1))


def _rows_of(t, width):
    return _np(t).view(np.uint8).reshape(-1, width)


def _i64(values):
    return _from_np(np.asarray(values, dtype=np.int64))


def _pad8(n):
    return max(8, (n + 7) // 8 * 8)


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    pg = _resolve(group, "broadcast_object_list")
    if pg is None:
        return None
    root = _group_rank(pg, src, group_src, "src", "broadcast_object_list", default=0)
    n = len(object_list)
    if pg.rank() == root:
        blobs = [_encode(o, "broadcast_object_list") for o in object_list]
        sizes = _i64([len(b) for b in blobs])
    else:
        sizes = _i64([0] * n)
    pg._c.broadcast(sizes, root, True)
    lens = [int(x) for x in _np(sizes)]
    width = _pad8(max(lens, default=0))
    buf = _bytes_tensor(blobs, width) if pg.rank() == root else _i64([0] * (n * width // 8))
    pg._c.broadcast(buf, root, True)
    if pg.rank() != root:
        rows = _rows_of(buf, width)
        for i in range(n):
            object_list[i] = _decode(rows[i, :lens[i]].tobytes(), "broadcast_object_list",
                                     pg._ranks[root])


def all_gather_object(object_list, obj, group=None):
    pg = _resolve(group, "all_gather_object")
    if pg is None:
        return None
    n = pg.size()
    if len(object_list) != n:
        raise ValueError(f"all_gather_object: object_list must have world_size ({n}) entries")
    blob = _encode(obj, "all_gather_object")
    lens = _i64([0] * n)
    pg._c.allgather(lens, _i64([len(blob)]), True)
    lens = [int(x) for x in _np(lens)]
    width = _pad8(max(lens))
    out = _i64([0] * (n * width // 8))
    pg._c.allgather(out, _bytes_tensor([blob], width), True)
    rows = _rows_of(out, width)
    for i in range(n):
        object_list[i] = _decode(rows[i, :lens[i]].tobytes(), "all_gather_object", pg._ranks[i])


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    pg = _resolve(group, "gather_object")
    if pg is None:
        return None
    root = _group_rank(pg, dst, group_dst, "dst", "gather_object", default=0)
    n, me = pg.size(), pg.rank()
    if me == root and (object_gather_list is None or len(object_gather_list) != n):
        raise ValueError(f"gather_object: object_gather_list must have world_size ({n}) "
                         f"entries on the destination rank")
    blob = _encode(obj, "gather_object")
    lens = _i64([0] * n)
    pg._c.allgather(lens, _i64([len(blob)]), True)
    lens = [int(x) for x in _np(lens)]
    width = _pad8(max(lens))
    out = _i64([0] * (n * width // 8)) if me == root else None
    pg._c.gather(out, _bytes_tensor([blob], width), root, True)
    if me == root:
        rows = _rows_of(out, width)
        for i in range(n):
            object_gather_list[i] = _decode(rows[i, :lens[i]].tobytes(), "gather_object",
                                            pg._ranks[i])


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    pg = _resolve(group, "scatter_object_list")
    if pg is None:
        return None
    root = _group_rank(pg, src, group_src, "src", "scatter_object_list", default=0)
    n, me = pg.size(), pg.rank()
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise ValueError("Expected argument scatter_object_output_list to be a list of size at least 1.")
    if me == root:
        if scatter_object_input_list is None or len(scatter_object_input_list) != n:
            raise ValueError(f"scatter_object_list: the source rank needs world_size ({n}) objects")
        blobs = [_encode(o, "scatter_object_list") for o in scatter_object_input_list]
        lens = _i64([len(b) for b in blobs])
    else:
        lens = _i64([0] * n)
    pg._c.broadcast(lens, root, True)
    lens = [int(x) for x in _np(lens)]
    width = _pad8(max(lens))
    flat = _bytes_tensor(blobs, width) if me == root else None
    out = _i64([0] * (width // 8))
    pg._c.scatter(out, flat, root, True)
    scatter_object_output_list[0] = _decode(_rows_of(out, width)[0, :lens[me]].tobytes(),
                                            "scatter_object_list", pg._ranks[root])


# ---- node-local rank, object point-to-point, subgroups, backend and debug-level queries -------

__all__ += [
    "get_node_local_rank", "send_object_list", "recv_object_list", "new_subgroups",
    "new_subgroups_by_enumeration", "is_backend_available", "DebugLevel", "get_debug_level",
    "set_debug_level", "set_debug_level_from_env", "get_pg_count",
]


def get_node_local_rank(fallback_rank=None):
    """This process's rank on its node: LOCAL_RANK (set by cddp.run / torchrun / srun's
    SLURM_LOCALID path), else fallback_rank, else RuntimeError (torch's)."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment. Consider passing fallback_rank to "
                       "allow `get_node_local_rank` to work, assuming you are not running in a "
                       "multi-device context and want the code to run locally instead.")


def _object_peer(object_list, peer, group, group_peer, opname, what):
    """(ProcessGroup, group-local peer) for the object point-to-point ops, with torch's checks:
    a peer is required (global or group rank), and it may not be this rank."""
    pg = _resolve(group, opname)
    if pg is None:
        return None, None
    if not isinstance(object_list, list):
        raise TypeError(f"{opname}: object_list must be a list, got {type(object_list).__name__}")
    gp = _group_rank(pg, peer, group_peer, what, opname)
    if gp == pg.rank():
        kind = "destination" if what == "dst" else "source"
        raise ValueError(f"Invalid {kind} rank: {kind} rank should not be the same as the rank "
                         "of the current process.")
    return pg, gp


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None,
                     use_batch=False):
    """torch.distributed.send_object_list: the objects to rank dst, as torch sends them (the
    per-object byte counts as one int64 tensor, then all the bytes as one uint8 tensor), but
    serialized as the other object collectives here are: JSON, never pickle, so only JSON-able
    objects (see broadcast_object_list) cross. device and use_batch are accepted and change
    nothing (CPU engine; the two sends are the same either way)."""
    pg, gd = _object_peer(object_list, dst, group, group_dst, "send_object_list", "dst")
    if pg is None:
        return None
    blobs = [_encode(o, "send_object_list") for o in object_list]
    pg._c.send(_i64([len(b) for b in blobs]), gd, 0, True)
    payload = _from_np(np.frombuffer(b"".join(blobs), dtype=np.uint8).copy())
    if payload.numel():
        pg._c.send(payload, gd, 0, True)
    return None


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None,
                     use_batch=False):
    """torch.distributed.recv_object_list: fills object_list in place with the objects rank
    src sent (object_list must have as many entries as were sent) and returns src's global
    rank; -1 on a rank outside `group`. src (or group_src) is required, as in torch 2.13."""
    pg, gs = _object_peer(object_list, src, group, group_src, "recv_object_list", "src")
    if pg is None:
        return -1
    sizes = _i64([0] * len(object_list))
    pg._c.recv(sizes, gs, 0, True)
    lens = [int(v) for v in _np(sizes)]
    if any(v < 0 for v in lens):
        raise RuntimeError(f"recv_object_list: rank {pg._ranks[gs]} sent invalid object sizes "
                           f"{lens}")
    payload = _from_np(np.zeros(sum(lens), dtype=np.uint8))
    if payload.numel():
        pg._c.recv(payload, gs, 0, True)
    data = _np(payload).tobytes()
    offset = 0
    for i, n in enumerate(lens):
        object_list[i] = _decode(data[offset:offset + n], "recv_object_list", pg._ranks[gs])
        offset += n
    return pg._ranks[gs]


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None,
                  group_desc=None):
    """Consecutive subgroups of group_size ranks of `group` (default: the world): returns
    (this rank's subgroup, every subgroup). Every rank of the world must call it. Without
    group_size torch uses the CUDA device count; cddp, like torch on a machine without CUDA,
    requires it."""
    if group_size is None:
        from .. import cuda
        if not cuda.is_available():
            raise ValueError("Default group size only takes effect when CUDA is available."
                             "If your subgroup using a backend that does not depend on CUDA,"
                             "please pass in 'group_size' correctly.")
        group_size = cuda.device_count()
    if group_size <= 0:
        raise ValueError(f"The arg 'group_size' ({group_size}) must be positive")
    world_size = get_world_size(group)
    if world_size < group_size:
        raise ValueError(f"The arg 'group_size' ({group_size}) must not exceed the world size "
                         f"({world_size})")
    if world_size % group_size != 0:
        raise ValueError(f"The world size ({world_size}) must be divisible by "
                         f"'group_size={group_size}'")
    ranks = get_process_group_ranks(group)
    return new_subgroups_by_enumeration(
        [ranks[i:i + group_size] for i in range(0, len(ranks), group_size)],
        timeout=timeout, backend=backend, pg_options=pg_options, group_desc=group_desc)


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None,
                                 pg_options=None, group_desc=None):
    """One new_group per list of global ranks (disjoint; a rank may be in none): returns
    (this rank's subgroup or None, every subgroup — NON_GROUP_MEMBER where this rank is not
    a member, as new_group gives). Every rank of the world must call it."""
    if ranks_per_subgroup_list is None or len(ranks_per_subgroup_list) == 0:
        raise ValueError("The arg 'ranks_per_subgroup_list' cannot be empty")
    subgroups, cur, owner = [], None, {}
    me = get_rank()
    for ranks in ranks_per_subgroup_list:
        sub = new_group(ranks=ranks, timeout=timeout, backend=backend, pg_options=pg_options,
                        group_desc=group_desc)
        subgroups.append(sub)
        for r in ranks:
            if r in owner:
                raise ValueError(f"Rank {r} has appeared in both subgroup {owner[r]} and {ranks}")
            owner[r] = ranks
            if r == me:
                cur = sub
    return cur, subgroups


def _backend_available(name):
    """One backend name: its is_<name>_available() where there is one, else whether
    init_process_group takes it ('cpu', cddp's alias of the C engine)."""
    name = str(name).lower()
    fn = globals().get(f"is_{name}_available")
    if callable(fn):
        return bool(fn())
    return name == "cpu"


def is_backend_available(backend):
    """torch.distributed.is_backend_available: gloo, nccl (cddp's CPU stand-in) and cpu are;
    mpi when cddp was built with MPI; ucc and unknown names are not. A composite spec
    ("cpu:gloo,cuda:nccl") is available when each of its backends is."""
    b = str(backend).lower()
    if ":" in b:
        names = [p.split(":", 1)[1] for p in b.split(",") if ":" in p]
        return bool(names) and all(_backend_available(n) for n in names)
    return _backend_available(b)


class DebugLevel(enum.Enum):
    """torch.distributed.DebugLevel (TORCH_DISTRIBUTED_DEBUG). cddp records the level and
    reports it; it does not change what cddp checks or logs."""
    OFF = 0
    INFO = 1
    DETAIL = 2

    def __int__(self):
        return self.value


_debug_level = [DebugLevel.OFF]


def get_debug_level():
    return _debug_level[0]


def set_debug_level(level):
    if not isinstance(level, DebugLevel):
        raise TypeError(f"set_debug_level(): expected a DebugLevel (OFF, INFO or DETAIL), got "
                        f"{type(level).__name__} {level!r}")
    _debug_level[0] = level


def set_debug_level_from_env():
    """The level from TORCH_DISTRIBUTED_DEBUG (OFF / INFO / DETAIL, any case); unset means
    OFF; anything else is torch's ValueError."""
    value = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
    if value is None:
        _debug_level[0] = DebugLevel.OFF
        return
    try:
        _debug_level[0] = DebugLevel[value.upper()]
    except KeyError:
        raise ValueError("The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL.") \
            from None


try:        # torch reads the variable at import; a bad value must not break `import cddp`
    set_debug_level_from_env()
except ValueError as _e:
    warnings.warn(f"{_e} Got {os.environ.get('TORCH_DISTRIBUTED_DEBUG')!r}; the debug level "
                  "stays OFF.", stacklevel=2)


def get_pg_count():
    """Process groups made since init_process_group, the default one included (torch's count:
    every new_group call counts on every rank, destroying one subgroup does not lower it,
    destroy_process_group() resets it to 0)."""
    return (_world.count + 1) if _world.default is not None else 0
