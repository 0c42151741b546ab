// cuda::chunk_fwd: the chunked prefill (inference forward, gdn-math §5-§6) on Hopper, as planned by plan_chunk_fwd
// (api/plan.hpp). First the intra-chunk pass (chunk_fwd_intra.cuh: every chunk and head in parallel, the inverse
// and P into workspace records), then the state pass, the chain over the chunks (chunk_fwd_state_wg.cuh on wgmma
// where K = V = 128, chunk_fwd_state.cuh on mma.sync where K or V = 64), run one of two ways (no host sync, CUDA-graph
// safe):
//   * direct: one CTA per (sequence, value head) walking all chunks;
//   * segment split (gdn-math §6) when there are too few such CTAs for the SMs and the sequences are long:
//       1. chunk_index_kernel  builds the (sequence, segment, chunk range) list on the device,
//       2. the state pass in summary mode writes each segment's [M | N] (augmented state [I | 0]), or [0 | N] from
//          the segment's decay window where the gates let it drop the incoming state (chunk_fwd.hpp),
//       3. chunk_scan_kernel   S_start(j+1) = M_j S_start(j) + N_j  (fp32, exact, stored over N_j),
//       4. the state pass in split mode runs every segment from its start state (outputs, final state).
// docs/chunk_fwd.md has the design and the measured numbers.
#include "api/internal.hpp"
#include "api/plan.hpp"
#include "cuda/chunk_fwd/chunk_fwd.hpp"
#include "cuda/common/cuda_check.cuh"

namespace flashgdn::cuda {

namespace {

constexpr int64_t kChunk = kChunkFwdChunk;
constexpr int64_t kTile = kChunkFwdTile;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- device helpers of the split path ------------------------------------------------------------------

__device__ __forceinline__ int64_t clamped_len(const void* cu, int32_t cu_i64, int64_t n, int64_t T) {
  if (cu == nullptr) return T;
  int64_t s0 = cu_i64 ? static_cast<const int64_t*>(cu)[n] : static_cast<const int32_t*>(cu)[n];
  int64_t s1 = cu_i64 ? static_cast<const int64_t*>(cu)[n + 1] : static_cast<const int32_t*>(cu)[n + 1];
  s0 = s0 < 0 ? 0 : (s0 > T ? T : s0);
  s1 = s1 < 0 ? 0 : (s1 > T ? T : s1);
  return s1 > s0 ? s1 - s0 : 0;
}

// One block: per sequence nseg = max(1, ceil(chunks / Ls)) segments, an exclusive scan gives each
// sequence's first item; the slack up to `cap` is marked empty (n = -1).
__global__ void __launch_bounds__(1024)
    chunk_index_kernel(const void* cu, int32_t cu_i64, int64_t N, int64_t T, int64_t ls, ChunkWorkItem* items,
                       int64_t cap, int32_t* seq_first) {
  __shared__ int64_t scan[1024];
  __shared__ int64_t carry;
  const int tid = threadIdx.x;
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < N; base += 1024) {
    const int64_t n = base + tid;
    int64_t nch = 0, nseg = 0;
    if (n < N) {
      nch = (clamped_len(cu, cu_i64, n, T) + kChunk - 1) / kChunk;
      nseg = nch > ls ? (nch + ls - 1) / ls : 1;
    }
    scan[tid] = nseg;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
      const int64_t y = tid >= off ? scan[tid - off] : 0;
      __syncthreads();
      scan[tid] += y;
      __syncthreads();
    }
    const int64_t first = carry + scan[tid] - nseg;
    if (n < N) {
      seq_first[n] = static_cast<int32_t>(first < cap ? first : cap);
      for (int64_t s = 0; s < nseg && first + s < cap; ++s) {
        ChunkWorkItem it{};
        it.n = static_cast<int32_t>(n);
        it.seg = static_cast<int32_t>(s);
        it.nseg = static_cast<int32_t>(nseg);
        it.c_begin = static_cast<int32_t>(s * ls);
        it.c_end = static_cast<int32_t>((s + 1) * ls < nch ? (s + 1) * ls : nch);
        items[first + s] = it;
      }
    }
    __syncthreads();
    if (tid == 1023) carry += scan[1023];
    __syncthreads();
  }
  for (int64_t i = carry + tid; i < cap; i += 1024) {
    ChunkWorkItem it{};
    it.n = -1;
    items[i] = it;
  }
}

