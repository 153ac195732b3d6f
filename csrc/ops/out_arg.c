/* ops/out_arg.c — torch's `out=` keyword for the module-level functions: cddp._C._OutFunction
 * wraps a function, and cddp/__init__.py wraps every torch function that takes out=.
 *
 *     f(*args, **kwargs)            -> the wrapped function's result, unchanged (one vectorcall
 *                                      forwarded: no copy of the arguments, no extra lookup)
 *     f(*args, out=t, **kwargs)     -> t, holding the result
 *     f(*args, out=(a, b))          -> (a, b) holding a (values, indices) result, of the
 *                                      result's named-tuple type
 *
 * The result is computed first, then written into out: checked as torch checks it — out is a
 * Tensor; no autograd through out= (torch's "functions with out=... arguments don't support
 * automatic differentiation" when grad mode is on and an input or out requires grad); the
 * result's dtype castable to out's (no floating into integral, nothing but bool into bool); a
 * shape mismatch resizes out, with torch's deprecation warning when out had elements.
 * Creation functions (zeros, arange, randn, ...) instead compute in out's dtype: their wrapper
 * passes dtype=out.dtype, as torch's factory functions take the dtype from out.
 *
 * The elementwise binary functions (add, mul, eq, clamp, ...) take out= in their own parser
 * and call cddp_out_finish, so the hottest calls pay no wrapper; everything else is wrapped.
 *
 * Decision: one extra pass (result, then copy) rather than a destination argument in every
 * kernel; out= is rare on hot paths, and this gives every function the same semantics.
 */
#include "module.h"
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *fn;                 /* the wrapped callable */
    PyObject *name;               /* str: torch's name, for messages and pickling */
    int creation;                 /* pass dtype=out.dtype instead of casting the result */
    int takes_out;                /* 0: only input= is handled (torch's function has no out=) */
    vectorcallfunc vectorcall;
} OutFunctionObject;

static int can_cast(cddp_dtype from, cddp_dtype to)
{
    if (cddp_is_floating(from) && !cddp_is_floating(to))
        return 0;
    return !(to == CDDP_BOOL && from != CDDP_BOOL);
}

static void shape_str(const TensorObject *t, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int d = 0; d < t->ndim && k + 24 < len; d++)
        k += (size_t)snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
}

/* Contract: writes result r into the tensor out (checks above); 0, or -1 with an exception. */
static int write_one(const char *name, TensorObject *r, PyObject *outobj)
{
    TensorObject *out = (TensorObject *)outobj;
    int same = 1;
    if (!cddp_tensor_check(outobj)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'out' must be Tensor, not %s", name,
                     Py_TYPE(outobj)->tp_name);
        return -1;
    }
    if (cddp_grad_enabled && (cddp_needs_grad(r) || cddp_needs_grad(out))) {
        PyErr_Format(PyExc_RuntimeError, "%s(): functions with out=... arguments don't support "
                     "automatic differentiation, but one of the arguments requires grad.", name);
        return -1;
    }
    if (!can_cast(r->dtype, out->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "result type %s can't be cast to the desired output "
                     "type %s", cddp_dtype_torch_name[r->dtype],
                     cddp_dtype_torch_name[out->dtype]);
        return -1;
    }
    if (r == out)
        return 0;
    if (out->ndim != r->ndim)
        same = 0;
    for (int d = 0; same && d < r->ndim; d++)
        same = out->shape[d] == r->shape[d];
    if (!same) {
        int64_t n = 1;
        for (int d = 0; d < out->ndim; d++)
            n *= out->shape[d];
        if (n) {
            char have[256], want[256];
            shape_str(out, have, sizeof have);
            shape_str(r, want, sizeof want);
            if (PyErr_WarnFormat(PyExc_UserWarning, 1, "An output with one or more elements was "
                                 "resized since it had shape [%s], which does not match the "
                                 "required output shape [%s]. This behavior is deprecated, and "
                                 "in a future PyTorch release outputs will not be resized "
                                 "unless they have zero elements. You can explicitly reuse an "
                                 "out tensor t by resizing it, inplace, to zero elements with "
                                 "t.resize_(0).", have, want) < 0)
                return -1;
        }
        if (cddp_tensor_resize(out, r->ndim, r->shape) < 0)
            return -1;
    }
    if (cddp_check_writable(out) < 0)
        return -1;
    return cddp_copy_into(out, r);
}

