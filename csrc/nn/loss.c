/* nn/loss.c — fused loss functions with autograd (torch.nn.functional's losses).
 *
 *   _cross_entropy(input (N,C)|(C,)|(N,C,d1,..), target (N,)|()|(N,d1,..)|like input,
 *                  weight (C,)|None, ignore_index, reduction, label_smoothing)
 *   _nll_loss(input (N,C)|(C,)|(N,C,d1,..), target, weight, ignore_index, reduction)
 *   _mse_loss / _l1_loss(input, target, reduction)            (broadcast like torch)
 *   _bce(input, target, weight|None, reduction)
 *   _bce_with_logits(input, target, weight|None, pos_weight|None, reduction)
 *
 * reduction: 0 none, 1 mean, 2 sum (torch's Reduction enum).
 *
 * Cross entropy in one pass per row: max, log-sum-exp, then the loss; only the row's lse is
 * kept for backward, which recomputes softmax = exp(x - lse). Both target forms reduce to
 *   loss_i = -sum_c a[i,c] * logp[i,c],   d loss_i / d x[i,c] = A_i * softmax[i,c] - a[i,c]
 * with A_i = sum_c a[i,c]:
 *   class index y_i:  a[i,c] = (1-eps) w[y_i] [c == y_i] + (eps/C) w[c]   (0 when ignored)
 *   probabilities t:  a[i,c] = w[c] ((1-eps) t[i,c] + eps/C)
 * Mean divides by sum_i w[y_i] over non-ignored rows (class indices; torch's nll/smoothing
 * normalisation) or by N (probabilities), as torch does. K-dimensional inputs (N, C, d1, ..)
 * are the N*d1*.. rows of the input seen with the classes last (one copy), and the gradient
 * goes back through the same permutation.
 * float32 inputs with class-index targets (the training case) take nn/ce_rows.c's kernels:
 * no float64 copy, the input read in its own layout, the log-softmax saved as torch saves it;
 * everything else computes in float64 here.
 *   _smooth_l1_loss(input, target, reduction, beta) / _huber_loss(..., delta): pointwise
 */
#include "core/cddp.h"
#include "amp/amp.h"
#include "module.h"
#include "nn/conv.h"
#include "nn/ce_rows.h"
#include <math.h>
#include <string.h>

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

/* ---- helpers -------------------------------------------------------------------------- */

static int check_float(TensorObject *t, const char *fn, const char *what)
{
    if (!cddp_is_floating(t->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "%s: expected %s to be a floating point tensor, got %s",
                     fn, what, cddp_dtype_name[t->dtype]);
        return -1;
    }
    return 0;
}

/* Contiguous float64 copy of t (the loss kernels compute in double). */
static TensorObject *as_f64(TensorObject *t)
{
    TensorObject *c = cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0);
    if (c && cddp_copy_into(c, t) < 0)
        Py_CLEAR(c);
    return c;
}

/* Contiguous int64 copy of an integer tensor. */
static TensorObject *as_i64(TensorObject *t)
{
    TensorObject *c = cddp_tensor_new(CDDP_INT64, t->ndim, t->shape, 0);
    if (c && cddp_copy_into(c, t) < 0)
        Py_CLEAR(c);
    return c;
}

/* out (new, contiguous, n elements) = v rounded to out's dtype (float16: through float, once) */
static void store_doubles(TensorObject *out, const double *v, int64_t n)
{
    char *o = cddp_data(out);
    size_t isz = cddp_dtype_size[out->dtype];
    if (out->dtype == CDDP_FLOAT32) {
        for (int64_t i = 0; i < n; i++) ((float *)o)[i] = (float)v[i];
    } else if (out->dtype == CDDP_FLOAT64) {
        memcpy(o, v, sizeof(double) * (size_t)n);
    } else {
        for (int64_t i = 0; i < n; i++)
            cddp_store_double(out->dtype, o + i * (int64_t)isz, v[i]);
    }
}

/* t (N, C, d1, ..) seen as (N, d1, .., C): the classes last, so a copy holds rows. */
static TensorObject *classes_last(TensorObject *t)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d == 1)
            continue;
        sh[k] = t->shape[d];
        st[k++] = t->strides[d];
    }
    sh[k] = t->shape[1];
    st[k] = t->strides[1];
    return cddp_tensor_alias(t, t->ndim, sh, st, t->offset);
}

/* Reduce per-element double losses l[n] into a tensor of dtype dt: shape `shape` for none,
 * 0-dim otherwise (sum, or sum/denom for mean). */
static TensorObject *reduce_out(const double *l, int64_t n, int red, double denom,
                                cddp_dtype dt, int ndim, const int64_t *shape)
{
    TensorObject *out;
    if (red == RED_NONE) {
        out = cddp_tensor_new(dt, ndim, shape, 0);
        if (!out)
            return NULL;
        store_doubles(out, l, n);
        return out;
    }
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += l[i];
    if (red == RED_MEAN)
        s /= denom;
    return cddp_scalar_tensor(s, dt);
}

