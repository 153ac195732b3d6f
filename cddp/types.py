"""torch.types: the aliases annotations use (Number, Device, _size, _dtype ...)."""
import os
from typing import IO, Any, Sequence, Union

from . import _C
from ._device import device as _device_cls
from ._size import Size

Tensor = _C.Tensor
_bool, _int, _float, _complex, _str, _bytes = bool, int, float, complex, str, bytes
_dtype = _C.dtype
_device = _device_cls
_size = Union[Size, list[int], tuple[int, ...]]
_symsize = _size
_layout = Any
Number = Union[int, float, bool]
_Number = (int, float, bool)
Device = Union[_device_cls, str, int, None]
FileLike = Union[str, os.PathLike, IO[bytes]]
_TensorOrTensors = Union[Tensor, Sequence[Tensor]]
_TensorOrOptionalTensors = Union[Tensor, Sequence[Union[Tensor, None]]]
IntLikeType, FloatLikeType, BoolLikeType = int, float, bool
Storage = Any
