/* autograd/saved.c — saved-tensor hooks: what a node keeps for backward while
 * torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook) is active
 * (torch/csrc/autograd/saved_variable.cpp with python_saved_variable_hooks.cpp).
 *
 *   with saved_tensors_hooks(pack, unpack):     # Python: cddp/autograd/graph.py
 *       y = op(x)        # the node keeps a placeholder for x: pack(x)'s result, not x
 *   y.backward()         # the node's first use of the slot calls unpack(packed) -> tensor
 *
 * A placeholder is a Tensor with x's shape, strides and dtype over a storage with no data
 * (nbytes 0, data NULL) whose owner is the pair (packed, unpack) and whose release is
 * packed_release — how it is recognised. Nothing reads a saved tensor's data without going
 * through cddp_node_saved (node.c), which unpacks first, and unpack's result must match the
 * placeholder's shape and dtype, so a hook cannot hand a kernel a tensor of the wrong size.
 * This is what activation checkpointing (cddp/utils/checkpoint.py) is built on. The hooks are
 * per thread, as grad mode is. Dimension legend: none (any shapes).
 */
#include "autograd/autograd.h"
#include <string.h>

static _Thread_local PyObject *hook_pack, *hook_unpack;    /* owned; NULL: no hooks */

static void packed_release(cddp_storage *s)
{
    Py_XDECREF((PyObject *)s->owner);
}

int cddp_saved_is_packed(const TensorObject *t)
{
    return t->storage->release == packed_release;
}

/* Contract in autograd/autograd.h. */
void cddp_saved_hooks_swap(PyObject **pack, PyObject **unpack)
{
    PyObject *p = hook_pack, *u = hook_unpack;
    hook_pack = *pack;
    hook_unpack = *unpack;
    *pack = p;
    *unpack = u;
}

/* Contract in autograd/autograd.h. */
TensorObject *cddp_saved_pack(TensorObject *t)
{
    PyObject *pack = hook_pack, *unpack = hook_unpack, *packed = NULL, *owner = NULL;
    TensorObject *ph = NULL;
    cddp_storage *s;
    if (!pack)
        return (TensorObject *)Py_NewRef(t);
    int grad = cddp_grad_enabled;
    hook_pack = hook_unpack = NULL;          /* a hook's own ops save as usual (torch too) */
    cddp_grad_enabled = 0;                   /* and record no graph (torch packs in no_grad) */
    packed = PyObject_CallOneArg(pack, (PyObject *)t);
    cddp_grad_enabled = grad;
    hook_pack = pack;
    hook_unpack = unpack;
    if (!packed)
        return NULL;
    owner = PyTuple_Pack(2, packed, unpack);
    ph = owner ? cddp_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset) : NULL;
    if (!ph)
        goto done;
    s = cddp_storage_from_pyobject(NULL, 0, owner);
    if (!s) {
        Py_CLEAR(ph);
        goto done;
    }
    s->release = packed_release;
    cddp_storage_decref(ph->storage);
    ph->storage = s;
    ph->offset = 0;
done:
    Py_DECREF(packed);
    Py_XDECREF(owner);
    return ph;
}

/* "[2, 3]" into buf. */
static void shape_str(char *buf, size_t cap, const TensorObject *t)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < cap - 24; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    snprintf(buf + k, cap - k, "]");
}

/* Contract in autograd/autograd.h. */
TensorObject *cddp_saved_unpack(TensorObject *ph)
{
    PyObject *owner = (PyObject *)ph->storage->owner, *r;
    TensorObject *t;
    r = PyObject_CallOneArg(PyTuple_GET_ITEM(owner, 1), PyTuple_GET_ITEM(owner, 0));
    if (!r)
        return NULL;
    if (!cddp_tensor_check(r)) {
        PyErr_Format(PyExc_TypeError, "Output of saved tensor unpack_hook expected to be a "
                     "Tensor but got result of type %s", Py_TYPE(r)->tp_name);
        Py_DECREF(r);
        return NULL;
    }
    t = (TensorObject *)r;
    if (t->dtype != ph->dtype || t->ndim != ph->ndim ||
        memcmp(t->shape, ph->shape, sizeof(int64_t) * (size_t)t->ndim) != 0) {
        char got[160], want[160];
        shape_str(got, sizeof got, t);
        shape_str(want, sizeof want, ph);
        PyErr_Format(PyExc_RuntimeError, "saved tensor unpack_hook returned a tensor of "
                     "shape %s and dtype %s, but a tensor of shape %s and dtype %s was saved",
                     got, cddp_dtype_name[t->dtype], want, cddp_dtype_name[ph->dtype]);
        Py_DECREF(r);
        return NULL;
    }
    if (cddp_is_contiguous(ph) && !cddp_is_contiguous(t)) {
        /* kernels may rely on the layout of what they saved (their outputs: contiguous) */
        TensorObject *c = cddp_tensor_contiguous_raw(t);
        Py_DECREF(t);
        return c;
    }
    return t;
}
