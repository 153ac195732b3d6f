/* amp/autocast.c — autocast's per-thread state, the weight-cast cache and the argument casts
 * that op entry points call (torch.autocast; aten/src/ATen/autocast_mode.cpp, CPU lists).
 *
 * Python (auto-exported as cddp.<name>, torch's module-level functions):
 *   is_autocast_enabled(device_type=None)  set_autocast_enabled(device_type, enabled)
 *   get_autocast_dtype(device_type)        set_autocast_dtype(device_type, dtype)
 *   is_autocast_cache_enabled()            set_autocast_cache_enabled(enabled)
 *   autocast_increment_nesting()           autocast_decrement_nesting() -> new depth
 *   clear_autocast_cache()
 * device_type is "cpu" or "cuda"; device_type=None means "cuda", as torch's legacy form.
 *
 * The ops that consult the state (their entry points call cddp_autocast_fastcall/_varargs):
 *   lower_precision_fp: mm bmm matmul (and @) addmm baddbmm addbmm linear conv1d/2d/3d
 *                       conv_transpose1d/2d/3d (and, in Python through
 *                       _autocast_lower_dtype: prelu scaled_dot_product_attention)
 *   fp32:               cross_entropy nll_loss mse_loss l1_loss binary_cross_entropy
 *                       binary_cross_entropy_with_logits prod (and, in Python through
 *                       _ops._autocast_fp32: the other losses, cdist, 3-D pooling,
 *                       reflect / replicate padding, grid_sample)
 * Every other op runs in its inputs' dtype, as torch's CPU autocast (its "promote" ops cat and
 * stack already promote by the ordinary rules).
 *
 * Cache: a lower-precision cast of a float32 leaf that requires grad (a parameter), made with
 * grad mode on, is kept for
 * the rest of the outermost autocast region (cache_enabled), so a weight used by several ops is
 * converted once and all its uses share one ToCopyBackward0 node; the region's exit
 * (decrement_nesting() to 0, then clear_autocast_cache()) drops it, as torch.
 */
#include "amp/amp.h"
#include "ops/shape/shape.h"
#include "module.h"

_Thread_local cddp_autocast_tls cddp_autocast_state = {
    0, {0, 0}, {CDDP_BFLOAT16, CDDP_FLOAT16}, 1, 0, NULL};

#define AMP_MAX_ARGS 8

/* The dtype lower-precision ops run in: the cuda slot's while a cuda region is on. */
static cddp_dtype fast_dtype(void)
{
    cddp_autocast_tls *s = &cddp_autocast_state;
    return s->enabled[1] ? s->dtype[1] : s->dtype[0];
}

/* *out = the cast of leaf weight t, reusing the region's cache. 0 / -1. */
static int cached_cast(TensorObject *t, cddp_dtype to, PyObject **out)
{
    cddp_autocast_tls *s = &cddp_autocast_state;
    PyObject *key = NULL, *hit, *entry = NULL;
    int rc = -1;
    if (!s->cache && !(s->cache = PyDict_New()))
        return -1;
    if (!(key = PyLong_FromVoidPtr(t)))
        return -1;
    hit = PyDict_GetItemWithError(s->cache, key);
    if (hit && ((TensorObject *)PyTuple_GET_ITEM(hit, 1))->dtype == to) {
        *out = Py_NewRef(PyTuple_GET_ITEM(hit, 1));
        rc = 0;
        goto done;
    }
    if (PyErr_Occurred() || !(*out = cddp_shape_to_dtype(t, to)))
        goto done;
    /* the entry holds t itself, so its address cannot be reused while the key lives */
    if (!(entry = PyTuple_Pack(2, (PyObject *)t, *out)) ||
        PyDict_SetItem(s->cache, key, entry) < 0) {
        Py_CLEAR(*out);
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(entry);
    Py_DECREF(key);
    return rc;
}

/* *out = o cast by the policy (a new reference; o itself when nothing changes). 0 / -1. */
static int cast_one(cddp_amp_policy policy, PyObject *o, PyObject **out)
{
    TensorObject *t = (TensorObject *)o;
    cddp_dtype to;
    *out = NULL;
    if (!o || !cddp_tensor_check(o) || !cddp_is_floating(t->dtype) || t->dtype == CDDP_FLOAT64) {
        *out = Py_XNewRef(o);
        return 0;
    }
    to = policy == CDDP_AMP_LOWER ? fast_dtype() : CDDP_FLOAT32;
    if (t->dtype == to) {
        *out = Py_NewRef(o);
        return 0;
    }
    /* only a cast that records history is worth keeping: one made under no_grad would hand
     * later grad-mode ops a weight cut off from its parameter */
    if (policy == CDDP_AMP_LOWER && cddp_autocast_state.cache_enabled && cddp_grad_enabled &&
        t->dtype == CDDP_FLOAT32 && t->requires_grad && !t->grad_fn)
        return cached_cast(t, to, out);
    *out = cddp_shape_to_dtype(t, to);
    return *out ? 0 : -1;
}

PyObject *cddp_autocast_fastcall(cddp_amp_policy policy, cddp_fastkw_fn fn, PyObject *self,
                                 PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t n = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0), i;
    PyObject *buf[AMP_MAX_ARGS] = {NULL}, *cself = NULL, *res = NULL;
    if (n > AMP_MAX_ARGS)                  /* more than any listed op takes: its parser says so */
        return fn(self, args, nargs, kwnames);
    if (cast_one(policy, self, &cself) < 0)
        goto done;
    for (i = 0; i < n; i++)
        if (cast_one(policy, args[i], &buf[i]) < 0)
            goto done;
    res = fn(cself, buf, nargs, kwnames);
done:
    Py_XDECREF(cself);
    for (i = 0; i < n; i++)
        Py_XDECREF(buf[i]);
    return res;
}

