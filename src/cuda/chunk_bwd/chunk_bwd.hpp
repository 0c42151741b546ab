// Internal interface of the CUDA chunked backward (src/cuda/chunk_bwd/, gdn-math §7). Plain C++.
//
// Five passes (docs/chunk_bwd.md):
//   1. prep   (every chunk and value head in parallel): gamma, the row factors, A = (I + L)^-1, W, U0 and the
//             local output gradient dU = scale P^T dO into workspace;
//   2. state  (per sequence, value head, 32 state columns; serial over chunks): the chunk start states S0 and
//             U = U0 - W S0 (on wgmma at K = V = 128, else mma.sync);
//   3. dstate (per sequence, value head, 32 columns; serial, reverse): the chunk-end state gradients dS,
//             dU += Kbar dS, and dh0 (on wgmma at K = V = 128, else mma.sync);
//      (2 and 3 may each run as the segment split of gdn-math §6: summaries, a scan, all segments in parallel;
//      ChainMode below, plan_chunk_bwd decides);
//   4. grads  (every chunk and value head; on wgmma at K = V = 128 with bf16 inputs, else persistent mma.sync CTAs):
//             dq, dk (per value head), dv, dbeta, dgamma -> dg (§7.3);
//   5. small token kernels: the GQA sums and the l2norm chain (§7.5-7.6), the beta and gate chains (§7.7).
// Every reduction runs in a fixed order: the gradients are bitwise reproducible.
#pragma once

#include <cstdint>

#include "cuda/chunk_fwd/chunk_fwd.hpp"

namespace flashgdn::cuda {

struct ChunkBwdArgs {
  // ---- inputs (q, k, v, d_o: bf16 or f16, last dim contiguous; dtype `io_dtype`)
  const void* q;  // [B, T, Hqk, K]
  int64_t q_sb, q_st, q_sh;
  const void* k;  // [B, T, Hqk, K]
  int64_t k_sb, k_st, k_sh;
  const void* v;  // [B, T, Hv, V]
  int64_t v_sb, v_st, v_sh;
  const void* d_o;  // [B, T, Hv, V]
  int64_t do_sb, do_st, do_sh;
  int32_t io_dtype;  // DType of q, k, v, d_o, dq, dk, dv
  const void* g;     // [B, T, Hv] g (or raw a with gate_in_kernel); may be null (g = 0)
  int64_t g_sb, g_st, g_sh;
  int32_t g_dtype;
  const void* beta;  // [B, T, Hv] beta (or raw b with beta_sigmoid); may be null (beta = 1)
  int64_t b_sb, b_st, b_sh;
  int32_t b_dtype;
  const void* A_log;  // [Hv]; may be null
  int64_t alog_s;
  int32_t alog_dtype;
  const void* dt_bias;  // [Hv]; may be null
  int64_t dtb_s;
  int32_t dtb_dtype;
  const float* h0;  // [N, Hv, K, V] / [N, Hv, V, K]; may be null (zeros)
  int64_t h0_sn, h0_sh, h0_sr;
  const float* dht;  // [N, Hv, K, V] / [N, Hv, V, K]; may be null (zeros)
  int64_t dht_sn, dht_sh, dht_sr;
  const void* cu_seqlens;  // [N + 1] i32 / i64; may be null (fixed length)
  int32_t cu_i64;

  // ---- outputs
  void* dq;  // [B, T, Hqk, K] io_dtype
  int64_t dq_sb, dq_st, dq_sh;
  void* dk;  // [B, T, Hqk, K] io_dtype
  int64_t dk_sb, dk_st, dk_sh;
  void* dv;  // [B, T, Hv, V] io_dtype
  int64_t dv_sb, dv_st, dv_sh;
  void* dg;  // [B, T, Hv]; may be null
  int64_t dg_sb, dg_st, dg_sh;
  int32_t dg_dtype;
  void* dbeta;  // [B, T, Hv]; may be null
  int64_t db_sb, db_st, db_sh;
  int32_t db_dtype;
  float* dh0;  // [N, Hv, K, V] / [N, Hv, V, K]; may be null
  int64_t dh0_sn, dh0_sh, dh0_sr;
  float* dA_log;  // [Hv]; may be null
  int64_t dalog_s;
  float* ddt_bias;  // [Hv]; may be null
  int64_t dddt_s;

