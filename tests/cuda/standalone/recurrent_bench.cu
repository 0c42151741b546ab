// Standalone device harness for the recurrent, commit and gating kernels (not built by CMake).
// It calls the CUDA backend directly (flashgdn::cuda::*) with hand-resolved dims, so it needs neither the
// validation layer nor the CPU backend, and checks against its own fp64 recurrence (gdn-math §1.2, §8).
//
// Build (repo root; one nvcc per file, JOBS at a time; extra flags go to nvcc):
//   JOBS=16 tests/cuda/standalone/build.sh /tmp/rec [-DFGDN_REC_PREFETCH=1]
// Run: ./recurrent_bench [check] [small] [bench] [sweep] [wysweep] [diag] [persistent|direct|wy|wy-mma]
//   (default: check bench)
//   check: correctness cases (every feature combination, all V-tile widths) + graph replay + 1000-launch repeat
//   small: the correctness cases only (fast enough for compute-sanitizer)
//   bench: the target shapes (H200; Hqk=16, Hv=32, K=V=128) with the default tile; sweep: every tile width;
//   wysweep: the new tiles alone: wy and wy-mma on the multi-token shapes at 16 and 32 columns, direct on the
//   large decode shapes at 32, 64 and (16-bit pools) 128 columns
//   diag: shapes that split the cost (per-token slope, second staging chunk, K-major barrier, l2norm)
//   persistent / direct / wy / wy-mma: run only the named kernel families; default: all four (recurrent_kernel.cuh,
//   direct_kernel.cuh, wy_kernel.cuh with its CUDA-core and its tensor-core engine), checked one after the other
//   and benched side by side (one table row per shape and tile: the times and the speedup of wy-mma over the best
//   of the other three; the wy families run only on multi-token K-major shapes). The dispatch switches
//   (FLASHGDN_RECURRENT_DIRECT / _WY / _WY_MMA) are bypassed: the harness calls each family explicitly.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "api/internal.hpp"
#include "common/dtype.hpp"
#include "cuda/recurrent/recurrent_args.hpp"

