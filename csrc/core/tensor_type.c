/* core/tensor_type.c — the cddp.Tensor heap type: lifetime, attributes, NumPy/buffer interop, and
 * the slot table that routes Python operators to the op files.
 *
 *   class Tensor:
 *       shape -> Size; size(dim=None); dim(); ndim; numel(); dtype; device
 *       requires_grad (settable on leaves); grad; grad_fn; is_leaf; data; _version
 *       detach(); detach_(); requires_grad_(b=True); numpy(); __array__(); stride(); ...
 *
 * Subclassable (nn.Parameter) through Tensor._make_subclass(cls, data, requires_grad), as torch.
 */
#include "core/cddp.h"
#include "module.h"
#include <string.h>
#include <structmember.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

PyObject *cddp_tensor_to_numpy(TensorObject *t);

/* ---- lifetime ------------------------------------------------------------------------- */

static int tensor_traverse(TensorObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->grad);
    Py_VISIT(self->grad_fn);
    Py_VISIT(self->view_base);
    Py_VISIT(self->hooks);
    Py_VISIT(self->post_acc_hooks);
    Py_VISIT(self->dict);
    return 0;
}

static int tensor_clear(TensorObject *self)
{
    Py_CLEAR(self->grad);
    Py_CLEAR(self->grad_fn);
    Py_CLEAR(self->view_base);
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->post_acc_hooks);
    Py_CLEAR(self->dict);
    return 0;
}

static void tensor_dealloc(TensorObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    tensor_clear(self);
    cddp_vcounter_release(self);
    cddp_storage_decref(self->storage);
    self->storage = NULL;
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* Tensor(*sizes) -> uninitialized, Tensor(data) -> a copy of data, both in the default dtype
 * (float32 unless set_default_dtype changed it: torch.Tensor is the default tensor type);
 * Tensor() -> an empty (0,) tensor, as torch (the start of a cat-accumulated buffer). */
static PyObject *tensor_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    int ndim = 0;
    int64_t shape[CDDP_MAX_DIMS];
    TensorObject *t;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (kw && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Tensor() takes no keyword arguments");
        return NULL;
    }
    if (n == 0) {
        ndim = 1;
        shape[0] = 0;
        t = cddp_tensor_new(cddp_state()->default_dtype, ndim, shape, 1);
    } else if (PyLong_Check(PyTuple_GET_ITEM(args, 0))) {
        if (cddp_parse_shape(args, &ndim, shape) < 0)
            return NULL;
        t = cddp_tensor_new(cddp_state()->default_dtype, ndim, shape, 1);
    } else if (n == 1 && cddp_tensor_check(PyTuple_GET_ITEM(args, 0))) {
        /* torch's legacy Tensor(other) is other.alias(): a view (dtype, memory, history) */
        t = (TensorObject *)PyObject_GetItem(PyTuple_GET_ITEM(args, 0), Py_Ellipsis);
    } else if (n == 1) {
        t = cddp_tensor_from_data(PyTuple_GET_ITEM(args, 0), 1, cddp_state()->default_dtype);
    } else {
        PyErr_SetString(PyExc_TypeError, "Tensor() takes sizes as ints or one data argument");
        return NULL;
    }
    if (t && tp != cddp_state()->tensor_type) {
        /* a Python subclass: re-wrap as an instance of tp sharing the storage */
        TensorObject *s = (TensorObject *)tp->tp_alloc(tp, 0);
        if (!s) {
            Py_DECREF(t);
            return NULL;
        }
        s->storage = t->storage;
        cddp_storage_incref(s->storage);
        s->offset = t->offset; s->ndim = t->ndim; s->dtype = t->dtype;
        memcpy(s->shape, t->shape, sizeof t->shape);
        memcpy(s->strides, t->strides, sizeof t->strides);
        Py_DECREF(t);
        return (PyObject *)s;
    }
    return (PyObject *)t;
}

/* ---- attributes ----------------------------------------------------------------------- */

static PyObject *get_shape(TensorObject *self, void *c)
{
    return cddp_size_from(self->ndim, self->shape);
}

static PyObject *get_ndim(TensorObject *self, void *c)
{
    return PyLong_FromLong(self->ndim);
}

