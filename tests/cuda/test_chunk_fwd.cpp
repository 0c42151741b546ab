// CUDA chunk_fwd (the fused chunked prefill) through the public API on CUDA tensors, against the CPU oracle
// (the same API on CPU tensors, fp64 recurrence) on fresh random inputs with NaN-poisoned outputs.
// Tolerances: gdn-math §10.3, bf16 I/O and tensor-core operands: relative Frobenius error <= 5e-3 for o and
// the final state; the per-head maximum is reported and bounded too. Cases: gdn-math §10.4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>

#include <functional>

#include "api/plan.hpp"
#include "cuda/chunk_fwd/chunk_fwd.hpp"
#endif

namespace flashgdn::test {
namespace {

#if FLASHGDN_WITH_CUDA

struct GpuCase {
  GdnCase c;
  bool gate_in_kernel = false, beta_sigmoid = false, neg_eig = false;
  float scale = 0.f;
  int64_t ckpt_interval = 0;
  int special = 0;  // 1: identical keys, beta = 1, g = 0; 2: g = -30; 3: one tiny key (1e-5); 4: nearly parallel keys;
                    // 5: 4 with beta in [1.95, 2]; 6: 1 with beta = 2; 7: 1 with beta = 1.999
};

GpuCase gcase(const std::string& name, int64_t B, int64_t T, int64_t Hqk, int64_t Hv, int64_t K, int64_t V) {
  GpuCase g;
  g.c.name = name;
  g.c.B = B, g.c.T = T, g.c.Hqk = Hqk, g.c.Hv = Hv, g.c.K = K, g.c.V = V;
  g.c.dtype = DType::bf16;
  g.c.seed = 7000 + uint64_t(T) * 31 + uint64_t(Hv);
  return g;
}

struct Inputs {
  GdnInputs in;
  HostTensor A_log, dt_bias;
};

Inputs make_case_inputs(const GpuCase& gc) {
  Inputs x;
  x.in = make_inputs(gc.c);
  GdnInputs& in = x.in;
  Rng rng(gc.c.seed + 99);
  const int64_t K = gc.c.K;
  // identical keys, beta = 1 (6: 2, 7: 1.999), g = 0 (the unstable-inverse detector, §5.7)
  if (gc.special == 1 || gc.special == 6 || gc.special == 7) {
    for (int64_t row = 1; row < in.k.numel() / K; ++row)
      for (int64_t i = 0; i < K; ++i) in.k.set(row * K + i, in.k.get(i));
    in.beta.fill(gc.special == 1 ? 1.0 : gc.special == 6 ? 2.0 : 1.999);
    in.g.fill(0.0);
  } else if (gc.special == 2) {
    in.g.fill(-30.0);
  } else if (gc.special == 3) {  // a key of norm ~1e-5: the l2 norm's epsilon decides (§1.4)
    for (int64_t i = 0; i < K; ++i) in.k.set(5 * K + i, 1e-5 * rng.normal());
  } else if (gc.special == 4 || gc.special == 5) {
    // k_t = k_0 + 0.05 noise per q/k head (k_0: the head's first key), beta in [0.95, 1] (5: [1.95, 2])
    const int64_t Hqk = gc.c.Hqk;
    for (int64_t row = Hqk; row < in.k.numel() / K; ++row)
      for (int64_t i = 0; i < K; ++i) in.k.set(row * K + i, in.k.get((row % Hqk) * K + i) + 0.05 * rng.normal());
    const double b0 = gc.special == 4 ? 1.0 : 2.0;
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, b0 - 0.05 * rng.uniform());
  }
  if (gc.gate_in_kernel) {  // g holds raw a
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, rng.normal());
    x.A_log = HostTensor(DType::f32, {gc.c.Hv});
    x.dt_bias = HostTensor(DType::f32, {gc.c.Hv});
    for (int64_t h = 0; h < gc.c.Hv; ++h) {
      x.A_log.set(h, std::log(rng.uniform(0.5, 4.5)));
      x.dt_bias.set(h, 0.5 * rng.normal());
    }
  }
  if (gc.beta_sigmoid)  // beta holds raw b
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, rng.normal());
  return x;
}

int64_t num_checkpoints(const GpuCase& gc) {
  if (gc.ckpt_interval <= 0) return 0;
  int64_t longest = gc.c.seqlens.empty() ? gc.c.T : 0;
  for (auto l : gc.c.seqlens) longest = std::max(longest, l);
  return longest / gc.ckpt_interval;
}

HostTensor state_like(const GpuCase& gc, DType dt, int64_t lead) {
  const auto& c = gc.c;
  return c.layout == StateLayout::k_major ? HostTensor(dt, {lead, c.Hv, c.K, c.V})
                                          : HostTensor(dt, {lead, c.Hv, c.V, c.K});
}

void set_common(ChunkFwdParams& p, const GpuCase& gc) {
  p.use_qk_l2norm_in_kernel = gc.c.l2norm;
  p.state_layout = gc.c.layout;
  p.scale = gc.scale;
  p.gate.use_gate_in_kernel = gc.gate_in_kernel;
  p.gate.use_beta_sigmoid_in_kernel = gc.beta_sigmoid;
  p.gate.allow_neg_eigval = gc.neg_eig;
  p.checkpoint_interval = gc.ckpt_interval;
}

struct Result {
  HostTensor o, hT, ck;
};

