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
  FLASHGDN_RECURRENT_WY = 4
} flashgdn_recurrent_kernel;

typedef struct {
  int32_t check_indices;      /* validate device-resident indices on the host (syncs) */
  int32_t cpu_fp64;           /* CPU backend computes in fp64 (the oracle) */
  int32_t cpu_algo;           /* flashgdn_cpu_algo */
  int32_t cpu_threads;        /* 0: all hardware threads */
  int32_t recurrent_kernel;   /* flashgdn_recurrent_kernel: CUDA recurrent kernel override, 0 = auto */
  int32_t chunk_fwd_segments; /* CUDA chunk_fwd segment split: 0 auto, 1 off, P > 1 about P per sequence */
} flashgdn_exec_options;

typedef struct {
  int32_t use_gate_in_kernel;
  int32_t use_beta_sigmoid_in_kernel;
  int32_t allow_neg_eigval;
  float softplus_beta;      /* default 1 */
  float softplus_threshold; /* default 20 */
} flashgdn_gate_options;

typedef struct {
  const DLTensor* q;                 /* [B, T, Hqk, K] */
  const DLTensor* k;                 /* [B, T, Hqk, K] */
  const DLTensor* v;                 /* [B, T, Hv, V] */
  const DLTensor* g;                 /* [B, T, Hv], may be NULL */
  const DLTensor* beta;              /* [B, T, Hv], may be NULL */
  const DLTensor* A_log;             /* [Hv], may be NULL */
  const DLTensor* dt_bias;           /* [Hv], may be NULL */
  const DLTensor* initial_state;     /* [N, Hv, K, V] / [N, Hv, V, K], may be NULL */
  const DLTensor* cu_seqlens;        /* [N + 1], may be NULL */
  const DLTensor* o;                 /* [B, T, Hv, V] out */
  const DLTensor* final_state;       /* [N, Hv, K, V] / [N, Hv, V, K] f32 out, may be NULL */
  const DLTensor* state_checkpoints; /* [N, C_max, Hv, K, V] / [.., V, K] f32 out, may be NULL */
  int64_t checkpoint_interval;
  float scale; /* 0: K^-1/2 */
  int32_t use_qk_l2norm_in_kernel;
  flashgdn_gate_options gate;
  int32_t state_layout; /* flashgdn_state_layout */
  int32_t chunk_size;   /* default 64 */
  flashgdn_exec_options exec;
} flashgdn_chunk_fwd_params;

typedef struct {
  const DLTensor *q, *k, *v, *g, *beta, *A_log, *dt_bias, *initial_state, *cu_seqlens;
  const DLTensor* d_o;      /* [B, T, Hv, V] */
  const DLTensor* d_ht;     /* [N, Hv, K, V] / [N, Hv, V, K], may be NULL */
  const DLTensor* dq;       /* [B, T, Hqk, K] out */
  const DLTensor* dk;       /* [B, T, Hqk, K] out */
  const DLTensor* dv;       /* [B, T, Hv, V] out */
  const DLTensor* dg;       /* [B, T, Hv] out, may be NULL */
  const DLTensor* dbeta;    /* [B, T, Hv] out, may be NULL */
  const DLTensor* dh0;      /* like initial_state, out, may be NULL */
  const DLTensor* dA_log;   /* [Hv] out, may be NULL */
  const DLTensor* ddt_bias; /* [Hv] out, may be NULL */
  float scale;
  int32_t use_qk_l2norm_in_kernel;
  flashgdn_gate_options gate;
  int32_t state_layout;
  int32_t chunk_size;
  flashgdn_exec_options exec;
} flashgdn_chunk_bwd_params;

typedef struct {
  const DLTensor* A_log;   /* [Hv] */
  const DLTensor* a;       /* [..., Hv] */
  const DLTensor* dt_bias; /* [Hv], may be NULL */
  const DLTensor* b;       /* [..., Hv], may be NULL */
  const DLTensor* g;       /* [..., Hv] out */
  const DLTensor* beta;    /* [..., Hv] out, may be NULL */
  flashgdn_gate_options gate;
  flashgdn_exec_options exec;
} flashgdn_gating_params;

