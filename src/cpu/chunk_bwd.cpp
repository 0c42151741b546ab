// CPU chunk_bwd (gdn-math §7): the reverse recurrence with a state checkpoint every chunk and recompute inside
// the chunk (§7.1), or the chunked backward (§7.2-7.3), chosen by p.exec.cpu_algo. The per-value-head core
// gradients then go through the deterministic GQA reduction (§7.5), the l2norm (§7.6) and the gate (§7.7).
#include <vector>

#include "api/internal.hpp"
#include "cpu/cpu_common.hpp"
#include "cpu/gdn_core.hpp"

namespace flashgdn::cpu {
namespace {

// Gradients of one (sequence, value head) w.r.t. the core inputs (normalized q, k; resolved g, beta).
template <class R>
struct HeadGrads {
  std::vector<R> dq, dk, dv, dg, dbeta;  // [L, K], [L, K], [L, V], [L], [L]
  std::vector<R> dS;                     // [K, V]: dh0
  void init(int64_t L, int64_t K, int64_t V) {
    dq.assign(static_cast<size_t>(L * K), R(0));
    dk.assign(static_cast<size_t>(L * K), R(0));
    dv.assign(static_cast<size_t>(L * V), R(0));
    dg.assign(static_cast<size_t>(L), R(0));
    dbeta.assign(static_cast<size_t>(L), R(0));
  }
};

// §7.1 reverse recurrence. dS holds dhT on entry. The states inside a chunk are recomputed from the
// chunk-start checkpoint (the forward map is not invertible).
template <class R>
void backward_recurrent(const HeadInputs<R>& in, const R* S0, const R* dO, R scale, int64_t C, HeadGrads<R>* gr) {
  const int64_t L = in.L, K = in.K, V = in.V, KV = K * V;
  const int64_t nc = (L + C - 1) / C;
  std::vector<R> starts(static_cast<size_t>(nc * KV));
  std::vector<R> S(S0, S0 + KV), u(static_cast<size_t>(V));
  for (int64_t c = 0; c < nc; ++c) {
    std::copy(S.begin(), S.end(), starts.begin() + c * KV);
    for (int64_t t = c * C; t < std::min(L, (c + 1) * C); ++t)
      recurrent_step(S.data(), &in.q[t * K], &in.k[t * K], &in.v[t * V], in.g[t], in.beta[t], scale, K, V,
                     static_cast<R*>(nullptr), u.data());
  }
  std::vector<R> states(static_cast<size_t>((C + 1) * KV)), St(static_cast<size_t>(KV)), delta(static_cast<size_t>(V)),
      r(static_cast<size_t>(V));
  R* G = gr->dS.data();  // G-bar_t: gradient w.r.t. S_t through later tokens
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = c * C, n = std::min(C, L - t0);
    std::copy(starts.begin() + c * KV, starts.begin() + (c + 1) * KV, states.begin());
    for (int64_t x = 0; x < n; ++x) {
      std::copy(states.begin() + x * KV, states.begin() + (x + 1) * KV, states.begin() + (x + 1) * KV);
      const int64_t t = t0 + x;
      recurrent_step(&states[(x + 1) * KV], &in.q[t * K], &in.k[t * K], &in.v[t * V], in.g[t], in.beta[t], scale, K, V,
                     static_cast<R*>(nullptr), u.data());
    }
    for (int64_t x = n - 1; x >= 0; --x) {
      const int64_t t = t0 + x;
      const R *q = &in.q[t * K], *k = &in.k[t * K], *v = &in.v[t * V], *dOt = dO + t * V;
      const R alpha = std::exp(in.g[t]), beta = in.beta[t];
      const R* Snew = &states[(x + 1) * KV];
      for (int64_t e = 0; e < KV; ++e) St[e] = alpha * states[x * KV + e];  // S~_t = alpha S_{t-1}
      // G_t = G-bar_t + scale q do^T;  dq = scale S_t do
      for (int64_t i = 0; i < K; ++i) {
        R acc = 0;
        for (int64_t j = 0; j < V; ++j) {
          G[i * V + j] += scale * q[i] * dOt[j];
          acc += Snew[i * V + j] * dOt[j];
        }
        gr->dq[t * K + i] = scale * acc;
      }
      // delta = G^T k;  r = v - S~^T k
      for (int64_t j = 0; j < V; ++j) delta[j] = r[j] = R(0);
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) {
          delta[j] += G[i * V + j] * k[i];
          r[j] += St[i * V + j] * k[i];
        }
      R db = 0;
      for (int64_t j = 0; j < V; ++j) {
        r[j] = v[j] - r[j];
        gr->dv[t * V + j] = beta * delta[j];  // dv = beta delta
        db += delta[j] * r[j];                // dbeta = delta . r
      }
      gr->dbeta[t] = db;
      // dk = G u - beta S~ delta, u = beta r
      for (int64_t i = 0; i < K; ++i) {
        R acc = 0;
        for (int64_t j = 0; j < V; ++j) acc += G[i * V + j] * beta * r[j] - beta * St[i * V + j] * delta[j];
        gr->dk[t * K + i] = acc;
      }
      // dS~ = G - beta k delta^T;  dg = <dS~, S~>;  G-bar_{t-1} = alpha dS~
      R dg = 0;
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) {
          const R dSt = G[i * V + j] - beta * k[i] * delta[j];
          dg += dSt * St[i * V + j];
          G[i * V + j] = alpha * dSt;
        }
      gr->dg[t] = dg;
    }
  }
}