/* out for a tuple result: each field into its tensor; the result type rebuilt around them. */
static PyObject *write_tuple(const char *name, PyObject *res, PyObject *outobj)
{
    PyObject *outs, *built;
    Py_ssize_t n = PyTuple_GET_SIZE(res);
    if (!(PyTuple_Check(outobj) || PyList_Check(outobj)) || PySequence_Size(outobj) != n) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'out' must be tuple of %zd Tensors", name,
                     n);
        return NULL;
    }
    outs = PySequence_Tuple(outobj);
    if (!outs)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(res, i);
        if (!cddp_tensor_check(r)) {
            PyErr_Format(PyExc_TypeError, "%s(): out= needs a tensor result", name);
            goto fail;
        }
        if (write_one(name, (TensorObject *)r, PyTuple_GET_ITEM(outs, i)) < 0)
            goto fail;
    }
    if (Py_IS_TYPE(res, &PyTuple_Type))
        return outs;
    /* cddp's named results take their fields positionally (Python classes) or as one
     * sequence (the C return_types): try both, else hand back the plain tuple */
    built = PyObject_Call((PyObject *)Py_TYPE(res), outs, NULL);
    if (!built) {
        PyErr_Clear();
        built = PyObject_CallOneArg((PyObject *)Py_TYPE(res), outs);
    }
    if (!built) {
        PyErr_Clear();
        return outs;
    }
    Py_DECREF(outs);
    return built;
fail:
    Py_DECREF(outs);
    return NULL;
}

/* Contract in core/cddp.h. */
PyObject *cddp_out_finish(const char *name, PyObject *res, PyObject *outobj)
{
    PyObject *final = NULL;
    size_t len;
    if (!res || outobj == Py_None)
        return res;
    len = strlen(name);
    if (len && name[len - 1] == '_') {      /* in-place forms have no out= (torch's error) */
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument 'out'", name);
    } else if (cddp_tensor_check(res)) {
        if (write_one(name, (TensorObject *)res, outobj) == 0)
            final = Py_NewRef(outobj);
    } else if (PyTuple_Check(res)) {
        final = write_tuple(name, res, outobj);
    } else {
        PyErr_Format(PyExc_TypeError, "%s(): out= needs a tensor result", name);
    }
    Py_DECREF(res);
    return final;
}

int cddp_is_complex_obj(PyObject *o)
{
    int r;
    if (o == Py_None || cddp_tensor_check(o) || Py_IS_TYPE(o, cddp_state()->dtype_type))
        return 0;
    r = PyObject_HasAttrString((PyObject *)Py_TYPE(o), "_cddp_complex");
    return r > 0;
}

int cddp_arg_type_error(const char *fname, const char *argname, const char *what, PyObject *o)
{
    if (o && cddp_is_complex_obj(o))
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' is a complex tensor; cddp's complex "
                     "tensors take the operators (+ - * / @ **) and their methods (z.sum(), "
                     "z.abs(), z.exp(), ...), not torch.%s (cddp/_complex.py lists what "
                     "works)", fname, argname, fname);
    else
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be %s, not %s", fname, argname,
                     what, o ? Py_TYPE(o)->tp_name : "nothing");
    return -1;
}

PyObject *cddp_complex_call(const char *fn, PyObject *first, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, at = first ? 1 : 0;
    PyObject *mod = NULL, *call = NULL, *res = NULL;
    PyObject **stack = PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + nkw + 1));
    if (!stack)
        return PyErr_NoMemory();
    if (!(mod = PyImport_ImportModule("cddp._complex")) ||
        !(call = PyObject_GetAttrString(mod, fn)))
        goto done;
    stack[0] = first;                       /* the call's arguments, `first` before them */
    memcpy(stack + at, args, sizeof(PyObject *) * (size_t)(nargs + nkw));
    res = PyObject_Vectorcall(call, stack, (size_t)(nargs + at), kwnames);
