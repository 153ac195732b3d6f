"""SyncBatchNorm: the per-rank C primitives (csrc/nn/norm/sync_bn.c) checked in one process by
splitting a batch into "ranks" (merged statistics and gradients equal the whole batch's), the
module's world-of-one and eval behaviour, convert_sync_batchnorm, and 2 real processes with
different data and batch sizes against BatchNorm on the concatenated batch."""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from cddp import _C
from conftest import n, t
from ddp_util import load, run_ranks

RNG = np.random.default_rng(99)


def normal(*shape, scale=1.0, shift=0.0):
    return RNG.standard_normal(shape) * scale + shift


def split_stats(parts, eps):
    """Per-"rank" (mean, invstd, count) stacked as SyncBatchNorm all-gathers them."""
    stats = [_C._batch_norm_stats(t(p), eps) for p in parts]
    mean_all = cddp.stack([m for m, _ in stats], 0)
    invstd_all = cddp.stack([i for _, i in stats], 0)
    counts = t(np.array([p.size / p.shape[1] for p in parts]))
    return mean_all, invstd_all, counts


@pytest.mark.parametrize("sizes,spatial", [((3, 5), (4,)), ((2, 1, 4), (2, 3)), ((4, 0, 2), ()),
                                           ((6, 7), ())])
def test_primitives_merge_ranks_into_the_whole_batch(sizes, spatial):
    C, eps, mom = 3, 1e-5, 0.25
    parts = [normal(k, C, *spatial, scale=2, shift=3) for k in sizes]
    whole = np.concatenate(parts, 0)
    axes = (0,) + tuple(range(2, whole.ndim))
    mean_all, invstd_all, counts = split_stats([p for p in parts if p.size], eps)
    rm, rv = t(np.zeros(C)), t(np.ones(C))
    mean, invstd = _C._batch_norm_gather_stats_with_counts(t(parts[0]), mean_all, invstd_all,
                                                            rm, rv, mom, eps, counts)
    np.testing.assert_allclose(n(mean), whole.mean(axes), rtol=1e-12)
    np.testing.assert_allclose(n(invstd), 1 / np.sqrt(whole.var(axes) + eps), rtol=1e-10)
    np.testing.assert_allclose(n(rm), mom * whole.mean(axes), rtol=1e-12)
    np.testing.assert_allclose(n(rv), (1 - mom) + mom * whole.var(axes, ddof=1), rtol=1e-10)
    # forward: each rank's elemt equals its slice of the whole batch's batch norm
    w, b = normal(C), normal(C)
    ref = F.batch_norm(t(whole), None, None, t(w), t(b), training=True, eps=eps)
    got = np.concatenate([n(_C._batch_norm_elemt(t(p), t(w), t(b), mean, invstd, eps))
                          for p in parts], 0)
    np.testing.assert_allclose(got, n(ref), rtol=1e-10, atol=1e-12)
    # backward: summed per-rank reductions give each rank its slice of the whole gradient
    gys = [normal(*p.shape) for p in parts]
    x = t(whole, True)
    W, B = t(w, True), t(b, True)
    F.batch_norm(x, None, None, W, B, training=True, eps=eps).backward(t(np.concatenate(gys, 0)))
    red = [_C._batch_norm_backward_reduce(t(g), t(p), mean, invstd, t(w), True, True, True)
           for g, p in zip(gys, parts)]
    sdy = sum(n(r[0]) for r in red)
    sdyx = sum(n(r[1]) for r in red)
    np.testing.assert_allclose(sum(n(r[2]) for r in red), n(W.grad), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sum(n(r[3]) for r in red), n(B.grad), rtol=1e-10, atol=1e-12)
    dx = [n(_C._batch_norm_backward_elemt(t(g), t(p), mean, invstd, t(w), t(sdy), t(sdyx),
                                          t(np.array(sizes, np.int32) * max(1, int(np.prod(spatial))))))
          for g, p in zip(gys, parts)]
    np.testing.assert_allclose(np.concatenate(dx, 0), n(x.grad), rtol=1e-9, atol=1e-11)


def test_primitives_outputs_and_errors():
    x = t(normal(4, 3, 2).astype(np.float32))
    mean, invstd = _C._batch_norm_stats(x, 1e-5)
    assert mean.dtype == cddp.float32 and tuple(invstd.shape) == (3,)
    g = t(normal(4, 3, 2).astype(np.float32))
    out = _C._batch_norm_backward_reduce(g, x, mean, invstd, None, True, False, False)
    assert out[0] is not None and out[1] is not None and out[2] is None and out[3] is None
    out = _C._batch_norm_backward_reduce(g, x, mean, invstd, None, False, True, True)
    assert out[0] is None and out[1] is None and out[2] is not None
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 2"):
        _C._batch_norm_elemt(x, t(np.ones(2, np.float32)), None, mean, invstd, 1e-5)
    with pytest.raises(RuntimeError, match=r"expected mean and invstd of shape \(2, 3\)"):
        _C._batch_norm_gather_stats_with_counts(x, mean[None], invstd[None], None, None, 0.1,
                                                1e-5, t(np.ones(2)))
    with pytest.raises(RuntimeError, match="grad_out and input must have the same shape"):
        _C._batch_norm_backward_reduce(g[:2], x, mean, invstd, None, True, True, True)
    with pytest.raises(TypeError, match="must be Tensor"):
        _C._batch_norm_stats([1.0], 1e-5)


