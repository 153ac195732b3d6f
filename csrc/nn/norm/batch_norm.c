/* nn/norm/batch_norm.c — batch normalization with autograd (torch.nn.functional.batch_norm,
 * torch.batch_norm; node NativeBatchNormBackward0).
 *
 *   _batch_norm(input (N, C, *), weight (C,)|None, bias (C,)|None, running_mean (C,)|None,
 *               running_var (C,)|None, training, momentum, eps) -> output (N, C, *)
 *
 * Training: per-channel mean and biased variance over the M = N*S values of the batch
 * (nn/norm/common.c: one pass around a sample, two for float64), invstd = 1/sqrt(var + eps);
 * running stats, when given, become (1 - momentum) * old + momentum * (mean, unbiased var).
 * Eval: mean and var are the running stats. Either way one more pass writes
 *   y = (x - mean) * (invstd * w) + b.
 * Backward (training), from the per-channel sums sdy = sum dy and sdyx = sum dy (x - mean):
 *   dx = (dy - sdy/M - (x - mean) invstd^2 sdyx/M) invstd w,  dw = sdyx invstd,  db = sdy
 * (eval: dx = dy invstd w): one reduction pass and one dx pass.
 * The node saves the contiguous input, the weight, and a (2, C) float64 tensor of the mean and
 * invstd it normalized with (so later running-stat updates do not move it).
 */
#include "core/cddp.h"
#include "module.h"
#include "nn/norm/norm.h"
#include <math.h>
#include <string.h>

static int batch_norm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *st = cddp_node_saved(self, 1), *w = NULL;
    TensorObject *g = NULL;
    double *buf = NULL;
    int rc = -1, training = (int)self->i[0];
    if (!x || !st || (self->i[1] && !(w = cddp_node_saved(self, 2))))
        return -1;
    if (!gout[0])
        return 0;
    cddp_bn_plan p;
    cddp_bn_plan_init(&p, x);
    int64_t C = p.C, M = p.N * p.S;
    int want_x = self->next[0].node != NULL, want_w = self->i[1] && self->next[1].node;
    int want_b = self->n_next > 2 && self->next[2].node;
    const double *mean = (const double *)cddp_data(st), *invstd = mean + C;
    g = cddp_tensor_cast_raw(gout[0], p.dt);
    if (g && !cddp_is_contiguous(g))
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    buf = PyMem_Malloc(sizeof(double) * (size_t)(6 * C + 1));
    if (!g || !buf)
        goto done;
    double *sdy = buf, *sdyx = buf + C, *wv = buf + 2 * C, *pc = buf + 3 * C, *q = buf + 4 * C,
           *r = buf + 5 * C;
    for (int64_t c = 0; c < C; c++)
        wv[c] = w ? cddp_norm_at(w, c) : 1.0;
    int need_sdyx = want_w || (want_x && training);
    if ((need_sdyx || want_b || (want_x && training)) &&
        cddp_bn_reduce(&p, cddp_data(g), need_sdyx ? cddp_data(x) : NULL, mean, sdy, sdyx) < 0)
        goto done;
    if (want_x) {
        gin[0] = cddp_tensor_new(p.dt, x->ndim, x->shape, 0);
        if (!gin[0])
            goto done;
        for (int64_t c = 0; c < C; c++) {
            double s = invstd[c] * wv[c];
            pc[c] = s;
            q[c] = training && M ? -s * invstd[c] * invstd[c] * sdyx[c] / (double)M : 0.0;
            r[c] = training && M ? -s * sdy[c] / (double)M : 0.0;
        }
        if (cddp_bn_elemt(&p, cddp_data(g), training ? cddp_data(x) : NULL, cddp_data(gin[0]),
                          mean, pc, q, r) < 0)
            goto done;
    }
    if (want_w) {
        for (int64_t c = 0; c < C; c++)
            q[c] = sdyx[c] * invstd[c];
        if (!(gin[1] = cddp_norm_param_grad(&self->meta[1], q, C)))
            goto done;
    }
    if (want_b && !(gin[2] = cddp_norm_param_grad(&self->meta[2], sdy, C)))
        goto done;
    rc = 0;
done:
    Py_XDECREF(g);
    PyMem_Free(buf);
    return rc;
}

typedef struct {
    TensorObject *x, *w, *b, *rm, *rv;
    int training;
    double momentum, eps;
} bn_args;

