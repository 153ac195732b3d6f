"""Complex tensors (cddp/_complex.py) and torch.fft (cddp/fft.py).

Oracles: NumPy's complex arithmetic and FFTs for values; central finite differences in
float64 for gradients (a real loss of the outputs, each input perturbed); torch 2.13 where
installed for LLaMA's rotary embedding inside a training loop and for every transform's
values and gradients; a 2-rank DDP run against one process for a model whose rotary table
is a complex buffer that DDP must broadcast.
"""
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from ddp_util import load, run_ranks

RNG = np.random.RandomState(0)


def arr(*shape, dtype=np.float64):
    return RNG.randn(*shape).astype(dtype)


def carr(*shape, dtype=np.complex128):
    return (RNG.randn(*shape) + 1j * RNG.randn(*shape)).astype(dtype)


def cz(a):
    """A cddp complex tensor holding the complex ndarray a."""
    real = np.stack([a.real, a.imag], -1).astype(np.float32 if a.dtype == np.complex64
                                                 else np.float64)
    return cddp.view_as_complex(cddp.tensor(real))


# ---- views and arithmetic against NumPy ------------------------------------------------------

def test_view_as_complex_and_real_are_views():
    x = cddp.tensor(arr(3, 4, 2, dtype=np.float32))
    z = cddp.view_as_complex(x)
    assert z.dtype == cddp.complex64 and tuple(z.shape) == (3, 4) and z.is_complex()
    assert cddp.view_as_real(z) is x
    z.real[1, 2] = 7.0                      # writes through to x, as torch's views
    assert float(x[1, 2, 0]) == 7.0
    np.testing.assert_array_equal(z.numpy(), x.numpy()[..., 0] + 1j * x.numpy()[..., 1])
    assert cddp.view_as_complex(cddp.tensor(arr(2, 2))).dtype == cddp.complex128


def test_view_as_complex_rejects_bad_layouts():
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        cddp.view_as_complex(cddp.zeros(3, 3))
    with pytest.raises(RuntimeError, match="stride 1"):
        cddp.view_as_complex(cddp.zeros(2, 3).t())
    with pytest.raises(RuntimeError, match="float and double"):
        cddp.view_as_complex(cddp.zeros(3, 2, dtype=cddp.int64))
    with pytest.raises(RuntimeError, match="only supported for complex"):
        cddp.view_as_real(cddp.zeros(3, 2))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_ops_match_numpy(op):
    a, b = carr(4, 1, 3), carr(5, 3)
    r = arr(4, 5, 3)
    f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
         "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    pairs = [(cz(a), cz(b), a, b), (cz(a), cddp.tensor(r), a, r), (cddp.tensor(r), cz(b), r, b),
             (cz(a), 2.5 - 1.5j, a, 2.5 - 1.5j), (3 + 2j, cz(b), 3 + 2j, b),
             (cz(a), 2, a, 2)]
    for x, y, nx, ny in pairs:
        got = f(x, y)
        assert got.dtype == cddp.complex128
        np.testing.assert_allclose(got.numpy(), f(nx, ny), rtol=1e-12, atol=1e-12)


def test_unary_reductions_and_matmul_match_numpy():
    a = carr(3, 4)
    z = cz(a)
    for got, want in [(z.abs(), np.abs(a)), (cddp.abs(z), np.abs(a)), (z.angle(), np.angle(a)),
                      (z.exp(), np.exp(a)), (cddp.exp(z), np.exp(a)), (z.conj(), a.conj()),
                      (-z, -a), (z.sum(), a.sum()), (z.sum(1), a.sum(1)),
                      (z.mean(0, keepdim=True), a.mean(0, keepdims=True)),
                      (z.sgn(), a / np.abs(a)), (z ** 3, a ** 3), (z.square(), a * a),
                      (z @ cz(a.T.copy()), a @ a.T),
                      (cddp.real(z), a.real), (cddp.imag(z), a.imag)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-13)
    m = arr(4, 2)
    np.testing.assert_allclose((z @ cddp.tensor(m)).numpy(), a @ m, rtol=1e-12)
    np.testing.assert_array_equal((z == z).numpy(), np.ones((3, 4), bool))
    assert z[1, 2].item() == a[1, 2]
    assert cddp.is_complex(z) and not cddp.is_complex(cddp.zeros(2))
    np.testing.assert_allclose(cddp.einsum("ij,kj->ik", z, z).numpy(),
                               np.einsum("ij,kj->ik", a, a), rtol=1e-12)
    np.testing.assert_array_equal(cddp.roll(z, 1, 0).numpy(), np.roll(a, 1, 0))


