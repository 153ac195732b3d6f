"""cddp — PyTorch's data-parallel training stack as a C extension.

`import cddp as torch` gives a torch-like Tensor (C type), autograd (C engine), and nn / optim /
utils.data / distributed / multiprocessing mirroring torch's module paths; cddp.launch and
cddp.run are the launchers.

Which cddp `import cddp` runs: this directory, when the extension _C was built beside it (the
installed package, an editable install, a checkout after `python setup.py build_ext --inplace`).
A checkout that was not built is found first all the same whenever its root heads sys.path —
`python -m cddp.launch`, `python -c` and pytest put the current directory there — so its
cddp/ hands over to the cddp installed elsewhere (`pip install .`): see _use_installed_package.
"""
from importlib.machinery import PathFinder as _PathFinder


def _use_installed_package():
    """Replace this unbuilt source package, in sys.modules, by the first built cddp found where
    `import cddp` looks; ImportError saying what to run when there is none.

    The import system returns whatever sys.modules["cddp"] holds once this __init__ ends, so
    `import cddp` gives the installed package itself: its __file__ and __path__, so cddp.launch,
    cddp._C and every other submodule load from its files under their usual names (pickles,
    multiprocessing spawn children and launched workers resolve `cddp.*` the same way, each
    process by this same hand-over when it too starts from the checkout).
    """
    import importlib.util
    import itertools
    import sys

    def built(spec):
        return (spec is not None and spec.loader is not None and spec.submodule_search_locations
                and _PathFinder.find_spec(f"{__name__}._C", spec.submodule_search_locations))

    # where `import cddp` looks, in its order: each sys.path entry, then the finders that follow
    # (an editable install adds one). Only a built package will do, which rules out this tree
    # and any other unbuilt one (that would hand back to this one).
    on_path = (_PathFinder.find_spec(__name__, [e]) for e in sys.path if isinstance(e, str))
    finders = (f.find_spec(__name__, None) for f in sys.meta_path
               if f is not _PathFinder and hasattr(f, "find_spec"))
    spec = next(filter(built, itertools.chain(on_path, finders)), None)
    if spec is None:
        raise ImportError("cddp is not built: run `pip install .` (or `python setup.py "
                          "build_ext --inplace` to work on this checkout)", name=__name__)
    package = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = package
    spec.loader.exec_module(package)


# The functions that take torch's out= through the _OutFunction wrapper (cat and the
# elementwise binary functions, add mul eq clamp ..., take it in their C parsers); creation
# functions compute in out's dtype.
_OUT_FUNCTIONS = (
    "abs", "absolute", "acos", "arccos", "acosh", "arccosh", "addbmm", "addcdiv", "addcmul",
    "addmm", "addmv", "addr", "all", "amax", "amin", "any", "argmax", "argmin", "asin",
    "arcsin", "asinh", "arcsinh", "atan", "arctan", "atanh", "arctanh", "atan2", "arctan2",
    "baddbmm", "bernoulli", "bitwise_not", "bmm", "bucketize", "ceil", "column_stack",
    "copysign", "cos", "cosh", "cross", "cummax", "cummin", "cumprod", "cumsum", "deg2rad",
    "diag", "diff", "digamma", "dot", "dstack", "erf", "erfc", "erfinv", "exp", "exp2",
    "expm1", "fix", "float_power", "floor", "fmax", "fmin", "frac", "gather", "heaviside",
    "histc", "hstack", "hypot", "index_select", "inner", "isneginf", "isposinf", "kron",
    "kthvalue", "lerp", "lgamma", "log", "log10", "log1p", "log2", "logaddexp", "logaddexp2",
    "logcumsumexp", "logical_not", "logit", "logsumexp", "masked_select", "matmul", "max",
    "mean", "median", "min", "mm", "msort", "multinomial", "mv", "nan_to_num", "nanmean",
    "nanmedian", "nanquantile", "nansum", "narrow_copy", "neg", "negative", "nonzero", "norm",
    "normal", "outer", "prod", "quantile", "rad2deg", "reciprocal", "round", "row_stack",
    "rsqrt", "searchsorted", "sgn", "sigmoid", "sign", "signbit", "sin", "sinc", "sinh",
    "sort", "sqrt", "square", "stack", "std", "sum", "take_along_dim", "tan", "tanh",
    "tensordot", "topk", "tril", "triu", "trunc", "var", "vstack", "where", "xlogy")
