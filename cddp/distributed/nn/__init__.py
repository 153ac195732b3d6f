"""cddp.distributed.nn — torch.distributed.nn: differentiable collectives (functional.py),
re-exported here as torch does (`torch.distributed.nn.all_gather`). RemoteModule (RPC) is not
provided."""
from .functional import *  # noqa: F401,F403
from .functional import __all__  # noqa: F401
