/* ops/shape/shape.c — views: tensors sharing their base's storage (and version counter) under a
 * new shape/strides/offset, each with the backward that maps a gradient back to the base's
 * shape.
 *
 * Mirrors torch.Tensor:
 *   view(*shape) / view_as       ViewBackward0          (-1 inferred; error when strides forbid)
 *   reshape(*shape) / reshape_as ViewBackward0 | UnsafeViewBackward0 (copy when not viewable)
 *   flatten(start_dim=0, end_dim=-1), unflatten(dim, sizes)            ViewBackward0
 *   squeeze(dim=None)            SqueezeBackward0/1/2 (no dim / int / tuple)
 *   unsqueeze(dim)               UnsqueezeBackward0
 *   expand(*sizes) / expand_as   ExpandBackward0        (grad summed back: cddp_sum_to)
 *   transpose / swapaxes / swapdims(d0, d1)  TransposeBackward0;  t()  TBackward0
 *   permute(*dims)               PermuteBackward0
 * and the module functions cddp.reshape/flatten/unflatten/squeeze/unsqueeze/transpose/
 * swapaxes/swapdims/permute/t/narrow/select/split/chunk/unbind (input first, then as the
 * method). Also here: the raw views and history helpers the sibling files share.
 *
 * The method tables at the bottom also list ops/shape/slice.c (narrow/select/split/...),
 * ops/shape/convert.c (to/contiguous/clone/...) and ops/shape/join.c (cat/stack): module.c
 * only knows cddp_shape_tensor_methods / cddp_shape_module_methods. Argument parsing is in
 * ops/shape/args.c.
 */
#include "ops/shape/shape.h"
#include "module.h"
#include <string.h>

/* ---- view geometry -------------------------------------------------------------------- */

/* Resolve one -1 in shape against numel (torch's infer_size) and check the element count. */
static int infer_size(int64_t numel, int ndim, int64_t *shape)
{
    int64_t prod = 1;
    int infer = -1;
    char buf[256];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == -1) {
            if (infer >= 0) {
                PyErr_SetString(PyExc_RuntimeError, "only one dimension can be inferred");
                return -1;
            }
            infer = d;
        } else if (shape[d] < 0) {
            cddp_shape_format(buf, sizeof buf, ndim, shape);
            PyErr_Format(PyExc_RuntimeError, "invalid shape dimension %lld at index %d of shape %s",
                         (long long)shape[d], d, buf);
            return -1;
        } else {
            prod *= shape[d];
        }
    }
    if (infer >= 0) {
        if (prod == 0) {
            cddp_shape_format(buf, sizeof buf, ndim, shape);
            PyErr_Format(PyExc_RuntimeError,
                         "cannot reshape tensor of 0 elements into shape %s because the "
                         "unspecified dimension size -1 can be any value and is ambiguous", buf);
            return -1;
        }
        if (numel % prod == 0) {
            shape[infer] = numel / prod;
            return 0;
        }
    } else if (prod == numel) {
        return 0;
    }
    cddp_shape_format(buf, sizeof buf, ndim, shape);
    PyErr_Format(PyExc_RuntimeError, "shape '%s' is invalid for input of size %lld", buf,
                 (long long)numel);
    return -1;
}

/* Strides that present t's elements, in C order, as `shape` without copying (torch's
 * computeStride): each run of old dims that is contiguous in memory ("chunk") must map onto
 * a run of new dims with the same element count. 0 with strides filled, 1 when impossible. */
static int view_strides(const TensorObject *t, int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t numel = cddp_numel(t);
    if (numel == 0 || t->ndim == 0) {
        /* no elements, or one: any layout is C order; keep t's strides if the shape stays */
        if (t->ndim == ndim && memcmp(t->shape, shape, sizeof(int64_t) * ndim) == 0)
            memcpy(strides, t->strides, sizeof(int64_t) * ndim);
        else
            cddp_contiguous_strides(ndim, shape, strides);
        return 0;
    }
    int view_d = ndim - 1;
    int64_t chunk_base = t->strides[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel)
                return 1;
            if (d > 0) {
                chunk_base = t->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d != -1;
}

TensorObject *cddp_shape_reshape_raw(TensorObject *t, int ndim, const int64_t *shape)
{
    int64_t st[CDDP_MAX_DIMS];
    TensorObject *c;
    if (view_strides(t, ndim, shape, st) == 0)
        return cddp_tensor_alias(t, ndim, shape, st, t->offset);
    c = cddp_tensor_new(t->dtype, t->ndim, t->shape, 0);
    if (!c)
        return NULL;
    if (cddp_copy_into(c, t) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    /* a fresh private copy: reshape it in place instead of aliasing it */
    c->storage->version = 0;
    c->ndim = ndim;
    memcpy(c->shape, shape, sizeof(int64_t) * ndim);
    cddp_contiguous_strides(ndim, shape, c->strides);
    return c;
}

TensorObject *cddp_shape_narrow_raw(TensorObject *t, int dim, int64_t start, int64_t length)
{
    int64_t sh[CDDP_MAX_DIMS];
    memcpy(sh, t->shape, sizeof(int64_t) * t->ndim);
    sh[dim] = length;
    return cddp_tensor_alias(t, t->ndim, sh, t->strides, t->offset + start * t->strides[dim]);
}

TensorObject *cddp_shape_select_raw(TensorObject *t, int dim, int64_t index)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d == dim)
            continue;
        sh[k] = t->shape[d];
        st[k++] = t->strides[d];
    }
    return cddp_tensor_alias(t, k, sh, st, t->offset + index * t->strides[dim]);
}

