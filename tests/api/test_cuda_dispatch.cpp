// Dispatch of CUDA tensors through the C ABI (CUDA builds; skipped without a GPU): exec.check_indices copies
// device index tensors to the host and applies the CPU value checks; a short workspace is rejected; a rejected
// call writes nothing on the device.
#include <gtest/gtest.h>

#if FLASHGDN_WITH_CUDA

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "api_fixture.hpp"

namespace flashgdn::test {
namespace {

// A device buffer with a DLTensor over it (compact), filled from a host DLBuf of the same shape and dtype.
struct DevBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
  int64_t shape[kMaxDims] = {};
  DLTensor t{};
  explicit DevBuf(const DLBuf& h) : bytes(h.mem.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.mem.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    t = h.t;
    for (int i = 0; i < h.t.ndim; ++i) shape[i] = h.shape[i];
    t.shape = shape;
    t.strides = nullptr;
    t.data = ptr;
    t.device = {kDLCUDA, 0};
  }
  ~DevBuf() { cudaFree(ptr); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Single-token decode on a device pool: N = 3, Hqk = 2, Hv = 4, K = V = 64, bf16 q/k/v/o, fp32 pool.
struct DevRecCase {
  static constexpr int64_t N = 3, Hqk = 2, Hv = 4, K = 64, V = 64, SLOTS = 5;
  Bufs h;
  DLBuf &q, &k, &v, &g, &beta, &o, &pool, &idx;
  std::deque<DevBuf> d;
  flashgdn_recurrent_params p;
  DevBuf *d_o = nullptr, *d_pool = nullptr, *d_idx = nullptr;

  DevRecCase()
      : q(h.add("q", DType::bf16, {N, 1, Hqk, K})),
        k(h.add("k", DType::bf16, {N, 1, Hqk, K})),
        v(h.add("v", DType::bf16, {N, 1, Hv, V})),
        g(h.add("g", DType::f32, {N, 1, Hv})),
        beta(h.add("beta", DType::f32, {N, 1, Hv})),
        o(h.add("o", DType::bf16, {N, 1, Hv, V})),
        pool(h.add("state_pool", DType::f32, {SLOTS, Hv, K, V})),
        idx(h.add("state_indices", DType::i32, {N})) {
    Rng r(2);
    q.fill_normal(r);
    k.fill_normal(r, 0.1);
    v.fill_normal(r);
    for (int64_t i = 0; i < g.numel(); ++i) g.set(i, -r.uniform());
    for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, r.uniform());
    pool.fill_normal(r, 0.1);
    o.fill_sentinel();
    idx.set_indices({0, 2, 4});
    flashgdn_recurrent_params_init(&p);
    p.q = &d.emplace_back(q).t;
    p.k = &d.emplace_back(k).t;
    p.v = &d.emplace_back(v).t;
    p.g = &d.emplace_back(g).t;
    p.beta = &d.emplace_back(beta).t;
    d_o = &d.emplace_back(o);
    p.o = &d_o->t;
    d_pool = &d.emplace_back(pool);
    p.state_pool = &d_pool->t;
    d_idx = &d.emplace_back(idx);
    p.state_indices = &d_idx->t;
  }
  void upload_indices(std::initializer_list<int64_t> v) {
    idx.set_indices(v);
    ASSERT_EQ(cudaMemcpy(d_idx->ptr, idx.mem.data(), idx.mem.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  int run(void* ws = nullptr, size_t ws_bytes = 0) { return flashgdn_recurrent(&p, ws, ws_bytes, nullptr); }
};

TEST(CudaDispatch, CheckIndicesReadsDeviceIndices) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  DevRecCase c;
  c.upload_indices({0, 7, 4});
  c.p.exec.check_indices = 1;
  const auto o_before = c.d_o->download();
  const auto pool_before = c.d_pool->download();
  EXPECT_EQ(c.run(), FLASHGDN_ERROR_INVALID_ARGUMENT);
  const std::string msg = flashgdn_last_error();
  EXPECT_TRUE(contains(msg, "recurrent: state_indices: expected slots < state_pool.shape[0] = 5")) << msg;
  EXPECT_TRUE(contains(msg, "got state_indices[1] = 7")) << msg;
  EXPECT_EQ(c.d_o->download(), o_before);
  EXPECT_EQ(c.d_pool->download(), pool_before);

  c.upload_indices({2, 2, 4});
  EXPECT_EQ(c.run(), FLASHGDN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flashgdn_last_error(), "expected distinct valid start slots")) << flashgdn_last_error();
}

TEST(CudaDispatch, OutOfRangeSlotsLegalWithoutCheckIndices) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  DevRecCase c;
  c.upload_indices({0, 7, -1});
  size_t ws = 0;
  ASSERT_EQ(flashgdn_recurrent_workspace_size(&c.p, &ws), FLASHGDN_OK) << flashgdn_last_error();
  void* w = nullptr;
  if (ws) ASSERT_EQ(cudaMalloc(&w, ws), cudaSuccess);
  EXPECT_ACCEPTED(c.run(w, ws));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(w);
}

TEST(CudaDispatch, CheckIndicesReadsDeviceCuSeqlens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // chunk_fwd varlen with cu_seqlens on the device: bad values are only seen with exec.check_indices.
  Bufs h;
  DLBuf& q = h.add("q", DType::bf16, {1, 16, 1, 64});
  DLBuf& k = h.add("k", DType::bf16, {1, 16, 1, 64});
  DLBuf& v = h.add("v", DType::bf16, {1, 16, 1, 64});
  DLBuf& o = h.add("o", DType::bf16, {1, 16, 1, 64});
  DLBuf& cu = h.add("cu_seqlens", DType::i32, {3});
  cu.set_indices({0, 9, 17});  // cu[N] > T
  std::deque<DevBuf> d;
  flashgdn_chunk_fwd_params p;
  flashgdn_chunk_fwd_params_init(&p);
  p.q = &d.emplace_back(q).t;
  p.k = &d.emplace_back(k).t;
  p.v = &d.emplace_back(v).t;
  p.o = &d.emplace_back(o).t;
  p.cu_seqlens = &d.emplace_back(cu).t;
  p.exec.check_indices = 1;
  EXPECT_EQ(flashgdn_chunk_fwd(&p, nullptr, 0, nullptr), FLASHGDN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flashgdn_last_error(), "chunk_fwd: cu_seqlens: expected cu_seqlens[N] <= T = 16"))
      << flashgdn_last_error();
}

TEST(CudaDispatch, ShortWorkspaceRejected) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  int tested = 0;
  {
    DevRecCase c;
    size_t ws = 0;
    ASSERT_EQ(flashgdn_recurrent_workspace_size(&c.p, &ws), FLASHGDN_OK) << flashgdn_last_error();
    if (ws > 0) {
      ++tested;
      EXPECT_EQ(c.run(nullptr, 0), FLASHGDN_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(flashgdn_last_error(), "recurrent: workspace: expected a device buffer of at least"));
      void* w = nullptr;
      ASSERT_EQ(cudaMalloc(&w, ws), cudaSuccess);
      EXPECT_EQ(c.run(w, ws - 1), FLASHGDN_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(flashgdn_last_error(), "recurrent: workspace_bytes: expected at least"));
      cudaFree(w);
    }
  }
  {
    // chunk_fwd, 2 sequences of 200 tokens, K = V = 128.
    Bufs h;
    DLBuf& q = h.add("q", DType::bf16, {2, 200, 2, 128});
    DLBuf& v = h.add("v", DType::bf16, {2, 200, 4, 128});
    std::deque<DevBuf> d;
    flashgdn_chunk_fwd_params p;
    flashgdn_chunk_fwd_params_init(&p);
    p.q = &d.emplace_back(q).t;
    p.k = &d.emplace_back(q).t;
    p.v = &d.emplace_back(v).t;
    p.o = &d.emplace_back(v).t;
    size_t ws = 0;
    ASSERT_EQ(flashgdn_chunk_fwd_workspace_size(&p, &ws), FLASHGDN_OK) << flashgdn_last_error();
    if (ws > 0) {
      ++tested;
      EXPECT_EQ(flashgdn_chunk_fwd(&p, nullptr, 0, nullptr), FLASHGDN_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(flashgdn_last_error(), "chunk_fwd: workspace: expected a device buffer of at least"))
          << flashgdn_last_error();
      void* w = nullptr;
      ASSERT_EQ(cudaMalloc(&w, ws), cudaSuccess);
      EXPECT_EQ(flashgdn_chunk_fwd(&p, w, ws - 1, nullptr), FLASHGDN_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(flashgdn_last_error(), "chunk_fwd: workspace_bytes: expected at least"))
          << flashgdn_last_error();
      cudaFree(w);
    }
  }
  if (!tested) GTEST_SKIP() << "neither kernel asks for a workspace";
}

