/* nn/embedding.c — the embedding lookup with autograd (torch.embedding, used by
 * torch.nn.functional.embedding and torch.nn.Embedding) and its max_norm renormalisation
 * (torch.embedding_renorm_).
 *
 *   _embedding(weight (V, D), indices (*) int64|int32, padding_idx (-1: none),
 *              scale_grad_by_freq) -> out (*, D)
 *   _embedding_renorm_(weight (V, D), indices (*), max_norm, norm_type) -> weight
 *
 * Dimension legend: V rows (num_embeddings), D = embedding_dim, n = indices.numel().
 *
 * Every index is checked against [0, V) before anything is read: an out-of-range index raises
 * IndexError("index out of range in self") as torch does, and no row outside the table is
 * ever touched. Forward copies rows. Backward (EmbeddingBackward0) scatter-adds the output
 * gradient's rows into a dense (V, D) gradient, skipping padding_idx (that row gets no
 * gradient) and dividing by each index's count in the batch when scale_grad_by_freq.
 */
#include "core/cddp.h"
#include "module.h"
#include <math.h>
#include <string.h>

/* torch's spelling of a tensor type in the indices message */
static const char *tensor_type_name(cddp_dtype d)
{
    switch (d) {
    case CDDP_FLOAT32: return "torch.FloatTensor";
    case CDDP_FLOAT64: return "torch.DoubleTensor";
    case CDDP_BOOL: return "torch.BoolTensor";
    default: return (unsigned)d < CDDP_NDTYPES ? cddp_dtype_name[d] : "unknown";
    }
}

/* Contiguous int64 copy of an int64/int32 index tensor whose values all lie in [0, V).
 * RuntimeError for other dtypes, IndexError for a value out of range. */
static TensorObject *checked_indices(TensorObject *idx, int64_t V)
{
    TensorObject *c;
    if (idx->dtype != CDDP_INT64 && idx->dtype != CDDP_INT32) {
        PyErr_Format(PyExc_RuntimeError, "Expected tensor for argument #1 'indices' to have one "
                     "of the following scalar types: Long, Int; but got %s instead (while "
                     "checking arguments for embedding)", tensor_type_name(idx->dtype));
        return NULL;
    }
    c = cddp_tensor_new(CDDP_INT64, idx->ndim, idx->shape, 0);
    if (!c || cddp_copy_into(c, idx) < 0) {
        Py_XDECREF(c);
        return NULL;
    }
    const int64_t *ix = (const int64_t *)cddp_data(c);
    int64_t n = cddp_numel(c);
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= V) {
            Py_DECREF(c);
            PyErr_SetString(PyExc_IndexError, "index out of range in self");
            return NULL;
        }
    }
    return c;
}

/* Gradient rows from g (n, D) scatter-added into dw (V, D); row `pad` skipped; each row
 * scaled by 1/count[index] when counts != NULL. */
#define EMB_SCATTER(NAME, T)                                                             \
    static void NAME(const int64_t *ix, int64_t n, const T *g, T *dw, int64_t D,         \
                     int64_t pad, const int64_t *counts)                                 \
    {                                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                \
            int64_t r = ix[i];                                                           \
            if (r == pad)                                                                \
                continue;                                                                \
            const T *src = g + i * D;                                                    \
            T *dst = dw + r * D;                                                         \
            if (counts) {                                                                \
                T s = (T)(1.0 / (double)counts[r]);                                      \
                for (int64_t j = 0; j < D; j++)                                          \
                    dst[j] += src[j] * s;                                                \
            } else {                                                                     \
                for (int64_t j = 0; j < D; j++)                                          \
                    dst[j] += src[j];                                                    \
            }                                                                            \
        }                                                                                \
    }
EMB_SCATTER(emb_scatter_f32, float)
EMB_SCATTER(emb_scatter_f64, double)

/* float16/bfloat16 weights: g and dw widened to float32, every addition rounded to rd as
 * torch's index_add_ / add_ of rows in that dtype does (so the same bits). */
static void emb_scatter_round(const int64_t *ix, int64_t n, const float *g, float *dw,
                              int64_t D, int64_t pad, const int64_t *counts, cddp_dtype rd)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t r = ix[i];
        if (r == pad)
            continue;
        float s = counts ? (float)(1.0 / (double)counts[r]) : 1.0f;
        for (int64_t j = 0; j < D; j++)
            dw[r * D + j] = cddp_round_to(rd, dw[r * D + j] + g[i * D + j] * s);
    }
}