def test_shape_ops_match_numpy():
    a = carr(2, 3, 4)
    z = cz(a)
    cases = [(z.view(6, 4), a.reshape(6, 4)), (z.reshape(-1), a.reshape(-1)),
             (z.flatten(1), a.reshape(2, 12)), (z.unsqueeze(-1), a[..., None]),
             (z[:, None].squeeze(1), a), (z.permute(2, 0, 1), a.transpose(2, 0, 1)),
             (z.transpose(0, -1), a.swapaxes(0, -1)), (z[1], a[1]), (z[..., 1:3], a[..., 1:3]),
             (z[:, [0, 2]], a[:, [0, 2]]), (z[z.abs() > 1], a[np.abs(a) > 1]),
             (z[:1].expand(3, 3, 4), np.broadcast_to(a[:1], (3, 3, 4))),
             (z.repeat(1, 2, 1), np.tile(a, (1, 2, 1))),
             (z.roll(1, 2), np.roll(a, 1, 2)), (z.chunk(2, 2)[1], a[..., 2:]),
             (z.contiguous().clone(), a)]
    for got, want in cases:
        np.testing.assert_array_equal(got.numpy(), want)
    w = cz(a)
    w[0, 1] = cz(a[1, 0])
    w[1, :, 0] = 5.0
    want = a.copy()
    want[0, 1] = a[1, 0]
    want[1, :, 0] = 5.0
    np.testing.assert_array_equal(w.numpy(), want)


def test_casts():
    z = cz(carr(3, dtype=np.complex64))
    assert z.to(cddp.complex128).dtype == cddp.complex128
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        r = z.to(cddp.float32)
    np.testing.assert_array_equal(r.numpy(), z.numpy().real)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert z.type_as(z).dtype == cddp.complex64 and z.to("cpu").dtype == cddp.complex64


# ---- gradients: finite differences -----------------------------------------------------------

def fd_check(f, *inputs, eps=1e-6, rtol=1e-6):
    """f maps float64 leaf tensors to a real scalar; compare autograd with central
    differences over every input element."""
    leaves = [cddp.tensor(x, requires_grad=True) for x in inputs]
    f(*leaves).backward()
    for k, x in enumerate(inputs):
        num = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            hi, lo = x.copy(), x.copy()
            hi[i] += eps
            lo[i] -= eps
            args = [cddp.tensor(v) for v in inputs]
            vals = []
            for v in (hi, lo):
                args[k] = cddp.tensor(v)
                vals.append(float(f(*args)))
            num[i] = (vals[0] - vals[1]) / (2 * eps)
        np.testing.assert_allclose(leaves[k].grad.numpy(), num, rtol=rtol, atol=1e-7)


def weights(*shape):
    return cddp.tensor(np.random.RandomState(7).randn(*shape))


def test_complex_arithmetic_gradients():
    def f(x, y):
        zx, zy = cddp.view_as_complex(x), cddp.view_as_complex(y)
        out = (zx * zy + zx / (zy + 3) - zx.exp().conj()) @ zy.t()
        bcast = zx * zy[:1] + zx[1:2].conj() * zy  # broadcast: grads summed back
        return (cddp.view_as_real(out) * weights(3, 3, 2)).sum() + out.abs().sum() + \
            out.angle().sum() + (cddp.view_as_real(bcast) * weights(3, 4, 2)).sum()
    fd_check(f, arr(3, 4, 2), arr(3, 4, 2))


@pytest.mark.parametrize("norm", [None, "forward", "ortho"])
def test_fft_gradients(norm):
    F = cddp.fft
    w = {}

    def dot(t, key):
        r = cddp.view_as_real(t) if t.is_complex() else t
        if key not in w:
            w[key] = weights(*r.shape)
        return (r * w[key]).sum()

    def f(x, c):
        z = cddp.view_as_complex(c)
        return (dot(F.fft(x, norm=norm), "a") + dot(F.ifft(z, n=7, norm=norm), "b") +
                dot(F.rfft(x, n=4, norm=norm), "c") + dot(F.irfft(z, norm=norm), "d") +
                dot(F.irfft(z, n=9, norm=norm), "e") + dot(F.rfft2(x, norm=norm), "f") +
                dot(F.irfftn(z, s=(2, 6), norm=norm), "g") + dot(F.fftn(z, dim=0), "h") +
                dot(F.hfft(z, norm=norm), "i") + dot(F.ihfft(x, norm=norm), "j") +
                F.rfft(x, dim=0, norm=norm).abs().sum())
    fd_check(f, arr(3, 5), arr(3, 5, 2))


