"""cddp.utils — data loading (cddp.utils.data), hook handles, activation checkpointing, benchmark timers. Submodules load on first use
(`cddp.utils.data` pulls in multiprocessing, which `import cddp` should not pay for)."""
import importlib


def __getattr__(name):
    if name in ("data", "hooks", "checkpoint", "benchmark", "dlpack", "model_zoo"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