// §7.2-7.3 chunked backward. dS holds dhT on entry and dh0 on exit.
template <class R>
void backward_chunked(const HeadInputs<R>& in, const R* S0, const R* dO, R scale, int64_t C, HeadGrads<R>* gr) {
  const int64_t L = in.L, K = in.K, V = in.V, KV = K * V;
  const int64_t nc = (L + C - 1) / C;
  // Forward state pass: the chunk-start states S0^(c).
  std::vector<R> starts(static_cast<size_t>(nc * KV));
  std::vector<R> S(S0, S0 + KV), U(static_cast<size_t>(C * V));
  ChunkPrep<R> cp;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t c0 = c * C, n = std::min(C, L - c0);
    std::copy(S.begin(), S.end(), starts.begin() + c * KV);
    cp.compute(&in.k[c0 * K], &in.v[c0 * V], &in.g[c0], &in.beta[c0], n, K, V);
    chunk_v_new(cp, S.data(), K, V, U.data());
    chunk_output_and_state(cp, &in.q[c0 * K], &in.k[c0 * K], U.data(), scale, K, V, S.data(), static_cast<R*>(nullptr));
  }
  R* dS = gr->dS.data();  // gradient w.r.t. the chunk-end state
  std::vector<R> P, E, dP, dA, M1, dLb, dU, dW, AtdU, AtdW, dgam, eg, kb, tmp(static_cast<size_t>(K)),
      dS_start(static_cast<size_t>(KV));
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t c0 = c * C, n = std::min(C, L - c0);
    const R* S0c = &starts[c * KV];
    const R *q = &in.q[c0 * K], *k = &in.k[c0 * K], *v = &in.v[c0 * V], *b = &in.beta[c0], *dOc = dO + c0 * V;
    R *dQ = &gr->dq[c0 * K], *dK = &gr->dk[c0 * K], *dV = &gr->dv[c0 * V], *dB = &gr->dbeta[c0];
    cp.compute(k, v, &in.g[c0], b, n, K, V);
    chunk_v_new(cp, S0c, K, V, U.data());
    const std::vector<R>& D = cp.D;
    const std::vector<R>& A = cp.A;
    const R g_last = cp.gam[n - 1], e_n = std::exp(g_last);
    eg.assign(static_cast<size_t>(n), R(0));
    kb.assign(static_cast<size_t>(n), R(0));
    for (int64_t r = 0; r < n; ++r) {
      eg[r] = std::exp(cp.gam[r]);           // Gamma
      kb[r] = std::exp(g_last - cp.gam[r]);  // Kbar_r = kb_r k_r
    }
    // P = Q K^T o D, E = K K^T o D (lower, diagonal included)
    P.assign(static_cast<size_t>(n * n), R(0));
    E.assign(static_cast<size_t>(n * n), R(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        R qk = 0;
        for (int64_t i = 0; i < K; ++i) qk += q[r * K + i] * k[s * K + i];
        P[r * n + s] = qk * D[r * n + s];
        E[r * n + s] = cp.KK[r * n + s] * D[r * n + s];
      }
    dgam.assign(static_cast<size_t>(n), R(0));
    dU.assign(static_cast<size_t>(n * V), R(0));
    // (1) inter-chunk output: dQ_r = scale e^{gamma_r} S0 do_r; dgamma_r += q_r . dQ_r
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < K; ++i) {
        R acc = 0;
        for (int64_t j = 0; j < V; ++j) acc += S0c[i * V + j] * dOc[r * V + j];
        dQ[r * K + i] = scale * eg[r] * acc;
        dgam[r] += q[r * K + i] * dQ[r * K + i];
      }
    }
    // (2) intra-chunk output: dP = scale Lower(dO U^T); dQ += (dP o D) K; dK = (dP o D)^T Q; dU = scale P^T dO
    dP.assign(static_cast<size_t>(n * n), R(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        R acc = 0;
        for (int64_t j = 0; j < V; ++j) acc += dOc[r * V + j] * U[s * V + j];
        const R dp = scale * acc;
        dP[r * n + s] = dp;
        const R dpd = dp * D[r * n + s];
        for (int64_t i = 0; i < K; ++i) {
          dQ[r * K + i] += dpd * k[s * K + i];
          dK[s * K + i] += dpd * q[r * K + i];
        }
        const R pr = scale * P[r * n + s];
        for (int64_t j = 0; j < V; ++j) dU[s * V + j] += pr * dOc[r * V + j];
      }
    // (3) state update: dU += Kbar dS; dKbar = U dS^T; dK += diag(kb) dKbar; tau_r = Kbar_r . dKbar_r
    R tau_sum = 0;
    for (int64_t r = 0; r < n; ++r) {
      R tau = 0;
      for (int64_t i = 0; i < K; ++i) {
        const R kbi = kb[r] * k[r * K + i];
        R dkbar = 0;
        for (int64_t j = 0; j < V; ++j) {
          dU[r * V + j] += kbi * dS[i * V + j];
          dkbar += U[r * V + j] * dS[i * V + j];
        }
        dK[r * K + i] += kb[r] * dkbar;
        tau += kbi * dkbar;
      }
      dgam[r] -= tau;
      tau_sum += tau;
    }
    R s0ds = 0;
    for (int64_t e = 0; e < KV; ++e) s0ds += S0c[e] * dS[e];
    dgam[n - 1] += tau_sum + e_n * s0ds;
    // dS_start = e_n dS + scale (Gamma Q)^T dO - W^T dU
    for (int64_t e = 0; e < KV; ++e) dS_start[e] = e_n * dS[e];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < K; ++i) {
        const R a = scale * eg[r] * q[r * K + i], w = cp.W[r * K + i];
        for (int64_t j = 0; j < V; ++j) dS_start[i * V + j] += a * dOc[r * V + j] - w * dU[r * V + j];
      }
    // (4) v_new: dW = -dU S0^T, dU0 = dU
    dW.assign(static_cast<size_t>(n * K), R(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < K; ++i) {
        R acc = 0;
        for (int64_t j = 0; j < V; ++j) acc += dU[r * V + j] * S0c[i * V + j];
        dW[r * K + i] = -acc;
      }
    // (5) WY products: A^T dU0, A^T dW
    AtdU.assign(static_cast<size_t>(n * V), R(0));
    AtdW.assign(static_cast<size_t>(n * K), R(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        const R a = A[r * n + s];
        for (int64_t j = 0; j < V; ++j) AtdU[s * V + j] += a * dU[r * V + j];
        for (int64_t i = 0; i < K; ++i) AtdW[s * K + i] += a * dW[r * K + i];
      }
    for (int64_t s = 0; s < n; ++s) {
      R vdot = 0, kdot = 0;
      for (int64_t j = 0; j < V; ++j) {
        dV[s * V + j] = b[s] * AtdU[s * V + j];  // dV = diag(b) A^T dU0
        vdot += v[s * V + j] * AtdU[s * V + j];
      }
      for (int64_t i = 0; i < K; ++i) {
        dK[s * K + i] += b[s] * eg[s] * AtdW[s * K + i];  // dK += diag(b) Gamma A^T dW
        kdot += k[s * K + i] * AtdW[s * K + i];
      }
      dB[s] = vdot + eg[s] * kdot;
      dgam[s] += b[s] * eg[s] * kdot;
    }
    // dA = dU0 V_b^T + dW K_bg^T (only the lower part reaches L)
    dA.assign(static_cast<size_t>(n * n), R(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        R acc = 0;
        for (int64_t j = 0; j < V; ++j) acc += dU[r * V + j] * v[s * V + j];
        R acc2 = 0;
        for (int64_t i = 0; i < K; ++i) acc2 += dW[r * K + i] * k[s * K + i];
        dA[r * n + s] = b[s] * acc + b[s] * eg[s] * acc2;
      }
    // (6) dL = StrictLower(-A^T dA A^T)
    M1.assign(static_cast<size_t>(n * n), R(0));  // A^T dA
    for (int64_t a = 0; a < n; ++a)
      for (int64_t r = 0; r <= a; ++r) {
        const R Aar = A[a * n + r];
        for (int64_t c2 = 0; c2 <= a; ++c2) M1[r * n + c2] += Aar * dA[a * n + c2];
      }
    dLb.assign(static_cast<size_t>(n * n), R(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s < r; ++s) {
        R acc = 0;
        for (int64_t c2 = 0; c2 <= s; ++c2) acc += M1[r * n + c2] * A[s * n + c2];
        const R dL = -acc;
        dB[r] += dL * E[r * n + s];  // (7) dbeta_r += sum_s dL_rs E_rs
        dLb[r * n + s] = b[r] * dL;  // dL_b = diag(b) dL
      }
    // (7) dK += (dL_b o D) K + (dL_b o D)^T K;  (8) Z = dP o P + dL_b o E, dgamma += rowsum(Z) - colsum(Z)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s <= r; ++s) {
        const R w = dLb[r * n + s] * D[r * n + s];
        if (s < r)
          for (int64_t i = 0; i < K; ++i) {
            dK[r * K + i] += w * k[s * K + i];
            dK[s * K + i] += w * k[r * K + i];
          }
        const R z = dP[r * n + s] * P[r * n + s] + dLb[r * n + s] * E[r * n + s];
        dgam[r] += z;
        dgam[s] -= z;
      }
    // (9) dg_r = sum_{j >= r} dgamma_j (reverse cumulative sum within the chunk)
    R acc = 0;
    for (int64_t r = n - 1; r >= 0; --r) gr->dg[c0 + r] = acc += dgam[r];
    std::copy(dS_start.begin(), dS_start.end(), dS);
  }
}

// Per-value-head scratch filled by the parallel pass and reduced afterwards in a fixed order.
template <class R>
struct Scratch {
  std::vector<R> dq, dk;  // [B, T, Hv, K] per value head, before the GQA reduction
  std::vector<R> dg, g;   // [B, T, Hv] core dg and the resolved g (for dA_log)
};

template <class R>
void run_head(const ChunkBwdParams& p, const SeqDims& d, int64_t n, int64_t h, Scratch<R>* sc) {
  const SeqRange sr = seq_range(p.cu_seqlens, d, n);
  const int64_t K = d.K, V = d.V, L = sr.len;
  if (L == 0 && !p.dh0.defined()) return;  // an empty sequence has only dh0 to write: allocate nothing
  std::vector<R> S0(static_cast<size_t>(K * V), R(0));
  if (p.initial_state.defined()) state_ref(p.initial_state, p.state_layout, n, h).load(S0.data(), K, V);
  HeadInputs<R> in;
  load_head(p, d, sr, h, &in);
  std::vector<R> dO(static_cast<size_t>(L * V));
  Strided d_o(p.d_o);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t j = 0; j < V; ++j) dO[t * V + j] = d_o.get<R>(sr.b, sr.start + t, h, j);

  HeadGrads<R> gr;
  gr.init(L, K, V);
  gr.dS.assign(static_cast<size_t>(K * V), R(0));  // absent d_ht = 0
  if (p.d_ht.defined()) state_ref(p.d_ht, p.state_layout, n, h).load(gr.dS.data(), K, V);
  const int64_t C = p.chunk_size > 0 ? p.chunk_size : 64;
  if (L > 0) {
    if (p.exec.cpu_algo == CpuAlgo::recurrent)
      backward_recurrent(in, S0.data(), dO.data(), R(d.scale), C, &gr);
    else
      backward_chunked(in, S0.data(), dO.data(), R(d.scale), C, &gr);
  }
  // An empty sequence: dh0 = dhT.
  if (p.dh0.defined()) state_ref(p.dh0, p.state_layout, n, h).store(gr.dS.data(), K, V);

  Strided dv(p.dv), dbeta(p.dbeta), braw(p.beta);
  const R c = p.gate.allow_neg_eigval ? R(2) : R(1);
  for (int64_t t = 0; t < L; ++t) {
    const int64_t tt = sr.start + t, row = (sr.b * d.T + tt) * d.Hv + h;
    for (int64_t j = 0; j < V; ++j) dv.set(double(gr.dv[t * V + j]), sr.b, tt, h, j);
    for (int64_t i = 0; i < K; ++i) {
      sc->dq[row * K + i] = gr.dq[t * K + i];
      sc->dk[row * K + i] = gr.dk[t * K + i];
    }
    sc->dg[row] = gr.dg[t];
    sc->g[row] = in.g[t];
    if (dbeta.present) {
      R db = gr.dbeta[t];
      if (p.gate.use_beta_sigmoid_in_kernel && braw.present) {
        // beta = c sigmoid(b):  db_raw = dbeta c s (1 - s)
        const R s = sigmoid(braw.get<R>(sr.b, tt, h));
        db *= c * s * (R(1) - s);
      }
      dbeta.set(double(db), sr.b, tt, h);
    }
  }
}

