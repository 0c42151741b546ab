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
#include "cuda/chunk_fwd/chunk_split.cuh"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/tma.cuh"

namespace flashgdn::cuda {

namespace {

constexpr int64_t kChunk = kChunkFwdChunk;
constexpr int64_t kTile = kChunkFwdTile;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
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
  set_chunk_common(a, p, d);
  a.V = d.V;
  a.mode = kModeForward;
  return a;
}

// The wgmma state pass's tensor maps of q, k, v and o (K = V = 128), once per call: every state-pass launch of the call
// (the split's summary and forward passes) reads the same tensors. on = 0 where the driver cannot take them.
ChunkStateMaps encode_state_maps(const ChunkKernelArgs& a) {
  static_assert(sizeof(CUtensorMap) == sizeof(ChunkStateMaps::q) && alignof(CUtensorMap) == 128);
  ChunkStateMaps m{};
  auto* q = reinterpret_cast<CUtensorMap*>(m.q);
  auto* k = reinterpret_cast<CUtensorMap*>(m.k);
  auto* v = reinterpret_cast<CUtensorMap*>(m.v);
  auto* o = reinterpret_cast<CUtensorMap*>(m.o);
  const uint32_t box[4] = {64, 64, 1, 1};  // 64 elements (128 bytes) x 64 tokens of one head
  m.on = tma::encode_4d_b16(q, a.q, {128, a.T, a.Hqk, a.B}, {a.q_st, a.q_sh, a.q_sb}, box) &&
         tma::encode_4d_b16(k, a.k, {128, a.T, a.Hqk, a.B}, {a.k_st, a.k_sh, a.k_sb}, box) &&
         tma::encode_4d_b16(v, a.v, {a.V, a.T, a.Hv, a.B}, {a.v_st, a.v_sh, a.v_sb}, box);
  m.o_on = a.o && tma::encode_4d_b16(o, a.o, {a.V, a.T, a.Hv, a.B}, {a.o_st, a.o_sh, a.o_sb}, box);
  return m;
}

// The state pass over (items, Hv, tiles): tiles = V / 64 (forward) or (K + V) / 64 (summary).
int launch_state(const ChunkKernelArgs& a, ChunkStatePass pass, const ChunkStateMaps& maps, bool bf16, int64_t K,
                 int64_t items, int64_t tiles, void* stream) {
  if (pass == ChunkStatePass::wgmma)
    return bf16 ? launch_chunk_state_wg_bf16(a, maps, items, tiles, stream)
                : launch_chunk_state_wg_f16(a, maps, items, tiles, stream);
  return bf16 ? launch_chunk_state_bf16(a, K, items, tiles, stream)
              : launch_chunk_state_f16(a, K, items, tiles, stream);
}

// The passes (intra, then the state pass directly or split), with every chunk's start state stored as chunk_bwd's S0
// record where s0 is set (the state pass's STATES form: no o), and chunk_bwd's A and rows records where bwd_A, bwd_rows
// are.
Status run_passes(const ChunkFwdParams& p, const ChunkDims& d, const ChunkFwdPlan& pl, void* ws, uint16_t* s0,
                  float* bwd_A, float* bwd_rows, void* stream) {
  const bool bf16 = p.q.dtype == DType::bf16;
  ChunkKernelArgs a = make_args(p, d);
  a.s0 = s0;
  a.bwd_A = bwd_A, a.bwd_rows = bwd_rows;
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
  const ChunkStateMaps maps = pl.state_pass == ChunkStatePass::wgmma ? encode_state_maps(a) : ChunkStateMaps{};
  if (!pl.split) {
    FGDN_CUDA_CHECK(static_cast<cudaError_t>(launch_state(a, pl.state_pass, maps, bf16, d.K, d.N, vt, stream)));
    return Status::OK();
  }
  auto* items = reinterpret_cast<ChunkWorkItem*>(base + pl.ws_items);
  auto* seq_first = reinterpret_cast<int32_t*>(base + pl.ws_seq_first);
  a.items = items;
  a.items_cap = pl.cap;
  a.mn = reinterpret_cast<float*>(base + pl.ws_mn);
  const auto st = static_cast<cudaStream_t>(stream);

  FGDN_CUDA_CHECK(launch_chunk_index(a.cu_seqlens, a.cu_i64, d.N, d.T, pl.seg_chunks, items, pl.cap, seq_first, st));
  a.mode = kModeSummary;
  FGDN_CUDA_CHECK(static_cast<cudaError_t>(launch_state(a, pl.state_pass, maps, bf16, d.K, pl.cap, kt + vt, stream)));
  FGDN_CUDA_CHECK(launch_chunk_scan(a, seq_first, d.K, false, st));
  a.mode = kModeForwardSplit;
  FGDN_CUDA_CHECK(static_cast<cudaError_t>(launch_state(a, pl.state_pass, maps, bf16, d.K, pl.cap, vt, stream)));
  return Status::OK();
}

}  // namespace

Status chunk_fwd(const ChunkFwdParams& p, const ChunkDims& d, const ChunkFwdPlan& pl, void* ws, size_t ws_bytes,
                 void* stream) {
  if (d.N == 0 || d.Hv == 0) return Status::OK();
  if (pl.workspace_bytes > 0 && (ws == nullptr || ws_bytes < pl.workspace_bytes))
    return FGDN_INVALID("chunk_fwd: workspace: expected at least ", pl.workspace_bytes, " bytes, got ", ws_bytes);
  return run_passes(p, d, pl, ws, nullptr, nullptr, nullptr, stream);
}

Status chunk_fwd_states(const ChunkFwdParams& p, const ChunkDims& d, const ChunkFwdPlan& pl, void* ws, uint16_t* s0,
                        float* bwd_A, float* bwd_rows, void* stream) {
  if (d.N == 0 || d.Hv == 0) return Status::OK();
  if (pl.state_pass != ChunkStatePass::wgmma || p.q.dtype != DType::bf16)
    return FGDN_ERROR(unsupported, "chunk_fwd_states: the S0 records need the wgmma state pass and bf16, got K=", d.K,
                      " V=", d.V, " ", dtype_name(p.q.dtype));
  // the intra pass's instance that writes bwd_A, bwd_rows forms no P: its records serve a state pass without o
  if (s0 == nullptr) return FGDN_ERROR(internal, "chunk_fwd_states: s0 (the S0 records) is null");
  return run_passes(p, d, pl, ws, s0, bwd_A, bwd_rows, stream);
}

}  // namespace flashgdn::cuda
