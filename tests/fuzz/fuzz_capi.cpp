// libFuzzer target for the C ABI (CPU backend): every entry point, on calls built as an attacker would build them.
//
// Each input picks an op, a small valid problem (dims, dtypes, optional tensors, options) and then up to eight
// mutations: a hostile dim or ndim, dtype, device type, strides, byte_offset, misaligned or NULL pointer, NULL
// shape, an output pointed at an input, hostile index values, hostile scalar options. Every tensor that could be
// dereferenced gets a real buffer covering its whole extent, between guard bytes, so a correct library never
// touches memory outside them. After the call the target checks (and aborts, for libFuzzer to keep the input):
//   - the guard bytes of every buffer are intact (ASan catches a read past them, UBSan any UB on the way);
//   - a rejected call changed no byte of any buffer and set a non-empty message with a source location;
//   - an accepted call changed no input and left the message empty;
//   - calls the contract says must fail (negative sizes, wrapping or misaligned pointers, ...) failed;
//   - the status is one a CPU-only build can return (never internal).
// Built with -fsanitize=fuzzer,address,undefined by scripts/sanitize.sh; run as
//   build-sanitize/flashgdn_fuzz_capi -max_total_time=120 <corpus copy> tests/fuzz/corpus
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "flashgdn/flashgdn.h"

namespace {

using flashgdn::DType;

constexpr size_t kGuard = 64;                    // guard bytes on each side of every buffer
constexpr uint8_t kGuardByte = 0xCD;             // their value
constexpr int64_t kMaxBytes = int64_t(1) << 20;  // larger extents get no buffer (data = NULL)

void describe_args();  // prints the call being checked (defined below)

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_capi: %s: %s\n", what, detail.c_str());
  describe_args();
  std::abort();
}

enum class Role { input, output };

