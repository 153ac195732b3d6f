"""API behaviour a differential sweep against torch found missing or different (each test
failed before its fix): grad-mode decorators on generator functions and without parentheses,
container arithmetic, Module.get_buffer, torch.is_anomaly_enabled, an optimizer checkpoint
whose step is a plain number. Oracles: torch's documented behaviour, worked by hand."""
import pytest

import cddp
import cddp.nn as nn


def leaf():
    return cddp.ones(2, requires_grad=True)


def test_no_grad_decorates_generators_per_resumption():
    @cddp.no_grad()
    def gen(x):
        yield x * 2
        yield cddp.is_grad_enabled()

    it = gen(leaf())
    assert not next(it).requires_grad
    assert next(it) is False
    assert cddp.is_grad_enabled()                    # the consumer's mode is untouched


def test_enable_grad_generator_under_no_grad():
    @cddp.enable_grad()
    def gen(x):
        yield x * 2
        yield x * 3

    with cddp.no_grad():
        outs = list(gen(leaf()))
        assert not cddp.is_grad_enabled()
    assert [o.requires_grad for o in outs] == [True, True]


def test_inference_mode_and_set_grad_enabled_generators():
    @cddp.inference_mode()
    def gen(x):
        yield cddp.is_inference_mode_enabled(), (x * 2).requires_grad

    assert next(gen(leaf())) == (True, False)
    assert not cddp.is_inference_mode_enabled()

    @cddp.set_grad_enabled(False)
    def gen2(x):
        yield (x * 2).requires_grad

    assert next(gen2(leaf())) is False
    assert cddp.is_grad_enabled()


def test_decorated_generator_send_throw_close_and_return():
    log = []

    @cddp.no_grad()
    def gen():
        try:
            got = yield 1
            log.append((got, cddp.is_grad_enabled()))
            yield 2
        except KeyError:
            log.append(("thrown", cddp.is_grad_enabled()))
            yield 3
        finally:
            log.append(("closed", cddp.is_grad_enabled()))
        return "done"

    it = gen()
    assert next(it) == 1
    assert it.send("x") == 2
    it.close()
    it = gen()
    next(it)
    assert it.throw(KeyError) == 3
    with pytest.raises(StopIteration) as stop:
        next(it)
    assert stop.value.value == "done"
    assert log == [("x", False), ("closed", False), ("thrown", False), ("closed", False)]


def test_bare_decorators():
    @cddp.no_grad
    def f(x):
        return x * 2

    @cddp.enable_grad
    def g(x):
        return x * 2

    assert not f(leaf()).requires_grad
    with cddp.no_grad():
        assert g(leaf()).requires_grad


def test_container_arithmetic_and_pop():
    a, b = nn.ReLU(), nn.Tanh()
    s = nn.Sequential(a, b)
    assert [type(m).__name__ for m in s * 2] == ["ReLU", "Tanh"] * 2
    assert (2 * s)[2] is a                           # the same modules, not copies
    s *= 3
    assert list(s._modules) == [str(i) for i in range(6)]
    with pytest.raises(ValueError):
        s * 0
    ml = nn.ModuleList([a, b])
    assert len(ml + ml) == 4 and (ml + ml)[3] is b
    assert ml.pop(0) is a and len(ml) == 1 and ml[0] is b


def test_get_buffer():
    m = nn.Sequential(nn.BatchNorm1d(3))
    assert m.get_buffer("0.running_var").tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(AttributeError):
        m.get_buffer("0.weight")                     # a parameter, not a buffer


def test_is_anomaly_enabled():
    assert cddp.is_anomaly_enabled() is False
    with pytest.warns(UserWarning, match="Anomaly Detection"), cddp.autograd.detect_anomaly():
        assert cddp.is_anomaly_enabled() is True


def test_optimizer_checkpoint_with_a_number_step():
    p = cddp.tensor([1.0, 2.0], requires_grad=True)
    opt = cddp.optim.Adam([p], lr=0.1)
    p.grad = cddp.tensor([1.0, -2.0])
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["step"] = 1                       # as old torch checkpoints store it
    opt2 = cddp.optim.Adam([p], lr=0.1)
    opt2.load_state_dict(sd)
    opt2.step()
    # Adam's second step with the same gradient moves each coordinate by lr again
    assert p.tolist() == pytest.approx([0.8, 2.2], rel=1e-6)


def test_numpy_integers_as_conv_and_pool_arguments():
    np = pytest.importorskip("numpy")
    x = cddp.ones(1, 1, 6)
    m = nn.Conv1d(1, 1, np.int64(2), stride=(np.int64(2),), dilation=np.int64(1), bias=False)
    with cddp.no_grad():
        m.weight.fill_(1.0)
    assert m(x).tolist() == [[[2.0, 2.0, 2.0]]]       # windows (0,1) (2,3) (4,5) of ones
    same = nn.Conv2d(1, 1, (np.int64(3), np.int64(2)), padding="same")
    assert same(cddp.ones(1, 1, 6, 6)).shape == (1, 1, 6, 6)
    pooled = cddp.nn.functional.max_pool2d(cddp.arange(16.0).reshape(1, 1, 4, 4), np.int64(2))
    assert pooled.tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