/* saved: 0 indices (n) int64 contiguous; i[0] V, i[1] D, i[2] padding_idx, i[3] scale */
static int embedding_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *ix = cddp_node_saved(self, 0), *g = NULL;
    int64_t V = self->i[0], D = self->i[1], pad = self->i[2], *counts = NULL;
    int rc = -1;
    if (!ix)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_dtype wdt = self->meta[0].dtype, dt = cddp_kdt(wdt);    /* (reduced: float32) */
    g = cddp_tensor_cast_raw(gout[0], dt);
    if (g && !cddp_is_contiguous(g))
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    if (!g)
        return -1;
    int64_t n = cddp_numel(ix), wshape[2] = {V, D};
    const int64_t *ip = (const int64_t *)cddp_data(ix);
    if (self->i[3]) {
        counts = PyMem_Calloc((size_t)(V ? V : 1), sizeof(int64_t));
        if (!counts) {
            PyErr_NoMemory();
            goto done;
        }
        for (int64_t i = 0; i < n; i++)
            counts[ip[i]]++;
    }
    if (!(gin[0] = cddp_tensor_new(dt, 2, wshape, 1)))
        goto done;
    {
        const void *gp = cddp_data(g);
        void *dw = cddp_data(gin[0]);
        Py_BEGIN_ALLOW_THREADS
        if (wdt != dt)
            emb_scatter_round(ip, n, gp, dw, D, pad, counts, wdt);
        else if (dt == CDDP_FLOAT32)
            emb_scatter_f32(ip, n, gp, dw, D, pad, counts);
        else
            emb_scatter_f64(ip, n, gp, dw, D, pad, counts);
        Py_END_ALLOW_THREADS
    }
    if (wdt != dt && !(gin[0] = cddp_tensor_cast_steal(gin[0], wdt)))
        goto done;
    rc = 0;
done:
    PyMem_Free(counts);
    Py_DECREF(g);
    return rc;
}

static int parse_weight_indices(PyObject *const *args, TensorObject **w, TensorObject **idx,
                                const char *fn)
{
    if (!cddp_tensor_check(args[0]) || !cddp_tensor_check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s(): weight and indices must be Tensors", fn);
        return -1;
    }
    *w = (TensorObject *)args[0];
    *idx = (TensorObject *)args[1];
    if ((*w)->ndim != 2) {
        PyErr_SetString(PyExc_RuntimeError, "'weight' must be 2-D");
        return -1;
    }
    return 0;
}

/* _embedding(weight, indices, padding_idx, scale_grad_by_freq) */
static PyObject *py_embedding(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *w, *idx, *ix = NULL, *wc = NULL, *out = NULL;
    int64_t shape[CDDP_MAX_DIMS];
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "_embedding(weight, indices, padding_idx, scale_grad_by_freq)");
        return NULL;
    }
    if (parse_weight_indices(args, &w, &idx, "embedding") < 0)
        return NULL;
    long long pad = PyLong_AsLongLong(args[2]);
    int scale = PyObject_IsTrue(args[3]);
    if ((pad == -1 && PyErr_Occurred()) || scale < 0)
        return NULL;
    if (idx->ndim + 1 > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "embedding(): indices of %d dims give an output of "
                     "more than %d dims", idx->ndim, CDDP_MAX_DIMS);
        return NULL;
    }
    int64_t V = w->shape[0], D = w->shape[1];
    size_t rowbytes = (size_t)D * cddp_dtype_size[w->dtype];
    memcpy(shape, idx->shape, sizeof(int64_t) * idx->ndim);
    shape[idx->ndim] = D;
    if (!(ix = checked_indices(idx, V)) || !(wc = cddp_tensor_contiguous_raw(w)) ||
        !(out = cddp_tensor_new(w->dtype, idx->ndim + 1, shape, 0)))
        goto fail;
    {
        const int64_t *ip = (const int64_t *)cddp_data(ix);
        const char *src = cddp_data(wc);
        char *dst = cddp_data(out);
        int64_t n = cddp_numel(ix);
        for (int64_t i = 0; i < n; i++)            /* ip[i] checked in [0, V) */
            memcpy(dst + (size_t)i * rowbytes, src + (size_t)ip[i] * rowbytes, rowbytes);
    }
    if (cddp_is_floating(w->dtype)) {
        int err;
        NodeObject *node = cddp_maybe_node("EmbeddingBackward0", embedding_backward, 1, &w, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(out, node, 0);
            node->i[0] = V;
            node->i[1] = D;
            node->i[2] = pad;
            node->i[3] = scale;
            int bad = cddp_node_save(node, 0, ix) < 0;
            Py_DECREF(node);
            if (bad)
                goto fail;
        }
    }
    Py_DECREF(ix);
    Py_DECREF(wc);
    return (PyObject *)out;
