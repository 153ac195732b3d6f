"""torch.nn.functional.multi_head_attention_forward and its helpers (_canonical_mask,
_none_or_dtype, _mha_shape_check, _in_projection_packed, _in_projection), re-exported by
cddp.nn.functional.

Same signature, checks, messages and results as torch's. The attention itself is one C call
on both of torch's paths (_C._sdpa, csrc/nn/sdpa.c): need_weights=False is torch's
scaled_dot_product_attention path (a fully masked row gives zeros), need_weights=True its
explicit path (plain softmax: a fully masked row gives NaN; the returned weights are taken
after dropout, as torch returns them). Heads are views, not copies: q (L, N, E) becomes
(N, H, L, head_dim) by strides and the C kernel reads it in place; masks broadcast over
heads instead of being expanded to (N * H, L, S).
"""
import math
import warnings

from .. import _C


def _check_key_padding_mask(key_padding_mask, src_len, bsz):
    if key_padding_mask.shape[0] != bsz:
        raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                             f"{key_padding_mask.shape[0]}")
    if key_padding_mask.shape[1] != src_len:
        raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                             f"{key_padding_mask.shape[1]}")


def _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """Whether the input is batched (3-D query) or not (2-D); torch's AssertionErrors."""
    if query.dim() == 3:
        if key.dim() != 3 or value.dim() != 3:
            raise AssertionError("For batched (3-D) `query`, expected `key` and `value` to be 3-D"
                                 f" but found {key.dim()}-D and {value.dim()}-D tensors "
                                 "respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 2:
            raise AssertionError("For batched (3-D) `query`, expected `key_padding_mask` to be "
                                 f"`None` or 2-D but found {key_padding_mask.dim()}-D tensor "
                                 "instead")
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise AssertionError("For batched (3-D) `query`, expected `attn_mask` to be `None`, "
                                 f"2-D or 3-D but found {attn_mask.dim()}-D tensor instead")
        return True
    if query.dim() == 2:
        if key.dim() != 2 or value.dim() != 2:
            raise AssertionError("For unbatched (2-D) `query`, expected `key` and `value` to be "
                                 f"2-D but found {key.dim()}-D and {value.dim()}-D tensors "
                                 "respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 1:
            raise AssertionError("For unbatched (2-D) `query`, expected `key_padding_mask` to be "
                                 f"`None` or 1-D but found {key_padding_mask.dim()}-D tensor "
                                 "instead")
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 3):
                raise AssertionError("For unbatched (2-D) `query`, expected `attn_mask` to be "
                                     f"`None`, 2-D or 3-D but found {attn_mask.dim()}-D tensor "
                                     "instead")
            if attn_mask.dim() == 3:
                expected_shape = (num_heads, query.shape[0], key.shape[0])
                if tuple(attn_mask.shape) != expected_shape:
                    raise AssertionError(f"Expected `attn_mask` shape to be {expected_shape} but "
                                         f"got {attn_mask.shape}")
        return False
    raise AssertionError("query should be unbatched 2D or batched 3D tensor but received "
                         f"{query.dim()}-D query tensor")


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """A bool mask (True = masked) as a float mask of target_type (-inf where True)."""
    if mask is not None:
        is_float = mask.is_floating_point()
        if mask.dtype != _C.bool and not is_float:
            raise AssertionError(f"only bool and floating types of {mask_name} are supported")
        if check_other and other_type is not None and mask.dtype != other_type:
            warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. "
                          "Use same type for both instead.", stacklevel=2)
        if not is_float:
            mask = _C.zeros_like(mask, dtype=target_type).masked_fill_(mask, float("-inf"))
    return mask


def _none_or_dtype(input):  # noqa: A002
    if input is None:
        return None
    if isinstance(input, _C.Tensor):
        return input.dtype
    raise RuntimeError("input to _none_or_dtype() must be None or torch.Tensor")


def _in_projection_packed(q, k, v, w, b=None):
    """q, k, v projected by the packed (3E, E) weight: one GEMM for self-attention, two for
    encoder-decoder attention. The pieces are views of the projection (no copy)."""
    E = q.size(-1)
    if k is v:
        if q is k:
            proj = _C._linear(q, w, b).unflatten(-1, (3, E))
            return proj.select(-2, 0), proj.select(-2, 1), proj.select(-2, 2)
        w_q, w_kv = w.split([E, E * 2])
        b_q, b_kv = (None, None) if b is None else b.split([E, E * 2])
        kv = _C._linear(k, w_kv, b_kv).unflatten(-1, (2, E))
        return _C._linear(q, w_q, b_q), kv.select(-2, 0), kv.select(-2, 1)
    w_q, w_k, w_v = w.chunk(3)
    b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    return _C._linear(q, w_q, b_q), _C._linear(k, w_k, b_k), _C._linear(v, w_v, b_v)


