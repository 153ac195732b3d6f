/* ops/creation/creation.h — private to creation*.c / random*.c / core/repr.c (and index_fn.c, for masked_fill's value): argument parsing shared by the
 * factory functions (torch.zeros / rand / ... keyword conventions) and scalar fills.
 */
#ifndef CDDP_CREATION_H
#define CDDP_CREATION_H

#include "core/cddp.h"

/* A Python number as an operand: kind 0 bool, 1 int, 2 float (i valid for 0/1, d always). */
typedef struct {
    int kind;
    int64_t i;
    double d;
} cddp_scalar;

/* Python bool/int/float, NumPy scalar or 1-element tensor -> scalar. TypeError naming fname
 * otherwise. Ints beyond int64 become floats. */
int cddp_scalar_from_py(PyObject *o, cddp_scalar *s, const char *fname);
/* The dtype torch.full infers from a fill value: bool, int64 or the default float. */
cddp_dtype cddp_scalar_dtype(const cddp_scalar *s);
/* Store s into one element of dtype dt; a float that does not fit an integer dtype raises
 * torch's "value cannot be converted to type int64 without overflow". 0 / -1. */
int cddp_scalar_store(const cddp_scalar *s, cddp_dtype dt, char *p);
/* Every element of t = s (any layout; bumps nothing: callers do). 0 / -1. */
int cddp_fill_raw(TensorObject *t, const cddp_scalar *s);

/* FASTCALL keywords: for each name in kwnames, find it in `names` (NULL-terminated) and set
 * vals[k] (borrowed). Unknown or repeated names raise TypeError naming fname. */
int cddp_kw_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  const char *const *names, PyObject **vals);
/* Sizes given as (*ints), (sequence,) or size=seq. `n` positional objects at args. */
int cddp_parse_size(const char *fname, PyObject *const *args, Py_ssize_t n, PyObject *size_kw,
                    int *ndim, int64_t *shape);
/* One sequence (or int) of sizes. */
int cddp_parse_size_obj(const char *fname, PyObject *o, int *ndim, int64_t *shape);
/* dtype=None -> *has = 0. */
int cddp_parse_dtype_opt(PyObject *o, int *has, cddp_dtype *dt);
/* device=None / "cpu" / "cuda[:n]" / "meta" / cddp.device / int: validated. 1 for the meta device, dflt when o is NULL/None, 0 for the others (CUDA tensors
 * stay on the CPU), -1 on error. Factories pass cddp_default_meta() as dflt, *_like and
 * new_* their input's cddp_is_meta. */
int cddp_parse_device_opt(PyObject *o, int dflt);
/* Whether factories without a device make meta tensors (set_default_device("meta")). */
int cddp_default_meta(void);
PyObject *cddp_py_set_default_meta(PyObject *m, PyObject *flag);
/* A factory's result res (consumed) placed on the device: itself unless meta == 1, then a meta
 * tensor of its dtype and shape (its own object when it owned its storage alone). */
PyObject *cddp_factory_place(PyObject *res, int meta);
/* requires_grad=... (NULL -> 0). -1 on error. */
int cddp_parse_flag(PyObject *o, int *out);
/* Apply factory `requires_grad` (floating dtypes only, torch's message) and the device
 * (cddp_factory_place). Steals t: returns it or NULL after releasing it. */
PyObject *cddp_factory_finish(TensorObject *t, int requires_grad, int meta);
/* After an in-place overwrite of t: if grad mode is on and t has history, give it a node
 * `name` whose gradient to the old value is zero (torch's FillBackward / ZeroBackward ...),
 * through cddp_set_inplace_history (a view's base sees the write). */
int cddp_inplace_zero_history(TensorObject *t, const char *name);

/* Parse a shape in [0, CDDP_MAX_DIMS] checked for negative sizes with fname in the message. */
int cddp_check_sizes(const char *fname, int ndim, const int64_t *shape);

/* module function implemented in core/repr.c, listed in ops/creation/creation.c's module table */
PyObject *cddp_py_set_printoptions(PyObject *m, PyObject *args, PyObject *kw);

/* ops/creation/range.c */
PyObject *cddp_py_arange(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_linspace(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_eye(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);

/* ops/creation/data.c */
PyObject *cddp_py_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_as_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_tensor_tolist(PyObject *self, PyObject *unused);
PyObject *cddp_tensor_new_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);

#endif
