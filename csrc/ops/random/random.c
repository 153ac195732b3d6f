/* ops/random/random.c — cddp.Generator: torch's CPU random engine (mt19937), seeding, state, randperm.
 *
 * Mirrors torch.Generator / torch.manual_seed / seed / initial_seed / get_rng_state /
 * set_rng_state / default_generator, and at::mt19937 + CPUGeneratorImpl bit for bit: the same
 * seed gives the same stream of 32-bit draws, so randperm/rand/randint/randn can reproduce
 * torch's values (the distributions live in ops/random/dist.c).
 *
 *   g = cddp.Generator()            # seed 67280421310721, as torch.Generator()
 *   g.manual_seed(s) -> g           # s in [-2**63, 2**64): negative seeds wrap to uint64
 *   g.get_state() -> int64 tensor   # see STATE LAYOUT below (torch returns 5056 uint8; cddp
 *   g.set_state(t) -> g             #   has no uint8 dtype, so its state is its own format)
 *
 * STATE LAYOUT (int64 tensor of CDDP_STATE_LEN entries):
 *   [0] format version (1)  [1] seed (uint64 bits)  [2] left  [3] next
 *   [4 .. 627] the 624 mt19937 words   [628] has float normal  [629] its float bits
 *   [630] has double normal  [631] its double bits
 */
#include "ops/random/random.h"
#include "module.h"
#include "ops/creation/creation.h"
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define CDDP_DEFAULT_SEED 67280421310721ULL
#define CDDP_STATE_LEN (4 + CDDP_MT_N + 4)

/* ---- engine --------------------------------------------------------------------------- */

void cddp_gen_set_seed(GeneratorObject *g, uint64_t seed)
{
    g->seed = seed;
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < CDDP_MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + j;
    g->left = 1;
    g->next = 0;
    g->has_next_double = g->has_next_float = 0;
}

static inline uint32_t mt_twist(uint32_t u, uint32_t v)
{
    uint32_t mixed = (u & 0x80000000u) | (v & 0x7fffffffu);
    return (mixed >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

void cddp_mt_reload(GeneratorObject *g)
{
    uint32_t *s = g->state;
    int k = 0;
    g->left = CDDP_MT_N;
    g->next = 0;
    for (; k < CDDP_MT_N - CDDP_MT_M; k++)
        s[k] = s[k + CDDP_MT_M] ^ mt_twist(s[k], s[k + 1]);
    for (; k < CDDP_MT_N - 1; k++)
        s[k] = s[k + CDDP_MT_M - CDDP_MT_N] ^ mt_twist(s[k], s[k + 1]);
    s[k] = s[k + CDDP_MT_M - CDDP_MT_N] ^ mt_twist(s[k], s[0]);
}

/* 53 bits from the OS (torch's getNonDeterministicRandom keeps seeds exact in a double). */
static uint64_t nondeterministic_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec * 6364136223846793005ULL ^ (uint64_t)ts.tv_sec ^
            (uint64_t)(uintptr_t)&s;
    }
    return s & 0x1FFFFFFFFFFFFFULL;
}

void cddp_gen_acquire(GeneratorObject *g, int nogil)
{
    if (nogil) {
        PyThread_acquire_lock(g->lock, WAIT_LOCK);
        return;
    }
    if (PyThread_acquire_lock(g->lock, NOWAIT_LOCK))
        return;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(g->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
}

/* ---- Python conversions --------------------------------------------------------------- */

/* A Python int in [-2**63, 2**64) as torch's uint64 seed (negatives wrap). */
static int seed_from_long(PyObject *o, uint64_t *out)
{
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        long long s;
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        s = PyLong_AsLongLong(o);
        if (s == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "Overflow when unpacking long long");
            }
            return -1;
        }
        *out = (uint64_t)s;
        return 0;
    }
    *out = (uint64_t)u;
    return 0;
}

static int device_from_py(PyObject *o, int *device)
{
    cddp_state_t *st = cddp_state();
    PyObject *dev = NULL, *type = NULL, *index = NULL;
    int rc = -1;
    *device = -1;
    if (o == NULL || o == Py_None ||
        (PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, "cpu") == 0))
        return 0;
    if (!st->device_factory) {
        PyErr_SetString(PyExc_RuntimeError, "cddp.device is not initialized");
        return -1;
    }
    dev = PyObject_CallOneArg(st->device_factory, o);
    if (!dev)
        return -1;
    type = PyObject_GetAttrString(dev, "type");
    index = type ? PyObject_GetAttrString(dev, "index") : NULL;
    if (!index)
        goto done;
    if (PyUnicode_CompareWithASCIIString(type, "cuda") == 0)
        *device = index == Py_None ? 0 : (int)PyLong_AsLong(index);
    rc = (*device == -1 && PyErr_Occurred()) ? -1 : 0;
