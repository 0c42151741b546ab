// Helpers of the API suites: owning buffers with DLTensor views, valid base cases of every op built through the
// C ABI, and the rejection check (status code, message substrings, every buffer bit-for-bit untouched).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "flashgdn/flashgdn.h"
#include "flashgdn/flashgdn.hpp"
#include "test_util.hpp"

namespace flashgdn::test {

inline DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f64:
      return {kDLFloat, 64, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
  }
  return {kDLFloat, 32, 1};
}

// An owning host buffer and a DLTensor over it. The DLTensor keeps pointers into this object: never copy it
// (Bufs hands out stable references).
struct DLBuf {
  std::string name;
  DType dtype = DType::f32;
  std::vector<uint8_t> mem;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  DLTensor t{};

  DLBuf(std::string n, DType dt, std::vector<int64_t> shp, int64_t extra_elems = 0) : name(std::move(n)), dtype(dt) {
    int64_t numel = 1;
    for (auto s : shp) numel *= s;
    mem.assign(size_t((numel + extra_elems) * dtype_size(dt)), 0);
    t.data = mem.data();
    t.device = {kDLCPU, 0};
    t.ndim = int(shp.size());
    t.dtype = dl_dtype(dt);
    for (size_t i = 0; i < shp.size(); ++i) shape[i] = shp[i];
    t.shape = shape;
    t.strides = nullptr;  // compact row-major
    t.byte_offset = 0;
  }
  DLBuf(const DLBuf&) = delete;
  DLBuf& operator=(const DLBuf&) = delete;

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < t.ndim; ++i) n *= shape[i];
    return n;
  }
  // Explicit strides (in elements).
  void set_strides(std::initializer_list<int64_t> s) {
    int i = 0;
    for (auto x : s) strides[i++] = x;
    t.strides = strides;
  }
  // Explicit compact strides (what strides == NULL means).
  void set_compact_strides() {
    int64_t st = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      strides[i] = st;
      st *= shape[i];
    }
    t.strides = strides;
  }
  void set(int64_t i, double x) { detail::store_from_double(mem.data(), dtype, i, x); }
  double get(int64_t i) const { return detail::load_as_double(mem.data(), dtype, i); }
  void fill_normal(Rng& r, double scale = 1.0) {
    for (int64_t i = 0; i < int64_t(mem.size()) / dtype_size(dtype); ++i) set(i, scale * r.normal());
  }
  void fill_sentinel() { std::memset(mem.data(), 0xA5, mem.size()); }
  void set_indices(std::initializer_list<int64_t> v) {
    int64_t i = 0;
    for (auto x : v) set(i++, double(x));
  }
  // A compact CPU TensorView of this buffer (for the C++ API).
  TensorView view() const {
    TensorView v;
    v.data = const_cast<uint8_t*>(mem.data());
    v.dtype = dtype;
    v.ndim = t.ndim;
    int64_t st = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[i];
      v.strides[i] = st;
      st *= shape[i];
    }
    return v;
  }
};

// All buffers of one call, with a snapshot to prove a rejected call wrote nothing.
struct Bufs {
  std::deque<DLBuf> all;  // a deque never moves its elements
  std::vector<std::vector<uint8_t>> snap;

  DLBuf& add(const std::string& name, DType dt, std::vector<int64_t> shape, int64_t extra = 0) {
    return all.emplace_back(name, dt, std::move(shape), extra);
  }
  void snapshot() {
    snap.clear();
    for (auto& b : all) snap.push_back(b.mem);
  }
  // Names of the buffers whose bytes changed since the snapshot ("" when none).
  std::string changed() const {
    std::string out;
    for (size_t i = 0; i < all.size() && i < snap.size(); ++i)
      if (all[i].mem != snap[i]) out += all[i].name + " ";
    return out;
  }
};