DLDataType dl(DType d) {
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

// One argument: the DLTensor handed to the library and the guarded storage behind it.
struct Arg {
  std::string name;
  Role role = Role::input;
  DType dtype = DType::f32;
  bool index = false;   // integer-valued (cu_seqlens, slots, counts)
  bool present = true;  // false: the params field is NULL
  int64_t shape[8] = {};
  int64_t strides[8] = {};
  DLTensor t{};
  // Mutation state.
  bool explicit_strides = false;
  bool null_shape = false;
  bool null_data = false;
  int64_t misalign = 0;          // bytes added to the payload address (a multiple of the element size is legal)
  uint64_t byte_offset = 0;      // data = payload - byte_offset (honest) ...
  bool wrap_offset = false;      // ... or byte_offset chosen so data + byte_offset wraps
  int alias_of = -1;             // an output pointed at this input's payload
  int32_t device_code = kDLCPU;  // raw DLDeviceType value
  DLDataType dl_dtype{};
  bool hostile_dtype = false;
  // Storage: [guard][payload][guard]; the payload starts at `lo`.
  std::vector<uint8_t> mem;
  size_t lo = 0, len = 0;
  std::vector<uint8_t> before;

  void set_shape(std::initializer_list<int64_t> s) {
    int i = 0;
    for (int64_t x : s) shape[i++] = x;
    t.ndim = i;
  }
};

struct Problem {
  std::deque<Arg> args;  // stable addresses
  bool must_fail = false;
  std::string must_fail_why;

  Arg& add(const char* name, Role role, DType dt, std::initializer_list<int64_t> shape, bool index = false) {
    Arg& a = args.emplace_back();
    a.name = name;
    a.role = role;
    a.dtype = dt;
    a.index = index;
    a.set_shape(shape);
    a.dl_dtype = dl(dt);
    return a;
  }
  const DLTensor* ptr(const Arg* a) const { return a && a->present ? &a->t : nullptr; }
  void require_failure(const std::string& why) {
    if (!must_fail) must_fail_why = why;
    must_fail = true;
  }
};

int64_t hostile_dim(FuzzedDataProvider& f) {
  static constexpr int64_t kDims[] = {0,
                                      1,
                                      2,
                                      3,
                                      -1,
                                      -2,
                                      64,
                                      4096,
                                      32768,
                                      2147483647,
                                      2147483648LL,
                                      int64_t(1) << 32,
                                      int64_t(1) << 40,
                                      int64_t(1) << 62,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min()};
  return f.ConsumeBool() ? f.PickValueInArray(kDims) : f.ConsumeIntegral<int64_t>();
}

int64_t hostile_index(FuzzedDataProvider& f, int64_t near) {
  static constexpr int64_t kVals[] = {0,
                                      1,
                                      -1,
                                      -2,
                                      2147483647,
                                      -2147483647 - 1,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min()};
  switch (f.ConsumeIntegralInRange(0, 3)) {
    case 0:
      return f.PickValueInArray(kVals);
    case 1:
      return f.ConsumeIntegral<int64_t>();
    default:
      return f.ConsumeIntegralInRange<int64_t>(-2, near + 2);
  }
}

// Element extent in bytes of a described tensor, or -1 when the description cannot be honest (a negative size,
// a negative stride on a dim it steps over, an extent past int64).
int64_t extent_bytes(const Arg& a, int64_t* numel) {
  *numel = 1;
  if (a.t.ndim < 0 || a.t.ndim > 6) return -1;  // never described validly: the library rejects the ndim
  for (int i = 0; i < a.t.ndim; ++i) {
    if (a.shape[i] < 0) return -1;
    if (a.shape[i] == 0) *numel = 0;
  }
  if (*numel == 0) return 0;
  for (int i = 0; i < a.t.ndim; ++i)
    if (__builtin_mul_overflow(*numel, a.shape[i], numel)) return -1;
  int64_t span = 0;
  for (int i = 0; i < a.t.ndim; ++i) {
    if (a.shape[i] <= 1) continue;
    int64_t term;
    if (a.strides[i] < 0 || __builtin_mul_overflow(a.strides[i], a.shape[i] - 1, &term) ||
        __builtin_add_overflow(span, term, &span))
      return -1;
  }
  int64_t bytes;
  if (span == std::numeric_limits<int64_t>::max() ||
      __builtin_mul_overflow(span + 1, flashgdn::dtype_size(a.dtype), &bytes))
    return -1;
  return bytes;
}

// Compact strides of the shape, or false when they overflow (the library must then reject strides == NULL).
bool compact_strides(Arg& a) {
  int64_t st = 1;
  for (int d = std::min<int32_t>(a.t.ndim, 8) - 1; d >= 0; --d) {
    a.strides[d] = st;
    if (__builtin_mul_overflow(st, a.shape[d], &st)) return false;
  }
  return true;
}

uint64_t g_rng = 1;
double next_uniform() {  // xorshift64*: values of the float payloads, in [-1, 1)
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return double((g_rng * 2685821657736338717ULL) >> 11) / double(uint64_t(1) << 52) - 1.0;
}

// Allocates every buffer from the final descriptions and fills the DLTensors.
void materialize(Problem& pb) {
  for (Arg& a : pb.args) {
    if (!a.present) continue;
    const bool ok_ndim = a.t.ndim >= 0 && a.t.ndim <= 6;
    if (!ok_ndim) pb.require_failure(a.name + ": ndim outside [0, 6]");
    const int nd = ok_ndim ? a.t.ndim : 0;
    bool strides_fit = true;
    if (!a.explicit_strides) strides_fit = compact_strides(a);
    int64_t numel = 0;
    int64_t bytes = ok_ndim ? extent_bytes(a, &numel) : -1;
    for (int i = 0; ok_ndim && i < nd; ++i)
      if (a.shape[i] < 0) pb.require_failure(a.name + ": negative size");
    if (ok_ndim && !a.explicit_strides && !strides_fit) pb.require_failure(a.name + ": compact strides overflow");
    if (ok_ndim && bytes < 0 && numel != 0) pb.require_failure(a.name + ": no honest extent");
    if (a.null_shape && a.t.ndim > 0) pb.require_failure(a.name + ": shape == NULL");
    if (a.hostile_dtype) pb.require_failure(a.name + ": unsupported dtype");
    if (a.device_code != kDLCPU && a.device_code != kDLCUDAHost) pb.require_failure(a.name + ": device");
    const int64_t es = flashgdn::dtype_size(a.dtype);
    if (numel > 0 && a.misalign % es != 0) pb.require_failure(a.name + ": misaligned");
    const bool backed = bytes >= 0 && bytes <= kMaxBytes && !a.null_data;
    if (numel > 0 && !backed) pb.require_failure(a.name + ": no data for a non-empty tensor");
    // A valid description too large to back gets data = NULL (honest: the library must reject it for that);
    // an invalid one (negative size or stride, extent past int64) keeps a 16-byte buffer it must never touch.
    if (numel > 0 && bytes > kMaxBytes) a.null_data = true;

    a.len = size_t(backed ? std::max<int64_t>(bytes, 16) : 16);
    a.mem.assign(kGuard + size_t(a.misalign) + a.len + kGuard, kGuardByte);
    a.lo = kGuard + size_t(a.misalign);
    uint8_t* payload = a.mem.data() + a.lo;
    std::memset(payload, 0, a.len);  // index tensors: filled by fill_indices
    if (!a.index) {
      // Through an aligned element: the payload itself may be misaligned on purpose.
      const int64_t n = int64_t(a.len) / es;
      for (int64_t i = 0; i < n; ++i) {
        uint64_t elem = 0;
        flashgdn::detail::store_from_double(&elem, a.dtype, 0, next_uniform());
        std::memcpy(payload + i * es, &elem, size_t(es));
      }
    }
    a.t.shape = a.null_shape ? nullptr : a.shape;
    a.t.strides = a.explicit_strides ? a.strides : nullptr;
    a.t.dtype = a.dl_dtype;
    std::memcpy(&a.t.device.device_type, &a.device_code, sizeof(int32_t));
    a.t.device.device_id = 0;
    if (a.null_data) {
      a.t.data = nullptr;
      a.t.byte_offset = 0;
    } else if (a.wrap_offset) {
      // data + byte_offset lands back on the payload only modulo 2^64: the library must see the wrap.
      a.t.data = payload + 1;
      a.t.byte_offset = std::numeric_limits<uint64_t>::max();
      pb.require_failure(a.name + ": byte_offset wraps");
    } else {
      // data = payload - byte_offset as an integer: no pointer arithmetic outside the buffer in this program.
      a.t.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(payload) - uintptr_t(a.byte_offset));
      a.t.byte_offset = a.byte_offset;  // at most 64: never more than the payload address
    }
  }
}

// The values of the index tensors, after allocation (their element count is known then).
void fill_indices(FuzzedDataProvider& f, Problem& pb, int64_t T, int64_t near) {
  for (Arg& a : pb.args) {
    if (!a.present || !a.index || a.t.data == nullptr || a.len < 16) continue;
    uint8_t* payload = a.mem.data() + a.lo;
    const int64_t es = flashgdn::dtype_size(a.dtype);
    const int64_t n = int64_t(a.len) / es;
    const bool cu = a.name == "cu_seqlens";
    const int mode = f.ConsumeIntegralInRange(0, 3);
    int64_t prev = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t x;
      if (mode == 0) {
        x = hostile_index(f, near);
      } else if (cu) {  // a valid offsets array: 0, non-decreasing, ending at most at T
        x = i == 0 ? 0 : std::min<int64_t>(T, prev + f.ConsumeIntegralInRange<int64_t>(0, 3));
        prev = x;
      } else {
        x = f.ConsumeIntegralInRange<int64_t>(mode == 1 ? -1 : 0, near);
      }
      // Through an aligned element, in whatever dtype the tensor has now (a mutation may have made it float).
      uint64_t elem = 0;
      if (a.dtype == DType::i32) {
        const int32_t v = int32_t(x);
        std::memcpy(&elem, &v, 4);
      } else if (a.dtype == DType::i64) {
        std::memcpy(&elem, &x, 8);
      } else {
        flashgdn::detail::store_from_double(&elem, a.dtype, 0, double(x));
      }
      std::memcpy(payload + i * es, &elem, size_t(es));
    }
  }
}

