// CUDA mixer_decode (one fused launch) against the CPU op in fp64 (itself checked against the independent
// token-by-token reference in tests/cpu/test_mixer_decode.cpp) on the same inputs: decode, multi-token,
// speculative 2-D slots with num_accepted_tokens, no-commit with intermediate states and conv windows,
// sentinels, varlen with empty rows, GQA ratios 1-8, both layouts, fp32 and bf16 pools, bf16 and f16
// activations, every V split the kernel has (exec.mixer_split 1, 2, 4: 1, 2 or 4 CTAs per value head, the gated
// RMSNorm's sum over V across the cluster); CUDA-graph replay equal to eager; 1000 launches bitwise identical. Outputs
// are poisoned with NaN.
//
// Tolerances (relative Frobenius error, gdn-math §10.3): out 5e-3 (bf16 I/O: y and o are rounded to bf16 on
// both sides, so a value on a rounding boundary can land one bf16 ulp apart), fp32 state 2e-3, bf16 state 1e-2;
// the conv state and the conv windows hold raw inputs: bitwise equal.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mixer_test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda_test_util.hpp"
#endif

namespace flashgdn::test {
namespace {

struct Dev {  // device copy of a host tensor (absent stays absent)
  void* ptr = nullptr;
  HostTensor* h = nullptr;
  explicit Dev(HostTensor& t) : h(&t) {
#if FLASHGDN_WITH_CUDA
    if (t.shape.empty()) return;
    EXPECT_EQ(cudaMalloc(&ptr, t.bytes.size() + 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, t.data(), t.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
#endif
  }
  ~Dev() {
#if FLASHGDN_WITH_CUDA
    if (ptr) cudaFree(ptr);
#endif
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  TensorView view() const {
    TensorView v = h->view();
    if (v.defined()) v.data = ptr, v.device = DeviceType::cuda;
    return v;
  }
  void back() {
#if FLASHGDN_WITH_CUDA
    if (ptr) EXPECT_EQ(cudaMemcpy(h->data(), ptr, h->bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
#endif
  }
};

// All tensors of a case on the device, with the params pointing at them.
struct DevCase {
  std::vector<std::unique_ptr<Dev>> all;
  MixerDecodeParams p;
  DevCase(const MixerCase& c, MixerTensors& m) {
    p = mixer_params(c, m);
    auto mv = [&](TensorView* v, HostTensor& t) {
      all.push_back(std::make_unique<Dev>(t));
      *v = all.back()->view();
    };
    mv(&p.x, m.x), mv(&p.z, m.z), mv(&p.a, m.a), mv(&p.b, m.b), mv(&p.A_log, m.A_log), mv(&p.dt_bias, m.dt_bias);
    mv(&p.conv_weight, m.conv_w), mv(&p.conv_bias, m.conv_b), mv(&p.norm_weight, m.norm_w);
    mv(&p.cu_seqlens, m.cu), mv(&p.conv_state, m.conv_state), mv(&p.state_pool, m.pool);
    mv(&p.state_indices, m.si), mv(&p.num_accepted_tokens, m.na), mv(&p.intermediate_states, m.inter);
    mv(&p.intermediate_conv_windows, m.inter_win), mv(&p.out, m.out);
  }
  void back() {
    for (auto& d : all) d->back();
  }
};

MixerCase gpu_case(int64_t Hqk, int64_t Hv) {
  MixerCase c;
  c.Hqk = Hqk, c.Hv = Hv, c.K = 128, c.V = 128, c.act = DType::bf16, c.pool = DType::f32;
  return c;
}

// One call on case c's tensors m, copied to the device and back; split: exec.mixer_split, kernel: exec.mixer_kernel
// (0: the plan's choice).
void run_on_device(const MixerCase& c, MixerTensors& m, int32_t split, int32_t kernel) {
  DevCase d(c, m);
  d.p.exec.mixer_split = split;
  d.p.exec.mixer_kernel = kernel;
  const Status st = mixer_decode(d.p);
  ASSERT_TRUE(st.ok()) << st.message();
#if FLASHGDN_WITH_CUDA
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
  d.back();
}

void check_against_cpu(const MixerCase& c, int32_t split = 0, int32_t kernel = 0) {
  MixerTensors gpu = make_mixer(c), cpu = make_mixer(c);
  ASSERT_NO_FATAL_FAILURE(run_on_device(c, gpu, split, kernel));
  MixerDecodeParams p = mixer_params(c, cpu);
  p.exec.cpu_fp64 = true;
  ASSERT_TRUE(mixer_decode(p).ok());
  const double e_out = rel_err(gpu.out, cpu.out);
  const double e_pool = rel_err(gpu.pool, cpu.pool);
  std::printf("    out %.2e  state %.2e\n", e_out, e_pool);
  EXPECT_LE(e_out, 5e-3);
  EXPECT_LE(e_pool, c.pool == DType::f32 ? 2e-3 : 1e-2);
  EXPECT_TRUE(gpu.conv_state.bit_equal(cpu.conv_state));
  if (c.intermediates) {
    EXPECT_LE(rel_err_written(gpu.inter, cpu.inter), c.pool == DType::f32 ? 2e-3 : 1e-2);
    if (c.Kc > 1) EXPECT_EQ(rel_err_written(gpu.inter_win, cpu.inter_win), 0.0);
  }
}

TEST(CudaMixerDecode, DecodeBothLayoutsAndPools) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (StateLayout l : {StateLayout::k_major, StateLayout::v_major})
    for (DType pool : {DType::f32, DType::bf16}) {
      MixerCase c = gpu_case(2, 4);
      c.layout = l, c.pool = pool, c.B = 5;
      SCOPED_TRACE(testing::Message() << "layout " << int(l) << " pool " << dtype_name(pool));
      check_against_cpu(c);
    }
}

TEST(CudaMixerDecode, GqaRatiosTapsAndF16) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t r : {1, 2, 3, 4}) {
    MixerCase c = gpu_case(2, 2 * r);
    c.Kc = r == 3 ? 2 : 4, c.act = r == 4 ? DType::f16 : DType::bf16, c.bias = r != 2, c.seed = uint64_t(20 + r);
    SCOPED_TRACE(r);
    check_against_cpu(c);
  }
}

TEST(CudaMixerDecode, MultiTokenSpeculativeAndVarlen) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  MixerCase c = gpu_case(2, 4);
  c.T = 4;
  check_against_cpu(c);
  for (StateLayout l : {StateLayout::k_major, StateLayout::v_major}) {
    MixerCase s = gpu_case(2, 4);
    s.spec = 3, s.T = 4, s.B = 5, s.layout = l;
    check_against_cpu(s);
  }
  MixerCase v = gpu_case(2, 4);
  v.lens = {3, 0, 1, 2, 0};
  check_against_cpu(v);
}

TEST(CudaMixerDecode, NoCommitIntermediates) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  MixerCase c = gpu_case(2, 4);
  c.T = 3, c.B = 4, c.commit = false, c.intermediates = true;
  check_against_cpu(c);
  MixerCase b = c;
  b.pool = DType::bf16;
  check_against_cpu(b);
}

// Every split with every feature that touches the split: the column ranges of the state, v, z, out and the
// norm weight, the per-token states, the q/k conv state written by one CTA of the cluster, the cross-CTA norm.
TEST(CudaMixerDecode, EverySplitFactor) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int32_t split : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << "split " << split);
    for (StateLayout l : {StateLayout::k_major, StateLayout::v_major})
      for (DType pool : {DType::f32, DType::bf16}) {
        MixerCase c = gpu_case(2, 4);
        c.layout = l, c.pool = pool, c.B = 5, c.seed = uint64_t(40 + split);
        SCOPED_TRACE(testing::Message() << "layout " << int(l) << " pool " << dtype_name(pool));
        check_against_cpu(c, split);
        MixerCase s = c;  // vLLM speculative: 2-D slots, num_accepted_tokens, the conv window at an offset
        s.spec = 3, s.T = 4;
        check_against_cpu(s, split);
      }
    MixerCase v = gpu_case(2, 4);  // varlen with empty rows, several tokens a row
    v.lens = {3, 0, 1, 2, 0};
    check_against_cpu(v, split);
    MixerCase nc = gpu_case(2, 4);  // SGLang verify: intermediates, no commit
    nc.T = 3, nc.B = 4, nc.commit = false, nc.intermediates = true;
    check_against_cpu(nc, split);
    for (int64_t r : {1, 2, 3, 4, 8}) {  // every GQA ratio whose cluster (r * split CTAs) fits 8
      if (r * split > 8) continue;
      MixerCase g = gpu_case(2, 2 * r);
      g.Kc = r == 3 ? 2 : 4, g.act = r == 4 ? DType::f16 : DType::bf16, g.bias = r != 2, g.seed = uint64_t(60 + r);
      SCOPED_TRACE(testing::Message() << "r " << r);
      check_against_cpu(g, split);
    }
  }
  MixerCase c = gpu_case(2, 16);  // 8 value heads per key head: a split of 2 needs a 16-CTA cluster
  MixerTensors m = make_mixer(c);
  DevCase d(c, m);
  d.p.exec.mixer_split = 2;
  EXPECT_EQ(mixer_decode(d.p).code(), StatusCode::unsupported);
}