# The functions whose torch form also takes its first argument as input= but has no out=:
# wrapped by _OutFunction(out=False) only so that input= works (the C bindings take it
# positionally; the wrapper moves it, ops/out_arg.c). Those above take it the same way.
_INPUT_KW = (
    "abs_", "acos_", "acosh_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_",
    "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "cos_", "cosh_", "deg2rad_",
    "det", "diag_embed", "diagonal", "erf_", "erfc_", "exp2_", "exp_", "expm1_", "fix_",
    "flatten", "fliplr", "flipud", "floor_", "frac_", "geqrf", "isfinite", "isinf", "isnan",
    "log10_", "log1p_", "log2_", "log_", "logdet", "matrix_exp", "neg_", "negative_",
    "pinverse", "qr", "rad2deg_", "reciprocal_", "relu", "relu_", "round_", "rsqrt_",
    "sigmoid_", "sin_", "sinh_", "slogdet", "sqrt_", "square_", "squeeze", "svd", "t", "tan_",
    "tanh_", "trace", "trunc_", "unbind", "cholesky", "clone", "inverse")
_OUT_CREATION = ("arange", "empty", "eye", "full", "linspace", "logspace", "ones", "rand",
                 "randint", "randn", "randperm", "range", "zeros")

if _PathFinder.find_spec(f"{__name__}._C", __path__) is None:    # a source tree, not built
    _use_installed_package()
else:
    import math
    from . import _C
    from ._C import Tensor, dtype, float32, float64, int64, int32, float, double, long, int  # noqa: A004
    from ._C import bool  # noqa: A004  (torch.bool, as torch names it)
    from ._C import float16, half, bfloat16, uint8, int8, int16, short  # noqa: F401
    from ._finfo import finfo, iinfo  # noqa: F401
    from ._size import Size
    from ._device import device
    from . import autograd
    from .autograd.grad_mode import (no_grad, enable_grad, set_grad_enabled,  # noqa: F401
                                     is_grad_enabled, inference_mode,
                                     is_inference_mode_enabled)

    _C._set_size_type(Size)
    _C._set_device_objects(device("cpu"), device)

    # Module-level functions written in C (cddp.tensor, cddp.sum, cddp.softmax, ...) are exported
    # as they are: no Python wrapper on the hot path.
    _INTERNAL = {"Reducer", "Node"}     # C types the Python layer uses; not torch API
    for _name in dir(_C):
        if not _name.startswith("_") and _name not in globals() and _name not in _INTERNAL:
            globals()[_name] = getattr(_C, _name)
    del _name

    from . import _tensor_py  # noqa: F401  (a few Python-level Tensor properties)
    from ._tensor_py import UntypedStorage, TypedStorage  # noqa: F401
    globals().update(_tensor_py.LEGACY_STORAGES)          # ByteStorage, FloatStorage, ...
    from ._extras import allclose, isclose, equal, sort, argsort, topk  # noqa: F401
    from ._ops import (cummax, cummin, take_along_dim, meshgrid, cartesian_prod,  # noqa: F401
                       atleast_1d, atleast_2d, atleast_3d, block_diag, tensor_split, hsplit,
                       vsplit, dsplit, hstack, vstack, row_stack, dstack, column_stack, kron,
                       count_nonzero, isposinf, isneginf, signbit, promote_types)
    from . import _pointwise, _stats, _shape_ops
    for _mod in (_pointwise, _stats, _shape_ops):
        globals().update((_n, getattr(_mod, _n)) for _n in _mod.__all__)
    globals()["range"] = _shape_ops.range_      # torch.range (Python's range stays builtin)
    del _mod
    from . import linalg
    globals().update(linalg.TOP_LEVEL)         # torch.inverse, det, svd (returning V), ...
    from ._compat import (compile, set_float32_matmul_precision,  # noqa: F401
                          get_float32_matmul_precision, is_autocast_cpu_enabled, layout,
                          set_default_device, get_default_device,
                          strided, spmm, LEGACY_TYPES as _LEGACY_TYPES)
    globals().update(_LEGACY_TYPES)
    # torch's out= keyword (ops/out_arg.c): the function computes, the wrapper writes into out
    for _n in _OUT_FUNCTIONS + _OUT_CREATION:
        if _n in globals():
            globals()[_n] = _C._OutFunction(globals()[_n], _n, _n in _OUT_CREATION)
    del _n
    normal = _shape_ops._zero_grad_sampler(normal)            # noqa: F821 (set just above)
    bernoulli = _shape_ops._zero_grad_sampler(bernoulli)      # noqa: F821
    from . import cuda, backends, version  # noqa: F401
    OutOfMemoryError = cuda.OutOfMemoryError          # torch.OutOfMemoryError is the same class
    # torch's aten-signature functional forms, windows, predicates: cddp/_variable_functions.py
    from . import _variable_functions
    globals().update((_n, getattr(_variable_functions, _n))
                     for _n in _variable_functions.__all__ if _n not in globals())
    pi, e, inf, nan, newaxis = math.pi, math.e, math.inf, math.nan, None
    from . import _foreach                   # torch._foreach_* (EMA and optimizer helpers)
    globals().update(_foreach.FUNCTIONS)
    _amp_foreach_non_finite_check_and_unscale_ = _C._amp_foreach_non_finite_check_and_unscale_
    _amp_update_scale_ = _C._amp_update_scale_
    for _n in _INPUT_KW:
        if _n in globals() and not isinstance(globals()[_n], _C._OutFunction):
            globals()[_n] = _C._OutFunction(globals()[_n], _n, False, False)
    del _n

