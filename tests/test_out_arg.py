"""torch's out= keyword (csrc/ops/out_arg.c), Tensor.resize_ / resize_as_ (csrc/core/resize.c),
anomaly mode (csrc/autograd/engine.c), normal(mean_tensor)'s default std, and the deprecated
nn.init / clip_grad_norm names. Values are checked against the same call without out= (the
function's own result, itself tested elsewhere) and NumPy; torch, when installed, for the
messages and the dtype rules."""
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import cddp
from conftest import subprocess_env


def test_out_receives_the_result_and_is_returned():
    a, b = cddp.randn(3, 4), cddp.randn(3, 4)
    out = cddp.empty(3, 4)
    r = cddp.add(a, b, alpha=2, out=out)
    assert r is out
    np.testing.assert_array_equal(out.numpy(), (a + 2 * b).numpy())


@pytest.mark.parametrize("name,args", [
    ("mul", lambda: (cddp.randn(5), cddp.randn(5))),
    ("exp", lambda: (cddp.randn(5),)),
    ("matmul", lambda: (cddp.randn(3, 4), cddp.randn(4, 2))),
    ("sum", lambda: (cddp.randn(3, 4), 1)),
    ("mean", lambda: (cddp.randn(3, 4), 0)),
    ("clamp", lambda: (cddp.randn(6), -0.5, 0.5)),
    ("where", lambda: (cddp.randn(4) > 0, cddp.randn(4), cddp.randn(4))),
    ("erfinv", lambda: (cddp.rand(4) * 1.8 - 0.9,)),
    ("lerp", lambda: (cddp.randn(4), cddp.randn(4), 0.3)),
    ("cumsum", lambda: (cddp.randn(2, 5), 1)),
    ("index_select", lambda: (cddp.randn(4, 3), 0, cddp.tensor([2, 0]))),
])
def test_out_matches_the_plain_call(name, args):
    fn = getattr(cddp, name)
    cddp.manual_seed(0)
    a = args()
    want = fn(*a)
    out = cddp.empty(0)
    got = fn(*a, out=out)
    assert got is out
    assert tuple(out.shape) == tuple(want.shape)
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_out_none_is_the_plain_call():
    a = cddp.randn(3)
    np.testing.assert_array_equal(cddp.neg(a, out=None).numpy(), -a.numpy())


def test_out_writes_through_a_view():
    base = cddp.zeros(4, 4)
    view = base[:, 1]                           # strided
    cddp.add(cddp.ones(4), cddp.ones(4), out=view)
    want = np.zeros((4, 4), np.float32)
    want[:, 1] = 2
    np.testing.assert_array_equal(base.numpy(), want)


def test_out_casts_to_its_dtype_and_refuses_narrowing():
    out = cddp.empty(3, dtype=cddp.float64)
    cddp.add(cddp.tensor([1, 2, 3]), cddp.tensor([1, 1, 1]), out=out)   # int64 -> float64
    assert out.dtype == cddp.float64
    np.testing.assert_array_equal(out.numpy(), [2.0, 3.0, 4.0])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        cddp.add(cddp.ones(3), cddp.ones(3), out=cddp.empty(3, dtype=cddp.int64))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Bool"):
        cddp.add(cddp.tensor([1]), cddp.tensor([1]), out=cddp.empty(1, dtype=cddp.bool))


def test_out_resizes_with_torchs_warning_only_when_out_had_elements():
    a = cddp.randn(2, 3)
    empty = cddp.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cddp.exp(a, out=empty)                       # zero elements: silent
    assert tuple(empty.shape) == (2, 3)
    wrong = cddp.zeros(5)
    with pytest.warns(UserWarning, match=r"had shape \[5\], which does not match the required "
                                         r"output shape \[2, 3\]"):
        cddp.exp(a, out=wrong)
    np.testing.assert_allclose(wrong.numpy(), np.exp(a.numpy()), rtol=1e-6)


def test_out_refuses_autograd():
    x = cddp.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"exp\(\): functions with out=\.\.\. arguments don't "
                                           "support automatic differentiation"):
        cddp.exp(x, out=cddp.empty(3))
    with cddp.no_grad():
        r = cddp.exp(x, out=cddp.empty(3))
    np.testing.assert_allclose(r.numpy(), np.exp(x.detach().numpy()), rtol=1e-6)


