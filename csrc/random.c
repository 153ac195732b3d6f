/* random.c — STUB (to be implemented): Generator (torch's mt19937), manual_seed. */
#include "cddp.h"

int cddp_random_init(PyObject *m, cddp_state_t *st) { return 0; }
