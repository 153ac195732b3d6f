"""cddp.distributed — torch.distributed for cddp: process groups and collectives
(distributed_c10d, over the C engine in csrc/distributed/pg/; backend "mpi" over cddp._mpi),
rendezvous stores (store), launchers (launch / run; several nodes: launcher_rdzv), and
notebook_launch.

    import cddp.distributed as dist
    dist.init_process_group("gloo")          # env:// by default, as torch
    dist.all_reduce(t); dist.barrier(); dist.destroy_process_group()
"""
from .distributed_c10d import *  # noqa: F401,F403
from .distributed_c10d import (  # noqa: F401  (names torch scripts reach for)
    ReduceOp, Backend, GroupMember, group, ProcessGroup, Work, P2POp,
    DistBackendError, DistTimeoutError, default_pg_timeout,
)
from .store import (TCPStore, FileStore, PrefixStore, HashStore, Store,  # noqa: F401
                    DistError, DistStoreError, DistNetworkError)
from .notebook import notebook_launch  # noqa: F401
from . import algorithms  # noqa: F401
from .device_mesh import DeviceMesh, init_device_mesh  # noqa: F401,E402
