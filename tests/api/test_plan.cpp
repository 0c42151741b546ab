// The CUDA plans (api/plan.hpp) on the CPU: which kernels, tiles and segment split a shape gets on a GPU of a given
// SM count, the workspace they need, and the kernel overrides of ExecOptions (honoured, or rejected with the
// kernel's requirement when it cannot take the shape). Plans read shapes and flags only, so the tensors here are
// shape-only views (no data) except in the public-API cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "api/plan.hpp"
#include "cuda/chunk_bwd/chunk_bwd.hpp"
#include "cuda/chunk_fwd/chunk_fwd.hpp"
#include "cuda/recurrent/recurrent_args.hpp"
#include "mixer_test_util.hpp"
#include "test_util.hpp"

namespace flashgdn::test {
namespace {

constexpr int32_t kH200Sms = 132;

TensorView shape_only(DType dt, std::initializer_list<int64_t> shape) {
  return make_tensor(nullptr, dt, shape);
}

// Whether a plan's printed text holds `what` (the whole text in the failure message).
template <class Plan, class Dims>
::testing::AssertionResult describes(const Plan& pl, const Dims& d, const std::string& what) {
  const std::string text = describe(pl, d);
  if (text.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no \"" << what << "\" in:\n" << text;
}

// ---- chunk_fwd --------------------------------------------------------------------------------------------------
struct ChunkShape {
  int64_t B = 1, T = 0, Hqk = 16, Hv = 16, K = 128, V = 128;
  std::vector<int64_t> seqlens;  // non-empty: varlen
  DType dt = DType::bf16;
};

struct ChunkCall {
  ChunkFwdParams p;
  ChunkDims d;
};

ChunkCall chunk_call(const ChunkShape& s) {
  ChunkCall c;
  const bool varlen = !s.seqlens.empty();
  int64_t T = s.T;
  if (varlen) {
    T = 0;
    for (int64_t l : s.seqlens) T += l;
  }
  c.p.q = shape_only(s.dt, {s.B, T, s.Hqk, s.K});
  c.p.k = c.p.q;
  c.p.v = shape_only(s.dt, {s.B, T, s.Hv, s.V});
  c.p.o = c.p.v;
  if (varlen) c.p.cu_seqlens = shape_only(DType::i32, {int64_t(s.seqlens.size()) + 1});
  c.d.B = s.B, c.d.T = T, c.d.N = varlen ? int64_t(s.seqlens.size()) : s.B;
  c.d.Hqk = s.Hqk, c.d.Hv = s.Hv, c.d.K = s.K, c.d.V = s.V, c.d.varlen = varlen;
  return c;
}

// A plan of `make_plan` (plan_chunk_fwd, plan_chunk_bwd) that must succeed.
template <class Plan, class Call, class Make>
Plan planned(Make make_plan, const Call& c, int32_t sms) {
  Plan pl;
  const Status st = make_plan(c.p, c.d, DeviceFacts{sms}, &pl);
  EXPECT_TRUE(st.ok()) << st.message();
  return pl;
}

ChunkFwdPlan chunk_plan(const ChunkCall& c, int32_t sms = kH200Sms) {
  return planned<ChunkFwdPlan>(plan_chunk_fwd, c, sms);
}

TEST(ChunkFwdPlan, StatePassByHeadDims) {
  for (auto kv : {std::pair<int64_t, int64_t>{128, 128}, {64, 128}, {128, 64}, {64, 64}}) {
    ChunkShape s;
    s.T = 4096, s.K = kv.first, s.V = kv.second;
    const ChunkFwdPlan pl = chunk_plan(chunk_call(s));
    EXPECT_EQ(pl.state_pass, kv.first == 128 && kv.second == 128 ? ChunkStatePass::wgmma : ChunkStatePass::mma_sync)
        << "K " << kv.first << " V " << kv.second;
  }
}

// The automatic segment count at the bench's prefill shapes on an H200 (132 SMs). bench/results (the segment-count
// sweep under logsigmoid and FlashQLA's gates): T = 32K is fastest at P = 8 with H = 16 and at P = 4 with
// Hqk = 16 / Hv = 32 (one wave of forward CTAs); T = 128K, H = 32 splits too; with N Hv >= SMs nothing splits.
TEST(ChunkFwdPlan, AutomaticSegmentSplit) {
  ChunkShape s;
  s.T = 32768, s.Hqk = s.Hv = 16;
  ChunkFwdPlan pl = chunk_plan(chunk_call(s));
  EXPECT_TRUE(pl.split);
  EXPECT_FALSE(pl.forced);
  EXPECT_EQ(pl.segments, 8) << pl.why;
  EXPECT_EQ(pl.seg_chunks, 64);
  EXPECT_EQ(pl.cap, 8);

  s.Hv = 32;
  pl = chunk_plan(chunk_call(s));
  EXPECT_EQ(pl.segments, 4) << pl.why;

  s.T = 131072, s.Hqk = s.Hv = 32;
  pl = chunk_plan(chunk_call(s));
  EXPECT_TRUE(pl.split);
  EXPECT_GT(pl.segments, 1);
  EXPECT_LE(pl.segments * s.Hv, 3 * kH200Sms) << "a few waves at most";

  s.B = 4, s.T = 8192, s.Hqk = 16, s.Hv = 64;  // N Hv = 256 chains fill 132 SMs
  pl = chunk_plan(chunk_call(s));
  EXPECT_FALSE(pl.split) << pl.why;
  EXPECT_NE(pl.why.find("fill"), std::string::npos) << pl.why;

  s.B = 1, s.T = 900, s.Hv = s.Hqk = 4;  // 15 chunks: too short to split
  pl = chunk_plan(chunk_call(s));
  EXPECT_FALSE(pl.split) << pl.why;

  // More SMs, more segments (the same shape); fewer SMs, fewer.
  s.T = 32768, s.Hqk = s.Hv = 16;
  EXPECT_GT(chunk_plan(chunk_call(s), 264).segments, chunk_plan(chunk_call(s), 66).segments);
}

// The override's edges: one chunk per sequence is never split, whatever is asked; a negative count is rejected,
// naming the option. `make_call(shape)` builds the op's call, `seg(call)` is its override field.
template <class Plan, class MakeCall, class Make, class Seg>
void expect_override_edges(MakeCall make_call, Make make_plan, Seg seg, const char* option) {
  ChunkShape one;
  one.T = 64;
  auto c = make_call(one);
  seg(c) = 4;
  EXPECT_FALSE(planned<Plan>(make_plan, c, kH200Sms).split);
  seg(c) = -2;
  Plan bad;
  const Status st = make_plan(c.p, c.d, DeviceFacts{kH200Sms}, &bad);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find(option), std::string::npos) << st.message();
}

TEST(ChunkFwdPlan, SegmentOverride) {
  ChunkShape s;
  s.T = 32768, s.Hqk = s.Hv = 16;
  ChunkCall c = chunk_call(s);
  c.p.exec.chunk_fwd_segments = 1;
  ChunkFwdPlan pl = chunk_plan(c);
  EXPECT_FALSE(pl.split);
  EXPECT_TRUE(pl.forced);
  c.p.exec.chunk_fwd_segments = 5;
  pl = chunk_plan(c);
  EXPECT_TRUE(pl.split);
  EXPECT_EQ(pl.seg_chunks, (512 + 4) / 5);
  EXPECT_EQ(pl.segments, 5);
  // A forced split where the heads already fill the GPU is still honoured (tests force the split on small shapes).
  ChunkShape big;
  big.B = 4, big.T = 2048, big.Hv = 64;
  c = chunk_call(big);
  c.p.exec.chunk_fwd_segments = 3;
  EXPECT_TRUE(chunk_plan(c).split);
  expect_override_edges<ChunkFwdPlan>(
      chunk_call, plan_chunk_fwd, [](ChunkCall& x) -> int32_t& { return x.p.exec.chunk_fwd_segments; },
      "exec.chunk_fwd_segments");
}

size_t up256(size_t x) {
  return (x + 255) / 256 * 256;
}

TEST(ChunkFwdPlan, WorkspaceLayout) {
  ChunkShape s;
  s.B = 2, s.T = 1000, s.Hqk = 2, s.Hv = 4, s.K = 64, s.V = 128;
  ChunkCall c = chunk_call(s);
  c.p.exec.chunk_fwd_segments = 1;
  const int64_t nch = (1000 + 63) / 64;
  ChunkFwdPlan pl = chunk_plan(c);
  EXPECT_EQ(pl.rec_slots, 2 * nch);
  EXPECT_EQ(pl.workspace_bytes, up256(size_t(2 * nch * 4 * cuda::kRecBytes)));
  c.p.exec.chunk_fwd_segments = 3;
  pl = chunk_plan(c);
  ASSERT_TRUE(pl.split);
  EXPECT_EQ(pl.ws_items, up256(size_t(2 * nch * 4 * cuda::kRecBytes)));
  EXPECT_EQ(pl.ws_seq_first, pl.ws_items + up256(size_t(pl.cap) * sizeof(cuda::ChunkWorkItem)));
  EXPECT_EQ(pl.ws_dec, pl.ws_seq_first + up256(2 * sizeof(int32_t)));
  EXPECT_EQ(pl.ws_mn, pl.ws_dec + up256(size_t(4 * pl.rec_slots) * sizeof(float)));  // [Hv, rec_slots] log decays
  EXPECT_EQ(pl.workspace_bytes, pl.ws_mn + size_t(pl.cap) * 4 * 64 * (64 + 128) * sizeof(float));
  EXPECT_TRUE(describes(pl, c.d, "decay table"));
}

// ---- the decay window of a segment summary (cuda/chunk_fwd/chunk_fwd.hpp, docs/chunk_fwd.md "Decay window"): the
// function the summary CTAs run on the device, here on the CPU ------------------------------------------------------
constexpr float kTau = cuda::kDecayWindowLogTau;
constexpr float kInf = cuda::kDecayUnbounded;

int64_t window(const std::vector<float>& d, int64_t a, int64_t b) {
  return cuda::decay_window_start(d.data(), a, b, kTau);
}

// The definition, one chunk at a time: the latest c with the fp32 sum d[b - 1] + ... + d[c] <= log tau, no chunk of
// [c, b) unbounded.
int64_t window_reference(const std::vector<float>& d, int64_t a, int64_t b) {
  float s = 0.f;
  for (int64_t c = b - 1; c >= a; --c) {
    if (d[size_t(c)] == kInf) return -1;
    s += d[size_t(c)];
    if (s <= kTau) return c;
  }
  return -1;
}

TEST(ChunkFwdDecayWindow, FastDecayTakesTheLastChunk) {
  // g ~ U(-1, 0): a chunk decays by ~e^-32, below tau = e^-21 on its own
  const std::vector<float> d(64, -32.f);
  EXPECT_EQ(window(d, 0, 64), 63);
  EXPECT_EQ(window(d, 10, 11), 10);
  EXPECT_EQ(window(d, 5, 5), -1);  // an empty segment has no window
}

TEST(ChunkFwdDecayWindow, NoDecayKeepsTheFullSummary) {
  EXPECT_EQ(window(std::vector<float>(100, 0.f), 0, 100), -1);  // g = 0 heads
  // FlashQLA's gates, logsigmoid(N(0, 1)) / 16: ~-3.2 per chunk, seven chunks reach e^-21
  const std::vector<float> d(64, -3.2f);
  EXPECT_EQ(window(d, 0, 64), 64 - 7);
}

TEST(ChunkFwdDecayWindow, ThresholdIsInclusiveAndStrict) {
  // three chunks of a segment summing to just above log tau: no window (the full summary); just below: all three
  EXPECT_EQ(window({-7.f, -7.f, -6.99f}, 0, 3), -1);
  EXPECT_EQ(window({-7.f, -7.f, -7.01f}, 0, 3), 0);
  EXPECT_EQ(window({-7.f, -7.f, -7.f}, 0, 3), 0);  // e^Gamma = tau exactly qualifies
  EXPECT_EQ(window({-21.f}, 0, 1), 0);
  EXPECT_EQ(window({std::nextafter(-21.f, 0.f)}, 0, 1), -1);
  // one chunk just above, two below: the window is the last two chunks
  EXPECT_EQ(window({-30.f, -20.99f}, 0, 2), 0);
  EXPECT_EQ(window({-30.f, -20.99f, -21.01f}, 0, 3), 2);
}

TEST(ChunkFwdDecayWindow, UnboundedChunksStopTheWindow) {
  // a chunk with a beta outside [0, 2] (or keys without l2norm) inside the would-be window: the full summary
  EXPECT_EQ(window({-30.f, kInf, -10.f}, 0, 3), -1);
  EXPECT_EQ(window({-30.f, -30.f, kInf}, 0, 3), -1);
  // before the window it does not matter: the window never reaches it
  EXPECT_EQ(window({kInf, -10.f, -30.f}, 0, 3), 2);
  EXPECT_EQ(window({kInf, -11.f, -11.f}, 0, 3), 1);
  // NaN gates: no window; -inf (a gate of -inf) drops everything before it
  EXPECT_EQ(window({-30.f, std::nanf("")}, 0, 2), -1);
  EXPECT_EQ(window({-1.f, -std::numeric_limits<float>::infinity(), -1.f}, 0, 3), 1);
}

TEST(ChunkFwdDecayWindow, PositiveGatesAreSummed) {
  // g > 0 is legal data: the criterion is on the sum over the window, which need not fall monotonically
  EXPECT_EQ(window({-40.f, 5.f, -25.f}, 0, 3), 2);
  EXPECT_EQ(window({-40.f, 5.f, -20.f}, 0, 3), 0);
  EXPECT_EQ(window({-10.f, 30.f, -20.f}, 0, 3), -1);
  EXPECT_EQ(window({-40.f, 30.f, -20.f}, 0, 3), 0);  // the whole product decays by e^-30
}

// A random decay table of 1 .. 40 chunks (~0.1 .. 10 of decay per chunk, some unbounded or positive entries) and a
// range [a, b) inside it (a > 0: a segment of a sequence).
struct RandomTable {
  std::vector<float> d;
  int64_t a = 0, b = 0;
};
RandomTable random_table(Rng& rng) {
  RandomTable t;
  const int64_t n = 1 + int64_t(rng.uniform() * 40);
  t.d.resize(static_cast<size_t>(n));
  const double scale = std::pow(10.0, 2.0 * rng.uniform() - 1.0);
  for (auto& x : t.d) {
    x = float(-scale * rng.uniform());
    if (rng.uniform() < 0.03) x = kInf;
    if (rng.uniform() < 0.03) x = float(2.0 * rng.uniform());
  }
  t.a = int64_t(rng.uniform() * double(n)), t.b = t.a + int64_t(rng.uniform() * double(n - t.a + 1));
  return t;
}

// The eight-at-a-time loads give the reference's answer at every block boundary, for random segments inside a
// longer table.
TEST(ChunkFwdDecayWindow, MatchesTheReference) {
  Rng rng(17);
  for (int trial = 0; trial < 4000; ++trial) {
    const RandomTable t = random_table(rng);
    EXPECT_EQ(window(t.d, t.a, t.b), window_reference(t.d, t.a, t.b))
        << "trial " << trial << " a " << t.a << " b " << t.b;
  }
}

// The reverse chain's window (decay_window_end, docs/chunk_bwd.md "Decay window of the reverse chain"): the earliest
// e in [a, b) with d[a] + ... + d[e] <= log tau, against the definition one chunk at a time, and the mirror image of
// decay_window_start.
int64_t window_end_reference(const std::vector<float>& d, int64_t a, int64_t b) {
  float s = 0.f;
  for (int64_t e = a; e < b; ++e) {
    if (d[size_t(e)] == kInf) return -1;
    s += d[size_t(e)];
    if (s <= kTau) return e;
  }
  return -1;
}

TEST(ChunkBwdDecayWindow, EarliestEndOfTheWindow) {
  const auto end = [](const std::vector<float>& d, int64_t a, int64_t b) {
    return cuda::decay_window_end(d.data(), a, b, kTau);
  };
  EXPECT_EQ(end(std::vector<float>(64, -32.f), 16, 32), 16);  // g ~ U(-1, 0): one chunk
  EXPECT_EQ(end(std::vector<float>(64, -3.2f), 16, 32), 22);  // ~-3.2 a chunk: seven chunks
  EXPECT_EQ(end(std::vector<float>(64, 0.f), 0, 64), -1);     // g = 0
  EXPECT_EQ(end({-7.f, -7.f, -7.f}, 0, 3), 2);                // e^Gamma = tau exactly qualifies
  EXPECT_EQ(end({-7.f, -7.f, -6.99f}, 0, 3), -1);
  EXPECT_EQ(end({-10.f, kInf, -30.f}, 0, 3), -1);  // an unbounded chunk before the end: none
  EXPECT_EQ(end({-30.f, kInf}, 0, 2), 0);          // after it: the window never reaches it
  EXPECT_EQ(end({-40.f, 30.f, -20.f}, 1, 3), -1);  // the sum from a, not from 0
  EXPECT_EQ(end({-1.f, std::nanf(""), -30.f}, 0, 3), -1);
  EXPECT_EQ(end({-5.f}, 1, 1), -1);  // an empty range
  Rng rng(23);
  for (int trial = 0; trial < 4000; ++trial) {
    const RandomTable t = random_table(rng);
    const int64_t n = int64_t(t.d.size());
    EXPECT_EQ(end(t.d, t.a, t.b), window_end_reference(t.d, t.a, t.b)) << "trial " << trial << " a " << t.a;
    std::vector<float> r(t.d.rbegin(), t.d.rend());  // the mirror: e = n - 1 - (decay_window_start, reversed table)
    const int64_t s = window(r, n - t.b, n - t.a);
    EXPECT_EQ(end(t.d, t.a, t.b), s < 0 ? -1 : n - 1 - s) << "trial " << trial;
  }
}

// The varlen work-item bound covers every sequence's segments, for lengths around the chunk and segment sizes.
// Varlen: the plan's item bound covers every segment the device's list builds (max(1, ceil(chunks / Ls)) per
// sequence: an empty or short sequence takes one item). `plan_of(shape, P)` is the op's plan with P forced.
template <class PlanOf>
void expect_item_bound(uint64_t seed, PlanOf plan_of) {
  Rng rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    ChunkShape s;
    s.Hqk = s.Hv = 2;
    const int n = 1 + int(rng.uniform() * 12);
    for (int i = 0; i < n; ++i) s.seqlens.push_back(trial % 5 == 0 && i % 3 == 1 ? 0 : int64_t(rng.uniform() * 3000));
    const auto pl = plan_of(s, 2 + trial % 9);
    if (!pl.split) continue;
    int64_t items = 0;
    for (int64_t l : s.seqlens) items += std::max<int64_t>(1, ((l + 63) / 64 + pl.seg_chunks - 1) / pl.seg_chunks);
    EXPECT_LE(items, pl.cap) << "trial " << trial;
  }
}

TEST(ChunkFwdPlan, VarlenItemBoundCoversEverySegment) {
  expect_item_bound(5, [](const ChunkShape& s, int32_t P) {
    ChunkCall c = chunk_call(s);
    c.p.exec.chunk_fwd_segments = P;
    return chunk_plan(c);
  });
}

// The bound the windows rest on (gdn-math §1.3, §6.1), on the fp64 CPU recurrence: S(b) - N(c -> b) =
// Phi(c -> b) S(c) has norm <= e^Gamma ||S(c)|| with unit keys and beta in [0, 2]; with betas past 2 (or keys longer
// than 1) it does not hold, which is why such chunks end a window.
struct SplitStates {
  double dropped = 0, bound = 0;  // ||S(b) - N(c -> b)||_F, e^Gamma(c -> b) ||S(c)||_F
};

SplitStates split_states(const GdnInputs& in, bool l2norm, int64_t c, int64_t b) {
  const int64_t H = in.v.shape[2], K = in.k.shape[3], V = in.v.shape[3];
  // the state after tokens [t0, t1), from h0 (or zero)
  const auto state = [&](int64_t t0, int64_t t1, bool from_h0) {
    const auto slice = [&](const HostTensor& x) {
      std::vector<int64_t> shp = x.shape;
      shp[1] = t1 - t0;
      HostTensor y(DType::f64, shp);
      const int64_t row = x.numel() / x.shape[1];
      for (int64_t i = 0; i < y.numel(); ++i) y.set(i, x.get(t0 * row + i));
      return y;
    };
    HostTensor q = slice(in.q), k = slice(in.k), v = slice(in.v), g = slice(in.g), be = slice(in.beta);
    HostTensor o(DType::f64, v.shape), hT(DType::f64, {1, H, K, V}), h0 = in.h0.cast(DType::f64);
    ChunkFwdParams p;
    p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = be.view(), p.o = o.view();
    p.final_state = hT.view();
    if (from_h0) p.initial_state = h0.view();
    p.use_qk_l2norm_in_kernel = l2norm;
    p.exec.cpu_fp64 = true;
    p.exec.cpu_threads = 1;
    const Status st = chunk_fwd(p);
    EXPECT_TRUE(st.ok()) << st.message();
    return hT;
  };
  const HostTensor Sc = state(0, c, true), Sb = state(0, b, true), N = state(c, b, false);
  double gam = 0, d2 = 0, s2 = 0;
  for (int64_t t = c; t < b; ++t) gam += in.g.get(t * H);  // head 0
  for (int64_t i = 0; i < K * V; ++i) {                    // head 0
    d2 += (Sb.get(i) - N.get(i)) * (Sb.get(i) - N.get(i));
    s2 += Sc.get(i) * Sc.get(i);
  }
  return SplitStates{std::sqrt(d2), std::exp(gam) * std::sqrt(s2)};
}

TEST(ChunkFwdDecayWindow, DroppedStateWithinTheBound) {
  GdnCase gc;
  gc.B = 1, gc.T = 256, gc.Hqk = 1, gc.Hv = 1, gc.K = 32, gc.V = 16, gc.dtype = DType::f64, gc.g_scale = 0.2;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    gc.seed = seed;
    GdnInputs in = make_inputs(gc);  // raw keys (l2norm in the op), beta = sigmoid(N(0, 1))
    SplitStates s = split_states(in, true, 64, 256);
    EXPECT_LE(s.dropped, s.bound * (1 + 1e-9)) << "seed " << seed;
    EXPECT_GT(s.dropped, 1e-3 * s.bound) << "seed " << seed;    // the bound is not vacuous here
    for (int64_t t = 64; t < 256; t += 5) in.beta.set(t, 2.0);  // beta = 2 allowed
    s = split_states(in, true, 64, 256);
    EXPECT_LE(s.dropped, s.bound * (1 + 1e-9)) << "seed " << seed << ", beta = 2";
  }
  // beta = 3 on the window's tokens (|1 - beta| = 2 along k): the dropped state grows past the bound
  gc.seed = 9;
  GdnInputs in = make_inputs(gc);
  for (int64_t t = 64; t < 256; ++t) in.beta.set(t, 3.0);
  SplitStates s = split_states(in, true, 64, 256);
  EXPECT_GT(s.dropped, s.bound) << "beta = 3: the bound must fail";
  // keys of norm 2 without l2norm (beta |k|^2 up to 4): the same
  gc.l2norm = false;
  in = make_inputs(gc);  // unit keys
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, 2 * in.k.get(i));
  for (int64_t t = 0; t < 256; ++t) in.beta.set(t, 1.0);
  s = split_states(in, false, 64, 256);
  EXPECT_GT(s.dropped, s.bound) << "|k| = 2: the bound must fail";
}

