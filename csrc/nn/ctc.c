/* nn/ctc.c — the connectionist temporal classification loss: torch.nn.functional.ctc_loss's
 * per-sample negative log-likelihood, and its gradient w.r.t. log_probs (CtcLossBackward0).
 *
 *   _ctc_loss(log_probs (T, N, C), targets, input_lengths (N,), target_lengths (N,), blank,
 *             zero_infinity) -> nll (N,)        (log_probs' dtype; reductions are Python's)
 *
 * Legend: T time steps, N batch, C classes (blank included), S the padded targets' width,
 * L = 2 * target_length + 1 the extended label sequence of one sample, Lp = 2 * max(S_b) + 1.
 * targets are int64, either padded (N, S) (sample b's labels start at b * S) or concatenated
 * (sum(target_lengths),) (sample b's start at the sum of the lengths before it).
 *
 * The extended sequence l' puts a blank before, between and after the labels:
 * l'(s) = blank for even s, target[(s - 1) / 2] for odd s. An alignment walks s forward by 0 or
 * 1 per time step, or by 2 onto a label that differs from the label two back (so a repeated
 * label, [1, 1], must pass through the blank between them). In log space:
 *   alpha[0][0] = lp[0][blank], alpha[0][1] = lp[0][l'(1)]
 *   alpha[t][s] = lse(alpha[t-1][s], alpha[t-1][s-1], alpha[t-1][s-2] if skip(s)) + lp[t][l'(s)]
 *   nll = -lse(alpha[Tb-1][L-1], alpha[Tb-1][L-2])                    (Tb = input_length)
 * beta mirrors it from the end (beta[t][s] counts lp[t][l'(s)] too), and
 *   grad[t][c] = (exp(lp[t][c]) - exp(lse_{s: l'(s) = c}(alpha[t][s] + beta[t][s]) + nll
 *                 - lp[t][c])) * grad_nll                                 for t < Tb, else 0.
 * That is torch's formula: it is d nll / d logits for lp = log_softmax(logits), not
 * d nll / d lp, and torch returns it whatever lp holds; so does cddp (raw, non-normalised
 * inputs give torch's numbers too).
 *
 * Note [labels equal to blank]: torch does not refuse them; they take part in the recursion as
 * any label. One quirk is kept for equal numbers: at t = Tb - 1 torch sets the class sums from
 * the last two positions by assignment, not log-add (they are blank and a label, "so
 * different"), so when the last label is the blank class its s = L-2 term replaces the
 * s = L-1 term in grad[Tb-1][blank]. For ordinary labels the two ways agree.
 *
 * Edge cases, as torch: input_length 0 gives nll -0.0 for an empty target and inf otherwise,
 * and no gradient; an impossible target (too long for its input) gives inf, and a NaN
 * gradient at t < Tb unless zero_infinity, which makes that loss 0 and its gradient 0.
 * Every length and every label that is read is checked first (RuntimeError): torch reads
 * labels outside [0, C) out of bounds, cddp refuses them.
 *
 * Arithmetic is in double whatever lp's dtype (torch's CPU kernel keeps float32 in float32);
 * alpha (N, T, Lp) float64 and nll (N,) float64 are kept in the node, beta is computed in the
 * backward two rows at a time.
 */
#include "nn/conv.h"
#include "module.h"
#include <math.h>
#include <string.h>

typedef struct {
    int64_t T, N, C, Lp, blank;
    int zero_inf;
    const int64_t *il, *tl, *off;   /* (N,) each: input length, target length, label start */
    const int64_t *tg;              /* the targets' labels */
    double *alpha;                  /* (N, T, Lp) */
    double *nll;                    /* (N,) */
} ctc_plan;

/* log(exp(a) + exp(b) + exp(c)), -inf when all three are. The largest term contributes 1 and
 * -inf terms 0 without calling exp (most cells of the recursion have one or two -inf inputs). */