/* Upstream gradient per element as doubles: g (0-dim for reduced, shape for none) scaled. */
static double *grad_scale(TensorObject *g, int red, double denom, int64_t n)
{
    double *s = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!s)
        return (double *)PyErr_NoMemory();
    if (red == RED_NONE) {
        for (int64_t i = 0; i < n; i++)
            s[i] = cddp_get_double(g, i);
    } else {
        double v = cddp_get_double(g, 0) / (red == RED_MEAN ? denom : 1.0);
        for (int64_t i = 0; i < n; i++)
            s[i] = v;
    }
    return s;
}

/* Write doubles into a new tensor of dtype dt and the given shape. */
static TensorObject *from_doubles(const double *v, cddp_dtype dt, int ndim, const int64_t *shape)
{
    TensorObject *out = cddp_tensor_new(dt, ndim, shape, 0);
    int64_t n;
    if (!out)
        return NULL;
    n = cddp_numel(out);
    store_doubles(out, v, n);
    return out;
}

static int parse_reduction(int red)
{
    if (red < 0 || red > 2) {
        PyErr_Format(PyExc_ValueError, "reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", red);
        return -1;
    }
    return 0;
}

/* ---- cross entropy / nll -------------------------------------------------------------- */

/* What the cross entropy / nll kernels know about one call. */
typedef struct {
    int64_t N, C;
    int probs;               /* target holds probabilities */
    int logits;              /* input are logits (cross entropy) vs log-probs (nll) */
    double eps;              /* label smoothing */
    int64_t ignore;
    const double *w;         /* (C) or NULL */
    const int64_t *y;        /* (N) class indices */
    const double *t;         /* (N, C) probabilities */
} ce_plan;

/* Class weights a[i,c] for one row into arow (C), returns A_i = sum_c a[i,c]. */
static double row_coeffs(const ce_plan *p, int64_t i, double *arow)
{
    double A = 0;
    int64_t C = p->C;
    if (p->probs) {
        for (int64_t c = 0; c < C; c++) {
            double tc = p->t[i * C + c] * (1 - p->eps) + p->eps / (double)C;
            arow[c] = (p->w ? p->w[c] : 1.0) * tc;
            A += arow[c];
        }
        return A;
    }
    int64_t yi = p->y[i];
    if (yi == p->ignore) {
        memset(arow, 0, sizeof(double) * (size_t)C);
        return 0;
    }
    for (int64_t c = 0; c < C; c++) {
        arow[c] = p->eps > 0 ? p->eps / (double)C * (p->w ? p->w[c] : 1.0) : 0.0;
        A += arow[c];
    }
    double wy = (p->w ? p->w[yi] : 1.0) * (1 - p->eps);
    arow[yi] += wy;
    return A + wy;
}

/* Normaliser of the mean: sum of target weights over non-ignored rows, or N for probs. */
static double ce_denominator(const ce_plan *p)
{
    double d = 0;
    if (p->probs)
        return (double)p->N;
    for (int64_t i = 0; i < p->N; i++)
        if (p->y[i] != p->ignore)
            d += p->w ? p->w[p->y[i]] : 1.0;
    return d;
}

/* (R, C) float64 rows into a new tensor of m's shape and dtype: the rows of an
 * (N, C, d1, ..) input were (N, d1, .., C), so those are permuted back. */
static TensorObject *rows_to_input(const double *rows, const cddp_meta *m)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    TensorObject *r, *v, *out;
    if (m->ndim < 3)
        return from_doubles(rows, m->dtype, m->ndim, m->shape);
    for (int d = 0, k = 0; d < m->ndim; d++)
        if (d != 1)
            sh[k++] = m->shape[d];
    sh[m->ndim - 1] = m->shape[1];
    r = from_doubles(rows, m->dtype, m->ndim, sh);
    if (!r)
        return NULL;
    for (int d = 0, k = 0; d < m->ndim; d++)
        if (d != 1)
            st[d] = r->strides[k++];
    st[1] = r->strides[m->ndim - 1];
    v = cddp_tensor_alias(r, m->ndim, m->shape, st, 0);
    out = v ? cddp_tensor_contiguous_raw(v) : NULL;
    Py_XDECREF(v);
    Py_DECREF(r);
    return out;
}

/* Input gradient gx[r, c] = s_r (A_r softmax(x)[r, c] - a[r, c]) (no softmax term for nll);
 * with probabilities, the target's gt[r, c] = -s_r (1 - eps) w_c log_softmax(x)[r, c]
 * (edge 1, present when the target needs grad). */