# ---- values against NumPy ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm", [None, "backward", "forward", "ortho"])
def test_fft_values_match_numpy(dtype, norm):
    x = arr(4, 6, 8, dtype=dtype)
    c = (x + 1j * arr(4, 6, 8, dtype=dtype)).astype(np.complex64 if dtype == np.float32
                                                    else np.complex128)
    t, z = cddp.tensor(x), cz(c)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    F, N = cddp.fft, np.fft
    cases = [(F.fft(t, norm=norm), N.fft(x, norm=norm)), (F.fft(z, n=5, dim=1, norm=norm),
                                                          N.fft(c, 5, 1, norm=norm)),
             (F.ifft(z, n=11, norm=norm), N.ifft(c, 11, norm=norm)),
             (F.rfft(t, norm=norm), N.rfft(x, norm=norm)),
             (F.irfft(z, norm=norm), N.irfft(c, norm=norm)),
             (F.irfft(z, n=9, dim=0, norm=norm), N.irfft(c, 9, 0, norm=norm)),
             (F.fft2(z, norm=norm), N.fft2(c, norm=norm)),
             (F.ifft2(t, s=(3, 10), norm=norm), N.ifft2(x, (3, 10), norm=norm)),
             (F.rfft2(t, norm=norm), N.rfft2(x, norm=norm)),
             (F.irfft2(z, s=(6, 7), norm=norm), N.irfft2(c, (6, 7), norm=norm)),
             (F.fftn(z, norm=norm), N.fftn(c, norm=norm)),
             (F.ifftn(z, dim=(0, 2), norm=norm), N.ifftn(c, axes=(0, 2), norm=norm)),
             (F.rfftn(t, s=(5, 4), norm=norm), N.rfftn(x, (5, 4), axes=(1, 2), norm=norm)),
             (F.irfftn(z, norm=norm), N.irfftn(c, norm=norm)),
             (F.hfft(z, norm=norm), N.hfft(c, norm=norm)),
             (F.ihfft(t, norm=norm), N.ihfft(x, norm=norm))]
    for got, want in cases:
        assert got.numpy().dtype == want.astype(got.numpy().dtype).dtype
        scale = np.abs(want).max()
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=tol * scale)
    assert F.fft(t).dtype == (cddp.complex64 if dtype == np.float32 else cddp.complex128)
    assert F.irfft(z).dtype == (cddp.float32 if dtype == np.float32 else cddp.float64)


def test_freq_and_shift_helpers():
    F = cddp.fft
    np.testing.assert_allclose(F.fftfreq(7, 0.3).numpy(), np.fft.fftfreq(7, 0.3), rtol=1e-6)
    np.testing.assert_allclose(F.rfftfreq(8, 2.0).numpy(), np.fft.rfftfreq(8, 2.0), rtol=1e-6)
    x = arr(5, 6)
    np.testing.assert_array_equal(F.fftshift(cddp.tensor(x)).numpy(), np.fft.fftshift(x))
    np.testing.assert_array_equal(F.ifftshift(cddp.tensor(x), dim=0).numpy(),
                                  np.fft.ifftshift(x, axes=0))
    c = carr(5, 4)
    np.testing.assert_array_equal(F.fftshift(cz(c), dim=(0, 1)).numpy(), np.fft.fftshift(c))


def test_fft_argument_errors():
    F = cddp.fft
    with pytest.raises(ValueError, match="Invalid normalization mode"):
        F.fft(cddp.zeros(4), norm="none")
    with pytest.raises(RuntimeError, match="expects a real input"):
        F.rfft(F.fft(cddp.zeros(4)))
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        F.irfft(F.fft(cddp.zeros(1)))
    with pytest.raises(RuntimeError, match="same length"):
        F.fftn(cddp.zeros(3, 3), s=(2,), dim=(0, 1))
    with pytest.raises(IndexError):
        F.fft(cddp.zeros(3), dim=2)


def test_complex_buffer_in_module():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("fc", cddp.polar(cddp.ones(3, 2), cddp.ones(3, 2)),
                                 persistent=False)
    m = M().double().to("cpu")
    assert m.fc.dtype == cddp.complex64 and m.lin.weight.dtype == cddp.float64
    assert "fc" not in m.state_dict() and [n for n, _ in m.named_buffers()] == ["fc"]


# ---- torch as the oracle --------------------------------------------------------------------

def test_fft_values_and_gradients_match_torch():
    torch = pytest.importorskip("torch")
    x = arr(3, 6, 8, dtype=np.float32)
    out = {}
    for lib in (cddp, torch):
        t = lib.tensor(x, requires_grad=True)
        F = lib.fft
        y = F.rfft2(t, norm="ortho")
        z = F.fft(t, n=10, dim=1)
        v = F.irfftn(y * y.conj(), s=(6, 8))
        loss = y.abs().sum() + (z * (1 + 2j)).real.square().mean() + v.sum() + \
            F.ifft2(t).imag.sum() + lib.view_as_real(F.fftshift(F.fftn(t), dim=-1)).sum()
        loss.backward()
        out[lib.__name__] = [lib.view_as_real(y).detach().numpy(), v.detach().numpy(),
                             t.grad.numpy(), loss.detach().numpy()]
    for a, b in zip(out["cddp"], out["torch"]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * np.abs(b).max())


