//===- Search.cpp - Searching the 4D plan space ---------------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Search.h"

#include "weft/Plan/Plan.h"
#include "weft/Planner/Cluster.h"
#include "weft/Planner/Risk.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

using namespace weft;
using namespace weft::planner;

static auto planKey(const plan::Plan &p) {
  // Megatron's tensor parallelism before AxoNN's grid at equal times: it is
  // what frameworks commonly run.
  return std::make_tuple(
      p.zero_stage(), int(p.recompute()), p.sequence_parallel(), -p.dp(),
      tensor3dSize(p), p.tp(), p.pp(), p.cp(), int(p.cp_comm()), p.ulysses(),
      p.micro_batch(), int(p.schedule()), p.virtual_stages(), p.gx(), p.gy());
}

bool planner::planBefore(const plan::Plan &a, const plan::Plan &b) {
  double ta = a.time().step_s(), tb = b.time().step_s();
  // Times within one part in 10^9 are ties, broken by the simpler plan.
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb))
    return ta < tb;
  return planKey(a) < planKey(b);
}

static bool sameShape(const plan::Plan &a, const plan::Plan &b) {
  return a.dp() == b.dp() && a.tp() == b.tp() && a.pp() == b.pp() &&
         a.cp() == b.cp() && a.ulysses() == b.ulysses() && a.gx() == b.gx() &&
         a.gy() == b.gy() && a.gz() == b.gz() && a.schedule() == b.schedule() &&
         a.virtual_stages() == b.virtual_stages();
}