static PyObject *get_dtype(TensorObject *self, void *c)
{
    return Py_NewRef(cddp_dtype_to_py(self->dtype));
}

static PyObject *get_device(TensorObject *self, void *c)
{
    cddp_state_t *st = cddp_state();
    if (cddp_is_meta(self))
        return st->device_factory ? PyObject_CallFunction(st->device_factory, "s", "meta")
                                  : PyUnicode_FromString("meta");
    if (self->storage->device < 0 && st->device_cpu)
        return Py_NewRef(st->device_cpu);
    if (st->device_factory)
        return PyObject_CallFunction(st->device_factory, "si", "cuda", self->storage->device);
    return PyUnicode_FromString("cpu");
}

static PyObject *get_is_cuda(TensorObject *self, void *c)
{
    return PyBool_FromLong(self->storage->device >= 0);
}

static PyObject *get_is_meta(TensorObject *self, void *c)
{
    return PyBool_FromLong(cddp_is_meta(self));
}

static PyObject *get_requires_grad(TensorObject *self, void *c)
{
    return PyBool_FromLong(cddp_needs_grad(self));
}

/* requires_grad_(flag) (method) or .requires_grad = flag. On a tensor with history torch's
 * method accepts True as a no-op (it already requires grad: hooks such as transformers'
 * enable_input_require_grads call it on computed outputs); the rest raise its messages. */
static int set_requires_grad_flag(TensorObject *self, int flag, int method)
{
    if (cddp_view_sync(self) < 0)
        return -1;
    if (self->grad_fn) {
        if (method && flag)
            return 0;
        PyErr_SetString(PyExc_RuntimeError, flag
                        ? "you can only change requires_grad flags of leaf variables."
                        : "you can only change requires_grad flags of leaf variables. If you "
                          "want to use a computed variable in a subgraph that doesn't require "
                          "differentiation use var_no_grad = var.detach().");
        return -1;
    }
    if (flag && !cddp_is_floating(self->dtype)) {
        PyErr_Format(PyExc_RuntimeError,
                     "only Tensors of floating point dtype can require gradients (got %s)",
                     cddp_dtype_name[self->dtype]);
        return -1;
    }
    self->requires_grad = (char)flag;
    return 0;
}

static int set_requires_grad(TensorObject *self, PyObject *v, void *c)
{
    int flag;
    if (!v || (flag = PyObject_IsTrue(v)) < 0) {
        if (!v)
            PyErr_SetString(PyExc_TypeError, "cannot delete requires_grad");
        return -1;
    }
    return set_requires_grad_flag(self, flag, 0);
}

/* torch warns when a non-leaf's .grad is read that backward will not fill: usually the user
 * meant the leaf (a parameter after .to() / * 1) or forgot retain_grad(). */
static PyObject *get_grad(TensorObject *self, void *c)
{
    if (!self->grad && self->grad_fn && !self->retains_grad &&
        PyErr_WarnEx(PyExc_UserWarning,
                     "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                     "Its .grad attribute won't be populated during autograd.backward(). If you "
                     "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                     ".retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by "
                     "mistake, make sure you access the leaf Tensor instead.", 1) < 0)
        return NULL;
    return Py_NewRef(self->grad ? self->grad : Py_None);
}

