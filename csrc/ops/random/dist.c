/* ops/random/dist.c — drawing into tensors exactly as torch's CPU kernels: the element loop, the
 * in-place methods, and the fills other files use.
 *
 * Mirrors Tensor.uniform_ / normal_ / random_ / bernoulli_ / exponential_ and
 * aten/src/ATen/native/cpu/DistributionTemplates.h:
 *   uniform float32: 24 low bits of one random(); float64: 53 low bits of random64();
 *     value = u * (to - from) + from (fused, as torch's compiler emits it)
 *   normal, contiguous and numel >= 16: normal_fill (ops/random/normal.c)
 *   normal otherwise: normal_distribution<double> (one Box-Muller pair per two values, the
 *     second cached in the generator)
 *   random_(from, to): (draw % range) + from, random64 when range >= 2**32 (64-bit dtypes);
 *   random_(): draw % (max + 1) (floats: % (2**mantissa + 1)); bool: draw & 1
 *   bernoulli_(p): float64 uniform < p; tensor p: uniform of p's precision < p
 * Elements are visited in memory order (TensorIterator's order for a single output).
 */
#include "ops/random/random.h"
#include "ops/creation/creation.h"
#include <math.h>
#include <string.h>

#define NOGIL_NUMEL 65536

/* torch's dtype names, used in its NotImplementedError messages */
#define cpp_name cddp_dtype_torch_name

/* ---- the strided draw loop ------------------------------------------------------------ */

#define store_i64 cddp_store_int64

/* float16 / bfloat16 uniform_(from, to): torch draws the float32 value (24-bit uniform, fused
 * multiply-add with float from/to), rounds it to the dtype, and keeps [from, to) half-open:
 * a value that rounds up to `to` becomes `from`. */
static inline void uniform_reduced(cddp_dtype dt, char *p, float u, double from, double to)
{
    float f = (float)from, t = (float)to;
    float v = cddp_round_to(dt, fmaf(u, t - f, f));
    if (v >= cddp_round_to(dt, t))
        v = cddp_round_to(dt, f);
    cddp_store_double(dt, p, v);
}

/* random_() without bounds: torch's uniform_int, draw % (max + 1) for integers,
 * % (2^digits + 1) for floating dtypes, draw & 1 for bool */
static inline void store_default(cddp_dtype dt, char *p, uint64_t r)
{
    switch (dt) {
    case CDDP_BOOL: *(uint8_t *)p = (uint8_t)(r & 1); break;
    case CDDP_INT64: *(int64_t *)p = (int64_t)(r % (1ULL << 63)); break;
    case CDDP_INT32: *(int32_t *)p = (int32_t)(r % (1ULL << 31)); break;
    case CDDP_FLOAT32: *(float *)p = (float)(r % ((1ULL << 24) + 1)); break;
    case CDDP_FLOAT64: *(double *)p = (double)(r % ((1ULL << 53) + 1)); break;
    case CDDP_FLOAT16: store_i64(dt, p, (int64_t)(r % ((1ULL << 11) + 1))); break;
    case CDDP_BFLOAT16: store_i64(dt, p, (int64_t)(r % ((1ULL << 8) + 1))); break;
    case CDDP_UINT8: store_i64(dt, p, (int64_t)(r % 256)); break;
    case CDDP_INT8: store_i64(dt, p, (int64_t)(r % 128)); break;
    default: store_i64(dt, p, (int64_t)(r % 32768)); break;     /* int16 */
    }
}

