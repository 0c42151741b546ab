// cpu::chunk_bwd: analytic gradients (recurrent reverse pass and chunked backward) vs central finite
// differences of cpu::chunk_fwd in fp64, through the l2norm and gate chains, with GQA, varlen with an empty
// sequence, allow_neg_eigval and both state layouts; chunked bwd == recurrent bwd; fp32 vs fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cpu_test_helpers.hpp"

namespace flashgdn::test {
namespace {

// A full problem: raw inputs as given to the op (raw a / b when the gate is fused) and the loss weights.
struct Problem {
  GdnCase c;
  HostTensor q, k, v, g, beta, A_log, dt_bias, h0, cu;
  HostTensor Wo, Wh;  // loss = sum(o * Wo) + sum(hT * Wh), so d_o = Wo and d_ht = Wh
  bool gate = false, sig = false, neg = false;
};

Problem make_problem(const GdnCase& c, bool gate, bool neg, uint64_t seed) {
  Problem p;
  p.c = c;
  GdnInputs in = make_inputs(c);
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  p.g = in.g;
  p.beta = in.beta;
  p.h0 = in.h0;
  p.cu = in.cu;
  p.gate = p.sig = gate;
  p.neg = neg;
  Rng rng(seed);
  if (gate) {  // raw a, b and the gate parameters (gdn_check.py make_problem ranges)
    p.A_log = HostTensor(DType::f64, {c.Hv});
    p.dt_bias = HostTensor(DType::f64, {c.Hv});
    for (int64_t h = 0; h < c.Hv; ++h) {
      p.A_log.set(h, std::log(rng.uniform(1, 16)) * 0.5);
      p.dt_bias.set(h, rng.normal() * 0.5 - 2.0);
    }
    for (int64_t i = 0; i < p.g.numel(); ++i) {
      p.g.set(i, rng.normal());
      p.beta.set(i, rng.normal());
    }
  }
  p.Wo = HostTensor(DType::f64, p.v.shape);
  for (int64_t i = 0; i < p.Wo.numel(); ++i) p.Wo.set(i, rng.normal());
  p.Wh = state_tensor(c, DType::f64, c.N());
  for (int64_t i = 0; i < p.Wh.numel(); ++i) p.Wh.set(i, rng.normal());
  return p;
}

template <class P>
void fill_common(const Problem& pr, P* p) {
  p->q = pr.q.view();
  p->k = pr.k.view();
  p->v = pr.v.view();
  p->g = pr.g.view();
  p->beta = pr.beta.view();
  p->A_log = pr.A_log.view();
  p->dt_bias = pr.dt_bias.view();
  p->initial_state = pr.h0.view();
  p->cu_seqlens = pr.cu.view();
  p->use_qk_l2norm_in_kernel = pr.c.l2norm;
  p->gate.use_gate_in_kernel = pr.gate;
  p->gate.use_beta_sigmoid_in_kernel = pr.sig;
  p->gate.allow_neg_eigval = pr.neg;
  p->state_layout = pr.c.layout;
}

double loss(const Problem& pr) {
  HostTensor o = poisoned(pr.v.dtype, pr.v.shape), hT = state_tensor(pr.c, DType::f64, pr.c.N());
  ChunkFwdParams p;
  fill_common(pr, &p);
  p.o = o.view();
  p.final_state = hT.view();
  p.exec.cpu_fp64 = true;
  p.exec.cpu_threads = 1;
  EXPECT_TRUE(cpu::chunk_fwd(p, chunk_dims(pr.c)).ok());
  // The sequences of the FD problems cover every row.
  double L = 0;
  for (int64_t i = 0; i < o.numel(); ++i) L += o.get(i) * pr.Wo.get(i);
  for (int64_t i = 0; i < hT.numel(); ++i) L += hT.get(i) * pr.Wh.get(i);
  return L;
}

struct Grads {
  HostTensor dq, dk, dv, dg, dbeta, dh0, dA_log, ddt_bias;
};

Grads grads(const Problem& pr, CpuAlgo algo, int32_t C, bool fp64, bool with_dht = true, int32_t threads = 2) {
  Grads g;
  const DType dt = fp64 ? DType::f64 : DType::f32;
  g.dq = poisoned(dt, pr.q.shape);
  g.dk = poisoned(dt, pr.k.shape);
  g.dv = poisoned(dt, pr.v.shape);
  g.dg = poisoned(dt, pr.g.shape);
  g.dbeta = poisoned(dt, pr.beta.shape);
  g.dh0 = poisoned(dt, pr.Wh.shape);
  if (pr.gate) {
    g.dA_log = poisoned(dt, {pr.c.Hv});
    g.ddt_bias = poisoned(dt, {pr.c.Hv});
  }
  ChunkBwdParams p;
  fill_common(pr, &p);
  p.d_o = pr.Wo.view();
  if (with_dht) p.d_ht = pr.Wh.view();
  p.dq = g.dq.view();
  p.dk = g.dk.view();
  p.dv = g.dv.view();
  p.dg = g.dg.view();
  p.dbeta = g.dbeta.view();
  p.dh0 = g.dh0.view();
  p.dA_log = g.dA_log.view();
  p.ddt_bias = g.ddt_bias.view();
  p.chunk_size = C;
  p.exec.cpu_algo = algo;
  p.exec.cpu_fp64 = fp64;
  p.exec.cpu_threads = threads;
  SeqDims d = chunk_dims(pr.c);
  Status st = cpu::chunk_bwd(p, d);
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

// Central finite differences of the loss w.r.t. every entry of *x.
HostTensor fd(Problem& pr, HostTensor* x, double eps = 1e-6) {
  HostTensor out(DType::f64, x->shape);
  for (int64_t i = 0; i < x->numel(); ++i) {
    const double old = x->get(i);
    x->set(i, old + eps);
    const double lp = loss(pr);
    x->set(i, old - eps);
    const double lm = loss(pr);
    x->set(i, old);
    out.set(i, (lp - lm) / (2 * eps));
  }
  return out;
}

void check_against_fd(Problem& pr, double tol = 1e-6) {
  struct Item {
    const char* name;
    HostTensor* x;
    HostTensor Grads::*g;
  };
  std::vector<Item> items = {{"dq", &pr.q, &Grads::dq},          {"dk", &pr.k, &Grads::dk},
                             {"dv", &pr.v, &Grads::dv},          {"dg", &pr.g, &Grads::dg},
                             {"dbeta", &pr.beta, &Grads::dbeta}, {"dh0", &pr.h0, &Grads::dh0}};
  if (pr.gate) {
    items.push_back({"dA_log", &pr.A_log, &Grads::dA_log});
    items.push_back({"ddt_bias", &pr.dt_bias, &Grads::ddt_bias});
  }
  const Grads rec = grads(pr, CpuAlgo::recurrent, 16, true), ch = grads(pr, CpuAlgo::chunked, 16, true);
  for (const Item& it : items) {
    const HostTensor ref = fd(pr, it.x);
    std::fprintf(stderr, "[info] %s: rel err vs FD %.2e (recurrent) %.2e (chunked)\n", it.name,
                 rel_err(rec.*(it.g), ref), rel_err(ch.*(it.g), ref));
    EXPECT_LE(rel_err(rec.*(it.g), ref), tol) << it.name << " (recurrent backward)";
    EXPECT_LE(rel_err(ch.*(it.g), ref), tol) << it.name << " (chunked backward)";
  }
}

GdnCase small_varlen() {
  GdnCase c;
  c.name = "fd_varlen";
  c.seqlens = {20, 0, 37};  // an empty sequence, several chunks of 16, partial last chunks
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 8;
  c.V = 6;
  c.dtype = DType::f64;
  c.g_scale = 0.5;
  c.seed = 31;
  return c;
}

TEST(ChunkBwd, CoreGradientsMatchFiniteDifferences) {
  GdnCase c = small_varlen();
  c.l2norm = false;  // keys unit-norm from the generator; g, beta given explicitly
  Problem pr = make_problem(c, false, false, 1);
  check_against_fd(pr);
}

TEST(ChunkBwd, L2normAndGateChainsMatchFiniteDifferences) {
  for (bool neg : {false, true}) {
    SCOPED_TRACE(neg ? "allow_neg_eigval" : "beta = sigmoid(b)");
    Problem pr = make_problem(small_varlen(), true, neg, 2);
    check_against_fd(pr);
  }
}

TEST(ChunkBwd, VMajorFixedLengthMatchesFiniteDifferences) {
  GdnCase c = small_varlen();
  c.seqlens.clear();
  c.B = 2;
  c.T = 19;
  c.layout = StateLayout::v_major;
  Problem pr = make_problem(c, true, false, 3);
  check_against_fd(pr);
}

TEST(ChunkBwd, ChunkedEqualsRecurrentFp64) {
  for (GdnCase c : standard_cases()) {
    c.dtype = DType::f64;
    const bool gate = c.seed % 2 == 0;
    Problem pr = make_problem(c, gate, gate, c.seed);
    const Grads rec = grads(pr, CpuAlgo::recurrent, 64, true);
    for (int32_t C : {16, 32, 64}) {
      SCOPED_TRACE(c.name + " C=" + std::to_string(C));
      const Grads ch = grads(pr, CpuAlgo::chunked, C, true);
      EXPECT_LE(rel_err(ch.dq, rec.dq), 1e-12);
      EXPECT_LE(rel_err(ch.dk, rec.dk), 1e-12);
      EXPECT_LE(rel_err(ch.dv, rec.dv), 1e-12);
      EXPECT_LE(rel_err(ch.dg, rec.dg), 1e-11);
      EXPECT_LE(rel_err(ch.dbeta, rec.dbeta), 1e-12);
      EXPECT_LE(rel_err(ch.dh0, rec.dh0), 1e-12);
      if (gate) {
        EXPECT_LE(rel_err(ch.dA_log, rec.dA_log), 1e-11);
        EXPECT_LE(rel_err(ch.ddt_bias, rec.ddt_bias), 1e-11);
      }
    }
  }
}

TEST(ChunkBwd, Fp32WithinToleranceOfFp64) {
  for (GdnCase c : standard_cases()) {
    const bool gate = c.seed % 2 == 1;
    Problem pr = make_problem(c, gate, false, c.seed);
    const Grads ref = grads(pr, CpuAlgo::recurrent, 64, true);
    for (CpuAlgo algo : {CpuAlgo::recurrent, CpuAlgo::chunked}) {
      SCOPED_TRACE(c.name + (algo == CpuAlgo::chunked ? " chunked" : " recurrent"));
      const Grads f = grads(pr, algo, 64, false);
      EXPECT_LE(rel_err(f.dq, ref.dq), 1e-4);
      EXPECT_LE(rel_err(f.dk, ref.dk), 1e-4);
      EXPECT_LE(rel_err(f.dv, ref.dv), 1e-4);
      EXPECT_LE(rel_err(f.dg, ref.dg), 1e-4);
      EXPECT_LE(rel_err(f.dbeta, ref.dbeta), 1e-4);
      EXPECT_LE(rel_err(f.dh0, ref.dh0), 1e-4);
    }
  }
}

// Absent d_ht is a zero d_ht; an empty sequence gets dh0 = d_ht exactly; uncovered rows get zero gradients.
TEST(ChunkBwd, AbsentDhtAndEmptySequences) {
  GdnCase c = small_varlen();
  Problem pr = make_problem(c, false, false, 5);
  Problem zero = pr;
  zero.Wh.fill(0.0);
  for (CpuAlgo algo : {CpuAlgo::recurrent, CpuAlgo::chunked}) {
    const Grads a = grads(pr, algo, 16, true, false), b = grads(zero, algo, 16, true, true);
    EXPECT_TRUE(a.dq.bit_equal(b.dq));
    EXPECT_TRUE(a.dh0.bit_equal(b.dh0));
    const Grads full = grads(pr, algo, 16, true, true);
    const int64_t per = c.Hv * c.K * c.V;
    for (int64_t e = 0; e < per; ++e) ASSERT_EQ(full.dh0.get(per + e), pr.Wh.get(per + e));  // sequence 1 is empty
  }
}

// The GQA reduction and the dA_log / ddt_bias sums are deterministic: any thread count gives the same bits.
TEST(ChunkBwd, DeterministicAcrossThreadCounts) {
  GdnCase c = standard_cases()[0];
  Problem pr = make_problem(c, true, false, 9);
  for (CpuAlgo algo : {CpuAlgo::recurrent, CpuAlgo::chunked}) {
    const Grads a = grads(pr, algo, 32, false, true, 1), b = grads(pr, algo, 32, false, true, 5);
    EXPECT_TRUE(a.dq.bit_equal(b.dq));
    EXPECT_TRUE(a.dk.bit_equal(b.dk));
    EXPECT_TRUE(a.dg.bit_equal(b.dg));
    EXPECT_TRUE(a.dA_log.bit_equal(b.dA_log));
    EXPECT_TRUE(a.ddt_bias.bit_equal(b.ddt_bias));
  }
}

}  // namespace
}  // namespace flashgdn::test
