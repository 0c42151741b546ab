/* flashgdn — C ABI over DLPack.
 *
 * Every op of flashgdn.hpp has a params struct of `const DLTensor*` (NULL = absent) and scalars, an
 * initializer that fills the defaults, a workspace query where the op needs scratch, and an entry point.
 * Entry points return FLASHGDN_OK or an error code; flashgdn_copy_last_error() then copies the message into a
 * caller buffer (flashgdn_last_error() points at it: thread local, valid until the next call on this thread).
 * No C++ exception crosses this boundary.
 * A DLTensor with strides == NULL is compact row-major. DLPack strides are in elements.
 * `stream` is a cudaStream_t (NULL: the legacy default stream); ignored for CPU tensors.
 */
#ifndef FLASHGDN_H_
#define FLASHGDN_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#include "flashgdn/flashgdn_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FLASHGDN_API __declspec(dllexport)
#else
#define FLASHGDN_API __attribute__((visibility("default")))
#endif

typedef enum {
  FLASHGDN_OK = 0,
  FLASHGDN_ERROR_INVALID_ARGUMENT = 1,
  FLASHGDN_ERROR_UNSUPPORTED = 2,
  FLASHGDN_ERROR_CUDA = 3,
  FLASHGDN_ERROR_INTERNAL = 4,
  FLASHGDN_ERROR_OUT_OF_MEMORY = 5 /* a host allocation failed (every size is bounded by validation first) */
} flashgdn_status;

typedef enum { FLASHGDN_STATE_K_MAJOR = 0, FLASHGDN_STATE_V_MAJOR = 1 } flashgdn_state_layout;
typedef enum { FLASHGDN_CPU_RECURRENT = 0, FLASHGDN_CPU_CHUNKED = 1 } flashgdn_cpu_algo;
/* Kernel overrides of the CUDA recurrent op (flashgdn::RecurrentKernel in flashgdn.hpp says what each takes). */
typedef enum {
  FLASHGDN_RECURRENT_AUTO = 0,
  FLASHGDN_RECURRENT_PERSISTENT = 1,
  FLASHGDN_RECURRENT_DIRECT = 2,
  FLASHGDN_RECURRENT_DIRECT_PIPE = 3,
  FLASHGDN_RECURRENT_WY = 4,
  FLASHGDN_RECURRENT_WY_MMA = 5
} flashgdn_recurrent_kernel;

/* The fields of every options and params struct are expanded from the op table, flashgdn_ops.h, where each one
 * is declared once with its C type, default (the _params_init functions set it), shape and notes ("may be null":
 * NULL is an absent tensor). The C++ structs of flashgdn.hpp come from the same table, field for field. */
#define FLASHGDN_C_TENSOR_FIELD(name, role, dtypes, layout, doc) const DLTensor* name;
#define FLASHGDN_C_SCALAR_FIELD(type, c_type, name, init, doc) c_type name;

