//===- PipelineSchedule.cpp - The steps of a pipeline schedule ------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/PipelineSchedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

using namespace weft;
using namespace weft::planner;

std::vector<PipelineStep> planner::forwardBackwardOrder(plan::Schedule schedule,
                                                        int p, int v, int m,
                                                        int s) {
  std::vector<PipelineStep> steps;
  steps.reserve(size_t(m) * v * 2);
  auto forward = [&](int mb, int chunk) {
    steps.push_back({PipelineStep::Forward, mb, chunk});
  };
  auto backward = [&](int mb, int chunk) {
    steps.push_back({PipelineStep::Backward, mb, chunk});
  };
  if (schedule == plan::SCHEDULE_GPIPE) {
    for (int i = 0; i < m; ++i)
      forward(i, 0);
    for (int i = 0; i < m; ++i)
      backward(i, 0);
  } else if (v > 1) {
    // Megatron's interleaved order: groups of p micro-batches per chunk.
    int total = m * v;
    auto mbOf = [&](int k) { return (k / (p * v)) * p + k % p; };
    auto chunkOf = [&](int k, bool isForward) {
      int c = (k % (p * v)) / p;
      return isForward ? c : v - 1 - c;
    };
    int warmup = std::min(total, (p - s - 1) * 2 + (v - 1) * p);
    for (int k = 0; k < warmup; ++k)
      forward(mbOf(k), chunkOf(k, true));
    for (int i = 0; i < total - warmup; ++i) {
      int k = warmup + i;
      forward(mbOf(k), chunkOf(k, true));
      backward(mbOf(i), chunkOf(i, false));
    }
    for (int i = total - warmup; i < total; ++i)
      backward(mbOf(i), chunkOf(i, false));
  } else {
    // 1F1B order; ZB-H1 runs the same F/B order, and computeStepOrder
    // places its weight gradients (W) in the idle gaps.
    int warmup = std::min(m, p - s - 1);
    for (int i = 0; i < warmup; ++i)
      forward(i, 0);
    for (int i = 0; i < m - warmup; ++i) {
      forward(warmup + i, 0);
      backward(i, 0);
    }
    for (int i = m - warmup; i < m; ++i)
      backward(i, 0);
  }
  return steps;
}

double planner::simulatePipeline(plan::Schedule schedule, int p, int v, int m,
                                 const std::vector<double> &forward,
                                 const std::vector<double> &backward,
                                 const std::vector<double> &weight, double p2p,
                                 std::vector<TimelineEvent> *timeline) {
  // Past the warm-up the order repeats every p micro-batches (the
  // interleaved schedule's groups; 1F1B and GPipe repeat every one, and p is
  // a multiple of that), so the makespan grows by the same amount each
  // period: two simulations at counts a period apart give it exactly.
  const int64_t period = p;
  const int64_t first =
      (std::max<int64_t>(64, 4 * int64_t(p) * v) + period - 1) / period *
      period;
  // The two shorter runs cost 2 first + period micro-batches: below that
  // the exact run is cheaper.
  if (timeline || m <= 2 * first + period || (v > 1 && m % p != 0))
    return simulatePipelineExactly(schedule, p, v, m, forward, backward, weight,
                                   p2p, timeline);
  double a = simulatePipelineExactly(schedule, p, v, int(first), forward,
                                     backward, weight, p2p, nullptr);
  double b = simulatePipelineExactly(schedule, p, v, int(first + period),
                                     forward, backward, weight, p2p, nullptr);
  return b + (b - a) * double(m - first - period) / double(period);
}

namespace {
/// The stage times a simulation reads.
struct StageTimesRef {
  const std::vector<double> &forward, &backward, &weight;
  double p2p;
};
} // namespace

