/* ops/elementwise/elementwise.c — the machinery under every elementwise op: operands (tensor or
 * Python scalar), torch's type promotion (torch.result_type), the runner that broadcasts,
 * casts and drives a kernel (GIL released on big tensors), autograd recording, the in-place
 * protocol, fastcall argument parsing, and the method tables of the elementwise op files.
 *
 * Mirrors: at::TensorIterator's role for pointwise ops (broadcast + common dtype + strided
 * loops), c10's result_type/canCast, torch's in-place rules ("a leaf Variable that requires grad
 * is being used in an in-place operation", "result type Float can't be cast to ...").
 */
#include "ops/elementwise/elementwise.h"
#include "module.h"
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

/* Loops over more elements than this run with the GIL released. */
#define EW_NOGIL_NUMEL 65536

/* ---- operands --------------------------------------------------------------------------- */

static int operand_scalar_from_numpy(PyObject *o, ew_operand *op)
{
    PyObject *v;
    if (PyArray_IsScalar(o, Bool)) {
        op->kind = 0;
        op->l = PyObject_IsTrue(o);
        op->d = (double)op->l;
        return op->l < 0 ? -1 : 1;
    }
    if (PyArray_IsScalar(o, Integer)) {
        int overflow = 0;
        if (!(v = PyNumber_Index(o)))
            return -1;
        op->kind = 1;
        op->l = PyLong_AsLongLongAndOverflow(v, &overflow);
        Py_DECREF(v);
        if (overflow) {
            PyErr_SetString(PyExc_RuntimeError, "Overflow when unpacking long");
            return -1;
        }
        op->d = (double)op->l;
        return 1;
    }
    if (PyArray_IsScalar(o, Floating)) {
        op->kind = 2;
        op->d = PyFloat_AsDouble(o);
        return op->d == -1.0 && PyErr_Occurred() ? -1 : 1;
    }
    return 0;
}

int cddp_ew_operand(PyObject *o, ew_operand *op)
{
    op->t = op->owned = NULL;
    if (cddp_tensor_check(o)) {
        op->t = (TensorObject *)o;
        return 1;
    }
    if (PyFloat_Check(o)) {
        op->kind = 2;
        op->d = PyFloat_AS_DOUBLE(o);
        return 1;
    }
    if (PyLong_Check(o)) {
        int overflow = 0;
        op->kind = PyBool_Check(o) ? 0 : 1;
        op->l = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_RuntimeError, "Overflow when unpacking long");
            return -1;
        }
        if (op->l == -1 && PyErr_Occurred())
            return -1;
        op->d = (double)op->l;
        return 1;
    }
    if (PyArray_CheckScalar(o) && !PyArray_Check(o))
        return operand_scalar_from_numpy(o, op);
    if (PyArray_Check(o)) {
        /* zero-copy when NumPy's dtype is one of ours; other dtypes are not operands */
        op->owned = cddp_tensor_from_numpy(o);
        if (!op->owned) {
            PyErr_Clear();
            return 0;
        }
        op->t = op->owned;
        return 1;
    }
    return 0;
}

void cddp_ew_operand_clear(ew_operand *op)
{
    Py_CLEAR(op->owned);
    op->t = NULL;
}

int cddp_ew_operand_arg(PyObject *o, ew_operand *op, const char *fname, const char *argname)
{
    int rc = cddp_ew_operand(o, op);
    if (rc == 0)
        cddp_arg_type_error(fname, argname, "Tensor or Number", o);
    return rc > 0 ? 0 : -1;
}

TensorObject *cddp_ew_tensor_arg(PyObject *o, const char *fname, const char *argname)
{
    if (o && cddp_tensor_check(o))
        return (TensorObject *)o;
    cddp_arg_type_error(fname, argname, "Tensor", o);
    return NULL;
}

/* ---- promotion -------------------------------------------------------------------------- */

/* c10's combine_categories: the higher-priority class wins unless the lower one is of a
 * higher category (bool < integer < floating); -1 is "no operand in this class". */