inline bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// The call was rejected with `code`, the message names every substring, and no buffer changed.
#define EXPECT_REJECTED(bufs, call, code, ...)                                                          \
  do {                                                                                                  \
    (bufs).snapshot();                                                                                  \
    const int _rc = (call);                                                                             \
    const std::string _msg = flashgdn_last_error();                                                     \
    EXPECT_EQ(_rc, int(code)) << "message: " << _msg;                                                   \
    for (const char* _sub : {__VA_ARGS__})                                                              \
      EXPECT_TRUE(::flashgdn::test::contains(_msg, _sub)) << "missing \"" << _sub << "\" in: " << _msg; \
    EXPECT_TRUE(::flashgdn::test::contains(_msg, "(src/")) << "no source location in: " << _msg;        \
    EXPECT_EQ((bufs).changed(), "") << "a rejected call wrote to these buffers";                        \
  } while (0)

// Validation accepted the call: it ran (OK), or a backend that is not written yet said `unsupported` (never a
// message from validate.cpp).
#define EXPECT_ACCEPTED(call)                                                                             \
  do {                                                                                                    \
    const int _rc = (call);                                                                               \
    const std::string _msg = flashgdn_last_error();                                                       \
    EXPECT_TRUE(_rc == FLASHGDN_OK ||                                                                     \
                (_rc == FLASHGDN_ERROR_UNSUPPORTED && !::flashgdn::test::contains(_msg, "validate.cpp"))) \
        << "rc " << _rc << ": " << _msg;                                                                  \
    if (_rc == FLASHGDN_OK) EXPECT_EQ(_msg, "");                                                          \
  } while (0)

// ---- valid base cases --------------------------------------------------------------------------------------

// chunk_fwd: B = 1, T = 8, Hqk = 2, Hv = 4, K = V = 8, with h0 and final state.
struct FwdCase {
  static constexpr int64_t B = 1, T = 8, Hqk = 2, Hv = 4, K = 8, V = 8;
  Bufs b;
  DLBuf &q, &k, &v, &g, &beta, &h0, &o, &ht;
  flashgdn_chunk_fwd_params p;

  explicit FwdCase(DType dt = DType::f32, uint64_t seed = 7)
      : q(b.add("q", dt, {B, T, Hqk, K})),
        k(b.add("k", dt, {B, T, Hqk, K})),
        v(b.add("v", dt, {B, T, Hv, V})),
        g(b.add("g", dt == DType::f64 ? DType::f64 : DType::f32, {B, T, Hv})),
        beta(b.add("beta", dt == DType::f64 ? DType::f64 : DType::f32, {B, T, Hv})),
        h0(b.add("initial_state", dt == DType::f64 ? DType::f64 : DType::f32, {B, Hv, K, V})),
        o(b.add("o", dt, {B, T, Hv, V})),
        ht(b.add("final_state", dt == DType::f64 ? DType::f64 : DType::f32, {B, Hv, K, V})) {
    Rng r(seed);
    q.fill_normal(r);
    k.fill_normal(r, 0.3);
    v.fill_normal(r);
    for (int64_t i = 0; i < g.numel(); ++i) g.set(i, -r.uniform());
    for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, r.uniform());
    h0.fill_normal(r, 0.1);
    o.fill_sentinel();
    ht.fill_sentinel();
    flashgdn_chunk_fwd_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.g = &g.t;
    p.beta = &beta.t;
    p.initial_state = &h0.t;
    p.o = &o.t;
    p.final_state = &ht.t;
  }
  int run() { return flashgdn_chunk_fwd(&p, nullptr, 0, nullptr); }
  // The same call's C++ params on compact views of the same buffers, into `o2` / `ht2`.
  ChunkFwdParams cpp_params(DLBuf& o2, DLBuf& ht2) {
    ChunkFwdParams c;
    c.q = q.view();
    c.k = k.view();
    c.v = v.view();
    c.g = g.view();
    c.beta = beta.view();
    c.initial_state = h0.view();
    c.o = o2.view();
    c.final_state = ht2.view();
    return c;
  }
  // The same call through the C++ API, into `o2` / `ht2`.
  Status run_cpp(DLBuf& o2, DLBuf& ht2) { return chunk_fwd(cpp_params(o2, ht2)); }
};