LLAMA = """
import numpy as np

def build(torch, seed=0):
    nn, F = torch.nn, torch.nn.functional

    def precompute_freqs_cis(dim, end, theta=10000.0):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device)
        freqs = torch.outer(t, freqs).float()
        return torch.polar(torch.ones_like(freqs), freqs)

    def apply_rotary_emb(xq, xk, freqs_cis):
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
        freqs_cis = freqs_cis.view(*shape)
        xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
        xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.h, self.hd = heads, dim // heads
            self.wq = nn.Linear(dim, dim, bias=False)
            self.wk = nn.Linear(dim, dim, bias=False)
            self.wv = nn.Linear(dim, dim, bias=False)
            self.wo = nn.Linear(dim, dim, bias=False)

        def forward(self, x, freqs_cis):
            b, t, _ = x.shape
            q = self.wq(x).view(b, t, self.h, self.hd)
            k = self.wk(x).view(b, t, self.h, self.hd)
            v = self.wv(x).view(b, t, self.h, self.hd)
            q, k = apply_rotary_emb(q, k, freqs_cis)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, t, -1))

    class Llama(nn.Module):
        def __init__(self, vocab=17, dim=16, heads=2, layers=2, seq=8):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.attn = nn.ModuleList([Attention(dim, heads) for _ in range(layers)])
            self.norm = nn.RMSNorm(dim)
            self.out = nn.Linear(dim, vocab, bias=False)
            self.register_buffer("freqs_cis", precompute_freqs_cis(dim // heads, seq * 2),
                                 persistent=False)

        def forward(self, tok):
            h = self.emb(tok)
            fc = self.freqs_cis[: tok.shape[1]]
            for a in self.attn:
                h = h + a(h, fc)
            return self.out(self.norm(h))

    torch.manual_seed(seed)
    m = Llama()
    rs = np.random.RandomState(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.tensor(rs.randn(*p.shape).astype(np.float32) * 0.3))
    return m

def data(step, n=4):
    rs = np.random.RandomState(100 + step)
    return rs.randint(0, 17, (n, 8)), rs.randint(0, 17, (n, 8))
"""


def _train_llama(torch, steps=3):
    ns = {}
    exec(LLAMA, ns)
    m = ns["build"](torch)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for s in range(steps):
        x, y = (torch.tensor(a) for a in ns["data"](s))
        loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, 17), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, [p.detach().numpy().copy() for p in m.parameters()]


def test_llama_rope_training_matches_torch():
    torch = pytest.importorskip("torch")
    lc, pc = _train_llama(cddp)
    lt, pt = _train_llama(torch)
    np.testing.assert_allclose(lc, lt, rtol=1e-5)
    for a, b in zip(pc, pt):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_ddp_broadcasts_complex_buffer_and_matches_one_process(tmp_path):
    body = LLAMA + """
import cddp, cddp.distributed as dist
from cddp.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
r = dist.get_rank()
m = build(cddp)
if r == 1:                       # rank 1 starts with a wrong table: DDP must broadcast rank 0's
    m.freqs_cis = m.freqs_cis * 0.5
ddp = DDP(m)
np.save(f"{OUT}/fc{r}.npy", cddp.view_as_real(m.freqs_cis).numpy())
opt = cddp.optim.AdamW(ddp.parameters(), lr=1e-2)
for s in range(3):
    x, y = (cddp.tensor(a[2 * r:2 * r + 2]) for a in data(s))
    loss = cddp.nn.functional.cross_entropy(ddp(x).reshape(-1, 17), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
np.save(f"{OUT}/w{r}.npy", np.concatenate([p.detach().numpy().ravel() for p in m.parameters()]))
dist.destroy_process_group()
"""
    proc = run_ranks(tmp_path, body, nprocs=2, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, ref = _train_llama(cddp)
    ref = np.concatenate([p.ravel() for p in ref])
    np.testing.assert_array_equal(load(tmp_path, "fc0.npy"), load(tmp_path, "fc1.npy"))
    for r in (0, 1):
        np.testing.assert_allclose(load(tmp_path, f"w{r}.npy"), ref, rtol=1e-4, atol=1e-5)


FNO = """
def build(torch, width=6, modes=3):
    nn, F = torch.nn, torch.nn.functional

    class SpectralConv2d(nn.Module):          # zongyi-li/fourier_neural_operator's layer
        def __init__(self, cin, cout, m1, m2):
            super().__init__()
            self.cout, self.m1, self.m2 = cout, m1, m2
            scale = 1 / (cin * cout)
            self.weights1 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))
            self.weights2 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))

        def forward(self, x):
            b = x.shape[0]
            x_ft = torch.fft.rfft2(x)
            out_ft = torch.zeros(b, self.cout, x.size(-2), x.size(-1) // 2 + 1,
                                 dtype=torch.cfloat, device=x.device)
            out_ft[:, :, :self.m1, :self.m2] = torch.einsum(
                "bixy,ioxy->boxy", x_ft[:, :, :self.m1, :self.m2], self.weights1)
            out_ft[:, :, -self.m1:, :self.m2] = torch.einsum(
                "bixy,ioxy->boxy", x_ft[:, :, -self.m1:, :self.m2], self.weights2)
            return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))

    class FNO2d(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc0 = nn.Linear(3, width)
            self.conv0 = SpectralConv2d(width, width, modes, modes)
            self.conv1 = SpectralConv2d(width, width, modes, modes)
            self.w0 = nn.Conv2d(width, width, 1)
            self.w1 = nn.Conv2d(width, width, 1)
            self.fc1 = nn.Linear(width, 1)

        def forward(self, x):
            x = self.fc0(x).permute(0, 3, 1, 2)
            x = F.gelu(self.conv0(x) + self.w0(x))
            x = self.conv1(x) + self.w1(x)
            return self.fc1(x.permute(0, 2, 3, 1))

    torch.manual_seed(0)
    return FNO2d()
"""


def _train_fno(torch, steps=3):
    ns = {}
    exec(FNO, ns)
    m = ns["build"](torch)
    count = sum(p.numel() * (2 if p.is_complex() else 1) for p in m.parameters())
    opt = torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=1e-4)
    rs = np.random.RandomState(5)
    losses = []
    for s in range(steps):
        x = torch.tensor(rs.randn(4, 8, 8, 3).astype(np.float32))
        y = torch.tensor(rs.randn(4, 8, 8, 1).astype(np.float32))
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    params = [torch.view_as_real(p).detach().numpy().copy() if p.is_complex()
              else p.detach().numpy().copy() for p in m.parameters()]
    return count, losses, params


