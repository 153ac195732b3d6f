"""Tensor creation: tensor()/as_tensor() parsing and dtype inference, factories (zeros, full,
arange, linspace, eye, *_like, new_*), in-place fills (zero_, fill_, copy_), tolist/item, and
repr — against NumPy always and against torch (exact values, dtypes and printed text) when it
is installed."""
import numpy as np
import pytest

import cddp
from conftest import n, t


def same(x, ref, dtype=None):
    """x (cddp) holds exactly ref's values, shape and (cddp) dtype."""
    ref = np.asarray(ref)
    got = n(x)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got, ref)
    if dtype is not None:
        assert x.dtype == dtype, (x.dtype, dtype)


# ---- tensor(): inference and values ---------------------------------------------------------

@pytest.mark.parametrize("data,dtype", [
    ([1.0, 2.0, 3.0], cddp.float32),
    ([[1, 2], [3, 4]], cddp.int64),
    ([True, False], cddp.bool),
    ([True, 1], cddp.int64),            # bool < int < float
    ([1, 2.5], cddp.float32),
    ([True, 2.5], cddp.float32),
    ((1, 2, 3), cddp.int64),
    (3.5, cddp.float32),
    (7, cddp.int64),
    (False, cddp.bool),
    ([], cddp.float32),
    ([[], []], cddp.float32),
    ([[[1.5]], [[2.5]]], cddp.float32),
    (range(4), cddp.int64),
])
def test_tensor_infers_dtype_like_torch(data, dtype):
    x = cddp.tensor(data)
    same(x, np.array(data, dtype=np.float32 if dtype == cddp.float32 else None).astype(
        {cddp.float32: np.float32, cddp.int64: np.int64, cddp.bool: np.bool_}[dtype]), dtype)
    assert x.is_leaf and not x.requires_grad and x.is_contiguous()


def test_tensor_numpy_inputs_keep_dtype_and_copy():
    for dt, cd in [(np.float64, cddp.float64), (np.float32, cddp.float32), (np.int32, cddp.int32),
                   (np.int64, cddp.int64), (np.bool_, cddp.bool)]:
        a = (np.arange(6) % 3).astype(dt).reshape(2, 3)
        x = cddp.tensor(a)
        same(x, a, cd)
        a[0, 0] = 1 - a[0, 0]               # a copy: the tensor does not change
        assert n(x)[0, 0] != a[0, 0]
    # strided / transposed arrays, 0-d arrays, widened types
    a = np.arange(12.0).reshape(3, 4)[:, ::2].T
    same(cddp.tensor(a), a, cddp.float64)
    same(cddp.tensor(np.array(2.5)), np.array(2.5), cddp.float64)
    same(cddp.tensor(np.arange(4, dtype=np.uint8)), np.arange(4, dtype=np.uint8), cddp.uint8)
    same(cddp.tensor(np.arange(4, dtype=np.float16)), np.arange(4, dtype=np.float16), cddp.float16)
    same(cddp.tensor(np.arange(4, dtype=np.uint16)), np.arange(4), cddp.int64)   # no uint16 dtype
    # numpy scalars keep their dtype, also inside lists (torch's rule)
    assert cddp.tensor(np.float64(1.5)).dtype == cddp.float64
    assert cddp.tensor(np.int32(3)).dtype == cddp.int32
    assert cddp.tensor([np.float64(1.0), 2.0]).dtype == cddp.float64
    assert cddp.tensor([np.int32(1), 2]).dtype == cddp.int64


def test_tensor_from_tensors_copies():
    a = t(np.arange(6.0).reshape(2, 3))
    x = cddp.tensor(a)
    same(x, n(a), cddp.float64)
    x.zero_()
    assert n(a).sum() == 15                 # independent memory
    same(cddp.tensor(a, dtype=cddp.int32), n(a).astype(np.int32), cddp.int32)
    # lists of 0-d tensors and of arrays; a tensor in a list is one number, as in torch
    same(cddp.tensor([cddp.tensor(1), cddp.tensor(2.5, dtype=cddp.float64)]), [1.0, 2.5], cddp.float64)
    with pytest.raises(ValueError, match="only one element tensors"):
        cddp.tensor([t([1.0, 2.0]), t([3.0, 4.0])])
    same(cddp.tensor([np.arange(3), np.arange(3)]), [[0, 1, 2], [0, 1, 2]], cddp.int64)
    same(cddp.tensor([1.0, np.array(2.0), cddp.tensor(3.0)]), [1.0, 2.0, 3.0], cddp.float64)
    same(cddp.tensor([[np.array(2), 3]]), [[2, 3]], cddp.int64)
    # a transposed tensor is read in logical order
    tr = cddp.from_numpy(np.arange(6.0).reshape(2, 3).T)
    same(cddp.tensor(tr), np.arange(6.0).reshape(2, 3).T)


