// CPU recurrent (gdn-math §8): decode, multi-token decode and speculative verify on a state pool, or the
// initial_state / final_state contract without a pool; and recurrent_commit (§8.2 B). Row semantics are the
// ones documented above RecurrentParams in flashgdn.hpp. Every index is range-checked here, so no value of
// state_indices, num_accepted_tokens, intermediate_indices or cu_seqlens reads or writes out of bounds.
#include <vector>

#include "api/internal.hpp"
#include "cpu/cpu_common.hpp"
#include "cpu/gdn_core.hpp"

namespace flashgdn::cpu {
namespace {

bool slot_valid(int64_t slot, int64_t slots, bool null_slot_is_invalid) {
  return slot >= 0 && slot < slots && !(null_slot_is_invalid && slot == 0);
}

template <class R>
void run_head(const RecurrentParams& p, const RecurrentDims& d, int64_t n, int64_t h) {
  const SeqRange sr = seq_range(p.cu_seqlens, d, n);
  const int64_t K = d.K, V = d.V, L = sr.len;
  const bool pool = p.state_pool.defined();
  if (L == 0 && (pool || !p.final_state.defined())) return;  // a length-0 row writes nothing: allocate nothing
  const bool two_d = pool && p.state_indices.defined() && p.state_indices.ndim == 2;
  Strided idx(p.state_indices);

  std::vector<R> S(static_cast<size_t>(K * V), R(0));
  if (!pool) {
    if (p.initial_state.defined()) state_ref(p.initial_state, p.state_layout, n, h).load(S.data(), K, V);
    if (L == 0) {  // hT = h0 (or 0), as in chunk_fwd
      if (p.final_state.defined()) state_ref(p.final_state, p.state_layout, n, h).store(S.data(), K, V);
      return;
    }
  }
  if (L == 0) return;  // a length-0 row touches nothing

  // Start slot; an invalid row writes zero outputs and nothing else.
  int64_t slot = n;
  bool valid = true;
  if (pool) {
    if (two_d) {
      const int64_t a = p.num_accepted_tokens.defined() ? Strided(p.num_accepted_tokens).index(n) : 1;
      valid = a >= 1 && a <= d.T_max;
      slot = valid ? idx.index(n, a - 1) : -1;
    } else if (p.state_indices.defined()) {
      slot = idx.index(n);
    }
    valid = valid && slot_valid(slot, d.slots, p.null_slot_is_invalid);
  }
  Strided o(p.o);
  if (!valid) {
    for (int64_t t = 0; t < L; ++t)
      for (int64_t j = 0; j < V; ++j) o.set(0.0, sr.b, sr.start + t, h, j);
    return;
  }
  // The whole start state is loaded before any store: with 2-D indices the slot read (column a - 1) is
  // overwritten by this row at token a - 1.
  if (pool) state_ref(p.state_pool, p.state_layout, slot, h).load(S.data(), K, V);

  int64_t buf = -1;
  if (p.intermediate_states.defined()) {
    buf = p.intermediate_indices.defined() ? Strided(p.intermediate_indices).index(n) : n;
    if (buf < 0 || buf >= d.n_buf) buf = -1;  // an invalid buffer index skips the intermediate writes
  }

  HeadInputs<R> in;
  load_head(p, d, sr, h, &in);
  std::vector<R> ot(static_cast<size_t>(V)), u(static_cast<size_t>(V));
  for (int64_t t = 0; t < L; ++t) {
    recurrent_step(S.data(), &in.q[t * K], &in.k[t * K], &in.v[t * V], in.g[t], in.beta[t], R(d.scale), K, V, ot.data(),
                   u.data());
    for (int64_t j = 0; j < V; ++j) o.set(double(ot[j]), sr.b, sr.start + t, h, j);
    if (two_d && p.commit && t < d.T_max) {  // tokens beyond T_max write nothing
      const int64_t st = idx.index(n, t);
      if (slot_valid(st, d.slots, p.null_slot_is_invalid))
        state_ref(p.state_pool, p.state_layout, st, h).store(S.data(), K, V);
    }
    if (buf >= 0 && t < d.T_buf)  // tokens beyond T_buf write nothing
      state_ref(p.intermediate_states, p.state_layout, buf, t, h).store(S.data(), K, V);
  }
  if (pool && !two_d && p.commit) state_ref(p.state_pool, p.state_layout, slot, h).store(S.data(), K, V);
  if (!pool && p.final_state.defined()) state_ref(p.final_state, p.state_layout, n, h).store(S.data(), K, V);
}

}  // namespace

Status recurrent(const RecurrentParams& p, const RecurrentDims& d) {
  const int64_t Hv = d.Hv;
  // No token and no final_state to write (without a pool): return before touching the N * Hv (row, head) pairs.
  if (d.B * d.T == 0 && (p.state_pool.defined() || !p.final_state.defined())) return Status::OK();
  with_compute_type(p.exec, [&](auto r) {
    parallel_for(d.N * Hv, p.exec.cpu_threads, [&](int64_t it) { run_head<decltype(r)>(p, d, it / Hv, it % Hv); });
  });
  return Status::OK();
}

// pool[state_indices[n]] = intermediate_states[intermediate_indices[n], num_accepted_tokens[n] - 1] for rows
// with a valid slot, a valid buffer entry and a count in [1, T_buf]. The pool and the buffer share one state
// layout, so the copy follows the pool's last two dims whatever they are.
Status recurrent_commit(const RecurrentCommitParams& p, const CommitDims& d) {
  const TensorView& pool = p.state_pool;
  const TensorView& inter = p.intermediate_states;
  const int64_t rows = pool.shape[pool.ndim - 2], cols = pool.shape[pool.ndim - 1];
  Strided pl(pool), ib(inter), idx(p.state_indices), ii(p.intermediate_indices), na(p.num_accepted_tokens);
  parallel_for(d.N, p.exec.cpu_threads, [&](int64_t n) {
    const int64_t slot = idx.index(n);
    const int64_t buf = ii.present ? ii.index(n) : n;
    const int64_t a = na.index(n);
    if (!slot_valid(slot, d.slots, p.null_slot_is_invalid) || buf < 0 || buf >= d.n_buf || a < 1 || a > d.T_buf) return;
    for (int64_t h = 0; h < d.Hv; ++h)
      for (int64_t x = 0; x < rows; ++x)
        for (int64_t y = 0; y < cols; ++y) pl.set(ib.get<double>(buf, a - 1, h, x, y), slot, h, x, y);
  });
  return Status::OK();
}

}  // namespace flashgdn::cpu
