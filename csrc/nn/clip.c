/* nn/clip.c — gradient clipping in one C pass over all gradients (torch.nn.utils.clip_grad_*).
 *
 *   _clip_grad_norm(grads: list[Tensor], max_norm, norm_type, error_if_nonfinite) -> Tensor
 *       total = norm over all elements of all grads (p-norm, or max |g| for inf); every grad
 *       is scaled in place by min(1, max_norm / (total + 1e-6)), as torch does.
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

static PyObject *py_clip_grad_norm(PyObject *m, PyObject *args)
{
    PyObject *grads;
    double max_norm, p;
    int err_nonfinite;
    cddp_dtype out_dt = CDDP_FLOAT32;
    if (!PyArg_ParseTuple(args, "O!ddp:_clip_grad_norm", &PyList_Type, &grads, &max_norm, &p,
                          &err_nonfinite))
        return NULL;
    if (check_grads(grads) < 0)
        return NULL;
    if (p <= 0 && !isinf(p)) {
        PyErr_Format(PyExc_RuntimeError, "clip_grad_norm_: norm_type must be positive, got %g", p);
        return NULL;
    }
    double acc = 0;
    Py_ssize_t n = PyList_GET_SIZE(grads);
    for (Py_ssize_t i = 0; i < n; i++) {
        TensorObject *g = (TensorObject *)PyList_GET_ITEM(grads, i);
        int64_t k = cddp_numel(g);
        out_dt = g->dtype;
        if (g->dtype == CDDP_FLOAT32) {
            const float *v = (const float *)cddp_data(g);
            for (int64_t j = 0; j < k; j++) {
                double a = fabs((double)v[j]);
                if (isinf(p)) acc = a > acc || isnan(a) ? a : acc;
                else acc += p == 2 ? a * a : pow(a, p);
            }
        } else {
            const double *v = (const double *)cddp_data(g);
            for (int64_t j = 0; j < k; j++) {
                double a = fabs(v[j]);
                if (isinf(p)) acc = a > acc || isnan(a) ? a : acc;
                else acc += p == 2 ? a * a : pow(a, p);
            }
        }
    }
    double total = isinf(p) ? acc : (p == 2 ? sqrt(acc) : pow(acc, 1.0 / p));
    if (n == 0)
        total = 0;
    if (err_nonfinite && !isfinite(total)) {
        PyErr_Format(PyExc_RuntimeError, "The total norm of order %g for gradients from "
                     "`parameters` is non-finite, so it cannot be clipped. To disable this error "
                     "and scale the gradients by the non-finite norm anyway, set "
                     "`error_if_nonfinite=False`", p);
        return NULL;
    }
    double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            TensorObject *g = (TensorObject *)PyList_GET_ITEM(grads, i);
            int64_t k = cddp_numel(g);
            if (g->dtype == CDDP_FLOAT32) {
                float *v = (float *)cddp_data(g), c = (float)coef;
                for (int64_t j = 0; j < k; j++) v[j] *= c;
            } else {
                double *v = (double *)cddp_data(g);
                for (int64_t j = 0; j < k; j++) v[j] *= coef;
            }
            cddp_bump_version(g);
        }
    }
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
        } else {
            double *v = (double *)cddp_data(g);
            for (int64_t j = 0; j < k; j++) v[j] = v[j] < -c ? -c : v[j] > c ? c : v[j];
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
