// The two forward forms of the Gated Delta Rule on one (sequence, value head), compute type R:
//   * the token-by-token recurrence (gdn-math §1.2), and
//   * the chunked WY/UT form (§5): A = (I + L)^-1 by forward substitution (§5.7), masked-difference
//     exponentials selected only where r >= s (§5.8), partial last chunk with g_last at the last valid token.
// States are K-major [K, V] compute buffers; the callers translate layouts on load and store.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "flashgdn/flashgdn.hpp"

namespace flashgdn::cpu {

// One token on the state S [K, V], in place; writes o [V] when o is not null. u is scratch [V].
template <class R>
void recurrent_step(R* S, const R* q, const R* k, const R* v, R g, R beta, R scale, int64_t K, int64_t V, R* o, R* u) {
  const R alpha = std::exp(g);
  // S~ = alpha S
  for (int64_t x = 0; x < K * V; ++x) S[x] *= alpha;
  // u = beta (v - S~^T k)
  for (int64_t j = 0; j < V; ++j) u[j] = R(0);
  for (int64_t i = 0; i < K; ++i) {
    const R ki = k[i];
    const R* row = S + i * V;
    for (int64_t j = 0; j < V; ++j) u[j] += row[j] * ki;
  }
  for (int64_t j = 0; j < V; ++j) u[j] = beta * (v[j] - u[j]);
  // S = S~ + k u^T
  for (int64_t i = 0; i < K; ++i) {
    const R ki = k[i];
    R* row = S + i * V;
    for (int64_t j = 0; j < V; ++j) row[j] += ki * u[j];
  }
  if (!o) return;
  // o = scale S^T q   (post-update read)
  for (int64_t j = 0; j < V; ++j) o[j] = R(0);
  for (int64_t i = 0; i < K; ++i) {
    const R qi = q[i];
    const R* row = S + i * V;
    for (int64_t j = 0; j < V; ++j) o[j] += row[j] * qi;
  }
  for (int64_t j = 0; j < V; ++j) o[j] *= scale;
}

// The S0-independent quantities of one chunk of n <= C rows (§5.1, §5.3).
template <class R>
struct ChunkPrep {
  int64_t n = 0;
  std::vector<R> gam;  // [n]     gamma_r = sum_{j <= r} g_j (within the chunk only)
  std::vector<R> D;    // [n, n]  exp(gamma_r - gamma_s) for r >= s, exactly 0 above the diagonal
  std::vector<R> A;    // [n, n]  (I + L)^-1, unit lower triangular
  std::vector<R> W;    // [n, K]  A diag(b e^gamma) K
  std::vector<R> U0;   // [n, V]  A diag(b) V
  std::vector<R> KK;   // [n, n]  k_r . k_s

  // q, k: [n, K]; v: [n, V]; g, beta: [n].
  void compute(const R* k, const R* v, const R* g, const R* beta, int64_t rows, int64_t K, int64_t V) {
    n = rows;
    gam.assign(static_cast<size_t>(n), R(0));
    D.assign(static_cast<size_t>(n * n), R(0));
    A.assign(static_cast<size_t>(n * n), R(0));
    W.assign(static_cast<size_t>(n * K), R(0));
    U0.assign(static_cast<size_t>(n * V), R(0));
    KK.assign(static_cast<size_t>(n * n), R(0));
    R acc = 0;
    for (int64_t r = 0; r < n; ++r) gam[r] = acc += g[r];
    // Never factor exp(gamma_r) exp(-gamma_s): the second factor overflows for strong gates (§5.8). The
    // difference is exponentiated only where it is <= 0 (r >= s); the rest stays an exact 0.
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) D[r * n + s] = std::exp(gam[r] - gam[s]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        R dot = 0;
        for (int64_t i = 0; i < K; ++i) dot += k[r * K + i] * k[s * K + i];
        KK[r * n + s] = KK[s * n + r] = dot;
      }
    // A = (I + L)^-1 by forward substitution, L_rs = beta_r (k_r . k_s) D_rs (s < r):
    //   A_r,: = e_r^T - sum_{s<r} L_rs A_s,:
    for (int64_t r = 0; r < n; ++r) {
      R* Ar = &A[r * n];
      Ar[r] = R(1);
      for (int64_t s = 0; s < r; ++s) {
        const R Lrs = beta[r] * KK[r * n + s] * D[r * n + s];
        const R* As = &A[s * n];
        for (int64_t c = 0; c <= s; ++c) Ar[c] -= Lrs * As[c];
      }
    }
    // W = A diag(b e^gamma) K;  U0 = A diag(b) V
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        const R a = A[r * n + s];
        const R wk = a * beta[s] * std::exp(gam[s]);
        const R wv = a * beta[s];
        for (int64_t i = 0; i < K; ++i) W[r * K + i] += wk * k[s * K + i];
        for (int64_t j = 0; j < V; ++j) U0[r * V + j] += wv * v[s * V + j];
      }
  }
};