static int ce_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *tgt = cddp_node_saved(self, 1);
    TensorObject *lse = cddp_node_saved(self, 2), *w = self->n_saved > 3 ? cddp_node_saved(self, 3) : NULL;
    ce_plan p;
    double *scale = NULL, *arow = NULL, *gx = NULL, *gt = NULL;
    int rc = -1, want_x, want_t;
    if (!x || !tgt || !lse || (self->n_saved > 3 && self->saved[3] && !w))
        return -1;
    want_x = self->next[0].node != NULL;
    want_t = self->n_next > 1 && self->next[1].node != NULL;
    if (!gout[0] || (!want_x && !want_t))
        return 0;
    p.N = self->i[0]; p.C = self->i[1]; p.probs = (int)self->i[2]; p.logits = (int)self->i[3];
    p.ignore = self->i[4]; p.eps = self->d[0];
    p.w = w ? (const double *)cddp_data(w) : NULL;
    p.y = p.probs ? NULL : (const int64_t *)cddp_data(tgt);
    p.t = p.probs ? (const double *)cddp_data(tgt) : NULL;
    int red = (int)self->i[5];
    double denom = self->d[1];
    size_t cells = (size_t)(p.N * p.C > 0 ? p.N * p.C : 1);
    scale = grad_scale(gout[0], red, denom, p.N);
    arow = PyMem_Malloc(sizeof(double) * (size_t)(p.C ? p.C : 1));
    gx = PyMem_Malloc(sizeof(double) * cells);
    gt = want_t ? PyMem_Malloc(sizeof(double) * cells) : NULL;
    if (!scale || !arow || !gx || (want_t && !gt)) {
        PyErr_NoMemory();
        goto done;
    }
    const double *xv = (const double *)cddp_data(x), *l = (const double *)cddp_data(lse);
    for (int64_t i = 0; i < p.N; i++) {
        double A = row_coeffs(&p, i, arow), s = scale[i];
        if (p.y && p.y[i] == p.ignore) {  /* no gradient, even when the mean's weight is 0 */
            memset(gx + i * p.C, 0, sizeof(double) * (size_t)p.C);
            continue;
        }
        for (int64_t c = 0; c < p.C; c++) {
            double sm = p.logits ? exp(xv[i * p.C + c] - l[i]) : 0.0;
            gx[i * p.C + c] = s * (A * sm - arow[c]);
            if (gt)
                gt[i * p.C + c] = -s * (1 - p.eps) * (p.w ? p.w[c] : 1.0) *
                                  (xv[i * p.C + c] - l[i]);
        }
    }
    if (want_x && !(gin[0] = rows_to_input(gx, &self->meta[0])))
        goto done;
    if (want_t && !(gin[1] = rows_to_input(gt, &self->meta[1])))
        goto done;
    rc = 0;
done:
    PyMem_Free(scale);
    PyMem_Free(arow);
    PyMem_Free(gx);
    PyMem_Free(gt);
    return rc;
}

/* Argument checks of cross_entropy and nll_loss, in torch's order, and p's shape fields
 * (N, C, probs, logits, eps, ignore; data pointers zeroed). 0, or -1 with torch's exception. */
static int ce_check(TensorObject *x, TensorObject *tgt, int red, double eps, long long ignore,
                    int logits, const char *fn, ce_plan *p)
{
    if (parse_reduction(red) < 0 || check_float(x, fn, "input") < 0)
        return -1;
    if (eps < 0 || eps > 1) {
        char b[48];                  /* PyErr_Format has no %g */
        snprintf(b, sizeof b, "%g", eps);
        PyErr_Format(PyExc_RuntimeError, "label_smoothing must be between 0.0 and 1.0. Got: %s",
                     b);
        return -1;
    }
    if (x->ndim == 0) {
        PyErr_Format(PyExc_ValueError, "Expected 1 or more dimensions (got 0)");
        return -1;
    }
    memset(p, 0, sizeof *p);
    p->N = x->ndim >= 2 ? x->shape[0] : 1;
    p->C = x->shape[x->ndim == 1 ? 0 : 1];
    for (int d = 2; d < x->ndim; d++)           /* K-dim: one row per (n, d1, ..) */
        p->N *= x->shape[d];
    p->logits = logits;
    p->eps = eps;
    p->ignore = ignore;
    p->probs = cddp_is_floating(tgt->dtype);
    if (logits && (p->probs ? ignore >= 0 : tgt->dtype != CDDP_INT64 &&     /* bool: below */
                   tgt->dtype != CDDP_UINT8 && tgt->dtype != CDDP_BOOL)) {
        PyErr_Format(PyExc_RuntimeError, p->probs ? "ignore_index is not supported for "
                     "floating point target" : "expected target dtype to be Long or Byte, but "
                     "got %s", cddp_dtype_torch_name[tgt->dtype]);
        return -1;
    }
    if (p->probs) {
        if (!logits) {
            PyErr_SetString(PyExc_RuntimeError, "nll_loss: expected target of an integer dtype "
                            "(class indices), got a floating point tensor");
            return -1;
        }
        if (tgt->ndim != x->ndim || memcmp(tgt->shape, x->shape, sizeof(int64_t) * x->ndim)) {
            PyErr_SetString(PyExc_RuntimeError, "cross_entropy: probability targets must have "
                            "the same shape as the input");
            return -1;
        }
    } else {
        if (tgt->dtype == CDDP_BOOL) {
            PyErr_Format(PyExc_RuntimeError, "%s: expected target of dtype int64 (class "
                         "indices) or floating (probabilities), got bool", fn);
            return -1;
        }
        if (x->ndim >= 2 && tgt->ndim >= 1 && tgt->shape[0] != x->shape[0]) {
            PyErr_Format(PyExc_ValueError,
                         "Expected input batch_size (%lld) to match target batch_size (%lld).",
                         (long long)x->shape[0], (long long)tgt->shape[0]);
            return -1;
        }
        if (tgt->ndim != x->ndim - 1 ||
            (x->ndim > 2 && memcmp(tgt->shape + 1, x->shape + 2, sizeof(int64_t) * (x->ndim - 2)))) {
            char want[256], got[256];
            size_t k = 0, j = 0;
            want[0] = got[0] = 0;
            for (int d = 0; d < x->ndim && k < 200; d++)
                if (d != 1)
                    k += (size_t)snprintf(want + k, sizeof want - k, k ? ", %lld" : "%lld",
                                          (long long)x->shape[d]);
            for (int d = 0; d < tgt->ndim && j < 200; d++)
                j += (size_t)snprintf(got + j, sizeof got - j, d ? ", %lld" : "%lld",
                                      (long long)tgt->shape[d]);
            if (x->ndim <= 2)
                PyErr_Format(PyExc_ValueError, "Expected input batch_size (%lld) to match target "
                             "batch_size (%lld).", (long long)p->N,
                             (long long)(tgt->ndim ? tgt->shape[0] : 1));
            else
                PyErr_Format(PyExc_RuntimeError, "Expected target size [%s], got [%s]", want, got);
            return -1;
        }
    }
    return 0;
}

