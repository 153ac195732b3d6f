/* ops/linalg/addmm_family.c — beta * input + alpha * (product) for the product kinds addmm
 * (ops/linalg/linalg.c) does not cover, each one GEMM call (cddp_bmm_raw) with input scaled
 * by beta in the GEMM's accumulator:
 *
 *   baddbmm(input, batch1 (b,n,m), batch2 (b,m,p)) -> (b,n,p)           BaddbmmBackward0
 *   addbmm(input, batch1 (b,n,m), batch2 (b,m,p))  -> (n,p), summed over b AddbmmBackward0
 *                                     (the batch folds into K: one (n, b*m) @ (b*m, p) GEMM)
 *   addmv(input, mat (n,m), vec (m,))              -> (n,)               AddmvBackward0
 *   addr(input, vec1 (n,), vec2 (m,))              -> (n,m)              AddrBackward0
 *
 * Mirrors torch's functions, Tensor methods and in-place methods (baddbmm_ ...), keyword-only
 * beta=1, alpha=1 (truncated to integers for integer dtypes; beta == 0 ignores input, NaN
 * included, as torch), and torch's shape errors. input broadcasts to the result (in place:
 * must have its shape).
 *
 * Backward (all four): d input = beta * g summed to input's shape, d a = alpha * g @ b^T,
 * d b = alpha * a^T @ g on the matrix views (vectors as (n,1) / (1,m) columns and rows), each
 * one GEMM with the transposes as strides (BLAS Trans flags, no copies).
 */
#include "amp/amp.h"
#include "ops/linalg/blas.h"
#include "module.h"
#include <string.h>

enum { K_BADDBMM, K_ADDBMM, K_ADDMV, K_ADDR };
static const char *const kind_names[] = {"baddbmm", "addbmm", "addmv", "addr"};
static const char *const node_names[] = {"BaddbmmBackward0", "AddbmmBackward0",
                                         "AddmvBackward0", "AddrBackward0"};

/* ---- small views ---------------------------------------------------------------------- */

/* t (n,) as a column (n,1) (col) or a row (1,n). No history. */
static TensorObject *vec_as(TensorObject *t, int col)
{
    int64_t sh[2], st[2];
    sh[col ? 0 : 1] = t->shape[0];
    sh[col ? 1 : 0] = 1;
    st[col ? 0 : 1] = t->strides[0];
    st[col ? 1 : 0] = 1;
    return cddp_tensor_alias(t, 2, sh, st, t->offset);
}

/* Contiguous r seen with m's shape and dtype (same numel). New ref; steals r. */
static TensorObject *as_meta(TensorObject *r, const cddp_meta *m)
{
    int64_t st[CDDP_MAX_DIMS];
    TensorObject *v;
    if (!r)
        return NULL;
    cddp_contiguous_strides(m->ndim, m->shape, st);
    v = cddp_tensor_alias(r, m->ndim, m->shape, st, r->offset);
    Py_DECREF(r);
    if (v && v->dtype != m->dtype)
        Py_SETREF(v, cddp_tensor_cast_raw(v, m->dtype));
    return v;
}

/* g * s, new contiguous (float dtypes; s == 1: a copy all the same). float16/bfloat16: each
 * product in float32, rounded once (torch's mul by a Scalar). */
static TensorObject *scaled(TensorObject *g, double s)
{
    if (cddp_is_reduced(g->dtype)) {
        TensorObject *w = cddp_tensor_cast_raw(g, CDDP_FLOAT32), *r = w ? scaled(w, s) : NULL;
        Py_XDECREF(w);
        return cddp_tensor_cast_steal(r, g->dtype);
    }
    TensorObject *r = cddp_tensor_new(g->dtype, g->ndim, g->shape, 0);
    int64_t n;
    if (!r || cddp_copy_into(r, g) < 0) {
        Py_XDECREF(r);
        return NULL;
    }
    n = cddp_numel(r);
    if (r->dtype == CDDP_FLOAT32)
        for (int64_t i = 0; i < n; i++)
            ((float *)(void *)cddp_data(r))[i] *= (float)s;
    else
        for (int64_t i = 0; i < n; i++)
            ((double *)(void *)cddp_data(r))[i] *= s;
    return r;
}

/* ---- backward ------------------------------------------------------------------------- */

/* i[0] kind; d[0] alpha, d[1] beta; saved 0, 1: the operands as matrices (a (..,n,k),
 * b (..,k,p)); meta: input, operand 1, operand 2. */
