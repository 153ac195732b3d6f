"""DLPack (torch.utils.dlpack, torch.from_dlpack, Tensor.__dlpack__): zero-copy both ways with
NumPy (and torch where installed) — writes through one side are seen on the other — for
strided views and every dtype NumPy has; the refusals torch makes (tensors requiring grad)."""
import numpy as np
import pytest

import cddp
from cddp.utils.dlpack import from_dlpack, to_dlpack


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32", "int16",
                                   "int8", "uint8", "bool"])
def test_numpy_round_trip_shares_memory(dtype):
    t = cddp.zeros((3, 4), dtype=getattr(cddp, dtype))
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype) and a.shape == (3, 4)
    a[1, 2] = 1
    assert t[1, 2].item() == 1
    back = cddp.from_dlpack(a)
    back[0, 0] = 1
    assert t[0, 0].item() == 1 and back.dtype == t.dtype


def test_strided_views_and_capsules():
    t = cddp.arange(12.0).view(3, 4).t()[1:]                 # (3, 3), non-contiguous
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, t.numpy())
    assert a.strides == (4, 16)
    u = from_dlpack(to_dlpack(t))                             # the legacy capsule path
    u[0, 0] = -5
    assert t[0, 0].item() == -5
    src = np.arange(6, dtype=np.float32)[::2]
    v = cddp.from_dlpack(src)
    src[1] = 40
    assert v.tolist() == [0.0, 40.0, 4.0]


def test_refusals():
    with pytest.raises(RuntimeError, match="require gradient"):
        np.from_dlpack(cddp.ones(2, requires_grad=True))
    with pytest.raises(BufferError, match="bfloat16"):
        cddp.utils.dlpack.to_dlpack(cddp.ones(2, dtype=cddp.bfloat16))
    with pytest.raises(TypeError, match="__dlpack__"):
        cddp.from_dlpack([1, 2])
    assert cddp.ones(1).__dlpack_device__() == (1, 0)


def test_torch_shares_memory_both_ways():
    torch = pytest.importorskip("torch")
    t = cddp.zeros(2, 3)
    x = torch.from_dlpack(t)
    x[1, 1] = 3
    assert t[1, 1].item() == 3
    y = torch.arange(4.0)
    c = cddp.from_dlpack(y)
    c[2] = -1
    assert y[2].item() == -1
