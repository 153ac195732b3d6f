"""bfloat16 products on the CPU: cddp vs torch (one thread), same shapes, same data.

    python bench/bf16.py [--quick]

Rows (steps/s; ratios cddp / torch from the same run, timing windows interleaved as in
bench/train.py): matmul of (1024, 1024) @ (1024, 1024) and a Linear-shaped (256, 1024) @
(1024, 4096)^T in float32 and in bfloat16; F.linear 1024 -> 4096 on a batch of 256, forward +
backward, bfloat16; conv2d 3x3 128 -> 128 on (32, 128, 16, 16), forward, and forward +
backward, bfloat16; one training step of the seed's ResNet-18 (bench/resnet.py's model, batch
32 of 3x32x32, SGD) in float32 and under autocast("cpu", dtype=bfloat16).

On a CPU with AVX512-BF16 cddp multiplies bfloat16 operands with its own kernel
(ops/linalg/bgemm_avx512.c, vdpbf16ps); torch uses oneDNN's. Elsewhere both fall back to
float32 arithmetic. `python -c "import cddp; print(cddp._C._blas_info()['bgemm_kernel'])"`
says which path this machine takes.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import _table  # noqa: E402  (also puts this checkout's cddp first)
from resnet import build  # noqa: E402


def _matmul(lib, A, B, dtype, transpose_b=False):
    a = lib.tensor(A).to(getattr(lib, dtype))
    b = lib.tensor(B).to(getattr(lib, dtype))
    if transpose_b:
        b = b.t()
    return lambda: a @ b


def _linear(lib, X, W, Bias):
    bf = lib.bfloat16
    x = lib.tensor(X).to(bf).requires_grad_()
    w = lib.tensor(W).to(bf).requires_grad_()
    b = lib.tensor(Bias).to(bf).requires_grad_()

    def step():
        lib.nn.functional.linear(x, w, b).float().sum().backward()
    return step


def _conv(lib, X, W, grad):
    bf = lib.bfloat16
    x = lib.tensor(X).to(bf).requires_grad_(grad)
    w = lib.tensor(W).to(bf).requires_grad_(grad)

    def step():
        if grad:
            lib.nn.functional.conv2d(x, w, padding=1).float().sum().backward()
        else:
            with lib.no_grad():
                lib.nn.functional.conv2d(x, w, padding=1)
    return step


def _resnet(lib, X, Y, amp):
    model, _, _, opt, crit, x, y = build(lib, True, X, Y)

    def step():
        opt.zero_grad()
        with lib.autocast("cpu", dtype=lib.bfloat16, enabled=amp):
            loss = crit(model(x), y)
        loss.backward()
        opt.step()
    return step


def main():
    rng = np.random.default_rng(0)
    f32 = np.float32
    A = rng.standard_normal((1024, 1024)).astype(f32)
    B = rng.standard_normal((1024, 1024)).astype(f32)
    X = rng.standard_normal((256, 1024)).astype(f32)
    W = (rng.standard_normal((4096, 1024)) * 0.03).astype(f32)
    Bias = rng.standard_normal(4096).astype(f32)
    CX = rng.standard_normal((32, 128, 16, 16)).astype(f32)
    CW = (rng.standard_normal((128, 128, 3, 3)) * 0.03).astype(f32)
    RX = rng.standard_normal((32, 3, 32, 32)).astype(f32)
    RY = rng.integers(0, 6, 32)
    cases = [
        ("matmul 1024^3 float32", lambda lib: _matmul(lib, A, B, "float32")),
        ("matmul 1024^3 bfloat16", lambda lib: _matmul(lib, A, B, "bfloat16")),
        ("matmul (256,1024)@(4096,1024)^T float32",
         lambda lib: _matmul(lib, X, W, "float32", True)),
        ("matmul (256,1024)@(4096,1024)^T bfloat16",
         lambda lib: _matmul(lib, X, W, "bfloat16", True)),
        ("linear 1024->4096 b256 fwd+bwd bfloat16", lambda lib: _linear(lib, X, W, Bias)),
        ("conv2d 3x3 128->128 (32,128,16,16) fwd bf16", lambda lib: _conv(lib, CX, CW, False)),
        ("conv2d 3x3 128->128 fwd+bwd bf16", lambda lib: _conv(lib, CX, CW, True)),
        ("ResNet-18 step b32 float32", lambda lib: _resnet(lib, RX, RY, False)),
        ("ResNet-18 step b32 autocast bf16", lambda lib: _resnet(lib, RX, RY, True)),
    ]
    _table(cases, 44)


if __name__ == "__main__":
    main()