static int set_grad(TensorObject *self, PyObject *v, void *c)
{
    if (v == NULL || v == Py_None) {
        Py_CLEAR(self->grad);
        return 0;
    }
    if (!cddp_tensor_check(v)) {
        PyErr_Format(PyExc_TypeError, "assigned grad expected to be a Tensor or None but got %s",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    TensorObject *g = (TensorObject *)v;
    if (g->dtype != self->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "assigned grad has data of a different type (%s) than the tensor (%s)",
                     cddp_dtype_name[g->dtype], cddp_dtype_name[self->dtype]);
        return -1;
    }
    if (g->ndim != self->ndim || memcmp(g->shape, self->shape, sizeof(int64_t) * g->ndim)) {
        PyErr_SetString(PyExc_RuntimeError, "assigned grad has data of a different size");
        return -1;
    }
    Py_XSETREF(self->grad, Py_NewRef(v));
    return 0;
}

static PyObject *get_grad_fn(TensorObject *self, void *c)
{
    if (cddp_view_sync(self) < 0)
        return NULL;
    return Py_NewRef(self->grad_fn ? (PyObject *)self->grad_fn : Py_None);
}

static PyObject *get_is_leaf(TensorObject *self, void *c)
{
    if (cddp_view_sync(self) < 0)
        return NULL;
    return PyBool_FromLong(self->grad_fn == NULL);
}

/* which output of its grad_fn this tensor is (0 for leaves), as torch's Tensor.output_nr */
static PyObject *get_output_nr(TensorObject *self, void *c)
{
    if (cddp_view_sync(self) < 0)
        return NULL;
    return PyLong_FromLong(self->grad_fn ? self->output_nr : 0);
}

static PyObject *get_version(TensorObject *self, void *c)
{
    return PyLong_FromLongLong(*cddp_version(self));
}

static PyObject *tensor_detach(TensorObject *self, PyObject *unused);

/* t.data: an alias with no history and a version counter of its own (torch's), so in-place
 * writes through it go unnoticed by the version checks of t's saved copies (torchdiffeq's
 * `scratch.data[index] = value  # sneak past the version checker`). */
static PyObject *get_data(TensorObject *self, void *c)
{
    TensorObject *t = (TensorObject *)tensor_detach(self, NULL);
    cddp_vcounter *vc;
    if (!t)
        return NULL;
    if (!(vc = PyMem_Malloc(sizeof *vc))) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    cddp_vcounter_release(t);
    vc->refcnt = 1;
    vc->version = 0;
    t->vc = vc;
    return (PyObject *)t;
}

/* `t.data = other`: t takes other's storage and geometry (torch's set_data). */
static int set_data(TensorObject *self, PyObject *v, void *c)
{
    if (!v || !cddp_tensor_check(v)) {
        PyErr_SetString(PyExc_TypeError, "data must be a Tensor");
        return -1;
    }
    TensorObject *o = (TensorObject *)v;
    if (self->requires_grad && !cddp_is_floating(o->dtype)) {    /* torch's check */
        PyErr_SetString(PyExc_RuntimeError, "data set to a tensor that requires gradients must "
                        "be floating point or complex dtype");
        return -1;
    }
    Py_CLEAR(self->view_base);             /* other memory: no longer a view of its base */
    cddp_storage_incref(o->storage);
    cddp_storage_decref(self->storage);
    self->storage = o->storage;
    self->offset = o->offset;
    self->ndim = o->ndim;
    self->dtype = o->dtype;
    memcpy(self->shape, o->shape, sizeof o->shape);
    memcpy(self->strides, o->strides, sizeof o->strides);
    return 0;
}

static PyObject *get_retains_grad(TensorObject *self, void *c)
{
    return PyBool_FromLong(self->retains_grad);
}

static PyObject *get_itemsize(TensorObject *self, void *c)
{
    return PyLong_FromSize_t(cddp_dtype_size[self->dtype]);
}

static PyObject *get_dict(TensorObject *self, void *c)
{
    if (!self->dict && !(self->dict = PyDict_New()))
        return NULL;
    return Py_NewRef(self->dict);
}

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)get_shape, NULL, "the tensor's size, as a cddp.Size", NULL},
    {"ndim", (getter)get_ndim, NULL, NULL, NULL},
    {"dtype", (getter)get_dtype, NULL, NULL, NULL},
    {"device", (getter)get_device, NULL, NULL, NULL},
    {"is_cuda", (getter)get_is_cuda, NULL, NULL, NULL},
    {"is_meta", (getter)get_is_meta, NULL, NULL, NULL},
    {"requires_grad", (getter)get_requires_grad, (setter)set_requires_grad, NULL, NULL},
    {"grad", (getter)get_grad, (setter)set_grad, NULL, NULL},
    {"grad_fn", (getter)get_grad_fn, NULL, NULL, NULL},
    {"is_leaf", (getter)get_is_leaf, NULL, NULL, NULL},
    {"_version", (getter)get_version, NULL, NULL, NULL},
    {"output_nr", (getter)get_output_nr, NULL, NULL, NULL},
    {"data", (getter)get_data, (setter)set_data, NULL, NULL},
    {"itemsize", (getter)get_itemsize, NULL, NULL, NULL},
    {"retains_grad", (getter)get_retains_grad, NULL, NULL, NULL},
    {"__dict__", (getter)get_dict, NULL, NULL, NULL},
    {NULL},
};

