// CUDA recurrent kernels through the public API (flashgdn::recurrent / recurrent_commit on CUDA tensors)
// against the CPU oracle (the same API on fp64 copies, exec.cpu_fp64, CpuAlgo::recurrent). Covers decode,
// multi-token and verify on a pool (1-D / 2-D slots, num_accepted_tokens, sentinels, commit / no commit,
// intermediate states), the pool-less initial/final contract, varlen with empty rows, GQA, both layouts,
// K != V, pool / activation / intermediate dtypes, raw gates, l2norm off, CUDA-graph replay and bitwise
// stability (gdn-math §8, §10.3, §10.4). Outputs are poisoned with NaN before every run.
//
// Tolerances (relative Frobenius error against the fp64 oracle, gdn-math §10.3): fp32 output and fp32 state
// 1e-5; bf16 output 3e-3, f16 output 1e-3; a stored bf16 state 1e-2 and f16 2e-3 (storage rounding alone is
// ~2e-3 / 3e-4: the looser bound of the low-precision pool row of §10.3).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "flashgdn/flashgdn.hpp"
#include "test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda_test_util.hpp"
#endif

namespace flashgdn::test {
namespace {

#define FGDN_SKIP_WITHOUT_GPU() \
  if (!flashgdn::cuda_available()) GTEST_SKIP() << "no CUDA device"

// ---- device memory (guarded so this file compiles without CUDA; the tests skip there) -------------------
struct DevMem {
  void* ptr = nullptr;
  size_t bytes = 0;
  DevMem() = default;
  explicit DevMem(size_t n) : bytes(n) {
#if FLASHGDN_WITH_CUDA
    EXPECT_EQ(cudaMalloc(&ptr, n ? n : 16), cudaSuccess);
#endif
  }
  ~DevMem() {
#if FLASHGDN_WITH_CUDA
    if (ptr) cudaFree(ptr);
#endif
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

void to_device(void* dst, const void* src, size_t n) {
#if FLASHGDN_WITH_CUDA
  ASSERT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), cudaSuccess);
#else
  (void)dst, (void)src, (void)n;
#endif
}
void to_host(void* dst, const void* src, size_t n) {
#if FLASHGDN_WITH_CUDA
  ASSERT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), cudaSuccess);
#else
  (void)dst, (void)src, (void)n;
#endif
}
void device_sync() {
#if FLASHGDN_WITH_CUDA
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
}

// A host tensor and its device mirror.
struct Mirror {
  HostTensor* h = nullptr;
  std::unique_ptr<DevMem> d;
  TensorView view() const {
    TensorView v = h->view();
    v.data = d->ptr;
    v.device = DeviceType::cuda;
    return v;
  }
  void upload() { to_device(d->ptr, h->data(), h->bytes.size()); }
  void download() { to_host(h->data(), d->ptr, h->bytes.size()); }
};

Mirror mirror(HostTensor* h) {
  Mirror m;
  m.h = h;
  m.d = std::make_unique<DevMem>(h->bytes.size());
  m.upload();
  return m;
}

// fp64 copy of a float tensor for the oracle (indices keep their dtype).
HostTensor oracle_copy(const HostTensor& t) {
  if (t.empty_shape()) return t;
  if (t.dtype == DType::i32 || t.dtype == DType::i64) return t;
  return t.cast(DType::f64);
}
TensorView view_or_absent(const HostTensor& t) {
  return t.empty_shape() ? TensorView{} : t.view();
}

double tol_out(DType dt) {
  return dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 3e-3 : 1e-3;
}
double tol_state(DType dt) {
  return dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1e-2 : 2e-3;
}

// ---- a case: inputs + flags ----------------------------------------------------------------------------
struct Spec {
  int64_t N = 3, T = 1;          // fixed length: N rows of T tokens
  std::vector<int64_t> seqlens;  // non-empty: varlen
  int64_t Hqk = 2, Hv = 4, K = 64, V = 64;
  StateLayout layout = StateLayout::k_major;
  bool pool = true;
  DType pool_dt = DType::f32;
  DType act_dt = DType::f32;
  int64_t T_max = 0;  // > 0: 2-D state_indices [N, T_max]
  bool nacc = false;
  bool inter = false;
  DType inter_dt = DType::f32;
  bool commit = true;
  bool null_invalid = false;
  bool gate_raw = false, beta_raw = false, neg_eig = false, l2 = true, has_g = true, has_beta = true;
  bool h0 = true, hT = true;
  DType idx_dt = DType::i32;
  RecurrentKernel kernel = RecurrentKernel::auto_;  // exec.recurrent_kernel
  float scale = 0.f;
  double key_corr = 0.0;  // > 0: every token's k is a shared direction plus key_corr times its own noise
  uint64_t seed = 1;
  int64_t extra_slots = 3;
  // index overrides (applied after the defaults): {row, col, value}; col ignored for 1-D
  std::vector<std::array<int64_t, 3>> slot_set, nacc_set, buf_set;
};

struct Inputs {
  HostTensor q, k, v, g, beta, A_log, dt_bias, cu, o, pool, si, na, inter, ii, h0, hT;
  int64_t N = 0, B = 0, T = 0;
};

