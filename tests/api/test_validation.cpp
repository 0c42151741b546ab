// One test per validation rule (src/api/validate.cpp), fed through the C ABI: the status code, the message names
// the argument and the expectation, and no buffer is written. Plus the Dims that validate() resolves.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "api/internal.hpp"
#include "api_fixture.hpp"

namespace flashgdn::test {
namespace {

constexpr int kInvalid = FLASHGDN_ERROR_INVALID_ARGUMENT;
constexpr int kUnsupported = FLASHGDN_ERROR_UNSUPPORTED;

// ---- the base cases are valid ----------------------------------------------------------------------------------

TEST(Validation, BaseCasesAreAccepted) {
  {
    FwdCase c;
    EXPECT_ACCEPTED(c.run());
  }
  {
    BwdCase c;
    EXPECT_ACCEPTED(c.run());
  }
  {
    GatingCase c;
    EXPECT_ACCEPTED(c.run());
  }
  {
    RecCase c;
    EXPECT_ACCEPTED(c.run());
  }
  {
    RecCase c(2);
    c.verify();
    EXPECT_ACCEPTED(c.run());
  }
  {
    CommitCase c;
    EXPECT_ACCEPTED(c.run());
  }
}

// ---- presence and shapes ---------------------------------------------------------------------------------------

TEST(Validation, RequiredTensorMissing) {
  FwdCase c;
  c.p.q = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "expected a tensor [B, T, Hqk, K]", "absent");
  FwdCase c2;
  c2.p.o = nullptr;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: o:", "expected a tensor [B, T, Hv, V]");
}

TEST(Validation, OptionalTensorsMayBeAbsent) {
  FwdCase c;
  c.p.g = c.p.beta = c.p.initial_state = c.p.final_state = nullptr;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, WrongNdim) {
  FwdCase c;
  c.q.t.ndim = 3;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "expected 4 dims [B, T, Hqk, K]", "got 3 dims");
}

TEST(Validation, DimMismatch) {
  FwdCase c;
  c.k.shape[3] = 4;  // K of k differs from q (buffer is larger than needed: fine)
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: k:", "expected shape [B, T, Hqk, K] = [1, 8, 2, 8]",
                  "got [1, 8, 2, 4]");
  FwdCase c2;
  c2.v.shape[1] = 4;  // T of v differs
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: v:", "[B, T, Hv, V]");
  FwdCase c3;
  c3.o.shape[2] = 2;
  EXPECT_REJECTED(c3.b, c3.run(), kInvalid, "chunk_fwd: o:", "[B, T, Hv, V] = [1, 8, 4, 8]");
}

TEST(Validation, GateAndBetaShape) {
  FwdCase c;
  c.g.shape[2] = 2;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: g:", "expected shape [B, T, Hv] = [1, 8, 4]");
  FwdCase c2;
  c2.beta.t.ndim = 4;
  c2.beta.shape[3] = 1;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: beta:", "expected 3 dims [B, T, Hv]");
}

TEST(Validation, StateShapeKMajor) {
  FwdCase c;
  c.h0.shape[0] = 2;  // N = B = 1
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: initial_state:", "[N, Hv, K, V] (k_major) = [1, 4, 8, 8]");
}

TEST(Validation, StateShapeVMajor) {
  // K != V so that the two layouts differ.
  Bufs b;
  DLBuf& q = b.add("q", DType::f32, {1, 4, 1, 8});
  DLBuf& k = b.add("k", DType::f32, {1, 4, 1, 8});
  DLBuf& v = b.add("v", DType::f32, {1, 4, 1, 16});
  DLBuf& o = b.add("o", DType::f32, {1, 4, 1, 16});
  DLBuf& ht = b.add("final_state", DType::f32, {1, 1, 8, 16});  // k_major shape
  Rng r(1);
  for (DLBuf* x : {&q, &k, &v}) x->fill_normal(r);
  flashgdn_chunk_fwd_params p;
  flashgdn_chunk_fwd_params_init(&p);
  p.q = &q.t;
  p.k = &k.t;
  p.v = &v.t;
  p.o = &o.t;
  p.final_state = &ht.t;
  p.state_layout = FLASHGDN_STATE_V_MAJOR;
  EXPECT_REJECTED(b, flashgdn_chunk_fwd(&p, nullptr, 0, nullptr), kInvalid,
                  "chunk_fwd: final_state:", "[N, Hv, V, K] (v_major) = [1, 1, 16, 8]");
  ht.shape[2] = 16;
  ht.shape[3] = 8;
  EXPECT_ACCEPTED(flashgdn_chunk_fwd(&p, nullptr, 0, nullptr));
}

