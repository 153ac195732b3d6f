/* ops/random/random.c — cddp.Generator: torch's CPU random engine (mt19937), seeding, state, randperm.
 *
 * Mirrors torch.Generator / torch.manual_seed / seed / initial_seed / get_rng_state /
 * set_rng_state / default_generator, and at::mt19937 + CPUGeneratorImpl bit for bit: the same
 * seed gives the same stream of 32-bit draws, so randperm/rand/randint/randn can reproduce
 * torch's values (the distributions live in ops/random/dist.c).
 *
 *   g = cddp.Generator()            # seed 67280421310721, as torch.Generator()
 *   g.manual_seed(s) -> g           # s in [-2**63, 2**64): negative seeds wrap to uint64
 *   g.get_state() -> uint8 tensor   # torch's 5056-byte state (STATE LAYOUT below)
 *   g.set_state(t) -> g             # torch's 5056 or legacy 5048 bytes, or the int64[632]
 *                                   #   words earlier cddp versions returned
 *
 * STATE LAYOUT: torch's CPUGeneratorImplState, byte for byte, so an RNG state saved with torch
 * (a checkpoint's torch.get_rng_state()) restores cddp's stream and the other way round.
 * Little-endian, natural x86-64 alignment:
 *   0 seed u64 | 8 left i32 | 12 seeded i32 | 16 next u64 | 24 624 x u64 mt19937 words |
 *   5016 normal_x f64 (0) | 5024 normal_y f64: the cached double normal | 5032 normal_rho (0) |
 *   5040 normal_is_valid i32 | [5048: the legacy size ends] | 5048 float normal f32 |
 *   5052 its valid flag u8 | 5056
 */
#include "ops/random/random.h"
#include "module.h"
#include "ops/creation/creation.h"
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define CDDP_DEFAULT_SEED 67280421310721ULL
#define OLD_STATE_LEN (4 + CDDP_MT_N + 4)       /* int64 words of cddp's former format */
enum {
    ST_SEED = 0, ST_LEFT = 8, ST_SEEDED = 12, ST_NEXT = 16, ST_WORDS = 24,
    ST_NORMAL_Y = ST_WORDS + 8 * CDDP_MT_N + 8, ST_NORMAL_VALID = ST_NORMAL_Y + 16,
    ST_LEGACY_SIZE = ST_NORMAL_VALID + 8, ST_FLOAT = ST_LEGACY_SIZE,
    ST_FLOAT_VALID = ST_FLOAT + 4, ST_SIZE = ST_FLOAT + 8
};

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
    int64_t shape[1] = {ST_SIZE};
    TensorObject *t = cddp_tensor_new(CDDP_UINT8, 1, shape, 1);
    unsigned char *b;
    int32_t left, seeded = 1, dvalid;
    uint64_t next, w;
    if (!t)
        return NULL;
    b = (unsigned char *)cddp_data(t);       /* zeroed: normal_x, normal_rho and the padding */
    cddp_gen_acquire(g, 0);
    left = g->left;
    next = g->next;
    dvalid = g->has_next_double;
    memcpy(b + ST_SEED, &g->seed, 8);
    memcpy(b + ST_LEFT, &left, 4);
    memcpy(b + ST_SEEDED, &seeded, 4);
    memcpy(b + ST_NEXT, &next, 8);
    for (int k = 0; k < CDDP_MT_N; k++) {
        w = g->state[k];
        memcpy(b + ST_WORDS + 8 * k, &w, 8);
    }
    if (dvalid)
        memcpy(b + ST_NORMAL_Y, &g->next_double, 8);
    memcpy(b + ST_NORMAL_VALID, &dvalid, 4);
    if (g->has_next_float) {
        memcpy(b + ST_FLOAT, &g->next_float, 4);
        b[ST_FLOAT_VALID] = 1;
    }
    cddp_gen_release(g);
    return (PyObject *)t;
}

/* An engine state read from outside, installed only once it is valid. */
typedef struct {
    uint64_t seed;
    int left;
    uint32_t next;
    uint32_t words[CDDP_MT_N];
    char has_double, has_float;
    double next_double;
    float next_float;
} parsed_state_t;

/* torch's layout (n = ST_SIZE or ST_LEGACY_SIZE bytes). Like torch's set_state, each 64-bit
 * word slot keeps its low 32 bits and `next` is read as uint32. 1 if the state is valid. */
static int parse_torch_state(parsed_state_t *p, const unsigned char *b, size_t n)
{
    int32_t left, seeded, dvalid;
    uint64_t next, w;
    memcpy(&p->seed, b + ST_SEED, 8);
    memcpy(&left, b + ST_LEFT, 4);
    memcpy(&seeded, b + ST_SEEDED, 4);
    memcpy(&next, b + ST_NEXT, 8);
    for (int k = 0; k < CDDP_MT_N; k++) {
        memcpy(&w, b + ST_WORDS + 8 * k, 8);
        p->words[k] = (uint32_t)w;
    }
    memcpy(&dvalid, b + ST_NORMAL_VALID, 4);
    memcpy(&p->next_double, b + ST_NORMAL_Y, 8);
    p->has_double = dvalid != 0;
    p->has_float = n == ST_SIZE && b[ST_FLOAT_VALID] != 0;
    p->next_float = 0;
    if (p->has_float)
        memcpy(&p->next_float, b + ST_FLOAT, 4);
    p->left = left;
    p->next = (uint32_t)next;
    return seeded != 0 && left > 0 && left <= CDDP_MT_N && p->next <= CDDP_MT_N;
}

