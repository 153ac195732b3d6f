/* blas.c — STUB (to be implemented): locate NumPy's OpenBLAS (or a system BLAS) at import. */
#include "cddp.h"

int cddp_blas_init(PyObject *m) { return 0; }
