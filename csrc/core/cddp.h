/* core/cddp.h — the shared vocabulary of the C core: dtypes, storage, the Tensor and autograd Node
 * objects, and the small API every op file builds on.
 *
 * Mirrors: torch.Tensor (strided view over a refcounted storage), torch.autograd.graph.Node.
 *
 *   class Tensor:                       # C heap type, cddp._C.Tensor
 *       storage: Storage                # data pointer + nbytes + device, shared by views
 *       offset: int                     # in elements, into storage
 *       shape, strides: tuple[int]      # strides in elements (may be 0 for expanded dims)
 *       dtype: float32|float64|int64|int32|bool|float16|bfloat16|uint8|int8|int16
 *       requires_grad, grad, grad_fn, _version
 *
 * Dimension legend used in comments: N batch, C channels/classes, (M,K)@(K,N) matmul.
 *
 * Conventions (STYLE.md): functions return a new reference or NULL / 0 or -1 with a Python
 * exception set; one `fail:` label per function; no exit()/abort() on any path.
 */
#ifndef CDDP_H
#define CDDP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>

#define CDDP_MAX_DIMS 12
#define CDDP_ALIGN 64
/* loops over more elements than this release the GIL (pure C inside) */
#define CDDP_GIL_FREE_ELEMS (1 << 16)

/* ---- dtypes --------------------------------------------------------------------------- */

/* The first five are the "compute" dtypes every kernel table is written for. The five after
 * them are storage dtypes: an op on them reads its operands widened to cddp_kdt(d) (float16
 * and bfloat16 -> float32, uint8/int8/int16 -> int32), runs the compute dtype's kernel and
 * narrows the result once (rounding to nearest even / wrapping), as torch's CPU kernels do
 * through opmath types. common/half.h holds the bit conversions. */
typedef enum {
    CDDP_FLOAT32 = 0,
    CDDP_FLOAT64 = 1,
    CDDP_INT64 = 2,
    CDDP_INT32 = 3,
    CDDP_BOOL = 4,
    CDDP_FLOAT16 = 5,
    CDDP_BFLOAT16 = 6,
    CDDP_UINT8 = 7,
    CDDP_INT8 = 8,
    CDDP_INT16 = 9,
    CDDP_NDTYPES = 10
} cddp_dtype;
#define CDDP_NKDTYPES 5                  /* compute dtypes: float32 .. bool */

extern const size_t cddp_dtype_size[CDDP_NDTYPES];
extern const char *const cddp_dtype_name[CDDP_NDTYPES];  /* "float32", ... */
/* torch's ScalarType names for messages: "Float", "Half", "BFloat16", "Byte", "Char", ... */
extern const char *const cddp_dtype_torch_name[CDDP_NDTYPES];
/* torch's legacy tensor type names: "FloatTensor", "HalfTensor", "ByteTensor", ... */
extern const char *const cddp_dtype_legacy_name[CDDP_NDTYPES];
static inline int cddp_is_floating(cddp_dtype d)
{
    return d == CDDP_FLOAT32 || d == CDDP_FLOAT64 || d == CDDP_FLOAT16 || d == CDDP_BFLOAT16;
}
/* float16 / bfloat16 (torch's isReducedFloatingType) */
static inline int cddp_is_reduced(cddp_dtype d) { return d == CDDP_FLOAT16 || d == CDDP_BFLOAT16; }
/* a storage dtype computed in a wider one (see the enum) */
static inline int cddp_is_narrow(cddp_dtype d) { return d >= CDDP_FLOAT16; }
/* the dtype kernels compute d in: itself for the five compute dtypes */
static inline cddp_dtype cddp_kdt(cddp_dtype d)
{
    return d < CDDP_FLOAT16 ? d : d <= CDDP_BFLOAT16 ? CDDP_FLOAT32 : CDDP_INT32;
}
/* integer dtypes, bool excluded */
static inline int cddp_is_integral(cddp_dtype d)
{
    return d == CDDP_INT64 || d == CDDP_INT32 || d == CDDP_UINT8 || d == CDDP_INT8 ||
           d == CDDP_INT16;
}

/* the C++ type names torch's typeid messages print: "long int", "unsigned char", "c10::Half" */
extern const char *const cddp_dtype_c_name[CDDP_NDTYPES];
/* torch's C++ type names in "value cannot be converted to type uint8_t without overflow" */
extern const char *const cddp_dtype_cpp_name[CDDP_NDTYPES];
/* c10's checked_convert for the five storage dtypes: 1 when a scalar (the double d when
 * is_float, else the integer l) overflows dt. Integers may wrap into uint8 from below (-255
 * is 1, as torch allows); floating values must lie in [lowest, max] of an integer dtype (NaN
 * does not); inf and NaN fit float16/bfloat16. 0 for the compute dtypes (checked elsewhere). */