namespace {
/// What a step waits for: the end of the forward (`forwards`) or backward of
/// (virtual stage, micro-batch) `slot` (virtual stage x m + micro-batch),
/// and a send after it when `sent`; nothing when `slot` is negative. A
/// forward waits for the previous virtual stage's, a backward for the next
/// one's (the last virtual stage's for its own forward), and a weight
/// gradient for its own backward, on its rank.
struct Wait {
  bool forwards;
  int64_t slot;
  bool sent;
};
} // namespace

static Wait waitOf(const PipelineStep &step, int s, int p, int stages, int m) {
  const int vs = step.chunk * p + s;
  const int64_t here = int64_t(vs) * m + step.microBatch;
  if (step.kind == PipelineStep::Forward)
    return vs > 0 ? Wait{true, here - m, true} : Wait{true, -1, false};
  if (step.kind == PipelineStep::Backward)
    return vs == stages - 1 ? Wait{true, here, false}
                            : Wait{false, here + m, true};
  return {false, here, false};
}

/// Runs each rank's compute steps in `order` with these times, a step
/// starting when its rank is free and its input has arrived. With
/// `withWeights` (ZB-H1's unit-time pass), `order` holds F and B only and
/// each W is placed greedily: it runs in the first idle gap that fits it, or
/// when p weight gradients wait; `*withWeights` gets the order with the W
/// steps where they ran. Returns the makespan, or infinity if the order
/// deadlocks.
static double runOrder(const std::vector<std::vector<PipelineStep>> &order,
                       int p, int v, int m, const StageTimesRef &times,
                       std::vector<std::vector<PipelineStep>> *withWeights,
                       std::vector<TimelineEvent> *timeline) {
  const bool placeWeights = withWeights != nullptr;
  const int stages = p * v;
  std::vector<double> fwdDone(size_t(stages) * m, -1),
      bwdDone(size_t(stages) * m, -1);
  std::vector<double> freeAt(p, 0);
  std::vector<size_t> next(p, 0);
  // Weight gradients whose B is done and that wait for a gap, per rank,
  // oldest first (placeWeights only).
  std::vector<std::vector<int>> pendingW(p);
  std::vector<size_t> pendingHead(p, 0);
  std::vector<std::vector<PipelineStep>> placed(placeWeights ? p : 0);
  for (int s = 0; s < int(placed.size()); ++s) {
    placed[s].reserve(order[s].size() + size_t(m) * v);
    pendingW[s].reserve(size_t(m) * v);
  }
  auto run = [&](int s, const PipelineStep &step, double ready) {
    bool isForward = step.kind == PipelineStep::Forward;
    int vs = step.chunk * p + s;
    double duration = isForward                             ? times.forward[vs]
                      : step.kind == PipelineStep::Backward ? times.backward[vs]
                                                            : times.weight[vs];
    double start = std::max(freeAt[s], ready);
    double end = start + duration;
    freeAt[s] = end;
    if (isForward)
      fwdDone[size_t(vs) * m + step.microBatch] = end;
    else if (step.kind == PipelineStep::Backward)
      bwdDone[size_t(vs) * m + step.microBatch] = end;
    if (placeWeights) {
      placed[s].push_back(step);
      if (step.kind == PipelineStep::Backward)
        pendingW[s].push_back(step.microBatch);
    }
    if (timeline)
      timeline->push_back({isForward ? TimelineEvent::Forward
                           : step.kind == PipelineStep::Backward
                               ? TimelineEvent::Backward
                               : TimelineEvent::WeightGrad,
                           s, step.microBatch, step.chunk, start, end});
  };
  auto runWeight = [&](int s) {
    run(s, {PipelineStep::WeightGrad, pendingW[s][pendingHead[s]++], 0}, 0);
  };
  size_t remaining = 0;
  for (auto &steps : order)
    remaining += steps.size();
  // Sweeps over the ranks run each one's steps until one waits for another
  // rank's. Forwards pass down the ranks and backwards up: sweeps that
  // alternate direction carry both waves through in one sweep each, where
  // one direction took a sweep per stage for the backward. (Every step's
  // time depends only on its rank's earlier steps and its input's arrival,
  // so the sweep order changes no time.)
  for (bool down = true; remaining; down = !down) {
    bool progress = false;
    for (int i = 0; i < p; ++i) {
      const int s = down ? i : p - 1 - i;
      while (next[s] < order[s].size()) {
        const PipelineStep &step = order[s][next[s]];
        const Wait wait = waitOf(step, s, p, stages, m);
        double ready = 0;
        if (wait.slot >= 0) {
          // (A W before its B deadlocks the order.)
          double dep = (wait.forwards ? fwdDone : bwdDone)[size_t(wait.slot)];
          if (dep < 0)
            break;
          if (step.kind != PipelineStep::WeightGrad)
            ready = dep + (wait.sent ? times.p2p : 0);
        }
        if (placeWeights) {
          size_t waiting = pendingW[s].size() - pendingHead[s];
          // Fill a gap that fits a W; never hold more than p.
          if (waiting &&
              (freeAt[s] + times.weight[s] <= ready || waiting >= size_t(p))) {
            runWeight(s);
            progress = true;
            continue;
          }
        }
        run(s, step, ready);
        ++next[s];
        --remaining;
        progress = true;
      }
    }
    if (!progress)
      return std::numeric_limits<double>::infinity();
  }
  for (int s = 0; s < int(pendingW.size()); ++s)
    while (pendingHead[s] < pendingW[s].size())
      runWeight(s);
  if (placeWeights)
    *withWeights = std::move(placed);
  return *std::max_element(freeAt.begin(), freeAt.end());
}

