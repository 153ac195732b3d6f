/* ops/linalg/linalg.c — matrix products for Python: matmul (the @ operator), mm, bmm, mv, dot,
 * outer, addmm as module functions and Tensor methods.
 *
 * Mirrors: torch.matmul / mm / bmm / mv / dot / outer / addmm (and the Tensor methods) on CPU,
 * with torch's shape rules, error messages and grad_fn names.
 *
 * Legend: a (..., M, K) @ b (..., K, N) -> (..., M, N); the "..." batch dims broadcast.
 *
 * This file parses arguments and validates shapes/dtypes with torch's messages, then hands
 * the product to ops/linalg/linalg_engine.c (cddp_product_with_grad / cddp_bmm_raw), which owns the
 * batching, the BLAS layouts and the backward.
 */
#include "amp/amp.h"
#include "ops/linalg/blas.h"
#include "module.h"
#include <string.h>

/* torch's two spellings of a dtype in error messages */
static const char *c_name(cddp_dtype d)
{
    return cddp_dtype_c_name[d];
}

static const char *scalar_name(cddp_dtype d)
{
    return cddp_dtype_torch_name[d];
}

/* ---- validation with torch's wording -------------------------------------------------- */

static int not_bool(TensorObject *a, const char *kernel)
{
    if (a->dtype != CDDP_BOOL)
        return 0;
    PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for 'Bool'", kernel);
    return -1;
}

static int mm_checks(TensorObject *a, TensorObject *b, int64_t rows_a)
{
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "expected m1 and m2 to have the same dtype, but got: %s != %s",
                     c_name(a->dtype), c_name(b->dtype));
        return -1;
    }
    if (not_bool(a, "addmm_impl_cpu_") < 0)
        return -1;
    int64_t K = a->shape[a->ndim - 1], Kb = b->shape[0], N = b->ndim > 1 ? b->shape[1] : 1;
    if (K != Kb) {
        PyErr_Format(PyExc_RuntimeError,
                     "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                     (long long)rows_a, (long long)K, (long long)Kb, (long long)N);
        return -1;
    }
    return 0;
}

static int mv_checks(TensorObject *m, TensorObject *v, int64_t rows)
{
    if (m->dtype != v->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "addmv input tensors must have the same dtype, but got %s, %s, and %s",
                     scalar_name(v->dtype), scalar_name(m->dtype), scalar_name(v->dtype));
        return -1;
    }
    if (not_bool(m, "addmv_impl_cpu") < 0)
        return -1;
    if (m->shape[m->ndim - 1] != v->shape[0]) {
        PyErr_Format(PyExc_RuntimeError, "size mismatch, got input (%lld), mat (%lldx%lld), "
                     "vec (%lld)", (long long)rows, (long long)rows,
                     (long long)m->shape[m->ndim - 1], (long long)v->shape[0]);
        return -1;
    }
    return 0;
}

static int dot_checks(TensorObject *a, TensorObject *b)
{
    if (a->ndim != 1 || b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "1D tensors expected, but got %dD and %dD tensors",
                     a->ndim, b->ndim);
        return -1;
    }
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "dot : expected both vectors to have same dtype, but found %s and %s",
                     scalar_name(a->dtype), scalar_name(b->dtype));
        return -1;
    }
    if (not_bool(a, "dot") < 0)
        return -1;
    if (a->shape[0] != b->shape[0]) {
        PyErr_Format(PyExc_RuntimeError,
                     "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have "
                     "the same number of elements, but got %lld and %lld elements respectively",
                     (long long)a->shape[0], (long long)b->shape[0], (long long)a->shape[0],
                     (long long)b->shape[0]);
        return -1;
    }
    return 0;
}

/* Both batched-product checks torch makes: batch dims broadcast, then (B, K) agree, where B
 * is the broadcast batch count. */
static int bmm_checks(TensorObject *a, TensorObject *b)
{
    int an = a->ndim, bn = b->ndim, nb;
    int64_t bshape[CDDP_MAX_DIMS], nbatch = 1;
    int64_t K = a->shape[an - 1], Kb = bn > 1 ? b->shape[bn - 2] : b->shape[0];
    if (cddp_broadcast_shapes(an > 2 ? an - 2 : 0, a->shape, bn > 2 ? bn - 2 : 0, b->shape,
                              &nb, bshape) < 0)
        return -1;
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError, "expected scalar type %s but found %s",
                     scalar_name(a->dtype), scalar_name(b->dtype));
        return -1;
    }
    if (not_bool(a, "bmm") < 0)
        return -1;
    for (int d = 0; d < nb; d++)
        nbatch *= bshape[d];
    if (K != Kb) {
        PyErr_Format(PyExc_RuntimeError, "Expected size for first two dimensions of batch2 "
                     "tensor to be: [%lld, %lld] but got: [%lld, %lld].", (long long)nbatch,
                     (long long)K, (long long)nbatch, (long long)Kb);
        return -1;
    }
    return 0;
}