def _in_projection(q, k, v, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    Eq, Ek, Ev = q.size(-1), k.size(-1), v.size(-1)
    for name, w, want in (("query", w_q, (Eq, Eq)), ("key", w_k, (Eq, Ek)),
                          ("value", w_v, (Eq, Ev))):
        if tuple(w.shape) != want:
            raise AssertionError(f"expecting {name} weights shape of {want}, but got {w.shape}")
    for name, bb in (("query", b_q), ("key", b_k), ("value", b_v)):
        if bb is not None and tuple(bb.shape) != (Eq,):
            raise AssertionError(f"expecting {name} bias shape of {(Eq,)}, but got {bb.shape}")
    return _C._linear(q, w_q, b_q), _C._linear(k, w_k, b_k), _C._linear(v, w_v, b_v)


def _pad_last(mask, n=1):
    """torch's pad(mask, (0, n)): n zero columns appended on the last dim."""
    zeros = _C.zeros(tuple(mask.shape[:-1]) + (n,), dtype=mask.dtype)
    return _C.cat([mask, zeros], dim=-1)


def _heads(x, bsz, num_heads, head_dim):
    """(T, N, E) -> (N, H, T, head_dim), a view."""
    return x.unflatten(-1, (num_heads, head_dim)).permute(1, 2, 0, 3)


def _static_heads(static, name, bsz, num_heads, head_dim):
    if static.size(0) != bsz * num_heads:
        raise AssertionError(f"expecting {name}.size(0) of {bsz * num_heads}, but got "
                             f"{static.size(0)}")
    if static.size(2) != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {static.size(2)}")
    return static.reshape(bsz, num_heads, static.size(1), head_dim)


def _merged_mask(attn_mask, key_padding_mask, bsz, num_heads, tgt_len, src_len):
    """attn_mask (L, S) or (N*H, L, S) plus key_padding_mask (N, S), as one float mask that
    broadcasts to (N, H, L, S) (torch adds the same values after expanding both)."""
    if attn_mask is not None:
        attn_mask = (attn_mask.view(1, 1, tgt_len, src_len) if attn_mask.dim() == 2 else
                     attn_mask.view(bsz, num_heads, tgt_len, src_len))
    if key_padding_mask is not None:
        _check_key_padding_mask(key_padding_mask, src_len, bsz)
        kpm = key_padding_mask.view(bsz, 1, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    return attn_mask


def _check_attn_mask_shape(attn_mask, bsz, num_heads, tgt_len, src_len):
    if attn_mask.dim() == 2:
        if tuple(attn_mask.shape) != (tgt_len, src_len):
            raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should "
                               f"be {(tgt_len, src_len)}.")
    elif attn_mask.dim() == 3:
        if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should "
                               f"be {(bsz * num_heads, tgt_len, src_len)}.")
    else:
        raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """torch.nn.functional.multi_head_attention_forward: query (L, N, E) or (L, E), key and
    value (S, N, E) or (S, E); returns (attn_output, attn_weights or None)."""
    is_batched = _mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask",
                                       _none_or_dtype(attn_mask), "attn_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None          # the hint alone drives the kernel's causal cut
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype,
                                    check_other=False)
        if key_padding_mask is not None:
            is_causal = False     # the merged mask is no longer causal
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(f"key's sequence and batch dims {key.shape[:2]} do not match "
                                 f"value's {value.shape[:2]}")
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(f"use_separate_proj_weight is True but {name}_proj_weight "
                                     "is None")
        b_q, b_k, b_v = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
        q, k, v = _in_projection(query, key, value, q_proj_weight, k_proj_weight,
                                 v_proj_weight, b_q, b_k, b_v)
    else:
        if tuple(key.shape) != tuple(value.shape):
            raise AssertionError(f"key shape {key.shape} does not match value shape "
                                 f"{value.shape}")
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    src_len = key.shape[0]
    if attn_mask is not None:
        _check_attn_mask_shape(attn_mask, bsz, num_heads, tgt_len, src_len)
    if bias_k is not None and bias_v is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = _C.cat([k, bias_k.expand(1, bsz, embed_dim)])
        v = _C.cat([v, bias_v.expand(1, bsz, embed_dim)])
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
    elif bias_k is not None:
        raise AssertionError("bias_k is set but bias_v is None")
    elif bias_v is not None:
        raise AssertionError("bias_v is set but bias_k is None")
    q4 = _heads(q, bsz, num_heads, head_dim)
    k4 = (_heads(k, bsz, num_heads, head_dim) if static_k is None else
          _static_heads(static_k, "static_k", bsz, num_heads, head_dim))
    v4 = (_heads(v, bsz, num_heads, head_dim) if static_v is None else
          _static_heads(static_v, "static_v", bsz, num_heads, head_dim))
    if add_zero_attn:
        k4 = _C.cat([k4, _C.zeros((bsz, num_heads, 1, head_dim), dtype=k4.dtype)], dim=2)
        v4 = _C.cat([v4, _C.zeros((bsz, num_heads, 1, head_dim), dtype=v4.dtype)], dim=2)
        attn_mask = None if attn_mask is None else _pad_last(attn_mask)
        key_padding_mask = None if key_padding_mask is None else _pad_last(key_padding_mask)
    src_len = k4.size(2)
    mask = _merged_mask(attn_mask, key_padding_mask, bsz, num_heads, tgt_len, src_len)
    if not training:
        dropout_p = 0.0
    dt = q4.dtype
    if dt == _C.float16 or dt == _C.bfloat16:     # the kernel computes float32; round once after
        q4, k4, v4 = q4.float(), k4.float(), v4.float()
        mask = mask.float() if mask is not None and mask.is_floating_point() else mask
    if need_weights:
        if is_causal and mask is None:
            raise AssertionError("FIXME: is_causal not implemented for need_weights")
        out4, weights = _C._sdpa(q4, k4, v4, mask, float(dropout_p), False,
                                 1.0 / math.sqrt(head_dim), False, True)
    else:
        out4, weights = _C._sdpa(q4, k4, v4, mask, float(dropout_p), bool(is_causal), None,
                                 False, False), None
    if out4.dtype != dt:
        out4 = out4.to(dt)
        weights = None if weights is None else weights.to(dt)
    # (N, H, L, hd) -> (L * N, E) rows for the output projection
    out = out4.permute(2, 0, 1, 3).reshape(tgt_len * bsz, embed_dim)
    out = _C._linear(out, out_proj_weight, out_proj_bias).view(tgt_len, bsz, -1)
    if weights is not None and average_attn_weights:
        weights = weights.mean(dim=1)
    if not is_batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights
