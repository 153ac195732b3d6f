"""The recurrences' per-step products with W_hh packed once (ops/linalg/blas.h's
cddp_gemm_fixed, sgemm_avx512.c's _pack/_packed) on float32, across every edge of the blocking:
H = 300 makes the forward's depth (300) and the backward's (4H = 1200) span several KC = 256
slices and the columns ragged against NR = 32; 13 rows straddle MR = 12. Reference: the same
module in float64 (libm and dgemm, no packing), so a wrong panel offset or slice beta shows as
an O(1) error, not a rounding one."""
import numpy as np
import pytest

import cddp
import cddp.nn as nn

# whether this process packs fixed operands (an AVX-512 CPU as the process sees it — valgrind's
# virtual CPU has none — and CDDP_GEMM not "blas")
PACKED = cddp._C._blas_info()["fixed_operand_packed"]


def _run(mode, dtype, x, weights):
    cddp.manual_seed(0)
    m = getattr(nn, mode)(x.shape[2], 300, num_layers=1).to(dtype)
    m.load_state_dict({k: cddp.from_numpy(v).to(dtype) for k, v in weights.items()})
    xt = cddp.from_numpy(x).to(dtype).requires_grad_(True)
    out, _ = m(xt)
    (out * cddp.from_numpy(np.cos(np.arange(out.numel())).reshape(out.shape)).to(dtype)).sum() \
        .backward()
    return (out.detach().double().numpy(), xt.grad.double().numpy(),
            m.weight_hh_l0.grad.double().numpy())


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_packed_steps_match_float64(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 13, 40)).astype(np.float32)
    cddp.manual_seed(0)
    weights = {k: v.detach().numpy().copy()
               for k, v in getattr(nn, mode)(40, 300).state_dict().items()}
    calls = cddp._C._blas_info()["own_sgemm_calls"]
    got = _run(mode, cddp.float32, x, weights)
    used = cddp._C._blas_info()["own_sgemm_calls"] - calls
    want = _run(mode, cddp.float64, x, weights)
    for g, w, what in zip(got, want, ("output", "dx", "dW_hh")):
        scale = np.abs(w).max()
        assert np.abs(g - w).max() <= 2e-5 * scale, (what, np.abs(g - w).max() / scale)
    if PACKED:   # 5 forward and 5 backward steps through the packed operand, at least
        assert used >= 10, used