/* torch.matmul: dispatch on the operands' dims, validate as the op torch would use does. */
static PyObject *matmul_impl(TensorObject *a, TensorObject *b)
{
    int an = a->ndim, bn = b->ndim;
    const char *name;
    if (an == 0 || bn == 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "both arguments to matmul need to be at least 1D, but they are %dD and %dD",
                     an, bn);
        return NULL;
    }
    if (an == 1 && bn == 1) {
        if (dot_checks(a, b) < 0)
            return NULL;
        name = "DotBackward0";
    } else if (bn == 1) {                       /* (..., M, K) @ (K,): a matrix-vector product */
        int64_t rows = 1;
        for (int d = 0; d < an - 1; d++)
            rows *= a->shape[d];
        if (mv_checks(a, b, rows) < 0)
            return NULL;
        name = an == 2 ? "MvBackward0" : "UnsafeViewBackward0";
    } else if (an <= 2 && bn == 2) {
        if (mm_checks(a, b, an == 2 ? a->shape[0] : 1) < 0)
            return NULL;
        name = an == 2 ? "MmBackward0" : "SqueezeBackward4";
    } else if (bn == 2) {                       /* (..., M, K) @ (K, N): folded into one mm */
        int64_t rows = 1;
        for (int d = 0; d < an - 1; d++)
            rows *= a->shape[d];
        if (mm_checks(a, b, rows) < 0)
            return NULL;
        name = "UnsafeViewBackward0";
    } else {
        if (bmm_checks(a, b) < 0)
            return NULL;
        name = "UnsafeViewBackward0";
    }
    return cddp_product_with_grad(CDDP_VIEW_MATMUL, a, b, name, a, b);
}

/* ---- argument parsing ----------------------------------------------------------------- */

/* Fill out[0..nnames) from positional args (at most npos) and keywords named `names`;
 * the first nreq are required, the rest stay NULL when absent. TypeError as Python's. */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, const char *const *names, int nnames, int npos,
                      int nreq, PyObject **out)
{
    for (int i = 0; i < nnames; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments but %zd were given",
                     fname, npos, nargs);
        return -1;
    }
    for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < nnames && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == nnames) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         key);
            return -1;
        }
        if (out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fname,
                         names[i], i + 1);
            return -1;
        }
    }
    return 0;
}

static int want_tensor(const char *fname, const char *arg, int pos, PyObject *o)
{
    if (cddp_tensor_check(o))
        return 0;
    if (cddp_is_complex_obj(o))
        return cddp_arg_type_error(fname, arg, "Tensor", o);
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' (position %d) must be Tensor, not %s",
                 fname, arg, pos, Py_TYPE(o)->tp_name);
    return -1;
}

/* Two tensors, from (a, b) module-call arguments or (self; b) method arguments. */
static int two_tensors(const char *fname, PyObject *self, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
                       TensorObject **a, TensorObject **b)
{
    PyObject *o[2];
    if (self) {
        if (parse_args(fname, args, nargs, kwnames, names + 1, 1, 1, 1, o + 1) < 0)
            return -1;
        o[0] = self;
    } else if (parse_args(fname, args, nargs, kwnames, names, 2, 2, 2, o) < 0) {
        return -1;
    }
    if (want_tensor(fname, names[0], 1, o[0]) < 0 || want_tensor(fname, names[1], 2, o[1]) < 0)
        return -1;
    *a = (TensorObject *)o[0];
    *b = (TensorObject *)o[1];
    return 0;
}

/* ---- public ops ----------------------------------------------------------------------- */

static PyObject *matmul_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw);

PyObject *cddp_nb_matmul(PyObject *a, PyObject *b)
{
    if (!cddp_tensor_check(a) || !cddp_tensor_check(b))
        Py_RETURN_NOTIMPLEMENTED;
    if (CDDP_AUTOCAST_ON()) {                                    /* a @ b is matmul */
        PyObject *ab[2] = {a, b};
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, matmul_common, NULL, ab, 2, NULL);
    }
    return matmul_impl((TensorObject *)a, (TensorObject *)b);
}