NodeObject *cddp_shape_record(TensorObject *in, TensorObject *out, const char *name,
                              cddp_backward_fn fn, int *err)
{
    NodeObject *node = cddp_maybe_node(name, fn, 1, &in, err);
    if (node)
        cddp_set_history(out, node, 0);
    if (!*err)
        cddp_view_mark(in, out);      /* no-op unless out shares in's memory */
    return node;
}

/* A finished view: record history or drop it on failure. Returns out or NULL. */
PyObject *cddp_shape_finish(TensorObject *in, TensorObject *out, const char *name,
                        cddp_backward_fn fn, const int64_t *iparams, int nparams)
{
    int err;
    NodeObject *node;
    if (!out)
        return NULL;
    node = cddp_shape_record(in, out, name, fn, &err);
    if (err) {
        Py_DECREF(out);
        return NULL;
    }
    if (node) {
        for (int k = 0; k < nparams; k++)
            node->i[k] = iparams[k];
        Py_DECREF(node);
    }
    return (PyObject *)out;
}

/* ---- backwards ------------------------------------------------------------------------ */

/* view/reshape/flatten/squeeze/unsqueeze: the gradient has the input's elements in C order. */
static int reshape_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = cddp_shape_reshape_raw(gout[0], self->meta[0].ndim, self->meta[0].shape);
    return gin[0] ? 0 : -1;
}

static int expand_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = cddp_sum_to(gout[0], self->meta[0].ndim, self->meta[0].shape);
    return gin[0] ? 0 : -1;
}

/* transpose and t(): i[0], i[1] are the swapped dims (equal for the 0-d/1-d t()). */
static int transpose_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], a = self->i[0], b = self->i[1];
    if (!g || !self->next[0].node)
        return 0;
    memcpy(sh, g->shape, sizeof(int64_t) * g->ndim);
    memcpy(st, g->strides, sizeof(int64_t) * g->ndim);
    if (a != b && g->ndim > 1) {
        sh[a] = g->shape[b]; sh[b] = g->shape[a];
        st[a] = g->strides[b]; st[b] = g->strides[a];
    }
    gin[0] = cddp_tensor_alias(g, g->ndim, sh, st, g->offset);
    return gin[0] ? 0 : -1;
}

/* permute: i[0..ndim) holds the forward permutation; the gradient goes back through its
 * inverse: out dim k came from input dim perm[k]. */
static int permute_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    if (!g || !self->next[0].node)
        return 0;
    for (int k = 0; k < g->ndim; k++) {
        sh[self->i[k]] = g->shape[k];
        st[self->i[k]] = g->strides[k];
    }
    gin[0] = cddp_tensor_alias(g, g->ndim, sh, st, g->offset);
    return gin[0] ? 0 : -1;
}

/* ---- view / reshape / flatten / unflatten --------------------------------------------- */

/* shape may hold one -1. allow_copy: reshape semantics (copy when not viewable). */
static PyObject *view_impl(TensorObject *x, int ndim, int64_t *shape, int allow_copy)
{
    int64_t st[CDDP_MAX_DIMS];
    if (infer_size(cddp_numel(x), ndim, shape) < 0)
        return NULL;
    if (view_strides(x, ndim, shape, st) == 0)
        return cddp_shape_finish(x, cddp_tensor_alias(x, ndim, shape, st, x->offset),
                                 "ViewBackward0", reshape_backward, NULL, 0);
    if (!allow_copy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "view size is not compatible with input tensor's size and stride (at "
                        "least one dimension spans across two contiguous subspaces). Use "
                        ".reshape(...) instead.");
        return NULL;
    }
    return cddp_shape_finish(x, cddp_shape_reshape_raw(x, ndim, shape), "UnsafeViewBackward0",
                             reshape_backward, NULL, 0);
}

/* view(dtype): the same bytes read as dtype dt (torch's view.dtype). Equal element sizes keep
 * the geometry; otherwise the last dim (stride 1) shrinks or grows by the size ratio and the
 * other strides and the offset scale with it, under torch's checks and messages. The result
 * has no history (torch: not differentiable). New reference. */
