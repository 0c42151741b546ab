// The op table of include/flashgdn/flashgdn_ops.h as C++: Op<Params> visits the tensors and the scalars of an op in
// argument order, with each tensor's role, dtype class and layout. Every layer that walks an op's arguments walks
// them through this (the C ABI conversion, validation, the host mirror of exec.check_indices), so none of them
// lists an op's arguments by hand.
//
//   Op<ChunkFwdParams>::tensors(f, p)       calls f(spec, p.q), f(spec, p.k), ... for every tensor
//   Op<ChunkFwdParams>::tensors(f, c, p)    calls f(spec, c.q, p.q), ...: any structs with the op's field names
//   Op<ChunkFwdParams>::scalars(f, c, p)    calls f("checkpoint_interval", c.checkpoint_interval, p...), ...
#pragma once

#include "flashgdn/flashgdn.hpp"

namespace flashgdn {

enum class Role { in, out, inout };
enum class DClass { floats, f32, index };  // flashgdn_ops.h: "dtypes"
enum class Layout { dense, strided };

struct TensorSpec {
  const char* name;
  Role role;
  DClass dtypes;
  Layout layout;
  const char* doc;  // shape and notes
};

template <class P>
struct Op;

#define FGDN_VISIT_TENSOR(name, role, dtypes, layout, doc) \
  f(TensorSpec{#name, Role::role, DClass::dtypes, Layout::layout, doc}, s.name...);
#define FGDN_VISIT_SCALAR(type, c_type, name, init, doc) f(#name, s.name...);
#define FGDN_COUNT(...) +1
#define FGDN_OP_TRAITS(stem, Params, TENSORS, SCALARS)        \
  template <>                                                 \
  struct Op<Params> {                                         \
    static constexpr const char* name = #stem;                \
    static constexpr int num_tensors = 0 TENSORS(FGDN_COUNT); \
    template <class F, class... S>                            \
    static void tensors(F&& f, S&... s) {                     \
      TENSORS(FGDN_VISIT_TENSOR)                              \
    }                                                         \
    template <class F, class... S>                            \
    static void scalars(F&& f, S&... s) {                     \
      SCALARS(FGDN_VISIT_SCALAR)                              \
    }                                                         \
  };
FLASHGDN_OPS(FGDN_OP_TRAITS)

// The options structs, visited the same way: Options<GateOptions>::scalars(f, c, g).
template <class O>
struct Options;
template <>
struct Options<GateOptions> {
  template <class F, class... S>
  static void scalars(F&& f, S&... s) {
    FLASHGDN_GATE_OPTIONS(FGDN_VISIT_SCALAR)
  }
};
template <>
struct Options<ExecOptions> {
  template <class F, class... S>
  static void scalars(F&& f, S&... s) {
    FLASHGDN_EXEC_OPTIONS(FGDN_VISIT_SCALAR)
  }
};

#undef FGDN_OP_TRAITS
#undef FGDN_COUNT
#undef FGDN_VISIT_SCALAR
#undef FGDN_VISIT_TENSOR

}  // namespace flashgdn