static int addx_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *a = cddp_node_saved(self, 0), *b, *g = gout[0], *g2 = NULL, *tr = NULL;
    double alpha = self->d[0], beta = self->d[1];
    int kind = (int)self->i[0], rc = -1;
    if (!a || !(b = cddp_node_saved(self, 1)))
        return -1;
    if (!g)
        return 0;
    g2 = kind == K_ADDMV ? vec_as(g, 1) : (TensorObject *)Py_NewRef(g);
    if (!g2)
        return -1;
    if (self->next[0].node) {
        TensorObject *s = scaled(g, beta);
        gin[0] = s ? cddp_sum_to(s, self->meta[0].ndim, self->meta[0].shape) : NULL;
        Py_XDECREF(s);
        if (!gin[0])
            goto done;
    }
    if (self->next[1].node) {
        if (!(tr = cddp_transposed(b)))
            goto done;
        gin[1] = as_meta(cddp_bmm_raw(g2, tr, alpha, NULL, 0), &self->meta[1]);
        Py_CLEAR(tr);
        if (!gin[1])
            goto done;
    }
    if (self->next[2].node) {
        if (!(tr = cddp_transposed(a)))
            goto done;
        gin[2] = as_meta(cddp_bmm_raw(tr, g2, alpha, NULL, 0), &self->meta[2]);
        Py_CLEAR(tr);
        if (!gin[2])
            goto done;
    }
    rc = 0;
done:
    if (rc < 0) {
        Py_CLEAR(gin[0]);
        Py_CLEAR(gin[1]);
    }
    Py_XDECREF(g2);
    return rc;
}

/* ---- forward -------------------------------------------------------------------------- */

static const char *scalar_name(cddp_dtype d)
{
    return cddp_dtype_torch_name[d];
}

/* Operand checks (torch's texts) and the result shape. */
static int check_operands(int kind, TensorObject *a, TensorObject *b, int64_t *shape, int *nd)
{
    const char *fn = kind_names[kind];
    if (kind <= K_ADDBMM) {
        if (a->ndim != 3 || b->ndim != 3) {
            PyErr_Format(PyExc_RuntimeError, "batch%d must be a 3D tensor", a->ndim != 3 ? 1 : 2);
            return -1;
        }
        if (a->shape[0] != b->shape[0]) {
            PyErr_Format(PyExc_RuntimeError, "batch1 and batch2 must have same number of "
                         "batches, got %lld and %lld", (long long)a->shape[0],
                         (long long)b->shape[0]);
            return -1;
        }
        if (a->shape[2] != b->shape[1]) {
            PyErr_Format(PyExc_RuntimeError, "Expected size for first two dimensions of batch2 "
                         "tensor to be: [%lld, %lld] but got: [%lld, %lld].",
                         (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0],
                         (long long)b->shape[1]);
            return -1;
        }
        *nd = kind == K_BADDBMM ? 3 : 2;
        shape[0] = a->shape[0];
        shape[*nd - 2] = a->shape[1];
        shape[*nd - 1] = b->shape[2];
    } else if (kind == K_ADDMV) {
        if (a->ndim != 2 || b->ndim != 1) {
            PyErr_Format(PyExc_RuntimeError, "vector + matrix @ vector expected, got 1, %d, %d",
                         a->ndim, b->ndim);
            return -1;
        }
        *nd = 1;
        shape[0] = a->shape[0];
    } else {
        if (a->ndim != 1 || b->ndim != 1) {
            PyErr_Format(PyExc_RuntimeError, "addr: Expected 1-D argument vec%d, but got %d-D",
                         a->ndim != 1 ? 1 : 2, a->ndim != 1 ? a->ndim : b->ndim);
            return -1;
        }
        *nd = 2;
        shape[0] = a->shape[0];
        shape[1] = b->shape[0];
    }
    if (a->dtype != b->dtype || a->dtype == CDDP_BOOL) {
        PyErr_Format(a->dtype == CDDP_BOOL ? PyExc_NotImplementedError : PyExc_RuntimeError,
                     a->dtype == CDDP_BOOL ? "\"%s\" not implemented for 'Bool'"
                     : "%s: expected both operands to have the same dtype, but got %s and %s",
                     fn, scalar_name(a->dtype), scalar_name(b->dtype));
        return -1;
    }
    return 0;
}