static const char *const matmul_names[] = {"input", "other"};

static PyObject *matmul_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("matmul", self, args, nargs, kw, matmul_names, &a, &b) < 0)
        return NULL;
    return matmul_impl(a, b);
}

static PyObject *py_matmul(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, matmul_common, NULL, args, nargs, kw);
    return matmul_common(NULL, args, nargs, kw);
}

static PyObject *t_matmul(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, matmul_common, self, args, nargs, kw);
    return matmul_common(self, args, nargs, kw);
}

static const char *const mm_names[] = {"input", "mat2"};

static PyObject *mm_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("mm", self, args, nargs, kw, mm_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 2 || b->ndim != 2) {
        PyErr_SetString(PyExc_RuntimeError,
                        a->ndim != 2 ? "self must be a matrix" : "mat2 must be a matrix");
        return NULL;
    }
    if (mm_checks(a, b, a->shape[0]) < 0)
        return NULL;
    return cddp_product_with_grad(CDDP_VIEW_MATMUL, a, b, "MmBackward0", a, b);
}

static PyObject *py_mm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, mm_common, NULL, args, nargs, kw);
    return mm_common(NULL, args, nargs, kw);
}

static PyObject *t_mm(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, mm_common, self, args, nargs, kw);
    return mm_common(self, args, nargs, kw);
}

static PyObject *bmm_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("bmm", self, args, nargs, kw, mm_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 3 || b->ndim != 3) {
        PyErr_SetString(PyExc_RuntimeError, a->ndim != 3 ? "batch1 must be a 3D tensor"
                                                         : "batch2 must be a 3D tensor");
        return NULL;
    }
    if (a->shape[0] != b->shape[0] || a->shape[2] != b->shape[1]) {    /* no broadcasting */
        PyErr_Format(PyExc_RuntimeError, "Expected size for first two dimensions of batch2 "
                     "tensor to be: [%lld, %lld] but got: [%lld, %lld].",
                     (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0],
                     (long long)b->shape[1]);
        return NULL;
    }
    if (bmm_checks(a, b) < 0)
        return NULL;
    return cddp_product_with_grad(CDDP_VIEW_MATMUL, a, b, "BmmBackward0", a, b);
}

static PyObject *py_bmm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, bmm_common, NULL, args, nargs, kw);
    return bmm_common(NULL, args, nargs, kw);
}

static PyObject *t_bmm(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, bmm_common, self, args, nargs, kw);
    return bmm_common(self, args, nargs, kw);
}

static const char *const mv_names[] = {"input", "vec"};

static PyObject *mv_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("mv", self, args, nargs, kw, mv_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 2 || b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "vector + matrix @ vector expected, got 1, %d, %d",
                     a->ndim, b->ndim);
        return NULL;
    }
    if (mv_checks(a, b, a->shape[0]) < 0)
        return NULL;
    return cddp_product_with_grad(CDDP_VIEW_MATMUL, a, b, "MvBackward0", a, b);
}

static PyObject *py_mv(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return mv_common(NULL, args, nargs, kw);
}

static PyObject *t_mv(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return mv_common(self, args, nargs, kw);
}

static const char *const dot_names[] = {"input", "tensor"};

static PyObject *dot_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("dot", self, args, nargs, kw, dot_names, &a, &b) < 0)
        return NULL;
    if (dot_checks(a, b) < 0)
        return NULL;
    return cddp_product_with_grad(CDDP_VIEW_MATMUL, a, b, "DotBackward0", a, b);
}

static PyObject *py_dot(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return dot_common(NULL, args, nargs, kw);
}

static PyObject *t_dot(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return dot_common(self, args, nargs, kw);
}

/* outer(a (N,), b (M,)) -> (N, M), a rank-1 GEMM. Promotes dtypes as torch's a[:, None] * b;
 * bool (logical and) goes through int32 since the GEMM kernels have no bool. */
static const char *const outer_names[] = {"input", "vec2"};