done:
    Py_XDECREF(index);
    Py_XDECREF(type);
    Py_XDECREF(dev);
    return rc;
}

GeneratorObject *cddp_generator_get(PyObject *o, const char *fname)
{
    cddp_state_t *st = cddp_state();
    if (o == NULL || o == Py_None)
        return (GeneratorObject *)st->default_generator;
    if (!PyObject_TypeCheck(o, st->generator_type)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'generator' must be cddp.Generator, not %s",
                     fname, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (GeneratorObject *)o;
}

/* ---- the type ------------------------------------------------------------------------- */

static GeneratorObject *generator_alloc(PyTypeObject *tp, uint64_t seed)
{
    GeneratorObject *g = (GeneratorObject *)tp->tp_alloc(tp, 0);
    if (!g)
        return NULL;
    g->lock = PyThread_allocate_lock();
    if (!g->lock) {
        Py_DECREF(g);
        return (GeneratorObject *)PyErr_NoMemory();
    }
    g->device = -1;
    cddp_gen_set_seed(g, seed);
    return g;
}

static PyObject *generator_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", NULL};
    PyObject *dev = Py_None;
    int device;
    GeneratorObject *g;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Generator", kwlist, &dev))
        return NULL;
    if (device_from_py(dev, &device) < 0)
        return NULL;
    g = generator_alloc(tp, CDDP_DEFAULT_SEED);
    if (g)
        g->device = device;
    return (PyObject *)g;
}

static void generator_dealloc(GeneratorObject *g)
{
    PyTypeObject *tp = Py_TYPE(g);
    if (g->lock)
        PyThread_free_lock(g->lock);
    tp->tp_free(g);
    Py_DECREF(tp);
}

static PyObject *gen_manual_seed(GeneratorObject *g, PyObject *seed)
{
    uint64_t s;
    if (!PyLong_Check(seed)) {
        if (!PyIndex_Check(seed) || PyFloat_Check(seed)) {
            PyErr_Format(PyExc_RuntimeError, "manual_seed expected a long, but got %s",
                         Py_TYPE(seed)->tp_name);
            return NULL;
        }
        PyObject *i = PyNumber_Index(seed);
        int rc = i ? seed_from_long(i, &s) : -1;
        Py_XDECREF(i);
        if (rc < 0)
            return NULL;
    } else if (seed_from_long(seed, &s) < 0) {
        return NULL;
    }
    cddp_gen_acquire(g, 0);
    cddp_gen_set_seed(g, s);
    cddp_gen_release(g);
    return Py_NewRef(g);
}

static PyObject *gen_seed(GeneratorObject *g, PyObject *unused)
{
    uint64_t s = nondeterministic_seed();
    cddp_gen_acquire(g, 0);
    cddp_gen_set_seed(g, s);
    cddp_gen_release(g);
    return PyLong_FromUnsignedLongLong(s);
}

static PyObject *gen_initial_seed(GeneratorObject *g, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(g->seed);
}

static PyObject *gen_get_state(GeneratorObject *g, PyObject *unused)
{
    int64_t shape[1] = {CDDP_STATE_LEN};
    TensorObject *t = cddp_tensor_new(CDDP_INT64, 1, shape, 1);
    int64_t *s;
    if (!t)
        return NULL;
    s = (int64_t *)cddp_data(t);
    cddp_gen_acquire(g, 0);
    s[0] = 1;
    s[1] = (int64_t)g->seed;
    s[2] = g->left;
    s[3] = g->next;
    for (int k = 0; k < CDDP_MT_N; k++)
        s[4 + k] = g->state[k];
    s[4 + CDDP_MT_N] = g->has_next_float;
    {
        uint32_t fb;
        memcpy(&fb, &g->next_float, sizeof fb);
        s[5 + CDDP_MT_N] = fb;
    }
    s[6 + CDDP_MT_N] = g->has_next_double;
    memcpy(&s[7 + CDDP_MT_N], &g->next_double, sizeof(double));
    cddp_gen_release(g);
    return (PyObject *)t;
}

