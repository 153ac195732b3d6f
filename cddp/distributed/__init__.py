"""cddp.distributed — torch.distributed for CPU machines (placeholder until the collectives
land): stores and the notebook launcher."""
from .store import TCPStore, FileStore, PrefixStore, HashStore, Store  # noqa: F401
from .notebook import notebook_launch  # noqa: F401