fail:
    Py_XDECREF(ix);
    Py_XDECREF(wc);
    Py_XDECREF(out);
    return NULL;
}

/* p-norm of a row (torch's Tensor.norm(p) for p = inf, 0, or any other positive p). */
static double row_norm(const char *row, int64_t D, int64_t stride, cddp_dtype dt, double p)
{
    double s = 0;
    for (int64_t j = 0; j < D; j++) {
        double v = fabs(dt == CDDP_FLOAT32 ? (double)((const float *)row)[j * stride]
                                           : ((const double *)row)[j * stride]);
        if (isinf(p))
            s = v > s ? v : s;
        else if (p == 0)
            s += v != 0;
        else if (p == 2)
            s += v * v;
        else
            s += pow(v, p);
    }
    return isinf(p) || p == 0 ? s : p == 2 ? sqrt(s) : pow(s, 1.0 / p);
}

/* _embedding_renorm_(weight, indices, max_norm, norm_type): every row named in indices whose
 * norm exceeds max_norm is scaled by max_norm / (norm + 1e-7), in place, without autograd. */
static PyObject *py_embedding_renorm(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *w, *idx, *ix = NULL;
    char *seen = NULL;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "_embedding_renorm_(weight, indices, max_norm, norm_type)");
        return NULL;
    }
    if (parse_weight_indices(args, &w, &idx, "embedding_renorm_") < 0)
        return NULL;
    double max_norm = PyFloat_AsDouble(args[2]), p = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (w->dtype != CDDP_FLOAT32 && w->dtype != CDDP_FLOAT64) {
        PyErr_Format(PyExc_RuntimeError, "embedding_renorm_(): expected a floating weight, "
                     "got %s", cddp_dtype_name[w->dtype]);
        return NULL;
    }
    int64_t V = w->shape[0], D = w->shape[1];
    if (!(ix = checked_indices(idx, V)))
        return NULL;
    if (!(seen = PyMem_Calloc((size_t)(V ? V : 1), 1))) {
        Py_DECREF(ix);
        return PyErr_NoMemory();
    }
    const int64_t *ip = (const int64_t *)cddp_data(ix);
    int64_t n = cddp_numel(ix);
    size_t isz = cddp_dtype_size[w->dtype];
    char *base = cddp_data(w);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = ip[i];
        if (seen[r])
            continue;
        seen[r] = 1;
        char *row = base + (size_t)(r * w->strides[0]) * isz;
        double norm = row_norm(row, D, w->strides[1], w->dtype, p);
        if (norm > max_norm) {
            double s = max_norm / (norm + 1e-7);
            for (int64_t j = 0; j < D; j++) {
                if (w->dtype == CDDP_FLOAT32)
                    ((float *)row)[j * w->strides[1]] *= (float)s;
                else
                    ((double *)row)[j * w->strides[1]] *= s;
            }
        }
    }
    cddp_bump_version(w);
    PyMem_Free(seen);
    Py_DECREF(ix);
    return Py_NewRef((PyObject *)w);
}

PyMethodDef cddp_embedding_module_methods[] = {
    {"_embedding", (PyCFunction)(void (*)(void))py_embedding, METH_FASTCALL,
     "_embedding(weight, indices, padding_idx, scale_grad_by_freq): rows of weight"},
    {"_embedding_renorm_", (PyCFunction)(void (*)(void))py_embedding_renorm, METH_FASTCALL,
     "_embedding_renorm_(weight, indices, max_norm, norm_type): rows scaled to max_norm"},
    {NULL},
};
