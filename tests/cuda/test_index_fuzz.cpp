// Device-index fuzz: every CUDA op (chunk_fwd, recurrent, recurrent_commit, gating) on seeded random problems whose
// device-resident indices are random and hostile: cu_seqlens not starting at 0, decreasing, past T or negative;
// slots, num_accepted_tokens and intermediate_indices negative, past their tables, at the int32 / int64 extremes.
// The contract (docs/recurrent.md, docs/chunk_fwd.md): the kernels clamp every index, so no value reads or
// writes out of bounds (an out-of-range row is an invalid row); exec.check_indices turns them into errors.
//
// Every device tensor sits between guard bytes. After each call the test checks: a status of ok, or (with
// check_indices, or for a combination a kernel does not implement) invalid_argument / unsupported, never a
// CUDA or internal error; the device still healthy; the guard bytes intact; no input changed; a rejected call
// changed no byte. Run it under compute-sanitizer memcheck to also catch reads outside any buffer
// (scripts/device_run.sh sanitize).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "flashgdn/flashgdn.hpp"
#include "test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashgdn::test {
namespace {

#define FGDN_SKIP_WITHOUT_GPU() \
  if (!flashgdn::cuda_available()) GTEST_SKIP() << "no CUDA device"

#if FLASHGDN_WITH_CUDA

constexpr size_t kGuard = 256;  // bytes on each side; a multiple of 16 keeps the payload 16-byte aligned
constexpr uint8_t kGuardByte = 0xCD;

// A device copy of a host tensor between guard bytes.
struct Guarded {
  const char* name;
  bool input;
  HostTensor h;
  uint8_t* base = nullptr;
  std::vector<uint8_t> before;