int cddp_scalar_overflows(cddp_dtype dt, int is_float, double d, int64_t l);
/* The largest finite value of a floating dtype (float32: FLT_MAX, float16: 65504, ...). */
double cddp_float_max(cddp_dtype dt);

/* torch's promote_types over all ten dtypes (c10's promoteTypes table): uint8 + int8 ->
 * int16, an integer + float16 -> float16, float16 + bfloat16 -> float32, bool loses to all.
 * (Scalars participate differently; see cddp_ew_result_type.) */
cddp_dtype cddp_promote(cddp_dtype a, cddp_dtype b);

#include "common/half.h"

/* Element p of dtype dt as a double (every dtype; float16/bfloat16 exactly). */
static inline double cddp_load_double(cddp_dtype dt, const void *p)
{
    switch (dt) {
    case CDDP_FLOAT32: return *(const float *)p;
    case CDDP_FLOAT64: return *(const double *)p;
    case CDDP_INT64: return (double)*(const int64_t *)p;
    case CDDP_INT32: return *(const int32_t *)p;
    case CDDP_BOOL: return *(const uint8_t *)p;
    case CDDP_FLOAT16: return cddp_f16_to_f32(*(const uint16_t *)p);
    case CDDP_BFLOAT16: return cddp_bf16_to_f32(*(const uint16_t *)p);
    case CDDP_UINT8: return *(const uint8_t *)p;
    case CDDP_INT8: return *(const int8_t *)p;
    case CDDP_INT16: return *(const int16_t *)p;
    default: return 0;
    }
}
/* Store v into p as dtype dt with torch's static_cast rules: double -> float -> float16 /
 * bfloat16 (round to nearest even, twice as c10 does), integers truncated toward zero and
 * wrapped to their width through int32 as x86 does (out of range: defined here, undefined in
 * torch), bool = v != 0. */
static inline void cddp_store_double(cddp_dtype dt, void *p, double v)
{
    switch (dt) {
    case CDDP_FLOAT32: *(float *)p = (float)v; break;
    case CDDP_FLOAT64: *(double *)p = v; break;
    case CDDP_INT64: *(int64_t *)p = cddp_double_to_i64(v); break;
    case CDDP_INT32: *(int32_t *)p = cddp_double_to_i32(v); break;
    case CDDP_BOOL: *(uint8_t *)p = v != 0; break;
    case CDDP_FLOAT16: *(uint16_t *)p = cddp_f32_to_f16((float)v); break;
    case CDDP_BFLOAT16: *(uint16_t *)p = cddp_f32_to_bf16((float)v); break;
    case CDDP_UINT8: *(uint8_t *)p = (uint8_t)(uint32_t)cddp_double_to_i32(v); break;
    case CDDP_INT8: *(int8_t *)p = (int8_t)(uint8_t)(uint32_t)cddp_double_to_i32(v); break;
    case CDDP_INT16: *(int16_t *)p = (int16_t)(uint16_t)(uint32_t)cddp_double_to_i32(v); break;
    default: break;
    }
}
/* v rounded to float16 / bfloat16 and back (v itself for any other dt): the value a float
 * result has once stored in dt. */
static inline float cddp_round_to(cddp_dtype dt, float v)
{
    if (dt == CDDP_FLOAT16)
        return cddp_f16_to_f32(cddp_f32_to_f16(v));
    if (dt == CDDP_BFLOAT16)
        return cddp_bf16_to_f32(cddp_f32_to_bf16(v));
    return v;
}

/* Store an integer into p as dtype dt: integers wrap to their width, floats round from float
 * (torch's int64 -> float -> float16 route), bool = v != 0. */
static inline void cddp_store_int64(cddp_dtype dt, void *p, int64_t v)
{
    switch (dt) {
    case CDDP_INT64: *(int64_t *)p = v; break;
    case CDDP_INT32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
    case CDDP_UINT8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
    case CDDP_INT8: *(int8_t *)p = (int8_t)(uint8_t)(uint64_t)v; break;
    case CDDP_INT16: *(int16_t *)p = (int16_t)(uint16_t)(uint64_t)v; break;
    case CDDP_BOOL: *(uint8_t *)p = v != 0; break;
    case CDDP_FLOAT64: *(double *)p = (double)v; break;
    default: cddp_store_double(dt, p, (double)(float)v); break;
    }
}

/* Blocked conversions (core/narrow.c), strides in bytes: widen a storage-dtype run into its
 * compute dtype (contiguous dst), narrow a contiguous compute-dtype run back (rounding to
 * nearest even / keeping the low bits), and convert between any two dtypes. */