done:
    PyMem_Free(stack);
    Py_XDECREF(mod);
    Py_XDECREF(call);
    return res;
}

static PyObject *out_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames);

/* f(input=x, **rest) -> f(x, **rest): the wrapped C functions take their first argument
 * positionally (many are METH_O); torch's take it by name too. nkw keywords, no positional;
 * input at keyword index `at`. */
static PyObject *input_first(PyObject *self, PyObject *const *args, Py_ssize_t nkw,
                             PyObject *kwnames, Py_ssize_t at)
{
    PyObject **argv = PyMem_Malloc(sizeof(PyObject *) * (size_t)nkw), *kw = NULL, *res = NULL;
    Py_ssize_t j = 0;
    if (!argv)
        return PyErr_NoMemory();
    if (nkw > 1 && !(kw = PyTuple_New(nkw - 1)))
        goto done;
    argv[0] = args[at];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        if (k == at)
            continue;
        argv[1 + j] = args[k];
        PyTuple_SET_ITEM(kw, j, Py_NewRef(PyTuple_GET_ITEM(kwnames, k)));
        j++;
    }
    res = out_vectorcall(self, argv, 1, kw);
done:
    Py_XDECREF(kw);
    PyMem_Free(argv);
    return res;
}

static PyObject *out_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames)
{
    OutFunctionObject *o = (OutFunctionObject *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw, at = -1, dtype_at = -1, k, j;
    PyObject *outobj, *res = NULL, *kw2 = NULL, **argv2 = NULL, *final = NULL;
    const char *name;
    if (!kwnames)
        return PyObject_Vectorcall(o->fn, args, nargsf, NULL);
    nkw = PyTuple_GET_SIZE(kwnames);
    for (k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        if (PyUnicode_CompareWithASCIIString(key, "out") == 0 && o->takes_out)
            at = k;
        else if (PyUnicode_CompareWithASCIIString(key, "dtype") == 0)
            dtype_at = k;
        else if (nargs == 0 && PyUnicode_CompareWithASCIIString(key, "input") == 0)
            return input_first(self, args, nkw, kwnames, k);
    }
    /* a complex dtype= (checked only when it is not a cddp.dtype: real calls pay nothing):
     * cddp._complex._factory_call(name, fn, *args, **kwargs) */
    if (o->creation && dtype_at >= 0 && cddp_is_complex_obj(args[nargs + dtype_at])) {
        PyObject *pair = PyTuple_Pack(2, o->name, o->fn), *res;
        if (!pair)
            return NULL;
        res = cddp_complex_call("_factory_call", pair, args, nargs, kwnames);
        Py_DECREF(pair);
        return res;
    }
    if (at < 0)
        return PyObject_Vectorcall(o->fn, args, nargsf, kwnames);
    outobj = args[nargs + at];
    name = PyUnicode_AsUTF8(o->name);
    if (!name)
        return NULL;
    /* the call without out= (creation functions: with dtype=out.dtype unless given) */
    {
        int add_dtype = o->creation && dtype_at < 0 && cddp_tensor_check(outobj) &&
                        outobj != Py_None;
        Py_ssize_t nkw2 = nkw - 1 + add_dtype;
        argv2 = PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + nkw2 + 1));
        kw2 = nkw2 ? PyTuple_New(nkw2) : NULL;
        if (!argv2 || (nkw2 && !kw2)) {
            PyErr_NoMemory();
            goto done;
        }
        for (k = 0; k < nargs; k++)
            argv2[k] = args[k];
        for (k = 0, j = 0; k < nkw; k++) {
            if (k == at)
                continue;
            argv2[nargs + j] = args[nargs + k];
            PyTuple_SET_ITEM(kw2, j, Py_NewRef(PyTuple_GET_ITEM(kwnames, k)));
            j++;
        }
        if (add_dtype) {
            PyObject *key = PyUnicode_FromString("dtype");
            if (!key)
                goto done;
            argv2[nargs + j] = cddp_dtype_to_py(((TensorObject *)outobj)->dtype);
            PyTuple_SET_ITEM(kw2, j, key);
        }
        res = PyObject_Vectorcall(o->fn, argv2, (size_t)nargs, kw2);
    }
    final = cddp_out_finish(name, res, outobj);
