// cpu::recurrent and cpu::recurrent_commit (gdn-math §8, flashgdn.hpp above RecurrentParams): decode on a
// pool with sentinel slots, pool dtypes, 2-D slot tables with num_accepted_tokens, no-commit verify with
// intermediate states followed by a commit, the pool-less initial/final contract and varlen rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "cpu_test_helpers.hpp"

namespace flashgdn::test {
namespace {

struct Decode {
  int64_t N = 6, T = 1, Hqk = 2, Hv = 4, K = 16, V = 24, slots = 10;
  StateLayout layout = StateLayout::k_major;
  DType pool_dtype = DType::f32;
  HostTensor q, k, v, g, beta, pool, cu;
  std::vector<int64_t> start, len;  // token rows of each request

  void make(uint64_t seed, std::vector<int64_t> seqlens = {}) {
    Rng rng(seed);
    const int64_t B = seqlens.empty() ? N : 1;
    const int64_t TT = seqlens.empty() ? T : [&] {
      int64_t s = 0;
      for (auto l : seqlens) s += l;
      return s;
    }();
    q = HostTensor(DType::f64, {B, TT, Hqk, K});
    k = HostTensor(DType::f64, {B, TT, Hqk, K});
    v = HostTensor(DType::f64, {B, TT, Hv, V});
    g = HostTensor(DType::f64, {B, TT, Hv});
    beta = HostTensor(DType::f64, {B, TT, Hv});
    for (int64_t i = 0; i < q.numel(); ++i) q.set(i, rng.normal());
    for (int64_t i = 0; i < k.numel(); ++i) k.set(i, rng.normal());
    for (int64_t i = 0; i < v.numel(); ++i) v.set(i, rng.normal());
    for (int64_t i = 0; i < g.numel(); ++i) g.set(i, -rng.uniform());
    for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, rng.uniform());
    pool = layout == StateLayout::k_major ? HostTensor(pool_dtype, {slots, Hv, K, V})
                                          : HostTensor(pool_dtype, {slots, Hv, V, K});
    for (int64_t i = 0; i < pool.numel(); ++i) pool.set(i, 0.5 * rng.normal());
    start.clear();
    len.clear();
    if (seqlens.empty()) {
      for (int64_t n = 0; n < N; ++n) {
        start.push_back(n * T);
        len.push_back(T);
      }
    } else {
      N = int64_t(seqlens.size());
      cu = HostTensor(DType::i64, {N + 1});
      int64_t acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        cu.set(n, double(acc));
        start.push_back(acc);
        len.push_back(seqlens[size_t(n)]);
        acc += seqlens[size_t(n)];
      }
      cu.set(N, double(acc));
    }
  }

  // K-major fp64 copy of pool[slot, h] (or of any state tensor with the pool's layout).
  std::vector<double> state(const HostTensor& t, int64_t lead, int64_t h) const {
    std::vector<double> S(static_cast<size_t>(K * V));
    const int64_t base = (lead * Hv + h) * K * V;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j)
        S[size_t(i * V + j)] = t.get(base + (layout == StateLayout::k_major ? i * V + j : j * K + i));
    return S;
  }

  // Naive recurrence of every request from the given start slots (invalid entries: zero start state).
  // states[(n, h)][t] = S after token t.
  RefOut reference(const std::vector<int64_t>& start_slot,
                   std::vector<std::vector<std::vector<double>>>* states) const {
    Prob p;
    p.N = N;
    p.Hqk = Hqk;
    p.Hv = Hv;
    p.K = K;
    p.V = V;
    p.start = start;
    p.len = len;
    p.q = q.to_double();
    p.k = k.to_double();
    p.v = v.to_double();
    p.g = g.to_double();
    p.beta = beta.to_double();
    p.scale = double(float(1.0 / std::sqrt(double(K))));
    p.l2norm = true;
    p.h0.assign(size_t(N * Hv * K * V), 0.0);
    for (int64_t n = 0; n < N; ++n)
      if (start_slot[size_t(n)] >= 0)
        for (int64_t h = 0; h < Hv; ++h) {
          auto S = state(pool, start_slot[size_t(n)], h);
          std::copy(S.begin(), S.end(), p.h0.begin() + (n * Hv + h) * K * V);
        }
    return naive_recurrent(p, Bug::none, states);
  }

  RecurrentParams params(HostTensor* o) const {
    RecurrentParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.g = g.view();
    p.beta = beta.view();
    p.cu_seqlens = cu.view();
    p.o = o->view();
    p.state_pool = pool.view();
    p.use_qk_l2norm_in_kernel = true;
    p.state_layout = layout;
    p.exec.cpu_fp64 = true;
    p.exec.cpu_threads = 2;
    return p;
  }

  RecurrentDims dims(const RecurrentParams& p) const {
    RecurrentDims d;
    d.B = cu.empty_shape() ? N : 1;
    d.T = q.shape[1];
    d.N = N;
    d.Hqk = Hqk;
    d.Hv = Hv;
    d.K = K;
    d.V = V;
    d.varlen = !cu.empty_shape();
    d.scale = float(1.0 / std::sqrt(double(K)));
    d.slots = p.state_pool.defined() ? slots : 0;
    d.T_max = p.state_indices.defined() && p.state_indices.ndim == 2 ? p.state_indices.shape[1] : 0;
    d.n_buf = p.intermediate_states.defined() ? p.intermediate_states.shape[0] : 0;
    d.T_buf = p.intermediate_states.defined() ? p.intermediate_states.shape[1] : 0;
    return d;
  }

  bool slot_bits_equal(const HostTensor& a, const HostTensor& b, int64_t slot) const {
    const size_t bytes = size_t(Hv * K * V * dtype_size(a.dtype));
    return std::memcmp(a.bytes.data() + slot * bytes, b.bytes.data() + slot * bytes, bytes) == 0;
  }
};