typedef struct {
  const DLTensor* q;                    /* [B, T, Hqk, K] */
  const DLTensor* k;                    /* [B, T, Hqk, K] */
  const DLTensor* v;                    /* [B, T, Hv, V] */
  const DLTensor* g;                    /* [B, T, Hv], may be NULL */
  const DLTensor* beta;                 /* [B, T, Hv], may be NULL */
  const DLTensor* A_log;                /* [Hv], may be NULL */
  const DLTensor* dt_bias;              /* [Hv], may be NULL */
  const DLTensor* cu_seqlens;           /* [N + 1], may be NULL */
  const DLTensor* o;                    /* [B, T, Hv, V] out */
  const DLTensor* state_pool;           /* [slots, Hv, K, V] / [slots, Hv, V, K], may be NULL */
  const DLTensor* state_indices;        /* [N] or [N, T_max], may be NULL */
  const DLTensor* num_accepted_tokens;  /* [N], may be NULL */
  const DLTensor* intermediate_states;  /* [N_buf, T_buf, Hv, K, V] / [.., V, K], may be NULL */
  const DLTensor* intermediate_indices; /* [N], may be NULL */
  const DLTensor* initial_state;        /* [N, Hv, K, V] / [N, Hv, V, K], may be NULL */
  const DLTensor* final_state;          /* [N, Hv, K, V] / [N, Hv, V, K] out, may be NULL */
  int32_t commit;                       /* default 1 */
  int32_t null_slot_is_invalid;
  float scale;
  int32_t use_qk_l2norm_in_kernel;
  flashgdn_gate_options gate;
  int32_t state_layout;
  flashgdn_exec_options exec;
} flashgdn_recurrent_params;

typedef struct {
  const DLTensor* state_pool;           /* [slots, Hv, K, V] / [slots, Hv, V, K] */
  const DLTensor* state_indices;        /* [N] */
  const DLTensor* intermediate_states;  /* [N_buf, T_buf, Hv, K, V] / [.., V, K] */
  const DLTensor* intermediate_indices; /* [N], may be NULL */
  const DLTensor* num_accepted_tokens;  /* [N] */
  int32_t null_slot_is_invalid;
  flashgdn_exec_options exec;
} flashgdn_recurrent_commit_params;

/* The GDN mixer decode step in one launch (flashgdn.hpp, MixerDecodeParams, says exactly what it computes). */
typedef struct {
  const DLTensor* x;                         /* [B, T, C] mixed qkv before the conv, C = 2 Hqk K + Hv V */
  const DLTensor* z;                         /* [B, T, Hv, V] */
  const DLTensor* a;                         /* [B, T, Hv] raw */
  const DLTensor* b;                         /* [B, T, Hv] raw */
  const DLTensor* A_log;                     /* [Hv] */
  const DLTensor* dt_bias;                   /* [Hv], may be NULL */
  const DLTensor* conv_weight;               /* [C, Kc] */
  const DLTensor* conv_bias;                 /* [C], may be NULL */
  const DLTensor* norm_weight;               /* [V] */
  const DLTensor* cu_seqlens;                /* [N + 1], may be NULL */
  const DLTensor* conv_state;                /* [slots, C, L] in-out */
  const DLTensor* state_pool;                /* [slots, Hv, K, V] / [slots, Hv, V, K] in-out */
  const DLTensor* state_indices;             /* [N] or [N, T_max], may be NULL */
  const DLTensor* num_accepted_tokens;       /* [N], may be NULL */
  const DLTensor* intermediate_states;       /* [N_buf, T_buf, Hv, K, V] / [.., V, K] out, may be NULL */
  const DLTensor* intermediate_conv_windows; /* [N_buf, T_buf, C, Kc - 1] out, may be NULL */
  const DLTensor* intermediate_indices;      /* [N], may be NULL */
  const DLTensor* out;                       /* [B, T, Hv, V] out */
  int64_t num_k_heads;                       /* Hqk */
  int64_t head_k_dim;                        /* K */
  int32_t commit;                            /* default 1 */
  int32_t null_slot_is_invalid;
  float scale;    /* 0: K^-1/2 */
  float norm_eps; /* default 1e-6 */
  flashgdn_gate_options gate;
  int32_t state_layout;
  flashgdn_exec_options exec;
} flashgdn_mixer_decode_params;

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