def test_tensor_dtype_argument_converts():
    same(cddp.tensor([1.7, -2.7], dtype=cddp.int64), [1, -2], cddp.int64)
    same(cddp.tensor([0, 2, -1], dtype=cddp.bool), [False, True, True], cddp.bool)
    same(cddp.tensor([1, 2], dtype=cddp.float64), [1.0, 2.0], cddp.float64)
    same(cddp.tensor([[True, False]], dtype=cddp.float32), [[1.0, 0.0]], cddp.float32)
    same(cddp.tensor([2 ** 70], dtype=cddp.float32), np.array([2.0 ** 70], np.float32))
    same(cddp.tensor([1, 2], dtype=np.float64), [1.0, 2.0], cddp.float64)
    same(cddp.tensor([1.0], dtype=float), [1.0], cddp.float64)
    x = cddp.tensor([1.0, 2.0], requires_grad=True)
    assert x.requires_grad and x.is_leaf
    # default dtype follows set_default_dtype
    cddp.set_default_dtype(cddp.float64)
    try:
        assert cddp.tensor([1.5]).dtype == cddp.float64
        assert cddp.zeros(2).dtype == cddp.float64
        assert cddp.full((1,), 2.0).dtype == cddp.float64
    finally:
        cddp.set_default_dtype(cddp.float32)


def test_tensor_bad_inputs():
    with pytest.raises(ValueError, match=r"expected sequence of length 3 at dim 1 \(got 2\)"):
        cddp.tensor([[1, 2, 3], [1, 2]])
    with pytest.raises(ValueError, match="expected sequence of length 0 at dim 1"):
        cddp.tensor([[], [1]])
    with pytest.raises(TypeError, match="not a sequence"):
        cddp.tensor([[1, 2], 3])
    with pytest.raises(TypeError):
        cddp.tensor([1, [2]])
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        cddp.tensor("abc")
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        cddp.tensor([1, "a"])
    with pytest.raises(RuntimeError, match="Could not infer dtype of NoneType"):
        cddp.tensor([None])
    with pytest.raises(RuntimeError, match="Could not infer dtype of dict"):
        cddp.tensor({1: 2})
    with pytest.raises(ValueError, match="Overflow"):
        cddp.tensor([2 ** 63])
    with pytest.raises(RuntimeError, match="int32 without overflow"):
        cddp.tensor([2 ** 40], dtype=cddp.int32)
    with pytest.raises(RuntimeError, match="int64 without overflow"):
        cddp.tensor([float("nan")], dtype=cddp.int64)
    with pytest.raises(ValueError, match="at most"):
        cddp.tensor([[[[[[[[[[[[[1]]]]]]]]]]]]])
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.str_"):
        cddp.tensor(np.array(["a"]))
    with pytest.raises(ValueError, match="negative"):
        cddp.tensor(np.arange(3.0)[::-1])
    with pytest.raises(RuntimeError, match="floating point"):
        cddp.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="dtype"):
        cddp.tensor([1], dtype="not a dtype")
    with pytest.raises(TypeError, match="unexpected keyword"):
        cddp.tensor([1], bogus=1)
    with pytest.raises(TypeError):
        cddp.tensor()
    # cuda is accepted (tensors stay on the CPU for now); garbage devices are not
    assert cddp.tensor([1.0], device="cuda").device.type == "cpu"
    with pytest.raises(RuntimeError):
        cddp.tensor([1.0], device="tpu")


