// mixer_decode test cases and an independent fp64 reference written from the decode-step spec (conv window,
// SiLU, split, gates, l2norm, "decay, e = S^T k, delta = beta (v - e), S += k delta^T, o = S^T q", gated
// RMSNorm), token by token: it shares no code with the library's CPU backend. Used by the CPU and GPU suites.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "test_util.hpp"

namespace flashgdn::test {

struct MixerCase {
  int64_t Hqk = 2, Hv = 4, K = 16, V = 16, Kc = 4;
  int64_t B = 3, T = 1;  // fixed length; varlen when `lens` is set (B = 1)
  std::vector<int64_t> lens;
  int64_t slots = 0;  // 0: 2 + N * (1 + spec), every row's slots distinct
  int64_t spec = 0;   // > 0: 2-D state_indices [N, 1 + spec] with num_accepted_tokens (vLLM speculative)
  int64_t L = 0;      // conv state positions (0: Kc - 1 + spec)
  DType act = DType::f64, pool = DType::f64;
  StateLayout layout = StateLayout::k_major;
  bool commit = true, null_slot_is_invalid = true, intermediates = false, bias = true;
  uint64_t seed = 1;
  int64_t C() const { return 2 * Hqk * K + Hv * V; }
  int64_t N() const { return lens.empty() ? B : int64_t(lens.size()); }
  int64_t Tt() const {
    if (lens.empty()) return T;
    int64_t s = 0;
    for (auto l : lens) s += l;
    return s;
  }
  int64_t num_slots() const { return slots > 0 ? slots : 2 + N() * (1 + spec); }
  int64_t conv_len() const { return L > 0 ? L : Kc - 1 + spec; }
  int64_t Tmax() const {
    int64_t m = lens.empty() ? T : 0;
    for (auto l : lens) m = std::max(m, l);
    return m;
  }
};

struct MixerTensors {
  HostTensor x, z, a, b, A_log, dt_bias, conv_w, conv_b, norm_w, cu, conv_state, pool, si, na, inter, inter_win, out;
};

// rel_err where entries that neither side wrote (NaN poison left in both) are skipped; NaN on one side only is inf.
inline double rel_err_written(const HostTensor& x, const HostTensor& ref) {
  if (x.numel() != ref.numel()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = x.get(i), b = ref.get(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<double>::infinity();
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double round_as(DType dt, double v) {
  HostTensor t(dt, {1});
  t.set(0, v);
  return t.get(0);
}

// Random inputs; slot table with sentinels: row n uses slot n + 1 (so slot 0, a null block, is never used by a
// valid row) except that the last row of a batch of >= 3 rows gets -1 (padding).
inline MixerTensors make_mixer(const MixerCase& c) {
  Rng r(c.seed);
  const int64_t N = c.N(), T = c.Tt(), B = c.lens.empty() ? c.B : 1, C = c.C(), Hv = c.Hv;
  MixerTensors m;
  auto rnd = [&](DType dt, std::vector<int64_t> shape, double s) {
    HostTensor t(dt, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, s * r.normal());
    return t;
  };
  m.x = rnd(c.act, {B, T, C}, 1.0);
  m.z = rnd(c.act, {B, T, Hv, c.V}, 1.0);
  m.a = rnd(c.act, {B, T, Hv}, 1.0);
  m.b = rnd(c.act, {B, T, Hv}, 1.0);
  m.A_log = HostTensor(DType::f32, {Hv});
  for (int64_t h = 0; h < Hv; ++h) m.A_log.set(h, std::log(r.uniform(1.0, 16.0)));
  m.dt_bias = rnd(DType::f32, {Hv}, 0.5);
  m.conv_w = rnd(c.act, {C, c.Kc}, 0.5);
  if (c.bias) m.conv_b = rnd(c.act, {C}, 0.2);
  m.norm_w = HostTensor(c.act, {c.V});
  for (int64_t j = 0; j < c.V; ++j) m.norm_w.set(j, r.uniform(0.5, 1.5));
  if (!c.lens.empty()) {
    m.cu = HostTensor(DType::i32, {N + 1});
    int64_t s = 0;
    for (int64_t n = 0; n <= N; ++n) {
      m.cu.set(n, double(s));
      if (n < N) s += c.lens[size_t(n)];
    }
  }
  m.conv_state = rnd(c.act, {c.num_slots(), C, c.conv_len()}, 1.0);
  const int64_t i0 = c.layout == StateLayout::k_major ? c.K : c.V, i1 = c.layout == StateLayout::k_major ? c.V : c.K;
  m.pool = HostTensor(c.pool, {c.num_slots(), Hv, i0, i1});
  fill_pool_values(m.pool, r, 0.3);  // the last draw of r: no other tensor's values depend on how the pool's are made
  const int64_t cols = c.spec > 0 ? 1 + c.spec : 0;
  m.si = cols ? HostTensor(DType::i32, {N, cols}) : HostTensor(DType::i32, {N});
  for (int64_t n = 0; n < N; ++n) {
    const bool pad = N >= 3 && n == N - 1;
    if (cols) {
      for (int64_t t = 0; t < cols; ++t) m.si.set(n * cols + t, pad ? -1.0 : double(1 + n * cols + t));
    } else {
      m.si.set(n, pad ? -1.0 : double(1 + n));
    }
  }
  if (cols) {
    m.na = HostTensor(DType::i32, {N});
    for (int64_t n = 0; n < N; ++n) m.na.set(n, double(1 + n % cols));
  }
  if (c.intermediates) {
    m.inter = HostTensor(c.pool, {N, std::max<int64_t>(c.Tmax(), 1), Hv, i0, i1});
    m.inter.fill_nan();
    if (c.Kc > 1) {
      m.inter_win = HostTensor(c.act, {N, std::max<int64_t>(c.Tmax(), 1), C, c.Kc - 1});
      m.inter_win.fill_nan();
    }
  }
  m.out = HostTensor(c.act, {B, T, Hv, c.V});
  m.out.fill_nan();
  return m;
}

inline MixerDecodeParams mixer_params(const MixerCase& c, MixerTensors& m) {
  MixerDecodeParams p;
  p.x = m.x.view(), p.z = m.z.view(), p.a = m.a.view(), p.b = m.b.view();
  p.A_log = m.A_log.view(), p.dt_bias = m.dt_bias.view();
  p.conv_weight = m.conv_w.view(), p.conv_bias = m.conv_b.view(), p.norm_weight = m.norm_w.view();
  p.cu_seqlens = m.cu.view();
  p.conv_state = m.conv_state.view(), p.state_pool = m.pool.view();
  p.state_indices = m.si.view(), p.num_accepted_tokens = m.na.view();
  p.intermediate_states = m.inter.view(), p.intermediate_conv_windows = m.inter_win.view();
  p.out = m.out.view();
  p.num_k_heads = c.Hqk, p.head_k_dim = c.K;
  p.commit = c.commit, p.null_slot_is_invalid = c.null_slot_is_invalid, p.state_layout = c.layout;
  return p;
}

// The spec's step, token by token, on copies of the in-out tensors of `m` (which it updates like the op).
inline void mixer_reference(const MixerCase& c, MixerTensors& m) {
  const int64_t N = c.N(), Tt = c.Tt(), C = c.C(), K = c.K, V = c.V, Kc = c.Kc, Lc = c.conv_len();
  const int64_t r = c.Hv / c.Hqk, cols = c.spec > 0 ? 1 + c.spec : 0;
  const double scale = double(float(1.0 / std::sqrt(double(K))));  // the op's scale is a float
  auto slot_ok = [&](int64_t s) { return s >= 0 && s < c.num_slots() && !(c.null_slot_is_invalid && s == 0); };
  auto sidx = [&](int64_t s, int64_t h, int64_t i, int64_t j) {  // S[i, j] of (slot, head) in the pool
    const int64_t i0 = c.layout == StateLayout::k_major ? K : V, i1 = c.layout == StateLayout::k_major ? V : K;
    const int64_t a = c.layout == StateLayout::k_major ? i : j, b = c.layout == StateLayout::k_major ? j : i;
    return ((s * c.Hv + h) * i0 + a) * i1 + b;
  };
  auto silu = [](double u) { return u / (1.0 + std::exp(-u)); };
  const HostTensor cs0 = m.conv_state;  // windows are read from the state before the call
  for (int64_t n = 0; n < N; ++n) {
    const int64_t bi = c.lens.empty() ? n : 0;
    int64_t start_tok = 0, len = c.T;
    if (!c.lens.empty()) {
      start_tok = 0;
      for (int64_t q = 0; q < n; ++q) start_tok += c.lens[size_t(q)];
      len = c.lens[size_t(n)];
    }
    if (len == 0) continue;
    int64_t a = 1, slot, conv_slot;
    bool valid = true;
    if (cols) {
      a = int64_t(m.na.get(n));
      valid = a >= 1 && a <= cols;
      slot = valid ? int64_t(m.si.get(n * cols + a - 1)) : -1;
      conv_slot = int64_t(m.si.get(n * cols));
    } else {
      slot = conv_slot = int64_t(m.si.get(n));
    }
    valid = valid && slot_ok(slot);
    auto xat = [&](int64_t t, int64_t ch) { return m.x.get((bi * Tt + start_tok + t) * C + ch); };
    if (!valid) {
      for (int64_t t = 0; t < len; ++t)
        for (int64_t h = 0; h < c.Hv; ++h)
          for (int64_t j = 0; j < V; ++j) m.out.set(((bi * Tt + start_tok + t) * c.Hv + h) * V + j, 0.0);
      continue;
    }
    const bool conv_ok = slot_ok(conv_slot);
    const int64_t off = cols ? a - 1 : 0;
    // conv outputs y[t][ch] and the windows after each token
    std::vector<std::vector<double>> y(static_cast<size_t>(len), std::vector<double>(size_t(C)));
    for (int64_t ch = 0; ch < C; ++ch) {
      std::vector<double> seq;
      for (int64_t j = 0; j < Kc - 1; ++j) seq.push_back(conv_ok ? cs0.get((conv_slot * C + ch) * Lc + off + j) : 0.0);
      for (int64_t t = 0; t < len; ++t) seq.push_back(xat(t, ch));
      for (int64_t t = 0; t < len; ++t) {
        double acc = c.bias ? m.conv_b.get(ch) : 0.0;
        for (int64_t j = 0; j < Kc; ++j) acc += m.conv_w.get(ch * Kc + j) * seq[size_t(t + j)];
        y[size_t(t)][size_t(ch)] = round_as(c.act, silu(acc));
        if (c.intermediates && Kc > 1)
          for (int64_t j = 0; j < Kc - 1; ++j)
            m.inter_win.set(((n * m.inter_win.shape[1] + t) * C + ch) * (Kc - 1) + j, seq[size_t(t + 1 + j)]);
      }
      if (c.commit && conv_ok && Kc > 1) {
        if (cols) {
          for (int64_t i = 0; i + 1 < Kc - 1; ++i) m.conv_state.set((conv_slot * C + ch) * Lc + i, seq[size_t(i + 1)]);
          for (int64_t t = 0; t < len; ++t) m.conv_state.set((conv_slot * C + ch) * Lc + Kc - 2 + t, xat(t, ch));
        } else {
          for (int64_t j = 0; j < Kc - 1; ++j) m.conv_state.set((conv_slot * C + ch) * Lc + j, seq[size_t(len + j)]);
        }
      }
    }
    for (int64_t h = 0; h < c.Hv; ++h) {
      const int64_t ik = h / r;
      std::vector<double> S(static_cast<size_t>(K * V));
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) S[size_t(i * V + j)] = m.pool.get(sidx(slot, h, i, j));
      for (int64_t t = 0; t < len; ++t) {
        const std::vector<double>& yt = y[size_t(t)];
        std::vector<double> q(static_cast<size_t>(K)), k(static_cast<size_t>(K)), v(static_cast<size_t>(V));
        double sq = 0, sk = 0;
        for (int64_t d = 0; d < K; ++d) {
          q[size_t(d)] = yt[size_t(ik * K + d)];
          k[size_t(d)] = yt[size_t(c.Hqk * K + ik * K + d)];
          sq += q[size_t(d)] * q[size_t(d)];
          sk += k[size_t(d)] * k[size_t(d)];
        }
        for (int64_t d = 0; d < K; ++d)
          q[size_t(d)] *= scale / std::sqrt(sq + 1e-6), k[size_t(d)] /= std::sqrt(sk + 1e-6);
        for (int64_t d = 0; d < V; ++d) v[size_t(d)] = yt[size_t(2 * c.Hqk * K + h * V + d)];
        const int64_t gi = (bi * Tt + start_tok + t) * c.Hv + h;
        const double u = m.a.get(gi) + m.dt_bias.get(h);
        const double sp = u > 20 ? u : std::log1p(std::exp(u));
        const double alpha = std::exp(-std::exp(m.A_log.get(h)) * sp), beta = 1.0 / (1.0 + std::exp(-m.b.get(gi)));
        for (auto& s : S) s *= alpha;  // decay first
        std::vector<double> o(static_cast<size_t>(V), 0.0);
        for (int64_t j = 0; j < V; ++j) {
          double e = 0;
          for (int64_t i = 0; i < K; ++i) e += S[size_t(i * V + j)] * k[size_t(i)];
          const double delta = beta * (v[size_t(j)] - e);
          for (int64_t i = 0; i < K; ++i) S[size_t(i * V + j)] += k[size_t(i)] * delta;
          for (int64_t i = 0; i < K; ++i) o[size_t(j)] += S[size_t(i * V + j)] * q[size_t(i)];
        }
        double ss = 0;
        for (int64_t j = 0; j < V; ++j) o[size_t(j)] = round_as(c.act, o[size_t(j)]), ss += o[size_t(j)] * o[size_t(j)];
        const double rho = 1.0 / std::sqrt(ss / double(V) + 1e-6);
        for (int64_t j = 0; j < V; ++j) {
          const double zz = m.z.get(gi * V + j);
          m.out.set(gi * V + j, o[size_t(j)] * rho * m.norm_w.get(j) * silu(zz));
        }
        if (cols && c.commit && t < cols) {
          const int64_t st = int64_t(m.si.get(n * cols + t));
          if (slot_ok(st))
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < V; ++j) m.pool.set(sidx(st, h, i, j), S[size_t(i * V + j)]);
        }
        if (c.intermediates) {
          const int64_t i0 = c.layout == StateLayout::k_major ? K : V, i1 = c.layout == StateLayout::k_major ? V : K;
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < V; ++j) {
              const int64_t aa = c.layout == StateLayout::k_major ? i : j,
                            bb = c.layout == StateLayout::k_major ? j : i;
              m.inter.set((((n * m.inter.shape[1] + t) * c.Hv + h) * i0 + aa) * i1 + bb, S[size_t(i * V + j)]);
            }
        }
      }
      if (!cols && c.commit)
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) m.pool.set(sidx(slot, h, i, j), S[size_t(i * V + j)]);
    }
  }
}

}  // namespace flashgdn::test
