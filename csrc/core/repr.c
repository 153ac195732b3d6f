/* core/repr.c — Tensor.__repr__ / __str__ as torch prints them, and set_printoptions.
 *
 * Mirrors torch/_tensor_str.py (precision 4, threshold 1000, edgeitems 3, linewidth 80):
 *   _Formatter: over the (summarized) values, integer-valued floats print as `1.`, floats
 *     with `precision` decimals, scientific when max/min of the nonzero finite |values| > 1000,
 *     max > 1e8 or min < 1e-4; every element padded to the widest one.
 *   summarization: more than `threshold` elements print `edgeitems` rows/values from each end
 *     of every dimension with `...` between.
 *   suffixes: device (CUDA), size= for empty non-1-d, dtype= unless the dtype is the default
 *     float dtype / int64 / bool (empty: unless default float), grad_fn=<Name> or
 *     requires_grad=True, wrapped at `linewidth`.
 * Number text comes from PyOS_double_to_string, i.e. exactly Python's format().
 */
#include "ops/creation/creation.h"
#include <math.h>
#include <string.h>

static struct {
    int precision;
    double threshold;
    int edgeitems;
    int linewidth;
    int sci_mode;              /* -1 None (auto), 0 False, 1 True */
} opts = {4, 1000, 3, 80, -1};

/* ---- a growable ASCII buffer ---------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    int err;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = PyMem_Realloc(b->buf, cap);
        if (!nb) {
            b->err = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_spaces(sbuf *b, int n)
{
    for (int i = 0; i < n; i++)
        sb_put(b, " ", 1);
}

/* ---- element access ------------------------------------------------------------------- */

/* float16/bfloat16 print through their exact float values, as torch's str does (.float()) */
static double elem_d(cddp_dtype dt, const char *p)
{
    return cddp_load_double(dt, p);
}

/* Plain text of one element before padding: Python's str() for ints/bools, format() with
 * the formatter's mode for floats. Writes into out (>= 64 bytes); returns its length. */
typedef struct {
    int floating, int_mode, sci_mode, max_width;
} fmt_t;

static int format_plain(const fmt_t *f, cddp_dtype dt, const char *p, char *out, size_t cap)
{
    char *s;
    if (dt == CDDP_BOOL)
        return PyOS_snprintf(out, cap, "%s", *(const uint8_t *)p ? "True" : "False");
    if (dt == CDDP_INT64)
        return PyOS_snprintf(out, cap, "%lld", (long long)*(const int64_t *)p);
    if (cddp_is_integral(dt))
        return PyOS_snprintf(out, cap, "%lld", (long long)elem_d(dt, p));
    {
        double v = elem_d(dt, p);
        int n;
        if (f->sci_mode)
            s = PyOS_double_to_string(v, 'e', opts.precision, 0, NULL);
        else if (f->int_mode)
            s = PyOS_double_to_string(v, 'f', 0, 0, NULL);
        else
            s = PyOS_double_to_string(v, 'f', opts.precision, 0, NULL);
        if (!s) {
            PyErr_Clear();
            return PyOS_snprintf(out, cap, "?");
        }
        n = PyOS_snprintf(out, cap, "%s%s", s,
                          (!f->sci_mode && f->int_mode && isfinite(v)) ? "." : "");
        PyMem_Free(s);
        return n;
    }
}

static void put_elem(sbuf *b, const fmt_t *f, cddp_dtype dt, const char *p)
{
    char tmp[512];
    int n = format_plain(f, dt, p, tmp, sizeof tmp);
    if (n > (int)sizeof tmp - 1)
        n = (int)sizeof tmp - 1;
    sb_spaces(b, f->max_width - n);
    sb_put(b, tmp, (size_t)n);
}

/* ---- the formatter: one pass over the values that will be printed --------------------- */

typedef struct {
    fmt_t f;
    int count;                 /* nonzero finite values seen */
    double amin, amax;
    int summarize;
    cddp_dtype dt;
    /* widths are a second pass once the mode is known */
    int pass;
} scan_t;

static int summarized_dim(int summarize, int64_t n)
{
    return summarize && n > 2 * (int64_t)opts.edgeitems;
}