def test_complex_parameters_fno_training_matches_torch():
    torch = pytest.importorskip("torch")
    cc, lc, pc = _train_fno(cddp)
    ct, lt, pt = _train_fno(torch)
    assert cc == ct
    np.testing.assert_allclose(lc, lt, rtol=1e-5)
    for a, b in zip(pc, pt):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_complex_parameters_and_factories():
    cddp.manual_seed(0)
    r = cddp.rand(2, 3, dtype=cddp.cfloat)
    cddp.manual_seed(0)
    np.testing.assert_array_equal(cddp.view_as_real(r).numpy(), cddp.rand(2, 3, 2).numpy())
    cddp.manual_seed(1)
    g = cddp.randn(4, dtype=cddp.complex128)
    cddp.manual_seed(1)
    np.testing.assert_allclose(cddp.view_as_real(g).numpy(),
                               cddp.randn(4, 2, dtype=cddp.float64).numpy() * np.sqrt(0.5))
    np.testing.assert_array_equal(cddp.ones(2, dtype=cddp.cfloat).numpy(), [1, 1])
    np.testing.assert_array_equal(cddp.full((2, 1), 1 - 2j, dtype=cddp.cdouble).numpy(),
                                  [[1 - 2j], [1 - 2j]])
    np.testing.assert_array_equal(cddp.zeros_like(g).numpy(), np.zeros(4))
    np.testing.assert_array_equal(cddp.tensor([1 + 2j, 3]).numpy(), [1 + 2j, 3])
    with pytest.raises(TypeError, match="complex dtypes are not supported"):
        cddp.arange(3, dtype=cddp.cfloat)
    p = nn.Parameter(cddp.zeros(3, dtype=cddp.cfloat))
    m = nn.Module()
    m.w = p
    assert list(m.parameters()) == [p] and p.requires_grad and p.is_leaf
    opt = cddp.optim.SGD(m.parameters(), lr=0.5)
    (p * (1 + 1j)).real.sum().backward()     # d/dRe = 1, d/dIm = -1
    np.testing.assert_array_equal(p.grad.numpy(), np.full(3, 1 - 1j))
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), np.full(3, -0.5 + 0.5j))


