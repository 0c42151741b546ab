// flashgdn C++ API on the CPU: a varlen prefill (chunk_fwd) of two prompts that leaves their states in a pool,
// then one decode step per prompt (recurrent on the pool).
//
//   g++ -std=c++17 example.cpp $(pkg-config --cflags --libs --static flashgdn_static)   (installed)
//   g++ -std=c++17 -I include example.cpp -L build -lflashgdn_static -lpthread             (build tree)
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "flashgdn/flashgdn.hpp"

namespace fg = flashgdn;

static bool check(const fg::Status& st, const char* what) {
  if (st.ok()) return true;
  std::fprintf(stderr, "%s failed (code %d): %s\n", what, int(st.code()), st.message().c_str());
  return false;
}

int main() {
  const int64_t Hqk = 2, Hv = 4, K = 64, V = 64;
  const std::vector<int32_t> cu = {0, 37, 100};  // two prompts of 37 and 63 tokens, packed on the token axis
  const int64_t N = 2, T = cu.back(), slots = 8;

  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unif(0.f, 1.f);
  auto randn = [&](size_t n) {
    std::vector<float> x(n);
    for (auto& e : x) e = normal(gen);
    return x;
  };

  // Prefill inputs [1, T, H, D]; raw gate projections a, b turned into g, beta inside the op.
  std::vector<float> q = randn(T * Hqk * K), k = randn(T * Hqk * K), v = randn(T * Hv * V);
  std::vector<float> a = randn(T * Hv), b = randn(T * Hv), A_log(Hv, 0.f), dt_bias(Hv, 0.5f);
  std::vector<float> o(T * Hv * V), h_final(N * Hv * K * V);

  fg::ChunkFwdParams p;
  p.q = fg::make_tensor(q.data(), fg::DType::f32, {1, T, Hqk, K});
  p.k = fg::make_tensor(k.data(), fg::DType::f32, {1, T, Hqk, K});
  p.v = fg::make_tensor(v.data(), fg::DType::f32, {1, T, Hv, V});
  p.g = fg::make_tensor(a.data(), fg::DType::f32, {1, T, Hv});     // raw a
  p.beta = fg::make_tensor(b.data(), fg::DType::f32, {1, T, Hv});  // raw b
  p.A_log = fg::make_tensor(A_log.data(), fg::DType::f32, {Hv});
  p.dt_bias = fg::make_tensor(dt_bias.data(), fg::DType::f32, {Hv});
  p.cu_seqlens = fg::make_tensor(const_cast<int32_t*>(cu.data()), fg::DType::i32, {N + 1});
  p.o = fg::make_tensor(o.data(), fg::DType::f32, {1, T, Hv, V});
  p.final_state = fg::make_tensor(h_final.data(), fg::DType::f32, {N, Hv, K, V});
  p.use_qk_l2norm_in_kernel = true;
  p.gate.use_gate_in_kernel = true;
  p.gate.use_beta_sigmoid_in_kernel = true;
  p.exec.cpu_algo = fg::CpuAlgo::chunked;
  if (!check(fg::chunk_fwd(p), "chunk_fwd")) return 1;

  // Put the two final states into pool slots 3 and 5 (fp32 pool [slots, Hv, K, V]).
  std::vector<float> pool(slots * Hv * K * V, 0.f);
  const int32_t slot_of[N] = {3, 5};
  for (int64_t n = 0; n < N; ++n)
    std::copy(h_final.begin() + n * Hv * K * V, h_final.begin() + (n + 1) * Hv * K * V,
              pool.begin() + slot_of[n] * Hv * K * V);

  // One decode token per sequence: q, k, v [N, 1, H, D]; the pool is read and updated in place.
  std::vector<float> dq = randn(N * Hqk * K), dk = randn(N * Hqk * K), dv = randn(N * Hv * V);
  std::vector<float> da = randn(N * Hv), db = randn(N * Hv), dout(N * Hv * V);
  std::vector<int32_t> slots_idx(slot_of, slot_of + N);
  fg::RecurrentParams r;
  r.q = fg::make_tensor(dq.data(), fg::DType::f32, {N, 1, Hqk, K});
  r.k = fg::make_tensor(dk.data(), fg::DType::f32, {N, 1, Hqk, K});
  r.v = fg::make_tensor(dv.data(), fg::DType::f32, {N, 1, Hv, V});
  r.g = fg::make_tensor(da.data(), fg::DType::f32, {N, 1, Hv});
  r.beta = fg::make_tensor(db.data(), fg::DType::f32, {N, 1, Hv});
  r.A_log = p.A_log;
  r.dt_bias = p.dt_bias;
  r.o = fg::make_tensor(dout.data(), fg::DType::f32, {N, 1, Hv, V});
  r.state_pool = fg::make_tensor(pool.data(), fg::DType::f32, {slots, Hv, K, V});
  r.state_indices = fg::make_tensor(slots_idx.data(), fg::DType::i32, {N});
  r.use_qk_l2norm_in_kernel = true;
  r.gate = p.gate;
  if (!check(fg::recurrent(r), "recurrent")) return 1;

  double norm = 0;
  for (float x : dout) norm += double(x) * x;
  std::printf("flashgdn %s: prefill of %lld tokens in %lld sequences, then one decode step; |o_decode| = %.6f\n",
              fg::version(), (long long)T, (long long)N, std::sqrt(norm));

  // A bad call: the Status names the argument and what was expected.
  r.state_indices = fg::make_tensor(slots_idx.data(), fg::DType::i32, {N + 1});
  fg::Status st = fg::recurrent(r);
  std::printf("expected error: %s\n", st.message().c_str());
  return st.code() == fg::StatusCode::invalid_argument ? 0 : 1;
}