void cddp_widen(cddp_dtype dt, void *dst, const char *src, int64_t sstride, int64_t n);
void cddp_narrow(cddp_dtype dt, char *dst, int64_t dstride, const void *src, int64_t n);
void cddp_convert(cddp_dtype ddt, char *dst, int64_t dstride, cddp_dtype sdt, const char *src,
                  int64_t sstride, int64_t n);

/* ---- storage -------------------------------------------------------------------------- */

/* A refcounted block of bytes. `device` is -1 for CPU, >= 0 for a CUDA ordinal: a CUDA
 * allocation is a storage with another `release`, so tensors need no redesign for GPUs.
 * CDDP_DEVICE_META marks torch's "meta" device: a tensor with a shape and dtype and no values.
 * Its bytes are a lazily-zero address-space reservation (cddp_storage_new_meta), so a kernel
 * that reads one anyway stays in bounds; factories, fills, copies and conversions check for it
 * and never touch them.
 * `version` is the in-place modification counter shared by every view (torch's _version). */
typedef struct cddp_storage {
    Py_ssize_t refcnt;
    void *data;
    size_t nbytes;
    int device;
    int64_t version;
    void *owner;                                  /* foreign owner (e.g. a NumPy array) */
    int inline_block;                             /* struct and data share one allocation */
    void (*release)(struct cddp_storage *self);   /* frees data / drops owner; NULL = free() */
} cddp_storage;

#define CDDP_DEVICE_META (-2)

/* New CPU storage of nbytes (64-byte aligned; zeroed if zero != 0). NULL + MemoryError. */
cddp_storage *cddp_storage_new(size_t nbytes, int zero);
/* New meta storage of nbytes (address space only: MAP_NORESERVE, never written by cddp).
 * NULL + MemoryError. */
cddp_storage *cddp_storage_new_meta(size_t nbytes);
/* Storage over memory owned by a Python object (kept alive by a reference). */
cddp_storage *cddp_storage_from_pyobject(void *data, size_t nbytes, PyObject *owner);
static inline void cddp_storage_incref(cddp_storage *s) { s->refcnt++; }
void cddp_storage_decref(cddp_storage *s);
/* Shared memory (Tensor.share_memory_): move s's bytes, in place, into a memfd mapped
 * MAP_SHARED (data pointer changes; the old memory is kept until s dies, for stale NumPy
 * views). No-op when already shared. 0, or -1 with OSError/RuntimeError. */
int cddp_storage_share(cddp_storage *s);
/* The memfd of a shared storage (owned by it: dup before handing it on), or -1. */
int cddp_storage_shared_fd(const cddp_storage *s);
/* A storage over nbytes of the shared memory fd refers to. On success the storage owns fd
 * (closed when it dies); on failure (NULL + exception) the caller still does. */
cddp_storage *cddp_storage_from_fd(int fd, size_t nbytes);

#include "common/arena.h"      /* the shared arena: large blocks peers on this host can map */

/* ---- Tensor --------------------------------------------------------------------------- */

struct NodeObject;

typedef struct TensorObject {
    PyObject_HEAD
    cddp_storage *storage;
    int64_t offset;                      /* elements */
    int ndim;
    cddp_dtype dtype;
    int64_t shape[CDDP_MAX_DIMS];
    int64_t strides[CDDP_MAX_DIMS];      /* elements */
    char requires_grad;                  /* leaf flag; non-leaves have grad_fn != NULL */
    char retains_grad;
    char view_nograd;                    /* a view made with grad mode off (autograd/view.c) */
    PyObject *grad;                      /* Tensor or NULL */
    struct NodeObject *grad_fn;          /* NULL for leaves */
    int output_nr;                       /* which output of grad_fn this is */
    struct NodeObject *grad_acc;         /* leaf: its AccumulateGrad node (borrowed; node owns us) */
    PyObject *hooks;                     /* list of callables or NULL (leaf hooks) */
    PyObject *post_acc_hooks;            /* list or NULL */
    PyObject *dict;                      /* instance __dict__ (Parameter, user attributes) */
    PyObject *weakreflist;
    Py_ssize_t exports;                  /* live buffer-protocol exports */
    struct TensorObject *view_base;      /* differentiable view: its root base (owned), else
                                            NULL (autograd/view.c) */
    int64_t view_version;                /* storage version its history was recorded at */
    struct cddp_vcounter *vc;            /* NULL: the storage's version counter, shared by
                                            every alias; else a counter of its own (a `.data`
                                            tensor and the views cut from it), as torch gives
                                            .data a fresh one (cddp_version) */
} TensorObject;