/// True if some other entry of `points` is at least `point` in every
/// component.
static bool isCovered(const std::vector<std::vector<int>> &points,
                      const std::vector<int> &point) {
  for (const std::vector<int> &other : points) {
    if (other == point)
      continue;
    bool covers = true;
    for (size_t c = 0; c < point.size() && covers; ++c)
      covers = other[c] >= point[c];
    if (covers)
      return true;
  }
  return false;
}

namespace {
/// A schedule's steps as one dependency-ordered list, to time without
/// sweeping the ranks: each step's rank, where its time comes from, and the
/// step whose end it waits for. Any order in which runOrder's sweeps run
/// the steps is one: the dependencies are the schedule's, not the times'.
struct FlatOrder {
  struct Step {
    /// The step's rank; its duration's index into [forward | backward |
    /// weight] (kind x stages + virtual stage); the index of the step it
    /// waits for (-1: none); whether a send lies between them.
    int32_t rank, duration, dependency, sent;
  };
  std::vector<Step> steps;
  /// The order deadlocks (runOrder's infinity).
  bool deadlocks = false;
};

/// computeStepOrder's lists and their flat order.
struct CachedOrder {
  std::vector<std::vector<PipelineStep>> order;
  /// Recorded when the list is first timed (the memory model's counts read
  /// lists that are never timed).
  std::optional<FlatOrder> flat;
};
} // namespace

