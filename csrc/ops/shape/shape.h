/* ops/shape/shape.h — private glue between ops/shape/args.c (argument parsing),
 * ops/shape/shape.c (views), ops/shape/slice.c (narrow / select / split / chunk / unbind /
 * iteration), ops/shape/convert.c (contiguous / clone / to / device policy) and
 * ops/shape/join.c (cat / stack). Not part of the shared API in core/cddp.h: module.c only
 * sees cddp_shape_*_methods, so ops/shape/shape.c lists the other three files' entry points in
 * its method tables.
 */
#ifndef CDDP_OPS_SHAPE_H
#define CDDP_OPS_SHAPE_H

#include "core/cddp.h"

/* ---- argument parsing (ops/shape/args.c; METH_FASTCALL | METH_KEYWORDS) --------------- */

/* Match positional args and keyword names against `names` (nparams entries, the first
 * npos of which may be given positionally). out[i] = borrowed object or NULL when absent.
 * A parameter named "dim" also takes the keyword "axis" (NumPy's spelling, as torch's).
 * TypeError (Python's wording) on too many positionals, unknown or repeated keywords. */
int cddp_shape_parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, const char *const *names, int nparams, int npos,
                          PyObject **out);
/* Keywords for a binding whose parameters are otherwise taken positionally (torch's
 * view(size=), reshape(shape=), permute(dims=), view_as(other=) ...): with kwnames NULL
 * nothing changes (the hot path); else positionals and keywords are matched against names
 * (torch's parameter names, in order, n <= 4) into buf, which must fill a prefix of them,
 * and *args / *nargs then describe buf. -1 with TypeError otherwise. */
int cddp_shape_keywords_as_positional(const char *fname, PyObject *const **args,
                                      Py_ssize_t *nargs, PyObject *kwnames,
                                      const char *const *names, int n, PyObject **buf);
/* A Python int (or anything with __index__, not bool/float) as int64. TypeError otherwise. */
int cddp_shape_get_int(PyObject *o, const char *fname, const char *argname, int64_t *v);
/* torch's maybe_wrap_dim: dim in [-n, n-1] with n = max(ndim, 1); IndexError otherwise. */
int cddp_shape_wrap_dim(int64_t dim, int ndim, int64_t *out);
/* "[2, 3, 4]" into buf. */
void cddp_shape_format(char *buf, size_t cap, int ndim, const int64_t *shape);

/* Ints given as (*ints) or as one sequence (tuple, list, Size), as torch's IntArrayRef
 * arguments; at most CDDP_MAX_DIMS; negative values kept. */
int cddp_shape_int_list(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                        int *ndim, int64_t *out);
/* 0 when o is a Tensor, else TypeError naming fname/argname. */
int cddp_shape_check_tensor(PyObject *o, const char *fname, const char *argname);

/* ---- views without autograd (ops/shape/shape.c; shared by backwards and cat/stack) ---- */

/* t viewed as shape (fully specified, numel must match): an alias when t's strides allow it,
 * else a contiguous copy shaped so. New reference. */
TensorObject *cddp_shape_reshape_raw(TensorObject *t, int ndim, const int64_t *shape);
/* Alias of t[..., start:start+length, ...] along dim (dim/start already validated). */
TensorObject *cddp_shape_narrow_raw(TensorObject *t, int dim, int64_t start, int64_t length);
/* Alias of t[..., index, ...] along dim (validated), one dimension fewer. */
TensorObject *cddp_shape_select_raw(TensorObject *t, int dim, int64_t index);

/* x.to(dt) as Tensor.to does it: x itself when dt == x's dtype, else a contiguous copy with
 * history ToCopyBackward0 (autocast's casts, amp/autocast.c). New reference. */
PyObject *cddp_shape_to_dtype(TensorObject *x, cddp_dtype dt);

/* Give `out` (a fresh result of an op on `in`) history through a one-input node `name` when
 * grad mode is on and `in` needs grad; an `out` sharing in's memory becomes a differentiable
 * view of in's base (cddp_view_mark). Returns the node (new ref; the caller fills node->i /
 * node->d and drops it) or NULL; *err = 1 on failure. */
NodeObject *cddp_shape_record(TensorObject *in, TensorObject *out, const char *name,
                              cddp_backward_fn fn, int *err);

/* The common tail of a view op: give `out` history (cddp_shape_record) and copy nparams op
 * integers into node->i; on failure drop out. Returns out or NULL. */
PyObject *cddp_shape_finish(TensorObject *in, TensorObject *out, const char *name,
                            cddp_backward_fn fn, const int64_t *iparams, int nparams);

/* ---- entry points listed in ops/shape/shape.c's tables -------------------------------- */

/* ops/shape/slice.c: Tensor.narrow/select/split/chunk/unbind */
PyObject *cddp_shape_narrow(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_shape_select(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_shape_split(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *cddp_shape_chunk(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *cddp_shape_unbind(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);

/* ops/shape/convert.c */
PyObject *cddp_convert_contiguous(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);
PyObject *cddp_convert_clone(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *cddp_convert_clone_fn(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames);
/* out in memory format fmt (a CDDP_MF_*; preserve: out as it is): out itself when already
 * so, else a copy with CloneBackward0 history (Tensor.contiguous, cat's result, the
 * channels-last wrappers). New reference or NULL. */
PyObject *cddp_convert_as_format(TensorObject *out, int fmt);
PyObject *cddp_convert_keep_channels_last(PyObject *m, PyObject *const *args, Py_ssize_t nargs);
PyObject *cddp_convert_to(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *cddp_convert_float(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *cddp_convert_double(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames);
PyObject *cddp_convert_long(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_convert_int(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *cddp_convert_bool(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_convert_half(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_convert_bfloat16(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames);
PyObject *cddp_convert_byte(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_convert_char(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_convert_short(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *cddp_convert_type(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *cddp_convert_cpu(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *cddp_convert_cuda(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
/* The CUDA-without-GPU policy (0 ok / -1 error); declared for everyone in core/cddp.h later. */
int cddp_device_fallback(PyObject *device_spec);

/* ops/shape/join.c */
PyObject *cddp_join_cat(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *cddp_join_stack(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

#endif
