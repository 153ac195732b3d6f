"""cddp._spectral — torch.stft / torch.istft (and the Tensor methods) on cddp.fft.

    spec = torch.stft(wav, n_fft=1024, hop_length=256, window=torch.hann_window(1024),
                      center=True, return_complex=True)            # (B, 513, frames), complex
    mag = spec.abs()                                               # HiFi-GAN's mel input
    wav2 = torch.istft(spec, 1024, 256, window=torch.hann_window(1024), length=wav.shape[-1])

Contract (torch 2.13's): input (L) or (B, L), real or complex; hop_length n_fft // 4, win_length
n_fft, window ones(win_length), zero-padded to n_fft in the middle; center pads n_fft // 2 on
both sides with pad_mode (reflect, constant, replicate, circular); frames of n_fft every
hop_length, times the window, transformed (rfft when onesided, the default for real input
and window; fft otherwise); normalized scales by n_fft ** -0.5; output (B?, freq, frames).
return_complex must be given for real input (as torch); False gives view_as_real's layout with
torch's deprecation warning. istft inverts it: the frames' inverse transforms times the
window, overlap-added (F.fold), divided by the overlap-added squared window (RuntimeError
where that envelope is ~0, torch's NOLA check), cut to `length` or to the centered span.
Everything is composed of differentiable cddp ops (unfold, fold, cddp.fft), so gradients flow
to the signal and to the window.
"""
import warnings

from . import _C
from ._C import Tensor
from ._complex import ComplexTensor, view_as_real

__all__ = ["stft", "istft"]


_NO_WINDOW = {
    "stft": "A window was not provided. A rectangular window will be applied,which is known to "
            "cause spectral leakage. Other windows such as torch.hann_window or "
            "torch.hamming_window are recommended to reduce spectral leakage.",
    "istft": "A window was not provided. A rectangular window will be applied.Please provide "
             "the same window used by stft to make the inversion lossless."}


def _padded_window(window, win_length, n_fft, dtype, name):
    if window is None:
        warnings.warn(_NO_WINDOW[name] + "To suppress this warning and use a rectangular window,"
                      " explicitly set `window=torch.ones(n_fft, device=<device>)`.",
                      UserWarning, stacklevel=3)
        window = _C.ones(win_length, dtype=dtype)
    if window.dim() != 1 or window.shape[0] != win_length:
        raise RuntimeError(f"stft: expected a 1D window tensor of size equal to win_length="
                           f"{win_length}, but got window with size {list(window.shape)}")
    if win_length == n_fft:
        return window
    from .nn import functional as F
    left = (n_fft - win_length) // 2
    return F.pad(window, (left, n_fft - win_length - left))


def _lengths(n_fft, hop_length, win_length):
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if hop <= 0:
        raise RuntimeError(f"stft: expected hop_length > 0, but got hop_length={hop}")
    if not 0 < win <= n_fft:
        raise RuntimeError(f"stft: expected 0 < win_length <= n_fft, but got win_length={win}")
    return hop, win


def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True,  # noqa: A002
         pad_mode="reflect", normalized=False, onesided=None, return_complex=None):
    from . import fft as _fft
    from .nn import functional as F
    is_c = isinstance(input, ComplexTensor)
    if return_complex is None and not is_c and not (window is not None and window.is_complex()):
        raise RuntimeError("stft requires the return_complex parameter be given for real inputs,"
                           " and will further require that return_complex=True in a future "
                           "PyTorch release.")
    if not is_c and not isinstance(input, Tensor):
        raise TypeError(f"stft(): argument 'input' must be Tensor, not {type(input).__name__}")
    if input.dim() not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got {input.dim()}D")
    hop, win = _lengths(n_fft, hop_length, win_length)
    x = input if input.dim() == 2 else input.unsqueeze(0)
    real_dtype = x._r.dtype if is_c else (x.dtype if x.is_floating_point() else _C.float32)
    if not is_c and not x.is_floating_point():
        x = x.to(real_dtype)
    if center:
        p = n_fft // 2
        if is_c:
            re = F.pad(x.real.unsqueeze(1), (p, p), mode=pad_mode).squeeze(1)
            im = F.pad(x.imag.unsqueeze(1), (p, p), mode=pad_mode).squeeze(1)
            x = ComplexTensor(_C.stack([re, im], -1))
        else:
            x = F.pad(x.unsqueeze(1), (p, p), mode=pad_mode).squeeze(1)
    length = x.shape[-1]
    if not 0 < n_fft <= length:
        raise RuntimeError(f"stft: expected 0 < n_fft < {length}, but got n_fft={n_fft}")
    w = _padded_window(window, win, n_fft, real_dtype, "stft")
    frames = x.unfold(-1, n_fft, hop) if not is_c else \
        ComplexTensor(x._r.unfold(1, n_fft, hop).transpose(-1, -2))
    frames = frames * w                                  # (B, n_frames, n_fft)
    one = (not is_c and not w.is_complex()) if onesided is None else onesided
    norm = "ortho" if normalized else "backward"
    spec = _fft.rfft(frames, norm=norm) if one else _fft.fft(frames, norm=norm)
    spec = spec.transpose(1, 2)                          # (B, freq, n_frames)
    if input.dim() == 1:
        spec = spec.squeeze(0)
    if return_complex is False:
        warnings.warn("stft with return_complex=False is deprecated. In a future pytorch "
                      "release, stft will return complex tensors for all inputs, and "
                      "return_complex=False will raise an error.", UserWarning, stacklevel=2)
        return view_as_real(spec)
    return spec