static int ce_targets(PyObject *wo, const char *fn, ce_plan *p, TensorObject *td,
                      TensorObject **wd);

/* The contiguous copies the kernels read: *xd float64 input, *td float64 probabilities or
 * int64 class indices, *wd float64 weight (NULL for weight None); new references the caller
 * releases, also after a failure. Points p's w / y / t at them and bounds-checks the class
 * indices. 0, or -1 with torch's exception. */
static int ce_inputs(TensorObject *x, TensorObject *tgt, PyObject *wo, const char *fn,
                     ce_plan *p, TensorObject **xd, TensorObject **td, TensorObject **wd)
{
    if (x->ndim >= 3) {              /* rows with the classes last */
        TensorObject *xv = classes_last(x), *tv = p->probs ? classes_last(tgt) : NULL;
        *xd = xv ? as_f64(xv) : NULL;
        *td = !*xd ? NULL : p->probs ? (tv ? as_f64(tv) : NULL) : as_i64(tgt);
        Py_XDECREF(xv);
        Py_XDECREF(tv);
    } else {
        *xd = as_f64(x);
        *td = p->probs ? as_f64(tgt) : as_i64(tgt);
    }
    if (!*xd || !*td)
        return -1;
    return ce_targets(wo, fn, p, *td, wd);
}

/* The weight copy *wd (float64; NULL for None) and p's w / y / t pointers into it and the
 * converted targets td; bounds-checks the class indices. 0, or -1 with torch's exception. */
static int ce_targets(PyObject *wo, const char *fn, ce_plan *p, TensorObject *td,
                      TensorObject **wd)
{
    if (wo != Py_None) {
        if (!cddp_tensor_check(wo) || ((TensorObject *)wo)->ndim != 1 ||
            ((TensorObject *)wo)->shape[0] != p->C) {
            PyErr_Format(PyExc_RuntimeError, "%s: weight tensor should be defined either for "
                         "all %lld classes or no classes", fn, (long long)p->C);
            return -1;
        }
        if (!(*wd = as_f64((TensorObject *)wo)))
            return -1;
        p->w = (const double *)cddp_data(*wd);
    }
    p->y = p->probs ? NULL : (const int64_t *)cddp_data(td);
    p->t = p->probs ? (const double *)cddp_data(td) : NULL;
    if (!p->probs) {
        for (int64_t i = 0; i < p->N; i++) {
            if (p->y[i] != p->ignore && (p->y[i] < 0 || p->y[i] >= p->C)) {
                PyErr_Format(PyExc_IndexError, "Target %lld is out of bounds (%lld classes).",
                             (long long)p->y[i], (long long)p->C);
                return -1;
            }
        }
    }
    return 0;
}

/* The forward kernel, one pass per row of xv (N, C): lv[i] = log-sum-exp of the row (0 for
 * nll, whose input already holds log-probabilities) and l[i] = -sum_c a[i,c] (x[i,c] - lv[i]).
 * arow: C doubles of scratch. */
static void ce_forward(const ce_plan *p, const double *xv, double *lv, double *l, double *arow)
{
    for (int64_t i = 0; i < p->N; i++) {
        const double *row = xv + i * p->C;
        double m = -INFINITY, s = 0, li = 0;
        if (p->logits) {
            for (int64_t c = 0; c < p->C; c++)
                m = row[c] > m ? row[c] : m;
            for (int64_t c = 0; c < p->C; c++)
                s += exp(row[c] - m);
            lv[i] = m + log(s);
        } else {
            lv[i] = 0;
        }
        row_coeffs(p, i, arow);
        for (int64_t c = 0; c < p->C; c++)
            if (arow[c] != 0)
                li -= arow[c] * (row[c] - lv[i]);
        l[i] = li;
    }
}

/* Give out its history when x (or probability targets) need grad: a node running ce_backward,
 * holding p's scalars and the float64 inputs, the row lse and the weight (wd may be NULL).
 * 0, or -1 with an exception. */
