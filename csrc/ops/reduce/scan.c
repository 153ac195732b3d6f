/* ops/reduce/scan.c — running reductions along one dim.
 *
 * Mirrors torch.Tensor.cumsum / torch.cumsum(input, dim, *, dtype=None)    CumsumBackward0
 * (the backward is a reversed cumsum of the gradient). Floats accumulate in double (torch's
 * CPU accumulate type), float16/bfloat16 in float (theirs), integers and bools in wrapping
 * int64.
 *
 * Layout legend: input as (outer, R, inner), R the scanned dim (ops/reduce/plan.c); the output
 * has the input's shape, in the same layout.
 */
#include "ops/reduce/reduce.h"

#define LANES 256   /* inner positions accumulated at once on the stack */

/* ---- cumsum --------------------------------------------------------------------------- */

/* y (outer, R, inner) = running sum over R of x, accumulated in double for floats (torch's
 * CPU accumulate type); rev runs from the end (the backward). */
#define CUMSUM_KERNEL(NAME, T, ACC)                                                      \
    static void NAME(const T *x, T *y, int64_t outer, int64_t R, int64_t inner, int rev) \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                ACC acc[LANES];                                                          \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES;                    \
                for (int64_t i = 0; i < nb; i++)                                         \
                    acc[i] = 0;                                                          \
                for (int64_t k = 0; k < R; k++) {                                        \
                    int64_t off = (o * R + (rev ? R - 1 - k : k)) * inner + i0;          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        acc[i] += (ACC)x[off + i];                                       \
                        y[off + i] = (T)acc[i];                                          \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
    }
CUMSUM_KERNEL(cumsum_f32, float, double)
CUMSUM_KERNEL(cumsum_f64, double, double)
CUMSUM_KERNEL(cumsum_i64, int64_t, uint64_t)
CUMSUM_KERNEL(cumsum_f32_facc, float, float)

/* dt: the compute dtype of x and y; facc: accumulate in float (a float16/bfloat16 result) */
static void cumsum_run(cddp_dtype dt, void *x, void *y, const cddp_rplan *p, int rev, int facc)
{
    int64_t n = p->outer * p->R * p->inner;
    if (facc)
        CDDP_REDUCE_NOGIL(n, cumsum_f32_facc(x, y, p->outer, p->R, p->inner, rev));
    else if (dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, cumsum_f32(x, y, p->outer, p->R, p->inner, rev));
    else if (dt == CDDP_FLOAT64)
        CDDP_REDUCE_NOGIL(n, cumsum_f64(x, y, p->outer, p->R, p->inner, rev));
    else
        CDDP_REDUCE_NOGIL(n, cumsum_i64(x, y, p->outer, p->R, p->inner, rev));
}

static int cumsum_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *g = NULL, *y = NULL;
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_rplan_from_node(&p, self, 0);
    /* the output has the input's shape: as a "gradient" it is already in the plan's layout */
    if (!(g = cddp_rplan_layout(&p, gout[0], dt)) || !(y = cddp_rplan_new_layout(&p, dt, 0))) {
        Py_XDECREF(g);
        return -1;
    }
    cumsum_run(dt, RDATA(g), RDATA(y), &p, 1, cddp_is_reduced(self->meta[0].dtype));
    Py_DECREF(g);
    gin[0] = cddp_reduce_to_dtype(y, self->meta[0].dtype);
    return gin[0] ? 0 : -1;
}

PyObject *cddp_reduce_cumsum(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const names[] = {"dim", "dtype"};
    TensorObject *x = (TensorObject *)self, *xl = NULL, *out = NULL, *res = NULL;
    PyObject *a[2];
    cddp_rplan p;
    int d, has_dt, err;
    cddp_dtype dt, out_dt, acc_dt;
    if (cddp_reduce_args("cumsum", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_SetString(PyExc_TypeError, "cumsum() missing required argument 'dim' (pos 1)");
        return NULL;
    }
    if (cddp_reduce_int_dim("cumsum", a[0], x->ndim, &d) < 0 ||
        cddp_reduce_dtype(a[1], &has_dt, &dt) < 0)
        return NULL;
    out_dt = has_dt ? dt : (cddp_is_floating(x->dtype) ? x->dtype : CDDP_INT64);
    acc_dt = cddp_is_floating(out_dt) ? cddp_kdt(out_dt) : CDDP_INT64;
    cddp_rplan_init(&p, x->ndim, x->shape, x->ndim ? 1u << d : 0, 1, 0);
    if (!(xl = cddp_rplan_layout(&p, x, acc_dt)) || !(out = cddp_rplan_new_layout(&p, acc_dt, 0)))
        goto done;
    cumsum_run(acc_dt, RDATA(xl), RDATA(out), &p, 0, cddp_is_reduced(out_dt));
    if (out_dt != acc_dt) {
        res = cddp_tensor_cast_raw(out, out_dt);
        Py_SETREF(out, res);
        res = NULL;
        if (!out)
            goto done;
    }
    if (cddp_is_floating(x->dtype) && cddp_is_floating(out_dt)) {
        NodeObject *node = cddp_maybe_node("CumsumBackward0", cumsum_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            cddp_rplan_to_node(&p, node);
            Py_DECREF(node);
        }
    }
    res = out;
    out = NULL;
done:
    Py_XDECREF(xl);
    Py_XDECREF(out);
    return (PyObject *)res;
}

