/* ops/random/sample.c — torch.normal, torch.bernoulli and torch.multinomial over cddp.Generator.
 *
 * normal(mean, std, size): numbers -> empty(size).normal_(mean, std) (torch's values);
 *   tensors -> standard normals scaled and shifted elementwise (broadcast), no autograd.
 * bernoulli(input, p=None): input holds the probabilities (or p, a number).
 * multinomial(input, n, replacement=False): with replacement and n > 1, torch's CPU kernel
 *   (normalized cumulative sums, binary search with a float64 uniform) — the same indices as
 *   torch; otherwise argmax/top-n of p / q with q ~ Exp(1) like torch, but q comes from
 *   cddp's own exponential (torch draws it through MKL), so indices differ from torch's.
 */
#include "ops/random/random.h"
#include "ops/creation/creation.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- normal --------------------------------------------------------------------------- */

/* out = out * std + mean, std/mean broadcast (tensors cast to out's dtype; a NULL std: 1) */
static int scale_shift(TensorObject *out, PyObject *mean, PyObject *std)
{
    TensorObject *ops[2] = {NULL, NULL};
    double sc[2] = {0.0, 1.0};
    PyObject *src[2] = {mean, std};
    int64_t st[2][CDDP_MAX_DIMS], n = cddp_numel(out), idx[CDDP_MAX_DIMS] = {0};
    int rc = -1;
    for (int k = 0; k < 2; k++) {
        if (!src[k])                    /* an omitted std: 1 */
            continue;
        if (cddp_tensor_check(src[k])) {
            ops[k] = cddp_tensor_cast_raw((TensorObject *)src[k], CDDP_FLOAT64);
            if (!ops[k] || cddp_broadcast_strides(ops[k], out->ndim, out->shape, st[k]) < 0)
                goto done;
        } else {
            sc[k] = PyFloat_AsDouble(src[k]);
            if (sc[k] == -1.0 && PyErr_Occurred())
                goto done;
        }
    }
    /* out is fresh and contiguous: walk it linearly with an odometer for the operands */
    for (int64_t i = 0; i < n; i++) {
        double m = sc[0], s = sc[1];
        for (int k = 0; k < 2; k++) {
            if (ops[k]) {
                int64_t off = 0;
                for (int d = 0; d < out->ndim; d++)
                    off += idx[d] * st[k][d];
                double v = ((const double *)cddp_data(ops[k]))[off];
                if (k == 0) m = v; else s = v;
            }
        }
        if (out->dtype == CDDP_FLOAT32) {
            float *p = (float *)cddp_data(out) + i;
            *p = *p * (float)s + (float)m;
        } else if (cddp_is_reduced(out->dtype)) {   /* torch's mul_(std).add_(mean) in Half */
            uint16_t *p = (uint16_t *)cddp_data(out) + i;
            float v = cddp_round_to(out->dtype, (float)cddp_load_double(out->dtype, p) * (float)s);
            cddp_store_double(out->dtype, p, v + cddp_round_to(out->dtype, (float)m));
        } else {
            double *p = (double *)cddp_data(out) + i;
            *p = *p * s + m;
        }
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->shape[d])
                break;
            idx[d] = 0;
        }
    }
    rc = 0;
done:
    Py_XDECREF(ops[0]);
    Py_XDECREF(ops[1]);
    return rc;
}

static int check_std_tensor(TensorObject *s)
{
    int64_t n = cddp_numel(s);
    for (int64_t i = 0; i < n; i++) {
        if (!(cddp_get_double(s, i) >= 0.0)) {
            PyErr_SetString(PyExc_RuntimeError, "normal expects all elements of std >= 0.0");
            return -1;
        }
    }
    return 0;
}

