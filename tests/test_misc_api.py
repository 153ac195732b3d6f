"""Smaller torch APIs that scripts reach for, each checked against NumPy or a hand-derived
value (and torch where the rule is torch's own)."""
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from cddp.utils.data import DataLoader, IterableDataset, SubsetRandomSampler, get_worker_info
from conftest import n, t


def test_tensor_properties_and_conversions():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = t(a)
    np.testing.assert_array_equal(n(x.T), a.T)
    np.testing.assert_array_equal(n(t(a[None]).mT), np.swapaxes(a[None], -1, -2))
    assert x.data_ptr() == x.numpy().__array_interface__["data"][0]
    assert x[0, 1].data_ptr() == x.data_ptr() + 4
    assert bool(t([1.0])) is True and bool(t([0])) is False
    assert int(t([7.9])) == 7 and float(t([2.5])) == 2.5
    assert [0, 1, 2][t(2)] == 2                                  # __index__ on int tensors
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(t([1.0, 2.0]))
    assert cddp.is_tensor(x) and not cddp.is_tensor(a)
    assert cddp.get_default_dtype() == cddp.float32
    assert cddp.float is cddp.float32 and cddp.double is cddp.float64 and cddp.long is cddp.int64


def test_data_setter_and_detach_inplace():
    w = t([1.0, 2.0], requires_grad=True)
    w.data = t([5.0, 6.0, 7.0])
    assert w.shape == (3,) and w.requires_grad
    np.testing.assert_array_equal(n(w), [5, 6, 7])
    y = w * 2
    y.detach_()
    assert y.grad_fn is None and not y.requires_grad
    z = w * 3
    z.retain_grad()
    assert z.retains_grad and not w.retains_grad
    z.sum().backward()
    np.testing.assert_array_equal(n(z.grad), [1, 1, 1])