def test_out_tuple_for_values_and_indices():
    x = cddp.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    vals, idx = cddp.empty(0), cddp.empty(0, dtype=cddp.int64)
    r = cddp.max(x, 1, out=(vals, idx))
    assert r[0] is vals and r[1] is idx
    assert r.values is vals
    np.testing.assert_array_equal(vals.numpy(), [3.0, 5.0])
    np.testing.assert_array_equal(idx.numpy(), [0, 1])
    s = cddp.sort(x, 1, out=(cddp.empty(0), cddp.empty(0, dtype=cddp.int64)))
    np.testing.assert_array_equal(s[0].numpy(), np.sort(x.numpy(), 1))
    with pytest.raises(TypeError, match="must be tuple of 2 Tensors"):
        cddp.max(x, 1, out=vals)


def test_out_of_creation_functions_takes_outs_dtype():
    out = cddp.empty(0, dtype=cddp.int64)
    r = cddp.arange(5, out=out)
    assert r is out and out.dtype == cddp.int64
    np.testing.assert_array_equal(out.numpy(), np.arange(5))
    z = cddp.empty(0, dtype=cddp.float64)
    cddp.zeros(3, out=z)
    assert z.dtype == cddp.float64 and tuple(z.shape) == (3,)
    cddp.manual_seed(3)
    want = cddp.randn(2, 3, dtype=cddp.float64)
    cddp.manual_seed(3)
    got = cddp.randn(2, 3, out=cddp.empty(2, 3, dtype=cddp.float64))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_out_argument_must_be_a_tensor():
    with pytest.raises(TypeError, match=r"add\(\): argument 'out' must be Tensor, not list"):
        cddp.add(cddp.ones(1), cddp.ones(1), out=[1.0])


def test_wrapped_functions_keep_their_identity_for_users():
    assert cddp.exp.__name__ == "exp" and cddp.exp.__module__ == "cddp"
    assert "exp" in repr(cddp.exp)
    assert pickle.loads(pickle.dumps(cddp.exp)) is cddp.exp
    assert cddp.exp.__wrapped__ is cddp._C.exp
    # the elementwise binary functions take out= in C: no wrapper on the hottest calls — in a
    # program without complex numbers; once cddp/_complex.py loads, they are wrapped (the C
    # function first: tests/test_complex_fft.py), keeping name and pickling
    code = ("import pickle, cddp\n"
            "assert cddp.add is cddp._C.add and cddp.mul is cddp._C.mul\n"
            "cddp.cfloat\n"
            "assert cddp.add is not cddp._C.add and cddp.add.__wrapped__ is cddp._C.add\n"
            "assert cddp.add.__name__ == 'add' and pickle.loads(pickle.dumps(cddp.add)) is cddp.add\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr


def test_inplace_functions_refuse_out():
    with pytest.raises(TypeError, match="unexpected keyword argument 'out'"):
        cddp._C.clamp_(cddp.ones(2), 0, 1, out=cddp.empty(2))


@pytest.mark.parametrize("name", ["sub", "div", "eq", "maximum", "clamp_min", "pow",
                                  "logical_and", "bitwise_xor", "remainder"])
def test_elementwise_out_in_c(name):
    fn = getattr(cddp, name)
    a = cddp.tensor([3, 1, 4, 1, 5]) if name.startswith("bitwise") else \
        cddp.tensor([3.0, -1.5, 4.0, 1.0, 5.5])
    b = cddp.tensor([2, 7, 1, 8, 2]) if name.startswith("bitwise") else \
        cddp.tensor([2.0, 0.5, -1.0, 1.0, 2.0])
    want = fn(a, b)
    out = cddp.empty(0, dtype=want.dtype)
    assert fn(a, b, out=out) is out
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_out_messages_match_torch():
    torch = pytest.importorskip("torch")
    for lib in (torch, cddp):
        x = lib.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError) as e:
            lib.exp(x, out=lib.empty(3))
        assert "functions with out=... arguments don't support automatic differentiation" in \
            str(e.value)
        with pytest.raises(RuntimeError) as e:
            lib.add(lib.ones(3), lib.ones(3), out=lib.empty(3, dtype=lib.int64))
        assert "result type Float can't be cast to the desired output type Long" in str(e.value)
    t = torch.empty(0, dtype=torch.int64)
    c = cddp.empty(0, dtype=cddp.int64)
    torch.arange(2, 9, 3, out=t)
    cddp.arange(2, 9, 3, out=c)
    assert t.tolist() == c.tolist()


