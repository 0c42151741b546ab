// cuda::recurrent: argument resolution and the launch of the kernel the plan chose (plan_recurrent, api/plan.hpp)
// over (layout, storage dtype, K, V-tile). The kernels: recurrent_kernel.cuh (persistent), direct_kernel.cuh
// (direct), direct_pipe_kernel.cuh (direct_pipe), wy_kernel.cuh (wy); docs/recurrent.md has the design and the
// measured numbers. This file only declares the launchers: their instantiations live in one file per (kernel,
// layout, storage dtype), which compile in parallel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "api/plan.hpp"
#include "cuda/common/cuda_check.cuh"
#include "cuda/recurrent/recurrent_args.hpp"

namespace flashgdn::cuda {

template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent(const RecurrentArgs& a, int sms, cudaStream_t stream);
template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent_direct(const RecurrentArgs& a, cudaStream_t stream);
template <class ST, int K, int BV, int S, int NT>
cudaError_t launch_recurrent_direct_pipe(const RecurrentArgs& a, cudaStream_t stream);
template <class ST, int K, int BV>
cudaError_t launch_recurrent_wy(const RecurrentArgs& a, int sms, cudaStream_t stream);
template <class ST, int K>
cudaError_t launch_recurrent_wy_mma(const RecurrentArgs& a, int sms, cudaStream_t stream);

namespace {

void copy_strides(const TensorView& t, int64_t* dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = t.strides[i];
}

// One launch of the planned kernel for a fixed (layout, storage type, K); bv is the plan's (each kernel
// instantiates the widths its plan can choose).
template <StateLayout L, class ST, int K>
cudaError_t launch_k(const RecurrentArgs& a, const RecurrentPlan& pl, cudaStream_t s) {
  switch (pl.kernel) {
    case RecurrentKernel::persistent:
      return pl.bv == 16 ? launch_recurrent<L, ST, K, 16>(a, pl.sms, s) : launch_recurrent<L, ST, K, 32>(a, pl.sms, s);
    case RecurrentKernel::direct:
      switch (pl.bv) {
        case 128:
          return launch_recurrent_direct<L, ST, K, 128>(a, s);
        case 64:
          return launch_recurrent_direct<L, ST, K, 64>(a, s);
        case 32:
          return launch_recurrent_direct<L, ST, K, 32>(a, s);
        default:
          return launch_recurrent_direct<L, ST, K, 16>(a, s);
      }
    case RecurrentKernel::direct_pipe:  // K-major 16-bit pools, 128 columns (the plan checks)
      if constexpr (L == StateLayout::k_major && sizeof(ST) == 2)
        return launch_recurrent_direct_pipe<ST, K, 128, kPipeStages, kPipeThreads>(a, s);
      return cudaErrorInvalidConfiguration;
    case RecurrentKernel::wy:  // K-major pools (the plan checks); K = 64 takes 32 columns only
      if constexpr (L == StateLayout::k_major) {
        if constexpr (K == 128) {
          if (pl.bv == 16) return launch_recurrent_wy<ST, K, 16>(a, pl.sms, s);
          if (pl.bv == 64) return launch_recurrent_wy<ST, K, 64>(a, pl.sms, s);
        }
        return launch_recurrent_wy<ST, K, 32>(a, pl.sms, s);
      }
      return cudaErrorInvalidConfiguration;
    case RecurrentKernel::wy_mma:  // K-major pools, 16-bit q, k, v (the plan checks)
      if constexpr (L == StateLayout::k_major) return launch_recurrent_wy_mma<ST, K>(a, pl.sms, s);
      return cudaErrorInvalidConfiguration;
    default:
      return cudaErrorInvalidConfiguration;
  }
}

template <StateLayout L, class ST>
cudaError_t launch_dtype(const RecurrentArgs& a, const RecurrentPlan& pl, cudaStream_t s) {
  return a.K == 64 ? launch_k<L, ST, 64>(a, pl, s) : launch_k<L, ST, 128>(a, pl, s);
}

template <StateLayout L>
cudaError_t launch_layout(const RecurrentArgs& a, const RecurrentPlan& pl, cudaStream_t s) {
  if (!a.pool) return launch_dtype<L, float>(a, pl, s);  // initial/final state are fp32
  switch (a.pool_dtype) {
    case DType::bf16:
      return launch_dtype<L, __nv_bfloat16>(a, pl, s);
    case DType::f16:
      return launch_dtype<L, __half>(a, pl, s);
    default:
      return launch_dtype<L, float>(a, pl, s);
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
  a.gqa = DivU32::of(uint32_t(d.Hqk > 0 ? d.Hv / d.Hqk : 1)), a.hv = DivU32::of(uint32_t(d.Hv));
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

Status recurrent(const RecurrentParams& p, const RecurrentDims& d, const RecurrentPlan& pl, void* stream) {
  RecurrentArgs a = make_recurrent_args(p, d);
  a.vt = DivU32::of(uint32_t(pl.bv > 0 ? a.V / pl.bv : 1));
  auto s = static_cast<cudaStream_t>(stream);
  FGDN_CUDA_CHECK(a.layout == StateLayout::k_major ? launch_layout<StateLayout::k_major>(a, pl, s)
                                                   : launch_layout<StateLayout::v_major>(a, pl, s));
  return Status::OK();
}

}  // namespace flashgdn::cuda