/* ---- core methods --------------------------------------------------------------------- */

static int normalize_dim(int64_t dim, int ndim, int64_t *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                     -n, n - 1, (long long)dim);
        return -1;
    }
    *out = dim < 0 ? dim + n : dim;
    return 0;
}

static PyObject *tensor_size(TensorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dim", NULL};
    PyObject *dimo = Py_None;
    int64_t d;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:size", kwlist, &dimo))
        return NULL;
    if (dimo == Py_None)
        return cddp_size_from(self->ndim, self->shape);
    d = PyLong_AsLongLong(dimo);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (normalize_dim(d, self->ndim, &d) < 0)
        return NULL;
    return PyLong_FromLongLong(self->ndim ? self->shape[d] : 1);
}

static PyObject *tensor_stride(TensorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dim", NULL};
    PyObject *dimo = Py_None;
    int64_t d;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:stride", kwlist, &dimo))
        return NULL;
    if (dimo == Py_None) {
        PyObject *tup = PyTuple_New(self->ndim);
        for (int i = 0; tup && i < self->ndim; i++)
            PyTuple_SET_ITEM(tup, i, PyLong_FromLongLong(self->strides[i]));
        return tup;
    }
    d = PyLong_AsLongLong(dimo);
    if ((d == -1 && PyErr_Occurred()) || normalize_dim(d, self->ndim, &d) < 0)
        return NULL;
    return PyLong_FromLongLong(self->ndim ? self->strides[d] : 1);
}

static PyObject *tensor_dim(TensorObject *self, PyObject *unused)
{
    return PyLong_FromLong(self->ndim);
}

static PyObject *tensor_numel(TensorObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(cddp_numel(self));
}

static PyObject *tensor_element_size(TensorObject *self, PyObject *unused)
{
    return PyLong_FromSize_t(cddp_dtype_size[self->dtype]);
}

static PyObject *tensor_storage_offset(TensorObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(self->offset);
}

static PyObject *tensor_is_contiguous(TensorObject *self, PyObject *args, PyObject *kw)
{
    return PyBool_FromLong(cddp_is_contiguous(self));
}

static PyObject *tensor_is_floating_point(TensorObject *self, PyObject *unused)
{
    return PyBool_FromLong(cddp_is_floating(self->dtype));
}

static PyObject *tensor_data_ptr(TensorObject *self, PyObject *unused)
{
    if (cddp_is_meta(self) || cddp_numel(self) == 0)   /* torch: no data, pointer 0 */
        return PyLong_FromLong(0);
    return PyLong_FromVoidPtr(cddp_data(self));
}

static PyObject *tensor_get_device(TensorObject *self, PyObject *unused)
{
    return PyLong_FromLong(self->storage->device >= 0 ? self->storage->device : -1);
}

static PyObject *tensor_detach(TensorObject *self, PyObject *unused)
{
    return (PyObject *)cddp_tensor_alias(self, self->ndim, self->shape, self->strides,
                                         self->offset);
}

static PyObject *tensor_detach_(TensorObject *self, PyObject *unused)
{
    Py_CLEAR(self->grad_fn);
    Py_CLEAR(self->view_base);
    self->requires_grad = 0;
    return Py_NewRef(self);
}

static PyObject *tensor_requires_grad_(TensorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"requires_grad", NULL};
    int flag = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:requires_grad_", kwlist, &flag))
        return NULL;
    if (set_requires_grad_flag(self, flag, 1) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *tensor_numpy(TensorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p:numpy", kwlist, &force))
        return NULL;
    if (cddp_needs_grad(self) && !force) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Can't call numpy() on Tensor that requires grad. Use "
                        "tensor.detach().numpy() instead.");
        return NULL;
    }
    if (self->storage->device >= 0 || cddp_is_meta(self)) {
        PyErr_Format(PyExc_TypeError,
                     "can't convert %s tensor to numpy. Use Tensor.cpu() to copy the tensor "
                     "to host memory first.", cddp_is_meta(self) ? "meta device type" : "cuda");
        return NULL;
    }
    return cddp_tensor_to_numpy(self);
}