def test_tensor_dtype_inference_matches_torch(torch):
    datas = [1, 1.5, True, [1, 2], [1.0, 2], [True, False], [True, 1], [[1.5, 2], [3, 4]], [],
             [[], []], [np.float64(1.0)], [np.int32(3), 4], np.float64(2.5),
             np.int64(7), np.arange(6.0).reshape(2, 3), np.arange(4, dtype=np.int32),
             np.array([True]), range(5), [2 ** 62, -5],
             [[[1]]], np.zeros((2, 0, 3))]
    for d in datas:
        for dt in [None, "float32", "float64", "int64", "int32", "bool"]:
            try:
                a = torch.tensor(d, dtype=getattr(torch, dt) if dt else None)
            except Exception as e:            # torch refuses: so must cddp, with the same type
                with pytest.raises(type(e)):
                    cddp.tensor(d, dtype=getattr(cddp, dt) if dt else None)
                continue
            b = cddp.tensor(d, dtype=getattr(cddp, dt) if dt else None)
            assert str(b.dtype).replace("cddp", "torch") == str(a.dtype), (d, dt)
            np.testing.assert_array_equal(n(b), a.numpy())


# ---- as_tensor ---------------------------------------------------------------------------

def test_as_tensor_shares_memory():
    a = np.arange(6.0).reshape(2, 3)
    x = cddp.as_tensor(a)
    a[1, 2] = -7
    assert n(x)[1, 2] == -7 and x.dtype == cddp.float64
    y = cddp.as_tensor(a, dtype=cddp.float32)           # conversion: a copy
    a[0, 0] = 99
    assert n(y)[0, 0] == 0
    z = t([1.0, 2.0])
    assert cddp.as_tensor(z) is z and cddp.as_tensor(z, dtype=cddp.float64) is z
    same(cddp.as_tensor([1, 2]), [1, 2], cddp.int64)
    same(cddp.as_tensor(z, dtype=cddp.int32), [1, 2], cddp.int32)
    with pytest.raises(ValueError, match="negative"):  # as torch: no negative strides
        cddp.as_tensor(np.arange(6.0)[::-2])


# ---- zeros / ones / empty / full ---------------------------------------------------------

@pytest.mark.parametrize("args", [(2, 3), ((2, 3),), ([2, 3],), (), (0,), (4,), (1, 0, 2)])
def test_sized_factories(args):
    shape = args[0] if len(args) == 1 and not isinstance(args[0], int) else args
    shape = tuple(shape)
    same(cddp.zeros(*args), np.zeros(shape, np.float32), cddp.float32)
    same(cddp.ones(*args), np.ones(shape, np.float32), cddp.float32)
    assert cddp.empty(*args).shape == shape
    same(cddp.zeros(*args, dtype=cddp.int32), np.zeros(shape, np.int32), cddp.int32)
    same(cddp.ones(*args, dtype=cddp.bool), np.ones(shape, bool), cddp.bool)
    same(cddp.full(shape, 2.5), np.full(shape, 2.5, np.float32), cddp.float32)


def test_factory_size_forms_and_options():
    assert cddp.zeros(size=(2, 3)).shape == (2, 3)
    assert cddp.ones(cddp.Size([3, 1])).shape == (3, 1)
    assert cddp.zeros(np.int64(3), 2).shape == (3, 2)
    assert cddp.zeros(cddp.tensor(3)).shape == (3,)
    x = cddp.zeros(2, requires_grad=True)
    assert x.requires_grad and x.is_leaf
    assert cddp.ones(2, device="cpu").device.type == "cpu"
    assert cddp.ones(2, dtype=float).dtype == cddp.float64


def test_full_infers_dtype_from_fill_value():
    same(cddp.full((2,), True), [True, True], cddp.bool)
    same(cddp.full((2,), 3), [3, 3], cddp.int64)
    same(cddp.full((2, 1), -1.5), [[-1.5], [-1.5]], cddp.float32)
    same(cddp.full((2,), 3, dtype=cddp.float64), [3.0, 3.0], cddp.float64)
    same(cddp.full((2,), cddp.tensor(4)), [4, 4], cddp.int64)
    same(cddp.full((2,), np.float64(0.5)), [0.5, 0.5], cddp.float32)
    same(cddp.full((2,), 2.9, dtype=cddp.int64), [2, 2], cddp.int64)