/* cddp's former int64 words: [0] version 1, [1] seed, [2] left, [3] next, [4..627] words,
 * [628] has float normal, [629] its bits, [630] has double normal, [631] its bits. */
static int parse_old_state(parsed_state_t *p, const int64_t *s)
{
    uint32_t fb = (uint32_t)s[5 + CDDP_MT_N];
    int ok = s[0] == 1 && s[2] > 0 && s[2] <= CDDP_MT_N && s[3] >= 0 && s[3] <= CDDP_MT_N;
    for (int k = 0; ok && k < CDDP_MT_N; k++) {
        ok = s[4 + k] >= 0 && s[4 + k] <= 0xffffffffLL;
        p->words[k] = (uint32_t)s[4 + k];
    }
    p->seed = (uint64_t)s[1];
    p->left = (int)s[2];
    p->next = (uint32_t)s[3];
    p->has_float = s[4 + CDDP_MT_N] != 0;
    memcpy(&p->next_float, &fb, sizeof fb);
    p->has_double = s[6 + CDDP_MT_N] != 0;
    memcpy(&p->next_double, &s[7 + CDDP_MT_N], sizeof(double));
    return ok;
}

/* Install the state in `b` (n bytes; `old`: cddp's former int64 words). 0, or -1 with the
 * exception set (torch's messages). */
static int load_state(GeneratorObject *g, const void *b, size_t n, int old)
{
    parsed_state_t p;
    int ok;
    if (!old && n != ST_SIZE && n != ST_LEGACY_SIZE) {
        PyErr_Format(PyExc_RuntimeError,
                     "Expected either a CPUGeneratorImplStateLegacy of size %d or a "
                     "CPUGeneratorImplState of size %d but found the input RNG state size to "
                     "be %zu", (int)ST_LEGACY_SIZE, (int)ST_SIZE, n);
        return -1;
    }
    ok = old ? parse_old_state(&p, (const int64_t *)b) : parse_torch_state(&p, b, n);
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "Invalid mt19937 state");
        return -1;
    }
    cddp_gen_acquire(g, 0);
    g->seed = p.seed;
    g->left = p.left;
    g->next = p.next;
    memcpy(g->state, p.words, sizeof p.words);
    g->has_next_float = p.has_float;
    g->next_float = p.next_float;
    g->has_next_double = p.has_double;
    g->next_double = p.next_double;
    cddp_gen_release(g);
    return 0;
}

static PyObject *gen_set_state(GeneratorObject *g, PyObject *o)
{
    TensorObject *t = (TensorObject *)o, *c;
    int old, rc;
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "expected a cddp.Tensor as the RNG state, but got %s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    old = t->dtype == CDDP_INT64 && cddp_numel(t) == OLD_STATE_LEN;
    if (t->dtype != CDDP_UINT8 && !old) {
        PyErr_Format(PyExc_TypeError, "RNG state must be a uint8 tensor (torch.ByteTensor: "
                     "from get_rng_state()), got %s", cddp_dtype_name[t->dtype]);
        return NULL;
    }
    if (!(c = cddp_tensor_contiguous_raw(t)))
        return NULL;
    rc = load_state(g, cddp_data(c), (size_t)cddp_numel(c) * (old ? 8 : 1), old);
    Py_DECREF(c);
    return rc ? NULL : Py_NewRef(g);
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

/* pickling: Generator(device) then __setstate__({"torch_state": the state's bytes}), so
 * pickling a generator does not depend on tensors being picklable. (The dict tells these
 * bytes from the bare int64 words earlier versions pickled: both are 5056 bytes long.) */
static PyObject *gen_reduce(GeneratorObject *g, PyObject *unused)
{
    PyObject *dev = gen_device(g, NULL), *state = NULL, *bytes = NULL, *res = NULL;
    if (dev)
        state = gen_get_state(g, NULL);
    if (state)
        bytes = PyBytes_FromStringAndSize(cddp_data((TensorObject *)state), ST_SIZE);
    if (bytes)
        res = Py_BuildValue("O(O){sO}", (PyObject *)Py_TYPE(g), dev, "torch_state", bytes);
    Py_XDECREF(dev);
    Py_XDECREF(state);
    Py_XDECREF(bytes);
    return res;
}

/* {"torch_state": bytes} from gen_reduce, the int64 words earlier versions pickled (bytes),
 * or a state tensor */
static PyObject *gen_setstate(GeneratorObject *g, PyObject *state)
{
    PyObject *r, *b = state;
    int old = PyBytes_Check(state);
    if (PyDict_Check(state) && !(b = PyDict_GetItemString(state, "torch_state"))) {
        PyErr_SetString(PyExc_RuntimeError, "Generator.__setstate__: no 'torch_state' entry");
        return NULL;
    }
    if (PyBytes_Check(b)) {
        size_t n = (size_t)PyBytes_GET_SIZE(b);
        int64_t words[OLD_STATE_LEN];
        const void *p = PyBytes_AS_STRING(b);
        if (old && n != sizeof words) {
            PyErr_SetString(PyExc_RuntimeError, "Invalid mt19937 state");
            return NULL;
        }
        if (old) {                               /* aligned copy of the words */
            memcpy(words, p, sizeof words);
            p = words;
        }
        if (load_state(g, p, n, old))
            return NULL;
        Py_RETURN_NONE;
    }
    if (!(r = gen_set_state(g, b)))
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
     "get_state() -> uint8 Tensor: the engine state in torch's 5056-byte layout"},
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
