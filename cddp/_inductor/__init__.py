"""torch._inductor as scripts touch it: its config knobs (_inductor/config.py). cddp has no
code generator; see cddp/_config_module.py."""
from . import config  # noqa: F401