// The oracle: public API on CPU tensors, fp64 recurrence, inputs cast to f64 (same values as the GPU's).
Result run_oracle(const GpuCase& gc, const Inputs& x) {
  const GdnCase& c = gc.c;
  const GdnInputs& in = x.in;
  HostTensor q = in.q.cast(DType::f64), k = in.k.cast(DType::f64), v = in.v.cast(DType::f64);
  HostTensor g = in.g.cast(DType::f64), beta = in.beta.cast(DType::f64);
  HostTensor h0 = in.h0.empty_shape() ? HostTensor() : in.h0.cast(DType::f64);
  HostTensor alog = x.A_log.empty_shape() ? HostTensor() : x.A_log.cast(DType::f64);
  HostTensor dtb = x.dt_bias.empty_shape() ? HostTensor() : x.dt_bias.cast(DType::f64);
  Result r;
  r.o = HostTensor(DType::f64, v.shape);
  r.o.fill_nan();
  r.hT = state_like(gc, DType::f64, c.N());
  r.hT.fill_nan();
  const int64_t nck = num_checkpoints(gc);
  if (nck > 0) {
    r.ck = c.layout == StateLayout::k_major ? HostTensor(DType::f64, {c.N(), nck, c.Hv, c.K, c.V})
                                            : HostTensor(DType::f64, {c.N(), nck, c.Hv, c.V, c.K});
    r.ck.fill(0.0);
  }
  ChunkFwdParams p;
  p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = beta.view();
  p.initial_state = h0.view(), p.cu_seqlens = in.cu.view(), p.A_log = alog.view(), p.dt_bias = dtb.view();
  p.o = r.o.view(), p.final_state = r.hT.view(), p.state_checkpoints = r.ck.view();
  set_common(p, gc);
  p.exec.cpu_fp64 = true;
  p.exec.cpu_algo = CpuAlgo::recurrent;
  p.exec.cpu_threads = 2;
  const Status st = chunk_fwd(p);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) {
    if (bytes) {
      EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    }
  }
  ~DevMem() {
    if (p) cudaFree(p);
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

size_t nbytes(const HostTensor& t) {
  return t.bytes.size();
}

void upload(DevMem& d, const HostTensor& t) {
  if (d.p) {
    ASSERT_EQ(cudaMemcpy(d.p, t.data(), nbytes(t), cudaMemcpyHostToDevice), cudaSuccess);
  }
}

TensorView dev_view(void* p, const HostTensor& t) {
  TensorView v = t.view();
  if (!v.defined()) return v;
  v.data = p;
  v.device = DeviceType::cuda;
  return v;
}

// The GPU under test: the same inputs (bf16 q, k, v; f32 g, beta, h0), outputs poisoned with NaN.
struct GpuRun {
  const GpuCase& gc;
  const Inputs& x;
  HostTensor o, hT, ck;  // host shapes of the outputs
  DevMem dq, dk, dv, dg, db, dh0, dcu, dalog, ddtb, dout, dht, dck;
  ChunkFwdParams p;
  GpuRun(const GpuCase& gc_, const Inputs& x_)
      : gc(gc_),
        x(x_),
        o(x_.in.v.dtype, x_.in.v.shape),
        hT(state_like(gc_, DType::f32, gc_.c.N())),
        ck(num_checkpoints(gc_) > 0
               ? (gc_.c.layout == StateLayout::k_major
                      ? HostTensor(DType::f32, {gc_.c.N(), num_checkpoints(gc_), gc_.c.Hv, gc_.c.K, gc_.c.V})
                      : HostTensor(DType::f32, {gc_.c.N(), num_checkpoints(gc_), gc_.c.Hv, gc_.c.V, gc_.c.K}))
               : HostTensor()),
        dq(nbytes(x_.in.q)),
        dk(nbytes(x_.in.k)),
        dv(nbytes(x_.in.v)),
        dg(nbytes(x_.in.g)),
        db(nbytes(x_.in.beta)),
        dh0(nbytes(x_.in.h0)),
        dcu(nbytes(x_.in.cu)),
        dalog(nbytes(x_.A_log)),
        ddtb(nbytes(x_.dt_bias)),
        dout(nbytes(o)),
        dht(nbytes(hT)),
        dck(nbytes(ck)) {
    upload(dq, x.in.q), upload(dk, x.in.k), upload(dv, x.in.v), upload(dg, x.in.g), upload(db, x.in.beta);
    upload(dh0, x.in.h0), upload(dcu, x.in.cu), upload(dalog, x.A_log), upload(ddtb, x.dt_bias);
    p.q = dev_view(dq.p, x.in.q), p.k = dev_view(dk.p, x.in.k), p.v = dev_view(dv.p, x.in.v);
    p.g = dev_view(dg.p, x.in.g), p.beta = dev_view(db.p, x.in.beta), p.initial_state = dev_view(dh0.p, x.in.h0);
    p.cu_seqlens = dev_view(dcu.p, x.in.cu), p.A_log = dev_view(dalog.p, x.A_log);
    p.dt_bias = dev_view(ddtb.p, x.dt_bias);
    p.o = dev_view(dout.p, o), p.final_state = dev_view(dht.p, hT), p.state_checkpoints = dev_view(dck.p, ck);
    set_common(p, gc);
  }
  void poison() {
    EXPECT_EQ(cudaMemset(dout.p, 0xff, nbytes(o)), cudaSuccess);  // NaN in bf16 / f16 / f32
    EXPECT_EQ(cudaMemset(dht.p, 0xff, nbytes(hT)), cudaSuccess);
    if (dck.p) {
      EXPECT_EQ(cudaMemset(dck.p, 0xff, nbytes(ck)), cudaSuccess);
    }
  }
  Status launch(void* stream = nullptr) {
    size_t ws = 0;
    Status st = chunk_fwd_workspace_size(p, &ws);
    if (!st.ok()) return st;
    if (ws > ws_bytes) {
      if (ws_ptr) cudaFree(ws_ptr);
      if (cudaMalloc(&ws_ptr, ws) != cudaSuccess) return Status(StatusCode::cuda_error, "cudaMalloc workspace");
      ws_bytes = ws;
    }
    return chunk_fwd(p, ws_ptr, ws_bytes, stream);
  }
  void fetch() {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(o.data(), dout.p, nbytes(o), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(hT.data(), dht.p, nbytes(hT), cudaMemcpyDeviceToHost), cudaSuccess);
    if (dck.p) {
      EXPECT_EQ(cudaMemcpy(ck.data(), dck.p, nbytes(ck), cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }
  ~GpuRun() {
    if (ws_ptr) cudaFree(ws_ptr);
  }
  void* ws_ptr = nullptr;
  size_t ws_bytes = 0;
};

// Output rows of tokens outside every sequence (varlen slack past cu[N]) are not written: compare the rows
// inside sequences only (all rows here, the generator packs the sequences densely).

void expect_close(const GpuCase& gc, const Result& ref, GpuRun& run, double tol) {
  const GdnCase& c = gc.c;
  const double eo = rel_err(run.o, ref.o);
  const double ho = max_head_err(run.o, ref.o, c.Hv, [&](int64_t i) { return (i / c.V) % c.Hv; });
  const int64_t sblk = c.K * c.V;
  const double eh = rel_err(run.hT, ref.hT);
  const double hh = max_head_err(run.hT, ref.hT, c.N() * c.Hv, [&](int64_t i) { return i / sblk; });
  EXPECT_LE(eo, tol) << c.name << ": o rel err";
  EXPECT_LE(ho, 2 * tol) << c.name << ": o worst head";
  EXPECT_LE(eh, tol) << c.name << ": hT rel err";
  EXPECT_LE(hh, 2 * tol) << c.name << ": hT worst head";
  if (!run.ck.empty_shape()) {
    // entries past a sequence's length are not written: compare the written ones
    const int64_t nck = run.ck.shape[1], blk = c.Hv * sblk;
    double num = 0, den = 0;
    for (int64_t n = 0; n < c.N(); ++n) {
      const int64_t len = c.seqlens.empty() ? c.T : c.seqlens[size_t(n)];
      for (int64_t e = 0; e < nck && (e + 1) * gc.ckpt_interval <= len; ++e)
        for (int64_t i = 0; i < blk; ++i) {
          const double a = run.ck.get((n * nck + e) * blk + i), b = ref.ck.get((n * nck + e) * blk + i);
          num += (a - b) * (a - b);
          den += b * b;
        }
    }
    const double ec = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    EXPECT_LE(ec, tol) << c.name << ": checkpoints rel err";
  }
  // Length-0 sequences: hT == h0 exactly (or exactly 0 without h0).
  for (int64_t n = 0; n < c.N(); ++n) {
    if (c.seqlens.empty() || c.seqlens[size_t(n)] != 0) continue;
    for (int64_t i = 0; i < c.Hv * sblk; ++i) {
      const double want = run.x.in.h0.empty_shape() ? 0.0 : run.x.in.h0.get(n * c.Hv * sblk + i);
      ASSERT_EQ(run.hT.get(n * c.Hv * sblk + i), want) << c.name << ": empty sequence " << n;
    }
  }
  std::printf("[chunk_fwd cuda %-7s] %-28s o %.2e (worst head %.2e)  hT %.2e (worst head %.2e)\n",
              run.p.exec.chunk_fwd_segments == 0 ? "auto" : std::to_string(run.p.exec.chunk_fwd_segments).c_str(),
              c.name.c_str(), eo, ho, eh, hh);
}

// Varlen slack: the last sequence of `gc` loses its last `slack` rows to the rows past cu_seqlens[N], which no
// sequence owns (the shapes come from x: T keeps them). Returns the device's copy of the inputs: NaN in the slack
// rows (no kernel may read them).
Inputs cut_slack(GpuCase& gc, Inputs& x, int64_t slack) {
  const int64_t Tt = gc.c.total_T();
  if (slack > 0) {
    const int64_t N = gc.c.N();
    EXPECT_GE(gc.c.seqlens.back(), slack);
    x.in.cu.set(N, x.in.cu.get(N) - double(slack));
    gc.c.seqlens.back() -= slack;
  }
  Inputs xd = x;
  for (HostTensor* t : {&xd.in.q, &xd.in.k, &xd.in.v, &xd.in.g, &xd.in.beta}) {
    const int64_t row = t->numel() / Tt;
    for (int64_t i = (Tt - slack) * row; i < Tt * row; ++i) t->set(i, std::nan(""));
  }
  return xd;
}

// The slack rows' o stays poisoned (never written); then they are zeroed in both results, so that the comparison
// covers the sequences' rows only.
void expect_slack_unwritten(const GpuCase& gc, Result& ref, GpuRun& run, int64_t slack) {
  const int64_t Tt = run.o.shape[1], row = gc.c.Hv * gc.c.V;
  for (int64_t i = (Tt - slack) * row; i < Tt * row; ++i) {
    EXPECT_TRUE(std::isnan(run.o.get(i))) << gc.c.name << ": slack row element " << i << " written";
    run.o.set(i, 0.0), ref.o.set(i, 0.0);
  }
}

// Runs one case through the GPU (with the segment split forced to `segments` through exec.chunk_fwd_segments: 0 the
// plan's choice, 1 off) and the oracle; `slack` rows past cu_seqlens[N] as in cut_slack. The state pass is the
// plan's for the head dims: wgmma where K = V = 128, mma.sync where K or V = 64; the cases cover both.
void check(GpuCase gc, int segments = 0, double tol = 5e-3, int64_t slack = 0) {
  Inputs x = make_case_inputs(gc);
  const Inputs xd = cut_slack(gc, x, slack);
  Result ref = run_oracle(gc, x);
  GpuRun run(gc, xd);
  run.p.exec.chunk_fwd_segments = segments;
  run.poison();
  const Status st = run.launch();
  ASSERT_TRUE(st.ok()) << st.message();
  run.fetch();
  expect_slack_unwritten(gc, ref, run, slack);
  expect_close(gc, ref, run, tol);
}

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaChunkFwd, LengthsAroundTheChunk) {
  REQUIRE_GPU();
  for (int64_t T : {1, 63, 64, 65, 131}) check(gcase("len" + std::to_string(T), 1, T, 2, 4, 128, 128));
}

TEST(CudaChunkFwd, VarlenWithEmptySequences) {
  REQUIRE_GPU();
  GpuCase g = gcase("varlen_1_63_64_65_0_130", 1, 0, 2, 4, 128, 128);
  g.c.seqlens = {1, 63, 64, 65, 0, 130};
  check(g);
  g = gcase("varlen_empty_start_mid_end", 1, 0, 1, 2, 64, 64);
  g.c.seqlens = {0, 70, 0, 5, 0};
  check(g);
  g.c.has_h0 = false;
  g.c.name = "varlen_empty_no_h0";
  check(g);
}

// Many short sequences (0 to 89 tokens, every seventh empty): the intra pass's slot search (chunk_of_slot) probes
// every cu_seqlens entry at once up to N = 127 (lanes l + 32 j, j < 4) and falls back to the binary search from
// N = 128; both sides of that bound, GQA 2, K = V = 64 and 128.
TEST(CudaChunkFwd, VarlenManySequences) {
  REQUIRE_GPU();
  for (int N : {100, 127, 128, 160}) {
    GpuCase g = gcase("varlen_many_" + std::to_string(N), 1, 0, 1, 2, N % 2 ? 128 : 64, N % 2 ? 128 : 64);
    for (int n = 0; n < N; ++n) g.c.seqlens.push_back(n % 7 == 3 ? 0 : (37 * n + 11) % 90);
    check(g);
  }
}

TEST(CudaChunkFwd, BatchGqaAndShapes) {
  REQUIRE_GPU();
  check(gcase("B3_gqa2_k128v128", 3, 90, 2, 4, 128, 128));
  check(gcase("gqa4_k64v128", 1, 100, 1, 4, 64, 128));
  check(gcase("k128v64", 2, 77, 2, 2, 128, 64));
  check(gcase("k64v64", 2, 130, 2, 4, 64, 64));
}

TEST(CudaChunkFwd, TransposedStateNonSymmetricH0) {
  REQUIRE_GPU();
  GpuCase g = gcase("vmajor_k128v128", 1, 150, 2, 4, 128, 128);
  g.c.layout = StateLayout::v_major;
  check(g);
  g = gcase("vmajor_k64v128", 1, 150, 2, 2, 64, 128);
  g.c.layout = StateLayout::v_major;
  check(g);
}

TEST(CudaChunkFwd, Fp16Io) {
  REQUIRE_GPU();
  GpuCase g = gcase("fp16_k128", 1, 130, 2, 4, 128, 128);
  g.c.dtype = DType::f16;
  check(g);
}

TEST(CudaChunkFwd, DiscriminatingCases) {
  REQUIRE_GPU();
  GpuCase g = gcase("g_minus30", 1, 130, 2, 4, 128, 128);
  g.special = 2;
  check(g);
  // Identical keys, beta = 1, g = 0: the unstable whole-chunk doubling inverse gives errors ~1e9 here (§5.7);
  // a stable inverse stays O(1e-3). The two-pass kernel (A diag(beta) as hi + lo, the l2 norms as fp32 row
  // scalings) is held to 5e-3 (H200: o 2.7e-3); the fused `wide` kernel rounds the normalized keys to bf16 before
  // K K^T and measured 3.3e-3 (the first fused kernel, bf16 A without lo part, 1.3e-2: the -|k|^2 subdiagonal
  // rounded coherently over the chunk, tests/cuda/standalone_chunk/emulate_numerics.py), so it keeps 1e-2.
  g = gcase("identical_keys_beta1_g0", 1, 130, 2, 4, 128, 128);
  g.special = 1;
  check(g, 0, 5e-3);
  g = gcase("scale_0.3_no_h0", 1, 100, 2, 4, 128, 128);
  g.scale = 0.3f;
  g.c.has_h0 = false;
  check(g);
  g = gcase("tiny_key_l2norm_eps", 1, 64, 2, 4, 128, 128);
  g.special = 3;
  check(g);
  g = gcase("no_l2norm_strong_gate", 2, 90, 2, 4, 128, 128);
  g.c.l2norm = false;
  g.c.g_scale = 3;
  check(g);
}

// Identical keys, beta = 1, g = 0 with a full last chunk: the final state of a chunk is a telescoping sum
// K^T diag(dk) U over its rows, and rounding diag(dk) U to 16 bits row by row leaves errors that do not cancel (hT
// ~1.3e-2); a short last chunk (T = 130 above) hides it. The state passes apply diag(dk) U as hi + lo (~1.6e-3).
// K = V = 64 takes the mma.sync state pass, the forced split (3 segments) the summary mode, whose update is the same.
TEST(CudaChunkFwd, IdenticalKeysFullLastChunk) {
  REQUIRE_GPU();
  GpuCase g = gcase("identical_keys_full_last_chunk", 1, 128, 2, 4, 128, 128);
  g.special = 1;
  check(g);
  g = gcase("identical_keys_t64_k64", 1, 64, 2, 4, 64, 64);
  g.special = 1;
  check(g);
  g = gcase("identical_keys_t192_split3", 1, 192, 2, 4, 128, 128);
  g.special = 1;
  check(g, 3);
}

// Nearly parallel keys (k_t = k_0 + 0.05 noise, l2norm, beta in [0.95, 1], g in [-0.01, 0], full chunks): the update
// K^T diag(dk) U and P U telescope over U's rows, so the 16-bit roundings of A diag(beta) and P add up coherently
// (host emulation, cases w6 and w10: o 2.7e-3 .. 2.9e-3 with the record's hi + lo parts, 1.3e-2 with one bf16 part
// each). K = V = 128 on the wgmma state pass, unsplit and split (the summary mode); K = V = 64 on the mma.sync pass.
TEST(CudaChunkFwd, NearlyParallelKeys) {
  REQUIRE_GPU();
  GpuCase g = gcase("near_parallel_keys_k128", 1, 256, 2, 4, 128, 128);
  g.c.g_scale = 0.01;
  g.special = 4;
  for (int segs : {1, 2}) check(g, segs);
  g = gcase("near_parallel_keys_k64", 1, 256, 2, 4, 64, 64);
  g.c.g_scale = 0.01;
  g.special = 4;
  for (int segs : {1, 2}) check(g, segs);
}

// allow_neg_eigval's extreme, beta near 2: a chunk transition with an eigenvalue near -1, so nothing contracts the
// chain's roundings over the walk, and R = V - diag(ek) K S0 must be hi + lo in U = A diag(beta) R (host emulation,
// cases w12 and w13: o 9.6e-3 / 2.6e-2 with R in one 16-bit part, 2.1e-3 / 2.3e-3 split; at K = V = 64, w14 and
// w15: 9.8e-3 / 2.9e-2 and 2.1e-3 / 2.2e-3). Unsplit and split on the wgmma state pass (K = V = 128), and the mma.sync
// pass (K = V = 64).
TEST(CudaChunkFwd, BetaNearTwo) {
  REQUIRE_GPU();
  GpuCase g = gcase("beta2_near_parallel_keys_k128", 1, 320, 2, 4, 128, 128);
  g.c.g_scale = 0.01;
  g.special = 5;
  for (int segs : {1, 2}) check(g, segs);
  g = gcase("beta2_identical_keys_k128", 1, 320, 2, 4, 128, 128);
  g.special = 6;
  for (int segs : {1, 2}) check(g, segs);
  g = gcase("beta2_near_parallel_keys_k64", 1, 320, 2, 4, 64, 64);
  g.c.g_scale = 0.01;
  g.special = 5;
  for (int segs : {1, 2}) check(g, segs);
  g = gcase("beta2_identical_keys_k64", 1, 320, 2, 4, 64, 64);
  g.special = 6;
  check(g);
}

// beta just below 2 with identical keys and g = 0 on a long walk (32 chunks): the chunk transition along the key,
// (1 - beta)^n, is near -1 or 1 only through the cancellation of A diag(beta)'s entries (~ +-2, not powers of two),
// so a per-chunk error of them adds up linearly over the walk (two 16-bit parts: o 1.1e-2, hT 1.4e-2 at T = 2048 in
// the host emulation, w26-w28). Unsplit and split on the wgmma pass, and the mma.sync pass.
TEST(CudaChunkFwd, BetaNearTwoLongWalk) {
  REQUIRE_GPU();
  GpuCase g = gcase("beta1999_identical_keys_t2048_k128", 1, 2048, 1, 1, 128, 128);
  g.special = 7;
  for (int segs : {1, 4}) check(g, segs);
  g = gcase("beta1999_identical_keys_t2048_k64", 1, 2048, 1, 1, 64, 64);
  g.special = 7;
  check(g, 1);
}

TEST(CudaChunkFwd, FusedGateAndBetaSigmoid) {
  REQUIRE_GPU();
  GpuCase g = gcase("gate_in_kernel_neg_eig", 1, 140, 2, 4, 128, 128);
  g.gate_in_kernel = g.beta_sigmoid = g.neg_eig = true;
  check(g);
}

// The intra pass forms value head j + 1's gamma and beta during head j's inverse, into the other of two buffers: an
// odd GQA group (3) puts heads 0 and 2 in the same buffer, and per-head fused gates (A_log, dt_bias differ by head)
// tell the heads apart. Fixed length and varlen with empty sequences, K = V = 128 (bf16) and 64 (f16), split on/off.
TEST(CudaChunkFwd, GqaGroupOfThreeGatesOneHeadAhead) {
  REQUIRE_GPU();
  check(gcase("gqa3_k128v128", 2, 150, 2, 6, 128, 128));
  GpuCase g = gcase("gqa3_k64v64_f16_gate_varlen", 1, 0, 1, 3, 64, 64);
  g.c.dtype = DType::f16;
  g.c.seqlens = {0, 70, 129, 0, 1};
  g.gate_in_kernel = g.beta_sigmoid = true;
  check(g, 1);
  check(g, 3);
}

// The intra pass builds each warp's blocks of L and P from compile-time block positions (kWarpProducts), shares
// the decays of the L and P blocks at the same position, and each warp inverts the diagonal block of L it built
// (no barrier between L and the diagonal inverses). A GQA group of four (the 4 x 8192, Hv = 64 benchmark's ratio),
// per-head fused gates, varlen chunks that end inside a chunk and empty sequences; K = V = 128 (bf16) and K = 64,
// V = 128 (f16); split off and forced.
TEST(CudaChunkFwd, GqaGroupOfFourVarlen) {
  REQUIRE_GPU();
  GpuCase g = gcase("gqa4_k128v128_varlen_gate", 1, 0, 2, 8, 128, 128);
  g.c.seqlens = {129, 0, 64, 1, 200, 63};
  g.gate_in_kernel = g.beta_sigmoid = true;
  check(g, 1);
  check(g, 3);
  g = gcase("gqa4_k64v128_f16_varlen", 1, 0, 1, 4, 64, 128);
  g.c.dtype = DType::f16;
  g.c.seqlens = {65, 130, 0, 7};
  check(g, 1);
  check(g, 2);
}

// A GQA group shares one CTA of the intra pass (the products once, then the group's value heads in turn, each
// head's gates formed one head ahead into the other of two buffers): no value head's results may depend on the
// grouping. The same value heads with q, k repeated per value head (Hqk = Hv, group 1) must give bitwise the same o
// and final state (every per-head operation is the same code in the same order); both runs are NaN-poisoned and
// checked finite, so two failed runs cannot agree. Split off and forced.
TEST(CudaChunkFwd, GqaGroupingIsBitwiseNeutral) {
  REQUIRE_GPU();
  GpuCase g = gcase("gqa4_grouped", 1, 0, 2, 8, 128, 128);
  g.c.seqlens = {130, 0, 64, 33};
  g.gate_in_kernel = g.beta_sigmoid = true;
  const Inputs x = make_case_inputs(g);
  GpuCase u = g;
  u.c.Hqk = g.c.Hv;
  u.c.name = "gqa4_ungrouped";
  Inputs y = x;
  const int64_t rows = x.in.q.numel() / (g.c.Hqk * g.c.K), grp = g.c.Hv / g.c.Hqk;  // [B, T, Hqk, K] -> Hv heads
  for (HostTensor* t : {&y.in.q, &y.in.k}) {
    const HostTensor& src = t == &y.in.q ? x.in.q : x.in.k;
    *t = HostTensor(src.dtype, {src.shape[0], src.shape[1], g.c.Hv, g.c.K});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < g.c.Hv; ++h)
        for (int64_t i = 0; i < g.c.K; ++i)
          t->set((r * g.c.Hv + h) * g.c.K + i, src.get((r * g.c.Hqk + h / grp) * g.c.K + i));
  }
  for (int segments : {1, 3}) {
    GpuRun a(g, x), b(u, y);
    a.p.exec.chunk_fwd_segments = b.p.exec.chunk_fwd_segments = segments;
    for (GpuRun* r : {&a, &b}) {
      r->poison();
      const Status st = r->launch();
      ASSERT_TRUE(st.ok()) << st.message();
      r->fetch();
      for (int64_t i = 0; i < r->o.numel(); ++i) ASSERT_TRUE(std::isfinite(r->o.get(i))) << "o[" << i << "]";
      for (int64_t i = 0; i < r->hT.numel(); ++i) ASSERT_TRUE(std::isfinite(r->hT.get(i))) << "hT[" << i << "]";
    }
    EXPECT_TRUE(a.o.bytes == b.o.bytes) << "o differs between the grouped and the ungrouped run, split " << segments;
    EXPECT_TRUE(a.hT.bytes == b.hT.bytes) << "hT differs between the grouped and the ungrouped run, split " << segments;
  }
}

TEST(CudaChunkFwd, Checkpoints) {
  REQUIRE_GPU();
  GpuCase g = gcase("ckpt128_varlen", 1, 0, 2, 4, 128, 128);
  g.c.seqlens = {300, 0, 128, 77};
  g.ckpt_interval = 128;
  check(g);
  check(g, 3);
  g = gcase("ckpt64_vmajor", 1, 200, 2, 2, 128, 128);
  g.c.layout = StateLayout::v_major;
  g.ckpt_interval = 64;
  check(g);
}

// The wgmma state pass (K = V = 128: two warpgroups of 64 state columns each, the chunk loads double-buffered behind
// mbarriers, the update and P U in separate wgmma groups) over a long chain: an odd chunk count per segment (both
// buffers in both barrier phases), a partial last chunk, checkpoints every 5 chunks, unsplit and split (the summary
// mode); then f16, a V-major state and the fused gate (fast decay: the summaries' decay windows).
TEST(CudaChunkFwd, WgmmaStatePassLongChain) {
  REQUIRE_GPU();
  GpuCase g = gcase("wg_long_chain", 1, 64 * 45 + 17, 2, 4, 128, 128);
  g.c.g_scale = 0.05;  // weak decay: the state carries across the whole chain and across the segments
  g.ckpt_interval = 320;
  for (int segs : {1, 3, 0}) check(g, segs);
  g.c.name = "wg_long_chain_f16_vmajor_gate";
  g.c.dtype = DType::f16;
  g.c.layout = StateLayout::v_major;
  g.gate_in_kernel = g.beta_sigmoid = true;
  for (int segs : {1, 4}) check(g, segs);
}

// The wgmma state pass stores o by TMA (a 64-row box per chunk and value half) where a chunk has 64 rows or ends at
// the tensor's end (the box is clipped there), and row by row where it ends inside the tensor: a box there would
// write the next sequence's rows. Varlen with every kind of boundary: full chunks followed by the next sequence,
// partial chunks followed by the next sequence (37, 191, 65), a one-row sequence, the last sequence ending at the
// tensor's end on a chunk boundary, then on a partial chunk; fixed length B = 3 with a partial last chunk (clipped per
// batch: the box must not reach the next batch's rows); unsplit and split (the split's forward mode, and its segments
// start inside sequences).
TEST(CudaChunkFwd, WgmmaOutputStoresAtSequenceBoundaries) {
  REQUIRE_GPU();
  GpuCase g = gcase("wg_o_varlen_ends_on_chunk", 1, 0, 2, 4, 128, 128);
  g.c.seqlens = {64, 200, 128, 37, 1, 191, 65, 192};
  g.c.g_scale = 0.05;  // weak decay: an o row written from the wrong chunk or sequence shows
  for (int segs : {1, 3}) check(g, segs);
  g.c.name = "wg_o_varlen_ends_partial";
  g.c.seqlens = {130, 64, 0, 77};
  for (int segs : {1, 2}) check(g, segs);
  g.c.name = "wg_o_varlen_slack";  // the last sequence ends inside the tensor: slack rows follow (never written)
  g.c.seqlens = {128, 100, 256};
  for (int segs : {1, 2}) check(g, segs, 5e-3, 60);  // the last sequence: 196 rows, then 60 slack rows
  g = gcase("wg_o_batch3_partial", 3, 77, 2, 4, 128, 128);
  for (int segs : {1, 2}) check(g, segs);
}

// The exact segment split (gdn-math §6) against the oracle and against the unsplit kernel.
TEST(CudaChunkFwd, SegmentSplitOnAndOff) {
  REQUIRE_GPU();
  GpuCase g = gcase("long_split", 1, 1500, 1, 2, 128, 128);
  g.c.g_scale = 0.05;  // weak decay: the start state matters across segments
  for (int segs : {1, 2, 5, 0}) check(g, segs);
  GpuCase v = gcase("varlen_split", 1, 0, 2, 4, 64, 128);
  v.c.seqlens = {700, 0, 65, 1, 400};
  v.c.layout = StateLayout::v_major;
  for (int segs : {1, 4}) check(v, segs);
  // split and unsplit GPU results agree with each other within the tolerance
  const Inputs x = make_case_inputs(g);
  GpuRun a(g, x), b(g, x);
  a.p.exec.chunk_fwd_segments = 1;
  a.poison();
  ASSERT_TRUE(a.launch().ok());
  a.fetch();
  b.p.exec.chunk_fwd_segments = 6;
  b.poison();
  ASSERT_TRUE(b.launch().ok());
  b.fetch();
  EXPECT_LE(rel_err(b.o, a.o), 5e-3);
  EXPECT_LE(rel_err(b.hT, a.hT), 5e-3);
}

// ---- the decay windows of the split's summaries (docs/chunk_fwd.md "Decay window") ----------------------------
// A summary whose last chunks decay by e^Gamma <= tau (unit keys, beta in [0, 2]) runs only those chunks, from zero,
// and stores M = 0. What that drops is <= tau ||S(c)||: no comparison with the oracle can see it, so the cases check
// the device's decisions directly in the workspace besides o and hT against the oracle: the intra pass's decay table
// (gamma_n per chunk, +inf where the bound does not hold) against the host's sums of g, and every summary's M: zero
// exactly where cuda::decay_window_start over that table finds a window, else the exact M (nonzero, ||M||_2 <= e^Gamma
// of the segment). Gate patterns per value head set where the windows start, the fallbacks, and the mixed cases.

using GateFn = std::function<double(int64_t h, int64_t t, double g)>;  // token t of the packed rows, drawn g

struct WindowStats {
  int taken = 0, full = 0, taken_inside = 0;  // summaries with M dropped; exact; windows shorter than the segment
};

// Runs `gc` with the split forced to `segments`, gates remapped by `gate` and betas by `beta` (null: as drawn);
// `slack` rows at the end are cut off the last sequence (cu_seqlens[N] < T: rows no sequence owns, unwritten).
// Returns the window decisions; `host_table`: also compare the decay table with the host's sums (raw g and beta).
WindowStats check_windows(GpuCase gc, int segments, const GateFn& gate, const GateFn& beta, int64_t slack = 0,
                          bool host_table = true) {
  WindowStats ws;
  Inputs x = make_case_inputs(gc);
  const int64_t Tt = gc.c.total_T(), Hv = gc.c.Hv, K = gc.c.K, V = gc.c.V;
  const int64_t Bn = gc.c.seqlens.empty() ? gc.c.B : 1;
  for (int64_t b = 0; b < Bn; ++b)
    for (int64_t t = 0; t < Tt; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t i = (b * Tt + t) * Hv + h;
        if (gate) x.in.g.set(i, gate(h, t, x.in.g.get(i)));
        if (beta) x.in.beta.set(i, beta(h, t, x.in.beta.get(i)));
      }
  const Inputs xd = cut_slack(gc, x, slack);
  Result ref = run_oracle(gc, x);
  GpuRun run(gc, xd);
  run.p.exec.chunk_fwd_segments = segments;
  run.poison();
  const Status st = run.launch();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return ws;
  run.fetch();
  expect_slack_unwritten(gc, ref, run, slack);
  expect_close(gc, ref, run, 5e-3);

  // the plan of the call (forced P: the layout does not depend on the SM count)
  ChunkDims d;
  d.B = Bn, d.T = Tt, d.N = gc.c.N(), d.Hqk = gc.c.Hqk, d.Hv = Hv, d.K = K, d.V = V;
  d.varlen = !gc.c.seqlens.empty();
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  ChunkFwdPlan pl;
  EXPECT_TRUE(plan_chunk_fwd(run.p, d, DeviceFacts{sms}, &pl).ok());
  EXPECT_TRUE(pl.split) << pl.why;
  if (!pl.split) return ws;
  const auto* base = static_cast<const unsigned char*>(run.ws_ptr);
  std::vector<float> dec(size_t(Hv * pl.rec_slots));
  std::vector<cuda::ChunkWorkItem> items(size_t(pl.cap));
  std::vector<float> mn(size_t(pl.cap * Hv * K * (K + V)));
  EXPECT_EQ(cudaMemcpy(dec.data(), base + pl.ws_dec, dec.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(items.data(), base + pl.ws_items, items.size() * sizeof(items[0]), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(mn.data(), base + pl.ws_mn, mn.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);

  const int64_t nchunk_b = (Tt + 63) / 64;
  for (int64_t it = 0; it < pl.cap; ++it) {
    const cuda::ChunkWorkItem w = items[size_t(it)];
    if (w.n < 0 || w.seg == w.nseg - 1) continue;  // slack, or the last segment (no summary)
    const int64_t t0 = d.varlen ? int64_t(x.in.cu.get(w.n)) : 0, b = d.varlen ? 0 : w.n;
    const int64_t slot0 = d.varlen ? w.n + t0 / 64 : w.n * nchunk_b;
    for (int64_t h = 0; h < Hv; ++h) {
      const float* row = dec.data() + h * pl.rec_slots + slot0;
      double seg_gamma = 0;     // the segment's decay (host)
      bool seg_bounded = true;  // every transition of the segment a contraction times e^g
      for (int64_t c = w.c_begin; c < w.c_end; ++c) {
        double gs = 0;
        bool bounded = gc.c.l2norm;
        for (int64_t r = 0; r < 64; ++r) {  // summarized segments have full chunks
          const int64_t i = (b * Tt + t0 + 64 * c + r) * Hv + h;
          gs += x.in.g.get(i);
          const double be = x.in.beta.get(i);
          bounded = bounded && be >= 0 && be <= 2;
        }
        seg_gamma += gs;
        seg_bounded = seg_bounded && bounded;
        if (!host_table) {
          EXPECT_TRUE(std::isfinite(row[c])) << gc.c.name << ": decay table item " << it << " head " << h;
        } else if (!bounded) {
          EXPECT_EQ(row[c], cuda::kDecayUnbounded) << gc.c.name << ": item " << it << " head " << h << " chunk " << c;
        } else {
          EXPECT_NEAR(row[c], gs, 1e-4 * (1 + std::fabs(gs))) << gc.c.name << ": item " << it << " head " << h;
        }
      }
      const int64_t c = cuda::decay_window_start(row, w.c_begin, w.c_end, cuda::kDecayWindowLogTau);
      const float* m = mn.data() + (it * Hv + h) * K * (K + V);
      double mmax = 0;
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < K; ++j) mmax = std::max(mmax, double(std::fabs(m[i * (K + V) + j])));
      if (c >= 0) {
        ++ws.taken;
        ws.taken_inside += c > w.c_begin;
        EXPECT_EQ(mmax, 0.0) << gc.c.name << ": item " << it << " head " << h << ": window at chunk " << c
                             << " but M is not zero";
      } else {
        ++ws.full;
        // the exact M = Phi of the segment: |M_ij| <= ||M||_2 <= e^Gamma (rounding of the 16-bit operands aside)
        EXPECT_GT(mmax, 0.0) << gc.c.name << ": item " << it << " head " << h << ": full summary, M is zero";
        if (host_table && seg_bounded)
          EXPECT_LE(mmax, 1.05 * std::exp(seg_gamma) + 1e-30) << gc.c.name << ": item " << it;
      }
    }
  }
  std::printf("[chunk_fwd cuda windows] %-28s %d summaries without M (%d inside the segment), %d exact\n",
              gc.c.name.c_str(), ws.taken, ws.taken_inside, ws.full);
  return ws;
}

// FlashQLA's benchmark gates, logsigmoid(N(0, 1)) / 16 (~-0.05 per token): a window of ~7 chunks.
double flashqla_gate(int64_t h, int64_t t) {
  Rng rng(uint64_t(1000 * h + t) * 2654435761u + 1);
  const double z = rng.normal();
  return -std::log1p(std::exp(-z)) / 16;
}

// Benchmark-like gates g ~ U(-1, 0): every chunk decays by ~e^-32, so every summary is its last chunk from zero.
TEST(CudaChunkFwd, DecayWindowFastDecay) {
  REQUIRE_GPU();
  for (auto kv : {std::pair<int64_t, int64_t>{128, 128}, {64, 128}, {128, 64}, {64, 64}}) {
    GpuCase g = gcase("fast_decay_B2_k" + std::to_string(kv.first) + "v" + std::to_string(kv.second), 2, 64 * 16, 2, 4,
                      kv.first, kv.second);
    const WindowStats s = check_windows(g, 4, nullptr, nullptr);
    EXPECT_EQ(s.taken, 2 * 3 * 4) << g.c.name;  // 2 sequences x 3 summarized segments x 4 heads
    EXPECT_EQ(s.full, 0) << g.c.name;
    EXPECT_EQ(s.taken_inside, 2 * 3 * 4) << g.c.name;  // one chunk of four
  }
  // the plan's own split (32 chunks, 4 heads on an H200: P = 16 segments of 2 chunks)
  GpuCase g = gcase("fast_decay_auto_split", 1, 64 * 32, 2, 4, 128, 128);
  const WindowStats s = check_windows(g, 0, nullptr, nullptr);
  EXPECT_GT(s.taken, 0);
  EXPECT_EQ(s.full, 0);
}

// Heads with g = 0 (FlashQLA's benchmark sets a quarter of them so), weak decay, FlashQLA's gates and fast decay in
// one call: the windows differ per (segment, head), the g = 0 and weak heads keep the exact summary and carry the
// state across the segments (the oracle sees any wrong drop there).
TEST(CudaChunkFwd, DecayWindowMixedHeads) {
  REQUIRE_GPU();
  const GateFn gate = [](int64_t h, int64_t t, double g) {
    switch (h % 4) {
      case 0:
        return 0.0;
      case 1:
        return flashqla_gate(h, t);
      case 2:
        return g;  // U(-1, 0)
      default:
        return -0.02 * (0.5 + 0.5 * g * g);  // weak: ~-1 per chunk, never a window in a 10-chunk segment
    }
  };
  for (auto kv : {std::pair<int64_t, int64_t>{128, 128}, {64, 128}}) {
    GpuCase g = gcase("mixed_heads_k" + std::to_string(kv.first), 1, 64 * 20, 2, 8, kv.first, kv.second);
    const WindowStats s = check_windows(g, 2, gate, nullptr);  // 2 segments of 10 chunks
    EXPECT_EQ(s.taken, 4) << g.c.name;                         // heads 1, 2, 5, 6
    EXPECT_EQ(s.full, 4) << g.c.name;                          // heads 0, 3, 4, 7
    EXPECT_EQ(s.taken_inside, 4) << g.c.name;
  }
}

// Where the bound does not hold the summary stays exact: keys without the in-kernel l2norm (not known to be unit),
// and betas outside [0, 2] inside the would-be window (one token is enough). Gates of -0.1 per token: a 4-chunk
// segment decays by e^-25.6 (a window of the whole segment), 3 chunks only by e^-19.2.
TEST(CudaChunkFwd, DecayWindowFallbacks) {
  REQUIRE_GPU();
  const GateFn tenth = [](int64_t, int64_t, double) { return -0.1; };
  GpuCase g = gcase("window_l2norm_on", 1, 64 * 16, 2, 4, 128, 128);
  WindowStats s = check_windows(g, 4, tenth, nullptr);
  EXPECT_EQ(s.taken, 12) << "the same gates with l2norm: every segment has a window";
  g.c.l2norm = false;  // unit keys from the generator, but the kernel cannot know it
  g.c.name = "window_l2norm_off";
  s = check_windows(g, 4, tenth, nullptr);
  EXPECT_EQ(s.taken, 0);
  EXPECT_EQ(s.full, 12);
  // head 0: beta 2.5 in the last chunk of segment 0; head 1: beta -0.5 in the first chunk of segment 1 (inside its
  // whole-segment window); head 2 (gates -0.4: one-chunk windows): beta 2.5 in the first chunk of segment 2, outside
  // its window; head 3: beta = 2 exactly (allowed) on a few tokens of every chunk.
  const GateFn gate = [](int64_t h, int64_t, double) { return h == 2 ? -0.4 : -0.1; };
  const GateFn beta = [](int64_t h, int64_t t, double b) {
    if (h == 0 && t == 64 * 3 + 5) return 2.5;
    if (h == 1 && t == 64 * 4 + 7) return -0.5;
    if (h == 2 && t == 64 * 8 + 1) return 2.5;
    if (h == 3 && t % 64 == 9) return 2.0;
    return b;
  };
  for (auto kv : {std::pair<int64_t, int64_t>{128, 128}, {64, 128}}) {
    g = gcase("window_beta_range_k" + std::to_string(kv.first), 1, 64 * 16, 2, 4, kv.first, kv.second);
    s = check_windows(g, 4, gate, beta);
    EXPECT_EQ(s.full, 2) << g.c.name;    // (segment 0, head 0), (segment 1, head 1)
    EXPECT_EQ(s.taken, 10) << g.c.name;  // the rest
  }
}

// The threshold itself: 4 segments of 3 chunks, constant gates per head with chunk decays of -6.99 (three chunks:
// e^-20.97, just above tau = e^-21: the exact summary must run, its M ~1e-9 is stored), -7.01 (e^-21.03: the
// window is the whole segment), -21.05 (the last chunk) and -20.95 (the last two chunks).
TEST(CudaChunkFwd, DecayWindowAtTheThreshold) {
  REQUIRE_GPU();
  const GateFn gate = [](int64_t h, int64_t, double) {
    const double per_chunk[4] = {-6.99, -7.01, -21.05, -20.95};
    return per_chunk[h % 4] / 64;
  };
  GpuCase g = gcase("window_threshold", 1, 64 * 12, 2, 4, 128, 128);
  const WindowStats s = check_windows(g, 4, gate, nullptr);
  EXPECT_EQ(s.full, 3);          // head 0
  EXPECT_EQ(s.taken, 9);         // heads 1, 2, 3
  EXPECT_EQ(s.taken_inside, 6);  // heads 2, 3
}

// Varlen with empty sequences (start, middle, end) and slack rows past cu_seqlens[N], mixed heads, the mma.sync
// state pass (K = 64, V = 128: an M tile and a value tile share a CTA) and the wgmma one; and the fused gate with
// beta = 2 sigmoid(b) (the range guaranteed: every chunk bounded).
TEST(CudaChunkFwd, DecayWindowVarlenAndFusedGate) {
  REQUIRE_GPU();
  const GateFn gate = [](int64_t h, int64_t t, double g) { return h % 2 ? g : flashqla_gate(h, t) * (h % 4 == 0); };
  for (auto kv : {std::pair<int64_t, int64_t>{64, 128}, {128, 128}}) {
    GpuCase g = gcase("window_varlen_k" + std::to_string(kv.first), 1, 0, 2, 4, kv.first, kv.second);
    g.c.seqlens = {0, 1300, 0, 64, 900, 1, 0, 700};
    const WindowStats s = check_windows(g, 4, gate, nullptr, 100);  // the last sequence: 600 rows, 100 slack
    EXPECT_GT(s.taken, 0) << g.c.name;
    EXPECT_GT(s.full, 0) << g.c.name;
  }
  GpuCase g = gcase("window_fused_gate", 1, 64 * 16, 2, 4, 128, 128);
  g.gate_in_kernel = g.beta_sigmoid = g.neg_eig = true;
  const WindowStats s = check_windows(g, 4, nullptr, nullptr, 0, false);
  EXPECT_EQ(s.taken + s.full, 12);
  EXPECT_GT(s.taken, 0);
}

TEST(CudaChunkFwd, GraphCaptureReplayAndRepeatStability) {
  REQUIRE_GPU();
  GpuCase g = gcase("graph", 1, 0, 2, 4, 128, 128);
  g.c.seqlens = {100, 0, 700, 63, 1};
  const Inputs x = make_case_inputs(g);
  GpuRun run(g, x);
  run.p.exec.chunk_fwd_segments = 3;  // exercise the device-side index build, summary and scan too
  run.poison();
  ASSERT_TRUE(run.launch().ok());
  run.fetch();
  const HostTensor o0 = run.o, h0 = run.hT;
  // No atomics: 1000 launches, each poisoned first and read back, are bitwise identical to the first.
  int differing = 0;
  for (int i = 0, n = test_repeats(1000); i < n; ++i) {
    run.poison();
    ASSERT_TRUE(run.launch().ok());
    run.fetch();
    differing += run.o.bit_equal(o0) && run.hT.bit_equal(h0) ? 0 : 1;
  }
  EXPECT_EQ(differing, 0) << "launches whose o or final state differs from the first's";
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status cs = run.launch(st);
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  ASSERT_TRUE(cs.ok()) << cs.message();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 2; ++i) {
    run.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    run.fetch();
    EXPECT_TRUE(run.o.bit_equal(o0)) << "replay " << i;
    EXPECT_TRUE(run.hT.bit_equal(h0)) << "replay " << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// q and k as head slices of one fused [B, T, 2 Hqk, K] buffer (token stride 2 Hqk K), bf16 g and beta,
// int64 cu_seqlens: the strided-view and dtype paths the other cases do not take.
TEST(CudaChunkFwd, StridedViewsBf16GateInt64Cu) {
  REQUIRE_GPU();
  GpuCase g = gcase("strided_qk_bf16_gate_i64_cu", 1, 0, 2, 4, 128, 128);
  g.c.seqlens = {70, 0, 129};
  Inputs x = make_case_inputs(g);
  x.in.g = x.in.g.cast(DType::bf16).cast(DType::f32);  // the values the GPU sees
  x.in.beta = x.in.beta.cast(DType::bf16).cast(DType::f32);
  const Result ref = run_oracle(g, x);
  GpuRun run(g, x);
  const int64_t T = g.c.total_T(), H = g.c.Hqk, K = g.c.K;
  HostTensor qk(DType::bf16, {1, T, 2 * H, K});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < K; ++i) {
        qk.set((t * 2 * H + h) * K + i, x.in.q.get((t * H + h) * K + i));
        qk.set((t * 2 * H + H + h) * K + i, x.in.k.get((t * H + h) * K + i));
      }
  const HostTensor g16 = x.in.g.cast(DType::bf16), b16 = x.in.beta.cast(DType::bf16);
  HostTensor cu64 = x.in.cu.cast(DType::i64);
  DevMem dqk(nbytes(qk)), dg16(nbytes(g16)), db16(nbytes(b16)), dcu64(nbytes(cu64));
  upload(dqk, qk), upload(dg16, g16), upload(db16, b16), upload(dcu64, cu64);
  TensorView qv = dev_view(dqk.p, qk);
  qv.shape[2] = H;  // [1, T, H, K] with the fused buffer's strides
  TensorView kv = qv;
  kv.data = static_cast<uint16_t*>(dqk.p) + H * K;
  run.p.q = qv, run.p.k = kv;
  run.p.g = dev_view(dg16.p, g16), run.p.beta = dev_view(db16.p, b16);
  run.p.cu_seqlens = dev_view(dcu64.p, cu64);
  run.poison();
  const Status st = run.launch();
  ASSERT_TRUE(st.ok()) << st.message();
  run.fetch();
  expect_close(g, ref, run, 5e-3);
}

TEST(CudaChunkFwd, UnsupportedChunkSize) {
  REQUIRE_GPU();
  GpuCase g = gcase("chunk32", 1, 40, 2, 4, 64, 64);
  const Inputs x = make_case_inputs(g);
  GpuRun run(g, x);
  run.p.chunk_size = 32;
  const Status st = run.launch();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::unsupported) << st.message();
}

#else  // !FLASHGDN_WITH_CUDA

TEST(CudaChunkFwd, NotBuilt) {
  GTEST_SKIP() << "no CUDA device (built without CUDA)";
}

#endif

}  // namespace
}  // namespace flashgdn::test
