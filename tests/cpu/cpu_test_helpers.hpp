// Helpers of the CPU backend suites: Dims for the backend calls (validation is tested elsewhere), runners
// that poison outputs with NaN, and an independent naive fp64 implementation of the operator (recurrence and
// chunked form, written from gdn-math.md) with switches for the wrong variants of §10.4.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "api/internal.hpp"
#include "test_util.hpp"

namespace flashgdn::test {

inline ChunkDims chunk_dims(const GdnCase& c, double scale = 0.0, int64_t num_checkpoints = 0) {
  ChunkDims d;
  d.B = c.seqlens.empty() ? c.B : 1;
  d.T = c.total_T();
  d.N = c.N();
  d.Hqk = c.Hqk;
  d.Hv = c.Hv;
  d.K = c.K;
  d.V = c.V;
  d.varlen = !c.seqlens.empty();
  d.scale = float(scale != 0.0 ? scale : 1.0 / std::sqrt(double(c.K)));
  d.num_checkpoints = num_checkpoints;
  return d;
}

inline HostTensor state_tensor(const GdnCase& c, DType dt, int64_t N) {
  return c.layout == StateLayout::k_major ? HostTensor(dt, {N, c.Hv, c.K, c.V}) : HostTensor(dt, {N, c.Hv, c.V, c.K});
}

inline HostTensor poisoned(DType dt, std::vector<int64_t> shape) {
  HostTensor t(dt, std::move(shape));
  t.fill_nan();
  return t;
}

struct FwdOut {
  HostTensor o, hT;
};

// Runs cpu::chunk_fwd on a case's inputs. `tweak` may edit the params (gate options, l2norm flag...).
template <class Tweak>
FwdOut run_fwd(const GdnCase& c, const GdnInputs& in, CpuAlgo algo, int32_t C, bool fp64, Tweak&& tweak) {
  FwdOut out;
  const ChunkDims d = chunk_dims(c);
  out.o = poisoned(in.v.dtype, in.v.shape);
  out.hT = state_tensor(c, fp64 ? DType::f64 : DType::f32, d.N);
  out.hT.fill_nan();
  ChunkFwdParams p;
  p.q = in.q.view();
  p.k = in.k.view();
  p.v = in.v.view();
  p.g = in.g.view();
  p.beta = in.beta.view();
  p.initial_state = in.h0.view();
  p.cu_seqlens = in.cu.view();
  p.o = out.o.view();
  p.final_state = out.hT.view();
  p.use_qk_l2norm_in_kernel = c.l2norm;
  p.state_layout = c.layout;
  p.chunk_size = C;
  p.exec.cpu_algo = algo;
  p.exec.cpu_fp64 = fp64;
  p.exec.cpu_threads = 2;
  ChunkDims dd = d;
  tweak(p, dd);
  Status st = cpu::chunk_fwd(p, dd);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

inline FwdOut run_fwd(const GdnCase& c, const GdnInputs& in, CpuAlgo algo, int32_t C, bool fp64) {
  return run_fwd(c, in, algo, C, fp64, [](ChunkFwdParams&, ChunkDims&) {});
}

// ---- independent naive fp64 reference -----------------------------------------------------------------

// Deliberately wrong variants (gdn-math §10.4); Bug::none is the operator.
enum class Bug {
  none,
  pre_update_read,   // o_t = scale S~_t^T q_t
  gqa_mod,           // value head h reads q/k head h % Hqk
  transposed_state,  // h0 memory read as the other layout
  no_seq_reset,      // state carried over the flat varlen axis (chunks laid over the flat axis)
  eps_outside_sqrt,  // x / (||x|| + eps)
  no_scale,          // scale = 1
  // chunked-form bugs (naive_chunked only)
  no_decay_q,        // O = scale Q S0 + ...
  no_decay_w,        // W = A diag(b) K
  no_decay_kbar,     // Kbar = K
  pad_g_garbage,     // partial chunk padded to C with g = -0.7: g_last from a padded position
  doubling_inverse,  // A by the whole-chunk doubling product
  factored_decay,    // D = (e^gamma_r * e^-gamma_s) * mask
};

// The inputs of a case as flat fp64 arrays, states K-major [N, Hv, K, V].
struct Prob {
  int64_t N = 0, Hqk = 0, Hv = 0, K = 0, V = 0;
  std::vector<int64_t> start, len;  // token rows (b * T + t) of each sequence
  std::vector<double> q, k, v, g, beta, h0;
  double scale = 0;
  bool l2norm = false;
};

inline Prob make_prob(const GdnCase& c, const GdnInputs& in, double scale = 0.0) {
  Prob p;
  p.N = c.N();
  p.Hqk = c.Hqk;
  p.Hv = c.Hv;
  p.K = c.K;
  p.V = c.V;
  // The backends receive the scale as a float (SeqDims::scale), so the reference uses the same value.
  p.scale = double(float(scale != 0.0 ? scale : 1.0 / std::sqrt(double(c.K))));
  p.l2norm = c.l2norm;
  p.q = in.q.to_double();
  p.k = in.k.to_double();
  p.v = in.v.to_double();
  p.g = in.g.to_double();
  p.beta = in.beta.to_double();
  p.h0.assign(size_t(p.N * p.Hv * p.K * p.V), 0.0);
  if (!in.h0.empty_shape()) {
    for (int64_t nh = 0; nh < p.N * p.Hv; ++nh)
      for (int64_t i = 0; i < p.K; ++i)
        for (int64_t j = 0; j < p.V; ++j)
          p.h0[size_t((nh * p.K + i) * p.V + j)] = c.layout == StateLayout::k_major
                                                       ? in.h0.get((nh * p.K + i) * p.V + j)
                                                       : in.h0.get((nh * p.V + j) * p.K + i);
  }
  for (int64_t n = 0; n < p.N; ++n) {
    if (c.seqlens.empty()) {
      p.start.push_back(n * c.T);
      p.len.push_back(c.T);
    } else {
      p.start.push_back(int64_t(in.cu.get(n)));
      p.len.push_back(c.seqlens[size_t(n)]);
    }
  }
  return p;
}

struct RefOut {
  std::vector<double> o;   // [rows, Hv, V]
  std::vector<double> hT;  // [N, Hv, K, V]
};

// Normalized (unless l2norm is off) q or k row of q/k head i at token row `row`.
inline std::vector<double> qk_row(const Prob& p, const std::vector<double>& x, int64_t row, int64_t i, Bug bug) {
  std::vector<double> r(x.begin() + (row * p.Hqk + i) * p.K, x.begin() + (row * p.Hqk + i + 1) * p.K);
  if (!p.l2norm) return r;
  double ss = 0;
  for (double e : r) ss += e * e;
  const double den = bug == Bug::eps_outside_sqrt ? std::sqrt(ss) + 1e-6 : std::sqrt(ss + 1e-6);
  for (double& e : r) e /= den;
  return r;
}

inline int64_t qk_head_of(const Prob& p, int64_t h, Bug bug) {
  return bug == Bug::gqa_mod ? h % p.Hqk : h / (p.Hv / p.Hqk);
}

inline std::vector<double> h0_of(const Prob& p, int64_t n, int64_t h, Bug bug) {
  std::vector<double> S(size_t(p.K * p.V));
  const double* base = &p.h0[size_t((n * p.Hv + h) * p.K * p.V)];
  for (int64_t i = 0; i < p.K; ++i)
    for (int64_t j = 0; j < p.V; ++j)
      S[size_t(i * p.V + j)] = bug == Bug::transposed_state ? base[j * p.K + i] : base[i * p.V + j];
  return S;
}

// The recurrence §1.2 token by token; `states`, when given, receives S_t after every token of every
// (sequence, head) as states[(n, h)][t].
inline RefOut naive_recurrent(const Prob& p, Bug bug = Bug::none,
                              std::vector<std::vector<std::vector<double>>>* states = nullptr) {
  RefOut r;
  int64_t rows = 0;
  for (int64_t n = 0; n < p.N; ++n) rows = std::max(rows, p.start[size_t(n)] + p.len[size_t(n)]);
  r.o.assign(size_t(rows * p.Hv * p.V), 0.0);
  r.hT.assign(size_t(p.N * p.Hv * p.K * p.V), 0.0);
  if (states) states->assign(size_t(p.N * p.Hv), {});
  const double scale = bug == Bug::no_scale ? 1.0 : p.scale;
  for (int64_t h = 0; h < p.Hv; ++h) {
    std::vector<double> S;
    for (int64_t n = 0; n < p.N; ++n) {
      if (bug != Bug::no_seq_reset || n == 0) S = h0_of(p, n, h, bug);
      const int64_t i = qk_head_of(p, h, bug);
      for (int64_t t = 0; t < p.len[size_t(n)]; ++t) {
        const int64_t row = p.start[size_t(n)] + t;
        auto q = qk_row(p, p.q, row, i, bug), k = qk_row(p, p.k, row, i, bug);
        const double a = std::exp(p.g[size_t(row * p.Hv + h)]), b = p.beta[size_t(row * p.Hv + h)];
        const double* v = &p.v[size_t((row * p.Hv + h) * p.V)];
        for (double& s : S) s *= a;
        std::vector<double> o_pre(size_t(p.V), 0.0);
        for (int64_t j = 0; j < p.V; ++j) {
          double sk = 0;
          for (int64_t x = 0; x < p.K; ++x) {
            sk += S[size_t(x * p.V + j)] * k[size_t(x)];
            o_pre[size_t(j)] += S[size_t(x * p.V + j)] * q[size_t(x)];
          }
          const double u = b * (v[j] - sk);
          for (int64_t x = 0; x < p.K; ++x) S[size_t(x * p.V + j)] += k[size_t(x)] * u;
        }
        for (int64_t j = 0; j < p.V; ++j) {
          double acc = 0;
          for (int64_t x = 0; x < p.K; ++x) acc += S[size_t(x * p.V + j)] * q[size_t(x)];
          r.o[size_t((row * p.Hv + h) * p.V + j)] = scale * (bug == Bug::pre_update_read ? o_pre[size_t(j)] : acc);
        }
        if (states) (*states)[size_t(n * p.Hv + h)].push_back(S);
      }
      std::copy(S.begin(), S.end(), r.hT.begin() + (n * p.Hv + h) * p.K * p.V);
    }
  }
  return r;
}

// The chunked form §5 with dense matrices (written independently of src/cpu), C rows per chunk.
inline RefOut naive_chunked(const Prob& p, int64_t C, Bug bug = Bug::none) {
  RefOut r;
  int64_t rows = 0;
  for (int64_t n = 0; n < p.N; ++n) rows = std::max(rows, p.start[size_t(n)] + p.len[size_t(n)]);
  r.o.assign(size_t(rows * p.Hv * p.V), 0.0);
  r.hT.assign(size_t(p.N * p.Hv * p.K * p.V), 0.0);
  const int64_t K = p.K, V = p.V;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t h = 0; h < p.Hv; ++h) {
      std::vector<double> S = h0_of(p, n, h, bug);
      const int64_t i_qk = qk_head_of(p, h, bug), L = p.len[size_t(n)];
      for (int64_t c0 = 0; c0 < L; c0 += C) {
        const int64_t nv = std::min(C, L - c0);
        const int64_t m = bug == Bug::pad_g_garbage ? C : nv;  // rows in the chunk matrices
        std::vector<std::vector<double>> Q(size_t(m), std::vector<double>(size_t(K), 0.0)),
            Kc = Q, Vc(size_t(m), std::vector<double>(size_t(V), 0.0));
        std::vector<double> g(size_t(m), 0.0), b(size_t(m), 0.0);
        for (int64_t x = 0; x < m; ++x) {
          if (x >= nv) {
            g[size_t(x)] = -0.7;  // garbage padding
            continue;
          }
          const int64_t row = p.start[size_t(n)] + c0 + x;
          Q[size_t(x)] = qk_row(p, p.q, row, i_qk, bug);
          Kc[size_t(x)] = qk_row(p, p.k, row, i_qk, bug);
          for (int64_t j = 0; j < V; ++j) Vc[size_t(x)][size_t(j)] = p.v[size_t((row * p.Hv + h) * V + j)];
          g[size_t(x)] = p.g[size_t(row * p.Hv + h)];
          b[size_t(x)] = p.beta[size_t(row * p.Hv + h)];
        }
        auto dot = [](const std::vector<double>& a, const std::vector<double>& c) {
          double s = 0;
          for (size_t e = 0; e < a.size(); ++e) s += a[e] * c[e];
          return s;
        };
        std::vector<double> gam(static_cast<size_t>(m));
        double acc = 0;
        for (int64_t x = 0; x < m; ++x) gam[size_t(x)] = acc += g[size_t(x)];
        std::vector<std::vector<double>> D(size_t(m), std::vector<double>(size_t(m), 0.0)), Lm = D, A = D;
        for (int64_t x = 0; x < m; ++x)
          for (int64_t y = 0; y < m; ++y) {
            if (bug == Bug::factored_decay) {
              D[size_t(x)][size_t(y)] = std::exp(gam[size_t(x)]) * std::exp(-gam[size_t(y)]) * (x >= y ? 1.0 : 0.0);
            } else if (x >= y) {
              D[size_t(x)][size_t(y)] = std::exp(gam[size_t(x)] - gam[size_t(y)]);
            }
            if (y < x)
              Lm[size_t(x)][size_t(y)] = b[size_t(x)] * dot(Kc[size_t(x)], Kc[size_t(y)]) * D[size_t(x)][size_t(y)];
          }
        auto matmul = [m](const std::vector<std::vector<double>>& X, const std::vector<std::vector<double>>& Y) {
          std::vector<std::vector<double>> Z(size_t(m), std::vector<double>(size_t(m), 0.0));
          for (int64_t x = 0; x < m; ++x)
            for (int64_t z = 0; z < m; ++z)
              for (int64_t y = 0; y < m; ++y)
                Z[size_t(x)][size_t(y)] += X[size_t(x)][size_t(z)] * Y[size_t(z)][size_t(y)];
          return Z;
        };
        if (bug == Bug::doubling_inverse) {
          // (I + L)^-1 = (I + N)(I + N^2)(I + N^4)..., N = -L
          std::vector<std::vector<double>> Nm = Lm, I(size_t(m), std::vector<double>(size_t(m), 0.0));
          for (int64_t x = 0; x < m; ++x) {
            I[size_t(x)][size_t(x)] = 1.0;
            for (int64_t y = 0; y < m; ++y) Nm[size_t(x)][size_t(y)] = -Lm[size_t(x)][size_t(y)];
          }
          auto add_I = [&](std::vector<std::vector<double>> X) {
            for (int64_t x = 0; x < m; ++x) X[size_t(x)][size_t(x)] += 1.0;
            return X;
          };
          A = add_I(Nm);
          for (int64_t span = 2; span < m; span *= 2) {
            Nm = matmul(Nm, Nm);
            A = matmul(A, add_I(Nm));
          }
        } else {
          for (int64_t x = 0; x < m; ++x) {  // forward substitution
            for (int64_t y = 0; y < x; ++y)
              for (int64_t z = 0; z <= y; ++z)
                A[size_t(x)][size_t(z)] -= Lm[size_t(x)][size_t(y)] * A[size_t(y)][size_t(z)];
            A[size_t(x)][size_t(x)] = 1.0;
          }
        }
        // U = A diag(b) V - A diag(b e^gam) K S0
        std::vector<std::vector<double>> U(size_t(m), std::vector<double>(size_t(V), 0.0));
        for (int64_t x = 0; x < m; ++x)
          for (int64_t y = 0; y < m; ++y) {
            const double ax = A[size_t(x)][size_t(y)];
            if (ax == 0.0) continue;
            const double wdec = bug == Bug::no_decay_w ? 1.0 : std::exp(gam[size_t(y)]);
            for (int64_t j = 0; j < V; ++j) {
              double ks = 0;
              for (int64_t z = 0; z < K; ++z) ks += Kc[size_t(y)][size_t(z)] * S[size_t(z * V + j)];
              U[size_t(x)][size_t(j)] += ax * b[size_t(y)] * (Vc[size_t(y)][size_t(j)] - wdec * ks);
            }
          }
        for (int64_t x = 0; x < nv; ++x) {
          const int64_t row = p.start[size_t(n)] + c0 + x;
          const double qdec = bug == Bug::no_decay_q ? 1.0 : std::exp(gam[size_t(x)]);
          for (int64_t j = 0; j < V; ++j) {
            double o = 0;
            for (int64_t z = 0; z < K; ++z) o += qdec * Q[size_t(x)][size_t(z)] * S[size_t(z * V + j)];
            for (int64_t y = 0; y <= x; ++y)
              o += dot(Q[size_t(x)], Kc[size_t(y)]) * D[size_t(x)][size_t(y)] * U[size_t(y)][size_t(j)];
            r.o[size_t((row * p.Hv + h) * V + j)] = p.scale * o;
          }
        }
        const double last = gam[size_t(m - 1)];
        for (double& s : S) s *= std::exp(last);
        for (int64_t x = 0; x < m; ++x) {
          const double kb = bug == Bug::no_decay_kbar ? 1.0 : std::exp(last - gam[size_t(x)]);
          for (int64_t z = 0; z < K; ++z)
            for (int64_t j = 0; j < V; ++j)
              S[size_t(z * V + j)] += kb * Kc[size_t(x)][size_t(z)] * U[size_t(x)][size_t(j)];
        }
      }
      std::copy(S.begin(), S.end(), r.hT.begin() + (n * p.Hv + h) * K * V);
    }
  return r;
}

// Relative Frobenius error of two flat fp64 arrays (NaN -> inf).
inline double rel_err_vec(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The op's final state as K-major fp64 [N, Hv, K, V].
inline std::vector<double> kmajor(const HostTensor& s, StateLayout layout, int64_t K, int64_t V) {
  std::vector<double> out(size_t(s.numel()));
  const int64_t nh = s.numel() / (K * V);
  for (int64_t x = 0; x < nh; ++x)
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        out[size_t((x * K + i) * V + j)] =
            layout == StateLayout::k_major ? s.get((x * K + i) * V + j) : s.get((x * V + j) * K + i);
  return out;
}

// The op's o restricted to the rows the reference covers.
inline std::vector<double> rows_of(const HostTensor& o, size_t n) {
  std::vector<double> out = o.to_double();
  out.resize(n);
  return out;
}

}  // namespace flashgdn::test