SearchResult planner::searchPlans(CostModel &model,
                                  const SearchOptions &options) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  SearchResult result;
  const plan::ModelSpec &spec = model.model();
  const int64_t gpus = totalGpus(model.cluster());
  const int64_t perNode = model.cluster().gpus_per_node();
  const int64_t batch = model.training().global_batch();
  const int64_t seq = model.training().seq_len();
  const int64_t layers = spec.layers();
  const int top = std::max(1, options.top);
  double smallest = std::numeric_limits<double>::infinity();

  std::vector<int64_t> tps;
  for (int64_t tp = 1; tp <= (options.tpAcrossNodes ? gpus : perNode); tp *= 2)
    if (spec.heads() % tp == 0 && spec.ffn_hidden() % tp == 0 &&
        (spec.kv_heads() % tp == 0 || tp % spec.kv_heads() == 0))
      tps.push_back(tp);
  // The tensor-parallel forms: Megatron's tp, then AxoNN's grids.
  struct Tensor {
    int64_t tp = 1, gx = 1, gy = 1, gz = 1;
    int64_t size() const { return tp * gx * gy * gz; }
    bool grid() const { return gx * gy * gz > 1; }
  };
  std::vector<Tensor> tensors;
  for (int64_t tp : tps)
    tensors.push_back({tp, 1, 1, 1});
  if (options.tensor3d)
    for (int64_t gx = 1; gx <= perNode; gx *= 2)
      for (int64_t gy = 1; gx * gy <= perNode; gy *= 2)
        for (int64_t gz = 1; gz <= 8; gz *= 2) {
          int64_t g = gx * gy * gz;
          if (gx * gy < 4 || ((gx == 1 || gy == 1) && gz == 1) || g > gpus ||
              spec.heads() % gy || spec.kv_heads() % gy || spec.hidden() % g ||
              spec.ffn_hidden() % g)
            continue;
          tensors.push_back({1, gx, gy, gz});
        }

  // The plans kept: the best per mesh shape and schedule, best first.
  std::vector<plan::Plan> best;
  const double near = std::max(0.0, options.nearFastest);
  auto topThreshold = [&]() {
    return int(best.size()) < top
               ? options.limit
               : std::min(options.limit, best.back().time().step_s());
  };
  auto nearThreshold = [&]() {
    return best.empty() ? options.limit
                        : std::min(options.limit,
                                   best.front().time().step_s() * (1 + near));
  };
  // What a shape must beat: the plans kept, or with nearFastest the
  // fastest's time times (1 + nearFastest).
  auto threshold = [&]() {
    return near > 0 ? std::max(topThreshold(), nearThreshold())
                    : topThreshold();
  };
  // The plans near the fastest: the best per mesh shape, schedule and risk
  // score (twice the score, rounded: scores are multiples of 0.5), their
  // scores, and the fastest time of each score.
  std::map<std::array<int64_t, 11>, size_t> nearIndex;
  std::vector<int64_t> nearScores;
  std::map<int64_t, double> fastestOfScore;
  // nearNeedOf's answers, until the next plan is kept.
  std::map<int64_t, double> needOfScore;
  auto scoreOf = [&](const plan::Plan &p) {
    return std::llround(2 * assessRisk(p, model, false).score);
  };
  auto keep = [&](const plan::Plan &p) {
    if (near <= 0 || best.empty() || !(p.time().step_s() < nearThreshold()))
      return;
    int64_t score = scoreOf(p);
    std::array<int64_t, 11> key = {
        p.dp(), p.tp(), p.pp(), p.cp(),       p.ulysses(),
        p.gx(), p.gy(), p.gz(), p.schedule(), p.virtual_stages(),
        score};
    auto [at, inserted] = nearIndex.try_emplace(key, result.near.size());
    if (inserted) {
      result.near.push_back(p);
      nearScores.push_back(score);
    } else if (planBefore(p, result.near[at->second])) {
      result.near[at->second] = p;
    }
    needOfScore.clear();
    auto [fastest, first] =
        fastestOfScore.try_emplace(score, p.time().step_s());
    if (!first)
      fastest->second = std::min(fastest->second, p.time().step_s());
  };
  // The time a plan of risk score `score` (twice it) must beat to matter to
  // the plans near the fastest (bestNearPlans and its callers take, among
  // those less risky than the fastest, the nearCount fastest shapes and the
  // fastest of each score): the fastest of its score, or the nearCount-th
  // fastest shape of those no riskier than it, whichever is later. Both
  // only fall as the search goes on, so what is skipped never mattered.
  std::vector<std::pair<double, size_t>> ranked;
  std::vector<size_t> shapes;
  auto nearNeedOf = [&](int64_t score) {
    auto fastest = fastestOfScore.find(score);
    if (fastest == fastestOfScore.end())
      return nearThreshold();
    auto [cached, inserted] = needOfScore.try_emplace(score, 0.0);
    if (inserted) {
      ranked.clear();
      for (size_t i = 0; i < result.near.size(); ++i)
        if (nearScores[i] <= score)
          ranked.push_back({result.near[i].time().step_s(), i});
      std::sort(ranked.begin(), ranked.end());
      shapes.clear();
      double kth = std::numeric_limits<double>::infinity();
      for (auto &[time, i] : ranked) {
        if (llvm::any_of(shapes, [&, i = i](size_t j) {
              return sameShape(result.near[i], result.near[j]);
            }))
          continue;
        shapes.push_back(i);
        if (int(shapes.size()) == std::max(1, options.nearCount)) {
          kth = time;
          break;
        }
      }
      cached->second = std::max(fastest->second, kth);
    }
    return std::min(nearThreshold(), cached->second);
  };
  auto nearNeed = [&](const plan::Plan &candidate) {
    return nearNeedOf(scoreOf(candidate));
  };
  auto offer = [&](plan::Plan &&candidate) {
    for (auto it = best.begin(); it != best.end(); ++it)
      if (sameShape(*it, candidate)) {
        if (!planBefore(candidate, *it))
          return;
        best.erase(it);
        break;
      }
    auto at = std::upper_bound(best.begin(), best.end(), candidate, planBefore);
    best.insert(at, std::move(candidate));
    if (int(best.size()) > top)
      best.pop_back();
  };

  // The policy as each candidate carries it: only the axes it splits
  // (indexed by the bits of dp, cp, ulysses, tp, gx, gy, gz > 1).
  const char *const policyAxes[] = {"dp", "cp", "ulysses", "tp",
                                    "gx", "gy", "gz"};
  std::vector<std::string> policies(1u << 7);
  if (!options.compress.empty()) {
    llvm::Expected<CompressPolicy> policy =
        parseCompressPolicy(options.compress);
    if (!policy) {
      llvm::consumeError(policy.takeError());
    } else {
      for (unsigned mask = 0; mask < policies.size(); ++mask) {
        CompressPolicy kept;
        for (auto &[axis, codec] : *policy)
          for (int bit = 0; bit < 7; ++bit)
            if ((mask >> bit & 1) && axis == policyAxes[bit])
              kept.emplace_back(axis, codec);
        policies[mask] = formatCompressPolicy(kept);
      }
    }
  }
  // The candidate being examined (reused).
  plan::Plan scratch;
  auto lastReport = start;
  double reported = 0;
  // Two passes: the shapes that split no sequence (no ring, no Ulysses)
  // first, then the rest. The plans the first pass keeps bound the second's
  // shapes before their programs are built (a ring's from a shorter one,
  // CostModel::relativeWorkBound): pruning is exact, so the order changes
  // which programs are built, not the plans found.
  for (int pass = 0; pass < 2; ++pass) {
    size_t tpIndex = 0;
    for (const Tensor &tensor : tensors) {
      ++tpIndex;
      const int64_t tp = tensor.tp;
      for (int64_t u = 1; u <= (pass == 0 ? 1 : 64); u *= 2) {
        // AxoNN's grids take the place of every other head and sequence split.
        // (KV heads fewer than tp are repeated; Ulysses splits only heads
        // a rank holds more than one of: repeated heads would cross its
        // all-to-alls as many times as they are repeated.)
        if ((tensor.grid() && u > 1) || spec.heads() % (tp * u) ||
            std::max<int64_t>(1, spec.kv_heads() / tp) % u || seq % u)
          break;
        for (int64_t cp = 1; cp <= (pass == 0 ? 1 : 64); cp *= 2) {
          if ((tensor.grid() && cp > 1) || seq % (cp * u * (cp > 1 ? 2 : 1)) ||
              (cp > 1 && !model.training().flash_attention()))
            break;
          int64_t inner = tensor.size() * u * cp;
          if (inner > gpus)
            break;
          if (pass == 1 && u == 1 && cp == 1)
            continue;
          // AxoNN's grids are searched as its 4D algorithm runs them, without
          // pipeline stages (the plan form takes pp; the search does not try
          // it).
          const int64_t maxPp = tensor.grid() ? 1 : layers;
          for (int64_t pp = 1; pp <= maxPp && inner * pp <= gpus; ++pp) {
            if (options.progress) {
              auto now = Clock::now();
              if (now - lastReport > std::chrono::milliseconds(50)) {
                lastReport = now;
                // Never backwards: the inner loops restart pp.
                reported = std::max(
                    reported, (pass + (tpIndex - 1 + double(pp) / layers) /
                                          tensors.size()) /
                                  2);
                options.progress(reported);
              }
            }
            // Data parallelism takes what is left, as far as the batch
            // divides.
            int64_t dp = gpus / (inner * pp);
            while (dp > 1 && batch % dp)
              --dp;
            if (batch % dp)
              continue;
            const int64_t maxMbs = pp == 1 ? options.maxMicroBatchUnpipelined
                                           : options.maxMicroBatch;
            for (int64_t mbs = 1; mbs <= maxMbs; ++mbs) {
              if ((batch / dp) % mbs)
                continue;
              int64_t micro = batch / dp / mbs;
              struct Sched {
                plan::Schedule schedule;
                int v;
              };
              std::vector<Sched> schedules;
              if (pp == 1) {
                schedules.push_back({plan::SCHEDULE_1F1B, 1});
              } else {
                schedules.push_back({plan::SCHEDULE_1F1B, 1});
                schedules.push_back({plan::SCHEDULE_GPIPE, 1});
                schedules.push_back({plan::SCHEDULE_ZB_H1, 1});
                // Chunks may be uneven: every one needs a layer, except the
                // first rank's first and the last rank's last (Llama 3's
                // layout; weft::chunkLayers).
                for (int v : {2, 3, 4, 6, 8})
                  if (layers >= pp * v - 2 && micro % pp == 0)
                    schedules.push_back({plan::SCHEDULE_INTERLEAVED, v});
                if (tp == 1 && !tensor.grid())
                  for (int v : {1, 2})
                    if (layers >= pp * v - 2)
                      schedules.push_back({plan::SCHEDULE_ZEROPP, v});
              }
              int64_t shard = dp * cp * u;
              const double capacity = (model.cluster().gpu().hbm_gib() -
                                       model.training().memory_reserve_gib()) *
                                      1024.0 * 1024 * 1024;
              // The shape's fields every schedule shares (`candidate` is
              // reused: its repeated field keeps its storage).
              auto fill = [&](plan::Plan &candidate, int sp) {
                candidate.Clear();
                candidate.set_dp(dp);
                candidate.set_compress(
                    policies[(dp > 1) | (cp > 1) << 1 | (u > 1) << 2 |
                             (tp > 1) << 3 | (tensor.gx > 1) << 4 |
                             (tensor.gy > 1) << 5 | (tensor.gz > 1) << 6]);
                candidate.set_tp(tp);
                if (tensor.grid()) {
                  candidate.set_gx(int(tensor.gx));
                  candidate.set_gy(int(tensor.gy));
                  candidate.set_gz(int(tensor.gz));
                }
                candidate.set_pp(pp);
                candidate.set_cp(cp);
                candidate.set_ulysses(u);
                candidate.set_sequence_parallel(sp);
                // Overlap is free to ask for once SP splits the collectives
                // into all-gather and reduce-scatter.
                candidate.set_tp_comm_overlap(sp);
                candidate.set_micro_batch(mbs);
                candidate.set_num_micro_batches(micro);
              };
              // A shape whose work, spread evenly over its stages, already
              // reaches the plans kept cannot win under any schedule, ZeRO
              // stage or recomputation (each only adds to it): its candidates
              // are counted, not costed. A ring's bound comes from a measured
              // shorter ring, as below, so that no program is built for it.
              bool shapeLoses[2] = {false, false};
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                plan::Plan &probe = scratch;
                fill(probe, sp);
                probe.set_schedule(plan::SCHEDULE_1F1B);
                probe.set_virtual_stages(1);
                if (!model.checkPlan(probe).empty())
                  continue;
                const bool relative = cp > 1 && options.boundFromRelatives &&
                                      !model.isMeasured(probe);
                const double bound = relative ? model.relativeWorkBound(probe)
                                              : model.averageWorkBound(probe);
                // An infinite bound: the rank program could not be built.
                if (!std::isfinite(bound) && result.programError.empty())
                  result.programError = model.programError(probe);
                shapeLoses[sp] = bound >= threshold();
              }
              // The schedules with one chunk per rank share their stages, and
              // ZB-H1's bound is the least of theirs (its fill leaves the
              // weight gradients out): computed once per SP setting, it
              // prunes all of them (-1: not yet).
              double oneChunkBound[2] = {-1, -1};
              for (const Sched &sched : schedules) {
                for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                  plan::Plan &candidate = scratch;
                  fill(candidate, sp);
                  candidate.set_schedule(sched.schedule);
                  candidate.set_virtual_stages(sched.v);
                  candidate.set_zero_stage(
                      sched.schedule == plan::SCHEDULE_ZEROPP ? 3 : 0);
                  if (!model.checkPlan(candidate).empty())
                    continue;
                  int zeros = sched.schedule == plan::SCHEDULE_ZEROPP ? 1
                              : shard > 1                             ? 4
                                                                      : 1;
                  if (shapeLoses[sp]) {
                    if (!options.accept)
                      result.candidates += zeros;
                    continue;
                  }
                  // A ring's programs are the largest to build: first bound
                  // the plan from a measured one with a shorter ring.
                  if (cp > 1 && options.boundFromRelatives &&
                      !model.isMeasured(candidate) &&
                      model.relativeWorkBound(candidate) >= threshold()) {
                    if (!options.accept)
                      result.candidates += zeros;
                    continue;
                  }
                  for (int32_t n : model.balanceStages(candidate))
                    candidate.add_stage_layers(n);
                  // Neither ZeRO nor recomputation makes the computation
                  // shorter: when it alone cannot beat the plans kept, none
                  // of their variants can.
                  candidate.set_recompute(plan::RECOMPUTE_NONE);
                  if (sched.v == 1 && pp > 1) {
                    if (oneChunkBound[sp] < 0) {
                      const int zero = candidate.zero_stage();
                      candidate.set_schedule(plan::SCHEDULE_ZB_H1);
                      candidate.set_zero_stage(0);
                      oneChunkBound[sp] = model.workLowerBound(candidate);
                      candidate.set_schedule(sched.schedule);
                      candidate.set_zero_stage(zero);
                    }
                    if (oneChunkBound[sp] >= threshold()) {
                      if (!options.accept)
                        result.candidates += zeros;
                      continue;
                    }
                  }
                  const double work = model.workLowerBound(candidate);
                  bool loses = work >= threshold();
                  if (!loses && near > 0 && work >= topThreshold()) {
                    // Past the plans kept it matters only near the fastest,
                    // as its risk says: ZeRO-3 adds to it outside ZeroPP.
                    int64_t score = scoreOf(candidate);
                    double need = nearNeedOf(score);
                    if (shard > 1 && sched.schedule != plan::SCHEDULE_ZEROPP)
                      need = std::max(need, nearNeedOf(score + 1));
                    loses = work >= std::max(topThreshold(), need);
                  }
                  if (loses) {
                    if (!options.accept)
                      result.candidates += zeros;
                    continue;
                  }
                  for (int zero = 0; zero <= (shard > 1 ? 3 : 0); ++zero) {
                    if (sched.schedule == plan::SCHEDULE_ZEROPP && zero != 3)
                      continue;
                    candidate.set_zero_stage(zero);
                    // Recomputation only adds time: once one fits, the more
                    // aggressive ones cannot win.
                    for (int rc = 0; rc < 3; ++rc) {
                      candidate.set_recompute(plan::Recompute(rc));
                      if (options.accept && !options.accept(candidate))
                        continue;
                      ++result.candidates;
                      // More recomputation only adds to the bound: once one
                      // reaches the plans kept, none can beat them, whatever
                      // its memory (which matters then only while no plan
                      // fits).
                      const double limit = threshold();
                      const double bound =
                          model.stepLowerBound(candidate, limit);
                      if (result.anyFits && bound >= limit)
                        break;
                      double memory = model.peakMemoryBytes(candidate);
                      if (memory > capacity) {
                        if (!result.anyFits && memory < smallest) {
                          smallest = memory;
                          result.smallestMemory = candidate;
                        }
                        continue;
                      }
                      result.anyFits = true;
                      // Past the plans kept, a plan matters only near the
                      // fastest, as its risk says.
                      double need = limit;
                      if (near > 0 && bound < limit && bound >= topThreshold())
                        need = std::max(topThreshold(), nearNeed(candidate));
                      if (bound < need) {
                        llvm::SmallVector<plan::Plan, 2> costed = {candidate};
                        model.evaluate(costed[0]);
                        ++result.simulated;
                        // The same plan with K and V all-gathered instead
                        // of passed around the ring: costed where the
                        // ring's is kept (its programs are built only
                        // there), the faster of the two kept.
                        if (cp > 1 && options.cpAllGather &&
                            costed[0].time().step_s() < threshold()) {
                          plan::Plan gathered = candidate;
                          gathered.set_cp_comm(plan::CP_COMM_ALL_GATHER);
                          if (!options.accept || options.accept(gathered)) {
                            model.evaluate(gathered);
                            ++result.simulated;
                            costed.push_back(std::move(gathered));
                          }
                        }
                        for (plan::Plan &evaluated : costed) {
                          if (!(evaluated.time().step_s() < threshold()))
                            continue;
                          if (near > 0) {
                            offer(plan::Plan(evaluated));
                            keep(evaluated);
                          } else {
                            offer(std::move(evaluated));
                          }
                        }
                      }
                      break;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  if (!result.anyFits && std::isfinite(smallest))
    model.evaluate(result.smallestMemory);
  result.plans = std::move(best);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.progress)
    options.progress(1.0);
  return result;
}

std::vector<plan::Plan>
planner::bestNearPlans(const std::vector<plan::Plan> &near, double limit,
                       const std::function<bool(const plan::Plan &)> &accept,
                       int count) {
  std::vector<plan::Plan> chosen;
  for (const plan::Plan &p : near) {
    if (!(p.time().step_s() < limit) || !accept(p))
      continue;
    auto same = llvm::find_if(
        chosen, [&](const plan::Plan &q) { return sameShape(p, q); });
    if (same == chosen.end())
      chosen.push_back(p);
    else if (planBefore(p, *same))
      *same = p;
  }
  std::sort(chosen.begin(), chosen.end(), planBefore);
  if (int(chosen.size()) > count)
    chosen.resize(size_t(std::max(0, count)));
  return chosen;
}

std::vector<plan::Plan>
planner::lowerRiskPlans(const CostModel &model,
                        const std::vector<plan::Plan> &near, double limit,
                        double risk, int count) {
  std::vector<double> scores;
  std::set<double> lower;
  for (const plan::Plan &p : near) {
    double score = assessRisk(p, model, false).score;
    scores.push_back(score);
    if (score < risk - 1e-9 && p.time().step_s() < limit)
      lower.insert(score);
  }
  auto scoreOf = [&](const plan::Plan &p) { return scores[&p - near.data()]; };
  std::vector<plan::Plan> chosen = bestNearPlans(
      near, limit,
      [&](const plan::Plan &p) { return scoreOf(p) < risk - 1e-9; }, count);
  for (double score : lower)
    for (plan::Plan &p : bestNearPlans(
             near, limit,
             [&](const plan::Plan &q) { return scoreOf(q) == score; }, 1))
      if (llvm::none_of(chosen, [&](const plan::Plan &q) {
            return sameShape(p, q) && !planBefore(p, q) && !planBefore(q, p);
          }))
        chosen.push_back(std::move(p));
  return chosen;
}

std::string planner::outsideSearchSpace(const CostModel &model,
                                        const plan::Plan &plan,
                                        const SearchOptions &options) {
  std::string why = model.checkPlan(plan);
  if (!why.empty())
    return why;
  auto powerOfTwo = [](int64_t n) { return n > 0 && (n & (n - 1)) == 0; };
  if (!powerOfTwo(plan.tp()) || !powerOfTwo(plan.cp()) ||
      !powerOfTwo(plan.ulysses()) || plan.cp() > 64 || plan.ulysses() > 64)
    return "tp, cp and ulysses are searched over powers of two";
  if (plan.tp() > model.cluster().gpus_per_node() && !options.tpAcrossNodes)
    return "tp spans nodes";
  if (uses3dTensorParallel(plan)) {
    int64_t gx = plan.gx(), gy = plan.gy(), gz = plan.gz();
    if (!options.tensor3d)
      return "3-D tensor parallelism is not searched (--tp3d=false)";
    if (!powerOfTwo(gx) || !powerOfTwo(gy) || !powerOfTwo(gz) || gz > 8)
      return "the 3-D grid is searched over powers of two, gz up to 8";
    if (gx * gy > model.cluster().gpus_per_node())
      return "the 3-D grid's weight split (gx*gy) spans nodes";
    if (plan.pp() > 1)
      return "3-D grids are searched without pipeline stages, as AxoNN's 4D "
             "algorithm (dp x 3-D) runs them";
    if (gx * gy < 4 || ((gx == 1 || gy == 1) && gz == 1))
      return "3-D grids are searched with weights split at least 4 ways "
             "(gx*gy >= 4), over both gx and gy or with gz > 1 (one axis "
             "alone is Megatron's tp)";
  }
  if (plan.micro_batch() > (plan.pp() == 1 ? options.maxMicroBatchUnpipelined
                                           : options.maxMicroBatch))
    return "micro-batch above the searched maximum";
  int64_t inner = int64_t(plan.tp()) * plan.cp() * plan.ulysses() * plan.pp() *
                  tensor3dSize(plan);
  int64_t dp = totalGpus(model.cluster()) / inner;
  int64_t batch = model.training().global_batch();
  while (dp > 1 && batch % dp)
    --dp;
  if (plan.dp() != dp)
    return "the search gives data parallelism all GPUs the batch allows (dp=" +
           std::to_string(dp) + ")";
  int v = plan.virtual_stages();
  switch (plan.schedule()) {
  case plan::SCHEDULE_INTERLEAVED:
    if (v != 2 && v != 3 && v != 4 && v != 6 && v != 8)
      return "interleaving is searched with v in {2, 3, 4, 6, 8}";
    break;
  case plan::SCHEDULE_ZEROPP:
    if (v > 2)
      return "ZeroPP is searched with v in {1, 2}";
    break;
  default:
    break;
  }
  return "";
}
