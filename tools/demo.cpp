// `flashgdn demo`: a Qwen3-Next-shaped GDN layer (Hqk=16, Hv=32, K=V=128): a varlen prefill of a few thousand
// tokens, then decode steps on a state pool holding the prefill's final states. Runs on the GPU when present
// (bf16 activations, fp32 state), else on the CPU (fp32), and checks every output against the fp64 oracle.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"

namespace flashgdn::cli {

namespace {

struct DemoOptions {
  bool force_cpu = false;
  int64_t tokens = 4000;
  int steps = 4;
  uint64_t seed = 7;
};

// o is [B, T, Hv, V]: head of element i.
double o_head_err(const HostTensor& x, const HostTensor& ref, int64_t Hv, int64_t V) {
  return test::max_head_err(x, ref, Hv, [&](int64_t i) { return (i / V) % Hv; });
}

// One op run on the chosen backend: returns the mean milliseconds over `reps` timed calls after a warm-up.
template <class Launch>
double time_op(bool gpu, int reps, bool warmup, Launch launch) {
#if FLASHGDN_WITH_CUDA
  if (gpu) {
    if (warmup) launch();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a);
    for (int r = 0; r < reps; ++r) launch();
    cudaEventRecord(b);
    cuda_check(cudaEventSynchronize(b), "event sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / reps;
  }
#endif
  if (warmup) launch();
  double t0 = now_ms();
  for (int r = 0; r < reps; ++r) launch();
  return (now_ms() - t0) / reps;
}

int run_demo(const DemoOptions& opt) {
  const bool gpu = !opt.force_cpu && cuda_available();
  std::string device = "cpu";
#if FLASHGDN_WITH_CUDA
  if (gpu) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    device = std::string(prop.name) + " (cuda)";
  }
#endif
  const DType act = gpu ? DType::bf16 : DType::f32;
  const double tol_o = gpu ? 5e-3 : 1e-4, tol_state = gpu ? 5e-3 : 1e-4;

  // ---- prefill case ----
  test::GdnCase c;
  c.Hqk = 16, c.Hv = 32, c.K = 128, c.V = 128;
  const int64_t T = opt.tokens;
  c.seqlens = {T * 3 / 10, T * 2 / 10, 0, T * 35 / 100, 0};
  c.seqlens[4] = T - c.seqlens[0] - c.seqlens[1] - c.seqlens[3];
  c.dtype = act;
  c.g_scale = 0.1;
  c.l2norm = true;
  c.seed = opt.seed;
  const int64_t N = c.N(), Hv = c.Hv, V = c.V, K = c.K;
  std::printf("flashgdn demo: Qwen3-Next GDN layer (Hqk=16, Hv=32, K=V=128) on %s\n", device.c_str());
  std::printf("[1/2] prefill (chunk_fwd): %lld sequences of lengths", (long long)N);
  for (auto l : c.seqlens) std::printf(" %lld", (long long)l);
  std::printf(" (%lld tokens), %s activations, fp32 state\n", (long long)T, dtype_name(act));
  std::fflush(stdout);

