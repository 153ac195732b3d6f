/* nn/clip.c — gradient clipping in one C pass over all gradients (torch.nn.utils.clip_grad_*).
 *
 *   _clip_grad_norm(grads: list[Tensor], max_norm, norm_type, error_if_nonfinite) -> Tensor
 *       total = norm over all elements of all grads (p-norm, or max |g| for inf); every grad
 *       is scaled in place by min(1, max_norm / (total + 1e-6)), as torch does.
 *       float16/bfloat16 grads (all of one dtype): torch's sequence of rounded steps — each
 *       grad's norm rounded to the dtype, the norm of those norms, the coefficient computed in
 *       the dtype (reciprocal, times max_norm, clamped to 1), each element's product rounded.
 *   _clip_grad_value(grads, clip_value): clamp each element to [-clip_value, clip_value].
 */
#include "core/cddp.h"
#include "module.h"
#include <math.h>

/* Every entry a contiguous floating tensor; else TypeError naming the position. */
static int check_grads(PyObject *grads)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(grads); i++) {
        PyObject *o = PyList_GET_ITEM(grads, i);
        if (!cddp_tensor_check(o) || !cddp_is_floating(((TensorObject *)o)->dtype) ||
            !cddp_is_contiguous((TensorObject *)o)) {
            PyErr_Format(PyExc_TypeError, "clip_grad: gradient %zd is not a contiguous floating "
                         "point tensor", i);
            return -1;
        }
    }
    return 0;
}

#define BLK 256

/* acc combined with |v|^p (p == 2: v*v) or, for p = inf, the max |v| (NaN wins) */
static inline double acc_one(double acc, double a, double p)
{
    if (isinf(p))
        return a > acc || isnan(a) ? a : acc;
    return acc + (p == 2 ? a * a : pow(a, p));
}

static inline double acc_finish(double acc, double p)
{
    return isinf(p) ? acc : (p == 2 ? sqrt(acc) : pow(acc, 1.0 / p));
}

/* acc over every element of g (contiguous, any floating dtype; float16 widened in blocks) */
static double grad_acc(TensorObject *g, double p, double acc)
{
    int64_t k = cddp_numel(g);
    const char *d = cddp_data(g);
    if (g->dtype == CDDP_FLOAT32) {
        for (int64_t j = 0; j < k; j++)
            acc = acc_one(acc, fabs((double)((const float *)d)[j]), p);
    } else if (g->dtype == CDDP_FLOAT64) {
        for (int64_t j = 0; j < k; j++)
            acc = acc_one(acc, fabs(((const double *)d)[j]), p);
    } else {
        float buf[BLK];
        for (int64_t j0 = 0; j0 < k; j0 += BLK) {
            int64_t m = k - j0 < BLK ? k - j0 : BLK;
            cddp_widen(g->dtype, buf, d + j0 * 2, 2, m);
            for (int64_t j = 0; j < m; j++)
                acc = acc_one(acc, fabs((double)buf[j]), p);
        }
    }
    return acc;
}

/* g *= coef in place (float16: each product in float, rounded once) */
static void grad_scale(TensorObject *g, double coef)
{
    int64_t k = cddp_numel(g);
    char *d = cddp_data(g);
    if (g->dtype == CDDP_FLOAT32) {
        float c = (float)coef;
        for (int64_t j = 0; j < k; j++) ((float *)d)[j] *= c;
    } else if (g->dtype == CDDP_FLOAT64) {
        for (int64_t j = 0; j < k; j++) ((double *)d)[j] *= coef;
    } else {
        float buf[BLK], c = (float)coef;
        for (int64_t j0 = 0; j0 < k; j0 += BLK) {
            int64_t m = k - j0 < BLK ? k - j0 : BLK;
            cddp_widen(g->dtype, buf, d + j0 * 2, 2, m);
            for (int64_t j = 0; j < m; j++)
                buf[j] *= c;
            cddp_narrow(g->dtype, d + j0 * 2, 2, buf, m);
        }
    }
    cddp_bump_version(g);
}

/* The dtype every grad has when they are all float16 (or all bfloat16), else -1. */
static int common_reduced(PyObject *grads)
{
    Py_ssize_t n = PyList_GET_SIZE(grads);
    cddp_dtype dt;
    if (n == 0)
        return -1;
    dt = ((TensorObject *)PyList_GET_ITEM(grads, 0))->dtype;
    for (Py_ssize_t i = 0; i < n; i++)
        if (((TensorObject *)PyList_GET_ITEM(grads, i))->dtype != dt)
            return -1;
    return cddp_is_reduced(dt) ? (int)dt : -1;
}

/* torch's clip_grad_norm_ for float16/bfloat16 grads, whose every step is an op in the dtype:
 * norms = [vector_norm(g)], total = vector_norm(stack(norms)), coef = max_norm / (total +
 * 1e-6) as reciprocal(total + 1e-6) * max_norm, clamp(coef, max=1), g.mul_(coef). *total,
 * *coef get the rounded values. */
