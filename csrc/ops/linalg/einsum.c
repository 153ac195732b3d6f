/* ops/linalg/einsum.c — torch.einsum: the equation parsed and planned in C, executed as a
 * few calls of cddp's own differentiable ops (diagonal, sum, permute, expand, reshape, bmm,
 * mul), so autograd comes from them and every contraction is a GEMM.
 *
 * Mirrors torch.einsum(equation, *operands) and einsum(equation, [operands]): subscripts
 * [a-zA-Z], one '...' per operand (broadcast dims, right-aligned), repeated subscripts in an
 * operand (its diagonal), implicit output (the ellipsis dims, then the subscripts that occur
 * once, in ASCII order), size-1 dims broadcasting against any size; torch's error texts.
 *
 * Plan (torch's own order): per operand, repeated subscripts become diagonals and subscripts
 * no one else needs are summed away; then operands are contracted left to right. For a pair
 * A, B with subscripts split as
 *   batch  (in both, needed later)        left  (A only)        right (B only)
 *   contr  (in both, not needed later)
 * A is permuted to (batch, left, contr) and B to (batch, contr, right), each reshaped to 3-D
 * and multiplied by bmm: (Bt, L, K) @ (Bt, K, R) -> (Bt, L, R) — the contraction runs in the
 * BLAS GEMM, never as a broadcast multiply and sum. A pair with nothing to contract is an
 * outer/elementwise product: a broadcast mul (what torch does too).
 * Legend: Bt = prod batch sizes, L = prod left, K = prod contr, R = prod right.
 */
#include "ops/linalg/blas.h"
#include "module.h"
#include <string.h>

#define NL (52 + CDDP_MAX_DIMS)      /* 52 letters, then the ellipsis dims */
#define MAX_OPS 64

typedef struct {
    PyObject *t;                     /* the operand as it is transformed (owned) */
    int n;                           /* its dims */
    int lab[CDDP_MAX_DIMS];          /* the label of each dim */
} ein_op;

static int letter(char c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : -1;
}

static char label_char(int l)
{
    return (char)(l < 26 ? 'A' + l : 'a' + l - 26);
}

/* ---- calls of cddp ops (each records its own autograd history) ------------------------ */

static PyObject *ints(int n, const int64_t *v)
{
    PyObject *t = PyTuple_New(n);
    for (int k = 0; t && k < n; k++) {
        PyObject *o = PyLong_FromLongLong(v[k]);
        if (!o) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, o);
    }
    return t;
}

/* op->t = op->t.<name>(int tuple v[0..n)); 0 / -1. */
static int apply(ein_op *op, const char *name, int n, const int64_t *v)
{
    PyObject *arg = ints(n, v), *r;
    if (!arg)
        return -1;
    r = PyObject_CallMethod(op->t, name, "(O)", arg);
    Py_DECREF(arg);
    if (!r)
        return -1;
    Py_SETREF(op->t, r);
    return 0;
}

/* Sum away the dims whose label has drop[label] set. */
static int sum_labels(ein_op *op, const char *drop)
{
    int64_t dims[CDDP_MAX_DIMS];
    int nd = 0, k = 0;
    for (int d = 0; d < op->n; d++)
        if (drop[op->lab[d]])
            dims[nd++] = d;
    if (nd == 0)
        return 0;
    if (apply(op, "sum", nd, dims) < 0)
        return -1;
    for (int d = 0; d < op->n; d++)
        if (!drop[op->lab[d]])
            op->lab[k++] = op->lab[d];
    op->n = k;
    return 0;
}

/* Permute op's dims into the label order `order` (n labels, each one of op's). */
static int permute_to(ein_op *op, int n, const int *order)
{
    int64_t perm[CDDP_MAX_DIMS];
    int ident = 1;
    for (int k = 0; k < n; k++) {
        for (int d = 0; d < op->n; d++)
            if (op->lab[d] == order[k])
                perm[k] = d;
        ident &= perm[k] == k;
    }
    if (!ident && apply(op, "permute", n, perm) < 0)
        return -1;
    memcpy(op->lab, order, sizeof(int) * n);
    return 0;
}