static int combine_categories(int higher, int lower)
{
    if (higher < 0)
        return lower;
    if (lower < 0 || cddp_is_floating((cddp_dtype)higher))
        return higher;
    if (higher == CDDP_BOOL || cddp_is_floating((cddp_dtype)lower))
        return cddp_promote((cddp_dtype)higher, (cddp_dtype)lower);
    return higher;
}

static int promote_opt(int acc, cddp_dtype d)
{
    return acc < 0 ? (int)d : (int)cddp_promote((cddp_dtype)acc, d);
}

cddp_dtype cddp_ew_result_type(int n, const ew_operand *ops)
{
    int dim = -1, zero = -1, wrapped = -1;
    for (int i = 0; i < n; i++) {
        const ew_operand *op = &ops[i];
        if (op->t && op->t->ndim > 0) {
            dim = promote_opt(dim, op->t->dtype);
        } else if (op->t) {
            zero = promote_opt(zero, op->t->dtype);
        } else {
            /* a Python float counts as the default dtype, an int as int64 */
            cddp_dtype w = op->kind == 0 ? CDDP_BOOL : op->kind == 1 ? CDDP_INT64
                                                                     : cddp_state()->default_dtype;
            wrapped = promote_opt(wrapped, w);
        }
    }
    return (cddp_dtype)combine_categories(dim, combine_categories(zero, wrapped));
}

/* A storage dtype's scalar is the value it would have in that dtype (float16: rounded,
 * uint8: wrapped), held in the compute dtype: what torch's kernels read after casting a
 * wrapped number to the common dtype. */
static void narrow_scalar(ew_scalar *s, cddp_dtype dt, const void *tmp)
{
    if (cddp_is_floating(dt))
        s->f32 = (float)cddp_load_double(dt, tmp);
    else
        s->i32 = (int32_t)cddp_load_double(dt, tmp);
}

void cddp_ew_scalar_from_double(ew_scalar *s, cddp_dtype dt, double v)
{
    if (cddp_is_narrow(dt)) {
        double tmp;
        cddp_store_double(dt, &tmp, v);
        narrow_scalar(s, dt, &tmp);
        return;
    }
    switch (dt) {
    case CDDP_FLOAT32: s->f32 = (float)v; break;
    case CDDP_FLOAT64: s->f64 = v; break;
    case CDDP_INT64:
        /* out-of-range / NaN conversions are undefined in C: saturate instead */
        s->i64 = v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX
                 : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
        break;
    case CDDP_INT32:
        s->i32 = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX
                 : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
        break;
    default: s->b8 = v != 0; break;
    }
}

void cddp_ew_scalar_set(ew_scalar *s, cddp_dtype dt, const ew_operand *op)
{
    if (op->kind == 2) {
        cddp_ew_scalar_from_double(s, dt, op->d);
        return;
    }
    if (cddp_is_narrow(dt)) {
        double tmp;
        cddp_store_int64(dt, &tmp, op->l);
        narrow_scalar(s, dt, &tmp);
        return;
    }
    switch (dt) {                         /* integers convert exactly (wrapping, as torch) */
    case CDDP_FLOAT32: s->f32 = (float)op->l; break;
    case CDDP_FLOAT64: s->f64 = (double)op->l; break;
    case CDDP_INT64: s->i64 = op->l; break;
    case CDDP_INT32: s->i32 = (int32_t)(uint32_t)(uint64_t)op->l; break;
    default: s->b8 = op->l != 0; break;
    }
}

void cddp_ew_src_from(ew_src *src, const ew_operand *op, cddp_dtype dt)
{
    src->t = op->t;
    if (!op->t)
        cddp_ew_scalar_set(&src->s, dt, op);
}

int cddp_ew_check_cast(cddp_dtype res, TensorObject *x)
{
    if (cddp_ew_can_cast(res, x->dtype))
        return 0;
    PyErr_Format(PyExc_RuntimeError, "result type %s can't be cast to the desired output type %s",
                 cddp_ew_torch_dtype_name[res], cddp_ew_torch_dtype_name[x->dtype]);
    return -1;
}

/* ---- the runner ------------------------------------------------------------------------- */