using namespace flashgdn;

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)
#define ST_OK(x)                                                                            \
  do {                                                                                      \
    Status s_ = (x);                                                                        \
    if (!s_.ok()) {                                                                         \
      std::printf("status error at %s:%d: %s\n", __FILE__, __LINE__, s_.message().c_str()); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

// ---- host tensors (double values stored rounded to a dtype) -------------------------------------------
struct HT {
  DType dt = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  void* dev = nullptr;
  HT() = default;
  HT(DType d, std::vector<int64_t> s) : dt(d), shape(std::move(s)) {
    bytes.assign(size_t(numel() * dtype_size(dt)), 0);
  }
  int64_t numel() const {  // 0 for an absent (shape-less) tensor
    if (shape.empty()) return 0;
    int64_t n = 1;
    for (auto x : shape) n *= x;
    return n;
  }
  size_t nbytes() const { return bytes.size(); }
  double get(int64_t i) const { return detail::load_as_double(bytes.data(), dt, i); }
  void set(int64_t i, double x) { detail::store_from_double(bytes.data(), dt, i, x); }
  void upload() {
    if (!dev) CK(cudaMalloc(&dev, std::max<size_t>(nbytes(), 16)));
    CK(cudaMemcpy(dev, bytes.data(), nbytes(), cudaMemcpyHostToDevice));
  }
  void download() { CK(cudaMemcpy(bytes.data(), dev, nbytes(), cudaMemcpyDeviceToHost)); }
  void poison() {  // NaN for floats
    for (int64_t i = 0; i < numel(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
  }
  TensorView view() const {
    TensorView v;
    v.data = dev, v.dtype = dt, v.device = DeviceType::cuda, v.ndim = int32_t(shape.size());
    int64_t st = 1;
    for (int i = v.ndim - 1; i >= 0; --i) v.shape[i] = shape[size_t(i)], v.strides[i] = st, st *= shape[size_t(i)];
    return v;
  }
  void free_dev() {
    if (dev) cudaFree(dev);
    dev = nullptr;
  }
};

double round_to(DType dt, double x) {
  HT t(dt, {1});
  t.set(0, x);
  return t.get(0);
}

// ---- a test case ----------------------------------------------------------------------------------------
struct Case {
  std::string name;
  int64_t N = 3, T = 1;          // fixed length: N rows of T tokens
  std::vector<int64_t> seqlens;  // non-empty: varlen
  int64_t Hqk = 2, Hv = 4, K = 64, V = 64;
  StateLayout layout = StateLayout::k_major;
  bool pool = true;
  DType pool_dt = DType::f32;
  int64_t T_max = 0;  // > 0: 2-D state_indices [N, T_max]
  bool nacc = false;
  bool inter = false;
  DType inter_dt = DType::f32;
  bool commit = true;
  bool null_invalid = false;
  bool sentinels = false;  // invalid slots / counts in some rows
  DType qkv_dt = DType::f32;
  bool gate_raw = false, beta_raw = false, neg_eig = false, l2 = true, has_g = true, has_beta = true;
  bool h0 = true, hT = true;  // without a pool
  bool idx64 = false;
  float scale = 0.f;
  uint64_t seed = 7;
};

struct Data {
  HT q, k, v, g, beta, A_log, dt_bias, cu, o, pool, si, na, inter, ii, h0, hT;
  RecurrentParams p;
  RecurrentDims d;
};

void build(const Case& c, Data& D) {
  std::mt19937_64 gen(c.seed);
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> ud;
  const bool varlen = !c.seqlens.empty();
  const int64_t N = varlen ? int64_t(c.seqlens.size()) : c.N;
  int64_t Ttot = c.T;
  if (varlen) {
    Ttot = 0;
    for (auto l : c.seqlens) Ttot += l;
  }
  const int64_t B = varlen ? 1 : N;
  D.q = HT(c.qkv_dt, {B, Ttot, c.Hqk, c.K});
  D.k = HT(c.qkv_dt, {B, Ttot, c.Hqk, c.K});
  D.v = HT(c.qkv_dt, {B, Ttot, c.Hv, c.V});
  D.o = HT(c.qkv_dt, {B, Ttot, c.Hv, c.V});
  for (int64_t i = 0; i < D.q.numel(); ++i) D.q.set(i, nd(gen));
  for (int64_t i = 0; i < D.k.numel(); ++i) D.k.set(i, c.l2 ? nd(gen) : nd(gen) / std::sqrt(double(c.K)));
  for (int64_t i = 0; i < D.v.numel(); ++i) D.v.set(i, nd(gen));
  if (c.has_g) {
    D.g = HT(DType::f32, {B, Ttot, c.Hv});
    for (int64_t i = 0; i < D.g.numel(); ++i) D.g.set(i, c.gate_raw ? nd(gen) : -ud(gen));
  }
  if (c.has_beta) {
    D.beta = HT(DType::f32, {B, Ttot, c.Hv});
    for (int64_t i = 0; i < D.beta.numel(); ++i) D.beta.set(i, c.beta_raw ? nd(gen) : 1.0 / (1.0 + std::exp(-nd(gen))));
  }
  if (c.gate_raw) {
    D.A_log = HT(DType::f32, {c.Hv});
    D.dt_bias = HT(DType::f32, {c.Hv});
    for (int64_t h = 0; h < c.Hv; ++h) D.A_log.set(h, ud(gen) - 1.5), D.dt_bias.set(h, nd(gen));
  }
  if (varlen) {
    D.cu = HT(c.idx64 ? DType::i64 : DType::i32, {N + 1});
    int64_t acc = 0;
    D.cu.set(0, 0);
    for (int64_t n = 0; n < N; ++n) acc += c.seqlens[size_t(n)], D.cu.set(n + 1, double(acc));
  }
  const DType idt = c.idx64 ? DType::i64 : DType::i32;
  const int64_t R = c.layout == StateLayout::k_major ? c.K : c.V, C = c.layout == StateLayout::k_major ? c.V : c.K;
  int64_t slots = 0;
  if (c.pool) {
    const int64_t per_row = c.T_max > 0 ? c.T_max : 1;
    slots = N * per_row + 3;
    D.pool = HT(c.pool_dt, {slots, c.Hv, R, C});
    for (int64_t i = 0; i < D.pool.numel(); ++i) D.pool.set(i, 0.1 * nd(gen));
    std::vector<int64_t> perm(static_cast<size_t>(slots));
    for (int64_t i = 0; i < slots; ++i) perm[size_t(i)] = i;
    std::shuffle(perm.begin() + 1, perm.end(), gen);  // keep slot 0 out of the first draws
    int64_t next = 1;
    if (c.T_max > 0) {
      D.si = HT(idt, {N, c.T_max});
      for (int64_t n = 0; n < N; ++n)
        for (int64_t t = 0; t < c.T_max; ++t) D.si.set(n * c.T_max + t, double(perm[size_t(next++)]));
      if (c.nacc) {
        D.na = HT(idt, {N});
        for (int64_t n = 0; n < N; ++n) D.na.set(n, double(1 + (n * 7) % c.T_max));
      }
      if (c.sentinels) {
        // row 0: a = T_max (the last column), row 1: a = 0 (invalid), row 2: a = T_max + 1 (invalid),
        // row 3: start slot -1, row 4: a mid write slot -1 (skipped write), row 5: start slot 0 (null).
        if (c.nacc) {
          if (N > 0) D.na.set(0, double(c.T_max));
          if (N > 1) D.na.set(1, 0);
          if (N > 2) D.na.set(2, double(c.T_max + 1));
          if (N > 3) D.na.set(3, 1);
        }
        if (N > 3) D.si.set(3 * c.T_max + 0, -1);
        if (N > 4 && c.T_max > 1) D.si.set(4 * c.T_max + 1, -1);
        if (N > 5) {
          if (c.nacc) D.na.set(5, 1);
          D.si.set(5 * c.T_max + 0, 0);
        }
      }
    } else {
      D.si = HT(idt, {N});
      for (int64_t n = 0; n < N; ++n) D.si.set(n, double(perm[size_t(next++)]));
      if (c.sentinels) {
        if (N > 0) D.si.set(0, -1);
        if (N > 1) D.si.set(1, double(slots));  // out of range
        if (N > 2) D.si.set(2, 0);              // invalid only with null_slot_is_invalid
      }
    }
  } else {
    if (c.h0) {
      D.h0 = HT(DType::f32, {N, c.Hv, R, C});
      for (int64_t i = 0; i < D.h0.numel(); ++i) D.h0.set(i, 0.1 * nd(gen));
    }
    if (c.hT) D.hT = HT(DType::f32, {N, c.Hv, R, C});
  }
  int64_t T_rows = varlen ? 0 : c.T;
  for (auto l : c.seqlens) T_rows = std::max(T_rows, l);
  if (c.inter) {
    const int64_t nbuf = N + 1;
    D.inter = HT(c.inter_dt, {nbuf, T_rows, c.Hv, R, C});
    D.ii = HT(idt, {N});
    for (int64_t n = 0; n < N; ++n) D.ii.set(n, double(N - n));  // reversed, entry 0 unused
    if (c.sentinels && N > 1) D.ii.set(N - 1, -1);
  }
  // upload + params
  auto up = [](HT& t) {
    if (!t.shape.empty()) t.upload();
  };
  for (HT* t : {&D.q, &D.k, &D.v, &D.g, &D.beta, &D.A_log, &D.dt_bias, &D.cu, &D.pool, &D.si, &D.na, &D.ii, &D.h0})
    up(*t);
  for (HT* t : {&D.o, &D.inter, &D.hT}) {
    if (!t->shape.empty()) t->poison(), t->upload();
  }
  auto vw = [](const HT& t) { return t.shape.empty() ? TensorView{} : t.view(); };
  RecurrentParams& p = D.p;
  p = RecurrentParams{};
  p.q = vw(D.q), p.k = vw(D.k), p.v = vw(D.v), p.g = vw(D.g), p.beta = vw(D.beta), p.A_log = vw(D.A_log);
  p.dt_bias = vw(D.dt_bias), p.cu_seqlens = vw(D.cu), p.o = vw(D.o), p.state_pool = vw(D.pool);
  p.state_indices = vw(D.si), p.num_accepted_tokens = vw(D.na), p.intermediate_states = vw(D.inter);
  p.intermediate_indices = vw(D.ii), p.initial_state = vw(D.h0), p.final_state = vw(D.hT);
  p.commit = c.commit, p.null_slot_is_invalid = c.null_invalid, p.scale = c.scale;
  p.use_qk_l2norm_in_kernel = c.l2;
  p.gate.use_gate_in_kernel = c.gate_raw, p.gate.use_beta_sigmoid_in_kernel = c.beta_raw;
  p.gate.allow_neg_eigval = c.neg_eig;
  p.state_layout = c.layout;
  RecurrentDims& d = D.d;
  d = RecurrentDims{};
  d.B = B, d.T = Ttot, d.N = N, d.Hqk = c.Hqk, d.Hv = c.Hv, d.K = c.K, d.V = c.V, d.varlen = varlen;
  d.scale = c.scale != 0.f ? c.scale : float(1.0 / std::sqrt(double(c.K)));
  d.slots = slots, d.T_max = c.T_max;
  if (c.inter) d.n_buf = D.inter.shape[0], d.T_buf = D.inter.shape[1];
}

// ---- fp64 reference ---------------------------------------------------------------------------------------
struct Ref {
  std::vector<double> o;      // like D.o; NaN where not written
  std::vector<double> pool;   // expected pool (stored-dtype values)
  std::vector<double> inter;  // NaN where not written
  std::vector<double> hT;
  std::set<int64_t> written_slots;
  std::vector<char> zero_rows;  // per (b, t) output row: 1 = must be exactly zero
};

Ref reference(const Case& c, const Data& D) {
  const RecurrentDims& d = D.d;
  Ref r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.o.assign(size_t(D.o.numel()), nan);
  for (int64_t i = 0; i < D.pool.numel(); ++i) r.pool.push_back(D.pool.get(i));
  r.inter.assign(size_t(D.inter.numel()), nan);
  r.hT.assign(size_t(D.hT.numel()), nan);
  r.zero_rows.assign(size_t(d.B * d.T), 0);
  const bool kmaj = c.layout == StateLayout::k_major;
  const int64_t K = d.K, V = d.V, Hv = d.Hv, grp = d.Hv / d.Hqk;
  auto sidx = [&](int64_t i, int64_t j) { return kmaj ? i * V + j : j * K + i; };  // within one state
  auto slot_ok = [&](int64_t s) { return s >= 0 && s < d.slots && !(c.null_invalid && s == 0); };
  for (int64_t n = 0; n < d.N; ++n) {
    int64_t bos = 0, len = d.T, b = n;
    if (d.varlen) bos = int64_t(D.cu.get(n)), len = int64_t(D.cu.get(n + 1)) - bos, b = 0;
    bool valid = true;
    int64_t slot = -1;
    if (c.pool) {
      if (d.T_max > 0) {
        int64_t a = D.na.shape.empty() ? 1 : int64_t(D.na.get(n));
        if (a < 1 || a > d.T_max)
          valid = false;
        else
          slot = int64_t(D.si.get(n * d.T_max + a - 1));
      } else {
        slot = int64_t(D.si.get(n));
      }
      valid = valid && slot_ok(slot);
    }
    int64_t ibuf = -1;
    if (c.inter) {
      ibuf = int64_t(D.ii.get(n));
      if (ibuf < 0 || ibuf >= d.n_buf) ibuf = -1;
    }
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t hq = h / grp;
      std::vector<double> S(static_cast<size_t>(K * V), 0.0);
      if (c.pool) {
        if (valid)
          for (int64_t e = 0; e < K * V; ++e) S[size_t(e)] = D.pool.get((slot * Hv + h) * K * V + e);
      } else if (c.h0) {
        for (int64_t e = 0; e < K * V; ++e) S[size_t(e)] = D.h0.get((n * Hv + h) * K * V + e);
      }
      if (len == 0) {
        if (!c.pool && c.hT)
          for (int64_t e = 0; e < K * V; ++e) r.hT[size_t((n * Hv + h) * K * V + e)] = S[size_t(e)];
        continue;
      }
      if (!valid) {
        for (int64_t t = 0; t < len; ++t) {
          r.zero_rows[size_t(b * d.T + bos + t)] = 1;
          for (int64_t j = 0; j < V; ++j) r.o[size_t(((b * d.T + bos + t) * Hv + h) * V + j)] = 0.0;
        }
        continue;
      }
      for (int64_t t = 0; t < len; ++t) {
        const int64_t tok = b * d.T + bos + t;
        std::vector<double> q(static_cast<size_t>(K)), k(static_cast<size_t>(K));
        double nq = 0, nk = 0;
        for (int64_t i = 0; i < K; ++i) {
          q[size_t(i)] = D.q.get((tok * d.Hqk + hq) * K + i), k[size_t(i)] = D.k.get((tok * d.Hqk + hq) * K + i);
          nq += q[size_t(i)] * q[size_t(i)], nk += k[size_t(i)] * k[size_t(i)];
        }
        if (c.l2)
          for (int64_t i = 0; i < K; ++i) q[size_t(i)] /= std::sqrt(nq + 1e-6), k[size_t(i)] /= std::sqrt(nk + 1e-6);
        double g = c.has_g ? D.g.get(tok * Hv + h) : 0.0;
        if (c.gate_raw) {
          double x = g + D.dt_bias.get(h);
          double sp = x <= 20.0 ? std::log1p(std::exp(x)) : x;
          g = -std::exp(D.A_log.get(h)) * sp;
        }
        double be = c.has_beta ? D.beta.get(tok * Hv + h) : 1.0;
        if (c.beta_raw) be = (c.neg_eig ? 2.0 : 1.0) / (1.0 + std::exp(-be));
        const double al = std::exp(g);
        for (int64_t j = 0; j < V; ++j) {  // u = beta (v - alpha S^T k); S = alpha S + k u^T
          double ks = 0;
          for (int64_t i = 0; i < K; ++i) ks += S[size_t(sidx(i, j))] * k[size_t(i)];
          const double u = be * (D.v.get((tok * Hv + h) * V + j) - al * ks);
          for (int64_t i = 0; i < K; ++i) S[size_t(sidx(i, j))] = al * S[size_t(sidx(i, j))] + k[size_t(i)] * u;
        }
        for (int64_t j = 0; j < V; ++j) {  // o = scale S^T q
          double os = 0;
          for (int64_t i = 0; i < K; ++i) os += S[size_t(sidx(i, j))] * q[size_t(i)];
          r.o[size_t((tok * Hv + h) * V + j)] = d.scale * os;
        }
        if (ibuf >= 0 && t < d.T_buf)
          for (int64_t e = 0; e < K * V; ++e)
            r.inter[size_t(((ibuf * d.T_buf + t) * Hv + h) * K * V + e)] = round_to(c.inter_dt, S[size_t(e)]);
        if (c.pool && c.commit && d.T_max > 0 && t < d.T_max) {
          const int64_t st = int64_t(D.si.get(n * d.T_max + t));
          if (slot_ok(st)) {
            r.written_slots.insert(st);
            for (int64_t e = 0; e < K * V; ++e)
              r.pool[size_t((st * Hv + h) * K * V + e)] = round_to(c.pool_dt, S[size_t(e)]);
          }
        }
      }
      if (c.pool && c.commit && d.T_max == 0) {
        r.written_slots.insert(slot);
        for (int64_t e = 0; e < K * V; ++e)
          r.pool[size_t((slot * Hv + h) * K * V + e)] = round_to(c.pool_dt, S[size_t(e)]);
      }
      if (!c.pool && c.hT)
        for (int64_t e = 0; e < K * V; ++e) r.hT[size_t((n * Hv + h) * K * V + e)] = S[size_t(e)];
    }
  }
  return r;
}

// rel Frobenius error over entries where ref is not NaN; gpu NaN there -> inf. Entries where ref is NaN must
// still be NaN on the GPU (unwritten). Returns inf on any violation.
double compare(const HT& gpu, const std::vector<double>& ref, const char* what, bool* ok) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < gpu.numel(); ++i) {
    const double x = gpu.get(i), y = ref[size_t(i)];
    if (std::isnan(y)) {
      if (!std::isnan(x)) {
        std::printf("    %s[%lld]: written (%g) where nothing should be\n", what, (long long)i, x);
        *ok = false;
        return INFINITY;
      }
      continue;
    }
    if (!std::isfinite(x)) {
      std::printf("    %s[%lld]: non-finite %g, expected %g\n", what, (long long)i, x, y);
      *ok = false;
      return INFINITY;
    }
    num += (x - y) * (x - y), den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double tol_for(DType dt) {
  return dt == DType::f32 ? 2e-5 : (dt == DType::bf16 ? 1.2e-2 : 3e-3);
}

int g_fail = 0;
// Which kernel family launch() runs: 0 persistent (recurrent_kernel.cuh), 1 direct (direct_kernel.cuh),
// 2 wy (wy_kernel.cuh, CUDA-core reductions), 3 wy-mma (wy_kernel.cuh, tensor-core reductions); the wy launcher
// sends V-major states to the persistent kernel.
constexpr int kFamilies = 4;
int g_path = 0;
// Family 4, "pipe": the pipelined single-token direct kernel (direct_pipe_kernel.cuh; falls back to the direct
// kernel outside fixed T = 1 K-major 1-D pools), with these stages / threads per CTA (0 = default) and grid cap
// (0 = none).
constexpr int kPipe = 4;
int g_pipe_stages = 0, g_pipe_threads = 0, g_pipe_max_ctas = 0;
constexpr int kPipeConfigs[3][2] = {{2, 128}, {3, 128}, {3, 256}};  // (stages, threads) instantiated
bool g_pdl = false;  // launch the direct kernel with PDL (RecurrentArgs::pdl)

Status launch(const cuda::RecurrentArgs& a0, int bv, void* stream) {
  cuda::RecurrentArgs a = a0;
  a.pdl = g_pdl;
  if (g_pdl && stream == nullptr) {  // PDL launches go to a created stream (not the legacy default one)
    static cudaStream_t ps = [] {
      cudaStream_t x;
      CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
      return x;
    }();
    stream = ps;
  }
  if (g_path == kPipe)
    return cuda::recurrent_launch_pipe_config(a, bv, g_pipe_stages, g_pipe_threads, g_pipe_max_ctas, stream);
  if (g_path >= 2) return cuda::recurrent_launch_wy_engine(a, bv, g_path == 3, stream);
  return g_path == 1 ? cuda::recurrent_launch_direct(a, bv, stream) : cuda::recurrent_launch_persistent(a, bv, stream);
}
int default_bv(const cuda::RecurrentArgs& a) {
  if (g_path == kPipe)
    return cuda::recurrent_pipe_supported(a) ? cuda::recurrent_pipe_default_bv(a)
                                             : cuda::recurrent_direct_default_bv(a);
  if (g_path >= 2)
    return cuda::recurrent_wy_supported(a) ? cuda::recurrent_wy_default_bv(a) : cuda::recurrent_default_bv(a);
  return g_path == 1 ? cuda::recurrent_direct_default_bv(a) : cuda::recurrent_default_bv(a);
}
const char* path_name() {
  if (g_path == kPipe) return "pipe";
  return g_path == 3 ? "wy-mma" : g_path == 2 ? "wy" : (g_path == 1 ? "direct" : "persistent");
}

bool run_case(const Case& c, int bv) {
  Data D;
  build(c, D);
  const HT pool0 = D.pool;
  cuda::RecurrentArgs a = cuda::make_recurrent_args(D.p, D.d);
  ST_OK(launch(a, bv, nullptr));
  CK(cudaDeviceSynchronize());
  Ref r = reference(c, D);
  bool ok = true;
  D.o.download();
  const double eo = compare(D.o, r.o, "o", &ok);
  // Zero rows must be exact zeros (invalid rows), checked through the reference (0 exactly, rel err counts)
  for (size_t row = 0; row < r.zero_rows.size(); ++row)
    if (r.zero_rows[row])
      for (int64_t h = 0; h < D.d.Hv; ++h)
        for (int64_t j = 0; j < D.d.V; ++j) {
          double x = D.o.get((int64_t(row) * D.d.Hv + h) * D.d.V + j);
          if (r.o[size_t((int64_t(row) * D.d.Hv + h) * D.d.V + j)] == 0.0 && x != 0.0) ok = false;
        }
  double ep = 0, ei = 0, eh = 0;
  if (c.pool) {
    D.pool.download();
    ep = compare(D.pool, r.pool, "pool", &ok);
    // Untouched slots bit-identical.
    const size_t slot_bytes = size_t(D.d.Hv * D.d.K * D.d.V * dtype_size(c.pool_dt));
    for (int64_t s = 0; s < D.d.slots; ++s)
      if (!r.written_slots.count(s) &&
          std::memcmp(D.pool.bytes.data() + s * slot_bytes, pool0.bytes.data() + s * slot_bytes, slot_bytes) != 0) {
        std::printf("    pool slot %lld changed but must be untouched\n", (long long)s);
        ok = false;
      }
  }
  if (c.inter) D.inter.download(), ei = compare(D.inter, r.inter, "inter", &ok);
  if (!c.pool && c.hT) D.hT.download(), eh = compare(D.hT, r.hT, "hT", &ok);
  const double to = tol_for(c.qkv_dt) * (c.pool && c.pool_dt != DType::f32 ? 4 : 1);
  if (!(eo <= to) || !(ep <= tol_for(c.pool_dt)) || !(ei <= tol_for(c.inter_dt)) || !(eh <= 2e-5)) ok = false;
  std::printf("  %-4s %-10s %-44s bv=%2d  o %.2e  pool %.2e  inter %.2e  hT %.2e\n", ok ? "ok" : "FAIL", path_name(),
              c.name.c_str(), bv, eo, ep, ei, eh);
  if (!ok) ++g_fail;
  for (HT* t : {&D.q, &D.k, &D.v, &D.g, &D.beta, &D.A_log, &D.dt_bias, &D.cu, &D.o, &D.pool, &D.si, &D.na, &D.inter,
                &D.ii, &D.h0, &D.hT})
    t->free_dev();
  return ok;
}

std::vector<Case> check_cases() {
  std::vector<Case> cs;
  auto add = [&](Case c) {
    c.seed = 100 + cs.size();
    cs.push_back(c);
  };
  Case c;
  // Decode on a 1-D pool, every layout / dtype / K x V.
  for (StateLayout L : {StateLayout::k_major, StateLayout::v_major})
    for (DType pd : {DType::f32, DType::bf16, DType::f16})
      for (auto kv : {std::pair<int, int>{64, 128}, {128, 64}, {128, 128}}) {
        c = Case{};
        c.name = std::string("decode ") + (L == StateLayout::k_major ? "kmaj " : "vmaj ") + dtype_name(pd) + " K" +
                 std::to_string(kv.first) + "V" + std::to_string(kv.second);
        c.layout = L, c.pool_dt = pd, c.K = kv.first, c.V = kv.second, c.N = 5, c.T = 1;
        add(c);
      }
  // Single-token rows on 16-bit pools with per-token state writes (the direct kernel's packed path writes
  // them from fp32 values): fp32 / bf16 intermediates, protocol A, K-major and V-major.
  for (StateLayout L : {StateLayout::k_major, StateLayout::v_major}) {
    c = Case{};
    c.name = std::string("decode bf16 pool + inter f32 commit ") + (L == StateLayout::k_major ? "kmaj" : "vmaj");
    c.layout = L, c.pool_dt = DType::bf16, c.inter = true, c.K = 128, c.V = 128, c.N = 4, c.T = 1;
    add(c);
    c = Case{};
    c.name =
        std::string("decode f16 pool verify A T=1 Tmax=2 inter bf16 ") + (L == StateLayout::k_major ? "kmaj" : "vmaj");
    c.layout = L, c.pool_dt = DType::f16, c.T = 1, c.T_max = 2, c.nacc = true, c.inter = true;
    c.inter_dt = DType::bf16, c.K = 128, c.V = 128, c.N = 6, c.sentinels = true;
    add(c);
  }
  c = Case{};
  c.name = "decode bf16 qkv, sentinels -1/oob";
  c.qkv_dt = DType::bf16;
  c.N = 6;
  c.sentinels = true;
  add(c);
  c = Case{};
  c.name = "decode f16 qkv, null slot 0 invalid, i64 idx";
  c.qkv_dt = DType::f16;
  c.N = 6;
  c.sentinels = true;
  c.null_invalid = true;
  c.idx64 = true;
  add(c);
  c = Case{};
  c.name = "decode raw gates, neg eig, no l2, scale";
  c.gate_raw = true;
  c.beta_raw = true;
  c.neg_eig = true;
  c.l2 = false;
  c.scale = 0.3f;
  add(c);
  c = Case{};
  c.name = "decode no g no beta, GQA 1->4";
  c.has_g = false;
  c.has_beta = false;
  c.Hqk = 1;
  add(c);
  c = Case{};
  c.name = "decode MHA Hqk=Hv=3 T=1 kmaj no commit";
  c.Hqk = 3;
  c.Hv = 3;
  c.commit = false;
  add(c);
  c = Case{};
  c.name = "multi-token T=12 1-D commit K128V128";
  c.T = 12;
  c.K = 128;
  c.V = 128;
  c.N = 3;
  add(c);
  c = Case{};
  c.name = "multi-token T=20 (2 chunks) vmaj bf16 pool";
  c.T = 20;
  c.layout = StateLayout::v_major;
  c.pool_dt = DType::bf16;
  c.N = 2;
  add(c);
  c = Case{};
  c.name = "varlen [1,0,5,3,0] 1-D pool kmaj";
  c.seqlens = {1, 0, 5, 3, 0};
  add(c);
  c = Case{};
  c.name = "varlen [0,17,2] no pool h0 hT vmaj K64V128";
  c.seqlens = {0, 17, 2};
  c.pool = false;
  c.layout = StateLayout::v_major;
  c.K = 64;
  c.V = 128;
  add(c);
  c = Case{};
  c.name = "no pool, no h0 (zeros), hT, T=7";
  c.pool = false;
  c.h0 = false;
  c.T = 7;
  add(c);
  c = Case{};
  c.name = "no pool, h0, no hT, bf16 qkv, T=3";
  c.pool = false;
  c.hT = false;
  c.T = 3;
  c.qkv_dt = DType::bf16;
  add(c);
  // Protocol A: 2-D slots, num_accepted 1 / T / mid / 0 / T_max+1, skipped write slot, null slot.
  c = Case{};
  c.name = "verify A 2-D slots T=4 nacc sentinels kmaj";
  c.T = 4;
  c.T_max = 4;
  c.nacc = true;
  c.N = 7;
  c.sentinels = true;
  c.null_invalid = true;
  add(c);
  c = Case{};
  c.name = "verify A 2-D T=3 Tmax=5 nacc vmaj bf16 pool K128V64";
  c.T = 3;
  c.T_max = 5;
  c.nacc = true;
  c.N = 6;
  c.sentinels = true;
  c.layout = StateLayout::v_major;
  c.pool_dt = DType::bf16;
  c.K = 128;
  c.V = 64;
  add(c);
  c = Case{};
  c.name = "verify A 2-D no nacc (a=1), varlen [3,0,2,4]";
  c.seqlens = {3, 0, 2, 4};
  c.T_max = 4;
  add(c);
  c = Case{};
  c.name = "verify A 2-D, commit=false (pool untouched)";
  c.T = 3;
  c.T_max = 3;
  c.nacc = true;
  c.commit = false;
  add(c);
  // Protocol B: intermediate buffer, no commit; dtypes; invalid buffer index.
  for (DType idt : {DType::f32, DType::bf16, DType::f16}) {
    c = Case{};
    c.name = std::string("verify B inter ") + dtype_name(idt) + " no commit T=5 sentinels";
    c.T = 5;
    c.inter = true;
    c.inter_dt = idt;
    c.commit = false;
    c.N = 4;
    c.sentinels = true;
    c.K = 128;
    add(c);
  }
  c = Case{};
  c.name = "verify B inter f32 + commit, vmaj, varlen [2,0,6]";
  c.seqlens = {2, 0, 6};
  c.inter = true;
  c.layout = StateLayout::v_major;
  add(c);
  c = Case{};
  c.name = "verify A + inter bf16, 2-D T=4";
  c.T = 4;
  c.T_max = 4;
  c.nacc = true;
  c.inter = true;
  c.inter_dt = DType::bf16;
  c.N = 3;
  add(c);
  // Multi-token rows on K-major states (the wy kernel's range: chunks of 8 tokens, lengths 0 / 1 / 8 / 9 / 16 /
  // 33), every pool dtype, protocols A and B, pool-less, GQA and raw gates.
  c = Case{};
  c.name = "mt varlen [16,0,1,33,9,8] 1-D commit K128V128";
  c.seqlens = {16, 0, 1, 33, 9, 8};
  c.K = 128, c.V = 128;
  add(c);
  c = Case{};
  c.name = "mt T=12 bf16 pool bf16 qkv K128V64";
  c.T = 12, c.N = 3, c.K = 128, c.V = 64, c.pool_dt = DType::bf16, c.qkv_dt = DType::bf16;
  add(c);
  c = Case{};
  c.name = "mt T=9 f16 pool K64V64 GQA 1->4 raw gates";
  c.T = 9, c.N = 3, c.pool_dt = DType::f16, c.Hqk = 1, c.gate_raw = true, c.beta_raw = true, c.neg_eig = true;
  add(c);
  c = Case{};
  c.name = "mt T=16 no l2 scale no g no beta";
  c.T = 16, c.N = 2, c.K = 128, c.l2 = false, c.scale = 0.2f, c.has_g = false, c.has_beta = false;
  add(c);
  c = Case{};
  c.name = "mt varlen [0,17,2,16] no pool h0 hT K128V128";
  c.seqlens = {0, 17, 2, 16};
  c.pool = false, c.K = 128, c.V = 128;
  add(c);
  c = Case{};
  c.name = "mt verify A 2-D T=16 nacc sentinels K128V128";
  c.T = 16, c.T_max = 16, c.nacc = true, c.N = 7, c.sentinels = true, c.null_invalid = true, c.K = 128, c.V = 128;
  add(c);
  c = Case{};
  c.name = "mt verify A 2-D T=12 Tmax=13 bf16 pool K128V64";
  c.T = 12, c.T_max = 13, c.nacc = true, c.N = 6, c.sentinels = true, c.pool_dt = DType::bf16, c.K = 128, c.V = 64;
  add(c);
  c = Case{};
  c.name = "mt verify B inter bf16 T=12 no commit K128V128";
  c.T = 12, c.N = 4, c.inter = true, c.inter_dt = DType::bf16, c.commit = false, c.sentinels = true;
  c.K = 128, c.V = 128;
  add(c);
  // Enough rows (N Hv >= 4 x SMs) for the wy kernel's grouped walk (a CTA runs all V-tiles of a row, staging the
  // row's tokens once when it has <= 16 tokens).
  c = Case{};
  c.name = "mt grouped N=140 Hv=4 T=12 bf16 pool K64V128";
  c.N = 140, c.T = 12, c.V = 128, c.pool_dt = DType::bf16, c.qkv_dt = DType::bf16, c.sentinels = true;
  add(c);
  c = Case{};
  c.name = "mt grouped varlen 150 rows [0,1,7,8,9,16,17,33] K128V64";
  for (int i = 0; i < 150; ++i) c.seqlens.push_back(std::vector<int64_t>{0, 1, 7, 8, 9, 16, 17, 33}[size_t(i % 8)]);
  c.K = 128, c.V = 64;
  add(c);
  c = Case{};
  c.name = "mt grouped verify A 2-D T=10 nacc sentinels N=140";
  c.N = 140, c.T = 10, c.T_max = 10, c.nacc = true, c.sentinels = true, c.null_invalid = true;
  add(c);
  c = Case{};
  c.name = "mt grouped verify B inter bf16 T=16 N=140 no commit";
  c.N = 140, c.T = 16, c.inter = true, c.inter_dt = DType::bf16, c.commit = false, c.sentinels = true;
  add(c);
  c = Case{};
  c.name = "mt verify B inter f32 + commit varlen [12,0,3,16,20]";
  c.seqlens = {12, 0, 3, 16, 20};
  c.inter = true, c.K = 128, c.V = 128;
  add(c);
  return cs;
}

// ---- commit + gating checks ---------------------------------------------------------------------------
bool check_commit() {
  bool ok = true;
  for (DType pd : {DType::f32, DType::bf16})
    for (DType idt : {DType::f32, DType::bf16}) {
      std::mt19937_64 gen(5);
      std::normal_distribution<double> nd;
      const int64_t N = 5, slots = 8, nbuf = 6, Tb = 4, Hv = 2, R = 64, C = 128;
      HT pool(pd, {slots, Hv, R, C}), inter(idt, {nbuf, Tb, Hv, R, C}), si(DType::i32, {N}), ii(DType::i32, {N}),
          na(DType::i32, {N});
      for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, nd(gen));
      for (int64_t i = 0; i < inter.numel(); ++i) inter.set(i, nd(gen));
      const int sv[N] = {3, -1, 5, 7, 1}, iv[N] = {1, 2, -1, 5, 0}, nv[N] = {2, 1, 1, 4, 5};  // rows 1, 2, 4 skip
      for (int64_t n = 0; n < N; ++n) si.set(n, sv[n]), ii.set(n, iv[n]), na.set(n, nv[n]);
      HT expect = pool;
      for (int64_t n = 0; n < N; ++n) {
        if (sv[n] < 0 || iv[n] < 0 || nv[n] < 1 || nv[n] > Tb) continue;
        for (int64_t e = 0; e < Hv * R * C; ++e)
          expect.set(sv[n] * Hv * R * C + e, inter.get(((iv[n] * Tb) + nv[n] - 1) * Hv * R * C + e));
      }
      for (HT* t : {&pool, &inter, &si, &ii, &na}) t->upload();
      RecurrentCommitParams p;
      p.state_pool = pool.view(), p.intermediate_states = inter.view(), p.state_indices = si.view();
      p.intermediate_indices = ii.view(), p.num_accepted_tokens = na.view();
      CommitDims d;
      d.N = N, d.slots = slots, d.n_buf = nbuf, d.T_buf = Tb, d.Hv = Hv, d.K = R, d.V = C;
      ST_OK(cuda::recurrent_commit(p, d, nullptr));
      CK(cudaDeviceSynchronize());
      pool.download();
      bool same = pool.bytes == expect.bytes;
      std::printf("  %-4s commit pool %s <- inter %s (bit-exact, skipped rows untouched)\n", same ? "ok" : "FAIL",
                  dtype_name(pd), dtype_name(idt));
      ok = ok && same;
      for (HT* t : {&pool, &inter, &si, &ii, &na}) t->free_dev();
    }
  if (!ok) ++g_fail;
  return ok;
}

bool check_gating() {
  std::mt19937_64 gen(9);
  std::normal_distribution<double> nd;
  const int64_t B = 3, T = 5, Hv = 6;
  HT A(DType::f32, {Hv}), dtb(DType::f32, {Hv}), a(DType::bf16, {B, T, Hv}), b(DType::bf16, {B, T, Hv}),
      g(DType::f32, {B, T, Hv}), beta(DType::f32, {B, T, Hv});
  for (int64_t h = 0; h < Hv; ++h) A.set(h, nd(gen)), dtb.set(h, nd(gen));
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, 8 * nd(gen)), b.set(i, 3 * nd(gen));
  a.set(0, 30.0);  // the linear branch of softplus
  g.poison(), beta.poison();
  bool ok = true;
  for (bool neg : {false, true}) {
    for (HT* t : {&A, &dtb, &a, &b, &g, &beta}) t->upload();
    GatingParams p;
    p.A_log = A.view(), p.dt_bias = dtb.view(), p.a = a.view(), p.b = b.view(), p.g = g.view(), p.beta = beta.view();
    p.gate.allow_neg_eigval = neg;
    GatingDims d;
    d.rows = B * T, d.Hv = Hv;
    ST_OK(cuda::gating(p, d, nullptr));
    CK(cudaDeviceSynchronize());
    g.download(), beta.download();
    double eg = 0, eb = 0, ng = 0, nb = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const int64_t h = i % Hv;
      const double x = a.get(i) + dtb.get(h);
      const double gr = -std::exp(A.get(h)) * (x <= 20 ? std::log1p(std::exp(x)) : x);
      const double br = (neg ? 2.0 : 1.0) / (1 + std::exp(-b.get(i)));
      eg += (g.get(i) - gr) * (g.get(i) - gr), ng += gr * gr;
      eb += (beta.get(i) - br) * (beta.get(i) - br), nb += br * br;
    }
    eg = std::sqrt(eg / ng), eb = std::sqrt(eb / nb);
    const bool k = eg < 1e-6 && eb < 1e-6;
    std::printf("  %-4s gating neg_eig=%d  g %.2e  beta %.2e\n", k ? "ok" : "FAIL", int(neg), eg, eb);
    ok = ok && k;
  }
  for (HT* t : {&A, &dtb, &a, &b, &g, &beta}) t->free_dev();
  if (!ok) ++g_fail;
  return ok;
}

