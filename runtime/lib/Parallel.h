//===- Parallel.h - Split a loop over the machine's cores -------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_PARALLEL_H
#define WEFT_RUNTIME_PARALLEL_H

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace weft::rt {

/// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel when
/// there are at least two chunks of `grain` iterations; otherwise inline.
/// Iterations must be independent.
template <typename Fn> void parallelFor(int64_t n, int64_t grain, Fn fn) {
  // glibc answers hardware_concurrency() by reading
  // /sys/devices/system/cpu/online: three system calls, once per kernel
  // call until it was asked once per process.
  static const int64_t cores =
      std::max(1u, std::thread::hardware_concurrency());
  int64_t threads = std::min<int64_t>(cores, n / std::max<int64_t>(grain, 1));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t begin = chunk; begin < n; begin += chunk)
    pool.emplace_back(fn, begin, std::min(n, begin + chunk));
  fn(int64_t(0), std::min(n, chunk));
  for (std::thread &thread : pool)
    thread.join();
}

} // namespace weft::rt

#endif // WEFT_RUNTIME_PARALLEL_H