/* A version counter of its own (TensorObject.vc), shared by reference among the aliases that
 * inherit it (cddp_tensor_alias). */
typedef struct cddp_vcounter {
    Py_ssize_t refcnt;
    int64_t version;
} cddp_vcounter;

/* Module state: one interpreter, one module instance; kept behind cddp_state() so hot paths
 * do not walk the MRO to find it. */
typedef struct {
    PyTypeObject *tensor_type;
    PyTypeObject *node_type;
    PyTypeObject *function_type;         /* _FunctionBase: Node subtype of autograd.Function */
    PyTypeObject *dtype_type;
    PyTypeObject *generator_type;
    PyObject *dtypes[CDDP_NDTYPES];      /* cddp.float32 ... objects */
    PyObject *size_type;                 /* cddp.Size (tuple subclass), set from Python */
    PyObject *default_generator;
    PyObject *device_cpu;                /* cddp.device("cpu") factory result, set from Python */
    PyObject *device_factory;            /* cddp.device, set from Python */
    PyTypeObject *return_types[2];       /* cddp.return_types.max / .min (named tuples) */
    /* the distributed stack's Python types (distributed/python, distributed/ddp) */
    PyTypeObject *pg_type;               /* ProcessGroupCPU */
    PyTypeObject *work_type;             /* Work */
    PyTypeObject *reducer_type;          /* Reducer */
    PyTypeObject *store_server_type;     /* _StoreServer */
    PyTypeObject *store_client_type;     /* _StoreClient */
    PyTypeObject *out_function_type;     /* _OutFunction: torch's out= (ops/out_arg.c) */
    PyObject *dist_backend_error;        /* created by _pg_types(base): base is Python's */
    PyObject *dist_timeout_error;
    PyObject *store_exc[3];              /* timeout, network, store errors (_store_set_errors) */
    cddp_dtype default_dtype;
    int64_t node_seq;                    /* sequence numbers for autograd nodes */
    int64_t engine_epoch;
} cddp_state_t;

extern cddp_state_t *cddp_state_ptr;
static inline cddp_state_t *cddp_state(void) { return cddp_state_ptr; }

static inline int cddp_tensor_check(PyObject *o) {
    return PyObject_TypeCheck(o, cddp_state()->tensor_type);
}
static inline int cddp_is_meta(const TensorObject *t) {
    return t->storage->device == CDDP_DEVICE_META;
}
static inline char *cddp_data(const TensorObject *t) {
    return (char *)t->storage->data + t->offset * (int64_t)cddp_dtype_size[t->dtype];
}
int64_t cddp_numel(const TensorObject *t);
int cddp_is_contiguous(const TensorObject *t);
/* Whether two index tuples of the geometry (shape, strides >= 0) reach the same element
 * (expand, unfold, as_strided windows); an empty geometry does not. */
int cddp_self_overlapping(int nd, const int64_t *shape, const int64_t *st);
/* One past the last storage element a geometry (sizes and strides >= 0) addresses from
 * offset off (off itself when it has no element) into *end. -1 when that does not fit in
 * int64 (a forged stride must not wrap around into a small span), else 0. */
int cddp_span_end(int nd, const int64_t *shape, const int64_t *st, int64_t off,
                  int64_t *end);
void cddp_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* New contiguous tensor with fresh storage (uninitialized unless zero). */
TensorObject *cddp_tensor_new(cddp_dtype dt, int ndim, const int64_t *shape, int zero);

/* ---- layouts (core/layout.c) --------------------------------------------------------- */
/* Whether the geometry is non-overlapping and dense: its elements fill numel slots in some
 * order of its dims (torch's is_non_overlapping_and_dense; size-1 dims' strides ignored). */
int cddp_is_dense(int nd, const int64_t *shape, const int64_t *st);
/* Equal strides on every dim of size > 1 (the same memory order for the same shape). */
int cddp_same_strides(int nd, const int64_t *shape, const int64_t *a, const int64_t *b);
/* a has b's shape and memory order: element k of one flat walk is element k of the other. */
int cddp_same_layout(const TensorObject *a, const TensorObject *b);
/* Channels-last strides of a 4-D (NCHW) or 5-D (NCDHW) shape; -1 for other ranks. */
int cddp_channels_last_strides(int nd, const int64_t *shape, int64_t *st);
/* The order the dims of nops operands (broadcast strides st, 0 on broadcast dims) lie in
 * memory, innermost first (perm[0]): TensorIterator's reorder_dimensions. */
void cddp_layout_order(int nd, const int64_t *shape, int nops,
                       const int64_t (*st)[CDDP_MAX_DIMS], int *perm);
