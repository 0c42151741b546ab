// `flashgdn bench <case...>`: named GPU benchmark cases with the ceilings measured in the same run.
// Timing: each launch is captured in a CUDA graph together with its siblings over rotated input sets (total
// bytes beyond the 60 MB L2), the graph is replayed, and the median replay time over the launches in it is the
// per-call time. Inputs are non-zero random data. Bytes and FLOPs follow gdn-math.md §9.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_report.hpp"
#include "cli_util.hpp"
#include "commands.hpp"

#if FLASHGDN_WITH_CUDA
#include <cublas_v2.h>
#endif

namespace flashgdn::cli {

#if FLASHGDN_WITH_CUDA
void launch_copy(const void* src, void* dst, size_t bytes, cudaStream_t stream);  // copy_ceiling.cu
#endif

namespace {

struct CaseDef {
  std::string name;
  std::string what;
};

const std::vector<CaseDef>& case_list() {
  static const std::vector<CaseDef> cases = {
      {"decode_n1", "decode T=1, N=1, Hqk=16 Hv=32 K=V=128, fp32 pool"},
      {"decode_n8", "decode T=1, N=8, fp32 pool"},
      {"decode_n32", "decode T=1, N=32, fp32 pool"},
      {"decode_n128", "decode T=1, N=128, fp32 pool"},
      {"decode_n256", "decode T=1, N=256, fp32 pool"},
      {"decode_bf16_n256", "decode T=1, N=256, bf16 pool"},
      {"decode_gated_n1", "decode T=1, N=1, fp32 pool, gate and beta's sigmoid in the kernel (raw a, b; vLLM's call)"},
      {"decode_gated_bf16_n256", "decode T=1, N=256, bf16 pool, gate and beta's sigmoid in the kernel"},
      {"mtp_t12_n1", "multi-token T=12, N=1, final state only, fp32 pool"},
      {"mtp_t12_n32", "multi-token T=12, N=32, fp32 pool"},
      {"mtp_t12_n256", "multi-token T=12, N=256, fp32 pool"},
      {"verify_t12_n1", "verify T=12, N=1, fp32 pool read, bf16 intermediate states, no commit"},
      {"verify_t12_n256", "verify T=12, N=256, fp32 pool read, bf16 intermediate states, no commit"},
      {"mixer_n1", "mixer_decode T=1, N=1, Qwen3-Next (Hqk=16 Hv=32 K=V=128, Kc=4), bf16, fp32 pool"},
      {"mixer_n2", "mixer_decode T=1, N=2, fp32 pool"},
      {"mixer_n4", "mixer_decode T=1, N=4, fp32 pool"},
      {"mixer_n8", "mixer_decode T=1, N=8, fp32 pool"},
      {"mixer_n64", "mixer_decode T=1, N=64, fp32 pool"},
      {"mixer_n256", "mixer_decode T=1, N=256, fp32 pool"},
      {"mixer_bf16_n1", "mixer_decode T=1, N=1, bf16 pool"},
      {"mixer_bf16_n2", "mixer_decode T=1, N=2, bf16 pool"},
      {"mixer_bf16_n4", "mixer_decode T=1, N=4, bf16 pool"},
      {"mixer_bf16_n8", "mixer_decode T=1, N=8, bf16 pool"},
      {"mixer_bf16_n32", "mixer_decode T=1, N=32, bf16 pool"},
      {"mixer_bf16_n64", "mixer_decode T=1, N=64, bf16 pool"},
      {"mixer_bf16_n256", "mixer_decode T=1, N=256, bf16 pool"},
      {"prefill_t32k_h16", "prefill bf16 B=1 T=32768 Hqk=Hv=16"},
      {"prefill_t128k_h32", "prefill bf16 B=1 T=131072 Hqk=Hv=32"},
      {"prefill_t32k_h16_32", "prefill bf16 B=1 T=32768 Hqk=16 Hv=32"},
      {"prefill_varlen_4x8k", "prefill bf16 varlen 4x8192 Hqk=16 Hv=64"},
      {"prefill_varlen_64x512", "prefill bf16 varlen 64x512 Hqk=16 Hv=32"},
      {"prefill_fp16_t32k_h16", "prefill fp16 B=1 T=32768 Hqk=Hv=16"},
      {"prefill_fp16_t128k_h16", "prefill fp16 B=1 T=131072 Hqk=Hv=16"},
      {"train_bwd_t8k_h16_32", "training backward (chunk_bwd) bf16 B=1 T=8192 Hqk=16 Hv=32"},
      {"train_bwd_t32k_h16_32", "training backward (chunk_bwd) bf16 B=1 T=32768 Hqk=16 Hv=32"},
      {"train_bwd_varlen_4x8k", "training backward (chunk_bwd) bf16 varlen 4x8192 Hqk=16 Hv=64"},
      {"train_bwd_t128k_h32", "training backward (chunk_bwd) bf16 B=1 T=131072 Hqk=Hv=32"},
      {"train_bwd_varlen_64x512", "training backward (chunk_bwd) bf16 varlen 64x512 Hqk=16 Hv=32"},
      {"train_bwd_t32k_h4", "training backward (chunk_bwd) bf16 B=1 T=32768 Hqk=Hv=4"},
      {"train_bwd_t32k_h8", "training backward (chunk_bwd) bf16 B=1 T=32768 Hqk=Hv=8"},
      {"train_bwd_t32k_h16", "training backward (chunk_bwd) bf16 B=1 T=32768 Hqk=Hv=16"},
  };
  return cases;
}

// Case names and the groups that stand for several.
bool is_group(const std::string& a) {
  return a == "all" || a == "decode" || a == "prefill" || a == "train";
}

std::vector<std::string> expand_cases(const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const std::string& a : args) {
    if (!is_group(a)) {
      names.push_back(a);
      continue;
    }
    for (auto& c : case_list()) {
      const char* group = c.name.rfind("prefill", 0) == 0 ? "prefill"
                          : c.name.rfind("train", 0) == 0 ? "train"
                                                          : "decode";
      if (a == "all" || a == group) names.push_back(c.name);
    }
  }
  return names;
}

struct BenchOptions {
  std::vector<std::string> cases;
  std::string json_path;
  int reps = 20;
  ExecOptions exec;  // kernel overrides for A/B runs (--recurrent-kernel, --chunk-segments, --chunk-bwd-segments,
                     // --chunk-bwd-chains)
  std::string gates = "uniform";  // the prefill's and the training backward's g per token (--gates)
  int64_t ws_offset = 0;          // bytes between the workspace allocation and the pointer the op gets (--ws-offset)
};

#if FLASHGDN_WITH_CUDA

// Fill a device tensor with random data: a host block of `block` random values tiled over the buffer
// (full random generation of gigabytes on the host would dominate the run).
void fill_random(DeviceTensor& t, uint64_t seed, double scale = 1.0, double offset = 0.0, bool unit_interval = false) {
  int64_t n = int64_t(t.bytes / size_t(dtype_size(t.dtype)));
  int64_t block = std::min<int64_t>(n, int64_t(1) << 22);
  HostTensor h(t.dtype, {block});
  test::Rng rng(seed);
  for (int64_t i = 0; i < block; ++i) h.set(i, offset + scale * (unit_interval ? rng.uniform() : rng.normal()));
  char* dst = static_cast<char*>(t.ptr);
  size_t bb = size_t(block * dtype_size(t.dtype));
  cuda_check(cudaMemcpy(dst, h.data(), bb, cudaMemcpyHostToDevice), "fill");
  for (size_t off = bb; off < t.bytes; off += bb)
    cuda_check(cudaMemcpy(dst + off, dst, std::min(bb, t.bytes - off), cudaMemcpyDeviceToDevice), "fill");
}

// Median per-launch time of `launch(r)` for r in [0, rotations): graph of all rotations, replayed `reps` times.
double time_graph(int rotations, int reps, const std::function<void(int, cudaStream_t)>& launch, double* eager_ms) {
  cudaStream_t st;
  cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  // Eager: one launch per rotation, timed individually after a warm-up pass.
  for (int r = 0; r < rotations; ++r) launch(r, st);
  cuda_check(cudaStreamSynchronize(st), "warm-up");
  std::vector<double> eager;
  for (int i = 0; i < std::max(reps, 10); ++i) {
    cudaEventRecord(a, st);
    launch(i % rotations, st);
    cudaEventRecord(b, st);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    eager.push_back(ms);
  }
  *eager_ms = median(eager);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cuda_check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  for (int r = 0; r < rotations; ++r) launch(r, st);
  cuda_check(cudaStreamEndCapture(st, &g), "end capture");
  cuda_check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cuda_check(cudaGraphLaunch(ge, st), "replay");
  cuda_check(cudaStreamSynchronize(st), "replay sync");
  // Every replay between its own pair of events, all enqueued before the first is waited for: while replay i runs
  // the host enqueues i + 1, so a replay's time holds no host launch gap (with one replay per synchronization the
  // gap between the start event and the graph's first kernel counted, whole where one replay is one call). The
  // first replay, which starts behind its launch, is one sample of the median.
  std::vector<cudaEvent_t> ev(2 * size_t(reps));
  for (auto& e : ev) cudaEventCreate(&e);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev[2 * i], st);
    cudaGraphLaunch(ge, st);
    cudaEventRecord(ev[2 * i + 1], st);
  }
  cuda_check(cudaStreamSynchronize(st), "replay");
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    float ms;
    cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
    times.push_back(ms / rotations);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(st);
  return median(times);
}

