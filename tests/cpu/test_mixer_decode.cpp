// CPU mixer_decode against the independent token-by-token reference (mixer_test_util.hpp), plus the
// properties that tell right from wrong: T tokens at once equal T single-token calls, a speculative step
// followed by the next step's offset equals sequential decoding of the accepted tokens, commit = false
// leaves both states untouched, sentinel rows write zeros and nothing else.
#include <gtest/gtest.h>

#include <limits>

#include "mixer_test_util.hpp"

namespace flashgdn::test {
namespace {

struct MixerRun {
  MixerTensors got, want;
};

MixerRun run_case(const MixerCase& c, bool fp64 = true) {
  MixerRun r;
  r.got = make_mixer(c);
  r.want = r.got;
  MixerDecodeParams p = mixer_params(c, r.got);
  p.exec.cpu_fp64 = fp64;
  const Status st = mixer_decode(p);
  EXPECT_TRUE(st.ok()) << st.message();
  mixer_reference(c, r.want);
  return r;
}

void expect_close(const MixerRun& r, const MixerCase& c, double tol) {
  EXPECT_LE(rel_err(r.got.out, r.want.out), tol);
  EXPECT_LE(rel_err(r.got.pool, r.want.pool), tol);
  EXPECT_LE(rel_err(r.got.conv_state, r.want.conv_state), tol);
  if (c.intermediates) {
    EXPECT_LE(rel_err_written(r.got.inter, r.want.inter), tol);
    if (c.Kc > 1) EXPECT_LE(rel_err_written(r.got.inter_win, r.want.inter_win), tol);
  }
}

TEST(CpuMixerDecode, DecodeMatchesReference) {
  for (StateLayout l : {StateLayout::k_major, StateLayout::v_major})
    for (int64_t Kc : {1, 2, 4}) {
      MixerCase c;
      c.layout = l, c.Kc = Kc, c.B = 4;
      SCOPED_TRACE(testing::Message() << "layout " << int(l) << " Kc " << Kc);
      expect_close(run_case(c), c, 1e-9);
    }
}

TEST(CpuMixerDecode, GqaRatiosAndDims) {
  for (int64_t r : {1, 3, 4}) {
    MixerCase c;
    c.Hqk = 2, c.Hv = 2 * r, c.K = 8, c.V = 24, c.seed = uint64_t(10 + r);
    SCOPED_TRACE(r);
    expect_close(run_case(c), c, 1e-9);
  }
}

TEST(CpuMixerDecode, MultiTokenEqualsSequentialSteps) {
  MixerCase c;
  c.T = 3, c.B = 2;
  MixerRun r = run_case(c);
  expect_close(r, c, 1e-9);
  // The same tokens as three T = 1 calls on the same states.
  MixerTensors s = make_mixer(c);
  MixerCase one = c;
  one.T = 1;
  for (int64_t t = 0; t < 3; ++t) {
    MixerTensors m = make_mixer(one);
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t ch = 0; ch < c.C(); ++ch) m.x.set(b * c.C() + ch, s.x.get((b * 3 + t) * c.C() + ch));
      for (int64_t e = 0; e < c.Hv * c.V; ++e) m.z.set(b * c.Hv * c.V + e, s.z.get((b * 3 + t) * c.Hv * c.V + e));
      for (int64_t h = 0; h < c.Hv; ++h) {
        m.a.set(b * c.Hv + h, s.a.get((b * 3 + t) * c.Hv + h));
        m.b.set(b * c.Hv + h, s.b.get((b * 3 + t) * c.Hv + h));
      }
    }
    m.A_log = s.A_log, m.dt_bias = s.dt_bias, m.conv_w = s.conv_w, m.conv_b = s.conv_b, m.norm_w = s.norm_w;
    m.conv_state = s.conv_state, m.pool = s.pool;
    MixerDecodeParams p = mixer_params(one, m);
    p.exec.cpu_fp64 = true;
    ASSERT_TRUE(mixer_decode(p).ok());
    s.conv_state = m.conv_state, s.pool = m.pool;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t e = 0; e < c.Hv * c.V; ++e)
        EXPECT_NEAR(m.out.get(b * c.Hv * c.V + e), r.got.out.get((b * 3 + t) * c.Hv * c.V + e), 1e-9);
  }
  EXPECT_LE(rel_err(s.pool, r.got.pool), 1e-12);
  EXPECT_LE(rel_err(s.conv_state, r.got.conv_state), 1e-12);
}

TEST(CpuMixerDecode, SpeculativeSlotsAndWindows) {
  for (StateLayout l : {StateLayout::k_major, StateLayout::v_major}) {
    MixerCase c;
    c.spec = 2, c.T = 3, c.B = 4, c.layout = l;
    SCOPED_TRACE(int(l));
    expect_close(run_case(c), c, 1e-9);
  }
}

