/* optim/optim.c — fused optimizer updates (torch.optim.SGD / Adam / AdamW, single-tensor math)
 * and the parameter/state/gradient checks every update loop shares (optim/optim.h); the other
 * optimizers' loops are in optim/fused.c.
 *
 *   _sgd_step(params, grads, bufs, lr, momentum, dampening, weight_decay, nesterov, maximize)
 *   _adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs|None, steps,
 *              lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled)
 *
 * One pass over each parameter per step: every intermediate torch materialises (grad +
 * wd*param, the momentum buffer update, the nesterov sum, the step) is a register here. The
 * arithmetic is done in the parameter's dtype, in torch's order, so results agree with torch
 * to the last bit or two. `bufs` entries that are None are created (as torch's clone(grad)) and
 * stored back into the list; lists are parallel; a None grad skips its parameter.
 * float16/bfloat16 parameters keep their state in their dtype (as torch) and are updated in
 * float32: blocks of parameter, grad and state are widened, run through the float32 kernel and
 * each state rounded back once per step (torch rounds after every op of the update instead,
 * so the two differ in the last bit now and then).
 */
#include "optim/optim.h"
#include "module.h"
#include <math.h>
#include <string.h>

/* Contract in optim/optim.h. */
TensorObject *cddp_optim_state(PyObject *list, Py_ssize_t i, TensorObject *like, const char *what)
{
    PyObject *o = PyList_GET_ITEM(list, i);
    TensorObject *t = (TensorObject *)o;
    if (!cddp_tensor_check(o) || t->dtype != like->dtype || cddp_numel(t) != cddp_numel(like) ||
        !(cddp_is_contiguous(like) ? cddp_is_contiguous(t) : cddp_same_layout(t, like))) {
        PyErr_Format(PyExc_RuntimeError, "optimizer: %s for parameter %zd must be a tensor of "
                     "the parameter's dtype, size and memory layout (zeros_like(param))", what, i);
        return NULL;
    }
    return t;
}

/* Contract in optim/optim.h. */
TensorObject *cddp_optim_param(PyObject *params, Py_ssize_t i)
{
    PyObject *o = PyList_GET_ITEM(params, i);
    TensorObject *p = (TensorObject *)o;
    if (!cddp_tensor_check(o) || !cddp_is_floating(p->dtype) ||
        !cddp_is_dense(p->ndim, p->shape, p->strides)) {
        PyErr_Format(PyExc_RuntimeError, "optimizer: parameter %zd must be a floating point "
                     "tensor whose elements fill its memory (not an expanded or strided "
                     "slice view)", i);
        return NULL;
    }
    return p;
}

/* Contract in optim/optim.h. */
TensorObject *cddp_optim_grad(TensorObject *p, PyObject *go, Py_ssize_t i)
{
    TensorObject *g = (TensorObject *)go, *c;
    if (!cddp_tensor_check(go) || cddp_numel(g) != cddp_numel(p)) {
        PyErr_Format(PyExc_RuntimeError, "optimizer: grad of parameter %zd has the wrong size", i);
        return NULL;
    }
    if (cddp_is_contiguous(p)) {
        if (g->dtype == p->dtype)
            return cddp_tensor_contiguous_raw(g);
        return cddp_tensor_cast_raw(g, p->dtype);
    }
    if (g->dtype == p->dtype && cddp_same_layout(g, p))
        return (TensorObject *)Py_NewRef(g);
    c = cddp_tensor_new_strided(p->dtype, p->ndim, p->shape, p->strides, 0);
    if (c && cddp_copy_into(c, g) < 0)
        Py_CLEAR(c);
    return c;
}

/* One parameter's update. restrict + loop-invariant flags let GCC unswitch the branches and
 * vectorize each variant (the loop is the whole cost of a large model's optimizer step). */
#define SGD_KERNEL(T)                                                                       \
    static void sgd_##T(T *restrict w, const T *restrict gr, T *restrict b, int64_t n,      \
                        T lr, T mom, T damp1, T wd, int maximize, int has_wd, int has_mom,   \
                        int nesterov, int fresh)                                            \
    {                                                                                       \
        for (int64_t k = 0; k < n; k++) {                                                   \
            T d = maximize ? -gr[k] : gr[k];                                                \
            if (has_wd)                                                                     \
                d = d + wd * w[k];                                                          \
            if (has_mom) {                                                                  \
                T v = fresh ? d : b[k] * mom + damp1 * d;                                   \
                b[k] = v;                                                                   \
                d = nesterov ? d + mom * v : v;                                             \
            }                                                                               \
            w[k] = w[k] + (-lr) * d;                                                        \
        }                                                                                   \
    }
SGD_KERNEL(float)
SGD_KERNEL(double)

#define BLK 256

