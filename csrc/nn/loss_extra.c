/* nn/loss_extra.c — the losses beyond nn/loss.c's: one fused pointwise engine and one
 * row engine, each a single C pass forward and backward (autograd nodes of their own).
 *
 * Mirrors torch.nn.functional (cddp/nn/functional.py maps torch's keywords onto these):
 *   _pointwise_loss(kind, input, target, third|None, reduction, p0, p1, flags)
 *     SMOOTH_L1 (beta)  HUBER (delta)  KL_DIV (flags: log_target)  POISSON_NLL (eps; flags:
 *     log_input, full)  GAUSSIAN_NLL (third = var, eps; flags: full)  HINGE_EMBEDDING
 *     (margin)  SOFT_MARGIN  MARGIN_RANKING (input1, input2, target; margin)
 *     MULTILABEL_SOFT_MARGIN (third = weight (C,) | None; each row of C is averaged first)
 *   _row_loss(kind, a, b, c, reduction, margin, p, eps, swap)
 *     COSINE_EMBEDDING (input1, input2 (N, D)|(D,), target (N,)|())
 *     TRIPLET_MARGIN (anchor, positive, negative (N, D)|(D,); p-norm distances, swap)
 *
 * reduction: 0 none, 1 mean, 2 sum, 3 batchmean (sum / input.size(0), kl_div's).
 * Pointwise inputs broadcast to one shape (as torch's elementwise formulas do) and are
 * computed in double; every differentiable input gets its gradient, summed back to its shape.
 * Derivatives at the kinks follow torch's clamp_min(0) rule: the branch is active at >= 0.
 * Legend: n elements of the broadcast shape; rows of R elements (R = C for
 * multilabel_soft_margin, else 1); N rows of D for the row losses.
 */
#include "core/cddp.h"
#include "module.h"
#include <math.h>
#include <string.h>

#define DATA(t) ((void *)cddp_data(t))

enum { SMOOTH_L1, HUBER, KL_DIV, POISSON_NLL, GAUSSIAN_NLL, HINGE_EMBEDDING, SOFT_MARGIN,
       MARGIN_RANKING, MULTILABEL_SOFT_MARGIN, N_POINTWISE };
enum { COSINE_EMBEDDING, TRIPLET_MARGIN };
enum { RED_NONE, RED_MEAN, RED_SUM, RED_BATCHMEAN };
enum { F_LOG_TARGET = 1, F_LOG_INPUT = 1, F_FULL = 2 };

static const char *const pw_nodes[N_POINTWISE] = {
    "SmoothL1LossBackward0", "HuberLossBackward0", "KlDivBackward0", "PoissonNllLossBackward0",
    "GaussianNllLossBackward0", "HingeEmbeddingLossBackward0", "SoftMarginLossBackward0",
    "MarginRankingLossBackward0", "MultilabelSoftMarginLossBackward0"};

/* ---- shared ---------------------------------------------------------------------------- */

static double softplus(double z)     /* log(1 + e^z), stable */
{
    return (z > 0 ? z : 0) + log1p(exp(-fabs(z)));
}

static double sigmoid(double z)
{
    return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z));
}

/* Contiguous float64 copy of t broadcast to (nd, shape). */
static TensorObject *f64_to(TensorObject *t, int nd, const int64_t *shape)
{
    TensorObject *c = cddp_tensor_new(CDDP_FLOAT64, nd, shape, 0);
    if (c && cddp_copy_into(c, t) < 0)
        Py_CLEAR(c);
    return c;
}

/* Per-output values (n of them) reduced into a tensor of dtype dt: none keeps (nd, shape). */
static TensorObject *reduced(const double *v, int64_t n, int red, double denom, cddp_dtype dt,
                             int nd, const int64_t *shape)
{
    TensorObject *out;
    double s = 0;
    if (red == RED_NONE) {
        out = cddp_tensor_new(CDDP_FLOAT64, nd, shape, 0);
        if (out)
            memcpy(DATA(out), v, sizeof(double) * (size_t)n);
    } else {
        for (int64_t i = 0; i < n; i++)
            s += v[i];
        out = cddp_scalar_tensor(red == RED_SUM ? s : s / denom, CDDP_FLOAT64);
    }
    if (out && dt != CDDP_FLOAT64)
        Py_SETREF(out, cddp_tensor_cast_raw(out, dt));
    return out;
}

