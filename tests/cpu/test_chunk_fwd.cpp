// cpu::chunk_fwd: fp64 chunked == fp64 recurrence == an independent naive loop, fp32 vs fp64, varlen with
// empty sequences, h0 absent, checkpoints, fused gate, bf16 I/O, strided views.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_test_helpers.hpp"

namespace flashgdn::test {
namespace {

constexpr CpuAlgo kRec = CpuAlgo::recurrent;
constexpr CpuAlgo kChunk = CpuAlgo::chunked;

// Per-(row, head) worst relative error of o [rows, Hv, V], so one broken head cannot hide (§10.3).
double max_head_err_o(const HostTensor& o, const std::vector<double>& ref, int64_t Hv, int64_t V) {
  HostTensor r(DType::f64, {int64_t(ref.size())});
  for (size_t i = 0; i < ref.size(); ++i) r.set(int64_t(i), ref[i]);
  HostTensor x = o.cast(DType::f64);
  x.shape = r.shape;
  return max_head_err(x, r, Hv, [&](int64_t i) { return (i / V) % Hv; });
}

// fp64 cases: inputs and o in f64, so a 1e-12 comparison is not limited by the output rounding.
std::vector<GdnCase> f64_cases() {
  std::vector<GdnCase> cs = standard_cases();
  for (GdnCase& c : cs) c.dtype = DType::f64;
  return cs;
}

TEST(ChunkFwd, Fp64RecurrenceMatchesNaiveLoop) {
  for (const GdnCase& c : f64_cases()) {
    SCOPED_TRACE(c.name);
    GdnInputs in = make_inputs(c);
    Prob pr = make_prob(c, in);
    RefOut ref = naive_recurrent(pr);
    FwdOut out = run_fwd(c, in, kRec, 64, true);
    EXPECT_LE(rel_err_vec(rows_of(out.o, ref.o.size()), ref.o), 1e-12);
    EXPECT_LE(max_head_err_o(out.o, ref.o, c.Hv, c.V), 1e-12);
    EXPECT_LE(rel_err_vec(kmajor(out.hT, c.layout, c.K, c.V), ref.hT), 1e-12);
  }
}

TEST(ChunkFwd, Fp64ChunkedEqualsFp64Recurrence) {
  for (const GdnCase& c : f64_cases()) {
    GdnInputs in = make_inputs(c);
    FwdOut rec = run_fwd(c, in, kRec, 64, true);
    for (int32_t C : {16, 32, 64}) {
      SCOPED_TRACE(c.name + " C=" + std::to_string(C));
      FwdOut ch = run_fwd(c, in, kChunk, C, true);
      EXPECT_LE(rel_err(ch.o, rec.o), 1e-12);
      EXPECT_LE(rel_err(ch.hT, rec.hT), 1e-12);
      EXPECT_LE(max_head_err_o(ch.o, rec.o.to_double(), c.Hv, c.V), 1e-12);
    }
  }
}

TEST(ChunkFwd, Fp32WithinToleranceOfFp64) {
  for (const GdnCase& c : standard_cases()) {
    GdnInputs in = make_inputs(c);
    FwdOut ref = run_fwd(c, in, kRec, 64, true);
    for (CpuAlgo algo : {kRec, kChunk}) {
      SCOPED_TRACE(c.name + (algo == kRec ? " recurrent" : " chunked"));
      FwdOut f = run_fwd(c, in, algo, 64, false);
      EXPECT_LE(rel_err(f.o, ref.o), 1e-5);
      EXPECT_LE(rel_err(f.hT, ref.hT), 1e-5);
    }
  }
}

TEST(ChunkFwd, LongerFp32ChunkedVsFp64) {
  GdnCase c;
  c.name = "long";
  c.B = 1;
  c.T = 1000;
  c.Hqk = 1;
  c.Hv = 2;
  c.K = 128;
  c.V = 128;
  c.g_scale = 0.05;
  c.seed = 77;
  GdnInputs in = make_inputs(c);
  FwdOut ref = run_fwd(c, in, kChunk, 64, true);
  FwdOut f = run_fwd(c, in, kChunk, 64, false);
  EXPECT_LE(rel_err(f.o, ref.o), 1e-5);
  EXPECT_LE(rel_err(f.hT, ref.hT), 1e-5);
}

// §1.5 / §10.4: a length-0 sequence leaves hT == h0 bit for bit and does not disturb its neighbours.
TEST(ChunkFwd, LengthZeroSequencesKeepH0Exactly) {
  GdnCase c;
  c.name = "empties";
  c.seqlens = {0, 9, 0, 0, 21, 0};
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 32;
  c.V = 48;
  c.seed = 5;
  c.dtype = DType::f64;
  GdnInputs in = make_inputs(c);
  RefOut ref = naive_recurrent(make_prob(c, in));
  const int64_t per = c.Hv * c.K * c.V;
  for (bool fp64 : {false, true})
    for (CpuAlgo algo : {kRec, kChunk}) {
      FwdOut out = run_fwd(c, in, algo, 16, fp64);
      for (int64_t n : {0, 2, 3, 5})
        for (int64_t e = 0; e < per; ++e) {  // fp32 mode keeps h0 as its fp32 rounding, exactly
          const double h0 = fp64 ? in.h0.get(n * per + e) : double(float(in.h0.get(n * per + e)));
          ASSERT_EQ(out.hT.get(n * per + e), h0) << n;
        }
      EXPECT_LE(rel_err_vec(kmajor(out.hT, c.layout, c.K, c.V), ref.hT), fp64 ? 1e-12 : 1e-5);
      EXPECT_LE(rel_err_vec(out.o.to_double(), ref.o), fp64 ? 1e-12 : 1e-5);
    }
}

// §1.5: no h0 and an all-zero h0 give identical results.
TEST(ChunkFwd, AbsentH0EqualsZerosExactly) {
  GdnCase c = standard_cases()[0];
  GdnInputs in = make_inputs(c);
  for (CpuAlgo algo : {kRec, kChunk}) {
    GdnInputs zero = in;
    zero.h0.fill(0.0);
    GdnInputs none = in;
    none.h0 = HostTensor();
    FwdOut a = run_fwd(c, zero, algo, 32, false), b = run_fwd(c, none, algo, 32, false);
    EXPECT_TRUE(a.o.bit_equal(b.o));
    EXPECT_TRUE(a.hT.bit_equal(b.hT));
    EXPECT_FALSE(any_nonfinite(a.o));
  }
}

TEST(ChunkFwd, StateCheckpointsEveryInterval) {
  GdnCase c;
  c.name = "ckpt";
  c.seqlens = {40, 0, 16, 70};
  c.Hqk = 1;
  c.Hv = 2;
  c.K = 16;
  c.V = 24;
  c.layout = StateLayout::v_major;
  c.seed = 9;
  GdnInputs in = make_inputs(c);
  std::vector<std::vector<std::vector<double>>> states;
  naive_recurrent(make_prob(c, in), Bug::none, &states);
  const int64_t interval = 32, cmax = 3, N = c.N();
  for (CpuAlgo algo : {kRec, kChunk}) {
    HostTensor ck = poisoned(DType::f64, {N, cmax, c.Hv, c.V, c.K});
    run_fwd(c, in, algo, 16, true, [&](ChunkFwdParams& p, ChunkDims& d) {
      p.state_checkpoints = ck.view();
      p.checkpoint_interval = interval;
      d.num_checkpoints = cmax;
    });
    for (int64_t n = 0; n < N; ++n)
      for (int64_t e = 0; e < cmax; ++e)
        for (int64_t h = 0; h < c.Hv; ++h) {
          const int64_t len = c.seqlens[size_t(n)], done = (e + 1) * interval;
          for (int64_t j = 0; j < c.V; ++j)
            for (int64_t i = 0; i < c.K; ++i) {
              const double x = ck.get((((n * cmax + e) * c.Hv + h) * c.V + j) * c.K + i);
              if (done > len) {
                ASSERT_TRUE(std::isnan(x)) << "entry past the sequence was written";
              } else {
                const double r = states[size_t(n * c.Hv + h)][size_t(done - 1)][size_t(i * c.V + j)];
                ASSERT_NEAR(x, r, 1e-12 * (1 + std::fabs(r)));
              }
            }
        }
  }
}

// The fused gate (use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval) equals the op on
// explicitly computed g and beta (gdn-math §4), including x beyond the softplus threshold.
TEST(ChunkFwd, FusedGateEqualsExplicitGate) {
  GdnCase c = standard_cases()[3];
  c.dtype = DType::f64;
  GdnInputs in = make_inputs(c);
  Rng rng(44);
  const int64_t rows = in.g.numel() / c.Hv;
  HostTensor a(DType::f32, in.g.shape), b(DType::f32, in.g.shape), A_log(DType::f32, {c.Hv}), dtb(DType::f32, {c.Hv});
  for (int64_t h = 0; h < c.Hv; ++h) {
    A_log.set(h, std::log(rng.uniform(1, 16)) * 0.3);
    dtb.set(h, rng.normal() * 0.5 - 2.0);
  }
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.set(i, i % 17 == 0 ? 25.0 + rng.uniform() : rng.normal());  // some past the threshold 20
    b.set(i, rng.normal());
  }
  for (bool neg : {false, true}) {
    GdnInputs ex = in;
    ex.g = HostTensor(DType::f64, in.g.shape);
    ex.beta = HostTensor(DType::f64, in.g.shape);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < c.Hv; ++h) {
        const int64_t i = r * c.Hv + h;
        const double x = a.get(i) + dtb.get(h);
        const double sp = x <= 20.0 ? std::log1p(std::exp(x)) : x;
        ex.g.set(i, -std::exp(A_log.get(h)) * sp);
        ex.beta.set(i, (neg ? 2.0 : 1.0) / (1.0 + std::exp(-b.get(i))));
      }
    FwdOut ref = run_fwd(c, ex, kRec, 64, true);
    GdnInputs raw = in;
    raw.g = a;
    raw.beta = b;
    for (CpuAlgo algo : {kRec, kChunk}) {
      FwdOut f = run_fwd(c, raw, algo, 32, true, [&](ChunkFwdParams& p, ChunkDims&) {
        p.A_log = A_log.view();
        p.dt_bias = dtb.view();
        p.gate.use_gate_in_kernel = true;
        p.gate.use_beta_sigmoid_in_kernel = true;
        p.gate.allow_neg_eigval = neg;
      });
      EXPECT_LE(rel_err(f.o, ref.o), 1e-12);
      EXPECT_LE(rel_err(f.hT, ref.hT), 1e-12);
    }
  }
}