def test_complex_parameter_save_load_clip_and_deepcopy(tmp_path):
    import copy
    cddp.manual_seed(3)
    m = nn.Module()
    m.w = nn.Parameter(cddp.randn(3, dtype=cddp.cfloat))
    m.lin = nn.Linear(2, 2)
    (m.w.abs().sum() + m.lin(cddp.ones(1, 2)).sum()).backward()
    grads = [m.w.grad.numpy().copy(), m.lin.weight.grad.numpy().copy(),
             m.lin.bias.grad.numpy().copy()]
    total = np.sqrt(sum((np.abs(g) ** 2).sum() for g in grads))
    got = nn.utils.clip_grad_norm_(m.parameters(), 0.5)
    np.testing.assert_allclose(float(got), total, rtol=1e-6)
    np.testing.assert_allclose(m.w.grad.numpy(), grads[0] * 0.5 / (total + 1e-6), rtol=1e-5)
    cddp.save(m.state_dict(), tmp_path / "m.pt")
    back = cddp.load(tmp_path / "m.pt")
    assert back["w"].dtype == cddp.complex64
    np.testing.assert_array_equal(back["w"].numpy(), m.w.detach().numpy())
    m2 = nn.Module()
    m2.w = nn.Parameter(cddp.zeros(3, dtype=cddp.cfloat))
    m2.lin = nn.Linear(2, 2)
    m2.load_state_dict(back)
    np.testing.assert_array_equal(m2.w.detach().numpy(), m.w.detach().numpy())
    m3 = copy.deepcopy(m)
    assert m3.w is not m.w and [n for n, _ in m3.named_parameters()][0] == "w"
    np.testing.assert_array_equal(m3.w.detach().numpy(), m.w.detach().numpy())


# ---- complex numbers reaching the C entry points, more elementwise ops ------------------

def test_python_complex_scalars_with_real_tensors():
    r = arr(3, 4)
    x = cddp.tensor(r)
    cases = [(1j * x, 1j * r), (x * (1 + 2j), r * (1 + 2j)), (x + 1j, r + 1j),
             (2j - x, 2j - r), (x / 1j, r / 1j), (x - (1 - 1j), r - (1 - 1j))]
    for got, want in cases:
        assert got.dtype == cddp.complex128
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    with pytest.raises(TypeError):
        x * "a"                           # other foreign operands still raise TypeError


def test_tensor_of_complex_numbers_cat_stack_and_where():
    t = cddp.tensor([3 + 4j, 1 - 1j])
    assert t.dtype == cddp.complex64
    np.testing.assert_array_equal(t.numpy(), [3 + 4j, 1 - 1j])
    u = cddp.tensor([[1, 2j]], dtype=cddp.complex128)
    assert u.dtype == cddp.complex128 and tuple(u.shape) == (1, 2)
    a, b, r = carr(2, 3), carr(2, 3), arr(2, 3)
    np.testing.assert_array_equal(cddp.cat([cz(a), cz(b)], 1).numpy(),
                                  np.concatenate([a, b], 1))
    np.testing.assert_array_equal(cddp.cat([cddp.tensor(r), cz(b)]).numpy(),
                                  np.concatenate([r, b]))
    np.testing.assert_array_equal(cddp.stack([cz(a), cz(b)], -1).numpy(), np.stack([a, b], -1))
    m = r > 0
    np.testing.assert_array_equal(cddp.where(cddp.tensor(m), cz(a), 0).numpy(),
                                  np.where(m, a, 0))
    np.testing.assert_array_equal(cddp.where(cddp.tensor(m), cddp.tensor(r), cz(b)).numpy(),
                                  np.where(m, r, b))


def test_more_complex_ops_match_numpy():
    a, r = carr(3, 4), arr(3, 4)
    z = cz(a)
    m = r > 0
    cases = [(z.T, a.T), (z.H, a.conj().T), (z.sqrt(), np.sqrt(a)), (cddp.sqrt(z), np.sqrt(a)),
             (z ** 0.5, np.sqrt(a)), (z.log(), np.log(a)), (cddp.log(z), np.log(a)),
             (z.sin(), np.sin(a)), (z.cos(), np.cos(a)), (z ** 1.5, a ** 1.5),
             (z.reciprocal(), 1 / a), (z.flip(0), a[::-1]), (z.cumsum(1), a.cumsum(1)),
             (z.masked_fill(cddp.tensor(m), 2 - 1j), np.where(m, 2 - 1j, a)),
             (z.new_zeros(2), np.zeros(2)), (z.isfinite(), np.isfinite(a)),
             (z.norm(), np.linalg.norm(a)), (z.norm(dim=1), np.linalg.norm(a, axis=1)),
             (z.norm(p=1), np.abs(a).sum()), (cddp.norm(z, 2, 0), np.linalg.norm(a, axis=0)),
             (cddp.linalg.vector_norm(z), np.linalg.norm(a))]
    for got, want in cases:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    w = cz(a)
    w.add_(cz(a), alpha=2).mul_(1j).addcmul_(cz(a), cz(a), value=0.5)
    w.addcdiv_(cz(a), cz(a) + 3, value=-1)
    w -= 1
    np.testing.assert_allclose(w.numpy(), (a + 2 * a) * 1j + 0.5 * a * a - a / (a + 3) - 1,
                               rtol=1e-12)


