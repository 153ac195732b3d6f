"""Core tensor object: NumPy interop, attributes, buffer protocol, autograd engine basics."""
import gc

import numpy as np
import pytest

import cddp
from conftest import n, t


def test_from_numpy_is_zero_copy_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = cddp.from_numpy(a)
    a[0, 0] = 42
    assert x.numpy()[0, 0] == 42
    x.numpy()[1, 2] = -1
    assert a[1, 2] == -1
    assert x.shape == (2, 3) and x.dtype == cddp.float32 and x.stride() == (3, 1)


@pytest.mark.parametrize("dt,cd", [(np.float32, cddp.float32), (np.float64, cddp.float64),
                                   (np.int64, cddp.int64), (np.int32, cddp.int32),
                                   (np.bool_, cddp.bool)])
def test_from_numpy_dtypes(dt, cd):
    a = (np.arange(5) % 2).astype(dt)
    x = cddp.from_numpy(a)
    assert x.dtype == cd
    np.testing.assert_array_equal(x.numpy(), a)


def test_from_numpy_rejects_bad_arrays():
    with pytest.raises(TypeError, match="uint16"):
        cddp.from_numpy(np.zeros(3, dtype=np.uint16))
    with pytest.raises(ValueError, match="negative"):
        cddp.from_numpy(np.arange(4.0)[::-1])
    with pytest.raises(TypeError, match="ndarray"):
        cddp.from_numpy([1, 2])


def test_from_numpy_strided_view_keeps_strides():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
    x = cddp.from_numpy(a)
    assert x.stride() == (4, 2) and not x.is_contiguous()
    np.testing.assert_array_equal(x.numpy(), a)


def test_numpy_keeps_tensor_alive():
    x = cddp.from_numpy(np.arange(4, dtype=np.float32))
    arr = x.numpy()
    del x
    gc.collect()
    np.testing.assert_array_equal(arr, [0, 1, 2, 3])


def test_numpy_refuses_requires_grad():
    x = t([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        x.numpy()


def test_buffer_protocol_export_count():
    x = t(np.arange(6, dtype=np.float32).reshape(2, 3))
    m = memoryview(x)
    assert x._exports == 1 and m.shape == (2, 3) and m.format == "f"
    assert m.tolist() == [[0, 1, 2], [3, 4, 5]]
    m.release()
    assert x._exports == 0


def test_attributes():
    x = t(np.zeros((2, 3, 4), dtype=np.float32))
    assert x.ndim == 3 and x.dim() == 3 and x.numel() == 24
    assert x.size() == (2, 3, 4) and x.size(-1) == 4 and x.size(0) == 2
    assert repr(x.shape) == "cddp.Size([2, 3, 4])"
    assert x.is_leaf and not x.requires_grad and x.grad is None and x.grad_fn is None
    assert len(x) == 2 and x.element_size() == 4
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.size(3)


def test_requires_grad_rules():
    x = t([1, 2])
    with pytest.raises(RuntimeError, match="floating point"):
        x.requires_grad_()
    y = t([1.0, 2.0]).requires_grad_()
    assert y.requires_grad


def test_backward_on_leaf_accumulates():
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    x.backward(t([1.0, 2.0, 3.0]))
    x.backward(t([1.0, 1.0, 1.0]))
    np.testing.assert_array_equal(n(x.grad), [2, 3, 4])


def test_backward_errors():
    x = t([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        x.backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        x.backward(t([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError, match="does not require grad"):
        t([1.0]).backward()


def test_grad_mode_context_and_decorator():
    assert cddp.is_grad_enabled()
    with cddp.no_grad():
        assert not cddp.is_grad_enabled()
        with cddp.enable_grad():
            assert cddp.is_grad_enabled()
        assert not cddp.is_grad_enabled()
    assert cddp.is_grad_enabled()

    @cddp.no_grad()
    def f():
        return cddp.is_grad_enabled()
    assert f() is False and cddp.is_grad_enabled()
    with cddp.set_grad_enabled(False):
        assert not cddp.is_grad_enabled()
    assert cddp.is_grad_enabled()


def test_leaf_hooks_and_post_accumulate_hook():
    x = t([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: g * 0 + 10 if False else None)
    x.register_post_accumulate_grad_hook(lambda p: seen.append(n(p.grad)))
    x.backward(t([3.0, 4.0]))
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], [3, 4])


def test_set_grad_validates():
    x = t([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="different size"):
        x.grad = t([1.0])
    x.grad = t([5.0, 6.0])
    np.testing.assert_array_equal(n(x.grad), [5, 6])
    x.grad = None
    assert x.grad is None


def test_from_numpy_refuses_unaligned_memory():
    raw = np.zeros(17, np.uint8)
    a = np.frombuffer(raw.data, dtype=np.float32, count=4, offset=1)
    with pytest.raises(ValueError, match="aligned"):
        cddp.from_numpy(a)


def test_pickle_and_deepcopy_keep_values_and_flags():
    import copy
    import pickle
    x = t([[1.0, 2.0]], requires_grad=True)
    for y in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert y is not x and y.requires_grad and y.is_leaf
        np.testing.assert_array_equal(n(y), [[1.0, 2.0]])
    with pytest.raises(RuntimeError, match="leaves"):
        pickle.dumps(x * 2)