// U = U0 - W S0 [n, V] (v_new).
template <class R>
void chunk_v_new(const ChunkPrep<R>& cp, const R* S0, int64_t K, int64_t V, R* U) {
  for (int64_t r = 0; r < cp.n; ++r) {
    R* Ur = U + r * V;
    for (int64_t j = 0; j < V; ++j) Ur[j] = cp.U0[r * V + j];
    for (int64_t i = 0; i < K; ++i) {
      const R w = cp.W[r * K + i];
      const R* row = S0 + i * V;
      for (int64_t j = 0; j < V; ++j) Ur[j] -= w * row[j];
    }
  }
}

// Output and state update of one chunk (§5.4), S in-out (S0 -> S_end); o [n, V] may be null.
//   O = scale diag(e^gamma) Q S0 + scale (Q K^T o D) U;   S_end = e^{gamma_n} S0 + Kbar^T U
template <class R>
void chunk_output_and_state(const ChunkPrep<R>& cp, const R* q, const R* k, const R* U, R scale, int64_t K, int64_t V,
                            R* S, R* o) {
  const int64_t n = cp.n;
  if (o) {
    for (int64_t r = 0; r < n; ++r) {
      R* orow = o + r * V;
      for (int64_t j = 0; j < V; ++j) orow[j] = R(0);
      const R eg = std::exp(cp.gam[r]);
      for (int64_t i = 0; i < K; ++i) {
        const R qi = eg * q[r * K + i];
        const R* row = S + i * V;
        for (int64_t j = 0; j < V; ++j) orow[j] += qi * row[j];
      }
      for (int64_t s = 0; s <= r; ++s) {
        R qk = 0;
        for (int64_t i = 0; i < K; ++i) qk += q[r * K + i] * k[s * K + i];
        const R pr = qk * cp.D[r * n + s];
        for (int64_t j = 0; j < V; ++j) orow[j] += pr * U[s * V + j];
      }
      for (int64_t j = 0; j < V; ++j) orow[j] *= scale;
    }
  }
  const R g_last = cp.gam[n - 1];
  const R e_n = std::exp(g_last);
  for (int64_t x = 0; x < K * V; ++x) S[x] *= e_n;
  for (int64_t r = 0; r < n; ++r) {
    const R kb = std::exp(g_last - cp.gam[r]);  // Kbar_r = e^{gamma_n - gamma_r} k_r
    for (int64_t i = 0; i < K; ++i) {
      const R ki = kb * k[r * K + i];
      R* row = S + i * V;
      for (int64_t j = 0; j < V; ++j) row[j] += ki * U[r * V + j];
    }
  }
}

// Forward over one (sequence, value head): q, k [L, K] (normalized, unscaled), v [L, V], g, beta [L];
// S [K, V] in-out (S0 -> S_L); o [L, V] may be null. on_state(tokens_done, S) runs after every token
// (recurrent) or every chunk (chunked), so checkpoints at multiples of the chunk size are seen by both.
template <class R, class OnState>
void forward_head(const R* q, const R* k, const R* v, const R* g, const R* beta, int64_t L, int64_t K, int64_t V,
                  R scale, CpuAlgo algo, int64_t C, R* S, R* o, OnState&& on_state) {
  if (algo == CpuAlgo::recurrent) {
    std::vector<R> u(static_cast<size_t>(V));
    for (int64_t t = 0; t < L; ++t) {
      recurrent_step(S, q + t * K, k + t * K, v + t * V, g[t], beta[t], scale, K, V, o ? o + t * V : nullptr, u.data());
      on_state(t + 1, S);
    }
    return;
  }
  ChunkPrep<R> cp;
  std::vector<R> U(static_cast<size_t>(C * V));
  for (int64_t c0 = 0; c0 < L; c0 += C) {
    const int64_t n = std::min(C, L - c0);  // the last chunk of a sequence may be partial
    cp.compute(k + c0 * K, v + c0 * V, g + c0, beta + c0, n, K, V);
    chunk_v_new(cp, S, K, V, U.data());
    chunk_output_and_state(cp, q + c0 * K, k + c0 * K, U.data(), scale, K, V, S, o ? o + c0 * V : nullptr);
    on_state(c0 + n, S);
  }
}

}  // namespace flashgdn::cpu