/* input must broadcast to the result (in place: equal it); torch's messages. */
static int check_input(int kind, TensorObject *in, TensorObject *a, TensorObject *b, int nd,
                       const int64_t *shape, int inplace)
{
    int n;
    int64_t bs[CDDP_MAX_DIMS];
    if (kind == K_ADDMV && (in->ndim > 1 || (in->ndim == 1 && in->shape[0] != shape[0] &&
                                             in->shape[0] != 1) || a->shape[1] != b->shape[0])) {
        PyErr_Format(PyExc_RuntimeError, "size mismatch, got input (%lld), mat (%lldx%lld), vec "
                     "(%lld)", (long long)(in->ndim ? in->shape[0] : 1), (long long)a->shape[0],
                     (long long)a->shape[1], (long long)b->shape[0]);
        return -1;
    }
    if (in->dtype != a->dtype) {
        PyErr_Format(PyExc_RuntimeError, "expected scalar type %s but found %s",
                     scalar_name(a->dtype), scalar_name(in->dtype));
        return -1;
    }
    if (inplace && (in->ndim != nd || memcmp(in->shape, shape, sizeof(int64_t) * nd))) {
        char b1[256], b2[256];
        size_t k = 0, j = 0;
        b1[0] = b2[0] = 0;
        for (int d = 0; d < in->ndim && k < 200; d++)
            k += (size_t)snprintf(b1 + k, sizeof b1 - k, d ? ", %lld" : "%lld",
                                  (long long)in->shape[d]);
        for (int d = 0; d < nd && j < 200; d++)
            j += (size_t)snprintf(b2 + j, sizeof b2 - j, d ? ", %lld" : "%lld",
                                  (long long)shape[d]);
        PyErr_Format(PyExc_RuntimeError, "%s_: self must have the result's shape [%s], got [%s]",
                     kind_names[kind], b2, b1);
        return -1;
    }
    if (cddp_broadcast_shapes(in->ndim, in->shape, nd, shape, &n, bs) < 0)
        return -1;
    if (n != nd || memcmp(bs, shape, sizeof(int64_t) * nd)) {
        PyErr_Format(PyExc_RuntimeError, "The expanded size of the tensor does not match the "
                     "result of %s", kind_names[kind]);
        return -1;
    }
    return 0;
}

/* The matrices the GEMM multiplies: a (.., n, k) and b (.., k, p) (new references). */
static int matrices(int kind, TensorObject *a, TensorObject *b, TensorObject **am,
                    TensorObject **bm)
{
    *am = *bm = NULL;
    if (kind == K_ADDMV) {
        *am = (TensorObject *)Py_NewRef(a);
        *bm = vec_as(b, 1);
    } else if (kind == K_ADDR) {
        *am = vec_as(a, 1);
        *bm = vec_as(b, 0);
    } else {
        *am = (TensorObject *)Py_NewRef(a);
        *bm = (TensorObject *)Py_NewRef(b);
    }
    if (*am && *bm)
        return 0;
    Py_CLEAR(*am);
    Py_CLEAR(*bm);
    return -1;
}

/* out (contiguous, result shape, holding input when beta != 0) += alpha * product. */
static int run_product(int kind, TensorObject *am, TensorObject *bm, TensorObject *out,
                       double alpha, double beta)
{
    TensorObject *r, *o2 = out, *a2 = NULL, *b2 = NULL;
    int rc = -1;
    if (kind == K_ADDBMM) {
        /* sum_b a[b] @ b[b] = a' (n, B*m) @ b' (B*m, p): a permuted (n, B, m) and copied */
        int64_t B = am->shape[0], n = am->shape[1], m = am->shape[2], p = bm->shape[2];
        int64_t sh[3] = {n, B, m}, st[3] = {am->strides[1], am->strides[0], am->strides[2]};
        int64_t s2[2] = {n, B * m}, bsh[2] = {B * m, p};
        TensorObject *perm = cddp_tensor_alias(am, 3, sh, st, am->offset), *ac, *bc;
        ac = perm ? cddp_tensor_contiguous_raw(perm) : NULL;
        bc = ac ? cddp_tensor_contiguous_raw(bm) : NULL;
        Py_XDECREF(perm);
        if (bc) {
            int64_t cs[2];
            cddp_contiguous_strides(2, s2, cs);
            a2 = cddp_tensor_alias(ac, 2, s2, cs, ac->offset);
            cddp_contiguous_strides(2, bsh, cs);
            b2 = a2 ? cddp_tensor_alias(bc, 2, bsh, cs, bc->offset) : NULL;
        }
        Py_XDECREF(ac);
        Py_XDECREF(bc);
        if (!a2 || !b2)
            goto done;
        am = a2;
        bm = b2;
    }
    if (kind == K_ADDMV && !(o2 = vec_as(out, 1)))
        goto done;
    r = cddp_bmm_raw(am, bm, alpha, o2, beta);
    Py_XDECREF(r);
    rc = r ? 0 : -1;
done:
    if (o2 != out)
        Py_XDECREF(o2);
    Py_XDECREF(a2);
    Py_XDECREF(b2);
    return rc;
}