static PyObject *view_dtype(TensorObject *x, cddp_dtype dt)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], off = x->offset, s0, s1, r;
    const char *from = cddp_dtype_torch_name[x->dtype], *to = cddp_dtype_torch_name[dt];
    int n = x->ndim;
    TensorObject *v;
    memcpy(sh, x->shape, sizeof sh);
    memcpy(st, x->strides, sizeof st);
    s0 = (int64_t)cddp_dtype_size[x->dtype];
    s1 = (int64_t)cddp_dtype_size[dt];
    if (s0 != s1) {
        if (n == 0)
            return PyErr_Format(PyExc_RuntimeError, "self.dim() cannot be 0 to view %s as %s "
                                "(different element sizes)", from, to);
        if (st[n - 1] != 1)
            return PyErr_Format(PyExc_RuntimeError, "self.stride(-1) must be 1 to view %s as "
                                "%s (different element sizes), but got %lld", from, to,
                                (long long)st[n - 1]);
        r = s0 > s1 ? s0 / s1 : s1 / s0;
        if (s1 > s0) {
            if (sh[n - 1] % r)
                return PyErr_Format(PyExc_RuntimeError, "self.size(-1) must be divisible by %lld "
                                    "to view %s as %s (different element sizes), but got %lld",
                                    (long long)r, from, to, (long long)sh[n - 1]);
            if (off % r)
                return PyErr_Format(PyExc_RuntimeError, "self.storage_offset() must be divisible "
                                    "by %lld to view %s as %s (different element sizes), but got "
                                    "%lld", (long long)r, from, to, (long long)off);
            for (int d = 0; d < n - 1; d++)
                if (st[d] % r)
                    return PyErr_Format(PyExc_RuntimeError, "self.stride(%d) must be divisible "
                                        "by %lld to view %s as %s (different element sizes), but "
                                        "got %lld", d, (long long)r, from, to, (long long)st[d]);
        }
        for (int d = 0; d < n - 1; d++)
            st[d] = s1 > s0 ? st[d] / r : st[d] * r;
        sh[n - 1] = s1 > s0 ? sh[n - 1] / r : sh[n - 1] * r;
        off = s1 > s0 ? off / r : off * r;
    }
    if (!(v = cddp_tensor_alias(x, n, sh, st, off)))
        return NULL;
    v->dtype = dt;
    return (PyObject *)v;
}

static PyObject *t_view(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames)
{
    static const char *const names[] = {"size"}, *const dnames[] = {"dtype"};
    PyObject *buf[1];
    int ndim;
    int64_t shape[CDDP_MAX_DIMS];
    if (kwnames && cddp_shape_keywords_as_positional(
                       "view", &args, &nargs, kwnames,
                       PyTuple_GET_SIZE(kwnames) == 1 &&
                       !PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "dtype")
                           ? dnames : names, 1, buf) < 0)
        return NULL;
    if (nargs == 1 && Py_IS_TYPE(args[0], cddp_state()->dtype_type)) {
        cddp_dtype dt;
        if (cddp_dtype_from_py(args[0], &dt) < 0)
            return NULL;
        return view_dtype((TensorObject *)self, dt);
    }
    if (cddp_shape_int_list("view", args, nargs, &ndim, shape) < 0)
        return NULL;
    return view_impl((TensorObject *)self, ndim, shape, 0);
}

static PyObject *t_reshape(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"shape"};
    PyObject *buf[1];
    int ndim;
    int64_t shape[CDDP_MAX_DIMS];
    if (cddp_shape_keywords_as_positional("reshape", &args, &nargs, kwnames, names, 1,
                                          buf) < 0 ||
        cddp_shape_int_list("reshape", args, nargs, &ndim, shape) < 0)
        return NULL;
    return view_impl((TensorObject *)self, ndim, shape, 1);
}

static PyObject *t_view_as(PyObject *self, PyObject *other)
{
    int64_t shape[CDDP_MAX_DIMS];
    if (cddp_shape_check_tensor(other, "view_as", "other") < 0)
        return NULL;
    memcpy(shape, ((TensorObject *)other)->shape, sizeof shape);
    return view_impl((TensorObject *)self, ((TensorObject *)other)->ndim, shape, 0);
}

static PyObject *t_reshape_as(PyObject *self, PyObject *other)
{
    int64_t shape[CDDP_MAX_DIMS];
    if (cddp_shape_check_tensor(other, "reshape_as", "other") < 0)
        return NULL;
    memcpy(shape, ((TensorObject *)other)->shape, sizeof shape);
    return view_impl((TensorObject *)self, ((TensorObject *)other)->ndim, shape, 1);
}

/* view_as / reshape_as / expand_as(other): positional or other= */
static PyObject *other_arg(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"other"};
    PyObject *buf[1];
    if (cddp_shape_keywords_as_positional(fname, &args, &nargs, kwnames, names, 1, buf) < 0)
        return NULL;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'other' (pos 1)", fname);
        return NULL;
    }
    return args[0];
}

#define OTHER_FORM(NAME, FNAME)                                                            \
    static PyObject *NAME##_kw(PyObject *self, PyObject *const *args, Py_ssize_t nargs,    \
                               PyObject *kwnames)                                          \
    {                                                                                      \
        PyObject *o = other_arg(FNAME, args, nargs, kwnames);                              \
        return o ? NAME(self, o) : NULL;                                                   \
    }