/* np.asarray(t) / np.array(t, dtype): a view (copy only when a dtype conversion asks). */
static PyObject *tensor_array(TensorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None, *arr, *res;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:__array__", kwlist, &dtype, &copy))
        return NULL;
    arr = cddp_tensor_to_numpy(self);
    if (!arr || (dtype == Py_None && copy != Py_True))
        return arr;
    res = PyObject_CallMethod(arr, "astype", "O", dtype == Py_None ? (PyObject *)PyArray_DESCR((PyArrayObject *)arr) : dtype);
    Py_DECREF(arr);
    return res;
}

/* Tensor._make_subclass(cls, data, require_grad=False): an instance of cls sharing data's
 * storage — how nn.Parameter is built, as in torch. */
static PyObject *tensor_make_subclass(PyObject *unused, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cls", "data", "require_grad", NULL};
    PyObject *cls;
    TensorObject *data, *s;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!|p:_make_subclass", kwlist, &cls,
                                     cddp_state()->tensor_type, &data, &rg))
        return NULL;
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, cddp_state()->tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "_make_subclass: cls must be a Tensor subclass");
        return NULL;
    }
    s = (TensorObject *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
    if (!s)
        return NULL;
    s->storage = data->storage;
    cddp_storage_incref(s->storage);
    s->offset = data->offset;
    s->ndim = data->ndim;
    s->dtype = data->dtype;
    memcpy(s->shape, data->shape, sizeof s->shape);
    memcpy(s->strides, data->strides, sizeof s->strides);
    if (rg && set_requires_grad_flag(s, 1, 0) < 0) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static PyObject *tensor_format(TensorObject *self, PyObject *spec)
{
    PyObject *item, *res;
    if (self->ndim != 0)
        return PyObject_CallMethod((PyObject *)&PyBaseObject_Type, "__format__", "OO", self, spec);
    item = cddp_tensor_item(self);
    if (!item)
        return NULL;
    res = PyObject_Format(item, spec);
    Py_DECREF(item);
    return res;
}

PyMethodDef cddp_tensor_core_methods[] = {
    {"size", (PyCFunction)tensor_size, METH_VARARGS | METH_KEYWORDS, "size(dim=None)"},
    {"stride", (PyCFunction)tensor_stride, METH_VARARGS | METH_KEYWORDS, NULL},
    {"dim", (PyCFunction)tensor_dim, METH_NOARGS, NULL},
    {"ndimension", (PyCFunction)tensor_dim, METH_NOARGS, NULL},
    {"numel", (PyCFunction)tensor_numel, METH_NOARGS, NULL},
    {"nelement", (PyCFunction)tensor_numel, METH_NOARGS, NULL},
    {"element_size", (PyCFunction)tensor_element_size, METH_NOARGS, NULL},
    {"storage_offset", (PyCFunction)tensor_storage_offset, METH_NOARGS, NULL},
    {"is_contiguous", (PyCFunction)tensor_is_contiguous, METH_VARARGS | METH_KEYWORDS, NULL},
    {"is_floating_point", (PyCFunction)tensor_is_floating_point, METH_NOARGS, NULL},
    {"data_ptr", (PyCFunction)tensor_data_ptr, METH_NOARGS, NULL},
    {"get_device", (PyCFunction)tensor_get_device, METH_NOARGS, NULL},
    {"detach", (PyCFunction)tensor_detach, METH_NOARGS, "A view of the same data, out of the graph."},
    {"detach_", (PyCFunction)tensor_detach_, METH_NOARGS, NULL},
    {"requires_grad_", (PyCFunction)tensor_requires_grad_, METH_VARARGS | METH_KEYWORDS, NULL},
    {"numpy", (PyCFunction)tensor_numpy, METH_VARARGS | METH_KEYWORDS, "Zero-copy ndarray view."},
    {"__array__", (PyCFunction)tensor_array, METH_VARARGS | METH_KEYWORDS, NULL},
    {"_make_subclass", (PyCFunction)tensor_make_subclass, METH_VARARGS | METH_KEYWORDS | METH_STATIC, NULL},
    {"__format__", (PyCFunction)tensor_format, METH_O, NULL},
    {NULL},
};

/* ---- number protocol pieces that live here -------------------------------------------- */

static PyObject *scalar_or_raise(TensorObject *self, const char *what)
{
    if (cddp_numel(self) != 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "a Tensor with %lld elements cannot be converted to %s",
                     (long long)cddp_numel(self), what);
        return NULL;
    }
    return cddp_tensor_item(self);
}