from .torch_version import __version__  # noqa: E402  (torch 2.13's API level, +cddp<release>)


# Subpackages that load on first use (`cddp.nn`, `from cddp import nn`, `import cddp.nn` all
# work): an `import cddp` that only wants tensors stays cheap (bench/ops.py's import row), and
# cddp.distributed / cddp.multiprocessing bring subprocess, json and multiprocessing with them.
_LAZY = {"nn": ("nn", None), "optim": ("optim", None), "utils": ("utils", None),
         "accelerator": ("accelerator", None), "distributed": ("distributed", None),
         "multiprocessing": ("multiprocessing", None), "serialization": ("serialization", None),
         "save": ("serialization", "save"), "load": ("serialization", "load"),
         "amp": ("amp", None), "cpu": ("cpu", None), "autocast": ("amp", "autocast"),
         "onnx": ("onnx", None), "jit": ("jit", None), "func": ("func", None),
         "fx": ("fx", None), "overrides": ("overrides", None),
         "library": ("library", None), "ops": ("ops", None), "_utils": ("_utils", None),
         "distributions": ("distributions", None), "special": ("special", None),
         "random": ("random", None), "testing": ("testing", None),
         "_weight_norm": ("nn.utils.weight_norm", "_weight_norm"),
         "norm_except_dim": ("nn.utils.weight_norm", "norm_except_dim")}
_LAZY.update({"profiler": ("profiler", None), **{n: ("_compat", n) for n in ("memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format")}})  # noqa: E501
# torch.conv2d, torch.max_pool2d, ...: the functional forms, loaded with cddp.nn
_LAZY.update({name: ("nn._functional_spatial", name) for name in (
    "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "avg_pool1d",
    "adaptive_avg_pool1d", "pixel_shuffle", "pixel_unshuffle")})
_LAZY.update({"max_pool1d": ("nn._functional_spatial", "_torch_max_pool1d"),
              "max_pool2d": ("nn._functional_spatial", "_torch_max_pool2d"),
              "adaptive_max_pool1d": ("nn._functional_spatial", "_torch_adaptive_max_pool1d"),
              "constant_pad_nd": ("nn._functional_spatial", "_constant_pad_nd")})
_LAZY.update({"i0": ("special", "i0"),
              "is_anomaly_enabled": ("autograd.anomaly_mode", "is_anomaly_enabled"),
              "is_anomaly_check_nan_enabled": ("autograd.anomaly_mode",
                                               "is_anomaly_check_nan_enabled"),
              "conv3d": ("nn._functional_3d", "conv3d"),
              "conv_transpose3d": ("nn._functional_3d", "conv_transpose3d"),
              "max_pool3d": ("nn._functional_3d", "_torch_max_pool3d"),
              "vmap": ("func", "vmap"), "hub": ("hub", None),
              "GradScaler": ("amp", "GradScaler"), "Future": ("futures", "Future"),
              "types": ("types", None), "_assert": ("_variable_functions", "_assert"),
              "_shape_as_tensor": ("_variable_functions", "_shape_as_tensor"),
              "mps": ("mps", None), "__config__": ("__config__", None),
              **{n: ("_sampling", n) for n in ("poisson", "binomial", "_standard_gamma",
                                               "_sample_dirichlet")},
              "from_dlpack": ("utils.dlpack", "from_dlpack"),
              "to_dlpack": ("utils.dlpack", "to_dlpack"), "compiler": ("compiler", None),
              "_dynamo": ("_dynamo", None), "_inductor": ("_inductor", None),
              # torch.sparse over dense tensors (loaded on first use: cddp/sparse.py)
              "sparse": ("sparse", None), "sparse_coo_tensor": ("sparse", "sparse_coo_tensor"),
              "sparse_csr_tensor": ("sparse", "sparse_csr_tensor"),
              # complex tensors and torch.fft (cddp/_complex.py, cddp/fft.py)
              "fft": ("fft", None), "stft": ("_spectral", "stft"),
              "istft": ("_spectral", "istft"),
              **{n: ("_complex", n) for n in ("complex64", "complex128", "cfloat", "cdouble",
                                              "view_as_complex", "view_as_real", "polar",
                                              "complex")}})


def __getattr__(name):
    module, attr = _LAZY.get(name, (None, None))
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = importlib.import_module(f"{__name__}.{module}")
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


from . import _einops  # noqa: E402  (einops' functions take cddp tensors: cddp/_einops.py)
_einops.install()