HostTensor index_tensor(const std::vector<int64_t>& vals, std::vector<int64_t> shape, DType dt = DType::i32) {
  HostTensor t(dt, std::move(shape));
  for (size_t i = 0; i < vals.size(); ++i) t.set(int64_t(i), double(vals[i]));
  return t;
}

double row_err(const HostTensor& o, const RefOut& ref, int64_t row0, int64_t rows, int64_t HvV) {
  std::vector<double> a, b;
  for (int64_t e = row0 * HvV; e < (row0 + rows) * HvV; ++e) {
    a.push_back(o.get(e));
    b.push_back(ref.o[size_t(e)]);
  }
  return rel_err_vec(a, b);
}

bool rows_exact_zero(const HostTensor& o, int64_t row0, int64_t rows, int64_t HvV) {
  for (int64_t e = row0 * HvV; e < (row0 + rows) * HvV; ++e)
    if (o.get(e) != 0.0 || std::signbit(o.get(e))) return false;
  return true;
}

// §8.1: sentinel slots (-1; 0 with null_slot_is_invalid; >= slots) give exact zero outputs and leave the
// pool bit-identical; valid rows match the recurrence and write S_T back (commit) or nothing (no commit).
TEST(Recurrent, DecodeSentinelSlots) {
  for (StateLayout layout : {StateLayout::k_major, StateLayout::v_major})
    for (bool null_invalid : {false, true})
      for (bool commit : {true, false}) {
        SCOPED_TRACE(std::to_string(int(layout)) + std::to_string(null_invalid) + std::to_string(commit));
        Decode dc;
        dc.layout = layout;
        dc.make(11);
        const std::vector<int64_t> idx = {3, -1, 0, 10, 5, 1};
        std::vector<int64_t> start(6);
        for (int n = 0; n < 6; ++n) {
          const int64_t s = idx[size_t(n)];
          start[size_t(n)] = (s < 0 || s >= dc.slots || (null_invalid && s == 0)) ? -1 : s;
        }
        const HostTensor before = dc.pool;
        const RefOut ref = dc.reference(start, nullptr);
        HostTensor o = poisoned(DType::f64, dc.v.shape), si = index_tensor(idx, {6});
        RecurrentParams p = dc.params(&o);
        p.state_indices = si.view();
        p.null_slot_is_invalid = null_invalid;
        p.commit = commit;
        ASSERT_TRUE(cpu::recurrent(p, dc.dims(p)).ok());
        const int64_t HvV = dc.Hv * dc.V;
        std::set<int64_t> written;
        for (int64_t n = 0; n < 6; ++n) {
          if (start[size_t(n)] < 0) {
            EXPECT_TRUE(rows_exact_zero(o, n, 1, HvV)) << "row " << n;
            continue;
          }
          EXPECT_LE(row_err(o, ref, n, 1, HvV), 1e-12) << "row " << n;
          written.insert(start[size_t(n)]);
          for (int64_t h = 0; h < dc.Hv; ++h) {
            std::vector<double> hT(ref.hT.begin() + (n * dc.Hv + h) * dc.K * dc.V,
                                   ref.hT.begin() + (n * dc.Hv + h + 1) * dc.K * dc.V);
            if (commit) EXPECT_LE(rel_err_vec(dc.state(dc.pool, start[size_t(n)], h), hT), 1e-7);
          }
        }
        for (int64_t s = 0; s < dc.slots; ++s)
          if (!commit || !written.count(s)) EXPECT_TRUE(dc.slot_bits_equal(dc.pool, before, s)) << "slot " << s;
      }
}

