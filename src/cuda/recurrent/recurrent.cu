// cuda::recurrent: argument resolution and the one dispatch over (layout, storage dtype, K, V-tile).
// The kernel is in recurrent_kernel.cuh; docs/recurrent.md has the design and the measured numbers.
// This file only declares the launchers: their instantiations live in inst_<layout>_<dtype>.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {

template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent(const RecurrentArgs& a, int sms, cudaStream_t stream);

namespace {

void copy_strides(const TensorView& t, int64_t* dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = t.strides[i];
}

template <StateLayout L, class ST, int K>
cudaError_t launch_bv(const RecurrentArgs& a, int bv, cudaStream_t s) {
  const int sms = current_sm_count();
  return bv == 16 ? launch_recurrent<L, ST, K, 16>(a, sms, s) : launch_recurrent<L, ST, K, 32>(a, sms, s);
}

template <StateLayout L, class ST>
cudaError_t launch_k(const RecurrentArgs& a, int bv, cudaStream_t s) {
  return a.K == 64 ? launch_bv<L, ST, 64>(a, bv, s) : launch_bv<L, ST, 128>(a, bv, s);
}

template <StateLayout L>
cudaError_t launch_dtype(const RecurrentArgs& a, int bv, cudaStream_t s) {
  if (!a.pool) return launch_k<L, float>(a, bv, s);  // initial/final state are fp32
  switch (a.pool_dtype) {
    case DType::bf16:
      return launch_k<L, __nv_bfloat16>(a, bv, s);
    case DType::f16:
      return launch_k<L, __half>(a, bv, s);
    default:
      return launch_k<L, float>(a, bv, s);
  }
}

}  // namespace

RecurrentArgs make_recurrent_args(const RecurrentParams& p, const RecurrentDims& d) {
  RecurrentArgs a;
  a.q = p.q.data, a.k = p.k.data, a.qk_dtype = p.q.dtype;
  copy_strides(p.q, a.q_s, 3), copy_strides(p.k, a.k_s, 3);
  a.v = p.v.data, a.o = p.o.data, a.v_dtype = p.v.dtype;
  copy_strides(p.v, a.v_s, 3), copy_strides(p.o, a.o_s, 3);
  if (p.g.defined()) a.g = p.g.data, a.g_dtype = p.g.dtype, copy_strides(p.g, a.g_s, 3);
  if (p.beta.defined()) a.beta = p.beta.data, a.beta_dtype = p.beta.dtype, copy_strides(p.beta, a.beta_s, 3);
  if (p.A_log.defined()) a.A_log = p.A_log.data, a.A_log_dtype = p.A_log.dtype, a.A_log_s = p.A_log.strides[0];
  if (p.dt_bias.defined())
    a.dt_bias = p.dt_bias.data, a.dt_bias_dtype = p.dt_bias.dtype, a.dt_bias_s = p.dt_bias.strides[0];
  if (p.cu_seqlens.defined()) a.cu_seqlens = p.cu_seqlens.data, a.cu_i64 = p.cu_seqlens.dtype == DType::i64;

  if (p.state_pool.defined()) {
    a.pool = p.state_pool.data, a.pool_dtype = p.state_pool.dtype, a.slots = d.slots;
    copy_strides(p.state_pool, a.pool_s, 3);
  }
  if (p.state_indices.defined()) {
    a.state_indices = p.state_indices.data, a.si_i64 = p.state_indices.dtype == DType::i64;
    a.si_s[0] = p.state_indices.strides[0];
    if (p.state_indices.ndim == 2) a.si_s[1] = p.state_indices.strides[1], a.T_max = p.state_indices.shape[1];
  }
  if (p.num_accepted_tokens.defined() && a.T_max > 0) {
    a.num_accepted = p.num_accepted_tokens.data, a.na_i64 = p.num_accepted_tokens.dtype == DType::i64;
    a.na_s = p.num_accepted_tokens.strides[0];
  }
  if (p.intermediate_states.defined()) {
    a.inter = p.intermediate_states.data, a.inter_dtype = p.intermediate_states.dtype;
    copy_strides(p.intermediate_states, a.inter_s, 4);
    a.n_buf = p.intermediate_states.shape[0], a.T_buf = p.intermediate_states.shape[1];
  }
  if (p.intermediate_indices.defined()) {
    a.inter_indices = p.intermediate_indices.data, a.ii_i64 = p.intermediate_indices.dtype == DType::i64;
    a.ii_s = p.intermediate_indices.strides[0];
  }
  if (!a.pool) {
    if (p.initial_state.defined())
      a.h0 = static_cast<const float*>(p.initial_state.data), copy_strides(p.initial_state, a.h0_s, 3);
    if (p.final_state.defined()) a.hT = static_cast<float*>(p.final_state.data), copy_strides(p.final_state, a.hT_s, 3);
  }

  a.N = d.N, a.T = d.T, a.Hqk = d.Hqk, a.Hv = d.Hv, a.K = int32_t(d.K), a.V = int32_t(d.V);
  a.varlen = d.varlen || p.cu_seqlens.defined();
  a.scale = d.scale;
  a.l2norm = p.use_qk_l2norm_in_kernel;
  a.gate_in_kernel = p.gate.use_gate_in_kernel && p.g.defined();
  a.beta_sigmoid = p.gate.use_beta_sigmoid_in_kernel && p.beta.defined();
  a.allow_neg_eigval = p.gate.allow_neg_eigval;
  a.softplus_beta = p.gate.softplus_beta, a.softplus_threshold = p.gate.softplus_threshold;
  a.commit = p.commit;
  a.null_slot_is_invalid = p.null_slot_is_invalid;
  a.layout = p.state_layout;
  return a;
}