static void format_shape(char *buf, size_t cap, int nd, const int64_t *s)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)s[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* A tensor written in place must not have two elements at one address (expanded dims). */
/* The broadcast shape of the tensor sources (scalars are 0-dim) into *nd, shape. 0 / -1. */
static int broadcast_sources(int nin, const ew_src *srcs, int *nd, int64_t *shape)
{
    *nd = 0;
    for (int i = 0; i < nin; i++) {
        TensorObject *t = srcs[i].t;
        if (!t)
            continue;
        if (*nd == t->ndim && memcmp(shape, t->shape, sizeof(int64_t) * (size_t)*nd) == 0)
            continue;
        /* cddp_broadcast_shapes must not write over its own input */
        int64_t prev[CDDP_MAX_DIMS];
        memcpy(prev, shape, sizeof(int64_t) * (size_t)*nd);
        if (cddp_broadcast_shapes(*nd, prev, t->ndim, t->shape, nd, shape) < 0)
            return -1;
    }
    return 0;
}

/* An out= tensor must have the broadcast shape already, the kernel's dtype, and no two
 * elements at one address. 0, or -1 with torch's RuntimeError. */
static int check_out(const TensorObject *out, cddp_dtype out_dt, int nd, const int64_t *shape)
{
    if (out->ndim != nd || memcmp(out->shape, shape, sizeof(int64_t) * (size_t)nd) != 0) {
        char bo[256], bs[256];
        /* broadcasting the output itself is what torch refuses here */
        int tmp_nd;
        int64_t tmp[CDDP_MAX_DIMS];
        if (cddp_broadcast_shapes(out->ndim, out->shape, nd, shape, &tmp_nd, tmp) < 0)
            return -1;
        format_shape(bo, sizeof bo, out->ndim, out->shape);
        format_shape(bs, sizeof bs, tmp_nd, tmp);
        PyErr_Format(PyExc_RuntimeError,
                     "output with shape %s doesn't match the broadcast shape %s", bo, bs);
        return -1;
    }
    if (out->dtype != out_dt) {
        PyErr_Format(PyExc_SystemError, "cddp_ew_map: out dtype %s, kernel writes %s",
                     cddp_dtype_name[out->dtype], cddp_dtype_name[out_dt]);
        return -1;
    }
    return cddp_check_writable(out);
}

/* Drive fn over res (shape nd, shape; n > 0 elements) and the sources: source i is cast[i]
 * when set, else srcs[i].t, or the scalar srcs[i].s when that is NULL (stride 0). One flat
 * loop when res is dense and every tensor operand has its shape and memory order, else
 * cddp_iterate with broadcast byte strides, the dims visited in res's memory order (a
 * permuted result is written front to back); without the GIL above EW_NOGIL_NUMEL elements.
 * 0, or -1 with an exception. */
static int launch(TensorObject *res, int64_t n, int nin, ew_src *srcs, TensorObject *const *cast,
                  const cddp_dtype *want, cddp_loop_fn fn, void *ctx, int nd,
                  const int64_t *shape)
{
    char *ptrs[CDDP_ITER_MAX_OPS];
    int64_t inner[CDDP_ITER_MAX_OPS];
    int contig = cddp_is_contiguous(res);
    int fast = contig || cddp_is_dense(nd, shape, res->strides);
    ptrs[0] = cddp_data(res);
    inner[0] = (int64_t)cddp_dtype_size[res->dtype];
    for (int i = 0; i < nin; i++) {
        TensorObject *t = cast[i] ? cast[i] : srcs[i].t;
        if (!t) {
            ptrs[i + 1] = (char *)&srcs[i].s;
            inner[i + 1] = 0;
            continue;
        }
        ptrs[i + 1] = cddp_data(t);
        inner[i + 1] = (int64_t)cddp_dtype_size[want[i]];
        /* as many elements as the output in the same linear order */
        if (cddp_numel(t) != n || !(contig ? cddp_is_contiguous(t) : cddp_same_layout(t, res)))
            fast = 0;
    }
    if (fast) {
        if (n > EW_NOGIL_NUMEL) {
            Py_BEGIN_ALLOW_THREADS
            fn(ptrs, inner, n, ctx);
            Py_END_ALLOW_THREADS
        } else {
            fn(ptrs, inner, n, ctx);
        }
        return 0;
    }
    int64_t bst[CDDP_ITER_MAX_OPS][CDDP_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        bst[0][d] = res->strides[d] * inner[0];
    for (int i = 0; i < nin; i++) {
        TensorObject *t = cast[i] ? cast[i] : srcs[i].t;
        if (!t) {
            memset(bst[i + 1], 0, sizeof bst[i + 1]);
            continue;
        }
        if (cddp_broadcast_strides(t, nd, shape, bst[i + 1]) < 0)
            return -1;
        for (int d = 0; d < nd; d++)
            bst[i + 1][d] *= inner[i + 1];
    }
    /* a contiguous res is already visited in its memory order */
    void (*walk)(int, int, const int64_t *, char **, const int64_t (*)[CDDP_MAX_DIMS],
                 cddp_loop_fn, void *) = contig ? cddp_iterate : cddp_iterate_ordered;
    if (n > EW_NOGIL_NUMEL) {
        Py_BEGIN_ALLOW_THREADS
        walk(nin + 1, nd, shape, ptrs, (const int64_t (*)[CDDP_MAX_DIMS])bst, fn, ctx);
        Py_END_ALLOW_THREADS
    } else {
        walk(nin + 1, nd, shape, ptrs, (const int64_t (*)[CDDP_MAX_DIMS])bst, fn, ctx);
    }
    return 0;
}

/* ---- the narrow path ---------------------------------------------------------------------
 * When an operand has a storage dtype (float16, bfloat16, uint8, int8, int16), the kernel is
 * its compute dtype's (float32 / int32): each 1-D run is cut into blocks of EW_BLOCK elements,
 * storage-dtype inputs are widened into stack buffers, the kernel runs on those (its
 * contiguous fast path; a stride-0 input stays stride 0), and a storage-dtype output is
 * narrowed back — one rounding per result, as torch's CPU kernels do for Half/BFloat16
 * (computed in float) and wrapping for small integers (computed in int). Scalars arrive
 * already in the compute dtype. The other dtypes never come here: their kernels run on the
 * tensors' memory directly. */
#define EW_BLOCK 512

typedef struct {
    cddp_loop_fn fn;
    void *ctx;
    int nops;                                 /* out + inputs */
    int narrow[CDDP_ITER_MAX_OPS];            /* operand is converted (storage dtype) */
    cddp_dtype dt[CDDP_ITER_MAX_OPS];         /* its storage dtype */
} narrow_ctx;

static void narrow_loop(char **p, const int64_t *s, int64_t n, void *ctx_)
{
    const narrow_ctx *c = ctx_;
    /* compute dtypes of storage dtypes are 4 bytes wide */
    _Alignas(64) uint32_t buf[CDDP_ITER_MAX_OPS][EW_BLOCK];
    char *q[CDDP_ITER_MAX_OPS];
    int64_t qs[CDDP_ITER_MAX_OPS];
    for (int i = 1; i < c->nops; i++)         /* broadcast inputs: widened once */
        if (c->narrow[i] && s[i] == 0)
            cddp_widen(c->dt[i], buf[i], p[i], 0, 1);
    for (int64_t b = 0; b < n; b += EW_BLOCK) {
        int64_t m = n - b < EW_BLOCK ? n - b : EW_BLOCK;
        for (int i = 0; i < c->nops; i++) {
            if (!c->narrow[i]) {
                q[i] = p[i] + b * s[i];
                qs[i] = s[i];
                continue;
            }
            q[i] = (char *)buf[i];
            qs[i] = i > 0 && s[i] == 0 ? 0 : 4;
            if (i > 0 && s[i] != 0)
                cddp_widen(c->dt[i], buf[i], p[i] + b * s[i], s[i], m);
        }
        c->fn(q, qs, m, c->ctx);
        if (c->narrow[0])
            cddp_narrow(c->dt[0], p[0] + b * s[0], s[0], buf[0], m);
    }
}

TensorObject *cddp_ew_map(cddp_dtype out_dt, int nin, ew_src *srcs, const cddp_dtype *want,
                          cddp_loop_fn fn, ew_ctx *ctx, TensorObject *out)
{
    narrow_ctx nc;
    int narrow = cddp_is_narrow(out_dt);
    TensorObject *cast[CDDP_ITER_MAX_OPS] = {NULL};
    int64_t shape[CDDP_MAX_DIMS];
    int nd;
    int64_t n;
    TensorObject *res = NULL;

    if (broadcast_sources(nin, srcs, &nd, shape) < 0)
        return NULL;
    if (out && check_out(out, out_dt, nd, shape) < 0)
        return NULL;
    for (int i = 0; i < nin; i++) {
        if (srcs[i].t && srcs[i].t->dtype != want[i]) {
            cast[i] = cddp_tensor_cast_raw(srcs[i].t, want[i]);
            if (!cast[i])
                goto done;
        }
    }
    if (out) {
        res = (TensorObject *)Py_NewRef(out);
    } else {
        TensorObject *ops[CDDP_ITER_MAX_OPS];
        int64_t st[CDDP_MAX_DIMS];
        for (int i = 0; i < nin; i++)
            ops[i] = srcs[i].t;
        cddp_result_strides(nd, shape, nin, ops, st);
        res = cddp_tensor_new_strided(out_dt, nd, shape, st, 0);
    }
    if (!res)
        goto done;
    n = cddp_numel(res);
    if (n == 0)
        goto done;
    for (int i = 0; i < nin; i++)
        narrow |= srcs[i].t && cddp_is_narrow(want[i]);
    if (narrow) {
        nc.fn = fn;
        nc.ctx = ctx;
        nc.nops = nin + 1;
        nc.narrow[0] = cddp_is_narrow(out_dt);
        nc.dt[0] = out_dt;
        for (int i = 0; i < nin; i++) {
            nc.narrow[i + 1] = srcs[i].t && cddp_is_narrow(want[i]);
            nc.dt[i + 1] = want[i];
        }
        fn = narrow_loop;
    }
    if (launch(res, n, nin, srcs, cast, want, fn, narrow ? (void *)&nc : (void *)ctx, nd,
               shape) < 0) {
        Py_CLEAR(res);
        goto done;
    }
    if (ctx && ctx->err) {
        PyErr_SetString(PyExc_RuntimeError, "ZeroDivisionError");
        Py_CLEAR(res);
    }
done:
    if (res && out)
        cddp_bump_version(out);
    for (int i = 0; i < nin; i++)
        Py_XDECREF(cast[i]);
    return res;
}

TensorObject *cddp_ew_map1(cddp_dtype out_dt, TensorObject *x, cddp_dtype dt, cddp_loop_fn fn,
                           ew_ctx *ctx)
{
    ew_src src = {x};
    return cddp_ew_map(out_dt, 1, &src, &dt, fn, ctx, NULL);
}

/* ---- autograd helpers ------------------------------------------------------------------- */

TensorObject *cddp_ew_grad_to(TensorObject *g, const cddp_meta *m)
{
    TensorObject *s, *c;
    if (!g)
        return NULL;
    s = cddp_sum_to(g, m->ndim, m->shape);
    Py_DECREF(g);
    if (!s)
        return NULL;
    c = cddp_tensor_cast_raw(s, m->dtype);
    Py_DECREF(s);
    return c;
}

TensorObject *cddp_ew_zeros_like_meta(const cddp_meta *m)
{
    return cddp_tensor_new(m->dtype, m->ndim, m->shape, 1);
}

int cddp_ew_saved_src(NodeObject *node, int slot, ew_src *src, cddp_dtype dt)
{
    if (node->saved[slot] || node->released) {
        src->t = cddp_node_saved(node, slot);
        return src->t ? 0 : -1;
    }
    src->t = NULL;
    cddp_ew_scalar_from_double(&src->s, dt, node->d[1 + slot]);
    return 0;
}

NodeObject *cddp_ew_record(TensorObject *out, const char *name, cddp_backward_fn fn, int n,
                           const ew_operand *ops, int save_mask, int *err)
{
    TensorObject *ins[3] = {NULL, NULL, NULL};
    NodeObject *node;
    for (int i = 0; i < n; i++)
        ins[i] = ops[i].t;
    node = cddp_maybe_node(name, fn, n, ins, err);
    if (!node)
        return NULL;
    cddp_set_history(out, node, 0);
    Py_DECREF(node);                      /* out holds it now */
    for (int i = 0; i < n; i++) {
        if (!ops[i].t) {
            node->d[1 + i] = ops[i].d;
        } else if ((save_mask >> i) & 1) {
            if (cddp_node_save(node, i, ops[i].t) < 0)
                goto fail;
        }
    }
    if ((save_mask & EW_SAVE_OUT) && cddp_node_save_output(node, n, out) < 0)
        goto fail;
    return node;
fail:
    *err = 1;
    return NULL;
}

/* ---- in place --------------------------------------------------------------------------- */

int cddp_ew_inplace_begin(TensorObject *x, int others_need_grad, TensorObject **old)
{
    TensorObject *c;
    *old = NULL;
    if (!cddp_grad_enabled || (!cddp_needs_grad(x) && !others_need_grad &&
                                !(x->view_base && cddp_needs_grad(x->view_base))))
        return 0;
    if (cddp_check_inplace(x) < 0)
        return -1;
    if (!cddp_is_floating(x->dtype))
        return 0;      /* no history on integers: the direct path raises the cast error */
    /* The op runs out of place on a copy of x's old value that carries x's history, so the
     * node saves the old value (torch's original_self) and links to x's previous grad_fn. */
    c = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0);
    if (!c)
        return -1;
    if (cddp_copy_into(c, x) < 0) {
        Py_DECREF(c);
        return -1;
    }
    if (x->grad_fn)
        cddp_set_history(c, x->grad_fn, x->output_nr);
    *old = c;
    return 1;
}

PyObject *cddp_ew_inplace_finish(TensorObject *x, TensorObject *r)
{
    if (!r)
        return NULL;
    if (cddp_ew_check_cast(r->dtype, x) < 0)
        goto fail;
    if (r->ndim != x->ndim || memcmp(r->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim)) {
        char bo[256], bs[256];
        format_shape(bo, sizeof bo, x->ndim, x->shape);
        format_shape(bs, sizeof bs, r->ndim, r->shape);
        PyErr_Format(PyExc_RuntimeError,
                     "output with shape %s doesn't match the broadcast shape %s", bo, bs);
        goto fail;
    }
    if (cddp_check_writable(x) < 0 || cddp_copy_into(x, r) < 0)
        goto fail;
    if (r->grad_fn) {
        NodeObject *node = r->grad_fn;
        if (cddp_set_inplace_history(x, node, r->output_nr) < 0)
            goto fail;
        /* a saved output now lives in x: save x instead (as torch does), so modifying x again
         * before backward is caught by the version check, and r's memory is freed */
        for (int i = 0; i < node->n_saved; i++) {
            TensorObject *s = (TensorObject *)node->saved[i];
            if (s && s->storage == r->storage && cddp_node_save_output(node, i, x) < 0)
                goto fail;
        }
    }
    Py_DECREF(r);
    return Py_NewRef(x);
fail:
    Py_DECREF(r);
    return NULL;
}

/* ---- argument parsing ------------------------------------------------------------------- */

int cddp_ew_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  const char *const *names, int nnames, int npos, int nreq, PyObject **out)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional argument%s but %zd were given",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int j = 0;
        for (; j < nnames; j++)
            if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0)
                break;
        if (j == nnames) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         key);
            return -1;
        }
        if (out[j]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[j]);
            return -1;
        }
        out[j] = args[nargs + k];
    }
    for (int j = 0; j < nreq; j++) {
        if (!out[j]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname,
                         names[j]);
            return -1;
        }
    }
    return 0;
}