/* the float32 SGD kernel over a float16/bfloat16 parameter, BLK elements at a time */
static void sgd_narrow(cddp_dtype dt, char *w, const char *gr, char *b, int64_t n, float lr,
                       float mom, float damp1, float wd, int maximize, int has_wd, int has_mom,
                       int nesterov, int fresh)
{
    float wf[BLK], gf[BLK], bf[BLK];
    for (int64_t k = 0; k < n; k += BLK) {
        int64_t m = n - k < BLK ? n - k : BLK;
        cddp_widen(dt, wf, w + 2 * k, 2, m);
        cddp_widen(dt, gf, gr + 2 * k, 2, m);
        if (b && !fresh)
            cddp_widen(dt, bf, b + 2 * k, 2, m);
        sgd_float(wf, gf, b ? bf : NULL, m, lr, mom, damp1, wd, maximize, has_wd, has_mom,
                  nesterov, fresh);
        cddp_narrow(dt, w + 2 * k, 2, wf, m);
        if (b)
            cddp_narrow(dt, b + 2 * k, 2, bf, m);
    }
}

static PyObject *py_sgd_step(PyObject *m, PyObject *args)
{
    PyObject *params, *grads, *bufs;
    double lr, momentum, dampening, weight_decay;
    int nesterov, maximize;
    if (!PyArg_ParseTuple(args, "O!O!O!ddddpp:_sgd_step", &PyList_Type, &params, &PyList_Type,
                          &grads, &PyList_Type, &bufs, &lr, &momentum, &dampening,
                          &weight_decay, &nesterov, &maximize))
        return NULL;
    Py_ssize_t np_ = PyList_GET_SIZE(params);
    if (PyList_GET_SIZE(grads) != np_ || PyList_GET_SIZE(bufs) != np_) {
        PyErr_SetString(PyExc_ValueError, "_sgd_step: params, grads and bufs differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < np_; i++) {
        PyObject *go = PyList_GET_ITEM(grads, i);
        TensorObject *p, *g, *buf = NULL;
        int fresh = 0;
        if (go == Py_None)
            continue;
        if (!(p = cddp_optim_param(params, i)) || !(g = cddp_optim_grad(p, go, i)))
            return NULL;
        if (momentum != 0) {
            if (PyList_GET_ITEM(bufs, i) == Py_None) {
                buf = cddp_tensor_new_strided(p->dtype, p->ndim, p->shape, p->strides, 0);
                if (!buf || PyList_SetItem(bufs, i, (PyObject *)buf) < 0) {
                    Py_DECREF(g);
                    return NULL;
                }
                fresh = 1;
            } else if (!(buf = cddp_optim_state(bufs, i, p, "momentum_buffer"))) {
                Py_DECREF(g);
                return NULL;
            }
        }
        int64_t n = cddp_numel(p);
        int has_wd = weight_decay != 0, has_mom = momentum != 0;
        Py_BEGIN_ALLOW_THREADS
        if (cddp_is_reduced(p->dtype))
            sgd_narrow(p->dtype, cddp_data(p), cddp_data(g), buf ? cddp_data(buf) : NULL, n,
                       (float)lr, (float)momentum, (float)(1 - dampening), (float)weight_decay,
                       maximize, has_wd, has_mom, nesterov, fresh);
        else if (p->dtype == CDDP_FLOAT32)
            sgd_float((float *)cddp_data(p), (const float *)cddp_data(g),
                      buf ? (float *)cddp_data(buf) : NULL, n, (float)lr, (float)momentum,
                      (float)(1 - dampening), (float)weight_decay, maximize, has_wd, has_mom,
                      nesterov, fresh);
        else
            sgd_double((double *)cddp_data(p), (const double *)cddp_data(g),
                       buf ? (double *)cddp_data(buf) : NULL, n, lr, momentum, 1 - dampening,
                       weight_decay, maximize, has_wd, has_mom, nesterov, fresh);
        Py_END_ALLOW_THREADS
        cddp_bump_version(p);
        if (buf)
            cddp_bump_version(buf);
        Py_DECREF(g);
    }
    Py_RETURN_NONE;
}

/* Adam's hyper-parameters for one parameter's step (bias corrections included) */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay, bc1, bc2_sqrt;
    int amsgrad, maximize, decoupled;
} adam_hp;

#define ADAM_KERNEL(T, SQRT)                                                                \
    static void adam_##T(T *restrict w, const T *restrict gr, T *restrict m1,               \
                         T *restrict m2, T *restrict mx, int64_t n, const adam_hp *h)       \
    {                                                                                       \
        const int amsgrad = h->amsgrad, maximize = h->maximize, decoupled = h->decoupled;   \
        const double weight_decay = h->weight_decay;                                        \
        const T b1w = (T)(1 - h->beta1), b2 = (T)h->beta2, b2w = (T)(1 - h->beta2);         \
        const T wd = (T)weight_decay, bc2s = (T)h->bc2_sqrt, eps_ = (T)h->eps;              \
        const T step_size = (T)(h->lr / h->bc1), decay = (T)(1 - h->lr * weight_decay);     \
        for (int64_t k = 0; k < n; k++) {                                                   \
            T d = maximize ? -gr[k] : gr[k];                                                \
            if (weight_decay != 0) {                                                        \
                if (decoupled) w[k] = w[k] * decay;                                         \
                else d = d + wd * w[k];                                                     \
            }                                                                               \
            m1[k] = m1[k] + b1w * (d - m1[k]);                                              \
            m2[k] = m2[k] * b2 + b2w * (d * d);                                             \
            T v = m2[k];                                                                    \
            if (amsgrad) { mx[k] = mx[k] > v ? mx[k] : v; v = mx[k]; }                      \
            T den = SQRT(v) / bc2s + eps_;                                                  \
            w[k] = w[k] + (-step_size) * (m1[k] / den);                                     \
        }                                                                                   \
    }
