/* ops/random/random.h — private to ops/random/random.c / ops/random/dist.c / ops/creation/creation.c: the CPU Generator object and
 * its mt19937 engine, bit-compatible with torch's CPUGeneratorImpl.
 *
 *   class Generator:                  # cddp.Generator(device='cpu')
 *       engine: mt19937               # 624 x uint32 state, seeded like at::mt19937(seed)
 *       seed: uint64                  # initial_seed()
 *       next_double_normal: optional  # Box-Muller cache of normal_distribution<double>
 *       next_float_normal: optional   # (unused by CPU kernels, kept for state round trips)
 *
 * random() = one engine draw (uint32); random64() = (first draw << 32) | second draw, as
 * torch's CPUGeneratorImpl::random64.
 */
#ifndef CDDP_RANDOM_H
#define CDDP_RANDOM_H

#include "core/cddp.h"
#include <math.h>
#include <pythread.h>

#define CDDP_MT_N 624
#define CDDP_MT_M 397

typedef struct {
    PyObject_HEAD
    uint64_t seed;
    int left;                        /* draws left before the next twist, 1..624 */
    uint32_t next;                   /* index of the next state word, 0..624 */
    uint32_t state[CDDP_MT_N];
    char has_next_double, has_next_float;
    double next_double;
    float next_float;
    int device;                      /* -1 cpu; >= 0 a cuda ordinal (numbers come from the CPU) */
    PyThread_type_lock lock;         /* held while drawing; fills may run without the GIL */
} GeneratorObject;

/* Re-seed as at::mt19937(seed) and drop the normal caches. */
void cddp_gen_set_seed(GeneratorObject *g, uint64_t seed);
/* The twist: refill state[] (torch's mt19937_engine::next_state). */
void cddp_mt_reload(GeneratorObject *g);

static inline uint32_t cddp_gen_random(GeneratorObject *g)
{
    uint32_t y;
    if (--g->left == 0)
        cddp_mt_reload(g);
    y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static inline uint64_t cddp_gen_random64(GeneratorObject *g)
{
    uint64_t hi = cddp_gen_random(g);
    uint64_t lo = cddp_gen_random(g);
    return (hi << 32) | lo;
}

/* The generator an op should draw from: `o` when it is a Generator, the default generator
 * when o is NULL or None; TypeError naming `fname` otherwise. Borrowed reference. */
GeneratorObject *cddp_generator_get(PyObject *o, const char *fname);

/* Take g's lock. Small jobs keep the GIL (and only drop it if the lock is contended); big
 * ones (nogil != 0) must call this after Py_BEGIN_ALLOW_THREADS. */
void cddp_gen_acquire(GeneratorObject *g, int nogil);
static inline void cddp_gen_release(GeneratorObject *g) { PyThread_release_lock(g->lock); }

/* torch's uniform_real_distribution<float/double>(0, 1): the low 24 / 53 bits of a draw */
static inline float cddp_uniform_f32(GeneratorObject *g)
{
    return (float)(cddp_gen_random(g) & 0xFFFFFFu) * (1.0f / 16777216.0f);
}

static inline double cddp_uniform_f64(GeneratorObject *g)
{
    return (double)(cddp_gen_random64(g) & 0x1FFFFFFFFFFFFFULL) * (1.0 / 9007199254740992.0);
}

/* torch's normal_distribution<double>(mean, std), with the generator's Box-Muller cache (g
 * locked by the caller) */
static inline double cddp_normal_f64(GeneratorObject *g, double mean, double std)
{
    const double pi = 3.14159265358979323846;          /* c10::pi<double> */
    double u1, u2, r, theta;
    if (g->has_next_double) {
        g->has_next_double = 0;
        return fma(g->next_double, std, mean);
    }
    u1 = cddp_uniform_f64(g);
    u2 = cddp_uniform_f64(g);
    r = sqrt(-2.0 * log1p(-u2));
    theta = 2.0 * pi * u1;
    g->next_double = r * sin(theta);
    g->has_next_double = 1;
    return fma(r * cos(theta), std, mean);     /* torch's val * std + mean, fused */
}

/* ---- draws into tensors (ops/random/dist.c) ----------------------------------------------- */

enum { CDDP_D_UNIFORM, CDDP_D_NORMAL, CDDP_D_FROM_TO, CDDP_D_FULL64, CDDP_D_DEFAULT,
       CDDP_D_BERNOULLI, CDDP_D_EXPONENTIAL };

typedef struct {
    GeneratorObject *g;
    int kind;
    cddp_dtype dt;
    double a, b;               /* uniform from/to, normal mean/std, bernoulli p, lambda */
    uint64_t range;            /* random_(from, to): to - from, and base = from */
    int64_t base;
} cddp_draw;

/* Validate and fill c for dtype dt (torch's checks and messages). 0 / -1. */
int cddp_draw_uniform(cddp_draw *c, TensorObject *t, double from, double to);
int cddp_draw_normal(cddp_draw *c, TensorObject *t, double mean, double std);
int cddp_draw_from_to(cddp_draw *c, TensorObject *t, int64_t from, int64_t to);
/* Draw every element of t (memory order; contiguous float normals via normal_fill). */
int cddp_draw_into(TensorObject *t, cddp_draw *c);
/* NotImplementedError "\"kernel\" not implemented for 'Long'" unless dt is floating. */
int cddp_check_floating(cddp_dtype dt, const char *kernel);
/* An int argument (not float/bool-like floats); TypeError naming fname/arg. */
int cddp_arg_int64(PyObject *o, int64_t *out, const char *fname, const char *arg);
/* ops/random/normal.c: torch's normal_fill on a contiguous float tensor of n >= 16 elements
 * (g locked by the caller). */
void cddp_normal_fill_contig(GeneratorObject *g, TensorObject *t, int64_t n, double mean,
                             double std);

/* Exported for other files (DistributedSampler): torch.randperm(n, generator=g) into out[0..n).
 * generator_or_NULL: a cddp.Generator, None or NULL (the default generator). 0 / -1. */
int cddp_randperm_fill(PyObject *generator_or_NULL, int64_t n, int64_t *out);

/* Draw into every element of t (any layout) as t.uniform_(from, to) / t.normal_(mean, std) /
 * t.exponential_(lambd) would, without autograd or version bumps. 0 / -1. */
int cddp_random_uniform_fill(TensorObject *t, GeneratorObject *g, double from, double to);
int cddp_random_normal_fill(TensorObject *t, GeneratorObject *g, double mean, double std);
int cddp_random_exponential_fill(TensorObject *t, GeneratorObject *g, double lambd);
/* t = (uniform < p): p_obj NULL (0.5), a number, or a probability tensor broadcast to t. */
int cddp_random_bernoulli_fill(TensorObject *t, PyObject *p_obj, GeneratorObject *g);

/* Tensor methods and module functions of ops/random/dist.c, listed in ops/creation/creation.c's tables. */
PyObject *cddp_tensor_uniform_(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_tensor_normal_(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_tensor_random_(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_tensor_bernoulli_(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_tensor_exponential_(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_rand(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_randn(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_randint(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_randperm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_rand_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_randn_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_randint_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_normal(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_bernoulli(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_multinomial(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
/* ops/random/rejection.c */
PyObject *cddp_py_gamma_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_poisson_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);
PyObject *cddp_py_binomial_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw);

#endif