void mutate(FuzzedDataProvider& f, Problem& pb) {
  const int n = f.ConsumeIntegralInRange(0, 8);
  for (int m = 0; m < n && f.remaining_bytes() > 0; ++m) {
    Arg& a = pb.args[f.ConsumeIntegralInRange<size_t>(0, pb.args.size() - 1)];
    switch (f.ConsumeIntegralInRange(0, 12)) {
      case 0:
        a.present = !a.present;
        break;
      case 1:
        if (a.t.ndim > 0) a.shape[f.ConsumeIntegralInRange(0, std::min<int32_t>(a.t.ndim, 8) - 1)] = hostile_dim(f);
        break;
      case 2:
        a.t.ndim = f.ConsumeBool() ? f.ConsumeIntegralInRange(-2, 8) : a.t.ndim + (f.ConsumeBool() ? 1 : -1);
        for (int i = 0; i < 8; ++i)
          if (a.shape[i] == 0 && i >= a.t.ndim) a.shape[i] = 1;
        break;
      case 3: {  // another supported dtype, or any DLPack triple
        static constexpr DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64};
        if (f.ConsumeBool()) {
          a.dtype = f.PickValueInArray(kAll);
          a.dl_dtype = dl(a.dtype);
          a.hostile_dtype = false;
        } else {
          DLDataType d{f.ConsumeIntegral<uint8_t>(), f.ConsumeIntegral<uint8_t>(), f.ConsumeIntegral<uint16_t>()};
          DType known;
          bool supported = d.lanes == 1 && ((d.code == kDLFloat && (d.bits == 16 || d.bits == 32 || d.bits == 64)) ||
                                            (d.code == kDLBfloat && d.bits == 16) ||
                                            (d.code == kDLInt && (d.bits == 32 || d.bits == 64)));
          if (supported) {
            known = d.code == kDLBfloat ? DType::bf16
                    : d.code == kDLInt  ? (d.bits == 32 ? DType::i32 : DType::i64)
                    : d.bits == 16      ? DType::f16
                    : d.bits == 32      ? DType::f32
                                        : DType::f64;
            a.dtype = known;
            a.hostile_dtype = false;
          } else {
            a.hostile_dtype = true;
          }
          a.dl_dtype = d;
        }
        break;
      }
      case 4: {
        static constexpr int32_t kDev[] = {kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLMetal, 0, -1, 5, 99, 2147483647};
        a.device_code = f.ConsumeBool() ? f.PickValueInArray(kDev) : f.ConsumeIntegral<int32_t>();
        break;
      }
      case 5: {  // explicit strides: compact, padded or permuted (honest), or hostile
        a.explicit_strides = true;
        if (!compact_strides(a)) break;
        const int nd = std::max(0, std::min<int32_t>(a.t.ndim, 8));
        const int mode = f.ConsumeIntegralInRange(0, 3);
        if (mode == 1 && nd > 0) {  // pad the outer dims (saturating: an overflowing stride is just hostile)
          const int64_t pad = f.ConsumeIntegralInRange<int64_t>(1, 3);
          for (int d = 0; d + 1 < nd; ++d)
            if (__builtin_mul_overflow(a.strides[d], pad, &a.strides[d])) a.strides[d] = INT64_MAX;
        } else if (mode == 2 && nd >= 2) {  // swap two strides
          const int i = f.ConsumeIntegralInRange(0, nd - 1), j = f.ConsumeIntegralInRange(0, nd - 1);
          std::swap(a.strides[i], a.strides[j]);
        } else if (mode == 3 && nd > 0) {
          a.strides[f.ConsumeIntegralInRange(0, nd - 1)] = hostile_dim(f);
        }
        break;
      }
      case 6:
        a.byte_offset = f.ConsumeIntegralInRange<uint64_t>(0, 64);
        break;
      case 7:
        a.wrap_offset = true;
        break;
      case 8:
        a.misalign = f.ConsumeIntegralInRange<int64_t>(1, 7);
        break;
      case 9:
        a.null_data = true;
        break;
      case 10:
        a.null_shape = true;
        break;
      case 11: {  // an output pointed at an input's payload
        const size_t j = f.ConsumeIntegralInRange<size_t>(0, pb.args.size() - 1);
        if (a.role == Role::output && pb.args[j].role == Role::input) a.alias_of = int(j);
        break;
      }
      default:
        a.misalign = 0;
        break;
    }
  }
}

// Points each aliasing output at its input when that input's payload covers the output's extent.
void apply_aliases(Problem& pb) {
  for (Arg& a : pb.args) {
    if (a.alias_of < 0 || !a.present || a.t.data == nullptr) continue;
    Arg& in = pb.args[size_t(a.alias_of)];
    if (!in.present || in.t.data == nullptr) continue;
    int64_t in_numel;
    if (extent_bytes(in, &in_numel) <= 0 || in_numel == 0) continue;  // an empty input owns no bytes to overlap
    int64_t numel;
    const int64_t bytes = extent_bytes(a, &numel);
    if (bytes < 0 || numel == 0 || size_t(bytes) > in.len || a.misalign || a.byte_offset || a.wrap_offset) continue;
    if (in.misalign % flashgdn::dtype_size(a.dtype) != 0) continue;
    a.t.data = in.mem.data() + in.lo;
    a.t.byte_offset = 0;
  }
}