Inputs make(const Spec& s) {
  Rng rng(s.seed);
  Inputs in;
  const bool varlen = !s.seqlens.empty();
  in.N = varlen ? int64_t(s.seqlens.size()) : s.N;
  in.B = varlen ? 1 : in.N;
  in.T = s.T;
  if (varlen) {
    in.T = 0;
    for (auto l : s.seqlens) in.T += l;
  }
  const int64_t N = in.N, B = in.B, T = in.T;
  in.q = HostTensor(s.act_dt, {B, T, s.Hqk, s.K});
  in.k = HostTensor(s.act_dt, {B, T, s.Hqk, s.K});
  in.v = HostTensor(s.act_dt, {B, T, s.Hv, s.V});
  in.o = HostTensor(s.act_dt, {B, T, s.Hv, s.V});
  for (int64_t i = 0; i < in.q.numel(); ++i) in.q.set(i, rng.normal());
  // Without l2norm keep |k| ~ 1 so the recurrence stays contractive (gdn-math §1.3).
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, rng.normal() / (s.l2 ? 1.0 : std::sqrt(double(s.K))));
  if (s.key_corr > 0) {  // nearly parallel keys: |A[t][s]| ~ beta over the whole chunk (gdn-math §5.7)
    std::vector<double> base(size_t(s.K));
    for (auto& x : base) x = rng.normal();
    for (int64_t i = 0; i < in.k.numel(); ++i)
      in.k.set(i, (base[size_t(i % s.K)] + s.key_corr * in.k.get(i)) / (s.l2 ? 1.0 : std::sqrt(double(s.K))));
  }
  for (int64_t i = 0; i < in.v.numel(); ++i) in.v.set(i, rng.normal());
  if (s.has_g) {
    in.g = HostTensor(DType::f32, {B, T, s.Hv});
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, s.gate_raw ? rng.normal() : -rng.uniform());
  }
  if (s.has_beta) {
    in.beta = HostTensor(DType::f32, {B, T, s.Hv});
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, s.beta_raw ? rng.normal() : rng.uniform());
  }
  if (s.gate_raw) {
    in.A_log = HostTensor(DType::f32, {s.Hv});
    in.dt_bias = HostTensor(DType::f32, {s.Hv});
    for (int64_t h = 0; h < s.Hv; ++h) in.A_log.set(h, rng.uniform(-1.5, -0.5)), in.dt_bias.set(h, rng.normal());
  }
  if (varlen) {
    in.cu = HostTensor(s.idx_dt, {N + 1});
    int64_t acc = 0;
    in.cu.set(0, 0);
    for (int64_t n = 0; n < N; ++n) acc += s.seqlens[size_t(n)], in.cu.set(n + 1, double(acc));
  }
  const bool kmaj = s.layout == StateLayout::k_major;
  const int64_t R = kmaj ? s.K : s.V, C = kmaj ? s.V : s.K;
  if (s.pool) {
    const int64_t cols = s.T_max > 0 ? s.T_max : 1;
    const int64_t slots = N * cols + s.extra_slots;
    in.pool = HostTensor(s.pool_dt, {slots, s.Hv, R, C});
    fill_pool_values(in.pool, rng, 0.1);  // non-symmetric; the last draw of rng (h0 is the other branch)
    // Distinct slots in reverse order, never slot 0 unless an override asks for it.
    if (s.T_max > 0) {
      in.si = HostTensor(s.idx_dt, {N, s.T_max});
      for (int64_t n = 0; n < N; ++n)
        for (int64_t t = 0; t < s.T_max; ++t) in.si.set(n * s.T_max + t, double(slots - 1 - (n * s.T_max + t)));
      for (auto& o : s.slot_set) in.si.set(o[0] * s.T_max + o[1], double(o[2]));
      if (s.nacc) {
        in.na = HostTensor(s.idx_dt, {N});
        for (int64_t n = 0; n < N; ++n) in.na.set(n, double(1 + (n * 5) % s.T_max));
        for (auto& o : s.nacc_set) in.na.set(o[0], double(o[2]));
      }
    } else {
      in.si = HostTensor(s.idx_dt, {N});
      for (int64_t n = 0; n < N; ++n) in.si.set(n, double(slots - 1 - n));
      for (auto& o : s.slot_set) in.si.set(o[0], double(o[2]));
    }
  } else {
    if (s.h0) {
      in.h0 = HostTensor(DType::f32, {N, s.Hv, R, C});
      for (int64_t i = 0; i < in.h0.numel(); ++i) in.h0.set(i, 0.1 * rng.normal());
    }
    if (s.hT) in.hT = HostTensor(DType::f32, {N, s.Hv, R, C});
  }
  if (s.inter) {
    int64_t tb = varlen ? 0 : T;
    for (auto l : s.seqlens) tb = std::max(tb, l);
    in.inter = HostTensor(s.inter_dt, {N + 1, tb, s.Hv, R, C});
    in.ii = HostTensor(s.idx_dt, {N});
    for (int64_t n = 0; n < N; ++n) in.ii.set(n, double(N - n));  // entry 0 unused
    for (auto& o : s.buf_set) in.ii.set(o[0], double(o[2]));
  }
  in.o.fill_nan();
  if (!in.inter.empty_shape()) in.inter.fill_nan();
  if (!in.hT.empty_shape()) in.hT.fill_nan();
  return in;
}

RecurrentParams params(const Spec& s) {
  RecurrentParams p;
  p.commit = s.commit;
  p.null_slot_is_invalid = s.null_invalid;
  p.scale = s.scale;
  p.use_qk_l2norm_in_kernel = s.l2;
  p.gate.use_gate_in_kernel = s.gate_raw;
  p.gate.use_beta_sigmoid_in_kernel = s.beta_raw;
  p.gate.allow_neg_eigval = s.neg_eig;
  p.state_layout = s.layout;
  p.exec.recurrent_kernel = s.kernel;
  return p;
}

// The oracle: fp64 copies of every float tensor, CPU recurrence in fp64.
struct OracleOut {
  HostTensor o, pool, inter, hT;
};
OracleOut run_oracle(const Spec& s, const Inputs& in) {
  OracleOut r;
  HostTensor q = oracle_copy(in.q), k = oracle_copy(in.k), v = oracle_copy(in.v), g = oracle_copy(in.g),
             beta = oracle_copy(in.beta), A = oracle_copy(in.A_log), dtb = oracle_copy(in.dt_bias),
             h0 = oracle_copy(in.h0);
  r.o = oracle_copy(in.o), r.pool = oracle_copy(in.pool), r.inter = oracle_copy(in.inter), r.hT = oracle_copy(in.hT);
  RecurrentParams p = params(s);
  p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = view_or_absent(g), p.beta = view_or_absent(beta);
  p.A_log = view_or_absent(A), p.dt_bias = view_or_absent(dtb), p.cu_seqlens = view_or_absent(in.cu);
  p.o = r.o.view(), p.state_pool = view_or_absent(r.pool), p.state_indices = view_or_absent(in.si);
  p.num_accepted_tokens = view_or_absent(in.na), p.intermediate_states = view_or_absent(r.inter);
  p.intermediate_indices = view_or_absent(in.ii), p.initial_state = view_or_absent(h0);
  p.final_state = view_or_absent(r.hT);
  p.exec.cpu_fp64 = true;
  p.exec.cpu_algo = CpuAlgo::recurrent;
  Status st = recurrent(p);
  EXPECT_TRUE(st.ok()) << "oracle: " << st.message();
  return r;
}

// The device run: mirrors of every tensor; returns the downloaded outputs.
struct DeviceRun {
  std::vector<Mirror> m;
  RecurrentParams p;
  Inputs out;  // host copies of the outputs after the run
};

std::unique_ptr<DeviceRun> prepare_device(const Spec& s, const Inputs& in) {
  auto r = std::make_unique<DeviceRun>();
  r->out = in;
  Inputs& o = r->out;
  auto mv = [&](HostTensor& t) -> TensorView {
    if (t.empty_shape()) return TensorView{};
    r->m.push_back(mirror(&t));
    return r->m.back().view();
  };
  r->m.reserve(16);
  RecurrentParams& p = r->p;
  p = params(s);
  p.q = mv(o.q), p.k = mv(o.k), p.v = mv(o.v), p.g = mv(o.g), p.beta = mv(o.beta), p.A_log = mv(o.A_log);
  p.dt_bias = mv(o.dt_bias), p.cu_seqlens = mv(o.cu), p.o = mv(o.o), p.state_pool = mv(o.pool);
  p.state_indices = mv(o.si), p.num_accepted_tokens = mv(o.na), p.intermediate_states = mv(o.inter);
  p.intermediate_indices = mv(o.ii), p.initial_state = mv(o.h0), p.final_state = mv(o.hT);
  return r;
}

void download_outputs(DeviceRun& r) {
  for (auto& m : r.m)
    if (m.h == &r.out.o || m.h == &r.out.pool || m.h == &r.out.inter || m.h == &r.out.hT) m.download();
}

std::unique_ptr<DeviceRun> run_device(const Spec& s, const Inputs& in) {
  auto r = prepare_device(s, in);
  Status st = recurrent(r->p);
  EXPECT_TRUE(st.ok()) << "cuda: " << st.message();
  device_sync();
  download_outputs(*r);
  return r;
}

