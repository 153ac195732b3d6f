"""Complex tensors and torch.fft: cddp vs torch (one thread), same shapes, same data.

    python bench/complex.py [--quick]

Rows (steps/s): LLaMA's rotary embedding (apply_rotary_emb on q and k of (8, 256, 8, 64):
view_as_complex, the complex product with a (256, 32) table, view_as_real) forward only and
forward + backward; torch.stack of two (8, 256, 8, 32) float32 tensors along the last dim
(the interleave the complex layout needs); a spectral loss, rfft2 of two (16, 3, 64, 64)
images, |difference| mean, backward; stft + istft of (4, 16000) audio (n_fft 512, hop 128,
Hann), backward through both; one training step of a small Fourier neural operator (2
spectral layers, width 16, 12 modes, batch 8 of 32 x 32: rfft2, complex einsum with complex
weights, irfft2, Adam). Medians of interleaved windows (bench/train.py), ratios cddp / torch
from the same run.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import _table  # noqa: E402  (also puts this checkout's cddp first)


def _rope(lib, X, grad):
    freqs = 1.0 / (10000.0 ** (lib.arange(0, 64, 2)[:32].float() / 64))
    fc = lib.polar(lib.ones(256, 32), lib.outer(lib.arange(256).float(), freqs))
    xq = lib.tensor(X, requires_grad=grad)
    xk = lib.tensor(X[::-1].copy(), requires_grad=grad)

    def rot(x):
        z = lib.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return lib.view_as_real(z * fc.view(1, 256, 1, 32)).flatten(3).type_as(x)

    def step():
        if grad:
            (rot(xq).sum() + rot(xk).sum()).backward()
        else:
            with lib.no_grad():
                rot(xq), rot(xk)
    return step


def _stack(lib, X):
    a, b = lib.tensor(X[..., 0::2].copy()), lib.tensor(X[..., 1::2].copy())
    return lambda: lib.stack([a, b], -1)


def _spectral_loss(lib, A, B):
    a, b = lib.tensor(A, requires_grad=True), lib.tensor(B)

    def step():
        (lib.fft.rfft2(a) - lib.fft.rfft2(b)).abs().mean().backward()
    return step


def _stft(lib, W):
    x = lib.tensor(W, requires_grad=True)
    win = lib.hann_window(512)

    def step():
        s = lib.stft(x, 512, 128, window=win, return_complex=True)
        y = lib.istft(s * 0.5, 512, 128, window=win, length=W.shape[-1])
        (s.abs().mean() + y.pow(2).mean()).backward()
    return step


def _fno(lib, X, Y):
    nn = lib.nn
    lib.manual_seed(0)

    class Spectral(nn.Module):
        def __init__(self, c, m):
            super().__init__()
            self.c, self.m = c, m
            self.w1 = nn.Parameter(lib.rand(c, c, m, m, dtype=lib.cfloat) / (c * c))
            self.w2 = nn.Parameter(lib.rand(c, c, m, m, dtype=lib.cfloat) / (c * c))

        def forward(self, x):
            ft = lib.fft.rfft2(x)
            out = lib.zeros(x.shape[0], self.c, x.size(-2), x.size(-1) // 2 + 1,
                            dtype=lib.cfloat)
            m = self.m
            out[:, :, :m, :m] = lib.einsum("bixy,ioxy->boxy", ft[:, :, :m, :m], self.w1)
            out[:, :, -m:, :m] = lib.einsum("bixy,ioxy->boxy", ft[:, :, -m:, :m], self.w2)
            return lib.fft.irfft2(out, s=(x.size(-2), x.size(-1)))

    class FNO(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc0, self.fc1 = nn.Linear(3, 16), nn.Linear(16, 1)
            self.s = nn.ModuleList([Spectral(16, 12) for _ in range(2)])
            self.w = nn.ModuleList([nn.Conv2d(16, 16, 1) for _ in range(2)])

        def forward(self, x):
            x = self.fc0(x).permute(0, 3, 1, 2)
            for s, w in zip(self.s, self.w):
                x = nn.functional.gelu(s(x) + w(x))
            return self.fc1(x.permute(0, 2, 3, 1))
    model = FNO()
    opt = lib.optim.Adam(model.parameters(), 1e-3)
    x, y = lib.tensor(X), lib.tensor(Y)

    def step():
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return step


def main():
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((8, 256, 8, 64)).astype(np.float32)
    A = rng.standard_normal((16, 3, 64, 64)).astype(np.float32)
    B = rng.standard_normal((16, 3, 64, 64)).astype(np.float32)
    W = rng.standard_normal((4, 16000)).astype(np.float32)
    FX = rng.standard_normal((8, 32, 32, 3)).astype(np.float32)
    FY = rng.standard_normal((8, 32, 32, 1)).astype(np.float32)
    cases = [
        ("RoPE q,k (8,256,8,64), forward", lambda lib: _rope(lib, Q, False)),
        ("RoPE q,k (8,256,8,64), fwd + bwd", lambda lib: _rope(lib, Q, True)),
        ("stack 2 x (8,256,8,32) on dim -1", lambda lib: _stack(lib, Q)),
        ("rfft2 spectral loss (16,3,64,64), fwd+bwd", lambda lib: _spectral_loss(lib, A, B)),
        ("stft + istft (4, 16000), fwd + bwd", lambda lib: _stft(lib, W)),
        ("FNO 2x16ch 12 modes, b8 32x32, Adam step", lambda lib: _fno(lib, FX, FY)),
    ]
    _table(cases, 44)


if __name__ == "__main__":
    main()
