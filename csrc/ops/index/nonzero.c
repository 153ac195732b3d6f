/* ops/index/nonzero.c — ops whose output size depends on the data: nonzero / argwhere,
 * masked_select, and take (flat gather). It calls only core/ (see the file order in
 * ops/index/index.h).
 *
 * Mirrors torch:
 *   nonzero(input, *, as_tuple=False)   (nnz, ndim) int64 indices of the nonzero elements in
 *                                       C order; as_tuple: ndim 1-D tensors (0-d input: one)
 *   argwhere(input)                     nonzero(input)
 *   where(condition)                    nonzero(condition, as_tuple=True) (via select.c)
 *   masked_select(input, mask)          1-D values where the (broadcast) mask is true;
 *                                       MaskedSelectBackward0
 *   take(input, index)                  input flattened, gathered at index (any shape);
 *                                       TakeBackward0
 *
 * Legend: nnz = count of nonzero (true) elements. "Nonzero" is v != 0, so NaN counts, as in
 * torch. Each op walks its input twice with an odometer over the shape (count, then fill):
 * any strides, no temporary copy of the input.
 */
#include "ops/index/index.h"
#include "module.h"
#include <string.h>

/* ---- walking an input ----------------------------------------------------------------- */

/* Whether the element at p (dtype dt) is nonzero. */
static inline int is_nonzero(cddp_dtype dt, const char *p)
{
    switch (dt) {
    case CDDP_FLOAT32: return *(const float *)p != 0;
    case CDDP_FLOAT64: return *(const double *)p != 0;
    case CDDP_INT64: return *(const int64_t *)p != 0;
    case CDDP_INT32: return *(const int32_t *)p != 0;
    case CDDP_INT16: return *(const int16_t *)p != 0;
    case CDDP_FLOAT16:
    case CDDP_BFLOAT16: return (*(const uint16_t *)p & 0x7fff) != 0;    /* +-0 are zero */
    default: return *(const uint8_t *)p != 0;                          /* bool uint8 int8 */
    }
}

/* Advance the multi-index idx over shape (nd dims), moving `nops` element offsets along their
 * strides (st[k][d]). Returns 0 after the last element. */
static inline int odometer(int nd, const int64_t *shape, int64_t *idx, int nops, int64_t *off,
                           const int64_t (*st)[CDDP_MAX_DIMS])
{
    for (int d = nd - 1; d >= 0; d--) {
        for (int k = 0; k < nops; k++)
            off[k] += st[k][d];
        if (++idx[d] < shape[d])
            return 1;
        for (int k = 0; k < nops; k++)
            off[k] -= st[k][d] * shape[d];
        idx[d] = 0;
    }
    return 0;
}

/* ---- nonzero -------------------------------------------------------------------------- */

/* The indices of x's nonzero elements as int64 (rows = nnz, cols = ndim) laid out with
 * element strides (rs, cs) in a new tensor of shape `tuple ? (ndim, nnz) : (nnz, ndim)`. */
static TensorObject *nonzero_raw(TensorObject *x, int tuple)
{
    int64_t idx[CDDP_MAX_DIMS] = {0}, off = 0, nnz = 0, shape[2], n = cddp_numel(x);
    const int64_t (*st)[CDDP_MAX_DIMS] = (const int64_t (*)[CDDP_MAX_DIMS])x->strides;
    size_t isz = cddp_dtype_size[x->dtype];
    const char *base = cddp_data(x);
    TensorObject *out;
    if (n > 0)
        do
            nnz += is_nonzero(x->dtype, base + off * (int64_t)isz);
        while (odometer(x->ndim, x->shape, idx, 1, &off, st));
    shape[0] = tuple ? x->ndim : nnz;
    shape[1] = tuple ? nnz : x->ndim;
    out = cddp_tensor_new(CDDP_INT64, 2, shape, 0);
    if (!out || nnz == 0)
        return out;
    {
        int64_t *o = (int64_t *)cddp_data(out), rs = tuple ? 1 : x->ndim, cs = tuple ? nnz : 1;
        int64_t row = 0;
        off = 0;
        do {
            if (is_nonzero(x->dtype, base + off * (int64_t)isz)) {
                for (int d = 0; d < x->ndim; d++)
                    o[row * rs + d * cs] = idx[d];
                row++;
            }
        } while (odometer(x->ndim, x->shape, idx, 1, &off, st));
    }
    return out;
}