struct Options {
  flashgdn_exec_options exec{};
  flashgdn_gate_options gate{};
  float scale = 0.f;
  int32_t layout = 0, chunk = 64, l2 = 0;
};

// Scalar options: mostly valid, sometimes hostile (validation must reject those, never misbehave).
void pick_options(FuzzedDataProvider& f, Options* o, flashgdn_exec_options exec, flashgdn_gate_options gate) {
  o->exec = exec;
  o->gate = gate;
  o->exec.cpu_threads = f.ConsumeIntegralInRange(0, 2);  // 0: all cores (2 on CI)
  o->exec.cpu_fp64 = f.ConsumeBool();
  o->exec.cpu_algo = f.ConsumeIntegralInRange(0, 1);
  o->exec.check_indices = f.ConsumeBool();
  o->layout = f.ConsumeIntegralInRange(0, 1);
  static constexpr int32_t kChunks[] = {16, 32, 64};
  o->chunk = f.PickValueInArray(kChunks);
  o->l2 = f.ConsumeBool();
  o->gate.use_gate_in_kernel = f.ConsumeBool();
  o->gate.use_beta_sigmoid_in_kernel = f.ConsumeBool();
  o->gate.allow_neg_eigval = o->gate.use_beta_sigmoid_in_kernel && f.ConsumeBool();
  if (f.ConsumeIntegralInRange(0, 7) == 0) {  // hostile scalars
    static constexpr float kF[] = {0.f, -1.f, 1e30f, std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::infinity()};
    switch (f.ConsumeIntegralInRange(0, 7)) {
      case 0:
        o->scale = f.PickValueInArray(kF);
        break;
      case 1:
        o->gate.softplus_beta = f.PickValueInArray(kF);
        break;
      case 2:
        o->gate.softplus_threshold = f.PickValueInArray(kF);
        break;
      case 3:
        o->layout = f.ConsumeIntegral<int32_t>();
        break;
      case 4:
        o->chunk = f.ConsumeIntegral<int32_t>();
        break;
      case 5:
        o->exec.cpu_algo = f.ConsumeIntegral<int32_t>();
        break;
      case 6:
        o->exec.cpu_threads = -f.ConsumeIntegralInRange(1, 1000);
        break;
      default:
        o->gate.allow_neg_eigval = 1;
        o->gate.use_beta_sigmoid_in_kernel = 0;
        break;
    }
  }
}

const Problem* g_problem = nullptr;  // the call being checked, for describe_args

void describe_args() {
  if (!g_problem) return;
  for (const Arg& a : g_problem->args) {
    if (!a.present) continue;
    std::string s = a.name + ": ndim " + std::to_string(a.t.ndim) + " shape [";
    for (int i = 0; i < std::max(0, std::min<int32_t>(a.t.ndim, 8)); ++i) s += std::to_string(a.shape[i]) + " ";
    s += "] strides ";
    if (a.t.strides) {
      for (int i = 0; i < std::max(0, std::min<int32_t>(a.t.ndim, 8)); ++i) s += std::to_string(a.strides[i]) + " ";
    } else {
      s += "NULL ";
    }
    s += "dtype " + std::to_string(a.t.dtype.code) + "/" + std::to_string(a.t.dtype.bits) + "/" +
         std::to_string(a.t.dtype.lanes) + " payload " + std::to_string(a.len) + " B, misalign " +
         std::to_string(a.misalign) + ", byte_offset " + std::to_string(a.t.byte_offset) +
         (a.t.data ? "" : ", data NULL") + (a.alias_of >= 0 ? ", aliased" : "");
    std::fprintf(stderr, "  %s\n", s.c_str());
  }
}

// Snapshots, runs `call`, checks the contract.
template <class Call>
void run_and_check(Problem& pb, Call&& call) {
  g_problem = &pb;
  if (std::getenv("FUZZ_CAPI_VERBOSE")) describe_args();  // to read a saved crash input
  for (Arg& a : pb.args) a.before = a.mem;
  const int rc = call();
  const std::string msg = flashgdn_last_error();
  for (Arg& a : pb.args) {
    for (size_t i = 0; i < a.lo; ++i)
      if (a.mem[i] != kGuardByte) fail("guard bytes before the buffer overwritten", a.name);
    for (size_t i = a.lo + a.len; i < a.mem.size(); ++i)
      if (a.mem[i] != kGuardByte) fail("guard bytes after the buffer overwritten", a.name);
  }
  if (rc == FLASHGDN_OK) {
    if (!msg.empty()) fail("an accepted call left a message", msg);
    if (pb.must_fail) fail("accepted a call that must fail", pb.must_fail_why);
    for (Arg& a : pb.args)
      if (a.role == Role::input && a.mem != a.before) fail("an accepted call wrote an input", a.name);
    return;
  }
  if (rc != FLASHGDN_ERROR_INVALID_ARGUMENT && rc != FLASHGDN_ERROR_UNSUPPORTED && rc != FLASHGDN_ERROR_OUT_OF_MEMORY)
    fail("unexpected status", std::to_string(rc) + ": " + msg);
  if (msg.empty()) fail("a rejected call set no message", std::to_string(rc));
  if (msg.find("(src/") == std::string::npos) fail("a message without a source location", msg);
  for (Arg& a : pb.args)
    if (a.mem != a.before) fail("a rejected call wrote a buffer", a.name + ": " + msg);
}

// ---- the ops -------------------------------------------------------------------------------------------------