PyObject *cddp_py_normal(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"mean", "std", "size", "generator", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory", "out", NULL};
    PyObject *v[10] = {NULL};
    GeneratorObject *g;
    int has_dt, rg, meta, ndim;
    int64_t shape[CDDP_MAX_DIMS];
    cddp_dtype dt;
    TensorObject *out;
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "normal() takes at most 3 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("normal", args, nargs, kw, names, v) < 0 ||
        !(g = cddp_generator_get(v[3], "normal")) ||
        cddp_parse_dtype_opt(v[4], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[5], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[6], &rg) < 0)
        return NULL;
    int mt = v[0] && cddp_tensor_check(v[0]), stt = v[1] && cddp_tensor_check(v[1]);
    if (!mt && !stt) {
        double mean = 0.0, std = 1.0;
        if (!v[2]) {
            PyErr_SetString(PyExc_TypeError,
                            "normal(): with float mean and std a size is required: "
                            "normal(mean, std, size)");
            return NULL;
        }
        if ((v[0] && (mean = PyFloat_AsDouble(v[0])) == -1.0 && PyErr_Occurred()) ||
            (v[1] && (std = PyFloat_AsDouble(v[1])) == -1.0 && PyErr_Occurred()) ||
            cddp_parse_size_obj("normal", v[2], &ndim, shape) < 0 ||
            cddp_check_sizes("normal", ndim, shape) < 0)
            return NULL;
        if (!has_dt)
            dt = cddp_state()->default_dtype;
        if (!(out = cddp_tensor_new(dt, ndim, shape, 0)))
            return NULL;
        if (cddp_random_normal_fill(out, g, mean, std) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        return cddp_factory_finish(out, rg, meta);
    }
    if (!v[0] || (!v[1] && !mt)) {      /* normal(mean_tensor) draws with std 1, as torch */
        PyErr_SetString(PyExc_TypeError, "normal() missing 'mean' or 'std'");
        return NULL;
    }
    if (v[2]) {
        PyErr_SetString(PyExc_TypeError, "normal(): size is only accepted with float mean and std");
        return NULL;
    }
    {
        TensorObject *a = mt ? (TensorObject *)v[0] : NULL, *b = stt ? (TensorObject *)v[1] : NULL;
        cddp_dtype odt = a ? a->dtype : b->dtype;
        if (a && b) {
            if (cddp_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &ndim, shape) < 0)
                return NULL;
            odt = cddp_promote(a->dtype, b->dtype);
        } else {
            TensorObject *only = a ? a : b;
            ndim = only->ndim;
            memcpy(shape, only->shape, sizeof(int64_t) * (size_t)ndim);
        }
        if (b && check_std_tensor(b) < 0)
            return NULL;
        if (!b && v[1]) {
            double s = PyFloat_AsDouble(v[1]);
            if (s == -1.0 && PyErr_Occurred())
                return NULL;
            if (!(s >= 0)) {
                PyErr_Format(PyExc_RuntimeError, "normal expects std >= 0.0, but found std %R", v[1]);
                return NULL;
            }
        }
        if (!cddp_is_floating(odt)) {
            PyErr_Format(PyExc_NotImplementedError,
                         "\"normal_kernel_cpu\" not implemented for '%s'",
                         cddp_dtype_torch_name[odt]);
            return NULL;
        }
        if (!(out = cddp_tensor_new(odt, ndim, shape, 0)))
            return NULL;
        if (cddp_random_normal_fill(out, g, 0.0, 1.0) < 0 || scale_shift(out, v[0], v[1]) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        return cddp_factory_finish(out, rg, meta);
    }
}

/* ---- bernoulli ------------------------------------------------------------------------ */