// Relative error where the oracle wrote; where it left the NaN poison, the device must have too.
double err_written(const HostTensor& dev, const HostTensor& ref, std::string* why) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double x = dev.get(i), y = ref.get(i);
    if (std::isnan(y)) {
      if (!std::isnan(x)) {
        *why = "element " + std::to_string(i) + " written where the oracle wrote nothing";
        return INFINITY;
      }
      continue;
    }
    if (!std::isfinite(x)) {
      *why = "element " + std::to_string(i) + " non-finite";
      return INFINITY;
    }
    num += (x - y) * (x - y), den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Compare a device run with the oracle: o (with exact zeros where the oracle wrote zeros: invalid rows),
// the pool (slots the oracle left unchanged must be bit-identical on the device), intermediates, hT.
void expect_match(const Spec& s, const Inputs& in, const Inputs& dev, const OracleOut& ref) {
  std::string why;
  const double eo = err_written(dev.o, ref.o, &why);
  EXPECT_LE(eo, tol_out(s.act_dt) * (s.pool_dt == DType::f32 ? 1 : 2)) << "o: " << why;
  // Per (token, head) row: exact zeros where the oracle wrote all zeros (invalid rows).
  const int64_t rows = ref.o.numel() / s.V;
  int zero_rows = 0;
  for (int64_t r = 0; r < rows; ++r) {
    bool all_zero = true;
    for (int64_t j = 0; j < s.V && all_zero; ++j) all_zero = ref.o.get(r * s.V + j) == 0.0;
    if (!all_zero) continue;
    ++zero_rows;
    for (int64_t j = 0; j < s.V; ++j) ASSERT_EQ(dev.o.get(r * s.V + j), 0.0) << "invalid row " << r << " not zero";
  }
  // Per-head error too (one broken head must not hide in the aggregate; gdn-math §10.3). The oracle's
  // unwritten rows (NaN) are zeroed on both sides for this measure.
  HostTensor od = dev.o.cast(DType::f64), orf = ref.o;
  for (int64_t i = 0; i < orf.numel(); ++i)
    if (std::isnan(orf.get(i))) orf.set(i, 0.0), od.set(i, 0.0);
  EXPECT_LE(max_head_err(od, orf, s.Hv, [&](int64_t i) { return (i / s.V) % s.Hv; }),
            3 * tol_out(s.act_dt) * (s.pool_dt == DType::f32 ? 1 : 2));
  if (s.pool) {
    const int64_t per_slot = in.pool.numel() / in.pool.shape[0];
    const size_t slot_bytes = size_t(per_slot * dtype_size(in.pool.dtype));
    HostTensor pool0 = oracle_copy(in.pool);
    for (int64_t sl = 0; sl < in.pool.shape[0]; ++sl) {
      bool changed = false;
      for (int64_t e = 0; e < per_slot && !changed; ++e)
        changed = ref.pool.get(sl * per_slot + e) != pool0.get(sl * per_slot + e);
      if (!changed) {
        EXPECT_EQ(
            std::memcmp(dev.pool.bytes.data() + sl * slot_bytes, in.pool.bytes.data() + sl * slot_bytes, slot_bytes), 0)
            << "pool slot " << sl << " must be bit-identical";
      }
    }
    EXPECT_LE(err_written(dev.pool, ref.pool, &why), tol_state(s.pool_dt)) << "pool: " << why;
  }
  if (s.inter) {
    EXPECT_LE(err_written(dev.inter, ref.inter, &why), tol_state(s.inter_dt)) << "inter: " << why;
  }
  if (!s.pool && s.hT) {
    EXPECT_LE(err_written(dev.hT, ref.hT, &why), 1e-5) << "hT: " << why;
  }
}

void check(const Spec& s) {
  Inputs in = make(s);
  OracleOut ref = run_oracle(s, in);
  auto dev = run_device(s, in);
  expect_match(s, in, dev->out, ref);
}

std::string name_of(DType d) {
  return dtype_name(d);
}

// ---------------------------------------------------------------------------------------------------------
TEST(CudaRecurrent, DecodeEveryLayoutDtypeAndHeadDims) {
  FGDN_SKIP_WITHOUT_GPU();
  for (StateLayout L : {StateLayout::k_major, StateLayout::v_major})
    for (DType pd : {DType::f32, DType::bf16, DType::f16})
      for (auto kv : {std::pair<int64_t, int64_t>{64, 128}, {128, 64}, {128, 128}})
        for (DType ad : {DType::f32, DType::bf16}) {
          Spec s;
          s.layout = L, s.pool_dt = pd, s.K = kv.first, s.V = kv.second, s.act_dt = ad, s.N = 4;
          SCOPED_TRACE(std::string(L == StateLayout::k_major ? "k_major" : "v_major") + " pool " + name_of(pd) + " K" +
                       std::to_string(s.K) + " V" + std::to_string(s.V) + " act " + name_of(ad));
          check(s);
        }
}

TEST(CudaRecurrent, F16Activations) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.act_dt = DType::f16, s.T = 3, s.K = 128, s.V = 128;
  check(s);
}

TEST(CudaRecurrent, GqaMappingAndMha) {
  FGDN_SKIP_WITHOUT_GPU();
  for (auto hh : {std::pair<int64_t, int64_t>{2, 4}, {2, 8}, {1, 4}, {3, 3}}) {
    Spec s;
    s.Hqk = hh.first, s.Hv = hh.second, s.T = 2;
    SCOPED_TRACE("Hqk " + std::to_string(s.Hqk) + " Hv " + std::to_string(s.Hv));
    check(s);
  }
}

// Transposed state with K != V and a non-symmetric pool (gdn-math §10.4).
TEST(CudaRecurrent, VMajorWithKNotEqualV) {
  FGDN_SKIP_WITHOUT_GPU();
  for (auto kv : {std::pair<int64_t, int64_t>{64, 128}, {128, 64}}) {
    Spec s;
    s.layout = StateLayout::v_major, s.K = kv.first, s.V = kv.second, s.T = 5;
    check(s);
  }
}

// Sentinels: slot -1, slot >= slots, slot 0 with null_slot_is_invalid; i32 and i64 indices. Invalid rows
// write exact zeros and leave every pool row bit-identical (checked in expect_match).
TEST(CudaRecurrent, DecodeSentinelSlots) {
  FGDN_SKIP_WITHOUT_GPU();
  for (DType idt : {DType::i32, DType::i64})
    for (bool null_invalid : {false, true}) {
      Spec s;
      s.N = 6, s.idx_dt = idt, s.null_invalid = null_invalid, s.act_dt = DType::bf16;
      const int64_t slots = s.N + s.extra_slots;
      s.slot_set = {{0, 0, -1}, {2, 0, slots}, {3, 0, 0}, {5, 0, -7}};
      SCOPED_TRACE(std::string(dtype_name(idt)) + (null_invalid ? " null_slot_is_invalid" : ""));
      check(s);
    }
}

TEST(CudaRecurrent, RawGatesNegEigvalNoL2CustomScale) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.gate_raw = true, s.beta_raw = true, s.neg_eig = true, s.l2 = false, s.scale = 0.3f, s.T = 4;
  check(s);
  s.neg_eig = false, s.l2 = true, s.scale = 0.f, s.layout = StateLayout::v_major;
  check(s);
}

TEST(CudaRecurrent, NoGateNoBeta) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.has_g = false, s.has_beta = false, s.T = 3;
  check(s);
}