def test_elementary_function_gradients():
    def f(x):
        z = cddp.view_as_complex(x)
        out = z.sqrt() + z.log() * z.sin() - z.cos() / (z ** 1.5 + 4)
        return (cddp.view_as_real(out) * weights(3, 2)).sum() + z.norm()
    fd_check(f, arr(3, 2) + 2.0)          # away from the branch cut and from 0


def test_product_gradient_reaching_it_through_a_permuted_real_view():
    # the product's incoming gradient has a non-unit stride in its (re, im) dim here
    def f(x, y):
        p = cddp.view_as_complex(x) * cddp.view_as_complex(y)
        return (cddp.view_as_real(p).transpose(-1, -2) * weights(3, 2, 4)).sum()
    fd_check(f, arr(3, 4, 2), arr(3, 4, 2))


def test_module_functions_without_complex_forms_say_so():
    z = cz(carr(3))
    for call in (lambda: cddp.log1p(z), lambda: cddp.erf(z), lambda: cddp.atan(z)):
        with pytest.raises(TypeError, match="is a complex tensor; cddp's complex tensors take "
                           "the operators"):
            call()
    with pytest.raises(TypeError, match="must be Tensor or Number, not str"):
        cddp.mul(cddp.ones(2), "a")          # other wrong types keep torch's message
    with pytest.raises(TypeError, match=r"sum\(\): argument 'input' \(position 1\) must be "
                       "Tensor, not str"):
        cddp.sum("a")


def test_module_functions_take_complex_tensors():
    """torch.sum / mul / matmul / reshape ... on complex tensors: the C entry point runs first
    and its TypeError over a complex argument hands the call to the ComplexTensor method."""
    a, b, m, v = carr(3, 4), carr(3, 4), carr(4, 2), carr(4)
    za, zb, zm, zv = cz(a), cz(b), cz(m), cz(v)
    idx = cddp.tensor([0, 2])
    cases = [
        (lambda: cddp.add(za, zb, alpha=2), a + 2 * b), (lambda: cddp.sub(za, zb), a - b),
        (lambda: cddp.mul(za, zb), a * b), (lambda: cddp.div(za, zb), a / b),
        (lambda: cddp.mul(cddp.tensor(a.real), zb), a.real * b),
        (lambda: cddp.matmul(za, zm), a @ m), (lambda: cddp.mm(za, zm), a @ m),
        (lambda: cddp.bmm(za[None], zm[None]), (a @ m)[None]),
        (lambda: cddp.sum(za), a.sum()), (lambda: cddp.sum(za, dim=0), a.sum(0)),
        (lambda: cddp.mean(za, 1), a.mean(1)),
        (lambda: cddp.transpose(za, 0, 1), a.T), (lambda: cddp.reshape(za, (12,)), a.ravel()),
        (lambda: cddp.unsqueeze(za, 0), a[None]), (lambda: cddp.flatten(za), a.ravel()),
        (lambda: cddp.permute(za, (1, 0)), a.T), (lambda: cddp.movedim(za[None], 0, 2),
                                                   np.moveaxis(a[None], 0, 2)),
        (lambda: cddp.narrow(za, 1, 1, 2), a[:, 1:3]), (lambda: cddp.select(za, 1, 2), a[:, 2]),
        (lambda: cddp.index_select(za, 1, idx), a[:, [0, 2]]),
        (lambda: cddp.repeat_interleave(za, 2, dim=1), np.repeat(a, 2, 1)),
        (lambda: cddp.repeat_interleave(za, 2), np.repeat(a, 2)),
        (lambda: cddp.tile(za, (2,)), np.tile(a, (2,))),
        (lambda: cddp.outer(zv, zv), np.outer(v, v)), (lambda: cddp.dot(zv, zv), np.dot(v, v)),
        (lambda: cddp.vdot(zv, zv), np.vdot(v, v)), (lambda: cddp.clone(za), a),
        (lambda: cddp.chunk(za, 2, 1)[1], a[:, 2:]), (lambda: cddp.real(za), a.real),
    ]
    for k, (call, ref) in enumerate(cases):
        got = call()
        assert np.allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12), k
    assert cddp.sum(cddp.ones(3)).item() == 3.0 and cddp.sum.__name__ == "sum"