static int tensor_bool(TensorObject *self)
{
    if (cddp_numel(self) != 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "Boolean value of Tensor with %s values is ambiguous",
                     cddp_numel(self) ? "more than one" : "no");
        return -1;
    }
    if (cddp_is_meta(self)) {
        PyErr_SetString(PyExc_RuntimeError, "Tensor.item() cannot be called on meta tensors");
        return -1;
    }
    return cddp_get_double(self, 0) != 0;
}

/* int(t) / float(t) of several elements: torch's ValueError (item() raises RuntimeError) */
static int one_element(TensorObject *self)
{
    if (cddp_numel(self) == 1)
        return 0;
    PyErr_SetString(PyExc_ValueError, "only one element tensors can be converted to Python "
                    "scalars");
    return -1;
}

/* float(t): torch warns once per process when t requires grad and grad mode is on (its
 * TORCH_WARN_ONCE; under no_grad, as in LBFGS's closure bookkeeping, it is silent). */
static PyObject *tensor_float(TensorObject *self)
{
    static int warned;
    PyObject *v, *r;
    if (!warned && cddp_grad_enabled && cddp_needs_grad(self)) {
        warned = 1;
        if (PyErr_WarnEx(PyExc_UserWarning, "Converting a tensor with requires_grad=True to a "
                         "scalar may lead to unexpected behavior.\nConsider using "
                         "tensor.detach() first.", 1) < 0)
            return NULL;
    }
    if (one_element(self) < 0 || !(v = scalar_or_raise(self, "Scalar")))
        return NULL;
    r = PyNumber_Float(v);
    Py_DECREF(v);
    return r;
}

static PyObject *tensor_int(TensorObject *self)
{
    PyObject *v, *r;
    if (one_element(self) < 0 || !(v = scalar_or_raise(self, "Scalar")))
        return NULL;
    r = PyNumber_Long(v);
    Py_DECREF(v);
    return r;
}

static PyObject *tensor_index(TensorObject *self)
{
    if (cddp_is_floating(self->dtype) || cddp_numel(self) != 1) {
        PyErr_SetString(PyExc_TypeError,
                        "only integer tensors of a single element can be converted to an index");
        return NULL;
    }
    return tensor_int(self);
}

static Py_ssize_t tensor_len(TensorObject *self)
{
    if (self->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)self->shape[0];
}

static Py_hash_t tensor_hash(PyObject *self)
{
    Py_hash_t h = (Py_hash_t)((uintptr_t)self >> 4);
    return h == -1 ? -2 : h;
}

/* ---- buffer protocol ------------------------------------------------------------------ */

static int tensor_getbuffer(TensorObject *self, Py_buffer *view, int flags)
{
    /* bfloat16 has no struct-module format: exported as raw 16-bit words ("H") */
    static const char *fmt[CDDP_NDTYPES] = {"f", "d", "q", "i", "?", "e", "H", "B", "b", "h"};
    Py_ssize_t *meta;
    size_t isz = cddp_dtype_size[self->dtype];
    if (self->storage->device >= 0 || cddp_is_meta(self)) {
        PyErr_Format(PyExc_BufferError, "cannot export a %s tensor's memory",
                     cddp_is_meta(self) ? "meta" : "CUDA");
        return -1;
    }
    if (!cddp_is_contiguous(self) && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
        PyErr_SetString(PyExc_BufferError, "tensor is not contiguous; ask for a strided buffer");
        return -1;
    }
    /* shape and strides in one block freed in releasebuffer */
    meta = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (self->ndim ? self->ndim : 1));
    if (!meta) {
        PyErr_NoMemory();
        return -1;
    }
    for (int d = 0; d < self->ndim; d++) {
        meta[d] = (Py_ssize_t)self->shape[d];
        meta[self->ndim + d] = (Py_ssize_t)(self->strides[d] * (int64_t)isz);
    }
    view->buf = cddp_data(self);
    view->obj = Py_NewRef(self);
    view->len = (Py_ssize_t)(cddp_numel(self) * (int64_t)isz);
    view->readonly = 0;
    view->itemsize = (Py_ssize_t)isz;
    view->format = (flags & PyBUF_FORMAT) ? (char *)fmt[self->dtype] : NULL;
    view->ndim = self->ndim;
    view->shape = meta;
    view->strides = meta + self->ndim;
    view->suboffsets = NULL;
    view->internal = meta;
    self->exports++;
    return 0;
}