static int ce_record(TensorObject *out, TensorObject *x, TensorObject *tgt, const ce_plan *p,
                     int red, double denom, TensorObject *xd, TensorObject *td, TensorObject *lse,
                     TensorObject *wd)
{
    int err, bad;
    /* torch's graph ends in the smoothing add when label_smoothing > 0 */
    const char *name = p->eps > 0 && !p->probs ? "AddBackward0" : "NllLossBackward0";
    /* probabilities are differentiable too (edge 1) */
    TensorObject *ins[2] = {x, tgt};
    NodeObject *node = cddp_maybe_node(name, ce_backward, p->probs ? 2 : 1, ins, &err);
    if (err)
        return -1;
    if (!node)
        return 0;
    cddp_set_history(out, node, 0);
    node->i[0] = p->N; node->i[1] = p->C; node->i[2] = p->probs; node->i[3] = p->logits;
    node->i[4] = p->ignore; node->i[5] = red;
    node->d[0] = p->eps; node->d[1] = denom;
    bad = cddp_node_save(node, 0, xd) < 0 || cddp_node_save(node, 1, td) < 0 ||
          cddp_node_save(node, 2, lse) < 0 || (wd && cddp_node_save(node, 3, wd) < 0);
    Py_DECREF(node);
    return bad ? -1 : 0;
}

/* ---- the float32 class-index path (nn/ce_rows.c) ----------------------------------------- */

/* Saved: 0 the int64 targets, 1 the log-softmax in the input's layout (cross entropy), 2 the
 * float64 weight (when given); i = (outer, C, inner, logits, ignore_index, reduction, 1: this
 * node's layout, for autograd/_higher/nn.py), d = (label smoothing, mean divisor, weight sum). */
static int ce_rows_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *td = cddp_node_saved(self, 0), *lp = NULL, *wd = NULL, *gx;
    double *scale;
    if (!td || !gout[0] || !self->next[0].node)
        return td ? 0 : -1;
    if ((self->i[3] && !(lp = cddp_node_saved(self, 1))) ||
        (self->n_saved > 2 && !(wd = cddp_node_saved(self, 2))))
        return -1;
    cddp_ce_rows r = {self->i[0], self->i[1], self->i[2], self->i[4],
                      (const int64_t *)cddp_data(td), wd ? (const double *)cddp_data(wd) : NULL,
                      self->d[2], self->d[0], (int)self->i[3]};
    if (!(scale = grad_scale(gout[0], (int)self->i[5], self->d[1], r.outer * r.inner)))
        return -1;
    gx = cddp_tensor_new(CDDP_FLOAT32, self->meta[0].ndim, self->meta[0].shape, 0);
    if (gx)
        cddp_ce_rows_backward(&r, lp ? (const float *)cddp_data(lp) : NULL, scale,
                              (float *)cddp_data(gx));
    PyMem_Free(scale);
    return (gin[0] = gx) ? 0 : -1;
}

/* Cross entropy / nll of a float32 input with class indices, read in its own (outer, C,
 * inner) layout (no copy when contiguous): the kernels, the reduction, the node. */
static PyObject *ce_rows(TensorObject *x, TensorObject *tgt, PyObject *wo, const char *fn,
                         ce_plan *p, int red)
{
    TensorObject *xc = cddp_tensor_contiguous_raw(x);
    TensorObject *td = NULL, *wd = NULL, *lp = NULL, *out = NULL;
    int64_t osh[CDDP_MAX_DIMS], inner = 1, outer = x->ndim >= 2 ? x->shape[0] : 1;
    double *l = PyMem_Malloc(sizeof(double) * (size_t)(p->N ? p->N : 1)), wsum = 0, denom;
    int ond = 0, err = 0;
    for (int d = 2; d < x->ndim; d++)
        inner *= x->shape[d];
    if (!xc || !l || !(td = as_i64(tgt)) || ce_targets(wo, fn, p, td, &wd) < 0 ||
        (p->logits && !(lp = cddp_tensor_new(CDDP_FLOAT32, x->ndim, x->shape, 0)))) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (int64_t c = 0; c < p->C; c++)
        wsum += p->w ? p->w[c] : 1.0;
    cddp_ce_rows r = {outer, p->C, inner, p->ignore, p->y, p->w, wsum, p->eps, p->logits};
    cddp_ce_rows_forward(&r, (const float *)cddp_data(xc), lp ? (float *)cddp_data(lp) : NULL,
                         l);
    denom = red == RED_MEAN ? ce_denominator(p) : 1.0;
    for (int d = 0; x->ndim >= 2 && d < x->ndim; d++)    /* 'none': x's shape without C */
        if (d != 1)
            osh[ond++] = x->shape[d];
    if (!(out = reduce_out(l, p->N, red, denom, x->dtype, ond, osh)))
        goto done;
    TensorObject *ins[1] = {x};
    NodeObject *node = cddp_maybe_node(p->eps > 0 ? "AddBackward0" : "NllLossBackward0",
                                       ce_rows_backward, 1, ins, &err);
    if (node) {
        cddp_set_history(out, node, 0);
        node->i[0] = r.outer; node->i[1] = p->C; node->i[2] = inner; node->i[3] = p->logits;
        node->i[4] = p->ignore; node->i[5] = red; node->i[6] = 1;   /* this layout */
        node->d[0] = p->eps; node->d[1] = denom; node->d[2] = wsum;
        err = cddp_node_save(node, 0, td) < 0 || (lp && cddp_node_save(node, 1, lp) < 0) ||
              (wd && cddp_node_save(node, 2, wd) < 0);
        Py_DECREF(node);
    }
    if (err)
        Py_CLEAR(out);
done:
    Py_XDECREF(xc);
    Py_XDECREF(td);
    Py_XDECREF(wd);
    Py_XDECREF(lp);
    PyMem_Free(l);
    return (PyObject *)out;
}