/* Strides for the new result (shape nd, shape) of an elementwise op over ops (NULL entries
 * are Python scalars; nops <= CDDP_ITER_MAX_OPS): torch's TensorIterator layout, so the
 * result is laid out as its inputs are (contiguous unless they are not). Always dense. */
void cddp_result_strides(int nd, const int64_t *shape, int nops, TensorObject *const *ops,
                         int64_t *out);
/* preserve_format: t's strides when t is dense, else a dense layout in t's dim order. */
void cddp_like_strides(const TensorObject *t, int64_t *out);
/* cddp_tensor_new (zero: 0 uninitialized, 1 zeroed, 2 meta) with the given strides, which
 * must describe a dense layout of shape (one of the functions above computed them). */
TensorObject *cddp_tensor_new_strided(cddp_dtype dt, int nd, const int64_t *shape,
                                      const int64_t *strides, int zero);
/* torch.memory_format objects (cddp/_compat.py): o (NULL or None: preserve_format) into *fmt;
 * -1 with TypeError for anything else. */
enum { CDDP_MF_PRESERVE, CDDP_MF_CONTIGUOUS, CDDP_MF_CHANNELS_LAST, CDDP_MF_CHANNELS_LAST_3D };
int cddp_parse_memory_format(PyObject *o, int *fmt);
/* Strides of a new tensor shaped as x in format fmt (preserve: cddp_like_strides); -1 with
 * torch's RuntimeError when a channels-last format meets the wrong rank. */
int cddp_format_strides(const TensorObject *x, int fmt, int64_t *st);
/* The format x's strides look like (torch's suggest_memory_format): channels_last(_3d) for a
 * 4-D (5-D) tensor strided that way, else contiguous_format. */
int cddp_suggest_memory_format(const TensorObject *x);
/* New contiguous meta tensor (no values: cddp_storage_new_meta). */
TensorObject *cddp_tensor_new_meta(cddp_dtype dt, int ndim, const int64_t *shape);
/* 0 unless t is a meta tensor; then -1 with NotImplementedError naming op: for the paths that
 * read values (item, tolist, numpy, the buffer protocol, pickling the bytes). */
int cddp_refuse_meta(const TensorObject *t, const char *op);
/* A view sharing base's storage; no autograd history (callers add it). NULL + RuntimeError
 * when a size is negative or the element count overflows (numel * 16 must fit in int64). */
TensorObject *cddp_tensor_alias(TensorObject *base, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset);
/* Over a NumPy array, zero-copy (owner keeps the array alive). TypeError/ValueError on
 * unsupported dtype, negative or non-multiple strides. */
TensorObject *cddp_tensor_from_numpy(PyObject *arr);
/* Contiguous version (new reference; self, increfed, when already contiguous). No autograd. */
TensorObject *cddp_tensor_contiguous_raw(TensorObject *t);
/* Guard for kernels that read float32/float64/int data only: 0 when t (may be NULL) is not a
 * storage dtype (float16 bfloat16 uint8 int8 int16); else TypeError naming op and the dtype,
 * so a kernel never reads a narrow element as a wide one. (Reduced floats reach such kernels
 * only through Python wrappers that compute them in float32: nn/functional.py.) */
int cddp_refuse_narrow(const TensorObject *t, const char *op);
/* Same values in dtype dt (new reference; self when dt matches). Contiguous when copied. */
TensorObject *cddp_tensor_cast_raw(TensorObject *t, cddp_dtype dt);
/* The same, consuming t (NULL passes through, for chaining after a call that may fail). */
TensorObject *cddp_tensor_cast_steal(TensorObject *t, cddp_dtype dt);
/* dst[...] = src broadcast to dst's shape, with dtype conversion. Bumps dst's version. A meta
 * dst takes nothing; a meta src gives its placeholder zeros (ops compute on those; the
 * user-facing copy_ refuses it as torch does). */
int cddp_copy_into(TensorObject *dst, TensorObject *src);
/* Contract: 0 when every element of t has its own memory; -1 with torch's RuntimeError when
 * a dim of size > 1 has stride 0 (expand: one location written several times) and t is not
 * empty. For the user-facing writes: in-place ops, copy_, out=. */
int cddp_check_writable(const TensorObject *t);
/* t takes `shape` (ndim dims) with contiguous strides at its offset, its storage grown (a
 * copy, zero-filled beyond the old bytes) when too small (core/resize.c). 0, or -1 with
 * RuntimeError: negative size, t requires grad, or a storage cddp may not replace. */
int cddp_tensor_resize(TensorObject *t, int ndim, const int64_t *shape);
/* torch's out=: writes the result res (consumed; NULL passes the error through) into out, a
 * Tensor or a tuple of them for a tuple result, with torch's checks (ops/out_arg.c); returns
 * out (new reference), res itself when out is None, or NULL with an exception. */
