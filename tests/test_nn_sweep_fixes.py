"""What a sweep of torch.nn's module and functional arguments against torch 2.13 found
(fifteenth session): RMSNorm's default eps on half inputs, cross_entropy's and
binary_cross_entropy's argument checks.

Oracles: closed forms (the float32 computation, NumPy), torch 2.13 (importorskip) for the
messages."""
import numpy as np
import pytest

import cddp
import cddp.nn.functional as F


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_default_eps_is_float32s_on_half_inputs(dtype):
    a = (np.random.default_rng(0).standard_normal((3, 4)) * 1e-2).astype(np.float32)
    x = cddp.tensor(a).to(getattr(cddp, dtype))
    got = F.rms_norm(x, (4,))
    xf = x.float().numpy()
    eps = np.finfo(np.float32).eps
    want = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got.float().numpy(), want, rtol=1e-2)
    np.testing.assert_allclose(cddp.nn.RMSNorm(4, elementwise_affine=False)(x).float().numpy(),
                               want, rtol=1e-2)


def test_cross_entropy_argument_checks():
    x = cddp.randn(2, 3)
    with pytest.raises(RuntimeError, match="ignore_index is not supported for floating point"):
        F.cross_entropy(x, cddp.softmax(cddp.randn(2, 3), 1), ignore_index=1)
    F.cross_entropy(x, cddp.softmax(cddp.randn(2, 3), 1))        # the default -100 is fine
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte, but got Int"):
        F.cross_entropy(x, cddp.tensor([0, 1], dtype=cddp.int32))
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        F.cross_entropy(x, cddp.tensor([0, 1]), label_smoothing=1.5)
    np.testing.assert_allclose(F.cross_entropy(x, cddp.tensor([0, 1], dtype=cddp.uint8)).item(),
                               F.cross_entropy(x, cddp.tensor([0, 1])).item(), rtol=1e-6)


def test_binary_cross_entropy_checks_input_and_target_ranges():
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(cddp.tensor([0.5]), cddp.tensor([2.0]))
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(cddp.tensor([float("nan")]), cddp.tensor([1.0]))
    got = F.binary_cross_entropy(cddp.tensor([0.25, 0.5]), cddp.tensor([1.0, 0.0])).item()
    assert got == pytest.approx(-(np.log(0.25) + np.log(0.5)) / 2, rel=1e-6)


def test_messages_match_torch():
    torch = pytest.importorskip("torch")
    cases = [
        lambda L: L.nn.functional.cross_entropy(L.randn(2, 3), L.tensor([0, 1], dtype=L.int32)),
        lambda L: L.nn.functional.cross_entropy(L.randn(2, 3), L.rand(2, 3), ignore_index=0),
        lambda L: L.nn.functional.binary_cross_entropy(L.tensor([0.5]), L.tensor([2.0])),
        lambda L: L.nn.functional.cross_entropy(L.randn(2, 3), L.tensor([0, 1]),
                                                label_smoothing=1.5),
    ]
    for case in cases:
        got = []
        for lib in (torch, cddp):
            with pytest.raises(RuntimeError) as e:
                case(lib)
            got.append(str(e.value).split("\n")[0])
        assert got[0] == got[1]