typedef struct {
  FLASHGDN_EXEC_OPTIONS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_exec_options;

typedef struct {
  FLASHGDN_GATE_OPTIONS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_gate_options;

typedef struct {
  FLASHGDN_CHUNK_FWD_TENSORS(FLASHGDN_C_TENSOR_FIELD)
  FLASHGDN_CHUNK_FWD_SCALARS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_chunk_fwd_params;

typedef struct {
  FLASHGDN_CHUNK_BWD_TENSORS(FLASHGDN_C_TENSOR_FIELD)
  FLASHGDN_CHUNK_BWD_SCALARS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_chunk_bwd_params;

typedef struct {
  FLASHGDN_GATING_TENSORS(FLASHGDN_C_TENSOR_FIELD)
  FLASHGDN_GATING_SCALARS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_gating_params;

typedef struct {
  FLASHGDN_RECURRENT_TENSORS(FLASHGDN_C_TENSOR_FIELD)
  FLASHGDN_RECURRENT_SCALARS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_recurrent_params;

typedef struct {
  FLASHGDN_RECURRENT_COMMIT_TENSORS(FLASHGDN_C_TENSOR_FIELD)
  FLASHGDN_RECURRENT_COMMIT_SCALARS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_recurrent_commit_params;

/* The GDN mixer decode step in one launch (flashgdn.hpp, MixerDecodeParams, says exactly what it computes). */
typedef struct {
  FLASHGDN_MIXER_DECODE_TENSORS(FLASHGDN_C_TENSOR_FIELD)
  FLASHGDN_MIXER_DECODE_SCALARS(FLASHGDN_C_SCALAR_FIELD)
} flashgdn_mixer_decode_params;

#undef FLASHGDN_C_TENSOR_FIELD
#undef FLASHGDN_C_SCALAR_FIELD

/* Defaults: every tensor NULL, scale 0 (K^-1/2), softplus 1 / 20, chunk 64, commit 1, norm_eps 1e-6. */
FLASHGDN_API void flashgdn_chunk_fwd_params_init(flashgdn_chunk_fwd_params* p);
FLASHGDN_API void flashgdn_chunk_bwd_params_init(flashgdn_chunk_bwd_params* p);
FLASHGDN_API void flashgdn_gating_params_init(flashgdn_gating_params* p);
FLASHGDN_API void flashgdn_recurrent_params_init(flashgdn_recurrent_params* p);
FLASHGDN_API void flashgdn_recurrent_commit_params_init(flashgdn_recurrent_commit_params* p);
FLASHGDN_API void flashgdn_mixer_decode_params_init(flashgdn_mixer_decode_params* p);

FLASHGDN_API int flashgdn_chunk_fwd_workspace_size(const flashgdn_chunk_fwd_params* p, size_t* bytes);
FLASHGDN_API int flashgdn_chunk_fwd(const flashgdn_chunk_fwd_params* p, void* workspace, size_t workspace_bytes,
                                    void* stream);
FLASHGDN_API int flashgdn_chunk_bwd_workspace_size(const flashgdn_chunk_bwd_params* p, size_t* bytes);
FLASHGDN_API int flashgdn_chunk_bwd(const flashgdn_chunk_bwd_params* p, void* workspace, size_t workspace_bytes,
                                    void* stream);
FLASHGDN_API int flashgdn_gating(const flashgdn_gating_params* p, void* stream);
FLASHGDN_API int flashgdn_recurrent_workspace_size(const flashgdn_recurrent_params* p, size_t* bytes);
FLASHGDN_API int flashgdn_recurrent(const flashgdn_recurrent_params* p, void* workspace, size_t workspace_bytes,
                                    void* stream);
FLASHGDN_API int flashgdn_recurrent_commit(const flashgdn_recurrent_commit_params* p, void* stream);
FLASHGDN_API int flashgdn_mixer_decode(const flashgdn_mixer_decode_params* p, void* stream);

/* The message of the last failed call on this thread ("" after a success). The pointer is valid only until
 * the next flashgdn call on this thread, which may rewrite the message: do not pass it in the same argument
 * list as that call, e.g. printf("%d %s", flashgdn_chunk_fwd(...), flashgdn_last_error()), whose evaluation
 * order C leaves open. flashgdn_copy_last_error() has no such trap. */
FLASHGDN_API const char* flashgdn_last_error(void);
/* Copies the message of the last failed call on this thread ("" after a success) into buf, with snprintf's
 * contract: writes at most size - 1 characters and a terminating NUL (nothing when size == 0, where buf may be
 * NULL), and returns the message's full length, so a return value >= size means it was truncated. The copy
 * belongs to the caller and outlives later calls:
 *   char msg[512];
 *   if (flashgdn_chunk_fwd(&p, ws, ws_bytes, stream) != FLASHGDN_OK) {
 *     flashgdn_copy_last_error(msg, sizeof msg);
 *     ...
 *   }
 */
FLASHGDN_API size_t flashgdn_copy_last_error(char* buf, size_t size);
FLASHGDN_API const char* flashgdn_version(void);
FLASHGDN_API int flashgdn_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHGDN_H_ */