/* ---- method tables ---------------------------------------------------------------------- */

#define EW_PY_LIST(X)                                                                      \
    X(add) X(sub) X(mul) X(div) X(true_divide) X(floor_divide) X(remainder) X(fmod) X(pow)   \
    X(maximum) X(minimum)                                                                  \
    X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(logical_and) X(logical_or) X(logical_xor)       \
    X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(clamp) X(add_) X(sub_) X(mul_) X(div_)  \
    X(pow_) X(clamp_)
EW_PY_LIST(EW_DECLARE_PY)
EW_DECLARE_PY(clamp_min) EW_DECLARE_PY(clamp_max)
EW_DECLARE_PY(clamp_min_) EW_DECLARE_PY(clamp_max_)

#define EW_DECLARE_UNARY(op)                                                               \
    PyObject *cddp_ew_u_##op(PyObject *self, PyObject *unused);                           \
    PyObject *cddp_ew_u_##op##_(PyObject *self, PyObject *unused);
EW_UNARY_LIST(EW_DECLARE_UNARY)

PyObject *cddp_ew_where_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames);
PyObject *cddp_ew_where_function(PyObject *mod, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames);

#define FC (METH_FASTCALL | METH_KEYWORDS)
#define M(name, op) {name, (PyCFunction)(void (*)(void))cddp_ew_m_##op, FC, NULL},
#define F(name, op) {name, (PyCFunction)(void (*)(void))cddp_ew_f_##op, FC, NULL},
#define UM(name, op) {name, cddp_ew_u_##op, METH_NOARGS, NULL},
#define UMI(name, op) {name "_", cddp_ew_u_##op##_, METH_NOARGS, NULL},
#define UF(name, op) {name, cddp_ew_u_##op, METH_O, NULL},
#define UFI(name, op) {name "_", cddp_ew_u_##op##_, METH_O, NULL},

