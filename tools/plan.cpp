// `flashgdn plan <op> [key=value...]`: the plan a call of this shape runs on a GPU of --sms SMs (default: the
// visible GPU, else an H200's 132) — kernels, tiles, grids, segment split, workspace, and why (flashgdn::<op>_plan).
// Shapes only: the tensors are host views without data, so no GPU is needed.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn::cli {
namespace {

std::string plan_help() {
  return std::string(
      "  Prints the CUDA plan of a call of that shape on a GPU of `sms` SMs (default 132).\n"
      "  chunk_fwd keys: B T Hqk Hv K V (defaults 1 32768 16 16 128 128), dtype=bf16|f16, seqs=N (varlen: N\n"
      "                  sequences of T / N tokens), segments=P (exec.chunk_fwd_segments), sms\n"
      "  chunk_bwd keys: as chunk_fwd (Hv default 32), segments=P (exec.chunk_bwd_segments), chains=0|1|2|3\n"
      "                  (exec.chunk_bwd_chains), grads=0|1|2|3|4 (exec.chunk_bwd_grads),\n"
      "                  window=0|1 (exec.chunk_bwd_window), state=0|1|2 (exec.chunk_bwd_state)\n"
      "  recurrent keys: N T Hqk Hv K V (defaults 1 1 16 32 128 128), pool=f32|bf16|f16|none, layout=k|v,\n"
      "                  verify=0|1 (bf16 intermediate states, no commit), kernel=auto|persistent|direct|\n"
      "                  direct_pipe|wy|wy_mma (exec.recurrent_kernel), sms\n"
      "  mixer_decode keys: N T Hqk Hv (defaults 1 1 16 32; K = V = 128, Kc = 4, bf16 activations),\n"
      "                  pool=f32|bf16, layout=k|v, split=0|1|2|4 (exec.mixer_split), kernel=0|1|2\n"
      "                  (exec.mixer_kernel: auto, clustered, pipe), sms\n");
}

DType dtype_of(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "f16") return DType::f16;
  throw CLI::ValidationError("dtype", "expected f32, bf16 or f16, got '" + s + "'");
}

RecurrentKernel kernel_of(const std::string& s) {
  RecurrentKernel k;
  if (!recurrent_kernel_from_name(s.c_str(), &k))
    throw CLI::ValidationError("kernel",
                               "expected auto, persistent, direct, direct_pipe, wy or wy_mma, got '" + s + "'");
  return k;
}

// A host view of a shape whose data is never read: the plan reads shapes and flags only. Validation checks that
// outputs overlap no input, so each view gets its own address range (1 TB apart, never dereferenced).
TensorView shape(DType dt, std::initializer_list<int64_t> dims) {
  static uintptr_t next = uintptr_t(1) << 40;
  next += uintptr_t(1) << 40;
  return make_tensor(reinterpret_cast<void*>(next), dt, dims);
}

}  // namespace