// bf16 / f16 pools: state loaded from the stored rounding, fp32 math, stored rounded.
TEST(Recurrent, LowPrecisionPools) {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    Decode dc;
    dc.pool_dtype = dt;
    dc.T = 3;
    dc.make(12);
    const std::vector<int64_t> idx = {0, 1, 2, 3, 4, 5};
    const RefOut ref = dc.reference(idx, nullptr);
    HostTensor o = poisoned(DType::f32, dc.v.shape), si = index_tensor(idx, {6});
    RecurrentParams p = dc.params(&o);
    p.state_indices = si.view();
    p.exec.cpu_fp64 = false;
    ASSERT_TRUE(cpu::recurrent(p, dc.dims(p)).ok());
    EXPECT_LE(rel_err_vec(o.to_double(), ref.o), 1e-5) << dtype_name(dt);
    std::vector<double> pool_k;
    for (int64_t s = 0; s < 6; ++s)
      for (int64_t h = 0; h < dc.Hv; ++h) {
        auto S = dc.state(dc.pool, s, h);
        pool_k.insert(pool_k.end(), S.begin(), S.end());
      }
    pool_k.resize(ref.hT.size());
    const double tol = dt == DType::bf16 ? 8e-3 : dt == DType::f16 ? 1e-3 : 1e-5;
    EXPECT_LE(rel_err_vec(pool_k, ref.hT), tol) << dtype_name(dt);
  }
}

// §8.2 A: 2-D slot table. Start state from slots[n, a - 1]; S_t written to slots[n, t] (valid slots only);
// a outside [1, T_max] makes the row invalid (zero output, nothing written).
TEST(Recurrent, SlotTableWithNumAccepted) {
  Decode dc;
  dc.N = 5;
  dc.T = 4;
  dc.slots = 24;
  dc.make(13);
  const int64_t T_max = 4;
  std::vector<int64_t> table(size_t(dc.N * T_max));
  for (int64_t i = 0; i < dc.N * T_max; ++i) table[size_t(i)] = (i * 7) % 20 + 2;  // distinct slots 2..21
  table[size_t(1 * T_max + 2)] = -1;                                               // a skipped write in row 1
  const std::vector<int64_t> acc = {1, 4, 2, 0, 5};                                // {1, T, mid, 0, T_max + 1}
  std::vector<int64_t> start(size_t(dc.N), -1);
  for (int64_t n = 0; n < dc.N; ++n)
    if (acc[size_t(n)] >= 1 && acc[size_t(n)] <= T_max)
      start[size_t(n)] = table[size_t(n * T_max + acc[size_t(n)] - 1)];
  const HostTensor before = dc.pool;
  std::vector<std::vector<std::vector<double>>> states;
  const RefOut ref = dc.reference(start, &states);
  HostTensor o = poisoned(DType::f64, dc.v.shape), si = index_tensor(table, {dc.N, T_max}, DType::i64),
             na = index_tensor(acc, {dc.N});
  RecurrentParams p = dc.params(&o);
  p.state_indices = si.view();
  p.num_accepted_tokens = na.view();
  ASSERT_TRUE(cpu::recurrent(p, dc.dims(p)).ok());
  const int64_t HvV = dc.Hv * dc.V;
  std::set<int64_t> written;
  for (int64_t n = 0; n < dc.N; ++n) {
    if (start[size_t(n)] < 0) {
      EXPECT_TRUE(rows_exact_zero(o, n * dc.T, dc.T, HvV)) << "row " << n;
      continue;
    }
    EXPECT_LE(row_err(o, ref, n * dc.T, dc.T, HvV), 1e-12) << "row " << n;
    for (int64_t t = 0; t < dc.T; ++t) {
      const int64_t s = table[size_t(n * T_max + t)];
      if (s < 0) continue;
      written.insert(s);
      for (int64_t h = 0; h < dc.Hv; ++h)
        EXPECT_LE(rel_err_vec(dc.state(dc.pool, s, h), states[size_t(n * dc.Hv + h)][size_t(t)]), 1e-7);
    }
  }
  for (int64_t s = 0; s < dc.slots; ++s)
    if (!written.count(s)) EXPECT_TRUE(dc.slot_bits_equal(dc.pool, before, s)) << "slot " << s;
}