// Multi-token decode, final state only (1-D slots, commit): T = 12 and T = 20 (more than one staged chunk).
TEST(CudaRecurrent, MultiTokenCommit) {
  FGDN_SKIP_WITHOUT_GPU();
  for (int64_t T : {12, 20}) {
    Spec s;
    s.T = T, s.K = 128, s.V = 128, s.act_dt = DType::bf16;
    SCOPED_TRACE("T " + std::to_string(T));
    check(s);
    s.layout = StateLayout::v_major, s.pool_dt = DType::bf16;
    check(s);
  }
}

// Multi-token rows on K-major states (the wy kernel: chunks of 8 tokens): varlen rows of 0, 1, 8, 9, 16 and 33
// tokens in one launch, every pool dtype, the pool-less contract, intermediate states and a 2-D slot table
// with T = 16.
TEST(CudaRecurrent, MultiTokenVarlenChunkBoundaries) {
  FGDN_SKIP_WITHOUT_GPU();
  for (DType pd : {DType::f32, DType::bf16, DType::f16}) {
    Spec s;
    s.seqlens = {16, 0, 1, 33, 9, 8}, s.K = 128, s.V = 128, s.pool_dt = pd, s.act_dt = DType::bf16;
    SCOPED_TRACE(std::string("pool ") + name_of(pd));
    check(s);
  }
  Spec s;
  s.seqlens = {0, 17, 2, 16}, s.pool = false, s.K = 128, s.V = 64;
  check(s);
  s = Spec{};
  s.seqlens = {12, 0, 3, 16, 20}, s.inter = true, s.inter_dt = DType::bf16, s.commit = false, s.K = 128;
  check(s);
  s = Spec{};
  s.N = 5, s.T = 16, s.T_max = 16, s.nacc = true, s.K = 128, s.V = 128;
  s.nacc_set = {{0, 0, 1}, {1, 0, 16}, {2, 0, 7}, {3, 0, 0}, {4, 0, 17}};
  s.slot_set = {{2, 9, -1}};
  check(s);
}

// Enough rows (N Hv >= 4 x SMs) for the wy kernel's grouped walk: a CTA runs every V-tile of a row and stages
// the row's tokens once (rows of <= 16 tokens) or per tile (longer rows).
TEST(CudaRecurrent, MultiTokenManyRowsGrouped) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.N = 140, s.T = 12, s.V = 128, s.pool_dt = DType::bf16, s.act_dt = DType::bf16;
  check(s);
  s = Spec{};
  for (int i = 0; i < 150; ++i) s.seqlens.push_back(std::vector<int64_t>{0, 1, 7, 8, 9, 16, 17, 33}[size_t(i % 8)]);
  s.K = 128;
  check(s);
  s = Spec{};
  s.N = 140, s.T = 16, s.inter = true, s.inter_dt = DType::bf16, s.commit = false;
  check(s);
}

// Single-token rows on 16-bit pools at a batch large enough (N Hv V / 128 >= 8 x SMs up to 144 SMs) for the
// dispatch's wide tiles: K-major with 1-D slots takes the pipelined kernel (direct_pipe_kernel.cuh), with fp32
// intermediate states (written from the fp32 values, not the packed ones) and protocol A the direct kernel's packed
// 16-bit state at 128 columns per CTA; V-major the packed state at 64 columns.
TEST(CudaRecurrent, DecodeWideTilesOn16BitPools) {
  FGDN_SKIP_WITHOUT_GPU();
  for (StateLayout L : {StateLayout::k_major, StateLayout::v_major})
    for (DType pd : {DType::bf16, DType::f16}) {
      Spec s;
      s.N = 40, s.Hqk = 8, s.Hv = 32, s.K = 128, s.V = 128, s.layout = L, s.pool_dt = pd, s.act_dt = DType::bf16;
      SCOPED_TRACE(std::string(L == StateLayout::k_major ? "k_major" : "v_major") + " pool " + name_of(pd));
      check(s);
      s.inter = true, s.inter_dt = DType::f32;
      check(s);
      s.inter = false, s.T_max = 2, s.nacc = true;
      check(s);
    }
}

// Large fixed T = 1 batches on K-major pools with 1-D slots: the dispatch's pipelined single-token kernel
// (direct_pipe_kernel.cuh, persistent CTAs walking several tiles each; docs/recurrent.md) where it is the default,
// else the direct kernel. Every pool dtype, K = 64 / 128, invalid slots (-1, >= slots, 0 with
// null_slot_is_invalid), raw gates without l2norm, commit off, GQA 4 -> 32.
TEST(CudaRecurrent, DecodeLargeBatchKMajorPools) {
  FGDN_SKIP_WITHOUT_GPU();
  for (DType pd : {DType::f32, DType::bf16, DType::f16})
    for (int64_t K : {64, 128}) {
      Spec s;
      s.N = 40, s.Hqk = 4, s.Hv = 32, s.K = K, s.V = 128, s.pool_dt = pd, s.act_dt = DType::bf16;
      const int64_t slots = s.N + s.extra_slots;
      s.slot_set = {{0, 0, -1}, {7, 0, slots}, {21, 0, 0}, {39, 0, -3}};
      SCOPED_TRACE(std::string("pool ") + name_of(pd) + " K " + std::to_string(K));
      check(s);
      s.null_invalid = true, s.idx_dt = DType::i64, s.commit = false;
      s.gate_raw = true, s.beta_raw = true, s.l2 = false, s.scale = 0.3f;
      check(s);
    }
}

// Head counts that are not powers of two (Hv = 24, Hqk = 8: GQA 3) on the single-token kernels, forced: their tile,
// head and GQA indices come from host-built dividers (DivU32, recurrent_args.hpp). direct_pipe walks 2-3 tiles per
// CTA (N Hv = 960 tiles against 3 CTAs per SM) and reads the staged raw q / k 4 rows at a time, for fp32, bf16 and
// f16 activations, K = 128 and 64; direct also at V = 64 (4 tiles per head at 16 columns). Invalid slots (-1, 0
// with null_slot_is_invalid, >= slots) on both.
TEST(CudaRecurrent, DecodeNonPowerOfTwoHeads) {
  FGDN_SKIP_WITHOUT_GPU();
  for (RecurrentKernel k : {RecurrentKernel::direct_pipe, RecurrentKernel::direct})
    for (DType act : {DType::f32, DType::bf16, DType::f16})
      for (DType pd : {DType::bf16, DType::f16}) {
        Spec s;
        s.N = 40, s.Hqk = 8, s.Hv = 24, s.K = 128, s.V = 128, s.pool_dt = pd, s.act_dt = act, s.kernel = k;
        s.slot_set = {{3, 0, -1}, {17, 0, 0}, {39, 0, s.N + s.extra_slots}};
        s.null_invalid = true;
        SCOPED_TRACE(std::string(recurrent_kernel_name(k)) + " act " + name_of(act) + " pool " + name_of(pd));
        check(s);
        s.K = 64, s.gate_raw = true, s.beta_raw = true;
        check(s);
        if (k != RecurrentKernel::direct) continue;
        s.V = 64, s.N = 3, s.pool_dt = DType::f32;
        s.slot_set = {{0, 0, -1}, {2, 0, s.N + s.extra_slots}};  // rows of the smaller batch
        check(s);
      }
}

