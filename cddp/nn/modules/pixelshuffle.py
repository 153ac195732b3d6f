"""torch.nn.modules.pixelshuffle's path to PixelShuffle / PixelUnshuffle (defined in
upsampling.py): scripts name classes by their torch module path, e.g. in
serialization.safe_globals([...])."""
from .upsampling import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]
