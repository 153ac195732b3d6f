"""torch.nn.modules.flatten's path to Flatten / Unflatten (defined in dropout.py): scripts name
classes by their torch module path, e.g. in serialization.safe_globals([...])."""
from .dropout import Flatten, Unflatten

__all__ = ["Flatten", "Unflatten"]