// chunk_bwd: the forward case plus d_o and the gradients.
struct BwdCase {
  static constexpr int64_t B = 1, T = 8, Hqk = 2, Hv = 4, K = 8, V = 8;
  Bufs b;
  DLBuf &q, &k, &v, &g, &beta, &d_o, &dq, &dk, &dv, &dg, &dbeta;
  flashgdn_chunk_bwd_params p;

  BwdCase()
      : q(b.add("q", DType::f32, {B, T, Hqk, K})),
        k(b.add("k", DType::f32, {B, T, Hqk, K})),
        v(b.add("v", DType::f32, {B, T, Hv, V})),
        g(b.add("g", DType::f32, {B, T, Hv})),
        beta(b.add("beta", DType::f32, {B, T, Hv})),
        d_o(b.add("d_o", DType::f32, {B, T, Hv, V})),
        dq(b.add("dq", DType::f32, {B, T, Hqk, K})),
        dk(b.add("dk", DType::f32, {B, T, Hqk, K})),
        dv(b.add("dv", DType::f32, {B, T, Hv, V})),
        dg(b.add("dg", DType::f32, {B, T, Hv})),
        dbeta(b.add("dbeta", DType::f32, {B, T, Hv})) {
    Rng r(11);
    q.fill_normal(r);
    k.fill_normal(r, 0.3);
    v.fill_normal(r);
    for (int64_t i = 0; i < g.numel(); ++i) g.set(i, -r.uniform());
    for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, r.uniform());
    d_o.fill_normal(r);
    for (DLBuf* x : {&dq, &dk, &dv, &dg, &dbeta}) x->fill_sentinel();
    flashgdn_chunk_bwd_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.g = &g.t;
    p.beta = &beta.t;
    p.d_o = &d_o.t;
    p.dq = &dq.t;
    p.dk = &dk.t;
    p.dv = &dv.t;
    p.dg = &dg.t;
    p.dbeta = &dbeta.t;
  }
  int run() { return flashgdn_chunk_bwd(&p, nullptr, 0, nullptr); }
};

// gating: a, b [3, 4]; A_log, dt_bias [4]; outputs g, beta.
struct GatingCase {
  static constexpr int64_t R = 3, Hv = 4;
  Bufs b;
  DLBuf &A_log, &a, &dt_bias, &bb, &g, &beta;
  flashgdn_gating_params p;

  GatingCase()
      : A_log(b.add("A_log", DType::f32, {Hv})),
        a(b.add("a", DType::f32, {R, Hv})),
        dt_bias(b.add("dt_bias", DType::f32, {Hv})),
        bb(b.add("b", DType::f32, {R, Hv})),
        g(b.add("g", DType::f32, {R, Hv})),
        beta(b.add("beta", DType::f32, {R, Hv})) {
    Rng r(5);
    for (DLBuf* x : {&A_log, &a, &dt_bias, &bb}) x->fill_normal(r);
    g.fill_sentinel();
    beta.fill_sentinel();
    flashgdn_gating_params_init(&p);
    p.A_log = &A_log.t;
    p.a = &a.t;
    p.dt_bias = &dt_bias.t;
    p.b = &bb.t;
    p.g = &g.t;
    p.beta = &beta.t;
  }
  int run() { return flashgdn_gating(&p, nullptr); }
};

// recurrent, single-token decode on a pool: N = 3 rows, T = 1, pool of 5 slots, state_indices {0, 2, 4}.
// verify() turns it into a 2-token verify: state_indices [3, 2], num_accepted_tokens, intermediate buffer.
struct RecCase {
  static constexpr int64_t N = 3, Hqk = 2, Hv = 4, K = 8, V = 8, SLOTS = 5;
  int64_t T;
  Bufs b;
  DLBuf &q, &k, &v, &g, &beta, &o, &pool, &idx;
  DLBuf* acc = nullptr;
  DLBuf* inter = nullptr;
  DLBuf* inter_idx = nullptr;
  flashgdn_recurrent_params p;

