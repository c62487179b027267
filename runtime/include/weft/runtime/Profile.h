//===- Profile.h - Time and bytes per kernel kind ---------------*- C++ -*-===//
//
// Part of the Weft project.
//
// `weft run --profile` and compiled programs started with WEFT_PROFILE=1
// count, per kernel kind (matmul, attention, softmax, weight, all_reduce, ...),
// the calls, the seconds spent and the bytes of the results, over every rank.
// Each rank's forward time is its wall time less the time it spent reading
// weights (what building the module is to PyTorch); the forward reported is
// the slowest rank's. A kernel called inside another (linear's matmul) counts
// in the outer one only. Off, a scope costs one relaxed load.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_PROFILE_H
#define WEFT_RUNTIME_PROFILE_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <ostream>
#include <string>

namespace weft::rt {

class Profiler {
public:
  static Profiler &get();

  bool enabled() const { return on.load(std::memory_order_relaxed); }
  /// Turns profiling on (or off) and clears what was counted.
  void enable(bool value = true);
  /// Turns it on if WEFT_PROFILE is set to something other than 0.
  void enableFromEnvironment();

  void record(const char *kind, double seconds, int64_t bytes);
  /// A rank ran for `seconds` in all, `weightSeconds` of them reading
  /// weights.
  void rankDone(double seconds, double weightSeconds);

  /// The slowest rank's forward (wall less weights), in seconds.
  double forwardSeconds() const;
  /// Prints "weft: forward S s" and the table, largest time first.
  void print(std::ostream &os) const;

private:
  struct Totals {
    int64_t calls = 0;
    double seconds = 0;
    int64_t bytes = 0;
  };
  std::atomic<bool> on{false};
  mutable std::mutex mutex;
  std::map<std::string, Totals> kinds;
  int ranks = 0;
  double forward = 0, weights = 0;
};

/// Counts `bytes` of tensor storage allocated on this thread (the bytes a
/// scope reports are those allocated while it is open).
void noteAllocation(int64_t bytes);

/// Times one kernel call of `kind` (from construction to destruction) and
/// counts the tensor bytes it allocated.
class ProfileScope {
public:
  explicit ProfileScope(const char *kind);
  ~ProfileScope();
  ProfileScope(const ProfileScope &) = delete;
  ProfileScope &operator=(const ProfileScope &) = delete;

private:
  const char *kind;
  int64_t allocatedBefore = 0;
  /// Entered while profiling (the depth counts it); the outermost scope.
  bool counted = false, active = false;
  std::chrono::steady_clock::time_point start;
};

/// Times one rank's run on the calling thread (see Profiler::rankDone).
class RankProfile {
public:
  RankProfile();
  ~RankProfile();
  RankProfile(const RankProfile &) = delete;
  RankProfile &operator=(const RankProfile &) = delete;

private:
  bool active = false;
  std::chrono::steady_clock::time_point start;
};

} // namespace weft::rt

#endif // WEFT_RUNTIME_PROFILE_H
