/* module.c — cddp._C: multi-phase module init, the module state (every heap type and cached
 * object of the extension; traversed, cleared and freed here), and the method tables of every
 * layer concatenated into the Tensor type and the module. The layers' contributions are
 * declared in module.h.
 */
#include "module.h"
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

static PyMethodDef *tensor_tables[] = {
    cddp_tensor_core_methods, cddp_autograd_tensor_methods, cddp_elementwise_tensor_methods,
    cddp_reduce_tensor_methods, cddp_linalg_tensor_methods, cddp_shape_tensor_methods,
    cddp_index_tensor_methods, cddp_creation_tensor_methods,
    cddp_tri_tensor_methods, cddp_repeat_tensor_methods, cddp_cumprod_tensor_methods,
    cddp_strided_tensor_methods,
    cddp_nonzero_tensor_methods, cddp_index_ops_tensor_methods,
    cddp_addmm_family_tensor_methods, cddp_unique_tensor_methods, cddp_search_tensor_methods,
    cddp_share_tensor_methods, cddp_resize_tensor_methods, NULL,
};
static PyMethodDef *module_tables[] = {
    cddp_core_module_methods, cddp_autograd_module_methods, cddp_function_module_methods,
    cddp_elementwise_module_methods, cddp_complex_module_methods,
    cddp_reduce_module_methods, cddp_linalg_module_methods, cddp_shape_module_methods,
    cddp_index_module_methods, cddp_creation_module_methods, cddp_loss_module_methods,
    cddp_optim_module_methods, cddp_clip_module_methods, cddp_linear_module_methods,
    cddp_sampler_module_methods, cddp_store_module_methods, cddp_pg_module_methods,
    cddp_dtype_module_methods,
    cddp_rnn_module_methods,
    cddp_tri_module_methods, cddp_repeat_module_methods, cddp_cumprod_module_methods,
    cddp_strided_module_methods,
    cddp_nonzero_module_methods, cddp_index_ops_module_methods,
    cddp_addmm_family_module_methods, cddp_einsum_module_methods, cddp_unique_module_methods,
    cddp_search_module_methods, cddp_loss_extra_module_methods,
    cddp_storage_module_methods,
    cddp_layer_norm_module_methods, cddp_embedding_module_methods, cddp_sdpa_module_methods,
    cddp_batch_norm_module_methods, cddp_sync_bn_module_methods,
    cddp_group_norm_module_methods, cddp_activation_module_methods,
    cddp_share_module_methods, cddp_fused_optim_module_methods,
    cddp_conv_module_methods, cddp_pool_module_methods, cddp_pad_module_methods,
    cddp_interpolate_module_methods, cddp_fold_module_methods,
    cddp_grid_sample_module_methods, cddp_ctc_module_methods,
    cddp_storage_view_module_methods,
    cddp_autocast_module_methods, cddp_grad_scaler_module_methods, NULL,
};

/* One NULL-terminated array out of several; lives as long as the process (types keep it). */
static PyMethodDef *concat_tables(PyMethodDef **tables)
{
    size_t n = 0, k = 0;
    PyMethodDef *all;
    for (PyMethodDef **t = tables; *t; t++)
        for (PyMethodDef *d = *t; d->ml_name; d++)
            n++;
    all = PyMem_RawCalloc(n + 1, sizeof(PyMethodDef));
    if (!all)
        return (PyMethodDef *)PyErr_NoMemory();
    for (PyMethodDef **t = tables; *t; t++)
        for (PyMethodDef *d = *t; d->ml_name; d++)
            all[k++] = *d;
    return all;
}

/* ---- small module-level functions that belong to no op file --------------------------- */

/* The class Tensor.shape returns: a tuple subclass (cddp.Size), called through tp_new. */
static PyObject *py_set_size_type(PyObject *m, PyObject *tp)
{
    if (!PyType_Check(tp) || !PyType_IsSubtype((PyTypeObject *)tp, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "_set_size_type: expected a subclass of tuple");
        return NULL;
    }
    Py_XSETREF(cddp_state()->size_type, Py_NewRef(tp));
    Py_RETURN_NONE;
}

static PyObject *py_set_device_objects(PyObject *m, PyObject *args)
{
    PyObject *cpu, *factory;
    if (!PyArg_ParseTuple(args, "OO", &cpu, &factory))
        return NULL;
    Py_XSETREF(cddp_state()->device_cpu, Py_NewRef(cpu));
    Py_XSETREF(cddp_state()->device_factory, Py_NewRef(factory));
    Py_RETURN_NONE;
}

static PyObject *py_from_numpy(PyObject *m, PyObject *arr)
{
    if (PyArray_Check(arr) && PyArray_ISCOMPLEX((PyArrayObject *)arr))   /* cddp/_complex.py */
        return cddp_complex_call("_from_numpy_call", NULL, &arr, 1, NULL);
    return (PyObject *)cddp_tensor_from_numpy(arr);
}

static PyObject *py_is_tensor(PyObject *m, PyObject *o)
{
    return PyBool_FromLong(cddp_tensor_check(o));
}

static PyObject *py_get_default_dtype(PyObject *m, PyObject *unused)
{
    return Py_NewRef(cddp_dtype_to_py(cddp_state()->default_dtype));
}

