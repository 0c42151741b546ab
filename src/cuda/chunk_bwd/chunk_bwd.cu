// cuda::chunk_bwd: the training backward (gdn-math §7) on the GPU. The chunk passes (chunk_bwd_kernels.cuh) leave
// the core gradients per value head in workspace; the token kernels here finish them:
//   * chunk_bwd_qk_kernel    dq, dk of a q/k head = the sum over its value heads in head order (§7.5), then the
//                            l2norm chain dx = rho (dx^ - (dx^ . x^) x^) (§7.6) (after the mma.sync pass 4 only: the
//                            wgmma one ends its walk over a q/k head's value heads with the same sum and chain);
//   * chunk_bwd_token_kernel dbeta through beta = c sigmoid(b), dg through the gate (§7.7), zeros on slack rows;
//   * chunk_bwd_gate_kernel  dA_log = sum dg g, ddt_bias = sum da per value head, in a fixed order.
// No host synchronization, no allocation: the caller's workspace (chunk_bwd_workspace_size) holds everything.
#include <algorithm>

#include "api/internal.hpp"
#include "api/plan.hpp"
#include "cuda/chunk_bwd/chunk_bwd.hpp"
#include "cuda/chunk_fwd/chunk_fwd.hpp"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"

namespace flashgdn::cuda {
namespace {

constexpr int64_t kChunk = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
size_t align_up(size_t x) {
  return (x + 255) & ~size_t(255);
}

int64_t slots_of(const SeqDims& d) {
  const int64_t nb = ceil_div(d.T, kChunk);
  return d.varlen ? d.N + nb : d.B * nb;
}

// Workspace: the per-(chunk slot, value head) records, then the per-token scratch (dq, dk per token and dqk_heads
// heads, dg, dbeta per token and value head); fp32 (W, S0 bf16), each part 256-byte aligned. Bytes per (slot, head):
// 4 (256 + 64^2 + 128 V + K V) + 2 (2 64 K + K V) (W as bf16 hi + lo, S0 in bf16).
struct WsLayout {
  size_t rows = 0, A = 0, W = 0, U = 0, dU = 0, S0 = 0, dS = 0, dqh = 0, dkh = 0, dgh = 0, dbh = 0, flag = 0, dec = 0,
         fwd = 0, total = 0;
};

// The dq / dk scratch's heads (ChunkBwdArgs::dqk_heads): pass 4 on wgmma sums a q/k head's value heads itself
// (the scratch holds a walk's partial sums; none without GQA).
int64_t dqk_heads_of(const SeqDims& d, const ChunkBwdPlan& pl) {
  return pl.grads_pass == ChunkStatePass::wgmma ? d.Hqk : d.Hv;
}

// int32 words of ChunkBwdArgs::beta_big (1) and ChunkBwdArgs::order (the queue, the tickets, and with pairs of value
// heads their exchange flags), one region cleared by one memset
int64_t flag_words(const SeqDims& d, const ChunkBwdPlan& pl) {
  if (pl.fused_walk <= 0) return 0;
  const int64_t units = d.Hv / std::max<int64_t>(pl.fused_cluster, 1), walks = ceil_div(slots_of(d), pl.fused_walk);
  return 1 + 2 + 2 * units + (pl.fused_cluster > 1 ? 8 * walks * units : 0);
}

WsLayout ws_layout(const SeqDims& d, const ChunkBwdPlan& pl) {
  const size_t rec = size_t(slots_of(d)) * size_t(d.Hv), rows = size_t(d.B * d.T * d.Hv), f = sizeof(float);
  // partial sums only, and only for GQA (without GQA the wgmma and the fused pass end the dq / dk work themselves)
  const bool walk_sums = pl.grads_pass == ChunkStatePass::wgmma || pl.fused_walk > 0;
  const size_t qk_rows = walk_sums && d.Hv == d.Hqk ? 0 : size_t(d.B * d.T * dqk_heads_of(d, pl));
  const size_t K = size_t(d.K), V = size_t(d.V);
  WsLayout w;
  size_t off = 0;
  const auto take = [&](size_t* at, size_t bytes) {
    *at = off;
    off = align_up(off + bytes);
  };
  take(&w.rows, rec * 256 * f);
  take(&w.A, rec * 64 * 64 * f);
  take(&w.W, rec * 2 * 64 * K * 2);  // bf16 hi, lo
  take(&w.U, rec * 64 * V * f);
  take(&w.dU, rec * 64 * V * f);
  take(&w.S0, rec * K * V * 2);  // bf16
  take(&w.dS, rec * K * V * f);
  take(&w.dqh, qk_rows * K * f);
  take(&w.dkh, qk_rows * K * f);
  take(&w.dgh, rows * f);
  take(&w.dbh, rows * f);
  take(&w.flag, sizeof(int32_t) * size_t(flag_words(d, pl)));     // ChunkBwdArgs::beta_big, then ::order
  take(&w.dec, pl.decay_window ? rec * f : 0);                    // ChunkBwdArgs::dec
  take(&w.fwd, pl.states_from_fwd ? pl.fwd.workspace_bytes : 0);  // chunk_fwd_states' own
  w.total = off;
  return w;
}

// Whether pass 5a (chunk_bwd_qk_kernel) ends the dq / dk work: not where pass 4 on wgmma did it (planned, or the
// fused pass's stand-in when a beta exceeds 1: prep's flag) or the fused pass did it (no GQA, or its clusters). The
// host launches 5a only where the plan leaves it the work (qk_planned); the flag is read on the device.
__host__ __device__ __forceinline__ bool qk_planned(const ChunkBwdArgs& a) {
  return !a.grads_wg && !(a.fused_walk > 0 && (a.group == 1 || a.fused_cluster > 1));
}
__device__ __forceinline__ bool qk_pass_runs(const ChunkBwdArgs& a) {
  return qk_planned(a) && !(a.beta_big && *a.beta_big);
}

// Rows of slack tokens (varlen: outside [cu[0], cu[N]), clamped) get zero gradients.
__device__ __forceinline__ bool covered(const ChunkBwdArgs& a, int64_t t) {
  if (a.cu_seqlens == nullptr) return true;
  int64_t s0 = load_index(a.cu_seqlens, a.cu_i64, 0), s1 = load_index(a.cu_seqlens, a.cu_i64, a.N);
  s0 = s0 < 0 ? 0 : (s0 > a.T ? a.T : s0);
  s1 = s1 < 0 ? 0 : (s1 > a.T ? a.T : s1);
  return t >= s0 && t < s1;
}

// One row (token, q/k head) per K / 4 lanes, 4 consecutive elements per lane (16-byte fp32 scratch loads, 8-byte
// 16-bit loads: dense tensors are 16-byte aligned, validate.cpp). The scratch holds dqk_heads / Hqk rows per (token,
// q/k head) (the value heads', summed here in head order, or their sum: pass 4 on wgmma). Every load of a row is
// issued before its first sum: the kernel is bound by the latency of the scratch rows (2 dqk_heads / Hqk of them per
// row). Index math is 32-bit: B T Hv K < 2^31 is validated.
template <int K>
__global__ void __launch_bounds__(256) chunk_bwd_qk_kernel(const ChunkBwdArgs a) {
  constexpr int LPR = K / 4, RPB = 256 / LPR;  // lanes per row, rows per block
  constexpr int G = 2;  // value heads loaded per batch: 48 registers (G = 4 takes 64, 4 CTAs an SM instead of 5)
  const uint32_t rows = uint32_t(a.B * a.T * a.Hqk), Hqk = uint32_t(a.Hqk), T = uint32_t(a.T);
  const uint32_t row = blockIdx.x * RPB + threadIdx.x / LPR;  // (b T + t) Hqk + hk
  const int c = int(threadIdx.x % LPR) * 4;                   // this lane's first element
  // Two rows share a warp at K = 64: every lane stays to the lane sums (full-warp shuffles), rows past the end
  // and slack rows run them on zeros.
  const bool valid = row < rows;
  const uint32_t bt = valid ? row / Hqk : 0u, hk = row - bt * Hqk, b = bt / T, t = bt - b * T;
  const DType io = DType(a.io_dtype);
  if (!qk_pass_runs(a)) return;             // pass 4 on wgmma ran (a beta above 1) and did this work itself
  const bool cov = valid && covered(a, t);  // slack rows: zero gradients; neither their scratch nor inputs are read
  const int64_t qoff = int64_t(b) * a.q_sb + int64_t(t) * a.q_st + int64_t(hk) * a.q_sh + c;
  const int64_t koff = int64_t(b) * a.k_sb + int64_t(t) * a.k_st + int64_t(hk) * a.k_sh + c;
  uint4 xq_bits = make_uint4(0u, 0u, 0u, 0u), xk_bits = xq_bits;
  if (cov && a.l2norm) xq_bits = load4_bits(a.q, io, qoff), xk_bits = load4_bits(a.k, io, koff);
  float gq[4] = {0.f, 0.f, 0.f, 0.f}, gk[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t Hs = uint32_t(a.dqk_heads), gs = Hs / Hqk;  // scratch heads, per q/k head
  const uint32_t h_end = cov ? (hk + 1) * gs : 0u;
  for (uint32_t h0 = hk * gs; h0 < h_end; h0 += G) {
    float4 pq[G], pk[G];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      if (h0 + j < h_end) {
        const uint32_t at = (bt * Hs + h0 + j) * K + c;
        pq[j] = *reinterpret_cast<const float4*>(a.dqh + at);
        pk[j] = *reinterpret_cast<const float4*>(a.dkh + at);
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {  // value heads in order: deterministic
      if (h0 + j < h_end) {
        gq[0] += pq[j].x, gq[1] += pq[j].y, gq[2] += pq[j].z, gq[3] += pq[j].w;
        gk[0] += pk[j].x, gk[1] += pk[j].y, gk[2] += pk[j].z, gk[3] += pk[j].w;
      }
    }
  }
  if (a.l2norm) {  // dx = rho (dx^ - (dx^ . x^) x^) (uncovered: 0)
    float xq[4], xk[4];
    from_bits4(io, xq_bits, xq);
    from_bits4(io, xk_bits, xk);
    l2norm_backward4<LPR>(gq, xq);
    l2norm_backward4<LPR>(gk, xk);
  }
  if (!valid) return;
  store4(a.dq, io, int64_t(b) * a.dq_sb + int64_t(t) * a.dq_st + int64_t(hk) * a.dq_sh + c, gq);
  store4(a.dk, io, int64_t(b) * a.dk_sb + int64_t(t) * a.dk_st + int64_t(hk) * a.dk_sh + c, gk);
}

// d(softplus)/dx with PyTorch's threshold: sigmoid(beta x) below it, 1 above.
__device__ __forceinline__ float softplus_grad(float x, float sp_beta, float sp_threshold) {
  const float bx = sp_beta * x;
  return bx <= sp_threshold ? 1.f / (1.f + expf(-bx)) : 1.f;
}

struct GateParams {
  float neg_exp_alog, dtb;
};
__device__ __forceinline__ GateParams gate_params(const ChunkBwdArgs& a, int h) {
  GateParams gp{-1.f, 0.f};
  if (a.A_log) gp.neg_exp_alog = -expf(load1(a.A_log, DType(a.alog_dtype), h * a.alog_s));
  if (a.dt_bias) gp.dtb = load1(a.dt_bias, DType(a.dtb_dtype), h * a.dtb_s);
  return gp;
}

// One thread per (token, value head): dbeta, dg outputs; dv rows of slack tokens.
__global__ void __launch_bounds__(256) chunk_bwd_token_kernel(const ChunkBwdArgs a, int64_t K, int64_t V) {
  const int64_t row = int64_t(blockIdx.x) * 256 + threadIdx.x;  // (b * T + t) * Hv + h
  if (row >= a.B * a.T * a.Hv) return;
  const int64_t bt = row / a.Hv, b = bt / a.T, t = bt % a.T;
  const int h = int(row % a.Hv);
  const bool cov = covered(a, t);
  if (a.dbeta) {
    float db = 0.f;
    if (cov) {
      db = a.dbh[row];
      if (a.beta_sigmoid && a.beta) {  // beta = c s, s = sigmoid(b):  db_raw = dbeta c s (1 - s)
        const float s = 1.f / (1.f + expf(-load1(a.beta, DType(a.b_dtype), b * a.b_sb + t * a.b_st + h * a.b_sh)));
        db *= a.beta_mult * s * (1.f - s);
      }
    }
    store1(a.dbeta, DType(a.db_dtype), b * a.db_sb + t * a.db_st + h * a.db_sh, db);
  }
  if (a.dg) {
    float dg = 0.f;
    if (cov) {
      dg = a.dgh[row];
      if (a.gate_in_kernel && a.g) {  // g = -e^{A_log} softplus(a + dt_bias):  da = dg (-e^{A_log}) softplus'(x)
        const GateParams gp = gate_params(a, h);
        const float x = load1(a.g, DType(a.g_dtype), b * a.g_sb + t * a.g_st + h * a.g_sh) + gp.dtb;
        dg *= gp.neg_exp_alog * softplus_grad(x, a.sp_beta, a.sp_threshold);
      }
    }
    store1(a.dg, DType(a.dg_dtype), b * a.dg_sb + t * a.dg_st + h * a.dg_sh, dg);
  }
  if (!cov) {
    for (int64_t j = 0; j < V; ++j) store1(a.dv, DType(a.io_dtype), b * a.dv_sb + t * a.dv_st + h * a.dv_sh + j, 0.f);
    if (!qk_pass_runs(a) && h < a.Hqk)  // dq, dk of slack rows (else pass 5a's)
      for (int64_t j = 0; j < K; ++j) {
        store1(a.dq, DType(a.io_dtype), b * a.dq_sb + t * a.dq_st + h * a.dq_sh + j, 0.f);
        store1(a.dk, DType(a.io_dtype), b * a.dk_sb + t * a.dk_st + h * a.dk_sh + j, 0.f);
      }
  }
}

// One block per value head: dA_log = sum_t dg_t g_t, ddt_bias = sum_t da_t over every covered token; each thread
// sums a fixed stride of rows, then a fixed tree.
__global__ void __launch_bounds__(256) chunk_bwd_gate_kernel(const ChunkBwdArgs a) {
  __shared__ float sa[256], sd[256];
  const int h = blockIdx.x, tid = threadIdx.x;
  const GateParams gp = gate_params(a, h);
  float acc_a = 0.f, acc_d = 0.f;
  for (int64_t bt = tid; bt < a.B * a.T; bt += 256) {
    const int64_t b = bt / a.T, t = bt % a.T;
    if (!covered(a, t)) continue;
    const float dg = a.dgh[bt * a.Hv + h];
    const float raw = load1(a.g, DType(a.g_dtype), b * a.g_sb + t * a.g_st + h * a.g_sh);
    const float x = raw + gp.dtb;
    const float g = gp.neg_exp_alog * softplus(x, a.sp_beta, a.sp_threshold);
    acc_a = fmaf(dg, g, acc_a);
    acc_d = fmaf(dg * gp.neg_exp_alog, softplus_grad(x, a.sp_beta, a.sp_threshold), acc_d);
  }
  sa[tid] = acc_a, sd[tid] = acc_d;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (tid < w) sa[tid] += sa[tid + w], sd[tid] += sd[tid + w];
    __syncthreads();
  }
  if (tid == 0) {
    if (a.dA_log) a.dA_log[h * a.dalog_s] = sa[0];
    if (a.ddt_bias) a.ddt_bias[h * a.dddt_s] = sd[0];
  }
}

template <class T>
void set3(const TensorView& t, T** p, int64_t* s0, int64_t* s1, int64_t* s2) {
  *p = static_cast<T*>(t.data);
  *s0 = t.strides[0], *s1 = t.strides[1], *s2 = t.strides[2];
}

ChunkBwdArgs make_args(const ChunkBwdParams& p, const SeqDims& d) {
  ChunkBwdArgs a{};
  const void* cq;
  set3(p.q, &cq, &a.q_sb, &a.q_st, &a.q_sh), a.q = cq;
  set3(p.k, &cq, &a.k_sb, &a.k_st, &a.k_sh), a.k = cq;
  set3(p.v, &cq, &a.v_sb, &a.v_st, &a.v_sh), a.v = cq;
  set3(p.d_o, &cq, &a.do_sb, &a.do_st, &a.do_sh), a.d_o = cq;
  a.io_dtype = int32_t(p.q.dtype);
  if (p.g.defined()) set3(p.g, &cq, &a.g_sb, &a.g_st, &a.g_sh), a.g = cq, a.g_dtype = int32_t(p.g.dtype);
  if (p.beta.defined()) set3(p.beta, &cq, &a.b_sb, &a.b_st, &a.b_sh), a.beta = cq, a.b_dtype = int32_t(p.beta.dtype);
  if (p.A_log.defined()) a.A_log = p.A_log.data, a.alog_s = p.A_log.strides[0], a.alog_dtype = int32_t(p.A_log.dtype);
  if (p.dt_bias.defined())
    a.dt_bias = p.dt_bias.data, a.dtb_s = p.dt_bias.strides[0], a.dtb_dtype = int32_t(p.dt_bias.dtype);
  const float* cf;
  if (p.initial_state.defined()) set3(p.initial_state, &cf, &a.h0_sn, &a.h0_sh, &a.h0_sr), a.h0 = cf;
  if (p.d_ht.defined()) set3(p.d_ht, &cf, &a.dht_sn, &a.dht_sh, &a.dht_sr), a.dht = cf;
  if (p.cu_seqlens.defined()) a.cu_seqlens = p.cu_seqlens.data, a.cu_i64 = p.cu_seqlens.dtype == DType::i64;
  set3(p.dq, &a.dq, &a.dq_sb, &a.dq_st, &a.dq_sh);
  set3(p.dk, &a.dk, &a.dk_sb, &a.dk_st, &a.dk_sh);
  set3(p.dv, &a.dv, &a.dv_sb, &a.dv_st, &a.dv_sh);
  if (p.dg.defined()) set3(p.dg, &a.dg, &a.dg_sb, &a.dg_st, &a.dg_sh), a.dg_dtype = int32_t(p.dg.dtype);
  if (p.dbeta.defined()) set3(p.dbeta, &a.dbeta, &a.db_sb, &a.db_st, &a.db_sh), a.db_dtype = int32_t(p.dbeta.dtype);
  if (p.dh0.defined()) set3(p.dh0, &a.dh0, &a.dh0_sn, &a.dh0_sh, &a.dh0_sr);
  if (p.dA_log.defined()) a.dA_log = static_cast<float*>(p.dA_log.data), a.dalog_s = p.dA_log.strides[0];
  if (p.ddt_bias.defined()) a.ddt_bias = static_cast<float*>(p.ddt_bias.data), a.dddt_s = p.ddt_bias.strides[0];
  set_chunk_common(a, p, d);
  a.nchunk_b = ceil_div(d.T, kChunk);
  a.slots = slots_of(d);
  return a;
}

}  // namespace

// The records and scratch, then the chains' segment split (plan_chunk_bwd: items, sequence table, summaries).
size_t chunk_bwd_workspace_size(const ChunkBwdParams& p, const SeqDims& d, const ChunkBwdPlan& pl) {
  return ws_layout(d, pl).total + (pl.split ? pl.split_bytes : 0);
}

Status chunk_bwd(const ChunkBwdParams& p, const SeqDims& d, const ChunkBwdPlan& pl, void* ws, size_t ws_bytes,
                 void* stream) {
  const WsLayout wl = ws_layout(d, pl);
  const size_t need = chunk_bwd_workspace_size(p, d, pl);
  if (need > 0 && (ws == nullptr || ws_bytes < need))
    return FGDN_INVALID("chunk_bwd: workspace: expected at least ", need, " bytes, got ", ws_bytes);
  ChunkBwdArgs a = make_args(p, d);
  a.state_wg = pl.state_pass == ChunkStatePass::wgmma;  // the plan's choices (K = V = 128 only)
  a.state_stages = pl.state_stages;
  a.dstate_wg = pl.dstate_pass == ChunkStatePass::wgmma ? pl.dstate_stages : 0;
  a.chains_concurrent = pl.chains_concurrent;
  a.grads_wg = pl.grads_pass == ChunkStatePass::wgmma;
  a.fused_walk = pl.fused_walk;
  a.fused_cluster = pl.fused_cluster;
  a.dqk_heads = int32_t(dqk_heads_of(d, pl));
  auto* base = static_cast<unsigned char*>(ws);
  if (pl.split) {  // the split's part follows the records and scratch (wl.total is 256-byte aligned)
    unsigned char* sp = base + wl.total;
    a.items = reinterpret_cast<const ChunkWorkItem*>(sp + pl.ws_items);
    a.seq_first = reinterpret_cast<int32_t*>(sp + pl.ws_seq_first);
    a.mn = reinterpret_cast<float*>(sp + pl.ws_mn);
    a.mn_rev = reinterpret_cast<float*>(sp + pl.ws_mn_rev);
    a.items_cap = pl.cap;
    a.seg_chunks = pl.seg_chunks;
  }
  a.rows = reinterpret_cast<float*>(base + wl.rows);
  a.A = reinterpret_cast<float*>(base + wl.A);
  a.W = reinterpret_cast<uint16_t*>(base + wl.W);
  a.U = reinterpret_cast<float*>(base + wl.U);
  a.dU = reinterpret_cast<float*>(base + wl.dU);
  a.S0 = reinterpret_cast<uint16_t*>(base + wl.S0);
  a.dS = reinterpret_cast<float*>(base + wl.dS);
  a.dqh = reinterpret_cast<float*>(base + wl.dqh);
  a.dkh = reinterpret_cast<float*>(base + wl.dkh);
  a.dgh = reinterpret_cast<float*>(base + wl.dgh);
  a.dbh = reinterpret_cast<float*>(base + wl.dbh);
  if (pl.fused_walk > 0) a.beta_big = reinterpret_cast<int32_t*>(base + wl.flag);
  if (pl.fused_walk > 0) a.order = a.beta_big + 1;
  a.follow = pl.fused_follows;
  if (pl.decay_window) a.dec = reinterpret_cast<float*>(base + wl.dec);
  a.s0_from_fwd = pl.states_from_fwd;
  const auto st = static_cast<cudaStream_t>(stream);
  // Slack rows (varlen: outside [cu[0], cu[N])) are never written by the chunk passes, and the kernels below never
  // read their scratch (covered()): no clearing pass over it.
  const bool bf16 = p.q.dtype == DType::bf16;
  if (a.beta_big) FGDN_CUDA_CHECK(cudaMemsetAsync(a.beta_big, 0, sizeof(int32_t) * size_t(flag_words(d, pl)), st));
  const auto passes = [&](PassRange r) {
    return static_cast<cudaError_t>(bf16 ? launch_chunk_bwd_passes_bf16(a, d.K, d.V, r, stream)
                                         : launch_chunk_bwd_passes_f16(a, d.K, d.V, r, stream));
  };
  if (pl.states_from_fwd) {
    // S0 by chunk_fwd's passes (its plan, its part of the workspace), between prep and the chains: its intra pass
    // writes the backward's A and rows records beside its own (the same record slots, chunk_slot, and value heads),
    // so prep forms only the chains' operands W, dU0 (and U0), in the chunks that read them
    if (pl.fwd.rec_slots != a.slots)
      return FGDN_ERROR(internal, "chunk_bwd: chunk_fwd's record slots ", pl.fwd.rec_slots, " != the backward's ",
                        a.slots);
    unsigned char* const fws = base + wl.fwd;
    FGDN_CUDA_CHECK(passes(kPassesFront));
    FGDN_RETURN_IF_ERROR(chunk_fwd_states(fwd_params_of(p), ChunkDims{d}, pl.fwd, fws, a.S0, a.A, a.rows, stream));
    FGDN_CUDA_CHECK(passes(kPassesBack));
  } else {
    FGDN_CUDA_CHECK(passes(kPassesAll));
  }
  const int64_t qk_rows = d.B * d.T * d.Hqk, v_rows = d.B * d.T * d.Hv;
  if (qk_rows > 0 && qk_planned(a)) {
    const unsigned blocks = unsigned(ceil_div(qk_rows, 256 / (d.K / 4)));  // K / 4 lanes per row
    if (d.K == 64)
      chunk_bwd_qk_kernel<64><<<blocks, 256, 0, st>>>(a);
    else
      chunk_bwd_qk_kernel<128><<<blocks, 256, 0, st>>>(a);
    FGDN_CUDA_CHECK(cudaGetLastError());
  }
  if (v_rows > 0 && (a.dg || a.dbeta || d.varlen)) {
    chunk_bwd_token_kernel<<<unsigned(ceil_div(v_rows, 256)), 256, 0, st>>>(a, d.K, d.V);
    FGDN_CUDA_CHECK(cudaGetLastError());
  }
  if (a.gate_in_kernel && a.g && (a.dA_log || a.ddt_bias) && d.Hv > 0) {
    chunk_bwd_gate_kernel<<<unsigned(d.Hv), 256, 0, st>>>(a);
    FGDN_CUDA_CHECK(cudaGetLastError());
  }
  return Status::OK();
}

}  // namespace flashgdn::cuda