TEST(ChunkFwdPlan, UnsupportedShapesNamed) {
  ChunkShape s;
  s.T = 100;
  ChunkCall c = chunk_call(s);
  ChunkFwdPlan pl;
  c.p.chunk_size = 32;
  Status st = plan_chunk_fwd(c.p, c.d, DeviceFacts{kH200Sms}, &pl);
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("chunk_size"), std::string::npos) << st.message();
  s.dt = DType::f32;
  c = chunk_call(s);
  st = plan_chunk_fwd(c.p, c.d, DeviceFacts{kH200Sms}, &pl);
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("bf16 or f16"), std::string::npos) << st.message();
  s.dt = DType::bf16, s.K = 256;
  c = chunk_call(s);
  st = plan_chunk_fwd(c.p, c.d, DeviceFacts{kH200Sms}, &pl);
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("K=256"), std::string::npos) << st.message();
}

// ---- recurrent --------------------------------------------------------------------------------------------------
struct RecShapeSpec {
  int64_t N = 1, T = 1, Hqk = 16, Hv = 32, K = 128, V = 128;
  bool varlen = false, pool = true, inter = false, commit = true;
  DType pool_dt = DType::f32, act_dt = DType::bf16;
  StateLayout layout = StateLayout::k_major;
  int64_t T_max = 0;  // > 0: 2-D state_indices
  RecurrentKernel force = RecurrentKernel::auto_;
};