TEST(Validation, StateCheckpointsShape) {
  FwdCase c;
  // allocated at the right size, then shrunk (a grown view would overlap the next allocation: a flaky overlap
  // error instead of the accepted call)
  DLBuf& ck = c.b.add("state_checkpoints", DType::f32, {1, 2, 4, 8, 8});
  c.p.state_checkpoints = &ck.t;
  c.p.checkpoint_interval = 64;
  ck.shape[4] = 4;  // V wrong
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: state_checkpoints:", "[N, C_max, Hv, K, V] (k_major)");
  ck.shape[4] = 8;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, VarlenRequiresBatchOne) {
  FwdCase c;
  DLBuf& cu = c.b.add("cu_seqlens", DType::i32, {2});
  cu.set_indices({0, 8});
  c.p.cu_seqlens = &cu.t;
  c.p.initial_state = c.p.final_state = nullptr;
  for (DLBuf* x : {&c.q, &c.k, &c.v, &c.o}) {
    x->shape[0] = 2;  // B = 2, T = 4: same element count
    x->shape[1] = 4;
  }
  for (DLBuf* x : {&c.g, &c.beta}) {
    x->shape[0] = 2;
    x->shape[1] = 4;
  }
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: cu_seqlens:", "expected batch B == 1", "got B = 2");
}

TEST(Validation, VarlenStatesIndexedBySequence) {
  FwdCase c;
  DLBuf& cu = c.b.add("cu_seqlens", DType::i64, {4});
  cu.set_indices({0, 3, 3, 8});  // N = 3, one empty sequence
  c.p.cu_seqlens = &cu.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: initial_state:", "[N, Hv, K, V] (k_major) = [3, 4, 8, 8]");
  DLBuf& h0 = c.b.add("h0_n3", DType::f32, {3, 4, 8, 8});
  DLBuf& ht = c.b.add("ht_n3", DType::f32, {3, 4, 8, 8});
  c.p.initial_state = &h0.t;
  c.p.final_state = &ht.t;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, HeadsMustDivide) {
  FwdCase c;
  for (DLBuf* x : {&c.v, &c.o}) x->shape[2] = 3;  // Hv = 3, Hqk = 2
  c.p.g = c.p.beta = c.p.initial_state = c.p.final_state = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: v:", "expected Hv (v.shape[2]) a positive multiple of Hqk = 2",
                  "got Hv = 3");
}

TEST(Validation, HeadDimsPositive) {
  FwdCase c;
  c.q.shape[3] = c.k.shape[3] = 0;
  c.p.initial_state = c.p.final_state = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "expected head dim K > 0", "got 0");
  FwdCase c2;
  c2.v.shape[3] = c2.o.shape[3] = 0;
  c2.p.initial_state = c2.p.final_state = nullptr;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: v:", "expected head dim V > 0");
}

TEST(Validation, NegativeSize) {
  FwdCase c;
  c.g.shape[2] = -4;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: g:", "expected non-negative sizes");
}

// ---- dtypes ----------------------------------------------------------------------------------------------------

TEST(Validation, QkvDtypeSet) {
  FwdCase c;
  c.q.t.dtype = dl_dtype(DType::i32);
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "expected dtype float32, bfloat16, float16 or float64",
                  "got int32");
}

TEST(Validation, QkvSameDtype) {
  FwdCase c;
  c.k.t.dtype = dl_dtype(DType::bf16);
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: k:", "expected the dtype of q (float32)", "got bfloat16");
  FwdCase c2;
  c2.v.t.dtype = dl_dtype(DType::f16);
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: v:", "expected the dtype of q");
}

TEST(Validation, OutputDtypeOfV) {
  FwdCase c;
  c.o.t.dtype = dl_dtype(DType::bf16);
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: o:", "expected the dtype of v (float32)", "got bfloat16");
}

TEST(Validation, GateParamDtypes) {
  FwdCase c;
  c.g.t.dtype = dl_dtype(DType::i64);
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: g:", "expected dtype float32, bfloat16", "got int64");
  FwdCase c2;
  c2.beta.t.dtype = dl_dtype(DType::i32);
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: beta:", "got int32");
  FwdCase c3;
  DLBuf& A = c3.b.add("A_log", DType::i32, {4});
  c3.p.A_log = &A.t;
  EXPECT_REJECTED(c3.b, c3.run(), kInvalid, "chunk_fwd: A_log:", "expected dtype", "got int32");
}

TEST(Validation, StateDtypeF32) {
  FwdCase c;
  c.h0.t.dtype = dl_dtype(DType::bf16);
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: initial_state:", "expected dtype float32 or float64",
                  "got bfloat16");
  FwdCase c2;
  c2.ht.t.dtype = dl_dtype(DType::f16);
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: final_state:", "expected dtype float32 or float64");
}

TEST(Validation, IndexDtype) {
  FwdCase c;
  DLBuf& cu = c.b.add("cu_seqlens", DType::f32, {2});
  cu.set_indices({0, 8});
  c.p.cu_seqlens = &cu.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: cu_seqlens:", "expected dtype int32 or int64", "got float32");
}