/* Shared by cross entropy (logits=1) and nll (logits=0): check, copy, one forward pass, the
 * reduction, then the node. */
static PyObject *ce_common(PyObject *args, int logits)
{
    TensorObject *x, *tgt, *xd = NULL, *td = NULL, *wd = NULL, *lse = NULL, *out = NULL;
    PyObject *wo;
    long long ignore;
    int red;
    double eps = 0, denom;
    double *l = NULL, *arow = NULL;
    const char *fn = logits ? "cross_entropy" : "nll_loss";
    ce_plan p;
    if (logits) {
        if (!PyArg_ParseTuple(args, "O!O!OLid", cddp_state()->tensor_type, &x,
                              cddp_state()->tensor_type, &tgt, &wo, &ignore, &red, &eps))
            return NULL;
    } else if (!PyArg_ParseTuple(args, "O!O!OLi", cddp_state()->tensor_type, &x,
                                 cddp_state()->tensor_type, &tgt, &wo, &ignore, &red)) {
        return NULL;
    }
    if (ce_check(x, tgt, red, eps, ignore, logits, fn, &p) < 0)
        return NULL;
    if (!p.probs && x->dtype == CDDP_FLOAT32)
        return ce_rows(x, tgt, wo, fn, &p, red);
    if (ce_inputs(x, tgt, wo, fn, &p, &xd, &td, &wd) < 0)
        goto fail;
    lse = cddp_tensor_new(CDDP_FLOAT64, 1, &p.N, 0);
    l = PyMem_Malloc(sizeof(double) * (size_t)(p.N ? p.N : 1));
    arow = PyMem_Malloc(sizeof(double) * (size_t)(p.C ? p.C : 1));
    if (!lse || !l || !arow) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto fail;
    }
    ce_forward(&p, (const double *)cddp_data(xd), (double *)cddp_data(lse), l, arow);
    denom = red == RED_MEAN ? ce_denominator(&p) : 1.0;
    {
        /* 'none' keeps the batch (and K-dim) dims: x's shape without the classes */
        int64_t osh[CDDP_MAX_DIMS];
        int ond = 0;
        for (int d = 0; x->ndim >= 2 && d < x->ndim; d++)
            if (d != 1)
                osh[ond++] = x->shape[d];
        out = reduce_out(l, p.N, red, denom, x->dtype, ond, osh);
    }
    if (!out || ce_record(out, x, tgt, &p, red, denom, xd, td, lse, wd) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(xd);
    Py_XDECREF(td);
    Py_XDECREF(wd);
    Py_XDECREF(lse);
    PyMem_Free(l);
    PyMem_Free(arow);
    return (PyObject *)out;
}

static PyObject *ce_impl(PyObject *m, PyObject *args) { return ce_common(args, 1); }
static PyObject *nll_impl(PyObject *m, PyObject *args) { return ce_common(args, 0); }

/* ---- pointwise losses ----------------------------------------------------------------- */

enum { PW_MSE, PW_L1, PW_BCE, PW_BCEL };
static const char *const pw_names[] = {"MseLossBackward0", "L1LossBackward0",
                                       "BinaryCrossEntropyBackward0",
                                       "BinaryCrossEntropyWithLogitsBackward0"};

/* loss and its derivatives with respect to x and y, for one element */
static void pw_eval(int kind, double x, double y, double w, double pw, double *l, double *dx,
                    double *dy)
{
    switch (kind) {
    case PW_MSE:
        *l = (x - y) * (x - y); *dx = 2 * (x - y); *dy = -*dx;
        break;
    case PW_L1:
        *l = fabs(x - y); *dx = x > y ? 1 : x < y ? -1 : 0; *dy = -*dx;
        break;
    case PW_BCE: {
        double lx = log(x), l1x = log1p(-x);          /* torch clamps logs at -100 */
        lx = lx < -100 ? -100 : lx;
        l1x = l1x < -100 ? -100 : l1x;
        *l = -w * (y * lx + (1 - y) * l1x);
        double den = (1 - x) * x;
        *dx = w * (x - y) / (den > 1e-12 ? den : 1e-12);
        *dy = -w * (log(x) - log1p(-x));              /* unclamped, as torch's: inf at 0 */
        break;
    }
    default: {                                        /* with logits, pos_weight pw */
        double L = 1 + (pw - 1) * y;
        double sp = log1p(exp(-fabs(x))) + (x < 0 ? -x : 0);   /* softplus(-x) */
        *l = w * ((1 - y) * x + L * sp);
        double sig = 1 / (1 + exp(-x));
        *dx = w * ((1 - y) - L * (1 - sig));
        *dy = w * ((pw - 1) * sp - x);                /* d/dy of (1 - y) x + L sp */
        break;
    }
    }
}