// After a verify step of T = 1 + S tokens that accepted a' of them, the next step's window at offset a' - 1
// holds the last Kc - 1 accepted raw inputs, exactly as sequential decoding would (mixer-decode-spec §3).
TEST(CpuMixerDecode, SpeculativeWindowSelectsAcceptedInputs) {
  MixerCase c;
  c.spec = 2, c.T = 3, c.B = 1, c.Kc = 4;
  MixerTensors m = make_mixer(c);
  m.na.set(0, 1.0);
  const HostTensor before = m.conv_state;
  MixerDecodeParams p = mixer_params(c, m);
  p.exec.cpu_fp64 = true;
  ASSERT_TRUE(mixer_decode(p).ok());
  const int64_t slot = int64_t(m.si.get(0)), C = c.C(), Lc = c.conv_len();
  for (int64_t accepted = 1; accepted <= 3; ++accepted) {
    const int64_t off = accepted - 1;
    for (int64_t ch = 0; ch < C; ch += 7) {
      std::vector<double> seq;  // sequential history: the old window, then the accepted tokens
      for (int64_t j = 0; j < c.Kc - 1; ++j) seq.push_back(before.get((slot * C + ch) * Lc + j));
      for (int64_t t = 0; t < accepted; ++t) seq.push_back(m.x.get(t * C + ch));
      for (int64_t j = 0; j < c.Kc - 1; ++j)
        EXPECT_EQ(m.conv_state.get((slot * C + ch) * Lc + off + j), seq[seq.size() - size_t(c.Kc - 1) + size_t(j)])
            << "accepted " << accepted << " channel " << ch << " position " << j;
    }
  }
}

TEST(CpuMixerDecode, NoCommitWritesIntermediatesOnly) {
  MixerCase c;
  c.T = 3, c.B = 3, c.commit = false, c.intermediates = true;
  MixerRun r = run_case(c);
  expect_close(r, c, 1e-9);
  const MixerTensors fresh = make_mixer(c);
  EXPECT_TRUE(r.got.pool.bit_equal(fresh.pool));
  EXPECT_TRUE(r.got.conv_state.bit_equal(fresh.conv_state));
}

TEST(CpuMixerDecode, VarlenWithEmptyRows) {
  MixerCase c;
  c.lens = {2, 0, 1, 3};
  MixerRun r = run_case(c);
  expect_close(r, c, 1e-9);
}

TEST(CpuMixerDecode, Bf16Activations) {
  MixerCase c;
  c.act = DType::bf16, c.pool = DType::f32, c.T = 2;
  expect_close(run_case(c, /*fp64=*/false), c, 1e-2);
}

TEST(CpuMixerDecode, RejectsBadArguments) {
  MixerCase c;
  MixerTensors m = make_mixer(c);
  const HostTensor out0 = m.out;
  MixerDecodeParams p = mixer_params(c, m);
  p.num_k_heads = 1;
  Status st = mixer_decode(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("x: expected C = 2 Hqk K + Hv V"), std::string::npos) << st.message();
  p = mixer_params(c, m);
  p.norm_weight = TensorView();
  st = mixer_decode(p);
  EXPECT_NE(st.message().find("norm_weight"), std::string::npos) << st.message();
  p = mixer_params(c, m);
  p.conv_state.shape[0] -= 1;
  st = mixer_decode(p);
  EXPECT_NE(st.message().find("conv_state: expected the slots of state_pool"), std::string::npos) << st.message();
  p = mixer_params(c, m);
  p.state_indices = TensorView();
  p.z.shape[2] = 3;
  st = mixer_decode(p);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(m.out.bit_equal(out0));  // rejected calls write nothing
}

// An empty batch bounds no size of its empty tensors: 2-D state_indices [0, 2^63 - 1] (T_max) must be rejected
// against the conv state's L without forming Kc - 2 + T_max (a signed overflow).
TEST(CpuMixerDecode, EmptyBatchWithHugeTmaxRejected) {
  MixerCase c;
  c.B = 0, c.spec = 2;
  MixerTensors m = make_mixer(c);
  MixerDecodeParams p = mixer_params(c, m);
  ASSERT_TRUE(mixer_decode(p).ok());  // the empty batch as made: nothing to do
  p.state_indices.shape[1] = std::numeric_limits<int64_t>::max();
  const Status st = mixer_decode(p);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.message();
  EXPECT_NE(st.message().find("conv_state: expected L >= Kc - 2 + T_max"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace flashgdn::test
