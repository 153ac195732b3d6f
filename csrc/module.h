/* module.h — what each layer contributes to cddp._C: its init function (types, constants,
 * module attributes) and its method tables. module.c calls every init in order and
 * concatenates the tables. The files that define what is declared here include it too, so the
 * compiler checks each definition against its declaration; nothing else does.
 *
 * Contract of every init: creates its heap types with PyType_FromModuleAndSpec and keeps them
 * in the module state `st` (never in a static), adds its public names to `m`, returns 0, or -1
 * with an exception set. module.c's m_traverse/m_clear visit every state field they fill.
 */
#ifndef CDDP_MODULE_H
#define CDDP_MODULE_H

#include "core/cddp.h"

/* ---- init functions, in the order module.c runs them ---------------------------------- */
int cddp_dtype_init(PyObject *m, cddp_state_t *st);            /* core/dtype.c */
int cddp_node_type_init(PyObject *m, cddp_state_t *st);        /* autograd/node.c */
int cddp_tensor_type_init(PyObject *m, cddp_state_t *st, PyMethodDef *methods);  /* core/tensor_type.c */
int cddp_random_init(PyObject *m, cddp_state_t *st);           /* ops/random/random.c */
int cddp_blas_init(PyObject *m, cddp_state_t *st);             /* ops/linalg/blas.c */
int cddp_return_types_init(PyObject *m, cddp_state_t *st);     /* ops/reduce/minmax.c */
int cddp_store_types_init(PyObject *m, cddp_state_t *st);      /* distributed/python/py_store.c */
int cddp_pg_types_init(PyObject *m, cddp_state_t *st);         /* distributed/python/py_pg.c */
int cddp_reducer_init(PyObject *m, cddp_state_t *st);          /* distributed/ddp/reducer.c */

/* ---- method tables: Tensor methods and module functions -------------------------------- */
extern PyMethodDef cddp_tensor_core_methods[];
extern PyMethodDef cddp_core_module_methods[];
extern PyMethodDef cddp_dtype_module_methods[];     /* core/dtype.c */
extern PyMethodDef cddp_autocast_module_methods[];  /* amp/autocast.c */
extern PyMethodDef cddp_grad_scaler_module_methods[];  /* amp/grad_scaler.c */
extern PyMethodDef cddp_autograd_tensor_methods[];
extern PyMethodDef cddp_autograd_module_methods[];
extern PyMethodDef cddp_elementwise_tensor_methods[];
extern PyMethodDef cddp_elementwise_module_methods[];
extern PyMethodDef cddp_reduce_tensor_methods[];
extern PyMethodDef cddp_reduce_module_methods[];
extern PyMethodDef cddp_linalg_tensor_methods[];
extern PyMethodDef cddp_linalg_module_methods[];
extern PyMethodDef cddp_shape_tensor_methods[];
extern PyMethodDef cddp_shape_module_methods[];
extern PyMethodDef cddp_index_tensor_methods[];
extern PyMethodDef cddp_index_module_methods[];
extern PyMethodDef cddp_creation_tensor_methods[];
extern PyMethodDef cddp_creation_module_methods[];
extern PyMethodDef cddp_loss_module_methods[];      /* nn/loss.c */
extern PyMethodDef cddp_optim_module_methods[];     /* optim/optim.c */
extern PyMethodDef cddp_clip_module_methods[];      /* nn/clip.c */
extern PyMethodDef cddp_linear_module_methods[];    /* nn/linear.c */
extern PyMethodDef cddp_sampler_module_methods[];   /* data/sampler.c */
extern PyMethodDef cddp_store_module_methods[];     /* distributed/python/py_store.c */
extern PyMethodDef cddp_pg_module_methods[];        /* distributed/python/py_pg.c */

#endif
