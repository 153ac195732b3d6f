/* amp/amp.h — mixed precision: the thread-local autocast state that op entry points read, and
 * the helpers that cast an op's tensor arguments by torch's CPU autocast policy
 * (torch.autocast / torch.amp.autocast, aten/src/ATen/autocast_mode.cpp).
 *
 * Order: autocast.c (state, weight-cast cache, argument casting, Python state functions);
 * grad_scaler.c (GradScaler's C kernels) is independent of it.
 *
 * How an op joins autocast: its Python entry point (the thin py_x / t_x wrapper) starts with
 *     if (CDDP_AUTOCAST_ON())
 *         return cddp_autocast_fastcall(CDDP_AMP_LOWER, x_common, self, args, nargs, kw);
 * The gate is one thread-local load when autocast is off; when on, the helper casts every
 * eligible Tensor in self/args/kwargs and calls x_common (never the gated wrapper) with them.
 */
#ifndef CDDP_AMP_H
#define CDDP_AMP_H

#include "core/cddp.h"

typedef enum {
    CDDP_AMP_LOWER = 0,    /* torch's lower_precision_fp: float32 -> the autocast dtype */
    CDDP_AMP_FP32 = 1,     /* torch's fp32: float16/bfloat16 -> float32 */
} cddp_amp_policy;

/* Per thread, as torch's: slot 0 = "cpu", slot 1 = "cuda" (no GPU: cuda autocast regions run
 * on the CPU, so either slot enabled turns casting on; the cuda slot's dtype wins). */
typedef struct {
    int on;                  /* enabled[0] || enabled[1]: the one word the gate reads */
    int enabled[2];
    cddp_dtype dtype[2];     /* defaults: bfloat16 (cpu), float16 (cuda), as torch */
    int cache_enabled;
    int nesting;
    PyObject *cache;         /* dict id(src) -> (src, cast) for leaf float32 weights; or NULL */
} cddp_autocast_tls;

extern _Thread_local cddp_autocast_tls cddp_autocast_state;

#define CDDP_AUTOCAST_ON() (cddp_autocast_state.on)

typedef PyObject *(*cddp_fastkw_fn)(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames);
typedef PyObject *(*cddp_varargs_fn)(PyObject *m, PyObject *args);

/* Contract: calls fn with self and every positional/keyword Tensor argument cast by `policy`
 * (non-Tensors, integer, bool and float64 tensors pass unchanged, as torch's is_eligible);
 * the casts carry autograd history (ToCopyBackward0). Returns fn's result. */
PyObject *cddp_autocast_fastcall(cddp_amp_policy policy, cddp_fastkw_fn fn, PyObject *self,
                                 PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* The same for a METH_VARARGS function taking a tuple. */
PyObject *cddp_autocast_varargs(cddp_amp_policy policy, cddp_varargs_fn fn, PyObject *m,
                                PyObject *args);

#endif