TEST(Validation, Float64AcceptedOnCpu) {
  FwdCase c(DType::f64);
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, HalfPrecisionAccepted) {
  FwdCase c(DType::bf16);
  EXPECT_ACCEPTED(c.run());
  FwdCase c2(DType::f16);
  EXPECT_ACCEPTED(c2.run());
}

// ---- devices ---------------------------------------------------------------------------------------------------

TEST(Validation, MixedDevicesRejected) {
  FwdCase c;
  c.k.t.device = {kDLCUDA, 0};
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: k:", "expected the device of q (cpu)", "got cuda:0");
}

TEST(Validation, MixedCudaDeviceIdsRejected) {
  FwdCase c;
  for (DLBuf& x : c.b.all) x.t.device = {kDLCUDA, 0};
  c.ht.t.device = {kDLCUDA, 1};
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: final_state:", "expected the device of q (cuda:0)", "got cuda:1");
}

#if !FLASHGDN_WITH_CUDA
TEST(Validation, CudaTensorWithoutCudaBuild) {
  FwdCase c;
  for (DLBuf& x : c.b.all) x.t.device = {kDLCUDA, 0};
  EXPECT_REJECTED(c.b, c.run(), kUnsupported, "chunk_fwd: q:", "no CUDA support", "got cuda:0");
}
#else
// A CUDA build: fake device tensors (host addresses, never dereferenced: each case fails validation first).
TEST(Validation, CudaHeadDimsRestricted) {
  FwdCase c;  // K = V = 8
  for (DLBuf& x : c.b.all) x.t.device = {kDLCUDA, 0};
  EXPECT_REJECTED(c.b, c.run(), kUnsupported, "chunk_fwd: q:", "K in {64, 128} on CUDA", "got K = 8");
}

TEST(Validation, CudaFloat64Rejected) {
  FwdCase c(DType::f64);
  for (DLBuf& x : c.b.all) x.t.device = {kDLCUDA, 0};
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "expected dtype float32, bfloat16 or float16 (on CUDA)");
}

// q, k, v, o [1, 4, 1, 64] bf16 on "CUDA" with one layout defect each.
struct CudaAlignCase {
  Bufs b;
  DLBuf &q, &k, &v, &o;
  flashgdn_recurrent_params p;
  CudaAlignCase()
      : q(b.add("q", DType::bf16, {1, 4, 1, 64}, 64)),
        k(b.add("k", DType::bf16, {1, 4, 1, 64}, 64)),
        v(b.add("v", DType::bf16, {1, 4, 1, 64}, 64)),
        o(b.add("o", DType::bf16, {1, 4, 1, 64}, 64)) {
    for (DLBuf& x : b.all) x.t.device = {kDLCUDA, 0};
    flashgdn_recurrent_params_init(&p);
    p.q = &q.t;
    p.k = &k.t;
    p.v = &v.t;
    p.o = &o.t;
  }
  int run() { return flashgdn_recurrent(&p, nullptr, 0, nullptr); }
};

TEST(Validation, CudaLastDimContiguous) {
  CudaAlignCase c;
  c.k.set_strides({512, 128, 128, 2});  // every other element of a wider buffer
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: k:", "contiguous last dim on CUDA");
}

TEST(Validation, CudaPointerAligned) {
  CudaAlignCase c;
  c.v.t.byte_offset = 2;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: v:", "16-byte aligned data pointer on CUDA");
}

TEST(Validation, CudaStridesMultipleOf16Bytes) {
  CudaAlignCase c;
  c.q.set_strides({4 * 68, 68, 68, 1});  // 136-byte token stride
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: q:", "multiple of 16 bytes on CUDA");
}
#endif

// ---- strides and aliasing --------------------------------------------------------------------------------------

TEST(Validation, NegativeStrideRejected) {
  FwdCase c;
  c.q.set_compact_strides();
  c.q.strides[3] = -1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "expected non-negative strides", "[128, 16, 8, -1]");
}

TEST(Validation, ZeroStrideInputRejected) {
  FwdCase c;
  c.g.set_strides({32, 4, 0});  // a broadcast g
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: g:", "no zero stride on a dim of size > 1", "[32, 4, 0]");
}

TEST(Validation, ZeroStrideOutputRejected) {
  FwdCase c;
  c.o.set_strides({256, 0, 8, 1});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: o:", "no zero stride");
}

TEST(Validation, ZeroStrideOnSizeOneDimAccepted) {
  FwdCase c;
  c.q.set_compact_strides();
  c.q.strides[0] = 0;  // B = 1: never stepped over
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, SelfOverlappingOutputRejected) {
  FwdCase c;
  c.o.set_strides({256, 32, 4, 1});  // heads 4 apart but V = 8 wide: head h and h + 1 share elements
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: o:", "distinct indices to distinct addresses", "[256, 32, 4, 1]");
}

TEST(Validation, SelfOverlappingInputAccepted) {
  // Inputs may repeat memory (e.g. the same key for two heads); only outputs must not alias.
  FwdCase c;
  c.k.set_strides({128, 16, 4, 1});  // the two heads share half their elements
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, OutputOverlapsInputRejected) {
  FwdCase c;
  c.o.t.data = c.v.t.data;  // o written over v
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: o:", "expected no memory overlap with v");
}

