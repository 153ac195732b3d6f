/* ops/elementwise/binary_compare.c — binary ops with no gradient: comparisons (bool result, computed in the
 * promoted dtype), logical and/or/xor (on truthiness), bitwise and/or/xor (bool and integer
 * tensors only); the ==, !=, <, <=, >, >=, &, |, ^ slots.
 *
 * Mirrors: torch.eq / ne / lt / le / gt / ge, torch.logical_and / or / xor,
 * torch.bitwise_and / or / xor, Tensor.__eq__ ... __xor__.
 */
#include "ops/elementwise/elementwise.h"

#define CMP_LOOPS(op, EXPR)                                                                \
    EW_LOOP2(op##_f32, uint8_t, float, float, EXPR)                                        \
    EW_LOOP2(op##_f64, uint8_t, double, double, EXPR)                                      \
    EW_LOOP2(op##_i64, uint8_t, int64_t, int64_t, EXPR)                                    \
    EW_LOOP2(op##_i32, uint8_t, int32_t, int32_t, EXPR)                                    \
    EW_LOOP2(op##_b8, uint8_t, uint8_t, uint8_t, EXPR)
#define CMP_TABLE(op) EW_TABLE(op##_f32, op##_f64, op##_i64, op##_i32, op##_b8)
#define INT_LOOPS(op, EXPR)                                                                \
    EW_LOOP2(op##_i64, int64_t, int64_t, int64_t, EXPR)                                    \
    EW_LOOP2(op##_i32, int32_t, int32_t, int32_t, EXPR)                                    \
    EW_LOOP2(op##_b8, uint8_t, uint8_t, uint8_t, EXPR)
#define INT_TABLE(op) EW_TABLE(NULL, NULL, op##_i64, op##_i32, op##_b8)

CMP_LOOPS(eq, x == y)
CMP_LOOPS(ne, x != y)
CMP_LOOPS(lt, x < y)
CMP_LOOPS(le, x <= y)
CMP_LOOPS(gt, x > y)
CMP_LOOPS(ge, x >= y)
EW_LOOP2(land, uint8_t, uint8_t, uint8_t, x && y)
EW_LOOP2(lor, uint8_t, uint8_t, uint8_t, x || y)
EW_LOOP2(lxor, uint8_t, uint8_t, uint8_t, (x != 0) != (y != 0))
INT_LOOPS(band, x & y)
INT_LOOPS(bor, x | y)
INT_LOOPS(bxor, x ^ y)

enum { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_LAND, OP_LOR, OP_LXOR, OP_BAND, OP_BOR,
       OP_BXOR };

static const cddp_loop_fn cmp_tables[][CDDP_NDTYPES] = {
    CMP_TABLE(eq), CMP_TABLE(ne), CMP_TABLE(lt), CMP_TABLE(le), CMP_TABLE(gt), CMP_TABLE(ge),
    EW_TABLE(NULL, NULL, NULL, NULL, land), EW_TABLE(NULL, NULL, NULL, NULL, lor),
    EW_TABLE(NULL, NULL, NULL, NULL, lxor), INT_TABLE(band), INT_TABLE(bor), INT_TABLE(bxor),
};
static const char *const kernel_names[] = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                                           "logical_or", "logical_xor", "bitwise_and_cpu",
                                           "bitwise_or_cpu", "bitwise_xor_cpu"};

/* out = a <op> b. Comparisons compute in the promoted dtype, logical ops on bool views of both,
 * bitwise ops in the promoted dtype (floating refused as torch does). */
static TensorObject *compare(ew_operand *a, ew_operand *b, int op)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops), odt = CDDP_BOOL;
    ew_src s[2];
    cddp_dtype want[2];
    if (op >= OP_LAND && op <= OP_LXOR)
        cdt = CDDP_BOOL;
    if (op >= OP_BAND)
        odt = cdt;
    if (!cmp_tables[op][cdt]) {
        PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for '%s'",
                     kernel_names[op], cddp_ew_torch_dtype_name[cdt]);
        return NULL;
    }
    want[0] = want[1] = cdt;
    cddp_ew_src_from(&s[0], a, cdt);
    cddp_ew_src_from(&s[1], b, cdt);
    return cddp_ew_map(odt, 2, s, want, cmp_tables[op][cdt], NULL, NULL);
}

static PyObject *compare_py(PyObject *self, PyObject *other, int op)
{
    ew_operand a, b;
    PyObject *res = NULL;
    if (cddp_ew_operand_arg(self, &a, kernel_names[op], "input") < 0)
        return NULL;
    if (cddp_ew_operand_arg(other, &b, kernel_names[op], "other") == 0) {
        res = (PyObject *)compare(&a, &b, op);
        cddp_ew_operand_clear(&b);
    }
    cddp_ew_operand_clear(&a);
    return res;
}

#define DEFINE_COMPARE(name, OP)                                                           \
    static PyObject *name##_impl(PyObject *s, PyObject **argv)                             \
    {                                                                                      \
        return compare_py(s, argv[0], OP);                                                 \
    }                                                                                      \
    EW_DEFINE_PY(name, #name, name##_impl, 1, 1, "other")
DEFINE_COMPARE(eq, OP_EQ)
DEFINE_COMPARE(ne, OP_NE)
DEFINE_COMPARE(lt, OP_LT)
DEFINE_COMPARE(le, OP_LE)
DEFINE_COMPARE(gt, OP_GT)
DEFINE_COMPARE(ge, OP_GE)
DEFINE_COMPARE(logical_and, OP_LAND)
DEFINE_COMPARE(logical_or, OP_LOR)
DEFINE_COMPARE(logical_xor, OP_LXOR)
DEFINE_COMPARE(bitwise_and, OP_BAND)
DEFINE_COMPARE(bitwise_or, OP_BOR)
DEFINE_COMPARE(bitwise_xor, OP_BXOR)

/* Slots: NotImplemented when the other side is not a tensor or number (x == None is then
 * False through Python's identity fallback, as for torch). */
static PyObject *slot_compare(PyObject *a, PyObject *b, int op)
{
    ew_operand x, y;
    PyObject *res = NULL;
    int rc = cddp_ew_operand(a, &x);
    if (rc > 0) {
        rc = cddp_ew_operand(b, &y);
        if (rc > 0) {
            res = (PyObject *)compare(&x, &y, op);
            cddp_ew_operand_clear(&y);
        }
        cddp_ew_operand_clear(&x);
    }
    if (rc == 0)
        Py_RETURN_NOTIMPLEMENTED;
    return res;
}

/* A real tensor == / != a Python complex, elementwise as torch: equal exactly where the
 * element equals the real part and the imaginary part is 0 (a nonzero one: all False for ==,
 * all True for !=, by and-ing / or-ing the real comparison with a constant). */
static PyObject *compare_complex(PyObject *a, PyObject *b, int op)
{
    Py_complex z = PyComplex_AsCComplex(b);
    PyObject *re, *res;
    if (!(re = PyFloat_FromDouble(z.real)))
        return NULL;
    res = slot_compare(a, re, op);
    Py_DECREF(re);
    if (res && z.imag != 0.0)
        Py_SETREF(res, slot_compare(res, op == OP_EQ ? Py_False : Py_True,
                                    op == OP_EQ ? OP_LAND : OP_LOR));
    return res;
}

PyObject *cddp_richcompare(PyObject *a, PyObject *b, int op)
{
    static const int map[] = {[Py_LT] = OP_LT, [Py_LE] = OP_LE, [Py_EQ] = OP_EQ,
                              [Py_NE] = OP_NE, [Py_GT] = OP_GT, [Py_GE] = OP_GE};
    if (op < Py_LT || op > Py_GE)
        Py_RETURN_NOTIMPLEMENTED;
    if ((op == Py_EQ || op == Py_NE) && PyComplex_Check(b) && cddp_tensor_check(a))
        return compare_complex(a, b, map[op]);
    return slot_compare(a, b, map[op]);
}

PyObject *cddp_nb_and(PyObject *a, PyObject *b) { return slot_compare(a, b, OP_BAND); }
PyObject *cddp_nb_or(PyObject *a, PyObject *b) { return slot_compare(a, b, OP_BOR); }
PyObject *cddp_nb_xor(PyObject *a, PyObject *b) { return slot_compare(a, b, OP_BXOR); }
