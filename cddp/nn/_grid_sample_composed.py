"""grid_sample's cases the C kernel (csrc/nn/grid_sample.c: 4-D bilinear / nearest) does not
take, composed of cddp ops so autograd gives both gradients: volumetric (5-D) trilinear and
nearest sampling, and 4-D bicubic sampling. torch's aten/native/GridSampler.h is the model:

    source index   unnormalize (align_corners: (g + 1) / 2 * (size - 1); else
                   ((g + 1) * size - 1) / 2), then padding: border clamps to [0, size - 1],
                   reflection reflects over [0, 2(size - 1)] (align_corners) or
                   [-1, 2 size - 1], then clamps; zeros leaves it
    taps           trilinear: the 8 corners of floor(ix, iy, iz), weights the products of the
                   fractional parts; nearest: the one round-half-even point; bicubic: the 4x4
                   points around floor(ix, iy) with cubic-convolution weights (A = -0.75),
                   each tap's coordinate padded on its own (reflection / border) as torch's
    reads          one gather per tap from the input flattened to (N, C, points): a tap
                   outside the input reads 0 (zeros padding) through a 0/1 mask on its weight,
                   its index clamped so the gather stays in bounds

Shapes: input (N, C, D, H, W) with grid (N, Do, Ho, Wo, 3) -> (N, C, Do, Ho, Wo); input
(N, C, H, W) with grid (N, Ho, Wo, 2) -> (N, C, Ho, Wo) for bicubic. grid[..., 0] is x (W),
1 is y (H), 2 is z (D)."""
from .. import _C

_CUBIC_A = -0.75


def _unnormalize(g, size, align_corners):
    if align_corners:
        return (g + 1) * ((size - 1) / 2)
    return ((g + 1) * size - 1) / 2


def _reflect(x, twice_low, twice_high):
    """x reflected into [twice_low / 2, twice_high / 2] (torch's reflect_coordinates)."""
    if twice_low == twice_high:
        return x * 0
    lo = twice_low / 2
    span = (twice_high - twice_low) / 2
    x = (x - lo).abs()
    extra = _C.fmod(x, span)
    flips = _C.floor(x.detach() / span)
    even = _C.fmod(flips, 2) == 0
    return _C.where(even, extra + lo, span - extra + lo)


def _pad_coord(x, size, padding_mode, align_corners):
    """A source coordinate after the padding mode's reflection / clamping (zeros: as is)."""
    if padding_mode == "border":
        return x.clamp(0, size - 1)
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        return x.clamp(0, size - 1)
    return x


def _source(g, size, padding_mode, align_corners):
    return _pad_coord(_unnormalize(g, size, align_corners), size, padding_mode, align_corners)


def _tap(flat, coords, sizes):
    """flat (N, C, P) read at integer coordinates (each (N, *out), int64) of a grid of `sizes`
    (outermost first): (values (N, C, Q), inside mask (N, Q) as flat's dtype)."""
    n, c = flat.shape[0], flat.shape[1]
    inside = None
    index = None
    for x, size in zip(coords, sizes):
        ok = (x >= 0) & (x < size)
        inside = ok if inside is None else inside & ok
        xc = x.clamp(0, size - 1)
        index = xc if index is None else index * size + xc
    index = index.reshape(n, 1, -1)
    vals = flat.gather(2, index.expand(n, c, index.shape[-1]))
    return vals, inside.reshape(n, -1).to(flat.dtype)