static PyObject *nonzero_impl(TensorObject *x, int as_tuple)
{
    TensorObject *r;
    PyObject *tup;
    int k;
    if (!as_tuple)
        return (PyObject *)nonzero_raw(x, 0);
    r = nonzero_raw(x, 1);           /* (ndim, nnz): each row one of the tuple's tensors */
    if (!r)
        return NULL;
    k = x->ndim ? x->ndim : 1;
    tup = PyTuple_New(k);
    for (int d = 0; tup && d < k; d++) {
        int64_t len = x->ndim ? r->shape[1] : is_nonzero(x->dtype, cddp_data(x));
        TensorObject *v;
        if (x->ndim) {
            v = cddp_tensor_alias(r, 1, &len, &(int64_t){1}, d * len);
        } else {                     /* a 0-d input: indices [0] when nonzero, else [] */
            v = cddp_tensor_new(CDDP_INT64, 1, &len, 1);
        }
        if (!v) {
            Py_CLEAR(tup);
            break;
        }
        PyTuple_SET_ITEM(tup, d, (PyObject *)v);
    }
    Py_DECREF(r);
    return tup;
}

/* ---- masked_select -------------------------------------------------------------------- */

/* MaskedSelectBackward0: saved mask (slot 0); g (nnz,) lands on the true positions of zeros of
 * the broadcast shape (i[0] dims in i[1..]), then sums to the input's shape. */
static int masked_select_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *mask = cddp_node_saved(self, 0), *g, *full;
    int nd = (int)self->i[0];
    int64_t idx[CDDP_MAX_DIMS] = {0}, off[2] = {0, 0}, st[2][CDDP_MAX_DIMS], k = 0;
    const cddp_meta *m = &self->meta[0];
    if (!mask)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    g = cddp_tensor_cast_raw(gout[0], CDDP_FLOAT64);
    if (g)
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    full = g ? cddp_tensor_new(CDDP_FLOAT64, nd, self->i + 1, 1) : NULL;
    if (!full || cddp_broadcast_strides(mask, nd, self->i + 1, st[1]) < 0) {
        Py_XDECREF(g);
        Py_XDECREF(full);
        return -1;
    }
    memcpy(st[0], full->strides, sizeof(int64_t) * nd);
    off[1] = 0;
    if (cddp_numel(full) > 0) {
        const double *gv = (const double *)cddp_data(g);
        double *fv = (double *)cddp_data(full);
        const uint8_t *mv = (const uint8_t *)cddp_data(mask);
        do
            if (mv[off[1]])
                fv[off[0]] = gv[k++];
        while (odometer(nd, self->i + 1, idx, 2, off, (const int64_t (*)[CDDP_MAX_DIMS])st));
    }
    Py_DECREF(g);
    gin[0] = cddp_sum_to(full, m->ndim, m->shape);
    Py_DECREF(full);
    if (gin[0] && gin[0]->dtype != m->dtype)
        Py_SETREF(gin[0], cddp_tensor_cast_raw(gin[0], m->dtype));
    return gin[0] ? 0 : -1;
}

