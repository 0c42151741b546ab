// One plan per CUDA op: which kernels a call runs, with which tiles, grids, segment split and workspace, and why.
//
// A plan is a pure function of the validated params and the device facts (the SM count), so it is unit-tested on
// the CPU (tests/api/test_plan.cpp) and printed by <op>_plan (flashgdn.hpp). Each call builds its plan once
// (ops.cpp): the workspace check and the launch read the same plan, and a workspace query builds the same plan from
// the same params. Kernel overrides come from ExecOptions (recurrent_kernel, chunk_fwd_segments, chunk_bwd_segments,
// mixer_split); a forced kernel that cannot take the call's shape is rejected here, with the kernel's requirement in
// the message. gating and recurrent_commit have one kernel each and no choice to plan; mixer_decode's plan is its V
// split (exec.mixer_split overrides it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "api/internal.hpp"

namespace flashgdn {

struct DeviceFacts {
  int32_t sms = 0;  // streaming multiprocessors
};

// ---- chunk_fwd ------------------------------------------------------------------------------------------------
// Two passes (docs/chunk_fwd.md): the intra-chunk pass (one CTA per (chunk slot, value head): the inverse and P into
// a workspace record) and the state pass (the chain over the chunks) on wgmma where K = V = 128, on mma.sync where
// K or V is 64. With the segment split (gdn-math §6) the state pass runs twice around a scan: summaries [M | N] of
// every segment (only the decay window [0 | N] where the gates allow it, on the device), the scan of start states,
// the forward from each segment's start state.
enum class ChunkStatePass : int32_t { wgmma = 0, mma_sync = 1 };

struct ChunkFwdPlan {
  int32_t sms = 0;
  ChunkStatePass state_pass = ChunkStatePass::wgmma;
  int64_t rec_slots = 0;  // intra-pass records per value head: B ceil(T / 64) (fixed length), N + ceil(T / 64) (varlen)
  bool split = false;
  bool forced = false;     // exec.chunk_fwd_segments decided the split
  int64_t segments = 1;    // P: segments of a typical sequence
  int64_t seg_chunks = 0;  // segment length in chunks (split)
  int64_t cap = 0;         // work items: an upper bound of the number of segments over all sequences (split)
  // Workspace: [records] [items | seq_first | decay table | summaries (split)], each part 256-byte aligned.
  size_t ws_rec = 0, ws_items = 0, ws_seq_first = 0, ws_dec = 0, ws_mn = 0, workspace_bytes = 0;
  std::string why;  // the split decision
};

inline constexpr int64_t kChunkFwdChunk = 64;  // the CUDA kernels' chunk size
inline constexpr int64_t kChunkFwdTile = 64;   // state columns per value tile

Status plan_chunk_fwd(const ChunkFwdParams& p, const ChunkDims& d, const DeviceFacts& dev, ChunkFwdPlan* out);
std::string describe(const ChunkFwdPlan& pl, const ChunkDims& d);

// ---- chunk_bwd ------------------------------------------------------------------------------------------------
// The passes of docs/chunk_bwd.md. The two chains (the state pass forward over the chunks, the state-gradient pass
// in reverse) walk one CTA per (sequence, value head, 32 state columns); with the segment split (gdn-math §6) each
// runs three times: summaries [M | N] of its segments, the scan of the segment boundary states, every segment from
// its boundary state. Both chains run on wgmma where K = V = 128 (one warpgroup per CTA), on mma.sync where K or V is
// 64.
struct ChunkBwdPlan {
  int32_t sms = 0;
  ChunkStatePass state_pass = ChunkStatePass::mma_sync;   // pass 2's kernel
  ChunkStatePass dstate_pass = ChunkStatePass::mma_sync;  // pass 3's kernel
  ChunkStatePass grads_pass = ChunkStatePass::mma_sync;   // pass 4's kernel (wgmma: K = V = 128, bf16)
  // > 0: pass 4 fused with the reverse chain (K = V = 128, bf16; docs/chunk_bwd.md "Fused gradients pass"), one CTA
  // per walk of this many chunk slots and value head, dq / dk per value head (pass 5a sums them); grads_pass unused
  int32_t fused_walk = 0;
  // With fused_walk and two value heads per q/k head: their CTAs in pairs of 2, rank 0 sums their dq, dk and runs the
  // l2norm chain (no pass 5a); 0: pass 5a sums them (exec.chunk_bwd_grads = 4, or another group)
  int32_t fused_cluster = 0;
  // With fused_walk and one CTA of both chains, or the reverse chain alone on wgmma (states_from_fwd): the fused pass
  // launched as a programmatic dependent of the chains' launch, its CTAs taking their value heads in the order the
  // heads' chain CTAs end (cuda::ChunkBwdArgs::order)
  bool fused_follows = false;
  // The wgmma passes' input stages: 2 (double-buffered, one CTA per SM: the faster at one chain alone) or 1 (early
  // refill, two CTAs per SM: both chains at once, `chains`). docs/chunk_bwd.md "Pass 2 on wgmma", "Pass 3 on wgmma".
  int32_t state_stages = 2;
  int32_t dstate_stages = 2;
  // Both chains in one launch per phase (exec.chunk_bwd_chains; K = V = 128, both at one stage), so that their
  // latency-bound steps overlap on each SM: cuda::ChainsForm, kChainsTwoCtas (a CTA per chain, two per SM) or
  // kChainsOneCta (one CTA of a warpgroup per chain). 0: pass 2, then pass 3.
  int32_t chains_concurrent = 0;
  // With fused_walk and the dstate chain on wgmma (exec.chunk_bwd_window 0): prep writes a decay table, and the
  // dstate chain takes each gradient the fused pass reads (the end of a walk) or dh0 from the chunks of its decay
  // window only, from a zero gradient (docs/chunk_bwd.md "Decay window of the reverse chain")
  bool decay_window = false;
  // The chunk start states S0 (the fused pass's operand) from chunk_fwd's passes (`fwd`, its own plan and split; the
  // state pass in its STATES form: S0 records instead of o; the intra pass writing the backward's A and rows records
  // too, so that prep runs only where a chain reads W), between prep and the chains, instead of pass 2, which then
  // runs only where a beta exceeds 1 (the wgmma pass 4 reads its U records); the chains one after the other, pass 3
  // on its one-stage kernel (exec.chunk_bwd_state; docs/chunk_bwd.md "Chunk start states from the forward's state
  // pass")
  bool states_from_fwd = false;
  ChunkFwdPlan fwd;
  bool split = false;
  bool forced = false;     // exec.chunk_bwd_segments decided the split
  int64_t segments = 1;    // P: segments of a typical sequence
  int64_t seg_chunks = 0;  // segment length in chunks (split)
  int64_t cap = 0;         // work items: an upper bound of the number of segments over all sequences (split)
  // The split's workspace, after the records and scratch (cuda::chunk_bwd_workspace_size adds them):
  // [items | seq_first | summaries], offsets from its start, each part 256-byte aligned.
  size_t ws_items = 0, ws_seq_first = 0, ws_mn = 0, ws_mn_rev = 0, split_bytes = 0;  // ws_mn_rev: the reverse chain's
  std::string why;                                                                   // the split decision
};

inline constexpr int64_t kChunkBwdChainCols = 32;  // state columns per chain CTA

Status plan_chunk_bwd(const ChunkBwdParams& p, const SeqDims& d, const DeviceFacts& dev, ChunkBwdPlan* out);
// chunk_fwd's inputs of a chunk_bwd call (q, k, v, the gates, h0, cu_seqlens, the scalars; no outputs): the forward
// that recomputes the backward's chunk start states (ChunkBwdPlan::states_from_fwd)
ChunkFwdParams fwd_params_of(const ChunkBwdParams& p);
std::string describe(const ChunkBwdPlan& pl, const SeqDims& d);

// ---- recurrent ------------------------------------------------------------------------------------------------
struct RecurrentPlan {
  int32_t sms = 0;
  RecurrentKernel kernel = RecurrentKernel::direct;  // never auto_
  int32_t bv = 0;                                    // state columns per tile
  bool single_token = false;                         // rows of one token: fixed T <= 1, or varlen with T <= N
  bool forced = false;                               // exec.recurrent_kernel decided the kernel
  std::string why;
};

// The direct_pipe kernel's configuration: 2 ring stages, 128 threads per CTA.
inline constexpr int kPipeStages = 2;
inline constexpr int kPipeThreads = 128;

Status plan_recurrent(const RecurrentParams& p, const RecurrentDims& d, const DeviceFacts& dev, RecurrentPlan* out);
std::string describe(const RecurrentPlan& pl, const RecurrentDims& d);

// ---- mixer_decode ---------------------------------------------------------------------------------------------
// Two kernels (docs/mixer_decode.md): the clustered kernel, the V columns of each value head split over `split` CTAs
// (1, 2 or 4) of one thread block cluster with the other value heads of its key head, so group * split <= 8 (the
// portable cluster); and the pipe kernel, persistent CTAs that each own a key head and stream its rows' (row, value
// head) states through a ring of TMA copies (one token per row, K-major bf16 or fp32 pool, 1-D slots, no
// intermediate states, Kc <= 4).
struct MixerDecodePlan {
  // Why the plan chose as it did: describe() words it with the call's numbers, so that planning a call (every decode
  // step) formats no text.
  enum class Why : uint8_t { pipe_forced, pipe_batch, split_forced, halves, latency, cluster };
  int32_t sms = 0;
  bool pipe = false;    // the pipe kernel (else the clustered kernel with `split`)
  int32_t split = 1;    // clustered: CTAs per (row, value head), each 128 / split state columns
  bool forced = false;  // exec.mixer_kernel or exec.mixer_split decided it
  Why why = Why::latency;
};

inline constexpr int32_t kMixerMaxCluster = 8;  // CTAs of one cluster: (Hv / Hqk) * split
// The pipe kernel's configuration: 256 threads per CTA, 3 ring stages (bf16: 32 KB each, 2 CTAs per SM; fp32: 64 KB,
// 1 CTA per SM).
inline constexpr int kMixerPipeThreads = 256;
inline constexpr int kMixerPipeStages = 3;

Status plan_mixer_decode(const MixerDecodeParams& p, const MixerDims& d, const DeviceFacts& dev, MixerDecodePlan* out);
std::string describe(const MixerDecodePlan& pl, const MixerDims& d);

}  // namespace flashgdn