PyObject *cddp_py_bernoulli(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"input", "p", "generator", "out", NULL};
    PyObject *v[4] = {NULL};
    GeneratorObject *g;
    TensorObject *in, *out;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "bernoulli() takes at most 2 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("bernoulli", args, nargs, kw, names, v) < 0 ||
        !(g = cddp_generator_get(v[2], "bernoulli")))
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0])) {
        PyErr_Format(PyExc_TypeError, "bernoulli(): argument 'input' must be Tensor, not %s",
                     v[0] ? Py_TYPE(v[0])->tp_name : "nothing");
        return NULL;
    }
    in = (TensorObject *)v[0];
    if (!v[1] && !cddp_is_floating(in->dtype)) {
        PyErr_Format(PyExc_NotImplementedError,
                     "\"bernoulli_tensor_cpu_p_\" not implemented for '%s'",
                     cddp_dtype_torch_name[in->dtype]);
        return NULL;
    }
    if (!(out = cddp_tensor_new(in->dtype, in->ndim, in->shape, 0)))
        return NULL;
    if (cddp_random_bernoulli_fill(out, v[1] ? v[1] : v[0], g) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

/* ---- multinomial ---------------------------------------------------------------------- */

typedef struct {
    double key;
    int64_t idx;
} keyed;

static int keyed_desc(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? 1 : -1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* One row of probabilities (n_cat values of type T, element stride s1 bytes apart): build the
 * normalised cumulative sum in cum, then draw n_sample categories by binary search. */
#define SAMPLE_ROW(T)                                                                       \
    static void sample_row_##T(GeneratorObject *g, const char *row, int64_t s1, int64_t n_cat, \
                               int64_t n_sample, int64_t *res, T *cum)                       \
    {                                                                                       \
        T sum = 0;                                                                          \
        for (int64_t j = 0; j < n_cat; j++) {                                               \
            sum += *(const T *)(row + j * s1);                                              \
            cum[j] = sum;                                                                   \
        }                                                                                   \
        for (int64_t j = 0; j < n_cat; j++)                                                 \
            cum[j] /= sum;                                                                  \
        cum[n_cat - 1] = 1;                                                                 \
        for (int64_t j = 0; j < n_sample; j++) {                                            \
            double u = (double)(cddp_gen_random64(g) & 0x1FFFFFFFFFFFFFULL) *               \
                       (1.0 / 9007199254740992.0);                                          \
            int64_t lo = 0, hi = n_cat;                                                     \
            while (hi - lo > 0) {                                                           \
                int64_t mid = lo + (hi - lo) / 2;                                           \
                if (cum[mid] < u) lo = mid + 1; else hi = mid;                              \
            }                                                                               \
            res[j] = lo;                                                                    \
        }                                                                                   \
    }
SAMPLE_ROW(float)
SAMPLE_ROW(double)

/* rows of probabilities (n_dist, n_cat) as float64 or float32 values in `probs` */
static void sample_with_replacement(GeneratorObject *g, const TensorObject *p, int64_t n_dist,
                                    int64_t n_cat, int64_t n_sample, int64_t *res, void *scratch)
{
    int64_t isz = (int64_t)cddp_dtype_size[p->dtype];
    int64_t s0 = p->ndim > 1 ? p->strides[0] : 0, s1 = p->strides[p->ndim - 1];
    for (int64_t i = 0; i < n_dist; i++) {
        const char *row = cddp_data(p) + i * s0 * isz;
        if (p->dtype == CDDP_FLOAT32)
            sample_row_float(g, row, s1 * isz, n_cat, n_sample, res + i * n_sample, scratch);
        else
            sample_row_double(g, row, s1 * isz, n_cat, n_sample, res + i * n_sample, scratch);
    }
}

/* torch's checks of a multinomial call, in torch's order and with its texts; the category
 * count (last dim) and the number of distributions (rows) of p. 0, or -1 with an exception. */
static int multinomial_check(const TensorObject *p, int64_t n_sample, int repl, int64_t *n_cat,
                             int64_t *n_dist)
{
    if (p->ndim < 1 || p->ndim > 2) {
        PyErr_SetString(PyExc_RuntimeError, "prob_dist must be 1 or 2 dim");
        return -1;
    }
    if (!cddp_is_floating(p->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "multinomial only supports floating-point dtypes for "
                     "input, got: %s", cddp_dtype_torch_name[p->dtype]);
        return -1;
    }
    if (n_sample <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot sample n_sample <= 0 samples");
        return -1;
    }
    *n_cat = p->shape[p->ndim - 1];
    *n_dist = p->ndim > 1 ? p->shape[0] : 1;
    if (!repl && n_sample > *n_cat) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
        return -1;
    }
    if (*n_cat == 0) {
        PyErr_SetString(PyExc_RuntimeError, "invalid multinomial distribution (sum of "
                        "probabilities <= 0)");
        return -1;
    }
    for (int64_t r = 0; r < *n_dist; r++) {
        double sum = 0;
        for (int64_t j = 0; j < *n_cat; j++) {
            double x = cddp_get_double(p, r * *n_cat + j);
            if (!(x >= 0) || !isfinite(x)) {
                PyErr_SetString(PyExc_RuntimeError,
                                "probability tensor contains either `inf`, `nan` or element < 0");
                return -1;
            }
            sum += x;
        }
        if (!(sum > 0)) {
            PyErr_SetString(PyExc_RuntimeError,
                            "invalid multinomial distribution (sum of probabilities <= 0)");
            return -1;
        }
    }
    return 0;
}

/* res (n_dist, n_sample) = per row, the indices of the n_sample largest p / q with
 * q ~ Exp(1) drawn from g (the exponential-race form of sampling without replacement); ties
 * go to the lower index. 0, or -1 with an exception. */