// Absent g means g = 0 and absent beta means beta = 1.
TEST(ChunkFwd, AbsentGateAndBeta) {
  GdnCase c = standard_cases()[0];
  c.dtype = DType::f64;
  GdnInputs in = make_inputs(c);
  GdnInputs ex = in;
  ex.g.fill(0.0);
  ex.beta.fill(1.0);
  FwdOut ref = run_fwd(c, ex, kRec, 64, true);
  GdnInputs none = in;
  none.g = HostTensor();
  none.beta = HostTensor();
  for (CpuAlgo algo : {kRec, kChunk}) {
    FwdOut f = run_fwd(c, none, algo, 16, true);
    EXPECT_LE(rel_err(f.o, ref.o), 1e-12);
    EXPECT_LE(rel_err(f.hT, ref.hT), 1e-12);
  }
}

// bf16 inputs and output: fp32 compute, o rounded to bf16; reference = fp64 on the same rounded inputs.
TEST(ChunkFwd, Bf16InputsAndOutput) {
  GdnCase c = standard_cases()[1];
  c.dtype = DType::bf16;
  GdnInputs in = make_inputs(c);
  GdnInputs in64 = in;
  in64.q = in.q.cast(DType::f64);
  in64.k = in.k.cast(DType::f64);
  in64.v = in.v.cast(DType::f64);
  FwdOut ref = run_fwd(c, in64, kRec, 64, true);
  for (CpuAlgo algo : {kRec, kChunk}) {
    FwdOut f = run_fwd(c, in, algo, 64, false);
    ASSERT_EQ(f.o.dtype, DType::bf16);
    const double e = rel_err(f.o, ref.o);
    EXPECT_LE(e, 3e-3);
    EXPECT_GT(e, 1e-4);  // the output really is rounded to bf16
    EXPECT_LE(rel_err(f.hT, ref.hT), 1e-5);
  }
}

