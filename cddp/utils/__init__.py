"""cddp.utils — data loading (cddp.utils.data) and hook handles."""
from . import data, hooks  # noqa: F401