PyObject *cddp_out_finish(const char *name, PyObject *res, PyObject *out);
/* Complex numbers live in Python (cddp/_complex.py); the C entry points hand them over on
 * their failure paths only (ops/out_arg.c). cddp_is_complex_obj: o is a complex tensor or a
 * complex dtype (its class carries the marker). cddp_complex_call: cddp._complex.<fn>(
 * *args, **kwargs) with args the vectorcall arguments (kwnames may be NULL) and `first`,
 * when not NULL, prepended. New reference or NULL with an exception. */
int cddp_is_complex_obj(PyObject *o);
/* TypeError "fname(): argument 'argname' must be <what>, not <type>"; for a complex tensor it
 * says instead which forms take complex tensors (operators and methods). Returns -1. */
int cddp_arg_type_error(const char *fname, const char *argname, const char *what, PyObject *o);
PyObject *cddp_complex_call(const char *fn, PyObject *first, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames);
/* 0-dim tensor holding v. */
TensorObject *cddp_scalar_tensor(double v, cddp_dtype dt);
/* Read element i (C-order over the shape) of any tensor as double / int64. */
double cddp_get_double(const TensorObject *t, int64_t flat_index);
/* The version counter of t: what in-place writes through t bump and what saved-tensor checks
 * compare. Writes through a `.data` tensor (its own counter) leave the storage's counter, and
 * so every other alias's, untouched: torch's way past the version check. */
static inline int64_t *cddp_version(TensorObject *t)
{
    return t->vc ? &t->vc->version : &t->storage->version;
}
static inline void cddp_bump_version(TensorObject *t) { ++*cddp_version(t); }
/* Drop t's reference to its own counter (t->vc NULL afterwards). */
void cddp_vcounter_release(TensorObject *t);

/* Broadcasting: out = broadcast(a, b) shape (out may alias sa or sb); RuntimeError with
 * torch's text when the shapes do not broadcast. */
int cddp_broadcast_shapes(int na, const int64_t *sa, int nb, const int64_t *sb,
                          int *nout, int64_t *out);
/* Strides (elements) that view t as `shape` (t broadcastable to it; 0 on broadcast dims). */
int cddp_broadcast_strides(const TensorObject *t, int ndim, const int64_t *shape,
                           int64_t *strides);
/* Sum g over broadcast dims so it has `shape` (autograd of broadcasting). New ref. */
TensorObject *cddp_sum_to(TensorObject *g, int ndim, const int64_t *shape);
/* dst += src (same shape, same floating dtype; src may be any layout). Bumps dst's version. */
int cddp_accumulate_into(TensorObject *dst, TensorObject *src);

/* Python-facing conversions */
int cddp_dtype_from_py(PyObject *o, cddp_dtype *out);   /* cddp.float32 / NumPy dtype / type */
PyObject *cddp_dtype_to_py(cddp_dtype d);               /* borrowed */
PyObject *cddp_size_from(int ndim, const int64_t *shape);  /* new cddp.Size */
/* Parse a shape given as (*ints) or (seq,) or Size; at most CDDP_MAX_DIMS. -1 on error. */
int cddp_parse_shape(PyObject *args, int *ndim, int64_t *shape);
/* A Python scalar (bool/int/float) or 0-dim tensor as an operand: kind 0 bool, 1 int, 2 float. */
int cddp_is_py_scalar(PyObject *o);

/* ---- strided iteration ---------------------------------------------------------------- */

/* Visits every element of up to 4 same-shape operands (byte strides, dims coalesced) as 1-D
 * runs: fn(ptrs, strides, n, ctx). Inner strides of a contiguous run equal the item sizes,
 * so kernels can test for and take a tight loop. */
#define CDDP_ITER_MAX_OPS 4
typedef void (*cddp_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);
void cddp_iterate(int nops, int ndim, const int64_t *shape, char **ptrs,
                  const int64_t (*byte_strides)[CDDP_MAX_DIMS], cddp_loop_fn fn, void *ctx);
/* The same, visiting elements in operand 0's memory order (its dims sorted as
 * cddp_layout_order sorts them, torch's TensorIterator order for one operand): order-free
 * kernels write a permuted output front to back with its dims coalesced, and random fills
 * draw in the order torch's do. */
void cddp_iterate_ordered(int nops, int ndim, const int64_t *shape, char **ptrs,
                          const int64_t (*byte_strides)[CDDP_MAX_DIMS], cddp_loop_fn fn,
                          void *ctx);

/* ---- autograd ------------------------------------------------------------------------- */