/* torch names: each op under its torch spelling(s); in-place variants with a trailing _. */
#define EW_BIN_NAMES(X)                                                                    \
    X("mul", mul) X("multiply", mul)                                                     \
    X("div", div) X("divide", div) X("true_divide", true_divide)                         \
    X("floor_divide", floor_divide) X("remainder", remainder) X("fmod", fmod)            \
    X("pow", pow) X("maximum", maximum)                                                  \
    X("minimum", minimum) X("eq", eq) X("ne", ne) X("not_equal", ne) X("lt", lt)          \
    X("less", lt) X("le", le) X("less_equal", le) X("gt", gt) X("greater", gt) X("ge", ge) \
    X("greater_equal", ge) X("logical_and", logical_and) X("logical_or", logical_or)     \
    X("logical_xor", logical_xor) X("bitwise_and", bitwise_and)                          \
    X("bitwise_or", bitwise_or) X("bitwise_xor", bitwise_xor) X("clamp", clamp)          \
    X("clip", clamp)
#define EW_UN_NAMES(X)                                                                     \
    X("neg", neg) X("negative", neg) X("abs", abs) X("absolute", abs) X("exp", exp)      \
    X("log", log) X("log2", log2) X("log10", log10) X("log1p", log1p) X("expm1", expm1)  \
    X("sqrt", sqrt) X("rsqrt", rsqrt) X("sin", sin) X("cos", cos) X("tan", tan)           \
    X("asin", asin) X("arcsin", asin) X("acos", acos) X("arccos", acos) X("atan", atan)   \
    X("arctan", atan) X("sinh", sinh) X("cosh", cosh)                                     \
    X("tanh", tanh) X("sigmoid", sigmoid) X("erf", erf) X("reciprocal", reciprocal)      \
    X("relu", relu) X("sign", sign) X("square", square) X("floor", floor) X("ceil", ceil) \
    X("round", round) X("trunc", trunc) X("logical_not", logical_not)                    \
    X("bitwise_not", bitwise_not) X("isnan", isnan) X("isinf", isinf)                    \
    X("isfinite", isfinite)
