/* ops/elementwise/complex.c — the complex product on cddp's complex layout (cddp/_complex.py:
 * a complex tensor of shape S is a real tensor of shape S + (2,), real part first).
 *
 *   _C._complex_mul(x, y, conj_y=False) -> out     x, y: (..., 2) float32 or float64, one dtype,
 *                                                  one shape (broadcast views allowed: the
 *                                                  caller expands), unit stride in the last dim
 *   out (..., 2), contiguous: (a + ib)(c + id) = (ac - bd) + i(ad + bc); with conj_y, y's
 *   imaginary part negated (c - id) — what the product's backward needs (dx = g * conj(y)).
 *
 * Mirrors: the complex multiply of torch's CPU kernels (c10::complex operator*), which works
 * on the same interleaved layout. No autograd here: cddp/_complex.py's _Mul records it.
 *
 * Why C: composed of real ops, the product reads the parts as stride-2 views (scalar loops)
 * and stacks them back (a copy per element); for LLaMA's rotary embedding that was 15x
 * torch's time.
 */
#include "module.h"
#include "common/clones.h"

/* One run of n products along a dim: x, y advance by sx, sy elements (2 or 0), out by 2. */
#define CMUL_RUN(T, NAME)                                                                       \
    CDDP_CLONES static void NAME(T *restrict o, const T *restrict x, int64_t sx,                \
                                 const T *restrict y, int64_t sy, int64_t n, T sign)            \
    {                                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T a = x[i * sx], b = x[i * sx + 1], c = y[i * sy], d = sign * y[i * sy + 1];       \
            o[2 * i] = a * c - b * d;                                                           \
            o[2 * i + 1] = a * d + b * c;                                                       \
        }                                                                                       \
    }
CMUL_RUN(float, cmul_f32)
CMUL_RUN(double, cmul_f64)

/* The product over every leading index (odometer over dims 0..nd-2 of the complex shape). */
static void cmul_all(TensorObject *out, TensorObject *x, TensorObject *y, int conj)
{
    int nd = x->ndim - 1;                 /* complex dims */
    int64_t idx[CDDP_MAX_DIMS] = {0}, n = nd ? x->shape[nd - 1] : 1, rows = 1;
    int64_t sx = nd ? x->strides[nd - 1] : 0, sy = nd ? y->strides[nd - 1] : 0;
    char *px = cddp_data(x), *py = cddp_data(y), *po = cddp_data(out);
    for (int d = 0; d < nd - 1; d++)
        rows *= x->shape[d];
    int64_t ox = 0, oy = 0;              /* element offsets of row r, kept by the odometer */
    for (int64_t r = 0; r < rows; r++) {
        if (x->dtype == CDDP_FLOAT32)
            cmul_f32((float *)po + r * n * 2, (float *)px + ox, sx, (float *)py + oy, sy, n,
                     conj ? -1.0f : 1.0f);
        else
            cmul_f64((double *)po + r * n * 2, (double *)px + ox, sx, (double *)py + oy, sy, n,
                     conj ? -1.0 : 1.0);
        for (int d = nd - 2; d >= 0; d--) {
            ox += x->strides[d];
            oy += y->strides[d];
            if (++idx[d] < x->shape[d])
                break;
            ox -= x->strides[d] * x->shape[d];
            oy -= y->strides[d] * y->shape[d];
            idx[d] = 0;
        }
    }
}

static int check_operand(PyObject *o, const char *name, TensorObject **t)
{
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "_complex_mul(): argument '%s' must be Tensor, not %s",
                     name, Py_TYPE(o)->tp_name);
        return -1;
    }
    *t = (TensorObject *)o;
    if (((*t)->dtype != CDDP_FLOAT32 && (*t)->dtype != CDDP_FLOAT64) || (*t)->ndim < 1 ||
        (*t)->shape[(*t)->ndim - 1] != 2 || (*t)->strides[(*t)->ndim - 1] != 1) {
        PyErr_Format(PyExc_ValueError, "_complex_mul(): '%s' must be a float32 or float64 "
                     "tensor (..., 2) with unit stride in its last dim", name);
        return -1;
    }
    return 0;
}

static PyObject *py_complex_mul(PyObject *m, PyObject *args)
{
    PyObject *ox, *oy;
    TensorObject *x, *y, *out;
    int conj = 0;
    (void)m;
    if (!PyArg_ParseTuple(args, "OO|p:_complex_mul", &ox, &oy, &conj) ||
        check_operand(ox, "x", &x) < 0 || check_operand(oy, "y", &y) < 0)
        return NULL;
    if (x->dtype != y->dtype || x->ndim != y->ndim ||
        memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim) != 0) {
        PyErr_SetString(PyExc_ValueError, "_complex_mul(): x and y must have one dtype and one "
                        "shape (expand them first)");
        return NULL;
    }
    if (!(out = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0)))
        return NULL;
    if (cddp_numel(out) >= CDDP_GIL_FREE_ELEMS) {
        Py_BEGIN_ALLOW_THREADS
        cmul_all(out, x, y, conj);
        Py_END_ALLOW_THREADS
    } else {
        cmul_all(out, x, y, conj);
    }
    return (PyObject *)out;
}

PyMethodDef cddp_complex_module_methods[] = {
    {"_complex_mul", py_complex_mul, METH_VARARGS,
     "_complex_mul(x, y, conj_y=False): the complex product of two (..., 2) real layouts"},
    {NULL, NULL, 0, NULL},
};
