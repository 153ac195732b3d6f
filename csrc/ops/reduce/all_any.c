/* ops/reduce/all_any.c — logical reductions.
 *
 * Mirrors torch.Tensor.all / any(dim=None, keepdim=False) and torch.all / torch.any: a bool
 * result (v != 0, NaN counting as true), no gradient.
 *
 * Layout legend: input cast to bool as (outer, R, inner), R the product of the reduced dims
 * (ops/reduce/plan.c); output (outer, inner).
 */
#include "ops/reduce/reduce.h"

/* ---- all / any ------------------------------------------------------------------------ */

static void all_any_u8(const uint8_t *x, uint8_t *out, int64_t outer, int64_t R, int64_t inner,
                       int any)
{
    for (int64_t o = 0; o < outer; o++) {
        uint8_t *acc = out + o * inner;
        for (int64_t i = 0; i < inner; i++)
            acc[i] = (uint8_t)!any;
        for (int64_t r = 0; r < R; r++) {
            const uint8_t *xr = x + (o * R + r) * inner;
            if (any)
                for (int64_t i = 0; i < inner; i++)
                    acc[i] |= xr[i];
            else
                for (int64_t i = 0; i < inner; i++)
                    acc[i] &= xr[i];
        }
    }
}

static PyObject *all_any(TensorObject *x, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, int any)
{
    static const char *const names[] = {"dim", "keepdim"};
    const char *fname = any ? "any" : "all";
    PyObject *a[2];
    cddp_rplan p;
    uint32_t mask;
    int keep;
    TensorObject *xl = NULL, *out = NULL;
    if (cddp_reduce_args(fname, args, nargs, kwnames, names, 2, 2, a) < 0 ||
        cddp_reduce_dims(fname, a[0], x->ndim, 1, 1, &mask) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", a[1], 0)) < 0)
        return NULL;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 0);
    if (!(xl = cddp_rplan_layout(&p, x, CDDP_BOOL)))   /* the cast maps v != 0 (NaN too) */
        return NULL;
    out = cddp_tensor_new(CDDP_BOOL, p.out_ndim, p.out_shape, 0);
    if (out)
        CDDP_REDUCE_NOGIL(p.outer * p.R * p.inner,
                          all_any_u8(RDATA(xl), RDATA(out),
                                     p.outer, p.R, p.inner, any));
    Py_DECREF(xl);
    /* torch keeps uint8 for uint8 inputs (0/1), a legacy of masks before bool */
    if (x->dtype == CDDP_UINT8)
        out = cddp_reduce_to_dtype(out, CDDP_UINT8);
    return (PyObject *)out;
}

PyObject *cddp_reduce_all(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return all_any((TensorObject *)self, args, nargs, kwnames, 0);
}

PyObject *cddp_reduce_any(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return all_any((TensorObject *)self, args, nargs, kwnames, 1);
}