// Tokens beyond T_max write nothing; their outputs are still produced.
TEST(Recurrent, TokensBeyondTMaxWriteNothing) {
  Decode dc;
  dc.N = 2;
  dc.T = 5;
  dc.slots = 8;
  dc.make(14);
  const std::vector<int64_t> table = {1, 2, 3, 4, 5, 6};  // T_max = 3
  const HostTensor before = dc.pool;
  std::vector<std::vector<std::vector<double>>> states;
  const RefOut ref = dc.reference({1, 4}, &states);
  HostTensor o = poisoned(DType::f64, dc.v.shape), si = index_tensor(table, {2, 3});
  RecurrentParams p = dc.params(&o);
  p.state_indices = si.view();
  ASSERT_TRUE(cpu::recurrent(p, dc.dims(p)).ok());
  EXPECT_LE(rel_err_vec(o.to_double(), ref.o), 1e-12);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t t = 0; t < 3; ++t)
      EXPECT_LE(rel_err_vec(dc.state(dc.pool, table[size_t(n * 3 + t)], 0), states[size_t(n * dc.Hv)][size_t(t)]),
                1e-7);
  for (int64_t s : {0, 7}) EXPECT_TRUE(dc.slot_bits_equal(dc.pool, before, s));
}

// §8.2 B: commit = false leaves the pool bit-identical and writes S_t to the intermediate buffer; then
// recurrent_commit with num_accepted in {1, T, mid, 0, T + 1} equals the recurrence over the accepted prefix.
TEST(Recurrent, NoCommitVerifyThenCommit) {
  for (StateLayout layout : {StateLayout::k_major, StateLayout::v_major}) {
    Decode dc;
    dc.layout = layout;
    dc.N = 6;
    dc.T = 4;
    dc.slots = 8;
    dc.make(15);
    const std::vector<int64_t> idx = {2, 5, 0, 7, 1, -1};
    const std::vector<int64_t> buf = {3, 0, 1, 6, 2, 4};  // row 3: buffer index out of range -> no writes
    const int64_t n_buf = 5;
    const HostTensor before = dc.pool;
    std::vector<std::vector<std::vector<double>>> states;
    const RefOut ref = dc.reference({2, 5, 0, 7, 1, -1}, &states);
    HostTensor inter = layout == StateLayout::k_major ? HostTensor(DType::f32, {n_buf, dc.T, dc.Hv, dc.K, dc.V})
                                                      : HostTensor(DType::f32, {n_buf, dc.T, dc.Hv, dc.V, dc.K});
    inter.fill_nan();
    HostTensor o = poisoned(DType::f64, dc.v.shape), si = index_tensor(idx, {6}), bi = index_tensor(buf, {6});
    RecurrentParams p = dc.params(&o);
    p.state_indices = si.view();
    p.commit = false;
    p.intermediate_states = inter.view();
    p.intermediate_indices = bi.view();
    ASSERT_TRUE(cpu::recurrent(p, dc.dims(p)).ok());
    EXPECT_TRUE(dc.pool.bit_equal(before)) << "no-commit verify wrote the pool";
    EXPECT_TRUE(rows_exact_zero(o, 5 * dc.T, dc.T, dc.Hv * dc.V));
    const int64_t per = dc.Hv * dc.K * dc.V;
    for (int64_t n = 0; n < 5; ++n) {
      EXPECT_LE(row_err(o, ref, n * dc.T, dc.T, dc.Hv * dc.V), 1e-12);
      if (n == 3) continue;
      for (int64_t t = 0; t < dc.T; ++t)
        for (int64_t h = 0; h < dc.Hv; ++h)
          EXPECT_LE(
              rel_err_vec(dc.state(inter, buf[size_t(n)] * dc.T + t, h), states[size_t(n * dc.Hv + h)][size_t(t)]),
              1e-7);
    }
    // Buffer entry 4 belongs to the invalid row 5: untouched (still NaN).
    for (int64_t e = 4 * dc.T * per; e < 5 * dc.T * per; ++e) ASSERT_TRUE(std::isnan(inter.get(e)));

    const std::vector<int64_t> acc = {1, 4, 2, 0, 5, 2};  // rows 3 (0), 4 (T + 1), 5 (slot -1) are skipped
    HostTensor na = index_tensor(acc, {6});
    RecurrentCommitParams cp;
    cp.state_pool = dc.pool.view();
    cp.state_indices = si.view();
    cp.intermediate_states = inter.view();
    cp.intermediate_indices = bi.view();
    cp.num_accepted_tokens = na.view();
    CommitDims cd;
    cd.N = 6;
    cd.slots = dc.slots;
    cd.n_buf = n_buf;
    cd.T_buf = dc.T;
    cd.Hv = dc.Hv;
    cd.K = dc.K;
    cd.V = dc.V;
    ASSERT_TRUE(cpu::recurrent_commit(cp, cd).ok());
    std::set<int64_t> committed;
    for (int64_t n = 0; n < 3; ++n) {
      const int64_t a = acc[size_t(n)], s = idx[size_t(n)];
      committed.insert(s);
      for (int64_t h = 0; h < dc.Hv; ++h) {
        EXPECT_LE(rel_err_vec(dc.state(dc.pool, s, h), states[size_t(n * dc.Hv + h)][size_t(a - 1)]), 1e-7);
        EXPECT_EQ(dc.state(dc.pool, s, h), dc.state(inter, buf[size_t(n)] * dc.T + a - 1, h));  // exact copy
      }
    }
    for (int64_t s = 0; s < dc.slots; ++s)
      if (!committed.count(s)) EXPECT_TRUE(dc.slot_bits_equal(dc.pool, before, s)) << "slot " << s;
  }
}