// Every kernel on the same cases, forced through exec.recurrent_kernel (the plan's choice is one of them; the others
// are reached here only): each one either matches the oracle or, where it cannot take the shape, is rejected with an
// unsupported status naming the override, leaving every output untouched.
TEST(CudaRecurrent, EveryKernelForced) {
  FGDN_SKIP_WITHOUT_GPU();
  std::vector<Spec> specs;
  Spec s;
  s.N = 5, s.Hqk = 2, s.Hv = 8, s.K = 128, s.V = 128, s.pool_dt = DType::bf16, s.act_dt = DType::bf16;
  specs.push_back(s);  // decode, 16-bit K-major pool: every kernel
  s.K = 64, s.pool_dt = DType::f16;
  specs.push_back(s);
  s.K = 128, s.pool_dt = DType::f32;
  specs.push_back(s);  // fp32 pool: direct_pipe rejects it
  s.T = 7;
  specs.push_back(s);  // multi-token
  s.layout = StateLayout::v_major;
  specs.push_back(s);  // V-major: wy and direct_pipe reject it
  s = Spec{};
  s.seqlens = {0, 3, 1, 9, 0};
  s.inter = true, s.inter_dt = DType::bf16, s.commit = false, s.pool_dt = DType::bf16;
  specs.push_back(s);  // varlen verify
  s = Spec{};
  s.N = 3, s.T = 4, s.T_max = 4, s.nacc = true, s.slot_set = {{1, 0, -1}};
  specs.push_back(s);  // protocol A with an invalid start slot
  s = Spec{};
  s.pool = false, s.T = 5;
  specs.push_back(s);  // no pool: initial / final state
  for (size_t i = 0; i < specs.size(); ++i)
    for (RecurrentKernel k : {RecurrentKernel::persistent, RecurrentKernel::direct, RecurrentKernel::direct_pipe,
                              RecurrentKernel::wy, RecurrentKernel::wy_mma}) {
      Spec x = specs[i];
      x.kernel = k;
      SCOPED_TRACE("case " + std::to_string(i) + " kernel " + recurrent_kernel_name(k));
      Inputs in = make(x);
      auto r = prepare_device(x, in);
      const Status st = recurrent(r->p);
      if (st.code() == StatusCode::unsupported) {
        EXPECT_NE(st.message().find("exec.recurrent_kernel"), std::string::npos) << st.message();
        download_outputs(*r);
        EXPECT_TRUE(r->out.o.bit_equal(in.o)) << "a rejected call wrote o";
        if (x.pool) EXPECT_TRUE(r->out.pool.bit_equal(in.pool)) << "a rejected call wrote the pool";
        continue;
      }
      ASSERT_TRUE(st.ok()) << st.message();
      device_sync();
      download_outputs(*r);
      expect_match(x, in, r->out, run_oracle(x, in));
    }
}

// The wy kernel's state stores (16-byte vectors; 16-bit rows traded between the lanes of a pair) on each of its tile
// geometries (K = 128 at 32 and 16 columns per tile, K = 64 at 32), every storage dtype: intermediate states
// without commit (protocol B, one row with an invalid buffer), protocol A with intermediate states (the pool slot of
// token t holds the intermediate entry of token t bit for bit: both are the same fp32 state rounded once) and the
// 1-D final commit.
TEST(CudaRecurrent, WyStoresEveryTileAndDtype) {
  FGDN_SKIP_WITHOUT_GPU();
  struct Tile {
    int64_t K, V, N, Hv;
    const char* plan;  // the plan's tile, so that each geometry is reached
  };
  // 64 columns: 16-bit per-token stores only (protocol B entries, protocol A entries and slots), on >= 3 tiles per SM
  // (30 rows x 8 heads x 2 tiles >= 3 x 132)
  for (const Tile& g : {Tile{128, 128, 10, 8, "wy, 32 state columns"}, Tile{128, 64, 3, 4, "wy, 16 state columns"},
                        Tile{64, 128, 3, 4, "wy, 32 state columns"}, Tile{128, 128, 30, 8, "wy, 64 state columns"}})
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (int proto = 0; proto < 3; ++proto) {
        if (std::string(g.plan).find("64") != std::string::npos && (dt == DType::f32 || proto == 2)) continue;
        Spec s;
        s.K = g.K, s.V = g.V, s.N = g.N, s.Hv = g.Hv, s.Hqk = g.Hv / 2, s.T = 12, s.act_dt = DType::bf16;
        s.kernel = RecurrentKernel::wy;
        if (proto == 0) s.inter = true, s.inter_dt = dt, s.commit = false, s.buf_set = {{1, 0, -1}};
        if (proto == 1) s.inter = true, s.inter_dt = dt, s.pool_dt = dt, s.T_max = s.T, s.nacc = true;
        if (proto == 2) s.pool_dt = dt;
        SCOPED_TRACE(std::string(g.plan) + " K " + std::to_string(g.K) + " V " + std::to_string(g.V) + " dtype " +
                     name_of(dt) + " case " + std::to_string(proto));
        Inputs in = make(s);
        OracleOut ref = run_oracle(s, in);
        auto dev = prepare_device(s, in);
        std::string plan;
        ASSERT_TRUE(recurrent_plan(dev->p, &plan).ok());
        EXPECT_NE(plan.find(g.plan), std::string::npos) << plan;
        const Status st = recurrent(dev->p);
        ASSERT_TRUE(st.ok()) << st.message();
        device_sync();
        download_outputs(*dev);
        expect_match(s, in, dev->out, ref);
        if (proto != 1) continue;
        const int64_t per = in.pool.numel() / in.pool.shape[0];  // elements of a slot = of an entry's token
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t t = 0; t < s.T; ++t) {
            const int64_t sl = int64_t(in.si.get(n * s.T_max + t)), b = int64_t(in.ii.get(n));
            ASSERT_EQ(std::memcmp(dev->out.pool.bytes.data() + sl * per * dtype_size(dt),
                                  dev->out.inter.bytes.data() + (b * s.T + t) * per * dtype_size(dt),
                                  size_t(per * dtype_size(dt))),
                      0)
                << "row " << n << " token " << t << ": pool slot != intermediate entry";
          }
      }
}

