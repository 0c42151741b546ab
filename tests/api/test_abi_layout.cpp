// The layout of the C ABI's structs on LP64 targets against tests/api/abi_layout.txt, the layout compiled callers
// were built against. The structs are expanded from the op table (flashgdn_ops.h), so an edit of the table that
// moved a field would silently break every compiled caller; the golden file makes such a change (adding a field
// is one) a deliberate one. The rows are expanded from the same table: "<struct> size <bytes>", then
// "<struct>.<field> <offset>" for every field in order.
#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <sstream>
#include <string>

#include "flashgdn/flashgdn.h"

namespace {

std::string expanded_layout() {
  std::ostringstream out;
  auto size = [&](const char* s, size_t bytes) { out << s << " size " << bytes << "\n"; };
  auto field = [&](const char* s, const char* f, size_t off) { out << s << "." << f << " " << off << "\n"; };
#define FGDN_SCALAR_ROW(type, c_type, name, init, doc) field(sname, #name, offsetof(S, name));
#define FGDN_TENSOR_ROW(name, role, dtypes, layout, doc) field(sname, #name, offsetof(S, name));
#define FGDN_OPTIONS_ROWS(Struct, FIELDS) \
  {                                       \
    using S = Struct;                     \
    const char* sname = #Struct;          \
    size(sname, sizeof(S));               \
    FIELDS(FGDN_SCALAR_ROW)               \
  }
#define FGDN_OP_ROWS(stem, Params, TENSORS, SCALARS) \
  {                                                  \
    using S = flashgdn_##stem##_params;              \
    const char* sname = "flashgdn_" #stem "_params"; \
    size(sname, sizeof(S));                          \
    TENSORS(FGDN_TENSOR_ROW)                         \
    SCALARS(FGDN_SCALAR_ROW)                         \
  }
  FGDN_OPTIONS_ROWS(flashgdn_exec_options, FLASHGDN_EXEC_OPTIONS)
  FGDN_OPTIONS_ROWS(flashgdn_gate_options, FLASHGDN_GATE_OPTIONS)
  FLASHGDN_OPS(FGDN_OP_ROWS)
#undef FGDN_OP_ROWS
#undef FGDN_OPTIONS_ROWS
#undef FGDN_TENSOR_ROW
#undef FGDN_SCALAR_ROW
  return out.str();
}

TEST(CApiLayout, MatchesTheGoldenLayout) {
#if !defined(__LP64__)
  GTEST_SKIP() << "the golden layout is the LP64 one";
#endif
  std::ifstream f(std::string(FLASHGDN_SOURCE_DIR) + "/tests/api/abi_layout.txt");
  ASSERT_TRUE(f) << "tests/api/abi_layout.txt is missing";
  std::stringstream golden;
  golden << f.rdbuf();
  EXPECT_EQ(expanded_layout(), golden.str());
}

}  // namespace