// Graph capture / replay equality and 1000-launch bitwise stability, on a no-commit verify (pool is read only,
// so every launch sees the same inputs).
// Fixed T = 1 launches with many tiles per CTA for the pipelined kernel (walks through every stage of the ring;
// the check also caps the grid at 2 CTAs).
std::vector<Case> pipe_cases() {
  std::vector<Case> cs;
  Case c;
  c.name = "pipe bf16 pool N=40 K128V128 bf16 qkv sentinels";
  c.N = 40, c.K = 128, c.V = 128, c.pool_dt = DType::bf16, c.qkv_dt = DType::bf16, c.sentinels = true;
  cs.push_back(c);
  c = Case{};
  c.name = "pipe f32 pool N=33 K128V128 null slot 0 i64 idx";
  c.N = 33, c.K = 128, c.V = 128, c.sentinels = true, c.null_invalid = true, c.idx64 = true;
  cs.push_back(c);
  c = Case{};
  c.name = "pipe f16 pool N=37 K64V128 f16 qkv raw gates no l2 no commit";
  c.N = 37, c.K = 64, c.V = 128, c.pool_dt = DType::f16, c.qkv_dt = DType::f16, c.gate_raw = true;
  c.beta_raw = true, c.neg_eig = true, c.l2 = false, c.scale = 0.3f, c.commit = false;
  cs.push_back(c);
  c = Case{};
  c.name = "pipe bf16 pool N=24 K64V64 no g no beta GQA 1->4";
  c.N = 24, c.pool_dt = DType::bf16, c.has_g = false, c.has_beta = false, c.Hqk = 1;
  cs.push_back(c);
  for (size_t i = 0; i < cs.size(); ++i) cs[i].seed = 900 + i;
  return cs;
}