  explicit RecCase(int64_t tokens = 1)
      : T(tokens),
        q(b.add("q", DType::f32, {N, T, Hqk, K})),
        k(b.add("k", DType::f32, {N, T, Hqk, K})),
        v(b.add("v", DType::f32, {N, T, Hv, V})),
        g(b.add("g", DType::f32, {N, T, Hv})),
        beta(b.add("beta", DType::f32, {N, T, Hv})),
        o(b.add("o", DType::f32, {N, T, Hv, V})),
        pool(b.add("state_pool", DType::f32, {SLOTS, Hv, K, V})),
        idx(b.add("state_indices", DType::i32, {N})) {
    Rng r(3);
    q.fill_normal(r);
    k.fill_normal(r, 0.3);
    v.fill_normal(r);
    for (int64_t i = 0; i < g.numel(); ++i) g.set(i, -r.uniform());
    for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, r.uniform());
    pool.fill_normal(r, 0.1);
    idx.set_indices({0, 2, 4});
    o.fill_sentinel();
    flashgdn_recurrent_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.g = &g.t;
    p.beta = &beta.t;
    p.o = &o.t;
    p.state_pool = &pool.t;
    p.state_indices = &idx.t;
  }
  // 2-D slot table [N, T] (vLLM protocol) with num_accepted_tokens, plus an intermediate buffer [N, T, ...].
  void verify() {
    DLBuf& idx2 = b.add("state_indices_2d", DType::i32, {N, T});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t t = 0; t < T; ++t) idx2.set(n * T + t, -1);
    idx2.set(0, 0);
    idx2.set(T, 1);
    idx2.set(2 * T, 3);  // row n starts from column 0 (num_accepted 1); later columns are invalid slots
    acc = &b.add("num_accepted_tokens", DType::i32, {N});
    acc->set_indices({1, 1, 1});
    inter = &b.add("intermediate_states", DType::f32, {N, T, Hv, K, V});
    inter->fill_sentinel();
    inter_idx = &b.add("intermediate_indices", DType::i32, {N});
    inter_idx->set_indices({2, 0, 1});
    p.state_indices = &idx2.t;
    p.num_accepted_tokens = &acc->t;
    p.intermediate_states = &inter->t;
    p.intermediate_indices = &inter_idx->t;
  }
  int run() { return flashgdn_recurrent(&p, nullptr, 0, nullptr); }
};

// recurrent_commit: pool of 5 slots, buffer [3, 2, Hv, K, V], rows {slot 1, 3, -1}.
struct CommitCase {
  static constexpr int64_t N = 3, Hv = 4, K = 8, V = 8, SLOTS = 5, TB = 2;
  Bufs b;
  DLBuf &pool, &idx, &inter, &inter_idx, &acc;
  flashgdn_recurrent_commit_params p;

  CommitCase()
      : pool(b.add("state_pool", DType::f32, {SLOTS, Hv, K, V})),
        idx(b.add("state_indices", DType::i32, {N})),
        inter(b.add("intermediate_states", DType::f32, {N, TB, Hv, K, V})),
        inter_idx(b.add("intermediate_indices", DType::i32, {N})),
        acc(b.add("num_accepted_tokens", DType::i32, {N})) {
    Rng r(9);
    pool.fill_normal(r);
    inter.fill_normal(r);
    idx.set_indices({1, 3, -1});
    inter_idx.set_indices({0, 1, 2});
    acc.set_indices({1, 2, 1});
    flashgdn_recurrent_commit_params_init(&p);
    p.state_pool = &pool.t;
    p.state_indices = &idx.t;
    p.intermediate_states = &inter.t;
    p.intermediate_indices = &inter_idx.t;
    p.num_accepted_tokens = &acc.t;
  }
  int run() { return flashgdn_recurrent_commit(&p, nullptr); }
};

}  // namespace flashgdn::test