static int parse_args(PyObject *const *args, Py_ssize_t nargs, bn_args *a)
{
    static const char *const names[] = {"weight", "bias", "running_mean", "running_var"};
    TensorObject **slots[] = {&a->w, &a->b, &a->rm, &a->rv};
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "_batch_norm(input, weight, bias, running_mean, "
                        "running_var, training, momentum, eps)");
        return -1;
    }
    if (!cddp_tensor_check(args[0])) {
        PyErr_Format(PyExc_TypeError, "batch_norm(): argument 'input' must be Tensor, not %s",
                     Py_TYPE(args[0])->tp_name);
        return -1;
    }
    a->x = (TensorObject *)args[0];
    for (int i = 0; i < 4; i++)
        if (cddp_norm_opt_tensor(args[1 + i], "batch_norm", names[i], slots[i]) < 0)
            return -1;
    if ((a->training = PyObject_IsTrue(args[5])) < 0)
        return -1;
    a->momentum = PyFloat_AsDouble(args[6]);
    a->eps = PyFloat_AsDouble(args[7]);
    if (PyErr_Occurred())
        return -1;
    if (cddp_refuse_narrow(a->x, "batch_norm") < 0 || cddp_refuse_narrow(a->w, "batch_norm") < 0 ||
        cddp_refuse_narrow(a->b, "batch_norm") < 0 || cddp_refuse_narrow(a->rm, "batch_norm") < 0 ||
        cddp_refuse_narrow(a->rv, "batch_norm") < 0)
        return -1;
    if (!cddp_is_floating(a->x->dtype)) {
        PyErr_Format(PyExc_NotImplementedError, "\"batch_norm\" not implemented for '%s'",
                     a->x->dtype == CDDP_INT64 ? "Long" : a->x->dtype == CDDP_INT32 ? "Int"
                                                                                    : "Bool");
        return -1;
    }
    int64_t C = a->x->ndim > 1 ? a->x->shape[1] : 0;
    if ((a->rm && cddp_norm_check_param(a->rm, "running_mean", C, a->x->dtype) < 0) ||
        (a->rv && cddp_norm_check_param(a->rv, "running_var", C, a->x->dtype) < 0) ||
        (a->w && cddp_norm_check_param(a->w, "weight", C, a->x->dtype) < 0) ||
        (a->b && cddp_norm_check_param(a->b, "bias", C, a->x->dtype) < 0))
        return -1;
    if (!a->training && (!a->rm || !a->rv)) {
        PyErr_Format(PyExc_RuntimeError, "%s must be defined in evaluation mode",
                     a->rm ? "running_var" : "running_mean");
        return -1;
    }
    if (a->x->ndim < 2) {
        PyErr_Format(PyExc_ValueError, "batch_norm(): expected an input of at least 2 "
                     "dimensions (N, C, *), got %d-D", a->x->ndim);
        return -1;
    }
    return 0;
}

/* mean/invstd (C,) for the forward: the batch's (updating the running stats) or the
 * running stats'. */
static int forward_stats(const bn_args *a, const cddp_bn_plan *p, const void *x, double *mean,
                         double *invstd)
{
    int64_t C = p->C, M = p->N * p->S;
    if (!a->training) {
        for (int64_t c = 0; c < C; c++) {
            mean[c] = cddp_norm_at(a->rm, c);
            invstd[c] = 1.0 / sqrt(cddp_norm_at(a->rv, c) + a->eps);
        }
        return 0;
    }
    if (cddp_bn_moments(p, x, mean, invstd) < 0)      /* invstd holds m2 for now */
        return -1;
    for (int64_t c = 0; c < C && M > 0; c++) {
        double m2 = invstd[c], mom = a->momentum;
        if (a->rm)
            cddp_norm_set(a->rm, c, (1 - mom) * cddp_norm_at(a->rm, c) + mom * mean[c]);
        if (a->rv)
            cddp_norm_set(a->rv, c, (1 - mom) * cddp_norm_at(a->rv, c) + mom * m2 / (double)(M - 1));
    }
    for (int64_t c = 0; c < C; c++)
        invstd[c] = M > 0 ? 1.0 / sqrt(invstd[c] / (double)M + a->eps) : 0.0;
    if (M > 0 && a->rm)
        cddp_bump_version(a->rm);
    if (M > 0 && a->rv)
        cddp_bump_version(a->rv);
    return 0;
}

/* History for y: NativeBatchNormBackward0 over (x, w, b), saving xc, the stats and w. */
static int record(const bn_args *a, TensorObject *y, TensorObject *xc, TensorObject *st)
{
    int err;
    TensorObject *ins[3] = {a->x, a->w, a->b};
    NodeObject *node = cddp_maybe_node("NativeBatchNormBackward0", batch_norm_backward, 3, ins,
                                       &err);
    if (err)
        return -1;
    if (!node)
        return 0;
    cddp_set_history(y, node, 0);
    node->i[0] = a->training;
    node->i[1] = a->w != NULL;
    int bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, st) < 0 ||
              (a->w && cddp_node_save(node, 2, a->w) < 0);
    Py_DECREF(node);
    return bad ? -1 : 0;
}

static PyObject *py_batch_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    bn_args a;
    TensorObject *xc = NULL, *y = NULL, *st = NULL;
    double *buf = NULL;
    if (parse_args(args, nargs, &a) < 0)
        return NULL;
    cddp_bn_plan p;
    cddp_bn_plan_init(&p, a.x);
    int64_t C = p.C, two_c[2] = {2, C};
    xc = cddp_tensor_contiguous_raw(a.x);
    st = cddp_tensor_new(CDDP_FLOAT64, 2, two_c, 0);
    buf = PyMem_Malloc(sizeof(double) * (size_t)(2 * C + 1));
    if (!xc || !st || !buf)
        goto fail;
    double *mean = (double *)cddp_data(st), *invstd = mean + C, *sc = buf, *sh = buf + C;
    if (forward_stats(&a, &p, cddp_data(xc), mean, invstd) < 0)
        goto fail;
    for (int64_t c = 0; c < C; c++) {
        sc[c] = invstd[c] * (a.w ? cddp_norm_at(a.w, c) : 1.0);
        sh[c] = a.b ? cddp_norm_at(a.b, c) : 0.0;
    }
    if (!(y = cddp_tensor_new(p.dt, a.x->ndim, a.x->shape, 0)))
        goto fail;
    if (cddp_bn_affine(&p, cddp_data(xc), cddp_data(y), mean, sc, sh) < 0 ||
        record(&a, y, xc, st) < 0)
        goto fail;
    Py_DECREF(xc);
    Py_DECREF(st);
    PyMem_Free(buf);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(st);
    Py_XDECREF(y);
    PyMem_Free(buf);
    return NULL;
}

PyMethodDef cddp_batch_norm_module_methods[] = {
    {"_batch_norm", (PyCFunction)(void (*)(void))py_batch_norm, METH_FASTCALL,
     "_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)"},
    {NULL},
};