// S_start(j+1) = M_j S_start(j) + N_j for one (sequence, value head, 16 state columns), fp32 throughout (gdn-math
// §6.3); the result overwrites N_j, where the split forward reads it. Four threads per row: thread (i, p) holds
// keys K/4 p .. of row i of M_j in registers (loaded a whole step ahead: M and N do not depend on S) and sums them
// against S (shared memory), the four partial rows are added by two shuffles, and thread p keeps columns 4p .. 4p + 3.
// Per step only the FMAs, two shuffles and two barriers are on the chain (one thread per row, M through shared
// memory, leaves the chain latency-bound at 4 warps per SM).
template <int K, int NC>
__global__ void __launch_bounds__(4 * K) chunk_scan_kernel(const ChunkKernelArgs a, const int32_t* seq_first) {
  static_assert(NC == 16, "four threads per row keep four columns each");
  constexpr int KP = K / 4, V4 = KP / 4;  // keys per thread, as float4
  // S (K x NC) with the rows of part p shifted by 4 p floats: the four parts read rows K/4 apart in one instruction,
  // which would otherwise fall in the same banks
  __shared__ __align__(16) float S[K * NC + 16];
  const auto sidx = [](int k, int j) { return k * NC + j + (k / KP) * 4; };
  const int64_t n = blockIdx.x;
  const int h = blockIdx.y, c0 = blockIdx.z * NC, tid = threadIdx.x, i = tid >> 2, part = tid & 3;
  const int64_t first = seq_first[n];
  if (first >= a.items_cap) return;
  const int nseg = a.items[first].nseg;
  if (nseg <= 1) return;
  const int64_t width = K + a.V;
  int steps = nseg - 1;
  if (first + steps > a.items_cap) steps = static_cast<int>(a.items_cap - first);
  {  // S_start(0) = h0 (or 0): thread (i, p) fills columns 4p .. 4p + 3 of row i
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (a.h0) {
      const float* p = a.h0 + n * a.h0_sn + h * a.h0_sh;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = c0 + 4 * part + e;
        v[e] = a.state_vmajor ? p[int64_t(j) * a.h0_sr + i] : p[int64_t(i) * a.h0_sr + j];
      }
    }
    *reinterpret_cast<float4*>(&S[sidx(i, 4 * part)]) = make_float4(v[0], v[1], v[2], v[3]);
  }
  // row i of M_s, keys KP part ..; and columns c0 + 4 part .. of row i of N_s
  const auto mrow = [&](int s) { return a.mn + ((first + s) * a.Hv + h) * int64_t(K) * width + int64_t(i) * width; };
  float4 m[V4], nv = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto load = [&](int s, float4(&r)[V4], float4& nn) {
    const float4* src = reinterpret_cast<const float4*>(mrow(s) + KP * part);
#pragma unroll
    for (int e = 0; e < V4; ++e) r[e] = src[e];
    nn = *reinterpret_cast<const float4*>(mrow(s) + K + c0 + 4 * part);
  };
  if (steps > 0) load(0, m, nv);
  __syncthreads();  // S_start(0)
  for (int s = 0; s < steps; ++s) {
    float4 mn[V4], nn = nv;
    if (s + 1 < steps) load(s + 1, mn, nn);
    float acc[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) acc[j] = 0.f;
#pragma unroll
    for (int e = 0; e < V4; ++e) {
      const float mk[4] = {m[e].x, m[e].y, m[e].z, m[e].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int k = KP * part + 4 * e + c;
#pragma unroll
        for (int j4 = 0; j4 < NC / 4; ++j4) {
          const float4 s4 = *reinterpret_cast<const float4*>(&S[sidx(k, 4 * j4)]);
          acc[4 * j4] = fmaf(mk[c], s4.x, acc[4 * j4]);
          acc[4 * j4 + 1] = fmaf(mk[c], s4.y, acc[4 * j4 + 1]);
          acc[4 * j4 + 2] = fmaf(mk[c], s4.z, acc[4 * j4 + 2]);
          acc[4 * j4 + 3] = fmaf(mk[c], s4.w, acc[4 * j4 + 3]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NC; ++j) {  // the four parts of row i are lanes 4 (i % 8) .. + 3 of one warp
      acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 1);
      acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 2);
    }
    float4 out = nv;  // + N_s
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (q == part) out.x += acc[4 * q], out.y += acc[4 * q + 1], out.z += acc[4 * q + 2], out.w += acc[4 * q + 3];
    __syncthreads();  // every read of S for this step is done
    *reinterpret_cast<float4*>(&S[sidx(i, 4 * part)]) = out;
    *reinterpret_cast<float4*>(mrow(s) + K + c0 + 4 * part) = out;
    __syncthreads();  // S_start(s + 1) complete
    if (s + 1 < steps) {
#pragma unroll
      for (int e = 0; e < V4; ++e) m[e] = mn[e];
      nv = nn;
    }
  }
}