static PyObject *masked_select_impl(TensorObject *x, TensorObject *mask)
{
    int nd, err;
    int64_t shape[CDDP_MAX_DIMS], st[2][CDDP_MAX_DIMS], idx[CDDP_MAX_DIMS] = {0};
    int64_t off[2] = {0, 0}, nnz = 0, total;
    size_t isz = cddp_dtype_size[x->dtype];
    TensorObject *out;
    NodeObject *node;
    if (mask->dtype != CDDP_BOOL) {
        PyErr_SetString(PyExc_RuntimeError, "masked_select: expected BoolTensor for mask");
        return NULL;
    }
    if (cddp_broadcast_shapes(mask->ndim, mask->shape, x->ndim, x->shape, &nd, shape) < 0 ||
        cddp_broadcast_strides(x, nd, shape, st[0]) < 0 ||
        cddp_broadcast_strides(mask, nd, shape, st[1]) < 0)
        return NULL;
    total = 1;
    for (int d = 0; d < nd; d++)
        total *= shape[d];
    const char *xv = cddp_data(x);
    const uint8_t *mv = (const uint8_t *)cddp_data(mask);
    if (total > 0)
        do
            nnz += mv[off[1]] != 0;
        while (odometer(nd, shape, idx, 2, off, (const int64_t (*)[CDDP_MAX_DIMS])st));
    out = cddp_tensor_new(x->dtype, 1, &nnz, 0);
    if (!out)
        return NULL;
    if (nnz > 0) {
        char *o = cddp_data(out);
        off[0] = off[1] = 0;
        do
            if (mv[off[1]]) {
                memcpy(o, xv + off[0] * (int64_t)isz, isz);
                o += isz;
            }
        while (odometer(nd, shape, idx, 2, off, (const int64_t (*)[CDDP_MAX_DIMS])st));
    }
    if (!cddp_is_floating(x->dtype))
        return (PyObject *)out;
    node = cddp_maybe_node("MaskedSelectBackward0", masked_select_backward, 1, &x, &err);
    if (err) {
        Py_DECREF(out);
        return NULL;
    }
    if (node) {
        cddp_set_history(out, node, 0);
        node->i[0] = nd;
        memcpy(node->i + 1, shape, sizeof(int64_t) * nd);
        err = cddp_node_save(node, 0, mask);
        Py_DECREF(node);
        if (err < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return (PyObject *)out;
}

/* ---- take ----------------------------------------------------------------------------- */

/* TakeBackward0: saved index (slot 0, int64 contiguous, wrapped); g scatter-added into the
 * flattened input. */
static int take_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *ix = cddp_node_saved(self, 0), *g, *out;
    const cddp_meta *m = &self->meta[0];
    int64_t n;
    if (!ix)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    g = cddp_tensor_cast_raw(gout[0], CDDP_FLOAT64);
    if (g)
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    out = g ? cddp_tensor_new(CDDP_FLOAT64, m->ndim, m->shape, 1) : NULL;
    if (!out) {
        Py_XDECREF(g);
        return -1;
    }
    n = cddp_numel(ix);
    {
        const int64_t *iv = (const int64_t *)cddp_data(ix);
        const double *gv = (const double *)cddp_data(g);
        double *o = (double *)cddp_data(out);
        for (int64_t e = 0; e < n; e++)
            o[iv[e]] += gv[e];
    }
    Py_DECREF(g);
    if (m->dtype != CDDP_FLOAT64)
        Py_SETREF(out, cddp_tensor_cast_raw(out, m->dtype));
    gin[0] = out;
    return out ? 0 : -1;
}

static PyObject *take_impl(TensorObject *x, TensorObject *index)
{
    TensorObject *ix = NULL, *xc = NULL, *out = NULL;
    int64_t n, numel = cddp_numel(x);
    size_t isz = cddp_dtype_size[x->dtype];
    NodeObject *node;
    int err;
    if (index->dtype != CDDP_INT64) {
        PyErr_Format(PyExc_RuntimeError, "take(): Expected a long tensor for index, but got %s",
                     cddp_dtype_torch_name[index->dtype]);
        return NULL;
    }
    ix = cddp_tensor_contiguous_raw(index);
    if (ix && ix == index) {         /* wrapped in place below: own a copy */
        Py_SETREF(ix, cddp_tensor_new(CDDP_INT64, index->ndim, index->shape, 0));
        if (ix && cddp_copy_into(ix, index) < 0)
            Py_CLEAR(ix);
    }
    xc = ix ? cddp_tensor_contiguous_raw(x) : NULL;
    if (!xc)
        goto done;
    n = cddp_numel(ix);
    {
        int64_t *iv = (int64_t *)cddp_data(ix);
        for (int64_t e = 0; e < n; e++) {
            if (iv[e] < -numel || iv[e] >= numel) {
                PyErr_Format(PyExc_IndexError, "out of range: tried to access index %lld on a "
                             "tensor of %lld elements.", (long long)iv[e], (long long)numel);
                goto done;
            }
            iv[e] += iv[e] < 0 ? numel : 0;
        }
        out = cddp_tensor_new(x->dtype, index->ndim, index->shape, 0);
        if (!out)
            goto done;
        for (int64_t e = 0; e < n; e++)
            memcpy(cddp_data(out) + e * (int64_t)isz, cddp_data(xc) + iv[e] * (int64_t)isz, isz);
    }
    if (cddp_is_floating(x->dtype)) {
        node = cddp_maybe_node("TakeBackward0", take_backward, 1, &x, &err);
        if (err || (node && cddp_node_save(node, 0, ix) < 0)) {
            Py_XDECREF(node);
            Py_CLEAR(out);
            goto done;
        }
        if (node) {
            cddp_set_history(out, node, 0);
            Py_DECREF(node);
        }
    }
done:
    Py_XDECREF(ix);
    Py_XDECREF(xc);
    return (PyObject *)out;
}

/* ---- bindings ------------------------------------------------------------------------- */

/* Parse (input?, names...) into a[]: the input is self, or the first positional / `input`. */
static int args_with_input(const char *fn, PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kw, const char *const *names, int n,
                           int npos, PyObject **a)
{
    int off = self ? 1 : 0;
    Py_ssize_t nkw = kw ? PyTuple_GET_SIZE(kw) : 0;
    for (int i = 0; i < n; i++)
        a[i] = NULL;
    if (self)
        a[0] = self;
    if (nargs > npos - off) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)",
                     fn, npos - off, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i + off] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kw, k);
        int i = off;
        while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == n || a[i]) {
            PyErr_Format(PyExc_TypeError, i == n ? "%s() got an unexpected keyword argument '%U'"
                         : "%s() got multiple values for argument '%U'", fn, key);
            return -1;
        }
        a[i] = args[nargs + k];
    }
    for (int i = 0; i < n; i++) {
        if (i < npos && !a[i] && strcmp(names[i], "as_tuple") != 0) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fn,
                         names[i], i + 1 - off);
            return -1;
        }
        if (a[i] && i < npos && strcmp(names[i], "as_tuple") != 0 && !cddp_tensor_check(a[i])) {
            PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor, not %s", fn,
                         names[i], Py_TYPE(a[i])->tp_name);
            return -1;
        }
    }
    return 0;
}