/* Broadcast a (and optional b, c, d) to one shape as contiguous float64 copies. */
static int pw_prepare(TensorObject **ts, int k, TensorObject **outs, int *ndim, int64_t *shape)
{
    int nd = ts[0]->ndim;
    int64_t sh[CDDP_MAX_DIMS];
    memcpy(sh, ts[0]->shape, sizeof(int64_t) * nd);
    for (int i = 1; i < k; i++)
        if (ts[i] && cddp_broadcast_shapes(nd, sh, ts[i]->ndim, ts[i]->shape, &nd, sh) < 0)
            return -1;
    for (int i = 0; i < k; i++) {
        outs[i] = NULL;
        if (!ts[i])
            continue;
        outs[i] = cddp_tensor_new(CDDP_FLOAT64, nd, sh, 0);
        if (!outs[i] || cddp_copy_into(outs[i], ts[i]) < 0)
            return -1;
    }
    *ndim = nd;
    memcpy(shape, sh, sizeof(int64_t) * nd);
    return 0;
}

static int pw_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *xb = cddp_node_saved(self, 0), *yb = cddp_node_saved(self, 1);
    TensorObject *wb = self->saved[2] ? cddp_node_saved(self, 2) : NULL;
    TensorObject *pb = self->saved[3] ? cddp_node_saved(self, 3) : NULL;
    TensorObject *full[2] = {NULL, NULL};
    double *scale = NULL, *gx = NULL, *gy = NULL;
    int kind = (int)self->i[0], red = (int)self->i[1], rc = -1;
    if (!xb || !yb || (self->saved[2] && !wb) || (self->saved[3] && !pb))
        return -1;
    if (!gout[0])
        return 0;
    int64_t n = cddp_numel(xb);
    scale = grad_scale(gout[0], red, (double)n, n);
    gx = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    gy = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!scale || !gx || !gy) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    const double *x = (const double *)cddp_data(xb), *y = (const double *)cddp_data(yb);
    const double *w = wb ? (const double *)cddp_data(wb) : NULL;
    const double *pw = pb ? (const double *)cddp_data(pb) : NULL;
    for (int64_t i = 0; i < n; i++) {
        double l, dx, dy;
        pw_eval(kind, x[i], y[i], w ? w[i] : 1, pw ? pw[i] : 1, &l, &dx, &dy);
        gx[i] = scale[i] * dx;
        gy[i] = scale[i] * dy;
    }
    for (int k = 0; k < 2; k++) {
        if (!self->next[k].node)
            continue;
        full[k] = from_doubles(k ? gy : gx, self->meta[k].dtype, xb->ndim, xb->shape);
        if (!full[k])
            goto done;
        gin[k] = cddp_sum_to(full[k], self->meta[k].ndim, self->meta[k].shape);
        if (!gin[k])
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(full[0]);
    Py_XDECREF(full[1]);
    PyMem_Free(scale);
    PyMem_Free(gx);
    PyMem_Free(gy);
    return rc;
}

static PyObject *pointwise_loss(int kind, TensorObject *x, TensorObject *y, PyObject *wo,
                                PyObject *pwo, int red)
{
    TensorObject *ins[4] = {x, y, NULL, NULL}, *b[4] = {NULL, NULL, NULL, NULL};
    TensorObject *out = NULL;
    double *l = NULL;
    int nd;
    int64_t sh[CDDP_MAX_DIMS];
    const char *fn = pw_names[kind];
    if (parse_reduction(red) < 0 || check_float(x, fn, "input") < 0 ||
        check_float(y, fn, "target") < 0)
        return NULL;
    if (wo != Py_None) {
        if (!cddp_tensor_check(wo)) {
            PyErr_SetString(PyExc_TypeError, "weight must be a Tensor or None");
            return NULL;
        }
        ins[2] = (TensorObject *)wo;
    }
    if (pwo != Py_None) {
        if (!cddp_tensor_check(pwo)) {
            PyErr_SetString(PyExc_TypeError, "pos_weight must be a Tensor or None");
            return NULL;
        }
        ins[3] = (TensorObject *)pwo;
    }
    if ((kind == PW_BCE || kind == PW_BCEL) &&
        (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof(int64_t) * x->ndim))) {
        char xs[256], ys[256];
        cddp_shape_str(x->ndim, x->shape, xs, sizeof xs);
        cddp_shape_str(y->ndim, y->shape, ys, sizeof ys);
        if (kind == PW_BCEL)               /* torch's two texts */
            PyErr_Format(PyExc_ValueError, "Target size (torch.Size(%s)) must be the same as "
                         "input size (torch.Size(%s))", ys, xs);
        else
            PyErr_Format(PyExc_ValueError, "Using a target size (torch.Size(%s)) that is "
                         "different to the input size (torch.Size(%s)) is deprecated. Please "
                         "ensure they have the same size.", ys, xs);
        return NULL;
    }
    if (pw_prepare(ins, 4, b, &nd, sh) < 0)
        goto done;
    int64_t n = cddp_numel(b[0]);
    l = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!l) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const double *xv = (const double *)cddp_data(b[0]), *yv = (const double *)cddp_data(b[1]);
        const double *wv = b[2] ? (const double *)cddp_data(b[2]) : NULL;
        const double *pv = b[3] ? (const double *)cddp_data(b[3]) : NULL;
        for (int64_t i = 0; i < n; i++) {
            double dx, dy;
            int bce = kind == PW_BCE, bad_x = bce && !(xv[i] >= 0 && xv[i] <= 1);
            if (bad_x || (bce && !(yv[i] >= 0 && yv[i] <= 1))) {     /* NaN too, as torch */
                PyErr_Format(PyExc_RuntimeError, "all elements of %s should be between 0 and 1",
                             bad_x ? "input" : "target");
                goto done;
            }
            pw_eval(kind, xv[i], yv[i], wv ? wv[i] : 1, pv ? pv[i] : 1, &l[i], &dx, &dy);
        }
    }
    out = reduce_out(l, n, red, (double)n, cddp_promote(x->dtype, y->dtype), nd, sh);
    if (!out)
        goto done;
    {
        int err;
        NodeObject *node = cddp_maybe_node(fn, pw_backward, 2, ins, &err);
        if (err) {
            Py_CLEAR(out);
            goto done;
        }
        if (node) {
            cddp_set_history(out, node, 0);
            node->i[0] = kind;
            node->i[1] = red;
            int bad = cddp_node_save(node, 0, b[0]) < 0 || cddp_node_save(node, 1, b[1]) < 0 ||
                      (b[2] && cddp_node_save(node, 2, b[2]) < 0) ||
                      (b[3] && cddp_node_save(node, 3, b[3]) < 0);
            if (!b[2] || !b[3])
                node->n_saved = 4;   /* unused slots stay NULL */
            Py_DECREF(node);
            if (bad)
                Py_CLEAR(out);
        }
    }