int run_plan(const std::string& op, const std::vector<std::string>& params) {
  std::map<std::string, std::string> kv;
  for (const std::string& a : params) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos) throw CLI::ValidationError("params", "expected key=value, got '" + a + "'");
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  const auto num = [&](const char* key, int64_t def) {
    auto it = kv.find(key);
    if (it == kv.end()) return def;
    int64_t x = 0;
    const char* end = it->second.data() + it->second.size();
    auto [ptr, ec] = std::from_chars(it->second.data(), end, x);
    if (ec != std::errc() || ptr != end || x < 0)
      throw CLI::ValidationError(key, "expected a non-negative integer, got '" + it->second + "'");
    return x;
  };
  const auto str = [&](const char* key, const char* def) {
    auto it = kv.find(key);
    return it == kv.end() ? std::string(def) : it->second;
  };
  const int32_t sms = int32_t(num("sms", 132));
  std::string text;
  Status st;
  if (op == "chunk_fwd" || op == "chunk_bwd") {
    const bool bwd = op == "chunk_bwd";
    const int64_t B = num("B", 1), T = num("T", 32768), Hqk = num("Hqk", 16), Hv = num("Hv", bwd ? 32 : Hqk);
    const int64_t K = num("K", 128), V = num("V", 128), seqs = num("seqs", 0);
    const DType dt = dtype_of(str("dtype", "bf16"));
    const int64_t Bv = seqs > 0 ? 1 : B;
    std::vector<int32_t> cu;
    if (seqs > 0)
      for (int64_t n = 0; n <= seqs; ++n) cu.push_back(int32_t(T * n / seqs));
    const TensorView cu_view = seqs > 0 ? make_tensor(cu.data(), DType::i32, {seqs + 1}) : TensorView();
    const int32_t segments = int32_t(num("segments", 0));
    if (!bwd) {
      ChunkFwdParams p;
      p.q = shape(dt, {Bv, T, Hqk, K}), p.k = shape(dt, {Bv, T, Hqk, K});
      p.v = shape(dt, {Bv, T, Hv, V}), p.o = shape(dt, {Bv, T, Hv, V});
      p.cu_seqlens = cu_view;
      p.exec.chunk_fwd_segments = segments;
      st = chunk_fwd_plan(p, &text, sms);
    } else {
      ChunkBwdParams p;
      p.q = shape(dt, {Bv, T, Hqk, K}), p.k = shape(dt, {Bv, T, Hqk, K});
      p.v = shape(dt, {Bv, T, Hv, V}), p.d_o = shape(dt, {Bv, T, Hv, V});
      p.dq = shape(dt, {Bv, T, Hqk, K}), p.dk = shape(dt, {Bv, T, Hqk, K}), p.dv = shape(dt, {Bv, T, Hv, V});
      p.cu_seqlens = cu_view;
      p.exec.chunk_bwd_segments = segments;
      p.exec.chunk_bwd_chains = int32_t(num("chains", 0));
      p.exec.chunk_bwd_grads = int32_t(num("grads", 0));
      p.exec.chunk_bwd_window = int32_t(num("window", 0));
      p.exec.chunk_bwd_state = int32_t(num("state", 0));
      st = chunk_bwd_plan(p, &text, sms);
    }
  } else if (op == "mixer_decode") {
    const int64_t N = num("N", 1), T = num("T", 1), Hqk = num("Hqk", 16), Hv = num("Hv", 32);
    const int64_t K = 128, V = 128, Kc = 4, C = 2 * Hqk * K + Hv * V;
    const bool vmaj = str("layout", "k") == "v";
    const DType pool = dtype_of(str("pool", "f32"));
    MixerDecodeParams p;
    p.x = shape(DType::bf16, {N, T, C}), p.z = shape(DType::bf16, {N, T, Hv, V});
    p.a = shape(DType::bf16, {N, T, Hv}), p.b = shape(DType::bf16, {N, T, Hv});
    p.A_log = shape(DType::f32, {Hv}), p.dt_bias = shape(DType::f32, {Hv});
    p.conv_weight = shape(DType::bf16, {C, Kc}), p.norm_weight = shape(DType::f32, {V});
    p.conv_state = shape(DType::bf16, {N, C, Kc - 1});
    p.state_layout = vmaj ? StateLayout::v_major : StateLayout::k_major;
    p.state_pool = vmaj ? shape(pool, {N, Hv, V, K}) : shape(pool, {N, Hv, K, V});
    std::vector<int32_t> idx;
    for (int64_t n = 0; n < N; ++n) idx.push_back(int32_t(n));
    p.state_indices = make_tensor(idx.data(), DType::i32, {N});
    p.out = shape(DType::bf16, {N, T, Hv, V});
    p.num_k_heads = Hqk, p.head_k_dim = K;
    p.exec.mixer_split = int32_t(num("split", 0));
    p.exec.mixer_kernel = int32_t(num("kernel", 0));
    st = mixer_decode_plan(p, &text, sms);
  } else {  // recurrent (CLI11 checked the name)
    const int64_t N = num("N", 1), T = num("T", 1), Hqk = num("Hqk", 16), Hv = num("Hv", 32);
    const int64_t K = num("K", 128), V = num("V", 128);
    const std::string pool = str("pool", "f32");
    const bool vmaj = str("layout", "k") == "v", verify = num("verify", 0) != 0;
    RecurrentParams p;
    p.q = shape(DType::bf16, {N, T, Hqk, K}), p.k = shape(DType::bf16, {N, T, Hqk, K});
    p.v = shape(DType::bf16, {N, T, Hv, V}), p.o = shape(DType::bf16, {N, T, Hv, V});
    p.state_layout = vmaj ? StateLayout::v_major : StateLayout::k_major;
    std::vector<int32_t> idx;
    if (pool != "none") {
      p.state_pool = vmaj ? shape(dtype_of(pool), {N, Hv, V, K}) : shape(dtype_of(pool), {N, Hv, K, V});
      for (int64_t n = 0; n < N; ++n) idx.push_back(int32_t(n));
      p.state_indices = make_tensor(idx.data(), DType::i32, {N});
    }
    if (verify) {
      p.intermediate_states = vmaj ? shape(DType::bf16, {N, T, Hv, V, K}) : shape(DType::bf16, {N, T, Hv, K, V});
      p.commit = false;
    }
    p.exec.recurrent_kernel = kernel_of(str("kernel", "auto"));
    st = recurrent_plan(p, &text, sms);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "flashgdn plan: %s\n", st.message().c_str());
    return kExitFailed;
  }
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

Command add_plan(CLI::App& app) {
  auto op = std::make_shared<std::string>();
  auto params = std::make_shared<std::vector<std::string>>();
  CLI::App* sub =
      app.add_subcommand("plan", "print the CUDA plan (kernels, tiles, grid, split, workspace, why) of a shape");
  sub->footer(plan_help());
  sub->add_option("op", *op, "the op")
      ->required()
      ->check(CLI::IsMember({"chunk_fwd", "chunk_bwd", "recurrent", "mixer_decode"}));
  sub->add_option("params", *params, "shape and options as key=value (listed below)")->type_name("KEY=VALUE");
  return {sub, [op, params] { return run_plan(*op, *params); }};
}

}  // namespace flashgdn::cli