static void tensor_releasebuffer(TensorObject *self, Py_buffer *view)
{
    PyMem_Free(view->internal);
    self->exports--;
}

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TensorObject, weakreflist), READONLY},
    {"__dictoffset__", T_PYSSIZET, offsetof(TensorObject, dict), READONLY},
    {"_exports", T_PYSSIZET, offsetof(TensorObject, exports), READONLY,
     "live buffer-protocol exports of this tensor"},
    {NULL},
};

/* Tensor methods come from every op file; module.c concatenates them into this pointer
 * before the type is created. */
PyMethodDef *cddp_tensor_methods_all;

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_tp_new, tensor_new},
    {Py_tp_getset, tensor_getset},
    {Py_tp_members, tensor_members},
    {Py_tp_methods, NULL},        /* filled in at init */
    {Py_tp_repr, cddp_tensor_repr},
    {Py_tp_hash, tensor_hash},
    {Py_tp_richcompare, cddp_richcompare},
    {Py_tp_iter, cddp_tensor_iter},
    {Py_nb_add, cddp_nb_add},
    {Py_nb_subtract, cddp_nb_sub},
    {Py_nb_multiply, cddp_nb_mul},
    {Py_nb_true_divide, cddp_nb_truediv},
    {Py_nb_floor_divide, cddp_nb_floordiv},
    {Py_nb_remainder, cddp_nb_remainder},
    {Py_nb_power, cddp_nb_pow},
    {Py_nb_negative, cddp_nb_neg},
    {Py_nb_absolute, cddp_nb_abs},
    {Py_nb_inplace_add, cddp_nb_iadd},
    {Py_nb_inplace_subtract, cddp_nb_isub},
    {Py_nb_inplace_multiply, cddp_nb_imul},
    {Py_nb_inplace_true_divide, cddp_nb_itruediv},
    {Py_nb_and, cddp_nb_and},
    {Py_nb_or, cddp_nb_or},
    {Py_nb_xor, cddp_nb_xor},
    {Py_nb_invert, cddp_nb_invert},
    {Py_nb_matrix_multiply, cddp_nb_matmul},
    {Py_nb_bool, tensor_bool},
    {Py_nb_float, tensor_float},
    {Py_nb_int, tensor_int},
    {Py_nb_index, tensor_index},
    {Py_mp_length, tensor_len},
    {Py_mp_subscript, cddp_mp_subscript},
    {Py_mp_ass_subscript, cddp_mp_ass_subscript},
    {Py_bf_getbuffer, tensor_getbuffer},
    {Py_bf_releasebuffer, tensor_releasebuffer},
    {Py_tp_doc, "cddp.Tensor: an n-dimensional strided array with autograd, implemented in C."},
    {0, NULL},
};

static PyType_Spec tensor_spec = {
    .name = "cddp.Tensor",
    .basicsize = sizeof(TensorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = tensor_slots,
};

int cddp_tensor_type_init(PyObject *m, cddp_state_t *st, PyMethodDef *methods)
{
    for (PyType_Slot *s = tensor_slots; s->slot; s++)
        if (s->slot == Py_tp_methods)
            s->pfunc = methods;
    st->tensor_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tensor_spec, NULL);
    if (!st->tensor_type)
        return -1;
    return PyModule_AddObjectRef(m, "Tensor", (PyObject *)st->tensor_type);
}
