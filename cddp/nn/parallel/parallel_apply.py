"""torch.nn.parallel.parallel_apply: module i applied to inputs i (a tuple of arguments, or one
argument) and kwargs i. torch runs one thread per GPU; here every module runs on this process's
CPU, one after another in order (cddp's kernels use the cores already)."""
__all__ = ["parallel_apply"]


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    if len(modules) != len(inputs):
        raise AssertionError(f"The number of modules {len(modules)} is not equal to the number "
                             f"of inputs {len(inputs)}")
    kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * len(modules)
    return [m(*(inp if isinstance(inp, (list, tuple)) else (inp,)), **kw)
            for m, inp, kw in zip(modules, inputs, kwargs_tup)]