/* The upstream gradient per output (n values) with the reduction's scale applied. */
static double *out_grads(TensorObject *g, int red, double denom, int64_t n)
{
    double *s = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!s)
        return (double *)PyErr_NoMemory();
    for (int64_t i = 0; i < n; i++)
        s[i] = red == RED_NONE ? cddp_get_double(g, i)
             : cddp_get_double(g, 0) / (red == RED_SUM ? 1.0 : denom);
    return s;
}

static int check_red(int red)
{
    if (red < 0 || red > 3) {
        PyErr_Format(PyExc_ValueError, "reduction code must be 0..3, got %d", red);
        return -1;
    }
    return 0;
}

/* ---- the pointwise engine ------------------------------------------------------------- */

/* loss l and its derivatives d[0..2] with respect to x, y, z at one element */
static void pw_eval(int kind, const double *p, int fl, double x, double y, double z, double *l,
                    double *d)
{
    double t, a;
    d[0] = d[1] = d[2] = 0;
    switch (kind) {
    case SMOOTH_L1:                  /* p[0] = beta; beta == 0 is l1 */
    case HUBER:                      /* p[0] = delta */
        t = x - y;
        a = fabs(t);
        if (kind == SMOOTH_L1 ? a < p[0] : a <= p[0]) {
            *l = kind == SMOOTH_L1 ? 0.5 * t * t / p[0] : 0.5 * t * t;
            d[0] = kind == SMOOTH_L1 ? t / p[0] : t;
        } else {
            *l = kind == SMOOTH_L1 ? a - 0.5 * p[0] : p[0] * (a - 0.5 * p[0]);
            d[0] = (t > 0 ? 1 : t < 0 ? -1 : t == 0 ? 0 : t) * (kind == SMOOTH_L1 ? 1 : p[0]);
            /* (t NaN: the NaN propagates into the gradient, as torch's sign does) */
        }
        d[1] = -d[0];
        break;
    case KL_DIV:
        if (fl & F_LOG_TARGET) {
            *l = exp(y) * (y - x);
            d[0] = -exp(y);
            d[1] = exp(y) * (y - x + 1);
        } else {                     /* xlogy(y, y) - y x: 0 at y == 0 (torch's gradient: NaN) */
            *l = (y == 0 ? 0 : y * log(y)) - y * x;
            d[0] = -y;
            d[1] = y == 0 ? NAN : log(y) + 1 - x;
        }
        break;
    case POISSON_NLL:                /* p[0] = eps */
        if (fl & F_LOG_INPUT) {
            *l = exp(x) - y * x;
            d[0] = exp(x) - y;
            d[1] = -x;
        } else {
            *l = x - y * log(x + p[0]);
            d[0] = 1 - y / (x + p[0]);
            d[1] = -log(x + p[0]);
        }
        if ((fl & F_FULL) && y > 1) {    /* Stirling's term of log(y!) */
            *l += y * log(y) - y + 0.5 * log(2 * M_PI * y);
            d[1] += log(y) + 0.5 / y;
        }
        break;
    case GAUSSIAN_NLL:               /* z = var, clamped at p[0] = eps (no gradient mask) */
        t = x - y;
        a = z > p[0] ? z : p[0];
        *l = 0.5 * (log(a) + t * t / a) + ((fl & F_FULL) ? 0.5 * log(2 * M_PI) : 0);
        d[0] = t / a;
        d[1] = -t / a;
        d[2] = 0.5 * (1 / a - t * t / (a * a));
        break;
    case HINGE_EMBEDDING:            /* p[0] = margin; torch's two where() terms */
        *l = (y != 1 ? (p[0] - x > 0 ? p[0] - x : 0) : 0) + (y != -1 ? x : 0);
        d[0] = (y != 1 && p[0] - x >= 0 ? -1 : 0) + (y != -1 ? 1 : 0);
        break;
    case SOFT_MARGIN:
        t = -y * x;
        *l = softplus(t);
        d[0] = -y * sigmoid(t);
        d[1] = -x * sigmoid(t);
        break;
    case MARGIN_RANKING:             /* x = input1, y = input2, z = target; p[0] = margin */
        t = -z * (x - y) + p[0];
        *l = t > 0 ? t : 0;
        a = t >= 0 ? 1 : 0;
        d[0] = -z * a;
        d[1] = z * a;
        d[2] = -(x - y) * a;
        break;
    default:                         /* MULTILABEL_SOFT_MARGIN: z = weight (1 when absent) */
        t = -(y * -softplus(-x) + (1 - y) * -softplus(x));
        *l = z * t;
        d[0] = z * (sigmoid(x) - y);
        d[1] = -z * x;
        d[2] = t;
        break;
    }
}