struct RecCall {
  RecurrentParams p;
  RecurrentDims d;
};

RecCall rec_call(const RecShapeSpec& s) {
  RecCall c;
  const int64_t B = s.varlen ? 1 : s.N, T = s.varlen ? s.N * s.T : s.T;
  c.p.q = shape_only(s.act_dt, {B, T, s.Hqk, s.K});
  c.p.k = c.p.q;
  c.p.v = shape_only(s.act_dt, {B, T, s.Hv, s.V});
  c.p.o = c.p.v;
  if (s.varlen) c.p.cu_seqlens = shape_only(DType::i32, {s.N + 1});
  if (s.pool) {
    c.p.state_pool = shape_only(s.pool_dt, {s.N + 1, s.Hv, s.K, s.V});
    c.p.state_indices = s.T_max > 0 ? shape_only(DType::i32, {s.N, s.T_max}) : shape_only(DType::i32, {s.N});
  }
  if (s.inter) c.p.intermediate_states = shape_only(DType::bf16, {s.N, s.T, s.Hv, s.K, s.V});
  c.p.commit = s.commit;
  c.p.state_layout = s.layout;
  c.p.exec.recurrent_kernel = s.force;
  c.d.B = B, c.d.T = T, c.d.N = s.N, c.d.Hqk = s.Hqk, c.d.Hv = s.Hv, c.d.K = s.K, c.d.V = s.V;
  c.d.varlen = s.varlen;
  return c;
}

RecurrentPlan rec_plan(const RecShapeSpec& s, int32_t sms = kH200Sms) {
  const RecCall c = rec_call(s);
  RecurrentPlan pl;
  const Status st = plan_recurrent(c.p, c.d, DeviceFacts{sms}, &pl);
  EXPECT_TRUE(st.ok()) << st.message();
  return pl;
}

// The bench's decode cases (Hqk = 16, Hv = 32, K = V = 128) on an H200.
TEST(RecurrentPlan, SingleTokenDecode) {
  RecShapeSpec s;
  RecurrentPlan pl = rec_plan(s);  // N = 1: 32 heads, spread thin
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
  EXPECT_EQ(pl.bv, 16);
  EXPECT_TRUE(pl.single_token);
  s.N = 8;  // 256 heads x 4 tiles of 32 >= 4 x 132, x 2 tiles of 64 < 8 x 132
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
  EXPECT_EQ(pl.bv, 32);
  s.N = 32;  // 1024 heads x 2 tiles of 64 >= 8 x 132
  EXPECT_EQ(rec_plan(s).bv, 64);
  s.N = 256;  // fp32 pool, a large batch: 64-column tiles, never direct_pipe (slower on fp32 pools)
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
  EXPECT_EQ(pl.bv, 64);
  s.pool_dt = DType::bf16;  // 16-bit pool, a large batch: direct_pipe, 128 columns
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct_pipe);
  EXPECT_EQ(pl.bv, 128);
  s.layout = StateLayout::v_major;  // V-major: the direct kernel's 64 columns
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
  EXPECT_EQ(pl.bv, 64);
  s.layout = StateLayout::k_major, s.N = 32;  // below the direct_pipe batch threshold: direct
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
  s.N = 256, s.inter = true;  // intermediate states: the direct kernel's packed 128 columns
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
  EXPECT_EQ(pl.bv, 128);
  s.inter = false, s.varlen = true;  // varlen rows of one token: direct (T is the total token count)
  pl = rec_plan(s);
  EXPECT_TRUE(pl.single_token);
  EXPECT_EQ(pl.kernel, RecurrentKernel::direct);
}