def test_factory_bad_sizes():
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        cddp.zeros(-1)
    with pytest.raises(RuntimeError, match="negative dimension -3"):
        cddp.ones((2, -3))
    with pytest.raises(TypeError, match="must be tuple of ints, not float"):
        cddp.zeros(2.5)
    with pytest.raises(TypeError, match="must be tuple of ints"):
        cddp.zeros(2, "a")
    with pytest.raises(TypeError, match="not bool"):
        cddp.zeros(True)
    with pytest.raises(TypeError, match="not int"):
        cddp.full(3, 1.0)
    with pytest.raises(TypeError, match="expected a number"):
        cddp.full((2,), "x")
    with pytest.raises(TypeError, match="multiple values"):
        cddp.zeros(2, size=(2,))
    with pytest.raises(ValueError, match="at most"):
        cddp.zeros(*([1] * 13))
    with pytest.raises(TypeError, match="dtype"):
        cddp.zeros(2, dtype=np.complex64)
    with pytest.raises(RuntimeError, match="floating point"):
        cddp.zeros(2, dtype=cddp.int64, requires_grad=True)
    t = cddp.ones(2)
    assert cddp.zeros(2, out=t) is t and t.tolist() == [0.0, 0.0]    # out= (tests/test_out_arg.py)


def test_like_factories():
    a = t(np.arange(6, dtype=np.int32).reshape(2, 3))
    same(cddp.zeros_like(a), np.zeros((2, 3), np.int32), cddp.int32)
    same(cddp.ones_like(a, dtype=cddp.float64), np.ones((2, 3)), cddp.float64)
    assert cddp.empty_like(a).shape == (2, 3) and cddp.empty_like(a).dtype == cddp.int32
    same(cddp.full_like(a, 7.9), np.full((2, 3), 7, np.int32), cddp.int32)   # input's dtype
    same(cddp.full_like(a, 7.5, dtype=cddp.float32), np.full((2, 3), 7.5, np.float32))
    same(cddp.zeros_like(cddp.tensor(3.0)), np.zeros(()))
    with pytest.raises(TypeError, match="Tensor"):
        cddp.zeros_like([1, 2])
    with pytest.raises(TypeError):
        cddp.full_like(a)


def test_new_methods():
    a = t(np.ones((2, 2), np.float64))
    same(a.new_zeros(3), np.zeros(3), cddp.float64)
    same(a.new_ones((2, 1)), np.ones((2, 1)), cddp.float64)
    same(a.new_ones(2, 1, dtype=cddp.int64), np.ones((2, 1), np.int64), cddp.int64)
    same(a.new_full((2,), 4), [4.0, 4.0], cddp.float64)
    assert a.new_empty(4, 5).shape == (4, 5) and a.new_empty(1).dtype == cddp.float64
    same(a.new_tensor([1, 2]), [1.0, 2.0], cddp.float64)
    same(a.new_tensor([1.5], dtype=cddp.int32), [1], cddp.int32)
    assert a.new_zeros(2, requires_grad=True).requires_grad


# ---- arange / linspace / eye -------------------------------------------------------------

@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 20, 3), (10, 0, -3), (0, 1, 0.1), (1, 2.5, 0.5),
                                  (-3.7, 5.2, 0.13), (5.0,), (0, 0), (3, 3, 1)])
def test_arange_values_and_dtype(args):
    x = cddp.arange(*args)
    floaty = any(isinstance(a, float) for a in args)
    assert x.dtype == (cddp.float32 if floaty else cddp.int64)
    ref = np.arange(*args, dtype=np.float64)
    assert x.shape == ref.shape                      # torch's ceil((end - start) / step)
    np.testing.assert_allclose(n(x), ref, rtol=1e-6, atol=1e-6)


def test_arange_keywords_and_dtypes():
    same(cddp.arange(end=4), [0, 1, 2, 3], cddp.int64)
    same(cddp.arange(1, 4, dtype=cddp.float64), [1.0, 2.0, 3.0], cddp.float64)
    same(cddp.arange(0.5, 10.5, 2.5, dtype=cddp.int64), [0, 2, 4, 6, 8])   # torch truncates
    same(cddp.arange(cddp.tensor(3)), [0, 1, 2])
    with pytest.raises(RuntimeError, match="step must be nonzero"):     # torch 2.13's type
        cddp.arange(0, 5, 0)
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        cddp.arange(0, 5.0, 0.0)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        cddp.arange(0, -10, 1)
    with pytest.raises(RuntimeError, match="unsupported range"):
        cddp.arange(0, float("inf"), 1.0)
    with pytest.raises(TypeError, match="missing"):
        cddp.arange()
    with pytest.raises(NotImplementedError, match="Bool"):
        cddp.arange(3, dtype=cddp.bool)


