// Shared pieces of the CPU backend: strided tensor access, sequence ranges with clamped indices, the state
// layouts, the in-kernel l2norm and gate, and a small parallel-for over std::thread.
// Everything is templated on the compute type R (float by default, double for the fp64 oracle).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "api/internal.hpp"
#include "common/dtype.hpp"

namespace flashgdn::cpu {

// A TensorView read or written element by element through its strides (in elements, 64-bit offsets).
struct Strided {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t st[kMaxDims] = {};
  bool present = false;

  Strided() = default;
  explicit Strided(const TensorView& t) : data(t.data), dtype(t.dtype), present(t.defined() && t.data) {
    for (int i = 0; i < kMaxDims; ++i) st[i] = t.strides[i];
  }
  template <class... I>
  int64_t off(I... idx) const {
    int64_t o = 0, d = 0;
    ((o += int64_t(idx) * st[d++]), ...);
    return o;
  }
  template <class R, class... I>
  R get(I... idx) const {
    return R(detail::load_as_double(data, dtype, off(idx...)));
  }
  template <class... I>
  void set(double x, I... idx) const {
    detail::store_from_double(data, dtype, off(idx...), x);
  }
  template <class... I>
  int64_t index(I... idx) const {
    return detail::load_index(data, dtype, off(idx...));
  }
};

// One state S[i, j] (i: key index, j: value index) inside a tensor [..., K, V] (k_major) or [..., V, K]
// (v_major): `base` is the offset of the [K, V] / [V, K] block, si / sj the element strides of i and j.
struct StateRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t base = 0, si = 0, sj = 0;

  template <class R>
  void load(R* S, int64_t K, int64_t V) const {  // S: K-major [K, V] compute buffer
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) S[i * V + j] = R(detail::load_as_double(data, dtype, base + i * si + j * sj));
  }
  template <class R>
  void store(const R* S, int64_t K, int64_t V) const {
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        detail::store_from_double(data, dtype, base + i * si + j * sj, double(S[i * V + j]));
  }
};

// State `lead...` of a state tensor whose two last dims are the state: [lead..., K, V] or [lead..., V, K].
template <class... I>
StateRef state_ref(const TensorView& t, StateLayout layout, I... lead) {
  StateRef r;
  r.data = t.data;
  r.dtype = t.dtype;
  int64_t d = 0;
  ((r.base += int64_t(lead) * t.strides[d++]), ...);
  const int64_t s_row = t.strides[t.ndim - 2], s_col = t.strides[t.ndim - 1];
  r.si = layout == StateLayout::k_major ? s_row : s_col;
  r.sj = layout == StateLayout::k_major ? s_col : s_row;
  return r;
}

// Token range of sequence n. Fixed length: batch entry n, tokens [0, T). Varlen: batch 0, tokens
// [cu[n], cu[n+1]) with both ends clamped to [0, T] and an inverted range treated as empty, so no value of
// cu_seqlens can cause an out-of-bounds access.
struct SeqRange {
  int64_t b = 0, start = 0, len = 0;
};

inline SeqRange seq_range(const TensorView& cu_seqlens, const SeqDims& d, int64_t n) {
  if (!d.varlen) return {n, 0, d.T};
  Strided cu(cu_seqlens);
  const int64_t s = std::clamp<int64_t>(cu.index(n), 0, d.T);
  const int64_t e = std::clamp<int64_t>(cu.index(n + 1), 0, d.T);
  return {0, s, std::max<int64_t>(e - s, 0)};
}

// x <- x / sqrt(sum x^2 + eps): eps = 1e-6 inside the square root (gdn-math §1.4). Returns rho.
template <class R>
R l2norm_inplace(R* x, int64_t n) {
  R ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const R rho = R(1) / std::sqrt(ss + R(1e-6));
  for (int64_t i = 0; i < n; ++i) x[i] *= rho;
  return rho;
}

// softplus_{beta, threshold}(x) = log(1 + exp(beta x)) / beta if beta x <= threshold, else x (gdn-math §4).
template <class R>
R softplus(R x, R sp_beta, R thr) {
  const R bx = sp_beta * x;
  return bx <= thr ? std::log1p(std::exp(bx)) / sp_beta : x;
}

template <class R>
R sigmoid(R x) {
  return R(1) / (R(1) + std::exp(-x));
}

// The in-kernel gate and beta from raw projections (gdn-math §4), given neg_exp_A = -exp(A_log):
//   g = -exp(A_log) softplus_{beta, threshold}(a + dt_bias),  beta = c sigmoid(b), c = 2 with allow_neg_eigval.
template <class R>
R gate_from_raw(R a, R neg_exp_A, R dt_bias, const GateOptions& o) {
  return neg_exp_A * softplus<R>(a + dt_bias, R(o.softplus_beta), R(o.softplus_threshold));
}
template <class R>
R beta_from_raw(R b, const GateOptions& o) {
  return (o.allow_neg_eigval ? R(2) : R(1)) * sigmoid(b);
}

