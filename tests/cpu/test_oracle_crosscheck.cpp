// Cross-check of the CPU backend against the independent numpy implementation of the spec, docs/gdn_check.py
// (full_forward / full_backward: l2norm, Qwen3-Next gating, GQA, varlen with an empty sequence). The test
// writes its inputs to a temporary directory, runs python3 on a short script that imports gdn_check.py, and
// compares the outputs. Without python3 + numpy it skips with a visible message.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cpu_test_helpers.hpp"

namespace flashgdn::test {
namespace {

namespace fs = std::filesystem;

bool python_with_numpy() {
  return std::system("python3 -c \"import numpy\" > /dev/null 2>&1") == 0;
}

void write_array(const fs::path& p, const HostTensor& t) {
  std::ofstream f(p);
  f.precision(17);
  for (int64_t i = 0; i < t.numel(); ++i) f << t.get(i) << "\n";
}

HostTensor read_array(const fs::path& p, DType dt, std::vector<int64_t> shape) {
  HostTensor t(dt, std::move(shape));
  std::ifstream f(p);
  double x = 0;
  int64_t i = 0;
  while (i < t.numel() && (f >> x)) t.set(i++, x);
  EXPECT_EQ(i, t.numel()) << "short file " << p;
  return t;
}

constexpr const char* kScript = R"PY(
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import gdn_check as G
d = sys.argv[2]
meta = np.loadtxt(d + "/meta.txt")
TT, Hqk, Hv, K, V, N, neg = (int(x) for x in meta[:7])
scale = float(meta[7])
ld = lambda name, shape: np.loadtxt(d + "/" + name + ".txt").reshape(shape)
cu = ld("cu", (N + 1,)).astype(np.int64)
q = ld("q", (TT, Hqk, K)); k = ld("k", (TT, Hqk, K)); v = ld("v", (TT, Hv, V))
a = ld("a", (TT, Hv)); braw = ld("b", (TT, Hv)); A_log = ld("A_log", (Hv,)); dtb = ld("dt_bias", (Hv,))
h0 = ld("h0", (N, Hv, K, V)); dO = ld("dO", (TT, Hv, V)); dhT = ld("dhT", (N, Hv, K, V))
P = [q, k, v, a, braw, A_log, dtb, h0]
o, hT = G.full_forward(P, cu, Hqk, Hv, scale, neg_eig=bool(neg))
grads, dg, db = G.full_backward(P, cu, Hqk, Hv, scale, dO, dhT, neg_eig=bool(neg))
names = ["dq", "dk", "dv", "da", "db", "dA_log", "ddt_bias", "dh0"]
np.savetxt(d + "/o.txt", o.ravel(), fmt="%.17g")
np.savetxt(d + "/hT.txt", hT.ravel(), fmt="%.17g")
for n, x in zip(names, grads):
    np.savetxt(d + "/" + n + ".txt", np.asarray(x).ravel(), fmt="%.17g")
)PY";

void crosscheck(const std::vector<int64_t>& lens, int64_t Hqk, int64_t Hv, int64_t K, int64_t V, bool neg,
                uint64_t seed) {
  GdnCase c;
  c.seqlens = lens;
  c.Hqk = Hqk;
  c.Hv = Hv;
  c.K = K;
  c.V = V;
  c.dtype = DType::f64;
  c.seed = seed;
  GdnInputs in = make_inputs(c);
  const int64_t TT = c.total_T(), N = c.N();
  Rng rng(seed + 1);
  HostTensor a(DType::f64, in.g.shape), b(DType::f64, in.g.shape), A_log(DType::f64, {Hv}), dtb(DType::f64, {Hv});
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.set(i, rng.normal());
    b.set(i, rng.normal());
  }
  for (int64_t h = 0; h < Hv; ++h) {
    A_log.set(h, std::log(rng.uniform(1, 16)) * 0.5);
    dtb.set(h, rng.normal() * 0.5 - 2.0);
  }
  HostTensor dO(DType::f64, in.v.shape), dhT(DType::f64, in.h0.shape);
  for (int64_t i = 0; i < dO.numel(); ++i) dO.set(i, rng.normal());
  for (int64_t i = 0; i < dhT.numel(); ++i) dhT.set(i, rng.normal());
  const ChunkDims d = chunk_dims(c);