static inline double ctc_lse3(double a, double b, double c)
{
    double m = a > b ? a : b;
    m = m > c ? m : c;
    if (m == -INFINITY)
        return -INFINITY;
    if (m == INFINITY)                 /* inf - inf: NaN, as the plain formula gives */
        return NAN;
    double sum = 0.0;
    int top = 0;                       /* the maximum is counted once, as exp(0) = 1 */
    const double v[3] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        if (!top && v[k] == m) {
            sum += 1.0;
            top = 1;
        } else if (v[k] != -INFINITY) {
            sum += exp(v[k] - m);
        }
    }
    return m + log(sum);
}

static inline double ctc_lse2(double a, double b)
{
    return ctc_lse3(a, b, -INFINITY);
}

/* l'(s) of sample b */
static inline int64_t ctc_label(const ctc_plan *p, int64_t b, int64_t s)
{
    return (s & 1) ? p->tg[p->off[b] + (s - 1) / 2] : p->blank;
}

/* whether the walk may reach s from s - 2 (s a label differing from the one two back) */
static inline int ctc_skip(const ctc_plan *p, int64_t b, int64_t s)
{
    return (s & 1) && s >= 3 && ctc_label(p, b, s) != ctc_label(p, b, s - 2);
}

#define DEFINE_CTC(T_, SFX)                                                                    \
/* alpha[b] (T, Lp) and nll[b] from lp (T, N, C); alpha zero-filled rows beyond Tb stay -inf */ \
static void ctc_forward_##SFX(const ctc_plan *p, const T_ *lp)                                  \
{                                                                                              \
    const int64_t N = p->N, C = p->C, Lp = p->Lp;                                              \
    for (int64_t b = 0; b < N; b++) {                                                          \
        const int64_t Tb = p->il[b], L = 2 * p->tl[b] + 1;                                     \
        double *a = p->alpha + b * p->T * Lp;                                                  \
        for (int64_t k = 0; k < p->T * Lp; k++)                                                \
            a[k] = -INFINITY;                                                                  \
        if (Tb == 0) { /* the empty walk: probability 1 for the empty target, else 0 */       \
            p->nll[b] = p->tl[b] == 0 ? -0.0 : INFINITY;                                       \
            continue;                                                                          \
        }                                                                                      \
        const T_ *l0 = lp + b * C; /* lp[0][b] (C,) */                                         \
        a[0] = l0[p->blank];                                                                   \
        if (L > 1)                                                                             \
            a[1] = l0[ctc_label(p, b, 1)];                                                     \
        for (int64_t t = 1; t < Tb; t++) {                                                     \
            const T_ *lt = lp + (t * N + b) * C;                                               \
            const double *prev = a + (t - 1) * Lp;                                             \
            double *cur = a + t * Lp;                                                          \
            for (int64_t s = 0; s < L; s++) {                                                  \
                double x1 = s > 0 ? prev[s - 1] : -INFINITY;                                   \
                double x2 = ctc_skip(p, b, s) ? prev[s - 2] : -INFINITY;                       \
                cur[s] = ctc_lse3(prev[s], x1, x2) + lt[ctc_label(p, b, s)];                   \
            }                                                                                  \
        }                                                                                      \
        const double *last = a + (Tb - 1) * Lp;                                                \
        p->nll[b] = -ctc_lse2(last[L - 1], L > 1 ? last[L - 2] : -INFINITY);                   \
    }                                                                                          \
}                                                                                              \
                                                                                               \
/* grad (T, N, C), zeroed by the caller, from alpha, nll and gnll (N,); scratch holds       \
 * 2 * Lp + C doubles (two beta rows and the per-class lse of alpha + beta)                  */ \