def grid_sample_3d(input, grid, mode, padding_mode, align_corners):  # noqa: A002
    n, c, d, h, w = input.shape
    out_shape = tuple(grid.shape[1:4])
    flat = input.reshape(n, c, d * h * w)
    ix = _source(grid[..., 0], w, padding_mode, align_corners)
    iy = _source(grid[..., 1], h, padding_mode, align_corners)
    iz = _source(grid[..., 2], d, padding_mode, align_corners)
    if mode == "nearest":
        coords = [_C.round(v.detach()).to(_C.int64) for v in (iz, iy, ix)]
        vals, inside = _tap(flat, coords, (d, h, w))
        # the grid gets torch's zero gradient (a graph, not None)
        zero = (ix * 0).reshape(n, 1, -1)
        return (vals * inside.unsqueeze(1) + zero).reshape(n, c, *out_shape)
    x0, y0, z0 = (_C.floor(v.detach()) for v in (ix, iy, iz))
    tx, ty, tz = ix - x0, iy - y0, iz - z0
    x0, y0, z0 = (v.to(_C.int64) for v in (x0, y0, z0))
    out = None
    for dz in (0, 1):
        wz = tz if dz else 1 - tz
        for dy in (0, 1):
            wy = ty if dy else 1 - ty
            for dx in (0, 1):
                wx = tx if dx else 1 - tx
                vals, inside = _tap(flat, (z0 + dz, y0 + dy, x0 + dx), (d, h, w))
                weight = (wz * wy * wx).reshape(n, -1) * inside
                term = vals * weight.unsqueeze(1)
                out = term if out is None else out + term
    return out.reshape(n, c, *out_shape)


def _cubic_weights(t):
    """The four cubic-convolution weights of fractional offset t (torch's
    get_cubic_upsample_coefficients, A = -0.75)."""
    a = _CUBIC_A
    x1 = t + 1
    w0 = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
    w1 = ((a + 2) * t - (a + 3)) * t * t + 1
    x2 = 1 - t
    w2 = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1
    x3 = x2 + 1
    w3 = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a
    return w0, w1, w2, w3


def grid_sample_bicubic(input, grid, padding_mode, align_corners):  # noqa: A002
    n, c, h, w = input.shape
    out_shape = tuple(grid.shape[1:3])
    flat = input.reshape(n, c, h * w)
    # bicubic unnormalizes without padding; each tap is padded on its own below
    ix = _unnormalize(grid[..., 0], w, align_corners)
    iy = _unnormalize(grid[..., 1], h, align_corners)
    x0, y0 = _C.floor(ix.detach()), _C.floor(iy.detach())
    wxs, wys = _cubic_weights(ix - x0), _cubic_weights(iy - y0)
    out = None
    for j in range(4):
        ty = y0 + (j - 1)
        if padding_mode != "zeros":
            ty = _pad_coord(ty, h, padding_mode, align_corners)
        for i in range(4):
            tx = x0 + (i - 1)
            if padding_mode != "zeros":
                tx = _pad_coord(tx, w, padding_mode, align_corners)
            vals, inside = _tap(flat, (ty.to(_C.int64), tx.to(_C.int64)), (h, w))
            weight = (wys[j] * wxs[i]).reshape(n, -1) * inside
            term = vals * weight.unsqueeze(1)
            out = term if out is None else out + term
    return out.reshape(n, c, *out_shape)


def affine_grid_3d(theta, size, align_corners, axis):
    """The sampling grid (N, D, H, W, 3) of the affine maps theta (N, 3, 4): grid[n, k, i, j]
    = theta[n] @ (x_j, y_i, z_k, 1). `axis(size, align_corners, dtype)` gives one axis'
    normalised coordinates."""
    n, _, d, h, w = size
    xs = axis(w, align_corners, theta.dtype)
    ys = axis(h, align_corners, theta.dtype)
    zs = axis(d, align_corners, theta.dtype)
    base = _C.stack([xs.reshape(1, 1, w).expand(d, h, w), ys.reshape(1, h, 1).expand(d, h, w),
                     zs.reshape(d, 1, 1).expand(d, h, w), _C.ones(d, h, w, dtype=theta.dtype)],
                    -1)                                                  # (D, H, W, 4)
    grid = base.reshape(1, d * h * w, 4).matmul(theta.transpose(1, 2))  # (N, D*H*W, 3)
    return grid.reshape(n, d, h, w, 3)