  // ---- dims and options
  int64_t B, T, N, Hqk, Hv;
  int32_t group;  // Hv / Hqk
  float scale;
  int32_t l2norm, gate_in_kernel, beta_sigmoid;
  float beta_mult;  // 1, or 2 with allow_neg_eigval
  float sp_beta, sp_threshold;
  int32_t state_vmajor;
  int64_t nchunk_b;      // ceil(T / 64)
  int64_t slots;         // chunk slots: B ceil(T / 64) (fixed length) or N + ceil(T / 64) (varlen)
  int32_t state_wg;      // 1: pass 2 on wgmma (chunk_bwd_state_wg.cuh; K = V = 128), 0: on mma.sync (plan_chunk_bwd)
  int32_t state_stages;  // the wgmma pass 2's input stages: 2 (one CTA per SM) or 1 (two CTAs per SM)
  // pass 3 on wgmma (chunk_bwd_dstate_wg.cuh; K = V = 128) with 2 or 1 input stages, 0: on mma.sync (plan_chunk_bwd)
  int32_t dstate_wg;
  int32_t grads_wg;  // 1: pass 4 on wgmma (chunk_bwd_grads_wg.cuh; K = V = 128, bf16), 0: on mma.sync (plan_chunk_bwd)
  // pass 4 fused with the reverse chain (chunk_bwd_fused.cuh; K = V = 128, bf16): one CTA per (walk of fused_walk
  // chunk slots, value head); 0: grads_wg decides
  int32_t fused_walk;
  // with fused_walk and GQA: the fused pass's CTAs of a q/k head's value heads pair up, this many (the group; the
  // plan takes 2), and rank 0 sums their dq, dk (in head order) and runs the l2norm chain: no pass 5a; 0: pass 5a
  // sums them
  int32_t fused_cluster;
  // [1] with fused_walk: prep sets it where a chunk's beta exceeds 1; then pass 4 on wgmma runs instead of the fused
  // pass (each kernel reads it and returns at once when it is not its turn) and the chains store every record
  int32_t* beta_big;
  // With fused_walk: [2 + 2 units + 8 walks units (pairs only)], zeroed ahead of the passes (units = Hv / cs, cs =
  // max(fused_cluster, 1), unit u the value heads u cs .. u cs + cs - 1; walks = ceil(slots / fused_walk)): [0] the
  // queue's length, [1] the fused pass's tickets taken (pairs only), [2 + u] the chain CTAs of unit u that have
  // ended, [2 + units + p] u + 1 for the p-th unit whose chain CTAs have all ended (0: none yet), then per (walk,
  // unit) pair and warp the count of dq / dk row exchanges published (chunk_bwd_fused.cuh)
  int32_t* order;
  // 1: the fused pass follows the chains (ChunkBwdPlan::fused_follows): the chains fill order's queue and the fused
  // pass takes its units from it; 0: unit p / walks for pair p
  int32_t follow;
  // 1: S0 comes from chunk_fwd's passes (launched between prep and the chains, ChunkBwdPlan::states_from_fwd), whose
  // intra pass writes the A and rows records: prep runs only where a chain reads W, and pass 2 runs and prep forms U0
  // only where the fused pass does not (beta_big: the wgmma pass 4 reads pass 2's U)
  int32_t s0_from_fwd;
  // [Hv, slots] with the plan's decay_window (the fused pass, the dstate chain on wgmma, exec.chunk_bwd_window 0):
  // prep's decay table (gamma_n of a chunk whose transitions are contractions times e^g: unit keys, every beta in
  // [0, 2]; else kDecayUnbounded), by which the dstate chain takes each gradient the fused pass reads from its decay
  // window (docs/chunk_bwd.md "Decay window of the reverse chain"); may be null: every chunk of the chain
  float* dec;
  // heads of the dq / dk scratch: Hqk where pass 4 on wgmma sums a q/k head's value heads itself (in head order, the
  // sum pass 5a forms otherwise), Hv where pass 4 on mma.sync writes them per value head
  int32_t dqk_heads;