def test_user_optimizer_sees_complex_parameters():
    class ComplexMomentum(cddp.optim.Optimizer):      # written as torch users write theirs
        def __init__(self, params, lr, momentum):
            super().__init__(params, {"lr": lr, "momentum": momentum})

        @cddp.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    assert p.is_complex() and p.grad.is_complex()
                    buf = self.state[p].setdefault("buf", cddp.zeros_like(p))
                    buf.mul_(group["momentum"]).add_(p.grad)
                    p.add_(buf, alpha=-group["lr"])

    p0 = carr(3, dtype=np.complex64)
    p = nn.Parameter(cz(p0))
    opt = ComplexMomentum([p], lr=0.1, momentum=0.9)
    want, buf = p0.astype(np.complex128), np.zeros(3, complex)
    for _ in range(3):
        opt.zero_grad()
        (p * p.conj()).real.sum().backward()      # dL/dRe + i dL/dIm = 2 p
        buf = 0.9 * buf + 2 * want
        want = want - 0.1 * buf
        opt.step()
    np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-5)


def test_hyperbolic_sigmoid_prod_gather_tri_match_numpy():
    """sinh / cosh / tanh / tan / sigmoid (also as module functions, input= too), prod,
    gather, tril / triu on complex tensors against NumPy's complex arithmetic; tanh far from
    the imaginary axis (|Re z| > 20) through its asymptotic form."""
    a = carr(3, 4) * 2
    a[0, 0], a[0, 1], a[0, 2] = 30 + 0.5j, -25 - 1j, 19.9 + 0.3j
    z = cz(a)

    def back(w):
        r = cddp.view_as_real(w).numpy()
        return r[..., 0] + 1j * r[..., 1]
    refs = {"sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "tan": np.tan,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    for name, ref in refs.items():
        np.testing.assert_allclose(back(getattr(z, name)()), ref(a), rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(back(getattr(cddp, name)(input=z)), ref(a), rtol=1e-13,
                                   atol=1e-300)
    small = carr(3, 4)
    np.testing.assert_allclose(back(cz(small).prod(1)), small.prod(1), rtol=1e-12)
    np.testing.assert_allclose(back(cddp.prod(cz(small))), small.prod(), rtol=1e-12)
    idx = np.array([[0, 2], [1, 1], [3, 0]])
    np.testing.assert_array_equal(back(z.gather(1, cddp.tensor(idx))),
                                  np.take_along_axis(a, idx, 1))
    np.testing.assert_array_equal(back(cddp.tril(z)), np.tril(a))
    np.testing.assert_array_equal(back(z.triu(1)), np.triu(a, 1))


def test_tanh_and_prod_gradients():
    def f(x):
        w = cddp.view_as_complex(x)
        return (cddp.view_as_real(w.tanh()) * weights(3, 2, 2)).sum() + \
            (cddp.view_as_real(w.prod(1)) * weights(3, 2)).sum()
    fd_check(f, arr(3, 2, 2))


def test_complex_ndarrays_dunders_and_real_to_complex():
    """torch.from_numpy / as_tensor / tensor take complex ndarrays (from_numpy shares memory,
    strided too), abs(z), number ** z and real ** z, and real tensors' to / type / type_as with
    a complex dtype (found by a sweep of TimesNet / FEDformer code), against NumPy."""
    a = carr(3, 4)
    z = cddp.from_numpy(a)
    assert z.dtype == cddp.complex128
    a[0, 0] = 7 - 2j                                   # shares memory
    np.testing.assert_array_equal(cddp.view_as_real(z).numpy()[0, 0], [7.0, -2.0])
    s = cddp.from_numpy(a[:, ::2])
    np.testing.assert_array_equal(cddp.view_as_real(s).numpy()[..., 1], a[:, ::2].imag)
    b = a.astype(np.complex64)
    for f in (cddp.tensor, cddp.as_tensor):
        w = f(b)
        assert w.dtype == cddp.complex64
        np.testing.assert_array_equal(cddp.view_as_real(w).numpy()[..., 0], b.real)
    assert cddp.as_tensor(b, dtype=cddp.complex128).dtype == cddp.complex128

    def back(w):
        r = cddp.view_as_real(w).detach().numpy()
        return r[..., 0] + 1j * r[..., 1]
    np.testing.assert_allclose(abs(z).numpy(), np.abs(a), rtol=1e-15)
    np.testing.assert_allclose(back(2 ** z), 2 ** a, rtol=1e-13)
    np.testing.assert_allclose(back((-1.5) ** z), (-1.5 + 0j) ** a, rtol=1e-13)
    base = np.array([0.5, 2.0, -3.0, 1.0])
    np.testing.assert_allclose(back(cddp.tensor(base) ** z), (base + 0j) ** a, rtol=1e-13)
    r = cddp.tensor([1.0, -2.0], requires_grad=True)
    c = r.to(cddp.complex64)
    assert c.dtype == cddp.complex64 and r.type(cddp.complex128).dtype == cddp.complex128
    assert r.type_as(z).dtype == cddp.complex128
    np.testing.assert_array_equal(back(c), [1.0, -2.0])
    abs(c * (3 + 4j)).sum().backward()
    np.testing.assert_allclose(r.grad.numpy(), [5.0, -5.0])