TEST(CudaMixerDecode, SplitsAgreeWithEachOther) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // The splits sum over K in different orders: equal to within fp32 rounding, not bitwise.
  MixerCase c = gpu_case(16, 32);
  c.B = 3, c.T = 2;
  std::vector<MixerTensors> res;
  for (int32_t split : {1, 2, 4}) {
    res.push_back(make_mixer(c));
    ASSERT_NO_FATAL_FAILURE(run_on_device(c, res.back(), split, 0));
  }
  for (size_t i = 1; i < res.size(); ++i) {
    EXPECT_LE(rel_err(res[i].out, res[0].out), 5e-3);
    EXPECT_LE(rel_err(res[i].pool, res[0].pool), 1e-5);
    EXPECT_TRUE(res[i].conv_state.bit_equal(res[0].conv_state));
  }
}

// The pipe kernel (exec.mixer_kernel = 2: one token per row, K-major bf16 or fp32 pool, 1-D slots): every GQA ratio and
// conv width it takes, f16 activations, no conv bias, commit off (pool and conv state untouched); small enough for the
// sanitizers.
TEST(CudaMixerDecode, PipeKernel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType pool : {DType::bf16, DType::f32})
    for (int64_t r : {1, 2, 3, 4, 8}) {
      MixerCase c = gpu_case(2, 2 * r);
      c.pool = pool, c.B = 5, c.Kc = r == 3 ? 2 : (r == 8 ? 1 : 4), c.act = r == 4 ? DType::f16 : DType::bf16;
      c.bias = r != 2, c.seed = uint64_t(80 + r);
      SCOPED_TRACE(testing::Message() << "pool " << dtype_name(pool) << " r " << r);
      check_against_cpu(c, 0, 2);
    }
  MixerCase nc = gpu_case(2, 4);
  nc.pool = DType::bf16, nc.B = 4, nc.commit = false, nc.Kc = 3;
  check_against_cpu(nc, 0, 2);
}