  test::GdnInputs in = test::make_inputs(c);
  HostTensor o(act, {1, T, Hv, V}), ht(DType::f32, {N, Hv, K, V});
  ChunkFwdParams p;
  p.use_qk_l2norm_in_kernel = true;
  double prefill_ms = 0;
#if FLASHGDN_WITH_CUDA
  if (gpu) {
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dg(in.g), db(in.beta), dh0(in.h0), dcu(in.cu);
    DeviceTensor dout(act, {1, T, Hv, V}), dht(DType::f32, {N, Hv, K, V});
    dout.fill_nan();
    dht.fill_nan();
    p.q = dq.view(), p.k = dk.view(), p.v = dv.view(), p.g = dg.view(), p.beta = db.view();
    p.initial_state = dh0.view(), p.cu_seqlens = dcu.view(), p.o = dout.view(), p.final_state = dht.view();
    size_t ws_bytes = 0;
    check(chunk_fwd_workspace_size(p, &ws_bytes), "chunk_fwd_workspace_size");
    DeviceTensor ws(DType::i32, {int64_t((ws_bytes + 3) / 4)});
    prefill_ms = time_op(true, 5, true, [&] { check(chunk_fwd(p, ws.ptr, ws_bytes, nullptr), "chunk_fwd"); });
    o = dout.download();
    ht = dht.download();
    std::printf("      workspace %.2f MB\n", ws_bytes / 1e6);
  }
#endif
  if (!gpu) {
    o.fill_nan();
    ht.fill_nan();
    p.q = in.q.view(), p.k = in.k.view(), p.v = in.v.view(), p.g = in.g.view(), p.beta = in.beta.view();
    p.initial_state = in.h0.view(), p.cu_seqlens = in.cu.view(), p.o = o.view(), p.final_state = ht.view();
    prefill_ms = time_op(false, 1, false, [&] { chunk_fwd_by_heads(p, c.Hqk, c.Hv, "      chunk_fwd (cpu)"); });
  }
  std::printf("      running the fp64 oracle...\n");
  std::fflush(stdout);
  // The oracle sees the same rounded inputs, in fp64.
  HostTensor q64 = in.q.cast(DType::f64), k64 = in.k.cast(DType::f64), v64 = in.v.cast(DType::f64);
  HostTensor g64 = in.g.cast(DType::f64), b64 = in.beta.cast(DType::f64), h064 = in.h0.cast(DType::f64);
  HostTensor o_ref(DType::f64, {1, T, Hv, V}), ht_ref(DType::f64, {N, Hv, K, V});
  ChunkFwdParams r = p;
  r.q = q64.view(), r.k = k64.view(), r.v = v64.view(), r.g = g64.view(), r.beta = b64.view();
  r.initial_state = h064.view(), r.cu_seqlens = in.cu.view(), r.o = o_ref.view(), r.final_state = ht_ref.view();
  r.exec.cpu_fp64 = true;
  double t0 = now_ms();
  chunk_fwd_by_heads(r, c.Hqk, c.Hv, "      fp64 oracle");
  double oracle_ms = now_ms() - t0;
  double e_o = test::rel_err(o, o_ref), e_oh = o_head_err(o, o_ref, Hv, V), e_h = test::rel_err(ht, ht_ref);
  std::printf(
      "      chunk_fwd %9.3f ms   o rel err %.2e (worst head %.2e)   final state rel err %.2e   "
      "[oracle %.0f ms]\n",
      prefill_ms, e_o, e_oh, e_h, oracle_ms);
  bool pass = e_o <= tol_o && e_oh <= 2 * tol_o && e_h <= tol_state;