TEST(RecurrentPlan, MultiTokenAndVerify) {
  RecShapeSpec s;
  s.T = 12, s.N = 32;
  RecurrentPlan pl = rec_plan(s);  // final state only, 16-bit activations: the tensor-core WY form, 64 columns
  EXPECT_EQ(pl.kernel, RecurrentKernel::wy_mma);
  EXPECT_FALSE(pl.single_token);
  EXPECT_EQ(pl.bv, 64);
  s.N = 1, s.K = 64;
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::wy_mma);
  s.act_dt = DType::f32;  // fp32 activations: the CUDA-core wy kernel
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::wy);
  EXPECT_EQ(pl.bv, 32);  // K = 64: the wy kernel's 32 columns only
  s.K = 128;             // a small batch: 16 columns (K = 128)
  EXPECT_EQ(rec_plan(s).bv, 16);
  s.N = 32;
  EXPECT_EQ(rec_plan(s).bv, 32);
  s.act_dt = DType::bf16, s.commit = false, s.T_max = 12;  // 2-D slots without commit: final state only
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::wy_mma);
  s.commit = true, s.T_max = 0, s.layout = StateLayout::v_major;
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::persistent);
  s.layout = StateLayout::k_major, s.pool = false;
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::persistent);
  s.pool = true, s.inter = true, s.commit = false, s.N = 1;  // verify, N = 1: per-token stores, still wy
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::wy);
  EXPECT_EQ(rec_plan(s).bv, 16);
  s.N = 256;  // verify, a large batch: wy, 64-column tiles for its bf16 per-token states (whole 128-byte lines)
  pl = rec_plan(s);
  EXPECT_EQ(pl.kernel, RecurrentKernel::wy);
  EXPECT_EQ(pl.bv, 64);
  s.N = 7;  // 224 heads x 2 tiles of 64 >= 3 x 132 (a wave of 3 CTAs per SM)
  EXPECT_EQ(rec_plan(s).bv, 64);
  s.N = 6;  // 192 x 2 < 3 x 132: the persistent rule's 32
  EXPECT_EQ(rec_plan(s).bv, 32);
  s.N = 256, s.K = 64;  // K = 64: 32 columns only
  EXPECT_EQ(rec_plan(s).bv, 32);
  s.K = 128, s.inter = false, s.commit = true, s.T_max = 12, s.N = 1;  // protocol A, small: wy
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::wy);
  s.N = 256;  // protocol A on an fp32 pool: fp32 per-token stores, 32 columns (128-byte rows already)
  EXPECT_EQ(rec_plan(s).bv, 32);
  s.pool_dt = DType::bf16;  // on a bf16 pool: 16-bit stores, 64 columns
  EXPECT_EQ(rec_plan(s).bv, 64);
  s.commit = false;  // 2-D slots without commit: final state only (wy_mma)
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::wy_mma);
  s.commit = true, s.pool_dt = DType::f32, s.N = 1;
  s.layout = StateLayout::v_major;  // protocol A on a V-major pool: persistent
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::persistent);
}