typedef struct NodeObject NodeObject;

/* Computes grad_inputs[i] (new references, or NULL for "no gradient") from grad_outputs
 * (borrowed; grad_outputs[k] may be NULL when output k received none: treat as zeros).
 * Runs with grad mode off. 0 ok, -1 with exception set. */
typedef int (*cddp_backward_fn)(NodeObject *self, TensorObject **grad_outputs,
                                TensorObject **grad_inputs);

typedef struct {
    NodeObject *node;     /* owned; NULL when that input needs no gradient */
    int input_nr;
} cddp_edge;

#define CDDP_NODE_MAX_SAVED 4
/* outputs kept inline (C ops); cddp_node_set_n_out gives a node more (autograd.Function) */
#define CDDP_NODE_MAX_OUT 2

typedef struct {                      /* what a backward needs to know about an input */
    int ndim;
    cddp_dtype dtype;
    int64_t shape[CDDP_MAX_DIMS];
} cddp_meta;

struct NodeObject {
    PyObject_HEAD
    const char *name;                 /* "AddBackward0" */
    cddp_backward_fn backward;
    int64_t seq;                      /* creation order; the engine runs later nodes first */
    int n_next;
    cddp_edge *next;                  /* n_next entries: one per differentiable input */
    cddp_meta *meta;                  /* n_next entries */
    int n_saved;
    PyObject *saved[CDDP_NODE_MAX_SAVED];     /* Tensors or other objects */
    int64_t saved_version[CDDP_NODE_MAX_SAVED];
    char released;                    /* saved tensors freed after a non-retained backward */
    int n_out;
    double d[4];                      /* op scalars (alpha, exponent, min/max ...) */
    int64_t i[2 * CDDP_MAX_DIMS + 4]; /* op integers (dims, flags ...) */
    int64_t *ibuf;                    /* op integer array (cat sizes ...), PyMem_Free'd */
    PyObject *extra;                  /* op object (index tuple ...), owned */
    TensorObject *variable;           /* AccumulateGrad: the leaf (owned) */
    PyObject *pre_hooks;              /* dict output_nr -> list (Tensor.register_hook) */
    PyObject *retain;                 /* dict output_nr -> weakref of non-leaf retaining grad */
    PyObject *fn_hooks[2];            /* dicts handle id -> fn: the node's own pre-hooks
                                         (register_prehook) and hooks (register_hook) */
    PyObject *dict;
    PyObject *weakreflist;
    /* engine scratch, valid during one backward pass */
    int64_t epoch;
    int64_t deps;
    TensorObject *inbuf[CDDP_NODE_MAX_OUT];
    TensorObject **inbuf_ext;         /* n_out > CDDP_NODE_MAX_OUT (Python Functions): n_out
                                         slots used instead of inbuf (PyMem; cddp_node_set_n_out) */
};

extern _Thread_local int cddp_grad_enabled;

/* Whether an op on these inputs must record history. */
static inline int cddp_needs_grad(const TensorObject *t) {
    return t->requires_grad || t->grad_fn != NULL ||
           (t->view_base && !t->view_nograd && t->view_version != t->storage->version &&
            (t->view_base->requires_grad || t->view_base->grad_fn != NULL));
}
/* New node with n_next edges/metas (zeroed). */
NodeObject *cddp_node_new(const char *name, cddp_backward_fn fn, int n_next);
/* Wire edge i to `input`'s gradient sink (its grad_fn, or its AccumulateGrad if it is a leaf
 * that requires grad), and fill meta[i] from input. No-op edge when input needs no grad. */
int cddp_node_set_input(NodeObject *n, int i, TensorObject *input);
/* Keep t for backward (records its version for the in-place check). */
int cddp_node_save(NodeObject *n, int slot, TensorObject *t);
/* Keep an output of this node for backward: stored as a history-free alias (same storage and
 * version counter) so the node and its output do not form a reference cycle. */
int cddp_node_save_output(NodeObject *n, int slot, TensorObject *out);
/* Fetch saved slot, checking version and released state (torch's errors). Borrowed. NULL
 * without running anything while an exception is pending (an earlier slot's unpack failed). */
TensorObject *cddp_node_saved(NodeObject *n, int slot);
/* out gets history (grad_fn = n, output_nr) — steals nothing, increfs n. */
void cddp_set_history(TensorObject *out, NodeObject *n, int output_nr);