done:
    for (int k = 0; k < 4; k++)
        Py_XDECREF(b[k]);
    PyMem_Free(l);
    return (PyObject *)out;
}

static PyObject *mse_loss_impl(PyObject *m, PyObject *args)
{
    TensorObject *x, *y;
    int red;
    if (!PyArg_ParseTuple(args, "O!O!i", cddp_state()->tensor_type, &x, cddp_state()->tensor_type,
                          &y, &red))
        return NULL;
    return pointwise_loss(PW_MSE, x, y, Py_None, Py_None, red);
}

static PyObject *l1_loss_impl(PyObject *m, PyObject *args)
{
    TensorObject *x, *y;
    int red;
    if (!PyArg_ParseTuple(args, "O!O!i", cddp_state()->tensor_type, &x, cddp_state()->tensor_type,
                          &y, &red))
        return NULL;
    return pointwise_loss(PW_L1, x, y, Py_None, Py_None, red);
}

static PyObject *bce_impl(PyObject *m, PyObject *args)
{
    TensorObject *x, *y;
    PyObject *w;
    int red;
    if (!PyArg_ParseTuple(args, "O!O!Oi", cddp_state()->tensor_type, &x, cddp_state()->tensor_type,
                          &y, &w, &red))
        return NULL;
    return pointwise_loss(PW_BCE, x, y, w, Py_None, red);
}

static PyObject *bce_with_logits_impl(PyObject *m, PyObject *args)
{
    TensorObject *x, *y;
    PyObject *w, *pw;
    int red;
    if (!PyArg_ParseTuple(args, "O!O!OOi", cddp_state()->tensor_type, &x,
                          cddp_state()->tensor_type, &y, &w, &pw, &red))
        return NULL;
    return pointwise_loss(PW_BCEL, x, y, w, pw, red);
}

/* Under autocast every loss runs in float32 (torch's CPU fp32 list): float16/bfloat16
 * arguments are cast first, with history. */
#define AMP_FP32(NAME, IMPL)                                                                  \
    static PyObject *NAME(PyObject *m, PyObject *args)                                        \
    {                                                                                         \
        if (CDDP_AUTOCAST_ON())                                                               \
            return cddp_autocast_varargs(CDDP_AMP_FP32, IMPL, m, args);                       \
        return IMPL(m, args);                                                                 \
    }
AMP_FP32(py_cross_entropy, ce_impl)
AMP_FP32(py_nll_loss, nll_impl)
AMP_FP32(py_mse_loss, mse_loss_impl)
AMP_FP32(py_l1_loss, l1_loss_impl)
AMP_FP32(py_bce, bce_impl)
AMP_FP32(py_bce_with_logits, bce_with_logits_impl)

PyMethodDef cddp_loss_module_methods[] = {
    {"_cross_entropy", py_cross_entropy, METH_VARARGS,
     "_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)"},
    {"_nll_loss", py_nll_loss, METH_VARARGS, "_nll_loss(input, target, weight, ignore_index, reduction)"},
    {"_mse_loss", py_mse_loss, METH_VARARGS, NULL},
    {"_l1_loss", py_l1_loss, METH_VARARGS, NULL},
    {"_bce", py_bce, METH_VARARGS, NULL},
    {"_bce_with_logits", py_bce_with_logits, METH_VARARGS, NULL},
    {NULL},
};