static PyObject *py_set_default_dtype(PyObject *m, PyObject *o)
{
    cddp_dtype d;
    if (cddp_dtype_from_py(o, &d) < 0)
        return NULL;
    if (!cddp_is_floating(d)) {
        PyErr_SetString(PyExc_TypeError, "only floating-point types are supported as the default type");
        return NULL;
    }
    cddp_state()->default_dtype = d;
    Py_RETURN_NONE;
}

/* _set_flush_denormal(on): FTZ (bit 15) and DAZ (bit 6) of the calling thread's MXCSR, as
 * torch.set_flush_denormal sets them; True when applied, False off x86. */
static PyObject *py_set_flush_denormal(PyObject *m, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
#if defined(__SSE2__)
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(on ? csr | 0x8040u : csr & ~0x8040u);
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

PyMethodDef cddp_core_module_methods[] = {
    {"_set_flush_denormal", py_set_flush_denormal, METH_O, NULL},
    {"_set_size_type", py_set_size_type, METH_O, NULL},
    {"_set_device_objects", py_set_device_objects, METH_VARARGS, NULL},
    {"from_numpy", py_from_numpy, METH_O, "from_numpy(ndarray) -> Tensor sharing its memory"},
    {"is_tensor", py_is_tensor, METH_O, NULL},
    {"get_default_dtype", py_get_default_dtype, METH_NOARGS, NULL},
    {"set_default_dtype", py_set_default_dtype, METH_O, NULL},
    {NULL},
};

/* ---- init ----------------------------------------------------------------------------- */

static int cddp_exec(PyObject *m)
{
    cddp_state_t *st = PyModule_GetState(m);
    PyMethodDef *tmeth, *mmeth;
    if (cddp_state_ptr) {
        PyErr_SetString(PyExc_ImportError, "cddp._C can be loaded once per process");
        return -1;
    }
    if (_import_array() < 0)
        return -1;
    cddp_state_ptr = st;
    st->default_dtype = CDDP_FLOAT32;
    tmeth = concat_tables(tensor_tables);
    mmeth = concat_tables(module_tables);
    if (!tmeth || !mmeth)
        goto fail;
    if (PyModule_AddFunctions(m, mmeth) < 0)
        goto fail;
    if (cddp_dtype_init(m, st) < 0 || cddp_node_type_init(m, st) < 0 ||
        cddp_function_type_init(m, st) < 0 ||
        cddp_tensor_type_init(m, st, tmeth) < 0 || cddp_random_init(m, st) < 0 ||
        cddp_blas_init(m, st) < 0 || cddp_return_types_init(m, st) < 0 ||
        cddp_store_types_init(m, st) < 0 || cddp_pg_types_init(m, st) < 0 ||
        cddp_reducer_init(m, st) < 0 || cddp_out_arg_init(m, st) < 0)
        goto fail;
    return 0;
fail:
    cddp_state_ptr = NULL;
    return -1;
}

/* Every object the state owns, once: traverse and clear share this list. */
#define CDDP_STATE_OBJECTS(X, st)                                                          \
    X((st)->tensor_type); X((st)->node_type); X((st)->dtype_type); X((st)->generator_type);  \
    X((st)->function_type); X((st)->size_type); X((st)->default_generator);                  \
    X((st)->device_cpu);                                                                     \
    X((st)->device_factory); X((st)->return_types[0]); X((st)->return_types[1]);            \
    X((st)->pg_type); X((st)->work_type); X((st)->reducer_type);                             \
    X((st)->store_server_type); X((st)->store_client_type); X((st)->dist_backend_error);     \
    X((st)->out_function_type);                                                              \
    X((st)->dist_timeout_error);                                                             \
    for (int k_ = 0; k_ < 3; k_++)                                                            \
        X((st)->store_exc[k_]);                                                              \
    for (int d_ = 0; d_ < CDDP_NDTYPES; d_++)                                                 \
        X((st)->dtypes[d_])

static int cddp_traverse(PyObject *m, visitproc visit, void *arg)
{
    cddp_state_t *st = PyModule_GetState(m);
    if (!st)
        return 0;
    CDDP_STATE_OBJECTS(Py_VISIT, st);
    return 0;
}

static int cddp_clear(PyObject *m)
{
    cddp_state_t *st = PyModule_GetState(m);
    if (!st)
        return 0;
    CDDP_STATE_OBJECTS(Py_CLEAR, st);
    return 0;
}

/* The state goes with the module; cddp_state() must not outlive it. */
static void cddp_free(void *m)
{
    cddp_clear((PyObject *)m);
    if (cddp_state_ptr == PyModule_GetState((PyObject *)m))
        cddp_state_ptr = NULL;
}

static PyModuleDef_Slot cddp_slots[] = {
    {Py_mod_exec, cddp_exec},
    {0, NULL},
};

static struct PyModuleDef cddp_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cddp._C",
    .m_doc = "cddp's C core: Tensor, autograd, ops.",
    .m_size = sizeof(cddp_state_t),
    .m_slots = cddp_slots,
    .m_traverse = cddp_traverse,
    .m_clear = cddp_clear,
    .m_free = cddp_free,
};

PyMODINIT_FUNC PyInit__C(void)
{
    return PyModuleDef_Init(&cddp_module);
}