  // ---- workspace (fp32; W, S0 bf16), one record per (chunk slot, value head); rows past a chunk's end are zero
  float* rows;   // [slots, Hv, 4, 64]: gamma (cumsum of g), rho_q, rho_k (l2norm factors, 1 without), beta
  float* A;      // [slots, Hv, 64, 64]  A = (I + L)^-1 as bf16 hi [64][64], then lo [64][64]
  uint16_t* W;   // [slots, Hv, 2, 64, K]  W = A diag(beta e^gamma) K as bf16 hi [64][K], then lo [64][K]
  float* U;      // [slots, Hv, 64, V]   U0 = A diag(beta) V (prep), then U = U0 - W S0 (state pass)
  float* dU;     // [slots, Hv, 64, V]   scale P^T dO (prep), then + Kbar dS (dstate pass)
  uint16_t* S0;  // [slots, Hv, K, V]   chunk start states, K-major, bf16 (a GEMM operand only, gdn-math §10.2)
  float* dS;     // [slots, Hv, K, V]    gradients w.r.t. the chunk-end states, K-major
  float* dqh;    // [B * T * dqk_heads, K]  dq w.r.t. the normalized q, per value head or summed over a q/k head's
                 //                         value heads (dqk_heads); never written on slack rows
  float* dkh;    // [B * T * dqk_heads, K]  dk, the same
  float* dgh;    // [B * T * Hv]         dg w.r.t. the resolved g
  float* dbh;    // [B * T * Hv]         dbeta w.r.t. the resolved beta

  // ---- the chains' segment split (gdn-math §6; workspace after the above, plan_chunk_bwd): null / 0 unsplit
  int32_t chain_mode;          // ChainMode of the chain launch at hand
  const ChunkWorkItem* items;  // [items_cap] segments (chunk_index_kernel)
  int32_t* seq_first;          // [N] each sequence's first item
  int64_t items_cap;
  int64_t seg_chunks;         // chunks per segment
  float* mn;                  // [items_cap, Hv, K, K + V] summaries [M | N], then the scan's states (the forward chain)
  float* mn_rev;              // the same for the reverse chain: mn, or a buffer of its own when both chains run at once
  int32_t chains_concurrent;  // ChainsForm: passes 2 and 3 one after the other, or in one launch per phase
};

// How passes 2 and 3 run (ChunkBwdArgs::chains_concurrent, plan_chunk_bwd): one after the other, or at K = V = 128 in
// one launch per phase with one input stage each, a CTA per chain (two CTAs per SM) or one CTA of a warpgroup per chain
// (docs/chunk_bwd.md "Both chains at once").
enum ChainsForm : int32_t { kChainsSerial = 0, kChainsTwoCtas = 1, kChainsOneCta = 2 };

// How a chain kernel (passes 2, 3) walks: every chunk of a sequence (grid (N, Hv, V / 32)); one segment from its
// start state (grid (items_cap, Hv, V / 32)); or a segment's summary [M | N] from the augmented start [I | 0]
// without the inhomogeneous terms in the M columns (grid (items_cap, Hv, (K + V) / 32)).
enum ChainMode : int32_t { kChainWhole = 0, kChainSplit = 1, kChainSummary = 2 };

// Which of the chunk passes a launch runs: pass 0 and prep (kPassesFront), the rest (kPassesBack), or all; with
// s0_from_fwd chunk_fwd's state pass runs between the two, on the records prep writes.
enum PassRange : int32_t { kPassesFront = 1, kPassesBack = 2, kPassesAll = 3 };

// The chunk passes, per 16-bit input type (chunk_bwd_{bf16,f16}.cu). Return a cudaError_t as int.
// K, V in {64, 128}.
int launch_chunk_bwd_passes_bf16(const ChunkBwdArgs& a, int64_t K, int64_t V, PassRange r, void* stream);
int launch_chunk_bwd_passes_f16(const ChunkBwdArgs& a, int64_t K, int64_t V, PassRange r, void* stream);
// Resident CTAs per SM of the wgmma pass 2 (K = V = 128) with `stages` input stages (1 or 2) at its launch's shared
// memory, into *ctas (cudaOccupancyMaxActiveBlocksPerMultiprocessor: registers and shared memory as compiled; the
// tests check that the one-stage form fits two). Returns a cudaError_t as int.
int chunk_bwd_state_wg_ctas_per_sm_bf16(int stages, int* ctas);
int chunk_bwd_state_wg_ctas_per_sm_f16(int stages, int* ctas);

}  // namespace flashgdn::cuda