static PyObject *nonzero_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kw, int arg)
{
    static const char *const names[] = {"input", "as_tuple"};
    PyObject *a[2] = {NULL, NULL};
    int as_tuple = 0;
    if (args_with_input(arg ? "argwhere" : "nonzero", self, args, nargs, kw, names, arg ? 1 : 2,
                        1, a) < 0)
        return NULL;
    if (a[1] && (as_tuple = PyObject_IsTrue(a[1])) < 0)
        return NULL;
    return nonzero_impl((TensorObject *)a[0], as_tuple);
}

static PyObject *ms_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw)
{
    static const char *const names[] = {"input", "mask"};
    PyObject *a[2];
    if (args_with_input("masked_select", self, args, nargs, kw, names, 2, 2, a) < 0)
        return NULL;
    return masked_select_impl((TensorObject *)a[0], (TensorObject *)a[1]);
}

static PyObject *take_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"input", "index"};
    PyObject *a[2];
    if (args_with_input("take", self, args, nargs, kw, names, 2, 2, a) < 0)
        return NULL;
    return take_impl((TensorObject *)a[0], (TensorObject *)a[1]);
}

#define PAIR(NAME, CALL)                                                                   \
    static PyObject *t_##NAME(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return CALL(s, a, n, kw);                                                          \
    }                                                                                      \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return CALL(NULL, a, n, kw);                                                       \
    }
#define NONZERO(s, a, n, kw) nonzero_binding(s, a, n, kw, 0)
#define ARGWHERE(s, a, n, kw) nonzero_binding(s, a, n, kw, 1)
PAIR(nonzero, NONZERO)
PAIR(argwhere, ARGWHERE)
PAIR(masked_select, ms_binding)
PAIR(take, take_binding)

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_nonzero_tensor_methods[] = {
    {"nonzero", FN(t_nonzero), FK, "nonzero(*, as_tuple=False) -> (nnz, ndim) int64 indices"},
    {"argwhere", FN(t_argwhere), FK, "argwhere() -> nonzero()"},
    {"masked_select", FN(t_masked_select), FK, "masked_select(mask) -> 1-D values"},
    {"take", FN(t_take), FK, "take(index): the flattened tensor gathered at index"},
    {NULL},
};

PyMethodDef cddp_nonzero_module_methods[] = {
    {"nonzero", FN(m_nonzero), FK, "nonzero(input, *, as_tuple=False)"},
    {"argwhere", FN(m_argwhere), FK, "argwhere(input)"},
    {"masked_select", FN(m_masked_select), FK, "masked_select(input, mask)"},
    {"take", FN(m_take), FK, "take(input, index)"},
    {NULL},
};
