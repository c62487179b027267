//===- Search.h - Searching the 4D plan space --------------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_SEARCH_H
#define WEFT_PLANNER_SEARCH_H

#include "weft/Planner/CostModel.h"

#include <functional>
#include <limits>
#include <vector>

namespace weft::planner {

struct SearchOptions {
  /// How many plans to return (distinct meshes and schedules).
  int top = 5;
  /// Let tensor parallelism span nodes.
  bool tpAcrossNodes = false;
  /// Also search AxoNN's 3-D tensor parallelism: grids Gx x Gy x Gz whose
  /// Gx x Gy (the weight split) fits in a node and is at least 4 (over both
  /// axes, or over one with Gz > 1), and Gz up to 8, without pipeline
  /// stages (AxoNN's 4D: dp x 3-D).
  bool tensor3d = true;
  /// Cost a kept context-parallel plan with K and V all-gathered too
  /// (plan::CP_COMM_ALL_GATHER) and keep the faster of it and the ring.
  bool cpAllGather = true;
  /// Largest micro-batch size tried with pipeline stages, where fewer,
  /// larger micro-batches lengthen the bubble.
  int maxMicroBatch = 16;
  /// Largest micro-batch size tried without pipeline stages, where a larger
  /// one costs no bubble and saves per-micro-batch work (ZeRO-3's gathers,
  /// launches); small models under FSDP run 24-40 (MosaicML's MPT table).
  int maxMicroBatchUnpipelined = 64;
  /// Bound a context-parallel plan from a measured one with a shorter ring
  /// before building its programs (CostModel::relativeWorkBound). Off, every
  /// plan shape that divides is built and measured (for tests).
  bool boundFromRelatives = true;
  /// Only plans predicted faster than this (seconds per step) are kept:
  /// the bound prunes from the start.
  double limit = std::numeric_limits<double>::infinity();
  /// Also keep plans costed within this fraction of the fastest (0: none),
  /// in SearchResult::near: the lower-risk alternatives to the fastest
  /// (preferRobust) then come from the same pass. Past the top plans, a
  /// candidate is costed only while it could still be one of them (its risk
  /// score is known before it is costed).
  double nearFastest = 0;
  /// With nearFastest: for any risk score R, the near plans hold the
  /// nearCount fastest shapes less risky than R (bestNearPlans' count) and
  /// the fastest plan of each score.
  int nearCount = 8;
  /// The compression policy every candidate is costed under
  /// (plan::Plan::compress; empty: none).
  std::string compress;
  /// Only plans this accepts are kept (e.g. what a framework can run).
  std::function<bool(const plan::Plan &)> accept;
  /// Called with the fraction done, at most every few milliseconds.
  std::function<void(double)> progress;
};

struct SearchResult {
  /// The fastest plans that fit, best first (each with its breakdown).
  std::vector<plan::Plan> plans;
  /// When nothing fits: the plan with the smallest peak memory (pp = 0 when
  /// no plan could be costed).
  plan::Plan smallestMemory;
  /// Why a plan's rank program could not be built or costed (the first such
  /// reason met), e.g. repeated layers that do not form a chain.
  std::string programError;
  /// With SearchOptions::nearFastest: plans costed within that fraction of
  /// the fastest, the best per mesh shape, schedule and risk score
  /// (assessRisk), in no particular order. For any risk score R they hold
  /// the nearCount fastest shapes less risky than R and the fastest plan of
  /// each score.
  std::vector<plan::Plan> near;
  bool anyFits = false;
  int64_t candidates = 0;
  int64_t simulated = 0;
  double seconds = 0;
};

/// Enumerates dp x tp x pp x cp x ulysses, micro-batch size, schedule (1F1B,
/// GPipe, interleaved with v chunks, ZB-H1, ZeroPP), ZeRO 0-3, Megatron SP and
/// recomputation; balances stages by dynamic programming; prunes on memory,
/// then on a bubble-free lower bound; simulates the survivors' timelines.
/// Deterministic: the same input gives the same plans in the same order.
SearchResult searchPlans(CostModel &model, const SearchOptions &options);

/// Whether the search enumerates `plan` (""), or why not. Plans that the
/// search skips because a variant it does cost is never slower (SP without
/// TP overlap; more recomputation than memory needs) count as enumerated.
std::string outsideSearchSpace(const CostModel &model, const plan::Plan &plan,
                               const SearchOptions &options);

/// Among `near` (SearchResult::near): the plans predicted faster than
/// `limit` that `accept` takes, the best per mesh shape and schedule, best
/// first, at most `count`.
std::vector<plan::Plan>
bestNearPlans(const std::vector<plan::Plan> &near, double limit,
              const std::function<bool(const plan::Plan &)> &accept, int count);

/// Among `near`, the plans predicted faster than `limit` with a risk score
/// (assessRisk) below `risk`: the `count` fastest (bestNearPlans), then the
/// fastest of each lower score not among them. SearchOptions::nearFastest's
/// pruning keeps what this needs.
std::vector<plan::Plan> lowerRiskPlans(const CostModel &model,
                                       const std::vector<plan::Plan> &near,
                                       double limit, double risk, int count);

/// Orders plans by predicted step time, then by a fixed key, so that equal
/// times give a deterministic order.
bool planBefore(const plan::Plan &a, const plan::Plan &b);

} // namespace weft::planner

#endif // WEFT_PLANNER_SEARCH_H
