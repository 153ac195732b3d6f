/* ops/reduce/reduce.c — the method tables of every reduction: Tensor methods and the module
 * functions cddp.<op>(input, ...) (torch.sum, torch.max, torch.softmax, ...).
 *
 * The folder, in dependency order (a file calls only the ones above it; all share
 * ops/reduce/reduce.h):
 *   args.c      argument parsing every entry point uses
 *   plan.c      the (outer, R, inner) reduction plan every kernel runs on
 *   sum.c       sum, mean, prod            var.c      var, std
 *   scan.c      cumsum                     all_any.c  all, any
 *   minmax.c    max, min, amax, amin, argmax, argmin
 *   norm.c      norm, linalg.vector_norm   softmax.c  softmax, log_softmax, logsumexp
 *   reduce.c    (this file) the tables module.c merges into the Tensor type and the module
 */
#include "ops/reduce/reduce.h"
#include "module.h"

/* ---- tables --------------------------------------------------------------------------- */

/* cddp.<name>(input, ...) for each method whose function form takes the same arguments */
#define AS_FUNCTION(NAME, IMPL)                                                          \
    static PyObject *fn_##NAME(PyObject *m, PyObject *const *args, Py_ssize_t nargs,     \
                               PyObject *kwnames)                                        \
    {                                                                                    \
        return cddp_reduce_as_function(#NAME, IMPL, args, nargs, kwnames);               \
    }
AS_FUNCTION(sum, cddp_reduce_sum)
AS_FUNCTION(mean, cddp_reduce_mean)
AS_FUNCTION(prod, cddp_reduce_prod)
AS_FUNCTION(var, cddp_reduce_var)
AS_FUNCTION(std, cddp_reduce_std)
AS_FUNCTION(cumsum, cddp_reduce_cumsum)
AS_FUNCTION(all, cddp_reduce_all)
AS_FUNCTION(any, cddp_reduce_any)
AS_FUNCTION(amax, cddp_reduce_amax)
AS_FUNCTION(amin, cddp_reduce_amin)
AS_FUNCTION(argmax, cddp_reduce_argmax)
AS_FUNCTION(argmin, cddp_reduce_argmin)
AS_FUNCTION(logsumexp, cddp_reduce_logsumexp)

#define FC METH_FASTCALL | METH_KEYWORDS
#define M(NAME, IMPL, DOC) {NAME, (PyCFunction)(void (*)(void))IMPL, FC, DOC}

PyMethodDef cddp_reduce_tensor_methods[] = {
    M("sum", cddp_reduce_sum, "sum(dim=None, keepdim=False, *, dtype=None)"),
    M("mean", cddp_reduce_mean, "mean(dim=None, keepdim=False, *, dtype=None)"),
    M("prod", cddp_reduce_prod, "prod(dim=None, keepdim=False, *, dtype=None)"),
    M("var", cddp_reduce_var, "var(dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("std", cddp_reduce_std, "std(dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("cumsum", cddp_reduce_cumsum, "cumsum(dim, *, dtype=None)"),
    M("all", cddp_reduce_all, "all(dim=None, keepdim=False) -> bool tensor"),
    M("any", cddp_reduce_any, "any(dim=None, keepdim=False) -> bool tensor"),
    M("max", cddp_reduce_max, "max() / max(dim, keepdim=False) -> (values, indices) / max(other)"),
    M("min", cddp_reduce_min, "min() / min(dim, keepdim=False) -> (values, indices) / min(other)"),
    M("amax", cddp_reduce_amax, "amax(dim=(), keepdim=False)"),
    M("amin", cddp_reduce_amin, "amin(dim=(), keepdim=False)"),
    M("argmax", cddp_reduce_argmax, "argmax(dim=None, keepdim=False) -> int64"),
    M("argmin", cddp_reduce_argmin, "argmin(dim=None, keepdim=False) -> int64"),
    M("softmax", cddp_reduce_softmax, "softmax(dim, dtype=None)"),
    M("log_softmax", cddp_reduce_log_softmax, "log_softmax(dim, dtype=None)"),
    M("logsumexp", cddp_reduce_logsumexp, "logsumexp(dim, keepdim=False)"),
    M("norm", cddp_reduce_norm, "norm(p='fro', dim=None, keepdim=False, dtype=None)"),
    {NULL},
};

PyMethodDef cddp_reduce_module_methods[] = {
    M("sum", fn_sum, "sum(input, dim=None, keepdim=False, *, dtype=None)"),
    M("mean", fn_mean, "mean(input, dim=None, keepdim=False, *, dtype=None)"),
    M("prod", fn_prod, "prod(input, dim=None, keepdim=False, *, dtype=None)"),
    M("var", fn_var, "var(input, dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("std", fn_std, "std(input, dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("cumsum", fn_cumsum, "cumsum(input, dim, *, dtype=None)"),
    M("all", fn_all, "all(input, dim=None, keepdim=False)"),
    M("any", fn_any, "any(input, dim=None, keepdim=False)"),
    M("max", cddp_reduce_fn_max, "max(input) / max(input, dim, keepdim=False) / max(input, other)"),
    M("min", cddp_reduce_fn_min, "min(input) / min(input, dim, keepdim=False) / min(input, other)"),
    M("amax", fn_amax, "amax(input, dim=(), keepdim=False)"),
    M("amin", fn_amin, "amin(input, dim=(), keepdim=False)"),
    M("argmax", fn_argmax, "argmax(input, dim=None, keepdim=False)"),
    M("argmin", fn_argmin, "argmin(input, dim=None, keepdim=False)"),
    M("softmax", cddp_reduce_fn_softmax, "softmax(input, dim=None, _stacklevel=3, dtype=None)"),
    M("log_softmax", cddp_reduce_fn_log_softmax,
      "log_softmax(input, dim=None, _stacklevel=3, dtype=None)"),
    M("logsumexp", fn_logsumexp, "logsumexp(input, dim, keepdim=False)"),
    M("norm", cddp_reduce_fn_norm, "norm(input, p='fro', dim=None, keepdim=False, dtype=None)"),
    M("_linalg_vector_norm", cddp_reduce_fn_vector_norm,
      "linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)"),
    {NULL},
};
