"""torch.nn.attention.flex_attention: attention whose scores a Python function modifies
(score_mod) and whose pattern a block-sparse mask restricts (BlockMask from a mask_mod).

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    block_mask = create_block_mask(causal, None, None, L, L, BLOCK_SIZE=128)
    out = flex_attention(q, k, v, score_mod=rel_bias, block_mask=block_mask)

Dimensions: B batch, H query heads (Hkv key/value heads; enable_gqa lets H be a multiple),
L queries, S keys, E head dim, Ev value dim; nq = ceil(L / Q_BLOCK), nkv = ceil(S / KV_BLOCK).

How it computes: torch's unfused ("eager") path, composed of cddp's differentiable ops — the
(B, H, L, S) score matrix, score_mod applied once to all of it with broadcast index tensors
b (B,1,1,1), h (1,H,1,1), q_idx (1,1,L,1), kv_idx (1,1,1,S) (so a mod written for scalars, as
torch's are, works unchanged), then the block mask: a position is kept when its block is full,
or partial and mask_mod says so. Rows with nothing kept give 0 and log-sum-exp -inf, as torch.
Gradients reach query, key, value and any tensor score_mod closes over (torch refuses backward
on the CPU).

BlockMask holds torch's block tables: kv_num_blocks / kv_indices (partial blocks, (B, H, nq) and
(B, H, nq, nkv): the listed blocks first, ascending, then the rest), full_kv_* for blocks
mask_mod keeps entirely (their mask_mod is skipped), and the transposed q_* tables.
create_block_mask evaluates mask_mod densely (padding past L and S counts as masked).

Differences from torch: no fused kernel (memory is that of the full score matrix, as torch's
uncompiled path; torch.compile hands the function back unchanged); kernel_options are
accepted and ignored; no warning about running uncompiled.
"""
import math
import warnings
from typing import NamedTuple

from ... import _C

__all__ = ["BlockMask", "flex_attention", "AuxOutput", "AuxRequest", "FlexKernelOptions",
           "create_block_mask", "create_mask", "or_masks", "and_masks", "noop_mask"]

FlexKernelOptions = dict
_DEFAULT_SPARSE_BLOCK_SIZE = 128


class AuxRequest(NamedTuple):
    """Which auxiliary outputs flex_attention(return_aux=...) returns."""
    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    lse: object = None
    max_scores: object = None


def noop_mask(b, h, q_idx, kv_idx):
    """Keeps every position."""
    return _C.ones((), dtype=_C.bool)


def and_masks(*mask_mods):
    """A mask_mod keeping what every one of mask_mods keeps."""
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mask_mods}")

    def and_mask(b, h, q_idx, kv_idx):
        out = _C.ones((), dtype=_C.bool)
        for m in mask_mods:
            out = out & m(b, h, q_idx, kv_idx)
        return out
    return and_mask


def or_masks(*mask_mods):
    """A mask_mod keeping what any one of mask_mods keeps."""
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mask_mods}")

    def or_mask(b, h, q_idx, kv_idx):
        out = _C.zeros((), dtype=_C.bool)
        for m in mask_mods:
            out = out | m(b, h, q_idx, kv_idx)
        return out
    return or_mask


def _indices(B, H, L, S):
    """Broadcastable int64 index tensors b, h, q_idx, kv_idx over (B, H, L, S)."""
    return (_C.arange(B).view(B, 1, 1, 1), _C.arange(H).view(1, H, 1, 1),
            _C.arange(L).view(1, 1, L, 1), _C.arange(S).view(1, 1, 1, S))


def _n_args(fn):
    import inspect
    try:
        return sum(1 for p in inspect.signature(fn).parameters.values()
                   if p.default is inspect.Parameter.empty and
                   p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    except (TypeError, ValueError):
        return 4


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):  # noqa: N803 (torch's names)
    """The dense (B, H, Q_LEN, KV_LEN) bool mask of a mask_mod (4 arguments), or of a score_mod
    (5 arguments: the positions it does not send to -inf). B / H None count as 1."""
    B, H = B or 1, H or 1
    b, h, q, kv = _indices(B, H, Q_LEN, KV_LEN)
    if _n_args(mod_fn) >= 5:
        out = mod_fn(_C.zeros((B, H, Q_LEN, KV_LEN)), b, h, q, kv)
        keep = out != float("-inf")
    else:
        keep = _as_bool(mod_fn(b, h, q, kv))
    return keep.expand(B, H, Q_LEN, KV_LEN).contiguous()


def _as_bool(x):
    x = x if isinstance(x, _C.Tensor) else _C.tensor(bool(x))
    return x if x.dtype == _C.bool else x != 0


def _block_size(bs):
    if isinstance(bs, int):
        return (bs, bs)
    bs = tuple(int(v) for v in bs)
    if len(bs) != 2:
        raise ValueError(f"BLOCK_SIZE must be an int or a pair, got {bs}")
    return bs


