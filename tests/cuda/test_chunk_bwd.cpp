// CUDA chunk_bwd through the public API on CUDA tensors, against the CPU oracle (the same API on CPU tensors:
// the fp64 reverse recurrence of gdn-math §7.1 on the same bf16 / f16 input values), fresh random inputs, every
// output poisoned with NaN. Tolerances (gdn-math §10.3, bf16 I/O): relative Frobenius error <= 8e-3 for dq, dk,
// dv, dh0 and <= 2e-2 for dg, dbeta, dA_log, ddt_bias; the worst (sequence or token, head) block is printed and
// bounded by twice that. Cases: gdn-math §10.4, varlen with empty sequences and NaN-filled slack rows (their
// gradients must be exactly zero), GQA 1/2/4, K, V in {64, 128}, both layouts, the l2norm and gate chains, and
// bitwise determinism, eager and CUDA-graph replay; the chains' segment split forced (P = 1 and P > 1) and chosen
// by the plan; passes 2 and 3 on wgmma (K = V = 128, the plan's choice) against each on mma.sync.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.hpp"

#if FLASHGDN_WITH_CUDA
#include <cuda_runtime.h>

#include "api/internal.hpp"
#include "api/plan.hpp"
#include "cuda/chunk_bwd/chunk_bwd.hpp"
#endif

namespace flashgdn::test {
namespace {

#if FLASHGDN_WITH_CUDA

struct BwdCase {
  GdnCase c;
  bool has_dht = true;
  bool gate = false;  // use_gate_in_kernel + use_beta_sigmoid_in_kernel (g, beta hold raw a, b)
  bool neg_eig = false;
  int64_t slack = 0;        // varlen: extra rows past cu[N]
  int special = 0;          // 1: identical keys, beta = 1, g = 0; 2: g = -30; 3: nearly parallel keys, beta = 1, g = 0;
                            // 4: nearly parallel keys, beta = 2, weak decay; 5: identical keys, beta = 2, g = 0;
                            // 6: 5 with beta = 1.999; 7: FlashQLA's gate pattern, g = 0 on every fourth value
                            // head and -0.5 on the others
  int32_t segments = 0;     // exec.chunk_bwd_segments: 0 the plan's choice, 1 unsplit, P > 1 the chains' split
  double gate_decay = 1.0;  // the fused gate's e^{A_log} scaled by it
  int32_t chains = 0;       // exec.chunk_bwd_chains: 0 the plan's choice, 1 one after the other, 2 / 3 both at once
  int32_t grads = 0;        // exec.chunk_bwd_grads: 0 the plan's choice, 1 mma.sync, 2 wgmma, 3 fused
  int32_t window = 0;       // exec.chunk_bwd_window: 0 the plan's choice, 1 every chunk of the dstate chain
  int32_t state = 0;        // exec.chunk_bwd_state: 0 the plan's choice, 1 the state chain, 2 chunk_fwd's state pass
};

BwdCase bcase(const std::string& name, int64_t B, int64_t T, int64_t Hqk, int64_t Hv, int64_t K, int64_t V) {
  BwdCase b;
  b.c.name = name;
  b.c.B = B, b.c.T = T, b.c.Hqk = Hqk, b.c.Hv = Hv, b.c.K = K, b.c.V = V;
  b.c.dtype = DType::bf16;
  b.c.seed = 9100 + uint64_t(T) * 37 + uint64_t(Hv) * 5 + uint64_t(K);
  return b;
}

HostTensor state_of(const GdnCase& c, DType dt) {
  return c.layout == StateLayout::k_major ? HostTensor(dt, {c.N(), c.Hv, c.K, c.V})
                                          : HostTensor(dt, {c.N(), c.Hv, c.V, c.K});
}

// Inputs as given to the op; slack rows (varlen) hold 0 here and NaN on the device.
struct Problem {
  GdnInputs in;
  HostTensor d_o, d_ht, A_log, dt_bias;
  int64_t rows_used = 0;  // token rows inside sequences: B * T (fixed length) or cu[N] (varlen)
};

// A [.., T, ...] tensor grown by `extra` zero rows on the token axis (dim 1).
HostTensor grow_tokens(const HostTensor& t, int64_t extra) {
  std::vector<int64_t> shp = t.shape;
  shp[1] += extra;
  HostTensor out(t.dtype, shp);
  for (int64_t i = 0; i < t.numel(); ++i) out.set(i, t.get(i));  // B == 1 in varlen: rows are a prefix
  return out;
}

Problem make_problem(const BwdCase& bc) {
  const GdnCase& c = bc.c;
  Problem pr;
  pr.in = make_inputs(c);
  GdnInputs& in = pr.in;
  Rng rng(c.seed + 4242);
  const int64_t K = c.K;
  if (bc.special == 1) {
    for (int64_t row = 1; row < in.k.numel() / K; ++row)
      for (int64_t i = 0; i < K; ++i) in.k.set(row * K + i, in.k.get(i));
    in.beta.fill(1.0);
    in.g.fill(0.0);
  } else if (bc.special == 2) {
    in.g.fill(-30.0);
  } else if (bc.special == 3 || bc.special == 4) {
    // k_r = k_0 + 0.1 k_r: correlation ~0.99, where bf16 operands would be amplified
    for (int64_t row = 1; row < in.k.numel() / K; ++row)
      for (int64_t i = 0; i < K; ++i) in.k.set(row * K + i, in.k.get(i) + 0.1 * in.k.get(row * K + i));
    in.beta.fill(bc.special == 3 ? 1.0 : 2.0);
    in.g.fill(0.0);
    if (bc.special == 4)
      for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, -0.01 * double(i % 7) / 7.0);
  } else if (bc.special == 5 || bc.special == 6) {
    for (int64_t row = 1; row < in.k.numel() / K; ++row)
      for (int64_t i = 0; i < K; ++i) in.k.set(row * K + i, in.k.get(i));
    in.beta.fill(bc.special == 5 ? 2.0 : 1.999);
    in.g.fill(0.0);
  } else if (bc.special == 7) {
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, i % c.Hv % 4 == 0 ? 0.0 : -0.5);  // g [.., T, Hv]
  }
  if (bc.gate) {
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, rng.normal());
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, rng.normal());
    pr.A_log = HostTensor(DType::f32, {c.Hv});
    pr.dt_bias = HostTensor(DType::f32, {c.Hv});
    for (int64_t h = 0; h < c.Hv; ++h) {
      pr.A_log.set(h, std::log(rng.uniform(0.5, 4.5) * bc.gate_decay));
      pr.dt_bias.set(h, 0.5 * rng.normal());
    }
  }
  pr.d_o = HostTensor(c.dtype, in.v.shape);
  for (int64_t i = 0; i < pr.d_o.numel(); ++i) pr.d_o.set(i, rng.normal());
  if (bc.has_dht) {
    pr.d_ht = state_of(c, DType::f32);
    for (int64_t i = 0; i < pr.d_ht.numel(); ++i) pr.d_ht.set(i, rng.normal());
  }
  pr.rows_used = (c.seqlens.empty() ? c.B : 1) * c.total_T();  // B * T rows (fixed length) or cu[N]
  if (bc.slack > 0) {
    for (HostTensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta, &pr.d_o}) *t = grow_tokens(*t, bc.slack);
  }
  return pr;
}

struct Grads {
  HostTensor dq, dk, dv, dg, dbeta, dh0, dA_log, ddt_bias;
};

Grads output_shapes(const BwdCase& bc, const Problem& pr, DType io, DType f) {
  Grads g;
  g.dq = HostTensor(io, pr.in.q.shape);
  g.dk = HostTensor(io, pr.in.k.shape);
  g.dv = HostTensor(io, pr.in.v.shape);
  g.dg = HostTensor(f, pr.in.g.shape);
  g.dbeta = HostTensor(f, pr.in.beta.shape);
  g.dh0 = state_of(bc.c, f);
  if (bc.gate) {
    g.dA_log = HostTensor(f, {bc.c.Hv});
    g.ddt_bias = HostTensor(f, {bc.c.Hv});
  }
  for (HostTensor* t : {&g.dq, &g.dk, &g.dv, &g.dg, &g.dbeta, &g.dh0, &g.dA_log, &g.ddt_bias})
    if (!t->empty_shape()) t->fill_nan();  // an absent tensor has no bytes
  return g;
}

void set_options(const BwdCase& bc, ChunkBwdParams* p) {
  p->use_qk_l2norm_in_kernel = bc.c.l2norm;
  p->state_layout = bc.c.layout;
  p->gate.use_gate_in_kernel = bc.gate;
  p->gate.use_beta_sigmoid_in_kernel = bc.gate;
  p->gate.allow_neg_eigval = bc.neg_eig;
  p->exec.chunk_bwd_segments = bc.segments;  // the CPU backend ignores it
  p->exec.chunk_bwd_chains = bc.chains;
  p->exec.chunk_bwd_grads = bc.grads;
  p->exec.chunk_bwd_window = bc.window;
  p->exec.chunk_bwd_state = bc.state;
}