def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True,  # noqa: A002
          normalized=False, onesided=None, length=None, return_complex=False):
    from . import fft as _fft
    from .nn import functional as F
    if not isinstance(input, ComplexTensor):
        raise RuntimeError("istft requires a complex-valued input tensor matching the output "
                           "from stft with return_complex=True.")
    if input.dim() not in (2, 3):
        raise RuntimeError(f"istft: expected a tensor with 2 or 3 dimensions of complex "
                           f"values, but got {input.dim()}")
    hop, win = _lengths(n_fft, hop_length, win_length)
    spec = input if input.dim() == 3 else input.unsqueeze(0)
    one = (spec.shape[1] != n_fft) if onesided is None else onesided
    if one and spec.shape[1] != n_fft // 2 + 1:
        raise RuntimeError(f"istft: expected the frequency dimension (3rd to the last) of the "
                           f"input tensor to match n_fft / 2 + 1 when onesided=True, but got "
                           f"{spec.shape[1]}")
    if not one and spec.shape[1] != n_fft:
        raise RuntimeError(f"istft: expected the frequency dimension (3rd to the last) of the "
                           f"input tensor to match n_fft when onesided=False, but got "
                           f"{spec.shape[1]}")
    if return_complex and one:
        raise RuntimeError("cannot have onesided output if window or input is complex")
    real_dtype = spec._r.dtype
    w = _padded_window(window, win, n_fft, real_dtype, "istft")
    norm = "ortho" if normalized else "backward"
    cols = spec.transpose(1, 2)                          # (B, n_frames, freq)
    frames = _fft.irfft(cols, n=n_fft, norm=norm) if one else _fft.ifft(cols, norm=norm)
    if not one and not return_complex:
        frames = frames.real
    frames = frames * w                                  # (B, n_frames, n_fft)
    n_frames = frames.shape[1]
    expected = n_fft + hop * (n_frames - 1)

    def overlap_add(f):                                  # (B, n_frames, n_fft) -> (B, expected)
        return F.fold(f.transpose(1, 2), output_size=(1, expected), kernel_size=(1, n_fft),
                      stride=(1, hop)).reshape(f.shape[0], expected)
    if isinstance(frames, ComplexTensor):
        y = ComplexTensor(_C.stack([overlap_add(frames.real), overlap_add(frames.imag)], -1))
    else:
        y = overlap_add(frames)
    env = overlap_add((w * w).reshape(1, 1, n_fft).expand(1, n_frames, n_fft)).reshape(expected)
    start = n_fft // 2 if center else 0
    end = expected if length is None else start + length
    if length is None and center:
        end = expected - n_fft // 2
    end = min(end, expected)
    env = env[start:end]
    if bool((env.abs() < 1e-11).any()):
        raise RuntimeError("istft: window overlap add min: " + f"{float(env.abs().min()):g}")
    y = y[:, start:end] / env
    if length is not None and y.shape[1] < length:
        warnings.warn("The length of signal is shorter than the length parameter. Result is "
                      "being padded with zeros in the tail. Please check your center and "
                      "hop_length settings.", UserWarning, stacklevel=2)
        pad = _C.zeros(y.shape[0], length - y.shape[1], dtype=real_dtype)
        y = _C.cat([y, pad], 1) if not isinstance(y, ComplexTensor) else \
            ComplexTensor(_C.cat([y._r, _C.stack([pad, pad], -1)], 1))
    return y if input.dim() == 3 else y.squeeze(0)