static void draw_loop(char **ptrs, const int64_t *strides, int64_t n, void *vctx)
{
    cddp_draw *c = vctx;
    GeneratorObject *g = c->g;
    char *p = ptrs[0];
    int64_t s = strides[0];
    int is64 = c->dt == CDDP_FLOAT64 || c->dt == CDDP_INT64;
    for (int64_t i = 0; i < n; i++, p += s) {
        switch (c->kind) {
        case CDDP_D_UNIFORM:
            /* torch's x * (to - from) + from is compiled to a fused multiply-add */
            if (c->dt == CDDP_FLOAT32) {
                float from = (float)c->a, to = (float)c->b;
                *(float *)p = fmaf(cddp_uniform_f32(g), to - from, from);
            } else if (cddp_is_reduced(c->dt)) {
                uniform_reduced(c->dt, p, cddp_uniform_f32(g), c->a, c->b);
            } else {
                *(double *)p = fma(cddp_uniform_f64(g), c->b - c->a, c->a);
            }
            break;
        case CDDP_D_NORMAL: {
            cddp_store_double(c->dt, p, cddp_normal_f64(g, c->a, c->b));   /* float16: via float */
            break;
        }
        case CDDP_D_FROM_TO: {
            /* torch 2.13: a 64-bit draw from a range of 2^28 on (less bias), any dtype */
            uint64_t r = c->range >= (1ULL << 28) ? cddp_gen_random64(g) : cddp_gen_random(g);
            store_i64(c->dt, p, (int64_t)(r % c->range + (uint64_t)c->base));
            break;
        }
        case CDDP_D_FULL64:
            store_i64(c->dt, p, (int64_t)cddp_gen_random64(g));
            break;
        case CDDP_D_DEFAULT: {
            store_default(c->dt, p, is64 ? cddp_gen_random64(g) : cddp_gen_random(g));
            break;
        }
        case CDDP_D_BERNOULLI:
            store_i64(c->dt, p, cddp_uniform_f64(g) < c->a);
            break;
        default: /* CDDP_D_EXPONENTIAL: -1/lambda * log1p(-u), torch's CPU formula */
        {
            cddp_store_double(c->dt, p, -1.0 / c->a * log1p(-cddp_uniform_f64(g)));
            break;
        }
        }
    }
}

/* Draw every element of t from c (t's layout any; c->g locked here). 0 / -1. */
int cddp_draw_into(TensorObject *t, cddp_draw *c)
{
    int64_t bst[1][CDDP_MAX_DIMS];
    char *ptr = cddp_data(t);
    int64_t n = cddp_numel(t);
    int fast_normal = c->kind == CDDP_D_NORMAL && n >= 16 && cddp_is_contiguous(t);
    GeneratorObject *g = c->g;
    if (n == 0 || cddp_is_meta(t))     /* no values to draw: torch's meta kernels draw none */
        return 0;
    /* drawn in memory order, as torch's TensorIterator walks t (not for an expanded t) */
    if (!fast_normal && cddp_check_writable(t) < 0)
        return -1;
    for (int d = 0; d < t->ndim; d++)
        bst[0][d] = t->strides[d] * (int64_t)cddp_dtype_size[t->dtype];
    Py_INCREF(g);
    if (n >= NOGIL_NUMEL) {
        Py_BEGIN_ALLOW_THREADS
        cddp_gen_acquire(g, 1);
        if (fast_normal)
            cddp_normal_fill_contig(g, t, n, c->a, c->b);
        else
            cddp_iterate_ordered(1, t->ndim, t->shape, &ptr,
                                 (const int64_t (*)[CDDP_MAX_DIMS])bst, draw_loop, c);
        cddp_gen_release(g);
        Py_END_ALLOW_THREADS
    } else {
        cddp_gen_acquire(g, 0);
        if (fast_normal)
            cddp_normal_fill_contig(g, t, n, c->a, c->b);
        else
            cddp_iterate_ordered(1, t->ndim, t->shape, &ptr,
                                 (const int64_t (*)[CDDP_MAX_DIMS])bst, draw_loop, c);
        cddp_gen_release(g);
    }
    Py_DECREF(g);
    return 0;
}

/* ---- argument checks shared by the in-place methods and the factories ------------------ */