static PyObject *outer_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    TensorObject *a, *b, *ac = NULL, *bc = NULL, *r = NULL;
    cddp_dtype dt;
    if (two_tensors("outer", self, args, nargs, kw, outer_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 1 || b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "outer: Expected 1-D argument %s, but got %d-D",
                     a->ndim != 1 ? "self" : "vec2", a->ndim != 1 ? a->ndim : b->ndim);
        return NULL;
    }
    dt = cddp_promote(a->dtype, b->dtype);
    ac = cddp_tensor_cast_raw(a, dt == CDDP_BOOL ? CDDP_INT32 : dt);
    bc = cddp_tensor_cast_raw(b, dt == CDDP_BOOL ? CDDP_INT32 : dt);
    if (!ac || !bc)
        goto done;
    r = (TensorObject *)cddp_product_with_grad(CDDP_VIEW_OUTER, ac, bc, "MulBackward0", a, b);
    if (r && dt == CDDP_BOOL)
        Py_SETREF(r, cddp_tensor_cast_raw(r, CDDP_BOOL));
done:
    Py_XDECREF(ac);
    Py_XDECREF(bc);
    return (PyObject *)r;
}

static PyObject *py_outer(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return outer_common(NULL, args, nargs, kw);
}

static PyObject *t_outer(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return outer_common(self, args, nargs, kw);
}

/* ---- addmm ---------------------------------------------------------------------------- */

/* ---- addmm ---------------------------------------------------------------------------- */

/* A Python number (or 0-dim tensor) as double; truncated toward zero for integer tensors,
 * as torch's addmm does (alpha=1.5 on int64 acts as 1). */