// Non-compact views: q/k/v/o inside wider buffers give the same results as compact tensors.
TEST(ChunkFwd, StridedViews) {
  GdnCase c = standard_cases()[0];
  GdnInputs in = make_inputs(c);
  FwdOut ref = run_fwd(c, in, kChunk, 32, false);
  // Embed each of q, k, v into a buffer with the last dim doubled and read every other... keep the first half.
  auto widen = [](const HostTensor& t) {
    std::vector<int64_t> s = t.shape;
    s.back() *= 2;
    HostTensor w(t.dtype, s);
    w.fill(12345.0);
    const int64_t D = t.shape.back();
    for (int64_t r = 0; r < t.numel() / D; ++r)
      for (int64_t x = 0; x < D; ++x) w.set(r * 2 * D + D + x, t.get(r * D + x));
    return w;
  };
  auto half_view = [](const HostTensor& w) {
    TensorView v = w.view();
    const int64_t D = v.shape[v.ndim - 1] / 2;
    v.shape[v.ndim - 1] = D;
    v.data = static_cast<char*>(v.data) + D * dtype_size(w.dtype);
    return v;
  };
  HostTensor wq = widen(in.q), wk = widen(in.k), wv = widen(in.v), wo = widen(ref.o);
  wo.fill_nan();
  for (CpuAlgo algo : {kRec, kChunk}) {
    FwdOut f = run_fwd(c, in, algo, 32, false, [&](ChunkFwdParams& p, ChunkDims&) {
      p.q = half_view(wq);
      p.k = half_view(wk);
      p.v = half_view(wv);
      p.o = half_view(wo);
    });
    HostTensor o = ref.o;
    const int64_t V = c.V;
    for (int64_t r = 0; r < o.numel() / V; ++r)
      for (int64_t x = 0; x < V; ++x) o.set(r * V + x, wo.get(r * 2 * V + V + x));
    EXPECT_LE(rel_err(o, ref.o), algo == kChunk ? 0.0 : 1e-5);
    EXPECT_LE(rel_err(f.hT, ref.hT), algo == kChunk ? 0.0 : 1e-5);
  }
}