/* unary ops with an in-place form (x.exp_(), cddp.relu_(x)); the predicates have none */
#define EW_UN_INPLACE_NAMES(X)                                                             \
    X("neg", neg) X("negative", neg) X("abs", abs) X("absolute", abs) X("exp", exp)      \
    X("log", log) X("log2", log2) X("log10", log10) X("log1p", log1p) X("expm1", expm1)  \
    X("sqrt", sqrt) X("rsqrt", rsqrt) X("sin", sin) X("cos", cos) X("tan", tan)           \
    X("asin", asin) X("arcsin", asin) X("acos", acos) X("arccos", acos) X("atan", atan)   \
    X("arctan", atan) X("sinh", sinh) X("cosh", cosh)                                     \
    X("tanh", tanh) X("sigmoid", sigmoid) X("erf", erf) X("reciprocal", reciprocal)      \
    X("relu", relu) X("sign", sign) X("square", square) X("floor", floor) X("ceil", ceil) \
    X("round", round) X("trunc", trunc) X("logical_not", logical_not)                    \
    X("bitwise_not", bitwise_not)

/* the special and hyperbolic functions, with aliases; each has an in-place form too */
#define EW_UN_MATH_NAMES(X)                                                                \
    X("asinh", asinh) X("arcsinh", asinh) X("acosh", acosh) X("arccosh", acosh)           \
    X("atanh", atanh) X("arctanh", atanh) X("erfc", erfc) X("erfinv", erfinv)             \
    X("exp2", exp2) X("lgamma", lgamma) X("digamma", digamma) X("frac", frac)             \
    X("deg2rad", deg2rad) X("rad2deg", rad2deg) X("sgn", sign) X("fix", trunc)