OTHER_FORM(t_view_as, "view_as")
OTHER_FORM(t_reshape_as, "reshape_as")

static PyObject *t_flatten(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"start_dim", "end_dim"};
    PyObject *a[2];
    TensorObject *x = (TensorObject *)self;
    int64_t start = 0, end = -1, shape[CDDP_MAX_DIMS];
    int k = 0;
    if (cddp_shape_parse_args("flatten", args, nargs, kwnames, names, 2, 2, a) < 0 ||
        (a[0] && cddp_shape_get_int(a[0], "flatten", "start_dim", &start) < 0) ||
        (a[1] && cddp_shape_get_int(a[1], "flatten", "end_dim", &end) < 0) ||
        cddp_shape_wrap_dim(start, x->ndim, &start) < 0 ||
        cddp_shape_wrap_dim(end, x->ndim, &end) < 0)
        return NULL;
    if (start > end) {
        PyErr_SetString(PyExc_RuntimeError,
                        "flatten() has invalid args: start_dim cannot come after end_dim");
        return NULL;
    }
    if (x->ndim == 0) {
        shape[0] = 1;
        return view_impl(x, 1, shape, 1);
    }
    if (start == end)
        return Py_NewRef(self);          /* torch returns the input itself */
    for (int d = 0; d < start; d++)
        shape[k++] = x->shape[d];
    shape[k] = 1;
    for (int64_t d = start; d <= end; d++)
        shape[k] *= x->shape[d];
    k++;
    for (int d = (int)end + 1; d < x->ndim; d++)
        shape[k++] = x->shape[d];
    return view_impl(x, k, shape, 1);
}

static PyObject *t_unflatten(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const names[] = {"dim", "sizes"};
    PyObject *a[2];
    TensorObject *x = (TensorObject *)self;
    int64_t dim, sizes[CDDP_MAX_DIMS], shape[CDDP_MAX_DIMS], prod = 1;
    int ns, k = 0, infer = -1;
    char buf[256];
    if (cddp_shape_parse_args("unflatten", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0] || !a[1]) {
        PyErr_SetString(PyExc_TypeError,
                        "unflatten() missing required arguments 'dim' and 'sizes'");
        return NULL;
    }
    if (cddp_shape_get_int(a[0], "unflatten", "dim", &dim) < 0 ||
        cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0 ||
        cddp_shape_int_list("unflatten", &a[1], 1, &ns, sizes) < 0)
        return NULL;
    if (x->ndim == 0 || ns == 0 || x->ndim - 1 + ns > CDDP_MAX_DIMS) {
        PyErr_SetString(PyExc_RuntimeError,
                        x->ndim == 0 ? "unflatten: Cannot unflatten a 0-d tensor"
                        : ns == 0 ? "unflatten: sizes must be non-empty"
                        : "unflatten: too many dimensions");
        return NULL;
    }
    for (int i = 0; i < ns; i++) {
        if (sizes[i] == -1 && infer < 0)
            infer = i;
        else
            prod *= sizes[i];
    }
    if (infer >= 0 && prod > 0 && x->shape[dim] % prod == 0)
        sizes[infer] = x->shape[dim] / prod;
    prod = 1;
    for (int i = 0; i < ns; i++)
        prod *= sizes[i];
    if (prod != x->shape[dim] || (infer >= 0 && sizes[infer] < 0)) {
        cddp_shape_format(buf, sizeof buf, ns, sizes);
        PyErr_Format(PyExc_RuntimeError,
                     "unflatten: Provided sizes %s don't multiply up to the size of dim %lld "
                     "(%lld) in the input tensor", buf, (long long)dim, (long long)x->shape[dim]);
        return NULL;
    }
    for (int d = 0; d < dim; d++)
        shape[k++] = x->shape[d];
    for (int i = 0; i < ns; i++)
        shape[k++] = sizes[i];
    for (int d = (int)dim + 1; d < x->ndim; d++)
        shape[k++] = x->shape[d];
    return view_impl(x, k, shape, 1);
}

/* ---- squeeze / unsqueeze -------------------------------------------------------------- */