# ---- resize_ -------------------------------------------------------------------------------

def test_resize_keeps_values_in_order_and_grows_with_zeros():
    t = cddp.arange(6.0)
    t.resize_(2, 2)
    np.testing.assert_array_equal(t.numpy(), [[0, 1], [2, 3]])
    t.resize_(3, 3)                                  # grows past the old 6 elements
    flat = t.reshape(-1).numpy()
    np.testing.assert_array_equal(flat[:6], np.arange(6.0))
    np.testing.assert_array_equal(flat[6:], 0)
    t.resize_((0,))
    assert t.numel() == 0
    u = cddp.zeros(1)
    u.resize_as_(cddp.ones(2, 5))
    assert tuple(u.shape) == (2, 5)


def test_resize_refusals():
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        cddp.ones(2, requires_grad=True).resize_(3)
    a = np.zeros(2, np.float32)
    with pytest.raises(RuntimeError, match="not resizable"):
        cddp.from_numpy(a).resize_(10)
    with pytest.raises(RuntimeError, match="negative dimension"):
        cddp.ones(2).resize_(-1)


# ---- anomaly mode --------------------------------------------------------------------------

def test_detect_anomaly_names_the_node_that_made_nan():
    x = cddp.tensor([-1.0, 4.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        ctx = cddp.autograd.detect_anomaly()
    with ctx:
        y = cddp.sqrt(x).sum()                      # d sqrt(x) at -1: NaN
        with pytest.raises(RuntimeError, match="Function 'SqrtBackward0' returned nan values "
                                               "in its 0th output."):
            y.backward()
    assert not cddp.autograd.anomaly_mode.is_anomaly_enabled()
    y = cddp.sqrt(x).sum()
    y.backward()                                    # off again: NaN flows, as torch
    assert np.isnan(x.grad.numpy()[0])


def test_set_detect_anomaly_as_function_and_context():
    cddp.autograd.set_detect_anomaly(True)
    assert cddp.autograd.anomaly_mode.is_anomaly_enabled()
    cddp.autograd.set_detect_anomaly(False)
    with cddp.autograd.set_detect_anomaly(True):
        assert cddp.autograd.anomaly_mode.is_anomaly_enabled()
        x = cddp.ones(2, requires_grad=True)
        (x * 3).sum().backward()                    # finite: no error
        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    assert not cddp.autograd.anomaly_mode.is_anomaly_enabled()


# ---- small compatibility names -------------------------------------------------------------

def test_normal_with_a_mean_tensor_defaults_std_to_one():
    cddp.manual_seed(0)
    a = cddp.normal(cddp.zeros(3))
    cddp.manual_seed(0)
    b = cddp.normal(cddp.zeros(3), 1.0)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(TypeError, match="missing 'mean' or 'std'"):
        cddp.normal(std=cddp.ones(2))


def test_normal_default_std_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cddp.manual_seed(0)
    assert torch.normal(torch.zeros(4)).tolist() == pytest.approx(
        cddp.normal(cddp.zeros(4)).tolist(), rel=1e-6)


def test_deprecated_init_and_clip_names():
    w = cddp.empty(3, 4)
    with pytest.warns(FutureWarning, match="nn.init.normal_"):
        cddp.nn.init.normal(w, 0, 1)
    with pytest.warns(FutureWarning):
        cddp.nn.init.constant(w, 0.5)
    np.testing.assert_array_equal(w.numpy(), 0.5)
    lin = cddp.nn.Linear(2, 2)
    lin(cddp.ones(1, 2)).sum().backward()
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        n = cddp.nn.utils.clip_grad_norm(lin.parameters(), 1e-3)
    total = np.sqrt(sum((p.grad.numpy() ** 2).sum() for p in lin.parameters()))
    assert float(n) > 1e-3 and total == pytest.approx(1e-3, rel=1e-3)