/* Repeated labels of one operand become its diagonal (torch.diagonal moves it last). */
static int take_diagonals(ein_op *op, int which)
{
    for (int a = 0; a < op->n; a++) {
        for (int b = a + 1; b < op->n; b++) {
            TensorObject *t = (TensorObject *)op->t;
            PyObject *r;
            int l = op->lab[a], k = 0;
            if (op->lab[b] != l)
                continue;
            if (t->shape[a] != t->shape[b]) {
                PyErr_Format(PyExc_RuntimeError, "einsum(): subscript %c is repeated for operand "
                             "%d but the sizes don't match, %lld != %lld", label_char(l), which,
                             (long long)t->shape[b], (long long)t->shape[a]);
                return -1;
            }
            r = PyObject_CallMethod(op->t, "diagonal", "(iii)", 0, a, b);
            if (!r)
                return -1;
            Py_SETREF(op->t, r);
            for (int d = 0; d < op->n; d++)
                if (d != a && d != b)
                    op->lab[k++] = op->lab[d];
            op->lab[k++] = l;
            op->n = k;
            a = -1;                  /* labels moved: start over */
            break;
        }
    }
    return 0;
}

/* ---- contraction of two operands ------------------------------------------------------ */

/* Labels of op in `want` (a label mask), in op's order, appended to out[n..]. Returns the new
 * count. */
static int collect(const ein_op *op, const char *want, int *out, int n)
{
    for (int d = 0; d < op->n; d++)
        if (want[op->lab[d]])
            out[n++] = op->lab[d];
    return n;
}

/* a = a (*) b over the labels: keep[l] says a label is needed after this pair. */
static int contract(ein_op *a, ein_op *b, const char *keep, const int64_t *size)
{
    char ina[NL] = {0}, inb[NL] = {0}, batch[NL] = {0}, left[NL] = {0}, right[NL] = {0};
    char contr[NL] = {0};
    int ob[CDDP_MAX_DIMS], oa[CDDP_MAX_DIMS], nb = 0, nl, nc, nr, ncontr = 0;
    int64_t shp[4 * CDDP_MAX_DIMS];
    for (int d = 0; d < a->n; d++)
        ina[a->lab[d]] = 1;
    for (int d = 0; d < b->n; d++)
        inb[b->lab[d]] = 1;
    for (int l = 0; l < NL; l++) {
        batch[l] = ina[l] && inb[l] && keep[l];
        contr[l] = ina[l] && inb[l] && !keep[l];
        left[l] = ina[l] && !inb[l];
        right[l] = inb[l] && !ina[l];
        ncontr += contr[l];
    }
    /* a: (batch, left[, contr]); b: (batch, [contr,] right), batch in a's order */
    nb = collect(a, batch, oa, 0);
    memcpy(ob, oa, sizeof(int) * nb);
    nl = collect(a, left, oa, nb);
    nc = collect(a, contr, oa, nl);
    if (permute_to(a, nc, oa) < 0)
        return -1;
    nr = nb;
    for (int k = nl; k < nc; k++)
        ob[nr++] = oa[k];
    nr = collect(b, right, ob, nr);
    if (permute_to(b, nr, ob) < 0)
        return -1;
    if (ncontr == 0) {
        /* nothing to sum: a (batch, left, 1..) * b (batch, 1.., right) broadcast */
        int n = nb + (nl - nb) + (nr - nb), k = 0;
        int64_t sa[CDDP_MAX_DIMS], sb[CDDP_MAX_DIMS];
        PyObject *r;
        ein_op va = {a->t, 0, {0}}, vb = {b->t, 0, {0}};
        if (n > CDDP_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions",
                         CDDP_MAX_DIMS);
            return -1;
        }
        Py_INCREF(va.t);
        Py_INCREF(vb.t);
        for (int d = 0; d < nl; d++)
            sa[k++] = ((TensorObject *)a->t)->shape[d];
        for (int d = nb; d < nr; d++)
            sa[k++] = 1;
        k = 0;
        for (int d = 0; d < nb; d++)
            sb[k++] = ((TensorObject *)b->t)->shape[d];
        for (int d = nb; d < nl; d++)
            sb[k++] = 1;
        for (int d = nb; d < nr; d++)
            sb[k++] = ((TensorObject *)b->t)->shape[d];
        if (apply(&va, "reshape", n, sa) < 0 || apply(&vb, "reshape", n, sb) < 0) {
            Py_DECREF(va.t);
            Py_DECREF(vb.t);
            return -1;
        }
        r = PyNumber_Multiply(va.t, vb.t);
        Py_DECREF(va.t);
        Py_DECREF(vb.t);
        if (!r)
            return -1;
        Py_SETREF(a->t, r);
        for (int d = nb; d < nr; d++)
            a->lab[nl + d - nb] = b->lab[d];
        a->n = n;
        return 0;
    }
    {
        /* bmm: (Bt, L, K) @ (Bt, K, R); size-1 dims expanded to the label's size first */
        int64_t Bt = 1, L = 1, K = 1, R = 1, ea[CDDP_MAX_DIMS], eb[CDDP_MAX_DIMS], s3[3];
        PyObject *r;
        int n = 0;
        for (int d = 0; d < nc; d++)
            ea[d] = d < nb || d >= nl ? size[a->lab[d]] : -1;
        for (int d = 0; d < nr; d++)
            eb[d] = d < nb + (nc - nl) ? size[b->lab[d]] : -1;
        for (int d = 0; d < nb; d++)
            Bt *= size[a->lab[d]];
        for (int d = nb; d < nl; d++)
            L *= size[a->lab[d]];
        for (int d = nl; d < nc; d++)
            K *= size[a->lab[d]];
        for (int d = nb + (nc - nl); d < nr; d++)
            R *= size[b->lab[d]];
        if (apply(a, "expand", nc, ea) < 0 || apply(b, "expand", nr, eb) < 0)
            return -1;
        s3[0] = Bt; s3[1] = L; s3[2] = K;
        if (apply(a, "reshape", 3, s3) < 0)
            return -1;
        s3[1] = K; s3[2] = R;
        if (apply(b, "reshape", 3, s3) < 0)
            return -1;
        r = PyObject_CallMethod(a->t, "bmm", "(O)", b->t);
        if (!r)
            return -1;
        Py_SETREF(a->t, r);
        for (int d = 0; d < nl; d++)
            shp[n++] = size[a->lab[d]];
        for (int d = nb + (nc - nl); d < nr; d++) {
            shp[n] = size[b->lab[d]];
            a->lab[n++] = b->lab[d];
        }
        a->n = n;
        return apply(a, "reshape", n, shp);
    }
}