TEST(Validation, OutputOverlapsOutputRejected) {
  FwdCase c;
  DLBuf& big = c.b.add("big", DType::f32, {1024});
  c.o.t.data = big.mem.data();
  c.ht.t.data = big.mem.data() + 128;  // inside o's 256 floats
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: o:", "expected no memory overlap with final_state");
}

TEST(Validation, InputsMayShareMemory) {
  FwdCase c;
  c.k.t.data = c.q.t.data;  // q and k from one buffer
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, NullDataRejected) {
  FwdCase c;
  c.v.t.data = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: v:", "expected a non-null data pointer");
}

TEST(Validation, Int32ElementLimit) {
  FwdCase c;
  c.q.shape[1] = int64_t(1) << 31;  // 2^31 * 2 * 8 elements: never read, validation stops first
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "at most 2^31 - 1 elements");
}

TEST(Validation, StrideExtentOverflow) {
  FwdCase c;
  c.q.set_strides({int64_t(1) << 62, 16, 8, 1});
  c.q.shape[0] = 4;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: q:", "byte extent fits in int64");
}

// ---- scalars ---------------------------------------------------------------------------------------------------

TEST(Validation, ScaleFinite) {
  FwdCase c;
  c.p.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: scale:", "expected a finite value");
  c.p.scale = std::numeric_limits<float>::infinity();
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: scale:", "got inf");
}

TEST(Validation, ChunkSize) {
  FwdCase c;
  c.p.chunk_size = 48;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: chunk_size:", "expected 16, 32 or 64", "got 48");
  for (int cs : {16, 32, 64}) {
    c.p.chunk_size = cs;
    EXPECT_ACCEPTED(c.run());
  }
}

TEST(Validation, CheckpointInterval) {
  FwdCase c;
  DLBuf& ck = c.b.add("state_checkpoints", DType::f32, {1, 2, 4, 8, 8});
  c.p.state_checkpoints = &ck.t;
  c.p.checkpoint_interval = 48;
  EXPECT_REJECTED(c.b, c.run(), kInvalid,
                  "chunk_fwd: checkpoint_interval:", "expected a positive multiple of chunk_size = 64", "got 48");
  c.p.checkpoint_interval = 0;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: checkpoint_interval:", "got 0");
  c.p.chunk_size = 16;
  c.p.checkpoint_interval = 48;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, NegEigvalNeedsBetaSigmoid) {
  FwdCase c;
  c.p.gate.allow_neg_eigval = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid,
                  "chunk_fwd: gate.allow_neg_eigval:", "expected gate.use_beta_sigmoid_in_kernel");
  c.p.gate.use_beta_sigmoid_in_kernel = 1;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, GateInKernelNeedsALog) {
  FwdCase c;
  c.p.gate.use_gate_in_kernel = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: A_log:", "expected a tensor [Hv]", "use_gate_in_kernel");
  DLBuf& A = c.b.add("A_log", DType::f32, {4});
  c.p.A_log = &A.t;
  EXPECT_ACCEPTED(c.run());  // dt_bias optional
}

TEST(Validation, GateParamShapes) {
  FwdCase c;
  DLBuf& A = c.b.add("A_log", DType::f32, {5});
  c.p.A_log = &A.t;
  c.p.gate.use_gate_in_kernel = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: A_log:", "expected shape [Hv] = [4]", "got [5]");
  A.shape[0] = 4;
  DLBuf& dt = c.b.add("dt_bias", DType::f32, {2, 2});
  c.p.dt_bias = &dt.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: dt_bias:", "expected 1 dims [Hv]");
}

TEST(Validation, RawGateNeedsInput) {
  FwdCase c;
  DLBuf& A = c.b.add("A_log", DType::f32, {4});
  c.p.A_log = &A.t;
  c.p.gate.use_gate_in_kernel = 1;
  c.p.g = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: g:", "holding raw a");
  FwdCase c2;
  c2.p.gate.use_beta_sigmoid_in_kernel = 1;
  c2.p.beta = nullptr;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: beta:", "holding raw b");
}

TEST(Validation, SoftplusBetaPositive) {
  FwdCase c;
  c.p.gate.softplus_beta = 0.f;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: gate.softplus_beta:", "expected a finite value > 0");
  GatingCase g;
  g.p.gate.softplus_beta = -1.f;
  EXPECT_REJECTED(g.b, g.run(), kInvalid, "gating: gate.softplus_beta:", "got -1");
}

TEST(Validation, EnumsInRange) {
  FwdCase c;
  c.p.state_layout = 2;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: state_layout:", "expected k_major (0) or v_major (1)", "got 2");
  FwdCase c2;
  c2.p.exec.cpu_algo = 9;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_fwd: exec.cpu_algo:", "got 9");
  FwdCase c3;
  c3.p.exec.cpu_threads = -1;
  EXPECT_REJECTED(c3.b, c3.run(), kInvalid, "chunk_fwd: exec.cpu_threads:", "expected >= 0");
}