Ceilings measure_ceilings() {
  Ceilings c;
  const size_t bytes = size_t(1) << 31;  // 2 GiB copy by an SM kernel
  DeviceTensor src(DType::f32, {int64_t(bytes / 4)}), dst(DType::f32, {int64_t(bytes / 4)});
  fill_random(src, 1);
  // The ceiling is the best of our copy kernel (graph and eager) and an eager cudaMemcpyAsync (what torch's copy
  // measures, 4.2-4.3 TB/s on the H200); a memcpy node inside a graph may run on a copy engine, so its graph time
  // is not used.
  double eager_kernel = 0, eager_memcpy = 0;
  const double graph_kernel = time_graph(
      1, 10, [&](int, cudaStream_t st) { launch_copy(src.ptr, dst.ptr, bytes, st); }, &eager_kernel);
  time_graph(
      1, 3, [&](int, cudaStream_t st) { cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, st); },
      &eager_memcpy);
  const double ms = std::min({graph_kernel, eager_kernel, eager_memcpy});
  c.copy_tbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e12;
  const int n = 8192;
  DeviceTensor A(DType::bf16, {n, n}), B(DType::bf16, {n, n}), C(DType::bf16, {n, n});
  fill_random(A, 2), fill_random(B, 3);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return c;
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&](cudaStream_t st) {
    cublasSetStream(h, st);
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, A.ptr, CUDA_R_16BF, n, B.ptr, CUDA_R_16BF, n, &beta,
                 C.ptr, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  cudaStream_t st;
  cudaStreamCreate(&st);
  for (int i = 0; i < 3; ++i) gemm(st);
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  std::vector<double> t;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(a, st);
    gemm(st);
    cudaEventRecord(b, st);
    cudaEventSynchronize(b);
    float m;
    cudaEventElapsedTime(&m, a, b);
    t.push_back(m);
  }
  c.gemm_tflops = 2.0 * n * double(n) * n / (median(t) * 1e-3) / 1e12;
  cublasDestroy(h);
  cudaStreamDestroy(st);
  return c;
}