struct Dims {
  int64_t B, T, Hqk, Hv, K, V, N;
  bool varlen;
};

Dims pick_dims(FuzzedDataProvider& f) {
  Dims d;
  d.varlen = f.ConsumeBool();
  d.B = d.varlen ? 1 : f.ConsumeIntegralInRange<int64_t>(0, 2);
  d.T = f.ConsumeIntegralInRange<int64_t>(0, 9);
  d.Hqk = f.ConsumeIntegralInRange<int64_t>(1, 2);
  d.Hv = d.Hqk * f.ConsumeIntegralInRange<int64_t>(1, 2);
  static constexpr int64_t kHead[] = {1, 2, 3, 4, 8, 16};
  d.K = f.PickValueInArray(kHead);
  d.V = f.PickValueInArray(kHead);
  d.N = d.varlen ? f.ConsumeIntegralInRange<int64_t>(0, 3) : d.B;
  return d;
}

DType pick_float(FuzzedDataProvider& f) {
  static constexpr DType kF[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  return f.PickValueInArray(kF);
}
DType pick_index(FuzzedDataProvider& f) {
  return f.ConsumeBool() ? DType::i32 : DType::i64;
}

// The token-major inputs shared by chunk_fwd, chunk_bwd and recurrent.
struct Seq {
  Arg *q, *k, *v, *g, *beta, *A_log, *dt_bias, *cu;
};

Seq add_seq(FuzzedDataProvider& f, Problem& pb, const Dims& d, DType dt, DType st) {
  Seq s;
  s.q = &pb.add("q", Role::input, dt, {d.B, d.T, d.Hqk, d.K});
  s.k = &pb.add("k", Role::input, dt, {d.B, d.T, d.Hqk, d.K});
  s.v = &pb.add("v", Role::input, dt, {d.B, d.T, d.Hv, d.V});
  s.g = &pb.add("g", Role::input, st, {d.B, d.T, d.Hv});
  s.beta = &pb.add("beta", Role::input, st, {d.B, d.T, d.Hv});
  s.A_log = &pb.add("A_log", Role::input, st, {d.Hv});
  s.dt_bias = &pb.add("dt_bias", Role::input, st, {d.Hv});
  s.cu = &pb.add("cu_seqlens", Role::input, pick_index(f), {d.N + 1}, true);
  s.g->present = f.ConsumeBool();
  s.beta->present = f.ConsumeBool();
  s.A_log->present = f.ConsumeBool();
  s.dt_bias->present = s.A_log->present && f.ConsumeBool();
  s.cu->present = d.varlen;
  return s;
}

void fuzz_chunk_fwd(FuzzedDataProvider& f, bool workspace_query) {
  Problem pb;
  const Dims d = pick_dims(f);
  const DType dt = pick_float(f), st = dt == DType::f64 ? DType::f64 : DType::f32;
  flashgdn_chunk_fwd_params p;
  flashgdn_chunk_fwd_params_init(&p);
  Options o;
  pick_options(f, &o, p.exec, p.gate);
  Seq s = add_seq(f, pb, d, dt, st);
  Arg& h0 = pb.add("initial_state", Role::input, st, {d.N, d.Hv, d.K, d.V});
  Arg& out = pb.add("o", Role::output, dt, {d.B, d.T, d.Hv, d.V});
  Arg& ht = pb.add("final_state", Role::output, st, {d.N, d.Hv, d.K, d.V});
  const int64_t cmax = f.ConsumeIntegralInRange<int64_t>(0, 2);
  Arg& ck = pb.add("state_checkpoints", Role::output, st, {d.N, cmax, d.Hv, d.K, d.V});
  h0.present = f.ConsumeBool();
  ht.present = f.ConsumeBool();
  ck.present = f.ConsumeIntegralInRange(0, 3) == 0;
  p.checkpoint_interval = int64_t(o.chunk) * f.ConsumeIntegralInRange(1, 2);  // o.chunk may be hostile
  mutate(f, pb);
  materialize(pb);
  fill_indices(f, pb, d.T, d.T);
  apply_aliases(pb);
  p.q = pb.ptr(s.q), p.k = pb.ptr(s.k), p.v = pb.ptr(s.v), p.g = pb.ptr(s.g), p.beta = pb.ptr(s.beta);
  p.A_log = pb.ptr(s.A_log), p.dt_bias = pb.ptr(s.dt_bias), p.cu_seqlens = pb.ptr(s.cu);
  p.initial_state = pb.ptr(&h0), p.o = pb.ptr(&out), p.final_state = pb.ptr(&ht), p.state_checkpoints = pb.ptr(&ck);
  p.scale = o.scale, p.use_qk_l2norm_in_kernel = o.l2, p.gate = o.gate, p.state_layout = o.layout;
  p.chunk_size = o.chunk, p.exec = o.exec;
  if (workspace_query) {
    size_t bytes = 12345;
    run_and_check(pb, [&] { return flashgdn_chunk_fwd_workspace_size(&p, &bytes); });
  } else {
    run_and_check(pb, [&] { return flashgdn_chunk_fwd(&p, nullptr, 0, nullptr); });
  }
}

void fuzz_chunk_bwd(FuzzedDataProvider& f) {
  Problem pb;
  const Dims d = pick_dims(f);
  const DType dt = pick_float(f), st = dt == DType::f64 ? DType::f64 : DType::f32;
  flashgdn_chunk_bwd_params p;
  flashgdn_chunk_bwd_params_init(&p);
  Options o;
  pick_options(f, &o, p.exec, p.gate);
  Seq s = add_seq(f, pb, d, dt, st);
  Arg& h0 = pb.add("initial_state", Role::input, st, {d.N, d.Hv, d.K, d.V});
  Arg& d_o = pb.add("d_o", Role::input, dt, {d.B, d.T, d.Hv, d.V});
  Arg& d_ht = pb.add("d_ht", Role::input, st, {d.N, d.Hv, d.K, d.V});
  Arg& dq = pb.add("dq", Role::output, dt, {d.B, d.T, d.Hqk, d.K});
  Arg& dk = pb.add("dk", Role::output, dt, {d.B, d.T, d.Hqk, d.K});
  Arg& dv = pb.add("dv", Role::output, dt, {d.B, d.T, d.Hv, d.V});
  Arg& dg = pb.add("dg", Role::output, st, {d.B, d.T, d.Hv});
  Arg& db = pb.add("dbeta", Role::output, st, {d.B, d.T, d.Hv});
  Arg& dh0 = pb.add("dh0", Role::output, st, {d.N, d.Hv, d.K, d.V});
  Arg& dA = pb.add("dA_log", Role::output, st, {d.Hv});
  Arg& ddt = pb.add("ddt_bias", Role::output, st, {d.Hv});
  h0.present = f.ConsumeBool();
  d_ht.present = f.ConsumeBool();
  dg.present = f.ConsumeBool();
  db.present = f.ConsumeBool();
  dh0.present = f.ConsumeBool();
  dA.present = o.gate.use_gate_in_kernel && f.ConsumeBool();
  ddt.present = o.gate.use_gate_in_kernel && f.ConsumeBool();
  mutate(f, pb);
  materialize(pb);
  fill_indices(f, pb, d.T, d.T);
  apply_aliases(pb);
  p.q = pb.ptr(s.q), p.k = pb.ptr(s.k), p.v = pb.ptr(s.v), p.g = pb.ptr(s.g), p.beta = pb.ptr(s.beta);
  p.A_log = pb.ptr(s.A_log), p.dt_bias = pb.ptr(s.dt_bias), p.cu_seqlens = pb.ptr(s.cu);
  p.initial_state = pb.ptr(&h0), p.d_o = pb.ptr(&d_o), p.d_ht = pb.ptr(&d_ht), p.dq = pb.ptr(&dq);
  p.dk = pb.ptr(&dk), p.dv = pb.ptr(&dv), p.dg = pb.ptr(&dg), p.dbeta = pb.ptr(&db), p.dh0 = pb.ptr(&dh0);
  p.dA_log = pb.ptr(&dA), p.ddt_bias = pb.ptr(&ddt);
  p.scale = o.scale, p.use_qk_l2norm_in_kernel = o.l2, p.gate = o.gate, p.state_layout = o.layout;
  p.chunk_size = o.chunk, p.exec = o.exec;
  if (f.ConsumeBool()) {
    size_t bytes = 12345;
    run_and_check(pb, [&] { return flashgdn_chunk_bwd_workspace_size(&p, &bytes); });
  } else {
    run_and_check(pb, [&] { return flashgdn_chunk_bwd(&p, nullptr, 0, nullptr); });
  }
}

void fuzz_gating(FuzzedDataProvider& f) {
  Problem pb;
  const int64_t R = f.ConsumeIntegralInRange<int64_t>(0, 6), Hv = f.ConsumeIntegralInRange<int64_t>(1, 8);
  const DType dt = pick_float(f), st = dt == DType::f64 ? DType::f64 : DType::f32;
  flashgdn_gating_params p;
  flashgdn_gating_params_init(&p);
  Options o;
  pick_options(f, &o, p.exec, p.gate);
  Arg& A = pb.add("A_log", Role::input, dt, {Hv});
  Arg& a = pb.add("a", Role::input, dt, {R, Hv});
  Arg& dtb = pb.add("dt_bias", Role::input, dt, {Hv});
  Arg& b = pb.add("b", Role::input, dt, {R, Hv});
  Arg& g = pb.add("g", Role::output, st, {R, Hv});
  Arg& beta = pb.add("beta", Role::output, dt, {R, Hv});
  dtb.present = f.ConsumeBool();
  b.present = beta.present = f.ConsumeBool();
  mutate(f, pb);
  materialize(pb);
  apply_aliases(pb);
  p.A_log = pb.ptr(&A), p.a = pb.ptr(&a), p.dt_bias = pb.ptr(&dtb), p.b = pb.ptr(&b), p.g = pb.ptr(&g);
  p.beta = pb.ptr(&beta), p.gate = o.gate, p.exec = o.exec;
  run_and_check(pb, [&] { return flashgdn_gating(&p, nullptr); });
}

void fuzz_recurrent(FuzzedDataProvider& f, bool workspace_query) {
  Problem pb;
  const Dims d = pick_dims(f);
  const DType dt = pick_float(f), st = dt == DType::f64 ? DType::f64 : DType::f32;
  flashgdn_recurrent_params p;
  flashgdn_recurrent_params_init(&p);
  Options o;
  pick_options(f, &o, p.exec, p.gate);
  Seq s = add_seq(f, pb, d, dt, st);
  Arg& out = pb.add("o", Role::output, dt, {d.B, d.T, d.Hv, d.V});
  const bool pool = f.ConsumeBool();
  const int64_t slots = f.ConsumeIntegralInRange<int64_t>(0, 5), tmax = f.ConsumeIntegralInRange<int64_t>(1, 10);
  const bool two_d = f.ConsumeBool();
  // The pool is read and written (an in-out tensor): the fuzzer treats it as an output.
  Arg& sp = pb.add("state_pool", Role::output, st, {slots, d.Hv, d.K, d.V});
  Arg& si = two_d ? pb.add("state_indices", Role::input, pick_index(f), {d.N, tmax}, true)
                  : pb.add("state_indices", Role::input, pick_index(f), {d.N}, true);
  Arg& na = pb.add("num_accepted_tokens", Role::input, pick_index(f), {d.N}, true);
  const int64_t nbuf = f.ConsumeIntegralInRange<int64_t>(0, 4), tbuf = f.ConsumeIntegralInRange<int64_t>(1, 10);
  Arg& is = pb.add("intermediate_states", Role::output, st, {nbuf, tbuf, d.Hv, d.K, d.V});
  Arg& ii = pb.add("intermediate_indices", Role::input, pick_index(f), {d.N}, true);
  Arg& h0 = pb.add("initial_state", Role::input, st, {d.N, d.Hv, d.K, d.V});
  Arg& ht = pb.add("final_state", Role::output, st, {d.N, d.Hv, d.K, d.V});
  sp.present = pool;
  si.present = pool && f.ConsumeBool();
  na.present = pool && two_d && f.ConsumeBool();
  is.present = f.ConsumeBool();
  ii.present = is.present && f.ConsumeBool();
  h0.present = !pool && f.ConsumeBool();
  ht.present = !pool && f.ConsumeBool();
  mutate(f, pb);
  materialize(pb);
  fill_indices(f, pb, d.T, std::max<int64_t>({slots, nbuf, tmax}));
  apply_aliases(pb);
  p.q = pb.ptr(s.q), p.k = pb.ptr(s.k), p.v = pb.ptr(s.v), p.g = pb.ptr(s.g), p.beta = pb.ptr(s.beta);
  p.A_log = pb.ptr(s.A_log), p.dt_bias = pb.ptr(s.dt_bias), p.cu_seqlens = pb.ptr(s.cu), p.o = pb.ptr(&out);
  p.state_pool = pb.ptr(&sp), p.state_indices = pb.ptr(&si), p.num_accepted_tokens = pb.ptr(&na);
  p.intermediate_states = pb.ptr(&is), p.intermediate_indices = pb.ptr(&ii), p.initial_state = pb.ptr(&h0);
  p.final_state = pb.ptr(&ht);
  p.commit = f.ConsumeIntegralInRange(0, 3) != 0, p.null_slot_is_invalid = f.ConsumeBool();
  p.scale = o.scale, p.use_qk_l2norm_in_kernel = o.l2, p.gate = o.gate, p.state_layout = o.layout;
  p.exec = o.exec;
  if (workspace_query) {
    size_t bytes = 12345;
    run_and_check(pb, [&] { return flashgdn_recurrent_workspace_size(&p, &bytes); });
  } else {
    run_and_check(pb, [&] { return flashgdn_recurrent(&p, nullptr, 0, nullptr); });
  }
}

void fuzz_commit(FuzzedDataProvider& f) {
  Problem pb;
  const int64_t N = f.ConsumeIntegralInRange<int64_t>(0, 4), slots = f.ConsumeIntegralInRange<int64_t>(0, 5);
  const int64_t nbuf = f.ConsumeIntegralInRange<int64_t>(0, 4), tbuf = f.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t Hv = f.ConsumeIntegralInRange<int64_t>(1, 3), K = f.ConsumeIntegralInRange<int64_t>(1, 8),
                V = f.ConsumeIntegralInRange<int64_t>(1, 8);
  const DType st = f.ConsumeBool() ? DType::f32 : pick_float(f);
  flashgdn_recurrent_commit_params p;
  flashgdn_recurrent_commit_params_init(&p);
  Arg& sp = pb.add("state_pool", Role::output, st, {slots, Hv, K, V});
  Arg& si = pb.add("state_indices", Role::input, pick_index(f), {N}, true);
  Arg& is = pb.add("intermediate_states", Role::input, st, {nbuf, tbuf, Hv, K, V});
  Arg& ii = pb.add("intermediate_indices", Role::input, pick_index(f), {N}, true);
  Arg& na = pb.add("num_accepted_tokens", Role::input, pick_index(f), {N}, true);
  ii.present = f.ConsumeBool();
  mutate(f, pb);
  materialize(pb);
  fill_indices(f, pb, tbuf, std::max<int64_t>({slots, nbuf, tbuf}));
  apply_aliases(pb);
  p.state_pool = pb.ptr(&sp), p.state_indices = pb.ptr(&si), p.intermediate_states = pb.ptr(&is);
  p.intermediate_indices = pb.ptr(&ii), p.num_accepted_tokens = pb.ptr(&na);
  p.null_slot_is_invalid = f.ConsumeBool();
  p.exec.check_indices = f.ConsumeBool();
  p.exec.cpu_threads = f.ConsumeIntegralInRange(0, 2);
  run_and_check(pb, [&] { return flashgdn_recurrent_commit(&p, nullptr); });
}

// The fused mixer decode step: the recurrent row rules plus the conv state and the [q | k | v] channel split
// (C = 2 Hqk K + Hv V when honest; mutate() lies about shapes too).
void fuzz_mixer(FuzzedDataProvider& f) {
  Problem pb;
  const Dims d = pick_dims(f);
  const DType dt = pick_float(f), st = dt == DType::f64 ? DType::f64 : DType::f32;
  const int64_t Kc = f.ConsumeIntegralInRange<int64_t>(0, 9),
                C = 2 * d.Hqk * d.K + d.Hv * d.V + f.ConsumeIntegralInRange(0, 1);
  const int64_t slots = f.ConsumeIntegralInRange<int64_t>(0, 5), tmax = f.ConsumeIntegralInRange<int64_t>(1, 6);
  const int64_t L = f.ConsumeIntegralInRange<int64_t>(0, 10);
  const bool two_d = f.ConsumeBool();
  flashgdn_mixer_decode_params p;
  flashgdn_mixer_decode_params_init(&p);
  Options o;
  pick_options(f, &o, p.exec, p.gate);
  Arg& x = pb.add("x", Role::input, dt, {d.B, d.T, C});
  Arg& z = pb.add("z", Role::input, dt, {d.B, d.T, d.Hv, d.V});
  Arg& a = pb.add("a", Role::input, dt, {d.B, d.T, d.Hv});
  Arg& b = pb.add("b", Role::input, dt, {d.B, d.T, d.Hv});
  Arg& A = pb.add("A_log", Role::input, st, {d.Hv});
  Arg& dtb = pb.add("dt_bias", Role::input, st, {d.Hv});
  Arg& w = pb.add("conv_weight", Role::input, dt, {C, Kc});
  Arg& cb = pb.add("conv_bias", Role::input, dt, {C});
  Arg& nw = pb.add("norm_weight", Role::input, dt, {d.V});
  Arg& cu = pb.add("cu_seqlens", Role::input, pick_index(f), {d.N + 1}, true);
  Arg& cs = pb.add("conv_state", Role::output, dt, {slots, C, L});  // in-out: treated as an output
  Arg& sp = pb.add("state_pool", Role::output, st, {slots, d.Hv, d.K, d.V});
  Arg& si = two_d ? pb.add("state_indices", Role::input, pick_index(f), {d.N, tmax}, true)
                  : pb.add("state_indices", Role::input, pick_index(f), {d.N}, true);
  Arg& na = pb.add("num_accepted_tokens", Role::input, pick_index(f), {d.N}, true);
  const int64_t nbuf = f.ConsumeIntegralInRange<int64_t>(0, 3), tbuf = f.ConsumeIntegralInRange<int64_t>(1, 6);
  Arg& is = pb.add("intermediate_states", Role::output, st, {nbuf, tbuf, d.Hv, d.K, d.V});
  Arg& iw = pb.add("intermediate_conv_windows", Role::output, dt, {nbuf, tbuf, C, Kc > 0 ? Kc - 1 : 0});
  Arg& ii = pb.add("intermediate_indices", Role::input, pick_index(f), {d.N}, true);
  Arg& out = pb.add("out", Role::output, dt, {d.B, d.T, d.Hv, d.V});
  dtb.present = f.ConsumeBool();
  cb.present = f.ConsumeBool();
  cu.present = d.varlen;
  si.present = f.ConsumeBool();
  na.present = two_d && f.ConsumeBool();
  is.present = f.ConsumeBool();
  iw.present = f.ConsumeBool();
  ii.present = (is.present || iw.present) && f.ConsumeBool();
  mutate(f, pb);
  materialize(pb);
  fill_indices(f, pb, d.T, std::max<int64_t>({slots, nbuf, tmax}));
  apply_aliases(pb);
  p.x = pb.ptr(&x), p.z = pb.ptr(&z), p.a = pb.ptr(&a), p.b = pb.ptr(&b), p.A_log = pb.ptr(&A);
  p.dt_bias = pb.ptr(&dtb), p.conv_weight = pb.ptr(&w), p.conv_bias = pb.ptr(&cb), p.norm_weight = pb.ptr(&nw);
  p.cu_seqlens = pb.ptr(&cu), p.conv_state = pb.ptr(&cs), p.state_pool = pb.ptr(&sp);
  p.state_indices = pb.ptr(&si), p.num_accepted_tokens = pb.ptr(&na), p.intermediate_states = pb.ptr(&is);
  p.intermediate_conv_windows = pb.ptr(&iw), p.intermediate_indices = pb.ptr(&ii), p.out = pb.ptr(&out);
  p.num_k_heads = f.ConsumeBool() ? d.Hqk : f.ConsumeIntegral<int64_t>();
  p.head_k_dim = f.ConsumeBool() ? d.K : f.ConsumeIntegral<int64_t>();
  p.commit = f.ConsumeIntegralInRange(0, 3) != 0, p.null_slot_is_invalid = f.ConsumeBool();
  p.scale = o.scale, p.gate = o.gate, p.state_layout = o.layout, p.exec = o.exec;
  run_and_check(pb, [&] { return flashgdn_mixer_decode(&p, nullptr); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider f(data, size);
  g_rng = 0x9E3779B97F4A7C15ULL ^ size;
  switch (f.ConsumeIntegralInRange(0, 8)) {
    case 0:
      fuzz_chunk_fwd(f, false);
      break;
    case 1:
      fuzz_chunk_fwd(f, true);
      break;
    case 2:
      fuzz_chunk_bwd(f);
      break;
    case 3:
      fuzz_gating(f);
      break;
    case 4:
      fuzz_recurrent(f, false);
      break;
    case 5:
      fuzz_recurrent(f, true);
      break;
    case 6:
      fuzz_commit(f);
      break;
    case 7:
      fuzz_mixer(f);
      break;
    default: {  // NULL params and NULL out-pointers on every entry point
      if (flashgdn_chunk_fwd(nullptr, nullptr, 0, nullptr) == FLASHGDN_OK ||
          flashgdn_chunk_bwd(nullptr, nullptr, 0, nullptr) == FLASHGDN_OK || flashgdn_gating(nullptr, nullptr) == 0 ||
          flashgdn_recurrent(nullptr, nullptr, 0, nullptr) == FLASHGDN_OK ||
          flashgdn_recurrent_commit(nullptr, nullptr) == FLASHGDN_OK ||
          flashgdn_mixer_decode(nullptr, nullptr) == FLASHGDN_OK)
        fail("accepted NULL params", "");
      flashgdn_chunk_fwd_params p;
      flashgdn_chunk_fwd_params_init(&p);
      if (flashgdn_chunk_fwd_workspace_size(&p, nullptr) == FLASHGDN_OK) fail("accepted bytes == NULL", "");
      if (std::strlen(flashgdn_last_error()) == 0) fail("a rejected call set no message", "bytes == NULL");
      break;
    }
  }
  return 0;
}