static void visit_value(scan_t *s, const char *p)
{
    if (!s->f.floating) {
        char tmp[64];
        int n = format_plain(&s->f, s->dt, p, tmp, sizeof tmp);
        if (n > s->f.max_width)
            s->f.max_width = n;
        return;
    }
    double v = elem_d(s->dt, p);
    if (!isfinite(v) || v == 0)
        return;
    if (s->pass == 0) {
        double a = fabs(v);
        if (s->count == 0 || a < s->amin)
            s->amin = a;
        if (s->count == 0 || a > s->amax)
            s->amax = a;
        s->count++;
        if (v != ceil(v))
            s->f.int_mode = 0;
    } else {
        char tmp[512];
        int n = format_plain(&s->f, s->dt, p, tmp, sizeof tmp);
        /* int mode: "1." already counts the dot torch adds to the width */
        if (n > s->f.max_width)
            s->f.max_width = n;
    }
}

/* Visit the elements get_summarized_data would keep, in order. */
static void visit(scan_t *s, const TensorObject *t, const char *p, int d)
{
    size_t isz = cddp_dtype_size[t->dtype];
    int64_t n, step;
    if (d == t->ndim) {
        visit_value(s, p);
        return;
    }
    n = t->shape[d];
    step = t->strides[d] * (int64_t)isz;
    if (summarized_dim(s->summarize, n)) {
        for (int64_t i = 0; i < opts.edgeitems; i++)
            visit(s, t, p + i * step, d + 1);
        for (int64_t i = n - opts.edgeitems; i < n; i++)
            visit(s, t, p + i * step, d + 1);
    } else {
        for (int64_t i = 0; i < n; i++)
            visit(s, t, p + i * step, d + 1);
    }
}

static fmt_t make_formatter(const TensorObject *t, int summarize)
{
    scan_t s;
    memset(&s, 0, sizeof s);
    s.f.floating = cddp_is_floating(t->dtype);
    s.f.int_mode = 1;
    s.f.max_width = 1;
    s.summarize = summarize;
    s.dt = t->dtype;
    visit(&s, t, cddp_data(t), 0);
    if (s.f.floating && s.count > 0) {
        /* a forced sci_mode applies before the widths are measured (and not at all when no
         * value is nonzero and finite: torch returns early there) */
        if (opts.sci_mode >= 0)
            s.f.sci_mode = opts.sci_mode;
        else
            s.f.sci_mode = s.amax / s.amin > 1000.0 || s.amax > 1.0e8 || s.amin < 1.0e-4;
        s.pass = 1;
        visit(&s, t, cddp_data(t), 0);
    }
    return s.f;
}

/* ---- layout (_tensor_str_with_formatter) ---------------------------------------------- */

/* _vector_str: items (and " ..." when cut) joined by ", ", wrapped every
 * floor((linewidth - indent) / (width + 2)) items */
static void put_vector(sbuf *b, const fmt_t *f, const TensorObject *t, const char *p,
                       int indent, int summarize)
{
    int d = t->ndim - 1, e = opts.edgeitems;
    int64_t n = t->shape[d], step = t->strides[d] * (int64_t)cddp_dtype_size[t->dtype];
    int64_t per_line = (int64_t)floor((double)(opts.linewidth - indent) / (f->max_width + 2));
    int cut = summarized_dim(summarize, n);
    int64_t total = cut ? 2 * (int64_t)e + 1 : n, k = 0;
    if (per_line < 1)
        per_line = 1;
    if (cut && e == 0) {
        sb_str(b, "[...]");
        return;
    }
    sb_str(b, "[");
    for (int64_t j = 0; j < total; j++) {
        if (j > 0) {
            if (k == per_line) {
                sb_str(b, ",\n");
                sb_spaces(b, indent + 1);
                k = 0;
            } else {
                sb_str(b, ", ");
            }
        }
        if (cut && j == e)
            sb_str(b, " ...");
        else
            put_elem(b, f, t->dtype, p + (cut && j > e ? n - (total - j) : j) * step);
        k++;
    }
    sb_str(b, "]");
}

static void put_tensor(sbuf *b, const fmt_t *f, const TensorObject *t, const char *p, int d,
                       int indent, int summarize);

