//===- Profile.cpp - Time and bytes per kernel kind -----------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace weft::rt;

namespace {
// Nesting depth of scopes on this thread (only the outermost counts) and
// the seconds this thread spent reading weights.
thread_local int depth = 0;
thread_local double threadWeightSeconds = 0;
thread_local int64_t threadAllocated = 0;

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}
} // namespace

Profiler &Profiler::get() {
  static Profiler profiler;
  return profiler;
}

void Profiler::enable(bool value) {
  std::lock_guard<std::mutex> lock(mutex);
  kinds.clear();
  ranks = 0;
  forward = weights = 0;
  on.store(value, std::memory_order_relaxed);
}

void Profiler::enableFromEnvironment() {
  const char *value = std::getenv("WEFT_PROFILE");
  if (value && *value && std::strcmp(value, "0") != 0)
    enable(true);
}

void Profiler::record(const char *kind, double seconds, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  Totals &totals = kinds[kind];
  ++totals.calls;
  totals.seconds += seconds;
  totals.bytes += bytes;
}

void Profiler::rankDone(double seconds, double weightSeconds) {
  std::lock_guard<std::mutex> lock(mutex);
  ++ranks;
  forward = std::max(forward, seconds - weightSeconds);
  weights = std::max(weights, weightSeconds);
}

double Profiler::forwardSeconds() const {
  std::lock_guard<std::mutex> lock(mutex);
  return forward;
}

void Profiler::print(std::ostream &os) const {
  std::lock_guard<std::mutex> lock(mutex);
  char line[160];
  std::snprintf(line, sizeof(line),
                "weft: forward %.6f s (slowest of %d rank(s); reading weights "
                "%.3f s, not counted)\n",
                forward, ranks, weights);
  os << line;
  std::vector<std::pair<std::string, Totals>> rows(kinds.begin(), kinds.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  double total = 0;
  for (const auto &row : rows)
    total += row.second.seconds;
  os << "weft: profile, summed over ranks (seconds in kernels; MB of "
        "tensors they allocated):\n";
  std::snprintf(line, sizeof(line), "  %-16s %8s %10s %7s %10s\n", "kind",
                "calls", "seconds", "share", "MB");
  os << line;
  for (const auto &[kind, totals] : rows) {
    std::snprintf(line, sizeof(line), "  %-16s %8lld %10.4f %6.1f%% %10.1f\n",
                  kind.c_str(), static_cast<long long>(totals.calls),
                  totals.seconds,
                  total > 0 ? 100.0 * totals.seconds / total : 0.0,
                  totals.bytes / 1048576.0);
    os << line;
  }
}

void weft::rt::noteAllocation(int64_t bytes) {
  if (depth > 0)
    threadAllocated += bytes;
}

ProfileScope::ProfileScope(const char *kind) : kind(kind) {
  if (!Profiler::get().enabled())
    return;
  counted = true;
  active = depth++ == 0;
  if (active) {
    allocatedBefore = threadAllocated;
    start = std::chrono::steady_clock::now();
  }
}

ProfileScope::~ProfileScope() {
  if (!counted)
    return;
  --depth;
  if (!active)
    return;
  double seconds = secondsSince(start);
  if (std::strcmp(kind, "weight") == 0)
    threadWeightSeconds += seconds;
  Profiler::get().record(kind, seconds, threadAllocated - allocatedBefore);
}

RankProfile::RankProfile() {
  if (!Profiler::get().enabled())
    return;
  active = true;
  threadWeightSeconds = 0;
  start = std::chrono::steady_clock::now();
}

RankProfile::~RankProfile() {
  if (active)
    Profiler::get().rankDone(secondsSince(start), threadWeightSeconds);
}
