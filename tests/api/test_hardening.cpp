// Input-safety regressions through the C ABI: each test is one defect a fuzzer found (an unbounded loop or
// allocation on an empty problem, a signed overflow, a misaligned or wrapping pointer, an out-of-range enum read)
// and fails, or trips ASan/UBSan in the sanitizer build (scripts/sanitize.sh), without its fix.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "api_fixture.hpp"

namespace flashgdn::test {
namespace {

constexpr int kInvalid = FLASHGDN_ERROR_INVALID_ARGUMENT;
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// A tensor that has no elements (a zero dim) but declares huge other dims; its pointer is a real 16-byte buffer
// the library must never touch.
struct EmptyBuf {
  std::vector<uint8_t> mem = std::vector<uint8_t>(16, 0x5A);
  int64_t shape[kMaxDims] = {};
  DLTensor t{};
  EmptyBuf(std::initializer_list<int64_t> shp, DLDataType dt = {kDLFloat, 32, 1}) {
    int i = 0;
    for (int64_t s : shp) shape[i++] = s;
    t.data = mem.data();
    t.device = {kDLCPU, 0};
    t.ndim = i;
    t.dtype = dt;
    t.shape = shape;
  }
  bool untouched() const {
    for (uint8_t x : mem)
      if (x != 0x5A) return false;
    return true;
  }
};

// chunk_fwd, chunk_bwd and recurrent on q = k = [1, 0, Hqk, K], v = o = [1, 0, Hv, V] (no tokens).
struct EmptySeq {
  EmptyBuf q, k, v, o;
  EmptySeq(int64_t Hqk, int64_t K, int64_t Hv, int64_t V)
      : q({1, 0, Hqk, K}), k({1, 0, Hqk, K}), v({1, 0, Hv, V}), o({1, 0, Hv, V}) {}
  int fwd(const DLTensor* cu = nullptr) {
    flashgdn_chunk_fwd_params p;
    flashgdn_chunk_fwd_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.o = &o.t;
    p.cu_seqlens = cu;
    return flashgdn_chunk_fwd(&p, nullptr, 0, nullptr);
  }
  int rec(const DLTensor* cu = nullptr) {
    flashgdn_recurrent_params p;
    flashgdn_recurrent_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.o = &o.t;
    p.cu_seqlens = cu;
    return flashgdn_recurrent(&p, nullptr, 0, nullptr);
  }
  int bwd(const DLTensor* cu = nullptr) {
    flashgdn_chunk_bwd_params p;
    flashgdn_chunk_bwd_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.cu_seqlens = cu;
    p.d_o = &o.t;  // d_o [B, T, Hv, V], dq/dk [B, T, Hqk, K], dv [B, T, Hv, V]: all empty
    EmptyBuf dq({1, 0, q.shape[2], q.shape[3]}), dk({1, 0, q.shape[2], q.shape[3]}), dv({1, 0, v.shape[2], v.shape[3]});
    p.dq = &dq.t;
    p.dk = &dk.t;
    p.dv = &dv.t;
    return flashgdn_chunk_bwd(&p, nullptr, 0, nullptr);
  }
  bool untouched() const { return q.untouched() && k.untouched() && v.untouched() && o.untouched(); }
};

void expect_invalid(int rc, std::initializer_list<const char*> subs) {
  const std::string msg = flashgdn_last_error();
  EXPECT_EQ(rc, kInvalid) << msg;
  for (const char* s : subs) EXPECT_TRUE(contains(msg, s)) << "missing \"" << s << "\" in: " << msg;
  EXPECT_TRUE(contains(msg, "(src/")) << msg;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- 1. unbounded work on all-empty tensors ---------------------------------------------------------------------

TEST(Hardening, EmptyTensorsWithHugeHeadCountRejected) {
  EmptySeq s(1, 1, int64_t(1) << 40, 1);
  expect_invalid(s.fwd(), {"chunk_fwd: v:", "N * Hv (sequence, value head) pairs", "[1, 1099511627776]"});
  expect_invalid(s.rec(), {"recurrent: v:", "N * Hv"});
  expect_invalid(s.bwd(), {"chunk_bwd: v:", "N * Hv"});
  EXPECT_TRUE(s.untouched());
}

// An accepted empty problem returns at once: 2^30 (sequence, head) pairs took ~64 s before the early return.
TEST(Hardening, EmptyProblemReturnsAtOnce) {
  EmptySeq s(1, 1, int64_t(1) << 30, 1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.fwd(), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(s.rec(), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(s.bwd(), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_TRUE(s.untouched());
}

// Varlen with empty rows only: N * Hv pairs, none of which has a token or a state to write.
TEST(Hardening, VarlenOfEmptyRowsReturnsAtOnce) {
  EmptySeq s(1, 1, int64_t(1) << 26, 1);
  std::vector<int64_t> zeros(9, 0);
  int64_t cu_shape[1] = {9};
  DLTensor cu{zeros.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, cu_shape, nullptr, 0};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.fwd(&cu), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(s.rec(&cu), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(s.bwd(&cu), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_LT(seconds_since(t0), 2.0);
}

// B fixed-length rows of no token: B is bounded only by N * Hv, so neither validation nor a backend may size
// anything by it (a per-row length table of 2^31 rows was 16 GiB).
TEST(Hardening, EmptyRowsOfHugeBatchReturnAtOnce) {
  const int64_t B = 2147483647;
  EmptyBuf q({B, 0, 1, 1}), k({B, 0, 1, 1}), v({B, 0, 1, 1}), o({B, 0, 1, 1});
  flashgdn_recurrent_params p;
  flashgdn_recurrent_params_init(&p);
  p.q = &q.t, p.k = &k.t, p.v = &v.t, p.o = &o.t;
  p.exec.check_indices = 1;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(flashgdn_recurrent(&p, nullptr, 0, nullptr), FLASHGDN_OK) << flashgdn_last_error();
  // chunk_bwd with only the gate-parameter gradient asked for: dA_log = sum over no token = 0, no per-head pass.
  EmptyBuf g({B, 0, 1}), dq({B, 0, 1, 1}), dk({B, 0, 1, 1}), dv({B, 0, 1, 1});
  float A_log = 0.5f, dA_log = 7.f;
  int64_t hv_shape[1] = {1};
  DLTensor A{&A_log, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, hv_shape, nullptr, 0};
  DLTensor dA{&dA_log, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, hv_shape, nullptr, 0};
  flashgdn_chunk_bwd_params b;
  flashgdn_chunk_bwd_params_init(&b);
  b.q = &q.t, b.k = &k.t, b.v = &v.t, b.g = &g.t, b.A_log = &A, b.d_o = &o.t, b.dq = &dq.t, b.dk = &dk.t;
  b.dv = &dv.t, b.dA_log = &dA;
  b.gate.use_gate_in_kernel = 1;
  EXPECT_EQ(flashgdn_chunk_bwd(&b, nullptr, 0, nullptr), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(dA_log, 0.f);
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_TRUE(q.untouched() && k.untouched() && v.untouched() && o.untouched() && g.untouched());
}

// ---- 2. unbounded memory on all-empty tensors -------------------------------------------------------------------

TEST(Hardening, HugeStatePerHeadRejected) {
  EmptySeq s(1, 32768, 1, 32768);  // K * V = 2^30: a 4 GiB fp32 state per head
  expect_invalid(s.fwd(), {"chunk_fwd: v:", "K * V elements of one head's state", "16777216"});
  expect_invalid(s.rec(), {"recurrent: v:", "K * V"});
  expect_invalid(s.bwd(), {"chunk_bwd: v:", "K * V"});
  // K = 2^31 - 1 made std::vector throw length_error: an internal error instead of an invalid argument.
  EmptySeq big(1, 2147483647, 1, 1);
  expect_invalid(big.rec(), {"recurrent: v:", "K * V"});
}

// The largest state accepted (2^24 elements) costs nothing on an empty problem: no state is allocated.
TEST(Hardening, LargestStateOnEmptyProblemAllocatesNothing) {
  EmptySeq s(1, 4096, 1, 4096);
  EXPECT_EQ(s.fwd(), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(s.rec(), FLASHGDN_OK) << flashgdn_last_error();
  EXPECT_EQ(s.bwd(), FLASHGDN_OK) << flashgdn_last_error();
}

// ---- 3. signed overflow in accepted calls -----------------------------------------------------------------------

TEST(Hardening, HeadDimProductPastInt64Rejected) {
  EmptySeq s(1, int64_t(1) << 32, 1, int64_t(1) << 32);  // K * V = 2^64
  expect_invalid(s.fwd(), {"chunk_fwd: v:", "K * V", "(past 2^63 - 1)"});
  expect_invalid(s.rec(), {"recurrent: v:", "K * V", "(past 2^63 - 1)"});
  expect_invalid(s.bwd(), {"chunk_bwd: v:", "(past 2^63 - 1)"});
}

TEST(Hardening, SequenceHeadProductPastInt64Rejected) {
  EmptySeq s(1, 1, int64_t(1) << 62, 1);
  std::vector<int32_t> zeros(5, 0);  // N = 4 empty rows: N * Hv = 2^64
  int64_t cu_shape[1] = {5};
  DLTensor cu{zeros.data(), {kDLCPU, 0}, 1, {kDLInt, 32, 1}, cu_shape, nullptr, 0};
  expect_invalid(s.fwd(&cu), {"chunk_fwd: cu_seqlens:", "N * Hv", "(past 2^63 - 1)"});
  expect_invalid(s.rec(&cu), {"recurrent: cu_seqlens:", "N * Hv"});
  expect_invalid(s.bwd(&cu), {"chunk_bwd: cu_seqlens:", "N * Hv"});
}

// mixer_decode's channel count C = 2 Hqk K + Hv V on an empty batch: z = [0, 1, 1, 2^63 - 1] made Hv V + 16
// overflow (a fuzzer input).
TEST(Hardening, MixerChannelCountPastInt64Rejected) {
  EmptyBuf x({0, 1, 16}), z({0, 1, 1, kI64Max});
  flashgdn_mixer_decode_params p;
  flashgdn_mixer_decode_params_init(&p);
  p.x = &x.t, p.z = &z.t, p.num_k_heads = 1, p.head_k_dim = 8;
  expect_invalid(flashgdn_mixer_decode(&p, nullptr),
                 {"mixer_decode: x: expected C = 2 Hqk K + Hv V", "(past 2^63 - 1)"});
  EmptyBuf z2({0, 1, int64_t(1) << 32, int64_t(1) << 32});  // Hv V = 2^64: its compact strides already overflow
  p.z = &z2.t;
  expect_invalid(flashgdn_mixer_decode(&p, nullptr), {"mixer_decode: z:", "2^63 - 1"});
  EXPECT_TRUE(x.untouched() && z.untouched() && z2.untouched());
}

TEST(Hardening, CommitOnEmptyPoolWithHugeHeadsRejected) {
  CommitCase c;
  EmptyBuf pool({0, int64_t(1) << 40, 8, 8}), inter({0, 2, int64_t(1) << 40, 8, 8});
  c.p.state_pool = &pool.t;
  c.p.intermediate_states = &inter.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: state_indices:", "N * Hv (row, value head) pairs");
  EXPECT_TRUE(pool.untouched() && inter.untouched());
}

// ---- 4. signed overflow before validation -----------------------------------------------------------------------

TEST(Hardening, CompactStridesPastInt64Rejected) {
  FwdCase c;
  int64_t shape[4] = {1, 2, kI64Max, 1};  // compact stride of dim 1 = INT64_MAX, of dim 0 = 2 INT64_MAX
  c.q.t.shape = shape;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "compact strides fit in int64", "dims 1.. of");
}

TEST(Hardening, StrideOfInt64MaxRejected) {
  // A [2] tensor with stride INT64_MAX spans INT64_MAX elements: its extent + 1 element overflowed.
  GatingCase c;
  DLBuf& a = c.b.add("a2", DType::f32, {1, 2});
  DLBuf& A = c.b.add("A_log2", DType::f32, {2});
  DLBuf& g = c.b.add("g2", DType::f32, {1, 2});
  A.set_strides({kI64Max});
  c.p.a = &a.t;
  c.p.A_log = &A.t;
  c.p.g = &g.t;
  c.p.dt_bias = nullptr;
  c.p.b = nullptr;
  c.p.beta = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "gating: A_log:", "byte extent fits in int64");
}

// ---- 5. misaligned pointers -------------------------------------------------------------------------------------

TEST(Hardening, MisalignedFloatPointerRejected) {
  FwdCase c;
  DLBuf& q2 = c.b.add("q_padded", DType::f32, {FwdCase::B, FwdCase::T, FwdCase::Hqk, FwdCase::K}, 1);
  q2.t.byte_offset = 2;  // inside the buffer, but not a multiple of 4
  c.p.q = &q2.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "aligned to 4 bytes (the size of float32)");
  FwdCase c2;
  DLBuf& o2 = c2.b.add("o_padded", DType::f32, {FwdCase::B, FwdCase::T, FwdCase::Hv, FwdCase::V}, 1);
  o2.t.data = o2.mem.data() + 1;
  c2.p.o = &o2.t;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: o:", "aligned to 4 bytes");
}

TEST(Hardening, MisalignedIndexPointerRejected) {
  // Index values are read during validation: the pointer is checked before that.
  RecCase c;
  DLBuf& idx = c.b.add("state_indices_padded", DType::i64, {RecCase::N}, 1);
  idx.set_indices({0, 2, 4, 0});
  idx.t.byte_offset = 4;
  c.p.state_indices = &idx.t;
  c.p.exec.check_indices = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_indices:", "aligned to 8 bytes (the size of int64)");
  FwdCase f;
  DLBuf& cu = f.b.add("cu_seqlens", DType::i32, {2}, 1);
  cu.set_indices({0, 0, 8});
  cu.t.byte_offset = 1;
  f.p.cu_seqlens = &cu.t;
  EXPECT_REJECTED(f.b, f.run(), kInvalid, "chunk_fwd: cu_seqlens:", "aligned to 4 bytes");
}

// ---- 6. out-of-range device types -------------------------------------------------------------------------------

TEST(Hardening, OutOfRangeDeviceTypeRejected) {
  for (int32_t code : {0, 5, 99, -7, std::numeric_limits<int32_t>::max()}) {
    FwdCase c;
    std::memcpy(&c.k.t.device.device_type, &code, sizeof(code));  // as a C caller can set any int
    const std::string shown = "(" + std::to_string(code) + ")";
    EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: k:", "expected a device of kDLCPU", shown.c_str());
  }
}

// ---- 7. wrapping pointers ---------------------------------------------------------------------------------------

TEST(Hardening, WrappingByteOffsetRejected) {
  FwdCase c;
  c.g.t.byte_offset = std::numeric_limits<uint64_t>::max();  // data + byte_offset = data - 1
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: g:", "data + byte_offset inside the address space", "wraps");
  GatingCase gc;
  gc.a.t.byte_offset = uint64_t(0) - uint64_t(reinterpret_cast<uintptr_t>(gc.a.t.data));  // sums to exactly 2^64
  EXPECT_REJECTED(gc.b, gc.run(), kInvalid, "gating: a:", "wraps");
}

TEST(Hardening, ExtentPastAddressSpaceRejected) {
  // data + byte_offset fits but the last element does not: the end of the range wraps.
  FwdCase c;
  uint8_t* top = reinterpret_cast<uint8_t*>(std::numeric_limits<uintptr_t>::max() - 15);  // 16-aligned
  c.beta.t.data = top;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: beta:", "inside the address space", "the end wraps");
}

// ---- dtype names in messages ------------------------------------------------------------------------------------

TEST(Hardening, DtypeErrorsNameTheDtype) {
  struct Case {
    DLDataType dt;
    const char* name;
  };
  for (Case x : {Case{{kDLUInt, 8, 1}, "got uint8"}, Case{{kDLFloat, 32, 4}, "got float32x4"},
                 Case{{kDLComplex, 64, 1}, "got complex64"}, Case{{kDLBfloat, 32, 1}, "got bfloat32"},
                 Case{{kDLInt, 16, 1}, "got int16"}, Case{{200, 8, 1}, "got dlpack_code200_8"}}) {
    FwdCase c;
    c.v.t.dtype = x.dt;
    EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: v:", x.name);
    EXPECT_FALSE(contains(flashgdn_last_error(), "code ")) << flashgdn_last_error();
  }
}

// ---- the C++ helpers on hostile shapes ----------------------------------------------------------------------------

TEST(Hardening, MakeTensorWithTooManyDimsStaysInBounds) {
  float x[4] = {};
  TensorView t = make_tensor(x, DType::f32, {1, 1, 1, 1, 1, 1, 1, 4});  // 8 dims: only 6 are stored
  EXPECT_EQ(t.ndim, 8);
  EXPECT_FALSE(t.is_contiguous());
  TensorView big = make_tensor(x, DType::f32, {kI64Max, 4});
  EXPECT_EQ(big.numel(), -1);
  GatingParams p;
  p.a = t;
  p.A_log = make_tensor(x, DType::f32, {4});
  p.g = make_tensor(x, DType::f32, {4});
  Status st = gating(p);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "gating: a: expected at most 6 dims")) << st.message();
}

}  // namespace
}  // namespace flashgdn::test