done:
    Py_XDECREF(kw2);
    PyMem_Free(argv2);
    return final;
}

static PyObject *out_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs)
{
    PyObject *fn, *name;
    int creation = 0;
    OutFunctionObject *o;
    int takes_out = 1;
    static char *kwlist[] = {"fn", "name", "creation", "out", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OU|pp:_OutFunction", kwlist, &fn, &name,
                                     &creation, &takes_out))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "_OutFunction: fn must be callable");
        return NULL;
    }
    o = (OutFunctionObject *)tp->tp_alloc(tp, 0);
    if (!o)
        return NULL;
    o->fn = Py_NewRef(fn);
    o->name = Py_NewRef(name);
    o->creation = creation;
    o->takes_out = takes_out;
    o->vectorcall = out_vectorcall;
    return (PyObject *)o;
}

static int out_traverse(OutFunctionObject *o, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(o));
    Py_VISIT(o->fn);
    Py_VISIT(o->name);
    return 0;
}

static int out_clear(OutFunctionObject *o)
{
    Py_CLEAR(o->fn);
    Py_CLEAR(o->name);
    return 0;
}

static void out_dealloc(OutFunctionObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    out_clear(o);
    tp->tp_free(o);
    Py_DECREF(tp);
}

/* __name__, __doc__, __module__, __qualname__, __wrapped__ (inspect.signature follows it),
 * all the wrapped function's */
static PyObject *out_getattro(PyObject *self, PyObject *attr)
{
    OutFunctionObject *o = (OutFunctionObject *)self;
    PyObject *res;
    /* before the type's own: pickle finds the function as cddp.<name>, not cddp._C's */
    if (PyUnicode_CompareWithASCIIString(attr, "__module__") == 0)
        return PyUnicode_FromString("cddp");
    if (PyUnicode_CompareWithASCIIString(attr, "__name__") == 0 ||
        PyUnicode_CompareWithASCIIString(attr, "__qualname__") == 0)
        return Py_NewRef(o->name);
    if (PyUnicode_CompareWithASCIIString(attr, "__doc__") == 0)
        return PyObject_GetAttr(o->fn, attr);
    res = PyObject_GenericGetAttr(self, attr);
    if (res || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return res;
    PyErr_Clear();
    if (PyUnicode_CompareWithASCIIString(attr, "__wrapped__") == 0)
        return Py_NewRef(o->fn);
    return PyObject_GetAttr(o->fn, attr);
}

/* pickled as the global cddp.<name> */
static PyObject *out_reduce(PyObject *self, PyObject *unused)
{
    return Py_NewRef(((OutFunctionObject *)self)->name);
}

static PyObject *out_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<built-in function %U>", ((OutFunctionObject *)self)->name);
}

static PyMethodDef out_methods[] = {
    {"__reduce__", out_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyMemberDef out_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(OutFunctionObject, vectorcall), READONLY},
    {NULL},
};

static PyType_Slot out_slots[] = {
    {Py_tp_new, out_new},
    {Py_tp_dealloc, out_dealloc},
    {Py_tp_traverse, out_traverse},
    {Py_tp_clear, out_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_getattro, out_getattro},
    {Py_tp_repr, out_repr},
    {Py_tp_methods, out_methods},
    {Py_tp_members, out_members},
    {Py_tp_doc, "_OutFunction(fn, name, creation=False): fn with torch's out= keyword"},
    {0, NULL},
};

static PyType_Spec out_spec = {
    .name = "cddp._C._OutFunction",
    .basicsize = sizeof(OutFunctionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = out_slots,
};

int cddp_out_arg_init(PyObject *m, cddp_state_t *st)
{
    st->out_function_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &out_spec, NULL);
    if (!st->out_function_type)
        return -1;
    return PyModule_AddObjectRef(m, "_OutFunction", (PyObject *)st->out_function_type);
}