static void ctc_backward_##SFX(const ctc_plan *p, const T_ *lp, const double *gnll, T_ *grad,  \
                               double *scratch)                                                \
{                                                                                              \
    const int64_t N = p->N, C = p->C, Lp = p->Lp;                                              \
    double *beta = scratch, *next = scratch + Lp, *lcab = scratch + 2 * Lp;                    \
    for (int64_t b = 0; b < N; b++) {                                                          \
        const int64_t Tb = p->il[b], L = 2 * p->tl[b] + 1;                                     \
        const double nll = p->nll[b], gr = gnll[b];                                            \
        if (Tb == 0 || (p->zero_inf && nll == INFINITY))                                       \
            continue; /* no time step, or a zeroed infinite loss: gradient 0 */                \
        const double *a = p->alpha + b * p->T * Lp;                                            \
        for (int64_t t = Tb - 1; t >= 0; t--) {                                                \
            const T_ *lt = lp + (t * N + b) * C;                                               \
            T_ *gt = grad + (t * N + b) * C;                                                   \
            for (int64_t s = 0; s < L; s++) {                                                  \
                double x;                                                                      \
                if (t == Tb - 1) {                                                             \
                    x = s >= L - 2 ? 0.0 : -INFINITY;                                          \
                } else {                                                                       \
                    double x1 = s + 1 < L ? next[s + 1] : -INFINITY;                           \
                    double x2 = s + 2 < L && ctc_skip(p, b, s + 2) ? next[s + 2] : -INFINITY;  \
                    x = ctc_lse3(next[s], x1, x2);                                             \
                }                                                                              \
                beta[s] = x == -INFINITY ? x : x + lt[ctc_label(p, b, s)];                     \
            }                                                                                  \
            for (int64_t c = 0; c < C; c++)                                                    \
                lcab[c] = -INFINITY;                                                           \
            if (t == Tb - 1) { /* only s = L-1, L-2 live; see the note on labels = blank */  \
                lcab[p->blank] = a[t * Lp + L - 1] + beta[L - 1];                              \
                if (L > 1)                                                                     \
                    lcab[ctc_label(p, b, L - 2)] = a[t * Lp + L - 2] + beta[L - 2];            \
            } else {                                                                           \
                for (int64_t s = 0; s < L; s++) {                                              \
                    int64_t c = ctc_label(p, b, s);                                            \
                    lcab[c] = ctc_lse2(lcab[c], a[t * Lp + s] + beta[s]);                      \
                }                                                                              \
            }                                                                                  \
            for (int64_t c = 0; c < C; c++) {                                                  \
                double v = lt[c];                                                              \
                gt[c] = (T_)((exp(v) - exp(lcab[c] + nll - v)) * gr);                          \
            }                                                                                  \
            double *tmp = next; /* beta[t] becomes the row t - 1 reads */                      \
            next = beta;                                                                       \
            beta = tmp;                                                                        \
        }                                                                                      \
    }                                                                                          \
}
DEFINE_CTC(float, f32)
DEFINE_CTC(double, f64)

/* The plan's scalars live in node->i, the lengths and label starts in node->ibuf (3N). */
enum { CTC_I_T, CTC_I_N, CTC_I_C, CTC_I_LP, CTC_I_BLANK, CTC_I_ZINF, CTC_I_COUNT };

