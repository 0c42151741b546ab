// Internal contract between the API layer (validation, dispatch) and the backends.
// validate_* checks a params struct completely and resolves its dimensions; a backend receives only
// validated params together with their Dims, so backends never re-check shapes.
#pragma once

#include <cstdint>

#include "common/error.hpp"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn {

// Dimensions shared by the token-major ops (chunk_fwd, chunk_bwd, recurrent).
struct SeqDims {
  int64_t B = 0;    // batch (1 when varlen)
  int64_t T = 0;    // tokens per batch entry (total tokens when varlen)
  int64_t N = 0;    // sequences: B, or cu_seqlens.size - 1
  int64_t Hqk = 0;  // q/k heads
  int64_t Hv = 0;   // value heads
  int64_t K = 0;    // key head dim
  int64_t V = 0;    // value head dim
  bool varlen = false;
  float scale = 0.f;                          // resolved (K^-1/2 when the params say 0)
  int64_t group() const { return Hv / Hqk; }  // value heads per q/k head
};

struct ChunkDims : SeqDims {
  int64_t num_checkpoints = 0;  // C_max of state_checkpoints (0 when absent)
};

struct RecurrentDims : SeqDims {
  int64_t slots = 0;  // pool rows (0 without a pool)
  int64_t T_max = 0;  // columns of 2-D state_indices (0 when 1-D or absent)
  int64_t n_buf = 0;  // intermediate_states rows
  int64_t T_buf = 0;  // intermediate_states tokens per row
};

struct MixerDims : RecurrentDims {
  int64_t C = 0;   // conv channels, 2 Hqk K + Hv V
  int64_t Kc = 0;  // conv taps
  int64_t L = 0;   // conv state positions per channel
};

struct GatingDims {
  int64_t rows = 0;  // product of the leading dims of a
  int64_t Hv = 0;
};

struct CommitDims {
  int64_t N = 0, slots = 0, n_buf = 0, T_buf = 0, Hv = 0, K = 0, V = 0;
};

// Every op with the Dims its validation resolves: X(stem, params type, dims type).
#define FGDN_OP_DIMS(X)                                  \
  X(chunk_fwd, ChunkFwdParams, ChunkDims)                \
  X(chunk_bwd, ChunkBwdParams, SeqDims)                  \
  X(gating, GatingParams, GatingDims)                    \
  X(recurrent, RecurrentParams, RecurrentDims)           \
  X(recurrent_commit, RecurrentCommitParams, CommitDims) \
  X(mixer_decode, MixerDecodeParams, MixerDims)

// Validation (src/api/validate.cpp). Every rule names the argument in its message.
// check_index_values: the index-value rules of validate alone, for a call that passed validate with its index
// tensors on a CUDA device: `p` is its host mirror (ops.cpp, exec.check_indices), whose index tensors are host
// copies, and `d` its dims. So a checked CUDA call is validated once and its values are read once.
#define FGDN_DECLARE_VALIDATION(stem, Params, Dims) \
  Status validate(const Params& p, Dims* d);        \
  Status check_index_values(const Params& p, const Dims& d);
FGDN_OP_DIMS(FGDN_DECLARE_VALIDATION)
#undef FGDN_DECLARE_VALIDATION
// The recurrence inside mixer_decode as a `recurrent` call: q, k, v are views of the conv input x (its shape
// and placement; the values are the conv outputs), g and beta the raw a and b with the gate formed in the op,
// o the output. Validation runs recurrent's rules through it and the CPU backend composes the op with it.
RecurrentParams mixer_recurrent_view(const MixerDecodeParams& p);

namespace cpu {
// CPU backend (src/cpu/): cpu::<op>(params, dims). fp32 compute by default, fp64 with exec.cpu_fp64; recurrent or
// chunked form.
#define FGDN_DECLARE_CPU(stem, Params, Dims) Status stem(const Params& p, const Dims& d);
FGDN_OP_DIMS(FGDN_DECLARE_CPU)
#undef FGDN_DECLARE_CPU
}  // namespace cpu

struct ChunkFwdPlan;     // api/plan.hpp
struct ChunkBwdPlan;     // api/plan.hpp
struct RecurrentPlan;    // api/plan.hpp
struct MixerDecodePlan;  // api/plan.hpp

#if FLASHGDN_WITH_CUDA
namespace cuda {
// CUDA backend (src/cuda/<op>/). Launches only: no allocation, no host synchronization. chunk_fwd, chunk_bwd,
// recurrent and mixer_decode run the plan the API layer built (plan_chunk_fwd / plan_chunk_bwd / plan_recurrent /
// plan_mixer_decode; the chunk ops' workspace is what the call was given).
Status chunk_fwd(const ChunkFwdParams& p, const ChunkDims& d, const ChunkFwdPlan& plan, void* ws, size_t ws_bytes,
                 void* stream);
// chunk_fwd's passes storing every chunk's start state as chunk_bwd's S0 record (bf16 [slots, Hv, K, V]) instead of
// o (K = V = 128, bf16; ChunkBwdPlan::states_from_fwd): ws holds plan.workspace_bytes. bwd_A, bwd_rows (may be null):
// chunk_bwd's A split and rows records, which the intra pass then writes too (ChunkKernelArgs::bwd_A).
Status chunk_fwd_states(const ChunkFwdParams& p, const ChunkDims& d, const ChunkFwdPlan& plan, void* ws, uint16_t* s0,
                        float* bwd_A, float* bwd_rows, void* stream);
size_t chunk_bwd_workspace_size(const ChunkBwdParams& p, const SeqDims& d, const ChunkBwdPlan& plan);
Status chunk_bwd(const ChunkBwdParams& p, const SeqDims& d, const ChunkBwdPlan& plan, void* ws, size_t ws_bytes,
                 void* stream);
Status recurrent(const RecurrentParams& p, const RecurrentDims& d, const RecurrentPlan& plan, void* stream);
Status recurrent_commit(const RecurrentCommitParams& p, const CommitDims& d, void* stream);
Status gating(const GatingParams& p, const GatingDims& d, void* stream);
Status mixer_decode(const MixerDecodeParams& p, const MixerDims& d, const MixerDecodePlan& plan, void* stream);
bool device_present();
int device_sm_count(int dev);  // cached per device (device.cu)
}  // namespace cuda
#endif

}  // namespace flashgdn