/* The saved broadcast copies and the per-output scale -> gradients of every input. */
static int pw_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *b[3] = {NULL, NULL, NULL};
    int kind = (int)self->i[0], red = (int)self->i[1], fl = (int)self->i[2], rc = -1;
    int64_t R = self->i[3], n;
    double *s = NULL, *gv[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++)
        if (self->saved[k] && !(b[k] = cddp_node_saved(self, k)))
            return -1;
    if (!gout[0])
        return 0;
    n = cddp_numel(b[0]);
    s = out_grads(gout[0], red, self->d[2], R ? n / R : 0);
    for (int k = 0; k < 3; k++)
        if (!(gv[k] = PyMem_Calloc((size_t)(n ? n : 1), sizeof(double))))
            goto done;
    if (!s)
        goto done;
    {
        const double *x = DATA(b[0]), *y = DATA(b[1]), *z = b[2] ? DATA(b[2]) : NULL;
        for (int64_t i = 0; i < n; i++) {
            double l, d[3], w = s[i / R] / (double)R;
            pw_eval(kind, self->d, fl, x[i], y[i], z ? z[i] : 1, &l, d);
            for (int k = 0; k < 3; k++)
                gv[k][i] = w * d[k];
        }
    }
    for (int k = 0; k < 3 && k < self->n_next; k++) {
        TensorObject *full;
        if (!self->next[k].node)
            continue;
        full = cddp_tensor_new(CDDP_FLOAT64, b[0]->ndim, b[0]->shape, 0);
        if (!full)
            goto done;
        memcpy(DATA(full), gv[k], sizeof(double) * (size_t)n);
        gin[k] = cddp_sum_to(full, self->meta[k].ndim, self->meta[k].shape);
        Py_DECREF(full);
        if (gin[k] && gin[k]->dtype != self->meta[k].dtype)
            Py_SETREF(gin[k], cddp_tensor_cast_raw(gin[k], self->meta[k].dtype));
        if (!gin[k])
            goto done;
    }
    rc = 0;
done:
    if (rc < 0 && !PyErr_Occurred())
        PyErr_NoMemory();
    if (rc < 0)
        for (int k = 0; k < 3; k++)
            Py_CLEAR(gin[k]);
    PyMem_Free(s);
    for (int k = 0; k < 3; k++)
        PyMem_Free(gv[k]);
    return rc;
}