int recurrent_default_bv(const RecurrentArgs& a) {
  // Wide tiles amortize the per-tile staging, lookups and barriers over more state; narrow ones spread a
  // small batch (N = 1: 32 heads) over more SMs. 32 columns once that still gives two tiles per SM.
  const int sms = current_sm_count();
  const int64_t heads = a.N * a.Hv;
  if (a.V % 32 == 0 && heads * (a.V / 32) >= 2 * sms) return 32;
  return 16;
}

// FLASHGDN_RECURRENT_DIRECT (read once; a function-local static is initialized thread-safely): "1" forces the
// direct kernel, "0" the persistent one; unset chooses by tokens per row (recurrent_launch).
int recurrent_direct_override() {
  static const int v = [] {
    const char* e = std::getenv("FLASHGDN_RECURRENT_DIRECT");
    if (e == nullptr) return -1;
    return std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  return v;
}

// FLASHGDN_RECURRENT_WY (read once): "0" keeps multi-token rows on the persistent kernel; anything else (or
// unset) sends multi-token rows on K-major states to the wy kernel (wy_kernel.cuh; its engine, CUDA-core or
// tensor-core reductions, is picked by FLASHGDN_RECURRENT_WY_MMA in wy_launch.cu).
bool recurrent_wy_enabled() {
  static const bool v = [] {
    const char* e = std::getenv("FLASHGDN_RECURRENT_WY");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return v;
}

// The kernels implement the whole contract (wy and pipe through their fallbacks); they differ in speed. Measured on
// the H200 (docs/recurrent.md): the direct kernel (one state tile per CTA, all loads in flight) is fastest for
// single-token decode (N=256 fp32 pool: 0.28 vs 0.38 ms persistent) except large K-major 16-bit-pool batches, where
// its pipelined variant streams tiles through shared memory (bf16 N=256: 158 vs 165 us), the wy kernel (chunked
// WY form) for multi-token rows on K-major pools, the persistent kernel for V-major or pool-less multi-token rows
// and small verify batches. Rows of one token: fixed T == 1, or varlen with no more tokens than rows.
Status recurrent_launch(const RecurrentArgs& a, int bv, void* stream) {
  const int force = recurrent_direct_override();
  if (force >= 0)
    return force == 1 ? recurrent_launch_direct(a, bv, stream) : recurrent_launch_persistent(a, bv, stream);
  const bool single_token = a.cu_seqlens == nullptr ? a.T <= 1 : a.T <= a.N;
  if (single_token) {  // large fixed T = 1 batches on a K-major pool: the pipelined variant (direct_pipe_launch.cu)
    if (recurrent_pipe_preferred(a)) return recurrent_launch_pipe(a, bv, stream);
    if (recurrent_direct_pdl_default(a)) {  // opt-in (FLASHGDN_RECURRENT_PDL=1, direct_launch.cu)
      RecurrentArgs b = a;
      b.pdl = true;
      return recurrent_launch_direct(b, bv, stream);
    }
    return recurrent_launch_direct(a, bv, stream);
  }
  // Multi-token rows: the wy kernel (K-major pool), except a small-batch verify (per-token state stores), where
  // the persistent kernel measured faster (N = 1, T = 12: 17.3 vs 18.5 us).
  const int sms = current_sm_count();
  const bool verify = a.inter != nullptr || (a.commit && a.T_max > 0);
  const bool small = a.N * a.Hv * (a.V / 32) < 2 * int64_t(sms);
  if (recurrent_wy_enabled() && recurrent_wy_supported(a) && !(verify && small))
    return recurrent_launch_wy(a, bv, stream);
  return recurrent_launch_persistent(a, bv, stream);  // V-major or pool-less multi-token rows
}

Status recurrent_launch_persistent(const RecurrentArgs& a, int bv, void* stream) {
  if (a.K != 64 && a.K != 128) return FGDN_ERROR(unsupported, "recurrent: K = ", a.K, " on CUDA; expected 64 or 128");
  if (a.V != 64 && a.V != 128) return FGDN_ERROR(unsupported, "recurrent: V = ", a.V, " on CUDA; expected 64 or 128");
  if (a.Hqk <= 0 || a.Hv % a.Hqk != 0)
    return FGDN_INVALID("recurrent: Hv = ", a.Hv, " not a multiple of Hqk = ", a.Hqk);
  if (bv == 0) bv = recurrent_default_bv(a);
  if (bv != 16 && bv != 32) return FGDN_INVALID("recurrent: V-tile ", bv, "; expected 16 or 32");
  auto s = static_cast<cudaStream_t>(stream);
  FGDN_CUDA_CHECK(a.layout == StateLayout::k_major ? launch_dtype<StateLayout::k_major>(a, bv, s)
                                                   : launch_dtype<StateLayout::v_major>(a, bv, s));
  return Status::OK();
}

size_t recurrent_workspace_size(const RecurrentParams&, const RecurrentDims&) {
  return 0;
}

Status recurrent(const RecurrentParams& p, const RecurrentDims& d, void*, size_t, void* stream) {
  return recurrent_launch(make_recurrent_args(p, d), 0, stream);
}

}  // namespace flashgdn::cuda