// One call of an op with its workspace (`ws_offset` bytes into its allocation; mixer_decode has none), timed over
// `rotations` input sets (`set(r)` selects set r before its launch; graph replay and eager); a failed call throws.
template <class Params, class Set>
BenchResult time_op(const Params& p, int rotations, int reps, Set set, int64_t ws_offset = 0) {
  const auto ws_size = [&](size_t* b) {
    if constexpr (std::is_same_v<Params, ChunkFwdParams>) return chunk_fwd_workspace_size(p, b);
    if constexpr (std::is_same_v<Params, ChunkBwdParams>) return chunk_bwd_workspace_size(p, b);
    if constexpr (std::is_same_v<Params, RecurrentParams>) return recurrent_workspace_size(p, b);
    if constexpr (std::is_same_v<Params, MixerDecodeParams>) return *b = 0, Status::OK();
  };
  size_t ws_bytes = 0;
  check(ws_size(&ws_bytes), "workspace_size");
  DeviceTensor ws_alloc(DType::i32, {int64_t((ws_bytes + size_t(ws_offset)) / 4 + 1)});
  char* const ws = static_cast<char*>(ws_alloc.ptr) + ws_offset;
  BenchResult res;
  res.ws_bytes = double(ws_bytes);
  Status last;
  res.ms = time_graph(
      rotations, reps,
      [&](int r, cudaStream_t st) {
        set(r);
        Status e;
        if constexpr (std::is_same_v<Params, ChunkFwdParams>) e = chunk_fwd(p, ws, ws_bytes, st);
        if constexpr (std::is_same_v<Params, ChunkBwdParams>) e = chunk_bwd(p, ws, ws_bytes, st);
        if constexpr (std::is_same_v<Params, RecurrentParams>) e = recurrent(p, ws, ws_bytes, st);
        if constexpr (std::is_same_v<Params, MixerDecodeParams>) e = mixer_decode(p, st);
        if (!e.ok()) last = e;
      },
      &res.eager_ms);
  if (!last.ok()) throw std::runtime_error(last.message());
  return res;
}

// Rotation r's rows [r rows, (r + 1) rows) of a tensor whose leading dimension holds every rotation.
TensorView slice(const DeviceTensor& t, int r, int64_t rows) {
  TensorView v = t.view();
  v.shape[0] = rows;
  v.data = static_cast<char*>(t.ptr) + size_t(r) * size_t(rows) * size_t(v.strides[0]) * size_t(dtype_size(t.dtype));
  return v;
}

// Enough disjoint input sets (at most 64) that one graph replay of a call moving per_call bytes streams > 256 MB.
int rotations(double per_call) {
  return int(std::min<double>(64, std::max<double>(1, std::ceil(256e6 / per_call))));
}

// Slot indices 0, 1, .. into an int32 [n] tensor on the device.
void iota(DeviceTensor& idx) {
  HostTensor h(DType::i32, {idx.shape[0]});
  for (int64_t i = 0; i < idx.shape[0]; ++i) h.set(i, double(i));
  idx.upload(h);
}

// ---- recurrent cases -----------------------------------------------------------------------------------
struct RecurrentShape {
  int64_t N = 1, T = 1;
  DType pool_dtype = DType::f32;
  bool verify = false;  // bf16 intermediate states, no commit
  bool gated = false;   // raw a, b in bf16 with A_log, dt_bias: the gate and beta's sigmoid in the kernel
};

