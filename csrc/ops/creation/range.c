/* ops/creation/range.c — arange, linspace, eye with torch's sizes, dtypes and roundings.
 *
 * Mirrors torch.arange / linspace / eye (aten/src/ATen/native/RangeFactories.cpp and
 * cpu/RangeFactoriesKernel.cpp):
 *   arange dtype: int64 when start, end and step are all integers, else the default dtype;
 *     length ceil((end - start) / step) (int64: (end - start + step - sign) / step on
 *     int64-truncated values, as torch).
 *   arange values: torch's vectorized loop (see arange_fill) — identical bits for ranges of
 *     up to 32768 elements; longer ones are split across threads by torch, which can move a
 *     value by one ulp.
 *   linspace: start + step * i below steps / 2, end - step * (steps - i - 1) above, in the
 *     output's precision (double for integer outputs).
 */
#include "ops/creation/creation.h"
#include <math.h>
#include <string.h>

/* ---- arange / linspace / eye ---------------------------------------------------------- */

static int64_t checked_len(double size_d)
{
    if (!(size_d >= 0 && size_d <= 9223372036854775807.0)) {
        PyErr_SetString(PyExc_RuntimeError, "invalid size, possible overflow?");
        return -1;
    }
    return (int64_t)size_d;
}

static double scalar_d(const cddp_scalar *s) { return s->kind == 2 ? s->d : (double)s->i; }

/* A scalar converted to int64 as Scalar::to<int64_t>() (floats truncate). */
static int scalar_i64(const cddp_scalar *s, int64_t *out)
{
    char buf[8];
    if (cddp_scalar_store(s, CDDP_INT64, buf) < 0)
        return -1;
    memcpy(out, buf, 8);
    return 0;
}

/* x rounded to float16 / bfloat16 (as a float), from a double as c10 does: via float */
static float round_to(cddp_dtype dt, double x)
{
    return cddp_round_to(dt, (float)x);
}

/* float16 / bfloat16 arange as torch's kernel: start and step in float (acc_type), blocks of
 * two 16-lane Vectorized<Half> whose base start + step * i is rounded to the dtype before the
 * lanes base + k * step are added in float, a scalar tail start + step * i; each value
 * rounded to the dtype once. */
static void arange_fill_reduced(TensorObject *t, int64_t n, float start, float step)
{
    const int64_t w = 16;
    char *d = cddp_data(t);
    int64_t i = 0;
    for (; i <= n - 2 * w; i += 2 * w) {
        for (int64_t v = i; v < i + 2 * w; v += w) {
            double base = round_to(t->dtype, (float)fma((double)step, (double)v, (double)start));
            for (int64_t k = 0; k < w; k++)
                cddp_store_double(t->dtype, d + 2 * (v + k),
                                  (float)fma((double)k, (double)step, base));
        }
    }
    for (; i < n; i++)
        cddp_store_double(t->dtype, d + 2 * i, (float)fma((double)step, (double)i, (double)start));
}

/* Floating arange values as torch's AVX2 kernel writes them (single-threaded, i.e. n <= 32768;
 * torch splits longer ranges across threads, which moves the chunk bases): blocks of two
 * 8-float (4-double) vectors, each lane base + k * step with base = start + step * block
 * start rounded to the dtype, then a scalar tail start + step * i. torch's compiler fuses
 * these multiply-adds; so does fma() here. */
static void arange_fill(TensorObject *t, int64_t n, double start, double step)
{
    int64_t w = t->dtype == CDDP_FLOAT32 ? 8 : 4, i = 0;
    if (cddp_is_reduced(t->dtype)) {
        arange_fill_reduced(t, n, (float)start, (float)step);
        return;
    }
    if (t->dtype == CDDP_FLOAT32) {
        float *d = (float *)cddp_data(t);
        for (; i <= n - 2 * w; i += 2 * w) {
            for (int64_t v = i; v < i + 2 * w; v += w) {
                float base = (float)fma(step, (double)v, start);
                for (int64_t k = 0; k < w; k++)
                    d[v + k] = (float)fma((double)k, step, (double)base);
            }
        }
        for (; i < n; i++)
            d[i] = (float)fma(step, (double)i, start);
    } else {
        double *d = (double *)cddp_data(t);
        for (; i <= n - 2 * w; i += 2 * w) {
            for (int64_t v = i; v < i + 2 * w; v += w) {
                double base = fma(step, (double)v, start);
                for (int64_t k = 0; k < w; k++)
                    d[v + k] = fma((double)k, step, base);
            }
        }
        for (; i < n; i++)
            d[i] = fma(step, (double)i, start);
    }
}