/* A Python number or 0-d tensor as double, truncated for integer dtypes (torch's addmm). */
static int scalar_arg(PyObject *o, const char *fn, const char *name, cddp_dtype dt, double *out)
{
    *out = 1.0;
    if (!o)
        return 0;
    if (cddp_tensor_check(o) && ((TensorObject *)o)->ndim == 0) {
        *out = cddp_get_double((TensorObject *)o, 0);
    } else if (PyLong_Check(o) || PyFloat_Check(o)) {
        *out = PyFloat_AsDouble(o);
        if (*out == -1 && PyErr_Occurred())
            return -1;
    } else {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Number, not %s", fn, name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (!cddp_is_floating(dt))
        *out = (double)(int64_t)*out;
    return 0;
}

static PyObject *addx_impl(int kind, TensorObject *in, TensorObject *a, TensorObject *b,
                           PyObject *betao, PyObject *alphao, int inplace)
{
    const char *fn = kind_names[kind];
    int64_t shape[3];
    int nd, err;
    double alpha, beta;
    TensorObject *out = NULL, *am = NULL, *bm = NULL;
    if (check_operands(kind, a, b, shape, &nd) < 0 ||
        check_input(kind, in, a, b, nd, shape, inplace) < 0 ||
        scalar_arg(betao, fn, "beta", in->dtype, &beta) < 0 ||
        scalar_arg(alphao, fn, "alpha", in->dtype, &alpha) < 0)
        return NULL;
    if (inplace && cddp_check_inplace(in) < 0)
        return NULL;
    if (matrices(kind, a, b, &am, &bm) < 0)
        return NULL;
    out = cddp_tensor_new(in->dtype, nd, shape, 0);
    if (!out || (beta != 0 && cddp_copy_into(out, in) < 0) ||
        run_product(kind, am, bm, out, alpha, beta) < 0)
        goto fail;
    if (inplace) {                   /* the result goes back into input's memory */
        if (cddp_copy_into(in, out) < 0)
            goto fail;
        Py_SETREF(out, (TensorObject *)Py_NewRef(in));
    }
    if (cddp_is_floating(in->dtype)) {
        TensorObject *ins[3] = {in, a, b};
        NodeObject *node = cddp_maybe_node(node_names[kind], addx_backward, 3, ins, &err);
        if (err)
            goto fail;
        if (node) {
            node->i[0] = kind;
            node->d[0] = alpha;
            node->d[1] = beta;
            err = cddp_node_save(node, 0, am) < 0 || cddp_node_save(node, 1, bm) < 0;
            if (inplace)
                err |= cddp_set_inplace_history(out, node, 0) < 0;
            else
                cddp_set_history(out, node, 0);
            Py_DECREF(node);
            if (err)
                goto fail;
        }
    }
    Py_DECREF(am);
    Py_DECREF(bm);
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(am);
    Py_XDECREF(bm);
    return NULL;
}

/* ---- bindings ------------------------------------------------------------------------- */

static PyObject *addx_binding(int kind, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw, int inplace)
{
    static const char *const names[4][5] = {
        {"input", "batch1", "batch2", "beta", "alpha"},
        {"input", "batch1", "batch2", "beta", "alpha"},
        {"input", "mat", "vec", "beta", "alpha"},
        {"input", "vec1", "vec2", "beta", "alpha"}};
    const char *fn = kind_names[kind];
    PyObject *a[5] = {self, NULL, NULL, NULL, NULL};
    int off = self ? 1 : 0;
    Py_ssize_t nkw = kw ? PyTuple_GET_SIZE(kw) : 0;
    if (nargs > 3 - off) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments but %zd were given",
                     fn, 3 - off, nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i + off] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kw, k);
        int i = off;
        while (i < 5 && PyUnicode_CompareWithASCIIString(key, names[kind][i]) != 0)
            i++;
        if (i == 5 || a[i]) {
            PyErr_Format(PyExc_TypeError, i == 5 ? "%s() got an unexpected keyword argument '%U'"
                         : "%s() got multiple values for argument '%U'", fn, key);
            return NULL;
        }
        a[i] = args[nargs + k];
    }
    for (int i = 0; i < 3; i++) {
        if (!a[i] || !cddp_tensor_check(a[i])) {
            PyErr_Format(PyExc_TypeError, a[i] ? "%s(): argument '%s' (position %d) must be "
                         "Tensor, not %s" : "%s() missing required argument '%s' (pos %d)%s", fn,
                         names[kind][i], i + 1, a[i] ? Py_TYPE(a[i])->tp_name : "");
            return NULL;
        }
    }
    return addx_impl(kind, (TensorObject *)a[0], (TensorObject *)a[1], (TensorObject *)a[2],
                     a[3], a[4], inplace);
}

