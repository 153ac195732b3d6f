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
int cddp_function_type_init(PyObject *m, cddp_state_t *st);    /* autograd/function.c */
int cddp_tensor_type_init(PyObject *m, cddp_state_t *st, PyMethodDef *methods);  /* core/tensor_type.c */
int cddp_random_init(PyObject *m, cddp_state_t *st);           /* ops/random/random.c */
int cddp_blas_init(PyObject *m, cddp_state_t *st);             /* ops/linalg/blas.c */
int cddp_return_types_init(PyObject *m, cddp_state_t *st);     /* ops/reduce/minmax.c */
int cddp_store_types_init(PyObject *m, cddp_state_t *st);      /* distributed/python/py_store.c */
int cddp_pg_types_init(PyObject *m, cddp_state_t *st);         /* distributed/python/py_pg.c */
int cddp_reducer_init(PyObject *m, cddp_state_t *st);          /* distributed/ddp/reducer.c */
int cddp_out_arg_init(PyObject *m, cddp_state_t *st);          /* ops/out_arg.c */

/* ---- method tables: Tensor methods and module functions -------------------------------- */
extern PyMethodDef cddp_tensor_core_methods[];
extern PyMethodDef cddp_core_module_methods[];
extern PyMethodDef cddp_dtype_module_methods[];     /* core/dtype.c */
extern PyMethodDef cddp_autocast_module_methods[];  /* amp/autocast.c */
extern PyMethodDef cddp_grad_scaler_module_methods[];  /* amp/grad_scaler.c */
extern PyMethodDef cddp_autograd_tensor_methods[];
extern PyMethodDef cddp_autograd_module_methods[];
extern PyMethodDef cddp_function_module_methods[];  /* autograd/function.c */
extern PyMethodDef cddp_share_tensor_methods[];     /* core/share.c */
extern PyMethodDef cddp_resize_tensor_methods[];    /* core/resize.c */
extern PyMethodDef cddp_share_module_methods[];
extern PyMethodDef cddp_elementwise_tensor_methods[];
extern PyMethodDef cddp_elementwise_module_methods[];
extern PyMethodDef cddp_complex_module_methods[];  /* ops/elementwise/complex.c */
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
extern PyMethodDef cddp_fused_optim_module_methods[]; /* optim/fused.c */
extern PyMethodDef cddp_clip_module_methods[];      /* nn/clip.c */
extern PyMethodDef cddp_linear_module_methods[];    /* nn/linear.c */
extern PyMethodDef cddp_conv_module_methods[];      /* nn/conv.c */
extern PyMethodDef cddp_pool_module_methods[];      /* nn/pool.c */
extern PyMethodDef cddp_pad_module_methods[];       /* nn/pad.c */
extern PyMethodDef cddp_interpolate_module_methods[]; /* nn/interpolate.c */
extern PyMethodDef cddp_fold_module_methods[];      /* nn/fold.c */
extern PyMethodDef cddp_grid_sample_module_methods[]; /* nn/grid_sample.c */
extern PyMethodDef cddp_ctc_module_methods[];      /* nn/ctc.c */
extern PyMethodDef cddp_rnn_module_methods[];       /* nn/rnn/rnn.c */
extern PyMethodDef cddp_layer_norm_module_methods[];  /* nn/layer_norm.c */
extern PyMethodDef cddp_embedding_module_methods[];   /* nn/embedding.c */
extern PyMethodDef cddp_sdpa_module_methods[];        /* nn/sdpa.c */
extern PyMethodDef cddp_sampler_module_methods[];   /* data/sampler.c */
extern PyMethodDef cddp_batch_norm_module_methods[];  /* nn/norm/batch_norm.c */
extern PyMethodDef cddp_sync_bn_module_methods[];     /* nn/norm/sync_bn.c */
extern PyMethodDef cddp_group_norm_module_methods[];  /* nn/norm/group_norm.c */
extern PyMethodDef cddp_activation_module_methods[];  /* nn/activation.c */
extern PyMethodDef cddp_store_module_methods[];     /* distributed/python/py_store.c */
extern PyMethodDef cddp_pg_module_methods[];        /* distributed/python/py_pg.c */
/* the extra tensor ops of the "real models" work, one pair per file */
extern PyMethodDef cddp_tri_tensor_methods[];       /* ops/shape/tri.c */
extern PyMethodDef cddp_tri_module_methods[];
extern PyMethodDef cddp_strided_tensor_methods[];   /* ops/shape/strided.c */
extern PyMethodDef cddp_strided_module_methods[];
extern PyMethodDef cddp_repeat_tensor_methods[];    /* ops/shape/repeat.c */
extern PyMethodDef cddp_repeat_module_methods[];
extern PyMethodDef cddp_cumprod_tensor_methods[];   /* ops/reduce/cumprod.c */
extern PyMethodDef cddp_cumprod_module_methods[];
extern PyMethodDef cddp_nonzero_tensor_methods[];   /* ops/index/nonzero.c */
extern PyMethodDef cddp_nonzero_module_methods[];
extern PyMethodDef cddp_index_ops_tensor_methods[]; /* ops/index/index_ops.c */
extern PyMethodDef cddp_index_ops_module_methods[];
extern PyMethodDef cddp_addmm_family_tensor_methods[];  /* ops/linalg/addmm_family.c */
extern PyMethodDef cddp_addmm_family_module_methods[];
extern PyMethodDef cddp_einsum_module_methods[];    /* ops/linalg/einsum.c */
extern PyMethodDef cddp_unique_tensor_methods[];    /* ops/search/unique.c */
extern PyMethodDef cddp_unique_module_methods[];
extern PyMethodDef cddp_search_tensor_methods[];    /* ops/search/search.c */
extern PyMethodDef cddp_search_module_methods[];
extern PyMethodDef cddp_loss_extra_module_methods[];   /* nn/loss_extra.c */
extern PyMethodDef cddp_storage_module_methods[];   /* core/storage.c: the block cache */
extern PyMethodDef cddp_storage_view_module_methods[];  /* core/storage_view.c */

#endif