def test_linspace_and_eye():
    for a, b, s in [(0, 1, 5), (-3.7, 5.2, 33), (10, 0, 11), (0, 1, 1), (0, 1, 0), (2, 3, 2)]:
        x = cddp.linspace(a, b, s)
        assert x.dtype == cddp.float32
        np.testing.assert_allclose(n(x), np.linspace(a, b, s), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(n(cddp.linspace(a, b, s, dtype=cddp.float64)),
                                   np.linspace(a, b, s), rtol=1e-14, atol=1e-14)
    same(cddp.linspace(0, 10, 5, dtype=cddp.int64), [0, 2, 5, 7, 10], cddp.int64)
    with pytest.raises(RuntimeError, match="non-negative"):
        cddp.linspace(0, 1, -1)
    with pytest.raises(TypeError, match="steps"):
        cddp.linspace(0, 1, 2.5)
    same(cddp.eye(3), np.eye(3, dtype=np.float32), cddp.float32)
    same(cddp.eye(2, 4, dtype=cddp.int64), np.eye(2, 4, dtype=np.int64), cddp.int64)
    same(cddp.eye(3, m=1), np.eye(3, 1, dtype=np.float32))
    same(cddp.eye(0), np.eye(0, dtype=np.float32))
    with pytest.raises(RuntimeError, match="n must be greater or equal to 0, got -1"):
        cddp.eye(-1)
    with pytest.raises(TypeError, match="must be int"):
        cddp.eye(2.0)


def test_ranges_match_torch_exactly(torch):
    for args in [(0, 1, 0.1), (0, 10, 0.3), (-3.7, 5.2, 0.13), (0.5, 1000.5, 0.7), (0, 1e-3, 1e-5),
                 (7,), (2, 20, 3), (10, 0, -3)]:
        for dt in [None, "float32", "float64", "int32"]:
            a = torch.arange(*args, dtype=getattr(torch, dt) if dt else None).numpy()
            b = n(cddp.arange(*args, dtype=getattr(cddp, dt) if dt else None))
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(b, a, err_msg=f"arange{args} {dt}")
    for args in [(0, 1, 100), (-3.7, 5.2, 33), (0, 1, 1000), (10, 0, 11), (0, 1, 1), (0, 7, 4099)]:
        for dt in [None, "float64", "int64"]:
            a = torch.linspace(*args, dtype=getattr(torch, dt) if dt else None).numpy()
            b = n(cddp.linspace(*args, dtype=getattr(cddp, dt) if dt else None))
            np.testing.assert_array_equal(b, a, err_msg=f"linspace{args} {dt}")


# ---- in-place: zero_ / fill_ / copy_ -----------------------------------------------------

def test_zero_fill_on_views():
    a = np.arange(12.0).reshape(3, 4)
    x = cddp.from_numpy(a)
    v0 = 0
    xt = cddp.from_numpy(a[:, ::2])               # strided view of the same memory
    assert xt.fill_(-1.0) is xt
    ref = np.arange(12.0).reshape(3, 4)
    ref[:, ::2] = -1
    np.testing.assert_array_equal(a, ref)
    assert xt._version > v0
    x.zero_()
    assert not a.any()
    b = cddp.zeros(3, dtype=cddp.int32)
    same(b.fill_(2.9), [2, 2, 2])
    same(cddp.zeros(2, dtype=cddp.bool).fill_(5), [True, True])
    same(cddp.zeros(2).fill_(cddp.tensor(3)), [3.0, 3.0])
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        cddp.zeros(2).fill_(cddp.ones(2))
    with pytest.raises(TypeError):
        cddp.zeros(2).fill_("x")
    with pytest.raises(RuntimeError, match="int64 without overflow"):
        cddp.zeros(2, dtype=cddp.int64).fill_(float("inf"))


def test_copy_broadcasts_and_converts():
    dst = cddp.zeros(2, 3)
    assert dst.copy_(t(np.array([1, 2, 3], np.int64))) is dst
    same(dst, [[1, 2, 3], [1, 2, 3]], cddp.float32)
    dst2 = cddp.zeros(3, dtype=cddp.int32)
    same(dst2.copy_(t([1.9, -2.9, 0.5])), [1, -2, 0], cddp.int32)
    # non-contiguous destination
    a = np.zeros((3, 4))
    cddp.from_numpy(a.T).copy_(t(np.arange(12.0).reshape(4, 3)))
    np.testing.assert_array_equal(a.T, np.arange(12.0).reshape(4, 3))
    # overlapping memory: the transpose of itself
    b = np.arange(9.0).reshape(3, 3)
    xb = cddp.from_numpy(b)
    xb.copy_(cddp.from_numpy(b.T))
    np.testing.assert_array_equal(b, np.arange(9.0).reshape(3, 3).T)
    with pytest.raises(RuntimeError, match="expanded size|must match"):
        cddp.zeros(2).copy_(cddp.zeros(3))
    with pytest.raises(TypeError, match="Tensor"):
        cddp.zeros(2).copy_([1, 2])


def test_inplace_autograd_rules():
    leaf = cddp.tensor([1.0, 2.0], requires_grad=True)
    for op in (lambda z: z.fill_(1), lambda z: z.zero_(), lambda z: z.copy_(cddp.ones(2)),
               lambda z: z.uniform_(), lambda z: z.normal_()):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            op(leaf)
    with cddp.no_grad():
        leaf.fill_(3.0)                           # allowed without grad mode (nn.init style)
    same(leaf, [3.0, 3.0])
    # copy_ from a tensor requiring grad: gradient flows to src, summed over broadcast dims
    src = cddp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    dst = cddp.zeros(2, 3, dtype=cddp.float64)
    dst.copy_(src)
    assert dst.grad_fn is not None and dst.grad_fn.name() == "CopyBackwards"
    dst.backward(t(np.arange(6.0).reshape(2, 3)))
    same(src.grad, np.array([3.0, 5.0, 7.0], np.float32), cddp.float32)
    # overwriting a non-leaf cuts the gradient to what it held before
    src2 = cddp.tensor([1.0, 2.0], requires_grad=True)
    mid = cddp.zeros(2).copy_(src2)
    mid.fill_(5.0)
    assert mid.grad_fn.name() == "FillBackward2"
    mid.backward(t(np.ones(2, np.float32)))
    same(src2.grad, [0.0, 0.0])
    mid2 = cddp.zeros(2).copy_(src2)
    mid2.zero_()
    assert mid2.grad_fn.name() == "ZeroBackward0"
    # fill_ with a value tensor that requires grad: its gradient is the sum
    v = cddp.tensor(2.0, requires_grad=True)
    out = cddp.zeros(3).fill_(v)
    assert out.grad_fn.name() == "FillBackward3"
    out.backward(t(np.array([1.0, 2.0, 3.0], np.float32)))
    assert v.grad.item() == 6.0


# ---- tolist / item -----------------------------------------------------------------------

def test_tolist_and_item():
    assert cddp.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    lst = cddp.tensor([0.5, 1.0]).tolist()
    assert lst == [0.5, 1.0] and all(type(v) is float for v in lst)
    assert cddp.tensor([True, False]).tolist() == [True, False]
    assert type(cddp.tensor([True]).tolist()[0]) is bool
    assert cddp.tensor(3).tolist() == 3 and cddp.zeros(0, 2).tolist() == []
    assert cddp.from_numpy(np.arange(6).reshape(2, 3).T).tolist() == [[0, 3], [1, 4], [2, 5]]
    assert cddp.tensor([2.5]).item() == 2.5 and cddp.tensor(7, dtype=cddp.int32).item() == 7
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        cddp.zeros(2).item()


# ---- repr --------------------------------------------------------------------------------

REPR_CASES = [
    [1.0, 2.0, 3.0], [[1, 2], [3, 4]], 3.5, [1e-5, 1.0], [1e10, 1.0], [100000.0, 1.0],
    [float("nan"), 1.0, float("inf")], [float("nan"), 1.5, float("-inf")], [True, False],
    [-1, 100], 3, True, 1e-8, [0.0, -0.0], [[0.1234567, 12.5], [3.0, -4.75]], [1e20, 1.0],
    [123456789.0, 1.0], [0.001, 0.5], [0.0001, 0.5], [-1.0, -2.0], [1e-3, 1e3], [1e-3, 1e4],
    [[1.5]], [2 ** 40, -3], [0.5] * 40,
]


def torch_text(s):
    return s.replace("cddp.", "torch.")


def test_repr_simple_cases_without_torch():
    assert repr(cddp.tensor([1.0, 2.0, 3.0])) == "tensor([1., 2., 3.])"
    assert repr(cddp.tensor([[1, 2], [3, 4]])) == "tensor([[1, 2],\n        [3, 4]])"
    assert repr(cddp.tensor(3.5)) == "tensor(3.5000)"
    assert repr(cddp.tensor([1.0, 2.0], dtype=cddp.float64)) == \
        "tensor([1., 2.], dtype=cddp.float64)"
    assert repr(cddp.tensor([1.5, 2.25], requires_grad=True)) == \
        "tensor([1.5000, 2.2500], requires_grad=True)"
    assert repr(cddp.zeros(0)) == "tensor([])"
    assert repr(cddp.zeros(0, 3, dtype=cddp.int64)) == "tensor([], size=(0, 3), dtype=cddp.int64)"
    assert repr(cddp.tensor([True, False])) == "tensor([ True, False])"
    assert str(cddp.tensor(1, dtype=cddp.int32)) == "tensor(1, dtype=cddp.int32)"
    assert repr(cddp.zeros(2).copy_(cddp.tensor([1.0, 2.0], requires_grad=True))) == \
        "tensor([1., 2.], grad_fn=<CopyBackwards>)"


def test_repr_matches_torch(torch):
    for d in REPR_CASES:                  # Python data: both infer the dtype
        assert torch_text(repr(cddp.tensor(d))) == repr(torch.tensor(d)), d
    rs = np.random.RandomState(0)
    arrays = [
        np.arange(2000.0, dtype=np.float32), np.arange(2000).reshape(2, 1000),
        np.arange(24.0, dtype=np.float32).reshape(2, 3, 4),
        np.arange(100.0, dtype=np.float32).reshape(10, 10) / 7, np.arange(3000).reshape(3, 1000),
        np.arange(60.0, dtype=np.float32).reshape(3, 4, 5) - 30, np.arange(10, dtype=np.int32),
        np.ones((2, 3)) / 3, np.arange(1001.0, dtype=np.float32),
        np.arange(2000.0, dtype=np.float32).reshape(40, 50), np.zeros((2, 0, 3), np.float32),
        np.arange(8000.0, dtype=np.float32).reshape(20, 20, 20), np.array([[]], np.float32),
        rs.randn(3, 50).astype(np.float32), rs.randn(4, 5) * 1e6, np.array(float("nan")),
        rs.rand(7, 3).astype(np.float32) > 0.5, np.arange(5, dtype=np.int32).reshape(5, 1),
    ]
    for d in arrays:
        assert torch_text(repr(cddp.tensor(d))) == repr(torch.from_numpy(d.copy()))
    a = torch.tensor([1.5, 2.25], requires_grad=True)
    assert torch_text(repr(cddp.tensor([1.5, 2.25], requires_grad=True))) == repr(a)
    a2 = torch.zeros(2).copy_(a)
    b2 = cddp.zeros(2).copy_(cddp.tensor([1.5, 2.25], requires_grad=True))
    assert torch_text(repr(b2)) == repr(a2)


def test_set_printoptions(torch):
    x = np.array([1.123456, 2.5], np.float32)
    try:
        for kw in [dict(precision=2), dict(sci_mode=True), dict(threshold=5, edgeitems=1),
                   dict(linewidth=20), dict(profile="full"), dict(profile="short")]:
            torch.set_printoptions(**kw)
            cddp.set_printoptions(**kw)
            for d in [x, np.arange(30.0, dtype=np.float32), np.arange(12).reshape(3, 4)]:
                assert torch_text(repr(cddp.tensor(d))) == repr(torch.from_numpy(d.copy()))
    finally:
        torch.set_printoptions(profile="default", sci_mode=None)
        cddp.set_printoptions(profile="default", sci_mode=None)
    assert repr(cddp.tensor([1.5])) == "tensor([1.5000])"


def test_repr_of_subclasses():
    class MyT(cddp.Tensor):
        pass

    class Parameter(cddp.Tensor):          # torch prints Parameter data as "tensor(" too
        pass

    assert repr(MyT(2)) == "MyT([0., 0.])"
    assert repr(MyT(2, 2)) == "MyT([[0., 0.],\n     [0., 0.]])"
    assert repr(Parameter(2)) == "tensor([0., 0.])"


def test_repr_leaves_tensor_untouched():
    x = cddp.from_numpy(np.arange(6.0).reshape(2, 3).T)
    v = x._version
    assert repr(x) == "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]], dtype=cddp.float64)"
    assert x._version == v and not x.is_contiguous()
