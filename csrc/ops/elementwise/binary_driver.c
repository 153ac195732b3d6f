/* ops/elementwise/binary_driver.c — the two-operand driver under the binary op files: dtype and in-place
 * handling around cddp_ew_map, history recording, the backward-kernel helper, and the Python
 * entry (methods, functions, number slots) shared by add/sub/mul/div/pow/... .
 *
 * Mirrors: the part of at::TensorIterator + torch's python_arg_parser that every binary op
 * goes through (operands as tensors or wrapped numbers, NotImplemented for foreign types).
 */
#include "ops/elementwise/elementwise.h"

int cddp_ew_not_implemented(const char *kname, cddp_dtype dt)
{
    PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for '%s'", kname,
                 cddp_ew_torch_dtype_name[dt]);
    return -1;
}

/* out = fn(a, b) with a, b read in cdt and out written in odt; into: in place, see top. */
TensorObject *cddp_ew_binary_run(ew_operand *a, ew_operand *b, cddp_dtype cdt, cddp_dtype odt,
                                 cddp_loop_fn fn, ew_ctx *ctx, TensorObject *into)
{
    ew_src s[2];
    cddp_ew_src_from(&s[0], a, cdt);
    cddp_ew_src_from(&s[1], b, cdt);
    return cddp_ew_binary_run_srcs(s, cdt, odt, fn, ctx, into);
}

int cddp_ew_opmath_scalar(const ew_operand *b, cddp_dtype cdt, ew_src *src)
{
    if (!cddp_is_reduced(cdt) || (b->t && b->t->ndim != 0))
        return 0;
    src->t = NULL;
    src->s.f32 = b->t ? (float)cddp_get_double(b->t, 0) : b->kind == 2 ? (float)b->d
                                                                         : (float)b->l;
    return 1;
}

TensorObject *cddp_ew_binary_run_srcs(ew_src *s, cddp_dtype cdt, cddp_dtype odt, cddp_loop_fn fn,
                                      ew_ctx *ctx, TensorObject *into)
{
    cddp_dtype want[2] = {cdt, cdt};
    TensorObject *r;
    if (!into)
        return cddp_ew_map(odt, 2, s, want, fn, ctx, NULL);
    if (cddp_ew_check_cast(odt, into) < 0)
        return NULL;
    if (into->dtype == odt)
        return cddp_ew_map(odt, 2, s, want, fn, ctx, into);
    /* e.g. int32 += int64: computed in int64, then cast into the int32 tensor */
    r = cddp_ew_map(odt, 2, s, want, fn, ctx, NULL);
    return (TensorObject *)cddp_ew_inplace_finish(into, r);
}

/* History for a floating result of a (new, not in place) binary op. Steals out. */
TensorObject *cddp_ew_record2(TensorObject *out, const char *name, cddp_backward_fn fn,
                              ew_operand *a, ew_operand *b, int save, double d0)
{
    ew_operand ops[2] = {*a, *b};
    NodeObject *node;
    int err = 0;
    if (!out || !cddp_grad_enabled || !cddp_is_floating(out->dtype))
        return out;
    node = cddp_ew_record(out, name, fn, 2, ops, save, &err);
    if (err) {
        Py_DECREF(out);
        return NULL;
    }
    if (node)
        node->d[0] = d0;
    return out;
}

/* ---- backward helpers ------------------------------------------------------------------- */

/* fn over (g, srcs...) in g's dtype; nin extra sources. New reference. */
TensorObject *cddp_ew_bw_map(const cddp_loop_fn *tbl, TensorObject *g, int nin, ew_src *extra,
                             ew_ctx *ctx)
{
    ew_src s[3] = {{g}};
    cddp_dtype want[3] = {g->dtype, g->dtype, g->dtype};
    for (int i = 0; i < nin; i++)
        s[1 + i] = extra[i];
    return cddp_ew_map(g->dtype, 1 + nin, s, want, tbl[g->dtype], ctx, NULL);
}

/* op(self, other) from Python: operands parsed (TypeError naming the argument), in place
 * through the protocol of ops/elementwise/elementwise.h when inplace. */
PyObject *cddp_ew_py_binary(PyObject *self, PyObject *other, ew_binary_fn fn,
                            const ew_bparams *p, const char *fname, const char *argname,
                            int inplace)
{
    ew_operand a, b;
    TensorObject *r = NULL, *old = NULL;
    PyObject *res = NULL;
    int rc;
    if (cddp_ew_operand_arg(self, &a, fname, "input") < 0)
        return NULL;
    if (cddp_ew_operand_arg(other, &b, fname, argname) < 0)
        goto done;
    if (!inplace) {
        res = (PyObject *)fn(&a, &b, p, NULL);
        goto done;
    }
    if (!a.t || a.owned) {
        PyErr_Format(PyExc_TypeError, "%s(): in-place operation needs a Tensor", fname);
        goto done;
    }
    rc = cddp_ew_inplace_begin(a.t, cddp_ew_operand_needs_grad(&b), &old);
    if (rc == 0) {
        r = fn(&a, &b, p, a.t);
        res = r ? Py_NewRef(a.t) : NULL;
        Py_XDECREF(r);
    } else if (rc == 1) {
        ew_operand o = {old};
        res = cddp_ew_inplace_finish(a.t, fn(&o, &b, p, NULL));
        Py_DECREF(old);
    }
done:
    cddp_ew_operand_clear(&a);
    cddp_ew_operand_clear(&b);
    return res;
}

/* Slots return NotImplemented for operands that are not tensors/numbers, so Python can try the
 * other side and finally raise its TypeError. */
PyObject *cddp_ew_slot_binary(PyObject *a, PyObject *b, ew_binary_fn fn, const ew_bparams *p,
                              const char *op)
{
    ew_operand x, y;
    PyObject *res = NULL;
    int rc = cddp_ew_operand(a, &x);
    if (rc > 0) {
        rc = cddp_ew_operand(b, &y);
        if (rc > 0) {
            res = (PyObject *)fn(&x, &y, p, NULL);
            cddp_ew_operand_clear(&y);
        }
        cddp_ew_operand_clear(&x);
    }
    if (rc == 0 && (PyComplex_CheckExact(a) || PyComplex_CheckExact(b))) {
        PyObject *pair[2] = {a, b}, *name = PyUnicode_FromString(op);
        res = name ? cddp_complex_call("_slot_call", name, pair, 2, NULL) : NULL;
        Py_XDECREF(name);
        return res;
    }
    if (rc == 0)
        Py_RETURN_NOTIMPLEMENTED;
    return res;
}