// ---- cu_seqlens values -----------------------------------------------------------------------------------------

struct VarlenCase : FwdCase {
  DLBuf& cu;
  VarlenCase() : cu(b.add("cu_seqlens", DType::i32, {3})) {
    p.cu_seqlens = &cu.t;
    p.initial_state = p.final_state = nullptr;
  }
};

TEST(Validation, CuSeqlensStartsAtZero) {
  VarlenCase c;
  c.cu.set_indices({1, 4, 8});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: cu_seqlens:", "expected cu_seqlens[0] == 0", "got 1");
}

TEST(Validation, CuSeqlensNonDecreasing) {
  VarlenCase c;
  c.cu.set_indices({0, 5, 3});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: cu_seqlens:", "non-decreasing", "cu_seqlens[1] = 5");
}

TEST(Validation, CuSeqlensWithinTokens) {
  VarlenCase c;
  c.cu.set_indices({0, 4, 9});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: cu_seqlens:", "expected cu_seqlens[N] <= T = 8", "got 9");
}

TEST(Validation, CuSeqlensEmptySequencesAndShortTotalAccepted) {
  VarlenCase c;
  c.cu.set_indices({0, 0, 6});  // length-0 first sequence, cu[N] < T
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, CuSeqlensNeedsOneEntry) {
  VarlenCase c;
  c.cu.shape[0] = 0;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_fwd: cu_seqlens:", "expected at least 1 entry [N + 1]");
}

// ---- chunk_bwd -------------------------------------------------------------------------------------------------

TEST(Validation, BwdRequiresGradOutput) {
  BwdCase c;
  c.p.d_o = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_bwd: d_o:", "expected a tensor [B, T, Hv, V]");
}

TEST(Validation, BwdGradientShapes) {
  BwdCase c;
  c.dq.shape[2] = 4;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_bwd: dq:", "[B, T, Hqk, K] = [1, 8, 2, 8]");
  BwdCase c2;
  c2.dg.shape[2] = 2;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "chunk_bwd: dg:", "[B, T, Hv] = [1, 8, 4]");
}

TEST(Validation, BwdStateGradientDtype) {
  BwdCase c;
  DLBuf& dh0 = c.b.add("dh0", DType::bf16, {1, 4, 8, 8});
  c.p.dh0 = &dh0.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_bwd: dh0:", "expected dtype float32 or float64", "got bfloat16");
}

TEST(Validation, BwdGateGradientsNeedGateInKernel) {
  BwdCase c;
  DLBuf& dA = c.b.add("dA_log", DType::f32, {4});
  c.p.dA_log = &dA.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_bwd: dA_log:", "expected absent without gate.use_gate_in_kernel");
}

TEST(Validation, BwdGradientsMayNotAlias) {
  BwdCase c;
  c.dk.t.data = c.dq.t.data;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "chunk_bwd: dq:", "expected no memory overlap with dk");
}

// ---- gating ----------------------------------------------------------------------------------------------------

TEST(Validation, GatingNeedsOneDim) {
  GatingCase c;
  c.a.t.ndim = 0;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "gating: a:", "expected at least 1 dim [..., Hv]");
}

TEST(Validation, GatingShapesFollowA) {
  GatingCase c;
  c.bb.shape[0] = 2;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "gating: b:", "expected the shape of a [..., Hv] = [3, 4]", "got [2, 4]");
  GatingCase c2;
  c2.g.t.ndim = 1;
  c2.g.shape[0] = 4;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "gating: g:", "expected the shape of a");
  GatingCase c3;
  c3.A_log.shape[0] = 3;
  EXPECT_REJECTED(c3.b, c3.run(), kInvalid, "gating: A_log:", "expected shape [Hv] = [4]");
}

TEST(Validation, GatingOutputF32) {
  GatingCase c;
  c.g.t.dtype = dl_dtype(DType::bf16);
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "gating: g:", "expected dtype float32 or float64", "got bfloat16");
}

TEST(Validation, GatingBetaIffB) {
  GatingCase c;
  c.p.b = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "gating: beta:", "expected absent since b is absent");
  GatingCase c2;
  c2.p.beta = nullptr;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "gating: beta:", "since b is given");
  GatingCase c3;
  c3.p.b = c3.p.beta = nullptr;
  c3.p.dt_bias = nullptr;
  EXPECT_ACCEPTED(c3.run());
}

TEST(Validation, GatingRequiresALog) {
  GatingCase c;
  c.p.A_log = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "gating: A_log:", "expected a tensor [Hv]");
}

// ---- recurrent -------------------------------------------------------------------------------------------------