// chunk_bwd on CUDA needs its workspace: asked for, a missing or short one is rejected before any launch.
TEST(CudaDispatch, ChunkBwdRejectsAMissingWorkspace) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Bufs h;
  DLBuf& q = h.add("q", DType::bf16, {1, 16, 1, 64});
  std::deque<DevBuf> d;
  DevBuf& dq_in = d.emplace_back(q);
  DevBuf& dk_in = d.emplace_back(q);
  DevBuf& dv_in = d.emplace_back(q);
  DevBuf& ddo = d.emplace_back(q);
  DevBuf& gq = d.emplace_back(q);
  DevBuf& gk = d.emplace_back(q);
  DevBuf& gv = d.emplace_back(q);
  flashgdn_chunk_bwd_params p;
  flashgdn_chunk_bwd_params_init(&p);
  p.q = &dq_in.t;
  p.k = &dk_in.t;
  p.v = &dv_in.t;
  p.d_o = &ddo.t;
  p.dq = &gq.t;
  p.dk = &gk.t;
  p.dv = &gv.t;
  size_t ws = 0;
  ASSERT_EQ(flashgdn_chunk_bwd_workspace_size(&p, &ws), FLASHGDN_OK) << flashgdn_last_error();
  ASSERT_GT(ws, 0u);
  EXPECT_EQ(flashgdn_chunk_bwd(&p, nullptr, 0, nullptr), FLASHGDN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flashgdn_last_error(), "chunk_bwd: workspace: expected a device buffer of at least"))
      << flashgdn_last_error();
  void* w = nullptr;
  ASSERT_EQ(cudaMalloc(&w, ws), cudaSuccess);
  EXPECT_EQ(flashgdn_chunk_bwd(&p, w, ws - 1, nullptr), FLASHGDN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(flashgdn_last_error(), "chunk_bwd: workspace_bytes: expected at least"))
      << flashgdn_last_error();
  cudaFree(w);
}

TEST(CudaDispatch, CudaAvailable) {
  EXPECT_EQ(flashgdn_cuda_available(), have_gpu() ? 1 : 0);
}

}  // namespace
}  // namespace flashgdn::test

#endif  // FLASHGDN_WITH_CUDA
