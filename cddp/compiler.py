"""torch.compiler: the compiler's public controls as model code calls them. cddp runs models
eagerly — cddp.compile hands them back — so nothing here is ever compiling: is_compiling() is
False, disable() and the other decorators return the function itself, reset() and the step
markers do nothing. config: torch.compiler.config's knobs (cddp/_config_module.py)."""
from ._compat import _NoOpContextDecorator
from ._compat import compile  # noqa: F401,A004  (torch.compiler.compile)
from ._config_module import ConfigModule

__all__ = ["compile", "config", "assume_constant_result", "reset", "allow_in_graph",
           "substitute_in_graph", "list_backends", "disable", "set_default_backend",
           "get_default_backend", "set_stance", "cudagraph_mark_step_begin", "wrap_numpy",
           "is_compiling", "is_dynamo_compiling", "is_exporting", "nested_compile_region"]

config = ConfigModule("torch.compiler.config", {
    "job_id": None, "dynamic_sources": "", "unbacked_sources": "",
    "cache_key_tag": "", "force_disable_caches": False,
    "skip_tensor_guards_with_matching_dict_tags": True,
})

_default_backend = ["inductor"]


def _passthrough(fn=None, *args, **kwargs):
    """fn itself, whether called as @deco or @deco(...)."""
    if callable(fn):
        return fn
    return lambda f: f


def disable(fn=None, recursive=True, *, reason=None):
    """@torch.compiler.disable: the function runs as it is (here it always does)."""
    return _passthrough(fn)


allow_in_graph = assume_constant_result = wrap_numpy = nested_compile_region = _passthrough


def substitute_in_graph(original_fn, *, can_constant_fold_through=False,
                        skip_signature_check=False):
    """A polyfill's registration for the compiler: the polyfill is returned unused."""
    return lambda fn: fn


def reset():
    """torch.compiler.reset(): clears compiled code; there is none."""


def list_backends(exclude_tags=("debug", "experimental")):
    """The compile backends torch.compile(backend=...) names; cddp accepts them all and runs
    eagerly, so this lists torch's usual ones."""
    return ["cudagraphs", "inductor", "onnxrt", "openxla", "tvm"]


def set_default_backend(backend):
    _default_backend[0] = backend


def get_default_backend():
    return _default_backend[0]


class set_stance(_NoOpContextDecorator):  # noqa: N801  (torch's name)
    """torch.compiler.set_stance(stance): how compiled functions behave; usable as a call, a
    context manager or a decorator. Nothing is compiled, so nothing changes."""

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        if stance not in ("default", "force_eager", "eager_on_recompile", "fail_on_recompile",
                          "eager_then_compile", "aot_eager_then_compile"):
            raise RuntimeError(f"invalid torch.compiler.set_stance stance: {stance!r}")
        self.stance = stance


def cudagraph_mark_step_begin():
    """Marks a new iteration for CUDA graphs; there are none."""


def is_compiling():
    return False


def is_dynamo_compiling():
    return False


def is_exporting():
    return False