def test_module_registration_api():
    m = nn.Module()
    m.register_parameter("p", nn.Parameter(cddp.ones(2)))
    m.add_module("lin", nn.Linear(2, 2))
    m.register_buffer("b", cddp.zeros(1))
    m.buf2 = nn.Buffer(cddp.ones(3), persistent=False)
    assert [k for k, _ in m.named_buffers()] == ["b", "buf2"]
    assert list(m.state_dict()) == ["p", "b", "lin.weight", "lin.bias"]
    assert [type(x).__name__ for x in m.modules()] == ["Module", "Linear"]
    assert m.get_submodule("lin") is m.lin and m.get_parameter("lin.bias") is m.lin.bias
    assert len(list(m.buffers())) == 2
    with pytest.raises(KeyError, match="contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(TypeError):
        m.register_buffer("x", [1, 2])


def test_parameter_list_and_dict():
    pl = nn.ParameterList([nn.Parameter(cddp.ones(1)), cddp.zeros(2)])
    assert len(pl) == 2 and isinstance(pl[1], nn.Parameter) and pl[1].shape == (2,)
    pd = nn.ParameterDict({"a": cddp.ones(3)})
    assert isinstance(pd["a"], nn.Parameter) and list(pd.keys()) == ["a"]

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pl, self.pd = pl, pd
    assert sorted(k for k, _ in Holder().named_parameters()) == ["pd.a", "pl.0", "pl.1"]


class Counting(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        assert info is None                     # single-process loading
        yield from (cddp.tensor([float(i)]) for i in range(7))


def test_iterable_dataset_and_subset_random_sampler():
    batches = list(DataLoader(Counting(), batch_size=3))
    assert [n(b).ravel().tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(list(DataLoader(Counting(), batch_size=3, drop_last=True))) == 2
    s = SubsetRandomSampler([10, 20, 30, 40], generator=cddp.Generator().manual_seed(0))
    assert sorted(s) == [10, 20, 30, 40] and len(s) == 4
    assert get_worker_info() is None


def test_one_hot_and_init_helpers():
    y = cddp.tensor([0, 2, 1])
    np.testing.assert_array_equal(n(F.one_hot(y)), np.eye(3, dtype=np.int64)[[0, 2, 1]])
    assert F.one_hot(y, num_classes=5).shape == (3, 5)
    with pytest.raises(RuntimeError, match="num_classes"):
        F.one_hot(cddp.tensor([4]), num_classes=3)
    w = cddp.empty(3, 4)
    nn.init.eye_(w)
    np.testing.assert_array_equal(n(w), np.eye(3, 4))
    assert nn.init.calculate_gain("relu") == math.sqrt(2)
    assert nn.init.calculate_gain("tanh") == 5 / 3
    assert nn.init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)


def test_adamw_decoupled_decay_by_hand():
    p = cddp.tensor([1.0, -1.0], requires_grad=True)
    opt = cddp.optim.AdamW([p], lr=0.1, weight_decay=0.5, betas=(0.9, 0.99), eps=1e-8)
    g = np.array([0.3, -0.2], np.float64)
    w = np.array([1.0, -1.0])
    m = v = np.zeros(2)
    for step in range(1, 4):
        p.grad = cddp.tensor(g.astype(np.float32))
        opt.step()
        w = w * (1 - 0.1 * 0.5)
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        mhat, vhat = m / (1 - 0.9 ** step), v / (1 - 0.99 ** step)
        w = w - 0.1 * mhat / (np.sqrt(vhat) + 1e-8)
    np.testing.assert_allclose(n(p), w, rtol=1e-5)


# ---- settings scripts make for accelerators and compilers (cddp/_compat.py, backends/) ------

def test_compile_hands_back_the_model_in_every_form():
    net = nn.Linear(3, 2)
    x = cddp.ones(4, 3)
    assert cddp.compile(net) is net
    assert cddp.compile(net, mode="max-autotune", fullgraph=True, dynamic=False) is net

    @cddp.compile
    def f(a):
        return a * 2

    @cddp.compile(mode="reduce-overhead")
    def g(a):
        return a + 1
    np.testing.assert_array_equal(n(f(x)), 2 * np.ones((4, 3)))
    np.testing.assert_array_equal(n(g(x)), 2 * np.ones((4, 3)))
    with pytest.raises(RuntimeError, match="mode or options"):
        cddp.compile(net, mode="default", options={})


def test_float32_matmul_precision_and_cpu_autocast_flag():
    assert cddp.get_float32_matmul_precision() == "highest"
    try:
        cddp.set_float32_matmul_precision("high")
        assert cddp.get_float32_matmul_precision() == "high"
        with pytest.raises(RuntimeError, match="Invalid precision"):
            cddp.set_float32_matmul_precision("low")
    finally:
        cddp.set_float32_matmul_precision("highest")
    assert cddp.is_autocast_cpu_enabled() is False
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        assert cddp.is_autocast_cpu_enabled() is True
    assert cddp.is_autocast_cpu_enabled() is False


def test_backends_flags_exist_with_torchs_cpu_defaults():
    b = cddp.backends
    flags = {"cuda.matmul.allow_tf32": b.cuda.matmul.allow_tf32,
             "cuda.matmul.allow_fp16_reduced_precision_reduction":
                 b.cuda.matmul.allow_fp16_reduced_precision_reduction,
             "mps.is_available": b.mps.is_available(), "mps.is_built": b.mps.is_built(),
             "cuda.flash_sdp_enabled": b.cuda.flash_sdp_enabled(),
             "cuda.math_sdp_enabled": b.cuda.math_sdp_enabled()}
    assert flags == {"cuda.matmul.allow_tf32": False,
                     "cuda.matmul.allow_fp16_reduced_precision_reduction": True,
                     "mps.is_available": False, "mps.is_built": False,
                     "cuda.flash_sdp_enabled": True, "cuda.math_sdp_enabled": True}
    with b.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False):
        assert not b.cuda.flash_sdp_enabled() and not b.cuda.mem_efficient_sdp_enabled()
    assert b.cuda.flash_sdp_enabled() and b.cuda.mem_efficient_sdp_enabled()
    b.cuda.enable_flash_sdp(False)
    assert not b.cuda.flash_sdp_enabled()
    b.cuda.enable_flash_sdp(True)


def test_backends_flags_match_torch():
    torch = pytest.importorskip("torch")
    assert cddp.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    assert (cddp.backends.cuda.matmul.allow_fp16_reduced_precision_reduction ==
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
    assert cddp.backends.mps.is_available() == torch.backends.mps.is_available()
    assert cddp.get_float32_matmul_precision() == torch.get_float32_matmul_precision()
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled"):
        assert getattr(cddp.backends.cuda, name)() == getattr(torch.backends.cuda, name)()


def test_pin_memory_is_the_tensor_itself_on_the_cpu():
    x = cddp.arange(6.0).reshape(2, 3)
    assert x.pin_memory() is x and x.is_pinned() is False
    # nanoGPT's batch path: pin, then a non-blocking copy to the (CPU) device
    y = x.pin_memory().to("cpu", non_blocking=True)
    np.testing.assert_array_equal(n(y), np.arange(6.0).reshape(2, 3))


def test_legacy_tensor_types_construct_and_check_like_torch():
    x = cddp.FloatTensor(2, 3)
    assert tuple(x.shape) == (2, 3) and x.dtype == cddp.float32 and n(x).sum() == 0
    assert tuple(cddp.LongTensor(cddp.Size([4])).shape) == (4,)
    assert tuple(cddp.FloatTensor().shape) == (0,)
    np.testing.assert_array_equal(n(cddp.FloatTensor((2, 3))), [2.0, 3.0])    # data, not sizes
    a = cddp.FloatTensor(np.array([[1, 0], [2, 3]], dtype=np.int32))
    assert a.dtype == cddp.float32 and n(a).tolist() == [[1, 0], [2, 3]]
    assert cddp.LongTensor([1, 2]).dtype == cddp.int64 and cddp.BoolTensor([1, 0]).dtype == cddp.bool
    assert isinstance(cddp.zeros(2), cddp.FloatTensor)
    assert not isinstance(cddp.zeros(2, dtype=cddp.int64), cddp.FloatTensor)
    assert isinstance(cddp.zeros(2, dtype=cddp.int64), cddp.LongTensor)
    assert cddp.zeros(2).type(cddp.LongTensor).dtype == cddp.int64
    assert cddp.zeros(2).type() == "torch.FloatTensor"
    with pytest.raises(TypeError):
        cddp.FloatTensor(cddp.zeros(2, dtype=cddp.int64))


def test_legacy_tensor_types_match_torch():
    torch = pytest.importorskip("torch")
    for name in ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
                 "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"):
        c, tt = getattr(cddp, name)([1, 0, 2]), getattr(torch, name)([1, 0, 2])
        assert str(c.dtype).split(".")[1] == str(tt.dtype).split(".")[1], name
        assert c.double().tolist() == tt.double().tolist(), name
        assert tuple(getattr(cddp, name)(2, 5).shape) == tuple(getattr(torch, name)(2, 5).shape)


def test_layout_spmm_and_onnx_entry_points():
    x = cddp.ones(2)
    assert x.layout is cddp.strided and x.is_sparse is False and repr(cddp.strided) == "cddp.strided"
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(n(cddp.spmm(t(a), t(a.T))), a @ a.T)
    from cddp import onnx
    assert onnx.is_in_onnx_export() is False
    with pytest.raises(RuntimeError, match="no ONNX exporter"):
        onnx.export(nn.Linear(2, 2), (cddp.ones(1, 2),), "m.onnx")


def test_inference_mode_is_no_grad_with_its_own_flag():
    x = cddp.ones(2, requires_grad=True)
    with cddp.inference_mode():
        y = x * 2
        assert cddp.is_inference_mode_enabled() and not cddp.is_grad_enabled()
        with cddp.inference_mode(False):            # torch's guard: grad mode on, flag off
            assert not cddp.is_inference_mode_enabled() and cddp.is_grad_enabled()
        assert cddp.is_inference_mode_enabled()
    assert not y.requires_grad and y.is_inference() is False
    assert cddp.is_grad_enabled() and not cddp.is_inference_mode_enabled()

    @cddp.inference_mode()
    def f(a):
        return a * 3, cddp.is_inference_mode_enabled()

    @cddp.inference_mode
    def g(a):
        return a * 3, cddp.is_inference_mode_enabled()
    for fn in (f, g):
        out, flag = fn(x)
        assert flag and not out.requires_grad and out.tolist() == [3.0, 3.0]
    assert cddp.is_grad_enabled() and not cddp.is_inference_mode_enabled()
    with pytest.raises(ZeroDivisionError):             # the flags come back after an error
        with cddp.inference_mode():
            1 / 0
    assert cddp.is_grad_enabled() and not cddp.is_inference_mode_enabled()


def test_inference_mode_matches_torch_flags():
    torch = pytest.importorskip("torch")
    for lib in (torch, cddp):
        with lib.inference_mode():
            inside = (lib.is_inference_mode_enabled(), lib.is_grad_enabled())
        with lib.inference_mode(False):
            off = (lib.is_inference_mode_enabled(), lib.is_grad_enabled())
        if lib is torch:
            want = (inside, off)
    assert (inside, off) == want


def test_jit_names_leave_code_as_python():
    net = nn.Linear(2, 2)
    assert cddp.jit.script(net) is net and cddp.jit.trace(net, cddp.ones(1, 2)) is net
    assert cddp.jit.is_scripting() is False and cddp.jit.is_tracing() is False
    assert not isinstance(net, cddp.jit.ScriptModule)

    class Block(nn.Module):
        fused: cddp.jit.Final[bool]

        def __init__(self):
            super().__init__()
            self.fused = True

        @cddp.jit.ignore
        def helper(self, a):
            return a + 1

        @cddp.jit.unused
        def other(self, a):
            return a - 1

        def forward(self, a):
            return self.helper(a) if not cddp.jit.is_scripting() else a
    b = Block()
    assert b(cddp.zeros(1)).tolist() == [1.0] and b.other(cddp.zeros(1)).tolist() == [-1.0]
    assert cddp.jit.annotate(list, [1]) == [1]
    with pytest.raises(RuntimeError, match="no TorchScript"):
        cddp.jit.save(net, "m.pt")


def test_regression_losses_take_an_integer_target_as_torch_does():
    # the blitz tutorial: MSELoss(output, torch.arange(1, 11).view(1, -1))
    x = cddp.ones(1, 10, requires_grad=True)
    target = cddp.arange(1, 11).view(1, -1)
    loss = F.mse_loss(x, target)
    assert loss.item() == 28.5                     # mean((1 - k)^2), k = 1..10
    loss.backward()
    np.testing.assert_allclose(n(x.grad), (2 * (1 - np.arange(1, 11)) / 10)[None], rtol=1e-6)
    assert nn.L1Loss()(x.detach(), target).item() == 4.5
    assert F.mse_loss(x.double(), target).dtype == cddp.float64


def test_parameter_repr_shows_requires_grad_as_torch():
    assert repr(nn.Parameter(cddp.ones(2))) == \
        "Parameter containing:\ntensor([1., 1.], requires_grad=True)"
    assert repr(nn.Parameter(cddp.ones(2), requires_grad=False)) == \
        "Parameter containing:\ntensor([1., 1.])"


def test_variable_and_default_device():
    from cddp.autograd import Variable
    t_ = cddp.ones(2)
    v = Variable(t_, requires_grad=True)
    assert v.requires_grad and not t_.requires_grad and isinstance(t_, Variable)
    v.data[0] = 5.0                                  # shares t's data, as torch's does
    assert t_.tolist() == [5.0, 1.0]
    assert str(cddp.get_default_device()) == "cpu"
    cddp.set_default_device("cpu")
    assert cddp.zeros(1).device.type == "cpu"


def test_in_place_shape_ops_change_the_tensor_itself():
    x = cddp.LongTensor([1, 2])                     # char_rnn_generation: target.unsqueeze_(-1)
    assert x.unsqueeze_(-1) is x and tuple(x.shape) == (2, 1) and x.tolist() == [[1], [2]]
    x.squeeze_()
    assert tuple(x.shape) == (2,)
    a = np.arange(6.0).reshape(2, 3)
    m = t(a)
    m.t_()
    np.testing.assert_array_equal(n(m), a.T)
    m.transpose_(0, 1)
    np.testing.assert_array_equal(n(m), a)
    m.swapdims_(0, 1)
    m[0, 1] = -1.0                                  # still a view of the same storage
    assert n(m)[0, 1] == -1.0 and m.is_contiguous() is False
    with pytest.raises(RuntimeError, match="requires grad"):
        cddp.ones(2, requires_grad=True).unsqueeze_(0)


def test_deprecated_add_alpha_first_overload_warns_and_computes():
    # char_rnn_generation: p.data.add_(-learning_rate, p.grad.data)
    a = cddp.ones(2)
    with pytest.warns(UserWarning, match="overload of add_ is deprecated"):
        a.add_(-0.5, cddp.full((2,), 2.0))
    assert a.tolist() == [0.0, 0.0]
    with pytest.warns(UserWarning, match="overload of sub is deprecated"):
        assert cddp.ones(2).sub(2, cddp.ones(2)).tolist() == [-1.0, -1.0]
    with pytest.raises(TypeError):                  # alpha stays keyword-only otherwise
        cddp.ones(2).add(cddp.ones(2), 3)
    assert cddp.ones(2).add(cddp.ones(2), alpha=3).tolist() == [4.0, 4.0]


def test_jit_overload_and_mkldnn_names():
    """torchvision's densenet decorates with torch.jit._overload_method; scripts switch
    torch.backends.mkldnn off: both must import and behave as a no-op."""
    def f(x):
        return x + 1
    assert cddp.jit._overload_method(f) is f and cddp.jit._overload(f) is f
    assert cddp.backends.mkldnn.is_available() is False
    cddp.backends.mkldnn.enabled = False
