"""cddp.distributed — placeholder created by the launch helper so that
`python -m cddp.distributed.launch` / `cddp.distributed.run` import; the real package
(collectives, stores, init_process_group) replaces this file and keeps the line below."""
from .notebook import notebook_launch  # noqa: F401