  const fs::path dir =
      fs::temp_directory_path() / ("flashgdn_oracle_" + std::to_string(seed) + "_" + std::to_string(std::rand()));
  fs::create_directories(dir);
  {
    std::ofstream m(dir / "meta.txt");
    m.precision(17);
    m << TT << " " << Hqk << " " << Hv << " " << K << " " << V << " " << N << " " << int(neg) << " " << double(d.scale)
      << "\n";
    std::ofstream s(dir / "run.py");
    s << kScript;
  }
  write_array(dir / "cu.txt", in.cu);
  write_array(dir / "q.txt", in.q);
  write_array(dir / "k.txt", in.k);
  write_array(dir / "v.txt", in.v);
  write_array(dir / "a.txt", a);
  write_array(dir / "b.txt", b);
  write_array(dir / "A_log.txt", A_log);
  write_array(dir / "dt_bias.txt", dtb);
  write_array(dir / "h0.txt", in.h0);
  write_array(dir / "dO.txt", dO);
  write_array(dir / "dhT.txt", dhT);
  const std::string cmd = "python3 \"" + (dir / "run.py").string() + "\" \"" FLASHGDN_SOURCE_DIR "/docs\" \"" +
                          dir.string() + "\" > \"" + (dir / "log.txt").string() + "\" 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "python failed, see " << (dir / "log.txt");

  const HostTensor o_ref = read_array(dir / "o.txt", DType::f64, in.v.shape);
  const HostTensor hT_ref = read_array(dir / "hT.txt", DType::f64, in.h0.shape);
  for (CpuAlgo algo : {CpuAlgo::recurrent, CpuAlgo::chunked}) {
    SCOPED_TRACE(algo == CpuAlgo::recurrent ? "recurrent" : "chunked");
    auto set_gate = [&](auto& p) {
      p.g = a.view();
      p.beta = b.view();
      p.A_log = A_log.view();
      p.dt_bias = dtb.view();
      p.gate.use_gate_in_kernel = true;
      p.gate.use_beta_sigmoid_in_kernel = true;
      p.gate.allow_neg_eigval = neg;
    };
    FwdOut f = run_fwd(c, in, algo, 16, true, [&](ChunkFwdParams& p, ChunkDims&) { set_gate(p); });
    EXPECT_LE(rel_err(f.o, o_ref), 1e-12);
    EXPECT_LE(rel_err(f.hT, hT_ref), 1e-12);

    HostTensor dq = poisoned(DType::f64, in.q.shape), dk = poisoned(DType::f64, in.k.shape),
               dv = poisoned(DType::f64, in.v.shape), dg = poisoned(DType::f64, a.shape),
               db = poisoned(DType::f64, b.shape), dh0 = poisoned(DType::f64, in.h0.shape),
               dA = poisoned(DType::f64, {Hv}), ddt = poisoned(DType::f64, {Hv});
    ChunkBwdParams p;
    p.q = in.q.view();
    p.k = in.k.view();
    p.v = in.v.view();
    p.initial_state = in.h0.view();
    p.cu_seqlens = in.cu.view();
    set_gate(p);
    p.d_o = dO.view();
    p.d_ht = dhT.view();
    p.dq = dq.view();
    p.dk = dk.view();
    p.dv = dv.view();
    p.dg = dg.view();
    p.dbeta = db.view();
    p.dh0 = dh0.view();
    p.dA_log = dA.view();
    p.ddt_bias = ddt.view();
    p.use_qk_l2norm_in_kernel = true;
    p.chunk_size = 16;
    p.exec.cpu_algo = algo;
    p.exec.cpu_fp64 = true;
    ASSERT_TRUE(cpu::chunk_bwd(p, d).ok());
    const std::pair<const char*, const HostTensor*> outs[] = {{"dq", &dq},        {"dk", &dk},  {"dv", &dv},
                                                              {"da", &dg},        {"db", &db},  {"dA_log", &dA},
                                                              {"ddt_bias", &ddt}, {"dh0", &dh0}};
    for (const auto& [name, t] : outs) {
      const HostTensor ref = read_array(dir / (std::string(name) + ".txt"), DType::f64, t->shape);
      EXPECT_LE(rel_err(*t, ref), 1e-11) << name;
    }
  }
  fs::remove_all(dir);
}

TEST(OracleCrosscheck, GdnCheckPyVarlenGqa) {
  if (!python_with_numpy()) GTEST_SKIP() << "python3 with numpy not found: skipping the gdn_check.py cross-check";
  crosscheck({5, 0, 7, 20}, 2, 4, 8, 6, false, 101);
}

TEST(OracleCrosscheck, GdnCheckPyNegEigvalLongerSequences) {
  if (!python_with_numpy()) GTEST_SKIP() << "python3 with numpy not found: skipping the gdn_check.py cross-check";
  crosscheck({0, 37, 50}, 1, 2, 16, 16, true, 202);
}

}  // namespace
}  // namespace flashgdn::test