  Guarded(const char* n, bool in, HostTensor t) : name(n), input(in), h(std::move(t)) {
    EXPECT_EQ(cudaMalloc(&base, size()), cudaSuccess);
    std::vector<uint8_t> img(size(), kGuardByte);
    std::memcpy(img.data() + kGuard, h.bytes.data(), h.bytes.size());
    EXPECT_EQ(cudaMemcpy(base, img.data(), size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Guarded() { cudaFree(base); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  size_t size() const { return h.bytes.size() + 2 * kGuard; }
  TensorView view() const {
    TensorView v = h.view();
    v.data = base + kGuard;
    v.device = DeviceType::cuda;
    return v;
  }
  std::vector<uint8_t> image() const {
    std::vector<uint8_t> img(size());
    EXPECT_EQ(cudaMemcpy(img.data(), base, size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return img;
  }
};

// The buffers of one call.
struct Call {
  std::deque<Guarded> bufs;
  TensorView add(const char* name, bool input, HostTensor t) {
    if (t.empty_shape()) return TensorView{};
    return bufs.emplace_back(name, input, std::move(t)).view();
  }
  void snapshot() {
    for (auto& b : bufs) b.before = b.image();
  }
  // The checks after a call; `what` names the case in failure messages.
  void check(const Status& st, const std::string& what) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << what;
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::invalid_argument || st.code() == StatusCode::unsupported)
        << what << ": " << st.message();
    for (auto& b : bufs) {
      const std::vector<uint8_t> img = b.image();
      for (size_t i = 0; i < kGuard; ++i) {
        ASSERT_EQ(img[i], kGuardByte) << what << ": guard byte " << i << " before " << b.name << " overwritten";
        ASSERT_EQ(img[img.size() - 1 - i], kGuardByte) << what << ": guard byte after " << b.name << " overwritten";
      }
      if (!st.ok() || b.input)
        EXPECT_TRUE(img == b.before) << what << ": " << b.name << " changed (" << st.message() << ")";
    }
  }
};

struct Workspace {
  void* ptr = nullptr;
  explicit Workspace(size_t bytes) {
    if (bytes) EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
  }
  ~Workspace() { cudaFree(ptr); }
};

// A hostile index value: mostly near the table (so some rows are valid), sometimes an extreme.
int64_t hostile(Rng& r, int64_t n, DType dt) {
  static constexpr int64_t kExtreme[] = {-1,
                                         -2,
                                         std::numeric_limits<int32_t>::max(),
                                         std::numeric_limits<int32_t>::min(),
                                         int64_t(1) << 31,
                                         int64_t(1) << 40,
                                         std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min()};
  const int64_t x = r.integer(0, 5) == 0 ? kExtreme[r.integer(0, 7)] : r.integer(-2, n + 2);
  return dt == DType::i32 ? int64_t(int32_t(x)) : x;
}

void set_index(HostTensor& t, int64_t i, int64_t x) {
  if (t.dtype == DType::i32) {
    const int32_t v = int32_t(x);
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  } else {
    std::memcpy(t.bytes.data() + 8 * i, &x, 8);
  }
}

HostTensor random_tensor(Rng& r, DType dt, std::vector<int64_t> shape, double scale = 1.0) {
  HostTensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, scale * r.normal());
  return t;
}
// Values in [lo, hi): log-decays g in [-1, 0) and write strengths beta in [0, 1) keep the recurrence contractive.
HostTensor uniform_tensor(Rng& r, DType dt, std::vector<int64_t> shape, double lo, double hi) {
  HostTensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, r.uniform(lo, hi));
  return t;
}

// cu_seqlens [N + 1] over T tokens: valid (some rows empty), or hostile in one of several ways.
HostTensor cu_seqlens(Rng& r, int64_t N, int64_t T, DType dt, std::string* kind) {
  HostTensor cu(dt, {N + 1});
  std::vector<int64_t> v(size_t(N + 1), 0);
  for (int64_t n = 1; n <= N; ++n) v[size_t(n)] = std::min<int64_t>(T, v[size_t(n - 1)] + r.integer(0, 2 * T / N + 1));
  const int mode = int(r.integer(0, 4));
  if (mode == 1) {  // every entry random
    for (auto& x : v) x = hostile(r, T, dt);
    *kind = "random cu";
  } else if (mode == 2) {  // decreasing
    std::reverse(v.begin(), v.end());
    *kind = "decreasing cu";
  } else if (mode == 3) {  // one entry past T or negative
    v[size_t(r.integer(0, N))] = r.integer(0, 1) ? T + r.integer(1, 100) : -r.integer(1, 100);
    *kind = "cu past T";
  } else {
    *kind = "valid cu";
  }
  for (int64_t i = 0; i <= N; ++i) set_index(cu, i, v[size_t(i)]);
  return cu;
}

DType pick(Rng& r, std::initializer_list<DType> ds) {
  return *(ds.begin() + r.integer(0, int64_t(ds.size()) - 1));
}

constexpr int kIterations = 48;  // per op: a few minutes under memcheck

TEST(CudaIndexFuzz, ChunkFwdHostileCuSeqlens) {
  FGDN_SKIP_WITHOUT_GPU();
  Rng r(20261);
  int ok = 0;
  for (int it = 0; it < kIterations; ++it) {
    const int64_t N = r.integer(1, 5), T = r.integer(0, 200), Hqk = r.integer(1, 2), Hv = Hqk * r.integer(1, 2);
    const int64_t K = r.integer(0, 1) ? 64 : 128, V = r.integer(0, 1) ? 64 : 128;
    const DType dt = pick(r, {DType::bf16, DType::f16}), idt = pick(r, {DType::i32, DType::i64});
    const StateLayout layout = r.integer(0, 1) ? StateLayout::k_major : StateLayout::v_major;
    const bool kmaj = layout == StateLayout::k_major;
    const int64_t R = kmaj ? K : V, C = kmaj ? V : K;  // the state's two inner dims in this layout
    std::string kind;
    Call c;
    ChunkFwdParams p;
    p.q = c.add("q", true, random_tensor(r, dt, {1, T, Hqk, K}));
    p.k = c.add("k", true, random_tensor(r, dt, {1, T, Hqk, K}, 0.1));
    p.v = c.add("v", true, random_tensor(r, dt, {1, T, Hv, V}));
    p.g = c.add("g", true, uniform_tensor(r, DType::f32, {1, T, Hv}, -1, 0));
    p.beta = c.add("beta", true, uniform_tensor(r, DType::f32, {1, T, Hv}, 0, 1));
    p.cu_seqlens = c.add("cu_seqlens", true, cu_seqlens(r, N, T, idt, &kind));
    if (r.integer(0, 1)) p.initial_state = c.add("initial_state", true, random_tensor(r, DType::f32, {N, Hv, R, C}));
    p.o = c.add("o", false, HostTensor(dt, {1, T, Hv, V}));
    if (r.integer(0, 1)) p.final_state = c.add("final_state", false, HostTensor(DType::f32, {N, Hv, R, C}));
    if (r.integer(0, 2) == 0) {
      p.state_checkpoints = c.add("state_checkpoints", false, HostTensor(DType::f32, {N, 3, Hv, R, C}));
      p.checkpoint_interval = 64;
    }
    p.use_qk_l2norm_in_kernel = true;
    p.state_layout = layout;
    p.exec.check_indices = r.integer(0, 3) == 0;
    const std::string what = "chunk_fwd #" + std::to_string(it) + " (" + kind + ", N=" + std::to_string(N) +
                             " T=" + std::to_string(T) + " K=" + std::to_string(K) + " V=" + std::to_string(V) +
                             (p.exec.check_indices ? ", check_indices" : "") + ")";
    size_t ws = 0;
    Status st = chunk_fwd_workspace_size(p, &ws);
    ASSERT_TRUE(st.ok()) << what << ": " << st.message();
    Workspace w(ws);
    c.snapshot();
    st = chunk_fwd(p, w.ptr, ws, nullptr);
    c.check(st, what);
    if (!p.exec.check_indices) EXPECT_TRUE(st.ok()) << what << ": " << st.message();  // clamped, never rejected
    ok += st.ok();
  }
  EXPECT_GT(ok, kIterations / 2) << "too few calls ran";
}

TEST(CudaIndexFuzz, RecurrentHostileSlotsCountsAndBuffers) {
  FGDN_SKIP_WITHOUT_GPU();
  Rng r(20262);
  int ok = 0;
  static constexpr int64_t kRows[] = {1, 2, 3, 5, 8, 33, 96};
  static constexpr int64_t kTokens[] = {1, 1, 2, 3, 4, 8, 12};
  for (int it = 0; it < 2 * kIterations; ++it) {
    const int64_t N = kRows[r.integer(0, 6)], Tq = kTokens[r.integer(0, 6)];
    const int64_t Hqk = r.integer(1, 2), Hv = Hqk * r.integer(1, 2);
    const int64_t K = r.integer(0, 1) ? 64 : 128, V = r.integer(0, 1) ? 64 : 128;
    const DType dt = pick(r, {DType::f32, DType::bf16, DType::f16}), idt = pick(r, {DType::i32, DType::i64});
    const DType pdt = pick(r, {DType::f32, DType::bf16, DType::f16});
    const StateLayout layout = r.integer(0, 1) ? StateLayout::k_major : StateLayout::v_major;
    const bool kmaj = layout == StateLayout::k_major;
    const int64_t R = kmaj ? K : V, C = kmaj ? V : K;
    const bool varlen = r.integer(0, 2) == 0;
    const int64_t B = varlen ? 1 : N;
    std::string kind = "fixed";
    HostTensor cu;
    int64_t T = Tq;
    if (varlen) {
      T = N * Tq;
      cu = cu_seqlens(r, N, T, idt, &kind);
    }
    const bool two_d = r.integer(0, 1);
    const int64_t T_max = two_d ? std::max<int64_t>(Tq, r.integer(1, 12)) : 0;
    const int64_t slots = r.integer(1, 2 * N * std::max<int64_t>(T_max, 1) + 2);
    Call c;
    RecurrentParams p;
    p.q = c.add("q", true, random_tensor(r, dt, {B, T, Hqk, K}));
    p.k = c.add("k", true, random_tensor(r, dt, {B, T, Hqk, K}, 0.1));
    p.v = c.add("v", true, random_tensor(r, dt, {B, T, Hv, V}));
    p.g = c.add("g", true, uniform_tensor(r, DType::f32, {B, T, Hv}, -1, 0));
    p.beta = c.add("beta", true, uniform_tensor(r, DType::f32, {B, T, Hv}, 0, 1));
    p.cu_seqlens = c.add("cu_seqlens", true, cu);
    p.o = c.add("o", false, HostTensor(dt, {B, T, Hv, V}));
    p.state_pool = c.add("state_pool", false, random_tensor(r, pdt, {slots, Hv, R, C}, 0.1));
    HostTensor si(idt, two_d ? std::vector<int64_t>{N, T_max} : std::vector<int64_t>{N});
    for (int64_t i = 0; i < si.numel(); ++i) set_index(si, i, hostile(r, slots, idt));
    p.state_indices = c.add("state_indices", true, si);
    if (two_d && r.integer(0, 2) != 0) {
      HostTensor na(idt, {N});
      for (int64_t i = 0; i < N; ++i) set_index(na, i, hostile(r, T_max, idt));
      p.num_accepted_tokens = c.add("num_accepted_tokens", true, na);
    }
    if (r.integer(0, 1)) {
      const int64_t n_buf = r.integer(1, N + 2), T_buf = std::max<int64_t>(T_max, varlen ? T : Tq);
      p.intermediate_states = c.add("intermediate_states", false, HostTensor(pdt, {n_buf, T_buf, Hv, R, C}));
      if (r.integer(0, 2) != 0 || n_buf < N) {
        HostTensor ii(idt, {N});
        for (int64_t i = 0; i < N; ++i) set_index(ii, i, hostile(r, n_buf, idt));
        p.intermediate_indices = c.add("intermediate_indices", true, ii);
      }
    }
    p.commit = r.integer(0, 3) != 0;
    p.null_slot_is_invalid = r.integer(0, 1);
    p.use_qk_l2norm_in_kernel = true;
    p.state_layout = layout;
    p.exec.check_indices = r.integer(0, 3) == 0;
    const std::string what = "recurrent #" + std::to_string(it) + " (" + kind + ", N=" + std::to_string(N) +
                             " T=" + std::to_string(T) + (two_d ? " 2-D slots" : " 1-D slots") +
                             " slots=" + std::to_string(slots) + " K=" + std::to_string(K) + " V=" + std::to_string(V) +
                             (p.exec.check_indices ? ", check_indices" : "") + ")";
    size_t ws = 0;
    Status st = recurrent_workspace_size(p, &ws);
    if (!st.ok()) {  // a shape this build rejects (e.g. a row longer than T_max with cu values past T)
      EXPECT_TRUE(st.code() == StatusCode::invalid_argument || st.code() == StatusCode::unsupported)
          << what << ": " << st.message();
      continue;
    }
    Workspace w(ws);
    c.snapshot();
    st = recurrent(p, w.ptr, ws, nullptr);
    c.check(st, what);
    ok += st.ok();
  }
  EXPECT_GT(ok, kIterations / 2) << "too few calls ran";
}

TEST(CudaIndexFuzz, RecurrentCommitHostileIndices) {
  FGDN_SKIP_WITHOUT_GPU();
  Rng r(20263);
  int ok = 0;
  for (int it = 0; it < kIterations; ++it) {
    const int64_t N = r.integer(1, 40), Hv = r.integer(1, 4), slots = r.integer(1, 2 * N + 2);
    const int64_t n_buf = r.integer(1, N + 2), T_buf = r.integer(1, 12);
    const int64_t K = r.integer(0, 1) ? 64 : 128, V = r.integer(0, 1) ? 64 : 128;
    const DType pdt = pick(r, {DType::f32, DType::bf16, DType::f16}), idt = pick(r, {DType::i32, DType::i64});
    Call c;
    RecurrentCommitParams p;
    p.state_pool = c.add("state_pool", false, random_tensor(r, pdt, {slots, Hv, K, V}, 0.1));
    p.intermediate_states = c.add("intermediate_states", true, random_tensor(r, pdt, {n_buf, T_buf, Hv, K, V}, 0.1));
    HostTensor si(idt, {N}), na(idt, {N}), ii(idt, {N});
    for (int64_t i = 0; i < N; ++i) {
      set_index(si, i, hostile(r, slots, idt));
      set_index(na, i, hostile(r, T_buf, idt));
      set_index(ii, i, hostile(r, n_buf, idt));
    }
    p.state_indices = c.add("state_indices", true, si);
    p.num_accepted_tokens = c.add("num_accepted_tokens", true, na);
    if (r.integer(0, 2) != 0 || n_buf < N) p.intermediate_indices = c.add("intermediate_indices", true, ii);
    p.null_slot_is_invalid = r.integer(0, 1);
    p.exec.check_indices = r.integer(0, 3) == 0;
    const std::string what = "recurrent_commit #" + std::to_string(it) + " (N=" + std::to_string(N) +
                             " slots=" + std::to_string(slots) + (p.exec.check_indices ? ", check_indices" : "") + ")";
    c.snapshot();
    const Status st = recurrent_commit(p, nullptr);
    c.check(st, what);
    if (!p.exec.check_indices) EXPECT_TRUE(st.ok()) << what << ": " << st.message();
    ok += st.ok();
  }
  EXPECT_GT(ok, kIterations / 2) << "too few calls ran";
}

// Gating has no index tensor; it runs here on random shapes (empty ones included) so that every CUDA kernel
// goes through the same guard-byte checks under memcheck.
TEST(CudaIndexFuzz, GatingRandomShapes) {
  FGDN_SKIP_WITHOUT_GPU();
  Rng r(20264);
  int ok = 0;
  for (int it = 0; it < kIterations; ++it) {
    const int64_t rows = r.integer(0, 700), Hv = r.integer(1, 64);
    const DType dt = pick(r, {DType::f32, DType::bf16, DType::f16});
    Call c;
    GatingParams p;
    p.A_log = c.add("A_log", true, random_tensor(r, DType::f32, {Hv}, 0.5));
    p.a = c.add("a", true, random_tensor(r, dt, {rows, Hv}));
    if (r.integer(0, 1)) p.dt_bias = c.add("dt_bias", true, random_tensor(r, DType::f32, {Hv}));
    if (r.integer(0, 1)) {
      p.b = c.add("b", true, random_tensor(r, dt, {rows, Hv}));
      p.beta = c.add("beta", false, HostTensor(dt, {rows, Hv}));
    }
    p.g = c.add("g", false, HostTensor(DType::f32, {rows, Hv}));
    const std::string what =
        "gating #" + std::to_string(it) + " (rows=" + std::to_string(rows) + " Hv=" + std::to_string(Hv) + ")";
    c.snapshot();
    const Status st = gating(p, nullptr);
    c.check(st, what);
    ok += st.ok();
  }
  EXPECT_GT(ok, kIterations / 2) << "too few calls ran";
}

#else  // a build without CUDA: the same tests, skipping visibly

TEST(CudaIndexFuzz, ChunkFwdHostileCuSeqlens) {
  FGDN_SKIP_WITHOUT_GPU();
}
TEST(CudaIndexFuzz, RecurrentHostileSlotsCountsAndBuffers) {
  FGDN_SKIP_WITHOUT_GPU();
}
TEST(CudaIndexFuzz, RecurrentCommitHostileIndices) {
  FGDN_SKIP_WITHOUT_GPU();
}
TEST(CudaIndexFuzz, GatingRandomShapes) {
  FGDN_SKIP_WITHOUT_GPU();
}

#endif

}  // namespace
}  // namespace flashgdn::test