ChunkKernelArgs make_args(const ChunkFwdParams& p, const ChunkDims& d) {
  ChunkKernelArgs a{};
  a.q = p.q.data, a.k = p.k.data, a.v = p.v.data;
  a.q_sb = p.q.strides[0], a.q_st = p.q.strides[1], a.q_sh = p.q.strides[2];
  a.k_sb = p.k.strides[0], a.k_st = p.k.strides[1], a.k_sh = p.k.strides[2];
  a.v_sb = p.v.strides[0], a.v_st = p.v.strides[1], a.v_sh = p.v.strides[2];
  if (p.g.defined()) {
    a.g = p.g.data, a.g_dtype = int32_t(p.g.dtype);
    a.g_sb = p.g.strides[0], a.g_st = p.g.strides[1], a.g_sh = p.g.strides[2];
  }
  if (p.beta.defined()) {
    a.beta = p.beta.data, a.b_dtype = int32_t(p.beta.dtype);
    a.b_sb = p.beta.strides[0], a.b_st = p.beta.strides[1], a.b_sh = p.beta.strides[2];
  }
  if (p.A_log.defined()) a.A_log = p.A_log.data, a.alog_s = p.A_log.strides[0], a.alog_dtype = int32_t(p.A_log.dtype);
  if (p.dt_bias.defined())
    a.dt_bias = p.dt_bias.data, a.dtb_s = p.dt_bias.strides[0], a.dtb_dtype = int32_t(p.dt_bias.dtype);
  if (p.initial_state.defined()) {
    a.h0 = static_cast<const float*>(p.initial_state.data);
    a.h0_sn = p.initial_state.strides[0], a.h0_sh = p.initial_state.strides[1], a.h0_sr = p.initial_state.strides[2];
  }
  a.o = p.o.data;
  a.o_sb = p.o.strides[0], a.o_st = p.o.strides[1], a.o_sh = p.o.strides[2];
  if (p.final_state.defined()) {
    a.ht = static_cast<float*>(p.final_state.data);
    a.ht_sn = p.final_state.strides[0], a.ht_sh = p.final_state.strides[1], a.ht_sr = p.final_state.strides[2];
  }
  if (p.state_checkpoints.defined() && p.checkpoint_interval > 0 && d.num_checkpoints > 0) {
    a.ckpt = static_cast<float*>(p.state_checkpoints.data);
    a.ck_sn = p.state_checkpoints.strides[0], a.ck_sc = p.state_checkpoints.strides[1];
    a.ck_sh = p.state_checkpoints.strides[2], a.ck_sr = p.state_checkpoints.strides[3];
    a.ckpt_interval = p.checkpoint_interval;
    a.num_ckpt = d.num_checkpoints;
  }
  if (p.cu_seqlens.defined()) a.cu_seqlens = p.cu_seqlens.data, a.cu_i64 = p.cu_seqlens.dtype == DType::i64;
  a.B = d.B, a.T = d.T, a.N = d.N, a.Hqk = d.Hqk, a.Hv = d.Hv, a.V = d.V;
  a.group = int32_t(d.group());
  a.scale = d.scale;
  a.l2norm = p.use_qk_l2norm_in_kernel;
  a.gate_in_kernel = p.gate.use_gate_in_kernel;
  a.beta_sigmoid = p.gate.use_beta_sigmoid_in_kernel;
  a.beta_mult = p.gate.allow_neg_eigval ? 2.f : 1.f;
  a.sp_beta = p.gate.softplus_beta;
  a.sp_threshold = p.gate.softplus_threshold;
  a.state_vmajor = p.state_layout == StateLayout::v_major;
  a.mode = kModeForward;
  return a;
}