TEST(RecurrentPlan, OverridesHonouredOrRejected) {
  RecShapeSpec s;
  s.N = 256, s.pool_dt = DType::bf16;
  for (RecurrentKernel k : {RecurrentKernel::persistent, RecurrentKernel::direct, RecurrentKernel::direct_pipe,
                            RecurrentKernel::wy, RecurrentKernel::wy_mma}) {
    s.force = k;
    const RecurrentPlan pl = rec_plan(s);
    EXPECT_EQ(pl.kernel, k);
    EXPECT_TRUE(pl.forced);
  }
  // A forced kernel the shape does not fit: unsupported, naming the override and what the kernel takes.
  const auto rejected = [](const RecShapeSpec& x, const char* needle) {
    const RecCall c = rec_call(x);
    RecurrentPlan pl;
    const Status st = plan_recurrent(c.p, c.d, DeviceFacts{kH200Sms}, &pl);
    EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
    EXPECT_NE(st.message().find("exec.recurrent_kernel"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  s.force = RecurrentKernel::direct_pipe;
  s.pool_dt = DType::f32;
  rejected(s, "an f32 pool");
  s.pool_dt = DType::bf16, s.T = 2;
  rejected(s, "T = 2");
  s.T = 1, s.layout = StateLayout::v_major;
  rejected(s, "V-major");
  s.force = RecurrentKernel::wy;
  rejected(s, "V-major pool");
  s.force = RecurrentKernel::wy_mma;
  rejected(s, "V-major pool");
  s.layout = StateLayout::k_major, s.pool = false;
  rejected(s, "no pool");
  s.force = RecurrentKernel::wy;
  rejected(s, "no pool");
  s.force = RecurrentKernel::wy_mma, s.pool = true, s.inter = true, s.commit = false;
  rejected(s, "intermediate_states");
  s.inter = false, s.commit = true, s.T_max = 4;
  rejected(s, "2-D state_indices with commit");
  s.T_max = 0, s.act_dt = DType::f32;
  rejected(s, "q float32");
  s.act_dt = DType::bf16;
  // The persistent and direct kernels take every call.
  s.force = RecurrentKernel::persistent;
  EXPECT_EQ(rec_plan(s).kernel, RecurrentKernel::persistent);
  s.force = RecurrentKernel::direct, s.T = 5;
  EXPECT_EQ(rec_plan(s).bv, 32) << "multi-token direct tiles are at most 32 columns";
  // Outside the enum: invalid.
  RecCall c = rec_call(s);
  c.p.exec.recurrent_kernel = static_cast<RecurrentKernel>(9);
  RecurrentPlan pl;
  EXPECT_EQ(plan_recurrent(c.p, c.d, DeviceFacts{kH200Sms}, &pl).code(), StatusCode::invalid_argument);
}

TEST(RecurrentPlan, KernelNames) {
  for (RecurrentKernel k : {RecurrentKernel::auto_, RecurrentKernel::persistent, RecurrentKernel::direct,
                            RecurrentKernel::direct_pipe, RecurrentKernel::wy, RecurrentKernel::wy_mma}) {
    RecurrentKernel back = RecurrentKernel::auto_;
    EXPECT_TRUE(recurrent_kernel_from_name(recurrent_kernel_name(k), &back)) << recurrent_kernel_name(k);
    EXPECT_EQ(back, k);
  }
  RecurrentKernel x = RecurrentKernel::wy;
  EXPECT_FALSE(recurrent_kernel_from_name("wy_tc", &x));
  EXPECT_FALSE(recurrent_kernel_from_name(nullptr, &x));
  EXPECT_EQ(x, RecurrentKernel::wy);
}

TEST(RecurrentPlan, UnsupportedHeadDims) {
  RecShapeSpec s;
  s.K = 96;
  const RecCall c = rec_call(s);
  RecurrentPlan pl;
  const Status st = plan_recurrent(c.p, c.d, DeviceFacts{kH200Sms}, &pl);
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("K = 96"), std::string::npos) << st.message();
}

// ---- mixer_decode -----------------------------------------------------------------------------------------------
MixerDims mixer_dims(int64_t Hqk, int64_t Hv, int64_t N) {
  MixerDims d;
  d.N = N, d.T = 1, d.Hqk = Hqk, d.Hv = Hv, d.K = 128, d.V = 128, d.Kc = 4, d.C = 2 * Hqk * 128 + Hv * 128;
  return d;
}

TEST(PlanMixerDecode, SplitByClusterAndBatch) {
  MixerDecodeParams p;
  p.state_layout = StateLayout::v_major;  // the clustered kernel at every batch
  // (value heads per key head, N) -> split, Hqk = 16 on 132 SMs: group * split <= 8; halves once N Hv 2 >= 2 * 4 *
  // 132 = 1056 half-head CTAs, else one CTA per head.
  struct Want {
    int64_t group, N;
    int32_t split;
  };
  const std::vector<Want> want = {{1, 1, 1},   {1, 32, 1}, {1, 33, 2},  {2, 1, 1}, {2, 8, 1},   {2, 16, 1},
                                  {2, 17, 2},  {2, 64, 2}, {2, 256, 2}, {3, 1, 1}, {3, 256, 2}, {4, 1, 1},
                                  {4, 256, 2}, {5, 1, 1},  {5, 256, 1}, {8, 1, 1}, {8, 256, 1}};
  for (const Want& w : want) {
    MixerDecodePlan pl;
    const MixerDims d = mixer_dims(16, 16 * w.group, w.N);
    ASSERT_TRUE(plan_mixer_decode(p, d, DeviceFacts{kH200Sms}, &pl).ok());
    EXPECT_EQ(pl.split, w.split) << "group " << w.group << " N " << w.N << ": " << describe(pl, d);
    EXPECT_FALSE(pl.forced);
    EXPECT_LE(w.group * pl.split, kMixerMaxCluster);
  }
  MixerDecodePlan pl;  // fewer SMs: the same batch is large sooner
  ASSERT_TRUE(plan_mixer_decode(p, mixer_dims(16, 32, 8), DeviceFacts{16}, &pl).ok());
  EXPECT_EQ(pl.split, 2) << describe(pl, mixer_dims(16, 32, 8));
}

TEST(PlanMixerDecode, ForcedSplitIsHonouredOrRejected) {
  MixerDecodeParams p;
  const MixerDims d = mixer_dims(16, 32, 256);  // Qwen3-Next: 2 value heads per key head
  for (int32_t s : {1, 2, 4}) {
    p.exec.mixer_split = s;
    MixerDecodePlan pl;
    ASSERT_TRUE(plan_mixer_decode(p, d, DeviceFacts{kH200Sms}, &pl).ok());
    EXPECT_EQ(pl.split, s);
    EXPECT_TRUE(pl.forced);
    EXPECT_TRUE(describes(pl, d, "exec.mixer_split = " + std::to_string(s)));
  }
  MixerDecodePlan pl;
  for (int32_t s : {-1, 3, 8}) {
    p.exec.mixer_split = s;
    const Status st = plan_mixer_decode(p, d, DeviceFacts{kH200Sms}, &pl);
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << s;
    EXPECT_NE(st.message().find("exec.mixer_split"), std::string::npos) << st.message();
  }
  p.exec.mixer_split = 4;  // 4 value heads per key head x 4 = 16 CTAs: more than one portable cluster
  const Status st = plan_mixer_decode(p, mixer_dims(8, 32, 1), DeviceFacts{kH200Sms}, &pl);
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("Hv / Hqk = 4, split = 4"), std::string::npos) << st.message();
}

// The pipe kernel: single-token rows on a K-major bf16 or fp32 pool once N Hv >= the SM count; the clustered kernel
// for everything it cannot take; exec.mixer_kernel forces either, and a forced pipe on a call it cannot take is
// rejected with the requirement.
TEST(PlanMixerDecode, PipeForLargeSingleTokenBatches) {
  MixerDecodeParams p;
  p.state_pool.dtype = DType::bf16;
  MixerDecodePlan pl;
  for (int64_t N : {int64_t(1), int64_t(4), int64_t(5), int64_t(256)}) {  // 132 / 32 = 4.1
    ASSERT_TRUE(plan_mixer_decode(p, mixer_dims(16, 32, N), DeviceFacts{kH200Sms}, &pl).ok());
    EXPECT_EQ(pl.pipe, N >= 5) << N << ": " << describe(pl, mixer_dims(16, 32, N));
    EXPECT_EQ(describe(pl, mixer_dims(16, 32, N)).find("pipe kernel") != std::string::npos, N >= 5);
  }
  MixerDims d = mixer_dims(16, 32, 256);
  const auto misfit = [&](MixerDecodeParams q, const MixerDims& dd, const char* needs) {
    MixerDecodePlan x;
    ASSERT_TRUE(plan_mixer_decode(q, dd, DeviceFacts{kH200Sms}, &x).ok());
    EXPECT_FALSE(x.pipe) << needs;
    q.exec.mixer_kernel = 2;
    const Status st = plan_mixer_decode(q, dd, DeviceFacts{kH200Sms}, &x);
    EXPECT_EQ(st.code(), StatusCode::unsupported) << needs;
    EXPECT_NE(st.message().find(needs), std::string::npos) << st.message();
  };
  MixerDecodeParams q = p;
  q.state_pool.dtype = DType::f16;
  misfit(q, d, "a bf16 or fp32 state pool");
  q = p, q.state_pool.dtype = DType::f32;  // fp32 pools too
  ASSERT_TRUE(plan_mixer_decode(q, d, DeviceFacts{kH200Sms}, &pl).ok());
  EXPECT_TRUE(pl.pipe) << describe(pl, d);
  q = p, q.state_layout = StateLayout::v_major;
  misfit(q, d, "a K-major state pool");
  q = p, q.state_indices.ndim = 2, q.state_indices.data = &pl;  // defined, 2-D (the plan reads no element)
  misfit(q, d, "1-D state_indices");
  q = p, q.intermediate_states.ndim = 5, q.intermediate_states.data = &pl;
  misfit(q, d, "no intermediate states");
  MixerDims t = d;
  t.T = 4;
  misfit(p, t, "one token per row");
  t = d, t.Kc = 5;
  misfit(p, t, "Kc <= 4");
  q = p, q.exec.mixer_kernel = 1;  // the clustered kernel forced
  ASSERT_TRUE(plan_mixer_decode(q, d, DeviceFacts{kH200Sms}, &pl).ok());
  EXPECT_FALSE(pl.pipe);
  EXPECT_TRUE(pl.forced);
  q = p, q.exec.mixer_kernel = 2;  // the pipe forced at N = 1
  ASSERT_TRUE(plan_mixer_decode(q, mixer_dims(16, 32, 1), DeviceFacts{kH200Sms}, &pl).ok());
  EXPECT_TRUE(pl.pipe && pl.forced);
  q.exec.mixer_split = 2;
  EXPECT_EQ(plan_mixer_decode(q, d, DeviceFacts{kH200Sms}, &pl).code(), StatusCode::invalid_argument);
  q = p, q.exec.mixer_split = 2;  // a forced split is the clustered kernel's
  ASSERT_TRUE(plan_mixer_decode(q, d, DeviceFacts{kH200Sms}, &pl).ok());
  EXPECT_FALSE(pl.pipe);
  EXPECT_EQ(pl.split, 2);
  for (int32_t k : {-1, 3}) {
    q = p, q.exec.mixer_kernel = k;
    const Status st = plan_mixer_decode(q, d, DeviceFacts{kH200Sms}, &pl);
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << k;
    EXPECT_NE(st.message().find("exec.mixer_kernel"), std::string::npos) << st.message();
  }
}

// ---- the printable plans through the public API (host tensors: validated as by the call) ------------------------
// ---- chunk_bwd --------------------------------------------------------------------------------------------------
struct BwdCall {
  ChunkBwdParams p;
  SeqDims d;
};

BwdCall bwd_call(const ChunkShape& s) {
  const ChunkCall f = chunk_call(s);
  BwdCall c;
  c.p.q = f.p.q, c.p.k = f.p.k, c.p.v = f.p.v, c.p.d_o = f.p.v;
  c.p.dq = f.p.q, c.p.dk = f.p.k, c.p.dv = f.p.v, c.p.cu_seqlens = f.p.cu_seqlens;
  c.d = f.d;
  return c;
}

ChunkBwdPlan bwd_plan(const BwdCall& c, int32_t sms = kH200Sms) {
  return planned<ChunkBwdPlan>(plan_chunk_bwd, c, sms);
}

// The chains run N Hv V / 32 CTAs at one per SM: the training shapes of issue 14 (Hv = 32, V = 128: 128 CTAs on
// 132 SMs; 4 x 64 heads: 1024) are not split, since a split adds summary CTAs to a machine already full; few heads on
// long sequences are, into more segments the more SMs sit idle.
TEST(ChunkBwdPlan, AutomaticSegmentSplit) {
  ChunkShape s;
  s.T = 32768, s.Hqk = 16, s.Hv = 32;
  ChunkBwdPlan pl = bwd_plan(bwd_call(s));
  EXPECT_FALSE(pl.split) << pl.why;
  EXPECT_NE(pl.why.find("P = 1 "), std::string::npos) << pl.why;
  s.B = 4, s.T = 8192, s.Hv = 64;
  pl = bwd_plan(bwd_call(s));
  EXPECT_FALSE(pl.split) << pl.why;
  EXPECT_NE(pl.why.find("fill"), std::string::npos) << pl.why;
  s.B = 1, s.T = 32768;

  s.Hqk = s.Hv = 4;  // 16 chain CTAs
  pl = bwd_plan(bwd_call(s));
  EXPECT_TRUE(pl.split) << pl.why;
  EXPECT_FALSE(pl.forced);
  EXPECT_GE(pl.segments, 4) << pl.why;
  EXPECT_EQ(pl.seg_chunks, (512 + pl.segments - 1) / pl.segments);
  EXPECT_EQ(pl.cap, pl.segments);
  EXPECT_NE(pl.why.find("cost model"), std::string::npos) << pl.why;

  s.T = 900;  // 15 chunks: too short to split
  EXPECT_FALSE(bwd_plan(bwd_call(s)).split);

  s.T = 32768, s.Hqk = s.Hv = 8;  // more SMs, more segments
  EXPECT_GT(bwd_plan(bwd_call(s), 264).segments, bwd_plan(bwd_call(s), 66).segments);
  // the H200 sweep's fastest P over both gate sets (plan.cpp, auto_bwd_segments): 8 / 8 / 4 at Hv = 4 / 8 / 16
  for (const auto [hv, P] : {std::pair{4, 8}, std::pair{8, 8}, std::pair{16, 4}}) {
    s.Hqk = s.Hv = hv;
    EXPECT_EQ(bwd_plan(bwd_call(s)).segments, P) << bwd_plan(bwd_call(s)).why;
  }
  // K = V = 64: half the CTAs of V = 128
  s.Hqk = s.Hv = 32, s.K = s.V = 64;  // 64 CTAs on 132 SMs
  pl = bwd_plan(bwd_call(s));
  EXPECT_TRUE(pl.split) << pl.why;
}

// exec.chunk_bwd_chains: 0 the plan's, 1 one after the other, 2 both at once as a CTA per chain, 3 both at once in
// one CTA (K = V = 128 only); the split then keeps one summary buffer per chain. The plan takes one CTA of both where
// the unsplit chains fit one wave (N Hv V / 32 <= SMs), else a CTA per chain.
TEST(ChunkBwdPlan, ChainsOverride) {
  ChunkShape s;
  s.T = 32768, s.Hqk = s.Hv = 4;  // split at P = 8
  BwdCall c = bwd_call(s);
  c.p.exec.chunk_bwd_chains = 1;
  ChunkBwdPlan pl = bwd_plan(c);
  EXPECT_EQ(pl.chains_concurrent, cuda::kChainsSerial);
  ASSERT_TRUE(pl.split) << pl.why;
  const size_t mn = size_t(pl.cap) * 4 * 128 * 256 * sizeof(float);
  EXPECT_EQ(pl.ws_mn_rev, pl.ws_mn);
  EXPECT_EQ(pl.split_bytes, pl.ws_mn + mn);
  for (const int32_t chains : {0, 2, 3}) {
    c.p.exec.chunk_bwd_chains = chains;
    pl = bwd_plan(c);
    // split: a CTA per chain unless forced
    EXPECT_EQ(pl.chains_concurrent, chains == 3 ? cuda::kChainsOneCta : cuda::kChainsTwoCtas) << chains;
    ASSERT_TRUE(pl.split) << pl.why;
    EXPECT_EQ(pl.ws_mn_rev, pl.ws_mn + up256(mn));
    EXPECT_EQ(pl.split_bytes, pl.ws_mn_rev + mn);
  }
  // unsplit: one CTA of both where N Hv V / 32 <= SMs (Hv = 32: 128 CTAs on 132 SMs), a CTA per chain past that
  ChunkShape u = s;
  u.Hqk = 16, u.Hv = 32;
  BwdCall cu = bwd_call(u);
  EXPECT_EQ(bwd_plan(cu).chains_concurrent, cuda::kChainsOneCta);
  // the fused pass follows one CTA of both chains (a programmatic dependent, its heads in the order their chains end)
  EXPECT_TRUE(bwd_plan(cu).fused_follows);
  EXPECT_TRUE(describes(bwd_plan(cu), cu.d, "launched as a programmatic dependent of the chains"));
  cu.p.exec.chunk_bwd_chains = 2;
  EXPECT_EQ(bwd_plan(cu).chains_concurrent, cuda::kChainsTwoCtas);
  EXPECT_FALSE(bwd_plan(cu).fused_follows);
  EXPECT_EQ(describe(bwd_plan(cu), cu.d).find("programmatic dependent"), std::string::npos);
  cu.p.exec.chunk_bwd_chains = 3, cu.p.exec.chunk_bwd_grads = 2;  // no fused pass: nothing follows
  EXPECT_FALSE(bwd_plan(cu).fused_follows);
  cu.p.exec.chunk_bwd_grads = 0;
  u.Hv = 64;  // 256 CTAs: a CTA per chain (with the backward's own state chain; by default S0 is chunk_fwd's and
              // the reverse chain runs alone: ChunkBwdPlan.StatesFromTheForward)
  BwdCall c64 = bwd_call(u);
  c64.p.exec.chunk_bwd_state = 1;
  EXPECT_EQ(bwd_plan(c64).chains_concurrent, cuda::kChainsTwoCtas);
  c.p.exec.chunk_bwd_chains = 4;
  ChunkBwdPlan bad;
  Status st = plan_chunk_bwd(c.p, c.d, DeviceFacts{kH200Sms}, &bad);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.message();
  EXPECT_NE(st.message().find("exec.chunk_bwd_chains: expected 0 (auto), 1"), std::string::npos) << st.message();
  s.K = s.V = 64;
  c = bwd_call(s);
  c.p.exec.chunk_bwd_chains = 2;
  st = plan_chunk_bwd(c.p, c.d, DeviceFacts{kH200Sms}, &bad);
  EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
  EXPECT_NE(st.message().find("need K = V = 128, got K=64 V=64"), std::string::npos) << st.message();
}

// exec.chunk_bwd_state: the chunk start states from chunk_fwd's passes (its own plan and split, the state pass
// storing S0 instead of o) by default where the fused pass runs, the backward's chains are unsplit and do not fit
// one wave (N Hv V / 32 > SMs); the chains then run one after the other, the state chain on its two-stage kernel
// (it runs only where a beta exceeds 1), the reverse chain on its one-stage kernel (two CTAs per SM). 1 keeps the
// state chain, 2 forces the forward's passes (unsupported without the fused pass, or with the chains split or forced
// at once); the text names it with the forward's plan.
TEST(ChunkBwdPlan, StatesFromTheForward) {
  ChunkShape s;
  s.B = 4, s.T = 8192, s.Hqk = 16, s.Hv = 64;  // 1024 chain CTAs
  BwdCall c = bwd_call(s);
  ChunkBwdPlan pl = bwd_plan(c);
  EXPECT_TRUE(pl.states_from_fwd);
  EXPECT_EQ(pl.chains_concurrent, cuda::kChainsSerial);
  EXPECT_EQ(pl.state_stages, 2);
  EXPECT_EQ(pl.dstate_stages, 1);
  EXPECT_GT(pl.fwd.workspace_bytes, 0u);
  EXPECT_EQ(pl.fwd.rec_slots, 4 * 128);
  EXPECT_TRUE(describes(pl, c.d, "chunk start states (S0): chunk_fwd's passes, the state pass storing S0"));
  EXPECT_TRUE(describes(pl, c.d, "value head), and chunk_bwd's A (its bf16 split) and rows\n"));
  c.p.exec.chunk_bwd_state = 1;
  pl = bwd_plan(c);
  EXPECT_FALSE(pl.states_from_fwd);
  EXPECT_EQ(pl.chains_concurrent, cuda::kChainsTwoCtas);
  EXPECT_EQ(describe(pl, c.d).find("chunk start states"), std::string::npos);
  // one wave (T = 32K Hv = 32: 128 chain CTAs): one CTA of both chains, unless forced
  ChunkShape w;
  w.T = 32768, w.Hqk = 16, w.Hv = 32;
  BwdCall cw = bwd_call(w);
  EXPECT_FALSE(bwd_plan(cw).states_from_fwd);
  EXPECT_EQ(bwd_plan(cw).chains_concurrent, cuda::kChainsOneCta);
  cw.p.exec.chunk_bwd_state = 2;
  pl = bwd_plan(cw);
  EXPECT_TRUE(pl.states_from_fwd);
  EXPECT_EQ(pl.chains_concurrent, cuda::kChainsSerial);
  EXPECT_TRUE(pl.fused_follows);            // the fused pass follows the reverse chain alone
  EXPECT_TRUE(pl.fwd.split) << pl.fwd.why;  // the forward splits its 32 chains (P = 4)
  // what the forward's passes cannot take: a split of the backward's chains, the chains forced at once, no fused pass
  ChunkBwdPlan bad;
  const auto refused = [&](const BwdCall& x, const char* what) {
    const Status st = plan_chunk_bwd(x.p, x.d, DeviceFacts{kH200Sms}, &bad);
    EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  BwdCall x = cw;
  x.p.exec.chunk_bwd_segments = 4;
  refused(x, "exec.chunk_bwd_state = 2: the chunk start states from chunk_fwd's state pass need");
  x = cw, x.p.exec.chunk_bwd_chains = 3;
  refused(x, "exec.chunk_bwd_chains >= 2");
  x = cw, x.p.exec.chunk_bwd_grads = 2;
  refused(x, "not fused");
  // without the fused pass nothing changes by default
  x = c, x.p.exec.chunk_bwd_state = 0, x.p.exec.chunk_bwd_grads = 2;
  EXPECT_FALSE(bwd_plan(x).states_from_fwd);
  for (const int32_t v : {-1, 3}) {
    x = cw, x.p.exec.chunk_bwd_state = v;
    const Status st = plan_chunk_bwd(x.p, x.d, DeviceFacts{kH200Sms}, &bad);
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.message();
    EXPECT_NE(st.message().find("exec.chunk_bwd_state: expected 0 (auto), 1"), std::string::npos) << st.message();
  }
}

// exec.chunk_bwd_grads: the fused pass (pass 4 with the reverse chain) by default where it runs (K = V = 128, bf16)
// but for allow_neg_eigval, which takes pass 4 on wgmma; mma.sync elsewhere; 1 forces mma.sync, 2 wgmma, 3 the fused
// pass, 4 the fused pass with pass 5a's GQA sum (2-4 unsupported outside their contract, the message says what they
// need); the text names it. With two value heads per q/k head the fused pass runs them as one cluster.
TEST(ChunkBwdPlan, GradsPassChoiceAndOverride) {
  ChunkShape s;
  s.T = 8192, s.Hv = 32;
  BwdCall c = bwd_call(s);
  ChunkBwdPlan pl = bwd_plan(c);
  EXPECT_GT(pl.fused_walk, 0);
  EXPECT_EQ(pl.fused_cluster, 2);  // Hqk = 16, Hv = 32: the two value heads of a q/k head in a pair
  EXPECT_EQ(pl.grads_pass, ChunkStatePass::mma_sync);
  EXPECT_TRUE(describes(pl, c.d, "grads pass: fused with the reverse chain"));
  EXPECT_TRUE(describes(pl, c.d, "the CTAs of the 2 value heads of a q/k head in pairs"));
  // the dstate chain's decay window with the fused pass, unless exec.chunk_bwd_window = 1
  EXPECT_TRUE(pl.decay_window);
  EXPECT_TRUE(describes(pl, c.d, "from the chunks of its decay window only (e^-21"));
  // pass 0 writes the table, and prep forms dU0 only for the chunks the chain walks
  EXPECT_TRUE(
      describes(pl, c.d,
                "where the gates allow; the table by pass 0, grid (128, 4), a warp per (chunk slot, value head); "
                "prep forms dU0 for the chunks walked\n"));
  {
    BwdCall sp = c;
    sp.p.exec.chunk_bwd_segments = 4;
    const ChunkBwdPlan ps = bwd_plan(sp);
    ASSERT_TRUE(ps.split && ps.decay_window);
    // under the split the summaries of both chains walk their own windows too
    EXPECT_TRUE(describes(ps, sp.d,
                          "where the gates allow, and each summary of either chain over its own window; "
                          "the table by pass 0"));
  }
  {
    BwdCall w = c;
    w.p.exec.chunk_bwd_window = 1;
    EXPECT_FALSE(bwd_plan(w).decay_window);
    EXPECT_EQ(describe(bwd_plan(w), w.d).find("decay window"), std::string::npos);
    w.p.exec.chunk_bwd_window = 2;
    ChunkBwdPlan bad;
    const Status st = plan_chunk_bwd(w.p, w.d, DeviceFacts{kH200Sms}, &bad);
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.message();
    EXPECT_NE(st.message().find("exec.chunk_bwd_window: expected 0 (auto) or 1 (off), got 2"), std::string::npos)
        << st.message();
    w.p.exec.chunk_bwd_window = 0, w.p.exec.chunk_bwd_grads = 2;  // no fused pass: every record is read
    EXPECT_FALSE(bwd_plan(w).decay_window);
  }
  for (const auto& [hqk, cluster] : {std::pair{8, 0}, std::pair{2, 0}, std::pair{32, 0}}) {  // groups 4, 16, 1
    ChunkShape g = s;
    g.Hqk = hqk;
    EXPECT_EQ(bwd_plan(bwd_call(g)).fused_cluster, cluster) << "Hqk " << hqk;
  }
  c.p.gate.use_beta_sigmoid_in_kernel = true, c.p.gate.allow_neg_eigval = true;
  pl = bwd_plan(c);
  EXPECT_EQ(pl.fused_walk, 0);
  EXPECT_EQ(pl.grads_pass, ChunkStatePass::wgmma);
  EXPECT_TRUE(describes(pl, c.d, "grads pass: wgmma"));
  c.p.gate.allow_neg_eigval = false;
  c.p.exec.chunk_bwd_grads = 1;
  pl = bwd_plan(c);
  EXPECT_EQ(pl.fused_walk, 0);
  EXPECT_EQ(pl.grads_pass, ChunkStatePass::mma_sync);
  EXPECT_TRUE(describes(pl, c.d, "grads pass: mma.sync"));
  c.p.exec.chunk_bwd_grads = 2;
  pl = bwd_plan(c);
  EXPECT_EQ(pl.fused_walk, 0);
  EXPECT_EQ(pl.grads_pass, ChunkStatePass::wgmma);
  c.p.exec.chunk_bwd_grads = 3;
  c.p.gate.allow_neg_eigval = true;  // an explicit 3 takes the fused pass even so
  EXPECT_GT(bwd_plan(c).fused_walk, 0);
  c.p.exec.chunk_bwd_grads = 4;  // the fused pass, pass 5a sums the value heads
  EXPECT_GT(bwd_plan(c).fused_walk, 0);
  EXPECT_TRUE(bwd_plan(c).decay_window);
  EXPECT_EQ(bwd_plan(c).fused_cluster, 0);
  EXPECT_EQ(describe(bwd_plan(c), c.d).find("clusters of"), std::string::npos);
  c.p.exec.chunk_bwd_grads = 5;
  ChunkBwdPlan bad;
  Status st = plan_chunk_bwd(c.p, c.d, DeviceFacts{kH200Sms}, &bad);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.message();
  EXPECT_NE(st.message().find("exec.chunk_bwd_grads: expected 0 (auto), 1"), std::string::npos) << st.message();
  s.dt = DType::f16;  // f16 and K or V = 64: mma.sync, and 2, 3 are unsupported
  c = bwd_call(s);
  EXPECT_EQ(bwd_plan(c).grads_pass, ChunkStatePass::mma_sync);
  EXPECT_EQ(bwd_plan(c).fused_walk, 0);
  for (int32_t g : {2, 3, 4}) {
    c.p.exec.chunk_bwd_grads = g;
    st = plan_chunk_bwd(c.p, c.d, DeviceFacts{kH200Sms}, &bad);
    EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
    EXPECT_NE(st.message().find("needs K = V = 128 and bf16 inputs"), std::string::npos) << st.message();
  }
  s.dt = DType::bf16, s.K = 64;
  c = bwd_call(s);
  EXPECT_EQ(bwd_plan(c).grads_pass, ChunkStatePass::mma_sync);
  EXPECT_EQ(bwd_plan(c).fused_walk, 0);
}

// Passes 2 and 3 run on wgmma where K = V = 128 (bf16 and f16), both at once in their one-stage forms unless
// exec.chunk_bwd_chains = 1, on mma.sync one after the other where K or V is 64; the text says which. Their cheaper
// steps (the cost model's weights) keep the unsplit training shapes unsplit and the few-head split at P = 8.
TEST(ChunkBwdPlan, StatePassKernel) {
  ChunkShape s;
  s.T = 32768, s.Hqk = 16, s.Hv = 32;
  ChunkBwdPlan pl = bwd_plan(bwd_call(s));
  EXPECT_EQ(pl.state_pass, ChunkStatePass::wgmma);
  EXPECT_EQ(pl.dstate_pass, ChunkStatePass::wgmma);
  EXPECT_FALSE(pl.split) << pl.why;
  // the default: both chains at once (one launch per phase; one CTA of both: 128 CTAs on 132 SMs), each in its
  // one-stage form, and the text says so
  EXPECT_EQ(pl.chains_concurrent, cuda::kChainsOneCta);
  EXPECT_EQ(pl.state_stages, 1);
  EXPECT_EQ(pl.dstate_stages, 1);
  std::string text = describe(pl, bwd_call(s).d);
  EXPECT_NE(text.find("state pass: wgmma (K = V = 128), 128 threads, 1 input stage (a warpgroup of a CTA of both "
                      "chains); dstate pass: wgmma (K = V = 128), 128 threads, 1 input stage (a warpgroup of a CTA of "
                      "both chains)\n  chains: both at once (one launch per phase, each CTA a dstate and a state "
                      "warpgroup)"),
            std::string::npos)
      << text;
  // one after the other (exec.chunk_bwd_chains = 1): two input stages each (one CTA per SM)
  BwdCall serial = bwd_call(s);
  serial.p.exec.chunk_bwd_chains = 1;
  pl = bwd_plan(serial);
  EXPECT_FALSE(pl.chains_concurrent);
  EXPECT_EQ(pl.state_stages, 2);
  EXPECT_EQ(pl.dstate_stages, 2);
  EXPECT_FALSE(pl.split) << pl.why;
  text = describe(pl, serial.d);
  EXPECT_NE(text.find("threads per CTA, 2 input stages (one CTA per SM); dstate pass: wgmma (K = V = 128), 128 threads "
                      "per CTA, 2 input stages (one CTA per SM)\n  chains: one after the other\n"),
            std::string::npos)
      << text;
  // a CTA per chain (exec.chunk_bwd_chains = 2)
  BwdCall two = bwd_call(s);
  two.p.exec.chunk_bwd_chains = 2;
  text = describe(bwd_plan(two), two.d);
  EXPECT_NE(text.find("threads per CTA, 1 input stage (two CTAs per SM)\n  chains: both at once (one launch per "
                      "phase, a state and a dstate CTA per SM)\n"),
            std::string::npos)
      << text;
  s.Hqk = s.Hv = 4;
  pl = bwd_plan(bwd_call(s));
  EXPECT_EQ(pl.state_pass, ChunkStatePass::wgmma);
  EXPECT_EQ(pl.dstate_pass, ChunkStatePass::wgmma);
  EXPECT_TRUE(pl.split) << pl.why;
  EXPECT_EQ(pl.segments, 8) << pl.why;
  for (auto [K, V] : {std::pair<int64_t, int64_t>{64, 64}, {64, 128}, {128, 64}}) {
    s.K = K, s.V = V;
    pl = bwd_plan(bwd_call(s));
    EXPECT_EQ(pl.state_pass, ChunkStatePass::mma_sync) << K << " " << V;
    EXPECT_EQ(pl.dstate_pass, ChunkStatePass::mma_sync) << K << " " << V;
    text = describe(pl, bwd_call(s).d);
    EXPECT_NE(text.find("state pass: mma.sync (K or V = 64), 256 threads"), std::string::npos) << text;
    EXPECT_NE(text.find("dstate pass: mma.sync (K or V = 64), 256 threads per CTA\n"), std::string::npos) << text;
  }
  // a forced split keeps the kernel choice
  s.K = s.V = 128;
  BwdCall c = bwd_call(s);
  c.p.exec.chunk_bwd_segments = 3;
  pl = bwd_plan(c);
  EXPECT_TRUE(pl.split);
  EXPECT_EQ(pl.state_pass, ChunkStatePass::wgmma);
  EXPECT_EQ(pl.dstate_pass, ChunkStatePass::wgmma);
}

TEST(ChunkBwdPlan, SegmentOverrideAndWorkspace) {
  ChunkShape s;
  s.B = 2, s.T = 1000, s.Hqk = 2, s.Hv = 4, s.K = 64, s.V = 128;
  BwdCall c = bwd_call(s);
  c.p.exec.chunk_bwd_segments = 1;
  ChunkBwdPlan pl = bwd_plan(c);
  EXPECT_FALSE(pl.split);
  EXPECT_TRUE(pl.forced);
  EXPECT_EQ(pl.split_bytes, 0u);
  c.p.exec.chunk_bwd_segments = 3;  // 16 chunks: segments of 6, 6, 4
  pl = bwd_plan(c);
  ASSERT_TRUE(pl.split);
  EXPECT_TRUE(pl.forced);
  EXPECT_EQ(pl.seg_chunks, 6);
  EXPECT_EQ(pl.segments, 3);
  EXPECT_EQ(pl.cap, 6);  // 2 sequences x 3
  EXPECT_EQ(pl.ws_items, 0u);
  EXPECT_EQ(pl.ws_seq_first, up256(size_t(pl.cap) * sizeof(cuda::ChunkWorkItem)));
  EXPECT_EQ(pl.ws_mn, pl.ws_seq_first + up256(2 * sizeof(int32_t)));
  EXPECT_EQ(pl.split_bytes, pl.ws_mn + size_t(pl.cap) * 4 * 64 * (64 + 128) * sizeof(float));
  const std::string text = describe(pl, c.d);
  EXPECT_NE(text.find("segment split: 3 segments of 6 chunks"), std::string::npos) << text;
  EXPECT_NE(text.find("exec.chunk_bwd_segments = 3"), std::string::npos) << text;
  // The forward's override does not reach the backward, nor the other way round.
  c.p.exec.chunk_bwd_segments = 0;
  const ChunkBwdPlan automatic = bwd_plan(c);
  EXPECT_FALSE(automatic.forced);
  c.p.exec.chunk_fwd_segments = 7;
  EXPECT_EQ(bwd_plan(c).segments, automatic.segments);
  expect_override_edges<ChunkBwdPlan>(
      bwd_call, plan_chunk_bwd, [](BwdCall& x) -> int32_t& { return x.p.exec.chunk_bwd_segments; },
      "exec.chunk_bwd_segments");
  c.p.chunk_size = 32;
  ChunkBwdPlan bad;
  const Status st = plan_chunk_bwd(c.p, c.d, DeviceFacts{kH200Sms}, &bad);
  EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
}

TEST(ChunkBwdPlan, VarlenItemBoundCoversEverySegment) {
  expect_item_bound(15, [](const ChunkShape& s, int32_t P) {
    BwdCall c = bwd_call(s);
    c.p.exec.chunk_bwd_segments = P;
    return bwd_plan(c);
  });
}

TEST(PlanText, PublicApiPrintsThePlan) {
  GdnCase gc;
  gc.B = 1, gc.T = 300, gc.Hqk = 2, gc.Hv = 4, gc.K = 128, gc.V = 128, gc.dtype = DType::bf16;
  GdnInputs in = make_inputs(gc);
  HostTensor o(DType::bf16, in.v.shape);
  ChunkFwdParams p;
  p.q = in.q.view(), p.k = in.k.view(), p.v = in.v.view(), p.g = in.g.view(), p.beta = in.beta.view();
  p.o = o.view();
  std::string text;
  ASSERT_TRUE(chunk_fwd_plan(p, &text).ok());
  EXPECT_NE(text.find("CPU backend"), std::string::npos) << text;
  ASSERT_TRUE(chunk_fwd_plan(p, &text, kH200Sms).ok());
  EXPECT_NE(text.find("wgmma"), std::string::npos) << text;
  EXPECT_NE(text.find("workspace"), std::string::npos) << text;
  p.exec.chunk_fwd_segments = 2;
  ASSERT_TRUE(chunk_fwd_plan(p, &text, kH200Sms).ok());
  EXPECT_NE(text.find("segment split: 2 segments"), std::string::npos) << text;
  EXPECT_NE(text.find("exec.chunk_fwd_segments = 2"), std::string::npos) << text;
  EXPECT_EQ(chunk_fwd_plan(p, nullptr).code(), StatusCode::invalid_argument);
  p.chunk_size = 32;  // valid on the CPU, not on the GPU kernels
  EXPECT_EQ(chunk_fwd_plan(p, &text, kH200Sms).code(), StatusCode::unsupported);

  ChunkBwdParams b;
  HostTensor dq(DType::bf16, in.q.shape), dk(DType::bf16, in.k.shape), dv(DType::bf16, in.v.shape),
      d_o(DType::bf16, in.v.shape);
  b.q = in.q.view(), b.k = in.k.view(), b.v = in.v.view(), b.g = in.g.view(), b.beta = in.beta.view();
  b.d_o = d_o.view(), b.dq = dq.view(), b.dk = dk.view(), b.dv = dv.view();
  ASSERT_TRUE(chunk_bwd_plan(b, &text).ok());
  EXPECT_NE(text.find("CPU backend"), std::string::npos) << text;
  ASSERT_TRUE(chunk_bwd_plan(b, &text, kH200Sms).ok());
  EXPECT_NE(text.find("state and dstate chains: grid (1, 4, 4)"), std::string::npos) << text;
  b.exec.chunk_bwd_segments = 2;
  ASSERT_TRUE(chunk_bwd_plan(b, &text, kH200Sms).ok());
  EXPECT_NE(text.find("segment split: 2 segments of 3 chunks"), std::string::npos) << text;
  EXPECT_NE(text.find("summaries: state chain grid (2, 4, 8), dstate chain grid (2, 4, 4)"), std::string::npos) << text;

  RecurrentParams r;
  HostTensor ro(DType::bf16, in.v.shape);
  r.q = in.q.view(), r.k = in.k.view(), r.v = in.v.view(), r.g = in.g.view(), r.beta = in.beta.view();
  r.o = ro.view();
  ASSERT_TRUE(recurrent_plan(r, &text, kH200Sms).ok());
  EXPECT_NE(text.find("kernel: persistent"), std::string::npos) << text;  // 300 tokens, no pool
  r.exec.recurrent_kernel = RecurrentKernel::wy;
  const Status st = recurrent_plan(r, &text, kH200Sms);
  EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();

  MixerCase mc;
  mc.Hqk = 2, mc.Hv = 6, mc.K = 128, mc.V = 128, mc.act = DType::bf16, mc.pool = DType::f32;
  MixerTensors mt = make_mixer(mc);
  MixerDecodeParams mp = mixer_params(mc, mt);
  ASSERT_TRUE(mixer_decode_plan(mp, &text).ok());
  EXPECT_NE(text.find("CPU backend"), std::string::npos) << text;
  ASSERT_TRUE(mixer_decode_plan(mp, &text, kH200Sms).ok());
  EXPECT_NE(text.find("V split: 1 CTAs"), std::string::npos) << text;     // N = 3: latency-bound, one CTA per head
  EXPECT_NE(text.find("clusters of 3 CTAs"), std::string::npos) << text;  // 3 value heads per key head
  mp.exec.mixer_split = 2;
  ASSERT_TRUE(mixer_decode_plan(mp, &text, kH200Sms).ok());
  EXPECT_NE(text.find("clusters of 6 CTAs"), std::string::npos) << text;
  mp.exec.mixer_split = 4;
  EXPECT_EQ(mixer_decode_plan(mp, &text, kH200Sms).code(), StatusCode::unsupported);
}

// The recurrent kernels' host-built divider (DivU32: x / d as a multiply-high, an add and a shift) equals integer
// division on its whole contract (0 <= x < 2^31, 1 <= d <= 2^31): every d up to 4096 and the powers of two and their
// neighbours up to 2^31, at the x where a rounding error would show first (multiples of d and their neighbours, the
// top of the range) and pseudo-random x.
TEST(RecurrentDivider, EqualsIntegerDivision) {
  std::vector<uint32_t> ds;
  for (uint32_t d = 1; d <= 4096; ++d) ds.push_back(d);
  for (int b = 12; b <= 31; ++b)
    for (int64_t e : {-1, 0, 1})
      if ((int64_t(1) << b) + e <= (int64_t(1) << 31)) ds.push_back(uint32_t((int64_t(1) << b) + e));
  ds.push_back(32), ds.push_back(0x7fffffffu), ds.push_back(0x80000000u);
  const uint32_t xmax = 0x7fffffffu;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int64_t checked = 0;
  for (uint32_t d : ds) {
    const cuda::DivU32 q = cuda::DivU32::of(d);
    ASSERT_EQ(q.d, d);
    auto expect = [&](uint32_t x) {
      ASSERT_EQ(q.div(x), x / d) << "x = " << x << ", d = " << d;
      ++checked;
    };
    for (uint32_t x : {0u, 1u, 2u, xmax, xmax - 1, xmax - d + 1}) expect(x);
    for (uint64_t k = 1; k * d <= xmax && k < 64; ++k) {
      expect(uint32_t(k * d - 1)), expect(uint32_t(k * d));
      if (k * d + 1 <= xmax) expect(uint32_t(k * d + 1));
    }
    for (uint64_t k = xmax / d; k > 0 && k + 64 > xmax / d; --k) expect(uint32_t(k * d - 1)), expect(uint32_t(k * d));
    for (int i = 0; i < 64; ++i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      expect(uint32_t(rng >> 33));  // < 2^31
    }
  }
  EXPECT_GT(checked, int64_t(ds.size()) * 100);
}

}  // namespace
}  // namespace flashgdn::test