// Runs body(R{}) with the compute type R of the call: double with exec.cpu_fp64 (the oracle), else float.
template <class Body>
void with_compute_type(const ExecOptions& e, Body&& body) {
  if (e.cpu_fp64)
    body(double{});
  else
    body(float{});
}

// Per-token g and beta of one value head from the params: as given, or from raw projections
// (g = -exp(A_log) softplus(a + dt_bias), beta = c sigmoid(b)); absent g -> 0, absent beta -> 1.
template <class R>
struct GateReader {
  Strided g, beta;
  GateOptions opt;
  R neg_exp_A = 0, dt_bias = 0;

  GateReader(const TensorView& g_t, const TensorView& beta_t, const TensorView& A_log, const TensorView& dtb,
             const GateOptions& o, int64_t h)
      : g(g_t), beta(beta_t), opt(o) {
    if (opt.use_gate_in_kernel) {
      neg_exp_A = -std::exp(Strided(A_log).get<R>(h));
      if (dtb.defined()) dt_bias = Strided(dtb).get<R>(h);
    }
  }
  R gate(int64_t b, int64_t t, int64_t h) const {
    if (!g.present) return R(0);
    const R x = g.get<R>(b, t, h);
    if (!opt.use_gate_in_kernel) return x;
    return gate_from_raw<R>(x, neg_exp_A, dt_bias, opt);
  }
  R write_strength(int64_t b, int64_t t, int64_t h) const {
    if (!beta.present) return R(1);
    const R x = beta.get<R>(b, t, h);
    if (!opt.use_beta_sigmoid_in_kernel) return x;
    return beta_from_raw<R>(x, opt);
  }
};

// Runs fn(item) for item in [0, items) on `threads` std::threads (0: hardware concurrency). Items are
// independent; which thread runs which item does not change any result. An exception thrown by fn (e.g. bad_alloc)
// stops the remaining items and is rethrown on the calling thread after every worker has joined (an exception
// escaping a std::thread would call std::terminate); if the system cannot start a thread, the threads already
// started and the caller do the work.
template <class Fn>
void parallel_for(int64_t items, int32_t threads, Fn&& fn) {
  int64_t nt = threads > 0 ? threads : int64_t(std::max(1u, std::thread::hardware_concurrency()));
  nt = std::min(nt, items);
  if (nt <= 1) {
    for (int64_t i = 0; i < items; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception, written once under the `failed` exchange
  auto worker = [&] {
    try {
      for (int64_t i = next++; i < items && !failed.load(std::memory_order_relaxed); i = next++) fn(i);
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(nt - 1));
  try {
    for (int64_t t = 0; t + 1 < nt; ++t) pool.emplace_back(worker);
  } catch (const std::system_error&) {  // no more threads: run with those we have
  }
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// Inputs of one (sequence, value head) pair in compute type R: q, k normalized when requested (the scale is
// applied by the cores), g and beta resolved.
template <class R>
struct HeadInputs {
  int64_t L = 0, K = 0, V = 0;
  std::vector<R> q, k, v, g, beta;  // [L, K], [L, K], [L, V], [L], [L]
};

template <class R, class P>
void load_head(const P& p, const SeqDims& d, const SeqRange& sr, int64_t h, HeadInputs<R>* in) {
  const int64_t L = sr.len, K = d.K, V = d.V, i_qk = h / d.group();
  in->L = L;
  in->K = K;
  in->V = V;
  in->q.assign(static_cast<size_t>(L * K), R(0));
  in->k.assign(static_cast<size_t>(L * K), R(0));
  in->v.assign(static_cast<size_t>(L * V), R(0));
  in->g.assign(static_cast<size_t>(L), R(0));
  in->beta.assign(static_cast<size_t>(L), R(1));
  Strided q(p.q), k(p.k), v(p.v);
  GateReader<R> gr(p.g, p.beta, p.A_log, p.dt_bias, p.gate, h);
  for (int64_t t = 0; t < L; ++t) {
    const int64_t tt = sr.start + t;
    for (int64_t i = 0; i < K; ++i) {
      in->q[t * K + i] = q.get<R>(sr.b, tt, i_qk, i);
      in->k[t * K + i] = k.get<R>(sr.b, tt, i_qk, i);
    }
    for (int64_t j = 0; j < V; ++j) in->v[t * V + j] = v.get<R>(sr.b, tt, h, j);
    if (p.use_qk_l2norm_in_kernel) {
      l2norm_inplace(&in->q[t * K], K);
      l2norm_inplace(&in->k[t * K], K);
    }
    in->g[t] = gr.gate(sr.b, tt, h);
    in->beta[t] = gr.write_strength(sr.b, tt, h);
  }
}

}  // namespace flashgdn::cpu
