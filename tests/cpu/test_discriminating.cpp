// gdn-math §10.4, one test per row: the op matches an independent naive fp64 loop, AND the wrong variant
// (implemented in cpu_test_helpers.hpp) differs from it by > 0.1 (or is NaN) on the same input, so each test
// provably discriminates. Rows about decode/verify are in test_recurrent.cpp; allow_neg_eigval in
// test_chunk_bwd.cpp; length-0 and h0-absent exactness in test_chunk_fwd.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cpu_test_helpers.hpp"

namespace flashgdn::test {
namespace {

constexpr double kFar = 0.1;

GdnCase base_case(const char* name) {
  GdnCase c;
  c.name = name;
  c.B = 2;
  c.T = 40;
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 32;
  c.V = 32;
  c.g_scale = 0.5;
  c.dtype = DType::f64;
  c.seed = 4242;
  return c;
}

double err(const FwdOut& out, const GdnCase& c, const RefOut& ref) {
  return rel_err_vec(rows_of(out.o, ref.o.size()), ref.o) + rel_err_vec(kmajor(out.hT, c.layout, c.K, c.V), ref.hT);
}

double err(const RefOut& x, const RefOut& ref) {
  return rel_err_vec(x.o, ref.o) + rel_err_vec(x.hT, ref.hT);
}

// The op (both forms, fp64) matches `good`, and `bad` is far from `good`.
void expect_discriminates(const GdnCase& c, const GdnInputs& in, const RefOut& good, const RefOut& bad, int32_t C = 16,
                          double scale = 0.0) {
  for (CpuAlgo algo : {CpuAlgo::recurrent, CpuAlgo::chunked}) {
    FwdOut out = run_fwd(c, in, algo, C, true, [&](ChunkFwdParams&, ChunkDims& d) {
      if (scale != 0.0) d.scale = float(scale);
    });
    EXPECT_LE(err(out, c, good), 1e-11) << (algo == CpuAlgo::recurrent ? "recurrent" : "chunked");
  }
  const double e = err(bad, good);
  std::fprintf(stderr, "[info] wrong variant error %.3g\n", e);
  EXPECT_TRUE(std::isnan(e) || e > kFar) << "the wrong variant is not detected: " << e;
}

TEST(Discriminating, PreUpdateRead) {
  GdnCase c = base_case("pre_read");
  GdnInputs in = make_inputs(c);
  Prob p = make_prob(c, in);
  expect_discriminates(c, in, naive_recurrent(p), naive_recurrent(p, Bug::pre_update_read));
}

TEST(Discriminating, GqaMappingModInsteadOfDiv) {
  GdnCase c = base_case("gqa");  // Hqk = 2, Hv = 4: the two mappings differ
  GdnInputs in = make_inputs(c);
  Prob p = make_prob(c, in);
  expect_discriminates(c, in, naive_recurrent(p), naive_recurrent(p, Bug::gqa_mod));
}

TEST(Discriminating, TransposedStateWithKEqualsV) {
  for (StateLayout layout : {StateLayout::k_major, StateLayout::v_major}) {
    GdnCase c = base_case("transposed");  // K == V: a transposed read is shape-compatible
    c.layout = layout;
    GdnInputs in = make_inputs(c);  // non-symmetric random h0, made large enough to matter
    for (int64_t i = 0; i < in.h0.numel(); ++i) in.h0.set(i, 10.0 * in.h0.get(i));
    Prob p = make_prob(c, in);
    expect_discriminates(c, in, naive_recurrent(p), naive_recurrent(p, Bug::transposed_state));
  }
  GdnCase c = base_case("k_ne_v");  // K != V catches stride mix-ups in both layouts
  c.V = 48;
  for (StateLayout layout : {StateLayout::k_major, StateLayout::v_major}) {
    c.layout = layout;
    GdnInputs in = make_inputs(c);
    Prob p = make_prob(c, in);
    expect_discriminates(c, in, naive_recurrent(p), naive_recurrent(p, Bug::pre_update_read));
  }
}

TEST(Discriminating, MissingDecayInChunkedForm) {
  GdnCase c = base_case("decay");  // gate magnitudes ~0.5 and 3 chunks of 16
  GdnInputs in = make_inputs(c);
  Prob p = make_prob(c, in);
  const RefOut good = naive_chunked(p, 16);
  EXPECT_LE(err(good, naive_recurrent(p)), 1e-12);  // the naive chunked form itself is right
  for (Bug bug : {Bug::no_decay_q, Bug::no_decay_w, Bug::no_decay_kbar}) {
    SCOPED_TRACE(int(bug));
    expect_discriminates(c, in, good, naive_chunked(p, 16, bug));
  }
  // With g = 0 the same bugs are invisible (gdn-math §10.4): the test needs a real gate.
  in.g.fill(0.0);
  Prob p0 = make_prob(c, in);
  EXPECT_LE(err(naive_chunked(p0, 16, Bug::no_decay_kbar), naive_chunked(p0, 16)), 1e-12);
}

TEST(Discriminating, PartialLastChunkGarbagePadding) {
  GdnCase c = base_case("partial");
  c.seqlens = {1, 15, 16, 17, 35};  // {1, C-1, C, C+1, 2C+3} at C = 16
  GdnInputs in = make_inputs(c);
  Prob p = make_prob(c, in);
  expect_discriminates(c, in, naive_recurrent(p), naive_chunked(p, 16, Bug::pad_g_garbage));
}

TEST(Discriminating, ChunksOverTheFlatVarlenAxis) {
  GdnCase c = base_case("flat");
  c.seqlens = {17, 0, 6, 29};  // not multiples of C = 16
  GdnInputs in = make_inputs(c);
  Prob p = make_prob(c, in);
  expect_discriminates(c, in, naive_recurrent(p), naive_recurrent(p, Bug::no_seq_reset));
}

TEST(Discriminating, ScaleNonDefaultAndDefaultWithKNotV) {
  GdnCase c = base_case("scale");
  GdnInputs in = make_inputs(c);
  expect_discriminates(c, in, naive_recurrent(make_prob(c, in, 0.3)),
                       naive_recurrent(make_prob(c, in, 0.3), Bug::no_scale), 16, 0.3);
  c.K = 32;
  c.V = 128;  // default scale is K^-1/2, not V^-1/2
  GdnInputs in2 = make_inputs(c);
  expect_discriminates(c, in2, naive_recurrent(make_prob(c, in2)),
                       naive_recurrent(make_prob(c, in2, 1.0 / std::sqrt(128.0))));
}

TEST(Discriminating, L2EpsInsideTheSquareRoot) {
  GdnCase c = base_case("eps");
  GdnInputs in = make_inputs(c);
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, in.k.get(i) * 1e-5);  // keys with norm ~5e-5
  Prob p = make_prob(c, in);
  expect_discriminates(c, in, naive_recurrent(p), naive_recurrent(p, Bug::eps_outside_sqrt));
}

// g = -30 per token: gamma reaches -1920 in a chunk of 64, exp(-gamma_s) overflows. Our op stays finite in
// fp32 and fp64; the factored exponentials give NaN.
TEST(Discriminating, StrongGateFactoredExponentialsGiveNaN) {
  GdnCase c = base_case("g30");
  c.T = 64;
  c.B = 1;
  GdnInputs in = make_inputs(c);
  in.g.fill(-30.0);
  Prob p = make_prob(c, in);
  const RefOut good = naive_recurrent(p);
  expect_discriminates(c, in, good, naive_chunked(p, 64, Bug::factored_decay), 64);
  GdnCase c32 = c;
  c32.dtype = DType::f32;
  GdnInputs in32 = make_inputs(c32);
  in32.g.fill(-30.0);
  FwdOut f = run_fwd(c32, in32, CpuAlgo::chunked, 64, false);
  EXPECT_FALSE(any_nonfinite(f.o));
  EXPECT_FALSE(any_nonfinite(f.hT));
  EXPECT_LE(err(f, c32, naive_recurrent(make_prob(c32, in32))), 1e-5);
}

// Identical keys, beta = 1, g = 0 in a chunk of 64: forward substitution stays accurate in fp32; the
// whole-chunk doubling product is off even in fp64 (gdn-math §5.7).
TEST(Discriminating, IdenticalKeysWholeChunkDoublingInverse) {
  GdnCase c = base_case("identical_keys");
  c.B = 1;
  c.T = 64;
  c.Hqk = 1;
  c.Hv = 1;
  c.K = 64;
  c.V = 64;
  GdnInputs in = make_inputs(c);
  for (int64_t t = 1; t < c.T; ++t)
    for (int64_t i = 0; i < c.K; ++i) in.k.set(t * c.K + i, in.k.get(i));
  in.g.fill(0.0);
  in.beta.fill(1.0);
  Prob p = make_prob(c, in);
  const RefOut good = naive_recurrent(p);
  expect_discriminates(c, in, good, naive_chunked(p, 64, Bug::doubling_inverse), 64);
  GdnCase c32 = c;
  c32.dtype = DType::f32;
  GdnInputs in32 = in;
  in32.q = in.q.cast(DType::f32);
  in32.k = in.k.cast(DType::f32);
  in32.v = in.v.cast(DType::f32);
  FwdOut f = run_fwd(c32, in32, CpuAlgo::chunked, 64, false);
  EXPECT_LE(err(f, c32, naive_recurrent(make_prob(c32, in32))), 1e-5);
}

}  // namespace
}  // namespace flashgdn::test