TEST(Validation, PoolExcludesInitialAndFinalState) {
  RecCase c;
  DLBuf& h0 = c.b.add("initial_state", DType::f32, {3, 4, 8, 8});
  c.p.initial_state = &h0.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: initial_state:", "expected absent when state_pool is given");
  RecCase c2;
  DLBuf& ht = c2.b.add("final_state", DType::f32, {3, 4, 8, 8});
  c2.p.final_state = &ht.t;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "recurrent: final_state:", "expected absent when state_pool is given");
}

TEST(Validation, NoPoolExcludesSlotTensors) {
  RecCase c;
  c.p.state_pool = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_indices:", "expected absent without state_pool");
  RecCase c2(2);
  c2.verify();
  c2.p.state_pool = nullptr;
  c2.p.state_indices = nullptr;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "recurrent: num_accepted_tokens:", "expected absent without state_pool");
}

TEST(Validation, FusedRecurrentContractAccepted) {
  RecCase c;
  c.p.state_pool = c.p.state_indices = nullptr;
  DLBuf& h0 = c.b.add("initial_state", DType::f32, {3, 4, 8, 8});
  DLBuf& ht = c.b.add("final_state", DType::f32, {3, 4, 8, 8});
  c.p.initial_state = &h0.t;
  c.p.final_state = &ht.t;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, StateIndicesShape) {
  RecCase c;
  c.idx.t.ndim = 3;
  c.idx.shape[1] = c.idx.shape[2] = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_indices:", "expected 1 dim [N] or 2 dims [N, T_max]");
  RecCase c2;
  c2.idx.shape[0] = 2;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "recurrent: state_indices:", "with N = 3 rows");
  RecCase c3;
  c3.idx.t.dtype = dl_dtype(DType::f32);
  EXPECT_REJECTED(c3.b, c3.run(), kInvalid, "recurrent: state_indices:", "expected dtype int32 or int64");
}

TEST(Validation, PoolShapeAndDtype) {
  RecCase c;
  c.pool.shape[1] = 2;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_pool:", "[slots, Hv, K, V] (k_major) = [5, 4, 8, 8]");
  RecCase c2;
  c2.pool.t.dtype = dl_dtype(DType::i32);
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "recurrent: state_pool:", "expected dtype float32, bfloat16, float16");
}

TEST(Validation, PoolWithoutIndicesNeedsNSlots) {
  RecCase c;
  c.p.state_indices = nullptr;
  c.pool.shape[0] = 2;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_pool:", "expected at least N = 3 slots");
}

TEST(Validation, NumAcceptedNeeds2DIndices) {
  RecCase c;
  DLBuf& acc = c.b.add("num_accepted_tokens", DType::i32, {3});
  acc.set_indices({1, 1, 1});
  c.p.num_accepted_tokens = &acc.t;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: num_accepted_tokens:", "only with 2-D state_indices");
}

TEST(Validation, SlotTableCoversTokens) {
  RecCase c(2);
  c.verify();
  c.b.all[8].shape[1] = 1;  // state_indices_2d [3, 1] < T = 2
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_indices:", "expected T_max >= T = 2");
}

TEST(Validation, IntermediateStatesShape) {
  RecCase c(2);
  c.verify();
  c.inter->shape[1] = 1;  // T_buf < T
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: intermediate_states:", "expected T_buf >= T = 2");
  RecCase c2(2);
  c2.verify();
  c2.inter->shape[2] = 3;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "recurrent: intermediate_states:", "[N_buf, T_buf, Hv, K, V] (k_major)");
  RecCase c3(2);
  c3.verify();
  c3.inter_idx->shape[0] = 2;
  EXPECT_REJECTED(c3.b, c3.run(), kInvalid, "recurrent: intermediate_indices:", "expected shape [N] = [3]");
}

TEST(Validation, IntermediateIndicesNeedBuffer) {
  RecCase c(2);
  c.verify();
  c.p.intermediate_states = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: intermediate_indices:", "without intermediate_states");
}

TEST(Validation, IntermediateStatesMayNotOverlapPool) {
  RecCase c(2);
  c.verify();
  c.inter->t.data = c.pool.t.data;
  // The buffer is larger than the pool, so it may also reach whatever the heap put after the pool: the first
  // overlap found is reported, which need not be the pool's.
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: ", "expected no memory overlap");
}

TEST(Validation, PoolMayNotOverlapInputs) {
  RecCase c;
  c.pool.t.data = c.q.t.data;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_pool:", "no memory overlap with q");
}