/* arange(end) / arange(start, end, step=1): torch's length and value rules (values computed
 * as start + i * step in int64 for int64, in double otherwise). */
PyObject *cddp_py_arange(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"start", "end", "step", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory", "out", NULL};
    PyObject *v[9] = {NULL};
    cddp_scalar sv[3] = {{1, 0, 0.0}, {1, 0, 0.0}, {1, 1, 1.0}};
    int has_dt, rg, meta, isfloat = 0;
    cddp_dtype dt;
    int64_t n;
    TensorObject *t;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "arange() takes at most 3 positional arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (nargs == 1)
        v[1] = args[0];
    for (Py_ssize_t i = 0; nargs > 1 && i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("arange", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[1]) {
        PyErr_SetString(PyExc_TypeError, "arange() missing required argument 'end'");
        return NULL;
    }
    for (int k = 0; k < 3; k++) {
        if (v[k] && cddp_scalar_from_py(v[k], &sv[k], "arange") < 0)
            return NULL;
        isfloat |= sv[k].kind == 2;
    }
    if (cddp_parse_dtype_opt(v[3], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[4], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[5], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = isfloat ? cddp_state()->default_dtype : CDDP_INT64;
    if (dt == CDDP_BOOL) {
        PyErr_SetString(PyExc_NotImplementedError, "\"arange_cpu\" not implemented for 'Bool'");
        return NULL;
    }
    if (dt == CDDP_INT64) {
        int64_t a, b, st;
        if (scalar_i64(&sv[0], &a) < 0 || scalar_i64(&sv[1], &b) < 0 ||
            scalar_i64(&sv[2], &st) < 0)
            return NULL;
        if (st == 0) {
            PyErr_SetString(PyExc_RuntimeError, "step must be nonzero");
            return NULL;
        }
        if (!((st > 0 && b >= a) || (st < 0 && b <= a))) {
            PyErr_SetString(PyExc_RuntimeError,
                            "upper bound and lower bound inconsistent with step sign");
            return NULL;
        }
        int64_t sgn = (st > 0) - (st < 0), span;
        if (__builtin_sub_overflow(b, a, &span) || __builtin_add_overflow(span, st - sgn, &span)) {
            PyErr_Format(PyExc_RuntimeError, "arange: the range %lld to %lld does not fit int64",
                         (long long)a, (long long)b);
            return NULL;
        }
        n = span / st;
        t = cddp_tensor_new(dt, 1, &n, 0);
        if (!t)
            return NULL;
        int64_t *d = (int64_t *)cddp_data(t);
        for (int64_t i = 0; i < n; i++)
            d[i] = a + st * i;
        return cddp_factory_finish(t, rg, meta);
    }
    double a = scalar_d(&sv[0]), b = scalar_d(&sv[1]), st = scalar_d(&sv[2]);
    if (st == 0) {
        PyErr_SetString(PyExc_RuntimeError, "step must be nonzero");
        return NULL;
    }
    if (!isfinite(a) || !isfinite(b)) {
        char ba[64], bb[64];
        PyOS_snprintf(ba, sizeof ba, "%g", a);
        PyOS_snprintf(bb, sizeof bb, "%g", b);
        PyErr_Format(PyExc_RuntimeError, "unsupported range: %s -> %s", ba, bb);
        return NULL;
    }
    if (!((st > 0 && b >= a) || (st < 0 && b <= a))) {
        PyErr_SetString(PyExc_RuntimeError,
                        "upper bound and lower bound inconsistent with step sign");
        return NULL;
    }
    if ((n = checked_len(ceil((b - a) / st))) < 0)
        return NULL;
    t = cddp_tensor_new(dt, 1, &n, 0);
    if (!t)
        return NULL;
    if (cddp_is_floating(dt)) {
        arange_fill(t, n, a, st);
    } else {
        /* int32: torch's size from the double range, values from int64-truncated start/step */
        int64_t ia, ist;
        char *p = cddp_data(t);
        if (scalar_i64(&sv[0], &ia) < 0 || scalar_i64(&sv[2], &ist) < 0) {
            Py_DECREF(t);
            return NULL;
        }
        if (dt == CDDP_INT32)
            for (int64_t i = 0; i < n; i++)
                ((int32_t *)p)[i] = (int32_t)(ia + ist * i);
        else                          /* uint8 / int8 / int16: int64 values, low bits kept */
            for (int64_t i = 0; i < n; i++)
                cddp_store_int64(dt, p + i * (int64_t)cddp_dtype_size[dt],
                                 (int64_t)((uint64_t)ia + (uint64_t)ist * (uint64_t)i));
    }
    return cddp_factory_finish(t, rg, meta);
}

/* float16 / bfloat16 linspace as torch's kernel with step_t = Half: start, end, the step
 * ((end - start) / (steps - 1)) and every product and sum rounded to the dtype in turn (c10's
 * Half operators), the index converted to the dtype too. */
static int linspace_reduced(TensorObject *t, const cddp_scalar *s0, const cddp_scalar *s1,
                            int64_t steps, int64_t half)
{
    cddp_dtype dt = t->dtype;
    double chk;                           /* the range checks of Scalar::to<Half>() */
    if (cddp_scalar_store(s0, dt, (char *)&chk) < 0 || cddp_scalar_store(s1, dt, (char *)&chk) < 0)
        return -1;
    float a = round_to(dt, scalar_d(s0)), b = round_to(dt, scalar_d(s1)), st = 0.0f;
    char *d = cddp_data(t);
    if (steps > 1)
        st = round_to(dt, round_to(dt, b - a) / round_to(dt, (double)(steps - 1)));
    for (int64_t i = 0; i < steps; i++) {
        float v = i < half ? a + round_to(dt, st * round_to(dt, (double)i))
                           : b - round_to(dt, st * round_to(dt, (double)(steps - i - 1)));
        cddp_store_double(dt, d + 2 * i, v);
    }
    return 0;
}

/* linspace(start, end, steps): first half counts up from start, second half down from end,
 * in the output's precision (double steps for integer outputs), as torch's kernel. */
PyObject *cddp_py_linspace(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"start", "end", "steps", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory", "out", NULL};
    PyObject *v[9] = {NULL};
    cddp_scalar s0, s1;
    int has_dt, rg, meta;
    cddp_dtype dt;
    int64_t steps, half;
    TensorObject *t;
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "linspace() takes at most 3 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("linspace", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !v[1] || !v[2]) {
        PyErr_SetString(PyExc_TypeError, "linspace() missing required argument(s): "
                        "linspace(start, end, steps)");
        return NULL;
    }
    if (cddp_scalar_from_py(v[0], &s0, "linspace") < 0 ||
        cddp_scalar_from_py(v[1], &s1, "linspace") < 0)
        return NULL;
    if (PyFloat_Check(v[2]) || !PyIndex_Check(v[2])) {
        PyErr_Format(PyExc_TypeError, "linspace(): argument 'steps' must be int, not %s",
                     Py_TYPE(v[2])->tp_name);
        return NULL;
    }
    steps = PyLong_AsLongLong(v[2]);
    if (steps == -1 && PyErr_Occurred())
        return NULL;
    if (steps < 0) {
        PyErr_SetString(PyExc_RuntimeError, "number of steps must be non-negative");
        return NULL;
    }
    if (cddp_parse_dtype_opt(v[3], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[4], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[5], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = cddp_state()->default_dtype;
    t = cddp_tensor_new(dt, 1, &steps, 0);
    if (!t)
        return NULL;
    half = steps == 1 ? 1 : steps / 2;      /* one step: just start, as torch */
    /* torch's serial kernel: start + step * i below halfway, end - step * (steps - i - 1)
     * above, step in the output precision (double for integers), multiply-adds fused */
    if (dt == CDDP_FLOAT32) {
        float a = (float)scalar_d(&s0), b = (float)scalar_d(&s1), *d = (float *)cddp_data(t);
        float st = steps > 1 ? (b - a) / (float)(steps - 1) : 0.0f;
        for (int64_t i = 0; i < steps; i++)
            d[i] = i < half ? fmaf(st, (float)i, a) : fmaf(-st, (float)(steps - i - 1), b);
    } else if (dt == CDDP_FLOAT64) {
        double a = scalar_d(&s0), b = scalar_d(&s1), *d = (double *)cddp_data(t);
        double st = steps > 1 ? (b - a) / (double)(steps - 1) : 0.0;
        for (int64_t i = 0; i < steps; i++)
            d[i] = i < half ? fma(st, (double)i, a) : fma(-st, (double)(steps - i - 1), b);
    } else if (cddp_is_reduced(dt)) {
        if (linspace_reduced(t, &s0, &s1, steps, half) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    } else {
        int64_t a, b;
        char *p = cddp_data(t);
        if (scalar_i64(&s0, &a) < 0 || scalar_i64(&s1, &b) < 0) {
            Py_DECREF(t);
            return NULL;
        }
        double st = steps > 1 ? ((double)b - (double)a) / (double)(steps - 1) : 0.0;
        for (int64_t i = 0; i < steps; i++) {
            double x = i < half ? fma(st, (double)i, (double)a)
                                : fma(-st, (double)(steps - i - 1), (double)b);
            cddp_scalar e = {2, 0, x};
            if (cddp_scalar_store(&e, dt, p + i * (int64_t)cddp_dtype_size[dt]) < 0) {
                Py_DECREF(t);
                return NULL;
            }
        }
    }
    return cddp_factory_finish(t, rg, meta);
}

/* eye(n, m=None): ones on the main diagonal of an (n, m) matrix */
PyObject *cddp_py_eye(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"n", "m", "dtype", "device", "requires_grad", "layout",
                                        "pin_memory", "out", NULL};
    PyObject *v[8] = {NULL};
    int64_t shape[2];
    int has_dt, rg, meta;
    cddp_dtype dt;
    TensorObject *t;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "eye() takes at most 2 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("eye", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "eye() missing required argument 'n'");
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        PyObject *o = v[k] && v[k] != Py_None ? v[k] : v[0];
        if (PyFloat_Check(o) || PyBool_Check(o) || !PyIndex_Check(o)) {
            PyErr_Format(PyExc_TypeError, "eye(): argument '%s' must be int, not %s",
                         k ? "m" : "n", Py_TYPE(o)->tp_name);
            return NULL;
        }
        shape[k] = PyLong_AsLongLong(o);
        if (shape[k] == -1 && PyErr_Occurred())
            return NULL;
        if (shape[k] < 0) {
            PyErr_Format(PyExc_RuntimeError, "%s must be greater or equal to 0, got %lld",
                         k ? "m" : "n", (long long)shape[k]);
            return NULL;
        }
    }
    if (cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[3], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = cddp_state()->default_dtype;
    t = cddp_tensor_new(dt, 2, shape, 1);
    if (!t)
        return NULL;
    {
        cddp_scalar one = {1, 1, 1.0};
        size_t isz = cddp_dtype_size[dt];
        int64_t k = shape[0] < shape[1] ? shape[0] : shape[1];
        for (int64_t i = 0; i < k; i++)
            cddp_scalar_store(&one, dt, cddp_data(t) + (i * shape[1] + i) * (int64_t)isz);
    }
    return cddp_factory_finish(t, rg, meta);
}
