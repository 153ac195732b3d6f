"""torch.ops: the custom operators registered through cddp.library, as
torch.ops.<namespace>.<name> (a CustomOpDef, callable; .default is the op itself, as torch's
OpOverload). cddp has no aten operator registry: torch.ops.aten.* and load_library raise
saying so."""

from . import library as _library


class _Namespace:
    def __init__(self, ns):
        self._ns = ns

    def __getattr__(self, name):
        op = _library._OPS.get(f"{self._ns}::{name}")
        if op is None:
            extra = (" (cddp has no aten operator registry: call the torch-level function, "
                     "e.g. torch.add)") if self._ns == "aten" else ""
            raise AttributeError(f"'_OpNamespace' '{self._ns}' object has no attribute "
                                 f"'{name}'{extra}")
        return op

    def __repr__(self):
        return f"torch.ops.{self._ns}"


def load_library(path):
    raise NotImplementedError(f"torch.ops.load_library({path!r}): cddp cannot load TorchScript "
                              "/ C++ operator libraries built for torch")


def __getattr__(ns):
    if ns.startswith("__"):
        raise AttributeError(ns)
    return _Namespace(ns)