// The oracle: the public API on CPU tensors in fp64, inputs cast from the device's values.
Grads run_oracle(const BwdCase& bc, const Problem& pr) {
  auto f64 = [](const HostTensor& t) { return t.empty_shape() ? HostTensor() : t.cast(DType::f64); };
  const HostTensor q = f64(pr.in.q), k = f64(pr.in.k), v = f64(pr.in.v), g = f64(pr.in.g), beta = f64(pr.in.beta);
  const HostTensor h0 = f64(pr.in.h0), d_o = f64(pr.d_o), d_ht = f64(pr.d_ht), alog = f64(pr.A_log),
                   dtb = f64(pr.dt_bias);
  Grads out = output_shapes(bc, pr, DType::f64, DType::f64);
  ChunkBwdParams p;
  p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = beta.view();
  p.A_log = alog.view(), p.dt_bias = dtb.view(), p.initial_state = h0.view(), p.cu_seqlens = pr.in.cu.view();
  p.d_o = d_o.view(), p.d_ht = d_ht.view();
  p.dq = out.dq.view(), p.dk = out.dk.view(), p.dv = out.dv.view(), p.dg = out.dg.view();
  p.dbeta = out.dbeta.view(), p.dh0 = out.dh0.view(), p.dA_log = out.dA_log.view(), p.ddt_bias = out.ddt_bias.view();
  set_options(bc, &p);
  p.exec.cpu_fp64 = true;
  p.exec.cpu_algo = CpuAlgo::recurrent;
  p.exec.cpu_threads = 2;
  const Status st = chunk_bwd(p);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

// A host tensor's device copy (freed with it).
struct Dev {
  void* ptr = nullptr;
  size_t bytes = 0;
  Dev() = default;
  explicit Dev(const HostTensor& t) : bytes(t.bytes.size()) {
    if (bytes == 0) return;
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, t.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() {
    if (ptr) cudaFree(ptr);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

TensorView on_device(const Dev& d, const HostTensor& t) {
  TensorView v = t.view();
  if (v.defined()) {
    v.data = d.ptr;
    v.device = DeviceType::cuda;
  }
  return v;
}

// The GPU under test: slack rows of every input are NaN on the device, every output starts as NaN.
struct GpuRun {
  Problem dev_in;  // what is uploaded
  Grads out;       // host images of the outputs
  std::vector<Dev*> bufs;
  ChunkBwdParams p;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  Dev *dq, *dk, *dv, *dg, *dbeta, *dh0, *dA_log, *ddt_bias;

  GpuRun(const BwdCase& bc, const Problem& pr) : dev_in(pr), out(output_shapes(bc, pr, bc.c.dtype, DType::f32)) {
    if (bc.slack > 0) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      for (HostTensor* t : {&dev_in.in.q, &dev_in.in.k, &dev_in.in.v, &dev_in.in.g, &dev_in.in.beta, &dev_in.d_o}) {
        const int64_t per_row = t->numel() / t->shape[1];
        for (int64_t i = pr.rows_used * per_row; i < t->numel(); ++i) t->set(i, nan);
      }
    }
    const GdnInputs& in = dev_in.in;
    auto up = [&](const HostTensor& t) {
      bufs.push_back(new Dev(t));
      return on_device(*bufs.back(), t);
    };
    p.q = up(in.q), p.k = up(in.k), p.v = up(in.v), p.g = up(in.g), p.beta = up(in.beta);
    p.initial_state = up(in.h0), p.cu_seqlens = up(in.cu), p.A_log = up(dev_in.A_log);
    p.dt_bias = up(dev_in.dt_bias), p.d_o = up(dev_in.d_o), p.d_ht = up(dev_in.d_ht);
    auto outp = [&](HostTensor& t, Dev** d, TensorView* v) {
      bufs.push_back(new Dev(t));
      *d = bufs.back();
      *v = on_device(**d, t);
    };
    outp(out.dq, &dq, &p.dq), outp(out.dk, &dk, &p.dk), outp(out.dv, &dv, &p.dv), outp(out.dg, &dg, &p.dg);
    outp(out.dbeta, &dbeta, &p.dbeta), outp(out.dh0, &dh0, &p.dh0), outp(out.dA_log, &dA_log, &p.dA_log);
    outp(out.ddt_bias, &ddt_bias, &p.ddt_bias);
    set_options(bc, &p);
    size_t need = 0;
    const Status st = chunk_bwd_workspace_size(p, &need);
    EXPECT_TRUE(st.ok()) << st.message();
    reserve(need);
  }
  // The workspace, stale (0xff: it must not matter). A plan edited by a test may need more than the public plan's
  // (pass 4 on mma.sync keeps dq, dk per value head, the wgmma pass per q/k head): a larger buffer then.
  void reserve(size_t need) {
    if (need <= ws_bytes) return;
    if (ws) EXPECT_EQ(cudaFree(ws), cudaSuccess);
    ws = nullptr;
    EXPECT_EQ(cudaMalloc(&ws, need), cudaSuccess);
    ws_bytes = need;
    EXPECT_EQ(cudaMemset(ws, 0xff, need), cudaSuccess);
  }
  ~GpuRun() {
    if (ws) cudaFree(ws);
    for (Dev* d : bufs) delete d;
  }
  void poison() {
    for (Dev* d : {dq, dk, dv, dg, dbeta, dh0, dA_log, ddt_bias})
      if (d->ptr) {
        EXPECT_EQ(cudaMemset(d->ptr, 0xff, d->bytes), cudaSuccess);
      }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // ordered before launches on any stream
  }
  Status launch(void* stream = nullptr) { return chunk_bwd(p, ws, ws_bytes, stream); }
  void fetch() {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::pair<Dev*, HostTensor*> pairs[] = {
        {dq, &out.dq},       {dk, &out.dk},   {dv, &out.dv},         {dg, &out.dg},
        {dbeta, &out.dbeta}, {dh0, &out.dh0}, {dA_log, &out.dA_log}, {ddt_bias, &out.ddt_bias}};
    for (auto [d, h] : pairs)
      if (d->ptr) {
        EXPECT_EQ(cudaMemcpy(h->data(), d->ptr, d->bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      }
  }
};

// Relative error of one gradient and its worst block (head_of maps an element to a block).
template <class HeadOf>
void expect_grad(const char* name, const HostTensor& x, const HostTensor& ref, int64_t blocks, HeadOf head_of,
                 double tol, std::string* line) {
  if (x.empty_shape()) return;
  const double e = rel_err(x, ref), w = max_head_err(x, ref, blocks, head_of);
  EXPECT_LE(e, tol) << name << " rel err";
  EXPECT_LE(w, 2 * tol) << name << " worst block";
  char buf[96];
  std::snprintf(buf, sizeof(buf), " %s %.1e/%.1e", name, e, w);
  *line += buf;
}

void expect_close(const BwdCase& bc, const Problem& pr, const Grads& ref, const Grads& got) {
  const GdnCase& c = bc.c;
  const int64_t rows = got.dv.shape[0] * got.dv.shape[1];  // B * T
  std::string line;
  expect_grad(
      "dq", got.dq, ref.dq, c.Hqk, [&](int64_t i) { return (i / c.K) % c.Hqk; }, 8e-3, &line);
  expect_grad(
      "dk", got.dk, ref.dk, c.Hqk, [&](int64_t i) { return (i / c.K) % c.Hqk; }, 8e-3, &line);
  expect_grad(
      "dv", got.dv, ref.dv, c.Hv, [&](int64_t i) { return (i / c.V) % c.Hv; }, 8e-3, &line);
  expect_grad(
      "dh0", got.dh0, ref.dh0, c.N() * c.Hv, [&](int64_t i) { return i / (c.K * c.V); }, 8e-3, &line);
  expect_grad(
      "dg", got.dg, ref.dg, c.Hv, [&](int64_t i) { return i % c.Hv; }, 2e-2, &line);
  expect_grad(
      "dbeta", got.dbeta, ref.dbeta, c.Hv, [&](int64_t i) { return i % c.Hv; }, 2e-2, &line);
  expect_grad(
      "dA_log", got.dA_log, ref.dA_log, 1, [](int64_t) { return 0; }, 2e-2, &line);
  expect_grad(
      "ddt_bias", got.ddt_bias, ref.ddt_bias, 1, [](int64_t) { return 0; }, 2e-2, &line);
  // Slack rows: exactly zero (the oracle gives zero there too, but NaN inputs must not leak).
  for (int64_t t = pr.rows_used; t < rows; ++t) {
    for (int64_t i = 0; i < c.Hqk * c.K; ++i) {
      ASSERT_EQ(got.dq.get(t * c.Hqk * c.K + i), 0.0) << c.name << ": dq slack row " << t;
      ASSERT_EQ(got.dk.get(t * c.Hqk * c.K + i), 0.0) << c.name << ": dk slack row " << t;
    }
    for (int64_t i = 0; i < c.Hv * c.V; ++i) ASSERT_EQ(got.dv.get(t * c.Hv * c.V + i), 0.0) << "dv slack row " << t;
    for (int64_t h = 0; h < c.Hv; ++h) {
      ASSERT_EQ(got.dg.get(t * c.Hv + h), 0.0) << c.name << ": dg slack row " << t;
      ASSERT_EQ(got.dbeta.get(t * c.Hv + h), 0.0) << c.name << ": dbeta slack row " << t;
    }
  }
  // Empty sequences: dh0 == d_ht exactly (0 without it).
  const int64_t sblk = c.Hv * c.K * c.V;
  for (int64_t n = 0; n < c.N(); ++n) {
    if (c.seqlens.empty() || c.seqlens[size_t(n)] != 0) continue;
    for (int64_t i = 0; i < sblk; ++i) {
      const double want = pr.d_ht.empty_shape() ? 0.0 : pr.d_ht.get(n * sblk + i);
      ASSERT_EQ(got.dh0.get(n * sblk + i), want) << c.name << ": dh0 of empty sequence " << n;
    }
  }
  std::printf("[chunk_bwd cuda] %-30s rel/worst:%s\n", c.name.c_str(), line.c_str());
}

// The GPU's gradients of one case (outputs poisoned first).
Grads run_gpu(const BwdCase& bc, const Problem& pr) {
  GpuRun run(bc, pr);
  run.poison();
  const Status st = run.launch();
  EXPECT_TRUE(st.ok()) << st.message();
  run.fetch();
  return run.out;
}

void check(const BwdCase& bc) {
  SCOPED_TRACE(bc.c.name);
  const Problem pr = make_problem(bc);
  const Grads ref = run_oracle(bc, pr);
  expect_close(bc, pr, ref, run_gpu(bc, pr));
}

bool same_bits(const Grads& a, const Grads& b) {
  return a.dq.bit_equal(b.dq) && a.dk.bit_equal(b.dk) && a.dv.bit_equal(b.dv) && a.dg.bit_equal(b.dg) &&
         a.dbeta.bit_equal(b.dbeta) && a.dh0.bit_equal(b.dh0) && a.dA_log.bit_equal(b.dA_log) &&
         a.ddt_bias.bit_equal(b.ddt_bias);
}

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaChunkBwd, LengthsAroundTheChunk) {
  REQUIRE_GPU();
  for (int64_t T : {1, 63, 64, 65, 131}) check(bcase("len" + std::to_string(T), 1, T, 2, 4, 128, 128));
}

// A long unsplit walk (64 chain steps) under weak decay (~e^-0.6 a chunk): the chains carry their state in registers
// from step to step, and every step's state reaches the gradients of the chunks after it.
TEST(CudaChunkBwd, LongWalkWeakDecay) {
  REQUIRE_GPU();
  for (auto [K, V] : {std::pair<int64_t, int64_t>{128, 128}, {64, 64}}) {
    BwdCase b = bcase("long_walk_k" + std::to_string(K) + "v" + std::to_string(V), 1, 4096 - 17, 1, 2, K, V);
    b.c.g_scale = 0.02;
    b.segments = 1;
    check(b);
  }
}

TEST(CudaChunkBwd, VarlenEmptySequencesAndSlackRows) {
  REQUIRE_GPU();
  BwdCase b = bcase("varlen_k128_slack", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {1, 63, 0, 64, 65, 0, 130};
  b.slack = 7;
  check(b);
  b = bcase("varlen_k64_empty_ends_slack", 1, 0, 1, 2, 64, 64);
  b.c.seqlens = {0, 70, 0, 5, 0};
  b.slack = 3;
  check(b);
  b.c.has_h0 = false;
  b.has_dht = false;
  b.c.name = "varlen_k64_no_h0_no_dht";
  check(b);
}

TEST(CudaChunkBwd, GqaRatiosShapesAndLayouts) {
  REQUIRE_GPU();
  for (int64_t r : {1, 2, 4})
    for (auto [K, V] : {std::pair<int64_t, int64_t>{64, 64}, {64, 128}, {128, 64}, {128, 128}})
      for (StateLayout lay : {StateLayout::k_major, StateLayout::v_major}) {
        BwdCase b = bcase("gqa" + std::to_string(r) + "_k" + std::to_string(K) + "v" + std::to_string(V) +
                              (lay == StateLayout::v_major ? "_vmajor" : ""),
                          2, 100, 2, 2 * r, K, V);
        b.c.layout = lay;
        check(b);
      }
}

TEST(CudaChunkBwd, OptionsH0DhtL2normGateF16) {
  REQUIRE_GPU();
  BwdCase b = bcase("no_h0_no_dht", 1, 130, 2, 4, 128, 128);
  b.c.has_h0 = false;
  b.has_dht = false;
  check(b);
  b = bcase("h0_no_dht", 1, 130, 2, 4, 64, 128);
  b.has_dht = false;
  check(b);
  b = bcase("no_l2norm", 2, 77, 2, 4, 128, 64);
  b.c.l2norm = false;
  check(b);
  b = bcase("gate_in_kernel", 1, 150, 2, 4, 128, 128);
  b.gate = true;
  check(b);
  b.neg_eig = true;
  b.c.name = "gate_in_kernel_neg_eigval_vmajor";
  b.c.layout = StateLayout::v_major;
  check(b);
  b = bcase("f16", 1, 131, 2, 4, 128, 128);
  b.c.dtype = DType::f16;
  check(b);
}

TEST(CudaChunkBwd, StrongDecayAndIdenticalKeys) {
  REQUIRE_GPU();
  BwdCase b = bcase("g_minus_30", 1, 131, 2, 4, 128, 128);
  b.special = 2;
  check(b);
  b = bcase("identical_keys_beta1_g0", 1, 128, 1, 2, 128, 128);
  b.special = 1;
  check(b);
  b = bcase("identical_keys_partial_chunk", 1, 100, 1, 2, 64, 64);
  b.special = 1;
  check(b);
  b = bcase("near_parallel_keys", 1, 200, 2, 4, 128, 128);
  b.special = 3;
  check(b);
}

// allow_neg_eigval's extreme, beta = 2: a chunk transition with an eigenvalue -1, so nothing contracts the reverse
// chain's rounding over the walk; with nearly parallel or identical keys the cancelling sums are at their worst too
// (tools/emulate_chunk_bwd/fused_numerics.py: single bf16 operands put dv at 7e-2 there, split ones at 1.7e-3). These
// inputs are the host emulation's cases 16, 17 and 21: with W in one bf16 part the identical-key case had dv 1.07e-2
// and dh0 1.33e-2 (docs/chunk_bwd.md "Passes"), split 2.3e-3 and 3.1e-4.
TEST(CudaChunkBwd, BetaTwoWithParallelKeys) {
  REQUIRE_GPU();
  BwdCase b = bcase("beta2_near_parallel_keys", 1, 300, 1, 2, 128, 128);
  b.special = 4;
  check(b);
  b = bcase("beta2_identical_keys_g0", 1, 300, 1, 2, 128, 128);
  b.special = 5;
  check(b);
  b = bcase("beta2_near_parallel_keys_k64", 1, 300, 2, 4, 64, 64);
  b.special = 4;
  check(b);
}

// beta = 2 with identical keys and g = 0 on a long walk: the chunk transition along the key is +-1 only through the
// cancellation of W's entries, so any per-chunk error of W adds up linearly over the chunks in both chains (with W's
// left operand in two bf16 parts: dv 1.6e-2, dg 2.1e-2 at T = 2048 in the host emulation, case 23). Unsplit (one
// walk of 32 chunks, the worst case) and as the plan splits it; beta = 1.999 unsplit (emulation case 24).
TEST(CudaChunkBwd, BetaTwoLongWalk) {
  REQUIRE_GPU();
  for (int32_t P : {1, 0}) {
    BwdCase b =
        bcase(P == 1 ? "beta2_identical_keys_t2048_unsplit" : "beta2_identical_keys_t2048", 1, 2048, 1, 2, 128, 128);
    b.special = 5;
    b.segments = P;
    check(b);
  }
  BwdCase b = bcase("beta1999_identical_keys_t2048_unsplit", 1, 2048, 1, 2, 128, 128);
  b.special = 6;
  b.segments = 1;
  check(b);
}

// The chains' segment split (gdn-math §6), forced through exec.chunk_bwd_segments: against the oracle, and against
// the unsplit chains (P = 1) of the same inputs, which it equals up to fp32 rounding (the summaries' products and
// the scan re-associate the chain's sums): dh0 within 1e-3, dg and dbeta within 2e-3, the 16-bit dq, dk, dv within
// a few of their roundings (4e-3). The gates decay weakly (g ~ -0.02 U(0, 1): ~e^-0.6 a chunk; the fused gate's
// e^{A_log} / 100) so that every chunk after a segment boundary depends on the boundary state (under g ~ -U(0, 1)
// a chunk decays by ~e^-32 and a wrong boundary state would only show past a partial chunk); g = -30 cases keep
// theirs.
void check_split(BwdCase b, std::initializer_list<int32_t> Ps) {
  SCOPED_TRACE(b.c.name);
  if (b.special == 0) b.c.g_scale = 0.02;
  b.gate_decay = 0.01;
  const Problem pr = make_problem(b);
  const Grads ref = run_oracle(b, pr);
  b.segments = 1;
  const Grads whole = run_gpu(b, pr);
  const std::string name = b.c.name;
  for (int32_t P : Ps) {
    b.segments = P;
    b.c.name = name + "_P" + std::to_string(P);
    const Grads got = run_gpu(b, pr);
    expect_close(b, pr, ref, got);
    const double tol16 = 4e-3;
    EXPECT_LE(rel_err(got.dq, whole.dq), tol16) << b.c.name << " dq vs P = 1";
    EXPECT_LE(rel_err(got.dk, whole.dk), tol16) << b.c.name << " dk vs P = 1";
    EXPECT_LE(rel_err(got.dv, whole.dv), tol16) << b.c.name << " dv vs P = 1";
    EXPECT_LE(rel_err(got.dh0, whole.dh0), 1e-3) << b.c.name << " dh0 vs P = 1";
    EXPECT_LE(rel_err(got.dg, whole.dg), 2e-3) << b.c.name << " dg vs P = 1";
    EXPECT_LE(rel_err(got.dbeta, whole.dbeta), 2e-3) << b.c.name << " dbeta vs P = 1";
  }
}

TEST(CudaChunkBwd, SegmentSplitFixedLength) {
  REQUIRE_GPU();
  // 16 chunks: P = 2 (8 + 8), 3 (6 + 6 + 4), 7 (3 x 5 + 1), 16 (one chunk a segment)
  check_split(bcase("split_k128v128", 1, 1000, 2, 4, 128, 128), {2, 3, 7, 16});
  for (auto [K, V] : {std::pair<int64_t, int64_t>{64, 64}, {64, 128}, {128, 64}})
    for (StateLayout lay : {StateLayout::k_major, StateLayout::v_major}) {
      BwdCase b = bcase(
          "split_k" + std::to_string(K) + "v" + std::to_string(V) + (lay == StateLayout::v_major ? "_vmajor" : ""), 2,
          333, 1, 4, K, V);  // GQA 4, a partial last chunk, two batch entries
      b.c.layout = lay;
      check_split(b, {3});
    }
}

TEST(CudaChunkBwd, SegmentSplitVarlenAndOptions) {
  REQUIRE_GPU();
  // segment boundaries inside sequences, empty sequences, sequences shorter than a segment, slack rows
  BwdCase b = bcase("split_varlen_slack", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {700, 0, 40, 1, 333, 64, 0};
  b.slack = 5;
  check_split(b, {2, 4, 11});
  b = bcase("split_varlen_gate_k64v128_vmajor", 1, 0, 1, 2, 64, 128);
  b.c.seqlens = {0, 500, 129, 0};
  b.slack = 2;
  b.gate = true;
  b.c.layout = StateLayout::v_major;
  check_split(b, {3});
  b = bcase("split_no_h0_no_dht", 1, 640, 2, 4, 128, 64);
  b.c.has_h0 = false;
  b.has_dht = false;
  check_split(b, {4});
  b = bcase("split_h0_no_dht_f16", 1, 640, 2, 4, 128, 128);
  b.has_dht = false;
  b.c.dtype = DType::f16;
  check_split(b, {5});
  b = bcase("split_g_minus_30", 1, 640, 2, 4, 128, 128);
  b.special = 2;
  check_split(b, {4});
}

// The plan's own choice splits a long sequence with few heads (2 chain CTAs on the SMs).
TEST(CudaChunkBwd, SegmentSplitChosenByThePlan) {
  REQUIRE_GPU();
  BwdCase b = bcase("split_auto_t4096_hv1", 1, 4096, 1, 1, 64, 64);
  const Problem pr = make_problem(b);
  GpuRun run(b, pr);
  std::string text;
  ASSERT_TRUE(chunk_bwd_plan(run.p, &text).ok());
  EXPECT_NE(text.find("segment split"), std::string::npos) << text;
  check(b);
}

// Pass 2 on wgmma (the plan's choice at K = V = 128) against pass 2 on mma.sync, the same inputs through the same
// plan with only its state_pass changed (the internal entry points: validate, plan_chunk_bwd, cuda::chunk_bwd). Both
// take the same operand splits with fp32 accumulation and differ only in the order of their sums: the gradients agree
// to a few fp32 roundings of S0, U (S0 stored in bf16, so an element may round the other way: the 16-bit dq, dk, dv
// within 2e-3, dg and dbeta within 2e-3), dh0 bitwise (pass 3 reads nothing of pass 2); both against the oracle, and
// the wgmma run bitwise stable over repeats.
// The call through the internal entry points with the chains one after the other and the plan's kernel choice for
// one of them changed by `choose` (the chains' other fields as planned).
template <class Choose>
Grads run_gpu_planned(BwdCase bc, const Problem& pr, Choose choose) {
  bc.chains = 1;
  GpuRun run(bc, pr);
  SeqDims d;
  EXPECT_TRUE(validate(run.p, &d).ok());
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  ChunkBwdPlan pl;
  EXPECT_TRUE(plan_chunk_bwd(run.p, d, DeviceFacts{sms}, &pl).ok());
  const ChunkStatePass planned = d.K == 128 && d.V == 128 ? ChunkStatePass::wgmma : ChunkStatePass::mma_sync;
  EXPECT_EQ(pl.state_pass, planned);
  EXPECT_EQ(pl.dstate_pass, planned);
  EXPECT_EQ(pl.state_stages, 2);
  EXPECT_EQ(pl.dstate_stages, 2);
  choose(pl);
  run.reserve(cuda::chunk_bwd_workspace_size(run.p, d, pl));
  run.poison();
  const Status st = cuda::chunk_bwd(run.p, d, pl, run.ws, run.ws_bytes, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  run.fetch();
  return run.out;
}

// The wgmma and mma.sync forms of a chain take the same operand splits and differ only in the order of their sums:
// the 16-bit dq, dk, dv and the fp32 dg, dbeta within 2e-3 of each other (dh0: per chain, below).
void expect_wgmma_near_mma_sync(const Grads& wg, const Grads& mma, const std::string& name) {
  EXPECT_LE(rel_err(wg.dq, mma.dq), 2e-3) << name << " dq: wgmma vs mma.sync";
  EXPECT_LE(rel_err(wg.dk, mma.dk), 2e-3) << name << " dk: wgmma vs mma.sync";
  EXPECT_LE(rel_err(wg.dv, mma.dv), 2e-3) << name << " dv: wgmma vs mma.sync";
  EXPECT_LE(rel_err(wg.dg, mma.dg), 2e-3) << name << " dg: wgmma vs mma.sync";
  EXPECT_LE(rel_err(wg.dbeta, mma.dbeta), 2e-3) << name << " dbeta: wgmma vs mma.sync";
}

Grads run_gpu_state_pass(const BwdCase& bc, const Problem& pr, ChunkStatePass pass, int32_t state_stages = 2) {
  return run_gpu_planned(bc, pr, [&](ChunkBwdPlan& pl) { pl.state_pass = pass, pl.state_stages = state_stages; });
}

// One pass on both of its kernels (`run(b, pr, pass)`: the plan's choice edited to mma.sync, then to wgmma) against
// the oracle and within 2e-3 of each other; dh0 bitwise equal where `dh0_why` is given (why the pass does not reach
// it); the wgmma run bitwise stable over repeats.
template <class Run>
void check_pass_pair(BwdCase b, Run run, const char* dh0_why) {
  SCOPED_TRACE(b.c.name);
  const Problem pr = make_problem(b);
  const Grads ref = run_oracle(b, pr);
  const Grads mma = run(b, pr, ChunkStatePass::mma_sync);
  const Grads wg = run(b, pr, ChunkStatePass::wgmma);
  const std::string name = b.c.name;
  b.c.name = name + "_mma_sync";
  expect_close(b, pr, ref, mma);
  b.c.name = name + "_wgmma";
  expect_close(b, pr, ref, wg);
  expect_wgmma_near_mma_sync(wg, mma, name);
  if (dh0_why) EXPECT_TRUE(wg.dh0.bit_equal(mma.dh0)) << name << " dh0: " << dh0_why;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(wg, run(b, pr, ChunkStatePass::wgmma))) << name << " repeat " << i;
}

// A split walk's reverse scan runs on pass 2's forward summaries (their M transposed), so its dh0 differs in the
// last bits between the two kernels; a whole walk's dh0 is pass 3's alone.
void check_state_pass(const BwdCase& b) {
  check_pass_pair(
      b, [](const BwdCase& bc, const Problem& pr, ChunkStatePass p) { return run_gpu_state_pass(bc, pr, p); },
      b.segments == 1 ? "pass 3 does not read pass 2" : nullptr);
}

// The inputs of both state-pass comparisons: a long walk, f16, varlen with empty and one-row sequences and the gate,
// the forced split (P = 5 varlen, P = 3 f16), nearly parallel keys; all at K = V = 128 (the wgmma pass 2).
std::vector<BwdCase> state_pass_cases() {
  std::vector<BwdCase> cases;
  // a long walk (a partial last chunk, GQA 2, weak decay: every chunk's state reaches the later ones), V-major
  BwdCase b = bcase("wg_walk_t2000_gqa2_vmajor", 1, 2000, 2, 4, 128, 128);
  b.c.g_scale = 0.02;
  b.c.layout = StateLayout::v_major;
  b.segments = 1;
  cases.push_back(b);
  // f16 (K^T split into bf16 hi + lo in registers), two batch entries, no h0
  b = bcase("wg_f16_b2_t700_no_h0", 2, 700, 2, 4, 128, 128);
  b.c.dtype = DType::f16;
  b.c.g_scale = 0.02;
  b.c.has_h0 = false;
  b.segments = 1;
  cases.push_back(b);
  // varlen: empty sequences, one-row and one-chunk sequences, slack rows, the fused gate
  b = bcase("wg_varlen_slack_gate", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {0, 1, 64, 0, 777, 65, 0};
  b.slack = 5;
  b.gate = true;
  b.gate_decay = 0.01;
  b.segments = 1;
  cases.push_back(b);
  // the split forced: several segments per sequence (summaries, scan, segments from their boundary states), an
  // empty sequence and one shorter than a segment
  b = bcase("wg_split_varlen_p5", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {900, 0, 40, 1300};
  b.c.g_scale = 0.02;
  b.slack = 3;
  b.segments = 5;
  cases.push_back(b);
  b = bcase("wg_split_f16_p3", 1, 1000, 1, 2, 128, 128);
  b.c.dtype = DType::f16;
  b.c.g_scale = 0.02;
  b.segments = 3;
  cases.push_back(b);
  // nearly parallel keys (the cancelling sums that need U's lo part)
  b = bcase("wg_near_parallel_keys", 1, 300, 1, 2, 128, 128);
  b.special = 3;
  b.segments = 1;
  cases.push_back(b);
  return cases;
}

TEST(CudaChunkBwd, StatePassWgmmaAgainstMmaSync) {
  REQUIRE_GPU();
  for (const BwdCase& b : state_pass_cases()) check_state_pass(b);
}

// The wgmma pass 2 with one input stage (k single-buffered, U0 loaded into registers a step ahead: two CTAs per SM)
// runs the same products in the same order as the two-stage form, only its loads are issued elsewhere: the gradients
// bitwise equal to the two-stage run's, against the oracle, and bitwise over repeats (the early refill of the k tile is
// where a race would show: a warp's copy landing before its own K^T ldmatrix has read the tile, which the host
// emulation cannot see).
void check_state_stages(BwdCase b) {
  SCOPED_TRACE(b.c.name);
  const Problem pr = make_problem(b);
  const Grads ref = run_oracle(b, pr);
  const Grads two = run_gpu_state_pass(b, pr, ChunkStatePass::wgmma, 2);
  const Grads one = run_gpu_state_pass(b, pr, ChunkStatePass::wgmma, 1);
  const std::string name = b.c.name;
  b.c.name = name + "_one_stage";
  expect_close(b, pr, ref, one);
  EXPECT_TRUE(same_bits(one, two)) << name << ": one input stage vs two";
  for (int i = 0; i < test_repeats(3); ++i)
    EXPECT_TRUE(same_bits(one, run_gpu_state_pass(b, pr, ChunkStatePass::wgmma, 1))) << name << " repeat " << i;
}

TEST(CudaChunkBwd, StatePassSingleStageBitwise) {
  REQUIRE_GPU();
  for (const BwdCase& b : state_pass_cases()) check_state_stages(b);
}

// The one-stage wgmma pass 2 fits two CTAs per SM (shared memory and registers as compiled: 106 KiB + 1 KiB of
// alignment), which is what running both chains at once as a CTA per chain needs; the two-stage form (140 KiB, W hi
// and lo in both stages) one.
TEST(CudaChunkBwd, StatePassSingleStageTwoCtasPerSm) {
  REQUIRE_GPU();
  for (const bool bf16 : {true, false}) {
    for (const int stages : {1, 2}) {
      int ctas = 0;
      const int e = bf16 ? cuda::chunk_bwd_state_wg_ctas_per_sm_bf16(stages, &ctas)
                         : cuda::chunk_bwd_state_wg_ctas_per_sm_f16(stages, &ctas);
      ASSERT_EQ(e, 0) << cudaGetErrorString(cudaError_t(e));
      EXPECT_GE(ctas, stages == 1 ? 2 : 1) << (bf16 ? "bf16" : "f16") << ", " << stages << " stage(s)";
    }
  }
}

// Pass 3 on wgmma (the plan's choice at K = V = 128; two input stages, and the one-stage form) against pass 3 on
// mma.sync, the same inputs through the same plan with only its dstate_pass (and dstate_stages) changed. The kernels
// take the same operand splits with fp32 accumulation and differ only in the order of their sums (dS, dU agree to a
// few fp32 roundings): the gradients within 2e-3 of each other, dh0 included; both against the oracle; the stage
// count changes no sum (the one-stage run bitwise equal to the two-stage one), and the wgmma run is bitwise stable
// over repeats.
Grads run_gpu_dstate_pass(const BwdCase& bc, const Problem& pr, ChunkStatePass pass, int32_t stages) {
  return run_gpu_planned(bc, pr, [&](ChunkBwdPlan& pl) { pl.dstate_pass = pass, pl.dstate_stages = stages; });
}

// The public call with exec.chunk_bwd_chains = chains (2, 3: both chains in one launch per phase, one stage each, as
// a CTA per chain or one CTA of both).
Grads run_gpu_chains(BwdCase bc, const Problem& pr, int32_t chains) {
  bc.chains = chains;
  GpuRun run(bc, pr);
  run.poison();
  const Status st = run.launch();
  EXPECT_TRUE(st.ok()) << st.message();
  run.fetch();
  return run.out;
}

void check_dstate_pass(BwdCase b) {
  SCOPED_TRACE(b.c.name);
  const Problem pr = make_problem(b);
  const Grads ref = run_oracle(b, pr);
  const Grads mma = run_gpu_dstate_pass(b, pr, ChunkStatePass::mma_sync, 2);
  const Grads wg = run_gpu_dstate_pass(b, pr, ChunkStatePass::wgmma, 2);
  const Grads wg1 = run_gpu_dstate_pass(b, pr, ChunkStatePass::wgmma, 1);
  const std::string name = b.c.name;
  b.c.name = name + "_mma_sync";
  expect_close(b, pr, ref, mma);
  b.c.name = name + "_wgmma";
  expect_close(b, pr, ref, wg);
  b.c.name = name + "_wgmma_1stage";
  expect_close(b, pr, ref, wg1);
  expect_wgmma_near_mma_sync(wg, mma, name);
  EXPECT_LE(rel_err(wg.dh0, mma.dh0), 2e-3) << name << " dh0: wgmma vs mma.sync";
  EXPECT_TRUE(same_bits(wg, wg1)) << name << ": one stage against two";
  // both chains at once (their one-stage forms in one launch per phase, the reverse summaries in a buffer of their
  // own; a CTA per chain, or one CTA of both): the same products in the same order, so the same bits as one chain
  // after the other
  EXPECT_TRUE(same_bits(wg, run_gpu_chains(b, pr, 2))) << name << ": both chains at once (a CTA per chain)";
  EXPECT_TRUE(same_bits(wg, run_gpu_chains(b, pr, 3))) << name << ": both chains at once (one CTA of both)";
  EXPECT_TRUE(same_bits(wg, run_gpu_chains(b, pr, 1))) << name << ": exec.chunk_bwd_chains = 1";
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(same_bits(wg, run_gpu_dstate_pass(b, pr, ChunkStatePass::wgmma, 2))) << name << " repeat " << i;
}

TEST(CudaChunkBwd, DStatePassWgmmaAgainstMmaSync) {
  REQUIRE_GPU();
  // a 64-chunk walk (weak decay: every chunk's gradient reaches the earlier ones), V-major, GQA 2
  BwdCase b = bcase("dwg_walk_t4096_gqa2_vmajor", 1, 4096, 2, 4, 128, 128);
  b.c.g_scale = 0.02;
  b.c.layout = StateLayout::v_major;
  b.segments = 1;
  check_dstate_pass(b);
  // f16 (k and Q^T split into bf16 hi + lo in registers), two batch entries, no h0
  b = bcase("dwg_f16_b2_t700_no_h0", 2, 700, 2, 4, 128, 128);
  b.c.dtype = DType::f16;
  b.c.g_scale = 0.02;
  b.c.has_h0 = false;
  b.segments = 1;
  check_dstate_pass(b);
  // varlen: empty sequences, one-row and one-chunk sequences, slack rows, the fused gate
  b = bcase("dwg_varlen_slack_gate", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {0, 1, 64, 0, 777, 65, 0};
  b.slack = 5;
  b.gate = true;
  b.gate_decay = 0.01;
  b.segments = 1;
  check_dstate_pass(b);
  // the split forced: several segments per sequence (summaries with their M columns, the reverse scan, segments from
  // their boundary gradients), an empty sequence and one shorter than a segment
  b = bcase("dwg_split_varlen_p5", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {900, 0, 40, 1300};
  b.c.g_scale = 0.02;
  b.slack = 3;
  b.segments = 5;
  check_dstate_pass(b);
  b = bcase("dwg_split_f16_p3_no_dht", 1, 1000, 1, 2, 128, 128);
  b.c.dtype = DType::f16;
  b.c.g_scale = 0.02;
  b.has_dht = false;
  b.segments = 3;
  check_dstate_pass(b);
  // nearly parallel keys (W^T dU and K dS cancel most when the keys align)
  b = bcase("dwg_near_parallel_keys", 1, 300, 1, 2, 128, 128);
  b.special = 3;
  b.segments = 1;
  check_dstate_pass(b);
}

// Bitwise determinism over repeated runs, and a CUDA graph of the call replays to the eager result; unsplit and with
// the chains' segment split.
void check_deterministic(const BwdCase& b) {
  SCOPED_TRACE(b.c.name);
  const Problem pr = make_problem(b);
  GpuRun run(b, pr);
  run.poison();
  ASSERT_TRUE(run.launch().ok());
  run.fetch();
  const Grads first = run.out;
  for (int i = 0, n = test_repeats(100); i < n; ++i) {
    run.poison();
    ASSERT_TRUE(run.launch().ok());
    run.fetch();
    ASSERT_TRUE(same_bits(first, run.out)) << "run " << i << " differs from run 0";
  }
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  run.poison();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status st = run.launch(s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) {
    run.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    run.fetch();
    ASSERT_TRUE(same_bits(first, run.out)) << "graph replay " << i << " differs from eager";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  const Grads ref = run_oracle(b, pr);
  expect_close(b, pr, ref, first);
}

// Pass 4 on wgmma (the plan's choice at K = V = 128, bf16) against pass 4 on mma.sync, the same inputs through the
// same plan with only grads_pass changed: the same operand splits with fp32 accumulation, the sums in other orders, so
// the gradients within 2e-3 of each other; both against the oracle; the wgmma run bitwise stable over repeats. The
// cases: partial chunks (lengths 1, 63, 65, 131 in varlen with empty sequences and slack rows, the fused gate), a
// walk with GQA 4 and V-major states, the forced split, the discriminating inputs of gdn-math §10.4 (identical keys,
// g = -30, nearly parallel keys), no h0 and no dht, allow_neg_eigval.
Grads run_gpu_grads_pass(const BwdCase& bc, const Problem& pr, ChunkStatePass pass) {
  return run_gpu_planned(bc, pr, [&](ChunkBwdPlan& pl) {
    pl.grads_pass = pass;
    pl.fused_walk = 0;  // pass 4 alone (the plan's default is the fused pass)
  });
}

void check_grads_pass(const BwdCase& b) {
  check_pass_pair(b, run_gpu_grads_pass, "the chains do not read pass 4");
}

TEST(CudaChunkBwd, GradsPassWgmmaAgainstMmaSync) {
  REQUIRE_GPU();
  BwdCase b = bcase("gwg_varlen_lengths_slack_gate", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {1, 63, 0, 65, 131, 0, 64};
  b.slack = 5;
  b.gate = true;
  check_grads_pass(b);
  b = bcase("gwg_walk_t1500_gqa4_vmajor", 2, 1500, 1, 4, 128, 128);
  b.c.g_scale = 0.02;
  b.c.layout = StateLayout::v_major;
  check_grads_pass(b);
  b = bcase("gwg_split_p4_no_h0_no_dht", 1, 1200, 2, 4, 128, 128);
  b.c.has_h0 = false;
  b.has_dht = false;
  b.c.g_scale = 0.02;
  b.segments = 4;
  check_grads_pass(b);
  b = bcase("gwg_identical_keys", 1, 200, 1, 2, 128, 128);
  b.special = 1;
  check_grads_pass(b);
  b = bcase("gwg_g_minus_30", 1, 200, 1, 2, 128, 128);
  b.special = 2;
  check_grads_pass(b);
  b = bcase("gwg_near_parallel_keys", 1, 300, 1, 2, 128, 128);
  b.special = 3;
  check_grads_pass(b);
  b = bcase("gwg_neg_eigval_gate", 1, 500, 2, 4, 128, 128);
  b.gate = true;
  b.neg_eig = true;
  check_grads_pass(b);
}

// T = 1200 (19 chunks), GQA 2, without h0 and dht (the scans start from zero), slowly decaying gates (every chunk's
// boundary state matters): the fused pass's tests set their split and form on it
BwdCase no_h0_no_dht_case(const std::string& name) {
  BwdCase b = bcase(name, 1, 1200, 2, 4, 128, 128);
  b.c.has_h0 = false;
  b.has_dht = false;
  b.c.g_scale = 0.02;
  return b;
}

// The fused pass's cases that the tests of its forms share (names prefixed): partial chunks, empty sequences and slack
// rows with the fused gate; walks that cross sequence ends and continue a sequence (1500 tokens: 24 chunks, GQA 4,
// V-major); identical keys, g = -30, nearly parallel keys; without GQA (the l2norm chain in the pass), without the
// l2norm, slack rows zero; last, many varlen sequences with slack rows over more CTAs than SMs (the determinism case).
std::vector<BwdCase> fused_cases(const std::string& prefix) {
  std::vector<BwdCase> v;
  BwdCase b = bcase(prefix + "_varlen_lengths_slack_gate", 1, 0, 2, 4, 128, 128);
  b.c.seqlens = {1, 63, 0, 65, 131, 0, 64, 1100};
  b.slack = 5;
  b.gate = true;
  v.push_back(b);
  b = bcase(prefix + "_walk_t1500_gqa4_vmajor", 2, 1500, 1, 4, 128, 128);
  b.c.g_scale = 0.02;
  b.c.layout = StateLayout::v_major;
  v.push_back(b);
  for (int special : {1, 2, 3}) {
    b = bcase(prefix + (special == 1   ? "_identical_keys"
                        : special == 2 ? "_g_minus_30"
                                       : "_near_parallel_keys"),
              1, special == 3 ? 300 : 200, 1, 2, 128, 128);
    b.special = special;
    v.push_back(b);
  }
  b = bcase(prefix + "_mha_varlen_slack_no_l2norm", 1, 0, 4, 4, 128, 128);
  b.c.seqlens = {70, 0, 1300, 5};
  b.c.l2norm = false;
  b.slack = 7;
  v.push_back(b);
  b = bcase(prefix + "_many_varlen_slack", 1, 0, 4, 16, 128, 128);
  b.c.seqlens = {2000, 0, 1500, 77, 0, 600};
  b.slack = 9;
  v.push_back(b);
  return v;
}

// The fused gradients pass (exec.chunk_bwd_grads = 3: pass 4 with the reverse chain, walks of 16 chunk slots that
// carry dS; docs/chunk_bwd.md "Fused gradients pass") against the oracle: fused_cases, then the walk case with pass
// 5a summing the value heads (4) instead of the pass's clusters, GQA 16 (no cluster: pass 5a), the chains' split
// (pass 3's records from the split walks) without h0 and dht, MHA with the gate; the last case bitwise repeatable,
// eager and graph replay.
TEST(CudaChunkBwd, FusedGradsAgainstOracle) {
  REQUIRE_GPU();
  std::vector<BwdCase> cs = fused_cases("fused");
  for (BwdCase& b : cs) b.grads = 3;
  for (size_t i = 0; i + 1 < cs.size(); ++i) check(cs[i]);
  BwdCase b = cs[1];
  b.c.name = "fused_walk_t1500_gqa4_vmajor_pass5a";
  b.grads = 4;
  check(b);
  b = bcase("fused_gqa16_varlen", 1, 0, 1, 16, 128, 128);
  b.c.seqlens = {700, 0, 65};
  b.grads = 3;
  check(b);
  b = no_h0_no_dht_case("fused_split_p4_no_h0_no_dht");
  b.segments = 4;
  b.grads = 3;
  check(b);
  b = bcase("fused_mha_b2_t700_gate", 2, 700, 2, 2, 128, 128);
  b.gate = true;
  b.grads = 3;
  check(b);
  check_deterministic(cs.back());
}

// The chunk start states from chunk_fwd's state pass (exec.chunk_bwd_state = 2: its STATES form stores every chunk's
// S0 record, no o; docs/chunk_bwd.md "Chunk start states from the forward's state pass") against the fp64 oracle:
// fused_cases with the backward's chains unsplit (the form's requirement), so that the forward's own plan splits the
// long walks of few heads (T = 1500 Hv = 4: its summaries and scan, then S0 from the start states); then without h0
// and dht (the forward split again), and a beta of 2 with nearly parallel keys, which raises the beta flag on the
// device: pass 2 then runs after the forward's passes and the wgmma pass 4 reads its records. The last case bitwise
// repeatable, eager and graph replay.
TEST(CudaChunkBwd, StatesFromForwardAgainstOracle) {
  REQUIRE_GPU();
  std::vector<BwdCase> cs = fused_cases("s0fwd");
  for (BwdCase& b : cs) b.state = 2, b.segments = 1;
  for (size_t i = 0; i + 1 < cs.size(); ++i) check(cs[i]);
  BwdCase b = no_h0_no_dht_case("s0fwd_no_h0_no_dht_gqa2");
  b.segments = 1;
  b.state = 2;
  check(b);
  b = bcase("s0fwd_beta_two_near_parallel_keys", 1, 300, 1, 2, 128, 128);
  b.special = 4;
  b.state = 2;
  check(b);
  check_deterministic(cs.back());
  // Past one wave (Hv V / 32 = 160 chain CTAs on 132 SMs) the plan's own choice: chunk_fwd's start states, the chains
  // in waves. FlashQLA's gate pattern (g = 0 on every fourth value head: those reverse chains walk every chunk, the
  // others their windows, so prep forms W and dU0 in some chunks only), GQA 4 (pass 5a), two walks of the fused pass.
  b = bcase("s0fwd_plan_in_waves_gqa4", 1, 20 * 64, 10, 40, 128, 128);
  b.special = 7;
  check(b);
}

// The dstate chain's decay window (docs/chunk_bwd.md "Decay window of the reverse chain"). Head 0 decays fast (g =
// -0.5: e^-32 a chunk, a window of one chunk), head 1 not at all (g = 0: no window), MHA, 40 chunks = walks of 16,
// 16, 8 chunks. (1) The gradients with the window against the fp64 oracle and against the chain over every chunk
// (exec.chunk_bwd_window = 1): what the window drops is below fp32 rounding. (2) dO NaN in chunk 20 (walk 1): with
// the window, head 0's gradients of walk 0 (tokens < 1024) and dh0 stay finite and equal to the clean run's (the
// gradient at chunk 15's end came from chunk 16 alone, chunks 17-39 skipped); head 1's are NaN (no window: the
// chain crosses chunk 20). Over every chunk head 0's are NaN too. (3) Neither unit keys (no l2norm) nor a beta
// outside [0, 2] (one beta = -0.1 in chunk 16 of head 0) allows the window: head 0's walk 0 NaN again. (4) Varlen
// (sequences not aligned to the walks, an empty one), fast decay, GQA 2 with its clusters: the window against the
// oracle and the chain over every chunk.
TEST(CudaChunkBwd, DecayWindowOfTheReverseChain) {
  REQUIRE_GPU();
  constexpr int64_t T = 40 * 64, Hv = 2, walk0 = 16 * 64;
  BwdCase b = bcase("window_fast_and_flat_heads", 1, T, 2, Hv, 128, 128);
  b.grads = 3;
  b.segments = 8;  // the summary probes below place their NaN chunks by segments of 5 chunks, whatever the plan picks
  auto problem = [&](const BwdCase& bc) {
    Problem pr = make_problem(bc);
    for (int64_t t = 0; t < T; ++t) pr.in.g.set(t * Hv + 0, -0.5), pr.in.g.set(t * Hv + 1, 0.0);
    return pr;
  };
  const auto near = [](const Grads& x, const Grads& y, const char* what) {
    for (auto [gx, gy, name] : {std::tuple{&x.dq, &y.dq, "dq"},
                                {&x.dk, &y.dk, "dk"},
                                {&x.dv, &y.dv, "dv"},
                                {&x.dg, &y.dg, "dg"},
                                {&x.dbeta, &y.dbeta, "dbeta"},
                                {&x.dh0, &y.dh0, "dh0"}})
      EXPECT_LE(rel_err(*gx, *gy), 1e-5) << what << ": " << name;
  };
  const Problem pr = problem(b);
  const Grads win = run_gpu(b, pr);
  expect_close(b, pr, run_oracle(b, pr), win);
  BwdCase every = b;
  every.window = 1;
  near(win, run_gpu(every, pr), "window against every chunk");

  // walk 0 of head h: are dv's and dg's rows (tokens < 1024) and dh0 all finite, and (finite) near `clean`'s?
  const auto walk0_finite = [&](const Grads& g, int64_t h) {
    bool fin = true;
    for (int64_t t = 0; t < walk0; ++t) {
      fin = fin && std::isfinite(g.dg.get(t * Hv + h)) && std::isfinite(g.dbeta.get(t * Hv + h));
      for (int64_t j = 0; j < 128; ++j) fin = fin && std::isfinite(g.dv.get((t * Hv + h) * 128 + j));
    }
    for (int64_t i = 0; i < 128 * 128; ++i) fin = fin && std::isfinite(g.dh0.get(h * 128 * 128 + i));
    return fin;
  };
  const auto poisoned = [&](Problem x) {  // dO NaN in chunk 20
    for (int64_t t = 20 * 64; t < 21 * 64; ++t)
      for (int64_t i = 0; i < Hv * 128; ++i) x.d_o.set(t * Hv * 128 + i, std::numeric_limits<double>::quiet_NaN());
    return x;
  };
  const Problem bad = poisoned(pr);
  const Grads wbad = run_gpu(b, bad);
  EXPECT_TRUE(walk0_finite(wbad, 0)) << "head 0 (window): walk 0 must not see chunk 20";
  EXPECT_FALSE(walk0_finite(wbad, 1)) << "head 1 (g = 0, no window): walk 0 must see chunk 20";
  double dv_dev = 0, dh0_dev = 0;
  for (int64_t t = 0; t < walk0; ++t)
    for (int64_t j = 0; j < 128; ++j) {
      const int64_t i = (t * Hv + 0) * 128 + j;
      dv_dev = std::max(dv_dev, std::abs(wbad.dv.get(i) - win.dv.get(i)));
    }
  for (int64_t i = 0; i < 128 * 128; ++i) dh0_dev = std::max(dh0_dev, std::abs(wbad.dh0.get(i) - win.dh0.get(i)));
  EXPECT_EQ(dv_dev, 0.0) << "head 0's walk 0 with and without the NaN chunk";
  EXPECT_EQ(dh0_dev, 0.0) << "head 0's dh0 with and without the NaN chunk";
  EXPECT_FALSE(walk0_finite(run_gpu(every, bad), 0)) << "every chunk: head 0's walk 0 sees chunk 20";
  BwdCase raw = b;
  raw.c.l2norm = false;  // unit keys as given (make_inputs), but nothing tells the kernels so
  const Problem raw_bad = poisoned(problem(raw));
  EXPECT_TRUE(walk0_finite(run_gpu(raw, problem(raw)), 0)) << "no l2norm, clean inputs";
  EXPECT_FALSE(walk0_finite(run_gpu(raw, raw_bad), 0)) << "no l2norm: no window";
  Problem neg = pr;
  neg.in.beta.set((16 * 64 + 3) * Hv + 0, -0.1);
  EXPECT_TRUE(walk0_finite(run_gpu(b, neg), 0)) << "a beta below 0, clean inputs";
  EXPECT_FALSE(walk0_finite(run_gpu(b, poisoned(neg)), 0)) << "a beta below 0 in chunk 16: no window";

  // The split's summaries over their windows (P = 8: segments of 5 chunks): v NaN in chunk 2 reaches
  // the chunks past segment 0 only through its forward summary over every chunk; dO NaN in chunk 7 reaches dh0, where
  // chunk 0 is unbounded (no window from dh0), only through segment 1's reverse summary over every chunk.
  const auto nan_chunk = [&](HostTensor& x, int64_t ch) {
    for (int64_t t = ch * 64; t < (ch + 1) * 64; ++t)
      for (int64_t i = 0; i < Hv * 128; ++i) x.set(t * Hv * 128 + i, std::numeric_limits<double>::quiet_NaN());
  };
  const auto dq_finite_from5 = [&](const Grads& g, int64_t h) {  // q/k head h = value head h (Hqk = Hv)
    bool fin = true;
    for (int64_t t = 5 * 64; t < T; ++t)
      for (int64_t j = 0; j < 128; ++j) fin = fin && std::isfinite(g.dq.get((t * Hv + h) * 128 + j));
    return fin;
  };
  const auto dh0_finite = [&](const Grads& g, int64_t h) {
    bool fin = true;
    for (int64_t i = 0; i < 128 * 128; ++i) fin = fin && std::isfinite(g.dh0.get(h * 128 * 128 + i));
    return fin;
  };
  Problem vbad = pr;
  nan_chunk(vbad.in.v, 2);
  const Grads gv = run_gpu(b, vbad);
  EXPECT_TRUE(dq_finite_from5(gv, 0)) << "v NaN in chunk 2: head 0's forward summary of segment 0 over its window";
  EXPECT_FALSE(dq_finite_from5(gv, 1)) << "v NaN in chunk 2: head 1 (g = 0) summarizes every chunk";
  EXPECT_FALSE(dq_finite_from5(run_gpu(every, vbad), 0)) << "v NaN in chunk 2: every chunk";
  Problem dbad = pr;
  dbad.in.beta.set(3 * Hv + 0, -0.1);
  nan_chunk(dbad.d_o, 7);
  const Grads gd = run_gpu(b, dbad);
  EXPECT_TRUE(dh0_finite(gd, 0)) << "dO NaN in chunk 7: head 0's reverse summary of segment 1 over its window";
  EXPECT_FALSE(dh0_finite(gd, 1)) << "dO NaN in chunk 7: head 1 (g = 0) summarizes every chunk";
  EXPECT_FALSE(dh0_finite(run_gpu(every, dbad), 0)) << "dO NaN in chunk 7: every chunk";

  BwdCase v = bcase("window_varlen_gqa2", 1, 0, 2, 4, 128, 128);
  v.c.seqlens = {300, 2300, 0, 1500, 64};
  v.grads = 3;
  const Problem pv = make_problem(v);  // g = -U(0, 1): windows of one chunk
  const Grads vw = run_gpu(v, pv);
  expect_close(v, pv, run_oracle(v, pv), vw);
  BwdCase ve = v;
  ve.window = 1;
  near(vw, run_gpu(ve, pv), "varlen: window against every chunk");
}

// More items than SMs (a wave and a partial one), varlen with slack slots (CTAs without a chunk), repeat and graph
// replay bitwise.
TEST(CudaChunkBwd, GradsPassWgmmaManyItems) {
  REQUIRE_GPU();
  BwdCase b = bcase("gwg_many_varlen_slack", 1, 0, 4, 16, 128, 128);
  b.c.seqlens = {2000, 0, 1500, 77, 0, 600};  // (6 + 66) x 16 items
  b.slack = 9;
  b.grads = 2;
  check_deterministic(b);
}

TEST(CudaChunkBwd, DeterministicAndGraphReplayEqualsEager) {
  REQUIRE_GPU();
  BwdCase b = bcase("determinism_varlen_gqa_gate", 1, 0, 2, 8, 128, 128);
  b.c.seqlens = {300, 0, 65, 129};
  b.slack = 5;
  b.gate = true;
  check_deterministic(b);
  b.c.name = "determinism_varlen_gqa_gate_split3";
  b.segments = 3;
  check_deterministic(b);
  b.c.name = "determinism_varlen_gqa_gate_split3_both_chains";  // both chains in one launch per phase
  b.chains = 2;
  check_deterministic(b);
  b.c.name = "determinism_varlen_gqa_gate_both_chains";
  b.segments = 1;
  check_deterministic(b);
}

// The fused pass follows one CTA of both chains, or the reverse chain alone where the start states come from
// chunk_fwd's passes (ChunkBwdPlan::fused_follows: a programmatic dependent whose CTAs take their value heads in the
// order the heads' chain CTAs end). Under FlashQLA's gate pattern that order is not the
// heads' own: the g = 0 heads' dstate chain walks every chunk, the others' chains only their decay windows and end
// first. Against the oracle, bitwise against a CTA per chain (the fused pass launched after the chains, in head
// order), and bitwise over repeats and graph replay; with GQA 2 (units of a q/k head's two value heads, the fused
// pass's pairs) and without.
TEST(CudaChunkBwd, FusedPassFollowsTheChains) {
  REQUIRE_GPU();
  for (const int64_t Hqk : {4, 8}) {
    BwdCase b = bcase("follows_t2560_hqk" + std::to_string(Hqk) + "_hv8", 1, 40 * 64, Hqk, 8, 128, 128);
    b.special = 7;
    b.chains = 3;
    SCOPED_TRACE(b.c.name);
    const Problem pr = make_problem(b);
    const Grads got = run_gpu(b, pr);
    expect_close(b, pr, run_oracle(b, pr), got);
    BwdCase apart = b;
    apart.chains = 2;
    EXPECT_TRUE(same_bits(got, run_gpu(apart, pr))) << "one CTA of both chains against a CTA per chain";
    check_deterministic(b);
    // the chunk start states from chunk_fwd's passes: the fused pass follows the reverse chain alone
    BwdCase fwd = b;
    fwd.chains = 0, fwd.state = 2, fwd.segments = 1;  // chunk_fwd's states need the chains unsplit
    fwd.c.name += "_fwd_states";
    expect_close(fwd, pr, run_oracle(fwd, pr), run_gpu(fwd, pr));
    check_deterministic(fwd);
  }
}

// The mma.sync grads pass is persistent (one CTA per SM walks the (chunk slot, value head) items with the next item's
// inputs in flight): shapes of several items per CTA on any GPU, fixed length and varlen with slack slots (items
// without a chunk, skipped by the walk), against the oracle; the varlen one also bitwise over repeated runs and graph
// replay.
TEST(CudaChunkBwd, PersistentGradsManyItemsPerCta) {
  REQUIRE_GPU();
  BwdCase b = bcase("persistent_b2_t1100_hv8", 2, 1100, 2, 8, 128, 128);  // 2 x 18 slots x 8 heads: 288 items
  b.grads = 1;                                                            // (bf16 K = V = 128: wgmma by default)
  check(b);
  b = bcase("persistent_f16_t3000_k128v64", 1, 3000, 4, 8, 128, 64);  // 47 x 8: 376 items
  b.c.dtype = DType::f16;
  check(b);
  b = bcase("persistent_varlen_slack_gate_k64v128", 1, 0, 2, 8, 64, 128);
  b.c.seqlens = {2000, 0, 1500, 77, 0, 600};  // (6 + 66) x 8: 576 items, slack slots among them
  b.slack = 9;
  b.gate = true;
  check_deterministic(b);
}

// The prep pass at two CTAs per SM over several waves of (chunk slot, value head) items (its warps 0-3 invert while
// warps 4-7 form dU; the records go out in 16-byte stores): K = V = 128 and K = V = 64, bf16 and f16, fixed length
// with a partial last chunk and varlen with slack rows, against the oracle.
TEST(CudaChunkBwd, PrepManyItems) {
  REQUIRE_GPU();
  BwdCase b = bcase("prep_t2000_hv32_k128v128", 1, 2000, 16, 32, 128, 128);  // 32 x 32 = 1024 items
  b.gate = true;
  check(b);
  b = bcase("prep_f16_t1500_hv16_k64v64", 2, 1500, 4, 16, 64, 64);  // 2 x 24 x 16 = 768 items
  b.c.dtype = DType::f16;
  check(b);
  b = bcase("prep_varlen_slack_hv16_k128v64", 1, 0, 8, 16, 128, 64);
  b.c.seqlens = {900, 0, 63, 1, 700};
  b.slack = 6;
  check(b);
}

#else

TEST(CudaChunkBwd, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif  // FLASHGDN_WITH_CUDA

}  // namespace
}  // namespace flashgdn::test