BenchResult bench_recurrent(const RecurrentShape& s, int reps, const ExecOptions& exec) {
  const int64_t Hqk = 16, Hv = 32, K = 128, V = 128, N = s.N, T = s.T;
  const double state_bytes = double(Hv * K * V);
  const double per_call = N * state_bytes * dtype_size(s.pool_dtype) * 2;
  const int R = rotations(per_call);
  DeviceTensor q(DType::bf16, {R * N, T, Hqk, K}), k(DType::bf16, {R * N, T, Hqk, K}),
      v(DType::bf16, {R * N, T, Hv, V});
  const DType gdt = s.gated ? DType::bf16 : DType::f32;
  DeviceTensor g(gdt, {R * N, T, Hv}), beta(gdt, {R * N, T, Hv}), o(DType::bf16, {R * N, T, Hv, V});
  DeviceTensor A_log(DType::f32, {Hv}), dt_bias(DType::f32, {Hv});
  DeviceTensor pool(s.pool_dtype, {R * N, Hv, K, V}), idx(DType::i32, {R * N});
  DeviceTensor inter;
  if (s.verify) inter = DeviceTensor(DType::bf16, {R * N, T, Hv, K, V});
  fill_random(q, 11), fill_random(k, 12), fill_random(v, 13);
  if (s.gated)
    fill_random(g, 14), fill_random(beta, 15), fill_random(A_log, 17), fill_random(dt_bias, 18);
  else
    fill_random(g, 14, -0.1, 0.0, true), fill_random(beta, 15, 1.0, 0.0, true);
  fill_random(pool, 16, 0.1);
  iota(idx);
  RecurrentParams p;
  p.use_qk_l2norm_in_kernel = true;
  p.exec = exec;
  p.commit = !s.verify;
  p.state_pool = pool.view();
  if (s.gated) {
    p.gate.use_gate_in_kernel = p.gate.use_beta_sigmoid_in_kernel = true;
    p.A_log = A_log.view(), p.dt_bias = dt_bias.view();
  }
  auto set = [&](int r) {
    p.q = slice(q, r, N), p.k = slice(k, r, N), p.v = slice(v, r, N), p.g = slice(g, r, N);
    p.beta = slice(beta, r, N), p.o = slice(o, r, N), p.state_indices = slice(idx, r, N);
    if (s.verify) p.intermediate_states = slice(inter, r, N);
  };
  set(0);
  BenchResult res = time_op(p, R, reps, set);
  const double psz = double(dtype_size(s.pool_dtype));
  // pool read (+ write when committing), bf16 intermediate states, q, k, v, o (bf16), g, beta (fp32; raw a, b bf16)
  res.bytes = N * state_bytes * psz * (s.verify ? 1 : 2) + (s.verify ? N * T * state_bytes * 2.0 : 0.0) +
              N * T * (2.0 * Hqk * K * 2 + 2.0 * Hv * V * 2 + Hv * (s.gated ? 4.0 : 8.0));
  res.flops = N * T * Hv * 6.0 * K * V;
  return res;
}

// ---- mixer decode cases --------------------------------------------------------------------------------
// The whole GDN mixer step of Qwen3-Next at decode (T = 1): conv state [slots, C, Kc - 1] (SGLang / vLLM "DS"),
// bf16 activations, fp32 gate parameters, the plan's V split.
BenchResult bench_mixer(int64_t N, DType pool_dtype, int reps, const ExecOptions& exec) {
  const int64_t Hqk = 16, Hv = 32, K = 128, V = 128, Kc = 4, C = 2 * Hqk * K + Hv * V;
  const double state_bytes = double(Hv * K * V);
  const double per_call = N * state_bytes * dtype_size(pool_dtype) * 2;
  const int R = rotations(per_call);
  DeviceTensor x(DType::bf16, {R * N, 1, C}), z(DType::bf16, {R * N, 1, Hv, V}), a(DType::bf16, {R * N, 1, Hv}),
      b(DType::bf16, {R * N, 1, Hv}), out(DType::bf16, {R * N, 1, Hv, V});
  DeviceTensor A_log(DType::f32, {Hv}), dt_bias(DType::f32, {Hv}), w(DType::bf16, {C, Kc}), nw(DType::bf16, {V});
  DeviceTensor conv(DType::bf16, {R * N, C, Kc - 1}), pool(pool_dtype, {R * N, Hv, K, V}), idx(DType::i32, {R * N});
  fill_random(x, 31), fill_random(z, 32), fill_random(a, 33), fill_random(b, 34), fill_random(A_log, 35);
  fill_random(dt_bias, 36), fill_random(w, 37, 0.5), fill_random(nw, 38), fill_random(conv, 39);
  fill_random(pool, 40, 0.1);
  iota(idx);
  MixerDecodeParams p;
  p.num_k_heads = Hqk, p.head_k_dim = K, p.exec = exec;
  p.A_log = A_log.view(), p.dt_bias = dt_bias.view(), p.conv_weight = w.view(), p.norm_weight = nw.view();
  p.conv_state = conv.view(), p.state_pool = pool.view();
  auto set = [&](int r) {
    p.x = slice(x, r, N), p.z = slice(z, r, N), p.a = slice(a, r, N), p.b = slice(b, r, N);
    p.out = slice(out, r, N), p.state_indices = slice(idx, r, N);
  };
  set(0);
  BenchResult res = time_op(p, R, reps, set);
  // pool read + write; x, the conv window read + write, z, out, a, b (bf16)
  res.bytes =
      N * state_bytes * dtype_size(pool_dtype) * 2 + N * (C * 2.0 * (1 + 2 * (Kc - 1)) + Hv * V * 2.0 * 2 + Hv * 4.0);
  res.flops = N * Hv * 6.0 * K * V;
  return res;
}