TEST(Validation, VarlenRowLongerThanSlotTable) {
  // Varlen verify: 1 x 4 tokens in rows of {1, 3}; T_max = 2.
  Bufs b;
  DLBuf& q = b.add("q", DType::f32, {1, 4, 1, 8});
  DLBuf& k = b.add("k", DType::f32, {1, 4, 1, 8});
  DLBuf& v = b.add("v", DType::f32, {1, 4, 1, 8});
  DLBuf& o = b.add("o", DType::f32, {1, 4, 1, 8});
  DLBuf& pool = b.add("state_pool", DType::f32, {4, 1, 8, 8});
  DLBuf& idx = b.add("state_indices", DType::i32, {2, 2});
  DLBuf& cu = b.add("cu_seqlens", DType::i32, {3});
  idx.set_indices({0, 1, 2, 3});
  cu.set_indices({0, 1, 4});
  flashgdn_recurrent_params p;
  flashgdn_recurrent_params_init(&p);
  p.q = &q.t;
  p.k = &k.t;
  p.v = &v.t;
  p.o = &o.t;
  p.state_pool = &pool.t;
  p.state_indices = &idx.t;
  p.cu_seqlens = &cu.t;
  EXPECT_REJECTED(b, flashgdn_recurrent(&p, nullptr, 0, nullptr), kInvalid,
                  "recurrent: cu_seqlens:", "expected rows of at most T_max = 2", "got 3 tokens in row 1");
  cu.set_indices({0, 2, 4});
  EXPECT_ACCEPTED(flashgdn_recurrent(&p, nullptr, 0, nullptr));
}

// Index values: legal at run time (they mark invalid rows) unless exec.check_indices.
TEST(Validation, SlotOutOfRangeOnlyWithCheckIndices) {
  RecCase c;
  c.idx.set_indices({0, 7, 4});
  EXPECT_ACCEPTED(c.run());
  c.o.fill_sentinel();
  c.p.exec.check_indices = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_indices:", "expected slots < state_pool.shape[0] = 5",
                  "got state_indices[1] = 7");
}

TEST(Validation, SentinelSlotsAcceptedWithCheckIndices) {
  RecCase c;
  c.idx.set_indices({-1, 0, 4});
  c.p.exec.check_indices = 1;
  EXPECT_ACCEPTED(c.run());
  c.p.null_slot_is_invalid = 1;
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, DuplicateStartSlotsWithCheckIndices) {
  RecCase c;
  c.idx.set_indices({2, 2, 4});
  c.p.exec.check_indices = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: state_indices:", "expected distinct valid start slots",
                  "slot 2 for rows 0 and 1");
  c.idx.set_indices({-1, -1, 4});  // duplicate sentinels are fine
  EXPECT_ACCEPTED(c.run());
}

TEST(Validation, NumAcceptedRangeWithCheckIndices) {
  RecCase c(2);
  c.verify();
  c.acc->set_indices({1, 0, 2});
  EXPECT_ACCEPTED(c.run());
  c.o.fill_sentinel();
  c.inter->fill_sentinel();
  c.p.exec.check_indices = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: num_accepted_tokens:", "expected values in [1, T_max = 2]",
                  "num_accepted_tokens[1] = 0");
  c.acc->set_indices({1, 1, 3});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent: num_accepted_tokens:", "num_accepted_tokens[2] = 3");
}

TEST(Validation, IntermediateIndexRangeWithCheckIndices) {
  RecCase c(2);
  c.verify();
  c.inter_idx->set_indices({0, 3, 1});
  c.p.exec.check_indices = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid,
                  "recurrent: intermediate_indices:", "expected values < intermediate_states.shape[0] = 3",
                  "intermediate_indices[1] = 3");
  c.inter_idx->set_indices({0, -1, 1});  // negative: skip the row's intermediate writes
  EXPECT_ACCEPTED(c.run());
}

// ---- recurrent_commit ------------------------------------------------------------------------------------------

TEST(Validation, CommitIndicesOneDim) {
  CommitCase c;
  c.idx.t.ndim = 2;
  c.idx.shape[1] = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: state_indices:", "expected 1 dims [N]");
}

TEST(Validation, CommitRequiresCounts) {
  CommitCase c;
  c.p.num_accepted_tokens = nullptr;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: num_accepted_tokens:", "expected a tensor [N]");
  CommitCase c2;
  c2.acc.shape[0] = 2;
  EXPECT_REJECTED(c2.b, c2.run(), kInvalid, "recurrent_commit: num_accepted_tokens:", "[N] = [3]");
}

