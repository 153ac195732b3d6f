"""The torch names a scan of public training code imports that cddp lacked, and what the
sweeps of public repositories found (self-supervised, generative, meta-learning code).

Oracles: torch 2.13 (importorskip) for values, layouts and which calls raise; NumPy for the
reductions' keyword spellings; a subprocess for once-per-process warnings."""
import argparse
import subprocess
import sys
import warnings

import numpy as np
import pytest

import cddp


# ---- NumPy keyword spellings (torch's parser maps axis -> dim, keepdims -> keepdim) ----------

@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "std", "var", "prod",
                                  "logsumexp", "nansum", "nanmean", "median", "nanmedian",
                                  "quantile", "aminmax", "count_nonzero", "diff", "argsort"])
def test_numpy_keyword_spellings_match_the_torch_spellings(name):
    x = cddp.from_numpy(np.arange(12.0, dtype=np.float32).reshape(3, 4) % 5)
    extra = (0.5,) if name == "quantile" else ()
    fn = getattr(cddp, name)
    if name in ("count_nonzero", "diff", "argsort"):
        want, got = fn(x, *extra, dim=1), fn(x, *extra, axis=1)
    else:
        want = fn(x, *extra, dim=1, keepdim=True)
        got = fn(x, *extra, axis=1, keepdims=True)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        assert g.shape == w.shape and cddp.equal(g, w)
    with pytest.raises(TypeError, match="multiple values|keepdim"):
        fn(x, *extra, dim=1, axis=1) if name in ("count_nonzero", "diff", "argsort") else \
            fn(x, *extra, dim=1, keepdim=True, keepdims=True)