#define KIND(NAME, K)                                                                      \
    static PyObject *t_##NAME(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return addx_binding(K, s, a, n, kw, 0);                                            \
    }                                                                                      \
    static PyObject *t_##NAME##_(PyObject *s, PyObject *const *a, Py_ssize_t n,           \
                                 PyObject *kw)                                             \
    {                                                                                      \
        return addx_binding(K, s, a, n, kw, 1);                                            \
    }                                                                                      \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return addx_binding(K, NULL, a, n, kw, 0);                                         \
    }
KIND(baddbmm, K_BADDBMM)
KIND(addbmm, K_ADDBMM)
KIND(addmv, K_ADDMV)

/* baddbmm and addbmm (not their in-place forms) are on torch's CPU autocast lower_precision_fp
 * list, with mm / bmm / addmm; addmv and addr run in their inputs' dtype. */
#define AUTOCAST(F)                                                                        \
    static PyObject *F##_ac(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)  \
    {                                                                                      \
        if (CDDP_AUTOCAST_ON())                                                            \
            return cddp_autocast_fastcall(CDDP_AMP_LOWER, F, s, a, n, kw);                 \
        return F(s, a, n, kw);                                                             \
    }
AUTOCAST(t_baddbmm)
AUTOCAST(m_baddbmm)
AUTOCAST(t_addbmm)
AUTOCAST(m_addbmm)
static PyObject *m_addmv_(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return addx_binding(K_ADDMV, NULL, a, n, kw, 1);
}
KIND(addr, K_ADDR)

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)
#define T2(NAME, DOC)                                                                      \
    {#NAME, FN(t_##NAME), FK, DOC}, {#NAME "_", FN(t_##NAME##_), FK, "in-place " #NAME}

PyMethodDef cddp_addmm_family_tensor_methods[] = {
    {"baddbmm", FN(t_baddbmm_ac), FK, "baddbmm(batch1, batch2, *, beta=1, alpha=1)"},
    {"baddbmm_", FN(t_baddbmm_), FK, "in-place baddbmm"},
    {"addbmm", FN(t_addbmm_ac), FK, "addbmm(batch1, batch2, *, beta=1, alpha=1)"},
    {"addbmm_", FN(t_addbmm_), FK, "in-place addbmm"},
    T2(addmv, "addmv(mat, vec, *, beta=1, alpha=1)"),
    T2(addr, "addr(vec1, vec2, *, beta=1, alpha=1)"),
    {NULL},
};

PyMethodDef cddp_addmm_family_module_methods[] = {
    {"baddbmm", FN(m_baddbmm_ac), FK, "baddbmm(input, batch1, batch2, *, beta=1, alpha=1)"},
    {"addbmm", FN(m_addbmm_ac), FK, "addbmm(input, batch1, batch2, *, beta=1, alpha=1)"},
    {"addmv", FN(m_addmv), FK, "addmv(input, mat, vec, *, beta=1, alpha=1)"},
    {"addmv_", FN(m_addmv_), FK, "addmv_(input, mat, vec, *, beta=1, alpha=1): in place"},
    {"addr", FN(m_addr), FK, "addr(input, vec1, vec2, *, beta=1, alpha=1)"},
    {NULL},
};