def _table(present):
    """torch's (num_blocks, indices) from a (..., n, m) block grid: per row the count of
    present blocks, and every column index with the present ones first, ascending, then the
    absent ones (int32)."""
    m = present.shape[-1]
    num = present.sum(-1).to(_C.int32)
    col = _C.arange(m).expand(tuple(present.shape))
    key = (~present).long() * m + col               # present first, each group ascending
    order = key.argsort(-1)
    return num, order.to(_C.int32)


def _grid(num, idx, nq, nkv):
    """The (..., nq, nkv) bool grid a (num_blocks, indices) table lists."""
    rank = _C.arange(idx.shape[-1]).expand(tuple(idx.shape))
    listed = rank < num.long().unsqueeze(-1)
    grid = _C.zeros(tuple(idx.shape[:-1]) + (nkv,), dtype=_C.bool)
    return grid.scatter(-1, idx.long(), listed)


class BlockMask:
    """torch's block-sparse attention mask (see the module docstring for the tables)."""

    def __init__(self, seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks,
                 full_kv_indices, q_num_blocks, q_indices, full_q_num_blocks, full_q_indices,
                 BLOCK_SIZE=(_DEFAULT_SPARSE_BLOCK_SIZE, _DEFAULT_SPARSE_BLOCK_SIZE),  # noqa: N803
                 mask_mod=None, **kwargs):
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        self.seq_lengths = tuple(seq_lengths)
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.q_num_blocks, self.q_indices = q_num_blocks, q_indices
        self.full_q_num_blocks, self.full_q_indices = full_q_num_blocks, full_q_indices
        self.BLOCK_SIZE = _block_size(BLOCK_SIZE)
        self.mask_mod = mask_mod if mask_mod is not None else noop_mask

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None,
                       full_kv_indices=None, BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE,  # noqa: N803
                       mask_mod=None, seq_lengths=None, compute_q_blocks=True, **kwargs):
        """A BlockMask from its kv tables (the q tables are their transposes)."""
        if kv_indices.dim() < 2:
            raise RuntimeError("BlockMask must have at least 2 dimensions")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise RuntimeError("full_kv_num_blocks and full_kv_indices must be both provided "
                               "or omitted")
        bs = _block_size(BLOCK_SIZE)
        nq, nkv = kv_indices.shape[-2], kv_indices.shape[-1]
        if seq_lengths is None:
            seq_lengths = (nq * bs[0], nkv * bs[1])
        q_tabs = [None] * 4
        if compute_q_blocks:
            part = _grid(kv_num_blocks, kv_indices, nq, nkv).transpose(-2, -1)
            q_tabs[0], q_tabs[1] = _table(part)
            if full_kv_num_blocks is not None:
                full = _grid(full_kv_num_blocks, full_kv_indices, nq, nkv).transpose(-2, -1)
                q_tabs[2], q_tabs[3] = _table(full)
        return cls(seq_lengths, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                   *q_tabs, BLOCK_SIZE=bs, mask_mod=mask_mod)

    # ---- what it masks ---------------------------------------------------------------------

    def _grids(self):
        nq, nkv = self.kv_indices.shape[-2], self.kv_indices.shape[-1]
        part = _grid(self.kv_num_blocks, self.kv_indices, nq, nkv)
        full = (_grid(self.full_kv_num_blocks, self.full_kv_indices, nq, nkv)
                if self.full_kv_num_blocks is not None else _C.zeros_like(part))
        return part, full

    def _keep(self, b, h, q, kv, L, S):
        """(Bm or B, Hm or H, L, S) bool: full blocks, and partial ones where mask_mod keeps."""
        part, full = self._grids()
        qb, kb = self.BLOCK_SIZE

        if part.shape[-2] * qb < L or part.shape[-1] * kb < S:
            raise ValueError(f"block_mask covers {tuple(self.seq_lengths)} positions, the "
                             f"attention has (L={L}, S={S})")

        def spread(grid):                        # blocks -> elements, cropped to (L, S)
            g = grid.repeat_interleave(qb, -2).repeat_interleave(kb, -1)
            return g[..., :L, :S]
        keep = _as_bool(self.mask_mod(b, h, q, kv))
        return spread(full) | (spread(part) & keep)

    def to_dense(self):
        """(B, H, nq, nkv) int32: 1 where a block is computed (partial or full)."""
        part, full = self._grids()
        return (part | full).to(_C.int32)

    def sparsity(self):
        """Percent of the (B, H, L, S) positions in blocks not computed (torch's formula: whole
        blocks counted, so a padded last block counts in full)."""
        computed = int(self.kv_num_blocks.sum())
        if self.full_kv_num_blocks is not None:
            computed += int(self.full_kv_num_blocks.sum())
        return 100 * (1 - computed * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1] / self.numel())

    def numel(self):
        return math.prod(self.shape)

    @property
    def shape(self):
        return tuple(self.kv_indices.shape[:-2]) + tuple(self.seq_lengths)

    def as_tuple(self, flatten=True):
        return (self.seq_lengths, self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks,
                self.full_kv_indices, self.q_num_blocks, self.q_indices,
                self.full_q_num_blocks, self.full_q_indices, self.BLOCK_SIZE, self.mask_mod)

    def to(self, device):
        return self

    def __getitem__(self, index):
        """Slices over batch, head and query-block dims, keeping all four (an int i is
        i:i+1, as torch). The slice's mask_mod refuses to run: set it from the original."""
        index = index if isinstance(index, tuple) else (index,)
        padded = (*index, slice(None), slice(None), slice(None))[:3]
        sizes = self.kv_num_blocks.shape[:3]
        index = tuple((slice(i + n, i + n + 1) if -n <= i < 0 else slice(i, i + 1))
                      if isinstance(i, int) else i for i, n in zip(padded, sizes))

        def sl(t):
            return None if t is None else t[index]
        return BlockMask.from_kv_blocks(sl(self.kv_num_blocks), sl(self.kv_indices),
                                        sl(self.full_kv_num_blocks), sl(self.full_kv_indices),
                                        BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=_sliced_mask_mod,
                                        seq_lengths=self.seq_lengths,
                                        compute_q_blocks=self.q_indices is not None)

    def to_string(self, grid_size=(20, 20), limit=4):
        """The block grid of each (batch, head) as text: "██" computed, "░░" partly (when the
        grid is shrunk to grid_size), "  " skipped; at most `limit` grids."""
        dense = self.to_dense()
        *lead, rows, cols = dense.shape
        if isinstance(grid_size, int):
            grid_size = (rows, cols) if grid_size == -1 else (grid_size, grid_size)
        rstep = max(1, -(-rows // grid_size[0]))
        cstep = max(1, -(-cols // grid_size[1]))
        out = []
        for n, pos in enumerate(_ndindex(tuple(lead))):
            if n == limit:
                out += ["...", "To print out more, set BlockMask.to_string(limit=N)",
                        "You can also index (BlockMask[batch, head]) to choose a specific batch "
                        "or head"]
                break
            grid = dense[pos] if pos else dense
            vis = f"{pos}\n"
            for r in range(0, rows, rstep):
                for c in range(0, cols, cstep):
                    frac = float(grid[r:r + rstep, c:c + cstep].float().mean())
                    vis += ("█" if frac == 1 else " " if frac == 0 else "░") * 2
                vis += "\n"
            out.append(vis)
        return "\n".join(out)

    def __str__(self):
        return (f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, \n"
                f"{self.to_string().strip()}\n)")

    def __repr__(self):
        def shape(x):
            return None if x is None else x.shape
        name = getattr(self.mask_mod, "__name__", self.mask_mod)
        return (f"BlockMask(\n    kv_num_blocks={self.kv_num_blocks.shape},\n"
                f"    kv_indices={self.kv_indices.shape},\n"
                f"    full_kv_num_blocks={shape(self.full_kv_num_blocks)},\n"
                f"    full_kv_indices={shape(self.full_kv_indices)},\n"
                f"    q_num_blocks={shape(self.q_num_blocks)},\n"
                f"    q_indices={shape(self.q_indices)},\n"
                f"    full_q_num_blocks={shape(self.full_q_num_blocks)},\n"
                f"    full_q_indices={shape(self.full_q_indices)},\n"
                f"    BLOCK_SIZE={self.BLOCK_SIZE},\n    shape={self.shape},\n"
                f"    sparsity={self.sparsity():.2f}%,\n    mask_mod={name}\n)")


def _sliced_mask_mod(b, h, q_idx, kv_idx):
    raise RuntimeError("Cannot use mask_mod from a sliced BlockMask. When you slice a BlockMask "
                       "using [], the mask_mod attribute is reset. You must set it from the "
                       "original BlockMask's mask_mod.")


def _ndindex(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _ndindex(shape[1:]):
            yield (i,) + rest


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None,  # noqa: N803 (torch's names)
                      BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, _compile=False,
                      separate_full_blocks=True, **kwargs):
    """The BlockMask of mask_mod over (B or 1, H or 1, Q_LEN, KV_LEN): blocks mask_mod keeps
    entirely are full (mask_mod skipped there), those it keeps in part are partial."""
    qb, kb = _block_size(BLOCK_SIZE)
    if _n_args(mask_mod) >= 5:
        raise RuntimeError("create_block_mask takes a mask_mod (b, h, q_idx, kv_idx), not a "
                           "score_mod")
    dense = create_mask(mask_mod, B, H, Q_LEN, KV_LEN)             # (B, H, L, S)
    nq, nkv = -(-Q_LEN // qb), -(-KV_LEN // kb)
    pad = _C.zeros(tuple(dense.shape[:2]) + (nq * qb, nkv * kb), dtype=_C.bool)
    pad[..., :Q_LEN, :KV_LEN] = dense
    blocks = pad.view(dense.shape[0], dense.shape[1], nq, qb, nkv, kb)
    any_ = blocks.any(5).any(3)                                     # (B, H, nq, nkv)
    all_ = blocks.all(5).all(3)
    if separate_full_blocks:
        part, full = any_ & ~all_, all_
        kv_num, kv_idx = _table(part)
        f_num, f_idx = _table(full)
    else:
        kv_num, kv_idx = _table(any_)
        f_num = f_idx = None
    return BlockMask.from_kv_blocks(kv_num, kv_idx, f_num, f_idx, BLOCK_SIZE=(qb, kb),
                                    mask_mod=mask_mod, seq_lengths=(Q_LEN, KV_LEN))


_warned_lse = [False]


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None, *, return_aux=None):
    """softmax(score_mod(q k^T * scale) restricted to block_mask) v per head:
    query (B, H, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev) -> (B, H, L, Ev); with
    return_lse also the (B, H, L) log-sum-exp of the kept scores (float32)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, _C.Tensor) or t.dim() != 4:
            raise ValueError(f"flex_attention: {name} must be a 4-D tensor (B, H, L, E), got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
    if return_lse and return_aux is not None:
        raise ValueError("Cannot specify both return_lse and return_aux. return_lse is "
                         "deprecated, please use return_aux=AuxRequest(lse=True)")
    if return_lse and not _warned_lse[0]:
        _warned_lse[0] = True
        warnings.warn("return_lse is deprecated and will be removed in v2.10. Please use "
                      "return_aux=AuxRequest(lse=True) instead.", FutureWarning, stacklevel=2)
    B, H, L, E = query.shape
    Bk, Hkv, S, Ek = key.shape
    if value.shape[0] != Bk or value.shape[1] != Hkv or value.shape[2] != S:
        raise ValueError(f"flex_attention: key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} disagree on (B, H, S)")
    if Ek != E:
        raise ValueError(f"Expect query and key/value to have the same embedding dimension "
                         f"but got E={E} and E={Ek}.")
    if Bk != B and Bk != 1:
        raise ValueError(f"Expect query and key/value to have the same batch size, or "
                         f"key/value to broadcast, but got Bq={B} and Bkv={Bk}.")
    if H != Hkv:
        if not enable_gqa:
            raise ValueError(f"Expect query and key/value to have the same number of heads but "
                             f"got Hq={H} and Hkv={Hkv}. Try setting enable_gqa=True for GQA.")
        if H % Hkv:
            raise ValueError(f"Expect number of query heads to be a multiple of kv heads for "
                             f"GQA but got Hq={H} and Hkv={Hkv}.")
        key = key.repeat_interleave(H // Hkv, 1)
        value = value.repeat_interleave(H // Hkv, 1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    low = query.dtype in (_C.float16, _C.bfloat16)
    q, k, v = (t.float() for t in (query, key, value)) if low else (query, key, value)
    s = q.matmul(k.transpose(-2, -1)) * scale                        # (B, H, L, S)
    b, h, qi, ki = _indices(B, H, L, S)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
        if tuple(s.shape) != (B, H, L, S):
            s = s.expand(B, H, L, S)
    if block_mask is not None:
        if tuple(block_mask.seq_lengths) != (L, S):
            raise ValueError(f"block_mask was created for sequence lengths "
                             f"{tuple(block_mask.seq_lengths)}, the attention has (L={L}, "
                             f"S={S}); create it with create_block_mask(..., {L}, {S})")
        keep = block_mask._keep(b, h, qi, ki, L, S)
        s = s.masked_fill(~keep, float("-inf"))
    peak = s.amax(-1, keepdim=True)                                  # (B, H, L, 1)
    empty = peak == float("-inf")
    shift = _C.where(empty, _C.zeros_like(peak), peak).detach()      # rows with nothing kept
    p = (s - shift).exp()
    denom = p.sum(-1, keepdim=True)
    safe = _C.where(denom == 0, _C.ones_like(denom), denom)
    out = (p.matmul(v) / safe).to(query.dtype)
    if not (return_lse or (return_aux is not None and (return_aux.lse or
                                                       return_aux.max_scores))):
        return out
    lse = _C.where(denom == 0, _C.full_like(denom, float("-inf")),
                   safe.log() + shift).squeeze(-1).float()
    if return_lse:
        return out, lse
    return out, AuxOutput(lse=lse if return_aux.lse else None,
                          max_scores=peak.squeeze(-1).float() if return_aux.max_scores
                          else None)