// ---- prefill cases -------------------------------------------------------------------------------------
// The prefill's and the training backward's g per (token, value head), g of shape [1, T, Hv]: "uniform" U(-0.1, 0);
// "u1" U(-1, 0) (bench/train_step.py's); "logsigmoid"
// logsigmoid(N(0, 1)) (fast decay); "flashqla" FlashQLA's benchmark gates, logsigmoid(N(0, 1)) / 16 with every
// fourth value head at g = 0 (no decay: the segment split's summaries then cover whole segments); "logsigmoid16"
// the same without the g = 0 heads (what the decaying heads alone take: the one-wave chains' tail is the difference).
void fill_gates(DeviceTensor& g, int64_t T, int64_t Hv, const std::string& gates) {
  if (gates == "uniform" || gates == "u1") return fill_random(g, 24, gates == "u1" ? -1.0 : -0.1, 0.0, true);
  HostTensor h(DType::f32, {T * Hv});
  test::Rng rng(24);
  const double scale = gates == "flashqla" || gates == "logsigmoid16" ? 1.0 / 16 : 1.0;
  for (int64_t i = 0; i < T * Hv; ++i) {
    const double x = rng.normal(), logsig = x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x));
    h.set(i, gates == "flashqla" && i % Hv % 4 == 0 ? 0.0 : scale * logsig);
  }
  cuda_check(cudaMemcpy(g.ptr, h.data(), g.bytes, cudaMemcpyHostToDevice), "fill_gates");
}

// cu_seqlens (int32 [N + 1], on the device) of sequences of these lengths packed into one row.
DeviceTensor cu_seqlens_of(const std::vector<int64_t>& lens) {
  const int64_t N = int64_t(lens.size());
  HostTensor hcu(DType::i32, {N + 1});
  int64_t acc = 0;
  hcu.set(0, 0);
  for (int64_t n = 0; n < N; ++n) hcu.set(n + 1, double(acc += lens[size_t(n)]));
  return DeviceTensor(hcu);
}

struct PrefillShape {
  std::vector<int64_t> lens;  // one entry: B = 1 fixed length; several: varlen
  int64_t Hqk = 16, Hv = 16;
  DType dtype = DType::bf16;
};

BenchResult bench_prefill(const PrefillShape& s, int reps, const BenchOptions& opt) {
  const int64_t K = 128, V = 128, C = 64, Hqk = s.Hqk, Hv = s.Hv;
  int64_t T = 0;
  for (auto l : s.lens) T += l;
  const int64_t N = int64_t(s.lens.size());
  const bool varlen = N > 1;
  DeviceTensor q(s.dtype, {1, T, Hqk, K}), k(s.dtype, {1, T, Hqk, K}), v(s.dtype, {1, T, Hv, V});
  DeviceTensor g(DType::f32, {1, T, Hv}), beta(DType::f32, {1, T, Hv}), o(s.dtype, {1, T, Hv, V});
  DeviceTensor ht(DType::f32, {N, Hv, K, V}), cu;
  fill_random(q, 21), fill_random(k, 22), fill_random(v, 23);
  fill_gates(g, T, Hv, opt.gates), fill_random(beta, 25, 1.0, 0.0, true);
  ChunkFwdParams p;
  p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = beta.view(), p.o = o.view();
  p.final_state = ht.view();
  p.use_qk_l2norm_in_kernel = true;
  p.exec = opt.exec;
  if (varlen) {
    cu = cu_seqlens_of(s.lens);
    p.cu_seqlens = cu.view();
  }
  BenchResult res = time_op(
      p, 1, reps, [](int) {}, opt.ws_offset);
  const double es = double(dtype_size(s.dtype));
  res.bytes = T * (2.0 * Hqk * K * es + 2.0 * Hv * V * es + Hv * 8.0) + N * Hv * K * V * 4.0;
  res.flops = double(T) * Hv * (6.0 * K * V + 2.0 * C * (3 * K + 2 * V) + C * C / 3.0);
  return res;
}