/* ---- the equation --------------------------------------------------------------------- */

typedef struct {
    int nops;
    int nsub[MAX_OPS];               /* labels written for each operand (ellipsis expanded) */
    int sub[MAX_OPS][CDDP_MAX_DIMS];
    int nout;
    int out[NL];
    int nell;                        /* ellipsis dims (the most any operand has) */
} ein_eq;

/* One operand's subscripts, eq[*pos] up to ',' / '-' / end: labels with -1 for '...', then
 * the ellipsis expanded against the operand's dims (right-aligned ellipsis labels). */
static int parse_operand(const char *eq, size_t *pos, int which, TensorObject *t, ein_eq *e)
{
    int raw[CDDP_MAX_DIMS + 1], n = 0, ell = -1, k = 0;
    size_t i = *pos;
    for (; eq[i] && eq[i] != ',' && eq[i] != '-'; i++) {
        if (eq[i] == ' ')
            continue;
        if (eq[i] == '.') {
            if (ell >= 0 || strncmp(eq + i, "...", 3) != 0) {
                PyErr_SetString(PyExc_RuntimeError, ell >= 0 ? "einsum(): found '.' for operand "
                                "which is already an ellipsis" : "einsum(): found '.' for "
                                "operand that is not part of any ellipsis");
                return -1;
            }
            ell = n;
            i += 2;
            continue;
        }
        if (letter(eq[i]) < 0) {
            PyErr_Format(PyExc_RuntimeError, "einsum(): invalid subscript given at index %zu in "
                         "the equation string, subscripts must be in [a-zA-Z]", i);
            return -1;
        }
        if (n > CDDP_MAX_DIMS)
            goto mismatch;
        raw[n++] = letter(eq[i]);
    }
    *pos = i;
    if (ell < 0 ? n != t->ndim : n > t->ndim)
        goto mismatch;
    {
        int ne = t->ndim - n;
        e->nell = ne > e->nell ? ne : e->nell;
        for (int j = 0; j < n + (ell >= 0); j++) {
            if (j == ell) {              /* dims of the ellipsis, aligned to the right */
                for (int q = 0; q < ne; q++)
                    e->sub[which][k++] = -2 - (ne - q);   /* resolved once nell is known */
            }
            if (j < n)
                e->sub[which][k++] = raw[j];
        }
    }
    e->nsub[which] = k;
    return 0;
mismatch:
    PyErr_Format(PyExc_RuntimeError, "einsum(): the number of subscripts in the equation (%d) "
                 "does not match the number of dimensions (%d) for operand %d%s", n, t->ndim,
                 which, ell < 0 ? " and no ellipsis was given" : "");
    return -1;
}

/* The output subscripts: explicit after "->", else implicit (ellipsis dims, then the labels
 * written once, in ASCII order). count[l]: occurrences of l in the inputs. */