PyObject *cddp_autocast_varargs(cddp_amp_policy policy, cddp_varargs_fn fn, PyObject *m,
                                PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *cast = PyTuple_New(n), *res = NULL, *c;
    if (!cast)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cast_one(policy, PyTuple_GET_ITEM(args, i), &c) < 0)
            goto done;
        PyTuple_SET_ITEM(cast, i, c);
    }
    res = fn(m, cast);
done:
    Py_DECREF(cast);
    return res;
}

/* ---- the Python state functions ------------------------------------------------------- */

/* "cpu" -> 0, "cuda" -> 1; RuntimeError (torch's wording) for anything else. */
static int device_slot(PyObject *o)
{
    if (o == NULL || o == Py_None)
        return 1;
    if (PyUnicode_Check(o)) {
        if (PyUnicode_CompareWithASCIIString(o, "cpu") == 0)
            return 0;
        if (PyUnicode_CompareWithASCIIString(o, "cuda") == 0)
            return 1;
        PyErr_Format(PyExc_RuntimeError, "User specified an unsupported autocast device_type "
                     "'%U'", o);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "autocast: device_type must be a str, got %s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

static void refresh_on(void)
{
    cddp_autocast_tls *s = &cddp_autocast_state;
    s->on = s->enabled[0] || s->enabled[1];
}

static PyObject *py_is_enabled(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    int slot;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "is_autocast_enabled(device_type=None)");
        return NULL;
    }
    if ((slot = device_slot(nargs ? args[0] : NULL)) < 0)
        return NULL;
    return PyBool_FromLong(cddp_autocast_state.enabled[slot]);
}

static PyObject *py_set_enabled(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    int slot, on;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "set_autocast_enabled(device_type, enabled)");
        return NULL;
    }
    slot = nargs == 1 ? 1 : device_slot(args[0]);       /* one argument: torch's legacy cuda */
    if (slot < 0 || (on = PyObject_IsTrue(args[nargs - 1])) < 0)
        return NULL;
    cddp_autocast_state.enabled[slot] = on;
    refresh_on();
    Py_RETURN_NONE;
}

static PyObject *py_get_dtype(PyObject *m, PyObject *arg)
{
    int slot = device_slot(arg);
    return slot < 0 ? NULL : Py_NewRef(cddp_dtype_to_py(cddp_autocast_state.dtype[slot]));
}

static PyObject *py_set_dtype(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    int slot;
    cddp_dtype dt;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_autocast_dtype(device_type, dtype)");
        return NULL;
    }
    if ((slot = device_slot(args[0])) < 0 || cddp_dtype_from_py(args[1], &dt) < 0)
        return NULL;
    cddp_autocast_state.dtype[slot] = dt;
    Py_RETURN_NONE;
}

static PyObject *py_cache_enabled(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(cddp_autocast_state.cache_enabled);
}

static PyObject *py_set_cache_enabled(PyObject *m, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    cddp_autocast_state.cache_enabled = on;
    Py_RETURN_NONE;
}

static PyObject *py_increment(PyObject *m, PyObject *unused)
{
    return PyLong_FromLong(++cddp_autocast_state.nesting);
}

static PyObject *py_decrement(PyObject *m, PyObject *unused)
{
    if (cddp_autocast_state.nesting > 0)
        cddp_autocast_state.nesting--;
    return PyLong_FromLong(cddp_autocast_state.nesting);
}

static PyObject *py_clear_cache(PyObject *m, PyObject *unused)
{
    Py_CLEAR(cddp_autocast_state.cache);
    Py_RETURN_NONE;
}

/* _autocast_lower_dtype() -> the dtype the lower_precision_fp ops run in now, or None outside
 * every autocast region: the gate's own rule (fast_dtype), for the ops written in Python. */
static PyObject *py_lower_dtype(PyObject *m, PyObject *unused)
{
    PyObject *d;
    if (!CDDP_AUTOCAST_ON())
        Py_RETURN_NONE;
    d = cddp_dtype_to_py(fast_dtype());
    Py_XINCREF(d);
    return d;
}

#define FAST (PyCFunction)(void (*)(void))
PyMethodDef cddp_autocast_module_methods[] = {
    {"_autocast_lower_dtype", py_lower_dtype, METH_NOARGS, NULL},
    {"is_autocast_enabled", FAST py_is_enabled, METH_FASTCALL,
     "is_autocast_enabled(device_type=None): autocast state of 'cpu' or 'cuda' (None: cuda)"},
    {"set_autocast_enabled", FAST py_set_enabled, METH_FASTCALL,
     "set_autocast_enabled(device_type, enabled)"},
    {"get_autocast_dtype", py_get_dtype, METH_O, "get_autocast_dtype(device_type)"},
    {"set_autocast_dtype", FAST py_set_dtype, METH_FASTCALL,
     "set_autocast_dtype(device_type, dtype)"},
    {"is_autocast_cache_enabled", py_cache_enabled, METH_NOARGS, NULL},
    {"set_autocast_cache_enabled", py_set_cache_enabled, METH_O, NULL},
    {"autocast_increment_nesting", py_increment, METH_NOARGS, NULL},
    {"autocast_decrement_nesting", py_decrement, METH_NOARGS, NULL},
    {"clear_autocast_cache", py_clear_cache, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