/* Record the node: edges to the given inputs, the broadcast copies saved. */
static int pw_record(TensorObject *out, TensorObject **ins, TensorObject **b, int kind, int red,
                     int fl, int64_t R, const double *prm, double denom)
{
    int err, bad = 0;
    NodeObject *node = cddp_maybe_node(pw_nodes[kind], pw_backward, 3, ins, &err);
    if (err)
        return -1;
    if (!node)
        return 0;
    cddp_set_history(out, node, 0);
    node->i[0] = kind;
    node->i[1] = red;
    node->i[2] = fl;
    node->i[3] = R;
    node->d[0] = prm[0];
    node->d[1] = prm[1];
    node->d[2] = denom;
    for (int k = 0; k < 3; k++)
        bad |= b[k] && cddp_node_save(node, k, b[k]) < 0;
    node->n_saved = 3;               /* an absent third input leaves its slot NULL */
    Py_DECREF(node);
    return bad ? -1 : 0;
}

static PyObject *py_pointwise_loss(PyObject *m, PyObject *args)
{
    TensorObject *ins[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL}, *out = NULL;
    PyObject *third;
    int kind, red, fl, nd = 0, ond;
    double prm[2], *l = NULL, denom = 1;
    int64_t shape[CDDP_MAX_DIMS], n, R = 1, rows;
    cddp_dtype dt;
    if (!PyArg_ParseTuple(args, "iO!O!Oiddi", &kind, cddp_state()->tensor_type, &ins[0],
                          cddp_state()->tensor_type, &ins[1], &third, &red, &prm[0], &prm[1], &fl))
        return NULL;
    if (kind < 0 || kind >= N_POINTWISE || check_red(red) < 0) {
        PyErr_SetString(PyExc_ValueError, "_pointwise_loss: bad kind or reduction");
        return NULL;
    }
    if (third != Py_None) {
        if (!cddp_tensor_check(third)) {
            PyErr_SetString(PyExc_TypeError, "_pointwise_loss: the third input must be a Tensor");
            return NULL;
        }
        ins[2] = (TensorObject *)third;
    }
    nd = ins[0]->ndim;
    memcpy(shape, ins[0]->shape, sizeof(int64_t) * nd);
    for (int k = 1; k < 3; k++)
        if (ins[k] && cddp_broadcast_shapes(nd, shape, ins[k]->ndim, ins[k]->shape, &nd, shape) < 0)
            return NULL;
    dt = cddp_promote(ins[0]->dtype, ins[1]->dtype);
    if (!cddp_is_floating(dt))
        dt = cddp_state()->default_dtype;
    for (int k = 0; k < 3; k++)
        if (ins[k] && !(b[k] = f64_to(ins[k], nd, shape)))
            goto done;
    n = cddp_numel(b[0]);
    if (kind == MULTILABEL_SOFT_MARGIN)     /* each row of C classes is one output */
        R = nd ? shape[nd - 1] : 1;
    ond = kind == MULTILABEL_SOFT_MARGIN && nd ? nd - 1 : nd;
    rows = 1;
    for (int d = 0; d < ond; d++)
        rows *= shape[d];
    if (!(l = PyMem_Malloc(sizeof(double) * (size_t)(n > rows ? n : rows + 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; R == 0 && i < rows; i++)
        l[i] = NAN;                  /* rows of no classes: 0 / 0, as torch */
    {
        const double *x = DATA(b[0]), *y = DATA(b[1]), *z = b[2] ? DATA(b[2]) : NULL;
        for (int64_t i = 0; i < n; i++) {
            double li, d[3];
            pw_eval(kind, prm, fl, x[i], y[i], z ? z[i] : 1, &li, d);
            if (R == 1 || i % R == 0)
                l[i / R] = 0;
            l[i / R] += li / (double)R;
        }
    }
    denom = red == RED_BATCHMEAN ? (ins[0]->ndim ? (double)ins[0]->shape[0] : 1.0)
                                 : (double)rows;
    out = reduced(l, rows, red, denom, dt, ond, shape);
    if (out && cddp_is_floating(ins[0]->dtype) &&
        pw_record(out, ins, b, kind, red, fl, R, prm, denom) < 0)
        Py_CLEAR(out);
done:
    for (int k = 0; k < 3; k++)
        Py_XDECREF(b[k]);
    PyMem_Free(l);
    return (PyObject *)out;
}

/* ---- the row engine: cosine_embedding / triplet_margin -------------------------------- */

#define COS_EPS 1e-12                /* torch's EPSILON in cosine_embedding_loss */

typedef struct {
    int kind;
    double margin, p, eps;
    int swap;
    int64_t N, D;
    const double *a, *b, *c;         /* (N, D) rows; cosine: c = target (N) */
} row_plan;

/* ||v||_p of a - b + eps over D elements, and (when g) its gradient wrt a into g */
static double pdist(const row_plan *q, const double *a, const double *b, double *g)
{
    double s = 0, nrm;
    for (int64_t k = 0; k < q->D; k++) {
        double v = fabs(a[k] - b[k] + q->eps);
        s += q->p == 2 ? v * v : q->p == 1 ? v : pow(v, q->p);
    }
    nrm = q->p == 2 ? sqrt(s) : q->p == 1 ? s : pow(s, 1 / q->p);
    for (int64_t k = 0; g && k < q->D; k++) {
        double v = a[k] - b[k] + q->eps, sg = v > 0 ? 1 : v < 0 ? -1 : 0;
        g[k] = nrm == 0 ? 0 : q->p == 2 ? v / nrm : q->p == 1 ? sg
             : sg * pow(fabs(v), q->p - 1) / pow(nrm, q->p - 1);
    }
    return nrm;
}

/* Loss of row i; with scale w != 0, adds w * d loss / d (a, b, c) rows into ga, gb, gc (gc:
 * the cosine target gets none). scratch: 3 D doubles. */
static double row_eval(const row_plan *q, int64_t i, double w, double *ga, double *gb,
                       double *gc, double *scratch)
{
    const double *a = q->a + i * q->D, *b = q->b + i * q->D;
    if (q->kind == COSINE_EMBEDDING) {
        double p = 0, m1 = COS_EPS, m2 = COS_EPS, cs, y = q->c[i], l = 0, dl = 0, s;
        for (int64_t k = 0; k < q->D; k++) {
            p += a[k] * b[k];
            m1 += a[k] * a[k];
            m2 += b[k] * b[k];
        }
        s = sqrt(m1 * m2);
        cs = p / s;
        if (y == 1) {
            l = 1 - cs;
            dl = -1;
        } else if (y == -1) {
            l = cs - q->margin > 0 ? cs - q->margin : 0;
            dl = cs - q->margin >= 0 ? 1 : 0;
        }
        for (int64_t k = 0; w != 0 && dl != 0 && k < q->D; k++) {
            ga[i * q->D + k] += w * dl * (b[k] / s - cs * a[k] / m1);
            gb[i * q->D + k] += w * dl * (a[k] / s - cs * b[k] / m2);
        }
        return l;
    }
    {
        const double *c = q->c + i * q->D;
        double *gp = scratch, *gn = scratch + q->D, *gs = scratch + 2 * q->D;
        double dp = pdist(q, a, b, gp), dn = pdist(q, a, c, gn), t;
        int use_swap = 0;
        if (q->swap) {
            double ds = pdist(q, b, c, gs);
            use_swap = ds < dn;
            dn = use_swap ? ds : dn;
        }
        t = q->margin + dp - dn;
        if (w == 0 || t < 0)
            return t > 0 ? t : 0;
        for (int64_t k = 0; k < q->D; k++) {
            ga[i * q->D + k] += w * gp[k];
            gb[i * q->D + k] -= w * gp[k];
            if (use_swap) {          /* -d(b, c): b gets -g, c gets +g */
                gb[i * q->D + k] -= w * gs[k];
                gc[i * q->D + k] += w * gs[k];
            } else {
                ga[i * q->D + k] -= w * gn[k];
                gc[i * q->D + k] += w * gn[k];
            }
        }
        return t > 0 ? t : 0;
    }
}

static int row_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *s[3], *g[3] = {NULL, NULL, NULL};
    row_plan q;
    double *w = NULL, *scratch = NULL;
    int red = (int)self->i[1], rc = -1;
    for (int k = 0; k < 3; k++)
        if (!(s[k] = cddp_node_saved(self, k)))
            return -1;
    if (!gout[0])
        return 0;
    q.kind = (int)self->i[0];
    q.N = self->i[2];
    q.D = self->i[3];
    q.swap = (int)self->i[4];
    q.margin = self->d[0];
    q.p = self->d[1];
    q.eps = self->d[2];
    q.a = DATA(s[0]);
    q.b = DATA(s[1]);
    q.c = DATA(s[2]);
    w = out_grads(gout[0], red, (double)q.N, q.N);
    scratch = PyMem_Malloc(sizeof(double) * (size_t)(3 * q.D + 1));
    for (int k = 0; k < 3; k++)
        g[k] = cddp_tensor_new(CDDP_FLOAT64, s[k]->ndim, s[k]->shape, 1);
    if (!w || !scratch || !g[0] || !g[1] || !g[2]) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; i < q.N; i++)
        row_eval(&q, i, w[i], DATA(g[0]), DATA(g[1]), DATA(g[2]), scratch);
    for (int k = 0; k < 3 && k < self->n_next; k++) {
        int64_t st[CDDP_MAX_DIMS];
        if (!self->next[k].node || (q.kind == COSINE_EMBEDDING && k == 2))
            continue;
        cddp_contiguous_strides(self->meta[k].ndim, self->meta[k].shape, st);
        gin[k] = cddp_tensor_alias(g[k], self->meta[k].ndim, self->meta[k].shape, st, 0);
        if (gin[k] && gin[k]->dtype != self->meta[k].dtype)
            Py_SETREF(gin[k], cddp_tensor_cast_raw(gin[k], self->meta[k].dtype));
        if (!gin[k])
            goto done;
    }
    rc = 0;
done:
    if (rc < 0)
        for (int k = 0; k < 3; k++)
            Py_CLEAR(gin[k]);
    for (int k = 0; k < 3; k++)
        Py_XDECREF(g[k]);
    PyMem_Free(w);
    PyMem_Free(scratch);
    return rc;
}

/* Shape checks with torch's texts; N and D from a. */
static int row_check(int kind, TensorObject **t, int64_t *N, int64_t *D)
{
    TensorObject *a = t[0], *b = t[1], *c = t[2];
    if (kind == COSINE_EMBEDDING) {
        if ((c->ndim == 1 && (a->ndim != 2 || b->ndim != 2)) ||
            (c->ndim == 0 && (a->ndim != 1 || b->ndim != 1)) || c->ndim > 1) {
            char s1[128], s2[128];
            size_t k1 = 0, k2 = 0;
            s1[0] = s2[0] = 0;
            for (int d = 0; d < a->ndim && k1 < 100; d++)
                k1 += (size_t)snprintf(s1 + k1, sizeof s1 - k1, d ? ", %lld" : "%lld",
                                       (long long)a->shape[d]);
            for (int d = 0; d < b->ndim && k2 < 100; d++)
                k2 += (size_t)snprintf(s2 + k2, sizeof s2 - k2, d ? ", %lld" : "%lld",
                                       (long long)b->shape[d]);
            PyErr_Format(PyExc_RuntimeError, "%dD target tensor expects %dD input tensors, but "
                         "found inputs with sizes [%s] and [%s].", c->ndim, c->ndim + 1, s1, s2);
            return -1;
        }
    } else if (a->ndim != b->ndim || a->ndim != c->ndim) {
        PyErr_Format(PyExc_RuntimeError, "The anchor, positive, and negative tensors are expected "
                     "to have the same number of dimensions, but got: anchor %dD, positive %dD, "
                     "and negative %dD inputs", a->ndim, b->ndim, c->ndim);
        return -1;
    }
    if (a->ndim < 1 || a->ndim > 2 || memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) ||
        (kind == TRIPLET_MARGIN && memcmp(a->shape, c->shape, sizeof(int64_t) * a->ndim)) ||
        (kind == COSINE_EMBEDDING && c->ndim == 1 && c->shape[0] != a->shape[0])) {
        PyErr_SetString(PyExc_RuntimeError, kind == COSINE_EMBEDDING
                        ? "cosine_embedding_loss: input1, input2 (N, D) or (D,) of one shape and "
                          "target (N,) or () expected"
                        : "triplet_margin_loss: anchor, positive and negative must be (N, D) or "
                          "(D,) tensors of one shape");
        return -1;
    }
    *N = a->ndim == 2 ? a->shape[0] : 1;
    *D = a->shape[a->ndim - 1];
    return 0;
}

