// cpu::parallel_for, the CPU backend's worker pool: every item runs exactly once, and an exception thrown by an item
// reaches the caller (where the API turns it into a Status) instead of terminating the process from a worker thread.
#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <stdexcept>
#include <vector>

#include "cpu/cpu_common.hpp"

namespace flashgdn::cpu {
namespace {

TEST(ParallelFor, EveryItemOnce) {
  for (int32_t threads : {0, 1, 3, 16}) {
    std::vector<std::atomic<int>> hits(997);
    parallel_for(static_cast<int64_t>(hits.size()), threads, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "item " << i << " threads " << threads;
  }
  int calls = 0;
  parallel_for(0, 4, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ParallelFor, ExceptionReachesTheCaller) {
  for (int32_t threads : {1, 4}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for(200, threads,
                              [&](int64_t i) {
                                ran++;
                                if (i == 37) throw std::runtime_error("item 37");
                              }),
                 std::runtime_error)
        << "threads " << threads;
    EXPECT_GE(ran.load(), 1);
    EXPECT_THROW(parallel_for(64, threads,
                              [](int64_t i) {
                                if (i % 5 == 4)
                                  throw std::bad_alloc();  // several workers fail: one exception is rethrown
                              }),
                 std::bad_alloc);
  }
}

}  // namespace
}  // namespace flashgdn::cpu