// ---- training backward cases (chunk_bwd alone: the forward is the prefill's) ---------------------------------
// lens: one entry, B = 1 of that length; several, varlen (cu_seqlens over one packed row).
BenchResult bench_train_bwd(const std::vector<int64_t>& lens, int64_t Hqk, int64_t Hv, int reps,
                            const BenchOptions& opt) {
  const int64_t K = 128, V = 128, C = 64, N = int64_t(lens.size());
  int64_t T = 0;
  for (auto l : lens) T += l;
  const DType dt = DType::bf16;
  DeviceTensor q(dt, {1, T, Hqk, K}), k(dt, {1, T, Hqk, K}), v(dt, {1, T, Hv, V}), d_o(dt, {1, T, Hv, V});
  DeviceTensor g(DType::f32, {1, T, Hv}), beta(DType::f32, {1, T, Hv});
  DeviceTensor dq(dt, {1, T, Hqk, K}), dk(dt, {1, T, Hqk, K}), dv(dt, {1, T, Hv, V});
  DeviceTensor dg(DType::f32, {1, T, Hv}), dbeta(DType::f32, {1, T, Hv}), cu;
  fill_random(q, 31), fill_random(k, 32), fill_random(v, 33), fill_random(d_o, 34);
  fill_gates(g, T, Hv, opt.gates), fill_random(beta, 36, 1.0, 0.0, true);
  ChunkBwdParams p;
  p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = beta.view(), p.d_o = d_o.view();
  p.dq = dq.view(), p.dk = dk.view(), p.dv = dv.view(), p.dg = dg.view(), p.dbeta = dbeta.view();
  if (N > 1) {
    cu = cu_seqlens_of(lens);
    p.cu_seqlens = cu.view();
  }
  p.use_qk_l2norm_in_kernel = true;
  p.exec = opt.exec;
  BenchResult res = time_op(
      p, 1, reps, [](int) {}, opt.ws_offset);
  // q, k, v, d_o in and dq, dk, dv out (bf16), g, beta in and dg, dbeta out (fp32); gdn-math §9.3's backward FLOPs
  res.bytes = T * (4.0 * Hqk * K * 2 + 4.0 * Hv * V * 2 + Hv * 16.0);
  res.flops = double(T) * Hv * (16.0 * K * V + 2.0 * C * (9 * K + 5 * V) + 4.0 * C * C);
  return res;
}

bool listed(const std::string& name) {
  for (const CaseDef& c : case_list())
    if (c.name == name) return true;
  return false;
}