/* add / sub as methods also take torch's deprecated (Number alpha, Tensor other) (binary.c) */
PyObject *cddp_ew_m_add_compat(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_ew_m_sub_compat(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_ew_m_add__compat(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_ew_m_sub__compat(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_ew_f_add_compat(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_ew_f_sub_compat(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

PyMethodDef cddp_elementwise_tensor_methods[] = {
    EW_BIN_NAMES(M)
    EW_UN_NAMES(UM)
    EW_UN_INPLACE_NAMES(UMI)
    EW_UN_MATH_NAMES(UM)
    EW_UN_MATH_NAMES(UMI)
    M("add", add_compat) M("sub", sub_compat) M("subtract", sub_compat)
    M("add_", add__compat) M("sub_", sub__compat) M("subtract_", sub__compat)
    M("mul_", mul_) M("multiply_", mul_)
    M("div_", div_) M("divide_", div_) M("true_divide_", div_) M("pow_", pow_)
    M("clamp_", clamp_) M("clip_", clamp_)
    M("clamp_min", clamp_min) M("clamp_max", clamp_max) M("clamp_min_", clamp_min_)
    M("clamp_max_", clamp_max_)
    {"where", (PyCFunction)(void (*)(void))cddp_ew_where_method, FC,
     "where(condition, y): self where condition else y"},
    {NULL},
};

/* torch.result_type(tensor1, tensor2): the dtype an elementwise op on these operands computes
 * in (tensors or Python numbers, either side) */
static PyObject *py_result_type(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"tensor1", "tensor2"};
    PyObject *argv[2] = {NULL, NULL}, *res = NULL;
    ew_operand ops[2];
    if (cddp_ew_parse("result_type", args, nargs, kwnames, names, 2, 2, 2, argv) < 0 ||
        cddp_ew_operand_arg(argv[0], &ops[0], "result_type", "tensor1") < 0)
        return NULL;
    if (cddp_ew_operand_arg(argv[1], &ops[1], "result_type", "tensor2") == 0) {
        res = Py_NewRef(cddp_dtype_to_py(cddp_ew_result_type(2, ops)));
        cddp_ew_operand_clear(&ops[1]);
    }
    cddp_ew_operand_clear(&ops[0]);
    return res;
}

PyMethodDef cddp_elementwise_module_methods[] = {
    {"result_type", (PyCFunction)(void (*)(void))py_result_type, FC,
     "result_type(tensor1, tensor2) -> dtype (torch's promotion with wrapped numbers)"},
    EW_BIN_NAMES(F)
    F("add", add_compat) F("sub", sub_compat) F("subtract", sub_compat)
    EW_UN_NAMES(UF)
    EW_UN_INPLACE_NAMES(UFI)
    EW_UN_MATH_NAMES(UF)
    EW_UN_MATH_NAMES(UFI)
    F("clamp_", clamp_) F("clip_", clamp_)
    F("clamp_min", clamp_min) F("clamp_max", clamp_max) F("clamp_min_", clamp_min_)
    F("clamp_max_", clamp_max_)
    {"where", (PyCFunction)(void (*)(void))cddp_ew_where_function, FC,
     "where(condition, input, other): input where condition else other"},
    {NULL},
};