// The wy kernel's chunk solve (T = (I + A)^{-1} by forward substitution, u = T r, o = e^gamma S0^T q' + B T r)
// against the fp64 oracle where the chunk matrix is hardest: nearly parallel keys (|A| ~ beta everywhere), beta up
// to 2 (allow_neg_eigval), no decay (g absent) and strong decay (raw gates); rows of 1 .. 20 tokens (tails tc < C of
// both chunks of a staging round, a second round), on each tile geometry, the closed form (final state) and the walk
// (fp32 intermediate states), fp32 pool.
TEST(CudaRecurrent, WyChunkSolveHardChunks) {
  FGDN_SKIP_WITHOUT_GPU();
  struct Tile {
    int64_t K, V, N, Hv;
  };
  for (const Tile& g : {Tile{128, 128, 10, 8}, Tile{128, 64, 3, 4}, Tile{64, 128, 3, 4}})
    for (int var = 0; var < 4; ++var)
      for (int walk = 0; walk < 2; ++walk) {
        Spec s;
        s.K = g.K, s.V = g.V, s.Hv = g.Hv, s.Hqk = g.Hv / 2;
        s.seqlens.clear();
        for (int64_t n = 0; n < g.N; ++n) s.seqlens.push_back(1 + (n * 7 + var * 3) % 20);
        s.seqlens.push_back(20), s.seqlens.push_back(8), s.seqlens.push_back(5);
        s.kernel = RecurrentKernel::wy;
        s.key_corr = var == 3 ? 0.0 : 0.05;
        if (var == 1) s.has_g = false;                                                     // no decay
        if (var == 2) s.gate_raw = true, s.beta_raw = true, s.neg_eig = true;              // beta in (0, 2)
        if (var == 3) s.gate_raw = true, s.beta_raw = true, s.neg_eig = true, s.seed = 7;  // random keys
        if (walk) s.inter = true, s.inter_dt = DType::f32, s.commit = false;
        s.seed += uint64_t(var * 2 + walk);
        SCOPED_TRACE("K " + std::to_string(g.K) + " V " + std::to_string(g.V) + " variant " + std::to_string(var) +
                     (walk ? " walk" : " closed form"));
        check(s);
      }
}

// The wy_mma kernel (the WY form on the tensor cores, final state only) on hard chunks: nearly parallel keys, no
// decay, raw gates with beta in (0, 2), random keys; rows of 1 .. 20 tokens and one of 33 (three chunks of 16), an
// invalid slot; bf16 and f16 q, k, v (f16 split into bf16 hi + lo operands), every pool dtype, its three tile
// geometries; and 2-D slots with num_accepted_tokens and no commit (a verify that keeps only o).
TEST(CudaRecurrent, WyMmaHardChunks) {
  FGDN_SKIP_WITHOUT_GPU();
  struct Tile {
    int64_t K, V, N, Hv;
  };
  for (const Tile& g : {Tile{128, 128, 10, 8}, Tile{128, 64, 3, 4}, Tile{64, 128, 3, 4}})
    for (int var = 0; var < 4; ++var) {
      Spec s;
      s.K = g.K, s.V = g.V, s.Hv = g.Hv, s.Hqk = g.Hv / 2;
      for (int64_t n = 0; n < g.N; ++n) s.seqlens.push_back(1 + (n * 7 + var * 3) % 20);
      s.seqlens.push_back(33), s.seqlens.push_back(16), s.seqlens.push_back(0);
      s.slot_set = {{1, 0, -1}};
      s.kernel = RecurrentKernel::wy_mma;
      s.act_dt = var % 2 ? DType::f16 : DType::bf16;
      s.pool_dt = std::array<DType, 4>{DType::f32, DType::bf16, DType::f32, DType::f16}[size_t(var)];
      s.key_corr = var == 3 ? 0.0 : 0.05;
      if (var == 1) s.has_g = false;                                                     // no decay
      if (var == 2) s.gate_raw = true, s.beta_raw = true, s.neg_eig = true;              // beta in (0, 2)
      if (var == 3) s.gate_raw = true, s.beta_raw = true, s.neg_eig = true, s.seed = 7;  // random keys
      s.seed += uint64_t(var);
      SCOPED_TRACE("K " + std::to_string(g.K) + " V " + std::to_string(g.V) + " variant " + std::to_string(var));
      check(s);
    }
  Spec s;
  s.N = 5, s.T = 16, s.T_max = 16, s.nacc = true, s.commit = false, s.K = 128, s.V = 128, s.act_dt = DType::bf16;
  s.nacc_set = {{0, 0, 1}, {1, 0, 16}, {2, 0, 7}, {3, 0, 0}, {4, 0, 17}};
  s.slot_set = {{2, 6, -1}};
  s.kernel = RecurrentKernel::wy_mma;
  check(s);
  s.kernel = RecurrentKernel::auto_, s.l2 = false, s.scale = 0.3f;  // the plan's choice; no l2norm, a custom scale
  check(s);
  // Enough rows (N Hv = 1200 >= 2 x SMs) that every persistent CTA walks several, grouped: a row's two V-tiles back to
  // back, the second reusing the staged chunk, T and B of a row of <= 16 tokens; empty and invalid rows among them
  // (the next tile's loads are issued from either kind of row). bf16 q, k on a bf16 pool, f16 (hi + lo) on fp32.
  for (int var = 0; var < 2; ++var) {
    s = Spec{};
    for (int i = 0; i < 300; ++i) s.seqlens.push_back(std::vector<int64_t>{0, 1, 7, 12, 16, 17, 33}[size_t(i % 7)]);
    s.K = 128, s.V = 128, s.kernel = RecurrentKernel::wy_mma;
    s.act_dt = var ? DType::f16 : DType::bf16, s.pool_dt = var ? DType::f32 : DType::bf16;
    s.slot_set = {{3, 0, -1}, {100, 0, -1}, {101, 0, -1}, {299, 0, -1}};
    s.seed += uint64_t(var);
    SCOPED_TRACE(var ? "grouped walk, f16 on fp32" : "grouped walk, bf16 on bf16");
    check(s);
  }
}

// Many multi-token calls on one pool slot with identical keys, g = 0 and beta = 1.999: along the key the state is
// carried by (1 - beta)^T per call (~1), reached only through the cancellation of T = (I + A)^-1's entries (~ +-2),
// so an error of T that is the same every call adds up over the calls (T in two bf16 parts: 7.5e-3 after 150 calls
// in the host emulation, r38m). The pool after 150 calls (and the last call's o) against the fp64 oracle run call by
// call; wy_mma forced and the plan's choice.
TEST(CudaRecurrent, RepeatedKeyManyCalls) {
  FGDN_SKIP_WITHOUT_GPU();
  for (RecurrentKernel kernel : {RecurrentKernel::wy_mma, RecurrentKernel::auto_}) {
    SCOPED_TRACE(std::string("kernel ") + recurrent_kernel_name(kernel));
    Spec s;
    s.N = 1, s.T = 12, s.Hqk = 1, s.Hv = 2, s.K = 128, s.V = 128, s.act_dt = DType::bf16, s.has_g = false;
    s.kernel = kernel;
    Inputs in = make(s);
    for (int64_t t = 1; t < s.T; ++t)
      for (int64_t i = 0; i < s.K; ++i) in.k.set(t * s.K + i, in.k.get(i));
    in.beta.fill(1.999);
    auto dev = prepare_device(s, in);
    OracleOut ref;
    Inputs cur = in;
    for (int call = 0; call < 150; ++call) {
      ASSERT_TRUE(recurrent(dev->p).ok());
      ref = run_oracle(s, cur);
      cur.pool = ref.pool.cast(DType::f32);
    }
    device_sync();
    download_outputs(*dev);
    std::string why;
    EXPECT_LE(err_written(dev->out.pool, ref.pool, &why), 5e-3) << "pool after 150 calls " << why;
    EXPECT_LE(err_written(dev->out.o, ref.o, &why), tol_out(s.act_dt)) << "o of the last call " << why;
  }
}

