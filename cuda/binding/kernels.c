/* kernels.c — the binding of kernels.h for tests/test_cuda_gpu.py until device tensors exist:
 * _run_kernel copies host bytes to device 0 (memory from its caching allocator), runs one
 * kernel on the default stream, synchronizes and returns the result's bytes, so a test can
 * compare against NumPy. Shapes: a, b (n,) of `dtype`; out (n,) of `out_dtype`, or (1,) for
 * "sum".
 *
 *     _run_kernel(name, dtype, out_dtype, n, a, b, value, offset=0) -> bytes
 *         name: "fill" (value), "cast" (a), "add"/"mul" (a, b), "sum" (a)
 *         dtype codes: 0 float32, 1 float16, 2 bfloat16 (kernels.h)
 *         offset: elements to shift every device buffer by, so 1 makes the pointers
 *         misaligned and the kernels take their scalar (non-vector) paths
 */
#include <cuda_runtime_api.h>
#include <string.h>

#include "binding.h"

#include "allocator.h"
#include "check.h"
#include "kernels.h"

typedef struct run_args {
    const char *name;
    int dtype, out_dtype;
    size_t n, offset;
    const char *a, *b;
    double value;
    char *out;           /* host result, out_bytes long */
    size_t out_bytes;
} run_args;

/* Device buffers for one run, all from allocator `al` (released in one place). */
static int run_on_device(cddp_allocator *al, run_args *r)
{
    size_t in_bytes = r->n * cddp_cu_itemsize(r->dtype);
    size_t in_off = r->offset * cddp_cu_itemsize(r->dtype), out_off = r->offset * cddp_cu_itemsize(r->out_dtype);
    void *ba = NULL, *bb = NULL, *bout = NULL, *work = NULL;   /* the blocks */
    char *da, *db, *dout;                                     /* the shifted buffers in them */
    int rc = 0;
    CHECK_RC(cddp_allocator_malloc(al, in_bytes + in_off, NULL, &ba));
    CHECK_RC(cddp_allocator_malloc(al, in_bytes + in_off, NULL, &bb));
    CHECK_RC(cddp_allocator_malloc(al, r->out_bytes + out_off, NULL, &bout));
    CHECK_RC(cddp_allocator_malloc(al, cddp_cu_sum_workspace(r->n) * sizeof(float), NULL, &work));
    da = (char *)ba + in_off;
    db = (char *)bb + in_off;
    dout = (char *)bout + out_off;
    if (r->a && in_bytes)
        CHECK_CUDA(cudaMemcpy(da, r->a, in_bytes, cudaMemcpyHostToDevice));
    if (r->b && in_bytes)
        CHECK_CUDA(cudaMemcpy(db, r->b, in_bytes, cudaMemcpyHostToDevice));
    if (strcmp(r->name, "fill") == 0)
        CHECK_RC(cddp_cu_fill(dout, r->out_dtype, r->n, r->value, NULL));
    else if (strcmp(r->name, "cast") == 0)
        CHECK_RC(cddp_cu_cast(dout, r->out_dtype, da, r->dtype, r->n, NULL));
    else if (strcmp(r->name, "add") == 0 || strcmp(r->name, "mul") == 0)
        CHECK_RC(cddp_cu_binary(r->name[0] == 'a' ? CDDP_CU_ADD : CDDP_CU_MUL, dout, da, db,
                                r->dtype, r->n, NULL));
    else if (strcmp(r->name, "sum") == 0)
        CHECK_RC(cddp_cu_sum(dout, da, r->dtype, r->n, work, NULL));
    else
        CHECK_RC(cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown kernel '%s'", r->name));
    CHECK_CUDA(cudaDeviceSynchronize());
    if (r->out_bytes)
        CHECK_CUDA(cudaMemcpy(r->out, dout, r->out_bytes, cudaMemcpyDeviceToHost));
fail:
    cddp_allocator_release(al, ba);
    cddp_allocator_release(al, bb);
    cddp_allocator_release(al, bout);
    cddp_allocator_release(al, work);
    return rc;
}

static PyObject *py_run_kernel(PyObject *self, PyObject *args)
{
    run_args r = {0};
    Py_ssize_t n, alen = 0, blen = 0, offset = 0;
    PyObject *res;
    cddp_allocator *al;
    size_t isz, osz;
    int rc;
    if (!PyArg_ParseTuple(args, "siinz#z#d|n", &r.name, &r.dtype, &r.out_dtype, &n, &r.a, &alen,
                          &r.b, &blen, &r.value, &offset))
        return NULL;
    isz = cddp_cu_itemsize(r.dtype);
    osz = cddp_cu_itemsize(r.out_dtype);
    if (!isz || !osz || n < 0 || offset < 0 || offset > 64)
        return PyErr_Format(PyExc_ValueError, "bad dtype codes %d/%d, n %zd or offset %zd (0..64)",
                            r.dtype, r.out_dtype, n, offset);
    r.n = (size_t)n;
    r.offset = (size_t)offset;
    if ((r.a && (size_t)alen != r.n * isz) || (r.b && (size_t)blen != r.n * isz))
        return PyErr_Format(PyExc_ValueError, "inputs must hold n=%zd elements of %zu bytes", n, isz);
    r.out_bytes = (strcmp(r.name, "sum") == 0 ? 1 : r.n) * osz;
    if (!(al = cddp_cuda_allocator(0)))
        return cddp_cuda_raise(cddp_cuda_errcode());
    if (!(res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)r.out_bytes)))
        return NULL;
    r.out = PyBytes_AS_STRING(res);
    Py_BEGIN_ALLOW_THREADS
    rc = run_on_device(al, &r);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(res);
        return cddp_cuda_raise(rc);
    }
    return res;
}

PyMethodDef cddp_cuda_kernel_methods[] = {
    {"_run_kernel", py_run_kernel, METH_VARARGS, "Run one kernel on device 0 over host bytes (tests)."},
    {NULL, NULL, 0, NULL},
};