/* CtcLossBackward0: gin[0] (T, N, C) from gout[0] (N,) */
static int ctc_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *lp = cddp_node_saved(self, 0), *tg = cddp_node_saved(self, 1);
    TensorObject *alpha = cddp_node_saved(self, 2), *nll = cddp_node_saved(self, 3);
    TensorObject *grad = NULL;
    double *gnll = NULL, *scratch = NULL;
    const int64_t *v = self->i;
    if (!lp || !tg || !alpha || !nll)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    ctc_plan p = {.T = v[CTC_I_T], .N = v[CTC_I_N], .C = v[CTC_I_C], .Lp = v[CTC_I_LP],
                  .blank = v[CTC_I_BLANK], .zero_inf = (int)v[CTC_I_ZINF],
                  .il = self->ibuf, .tl = self->ibuf + v[CTC_I_N],
                  .off = self->ibuf + 2 * v[CTC_I_N], .tg = (const int64_t *)cddp_data(tg),
                  .alpha = (double *)cddp_data(alpha), .nll = (double *)cddp_data(nll)};
    if (cddp_numel(gout[0]) != p.N) {
        PyErr_Format(PyExc_RuntimeError, "ctc_loss backward: expected a gradient of %lld "
                     "elements, got %lld", (long long)p.N, (long long)cddp_numel(gout[0]));
        goto fail;
    }
    gnll = PyMem_RawMalloc((size_t)(p.N + 1) * sizeof(double));
    scratch = PyMem_RawMalloc((size_t)(2 * p.Lp + p.C) * sizeof(double));
    if (!gnll || !scratch) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int64_t b = 0; b < p.N; b++)
        gnll[b] = cddp_get_double(gout[0], b);
    if (!(grad = cddp_tensor_new(lp->dtype, 3, lp->shape, 1)))
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    if (lp->dtype == CDDP_FLOAT64)
        ctc_backward_f64(&p, (const double *)cddp_data(lp), gnll, (double *)cddp_data(grad),
                         scratch);
    else
        ctc_backward_f32(&p, (const float *)cddp_data(lp), gnll, (float *)cddp_data(grad),
                         scratch);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(gnll);
    PyMem_RawFree(scratch);
    gin[0] = grad;
    return 0;
fail:
    PyMem_RawFree(gnll);
    PyMem_RawFree(scratch);
    Py_XDECREF(grad);
    return -1;
}

/* Checks the lengths and the labels they select against lp (T, N, C) and the targets, as
 * torch's ctc_loss does (its texts), and fills ibuf (3N: il, tl, label starts). Also returns
 * the longest target. 0, or -1 with RuntimeError. */
static int ctc_check(const TensorObject *tg, const TensorObject *il, const TensorObject *tl,
                     int64_t T, int64_t N, int64_t C, int64_t blank, int64_t *ibuf,
                     int64_t *max_tl)
{
    const char *where = " (while checking arguments for ctc_loss_allocate_outputs)";
    const int64_t *ilv = (const int64_t *)cddp_data(il), *tlv = (const int64_t *)cddp_data(tl);
    const int64_t *lab = (const int64_t *)cddp_data(tg);
    const int padded = tg->ndim == 2;
    const int64_t S = padded ? tg->shape[1] : 0, numel = cddp_numel(tg);
    int64_t pos = 0;
    if (blank < 0 || blank >= C) {
        PyErr_SetString(PyExc_RuntimeError, "blank must be in label range");
        return -1;
    }
    if (cddp_numel(il) != N) {
        PyErr_SetString(PyExc_RuntimeError, "input_lengths must be of size batch_size");
        return -1;
    }
    if (cddp_numel(tl) != N) {
        PyErr_SetString(PyExc_RuntimeError, "target_lengths must be of size batch_size");
        return -1;
    }
    if (padded && tg->shape[0] != N) {
        PyErr_Format(PyExc_RuntimeError, "Expected tensor to have size %lld at dimension 0, "
                     "but got size %lld for argument #2 'targets'%s", (long long)N,
                     (long long)tg->shape[0], where);
        return -1;
    }
    *max_tl = 0;
    for (int64_t b = 0; b < N; b++) {
        if (tlv[b] < 0) {
            PyErr_Format(PyExc_RuntimeError, "Expected target_lengths to have value at least "
                         "0, but got value %lld%s", (long long)tlv[b], where);
            return -1;
        }
        if (padded && tlv[b] > S) {
            PyErr_Format(PyExc_RuntimeError, "Expected tensor to have size at least %lld at "
                         "dimension 1, but got size %lld for argument #2 'targets'%s",
                         (long long)tlv[b], (long long)S, where);
            return -1;
        }
        /* concatenated: pos stays <= numel + one length, so the sum cannot overflow */
        ibuf[2 * N + b] = padded ? b * S : pos;
        if (!padded && pos <= numel)
            pos += tlv[b] <= numel ? tlv[b] : numel + 1;
        *max_tl = tlv[b] > *max_tl ? tlv[b] : *max_tl;
    }
    if (!padded && pos != numel) {
        PyErr_Format(PyExc_RuntimeError, "Expected tensor to have size %lld at dimension 0, but "
                     "got size %lld for argument #2 'targets'%s", (long long)pos,
                     (long long)numel, where);
        return -1;
    }
    for (int64_t b = 0; b < N; b++) {
        if (ilv[b] < 0 || ilv[b] > T) {
            PyErr_Format(PyExc_RuntimeError, "Expected input_lengths to have value at %s %lld, "
                         "but got value %lld%s", ilv[b] < 0 ? "least" : "most",
                         (long long)(ilv[b] < 0 ? 0 : T), (long long)ilv[b], where);
            return -1;
        }
        for (int64_t k = 0; k < tlv[b]; k++) {
            int64_t c = lab[ibuf[2 * N + b] + k];
            if (c < 0 || c >= C) {
                PyErr_Format(PyExc_RuntimeError, "ctc_loss: target %lld of sample %lld is %lld, "
                             "outside the label range [0, %lld)", (long long)k, (long long)b,
                             (long long)c, (long long)C);
                return -1;
            }
        }
        ibuf[b] = ilv[b];
        ibuf[N + b] = tlv[b];
    }
    return 0;
}