/// The flat order of `order`: its steps in the order a unit-time run takes
/// them (runOrder's sweeps, which never wait on a time, only on a step).
static FlatOrder
flattenOrder(const std::vector<std::vector<PipelineStep>> &order, int p, int v,
             int m) {
  FlatOrder flat;
  const int stages = p * v;
  size_t total = 0;
  for (const std::vector<PipelineStep> &steps : order)
    total += steps.size();
  flat.steps.resize(total);
  int32_t index = 0;
  // The flat index of each (virtual stage, micro-batch)'s forward and
  // backward (-1: not run yet).
  std::vector<int32_t> fwdAt(size_t(stages) * m, -1),
      bwdAt(size_t(stages) * m, -1);
  std::vector<size_t> next(p, 0);
  size_t remaining = total;
  for (bool down = true; remaining; down = !down) {
    bool progress = false;
    for (int i = 0; i < p; ++i) {
      const int s = down ? i : p - 1 - i;
      const std::vector<PipelineStep> &steps = order[s];
      for (size_t &at = next[s]; at < steps.size(); ++at) {
        const PipelineStep &step = steps[at];
        const int vs = step.chunk * p + s;
        const Wait wait = waitOf(step, s, p, stages, m);
        int32_t dependency = -1;
        if (wait.slot >= 0) {
          dependency = (wait.forwards ? fwdAt : bwdAt)[size_t(wait.slot)];
          if (dependency < 0)
            break;
        }
        const int kind = step.kind == PipelineStep::Forward    ? 0
                         : step.kind == PipelineStep::Backward ? 1
                                                               : 2;
        const size_t here = size_t(vs) * m + step.microBatch;
        if (kind == 0)
          fwdAt[here] = index;
        else if (kind == 1)
          bwdAt[here] = index;
        // A weight gradient waits for its backward on the same rank, which
        // the rank's order already puts before it: no dependency to time.
        flat.steps[size_t(index++)] = {s, kind * stages + vs,
                                       kind == 2 ? -1 : dependency, wait.sent};
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      flat.deadlocks = true;
      break;
    }
  }
  return flat;
}

/// computeStepOrder's lists (and, once timed, their flat order), computed
/// once per (schedule, p, v, m) on each thread: the search times the same
/// schedule under many plans, and a list is O(p v m) to build (ZB-H1's with
/// a unit-time run). Up to four million steps are kept (20 bytes a step in
/// the lists, 16 more in a flat order: at most about 150 MB): a
/// search of a 530B model on 5,128 GPUs times about 800 lists of 3.7
/// million steps in all, and rebuilding them cost it a tenth of its time
/// when a few hundred lists were kept.
static CachedOrder &cachedOrder(plan::Schedule schedule, int p, int v, int m) {
  using Key = std::tuple<int, int, int, int>;
  thread_local std::map<Key, CachedOrder> cache;
  thread_local size_t cachedSteps = 0;
  constexpr size_t kMostSteps = size_t(4) << 20;
  Key key{int(schedule), p, v, m};
  auto found = cache.find(key);
  if (found != cache.end())
    return found->second;
  CachedOrder entry;
  entry.order = computeStepOrder(schedule, p, v, m);
  size_t steps = 0;
  for (const std::vector<PipelineStep> &rank : entry.order)
    steps += rank.size();
  if (cachedSteps + steps > kMostSteps) {
    cache.clear();
    cachedSteps = 0;
  }
  cachedSteps += steps;
  return cache.emplace(key, std::move(entry)).first->second;
}

static const std::vector<std::vector<PipelineStep>> &
cachedStepOrder(plan::Schedule schedule, int p, int v, int m) {
  return cachedOrder(schedule, p, v, m).order;
}

/// inFlightCounts of one rank's list: the counts after each forward that
/// the next step does not follow with another (the local peaks), less the
/// points another covers.
static std::vector<std::vector<int>>
countInFlight(const std::vector<PipelineStep> &steps, int v) {
  const bool weightSteps =
      std::any_of(steps.begin(), steps.end(), [](const PipelineStep &step) {
        return step.kind == PipelineStep::WeightGrad;
      });
  const PipelineStep::Kind last =
      weightSteps ? PipelineStep::WeightGrad : PipelineStep::Backward;
  std::vector<std::vector<int>> points;
  std::vector<int> count(size_t(v), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const PipelineStep &step = steps[i];
    if (step.kind == PipelineStep::Forward) {
      ++count[size_t(step.chunk)];
      if (i + 1 == steps.size() || steps[i + 1].kind != PipelineStep::Forward)
        points.push_back(count);
    } else if (step.kind == last) {
      --count[size_t(step.chunk)];
    }
  }
  // The points no other covers: sorted, the largest first, a point is
  // covered only by one before it.
  std::sort(points.begin(), points.end(), std::greater<>());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<std::vector<int>> kept;
  for (const std::vector<int> &point : points)
    if (!isCovered(kept, point))
      kept.push_back(point);
  return kept;
}

const std::vector<std::vector<int>> &
planner::inFlightCounts(plan::Schedule schedule, int p, int v, int m, int stage,
                        bool exactly) {
  // Every stage's counts of one list, kept together (the list is the
  // simulation's, cached).
  using Key = std::tuple<int, int, int, int, bool>;
  thread_local std::map<Key, std::vector<std::vector<std::vector<int>>>> cache;
  if (!exactly && schedule != plan::SCHEDULE_GPIPE) {
    // Past the warm-up the list repeats every p micro-batches (every one
    // for v = 1; simulatePipeline): what is in flight at any point of a
    // long list is what is in flight in a list of a few periods past the
    // warm-up's (v + 1)p chunk steps.
    const int64_t shorter = int64_t(v == 1 ? 3 : v + 2) * p;
    if (m > shorter && !(v > 1 && m % p != 0))
      m = int(shorter);
  }
  Key key{int(schedule), p, v, m, exactly};
  auto found = cache.find(key);
  if (found == cache.end()) {
    if (cache.size() >= 4096)
      cache.clear();
    // (Where a rank's chunks keep the same bytes, mostInFlight's closed
    // forms answer without a list.)
    std::vector<std::vector<std::vector<int>>> stages(static_cast<size_t>(p));
    const std::vector<std::vector<PipelineStep>> &order =
        cachedStepOrder(schedule, p, v, m);
    for (int s = 0; s < p; ++s)
      stages[size_t(s)] = countInFlight(order[size_t(s)], v);
    found = cache.emplace(key, std::move(stages)).first;
  }
  return found->second[size_t(stage)];
}

planner::ZeroBubblePoints planner::zeroBubbleCounts(int p, int m, int stage) {
  // 1F1B's warm-up, min(p - s, m) forwards before the first B, and up to
  // p - 1 more micro-batches whose W waits (mostInFlight): the peak is when
  // the last forward runs or the B after it.
  const int before = std::min(p - stage, m);
  const int total = std::min(2 * p - 1 - stage, m);
  return {{{before, total - before}, {before - 1, total - before + 1}}};
}

int planner::mostInFlight(plan::Schedule schedule, int p, int v, int m,
                          int stage) {
  switch (schedule) {
  case plan::SCHEDULE_GPIPE:
    return m * v;
  case plan::SCHEDULE_ZB_H1:
    // 1F1B's order, a W waiting for its gap: up to p - 1 more micro-batches
    // than 1F1B's p - s (a W runs early when p of them wait).
    if (v == 1)
      return std::min(2 * p - 1 - stage, m);
    break;
  case plan::SCHEDULE_1F1B:
  case plan::SCHEDULE_ZEROPP:
  case plan::SCHEDULE_INTERLEAVED:
    // ZeroPP runs 1F1B's order, or with chunks the interleaved one.
    if (v == 1)
      return std::min(p - stage, m);
    // Megatron's warm-up, 2(p - s - 1) + (v - 1)p forwards, and one more
    // before the first backward; after it each forward follows a backward.
    if (m % p == 0)
      return int(std::min<int64_t>(
          2 * int64_t(p - stage - 1) + int64_t(v - 1) * p + 1, int64_t(m) * v));
    break;
  default:
    break;
  }
  int most = 0;
  for (const std::vector<int> &point : inFlightCounts(schedule, p, v, m, stage))
    most = std::max(most, std::accumulate(point.begin(), point.end(), 0));
  return most;
}

std::vector<std::vector<PipelineStep>>
planner::computeStepOrder(plan::Schedule schedule, int p, int v, int m) {
  std::vector<std::vector<PipelineStep>> order(p);
  for (int s = 0; s < p; ++s)
    order[s] = forwardBackwardOrder(schedule, p, v, m, s);
  if (schedule != plan::SCHEDULE_ZB_H1)
    return order;
  // ZB-H1's weight gradients go where a unit-time run of the 1F1B order
  // leaves them room. The list does not depend on the stage times, so the
  // program the pipeline pass writes and the list the cost model times are
  // one.
  std::vector<double> ones(size_t(p) * v, 1.0);
  runOrder(order, p, v, m, {ones, ones, ones, 0.0}, &order, nullptr);
  return order;
}

double planner::simulatePipelineExactly(plan::Schedule schedule, int p, int v,
                                        int m,
                                        const std::vector<double> &forward,
                                        const std::vector<double> &backward,
                                        const std::vector<double> &weight,
                                        double p2p,
                                        std::vector<TimelineEvent> *timeline) {
  CachedOrder &cached = cachedOrder(schedule, p, v, m);
  if (timeline)
    return runOrder(cached.order, p, v, m, {forward, backward, weight, p2p},
                    nullptr, timeline);
  // The flat order times each step once, as runOrder would: it starts when
  // its rank is free and what it waits for has ended (and been sent).
  if (!cached.flat)
    cached.flat = flattenOrder(cached.order, p, v, m);
  const FlatOrder &flat = *cached.flat;
  if (flat.deadlocks)
    return std::numeric_limits<double>::infinity();
  const size_t stages = size_t(p) * v;
  // (A schedule without W steps may pass no weight times.)
  thread_local std::vector<double> durations, end, freeAt;
  durations.assign(3 * stages, 0.0);
  const std::vector<double> *byKind[3] = {&forward, &backward, &weight};
  for (size_t kind = 0; kind < 3; ++kind)
    std::copy_n(byKind[kind]->begin(), std::min(stages, byKind[kind]->size()),
                durations.begin() + kind * stages);
  const size_t n = flat.steps.size();
  end.resize(n);
  freeAt.assign(size_t(p), 0.0);
  for (size_t i = 0; i < n; ++i) {
    const FlatOrder::Step &step = flat.steps[i];
    double ready = 0;
    if (step.dependency >= 0)
      ready = end[size_t(step.dependency)] + (step.sent ? p2p : 0);
    double &free = freeAt[size_t(step.rank)];
    const double finish =
        std::max(free, ready) + durations[size_t(step.duration)];
    end[i] = finish;
    free = finish;
  }
  return *std::max_element(freeAt.begin(), freeAt.end());
}

PipelineSchedule
planner::buildPipelineSchedule(plan::Schedule schedule, int p, int v, int m,
                               const std::vector<double> &forward,
                               const std::vector<double> &backward,
                               const std::vector<double> &weight, double p2p) {
  PipelineSchedule result;
  result.kind = schedule;
  result.stages = p;
  result.chunks = v;
  result.microBatches = m;
  result.ranks.resize(size_t(p));
  std::vector<TimelineEvent> timeline;
  simulatePipeline(schedule, p, v, m, forward, backward, weight, p2p,
                   &timeline);
  // Each rank's compute steps in the order it ran them (the simulation
  // appends a rank's events in that order).
  const int last = p * v - 1;
  for (const TimelineEvent &event : timeline) {
    if (event.stage < 0 || event.stage >= p)
      continue;
    std::vector<PipelineStep> &steps = result.ranks[size_t(event.stage)];
    int vs = event.chunk * p + event.stage;
    switch (event.kind) {
    case TimelineEvent::Forward:
      if (vs > 0)
        steps.push_back({PipelineStep::Recv, event.microBatch, event.chunk,
                         (event.stage + p - 1) % p, false});
      steps.push_back({PipelineStep::Forward, event.microBatch, event.chunk});
      if (vs < last)
        steps.push_back({PipelineStep::Send, event.microBatch, event.chunk,
                         (event.stage + 1) % p, false});
      break;
    case TimelineEvent::Backward:
      if (vs < last)
        steps.push_back({PipelineStep::Recv, event.microBatch, event.chunk,
                         (event.stage + 1) % p, true});
      steps.push_back({PipelineStep::Backward, event.microBatch, event.chunk});
      if (vs > 0)
        steps.push_back({PipelineStep::Send, event.microBatch, event.chunk,
                         (event.stage + p - 1) % p, true});
      break;
    case TimelineEvent::WeightGrad:
      steps.push_back(
          {PipelineStep::WeightGrad, event.microBatch, event.chunk});
      break;
    default:
      break;
    }
  }
  return result;
}

PipelineSchedule planner::buildPipelineSchedule(plan::Schedule schedule, int p,
                                                int v, int m) {
  std::vector<double> ones(size_t(p) * v, 1.0);
  std::vector<double> weight(size_t(p) * v,
                             schedule == plan::SCHEDULE_ZB_H1 ? 1.0 : 0.0);
  return buildPipelineSchedule(schedule, p, v, m, ones, ones, weight, 0);
}

std::string planner::stepName(const PipelineStep &step, int chunks) {
  std::string name;
  switch (step.kind) {
  case PipelineStep::Forward:
    name = "F";
    break;
  case PipelineStep::Backward:
    name = "B";
    break;
  case PipelineStep::WeightGrad:
    name = "W";
    break;
  case PipelineStep::Send:
  case PipelineStep::Recv:
    name = std::string(step.kind == PipelineStep::Send ? ">" : "<") +
           (step.gradient ? "g" : "a") + std::to_string(step.peer) + ":";
    break;
  }
  name += std::to_string(step.microBatch);
  if (chunks > 1)
    name += "." + std::to_string(step.chunk);
  return name;
}

std::optional<PipelineStep> planner::parseStepName(const std::string &name) {
  PipelineStep step{PipelineStep::Forward, 0, 0};
  size_t at = 0;
  // A non-negative decimal number at `at`, or -1.
  auto number = [&]() -> int {
    size_t begin = at;
    int64_t value = 0;
    while (at < name.size() && name[at] >= '0' && name[at] <= '9' &&
           at - begin < 9)
      value = value * 10 + (name[at++] - '0');
    return at == begin ? -1 : int(value);
  };
  if (name.empty())
    return std::nullopt;
  switch (name[at++]) {
  case 'F':
    break;
  case 'B':
    step.kind = PipelineStep::Backward;
    break;
  case 'W':
    step.kind = PipelineStep::WeightGrad;
    break;
  case '>':
  case '<':
    step.kind = name[0] == '>' ? PipelineStep::Send : PipelineStep::Recv;
    if (at >= name.size() || (name[at] != 'a' && name[at] != 'g'))
      return std::nullopt;
    step.gradient = name[at++] == 'g';
    step.peer = number();
    if (step.peer < 0 || at >= name.size() || name[at++] != ':')
      return std::nullopt;
    break;
  default:
    return std::nullopt;
  }
  step.microBatch = number();
  if (step.microBatch < 0)
    return std::nullopt;
  if (at < name.size() && name[at] == '.') {
    ++at;
    step.chunk = number();
    if (step.chunk < 0)
      return std::nullopt;
  }
  if (at != name.size())
    return std::nullopt;
  return step;
}

bool planner::isForwardStep(const PipelineStep &step) {
  return step.kind != PipelineStep::Backward &&
         step.kind != PipelineStep::WeightGrad && !step.gradient;
}

PipelineSchedule planner::forwardSteps(const PipelineSchedule &schedule) {
  PipelineSchedule forward = schedule;
  for (std::vector<PipelineStep> &steps : forward.ranks)
    steps.erase(std::remove_if(steps.begin(), steps.end(),
                               [](const PipelineStep &step) {
                                 return !isForwardStep(step);
                               }),
                steps.end());
  return forward;
}

std::string PipelineSchedule::str() const {
  std::ostringstream os;
  for (size_t r = 0; r < ranks.size(); ++r) {
    os << "rank " << r << ":";
    for (const PipelineStep &step : ranks[r])
      os << ' ' << stepName(step, chunks);
    os << '\n';
  }
  return os.str();
}

std::string planner::checkPipelineSchedule(const PipelineSchedule &schedule) {
  const int p = schedule.stages, v = schedule.chunks, m = schedule.microBatches;
  if (int(schedule.ranks.size()) != p)
    return "the schedule has " + std::to_string(schedule.ranks.size()) +
           " ranks for " + std::to_string(p) + " stages";
  const int last = p * v - 1;
  const bool split = schedule.kind == plan::SCHEDULE_ZB_H1;
  // What has happened: (virtual stage, micro-batch) forward and backward
  // done; messages posted (from, to, gradient, micro-batch, sender's chunk).
  std::set<std::pair<int, int>> forwardDone, backwardDone, weightDone;
  std::set<std::tuple<int, int, bool, int, int>> posted;
  // Received by a virtual stage: (virtual stage, gradient, micro-batch).
  std::set<std::tuple<int, bool, int>> received;
  std::vector<size_t> next(size_t(p), 0);
  auto describe = [&](int rank, const PipelineStep &step) {
    PipelineSchedule one;
    one.chunks = v;
    one.ranks = {{step}};
    std::string text = one.str();
    return "rank " + std::to_string(rank) + "'s step '" +
           text.substr(text.find(':') + 2, text.size() - text.find(':') - 3) +
           "'";
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < schedule.ranks[r].size()) {
        const PipelineStep &step = schedule.ranks[r][next[r]];
        int vs = step.chunk * p + r;
        int mb = step.microBatch;
        if (step.chunk < 0 || step.chunk >= v || mb < 0 || mb >= m)
          return describe(r, step) + " is outside the schedule";
        bool ready = true;
        switch (step.kind) {
        case PipelineStep::Forward:
          // Its input: received (vs > 0) or the batch.
          ready = vs == 0 || received.count({vs, false, mb});
          if (ready && !forwardDone.insert({vs, mb}).second)
            return describe(r, step) + " runs twice";
          break;
        case PipelineStep::Backward:
          ready = forwardDone.count({vs, mb}) &&
                  (vs == last || received.count({vs, true, mb}));
          if (ready && !backwardDone.insert({vs, mb}).second)
            return describe(r, step) + " runs twice";
          break;
        case PipelineStep::WeightGrad:
          ready = backwardDone.count({vs, mb});
          if (ready && !weightDone.insert({vs, mb}).second)
            return describe(r, step) + " runs twice";
          break;
        case PipelineStep::Send: {
          bool done = step.gradient ? backwardDone.count({vs, mb})
                                    : forwardDone.count({vs, mb});
          if (!done)
            return describe(r, step) + " sends what its rank has not computed";
          posted.insert({r, step.peer, step.gradient, mb, step.chunk});
          break;
        }
        case PipelineStep::Recv: {
          // The sender's chunk: the previous virtual stage for an
          // activation, the next for a gradient.
          int from = step.gradient ? vs + 1 : vs - 1;
          if (from < 0 || from > last || from % p != step.peer)
            return describe(r, step) + " receives from the wrong rank";
          ready = posted.count({step.peer, r, step.gradient, mb, from / p});
          if (ready)
            received.insert({vs, step.gradient, mb});
          break;
        }
        }
        if (!ready)
          break;
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] < schedule.ranks[r].size())
      return "deadlock: " + describe(r, schedule.ranks[r][next[r]]) +
             " never runs";
  for (int vs = 0; vs <= last; ++vs)
    for (int mb = 0; mb < m; ++mb)
      if (!forwardDone.count({vs, mb}) || !backwardDone.count({vs, mb}) ||
          (split && !weightDone.count({vs, mb})))
        return "virtual stage " + std::to_string(vs) +
               " misses a step of "
               "micro-batch " +
               std::to_string(mb);
  return "";
}