/* Views (autograd/view.c). cddp_view_mark: out, a view op's result sharing in's storage,
 * becomes a view of in's root base (unless either overlaps itself); made with grad mode off
 * it only guards against in-place ops under grad mode. cddp_view_sync: a view whose storage was written in place since its history was
 * recorded gets its history rebuilt from the base's (call before reading t->grad_fn; 0 or -1).
 * cddp_check_inplace: before an in-place op on t: syncs t, then torch's errors for a leaf
 * that requires grad, a view of one, and a view made with grad mode off whose base needs
 * grad (grad mode on). cddp_set_inplace_history: an
 * in-place op on x recorded node n: x gets it as history and, when x is a view, its base
 * gets a CopySlices node over it and x an AsStridedBackward0 node over the base (0 or -1). */
void cddp_view_mark(TensorObject *in, TensorObject *out);
int cddp_view_sync(TensorObject *t);
int cddp_check_inplace(TensorObject *t);
int cddp_set_inplace_history(TensorObject *x, NodeObject *n, int output_nr);

/* Convenience for the common case: if grad mode is on and any of the k inputs needs grad,
 * create a node with k edges wired to the inputs; else return NULL with no error.
 * *err is set to 1 on failure. */
NodeObject *cddp_maybe_node(const char *name, cddp_backward_fn fn, int k,
                            TensorObject **inputs, int *err);

/* Engine (autograd/engine.c): run backward from roots with seed grads (NULL -> ones,
 * scalar roots only). The node-building functions above are in autograd/node.c. */
int cddp_run_backward(int n, TensorObject **roots, TensorObject **grads, int retain_graph);
/* anomaly mode: 1 makes the engine raise on the first node whose gradient holds NaN */
extern int cddp_detect_anomaly;

/* Type slots implemented by the op files (core/tensor_type.c wires them into the Tensor type). */
PyObject *cddp_nb_add(PyObject *a, PyObject *b);          /* ops/elementwise/binary.c */
PyObject *cddp_nb_sub(PyObject *a, PyObject *b);
PyObject *cddp_nb_mul(PyObject *a, PyObject *b);
PyObject *cddp_nb_truediv(PyObject *a, PyObject *b);
PyObject *cddp_nb_floordiv(PyObject *a, PyObject *b);
PyObject *cddp_nb_remainder(PyObject *a, PyObject *b);
PyObject *cddp_nb_pow(PyObject *a, PyObject *b, PyObject *mod);  /* binary_pow.c */
PyObject *cddp_nb_neg(PyObject *a);                       /* unary.c */
PyObject *cddp_nb_abs(PyObject *a);
PyObject *cddp_nb_iadd(PyObject *a, PyObject *b);         /* binary.c */
PyObject *cddp_nb_isub(PyObject *a, PyObject *b);
PyObject *cddp_nb_imul(PyObject *a, PyObject *b);
PyObject *cddp_nb_itruediv(PyObject *a, PyObject *b);
PyObject *cddp_nb_and(PyObject *a, PyObject *b);          /* binary_compare.c */
PyObject *cddp_nb_or(PyObject *a, PyObject *b);
PyObject *cddp_nb_xor(PyObject *a, PyObject *b);
PyObject *cddp_nb_invert(PyObject *a);                    /* unary.c */
PyObject *cddp_richcompare(PyObject *a, PyObject *b, int op);  /* binary_compare.c */
PyObject *cddp_nb_matmul(PyObject *a, PyObject *b);       /* ops/linalg/linalg.c */
PyObject *cddp_mp_subscript(PyObject *self, PyObject *key);            /* ops/index/index.c */
int cddp_mp_ass_subscript(PyObject *self, PyObject *key, PyObject *value);
PyObject *cddp_tensor_iter(PyObject *self);                            /* ops/shape/slice.c */
PyObject *cddp_tensor_repr(PyObject *self);                            /* core/repr.c */

/* Cross-file helpers */
/* The no-GPU device policy: 0 for None/CPU specs, and for CUDA specs after one warning per
 * process (running on the CPU); -1 with RuntimeError for malformed specs, or for CUDA when
 * CDDP_STRICT_DEVICE=1. Accepts str, int, cddp.device, objects with .type/.index, Tensors. */
int cddp_device_fallback(PyObject *device_spec);                                     /* ops/shape/convert.c */
/* Tensor from arbitrary Python data (nested lists, scalars, NumPy arrays, tensors): copies. */
TensorObject *cddp_tensor_from_data(PyObject *data, int has_dtype, cddp_dtype dtype);  /* ops/creation/data.c */
/* 0-dim or 1-element tensor to Python number. */
PyObject *cddp_tensor_item(TensorObject *t);                                        /* ops/creation/creation.c */
/* torch.randperm(n, generator=g) bit for bit into out[n]; NULL/None = default generator. */
int cddp_randperm_fill(PyObject *generator_or_NULL, int64_t n, int64_t *out);        /* ops/random/random.c */

#endif