int cddp_check_floating(cddp_dtype dt, const char *kernel)
{
    if (cddp_is_floating(dt))
        return 0;
    PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for '%s'", kernel,
                 cpp_name[dt]);
    return -1;
}

int cddp_draw_uniform(cddp_draw *c, TensorObject *t, double from, double to)
{
    /* torch's check_uniform_bounds: both ends and their span finite in t's dtype */
    double top = cddp_float_max(t->dtype);
    if (cddp_check_floating(t->dtype, "check_uniform_bounds") < 0)
        return -1;
    if (!(from >= -top && from <= top) || !(to >= -top && to <= top)) {
        PyErr_Format(PyExc_RuntimeError, "%s is out of bounds for %s",
                     from >= -top && from <= top ? "to" : "from", cddp_dtype_cpp_name[t->dtype]);
        return -1;
    }
    if (from <= to && !(to - from <= top)) {
        char bf[64], bt[64];
        PyOS_snprintf(bf, sizeof bf, "%g", from);
        PyOS_snprintf(bt, sizeof bt, "%g", to);
        PyErr_Format(PyExc_RuntimeError, "uniform_ expects to-from <= std::numeric_limits<%s>"
                     "::max(), but found to=%s and from=%s which result in to-from to exceed "
                     "the limit", cpp_name[t->dtype], bt, bf);
        return -1;
    }
    if (!(from <= to)) {
        char bf[64], bt[64];
        PyOS_snprintf(bf, sizeof bf, "%g", from);
        PyOS_snprintf(bt, sizeof bt, "%g", to);
        PyErr_Format(PyExc_RuntimeError,
                     "uniform_ expects to return a [from, to) range, but found from=%s > to=%s",
                     bf, bt);
        return -1;
    }
    c->kind = CDDP_D_UNIFORM;
    c->dt = t->dtype;
    c->a = from;
    c->b = to;
    return 0;
}

int cddp_draw_normal(cddp_draw *c, TensorObject *t, double mean, double std)
{
    if (cddp_check_floating(t->dtype, "normal_kernel_cpu") < 0)
        return -1;
    if (!(std >= 0.0)) {
        char buf[64];
        PyOS_snprintf(buf, sizeof buf, "%g", std);
        PyErr_Format(PyExc_RuntimeError, "normal expects std >= 0.0, but found std %s", buf);
        return -1;
    }
    c->kind = CDDP_D_NORMAL;
    c->dt = t->dtype;
    c->a = mean;
    c->b = std;
    return 0;
}

/* v through the floating dtype dt and back to int64 (static_cast<int64_t>(scalar_t(v))) */
static int64_t through_dtype(cddp_dtype dt, int64_t v)
{
    double b;
    cddp_store_int64(dt, &b, v);
    return cddp_double_to_i64(cddp_load_double(dt, &b));
}

/* torch's update_from / update_to for floating dtypes: a bound whose neighbour rounds past it
 * in the dtype moves inward by the dtype's spacing there, so every drawn value stays in range.
 * dir = +1 for from, -1 for to. */
static int64_t update_bound(cddp_dtype dt, int64_t v, int dir, int digits)
{
    int64_t near = through_dtype(dt, v + dir), a;
    int n = 0;
    if (dir > 0 ? near >= v : near < v)
        return v;
    for (a = v + dir < 0 ? -(v + dir) : v + dir; a >>= 1;)
        n++;
    if (n - digits + 1 < 0 || n - digits + 1 > 62)
        return v;
    return dir > 0 ? near + (1LL << (n - digits + 1)) : near - (1LL << (n - digits + 1));
}