def test_world_of_one_and_eval_are_batch_norm():
    assert not cddp.distributed.is_initialized()
    sbn, bn = nn.SyncBatchNorm(3), nn.BatchNorm2d(3)
    for step in range(2):
        a = normal(4, 3, 2, 2, shift=step).astype(np.float32)
        np.testing.assert_allclose(n(sbn(t(a))), n(bn(t(a))), rtol=1e-6)
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_array_equal(n(getattr(sbn, k)), n(getattr(bn, k)))
    sbn.eval()
    bn.eval()
    a = normal(2, 3, 5).astype(np.float32)            # SyncBatchNorm takes any (N, C, *) input
    np.testing.assert_allclose(n(sbn(t(a))), n(F.batch_norm(t(a), bn.running_mean, bn.running_var,
                                                         bn.weight, bn.bias)), rtol=1e-6)
    assert list(sbn.state_dict()) == list(bn.state_dict())
    with pytest.raises(ValueError, match=r"expected at least 2D input \(got 1D input\)"):
        sbn(t(normal(3)))
    with pytest.raises(ValueError, match="SyncBatchNorm number of input channels should be non-zero"):
        nn.SyncBatchNorm(0)(t(np.zeros((2, 0))))


def test_convert_sync_batchnorm_keeps_parameters_and_buffers():
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=None),
                          nn.Sequential(nn.BatchNorm2d(5, affine=False), nn.ReLU()))
    model[1](t(normal(6, 3).astype(np.float32)))
    model.eval()
    w, rm, nbt = model[1].weight, model[1].running_mean, model[1].num_batches_tracked
    out = nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group="pg")
    assert out is model and isinstance(out[1], nn.SyncBatchNorm) and isinstance(out[2][0], nn.SyncBatchNorm)
    assert out[1].weight is w and out[1].running_mean is rm and out[1].num_batches_tracked is nbt
    assert out[1].momentum is None and out[1].process_group == "pg" and not out[1].training
    assert out[2][0].weight is None and not out[2][0].affine and isinstance(out[2][1], nn.ReLU)
    assert isinstance(out[0], nn.Linear)
    single = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm3d(2, eps=1e-3, bias=False))
    assert isinstance(single, nn.SyncBatchNorm) and single.eps == 1e-3 and single.bias is None
    assert repr(single) == ("SyncBatchNorm(2, eps=0.001, momentum=0.1, affine=True, bias=False, "
                            "track_running_stats=True)")


SYNC_JOB = """
import os
import numpy as np
import cddp
import cddp.distributed as dist
import cddp.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
data = np.load(os.path.join(OUT, "data.npz"))
bn = nn.SyncBatchNorm(3, momentum={momentum!r}).double()
with cddp.no_grad():
    bn.weight.copy_(cddp.tensor(data["w"]))
    bn.bias.copy_(cddp.tensor(data["b"]))
for step in range({steps}):
    x = cddp.tensor(data[f"x{{step}}_{{rank}}"]).requires_grad_(True)
    y = bn(x)
    assert y.grad_fn is not None
    y.backward(cddp.tensor(data[f"g{{step}}_{{rank}}"]))
    np.save(os.path.join(OUT, f"y{{step}}_{{rank}}.npy"), y.detach().numpy())
    np.save(os.path.join(OUT, f"dx{{step}}_{{rank}}.npy"), x.grad.numpy())
    np.save(os.path.join(OUT, f"dw{{step}}_{{rank}}.npy"), bn.weight.grad.numpy())
    np.save(os.path.join(OUT, f"db{{step}}_{{rank}}.npy"), bn.bias.grad.numpy())
    bn.weight.grad = None
    bn.bias.grad = None
for k in ("running_mean", "running_var", "num_batches_tracked"):
    np.save(os.path.join(OUT, f"{{k}}_{{rank}}.npy"), getattr(bn, k).numpy())
bn.eval()
np.save(os.path.join(OUT, f"eval_{{rank}}.npy"), bn(cddp.tensor(data[f"x0_{{rank}}"])).detach().numpy())
dist.destroy_process_group()
"""