static PyObject *t_squeeze(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"dim"};
    PyObject *a[1];
    TensorObject *x = (TensorObject *)self;
    char drop[CDDP_MAX_DIMS] = {0};
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], d;
    const char *name = "SqueezeBackward0";
    int k = 0;
    if (cddp_shape_parse_args("squeeze", args, nargs, kwnames, names, 1, 1, a) < 0)
        return NULL;
    if (!a[0] || a[0] == Py_None) {
        for (int i = 0; i < x->ndim; i++)
            drop[i] = x->shape[i] == 1;
    } else if (PyTuple_Check(a[0]) || PyList_Check(a[0])) {
        int64_t dims[CDDP_MAX_DIMS];
        int nd;
        if (cddp_shape_int_list("squeeze", a, 1, &nd, dims) < 0)
            return NULL;
        name = "SqueezeBackward2";
        for (int i = 0; i < nd; i++) {
            if (cddp_shape_wrap_dim(dims[i], x->ndim, &d) < 0)
                return NULL;
            if (x->ndim && drop[d] & 2) {
                PyErr_Format(PyExc_RuntimeError,
                             "dim %lld appears multiple times in the list of dims", (long long)d);
                return NULL;
            }
            if (x->ndim)
                drop[d] |= (char)(2 | (x->shape[d] == 1));
        }
    } else {
        if (cddp_shape_get_int(a[0], "squeeze", "dim", &d) < 0 ||
            cddp_shape_wrap_dim(d, x->ndim, &d) < 0)
            return NULL;
        name = "SqueezeBackward1";
        if (x->ndim)
            drop[d] = x->shape[d] == 1;
    }
    for (int i = 0; i < x->ndim; i++) {
        if (drop[i] & 1)
            continue;
        sh[k] = x->shape[i];
        st[k++] = x->strides[i];
    }
    return cddp_shape_finish(x, cddp_tensor_alias(x, k, sh, st, x->offset), name,
                             reshape_backward, NULL, 0);
}

static PyObject *unsqueeze_impl(TensorObject *x, PyObject *dimo)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], dim;
    if (!dimo) {
        PyErr_SetString(PyExc_TypeError, "unsqueeze() missing required argument 'dim'");
        return NULL;
    }
    if (cddp_shape_get_int(dimo, "unsqueeze", "dim", &dim) < 0 ||
        cddp_shape_wrap_dim(dim, x->ndim + 1, &dim) < 0)
        return NULL;
    if (x->ndim >= CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return NULL;
    }
    for (int d = 0, k = 0; d <= x->ndim; d++) {
        if (d == dim) {
            sh[d] = 1;
            st[d] = d < x->ndim ? x->shape[d] * x->strides[d] : 1;
        } else {
            sh[d] = x->shape[k];
            st[d] = x->strides[k++];
        }
    }
    return cddp_shape_finish(x, cddp_tensor_alias(x, x->ndim + 1, sh, st, x->offset),
                             "UnsqueezeBackward0", reshape_backward, NULL, 0);
}

static PyObject *t_unsqueeze(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const names[] = {"dim"};
    PyObject *a[1];
    if (cddp_shape_parse_args("unsqueeze", args, nargs, kwnames, names, 1, 1, a) < 0)
        return NULL;
    return unsqueeze_impl((TensorObject *)self, a[0]);
}

/* ---- expand --------------------------------------------------------------------------- */

static PyObject *expand_impl(TensorObject *x, int ndim, const int64_t *sizes)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    int off = ndim - x->ndim;
    char b1[256], b2[256];
    if (off < 0) {
        cddp_shape_format(b1, sizeof b1, x->ndim, x->shape);
        cddp_shape_format(b2, sizeof b2, ndim, sizes);
        PyErr_Format(PyExc_RuntimeError,
                     "expand(cddp.Tensor{%s}, size=%s): the number of sizes provided (%d) must "
                     "be greater or equal to the number of dimensions in the tensor (%d)",
                     b1, b2, ndim, x->ndim);
        return NULL;
    }
    for (int d = 0; d < ndim; d++) {
        int xd = d - off;
        if (xd < 0) {
            if (sizes[d] < 0) {
                PyErr_Format(PyExc_RuntimeError,
                             "The expanded size of the tensor (%lld) isn't allowed in a leading, "
                             "non-existing dimension %d", (long long)sizes[d], d);
                return NULL;
            }
            sh[d] = sizes[d];
            st[d] = 0;
        } else if (sizes[d] == -1 || sizes[d] == x->shape[xd]) {
            sh[d] = x->shape[xd];
            st[d] = x->strides[xd];
        } else if (x->shape[xd] == 1 && sizes[d] >= 0) {
            sh[d] = sizes[d];
            st[d] = 0;
        } else {
            cddp_shape_format(b1, sizeof b1, ndim, sizes);
            cddp_shape_format(b2, sizeof b2, x->ndim, x->shape);
            PyErr_Format(PyExc_RuntimeError,
                         "The expanded size of the tensor (%lld) must match the existing size "
                         "(%lld) at non-singleton dimension %d.  Target sizes: %s.  Tensor "
                         "sizes: %s", (long long)sizes[d], (long long)x->shape[xd], d, b1, b2);
            return NULL;
        }
    }
    return cddp_shape_finish(x, cddp_tensor_alias(x, ndim, sh, st, x->offset), "ExpandBackward0",
                  expand_backward, NULL, 0);
}