static PyObject *py_row_loss(PyObject *m, PyObject *args)
{
    TensorObject *t[3], *s[3] = {NULL, NULL, NULL}, *out = NULL;
    row_plan q;
    int red, err;
    double *l = NULL, *scratch = NULL;
    if (!PyArg_ParseTuple(args, "iO!O!O!idddi", &q.kind, cddp_state()->tensor_type, &t[0],
                          cddp_state()->tensor_type, &t[1], cddp_state()->tensor_type, &t[2], &red,
                          &q.margin, &q.p, &q.eps, &q.swap))
        return NULL;
    if (check_red(red) < 0 || red == RED_BATCHMEAN || row_check(q.kind, t, &q.N, &q.D) < 0)
        return NULL;
    if (q.kind == TRIPLET_MARGIN && !(q.p > 0)) {
        char b[48];                  /* PyErr_Format has no %g */
        snprintf(b, sizeof b, "%g", q.p);
        PyErr_Format(PyExc_RuntimeError, "triplet_margin_loss: p must be positive, got %s", b);
        return NULL;
    }
    for (int k = 0; k < 3; k++)
        if (!(s[k] = f64_to(t[k], t[k]->ndim, t[k]->shape)))
            goto done;
    q.a = DATA(s[0]);
    q.b = DATA(s[1]);
    q.c = DATA(s[2]);
    l = PyMem_Malloc(sizeof(double) * (size_t)(q.N + 1));
    scratch = PyMem_Malloc(sizeof(double) * (size_t)(3 * q.D + 1));
    if (!l || !scratch) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; i < q.N; i++)
        l[i] = row_eval(&q, i, 0, NULL, NULL, NULL, scratch);
    out = reduced(l, q.N, red, (double)q.N, cddp_promote(t[0]->dtype, t[1]->dtype),
                  t[0]->ndim - 1, t[0]->shape);
    if (out) {
        NodeObject *node = cddp_maybe_node(q.kind == COSINE_EMBEDDING
                                           ? "CosineEmbeddingLossBackward0"
                                           : "TripletMarginLossBackward0", row_backward, 3, t, &err);
        if (err) {
            Py_CLEAR(out);
        } else if (node) {
            int64_t iv[5] = {q.kind, red, q.N, q.D, q.swap};
            cddp_set_history(out, node, 0);
            memcpy(node->i, iv, sizeof iv);
            node->d[0] = q.margin;
            node->d[1] = q.p;
            node->d[2] = q.eps;
            for (int k = 0; k < 3; k++)
                if (cddp_node_save(node, k, s[k]) < 0)
                    Py_CLEAR(out);
            Py_DECREF(node);
        }
    }
done:
    for (int k = 0; k < 3; k++)
        Py_XDECREF(s[k]);
    PyMem_Free(l);
    PyMem_Free(scratch);
    return (PyObject *)out;
}

PyMethodDef cddp_loss_extra_module_methods[] = {
    {"_pointwise_loss", py_pointwise_loss, METH_VARARGS,
     "_pointwise_loss(kind, input, target, third, reduction, p0, p1, flags)"},
    {"_row_loss", py_row_loss, METH_VARARGS,
     "_row_loss(kind, a, b, c, reduction, margin, p, eps, swap)"},
    {NULL},
};