// Without a pool: initial_state / final_state, as chunk_fwd's recurrence; an empty row keeps hT = h0.
TEST(Recurrent, NoPoolMatchesChunkFwd) {
  GdnCase c;
  c.seqlens = {3, 0, 7, 1};
  c.Hqk = 2;
  c.Hv = 4;
  c.K = 16;
  c.V = 24;
  c.dtype = DType::f64;
  c.layout = StateLayout::v_major;
  GdnInputs in = make_inputs(c);
  const FwdOut ref = run_fwd(c, in, CpuAlgo::recurrent, 64, true);
  HostTensor o = poisoned(DType::f64, in.v.shape), hT = state_tensor(c, DType::f64, c.N());
  hT.fill_nan();
  RecurrentParams p;
  p.q = in.q.view();
  p.k = in.k.view();
  p.v = in.v.view();
  p.g = in.g.view();
  p.beta = in.beta.view();
  p.cu_seqlens = in.cu.view();
  p.initial_state = in.h0.view();
  p.o = o.view();
  p.final_state = hT.view();
  p.use_qk_l2norm_in_kernel = true;
  p.state_layout = c.layout;
  p.exec.cpu_fp64 = true;
  RecurrentDims d;
  static_cast<SeqDims&>(d) = chunk_dims(c);
  ASSERT_TRUE(cpu::recurrent(p, d).ok());
  EXPECT_TRUE(o.bit_equal(ref.o));
  EXPECT_TRUE(hT.bit_equal(ref.hT));
}

// Varlen rows on a pool: a length-0 row touches nothing (its slot stays bit-identical).
TEST(Recurrent, VarlenRowsWithEmptyRow) {
  Decode dc;
  dc.make(16, {2, 0, 3});
  const std::vector<int64_t> idx = {4, 6, 1};
  const HostTensor before = dc.pool;
  const RefOut ref = dc.reference(idx, nullptr);
  HostTensor o = poisoned(DType::f64, dc.v.shape), si = index_tensor(idx, {3});
  RecurrentParams p = dc.params(&o);
  p.state_indices = si.view();
  ASSERT_TRUE(cpu::recurrent(p, dc.dims(p)).ok());
  EXPECT_LE(rel_err_vec(o.to_double(), ref.o), 1e-12);
  EXPECT_TRUE(dc.slot_bits_equal(dc.pool, before, 6));
  EXPECT_FALSE(dc.slot_bits_equal(dc.pool, before, 4));
  EXPECT_FALSE(dc.slot_bits_equal(dc.pool, before, 1));
}

}  // namespace
}  // namespace flashgdn::test
