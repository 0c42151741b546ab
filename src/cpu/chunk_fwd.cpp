// CPU chunk_fwd: the recurrence or the chunked form (p.exec.cpu_algo) over every (sequence, value head),
// in fp32 or fp64 (p.exec.cpu_fp64). Threads split the (sequence, value head) pairs.
#include <vector>

#include "api/internal.hpp"
#include "cpu/cpu_common.hpp"
#include "cpu/gdn_core.hpp"

namespace flashgdn::cpu {
namespace {

template <class R>
void run_head(const ChunkFwdParams& p, const ChunkDims& d, int64_t n, int64_t h) {
  const SeqRange sr = seq_range(p.cu_seqlens, d, n);
  if (sr.len == 0 && !p.final_state.defined()) return;  // nothing to write: allocate nothing
  const int64_t K = d.K, V = d.V;
  std::vector<R> S(static_cast<size_t>(K * V), R(0));  // absent h0 -> S0 = 0 (exactly the zero-state result)
  if (p.initial_state.defined()) state_ref(p.initial_state, p.state_layout, n, h).load(S.data(), K, V);

  HeadInputs<R> in;
  load_head(p, d, sr, h, &in);
  std::vector<R> o(static_cast<size_t>(sr.len * V));
  const int64_t interval = p.checkpoint_interval;
  auto on_state = [&](int64_t done, const R* St) {
    if (!p.state_checkpoints.defined() || interval <= 0 || done % interval != 0) return;
    const int64_t c = done / interval - 1;  // entry c = state after (c + 1) * interval tokens
    if (c < d.num_checkpoints) state_ref(p.state_checkpoints, p.state_layout, n, c, h).store(St, K, V);
  };
  forward_head<R>(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), sr.len, K, V, R(d.scale),
                  p.exec.cpu_algo, p.chunk_size, S.data(), o.data(), on_state);

  Strided out(p.o);
  for (int64_t t = 0; t < sr.len; ++t)
    for (int64_t j = 0; j < V; ++j) out.set(double(o[t * V + j]), sr.b, sr.start + t, h, j);
  // A length-0 sequence leaves S == h0 (or 0) untouched, so hT == h0 exactly.
  if (p.final_state.defined()) state_ref(p.final_state, p.state_layout, n, h).store(S.data(), K, V);
}

template <class R>
void run(const ChunkFwdParams& p, const ChunkDims& d) {
  parallel_for(d.N * d.Hv, p.exec.cpu_threads, [&](int64_t item) { run_head<R>(p, d, item / d.Hv, item % d.Hv); });
}

}  // namespace

Status chunk_fwd(const ChunkFwdParams& p, const ChunkDims& d) {
  if (p.exec.cpu_algo == CpuAlgo::chunked && p.chunk_size <= 0)
    return FGDN_INVALID("chunk_fwd: chunk_size: expected a positive chunk size, got ", p.chunk_size);
  if (p.state_checkpoints.defined() && p.checkpoint_interval <= 0)
    return FGDN_INVALID("chunk_fwd: checkpoint_interval: expected a positive interval, got ", p.checkpoint_interval);
  // The chunked form sees the state only at chunk ends, so checkpoints must fall on them.
  if (p.exec.cpu_algo == CpuAlgo::chunked && p.state_checkpoints.defined() && p.checkpoint_interval % p.chunk_size != 0)
    return FGDN_INVALID("chunk_fwd: checkpoint_interval: expected a multiple of chunk_size ", p.chunk_size, ", got ",
                        p.checkpoint_interval);
  // No token and no state to write (o, state_checkpoints empty; final_state absent): return before touching
  // the N * Hv (sequence, head) pairs, whose count an empty problem does not bound.
  if (d.B * d.T == 0 && !p.final_state.defined()) return Status::OK();
  with_compute_type(p.exec, [&](auto r) { run<decltype(r)>(p, d); });
  return Status::OK();
}

}  // namespace flashgdn::cpu