// The wy kernels run 10 more times on the same inputs (the pool restored, the outputs poisoned between runs) give
// the first run's bytes: a multi-token commit (wy: the grouped walk, the row's T shared by its V-tiles; wy_mma) and a
// verify (wy, single tiles).
TEST(CudaRecurrent, WyBitwiseStableRepeated) {
  FGDN_SKIP_WITHOUT_GPU();
  for (int verify = 0; verify < 3; ++verify) {
    Spec s;
    s.N = 140, s.T = 12, s.V = 128, s.K = 128, s.act_dt = DType::bf16, s.kernel = RecurrentKernel::wy;
    if (verify == 1) s.inter = true, s.inter_dt = DType::bf16, s.commit = false;
    if (verify == 2) s.kernel = RecurrentKernel::wy_mma, s.T = 20;
    SCOPED_TRACE(verify == 1 ? "verify" : verify ? "multi-token commit, wy_mma" : "multi-token commit");
    Inputs in = make(s);
    auto dev = prepare_device(s, in);
    ASSERT_TRUE(recurrent(dev->p).ok());
    device_sync();
    download_outputs(*dev);
    expect_match(s, in, dev->out, run_oracle(s, in));
    const Inputs first = dev->out;
    for (int rep = 0; rep < 10; ++rep) {
      dev->out.pool = in.pool;
      dev->out.o.fill_nan();
      if (verify == 1) dev->out.inter.fill_nan();
      for (auto& m : dev->m)
        if (m.h == &dev->out.pool || m.h == &dev->out.o || m.h == &dev->out.inter) m.upload();
      ASSERT_TRUE(recurrent(dev->p).ok());
      device_sync();
      download_outputs(*dev);
      ASSERT_TRUE(dev->out.o.bit_equal(first.o)) << "rep " << rep << ": o";
      ASSERT_TRUE(dev->out.pool.bit_equal(first.pool)) << "rep " << rep << ": pool";
      if (verify == 1) ASSERT_TRUE(dev->out.inter.bit_equal(first.inter)) << "rep " << rep << ": intermediate states";
    }
  }
}

TEST(CudaRecurrent, NoCommitLeavesPoolUntouched) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.T = 4, s.commit = false;
  Inputs in = make(s);
  auto dev = run_device(s, in);
  EXPECT_TRUE(dev->out.pool.bit_equal(in.pool));
  check(s);
}

// Varlen rows with empty rows at the start, middle and end (pool: they touch nothing).
TEST(CudaRecurrent, VarlenWithEmptyRowsOnPool) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.seqlens = {0, 1, 0, 5, 3, 0};
  check(s);
  s.idx_dt = DType::i64, s.layout = StateLayout::v_major;
  check(s);
}

// Pool-less contract: initial/final state; an empty row's final state equals its initial state exactly.
TEST(CudaRecurrent, NoPoolInitialFinalStateVarlen) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.pool = false, s.seqlens = {0, 17, 2, 0}, s.K = 64, s.V = 128, s.layout = StateLayout::v_major;
  Inputs in = make(s);
  OracleOut ref = run_oracle(s, in);
  auto dev = run_device(s, in);
  expect_match(s, in, dev->out, ref);
  const int64_t per = in.h0.numel() / in.N;
  for (int64_t n : {0, 3})
    for (int64_t e = 0; e < per; ++e) ASSERT_EQ(dev->out.hT.get(n * per + e), in.h0.get(n * per + e));
}

// initial_state absent must equal initial_state = zeros, bitwise.
TEST(CudaRecurrent, AbsentInitialStateEqualsZeros) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.pool = false, s.T = 7, s.h0 = false;
  Inputs a = make(s);
  auto da = run_device(s, a);
  s.h0 = true;
  Inputs b = make(s);
  b.h0.fill(0.0);
  auto db = run_device(s, b);
  EXPECT_TRUE(da->out.o.bit_equal(db->out.o));
  EXPECT_TRUE(da->out.hT.bit_equal(db->out.hT));
  s.h0 = false;
  check(s);
}

// Protocol A (gdn-math §8.2): 2-D slot table, start column num_accepted - 1; counts 1, T, mid, 0 and
// T_max + 1 (invalid rows), a skipped write slot (-1 in a later column), a null start slot.
TEST(CudaRecurrent, SlotTableWithNumAccepted) {
  FGDN_SKIP_WITHOUT_GPU();
  for (StateLayout L : {StateLayout::k_major, StateLayout::v_major}) {
    Spec s;
    s.layout = L, s.N = 7, s.T = 4, s.T_max = 4, s.nacc = true, s.null_invalid = true;
    s.nacc_set = {{0, 0, 1}, {1, 0, 4}, {2, 0, 2}, {3, 0, 0}, {4, 0, 5}, {5, 0, 1}, {6, 0, 3}};
    s.slot_set = {{5, 0, 0}, {6, 1, -1}};
    SCOPED_TRACE(L == StateLayout::k_major ? "k_major" : "v_major");
    check(s);
    s.pool_dt = DType::bf16, s.K = 128;
    check(s);
  }
}

// Protocol A with varlen rows shorter than T_max and no num_accepted (a = 1).
TEST(CudaRecurrent, SlotTableVarlen) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.seqlens = {3, 0, 2, 4}, s.T_max = 4;
  check(s);
}

// Protocol B: intermediate states in every dtype without commit (pool untouched), an invalid buffer
// index (-1) and one past the end skip that row's writes.
TEST(CudaRecurrent, IntermediateStatesNoCommit) {
  FGDN_SKIP_WITHOUT_GPU();
  for (DType idt : {DType::f32, DType::bf16, DType::f16}) {
    Spec s;
    s.N = 4, s.T = 5, s.K = 128, s.inter = true, s.inter_dt = idt, s.commit = false;
    s.buf_set = {{1, 0, -1}, {2, 0, 99}};
    SCOPED_TRACE(dtype_name(idt));
    check(s);
  }
}

TEST(CudaRecurrent, IntermediateStatesWithCommitVarlen) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  s.seqlens = {2, 0, 6}, s.inter = true, s.layout = StateLayout::v_major;
  check(s);
  // Protocol A and B together.
  Spec a;
  a.T = 4, a.T_max = 4, a.nacc = true, a.inter = true, a.inter_dt = DType::bf16;
  check(a);
}