// The state pass over (items, Hv, tiles): tiles = V / 64 (forward) or (K + V) / 64 (summary).
int launch_state(const ChunkKernelArgs& a, ChunkStatePass pass, bool bf16, int64_t K, int64_t items, int64_t tiles,
                 void* stream) {
  if (pass == ChunkStatePass::wgmma)
    return bf16 ? launch_chunk_state_wg_bf16(a, items, tiles, stream)
                : launch_chunk_state_wg_f16(a, items, tiles, stream);
  return bf16 ? launch_chunk_state_bf16(a, K, items, tiles, stream)
              : launch_chunk_state_f16(a, K, items, tiles, stream);
}

}  // namespace

Status chunk_fwd(const ChunkFwdParams& p, const ChunkDims& d, const ChunkFwdPlan& pl, void* ws, size_t ws_bytes,
                 void* stream) {
  if (d.N == 0 || d.Hv == 0) return Status::OK();
  if (pl.workspace_bytes > 0 && (ws == nullptr || ws_bytes < pl.workspace_bytes))
    return FGDN_INVALID("chunk_fwd: workspace: expected at least ", pl.workspace_bytes, " bytes, got ", ws_bytes);
  const bool bf16 = p.q.dtype == DType::bf16;
  ChunkKernelArgs a = make_args(p, d);
  const int64_t vt = d.V / kTile, kt = d.K / kTile;
  auto* base = static_cast<unsigned char*>(ws);
  // the intra-chunk pass: every (chunk, value head) record
  a.rec = base + pl.ws_rec;
  a.rec_slots = pl.rec_slots;
  a.nchunk_b = ceil_div(d.T, kChunk);
  // the split's summaries shrink to their decay windows: the intra pass tabulates every chunk's log decay
  if (pl.split) a.dec = reinterpret_cast<float*>(base + pl.ws_dec);
  FGDN_CUDA_CHECK(static_cast<cudaError_t>(bf16 ? launch_chunk_intra_bf16(a, d.K, stream)
                                                : launch_chunk_intra_f16(a, d.K, stream)));
  if (!pl.split) {
    FGDN_CUDA_CHECK(static_cast<cudaError_t>(launch_state(a, pl.state_pass, bf16, d.K, d.N, vt, stream)));
    return Status::OK();
  }
  auto* items = reinterpret_cast<ChunkWorkItem*>(base + pl.ws_items);
  auto* seq_first = reinterpret_cast<int32_t*>(base + pl.ws_seq_first);
  a.items = items;
  a.items_cap = pl.cap;
  a.mn = reinterpret_cast<float*>(base + pl.ws_mn);
  const auto st = static_cast<cudaStream_t>(stream);

  chunk_index_kernel<<<1, 1024, 0, st>>>(a.cu_seqlens, a.cu_i64, d.N, d.T, pl.seg_chunks, items, pl.cap, seq_first);
  FGDN_CUDA_CHECK(cudaGetLastError());
  a.mode = kModeSummary;
  FGDN_CUDA_CHECK(static_cast<cudaError_t>(launch_state(a, pl.state_pass, bf16, d.K, pl.cap, kt + vt, stream)));
  constexpr int kScanCols = 16;  // 4 threads per row, 4 columns each
  const dim3 sgrid(unsigned(d.N), unsigned(d.Hv), unsigned(d.V / kScanCols));
  if (d.K == 64)
    chunk_scan_kernel<64, kScanCols><<<sgrid, 4 * 64, 0, st>>>(a, seq_first);
  else
    chunk_scan_kernel<128, kScanCols><<<sgrid, 4 * 128, 0, st>>>(a, seq_first);
  FGDN_CUDA_CHECK(cudaGetLastError());
  a.mode = kModeForwardSplit;
  FGDN_CUDA_CHECK(static_cast<cudaError_t>(launch_state(a, pl.state_pass, bf16, d.K, pl.cap, vt, stream)));
  return Status::OK();
}

}  // namespace flashgdn::cuda