static PyObject *t_expand(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    int ndim;
    int64_t sizes[CDDP_MAX_DIMS];
    static const char *const names[] = {"size", "implicit"};
    PyObject *buf[2];
    /* keywords: size= (then no positionals), and torch's internal `implicit` flag (ignored) */
    if (kwnames && PyTuple_GET_SIZE(kwnames) == 1 &&
        !PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "implicit"))
        kwnames = NULL;
    if (cddp_shape_keywords_as_positional("expand", &args, &nargs, kwnames, names, 2,
                                          buf) < 0)
        return NULL;
    if (kwnames)
        nargs = 1;                        /* (size, implicit): only size is a size */
    if (cddp_shape_int_list("expand", args, nargs, &ndim, sizes) < 0)
        return NULL;
    return expand_impl((TensorObject *)self, ndim, sizes);
}

static PyObject *t_expand_as(PyObject *self, PyObject *other)
{
    if (cddp_shape_check_tensor(other, "expand_as", "other") < 0)
        return NULL;
    return expand_impl((TensorObject *)self, ((TensorObject *)other)->ndim,
                       ((TensorObject *)other)->shape);
}
OTHER_FORM(t_expand_as, "expand_as")

/* ---- transpose / t / permute ---------------------------------------------------------- */

static PyObject *transpose_impl(TensorObject *x, int64_t a, int64_t b, const char *name)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], p[2];
    if (cddp_shape_wrap_dim(a, x->ndim, &a) < 0 || cddp_shape_wrap_dim(b, x->ndim, &b) < 0)
        return NULL;
    memcpy(sh, x->shape, sizeof(int64_t) * x->ndim);
    memcpy(st, x->strides, sizeof(int64_t) * x->ndim);
    if (x->ndim > 1) {
        sh[a] = x->shape[b]; sh[b] = x->shape[a];
        st[a] = x->strides[b]; st[b] = x->strides[a];
    }
    p[0] = a;
    p[1] = b;
    return cddp_shape_finish(x, cddp_tensor_alias(x, x->ndim, sh, st, x->offset), name,
                  transpose_backward, p, 2);
}

static PyObject *t_transpose_named(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames, const char *fname,
                                   const char *const *names)
{
    PyObject *a[2];
    int64_t d0, d1;
    if (cddp_shape_parse_args(fname, args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0] || !a[1]) {
        PyErr_Format(PyExc_TypeError, "%s() missing required arguments '%s' and '%s'", fname,
                     names[0], names[1]);
        return NULL;
    }
    if (cddp_shape_get_int(a[0], fname, names[0], &d0) < 0 ||
        cddp_shape_get_int(a[1], fname, names[1], &d1) < 0)
        return NULL;
    return transpose_impl((TensorObject *)self, d0, d1, "TransposeBackward0");
}

static PyObject *t_transpose(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const names[] = {"dim0", "dim1"};
    return t_transpose_named(self, args, nargs, kwnames, "transpose", names);
}

static PyObject *t_swapaxes(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"axis0", "axis1"};
    return t_transpose_named(self, args, nargs, kwnames, "swapaxes", names);
}

static PyObject *t_swapdims(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"dim0", "dim1"};
    return t_transpose_named(self, args, nargs, kwnames, "swapdims", names);
}

static PyObject *t_t(PyObject *self, PyObject *unused)
{
    TensorObject *x = (TensorObject *)self;
    if (x->ndim > 2) {
        PyErr_Format(PyExc_RuntimeError,
                     "t() expects a tensor with <= 2 dimensions, but self is %dD", x->ndim);
        return NULL;
    }
    return transpose_impl(x, 0, x->ndim == 2 ? 1 : 0, "TBackward0");
}

static PyObject *t_permute(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"dims"};
    PyObject *buf[1];
    TensorObject *x = (TensorObject *)self;
    int64_t dims[CDDP_MAX_DIMS], sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    char seen[CDDP_MAX_DIMS] = {0};
    int nd;
    if (cddp_shape_keywords_as_positional("permute", &args, &nargs, kwnames, names, 1,
                                          buf) < 0 ||
        cddp_shape_int_list("permute", args, nargs, &nd, dims) < 0)
        return NULL;
    if (nd != x->ndim) {
        PyErr_Format(PyExc_RuntimeError,
                     "permute(sparse_coo): number of dimensions in the tensor input does not "
                     "match the length of the desired ordering of dimensions i.e. input.dim() = "
                     "%d is not equal to len(dims) = %d", x->ndim, nd);
        return NULL;
    }
    for (int k = 0; k < nd; k++) {
        if (cddp_shape_wrap_dim(dims[k], x->ndim, &dims[k]) < 0)
            return NULL;
        if (seen[dims[k]]) {
            PyErr_SetString(PyExc_RuntimeError, "permute(): duplicate dims are not allowed.");
            return NULL;
        }
        seen[dims[k]] = 1;
        sh[k] = x->shape[dims[k]];
        st[k] = x->strides[dims[k]];
    }
    return cddp_shape_finish(x, cddp_tensor_alias(x, nd, sh, st, x->offset), "PermuteBackward0",
                  permute_backward, dims, nd);
}

/* ---- module functions: fn(input, *rest) == input.method(*rest) ------------------------ */

static int first_tensor(const char *fname, Py_ssize_t nargs)
{
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'input' (pos 1)", fname);
        return -1;
    }
    return 0;
}