// A Qwen3-Next batch large enough that each CTA walks several rows, and the plan's choice there.
TEST(CudaMixerDecode, PipeKernelLargeBatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  MixerCase big = gpu_case(16, 32);  // 300 rows: the plan picks the pipe
  big.pool = DType::bf16, big.B = 300, big.seed = 90;
  check_against_cpu(big);
  MixerCase big32 = big;
  big32.pool = DType::f32, big32.seed = 91;
  check_against_cpu(big32);
  MixerTensors m = make_mixer(big);
  DevCase d(big, m);
  std::string text;
  ASSERT_TRUE(mixer_decode_plan(d.p, &text).ok());
  EXPECT_NE(text.find("pipe kernel"), std::string::npos) << text;
}

// The pipe kernel and the clustered one sum over K and V in other orders: equal to within rounding, not bitwise.
TEST(CudaMixerDecode, PipeAgreesWithClustered) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType pool : {DType::bf16, DType::f32}) {
    MixerCase c = gpu_case(16, 32);
    c.B = 40, c.pool = pool;
    SCOPED_TRACE(dtype_name(pool));
    std::vector<MixerTensors> res;
    for (int32_t kernel : {1, 2}) {
      res.push_back(make_mixer(c));
      ASSERT_NO_FATAL_FAILURE(run_on_device(c, res.back(), 0, kernel));
    }
    EXPECT_LE(rel_err(res[1].out, res[0].out), 5e-3);
    EXPECT_LE(rel_err(res[1].pool, res[0].pool), pool == DType::f32 ? 1e-5 : 1e-2);
    EXPECT_TRUE(res[1].conv_state.bit_equal(res[0].conv_state));
  }
}

class CudaMixerDecodeSplit : public testing::TestWithParam<int32_t> {};