  // ---- decode on a pool: sequence n lives in slot 2n + 1; even slots hold other requests' states ----
  const int64_t slots = 2 * N;
  std::printf("[2/2] decode (recurrent): %d steps x %lld sequences on a %lld-slot fp32 pool\n", opt.steps, (long long)N,
              (long long)slots);
  HostTensor pool(DType::f32, {slots, Hv, K, V});
  test::Rng rng(opt.seed + 99);
  for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, 0.1 * rng.normal());
  const int64_t state_elems = Hv * K * V;
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(static_cast<float*>(pool.data()) + (2 * n + 1) * state_elems,
                static_cast<const float*>(ht.data()) + n * state_elems, size_t(state_elems) * 4);
  HostTensor pool_ref = pool.cast(DType::f64);
  HostTensor idx(DType::i32, {N});
  for (int64_t n = 0; n < N; ++n) idx.set(n, double(2 * n + 1));
#if FLASHGDN_WITH_CUDA
  DeviceTensor dpool, didx;
  if (gpu) {
    dpool = DeviceTensor(pool);
    didx = DeviceTensor(idx);
  }
#endif
  double worst_o = 0, decode_ms = 0, first_step_ms = 0;
  for (int s = 0; s < opt.steps; ++s) {
    test::GdnCase dc = c;
    dc.seqlens.clear();
    dc.B = N, dc.T = 1, dc.has_h0 = false, dc.seed = opt.seed + 1000 + uint64_t(s);
    test::GdnInputs d = test::make_inputs(dc);
    HostTensor od(act, {N, 1, Hv, V});
    RecurrentParams rp;
    rp.use_qk_l2norm_in_kernel = true;
#if FLASHGDN_WITH_CUDA
    if (gpu) {
      DeviceTensor dq(d.q), dk(d.k), dv(d.v), dg(d.g), db(d.beta), dout(act, {N, 1, Hv, V});
      dout.fill_nan();
      rp.q = dq.view(), rp.k = dk.view(), rp.v = dv.view(), rp.g = dg.view(), rp.beta = db.view();
      rp.o = dout.view(), rp.state_pool = dpool.view(), rp.state_indices = didx.view();
      size_t ws_bytes = 0;
      check(recurrent_workspace_size(rp, &ws_bytes), "recurrent_workspace_size");
      DeviceTensor ws(DType::i32, {int64_t((ws_bytes + 3) / 4)});
      // A decode step advances the pool, so it runs exactly once (no warm-up): the first call is the timed one.
      double ms =
          time_op(true, 1, /*warmup=*/false, [&] { check(recurrent(rp, ws.ptr, ws_bytes, nullptr), "recurrent"); });
      if (s == 0)
        first_step_ms = ms;
      else
        decode_ms += ms;
      od = dout.download();
      pool = dpool.download();
    }
#endif
    if (!gpu) {
      od.fill_nan();
      rp.q = d.q.view(), rp.k = d.k.view(), rp.v = d.v.view(), rp.g = d.g.view(), rp.beta = d.beta.view();
      rp.o = od.view(), rp.state_pool = pool.view(), rp.state_indices = idx.view();
      double ms = time_op(false, 1, false, [&] { check(recurrent(rp), "recurrent"); });
      if (s == 0)
        first_step_ms = ms;
      else
        decode_ms += ms;
    }
    HostTensor oref(DType::f64, {N, 1, Hv, V});
    HostTensor dq64 = d.q.cast(DType::f64), dk64 = d.k.cast(DType::f64), dv64 = d.v.cast(DType::f64);
    HostTensor dg64 = d.g.cast(DType::f64), db64 = d.beta.cast(DType::f64);
    RecurrentParams rr = rp;
    rr.q = dq64.view(), rr.k = dk64.view(), rr.v = dv64.view(), rr.g = dg64.view(), rr.beta = db64.view();
    rr.o = oref.view(), rr.state_pool = pool_ref.view(), rr.state_indices = idx.view();
    rr.exec.cpu_fp64 = true;
    check(recurrent(rr), "oracle recurrent");
    worst_o = std::max(worst_o, test::rel_err(od, oref));
  }
  double e_pool = test::rel_err(pool, pool_ref);
  // The first step includes the kernels' module load (CUDA lazy loading); later steps are steady state.
  std::printf("      recurrent %9.4f ms/step (first step %.4f ms)   o rel err %.2e (worst step)   pool rel err %.2e\n",
              opt.steps > 1 ? decode_ms / (opt.steps - 1) : first_step_ms, first_step_ms, worst_o, e_pool);
  pass = pass && worst_o <= tol_o && e_pool <= tol_state;
  std::printf("result: %s (tolerances: o %.0e, state %.0e; gdn-math.md §10.3)\n", pass ? "PASS" : "FAIL", tol_o,
              tol_state);
  return pass ? kExitOk : kExitFailed;
}

}  // namespace

Command add_demo(CLI::App& app) {
  auto opt = std::make_shared<DemoOptions>();
  CLI::App* sub = app.add_subcommand(
      "demo", "run a Qwen3-Next-shaped prefill + decode, check it against the fp64 oracle, print times");
  sub->footer(
      "Qwen3-Next-shaped GDN workload (Hqk=16, Hv=32, K=V=128): a varlen prefill of ~N tokens in 5 sequences\n"
      "(one of length 0), then D decode steps on a state pool; every output is checked against the fp64 CPU\n"
      "oracle. Runs on the GPU when one is present (bf16 inputs, fp32 state), else on the CPU (fp32).\n"
      "Exit code 1 when a check fails.");
  sub->add_flag("--cpu", opt->force_cpu, "run on the CPU backend even when a GPU is present");
  sub->add_option("--tokens", opt->tokens, "total prefill tokens")
      ->check(integer_in<int64_t>(8, int64_t(1) << 18))
      ->capture_default_str();
  sub->add_option("--steps", opt->steps, "decode steps")->check(integer_in<int>(1, 1000))->capture_default_str();
  sub->add_option("--seed", opt->seed, "seed of the random inputs")
      ->check(integer_in<uint64_t>(0, std::numeric_limits<uint64_t>::max()))
      ->capture_default_str();
  return {sub, [opt] { return run_demo(*opt); }};
}

}  // namespace flashgdn::cli