#define MODULE_FASTKW(NAME, IMPL)                                                          \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *args, Py_ssize_t nargs,        \
                              PyObject *kwnames)                                           \
    {                                                                                      \
        if (first_tensor(#NAME, nargs) < 0 ||                                              \
            cddp_shape_check_tensor(args[0], #NAME, "input") < 0)                          \
            return NULL;                                                                   \
        return IMPL(args[0], args + 1, nargs - 1, kwnames);                                \
    }
#define MODULE_FAST(NAME, IMPL)                                                            \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *args, Py_ssize_t nargs)        \
    {                                                                                      \
        if (first_tensor(#NAME, nargs) < 0 ||                                              \
            cddp_shape_check_tensor(args[0], #NAME, "input") < 0)                          \
            return NULL;                                                                   \
        return IMPL(args[0], args + 1, nargs - 1);                                         \
    }

/* reshape(input, shape) / permute(input, dims): positional or by name */
#define MODULE_NAMED(NAME, IMPL, ARG)                                                      \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *args, Py_ssize_t nargs,        \
                              PyObject *kwnames)                                           \
    {                                                                                      \
        static const char *const names[] = {"input", ARG};                                 \
        PyObject *buf[2];                                                                  \
        if (cddp_shape_keywords_as_positional(#NAME, &args, &nargs, kwnames, names, 2,     \
                                              buf) < 0 ||                                  \
            first_tensor(#NAME, nargs) < 0 ||                                              \
            cddp_shape_check_tensor(args[0], #NAME, "input") < 0)                          \
            return NULL;                                                                   \
        return IMPL(args[0], args + 1, nargs - 1, NULL);                                   \
    }

MODULE_NAMED(reshape, t_reshape, "shape")
MODULE_NAMED(permute, t_permute, "dims")
MODULE_FASTKW(flatten, t_flatten)
MODULE_FASTKW(unflatten, t_unflatten)
MODULE_FASTKW(squeeze, t_squeeze)
MODULE_FASTKW(unsqueeze, t_unsqueeze)
MODULE_FASTKW(transpose, t_transpose)
MODULE_FASTKW(swapaxes, t_swapaxes)
MODULE_FASTKW(swapdims, t_swapdims)
MODULE_FASTKW(narrow, cddp_shape_narrow)
MODULE_FASTKW(select, cddp_shape_select)
MODULE_FASTKW(split, cddp_shape_split)
MODULE_FASTKW(chunk, cddp_shape_chunk)
MODULE_FASTKW(unbind, cddp_shape_unbind)

static PyObject *m_t(PyObject *m, PyObject *x)
{
    if (cddp_shape_check_tensor(x, "t", "input") < 0)
        return NULL;
    return t_t(x, NULL);
}

/* ---- tables --------------------------------------------------------------------------- */

#define FASTKW (METH_FASTCALL | METH_KEYWORDS)

PyMethodDef cddp_shape_tensor_methods[] = {
    {"view", (PyCFunction)(void (*)(void))t_view, FASTKW,
     "view(*shape) -> Tensor sharing this tensor's storage (one dim may be -1)"},
    {"view_as", (PyCFunction)(void (*)(void))t_view_as_kw, FASTKW, NULL},
    {"reshape", (PyCFunction)(void (*)(void))t_reshape, FASTKW,
     "reshape(*shape): a view when the strides allow, else a copy"},
    {"reshape_as", (PyCFunction)(void (*)(void))t_reshape_as_kw, FASTKW, NULL},
    {"flatten", (PyCFunction)(void (*)(void))t_flatten, FASTKW, "flatten(start_dim=0, end_dim=-1)"},
    {"unflatten", (PyCFunction)(void (*)(void))t_unflatten, FASTKW, "unflatten(dim, sizes)"},
    {"squeeze", (PyCFunction)(void (*)(void))t_squeeze, FASTKW, "squeeze(dim=None)"},
    {"unsqueeze", (PyCFunction)(void (*)(void))t_unsqueeze, FASTKW, "unsqueeze(dim)"},
    {"expand", (PyCFunction)(void (*)(void))t_expand, FASTKW, "expand(*sizes); -1 keeps a size"},
    {"expand_as", (PyCFunction)(void (*)(void))t_expand_as_kw, FASTKW, NULL},
    {"transpose", (PyCFunction)(void (*)(void))t_transpose, FASTKW, "transpose(dim0, dim1)"},
    {"swapaxes", (PyCFunction)(void (*)(void))t_swapaxes, FASTKW, NULL},
    {"swapdims", (PyCFunction)(void (*)(void))t_swapdims, FASTKW, NULL},
    {"t", t_t, METH_NOARGS, "t(): transpose of a <= 2-D tensor"},
    {"permute", (PyCFunction)(void (*)(void))t_permute, FASTKW, "permute(*dims)"},
    {"narrow", (PyCFunction)(void (*)(void))cddp_shape_narrow, FASTKW,
     "narrow(dim, start, length)"},
    {"select", (PyCFunction)(void (*)(void))cddp_shape_select, FASTKW, "select(dim, index)"},
    {"split", (PyCFunction)(void (*)(void))cddp_shape_split, FASTKW, "split(split_size, dim=0)"},
    {"chunk", (PyCFunction)(void (*)(void))cddp_shape_chunk, FASTKW, "chunk(chunks, dim=0)"},
    {"unbind", (PyCFunction)(void (*)(void))cddp_shape_unbind, FASTKW, "unbind(dim=0)"},
    /* ops/shape/convert.c */
    {"contiguous", (PyCFunction)(void (*)(void))cddp_convert_contiguous, FASTKW, NULL},
    {"clone", (PyCFunction)(void (*)(void))cddp_convert_clone, FASTKW, NULL},
    {"to", (PyCFunction)(void (*)(void))cddp_convert_to, FASTKW,
     "to(dtype) / to(device, dtype=None) / to(other); non_blocking=, copy= keywords"},
    {"float", (PyCFunction)(void (*)(void))cddp_convert_float, FASTKW, NULL},
    {"double", (PyCFunction)(void (*)(void))cddp_convert_double, FASTKW, NULL},
    {"long", (PyCFunction)(void (*)(void))cddp_convert_long, FASTKW, NULL},
    {"int", (PyCFunction)(void (*)(void))cddp_convert_int, FASTKW, NULL},
    {"bool", (PyCFunction)(void (*)(void))cddp_convert_bool, FASTKW, NULL},
    {"half", (PyCFunction)(void (*)(void))cddp_convert_half, FASTKW, NULL},
    {"bfloat16", (PyCFunction)(void (*)(void))cddp_convert_bfloat16, FASTKW, NULL},
    {"byte", (PyCFunction)(void (*)(void))cddp_convert_byte, FASTKW, NULL},
    {"char", (PyCFunction)(void (*)(void))cddp_convert_char, FASTKW, NULL},
    {"short", (PyCFunction)(void (*)(void))cddp_convert_short, FASTKW, NULL},
    {"type", (PyCFunction)(void (*)(void))cddp_convert_type, FASTKW,
     "type() -> 'torch.FloatTensor'...; type(dtype) -> converted tensor"},
    {"cpu", (PyCFunction)(void (*)(void))cddp_convert_cpu, FASTKW, NULL},
    {"cuda", (PyCFunction)(void (*)(void))cddp_convert_cuda, FASTKW,
     "cuda(device=None, non_blocking=False): runs on the CPU when no GPU (see CDDP_STRICT_DEVICE)"},
    {NULL},
};

PyMethodDef cddp_shape_module_methods[] = {
    {"reshape", (PyCFunction)(void (*)(void))m_reshape, FASTKW, "reshape(input, shape)"},
    {"permute", (PyCFunction)(void (*)(void))m_permute, FASTKW, "permute(input, dims)"},
    {"flatten", (PyCFunction)(void (*)(void))m_flatten, FASTKW, NULL},
    {"unflatten", (PyCFunction)(void (*)(void))m_unflatten, FASTKW, NULL},
    {"squeeze", (PyCFunction)(void (*)(void))m_squeeze, FASTKW, NULL},
    {"unsqueeze", (PyCFunction)(void (*)(void))m_unsqueeze, FASTKW, NULL},
    {"transpose", (PyCFunction)(void (*)(void))m_transpose, FASTKW, NULL},
    {"swapaxes", (PyCFunction)(void (*)(void))m_swapaxes, FASTKW, NULL},
    {"swapdims", (PyCFunction)(void (*)(void))m_swapdims, FASTKW, NULL},
    {"t", m_t, METH_O, NULL},
    {"narrow", (PyCFunction)(void (*)(void))m_narrow, FASTKW, NULL},
    {"select", (PyCFunction)(void (*)(void))m_select, FASTKW, NULL},
    {"split", (PyCFunction)(void (*)(void))m_split, FASTKW, NULL},
    {"chunk", (PyCFunction)(void (*)(void))m_chunk, FASTKW, NULL},
    {"unbind", (PyCFunction)(void (*)(void))m_unbind, FASTKW, NULL},
    /* ops/shape/convert.c / ops/shape/join.c */
    {"clone", (PyCFunction)(void (*)(void))cddp_convert_clone_fn, FASTKW, NULL},
    {"_keep_channels_last", (PyCFunction)(void (*)(void))cddp_convert_keep_channels_last,
     METH_FASTCALL, NULL},
    {"cat", (PyCFunction)(void (*)(void))cddp_join_cat, FASTKW, "cat(tensors, dim=0, *, out=None)"},
    {"concat", (PyCFunction)(void (*)(void))cddp_join_cat, FASTKW, NULL},
    {"concatenate", (PyCFunction)(void (*)(void))cddp_join_cat, FASTKW, NULL},
    {"stack", (PyCFunction)(void (*)(void))cddp_join_stack, FASTKW,
     "stack(tensors, dim=0, *, out=None)"},
    {NULL},
};