/* torch's check_from_to_in_range + "from < to" for random_(from, to) */
int cddp_draw_from_to(cddp_draw *c, TensorObject *t, int64_t from, int64_t to)
{
    static const char *lname[CDDP_NDTYPES] = {"float", "double", "long", "int", "bool",
                                              "c10::Half", "c10::BFloat16", "unsigned char",
                                              "signed char", "short int"};
    int64_t lo, hi;
    int digits = 0;
    if (from >= to) {
        PyErr_Format(PyExc_RuntimeError,
                     "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                     (long long)from, (long long)to);
        return -1;
    }
    switch (t->dtype) {
    case CDDP_FLOAT32: digits = 24; break;
    case CDDP_FLOAT64: digits = 53; break;
    case CDDP_FLOAT16: digits = 11; break;
    case CDDP_BFLOAT16: digits = 8; break;
    default: break;
    }
    if (digits) {
        from = update_bound(t->dtype, from, 1, digits);
        to = update_bound(t->dtype, to, -1, digits);
        if (from >= to) {
            PyErr_Format(PyExc_RuntimeError,
                         "random_ expects 'from' casted to dtype to be less than 'to' casted to "
                         "dtype, but got from=%lld >= to=%lld", (long long)from, (long long)to);
            return -1;
        }
    }
    lo = digits ? -(1LL << digits) : INT64_MIN;
    hi = digits ? 1LL << digits : INT64_MAX;
    switch (t->dtype) {
    case CDDP_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
    case CDDP_BOOL: lo = 0; hi = 1; break;
    case CDDP_UINT8: lo = 0; hi = 255; break;
    case CDDP_INT8: lo = -128; hi = 127; break;
    case CDDP_INT16: lo = -32768; hi = 32767; break;
    default: break;
    }
    /* float16: a bound beyond the dtype's range at all is an error before the warning */
    if (t->dtype == CDDP_FLOAT16 && (from < -65504 || from > 65504 || to - 1 < -65504 ||
                                     to - 1 > 65504)) {
        PyErr_Format(PyExc_RuntimeError, "%s is out of bounds for c10::Half",
                     from < -65504 || from > 65504 ? "from" : "to - 1");
        return -1;
    }
    if (from < lo || from > hi || to - 1 < lo || to - 1 > hi) {
        const char *which = (from < lo || from > hi) ? "from" : "to - 1";
        if (cddp_is_floating(t->dtype)) {
            /* torch only warns here (precision), then draws anyway */
            if (PyErr_WarnFormat(PyExc_UserWarning, 1,
                                 "%s is out of bounds [-(2^%d), 2^%d]. Due to precision "
                                 "limitations %s can support discrete uniform distribution "
                                 "only within this range.", which, digits, digits,
                                 lname[t->dtype]) < 0)
                return -1;
        } else {
            PyErr_Format(PyExc_RuntimeError, "%s is out of bounds for %s", which,
                         lname[t->dtype]);
            return -1;
        }
    }
    c->kind = CDDP_D_FROM_TO;
    c->dt = t->dtype;
    c->range = (uint64_t)to - (uint64_t)from;
    c->base = from;
    return 0;
}

/* ---- in-place methods ----------------------------------------------------------------- */

/* In-place random fills: leaf check, draw, version bump, and on a non-leaf a history whose
 * gradient is zero (torch's UniformBackward0 / NormalBackward0 ...). */
static PyObject *finish_inplace(TensorObject *t, cddp_draw *c, const char *node_name)
{
    if (cddp_check_inplace(t) < 0 || cddp_draw_into(t, c) < 0)
        return NULL;
    cddp_bump_version(t);
    if (cddp_inplace_zero_history(t, node_name) < 0)
        return NULL;
    return Py_NewRef(t);
}

/* positional/keyword pair -> double (default d); TypeError naming the argument */
static int arg_double(PyObject *o, double d, double *out, const char *fname, const char *arg)
{
    if (!o) {
        *out = d;
        return 0;
    }
    if (cddp_tensor_check(o) || PyBool_Check(o) || !PyNumber_Check(o) || PyComplex_Check(o)) {
        if (!(cddp_tensor_check(o) && cddp_numel((TensorObject *)o) == 1)) {
            PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be float, not %s", fname, arg,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    }
    *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

int cddp_arg_int64(PyObject *o, int64_t *out, const char *fname, const char *arg)
{
    if (PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %s", fname, arg,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i)
        return -1;
    *out = PyLong_AsLongLong(i);
    Py_DECREF(i);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Two optional positional-or-keyword arguments then keyword-only `generator`. */
static int parse_two(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kw,
                     const char *const *names, PyObject **v)
{
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 2 positional arguments (%zd given)",
                     fname, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (v[i] != args[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

PyObject *cddp_tensor_uniform_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    static const char *const names[] = {"from", "to", "generator", "a", "b", NULL};
    PyObject *v[5] = {NULL, NULL, NULL, NULL, NULL};
    double from, to;
    cddp_draw c = {0};
    if (parse_two("uniform_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (arg_double(v[0] ? v[0] : v[3], 0.0, &from, "uniform_", "from") < 0 ||
        arg_double(v[1] ? v[1] : v[4], 1.0, &to, "uniform_", "to") < 0)
        return NULL;
    if (!(c.g = cddp_generator_get(v[2], "uniform_")) ||
        cddp_draw_uniform(&c, (TensorObject *)self, from, to) < 0)
        return NULL;
    return finish_inplace((TensorObject *)self, &c, "UniformBackward0");
}

PyObject *cddp_tensor_normal_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"mean", "std", "generator", NULL};
    PyObject *v[3] = {NULL, NULL, NULL};
    double mean, std;
    cddp_draw c = {0};
    if (parse_two("normal_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (arg_double(v[0], 0.0, &mean, "normal_", "mean") < 0 ||
        arg_double(v[1], 1.0, &std, "normal_", "std") < 0)
        return NULL;
    if (!(c.g = cddp_generator_get(v[2], "normal_")) ||
        cddp_draw_normal(&c, (TensorObject *)self, mean, std) < 0)
        return NULL;
    return finish_inplace((TensorObject *)self, &c, "NormalBackward0");
}

/* random_(), random_(to), random_(from, to) — torch's three overloads */
PyObject *cddp_tensor_random_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"from", "to", "generator", NULL};
    PyObject *v[3] = {NULL, NULL, NULL};
    TensorObject *t = (TensorObject *)self;
    cddp_draw c = {0};
    int64_t from = 0, to = 0;
    if (parse_two("random_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!(c.g = cddp_generator_get(v[2], "random_")))
        return NULL;
    if (nargs == 1 && !v[1]) {                 /* random_(to) */
        v[1] = v[0];
        v[0] = NULL;
    }
    if (v[0] && cddp_arg_int64(v[0], &from, "random_", "from") < 0)
        return NULL;
    if (v[1] && v[1] != Py_None && cddp_arg_int64(v[1], &to, "random_", "to") < 0)
        return NULL;
    if (v[1] && v[1] != Py_None) {
        if (cddp_draw_from_to(&c, t, from, to) < 0)
            return NULL;
    } else if (v[0] && from == INT64_MIN) {    /* the full 64-bit range */
        if (t->dtype == CDDP_INT32 || t->dtype == CDDP_BOOL || (cddp_is_narrow(t->dtype) &&
                                                               !cddp_is_reduced(t->dtype))) {
            PyErr_Format(PyExc_RuntimeError, "from is out of bounds for %s",
                         t->dtype == CDDP_INT32 || t->dtype == CDDP_BOOL
                             ? "int" : cddp_dtype_c_name[t->dtype]);
            return NULL;
        }
        c.kind = CDDP_D_FULL64;
        c.dt = t->dtype;
    } else if (v[0]) {                         /* random_(from, None): [from, max] */
        int64_t hi = t->dtype == CDDP_FLOAT32 ? (1LL << 24) : t->dtype == CDDP_FLOAT64 ?
                     (1LL << 53) : t->dtype == CDDP_INT32 ? INT32_MAX :
                     t->dtype == CDDP_BOOL ? 1 : t->dtype == CDDP_FLOAT16 ? (1LL << 11) :
                     t->dtype == CDDP_BFLOAT16 ? (1LL << 8) : t->dtype == CDDP_UINT8 ? 255 :
                     t->dtype == CDDP_INT8 ? 127 : t->dtype == CDDP_INT16 ? 32767 : INT64_MAX;
        if (from > hi) {
            PyErr_Format(PyExc_RuntimeError, "random_ expects 'from' casted to dtype to be "
                         "less than or equal to 'to_inc' casted to dtype, but got from=%lld > "
                         "to_inc=%lld", (long long)from, (long long)hi);
            return NULL;
        }
        c.kind = CDDP_D_FROM_TO;
        c.dt = t->dtype;
        c.range = (uint64_t)hi - (uint64_t)from + 1;
        c.base = from;
    } else {
        c.kind = CDDP_D_DEFAULT;
        c.dt = t->dtype;
    }
    return finish_inplace(t, &c, "RandomBackward0");
}

/* Every element of t = (u < p) with u a float64 uniform; p a number, or a tensor of
 * probabilities broadcast to t. No autograd, no version bump. 0 / -1. */
int cddp_random_bernoulli_fill(TensorObject *t, PyObject *p_obj, GeneratorObject *g)
{
    cddp_draw c = {0};
    double p = 0.5;
    c.g = g;
    if (cddp_is_meta(t))
        return 0;
    if (p_obj && cddp_tensor_check(p_obj)) {
        /* per-element probabilities: bernoulli_distribution<float> for float32 p (24-bit
         * uniforms), <double> for float64 p; uniforms drawn in t's (contiguous) order */
        TensorObject *pt = (TensorObject *)p_obj, *u = NULL, *pb = NULL, *pd = NULL, *ud = NULL;
        int64_t pst[CDDP_MAX_DIMS], n = cddp_numel(t);
        int rc = -1;
        if (!cddp_is_floating(pt->dtype)) {
            PyErr_Format(PyExc_NotImplementedError,
                         "\"bernoulli_tensor_cpu_p_\" not implemented for '%s'",
                         cpp_name[pt->dtype]);
            return -1;
        }
        if (cddp_broadcast_strides(pt, t->ndim, t->shape, pst) < 0)
            return -1;
        if (!(pb = cddp_tensor_alias(pt, t->ndim, t->shape, pst, pt->offset)) ||
            !(pd = cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0)) ||
            cddp_copy_into(pd, pb) < 0)
            goto pdone;
        const double *pv = (const double *)cddp_data(pd);
        for (int64_t i = 0; i < n; i++) {
            if (!(pv[i] >= 0 && pv[i] <= 1)) {
                PyErr_SetString(PyExc_RuntimeError,
                                "Expected p_in >= 0 && p_in <= 1 to be true, but got false.");
                goto pdone;
            }
        }
        c.kind = CDDP_D_UNIFORM;
        c.dt = pt->dtype == CDDP_FLOAT64 ? CDDP_FLOAT64 : CDDP_FLOAT32;  /* float16 p: float */
        c.a = 0.0;
        c.b = 1.0;
        if (!(u = cddp_tensor_new(c.dt, t->ndim, t->shape, 0)) || cddp_draw_into(u, &c) < 0 ||
            !(ud = cddp_tensor_cast_raw(u, CDDP_FLOAT64)))
            goto pdone;
        {
            double *uv = (double *)cddp_data(ud);     /* exact: float32 widens losslessly */
            if (ud == u) {
                Py_SETREF(ud, cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0));
                if (!ud)
                    goto pdone;
                memcpy(cddp_data(ud), cddp_data(u), (size_t)n * sizeof(double));
                uv = (double *)cddp_data(ud);
            }
            for (int64_t i = 0; i < n; i++)
                uv[i] = uv[i] < pv[i];
        }
        rc = cddp_copy_into(t, ud);
pdone:
        Py_XDECREF(pb);
        Py_XDECREF(pd);
        Py_XDECREF(u);
        Py_XDECREF(ud);
        return rc;
    }
    if (p_obj && arg_double(p_obj, 0.5, &p, "bernoulli", "p") < 0)
        return -1;
    if (!(p >= 0 && p <= 1)) {
        char buf[64];
        PyOS_snprintf(buf, sizeof buf, "%g", p);
        PyErr_Format(PyExc_RuntimeError, "bernoulli_ expects p to be in [0, 1], but got p=%s",
                     buf);
        return -1;
    }
    c.kind = CDDP_D_BERNOULLI;
    c.dt = t->dtype;
    c.a = p;
    return cddp_draw_into(t, &c);
}

/* bernoulli_(p=0.5, *, generator=None): p a float or a tensor of probabilities */
PyObject *cddp_tensor_bernoulli_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kw)
{
    static const char *const names[] = {"p", "generator", NULL};
    PyObject *v[2] = {NULL, NULL};
    TensorObject *t = (TensorObject *)self;
    GeneratorObject *g;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "bernoulli_() takes at most 1 positional argument");
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("bernoulli_", args, nargs, kw, names, v) < 0 ||
        !(g = cddp_generator_get(v[1], "bernoulli_")) || cddp_check_inplace(t) < 0 ||
        cddp_random_bernoulli_fill(t, v[0], g) < 0)
        return NULL;
    cddp_bump_version(t);
    if (cddp_inplace_zero_history(t, "BernoulliBackward0") < 0)
        return NULL;
    return Py_NewRef(self);
}

PyObject *cddp_tensor_exponential_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kw)
{
    static const char *const names[] = {"lambd", "generator", NULL};
    PyObject *v[2] = {NULL, NULL};
    TensorObject *t = (TensorObject *)self;
    cddp_draw c = {0};
    double lambd;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "exponential_() takes at most 1 positional argument");
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("exponential_", args, nargs, kw, names, v) < 0 ||
        arg_double(v[0], 1.0, &lambd, "exponential_", "lambd") < 0 ||
        !(c.g = cddp_generator_get(v[1], "exponential_")))
        return NULL;
    if (!cddp_is_floating(t->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "Exponential distribution is a continuous probability "
                     "distribution. dtype must be a floating point but you specified %s",
                     cddp_dtype_torch_name[t->dtype]);
        return NULL;
    }
    if (!(lambd > 0)) {
        PyErr_Format(PyExc_RuntimeError,
                     "exponential_ expects lambda > 0.0, but found lambda=%R", v[0]);
        return NULL;
    }
    c.kind = CDDP_D_EXPONENTIAL;
    c.dt = t->dtype;
    c.a = lambd;
    return finish_inplace(t, &c, "ExponentialBackward0");
}

/* ---- fills for other files ------------------------------------------------------------ */

int cddp_random_uniform_fill(TensorObject *t, GeneratorObject *g, double from, double to)
{
    cddp_draw c = {0};
    c.g = g;
    if (cddp_draw_uniform(&c, t, from, to) < 0)
        return -1;
    return cddp_draw_into(t, &c);
}

int cddp_random_normal_fill(TensorObject *t, GeneratorObject *g, double mean, double std)
{
    cddp_draw c = {0};
    c.g = g;
    if (cddp_draw_normal(&c, t, mean, std) < 0)
        return -1;
    return cddp_draw_into(t, &c);
}

int cddp_random_exponential_fill(TensorObject *t, GeneratorObject *g, double lambd)
{
    cddp_draw c = {0};
    c.g = g;
    c.kind = CDDP_D_EXPONENTIAL;
    c.dt = t->dtype;
    c.a = lambd;
    if (cddp_check_floating(t->dtype, "exponential_cpu") < 0)
        return -1;
    return cddp_draw_into(t, &c);
}
