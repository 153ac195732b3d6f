"""torch.nn.utils.convert_parameters: where parameters_to_vector / vector_to_parameters live in
torch (cddp keeps them in nn.utils itself)."""
from . import parameters_to_vector, vector_to_parameters  # noqa: F401

__all__ = ["parameters_to_vector", "vector_to_parameters"]