// dx = rho (dxh - (dxh . xh) xh), xh = rho x (§7.6); x and dx are [K].
template <class R>
void l2norm_backward(const R* x, R* dx, int64_t K) {
  R ss = 0;
  for (int64_t i = 0; i < K; ++i) ss += x[i] * x[i];
  const R rho = R(1) / std::sqrt(ss + R(1e-6));
  R dot = 0;
  for (int64_t i = 0; i < K; ++i) dot += dx[i] * x[i] * rho;
  for (int64_t i = 0; i < K; ++i) dx[i] = rho * (dx[i] - dot * x[i] * rho);
}

template <class R>
void run(const ChunkBwdParams& p, const SeqDims& d) {
  const int64_t rows = d.B * d.T * d.Hv, K = d.K, V = d.V;
  Scratch<R> sc;
  sc.dq.assign(static_cast<size_t>(rows * K), R(0));
  sc.dk.assign(static_cast<size_t>(rows * K), R(0));
  sc.dg.assign(static_cast<size_t>(rows), R(0));
  sc.g.assign(static_cast<size_t>(rows), R(0));
  if (d.varlen) {  // tokens outside every sequence get zero gradients
    Strided dv(p.dv), dbeta(p.dbeta);
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t h = 0; h < d.Hv; ++h) {
        for (int64_t j = 0; j < V; ++j) dv.set(0.0, 0, t, h, j);
        if (dbeta.present) dbeta.set(0.0, 0, t, h);
      }
  }
  // Without tokens only dh0 comes from the per-head pass: skip the N * Hv (sequence, head) pairs otherwise.
  if (d.B * d.T > 0 || p.dh0.defined())
    parallel_for(d.N * d.Hv, p.exec.cpu_threads,
                 [&](int64_t item) { run_head<R>(p, d, item / d.Hv, item % d.Hv, &sc); });

  // GQA: dq/dk of q/k head i = sum over its value heads, in head order (deterministic); then the l2norm chain.
  const int64_t r = d.group();
  Strided q(p.q), k(p.k), dq(p.dq), dk(p.dk);
  parallel_for(d.B * d.T, p.exec.cpu_threads, [&](int64_t bt) {
    const int64_t b = bt / d.T, t = bt % d.T;
    std::vector<R> gq(static_cast<size_t>(K)), gk(static_cast<size_t>(K)), x(static_cast<size_t>(K));
    for (int64_t i = 0; i < d.Hqk; ++i) {
      std::fill(gq.begin(), gq.end(), R(0));
      std::fill(gk.begin(), gk.end(), R(0));
      for (int64_t h = i * r; h < (i + 1) * r; ++h)
        for (int64_t c = 0; c < K; ++c) {
          gq[c] += sc.dq[(bt * d.Hv + h) * K + c];
          gk[c] += sc.dk[(bt * d.Hv + h) * K + c];
        }
      if (p.use_qk_l2norm_in_kernel) {
        for (int64_t c = 0; c < K; ++c) x[c] = q.get<R>(b, t, i, c);
        l2norm_backward(x.data(), gq.data(), K);
        for (int64_t c = 0; c < K; ++c) x[c] = k.get<R>(b, t, i, c);
        l2norm_backward(x.data(), gk.data(), K);
      }
      for (int64_t c = 0; c < K; ++c) {
        dq.set(double(gq[c]), b, t, i, c);
        dk.set(double(gk[c]), b, t, i, c);
      }
    }
  });

  // Gate chain (§7.7), one value head at a time, sums over all tokens in token order.
  Strided dg(p.dg), a(p.g), dA_log(p.dA_log), ddt(p.ddt_bias);
  const bool gate = p.gate.use_gate_in_kernel;
  for (int64_t h = 0; h < d.Hv; ++h) {
    R neg_exp_A = 0, dtb = 0, sum_dA = 0, sum_ddt = 0;
    if (gate) {
      neg_exp_A = -std::exp(Strided(p.A_log).get<R>(h));
      if (p.dt_bias.defined()) dtb = Strided(p.dt_bias).get<R>(h);
    }
    for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
      const int64_t b = bt / d.T, t = bt % d.T, row = bt * d.Hv + h;
      R dgt = sc.dg[row];
      if (gate && a.present) {
        // g = -e^{A_log} softplus(x), x = a + dt_bias:  dx = dg (-e^{A_log}) sigma(beta_sp x) (1 past threshold)
        const R x = a.get<R>(b, t, h) + dtb;
        const R bx = R(p.gate.softplus_beta) * x;
        const R dsp = bx <= R(p.gate.softplus_threshold) ? sigmoid(bx) : R(1);
        sum_dA += dgt * sc.g[row];  // dA_log = sum dg g
        dgt = dgt * neg_exp_A * dsp;
        sum_ddt += dgt;  // ddt_bias = sum dx
      }
      if (dg.present) dg.set(double(dgt), b, t, h);
    }
    if (gate && dA_log.present) dA_log.set(double(sum_dA), h);
    if (gate && ddt.present) ddt.set(double(sum_ddt), h);
  }
}

}  // namespace

Status chunk_bwd(const ChunkBwdParams& p, const SeqDims& d) {
  if (p.exec.cpu_algo == CpuAlgo::chunked && p.chunk_size <= 0)
    return FGDN_INVALID("chunk_bwd: chunk_size: expected a positive chunk size, got ", p.chunk_size);
  // No token: the gradients that remain are dh0 = d_ht and the gate-parameter sums dA_log = ddt_bias = 0. With
  // none of them asked for, return before touching the N * Hv (sequence, head) pairs or the Hv heads.
  if (d.B * d.T == 0 && !p.dh0.defined() && !p.dA_log.defined() && !p.ddt_bias.defined()) return Status::OK();
  with_compute_type(p.exec, [&](auto r) { run<decltype(r)>(p, d); });
  return Status::OK();
}

}  // namespace flashgdn::cpu