def test_keepdims_on_the_tensor_methods_matches_numpy():
    a = np.random.RandomState(0).rand(3, 4, 5).astype(np.float32)
    x = cddp.from_numpy(a)
    np.testing.assert_allclose(x.mean([1, 2], keepdims=True).numpy(),
                               a.mean(axis=(1, 2), keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(x.max(axis=2, keepdims=True)[0].numpy(),
                               a.max(axis=2, keepdims=True))
    np.testing.assert_allclose(x.std(1, keepdims=True).numpy(),
                               a.std(axis=1, ddof=1, keepdims=True), rtol=1e-5)


# ---- sweep findings ---------------------------------------------------------------------------

@pytest.mark.parametrize("ctx", ["cuda", "cpu16", "cpubf16"])
def test_bicubic_interpolate_inside_autocast_runs_in_the_inputs_dtype(ctx):
    torch = pytest.importorskip("torch")
    a = np.random.RandomState(0).randn(1, 8, 4, 4).astype(np.float32)
    region = {"cuda": lambda m: m.cuda.amp.autocast() if m is cddp else
              m.autocast("cpu", dtype=m.float16),
              "cpu16": lambda m: m.autocast("cpu", dtype=m.float16),
              "cpubf16": lambda m: m.autocast("cpu", dtype=m.bfloat16)}[ctx]
    out = {}
    for m in (torch, cddp):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with region(m):
                y = m.nn.functional.interpolate(m.from_numpy(a.copy()), scale_factor=0.525,
                                                mode="bicubic")
        assert str(y.dtype).endswith("float32")
        out[m.__name__] = y.detach().numpy()
    np.testing.assert_allclose(out["cddp"], out["torch"], rtol=1e-5, atol=1e-6)
    assert cddp.is_autocast_enabled("cpu") is False      # the region's flags came back


def test_topk_indices_are_contiguous_and_viewable():
    x = cddp.from_numpy(np.random.RandomState(1).rand(4, 33).astype(np.float32))
    v, i = x.topk(5, 1)
    assert i.is_contiguous() and i.stride() == (5, 1) and v.is_contiguous()
    assert i.view(-1).shape == (20,)


def test_pad_takes_zero_d_integer_tensors_and_numpy_ints():
    torch = pytest.importorskip("torch")
    a = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    for mode in ("reflect", "constant", "replicate"):
        pt = torch.tensor([1.2, 0.3, 2.0, 0.0]).ceil().to(torch.int32)
        pc = cddp.tensor([1.2, 0.3, 2.0, 0.0]).ceil().to(cddp.int32)
        want = torch.nn.functional.pad(torch.from_numpy(a), tuple(pt), mode=mode).numpy()
        got = cddp.nn.functional.pad(cddp.from_numpy(a), tuple(pc), mode=mode).numpy()
        np.testing.assert_array_equal(got, want)
    got = cddp.nn.functional.pad(cddp.from_numpy(a), (np.int64(1), 0)).shape
    assert got == (1, 2, 4, 5)
    for bad in ((1, 1.0), (True, 0), (cddp.tensor(1.0), 0), (cddp.tensor([1]), 0)):
        with pytest.raises(TypeError, match="must be tuple of ints"):
            cddp.nn.functional.pad(cddp.from_numpy(a), bad)


def test_meshgrid_without_indexing_warns_once_per_process():
    code = ("import warnings, cddp\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    for _ in range(3): cddp.meshgrid(cddp.arange(2), cddp.arange(3))\n"
            "    n1 = len(w)\n"
            "    cddp.set_warn_always(True); cddp.meshgrid(cddp.arange(2), cddp.arange(3))\n"
            "print(n1, len(w))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["1", "2"], r.stderr


def test_weights_only_false_loads_a_torch_checkpoint_with_script_objects(tmp_path):
    torch = pytest.importorskip("torch")
    p = tmp_path / "ck.pt"
    torch.save({"g": {"w": torch.arange(3.0)}, "args": argparse.Namespace(lr=0.1),
                "step": np.int64(7)}, p)
    with pytest.raises(cddp.serialization.pickle.UnpicklingError, match="argparse.Namespace"):
        cddp.load(p)                                   # the default stays weights-only
    for kw in ({}, {"map_location": "cpu"}, {"map_location": lambda s, loc: s}):
        ck = cddp.load(p, weights_only=False, **kw)
        assert ck["args"] == argparse.Namespace(lr=0.1) and ck["step"] == 7
        assert ck["g"]["w"].tolist() == [0.0, 1.0, 2.0]


def test_weights_only_false_loads_a_whole_torch_model_as_cddp_modules(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2)).eval()
    p = tmp_path / "model.pt"
    torch.save(m, p)
    mc = cddp.load(p, weights_only=False)
    assert isinstance(mc, cddp.nn.Sequential) and isinstance(mc[1], cddp.nn.BatchNorm2d)
    x = np.random.RandomState(0).rand(2, 3, 8, 8).astype(np.float32)
    np.testing.assert_allclose(mc(cddp.from_numpy(x)).detach().numpy(),
                               m(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert list(mc.state_dict()) == list(m.state_dict())


def test_weights_only_false_names_a_torch_class_cddp_lacks(tmp_path):
    torch = pytest.importorskip("torch")
    p = tmp_path / "q.pt"
    torch.save(torch.nn.utils.rnn.PackedSequence, p)      # a class cddp has: loads
    assert cddp.load(p, weights_only=False) is cddp.nn.utils.rnn.PackedSequence
    torch.save(torch.ao.nn.quantized.Linear, p)
    with pytest.raises(cddp.serialization.CheckpointError, match="cddp does not have"):
        cddp.load(p, weights_only=False)


# ---- names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,args", [
    ("expand_copy", ((3, 2),)), ("permute_copy", ((1, 0),)), ("t_copy", ()),
    ("transpose_copy", (0, 1)), ("select_copy", (0, 1)), ("slice_copy", (1, 0, 2, 1)),
    ("squeeze_copy", ()), ("unsqueeze_copy", (0,)), ("view_copy", ((2, 1),)),
    ("diagonal_copy", ()), ("split_copy", (1, 1)), ("unbind_copy", (1,)),
    ("unfold_copy", (1, 1, 1)), ("alias_copy", ()), ("detach_copy", ()),
    ("as_strided_copy", ((2, 1), (1, 1)))])
def test_view_copy_family_matches_torch_and_owns_its_memory(name, args):
    torch = pytest.importorskip("torch")
    a = np.array([[1.0, 2.0]], dtype=np.float32) if name != "expand_copy" else \
        np.array([1.0, 2.0], dtype=np.float32)
    if name in ("diagonal_copy", "transpose_copy", "t_copy", "select_copy", "slice_copy",
                "unfold_copy", "split_copy", "unbind_copy"):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = cddp.from_numpy(a.copy())
    want = getattr(torch, name)(torch.from_numpy(a.copy()), *args)
    got = getattr(cddp, name)(x, *args)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
        assert g.is_contiguous() and g.data_ptr() != x.data_ptr()


def test_assert_and_the_deprecated_autocast_getters():
    cddp._assert(True, "unused")
    with pytest.raises(AssertionError, match="boom"):
        cddp._assert(cddp.tensor(False), "boom")
    with pytest.warns(DeprecationWarning, match="get_autocast_dtype"):
        assert cddp.get_autocast_gpu_dtype() == cddp.get_autocast_dtype("cuda")
    with pytest.warns(DeprecationWarning):
        assert cddp.get_autocast_cpu_dtype() == cddp.get_autocast_dtype("cpu")


def test_cuda_legacy_tensor_types():
    assert repr(cddp.cuda.FloatTensor) == "<class 'cddp.cuda.FloatTensor'>"
    assert not isinstance(cddp.ones(2), cddp.cuda.FloatTensor)   # a CPU tensor, as in torch
    assert isinstance(cddp.ones(2), cddp.FloatTensor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = cddp.cuda.LongTensor([1, 2])
        assert t.dtype == cddp.int64 and t.tolist() == [1, 2]
        assert cddp.ones(2).type(cddp.cuda.HalfTensor).dtype == cddp.float16
        assert cddp.cuda.FloatTensor(2, 3).shape == (2, 3)


def test_device_queries_without_a_device_raise_and_the_lists_are_empty():
    for fn in (cddp.cuda.get_device_properties, cddp.cuda.get_device_capability,
               cddp.cuda.mem_get_info):
        with pytest.raises(RuntimeError, match="no CUDA device"):
            fn(0)
    assert cddp.cuda.get_arch_list() == [] and cddp.cuda.is_current_stream_capturing() is False
    assert cddp.mps.is_available() is False and cddp.mps.device_count() == 0
    cddp.mps.manual_seed(0)
    with pytest.raises(RuntimeError, match="without MPS backend"):
        cddp.mps.empty_cache()


def test_cpp_extension_imports_and_refuses_to_build():
    from cddp.utils import cpp_extension as ce
    for call in (lambda: ce.load("k", ["k.cu"]), lambda: ce.load_inline("k", ""),
                 lambda: ce.CppExtension("k", ["k.cpp"]), lambda: ce.BuildExtension(),
                 lambda: ce.include_paths()):
        with pytest.raises(RuntimeError, match="cannot build or load torch C\\+\\+/CUDA"):
            call()
    assert ce.ROCM_HOME is None and isinstance(ce.is_ninja_available(), bool)


def test_environment_reports():
    import cddp.__config__ as cfg
    from cddp.utils import collect_env
    text = cfg.show()
    assert "BLAS" in text and cddp.version.cddp in text
    assert "threads" in cfg.parallel_info()
    assert cddp.__version__ in collect_env.get_pretty_env_info()


def test_data_internals_libraries_import():
    from cddp.utils.data._utils.collate import default_collate
    from cddp.utils.data._utils.pin_memory import pin_memory
    from cddp.utils.data.dataloader import _DatasetKind, _InfiniteConstantSampler, Dataset
    assert Dataset is cddp.utils.data.Dataset
    assert default_collate([cddp.ones(2), cddp.zeros(2)]).tolist() == [[1, 1], [0, 0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = pin_memory({"x": [cddp.ones(1), "s"], "n": 3})
    assert batch["x"][1] == "s" and batch["n"] == 3 and batch["x"][0].tolist() == [1.0]
    assert cddp.utils.data.DataLoader(list(range(3)))._dataset_kind == _DatasetKind.Map

    class It(cddp.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(2))
    assert cddp.utils.data.DataLoader(It())._dataset_kind == _DatasetKind.Iterable
    s = iter(_InfiniteConstantSampler())
    assert [next(s) for _ in range(3)] == [None, None, None]


def test_optimizer_helpers_of_third_party_optimizers():
    from cddp.optim.optimizer import (_default_to_fused_or_foreach, _dispatch_sqrt,
                                      _get_value, _use_grad_for_differentiable, ParamsT)
    assert ParamsT is not None and _default_to_fused_or_foreach([], False) == (False, False)
    assert _dispatch_sqrt(4.0) == 2.0 and _get_value(cddp.tensor(3.0)) == 3.0

    class Opt(cddp.optim.Optimizer):
        def __init__(self, params, differentiable):
            super().__init__(params, {"lr": 0.1, "differentiable": differentiable})

        @_use_grad_for_differentiable
        def step(self):
            return cddp.is_grad_enabled()
    p = [cddp.ones(1, requires_grad=True)]
    assert Opt(p, False).step() is False and Opt(p, True).step() is True
    assert cddp.is_grad_enabled()


def test_private_module_bases_match_torch_hierarchy():
    from cddp.nn.modules.conv import _ConvTransposeMixin, _ConvTransposeNd
    from cddp.nn.modules.pooling import _AdaptiveAvgPoolNd, _AdaptiveMaxPoolNd, _AvgPoolNd
    nn = cddp.nn
    assert isinstance(nn.AdaptiveAvgPool2d(1), _AdaptiveAvgPoolNd)
    assert not isinstance(nn.AdaptiveMaxPool2d(1), _AdaptiveAvgPoolNd)
    assert isinstance(nn.AdaptiveMaxPool3d(1), _AdaptiveMaxPoolNd)
    assert isinstance(nn.AvgPool3d(2), _AvgPoolNd) and not isinstance(nn.AvgPool3d(2), nn.AvgPool2d)
    assert issubclass(_ConvTransposeMixin, _ConvTransposeNd)
    x = cddp.ones(1, 1, 4, 4, 4)
    assert nn.AvgPool3d(2)(x).shape == (1, 1, 2, 2, 2) and nn.AvgPool1d(2)(x[0, 0]).shape == (4, 4, 2)


def test_small_names():
    x = cddp.ones(2)
    assert x.dequantize() is x
    assert x.cfloat().dtype == cddp.complex64 and x.cdouble().dtype == cddp.complex128
    assert cddp._C._jit_set_profiling_executor(False) is True
    assert cddp._C._jit_set_profiling_executor(True) is False
    assert cddp._C._jit_override_can_fuse_on_cpu(True) is None and cddp._C._jit_can_fuse_on_cpu()
    cddp._C._jit_override_can_fuse_on_cpu(False)
    f = cddp.futures.Future()
    f.set_result(3)
    assert cddp.futures.wait_all([f]) == [3]
    assert cddp.hub._check_module_exists("numpy") and not cddp.hub._check_module_exists("no_such_mod_x")
    assert issubclass(cddp.jit.TracerWarning, Warning)
    assert cddp.backends.opt_einsum.enabled is True


# ---- the graph / point-cloud / recommender sweep ---------------------------------------------

def test_tensor_constructor_follows_the_default_dtype():
    torch = pytest.importorskip("torch")
    a = np.random.RandomState(0).rand(2, 3)
    for lib in (torch, cddp):
        lib.set_default_dtype(lib.float64)
        try:
            got = [lib.Tensor(a).dtype, lib.Tensor([1.0, 2.0]).dtype, lib.Tensor(2, 2).dtype]
        finally:
            lib.set_default_dtype(lib.float32)
        assert [str(d).split(".")[1] for d in got] == ["float64"] * 3
    assert cddp.Tensor([1.0]).dtype == cddp.float32


def test_index_put_names_dtypes_as_torch():
    d = cddp.ones(4, dtype=cddp.float64)
    with pytest.raises(RuntimeError, match="got Double for the destination and Float for the"):
        d.index_put_((cddp.tensor([0, 2]),), cddp.tensor([5.0, 6.0]))


def test_data_parallel_building_blocks_compose_to_the_module():
    from cddp.nn.parallel import data_parallel
    from cddp.nn.parallel.parallel_apply import parallel_apply
    from cddp.nn.parallel.replicate import replicate
    from cddp.nn.parallel.scatter_gather import gather, scatter, scatter_kwargs
    from cddp._ops import ops
    assert ops is cddp.ops
    m = cddp.nn.Linear(3, 2)
    x = cddp.from_numpy(np.random.RandomState(0).rand(7, 3).astype(np.float32))
    ins, kws = scatter_kwargs((x,), {}, [0, 1, 2])
    assert [t[0].shape[0] for t in ins] == [3, 3, 1] and kws == ({}, {}, {})
    y = gather(parallel_apply(replicate(m, [0, 1, 2]), ins, kws), 0)
    np.testing.assert_allclose(y.detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    y.sum().backward()
    want = cddp.ones(7, 2).t() @ x
    np.testing.assert_allclose(m.weight.grad.numpy(), want.numpy(), rtol=1e-5)
    parts = scatter({"a": x, "n": 3}, [0, 1])
    assert parts[1]["a"].shape == (3, 3) and parts[0]["n"] == 3
    assert gather([{"a": cddp.ones(1)}, {"a": cddp.zeros(2)}], 0)["a"].tolist() == [1, 0, 0]
    assert data_parallel(m, x).shape == (7, 2)


def test_sparse_stand_ins_list_their_entries_as_given_and_coalesce_as_torch():
    torch = pytest.importorskip("torch")
    idx = [[2, 0, 1, 2, 0], [1, 1, 0, 1, 2]]
    vals = [1.0, 0.0, 2.0, 3.0, 4.0]                 # a duplicate (2, 1) and an explicit zero
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals), (3, 3))
        c = cddp.sparse_coo_tensor(cddp.tensor(idx), cddp.tensor(vals), (3, 3))
    assert c._indices().tolist() == t._indices().tolist()
    assert c._values().tolist() == t._values().tolist() and c._nnz() == t._nnz() == 5
    assert c.is_coalesced() is False
    tc, cc = t.coalesce(), c.coalesce()
    assert cc.is_coalesced() and cc._indices().tolist() == tc._indices().tolist()
    assert cc._values().tolist() == tc._values().tolist() and cc._nnz() == tc._nnz()
    assert cc.indices().tolist() == tc.indices().tolist()
    np.testing.assert_array_equal(c.numpy(), t.to_dense().numpy())
    d = cddp.from_numpy(np.array([[0.0, 5.0], [6.0, 0.0]], dtype=np.float32))
    assert d._indices().tolist() == [[0, 1], [1, 0]] and d._values().tolist() == [5.0, 6.0]


def test_a_custom_spmm_backward_indexing_with_the_given_entries_runs():
    # pyGAT's SpecialSpmmFunction: values after dropout hold zeros; the backward gathers the
    # dense gradient at a._indices(), which must list every given entry
    class Spmm(cddp.autograd.Function):
        @staticmethod
        def forward(ctx, indices, values, shape, b):
            a = cddp.sparse_coo_tensor(indices, values, shape)
            ctx.save_for_backward(a, b)
            ctx.N = shape[0]
            return cddp.matmul(a, b)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            grad_a = g.matmul(b.t())
            edge = a._indices()[0, :] * ctx.N + a._indices()[1, :]
            return None, grad_a.view(-1)[edge], None, a.t().matmul(g)
    idx = cddp.tensor([[0, 1, 1, 2], [1, 0, 2, 2]])
    v = cddp.tensor([1.0, 0.0, 2.0, 3.0], requires_grad=True)
    b = cddp.ones(3, 2, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Spmm.apply(idx, v, (3, 3), b).sum().backward()
    assert v.grad.tolist() == [2.0, 2.0, 2.0, 2.0]


# ---- the adversarial / NAS / CTC / 3-D sweep ---------------------------------------------------

def test_cuda_random_module_seeds_as_torch_cuda():
    import cddp.cuda.random as cr
    cr.manual_seed(3)
    a = cddp.rand(3)
    cddp.cuda.random.manual_seed_all(3)
    assert cddp.equal(a, cddp.rand(3))             # no CUDA device: the CPU stream is seeded


def test_deprecated_alpha_overload_takes_a_zero_dim_tensor():
    torch = pytest.importorskip("torch")
    v = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    for lib in (torch, cddp):                       # (torch warns once per process)
        R = lib.tensor(0.25)
        p = lib.ones(3)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            p.add_(R, lib.from_numpy(v.copy()))
            p.sub_(2 * R, lib.from_numpy(v.copy()))
        if lib is cddp:
            assert ["This overload of add_ is deprecated" in str(x.message) for x in w] == \
                [True, False] and "This overload of sub_" in str(w[1].message)
        np.testing.assert_allclose(p.numpy(), 1 - 0.25 * v, rtol=1e-6)
    with pytest.raises(TypeError):
        cddp.ones(3).add_(cddp.ones(3), cddp.ones(3))   # a 1-d first operand is no alpha


@pytest.mark.parametrize("make", [
    lambda o: cddp.optim.lr_scheduler.CosineAnnealingLR(o, 3.0),
    lambda o: cddp.optim.lr_scheduler.StepLR(o, 2), lambda o: cddp.optim.lr_scheduler.MultiStepLR(o, [1]),
    lambda o: cddp.optim.lr_scheduler.ExponentialLR(o, 0.9),
    lambda o: cddp.optim.lr_scheduler.LinearLR(o), lambda o: cddp.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0),
    lambda o: cddp.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=10)])
def test_get_lr_outside_step_warns_as_torch(make):
    p = cddp.nn.Parameter(cddp.zeros(1))
    opt = cddp.optim.SGD([p], 0.1, momentum=0.9)
    s = make(opt)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.step()                                   # inside step: silent
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        s.get_lr()


def test_loss_modules_warn_on_legacy_reduction_arguments():
    with pytest.warns(UserWarning, match="reduction='sum' instead"):
        m = cddp.nn.KLDivLoss(size_average=False)
    assert m.reduction == "sum"
    with pytest.warns(UserWarning, match="reduction='none' instead"):
        assert cddp.nn.CrossEntropyLoss(reduce=False).reduction == "none"


def test_copy_shape_mismatch_in_torch_words_and_axis_for_shape_ops():
    with pytest.raises(RuntimeError, match=r"size of tensor a \(14\) must match the size of "
                                           r"tensor b \(5\) at non-singleton dimension 0"):
        cddp.zeros(14, 8).copy_(cddp.ones(5, 8))
    x = cddp.ones(1, 3, 1)
    assert x.squeeze(axis=0).shape == (3, 1) and cddp.unsqueeze(x, axis=0).shape == (1, 1, 3, 1)
    assert len(cddp.ones(2, 3).unbind(axis=1)) == 3


def test_complex_repr_formats_as_torch():
    torch = pytest.importorskip("torch")
    cases = [[1 + 2j, 3 - 1j], [1.5 + 2j, 3 - 1j], [1.5 + 2.25j, 3 - 1j], 1 + 1j,
             [1e-5 + 1j, 3e5 - 1j], [[1 + 2j, 3 - 1j], [0j, -1.5j]],
             [1e-5 + 1j, float("nan") + 0j, float("inf") - 2j], [0j, 0j], [123456789 + 1j]]
    for c in cases:
        want = repr(torch.tensor(c)).replace("torch.", "")
        assert repr(cddp.tensor(c)).replace("cddp.", "") == want
    assert repr(cddp.tensor([1 + 2j], dtype=cddp.complex128)).replace("cddp.", "") == \
        repr(torch.tensor([1 + 2j], dtype=torch.complex128)).replace("torch.", "")


def test_sparse_values_gradient_with_duplicates_matches_torch():
    torch = pytest.importorskip("torch")
    idx = [[0, 0, 1], [1, 1, 0]]                     # entries 0 and 1 share (0, 1)
    grads = {}
    for lib in (torch, cddp):
        v = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = lib.sparse_coo_tensor(lib.tensor(idx), v, (2, 2))
        c = a.coalesce()
        assert c.values().tolist() == [3.0, 3.0]
        (c.values() * lib.tensor([1.0, 10.0])).sum().backward()
        grads[lib.__name__] = v.grad.tolist()
    assert grads["cddp"] == grads["torch"] == [1.0, 1.0, 10.0]


# ---- the detection / Swin / YOLO / LoRA sweep ----------------------------------------------

def test_load_from_state_dict_overrides_with_torchs_seven_arguments():
    class FrozenBatchNorm2d(cddp.nn.Module):         # DETR's backbone.py, torchvision's
        def __init__(self, n):
            super().__init__()
            self.register_buffer("weight", cddp.ones(n))
            self.register_buffer("bias", cddp.zeros(n))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                                  missing_keys, unexpected_keys, error_msgs):
            state_dict.pop(prefix + "num_batches_tracked", None)
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                          missing_keys, unexpected_keys, error_msgs)
    m = cddp.nn.Sequential(FrozenBatchNorm2d(3))
    sd = {"0.weight": cddp.full((3,), 2.0), "0.bias": cddp.ones(3),
          "0.num_batches_tracked": cddp.tensor(0)}
    r = m.load_state_dict(sd)
    assert not r.missing_keys and not r.unexpected_keys and m[0].weight.tolist() == [2.0] * 3
    w = cddp.full((3,), 5.0)
    m.load_state_dict({"0.weight": w, "0.bias": cddp.ones(3)}, assign=True)
    assert m[0].weight is w                          # assign reaches the base through metadata


def test_unknown_print_profile_is_ignored_as_torch():
    cddp.set_printoptions(profile="long")            # yolov5's utils/general.py
    assert repr(cddp.arange(3.0)) == "tensor([0., 1., 2.])"
    cddp.set_printoptions(profile="default")


def test_as_strided_in_place():
    x = cddp.arange(6.0)
    y = x.as_strided_((2, 2), (1, 2), 1)
    assert y is x and x.tolist() == [[1.0, 3.0], [2.0, 4.0]] and x.stride() == (1, 2)
    with pytest.raises(RuntimeError, match="out of bounds"):
        cddp.arange(6.0).as_strided_((3,), (3,))
    with pytest.raises(RuntimeError, match="requires grad"):
        cddp.ones(3, requires_grad=True).as_strided_((2,), (1,))
    with cddp.no_grad():
        z = cddp.ones(4, requires_grad=True)
        assert z.as_strided_((2,), (2,)).shape == (2,)