ADAM_KERNEL(float, sqrtf)
ADAM_KERNEL(double, sqrt)

/* the float32 Adam kernel over a float16/bfloat16 parameter and its state, BLK at a time */
static void adam_narrow(cddp_dtype dt, char *w, const char *gr, char *m1, char *m2, char *mx,
                        int64_t n, const adam_hp *h)
{
    float wf[BLK], gf[BLK], af[BLK], sf[BLK], xf[BLK];
    for (int64_t k = 0; k < n; k += BLK) {
        int64_t m = n - k < BLK ? n - k : BLK;
        char *ptr[4] = {w + 2 * k, m1 + 2 * k, m2 + 2 * k, mx ? mx + 2 * k : NULL};
        float *buf[4] = {wf, af, sf, xf};
        cddp_widen(dt, gf, gr + 2 * k, 2, m);
        for (int i = 0; i < 4; i++)
            if (ptr[i])
                cddp_widen(dt, buf[i], ptr[i], 2, m);
        adam_float(wf, gf, af, sf, mx ? xf : NULL, m, h);
        for (int i = 0; i < 4; i++)
            if (ptr[i])
                cddp_narrow(dt, ptr[i], 2, buf[i], m);
    }
}

static PyObject *py_adam_step(PyObject *m, PyObject *args)
{
    PyObject *params, *grads, *eas_l, *easq_l, *max_l, *steps;
    double lr, beta1, beta2, eps, weight_decay;
    int amsgrad, maximize, decoupled;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!dddddppp:_adam_step", &PyList_Type, &params,
                          &PyList_Type, &grads, &PyList_Type, &eas_l, &PyList_Type, &easq_l,
                          &max_l, &PyList_Type, &steps, &lr, &beta1, &beta2, &eps,
                          &weight_decay, &amsgrad, &maximize, &decoupled))
        return NULL;
    Py_ssize_t np_ = PyList_GET_SIZE(params);
    if (PyList_GET_SIZE(grads) != np_ || PyList_GET_SIZE(eas_l) != np_ ||
        PyList_GET_SIZE(easq_l) != np_ || PyList_GET_SIZE(steps) != np_ ||
        (amsgrad && (!PyList_Check(max_l) || PyList_GET_SIZE(max_l) != np_))) {
        PyErr_SetString(PyExc_ValueError, "_adam_step: state lists differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < np_; i++) {
        PyObject *go = PyList_GET_ITEM(grads, i);
        TensorObject *p, *g, *ea, *eas, *mas = NULL;
        double step;
        if (go == Py_None)
            continue;
        if (!(p = cddp_optim_param(params, i)) ||
            !(ea = cddp_optim_state(eas_l, i, p, "exp_avg")) ||
            !(eas = cddp_optim_state(easq_l, i, p, "exp_avg_sq")) ||
            (amsgrad && !(mas = cddp_optim_state(max_l, i, p, "max_exp_avg_sq"))))
            return NULL;
        step = PyFloat_AsDouble(PyList_GET_ITEM(steps, i));
        if (step == -1 && PyErr_Occurred())
            return NULL;
        if (!(g = cddp_optim_grad(p, go, i)))
            return NULL;
        adam_hp h = {lr, beta1, beta2, eps, weight_decay, 1 - pow(beta1, step),
                     sqrt(1 - pow(beta2, step)), amsgrad, maximize, decoupled};
        int64_t n = cddp_numel(p);
        char *mx = amsgrad ? cddp_data(mas) : NULL;
        Py_BEGIN_ALLOW_THREADS
        if (cddp_is_reduced(p->dtype))
            adam_narrow(p->dtype, cddp_data(p), cddp_data(g), cddp_data(ea), cddp_data(eas), mx,
                        n, &h);
        else if (p->dtype == CDDP_FLOAT32)
            adam_float((float *)cddp_data(p), (const float *)cddp_data(g),
                       (float *)cddp_data(ea), (float *)cddp_data(eas), (float *)mx, n, &h);
        else
            adam_double((double *)cddp_data(p), (const double *)cddp_data(g),
                        (double *)cddp_data(ea), (double *)cddp_data(eas), (double *)mx, n, &h);
        Py_END_ALLOW_THREADS
        cddp_bump_version(p);
        Py_DECREF(g);
    }
    Py_RETURN_NONE;
}

PyMethodDef cddp_optim_module_methods[] = {
    {"_sgd_step", py_sgd_step, METH_VARARGS, "fused SGD update over a parameter group"},
    {"_adam_step", py_adam_step, METH_VARARGS, "fused Adam/AdamW update over a parameter group"},
    {NULL},
};
