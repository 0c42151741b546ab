// The C ABI of include/flashgdn/flashgdn.h: C params -> C++ params (expanded from the op table through Op<P>; the
// tensors through the one DLTensor reader, flashgdn/dlpack.hpp), Status -> code plus a thread-local message. No
// C++ exception crosses this boundary.
#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "api/op_table.hpp"
#include "common/error.hpp"
#include "flashgdn/dlpack.hpp"
#include "flashgdn/flashgdn.h"
#include "flashgdn/flashgdn.hpp"

namespace flashgdn {
namespace {

// The message of the last failed call on this thread; "" after a success.
thread_local std::string t_last_error;

int finish(const Status& st) {
  t_last_error = st.ok() ? std::string() : st.message();
  return int(st.code());
}

// Runs one entry point: its Status, or an `internal` one for an escaping exception, becomes the return code.
template <class F>
int run_c(const char* op, F&& f) {
  try {
    return finish(f());
  } catch (const std::bad_alloc&) {
    try {
      t_last_error = std::string(op) + ": out of host memory";
    } catch (...) {
      t_last_error.clear();  // no memory even for the message
    }
    return FLASHGDN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    return finish(FGDN_ERROR(internal, op, ": unexpected exception: ", e.what()));
  } catch (...) {
    return finish(FGDN_ERROR(internal, op, ": unexpected non-standard exception"));
  }
}

template <class T>
constexpr bool is_options = std::is_same_v<T, GateOptions> || std::is_same_v<T, ExecOptions>;

// One scalar between its C and its C++ form, either way: flags are int32 in C (non-zero: true), enums are int32
// (validation and the plans reject values outside the enum), options structs go field by field (Options<O>).
template <class A, class B>
void assign(const A& from, B* to) {
  if constexpr (std::is_same_v<A, B>) {
    *to = from;
  } else if constexpr (is_options<B>) {
    Options<B>::scalars([](const char*, const auto& f, auto& t) { assign(f, &t); }, from, *to);
  } else if constexpr (is_options<A>) {
    Options<A>::scalars([](const char*, auto& t, const auto& f) { assign(f, &t); }, *to, from);
  } else if constexpr (std::is_same_v<B, bool>) {
    *to = from != 0;
  } else {
    *to = static_cast<B>(from);
  }
}

// The C params of op P -> P: every tensor through the one DLTensor reader, every scalar through assign.
template <class P, class C>
Status convert(const C* c, P* p) {
  const char* op = Op<P>::name;
  if (!c) return FGDN_INVALID(op, ": params: expected a non-NULL params pointer, got NULL");
  Status st;
  Op<P>::tensors(
      [&](const TensorSpec& s, const DLTensor* t, TensorView& v) {
        if (st.ok()) st = view_of_dlpack(t, op, s.name, &v);
      },
      *c, *p);
  FGDN_RETURN_IF_ERROR(st);
  Op<P>::scalars([](const char*, const auto& cv, auto& v) { assign(cv, &v); }, *c, *p);
  return Status::OK();
}

// <op>_params_init: every tensor NULL, every scalar the C++ default.
template <class P, class C>
void init_params(C* c) {
  if (!c) return;
  std::memset(c, 0, sizeof(*c));
  const P defaults{};
  Op<P>::scalars([](const char*, auto& cv, const auto& v) { assign(v, &cv); }, *c, defaults);
}

Status require_bytes(const char* op, const size_t* bytes) {
  if (!bytes) return FGDN_INVALID(op, ": bytes: expected a non-NULL pointer, got NULL");
  return Status::OK();
}

// An entry point of op P: the C params converted, then `f` on the C++ params, inside run_c.
template <class P, class C, class F>
int run_with(const char* entry, const C* c, F&& f) {
  return run_c(entry, [&]() -> Status {
    P p;
    FGDN_RETURN_IF_ERROR(convert(c, &p));
    return f(p);
  });
}

}  // namespace
}  // namespace flashgdn

using namespace flashgdn;  // NOLINT: the C entry points below are thin shims over namespace flashgdn

extern "C" {

#define FGDN_C_INIT(stem, Params, TENSORS, SCALARS)                 \
  void flashgdn_##stem##_params_init(flashgdn_##stem##_params* p) { \
    init_params<Params>(p);                                         \
  }
FLASHGDN_OPS(FGDN_C_INIT)
#undef FGDN_C_INIT

// The entry points: the C params converted, then the C++ entry point of the same name.
#define FGDN_C_WORKSPACE_OP(op, Params)                                                                          \
  int flashgdn_##op##_workspace_size(const flashgdn_##op##_params* c, size_t* bytes) {                           \
    return run_with<Params>(#op "_workspace_size", c, [&](const Params& p) -> Status {                           \
      FGDN_RETURN_IF_ERROR(require_bytes(#op "_workspace_size", bytes));                                         \
      return op##_workspace_size(p, bytes);                                                                      \
    });                                                                                                          \
  }                                                                                                              \
  int flashgdn_##op(const flashgdn_##op##_params* c, void* workspace, size_t workspace_bytes, void* stream) {    \
    return run_with<Params>(#op, c, [&](const Params& p) { return op(p, workspace, workspace_bytes, stream); }); \
  }
FGDN_C_WORKSPACE_OP(chunk_fwd, ChunkFwdParams)
FGDN_C_WORKSPACE_OP(chunk_bwd, ChunkBwdParams)
FGDN_C_WORKSPACE_OP(recurrent, RecurrentParams)
#undef FGDN_C_WORKSPACE_OP

#define FGDN_C_STREAM_OP(op, Params)                                                 \
  int flashgdn_##op(const flashgdn_##op##_params* c, void* stream) {                 \
    return run_with<Params>(#op, c, [&](const Params& p) { return op(p, stream); }); \
  }
FGDN_C_STREAM_OP(gating, GatingParams)
FGDN_C_STREAM_OP(recurrent_commit, RecurrentCommitParams)
FGDN_C_STREAM_OP(mixer_decode, MixerDecodeParams)
#undef FGDN_C_STREAM_OP

const char* flashgdn_last_error(void) {
  return t_last_error.c_str();
}

size_t flashgdn_copy_last_error(char* buf, size_t size) {
  const size_t n = t_last_error.size();
  if (buf && size > 0) {
    const size_t m = std::min(n, size - 1);
    std::memcpy(buf, t_last_error.data(), m);
    buf[m] = '\0';
  }
  return n;
}

const char* flashgdn_version(void) {
  return flashgdn::version();
}

int flashgdn_cuda_available(void) {
  try {
    return flashgdn::cuda_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