static PyObject *gen_set_state(GeneratorObject *g, PyObject *o)
{
    TensorObject *t = (TensorObject *)o, *c;
    const int64_t *s;
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "expected a cddp.Tensor as the RNG state, but got %s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    if (t->dtype != CDDP_INT64 || cddp_numel(t) != CDDP_STATE_LEN) {
        PyErr_Format(PyExc_RuntimeError,
                     "RNG state must be an int64 tensor of %d elements (from get_state()), "
                     "got %s with %lld elements", CDDP_STATE_LEN, cddp_dtype_name[t->dtype],
                     (long long)cddp_numel(t));
        return NULL;
    }
    c = cddp_tensor_contiguous_raw(t);
    if (!c)
        return NULL;
    s = (const int64_t *)cddp_data(c);
    int ok = s[0] == 1 && s[2] > 0 && s[2] <= CDDP_MT_N && s[3] >= 0 && s[3] <= CDDP_MT_N;
    for (int k = 0; ok && k < CDDP_MT_N; k++)
        ok = s[4 + k] >= 0 && s[4 + k] <= 0xffffffffLL;
    if (!ok) {
        Py_DECREF(c);
        PyErr_SetString(PyExc_RuntimeError, "Invalid mt19937 state");
        return NULL;
    }
    cddp_gen_acquire(g, 0);
    g->seed = (uint64_t)s[1];
    g->left = (int)s[2];
    g->next = (uint32_t)s[3];
    for (int k = 0; k < CDDP_MT_N; k++)
        g->state[k] = (uint32_t)s[4 + k];
    g->has_next_float = s[4 + CDDP_MT_N] != 0;
    {
        uint32_t fb = (uint32_t)s[5 + CDDP_MT_N];
        memcpy(&g->next_float, &fb, sizeof fb);
    }
    g->has_next_double = s[6 + CDDP_MT_N] != 0;
    memcpy(&g->next_double, &s[7 + CDDP_MT_N], sizeof(double));
    cddp_gen_release(g);
    Py_DECREF(c);
    return Py_NewRef(g);
}

static PyObject *gen_device(GeneratorObject *g, void *c)
{
    cddp_state_t *st = cddp_state();
    if (g->device < 0 && st->device_cpu)
        return Py_NewRef(st->device_cpu);
    if (st->device_factory)
        return PyObject_CallFunction(st->device_factory, "si", "cuda", g->device);
    return PyUnicode_FromString(g->device < 0 ? "cpu" : "cuda");
}

/* pickling: Generator(device) then __setstate__(the state words as bytes), so pickling a
 * generator does not depend on tensors being picklable */
static PyObject *gen_reduce(GeneratorObject *g, PyObject *unused)
{
    PyObject *dev = gen_device(g, NULL), *state = NULL, *bytes = NULL, *res = NULL;
    if (dev)
        state = gen_get_state(g, NULL);
    if (state)
        bytes = PyBytes_FromStringAndSize(cddp_data((TensorObject *)state),
                                          CDDP_STATE_LEN * (Py_ssize_t)sizeof(int64_t));
    if (bytes)
        res = Py_BuildValue("O(O)O", (PyObject *)Py_TYPE(g), dev, bytes);
    Py_XDECREF(dev);
    Py_XDECREF(state);
    Py_XDECREF(bytes);
    return res;
}