static void reduced_steps(PyObject *grads, cddp_dtype dt, double max_norm, double p,
                          double *total, double *coef)
{
    double acc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(grads); i++) {
        TensorObject *g = (TensorObject *)PyList_GET_ITEM(grads, i);
        double ni = cddp_round_to(dt, (float)acc_finish(grad_acc(g, p, 0), p));
        acc = acc_one(acc, ni, p);
    }
    *total = cddp_round_to(dt, (float)acc_finish(acc, p));
    float den = cddp_round_to(dt, (float)*total + cddp_round_to(dt, 1e-6f));
    float c = cddp_round_to(dt, cddp_round_to(dt, 1.0f / den) * (float)max_norm);
    *coef = c > 1.0f ? 1.0 : c;
}

static PyObject *py_clip_grad_norm(PyObject *m, PyObject *args)
{
    PyObject *grads;
    double max_norm, p, total, coef, acc = 0;
    int err_nonfinite, rdt;
    cddp_dtype out_dt = CDDP_FLOAT32;
    if (!PyArg_ParseTuple(args, "O!ddp:_clip_grad_norm", &PyList_Type, &grads, &max_norm, &p,
                          &err_nonfinite))
        return NULL;
    if (check_grads(grads) < 0)
        return NULL;
    if (p <= 0 && !isinf(p)) {
        char *ps = PyOS_double_to_string(p, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);  /* no %g here */
        PyErr_Format(PyExc_RuntimeError, "clip_grad_norm_: norm_type must be positive, got %s",
                     ps ? ps : "?");
        PyMem_Free(ps);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(grads);
    rdt = common_reduced(grads);
    if (rdt >= 0) {
        out_dt = (cddp_dtype)rdt;
        reduced_steps(grads, out_dt, max_norm, p, &total, &coef);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            TensorObject *g = (TensorObject *)PyList_GET_ITEM(grads, i);
            out_dt = g->dtype;
            acc = grad_acc(g, p, acc);
        }
        total = n == 0 ? 0 : acc_finish(acc, p);
        coef = max_norm / (total + 1e-6);
    }
    if (err_nonfinite && !isfinite(total)) {
        char *ps = PyOS_double_to_string(p, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);  /* "2.0", as torch */
        PyErr_Format(PyExc_RuntimeError, "The total norm of order %s for gradients from "
                     "`parameters` is non-finite, so it cannot be clipped. To disable this error "
                     "and scale the gradients by the non-finite norm anyway, set "
                     "`error_if_nonfinite=False`", ps ? ps : "?");
        PyMem_Free(ps);
        return NULL;
    }
    if (coef < 1.0 || (rdt >= 0 && coef != coef))
        for (Py_ssize_t i = 0; i < n; i++)
            grad_scale((TensorObject *)PyList_GET_ITEM(grads, i), coef);
    return (PyObject *)cddp_scalar_tensor(total, out_dt);
}

static PyObject *py_clip_grad_value(PyObject *m, PyObject *args)
{
    PyObject *grads;
    double c;
    if (!PyArg_ParseTuple(args, "O!d:_clip_grad_value", &PyList_Type, &grads, &c))
        return NULL;
    if (check_grads(grads) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(grads); i++) {
        TensorObject *g = (TensorObject *)PyList_GET_ITEM(grads, i);
        int64_t k = cddp_numel(g);
        if (g->dtype == CDDP_FLOAT32) {
            float *v = (float *)cddp_data(g), hi = (float)c, lo = (float)-c;
            for (int64_t j = 0; j < k; j++) v[j] = v[j] < lo ? lo : v[j] > hi ? hi : v[j];
        } else if (g->dtype == CDDP_FLOAT64) {
            double *v = (double *)cddp_data(g);
            for (int64_t j = 0; j < k; j++) v[j] = v[j] < -c ? -c : v[j] > c ? c : v[j];
        } else {                          /* torch: clamp_ with bounds rounded to the dtype */
            uint16_t *v = (uint16_t *)cddp_data(g);
            float hi = cddp_round_to(g->dtype, (float)c), lo = -hi;
            for (int64_t j = 0; j < k; j++) {
                float x = (float)cddp_load_double(g->dtype, v + j);
                cddp_store_double(g->dtype, v + j, x < lo ? lo : x > hi ? hi : x);
            }
        }
        cddp_bump_version(g);
    }
    Py_RETURN_NONE;
}

PyMethodDef cddp_clip_module_methods[] = {
    {"_clip_grad_norm", py_clip_grad_norm, METH_VARARGS, NULL},
    {"_clip_grad_value", py_clip_grad_value, METH_VARARGS, NULL},
    {NULL},
};
