"""Python / NumPy protocol behaviour the tensor-API and d2l sweeps found different from torch;
each case runs on cddp and, where installed, on torch with the same code."""
import copy
import importlib

import numpy as np
import pytest


def test_tensors_inside_a_list_are_numbers(lib):
    t = lib.tensor
    assert tuple(t([t([1.0]), t([3.0])]).shape) == (2,)          # torch.tensor([loss_a, loss_b])
    assert tuple(t([[t([1]), t([2])]]).shape) == (1, 2)
    assert t([t(1.0), t([3.0])]).tolist() == [1.0, 3.0]
    assert t([t(1, dtype=lib.float64), t(2)]).dtype == lib.float64
    assert t([t(True), 1]).dtype == lib.int64
    with pytest.raises(ValueError, match="only one element tensors"):
        t([t([1.0, 2.0]), t([3.0, 4.0])])
    assert tuple(t([np.array([1.0, 2.0]), np.array([3.0, 4.0])]).shape) == (2, 2)   # arrays: blocks
    assert tuple(t(t([1.0, 2.0])).shape) == (2,)


def test_copy_copy_shares_storage(lib):
    a = lib.zeros(3)
    b = copy.copy(a)
    b[0] = 9
    assert b is not a and a.tolist() == [9.0, 0.0, 0.0]
    p = lib.nn.Parameter(lib.ones(2))
    q = copy.copy(p)
    assert isinstance(q, lib.nn.Parameter) and q.requires_grad and q.data_ptr() == p.data_ptr()


def test_contains_reversed_is_signed(lib):
    t = lib.tensor([[1, 2], [3, 4]])
    assert 3 in t and 7 not in t and lib.tensor([1, 2]) in t
    with pytest.raises(RuntimeError):
        "a" in t                                   # noqa: B015
    assert [r.tolist() for r in reversed(t)] == [[3, 4], [1, 2]]
    assert reversed(lib.tensor(3)).tolist() == 3
    assert not lib.ones(1, dtype=lib.uint8).is_signed()
    assert lib.ones(1, dtype=lib.int8).is_signed() and lib.ones(1).is_signed()


def test_numpy_functions_give_tensors_back(lib):
    x = lib.tensor([1.0, 4.0])
    for r in (np.exp(x), np.add(x, 1), np.sqrt(lib.tensor(4.0))):
        assert isinstance(r, lib.Tensor)
    assert np.sqrt(x).tolist() == [1.0, 2.0]
    assert np.isnan(x).dtype == lib.uint8


def test_writing_one_element_of_an_expanded_tensor(lib):
    e = lib.zeros(1, 3).expand(2, 3)
    e[0, 0] = 1
    assert e.tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]      # both rows are one memory
    with pytest.raises(RuntimeError, match="single memory location"):
        e[:, 0] = lib.tensor([1.0, 2.0])


def test_int_and_float_of_several_elements(lib):
    for f in (int, float):
        with pytest.raises(ValueError, match="only one element tensors"):
            f(lib.ones(3))


@pytest.mark.parametrize("mod,cls", [("multinomial", "Multinomial"), ("beta", "Beta"),
                                     ("one_hot_categorical", "OneHotCategorical"),
                                     ("relaxed_bernoulli", "RelaxedBernoulli"),
                                     ("weibull", "Weibull")])
def test_distribution_submodules(lib, mod, cls):
    m = importlib.import_module(f"{lib.__name__}.distributions.{mod}")
    assert getattr(m, cls) is getattr(lib.distributions, cls)
    assert getattr(lib.distributions, mod) is m
    if mod == "multinomial":
        lib.manual_seed(0)
        s = m.Multinomial(10, lib.tensor([0.5, 0.5])).sample()
        assert float(s.sum()) == 10.0