static PyObject *gen_setstate(GeneratorObject *g, PyObject *state)
{
    PyObject *r;
    if (PyBytes_Check(state)) {
        int64_t shape[1] = {CDDP_STATE_LEN};
        TensorObject *t;
        if (PyBytes_GET_SIZE(state) != CDDP_STATE_LEN * (Py_ssize_t)sizeof(int64_t)) {
            PyErr_SetString(PyExc_RuntimeError, "Invalid mt19937 state");
            return NULL;
        }
        if (!(t = cddp_tensor_new(CDDP_INT64, 1, shape, 0)))
            return NULL;
        memcpy(cddp_data(t), PyBytes_AS_STRING(state), (size_t)PyBytes_GET_SIZE(state));
        r = gen_set_state(g, (PyObject *)t);
        Py_DECREF(t);
    } else {
        r = gen_set_state(g, state);
    }
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *gen_repr(GeneratorObject *g)
{
    return PyUnicode_FromFormat("<cddp.Generator object at %p>", g);
}

static PyMethodDef gen_methods[] = {
    {"manual_seed", (PyCFunction)gen_manual_seed, METH_O,
     "manual_seed(seed) -> Generator: re-seed (torch's mt19937 seeding); returns self"},
    {"seed", (PyCFunction)gen_seed, METH_NOARGS, "seed() -> int: re-seed from the OS"},
    {"initial_seed", (PyCFunction)gen_initial_seed, METH_NOARGS, NULL},
    {"get_state", (PyCFunction)gen_get_state, METH_NOARGS,
     "get_state() -> int64 Tensor of the engine state (cddp's layout, see ops/random/random.c)"},
    {"set_state", (PyCFunction)gen_set_state, METH_O, "set_state(state) -> Generator"},
    {"__reduce__", (PyCFunction)gen_reduce, METH_NOARGS, NULL},
    {"__setstate__", (PyCFunction)gen_setstate, METH_O, NULL},
    {NULL},
};

static PyGetSetDef gen_getset[] = {
    {"device", (getter)gen_device, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot gen_slots[] = {
    {Py_tp_new, generator_new},
    {Py_tp_dealloc, generator_dealloc},
    {Py_tp_methods, gen_methods},
    {Py_tp_getset, gen_getset},
    {Py_tp_repr, gen_repr},
    {Py_tp_doc, "Generator(device='cpu'): torch's CPU random engine (mt19937)."},
    {0, NULL},
};

static PyType_Spec gen_spec = {
    .name = "cddp.Generator",
    .basicsize = sizeof(GeneratorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = gen_slots,
};

/* ---- module functions on the default generator ---------------------------------------- */

static PyObject *py_manual_seed(PyObject *m, PyObject *seed)
{
    /* torch.manual_seed does int(seed) first: floats truncate, strings raise */
    PyObject *i = PyNumber_Long(seed), *r;
    if (!i)
        return NULL;
    r = gen_manual_seed((GeneratorObject *)cddp_state()->default_generator, i);
    Py_DECREF(i);
    return r;
}

static PyObject *py_seed(PyObject *m, PyObject *unused)
{
    return gen_seed((GeneratorObject *)cddp_state()->default_generator, NULL);
}

static PyObject *py_initial_seed(PyObject *m, PyObject *unused)
{
    return gen_initial_seed((GeneratorObject *)cddp_state()->default_generator, NULL);
}

static PyObject *py_get_rng_state(PyObject *m, PyObject *unused)
{
    return gen_get_state((GeneratorObject *)cddp_state()->default_generator, NULL);
}

static PyObject *py_set_rng_state(PyObject *m, PyObject *state)
{
    PyObject *r = gen_set_state((GeneratorObject *)cddp_state()->default_generator, state);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyMethodDef random_module_methods[] = {
    {"manual_seed", py_manual_seed, METH_O,
     "manual_seed(seed) -> Generator: seed the default generator; returns it"},
    {"seed", py_seed, METH_NOARGS, NULL},
    {"initial_seed", py_initial_seed, METH_NOARGS, NULL},
    {"get_rng_state", (PyCFunction)py_get_rng_state, METH_NOARGS, NULL},
    {"set_rng_state", py_set_rng_state, METH_O, NULL},
    {NULL},
};

/* ---- randperm ------------------------------------------------------------------------- */

/* torch's randperm_cpu: a forward Fisher-Yates swap with random() % (n - i) while n is well
 * below 2**32 (n < UINT32_MAX / 20), the inside-out variant on random64() above that. */
static void randperm_kernel(GeneratorObject *g, int64_t n, int64_t *out)
{
    if (n < (int64_t)(UINT32_MAX / 20)) {
        for (int64_t i = 0; i < n; i++)
            out[i] = i;
        for (int64_t i = 0; i < n - 1; i++) {
            int64_t z = (int64_t)(cddp_gen_random(g) % (uint64_t)(n - i));
            int64_t sav = out[i];
            out[i] = out[z + i];
            out[z + i] = sav;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t z = (int64_t)(cddp_gen_random64(g) % (uint64_t)(i + 1));
        out[i] = i;
        out[i] = out[z];
        out[z] = i;
    }
}

int cddp_randperm_fill(PyObject *generator_or_NULL, int64_t n, int64_t *out)
{
    GeneratorObject *g = cddp_generator_get(generator_or_NULL, "randperm");
    if (!g)
        return -1;
    if (n < 0) {
        PyErr_Format(PyExc_RuntimeError, "n must be non-negative, got %lld", (long long)n);
        return -1;
    }
    Py_INCREF(g);
    if (n >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        cddp_gen_acquire(g, 1);
        randperm_kernel(g, n, out);
        cddp_gen_release(g);
        Py_END_ALLOW_THREADS
    } else {
        cddp_gen_acquire(g, 0);
        randperm_kernel(g, n, out);
        cddp_gen_release(g);
    }
    Py_DECREF(g);
    return 0;
}

/* ---- init ----------------------------------------------------------------------------- */

int cddp_random_init(PyObject *m, cddp_state_t *st)
{
    GeneratorObject *g;
    st->generator_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &gen_spec, NULL);
    if (!st->generator_type)
        return -1;
    if (PyModule_AddObjectRef(m, "Generator", (PyObject *)st->generator_type) < 0)
        return -1;
    /* torch seeds its default CPU generator from the OS at startup */
    g = generator_alloc(st->generator_type, nondeterministic_seed());
    if (!g)
        return -1;
    st->default_generator = (PyObject *)g;
    if (PyModule_AddObjectRef(m, "default_generator", (PyObject *)g) < 0)
        return -1;
    return PyModule_AddFunctions(m, random_module_methods);
}