static int parse_output(const char *eq, size_t pos, const int *count, int has_arrow, ein_eq *e)
{
    char seen[NL] = {0};
    e->nout = 0;
    if (!has_arrow) {
        for (int q = 0; q < e->nell; q++)
            e->out[e->nout++] = 52 + q;
        for (int l = 0; l < 52; l++)
            if (count[l] == 1)
                e->out[e->nout++] = l;
        return 0;
    }
    for (size_t i = pos; eq[i]; i++) {
        int l;
        if (eq[i] == ' ')
            continue;
        if (eq[i] == '.') {
            if (strncmp(eq + i, "...", 3) != 0 || seen[52]) {
                PyErr_SetString(PyExc_RuntimeError, "einsum(): found '.' for output that is not "
                                "part of any ellipsis");
                return -1;
            }
            for (int q = 0; q < e->nell; q++)
                e->out[e->nout++] = 52 + q;
            seen[52] = 1;
            i += 2;
            continue;
        }
        if ((l = letter(eq[i])) < 0) {
            PyErr_Format(PyExc_RuntimeError, "einsum(): invalid subscript given at index %zu in "
                         "the equation string, subscripts must be in [a-zA-Z]", i);
            return -1;
        }
        if (seen[l]++) {
            PyErr_Format(PyExc_RuntimeError, "einsum(): output subscript %c appears more than "
                         "once in the output", eq[i]);
            return -1;
        }
        if (!count[l]) {
            PyErr_Format(PyExc_RuntimeError, "einsum(): output subscript %c does not appear in "
                         "the equation for any input operand", eq[i]);
            return -1;
        }
        e->out[e->nout++] = l;
    }
    return 0;
}

/* Parse eq against the operands; sizes of every label (size-1 dims broadcast) into size. */
static int parse_equation(const char *eq, PyObject *const *ops, int nops, ein_eq *e,
                          int64_t *size)
{
    size_t pos = 0;
    int count[NL] = {0}, which = 0, has_arrow = 0;
    memset(e, 0, sizeof *e);
    for (;;) {
        if (which >= nops) {
            PyErr_SetString(PyExc_RuntimeError, "einsum(): fewer operands were provided than "
                            "specified in the equation");
            return -1;
        }
        if (parse_operand(eq, &pos, which, (TensorObject *)ops[which], e) < 0)
            return -1;
        which++;
        if (eq[pos] != ',')
            break;
        pos++;
    }
    if (eq[pos] == '-') {
        if (eq[pos + 1] != '>') {
            PyErr_SetString(PyExc_RuntimeError, "einsum(): found '-' in the equation that is "
                            "not part of '->'");
            return -1;
        }
        has_arrow = 1;
        pos += 2;
    }
    if (which < nops) {
        PyErr_SetString(PyExc_RuntimeError, "einsum(): more operands were provided than "
                        "specified in the equation");
        return -1;
    }
    e->nops = nops;
    for (int i = 0; i < nops; i++) {
        TensorObject *t = (TensorObject *)ops[i];
        for (int d = 0; d < e->nsub[i]; d++) {
            int l = e->sub[i][d];
            if (l < 0)
                l = e->sub[i][d] = 52 + e->nell + l + 2;     /* ellipsis dims, right-aligned */
            count[l]++;
            for (int q = 0; q < d; q++) {
                if (e->sub[i][q] == l && t->shape[q] != t->shape[d]) {
                    PyErr_Format(PyExc_RuntimeError, "einsum(): subscript %c is repeated for "
                                 "operand %d but the sizes don't match, %lld != %lld",
                                 label_char(l), i, (long long)t->shape[d],
                                 (long long)t->shape[q]);
                    return -1;
                }
            }
            if (size[l] >= 0 && size[l] != t->shape[d] && size[l] != 1 && t->shape[d] != 1) {
                PyErr_Format(PyExc_RuntimeError, "einsum(): subscript %c has size %lld for "
                             "operand %d which does not broadcast with previously seen size "
                             "%lld", l < 52 ? label_char(l) : '.', (long long)t->shape[d], i,
                             (long long)size[l]);
                return -1;
            }
            if (size[l] < 0 || size[l] == 1)
                size[l] = t->shape[d];
        }
    }
    return parse_output(eq, pos, count, has_arrow, e);
}

/* ---- einsum --------------------------------------------------------------------------- */