@pytest.mark.parametrize("momentum", [0.1, None])
def test_two_ranks_with_different_batches_equal_batch_norm_on_the_whole(tmp_path, momentum):
    steps, sizes = 3, (2, 5)                      # ranks see different batch sizes
    arrays = {"w": normal(3), "b": normal(3)}
    for s in range(steps):
        for r, k in enumerate(sizes):
            arrays[f"x{s}_{r}"] = normal(k, 3, 4, scale=1 + s, shift=s - r)
            arrays[f"g{s}_{r}"] = normal(k, 3, 4)
    np.savez(tmp_path / "data.npz", **arrays)
    r = run_ranks(tmp_path, SYNC_JOB.format(momentum=momentum, steps=steps), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    bn = nn.BatchNorm1d(3, momentum=momentum).double()
    with cddp.no_grad():
        bn.weight.copy_(t(arrays["w"]))
        bn.bias.copy_(t(arrays["b"]))
    cut = sizes[0]
    for s in range(steps):
        x = t(np.concatenate([arrays[f"x{s}_{r}"] for r in (0, 1)], 0), True)
        y = bn(x)
        y.backward(t(np.concatenate([arrays[f"g{s}_{r}"] for r in (0, 1)], 0)))
        for rank, sl in ((0, slice(0, cut)), (1, slice(cut, None))):
            np.testing.assert_allclose(load(tmp_path, f"y{s}_{rank}.npy"), n(y)[sl], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(load(tmp_path, f"dx{s}_{rank}.npy"), n(x.grad)[sl], rtol=1e-9, atol=1e-11)
        # weight/bias gradients stay per rank (DDP averages them): their sum is the whole's
        for k, p in (("dw", bn.weight), ("db", bn.bias)):
            np.testing.assert_allclose(load(tmp_path, f"{k}{s}_0.npy") + load(tmp_path, f"{k}{s}_1.npy"),
                                       n(p.grad), rtol=1e-9, atol=1e-11)
        bn.weight.grad = bn.bias.grad = None
    for rank in (0, 1):
        for k in ("running_mean", "running_var", "num_batches_tracked"):
            np.testing.assert_allclose(load(tmp_path, f"{k}_{rank}.npy"), n(getattr(bn, k)), rtol=1e-10)
        bn.eval()
        np.testing.assert_allclose(load(tmp_path, f"eval_{rank}.npy"), n(bn(t(arrays[f"x0_{rank}"]))), rtol=1e-10)


BF16_JOB = """
import os
import numpy as np
import cddp
import cddp.distributed as dist
import cddp.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
data = np.load(os.path.join(OUT, "data.npz"))
for model_dtype in ("float32", "bfloat16"):      # autocast's case, then a bf16 model
    bn = nn.SyncBatchNorm(3).to(getattr(cddp, model_dtype))
    x = cddp.tensor(data[f"x_{rank}"]).bfloat16().requires_grad_(True)
    y = bn(x)
    assert y.dtype == cddp.bfloat16 and bn.running_mean.dtype == getattr(cddp, model_dtype)
    y.backward(cddp.tensor(data[f"g_{rank}"]).bfloat16())
    for k, v in (("y", y.detach()), ("dx", x.grad), ("rm", bn.running_mean)):
        np.save(os.path.join(OUT, f"{k}_{model_dtype}_{rank}.npy"), v.float().numpy())
dist.destroy_process_group()
"""


def test_two_ranks_bfloat16_input_computes_in_float32(tmp_path):
    """A bf16 input (autocast's conv output; or a bf16 model): the float32 kernels on float32
    copies, the result rounded once — the whole batch's BatchNorm on the same bf16 values."""
    sizes = (2, 5)
    arrays = {}
    for r, k in enumerate(sizes):
        arrays[f"x_{r}"] = normal(k, 3, 4, scale=2, shift=r)
        arrays[f"g_{r}"] = normal(k, 3, 4)
    np.savez(tmp_path / "data.npz", **arrays)
    r = run_ranks(tmp_path, BF16_JOB, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    x = t(np.concatenate([arrays[f"x_{r}"] for r in (0, 1)], 0)).bfloat16().double()
    g = t(np.concatenate([arrays[f"g_{r}"] for r in (0, 1)], 0)).bfloat16().double()
    x.requires_grad_(True)
    bn = nn.BatchNorm1d(3).double()
    y = bn(x)
    y.backward(g)
    cut = sizes[0]
    for dt in ("float32", "bfloat16"):
        for rank, sl in ((0, slice(0, cut)), (1, slice(cut, None))):
            # one bf16 rounding of the float32 result (half an ulp: 2^-8 relative)
            np.testing.assert_allclose(load(tmp_path, f"y_{dt}_{rank}.npy"), n(y)[sl],
                                       rtol=2 ** -7, atol=1e-3)
            np.testing.assert_allclose(load(tmp_path, f"dx_{dt}_{rank}.npy"), n(x.grad)[sl],
                                       rtol=2 ** -7, atol=1e-3)
            np.testing.assert_allclose(load(tmp_path, f"rm_{dt}_{rank}.npy"),
                                       n(bn.running_mean), rtol=2 ** -7, atol=1e-4)