bool check_graph_and_repeat() {
  Case c;
  c.name = "graph";
  c.T = 6, c.T_max = 6, c.nacc = true, c.commit = false, c.inter = true, c.inter_dt = DType::bf16, c.N = 4;
  c.K = 128, c.V = 128, c.qkv_dt = DType::bf16;
  if (g_path == kPipe) {  // the pipelined kernel's range: fixed T = 1, 1-D slots, no intermediates (o only)
    c.T = 1, c.T_max = 0, c.nacc = false, c.inter = false, c.pool_dt = DType::bf16, c.N = 40, c.sentinels = true;
  }
  Data D;
  build(c, D);
  cuda::RecurrentArgs a = cuda::make_recurrent_args(D.p, D.d);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  ST_OK(launch(a, 0, s));
  CK(cudaStreamSynchronize(s));
  HT o0 = D.o, i0 = D.inter;
  o0.dev = i0.dev = nullptr;
  o0.bytes.assign(D.o.nbytes(), 0), i0.bytes.assign(D.inter.nbytes(), 0);
  CK(cudaMemcpy(o0.bytes.data(), D.o.dev, D.o.nbytes(), cudaMemcpyDeviceToHost));
  if (c.inter) CK(cudaMemcpy(i0.bytes.data(), D.inter.dev, D.inter.nbytes(), cudaMemcpyDeviceToHost));
  // graph: poison, capture, replay
  D.o.poison(), D.o.upload();
  if (c.inter) D.inter.poison(), D.inter.upload();
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ST_OK(launch(a, 0, s));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  D.o.download();
  if (c.inter) D.inter.download();
  bool ok = D.o.bytes == o0.bytes && D.inter.bytes == i0.bytes;
  std::printf("  %-4s %-10s graph capture + replay bitwise equal to eager\n", ok ? "ok" : "FAIL", path_name());
  int bad = 0;
  std::vector<uint8_t> ob(D.o.nbytes());
  for (int it = 0; it < 1000; ++it) {
    ST_OK(launch(a, 0, s));
    CK(cudaMemcpyAsync(ob.data(), D.o.dev, ob.size(), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    if (ob != o0.bytes) ++bad;
  }
  if (c.inter) D.inter.download();
  if (D.inter.bytes != i0.bytes) ++bad;
  std::printf("  %-4s %-10s 1000 launches bitwise identical (%d mismatches)\n", bad == 0 ? "ok" : "FAIL", path_name(),
              bad);
  ok = ok && bad == 0;
  cudaGraphExecDestroy(ge), cudaGraphDestroy(g), cudaStreamDestroy(s);
  if (!ok) ++g_fail;
  return ok;
}

// ---- benchmark ------------------------------------------------------------------------------------------
double g_copy_tbs = 0;

// Non-zero pseudo-random values shift + amp * (+-[0.1, 0.6)), f32 or bf16, filled on the device.
__global__ void fill_kernel(void* p, bool bf16, int64_t n, float amp, float shift, uint64_t seed) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint64_t x = (uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  const float u = float(x >> 40) * (1.0f / 16777216.0f);
  const float val = shift + amp * (u < 0.5f ? -(0.1f + u) : (u - 0.4f));
  if (bf16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(val);
  else
    static_cast<float*>(p)[i] = val;
}

double measure_copy() {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float m;
    CK(cudaEventElapsedTime(&m, e0, e1));
    if (i >= 2) ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(a), cudaFree(b);
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e12;
}

struct BenchShape {
  std::string name;
  int64_t N, T;
  DType pool_dt;
  bool inter;  // per-token intermediate states (bf16), no commit
  StateLayout layout = StateLayout::k_major;
  const char* target;
  bool l2norm = true;   // false: no in-kernel l2norm (diag: staging cost)
  bool no_idx = false;  // true: no state_indices (row n uses slot n of a per-rotation pool view; diag: the slot hop)
};

struct BenchResult {
  double us = 0, tbs = 0;
  int bv = 0;
};

BenchResult bench_one(const BenchShape& b, int bv, FILE* log) {
  const int64_t Hqk = 16, Hv = 32, K = 128, V = 128;
  const int64_t state_elems = Hv * K * V;
  const double sbytes = double(state_elems) * dtype_size(b.pool_dt);
  // rotate pool slots and intermediate entries so one replay of the graph touches >= 400 MB
  const double per_call = b.N * (sbytes * (b.inter ? 1 : 2) + (b.inter ? b.T * state_elems * 2.0 : 0));
  int R = int(std::ceil(400e6 / per_call));
  R = std::max(2, std::min(R, 256));
  const int64_t slots = R * b.N;
  std::mt19937_64 gen(3);
  // activations (bf16, one set per rotation)
  const int64_t act_tok = b.N * b.T;
  auto dalloc = [](size_t n) {
    void* p;
    CK(cudaMalloc(&p, std::max<size_t>(n, 16)));
    return p;
  };
  auto fill_rand = [&](void* p, size_t bytes, DType dt, double amp, double shift = 0.0) {
    const int64_t n = int64_t(bytes / dtype_size(dt));
    fill_kernel<<<dim3(unsigned((n + 255) / 256)), 256>>>(p, dt == DType::bf16, n, float(amp), float(shift), gen());
    CK(cudaGetLastError());
  };
  const size_t qk_b = act_tok * Hqk * K * 2, v_b = act_tok * Hv * V * 2, gb_b = act_tok * Hv * 4;
  void* q = dalloc(qk_b * R);
  void* k = dalloc(qk_b * R);
  void* v = dalloc(v_b * R);
  void* o = dalloc(v_b * R);
  void* g = dalloc(gb_b * R);
  void* be = dalloc(gb_b * R);
  fill_rand(q, qk_b * R, DType::bf16, 1.0), fill_rand(k, qk_b * R, DType::bf16, 1.0);
  fill_rand(v, v_b * R, DType::bf16, 1.0);
  fill_rand(g, gb_b * R, DType::f32, 0.05, -0.06);  // g in (-0.1, -0.01): alpha close to 1
  fill_rand(be, gb_b * R, DType::f32, 0.3, 0.5);    // beta in (0.2, 0.8)
  const size_t pool_b = size_t(slots * sbytes);
  void* pool = dalloc(pool_b);
  fill_rand(pool, pool_b, b.pool_dt, 0.02);
  void* inter = nullptr;
  const int64_t nbuf = R * b.N;
  if (b.inter) {
    inter = dalloc(size_t(nbuf * b.T * state_elems * 2));
    CK(cudaMemset(inter, 0, size_t(nbuf * b.T * state_elems * 2)));
  }
  // indices per rotation: slots r*N + n (scrambled within the rotation)
  std::vector<int32_t> si(static_cast<size_t>(slots));
  for (int r = 0; r < R; ++r)
    for (int64_t n = 0; n < b.N; ++n) si[size_t(r * b.N + n)] = int32_t(r * b.N + (n * 37) % b.N);
  int32_t* dsi = static_cast<int32_t*>(dalloc(si.size() * 4));
  CK(cudaMemcpy(dsi, si.data(), si.size() * 4, cudaMemcpyHostToDevice));

  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int used_bv = 0;
  for (int r = 0; r < R; ++r) {
    RecurrentParams p;
    auto mk = [](void* d, DType dt, std::initializer_list<int64_t> sh) {
      return make_tensor(d, dt, sh, DeviceType::cuda);
    };
    p.q = mk(static_cast<char*>(q) + r * qk_b, DType::bf16, {b.N, b.T, Hqk, K});
    p.k = mk(static_cast<char*>(k) + r * qk_b, DType::bf16, {b.N, b.T, Hqk, K});
    p.v = mk(static_cast<char*>(v) + r * v_b, DType::bf16, {b.N, b.T, Hv, V});
    p.o = mk(static_cast<char*>(o) + r * v_b, DType::bf16, {b.N, b.T, Hv, V});
    p.g = mk(static_cast<char*>(g) + r * gb_b, DType::f32, {b.N, b.T, Hv});
    p.beta = mk(static_cast<char*>(be) + r * gb_b, DType::f32, {b.N, b.T, Hv});
    if (b.no_idx) {  // slots r N .. r N + N - 1 as a pool of N slots
      p.state_pool = mk(static_cast<char*>(pool) + size_t(r * b.N * sbytes), b.pool_dt, {b.N, Hv, K, V});
    } else {
      p.state_pool = mk(pool, b.pool_dt, {slots, Hv, K, V});
      p.state_indices = mk(dsi + r * b.N, DType::i32, {b.N});
    }
    if (b.inter) {
      p.intermediate_states = mk(inter, DType::bf16, {nbuf, b.T, Hv, K, V});
      p.intermediate_indices = mk(dsi + r * b.N, DType::i32, {b.N});
      p.commit = false;
    }
    p.use_qk_l2norm_in_kernel = b.l2norm;
    p.state_layout = b.layout;
    RecurrentDims d;
    d.B = b.N, d.T = b.T, d.N = b.N, d.Hqk = Hqk, d.Hv = Hv, d.K = K, d.V = V, d.scale = float(1 / std::sqrt(128.0));
    d.slots = b.no_idx ? b.N : slots;
    if (b.inter) d.n_buf = nbuf, d.T_buf = b.T;
    cuda::RecurrentArgs a = cuda::make_recurrent_args(p, d);
    used_bv = bv ? bv : default_bv(a);
    ST_OK(launch(a, bv, s));
  }
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&ge, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 12; ++it) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float m;
    CK(cudaEventElapsedTime(&m, e0, e1));
    if (it >= 2) ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  const double us = ms[ms.size() / 2] * 1e3 / R;
  const double bytes = b.N * (sbytes * (b.inter ? 1 : 2) + (b.inter ? b.T * state_elems * 2.0 : 0)) +
                       double(qk_b * 2 + v_b * 2 + gb_b * 2);
  const double tbs = bytes / (us * 1e-6) / 1e12;
  if (log)
    std::fprintf(log, "%-10s | %-34s | %4d | %3lld | %2d | %9.2f | %6.2f | %5.1f%% | R=%d best=%.3f worst=%.3f\n",
                 path_name(), b.name.c_str(), int(b.N), (long long)b.T, used_bv, us, tbs, 100 * tbs / g_copy_tbs, R,
                 ms.front() * 1e3 / R, ms.back() * 1e3 / R);
  cudaGraphExecDestroy(ge), cudaGraphDestroy(graph), cudaStreamDestroy(s);
  for (void* p : {q, k, v, o, g, be, pool, static_cast<void*>(dsi)}) cudaFree(p);
  if (inter) cudaFree(inter);
  return {us, tbs, used_bv};
}

// One table row: the shape on the selected families side by side, same tile request bv. The wy families run only
// on multi-token K-major shapes (elsewhere they are not the dispatched path). speedup = best of the other three
// families / wy-mma.
void bench_row(const BenchShape& b, int bv, const bool (&run)[kFamilies], FILE* log) {
  BenchResult r[kFamilies];
  bool ran[kFamilies] = {};
  for (int f = 0; f < kFamilies; ++f) {
    if (!run[f] || (f >= 2 && (b.T <= 1 || b.layout != StateLayout::k_major))) continue;
    g_path = f, r[f] = bench_one(b, bv, log), ran[f] = true;
  }
  auto cell = [](char* dst, size_t n, const BenchResult& x, bool did) {
    if (did)
      std::snprintf(dst, n, "%3d | %9.2f | %5.1f%%", x.bv, x.us, 100 * x.tbs / g_copy_tbs);
    else
      std::snprintf(dst, n, "%3s | %9s | %6s", "-", "-", "-");
  };
  char cl[kFamilies][64], sp[16] = "      -";
  for (int f = 0; f < kFamilies; ++f) cell(cl[f], sizeof cl[f], r[f], ran[f]);
  double best_old = 0;
  for (int f = 0; f < 3; ++f)
    if (ran[f] && (best_old == 0 || r[f].us < best_old)) best_old = r[f].us;
  if (ran[3] && best_old > 0) std::snprintf(sp, sizeof sp, "%6.2fx", best_old / r[3].us);
  std::printf("| %-36s | %4d | %3lld | %s | %s | %s | %s | %s | %-16s |\n", b.name.c_str(), int(b.N), (long long)b.T,
              cl[0], cl[1], cl[2], cl[3], sp, b.target);
}

std::vector<BenchShape> bench_shapes() {
  return {
      {"decode fp32 pool", 1, 1, DType::f32, false, StateLayout::k_major, "<= 3.0 us"},
      {"decode fp32 pool", 8, 1, DType::f32, false, StateLayout::k_major, ""},
      {"decode fp32 pool", 32, 1, DType::f32, false, StateLayout::k_major, ""},
      {"decode fp32 pool", 128, 1, DType::f32, false, StateLayout::k_major, ">= 90% copy"},
      {"decode fp32 pool", 256, 1, DType::f32, false, StateLayout::k_major, ">= 90% copy"},
      {"decode fp32 pool v-major", 256, 1, DType::f32, false, StateLayout::v_major, ">= 90% copy"},
      {"decode bf16 pool", 1, 1, DType::bf16, false, StateLayout::k_major, ""},
      {"decode bf16 pool", 256, 1, DType::bf16, false, StateLayout::k_major, "<= 55% of fp32"},
      {"decode bf16 pool v-major", 256, 1, DType::bf16, false, StateLayout::v_major, "<= 55% of fp32"},
      {"multi-token T=12 final only", 1, 12, DType::f32, false, StateLayout::k_major, "<= 8 us"},
      {"multi-token T=12 final only", 32, 12, DType::f32, false, StateLayout::k_major, ""},
      {"multi-token T=12 final only", 256, 12, DType::f32, false, StateLayout::k_major, "<= 330 us"},
      {"multi-token T=12 final only v-major", 256, 12, DType::f32, false, StateLayout::v_major, "<= 330 us"},
      {"verify T=12 inter bf16", 1, 12, DType::f32, true, StateLayout::k_major, "<= 10 us"},
      {"verify T=12 inter bf16", 256, 12, DType::f32, true, StateLayout::k_major, "<= 1.25x floor"},
      {"verify T=12 inter bf16 v-major", 256, 12, DType::f32, true, StateLayout::v_major, "<= 1.25x floor"},
      {"multi-token T=12 bf16 pool", 256, 12, DType::bf16, false, StateLayout::k_major, ""},
      {"multi-token T=4", 256, 4, DType::f32, false, StateLayout::k_major, ""},
      {"multi-token T=16", 256, 16, DType::f32, false, StateLayout::k_major, ""},
  };
}

// Diagnostic shapes (N = 256, fp32 pool, 1-D commit): the per-token slope (T = 1..16), the cost of a second
// staging chunk (T = 8 vs 9), the K-major barrier (vs V-major) and the staging math (l2norm off).
std::vector<BenchShape> diag_shapes() {
  std::vector<BenchShape> v;
  for (StateLayout L : {StateLayout::k_major, StateLayout::v_major})
    for (int64_t T : {1, 2, 4, 8, 9, 12, 16})
      v.push_back({std::string("diag T-scan ") + (L == StateLayout::k_major ? "k-major" : "v-major"), 256, T,
                   DType::f32, false, L, ""});
  BenchShape b{"diag T=12 no l2norm", 256, 12, DType::f32, false, StateLayout::k_major, ""};
  b.l2norm = false;
  v.push_back(b);
  return v;
}

// Single-token decode shapes, same process: the direct kernel (default tile; N <= 8 also at 32 / 64 columns and with
// PDL) against the pipelined kernel in its three (stages, threads) configurations.
void pipe_sweep(FILE* log) {
  std::printf("== pipesweep: us (%%copy) [BV]; ratio = bf16 / fp32 time at the same N (dispatched paths)\n");
  std::printf("| %-28s | %4s | %-22s | %-22s | %-22s | %-22s | %-22s |\n", "shape", "N", "direct", "pipe S=2 128 thr",
              "pipe S=3 128 thr", "pipe S=3 256 thr", "");
  auto cell = [](const BenchResult& r) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%8.2f (%5.1f%%) [%3d]", r.us, 100 * r.tbs / g_copy_tbs, r.bv);
    return std::string(buf);
  };
  std::vector<BenchShape> shapes;
  for (DType pd : {DType::f32, DType::bf16})
    for (int64_t N : {32, 128, 256})
      shapes.push_back({std::string("decode ") + (pd == DType::f32 ? "fp32" : "bf16") + " pool", N, 1, pd, false,
                        StateLayout::k_major, ""});
  for (const BenchShape& b : shapes) {
    std::string c[5];
    g_path = 1, c[0] = cell(bench_one(b, 0, log));
    g_path = kPipe;
    for (int i = 0; i < 3; ++i) {
      g_pipe_stages = kPipeConfigs[i][0], g_pipe_threads = kPipeConfigs[i][1];
      c[1 + i] = cell(bench_one(b, 0, log));
    }
    g_pipe_stages = g_pipe_threads = 0;
    std::printf("| %-28s | %4d | %-22s | %-22s | %-22s | %-22s | %-22s |\n", b.name.c_str(), int(b.N), c[0].c_str(),
                c[1].c_str(), c[2].c_str(), c[3].c_str(), c[4].c_str());
  }
  // N = 1 / 8 latency: the direct kernel at 16 / 32 columns, without and with PDL (graph of back-to-back launches)
  std::printf("| %-28s | %4s | %-22s | %-22s | %-22s | %-22s | %-22s |\n", "shape (latency)", "N", "direct",
              "direct BV=32", "direct PDL", "diag: no slot table", "diag: no l2norm");
  for (DType pd : {DType::f32, DType::bf16})
    for (int64_t N : {1, 8}) {
      BenchShape b{std::string("decode ") + (pd == DType::f32 ? "fp32" : "bf16") + " pool",
                   N,
                   1,
                   pd,
                   false,
                   StateLayout::k_major,
                   ""};
      std::string c[5];
      g_path = 1;
      c[0] = cell(bench_one(b, 0, log)), c[1] = cell(bench_one(b, 32, log));
      BenchShape d = b;
      d.no_idx = true, c[3] = cell(bench_one(d, 0, log));
      d = b;
      d.l2norm = false, c[4] = cell(bench_one(d, 0, log));
      g_pdl = true;
      c[2] = cell(bench_one(b, 0, log));
      g_pdl = false;
      std::printf("| %-28s | %4d | %-22s | %-22s | %-22s | %-22s | %-22s |\n", b.name.c_str(), int(N), c[0].c_str(),
                  c[1].c_str(), c[2].c_str(), c[3].c_str(), c[4].c_str());
    }
}

int main(int argc, char** argv) {
  bool do_check = false, do_bench = false, do_sweep = false, do_small = false, do_diag = false, do_wysweep = false;
  bool only[kFamilies] = {};
  bool run_pipe = false, do_pipesweep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "small")) do_small = true;  // cases + commit + gating (for compute-sanitizer)
    if (!std::strcmp(argv[i], "check")) do_check = true;
    if (!std::strcmp(argv[i], "bench")) do_bench = true;
    if (!std::strcmp(argv[i], "sweep")) do_sweep = true;
    if (!std::strcmp(argv[i], "diag")) do_diag = true;        // cost-splitting shapes (see diag_shapes)
    if (!std::strcmp(argv[i], "wysweep")) do_wysweep = true;  // the wy kernel at both tile widths
    if (!std::strcmp(argv[i], "persistent")) only[0] = true;
    if (!std::strcmp(argv[i], "direct")) only[1] = true;
    if (!std::strcmp(argv[i], "wy")) only[2] = true;
    if (!std::strcmp(argv[i], "wy-mma")) only[3] = true;
    if (!std::strcmp(argv[i], "pipe")) run_pipe = true;           // + the pipelined single-token kernel
    if (!std::strcmp(argv[i], "pipesweep")) do_pipesweep = true;  // decode shapes: direct vs pipe vs PDL
  }
  const bool any_only = only[0] || only[1] || only[2] || only[3];
  const bool run[kFamilies] = {only[0] || !any_only, only[1] || !any_only, only[2] || !any_only, only[3] || !any_only};
  if (!do_check && !do_bench && !do_sweep && !do_small && !do_diag && !do_wysweep && !do_pipesweep)
    do_check = do_bench = true;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered: a crash keeps what was printed
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (do_check || do_small) {
    std::printf("== correctness (fp64 reference)\n");
    int fails[kFamilies] = {}, fails_pipe = 0, fails_pdl = 0;
    for (int path = 0; path < kFamilies; ++path) {
      if (!run[path]) continue;
      g_path = path;
      const int before = g_fail;
      for (const Case& c : check_cases()) {
        for (int bv : {16, 32}) run_case(c, bv);
        // direct: the 64- and 128-column tiles of single-token launches (fixed T = 1; the launcher narrows them
        // otherwise: 128 exists for 16-bit pools)
        if (path == 1 && c.seqlens.empty() && c.T == 1 && c.V % 64 == 0) run_case(c, 64);
        if (path == 1 && c.seqlens.empty() && c.T == 1 && c.V % 128 == 0) run_case(c, 128);
      }
      if (do_check) check_graph_and_repeat();
      fails[path] = g_fail - before;
    }
    if (run_pipe) {  // the pipelined single-token kernel: its T = 1 cases at both ring depths, capped grids, PDL
      g_path = kPipe;
      const int before = g_fail;
      std::vector<Case> cs = pipe_cases();
      for (const Case& c : check_cases())
        if (c.T == 1 && c.seqlens.empty()) cs.push_back(c);
      for (const Case& c : cs)
        for (const auto& cfg : kPipeConfigs)
          for (int mc : {0, 2}) {
            g_pipe_stages = cfg[0], g_pipe_threads = cfg[1], g_pipe_max_ctas = mc;
            std::printf("  (pipe stages %d, %d threads, grid cap %d)\n", cfg[0], cfg[1], mc);
            run_case(c, 0);
          }
      g_pipe_stages = g_pipe_threads = g_pipe_max_ctas = 0;
      if (do_check) check_graph_and_repeat();
      fails_pipe = g_fail - before;
    }
    if (run[1]) {  // the direct kernel launched with PDL: eager, graph, repeat
      g_path = 1, g_pdl = true;
      const int before = g_fail;
      for (const Case& c : check_cases())
        if (c.T == 1 && c.seqlens.empty()) run_case(c, 16);
      if (do_check) check_graph_and_repeat();
      g_pdl = false;
      fails_pdl = g_fail - before;
    }
    check_commit();
    check_gating();
    std::printf(
        "== correctness: %d failure(s) (persistent %d%s, direct %d%s, wy %d%s, wy-mma %d%s, pipe %d%s, direct+PDL %d, "
        "commit + gating %d)\n",
        g_fail, fails[0], run[0] ? "" : " not run", fails[1], run[1] ? "" : " not run", fails[2],
        run[2] ? "" : " not run", fails[3], run[3] ? "" : " not run", fails_pipe, run_pipe ? "" : " not run", fails_pdl,
        g_fail - fails[0] - fails[1] - fails[2] - fails[3] - fails_pipe - fails_pdl);
  }
  if (do_bench || do_sweep || do_diag || do_wysweep || do_pipesweep) {
    g_copy_tbs = measure_copy();
    std::printf("== bench (CUDA graph of rotated launches; bytes = state r/w + inter writes + q,k,v,o,g,beta)\n");
    std::printf("device-to-device copy (1 GiB, read+write): %.2f TB/s\n", g_copy_tbs);
    const char* out = std::getenv("OUT");
    FILE* log = nullptr;
    if (out) log = std::fopen((std::string(out) + "/bench_log.txt").c_str(), "a");
    std::printf(
        "| %-36s |    N |   T |  BV |   pers us |  %%copy |  BV | direct us |  %%copy |  BV |     wy us |  %%copy |  "
        "BV "
        "| wy-mma us |  %%copy | speedup | target           |\n",
        "shape (Hqk=16 Hv=32 K=V=128)");
    for (const BenchShape& b : bench_shapes()) {
      if (do_bench) bench_row(b, 0, run, log);
      if (do_sweep)
        for (int bv : {16, 32}) bench_row(b, bv, run, log);
      if (do_wysweep && b.T > 1 && b.layout == StateLayout::k_major) {  // the wy engines at both tile widths
        const bool wy_only[kFamilies] = {false, false, run[2], run[3]};
        for (int bv : {16, 32}) bench_row(b, bv, wy_only, log);
      }
      if (do_wysweep && b.T == 1 && b.N >= 32) {  // direct single-token tiles of 32, 64 (and 128: 16-bit pools)
        const bool direct_only[kFamilies] = {false, true, false, false};
        for (int bv : {32, 64, 128})
          if (bv != 128 || b.pool_dt != DType::f32) bench_row(b, bv, direct_only, log);
      }
    }
    if (do_diag)
      for (const BenchShape& b : diag_shapes()) bench_row(b, 0, run, log);
    if (do_pipesweep) pipe_sweep(log);
    if (log) std::fclose(log);
  }
  return g_fail ? 1 : 0;
}