// Garbage cu_seqlens never read or write out of bounds (values are clamped into [0, T]).
TEST(ChunkFwd, OutOfRangeCuSeqlensStayInBounds) {
  GdnCase c;
  c.seqlens = {5, 7};
  c.Hqk = 1;
  c.Hv = 1;
  c.K = 16;
  c.V = 16;
  GdnInputs in = make_inputs(c);
  in.cu = HostTensor(DType::i64, {3});
  in.cu.set(0, -5);
  in.cu.set(1, 1000);
  in.cu.set(2, 3);
  FwdOut f = run_fwd(c, in, kChunk, 16, false);
  EXPECT_FALSE(any_nonfinite(f.hT));
}

TEST(ChunkFwd, CheckpointIntervalNotOnChunkEndsIsRejected) {
  GdnCase c = standard_cases()[0];
  GdnInputs in = make_inputs(c);
  HostTensor ck = poisoned(DType::f32, {c.B, 2, c.Hv, c.K, c.V}), o = poisoned(DType::f32, in.v.shape);
  ChunkFwdParams p;
  p.q = in.q.view();
  p.k = in.k.view();
  p.v = in.v.view();
  p.o = o.view();
  p.state_checkpoints = ck.view();
  p.checkpoint_interval = 24;
  p.chunk_size = 16;
  p.exec.cpu_algo = CpuAlgo::chunked;
  Status st = cpu::chunk_fwd(p, chunk_dims(c, 0.0, 2));
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("checkpoint_interval"), std::string::npos) << st.message();
  p.exec.cpu_algo = CpuAlgo::recurrent;  // the recurrence sees every token
  EXPECT_TRUE(cpu::chunk_fwd(p, chunk_dims(c, 0.0, 2)).ok());
  EXPECT_FALSE(std::isnan(ck.get(0)));
}

}  // namespace
}  // namespace flashgdn::test