TEST(Validation, CommitBufferMatchesPool) {
  CommitCase c;
  c.inter.shape[2] = 2;  // Hv
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: intermediate_states:", "[N_buf, T_buf,");
}

TEST(Validation, CommitBufferMayNotOverlapPool) {
  CommitCase c;
  c.inter.t.data = c.pool.t.data;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: state_pool:", "overlap with intermediate_states");
}

TEST(Validation, CommitIndexValuesWithCheckIndices) {
  CommitCase c;
  c.idx.set_indices({1, 5, -1});
  EXPECT_ACCEPTED(c.run());
  c.p.exec.check_indices = 1;
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: state_indices:", "state_indices[1] = 5");
  c.idx.set_indices({1, 3, -1});
  c.acc.set_indices({1, 3, 1});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: num_accepted_tokens:", "expected values <= T_buf = 2");
  c.acc.set_indices({1, 0, -1});  // a <= 0 means skip (SGLang)
  EXPECT_ACCEPTED(c.run());
  c.idx.set_indices({3, 3, -1});
  c.acc.set_indices({1, 2, 1});
  EXPECT_REJECTED(c.b, c.run(), kInvalid, "recurrent_commit: state_indices:", "expected distinct valid slots");
}

// ---- Dims resolved by validate() -------------------------------------------------------------------------------

TEST(ValidationDims, ChunkFwd) {
  FwdCase c;
  DLBuf& ck = c.b.add("state_checkpoints", DType::f32, {1, 3, 4, 8, 8});
  ChunkFwdParams p;
  p.q = c.q.view();
  p.k = c.k.view();
  p.v = c.v.view();
  p.o = c.o.view();
  p.state_checkpoints = ck.view();
  p.checkpoint_interval = 64;
  ChunkDims d;
  ASSERT_TRUE(validate(p, &d).ok());
  EXPECT_EQ(d.B, 1);
  EXPECT_EQ(d.T, 8);
  EXPECT_EQ(d.N, 1);
  EXPECT_EQ(d.Hqk, 2);
  EXPECT_EQ(d.Hv, 4);
  EXPECT_EQ(d.K, 8);
  EXPECT_EQ(d.V, 8);
  EXPECT_FALSE(d.varlen);
  EXPECT_EQ(d.group(), 2);
  EXPECT_EQ(d.num_checkpoints, 3);
  EXPECT_FLOAT_EQ(d.scale, float(1.0 / std::sqrt(8.0)));  // 0 -> K^-1/2
  p.scale = 0.25f;
  ASSERT_TRUE(validate(p, &d).ok());
  EXPECT_EQ(d.scale, 0.25f);
}

TEST(ValidationDims, Varlen) {
  FwdCase c;
  DLBuf& cu = c.b.add("cu", DType::i64, {5});
  cu.set_indices({0, 2, 2, 5, 8});
  ChunkFwdParams p;
  p.q = c.q.view();
  p.k = c.k.view();
  p.v = c.v.view();
  p.o = c.o.view();
  p.cu_seqlens = cu.view();
  ChunkDims d;
  ASSERT_TRUE(validate(p, &d).ok());
  EXPECT_TRUE(d.varlen);
  EXPECT_EQ(d.N, 4);
  EXPECT_EQ(d.B, 1);
  EXPECT_EQ(d.T, 8);
}

TEST(ValidationDims, Recurrent) {
  RecCase c(2);
  c.verify();
  RecurrentParams p;
  p.q = c.q.view();
  p.k = c.k.view();
  p.v = c.v.view();
  p.o = c.o.view();
  p.state_pool = c.pool.view();
  p.state_indices = c.b.all[8].view();
  p.num_accepted_tokens = c.acc->view();
  p.intermediate_states = c.inter->view();
  p.intermediate_indices = c.inter_idx->view();
  RecurrentDims d;
  Status st = validate(p, &d);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(d.N, 3);
  EXPECT_EQ(d.T, 2);
  EXPECT_EQ(d.slots, 5);
  EXPECT_EQ(d.T_max, 2);
  EXPECT_EQ(d.n_buf, 3);
  EXPECT_EQ(d.T_buf, 2);
}

TEST(ValidationDims, GatingAndCommit) {
  GatingCase g;
  GatingParams gp;
  gp.A_log = g.A_log.view();
  gp.a = g.a.view();
  gp.g = g.g.view();
  GatingDims gd;
  ASSERT_TRUE(validate(gp, &gd).ok());
  EXPECT_EQ(gd.rows, 3);
  EXPECT_EQ(gd.Hv, 4);

  CommitCase c;
  RecurrentCommitParams cp;
  cp.state_pool = c.pool.view();
  cp.state_indices = c.idx.view();
  cp.intermediate_states = c.inter.view();
  cp.num_accepted_tokens = c.acc.view();
  CommitDims cd;
  ASSERT_TRUE(validate(cp, &cd).ok());
  EXPECT_EQ(cd.N, 3);
  EXPECT_EQ(cd.slots, 5);
  EXPECT_EQ(cd.n_buf, 3);
  EXPECT_EQ(cd.T_buf, 2);
  EXPECT_EQ(cd.Hv, 4);
}

TEST(ValidationDims, MessageFormat) {
  // "<op>: <argument>: expected <what>, got <what> (src/api/validate.cpp:<line>)"
  FwdCase c;
  ChunkFwdParams p;
  p.q = c.q.view();
  p.k = c.k.view();
  p.v = c.v.view();
  p.v.ndim = 3;
  ChunkDims d;
  Status st = validate(p, &d);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_EQ(st.message().rfind("chunk_fwd: v: expected 4 dims [B, T, Hv, V], got 3", 0), 0u) << st.message();
  EXPECT_TRUE(contains(st.message(), "(src/api/validate.cpp:")) << st.message();
}

}  // namespace
}  // namespace flashgdn::test