BenchResult run_case(const std::string& name, int reps, const BenchOptions& opt) {
  BenchResult r;
  auto rec = [&](int64_t N, int64_t T, DType pd, bool verify, bool gated = false) {
    RecurrentShape s;
    s.N = N, s.T = T, s.pool_dtype = pd, s.verify = verify, s.gated = gated;
    return bench_recurrent(s, reps, opt.exec);
  };
  auto pre = [&](std::vector<int64_t> lens, int64_t hqk, int64_t hv, DType dt) {
    PrefillShape s;
    s.lens = std::move(lens), s.Hqk = hqk, s.Hv = hv, s.dtype = dt;
    return bench_prefill(s, std::max(3, reps / 4), opt);
  };
  if (name == "decode_n1")
    r = rec(1, 1, DType::f32, false);
  else if (name == "decode_n8")
    r = rec(8, 1, DType::f32, false);
  else if (name == "decode_n32")
    r = rec(32, 1, DType::f32, false);
  else if (name == "decode_n128")
    r = rec(128, 1, DType::f32, false);
  else if (name == "decode_n256")
    r = rec(256, 1, DType::f32, false);
  else if (name == "decode_bf16_n256")
    r = rec(256, 1, DType::bf16, false);
  else if (name == "decode_gated_n1")
    r = rec(1, 1, DType::f32, false, true);
  else if (name == "decode_gated_bf16_n256")
    r = rec(256, 1, DType::bf16, false, true);
  else if (name == "mtp_t12_n1")
    r = rec(1, 12, DType::f32, false);
  else if (name == "mtp_t12_n32")
    r = rec(32, 12, DType::f32, false);
  else if (name == "mtp_t12_n256")
    r = rec(256, 12, DType::f32, false);
  else if (name == "verify_t12_n1")
    r = rec(1, 12, DType::f32, true);
  else if (name == "verify_t12_n256")
    r = rec(256, 12, DType::f32, true);
  else if (name.rfind("mixer_", 0) == 0 && listed(name))  // mixer_nN (fp32 pool), mixer_bf16_nN
    r = bench_mixer(std::stoll(name.substr(name.rfind('n') + 1)),
                    name.rfind("mixer_bf16_", 0) == 0 ? DType::bf16 : DType::f32, reps, opt.exec);
  else if (name == "prefill_t32k_h16")
    r = pre({32768}, 16, 16, DType::bf16);
  else if (name == "prefill_t128k_h32")
    r = pre({131072}, 32, 32, DType::bf16);
  else if (name == "prefill_t32k_h16_32")
    r = pre({32768}, 16, 32, DType::bf16);
  else if (name == "prefill_varlen_4x8k")
    r = pre(std::vector<int64_t>(4, 8192), 16, 64, DType::bf16);
  else if (name == "prefill_varlen_64x512")
    r = pre(std::vector<int64_t>(64, 512), 16, 32, DType::bf16);
  else if (name == "prefill_fp16_t32k_h16")
    r = pre({32768}, 16, 16, DType::f16);
  else if (name == "prefill_fp16_t128k_h16")
    r = pre({131072}, 16, 16, DType::f16);
  else if (name == "train_bwd_t8k_h16_32")
    r = bench_train_bwd({8192}, 16, 32, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_t32k_h16_32")
    r = bench_train_bwd({32768}, 16, 32, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_varlen_4x8k")
    r = bench_train_bwd(std::vector<int64_t>(4, 8192), 16, 64, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_t128k_h32")
    r = bench_train_bwd({131072}, 32, 32, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_varlen_64x512")  // many short sequences: the chains in waves (S0 from chunk_fwd)
    r = bench_train_bwd(std::vector<int64_t>(64, 512), 16, 32, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_t32k_h4")
    r = bench_train_bwd({32768}, 4, 4, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_t32k_h8")  // the chains' split at P = 8 by the plan
    r = bench_train_bwd({32768}, 8, 8, std::max(3, reps / 4), opt);
  else if (name == "train_bwd_t32k_h16")  // P = 4 by the plan
    r = bench_train_bwd({32768}, 16, 16, std::max(3, reps / 4), opt);
  else
    throw std::runtime_error("unknown case " + name);
  return r;
}
#endif

int run_bench(const BenchOptions& opt) {
  const std::vector<std::string> names = expand_cases(opt.cases);
  const int reps = opt.reps;
#if !FLASHGDN_WITH_CUDA
  (void)names, (void)reps;
  std::fprintf(stderr, "flashgdn bench: this build has no CUDA; the benchmark cases are GPU cases\n");
  return kExitUnavailable;
#else
  if (!cuda_available()) {
    std::fprintf(stderr, "flashgdn bench: no CUDA device visible; the benchmark cases are GPU cases\n");
    return kExitUnavailable;
  }
  if (!opt.json_path.empty() && !std::ofstream(opt.json_path)) {  // before minutes of benchmarks, not after
    std::fprintf(stderr, "flashgdn bench: --json: cannot write %s\n", opt.json_path.c_str());
    return kExitUsage;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("flashgdn bench on %s (%d SMs), flashgdn %s\n", prop.name, prop.multiProcessorCount, version());
  std::printf("measuring ceilings (2 GiB device copy, bf16 GEMM 8192^3)...\n");
  std::fflush(stdout);
  Ceilings ceil = measure_ceilings();
  std::printf("copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s; gates %s\n\n", ceil.copy_tbps, ceil.gemm_tflops,
              opt.gates.c_str());
  std::vector<BenchResult> results;
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("[%zu/%zu] %s ...\n", i + 1, names.size(), names[i].c_str());
    std::fflush(stdout);
    BenchResult r;
    try {
      r = run_case(names[i], reps, opt);
    } catch (const std::exception& e) {
      r.status = e.what();
    }
    r.name = names[i];
    for (auto& c : case_list())
      if (c.name == names[i]) r.what = c.what;
    results.push_back(r);
  }
  std::printf("\n| case | ms (graph) | ms (eager) | TB/s | %% copy | TFLOP/s | floor ms | x floor | workspace MB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (auto& r : results) {
    if (r.status != "ok") {
      std::printf("| %s | n/a: %s |||||||\n", r.name.c_str(), r.status.c_str());
      continue;
    }
    double tbps = r.bytes / (r.ms * 1e-3) / 1e12, tflops = r.flops / (r.ms * 1e-3) / 1e12;
    double floor_ms = std::max(r.bytes / (ceil.copy_tbps * 1e12), r.flops / (ceil.gemm_tflops * 1e12)) * 1e3;
    std::printf("| %s | %.4f | %.4f | %.2f | %.0f%% | %.1f | %.4f | %.2f | %.2f |\n", r.name.c_str(), r.ms, r.eager_ms,
                tbps, 100 * tbps / ceil.copy_tbps, tflops, floor_ms, r.ms / floor_ms, r.ws_bytes / 1e6);
  }
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << bench_report(prop.name, prop.multiProcessorCount, ceil, results).dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "flashgdn bench: --json: cannot write %s\n", opt.json_path.c_str());
      return kExitFailed;
    }
  }
  return kExitOk;
#endif
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand("bench", "run named GPU benchmark cases (a CUDA build and device)");
  std::string cases = "Cases:\n";
  std::vector<std::string> choices = {"all", "decode", "prefill", "train"};
  for (auto& c : case_list()) {
    cases += "  " + c.name + std::string(c.name.size() < 24 ? 24 - c.name.size() : 1, ' ') + c.what + "\n";
    choices.push_back(c.name);
  }
  sub->footer(
      "Prints ms per call (CUDA-graph replay, inputs rotated beyond L2), achieved TB/s and TFLOP/s, and the\n"
      "ratio to the floor max(bytes / copy rate, FLOPs / bf16 GEMM rate), with both ceilings measured in the\n"
      "same run. Groups: all, decode (decode_*, mtp_*, verify_*, mixer_*), prefill (prefill_*), train (train_*).\n" +
      cases + "Exit code 3 without a CUDA build or device.");
  sub->add_option("cases", opt->cases, "cases or groups to run (listed below)")
      ->required()
      ->type_name("CASE")
      ->check(CLI::IsMember(choices).description(""));
  sub->add_option("--json", opt->json_path, "also write the results to FILE as JSON")
      ->type_name("FILE")
      ->check(CLI::Validator(
          [choices](std::string& s) -> std::string {
            for (auto& c : choices)
              if (s == c) return "expected a file name, got the case name '" + s + "'";
            return {};
          },
          ""));
  sub->add_option("--reps", opt->reps, "graph replays per case")
      ->check(integer_in<int>(3, 100000))
      ->capture_default_str();
  sub->add_option_function<std::string>(
         "--recurrent-kernel",
         [opt](const std::string& s) {
           if (!recurrent_kernel_from_name(s.c_str(), &opt->exec.recurrent_kernel))
             throw CLI::ValidationError(
                 "--recurrent-kernel", "expected auto, persistent, direct, direct_pipe, wy or wy_mma, got '" + s + "'");
         },
         "force the decode kernel (exec.recurrent_kernel)")
      ->type_name("NAME");
  sub->add_option("--chunk-segments", opt->exec.chunk_fwd_segments,
                  "force the prefill's segment split: 1 off, P segments (exec.chunk_fwd_segments; 0 auto)")
      ->check(integer_in<int32_t>(0, 4096))
      ->type_name("P");
  sub->add_option("--gates", opt->gates,
                  "the prefill's and the training backward's g per token: uniform U(-0.1, 0), u1 U(-1, 0) "
                  "(bench/train_step.py's), logsigmoid logsigmoid(N(0, 1)), flashqla logsigmoid(N(0, 1)) / 16 with "
                  "every fourth value head at 0, logsigmoid16 the same on every head")
      ->check(CLI::IsMember({"uniform", "u1", "logsigmoid", "flashqla", "logsigmoid16"}))
      ->capture_default_str();
  sub->add_option("--ws-offset", opt->ws_offset,
                  "start the prefill's and the backward's workspace this many bytes into its allocation (a multiple "
                  "of 256: how the time depends on where the workspace lands)")
      ->check(integer_in<int64_t>(0, int64_t(1) << 30))
      ->each([](const std::string& v) {
        if (std::stoll(v) % 256 != 0) throw CLI::ValidationError("expected a multiple of 256, got " + v);
      })
      ->capture_default_str()
      ->type_name("BYTES");
  sub->add_option("--chunk-bwd-segments", opt->exec.chunk_bwd_segments,
                  "force the training backward's chain split: 1 off, P segments (exec.chunk_bwd_segments; 0 auto)")
      ->check(integer_in<int32_t>(0, 4096))
      ->type_name("P");
  sub->add_option("--chunk-bwd-chains", opt->exec.chunk_bwd_chains,
                  "the training backward's two state chains: 1 one after the other, 2 both at once as a CTA per "
                  "chain, 3 both at once in one CTA (exec.chunk_bwd_chains; 0 auto)")
      ->check(integer_in<int32_t>(0, 3))
      ->type_name("C");
  sub->add_option("--chunk-bwd-grads", opt->exec.chunk_bwd_grads,
                  "the training backward's gradients pass: 1 mma.sync, 2 wgmma, 3 fused with the reverse chain, "
                  "4 fused, the value heads' dq / dk summed by pass 5a (exec.chunk_bwd_grads; 0 auto)")
      ->check(integer_in<int32_t>(0, 4))
      ->type_name("G");
  sub->add_option("--chunk-bwd-window", opt->exec.chunk_bwd_window,
                  "the training backward's dstate chain: 1 every chunk, not only the decay windows of the gradients "
                  "the fused pass reads (exec.chunk_bwd_window; 0 auto)")
      ->check(integer_in<int32_t>(0, 1))
      ->type_name("W");
  sub->add_option("--chunk-bwd-state", opt->exec.chunk_bwd_state,
                  "the training backward's chunk start states: 1 its own state chain, 2 chunk_fwd's state pass "
                  "(exec.chunk_bwd_state; 0 auto)")
      ->check(integer_in<int32_t>(0, 2))
      ->type_name("S");
  sub->add_option("--mixer-kernel", opt->exec.mixer_kernel,
                  "mixer_decode's kernel: 1 clustered, 2 pipe (exec.mixer_kernel; 0 auto)")
      ->check(integer_in<int32_t>(0, 2))
      ->type_name("M");
  return {sub, [opt] { return run_bench(*opt); }};
}

}  // namespace flashgdn::cli