TEST_P(CudaMixerDecodeSplit, GraphReplayEqualsEagerAndRepeatsAreBitwise) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
#if FLASHGDN_WITH_CUDA
  // no in-place update: every launch computes the same (the pipe kernel, -1: 64 rows on a bf16 pool, no intermediates)
  const bool pipe = GetParam() < 0;
  MixerCase c = gpu_case(16, 32);
  c.B = pipe ? 64 : 8, c.commit = false, c.intermediates = !pipe, c.pool = pipe ? DType::bf16 : DType::f32;
  MixerTensors m = make_mixer(c);
  DevCase d(c, m);
  d.p.exec.mixer_split = pipe ? 0 : GetParam();
  d.p.exec.mixer_kernel = pipe ? 2 : 0;
  ASSERT_TRUE(mixer_decode(d.p).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d.back();
  const HostTensor out0 = m.out, inter0 = m.inter;
  // 1000 launches, each launch's out read back and compared: every one bitwise the first's
  HostTensor outr = m.out;
  int differing = 0;
  for (int rep = 0, n = test_repeats(1000); rep < n; ++rep) {
    ASSERT_TRUE(mixer_decode(d.p).ok());
    ASSERT_EQ(cudaMemcpy(outr.data(), d.p.out.data, outr.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    differing += outr.bit_equal(out0) ? 0 : 1;
  }
  EXPECT_EQ(differing, 0) << "launches whose out differs from the first's";
  d.back();
  EXPECT_TRUE(m.inter.bit_equal(inter0));
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaMemset(d.p.out.data, 0xff, m.out.bytes.size()), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(mixer_decode(d.p, s).ok());
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  d.back();
  EXPECT_TRUE(m.out.bit_equal(out0));
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
#endif
}
INSTANTIATE_TEST_SUITE_P(Splits, CudaMixerDecodeSplit, testing::Values(0, 1, 2, 4, -1));

// Steps back to back on one pool and conv state: the kernel is launched with programmatic dependent launch, so
// step i + 1 may start while step i runs; its pdl_wait must order the conv state and pool reads after step i's
// writes. Eight steps without synchronization (eager, and captured in one graph) must leave out, the conv state and
// the pool bit for bit as eight steps synchronized one by one.
TEST(CudaMixerDecode, StepsBackToBackEqualSynchronizedSteps) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
#if FLASHGDN_WITH_CUDA
  constexpr int kSteps = 8;
  // B = 1: the clustered kernel; 8 (fp32 pool) and 64 (bf16 pool): the pipe kernel on 132 SMs
  for (const int64_t B : {int64_t(1), int64_t(8), int64_t(64)}) {
    SCOPED_TRACE("B " + std::to_string(B));
    MixerCase c = gpu_case(16, 32);
    c.B = B;
    if (B == 64) c.pool = DType::bf16;
    MixerTensors m = make_mixer(c);
    const HostTensor pool0 = m.pool, conv0 = m.conv_state;
    DevCase d(c, m);
    Dev* dpool = nullptr;
    Dev* dconv = nullptr;
    for (auto& x : d.all) {
      if (x->h == &m.pool) dpool = x.get();
      if (x->h == &m.conv_state) dconv = x.get();
    }
    ASSERT_TRUE(dpool && dconv);
    auto reset = [&] {
      ASSERT_EQ(cudaMemcpy(dpool->ptr, pool0.data(), pool0.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dconv->ptr, conv0.data(), conv0.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    };
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    auto steps = [&](bool sync) {
      for (int i = 0; i < kSteps; ++i) {
        ASSERT_TRUE(mixer_decode(d.p, s).ok());
        if (sync) {
          ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        }
      }
    };
    auto result = [&] {
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      d.back();
      return std::vector<HostTensor>{m.out, m.conv_state, m.pool};
    };
    steps(true);
    const std::vector<HostTensor> ref = result();
    EXPECT_FALSE(ref[2].bit_equal(pool0)) << "the steps must change the pool";
    reset();
    steps(false);
    const std::vector<HostTensor> eager = result();
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(eager[i].bit_equal(ref[i])) << "eager, tensor " << i;
    reset();
    ASSERT_EQ(run_captured(s, [&] { steps(false); }), cudaSuccess);
    const std::vector<HostTensor> graphed = result();
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(graphed[i].bit_equal(ref[i])) << "graph, tensor " << i;
    cudaStreamDestroy(s);
  }
#endif
}

TEST(CudaMixerDecode, UnsupportedShapesAreRejected) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  MixerCase c = gpu_case(2, 4);
  c.K = 64, c.V = 64;
  MixerTensors m = make_mixer(c);
  DevCase d(c, m);
  const Status st = mixer_decode(d.p);
  EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
}

}  // namespace
}  // namespace flashgdn::test