static int sample_without_replacement(GeneratorObject *g, const TensorObject *p, int64_t n_dist,
                                      int64_t n_cat, int64_t n_sample, int64_t *res)
{
    TensorObject *q = cddp_tensor_new(CDDP_FLOAT64, p->ndim, p->shape, 0);
    keyed *ks = NULL;
    int rc = -1;
    if (!q || cddp_random_exponential_fill(q, g, 1.0) < 0)
        goto done;
    if (!(ks = PyMem_Malloc((size_t)n_cat * sizeof(keyed)))) {
        PyErr_NoMemory();
        goto done;
    }
    const double *qd = (const double *)cddp_data(q);
    for (int64_t r = 0; r < n_dist; r++) {
        for (int64_t j = 0; j < n_cat; j++) {
            ks[j].key = cddp_get_double(p, r * n_cat + j) / qd[r * n_cat + j];
            ks[j].idx = j;
        }
        qsort(ks, (size_t)n_cat, sizeof(keyed), keyed_desc);
        for (int64_t j = 0; j < n_sample; j++)
            res[r * n_sample + j] = ks[j].idx;
    }
    rc = 0;
done:
    PyMem_Free(ks);
    Py_XDECREF(q);
    return rc;
}

/* multinomial of float16/bfloat16 weights: the same call on their float32 copy (torch's
 * kernel reads them in float) */
static PyObject *multinomial_float(TensorObject *p, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kw)
{
    Py_ssize_t n = nargs + (kw ? PyTuple_GET_SIZE(kw) : 0);
    PyObject *a[8], *res;
    TensorObject *f;
    if (n > 8) {                          /* the caller parsed at most five */
        PyErr_SetString(PyExc_TypeError, "multinomial(): too many arguments");
        return NULL;
    }
    if (!(f = cddp_tensor_cast_raw(p, CDDP_FLOAT32)))
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        a[i] = args[i] == (PyObject *)p ? (PyObject *)f : args[i];
    res = cddp_py_multinomial(NULL, a, nargs, kw);
    Py_DECREF(f);
    return res;
}

PyObject *cddp_py_multinomial(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"input", "num_samples", "replacement", "generator",
                                        "out", NULL};
    PyObject *v[5] = {NULL};
    GeneratorObject *g;
    TensorObject *p, *out = NULL;
    int repl = 0;
    int64_t n_sample, n_cat, n_dist, shape[2];
    void *scratch = NULL;
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "multinomial() takes at most 3 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("multinomial", args, nargs, kw, names, v) < 0 ||
        !(g = cddp_generator_get(v[3], "multinomial")) || cddp_parse_flag(v[2], &repl) < 0)
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0]) || !v[1]) {
        PyErr_SetString(PyExc_TypeError, "multinomial(input: Tensor, num_samples: int, "
                        "replacement=False, *, generator=None)");
        return NULL;
    }
    p = (TensorObject *)v[0];
    n_sample = PyLong_AsLongLong(v[1]);
    if (n_sample == -1 && PyErr_Occurred())
        return NULL;
    if (multinomial_check(p, n_sample, repl, &n_cat, &n_dist) < 0)
        return NULL;
    if (cddp_is_reduced(p->dtype))       /* torch samples float16 weights in float */
        return multinomial_float(p, args, nargs, kw);
    /* (n_sample,) for one distribution, (n_dist, n_sample) for rows */
    shape[0] = p->ndim == 1 ? n_sample : n_dist;
    shape[1] = n_sample;
    if (!(out = cddp_tensor_new(CDDP_INT64, p->ndim, shape, 0)))
        return NULL;
    if (repl && n_sample > 1) {
        if (!(scratch = PyMem_Malloc((size_t)n_cat * sizeof(double)))) {
            Py_DECREF(out);
            return PyErr_NoMemory();
        }
        cddp_gen_acquire(g, 0);
        sample_with_replacement(g, p, n_dist, n_cat, n_sample, (int64_t *)cddp_data(out),
                                scratch);
        cddp_gen_release(g);
        PyMem_Free(scratch);
    } else if (sample_without_replacement(g, p, n_dist, n_cat, n_sample,
                                          (int64_t *)cddp_data(out)) < 0) {
        Py_CLEAR(out);
    }
    return (PyObject *)out;
}
