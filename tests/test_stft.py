"""torch.stft / torch.istft (cddp/_spectral.py).

Oracles: the DFT definition written out in NumPy (a matrix of e^{-2 pi i f n / N} against
explicitly padded and framed signals); istft(stft(x)) == x (perfect reconstruction);
finite differences for gradients to the signal and the window; torch 2.13 where installed.
"""
import numpy as np
import pytest

import cddp

RNG = np.random.RandomState(3)


def numpy_stft(x, n_fft, hop, window, center, pad_mode, normalized, onesided):
    """X[..., f, m] = sum_n xp[m * hop + n] w[n] e^{-2 pi i f n / n_fft}, from the definition."""
    if center:
        mode = {"reflect": "reflect", "constant": "constant", "replicate": "edge",
                "circular": "wrap"}[pad_mode]
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode=mode)
    n_frames = 1 + (x.shape[-1] - n_fft) // hop
    frames = np.stack([x[..., m * hop:m * hop + n_fft] for m in range(n_frames)], -1)
    nn, f = np.arange(n_fft), np.arange(n_fft // 2 + 1 if onesided else n_fft)
    dft = np.exp(-2j * np.pi * np.outer(f, nn) / n_fft)
    out = np.einsum("fn,...nm->...fm", dft, frames * window[:, None])
    return out / np.sqrt(n_fft) if normalized else out


def hann(n):
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


@pytest.mark.parametrize("center,pad_mode", [(True, "reflect"), (True, "constant"),
                                             (True, "replicate"), (False, "reflect")])
@pytest.mark.parametrize("normalized,onesided", [(False, True), (True, True), (False, False)])
def test_stft_matches_the_definition(center, pad_mode, normalized, onesided):
    x = RNG.randn(2, 300)
    n_fft, hop, win = 64, 24, 48
    w = np.zeros(n_fft)
    w[(n_fft - win) // 2:(n_fft - win) // 2 + win] = hann(win)
    got = cddp.stft(cddp.tensor(x), n_fft, hop, win, window=cddp.tensor(hann(win)),
                    center=center, pad_mode=pad_mode, normalized=normalized,
                    onesided=onesided, return_complex=True)
    want = numpy_stft(x, n_fft, hop, w, center, pad_mode, normalized, onesided)
    assert got.dtype == cddp.complex128 and tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    # 1-D input, the Tensor method, the deprecated real layout
    one = cddp.tensor(x[1]).stft(n_fft, hop, win, window=cddp.tensor(hann(win)), center=center,
                                 pad_mode=pad_mode, normalized=normalized, onesided=onesided,
                                 return_complex=True)
    np.testing.assert_allclose(one.numpy(), want[1], rtol=1e-10, atol=1e-10)
    with pytest.warns(UserWarning, match="return_complex=False is deprecated"):
        real = cddp.stft(cddp.tensor(x), n_fft, hop, win, window=cddp.tensor(hann(win)),
                         center=center, pad_mode=pad_mode, normalized=normalized,
                         onesided=onesided, return_complex=False)
    np.testing.assert_allclose(real.numpy(), np.stack([want.real, want.imag], -1), atol=1e-10)


@pytest.mark.parametrize("n_fft,hop,normalized,center", [(64, 16, False, True),
                                                         (128, 32, True, True),
                                                         (64, 16, False, False)])
def test_istft_reconstructs_the_signal(n_fft, hop, normalized, center):
    x = RNG.randn(3, 500).astype(np.float32)
    # uncentered, the first sample is seen by one window's edge only: hann's 0 there fails the
    # overlap-add check (in torch too), hamming's 0.08 does not
    w = cddp.hann_window(n_fft) if center else cddp.hamming_window(n_fft)
    spec = cddp.stft(cddp.tensor(x), n_fft, hop, window=w, normalized=normalized, center=center,
                     return_complex=True)
    y = cddp.istft(spec, n_fft, hop, window=w, normalized=normalized, center=center,
                   length=500 if center else None)
    n = 500 if center else n_fft + hop * (spec.shape[-1] - 1)
    assert y.dtype == cddp.float32 and tuple(y.shape) == (3, n)
    np.testing.assert_allclose(y.numpy(), x[:, :n], atol=2e-5)
    if not center:
        with pytest.raises(RuntimeError, match="window overlap add min"):
            cddp.istft(spec, n_fft, hop, window=cddp.hann_window(n_fft), center=False)


def test_istft_length_pads_and_nola_is_checked():
    w = cddp.hann_window(32)
    spec = cddp.stft(cddp.tensor(RNG.randn(200)), 32, 8, window=w.double(),
                     return_complex=True)
    with pytest.warns(UserWarning, match="padded with zeros in the tail"):
        y = cddp.istft(spec, 32, 8, window=w.double(), length=260)
    # as torch: the centred span runs to the last frame's end (16 + 200 + 16 samples, the
    # first 16 dropped), then zeros up to `length`
    assert tuple(y.shape) == (260,) and float(y[216:].abs().max()) == 0.0
    assert float(y[200:216].abs().min()) > 0
    with pytest.raises(RuntimeError, match="window overlap add min"):
        cddp.istft(spec, 32, 8, window=cddp.zeros(32, dtype=cddp.float64))


def test_stft_argument_errors():
    x = cddp.zeros(100)
    with pytest.raises(RuntimeError, match="return_complex parameter be given"):
        cddp.stft(x, 16)
    with pytest.raises(RuntimeError, match="1D or 2D"):
        cddp.stft(cddp.zeros(2, 2, 100), 16, return_complex=True)
    with pytest.raises(RuntimeError, match="win_length"):
        cddp.stft(x, 16, win_length=20, return_complex=True)
    with pytest.raises(RuntimeError, match="complex-valued input"):
        cddp.istft(x.reshape(10, 10), 16)
    with pytest.warns(UserWarning, match="A window was not provided"):
        cddp.stft(x, 16, return_complex=True)


def test_stft_istft_gradients_by_finite_differences():
    x0, w0 = RNG.randn(60), hann(16) + 0.1
    wts = [RNG.randn(9, 8, 2), RNG.randn(60)]

    def f(x, w):
        s = cddp.stft(x, 16, 8, window=w, return_complex=True)
        y = cddp.istft(s * (1 + 0.5j), 16, 8, window=w, length=60)
        return (cddp.view_as_real(s) * cddp.tensor(wts[0])).sum() + \
            (y * cddp.tensor(wts[1])).sum() + s.abs().sum()

    xs = [cddp.tensor(x0, requires_grad=True), cddp.tensor(w0, requires_grad=True)]
    f(*xs).backward()
    for k, base in enumerate((x0, w0)):
        num = np.zeros_like(base)
        for i in range(base.size):
            vals = []
            for e in (1e-6, -1e-6):
                args = [x0.copy(), w0.copy()]
                args[k][i] += e
                vals.append(float(f(cddp.tensor(args[0]), cddp.tensor(args[1]))))
            num[i] = (vals[0] - vals[1]) / 2e-6
        np.testing.assert_allclose(xs[k].grad.numpy(), num, rtol=1e-6, atol=1e-7)


def test_stft_istft_match_torch():
    torch = pytest.importorskip("torch")
    x = RNG.randn(2, 1000).astype(np.float32)
    wts = RNG.randn(2, 1000).astype(np.float32)
    out = {}
    for lib in (cddp, torch):
        t = lib.tensor(x, requires_grad=True)
        w = lib.hann_window(400)
        s = lib.stft(t, 512, 128, 400, window=w, return_complex=True)
        mag = s.abs()
        y = lib.istft(s, 512, 128, 400, window=w, length=1000)
        loss = mag.sum() + (y * lib.tensor(wts)).sum()
        loss.backward()
        out[lib.__name__] = [lib.view_as_real(s).detach().numpy(), y.detach().numpy(),
                             t.grad.numpy()]
    for a, b in zip(out["cddp"], out["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())