/* sub-tensor t[i...] at depth d: print as _tensor_str_with_formatter(self[i], indent) */
static void put_slices(sbuf *b, const fmt_t *f, const TensorObject *t, const char *p, int d,
                       int indent, int summarize)
{
    int64_t n = t->shape[d], step = t->strides[d] * (int64_t)cddp_dtype_size[t->dtype];
    int dims_left = t->ndim - d;
    int cut = summarized_dim(summarize, n);
    int first = 1;
    sb_str(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (!first) {
            sb_str(b, ",");
            for (int k = 0; k < dims_left - 1; k++)
                sb_str(b, "\n");
            sb_spaces(b, indent + 1);
        }
        first = 0;
        if (cut && i == opts.edgeitems) {
            sb_str(b, "...");
            i = n - opts.edgeitems - 1;
            continue;
        }
        put_tensor(b, f, t, p + i * step, d + 1, indent + 1, summarize);
    }
    sb_str(b, "]");
}

static void put_tensor(sbuf *b, const fmt_t *f, const TensorObject *t, const char *p, int d,
                       int indent, int summarize)
{
    if (d == t->ndim) {
        put_elem(b, f, t->dtype, p);
    } else if (d == t->ndim - 1) {
        /* a 1-D view: reuse put_vector on the last dim */
        TensorObject row;
        row.ndim = 1;
        row.dtype = t->dtype;
        row.shape[0] = t->shape[d];
        row.strides[0] = t->strides[d];
        put_vector(b, f, &row, p, indent, summarize);
    } else {
        put_slices(b, f, t, p, d, indent, summarize);
    }
}

/* ---- suffixes and the entry point ----------------------------------------------------- */

static void add_suffixes(sbuf *b, char suffixes[][160], int ns, int indent)
{
    /* torch: len(s) - s.rfind("\n") + 1, with rfind == -1 when there is no newline */
    size_t last_nl = (size_t)-1;
    for (size_t i = 0; i < b->len; i++)
        if (b->buf[i] == '\n')
            last_nl = i;
    int64_t last_line = last_nl == (size_t)-1 ? (int64_t)b->len + 2 : (int64_t)(b->len - last_nl) + 1;
    for (int k = 0; k < ns; k++) {
        int64_t sl = (int64_t)strlen(suffixes[k]);
        if (last_line + sl + 2 > opts.linewidth) {
            sb_str(b, ",\n");
            sb_spaces(b, indent);
            sb_str(b, suffixes[k]);
            last_line = indent + sl;
        } else {
            sb_str(b, ", ");
            sb_str(b, suffixes[k]);
            last_line += sl + 2;
        }
    }
    sb_str(b, ")");
}