/* _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity) */
static PyObject *py_ctc_loss(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *tg, *il, *tl;
    TensorObject *xc = NULL, *tgc = NULL, *ilc = NULL, *tlc = NULL, *alpha = NULL, *nll = NULL;
    TensorObject *y = NULL;
    NodeObject *node = NULL;
    int64_t *ibuf = NULL, max_tl, blank;
    int zero_inf, err;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_ctc_loss(log_probs, targets, input_lengths, "
                        "target_lengths, blank, zero_infinity)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "ctc_loss", "log_probs", 0)) ||
        !(tg = cddp_tensor_arg(args, 1, "ctc_loss", "targets", 0)) ||
        !(il = cddp_tensor_arg(args, 2, "ctc_loss", "input_lengths", 0)) ||
        !(tl = cddp_tensor_arg(args, 3, "ctc_loss", "target_lengths", 0)))
        return NULL;
    blank = PyLong_AsLongLong(args[4]);
    zero_inf = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || zero_inf < 0)
        return NULL;
    if (x->dtype != CDDP_FLOAT32 && x->dtype != CDDP_FLOAT64) {
        PyErr_Format(PyExc_NotImplementedError, "\"ctc_loss_cpu\" not implemented for '%s'",
                     cddp_dtype_torch_name[x->dtype]);
        return NULL;
    }
    if (x->ndim != 3) {
        PyErr_Format(PyExc_RuntimeError, "Expected 3-dimensional tensor, but got %d-dimensional "
                     "tensor for argument #1 'log_probs' (while checking arguments for "
                     "ctc_loss_allocate_outputs)", x->ndim);
        return NULL;
    }
    if (tg->dtype != CDDP_INT64 || il->dtype != CDDP_INT64 || tl->dtype != CDDP_INT64 ||
        (tg->ndim != 1 && tg->ndim != 2)) {
        PyErr_SetString(PyExc_RuntimeError, "_ctc_loss: expected int64 targets (N, S) or "
                        "(sum(target_lengths),) and int64 lengths");
        return NULL;
    }
    const int64_t T = x->shape[0], N = x->shape[1], C = x->shape[2];
    if (T == 0 || N == 0 || C == 0) {
        PyErr_SetString(PyExc_RuntimeError, "log_probs tensor must not be empty");
        return NULL;
    }
    ilc = cddp_tensor_contiguous_raw(il);
    tlc = ilc ? cddp_tensor_contiguous_raw(tl) : NULL;
    tgc = tlc ? cddp_tensor_contiguous_raw(tg) : NULL;
    ibuf = tgc ? PyMem_Malloc((size_t)(3 * N) * sizeof(int64_t)) : NULL;
    if (tgc && !ibuf)
        PyErr_NoMemory();
    if (!ibuf || ctc_check(tgc, ilc, tlc, T, N, C, blank, ibuf, &max_tl) < 0)
        goto fail;
    const int64_t Lp = 2 * max_tl + 1; /* max_tl <= numel(targets): no overflow */
    if (Lp > INT64_MAX / 8 / T / N) {
        PyErr_Format(PyExc_RuntimeError, "ctc_loss: alpha of (%lld, %lld, %lld) elements is "
                     "too large", (long long)N, (long long)T, (long long)Lp);
        goto fail;
    }
    int64_t ashape[3] = {N, T, Lp};
    xc = cddp_tensor_contiguous_raw(x);
    alpha = xc ? cddp_tensor_new(CDDP_FLOAT64, 3, ashape, 0) : NULL;
    nll = alpha ? cddp_tensor_new(CDDP_FLOAT64, 1, &N, 0) : NULL;
    y = nll ? cddp_tensor_new(x->dtype, 1, &N, 0) : NULL;
    if (!y)
        goto fail;
    ctc_plan p = {.T = T, .N = N, .C = C, .Lp = Lp, .blank = blank, .zero_inf = zero_inf,
                  .il = ibuf, .tl = ibuf + N, .off = ibuf + 2 * N,
                  .tg = (const int64_t *)cddp_data(tgc), .alpha = (double *)cddp_data(alpha),
                  .nll = (double *)cddp_data(nll)};
    Py_BEGIN_ALLOW_THREADS
    if (x->dtype == CDDP_FLOAT64)
        ctc_forward_f64(&p, (const double *)cddp_data(xc));
    else
        ctc_forward_f32(&p, (const float *)cddp_data(xc));
    Py_END_ALLOW_THREADS
    for (int64_t b = 0; b < N; b++) {
        double v = zero_inf && p.nll[b] == INFINITY ? 0.0 : p.nll[b];
        cddp_store_double(y->dtype, cddp_data(y) + b * (int64_t)cddp_dtype_size[y->dtype], v);
    }
    node = cddp_maybe_node("CtcLossBackward0", ctc_backward, 1, &x, &err);
    if (err)
        goto fail;
    if (node) {
        int64_t v[CTC_I_COUNT] = {T, N, C, Lp, blank, zero_inf};
        memcpy(node->i, v, sizeof v);
        node->ibuf = ibuf; /* the node frees it */
        ibuf = NULL;
        cddp_set_history(y, node, 0);
        if (cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, tgc) < 0 ||
            cddp_node_save(node, 2, alpha) < 0 || cddp_node_save(node, 3, nll) < 0)
            goto fail;
        Py_CLEAR(node);
    }
    PyMem_Free(ibuf);
    Py_DECREF(xc);
    Py_DECREF(tgc);
    Py_DECREF(ilc);
    Py_DECREF(tlc);
    Py_DECREF(alpha);
    Py_DECREF(nll);
    return (PyObject *)y;
fail:
    PyMem_Free(ibuf);
    Py_XDECREF(node);
    Py_XDECREF(xc);
    Py_XDECREF(tgc);
    Py_XDECREF(ilc);
    Py_XDECREF(tlc);
    Py_XDECREF(alpha);
    Py_XDECREF(nll);
    Py_XDECREF(y);
    return NULL;
}

PyMethodDef cddp_ctc_module_methods[] = {
    {"_ctc_loss", (PyCFunction)(void (*)(void))py_ctc_loss, METH_FASTCALL,
     "_ctc_loss(log_probs (T, N, C), targets (N, S) or (sum(target_lengths),) int64, "
     "input_lengths (N,) int64, target_lengths (N,) int64, blank, zero_infinity) -> "
     "per-sample nll (N,); CtcLossBackward0 gives d log_probs"},
    {NULL},
};