static PyObject *einsum_impl(const char *eq, PyObject *const *ops, int nops)
{
    ein_eq e;
    ein_op op[MAX_OPS];
    int64_t size[NL];
    char in_out[NL] = {0};
    PyObject *res = NULL;
    int nop = 0;
    for (int l = 0; l < NL; l++)
        size[l] = -1;
    for (int i = 0; i < nops; i++) {
        if (!cddp_tensor_check(ops[i])) {
            PyErr_Format(PyExc_TypeError, "einsum(): operands must be Tensors, got %s",
                         Py_TYPE(ops[i])->tp_name);
            return NULL;
        }
    }
    if (parse_equation(eq, ops, nops, &e, size) < 0)
        return NULL;
    for (int k = 0; k < e.nout; k++)
        in_out[e.out[k]] = 1;
    for (; nop < nops; nop++) {      /* diagonals first, then labels only this operand has */
        op[nop].t = Py_NewRef(ops[nop]);
        op[nop].n = e.nsub[nop];
        memcpy(op[nop].lab, e.sub[nop], sizeof(int) * op[nop].n);
        if (take_diagonals(&op[nop], nop) < 0) {
            nop++;
            goto done;
        }
    }
    for (int i = 0; i < nops; i++) {
        char drop[NL] = {0};
        for (int d = 0; d < op[i].n; d++) {
            int l = op[i].lab[d], elsewhere = 0;
            for (int j = 0; j < nops && !elsewhere; j++)
                for (int q = 0; j != i && q < op[j].n; q++)
                    elsewhere |= op[j].lab[q] == l;
            drop[l] = !in_out[l] && !elsewhere;
        }
        if (sum_labels(&op[i], drop) < 0)
            goto done;
    }
    for (int i = 1; i < nops; i++) {
        char keep[NL];
        memcpy(keep, in_out, sizeof keep);
        for (int j = i + 1; j < nops; j++)
            for (int q = 0; q < op[j].n; q++)
                keep[op[j].lab[q]] = 1;
        {
            char drop[NL] = {0};             /* the running result's labels no one needs */
            for (int d = 0; d < op[0].n; d++) {
                int l = op[0].lab[d], inb = 0;
                for (int q = 0; q < op[i].n; q++)
                    inb |= op[i].lab[q] == l;
                drop[l] = !keep[l] && !inb;
            }
            if (sum_labels(&op[0], drop) < 0 || contract(&op[0], &op[i], keep, size) < 0)
                goto done;
        }
    }
    {
        char drop[NL];
        for (int l = 0; l < NL; l++)
            drop[l] = !in_out[l];
        if (sum_labels(&op[0], drop) < 0)
            goto done;
        if (op[0].n != e.nout) {     /* an output label whose dims were all broadcast away */
            PyErr_SetString(PyExc_RuntimeError, "einsum(): internal error: output dims lost");
            goto done;
        }
        if (permute_to(&op[0], e.nout, e.out) < 0)
            goto done;
    }
    res = Py_NewRef(op[0].t);
done:
    for (int i = 0; i < nop; i++)
        Py_XDECREF(op[i].t);
    return res;
}

/* einsum(equation, *operands) or einsum(equation, [operands]) */
static PyObject *py_einsum(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    const char *eq;
    PyObject *seq = NULL, *res;
    PyObject *const *ops = args + 1;
    Py_ssize_t nops = nargs - 1;
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "einsum() takes no keyword arguments");
        return NULL;
    }
    if (nargs < 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "einsum(): must specify the equation string and at "
                        "least one operand, or at least one operand and its subscripts list");
        return NULL;
    }
    if (!(eq = PyUnicode_AsUTF8(args[0])))
        return NULL;
    if (nargs == 2 && (PyList_Check(args[1]) || PyTuple_Check(args[1]))) {
        if (!(seq = PySequence_Fast(args[1], "einsum(): operands must be a sequence")))
            return NULL;
        ops = PySequence_Fast_ITEMS(seq);
        nops = PySequence_Fast_GET_SIZE(seq);
    }
    if (nops < 1 || nops > MAX_OPS) {
        PyErr_Format(PyExc_ValueError, nops < 1 ? "einsum(): must provide at least one operand"
                     : "einsum(): at most %d operands", MAX_OPS);
        Py_XDECREF(seq);
        return NULL;
    }
    res = einsum_impl(eq, ops, (int)nops);
    Py_XDECREF(seq);
    return res;
}

PyMethodDef cddp_einsum_module_methods[] = {
    {"einsum", (PyCFunction)(void (*)(void))py_einsum, METH_FASTCALL | METH_KEYWORDS,
     "einsum(equation, *operands) -> Tensor: contractions through bmm (BLAS GEMM)"},
    {NULL},
};