static int scalar_arg(PyObject *o, const char *name, cddp_dtype dt, double *out)
{
    if (!o) {
        *out = 1.0;
        return 0;
    }
    if (cddp_tensor_check(o) && ((TensorObject *)o)->ndim == 0) {
        *out = cddp_get_double((TensorObject *)o, 0);
    } else if (PyLong_Check(o) || PyFloat_Check(o)) {
        *out = PyFloat_AsDouble(o);
        if (*out == -1 && PyErr_Occurred())
            return -1;
    } else {
        PyErr_Format(PyExc_TypeError, "addmm(): argument '%s' must be Number, not %s", name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (!cddp_is_floating(dt))
        *out = (double)(int64_t)*out;
    return 0;
}

/* input must expand to (M, N): torch's expand() wording. */
static int expands_to(TensorObject *in, const int64_t *shape)
{
    char ts[64], ins[256];
    int off = 2 - in->ndim, bad = -1;
    size_t k = 0;
    for (int d = in->ndim - 1; d >= 0 && d + off >= 0; d--)
        if (in->shape[d] != 1 && in->shape[d] != shape[d + off])
            bad = d;
    if (in->ndim <= 2 && bad < 0)
        return 0;
    for (int e = 0; e < in->ndim && k < sizeof ins - 24; e++)
        k += (size_t)snprintf(ins + k, sizeof ins - k, e ? ", %lld" : "%lld",
                              (long long)in->shape[e]);
    ins[k] = 0;
    snprintf(ts, sizeof ts, "%lld, %lld", (long long)shape[0], (long long)shape[1]);
    if (in->ndim > 2)
        PyErr_Format(PyExc_RuntimeError, "expand(cddp.Tensor{[%s]}, size=[%s]): the number of "
                     "sizes provided (2) must be greater or equal to the number of dimensions "
                     "in the tensor (%d)", ins, ts, in->ndim);
    else
        PyErr_Format(PyExc_RuntimeError, "The expanded size of the tensor (%lld) must match the "
                     "existing size (%lld) at non-singleton dimension %d.  Target sizes: [%s].  "
                     "Tensor sizes: [%s]", (long long)shape[bad + off], (long long)in->shape[bad],
                     bad + off, ts, ins);
    return -1;
}

static const char *const addmm_names[] = {"input", "mat1", "mat2", "beta", "alpha"};

static PyObject *addmm_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    PyObject *o[5];
    TensorObject *in, *m1, *m2, *out = NULL;
    int64_t shape[2];
    double alpha, beta;
    int err;
    if (self) {
        if (parse_args("addmm", args, nargs, kw, addmm_names + 1, 4, 2, 2, o + 1) < 0)
            return NULL;
        o[0] = self;
    } else if (parse_args("addmm", args, nargs, kw, addmm_names, 5, 3, 3, o) < 0) {
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        if (want_tensor("addmm", addmm_names[i], i + 1, o[i]) < 0)
            return NULL;
    in = (TensorObject *)o[0];
    m1 = (TensorObject *)o[1];
    m2 = (TensorObject *)o[2];
    if (m1->ndim != 2 || m2->ndim != 2) {
        PyErr_Format(PyExc_RuntimeError, "%s must be a matrix, got %d-D tensor",
                     m1->ndim != 2 ? "mat1" : "mat2", m1->ndim != 2 ? m1->ndim : m2->ndim);
        return NULL;
    }
    if (in->dtype != m2->dtype) {
        PyErr_Format(PyExc_RuntimeError, "self and mat2 must have the same dtype, but got %s "
                     "and %s", scalar_name(in->dtype), scalar_name(m2->dtype));
        return NULL;
    }
    if (mm_checks(m1, m2, m1->shape[0]) < 0)
        return NULL;
    if (scalar_arg(o[3], "beta", in->dtype, &beta) < 0 ||
        scalar_arg(o[4], "alpha", in->dtype, &alpha) < 0)
        return NULL;
    shape[0] = m1->shape[0];
    shape[1] = m2->shape[1];
    if (expands_to(in, shape) < 0)                         /* even when beta == 0, as torch */
        return NULL;
    out = cddp_tensor_new(in->dtype, 2, shape, 0);
    if (!out)
        return NULL;
    if (beta != 0 && cddp_copy_into(out, in) < 0)
        goto fail;
    Py_SETREF(out, cddp_bmm_raw(m1, m2, alpha, out, beta));
    if (!out || !cddp_is_floating(out->dtype))
        return (PyObject *)out;
    {
        TensorObject *ins[3] = {in, m1, m2};
        NodeObject *node = cddp_maybe_node("AddmmBackward0", cddp_addmm_backward, 3, ins, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(out, node, 0);
            node->d[0] = alpha;
            node->d[1] = beta;
            if (cddp_node_save(node, 0, m1) < 0 || cddp_node_save(node, 1, m2) < 0) {
                Py_DECREF(node);
                goto fail;
            }
            Py_DECREF(node);
        }
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *py_addmm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, addmm_common, NULL, args, nargs, kw);
    return addmm_common(NULL, args, nargs, kw);
}

static PyObject *t_addmm(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, addmm_common, self, args, nargs, kw);
    return addmm_common(self, args, nargs, kw);
}

/* ---- tables --------------------------------------------------------------------------- */

#define FK (METH_FASTCALL | METH_KEYWORDS)

PyMethodDef cddp_linalg_tensor_methods[] = {
    {"matmul", (PyCFunction)(void (*)(void))t_matmul, FK, "matmul(other) -> Tensor"},
    {"mm", (PyCFunction)(void (*)(void))t_mm, FK, "mm(mat2) -> Tensor"},
    {"bmm", (PyCFunction)(void (*)(void))t_bmm, FK, "bmm(mat2) -> Tensor"},
    {"mv", (PyCFunction)(void (*)(void))t_mv, FK, "mv(vec) -> Tensor"},
    {"dot", (PyCFunction)(void (*)(void))t_dot, FK, "dot(tensor) -> Tensor"},
    {"outer", (PyCFunction)(void (*)(void))t_outer, FK, "outer(vec2) -> Tensor"},
    {"addmm", (PyCFunction)(void (*)(void))t_addmm, FK,
     "addmm(mat1, mat2, *, beta=1, alpha=1) -> Tensor"},
    {NULL},
};

PyMethodDef cddp_linalg_module_methods[] = {
    {"matmul", (PyCFunction)(void (*)(void))py_matmul, FK,
     "matmul(input, other) -> Tensor: torch.matmul's rules (dot, mv, mm, broadcast bmm)"},
    {"mm", (PyCFunction)(void (*)(void))py_mm, FK, "mm(input, mat2) -> Tensor"},
    {"bmm", (PyCFunction)(void (*)(void))py_bmm, FK, "bmm(input, mat2) -> Tensor"},
    {"mv", (PyCFunction)(void (*)(void))py_mv, FK, "mv(input, vec) -> Tensor"},
    {"dot", (PyCFunction)(void (*)(void))py_dot, FK, "dot(input, tensor) -> Tensor"},
    {"outer", (PyCFunction)(void (*)(void))py_outer, FK, "outer(input, vec2) -> Tensor"},
    {"addmm", (PyCFunction)(void (*)(void))py_addmm, FK,
     "addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor: beta*input + alpha*(mat1@mat2)"},
    {NULL},
};