// No-commit verify, then recurrent_commit: the pool equals the oracle's verify + commit; rows with an
// invalid slot, invalid buffer or out-of-range count are skipped.
TEST(CudaRecurrent, VerifyThenCommit) {
  FGDN_SKIP_WITHOUT_GPU();
  for (DType pd : {DType::f32, DType::bf16}) {
    Spec s;
    s.N = 5, s.T = 4, s.inter = true, s.inter_dt = pd, s.pool_dt = pd, s.commit = false, s.K = 128, s.V = 64;
    const int64_t slots = s.N + s.extra_slots;
    s.slot_set = {{1, 0, -1}};
    Inputs in = make(s);
    OracleOut ref = run_oracle(s, in);
    auto dev = prepare_device(s, in);
    ASSERT_TRUE(recurrent(dev->p).ok());
    // accepted counts: 1, 2 (row 1 invalid slot), T, 0 (skip), T + 1 (skip)
    HostTensor na(DType::i32, {s.N});
    const int acc[5] = {1, 2, 4, 0, 5};
    for (int64_t n = 0; n < s.N; ++n) na.set(n, acc[n]);
    Mirror dna = mirror(&na);
    RecurrentCommitParams cp;
    cp.state_pool = dev->p.state_pool, cp.state_indices = dev->p.state_indices;
    cp.intermediate_states = dev->p.intermediate_states, cp.intermediate_indices = dev->p.intermediate_indices;
    cp.num_accepted_tokens = dna.view();
    Status st = recurrent_commit(cp);
    ASSERT_TRUE(st.ok()) << st.message();
    device_sync();
    download_outputs(*dev);
    // Oracle commit on the oracle's fp64 buffers.
    HostTensor si = in.si, ii = in.ii;
    RecurrentCommitParams hp;
    hp.state_pool = ref.pool.view(), hp.state_indices = si.view(), hp.intermediate_states = ref.inter.view();
    hp.intermediate_indices = ii.view(), hp.num_accepted_tokens = na.view();
    hp.exec.cpu_fp64 = true;
    ASSERT_TRUE(recurrent_commit(hp).ok());
    std::string why;
    EXPECT_LE(err_written(dev->out.pool, ref.pool, &why), tol_state(pd)) << why;
    // Skipped rows (1, 3, 4) and unused slots keep their bytes.
    const size_t slot_bytes = size_t(in.pool.numel() / slots * dtype_size(pd));
    for (int64_t n : {1, 3, 4}) {
      const int64_t sl = int64_t(in.si.get(n));
      if (sl < 0) continue;
      EXPECT_EQ(
          std::memcmp(dev->out.pool.bytes.data() + sl * slot_bytes, in.pool.bytes.data() + sl * slot_bytes, slot_bytes),
          0)
          << "slot of skipped row " << n;
    }
    // Committed rows equal the device's intermediate entry bit for bit (same dtype).
    const int64_t per = in.pool.numel() / slots, Tb = in.inter.shape[1];
    for (int64_t n : {0, 2}) {
      const int64_t sl = int64_t(in.si.get(n)), b = int64_t(in.ii.get(n));
      for (int64_t e = 0; e < per; ++e)
        ASSERT_EQ(dev->out.pool.get(sl * per + e), dev->out.inter.get((b * Tb + acc[n] - 1) * per + e));
    }
  }
}

// CUDA-graph capture and replay give the eager result bit for bit; 1000 launches are bitwise identical.
TEST(CudaRecurrent, GraphReplayAndBitwiseStability) {
  FGDN_SKIP_WITHOUT_GPU();
#if FLASHGDN_WITH_CUDA
  Spec s;
  s.N = 4, s.T = 6, s.T_max = 6, s.nacc = true, s.commit = false, s.inter = true, s.inter_dt = DType::bf16;
  s.K = 128, s.V = 128, s.act_dt = DType::bf16;
  Inputs in = make(s);
  auto dev = prepare_device(s, in);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE(recurrent(dev->p, nullptr, 0, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  download_outputs(*dev);
  const HostTensor o0 = dev->out.o, i0 = dev->out.inter;
  // poison, capture, replay
  Mirror* mo = nullptr;
  Mirror* mi = nullptr;
  for (auto& m : dev->m) {
    if (m.h == &dev->out.o) mo = &m;
    if (m.h == &dev->out.inter) mi = &m;
  }
  ASSERT_TRUE(mo && mi);
  dev->out.o.fill_nan(), dev->out.inter.fill_nan();
  mo->upload(), mi->upload();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  Status st = recurrent(dev->p, nullptr, 0, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  mo->download(), mi->download();
  EXPECT_TRUE(dev->out.o.bit_equal(o0));
  EXPECT_TRUE(dev->out.inter.bit_equal(i0));
  int mismatches = 0;
  for (int it = 0; it < 1000; ++it) {
    ASSERT_TRUE(recurrent(dev->p, nullptr, 0, stream).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    mo->download();
    if (!dev->out.o.bit_equal(o0)) ++mismatches;
  }
  mi->download();
  EXPECT_EQ(mismatches, 0);
  EXPECT_TRUE(dev->out.inter.bit_equal(i0));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
#endif
}

// Decode steps back to back on one pool: every kernel but the persistent one is launched with programmatic
// dependent launch (launch_pdl), so step i + 1 may start while step i runs; its pdl_wait must order every pool read
// after step i's writes. Eight steps with no synchronization between them, eager and captured in one graph, must
// leave o and the pool bit for bit as eight steps synchronized one by one (a read of the pool before the previous
// step's write changes the state of every later step).
TEST(CudaRecurrent, StepsBackToBackEqualSynchronizedSteps) {
  FGDN_SKIP_WITHOUT_GPU();
#if FLASHGDN_WITH_CUDA
  constexpr int kSteps = 8;
  struct Case {
    RecurrentKernel kernel;
    int64_t N, T;
    DType pool_dt;
  };
  for (const Case& c :
       {Case{RecurrentKernel::direct, 3, 1, DType::f32}, Case{RecurrentKernel::direct, 2, 1, DType::bf16},
        Case{RecurrentKernel::direct_pipe, 40, 1, DType::bf16}, Case{RecurrentKernel::wy, 3, 5, DType::f32},
        Case{RecurrentKernel::wy_mma, 3, 12, DType::bf16}, Case{RecurrentKernel::persistent, 2, 3, DType::f32}}) {
    SCOPED_TRACE(std::string("kernel ") + recurrent_kernel_name(c.kernel));
    Spec s;
    s.N = c.N, s.T = c.T, s.Hqk = 2, s.Hv = 8, s.K = 128, s.V = 128, s.act_dt = DType::bf16, s.pool_dt = c.pool_dt;
    s.kernel = c.kernel;
    Inputs in = make(s);
    auto dev = prepare_device(s, in);
    Mirror* mpool = nullptr;
    for (auto& m : dev->m)
      if (m.h == &dev->out.pool) mpool = &m;
    ASSERT_NE(mpool, nullptr);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    auto steps = [&](bool sync) {
      for (int i = 0; i < kSteps; ++i) {
        ASSERT_TRUE(recurrent(dev->p, nullptr, 0, stream).ok());
        if (sync) {
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        }
      }
    };
    auto result = [&] {
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      download_outputs(*dev);
      return std::make_pair(dev->out.o, dev->out.pool);
    };
    steps(true);
    const auto ref = result();
    EXPECT_FALSE(ref.second.bit_equal(in.pool)) << "the steps must change the pool";
    dev->out.pool = in.pool, mpool->upload();
    steps(false);
    const auto eager = result();
    EXPECT_TRUE(eager.first.bit_equal(ref.first)) << "o, eager";
    EXPECT_TRUE(eager.second.bit_equal(ref.second)) << "pool, eager";
    dev->out.pool = in.pool, mpool->upload();
    ASSERT_EQ(run_captured(stream, [&] { steps(false); }), cudaSuccess);
    const auto graphed = result();
    EXPECT_TRUE(graphed.first.bit_equal(ref.first)) << "o, graph";
    EXPECT_TRUE(graphed.second.bit_equal(ref.second)) << "pool, graph";
    cudaStreamDestroy(stream);
  }
#endif
}

// The workspace is zero bytes (no scratch), so a null workspace is always accepted.
TEST(CudaRecurrent, WorkspaceIsZero) {
  FGDN_SKIP_WITHOUT_GPU();
  Spec s;
  Inputs in = make(s);
  auto dev = prepare_device(s, in);
  size_t bytes = 123;
  ASSERT_TRUE(recurrent_workspace_size(dev->p, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
}

}  // namespace
}  // namespace flashgdn::test