PyObject *cddp_tensor_repr(PyObject *self)
{
    TensorObject *t = (TensorObject *)self;
    cddp_state_t *st = cddp_state();
    char suffixes[4][160];
    int ns = 0, indent;
    int64_t numel = cddp_numel(t);
    sbuf b = {NULL, 0, 0, 0};
    PyObject *res = NULL;
    const char *tname = strrchr(Py_TYPE(self)->tp_name, '.');

    if (cddp_view_sync(t) < 0)      /* a stale view prints its current grad_fn, as torch */
        return NULL;
    tname = tname ? tname + 1 : Py_TYPE(self)->tp_name;
    /* torch prints "tensor(" for Tensor and Parameter (which adds its own wrapper) */
    if (Py_TYPE(self) == st->tensor_type || strcmp(tname, "Parameter") == 0) {
        sb_str(&b, "tensor(");
    } else {
        sb_str(&b, tname);
        sb_str(&b, "(");
    }
    indent = (int)b.len;
    if (t->storage->device >= 0)
        PyOS_snprintf(suffixes[ns++], 160, "device='cuda:%d'", t->storage->device);
    if (cddp_is_meta(t))
        PyOS_snprintf(suffixes[ns++], 160, "device='meta'");
    if (numel == 0 || opts.edgeitems == 0 || cddp_is_meta(t)) {
        if (numel > 0 || t->ndim != 1 || cddp_is_meta(t)) {
            size_t k = (size_t)PyOS_snprintf(suffixes[ns], 160, "size=(");
            for (int d = 0; d < t->ndim && k < 120; d++)
                k += (size_t)PyOS_snprintf(suffixes[ns] + k, 160 - k, d ? ", %lld" : "%lld",
                                           (long long)t->shape[d]);
            PyOS_snprintf(suffixes[ns] + k, 160 - k, t->ndim == 1 ? ",)" : ")");
            ns++;
        }
    }
    if (cddp_is_meta(t)) {            /* torch: no values to show */
        if (t->dtype != st->default_dtype)
            PyOS_snprintf(suffixes[ns++], 160, "dtype=cddp.%s", cddp_dtype_name[t->dtype]);
        sb_str(&b, "...");
    } else if (numel == 0) {
        if (t->dtype != st->default_dtype)
            PyOS_snprintf(suffixes[ns++], 160, "dtype=cddp.%s", cddp_dtype_name[t->dtype]);
        sb_str(&b, "[]");
    } else {
        int summarize = (double)numel > opts.threshold;
        fmt_t f;
        if (t->dtype != st->default_dtype && t->dtype != CDDP_INT64 && t->dtype != CDDP_BOOL)
            PyOS_snprintf(suffixes[ns++], 160, "dtype=cddp.%s", cddp_dtype_name[t->dtype]);
        f = make_formatter(t, summarize);
        put_tensor(&b, &f, t, cddp_data(t), 0, indent, summarize);
    }
    if (t->grad_fn)
        PyOS_snprintf(suffixes[ns++], 160, "grad_fn=<%s>", t->grad_fn->name);
    else if (t->requires_grad)
        PyOS_snprintf(suffixes[ns++], 160, "requires_grad=True");
    add_suffixes(&b, suffixes, ns, indent);
    if (b.err)
        PyErr_NoMemory();
    else
        res = PyUnicode_FromStringAndSize(b.buf, (Py_ssize_t)b.len);
    PyMem_Free(b.buf);
    return res;
}

/* set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
 *                  profile=None, sci_mode=None) — torch.set_printoptions */
PyObject *cddp_py_set_printoptions(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"precision", "threshold", "edgeitems", "linewidth", "profile",
                             "sci_mode", NULL};
    PyObject *prec = Py_None, *thr = Py_None, *edge = Py_None, *lw = Py_None, *prof = Py_None,
             *sci = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOO:set_printoptions", kwlist, &prec, &thr,
                                     &edge, &lw, &prof, &sci))
        return NULL;
    /* a profile other than torch's three (yolov5 passes "long") changes nothing, as torch's */
    if (prof != Py_None && PyUnicode_Check(prof)) {
        if (PyUnicode_CompareWithASCIIString(prof, "default") == 0) {
            opts.precision = 4; opts.threshold = 1000; opts.edgeitems = 3; opts.linewidth = 80;
        } else if (PyUnicode_CompareWithASCIIString(prof, "short") == 0) {
            opts.precision = 2; opts.threshold = 1000; opts.edgeitems = 2; opts.linewidth = 80;
        } else if (PyUnicode_CompareWithASCIIString(prof, "full") == 0) {
            opts.precision = 4; opts.threshold = INFINITY; opts.edgeitems = 3;
            opts.linewidth = 80;
        }
    }
    if (prec != Py_None) {
        long v = PyLong_AsLong(prec);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0 || v > 100) {
            PyErr_SetString(PyExc_ValueError, "precision must be in [0, 100]");
            return NULL;
        }
        opts.precision = (int)v;
    }
    if (thr != Py_None) {
        double v = PyFloat_AsDouble(thr);
        if (v == -1.0 && PyErr_Occurred())
            return NULL;
        opts.threshold = v;
    }
    if (edge != Py_None) {
        long v = PyLong_AsLong(edge);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0 || v > 1000000) {
            PyErr_SetString(PyExc_ValueError, "edgeitems must be non-negative");
            return NULL;
        }
        opts.edgeitems = (int)v;
    }
    if (lw != Py_None) {
        long v = PyLong_AsLong(lw);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        opts.linewidth = (int)v;
    }
    /* torch assigns sci_mode unconditionally: None restores automatic choice */
    if (sci == Py_None) {
        opts.sci_mode = -1;
    } else {
        int v = PyObject_IsTrue(sci);
        if (v < 0)
            return NULL;
        opts.sci_mode = v;
    }
    Py_RETURN_NONE;
}
