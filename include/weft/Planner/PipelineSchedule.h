//===- PipelineSchedule.h - The steps of a pipeline schedule ----*- C++ -*-===//
//
// Part of the Weft project.
//
// A pipeline schedule as data: for each pipeline rank, the ordered list of
// its steps (forward, backward, weight gradient of one micro-batch on one
// model chunk, and the sends and receives between stages). The cost model
// times a step list by simulating it; the pipeline executor runs the same
// lists.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_PIPELINESCHEDULE_H
#define WEFT_PLANNER_PIPELINESCHEDULE_H

#include "weft/plan.pb.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace weft::planner {

/// One box of the pipeline timeline.
struct TimelineEvent {
  enum Kind { Forward, Backward, WeightGrad, DataParallelComm, Optimizer };
  Kind kind;
  int stage;
  int microBatch;
  int chunk;
  double start;
  double end;
};

/// One step of a pipeline rank.
struct PipelineStep {
  enum Kind { Forward, Backward, WeightGrad, Send, Recv };
  Kind kind;
  int microBatch;
  /// The model chunk on this rank: virtual stage chunk * stages + rank.
  int chunk;
  /// Send and Recv: the rank at the other end, and whether the tensor is a
  /// gradient (after a backward) or an activation (after a forward).
  int peer = -1;
  bool gradient = false;
  bool operator==(const PipelineStep &o) const {
    return kind == o.kind && microBatch == o.microBatch && chunk == o.chunk &&
           peer == o.peer && gradient == o.gradient;
  }
};

/// Per pipeline rank, its steps in the order it runs them.
struct PipelineSchedule {
  plan::Schedule kind = plan::SCHEDULE_1F1B;
  int stages = 1, chunks = 1, microBatches = 1;
  std::vector<std::vector<PipelineStep>> ranks;
  /// One line per rank: `rank 0: F0 >a1 F1 >a1 <g1 B0 ...` (F/B/W and the
  /// micro-batch, `.c` for chunk c when chunks > 1; `>` sends and `<`
  /// receives an activation `a` or gradient `g` to or from the rank).
  std::string str() const;
};

/// The forward and backward steps of `stage`, in the schedule's order
/// (GPipe; 1F1B, also ZB-H1's and ZeroPP's order; Megatron's interleaved
/// order for v > 1).
std::vector<PipelineStep> forwardBackwardOrder(plan::Schedule schedule, int p,
                                               int v, int m, int stage);

/// Each rank's forward, backward and weight-gradient steps in the order it
/// runs them: forwardBackwardOrder, and for ZB-H1 each W placed in the
/// first idle gap that fits it when every step takes one slot (a W runs
/// early when p of them wait). The order does not depend on stage times: it
/// is the list the pipeline pass writes into IR and the one the cost model
/// times.
std::vector<std::vector<PipelineStep>> computeStepOrder(plan::Schedule schedule,
                                                        int p, int v, int m);

/// Simulates one step of a pipeline schedule over p stages with v chunks
/// each and m micro-batches: the ranks run computeStepOrder's lists, a step
/// starting when its rank is free and its input has arrived (p2p after the
/// producing step). forward/backward/weight hold the time of each
/// virtual stage (chunk c of stage s at c*p + s); weight is used by ZB-H1
/// only (other schedules fold it into backward). Returns the makespan, or
/// infinity if the order deadlocks. Without a timeline, many micro-batches are
/// not simulated one by one: past the warm-up every schedule repeats with a
/// period of p micro-batches (one for v = 1), so the makespan is linear in m
/// there and is extrapolated from two simulated counts (simulatePipelineExactly
/// does not).
double simulatePipeline(plan::Schedule schedule, int p, int v, int m,
                        const std::vector<double> &forward,
                        const std::vector<double> &backward,
                        const std::vector<double> &weight, double p2p,
                        std::vector<TimelineEvent> *timeline);
/// The same, every micro-batch simulated.
double simulatePipelineExactly(plan::Schedule schedule, int p, int v, int m,
                               const std::vector<double> &forward,
                               const std::vector<double> &backward,
                               const std::vector<double> &weight, double p2p,
                               std::vector<TimelineEvent> *timeline);

/// The schedule's step lists with these stage times: each rank's compute
/// steps in computeStepOrder's order (the times only fill the timeline), a
/// receive before each step whose input comes from
/// another rank, a send after each step whose output goes to one.
PipelineSchedule buildPipelineSchedule(plan::Schedule schedule, int p, int v,
                                       int m,
                                       const std::vector<double> &forward,
                                       const std::vector<double> &backward,
                                       const std::vector<double> &weight,
                                       double p2p);
/// The same with unit times (forward, backward and weight gradient alike).
PipelineSchedule buildPipelineSchedule(plan::Schedule schedule, int p, int v,
                                       int m);

/// The micro-batches rank `stage` keeps activations of at once when it
/// runs computeStepOrder's list: a micro-batch's chunk c is kept from its
/// forward to its last backward step (its W step where the rank has W
/// steps, as the executor frees it). Each entry counts, per chunk, the
/// micro-batches in flight at one point of the list; only the points no
/// other point covers in every chunk are given, so the most bytes kept is
/// the largest of their products with each chunk's bytes per micro-batch.
/// Computed for every stage at once per (schedule, p, v, m) on each
/// thread. Past the warm-up every schedule but GPipe repeats, so a long
/// list's counts are those of a list of a few periods (3p micro-batches,
/// (v + 2)p with chunks), unless `exactly`.
const std::vector<std::vector<int>> &inFlightCounts(plan::Schedule schedule,
                                                    int p, int v, int m,
                                                    int stage,
                                                    bool exactly = false);
/// ZB-H1 (no chunks) keeps a micro-batch's saved values from its forward to
/// its B step, and what its W step reads from B to W. The two points of
/// rank `stage`'s list that cover its others: (micro-batches before B, past
/// B) when the last warm-up forward runs and after the B that follows.
/// A closed form, the list's own (PlannerPipeline.
/// ZeroBubbleCountsGiveTheStepListsPeak walks the lists).
using ZeroBubblePoints = std::array<std::array<int, 2>, 2>;
ZeroBubblePoints zeroBubbleCounts(int p, int m, int stage);
/// The most chunk-micro-batches rank `stage` keeps at once (the largest sum
/// of inFlightCounts' points): what a rank whose chunks keep the same bytes
/// holds. Closed forms for GPipe (m v), 1F1B and ZeroPP without chunks
/// (min(p - s, m)), ZB-H1 (min(2p - 1 - s, m): its W steps wait), and
/// Megatron's interleaved order, ZeroPP's with chunks (min(2(p - s - 1) +
/// (v - 1)p + 1, m v)), which the search costs for thousands of
/// micro-batch counts without building lists.
int mostInFlight(plan::Schedule schedule, int p, int v, int m, int stage);

/// A step as `PipelineSchedule::str` writes it (`F3`, `B0.1`, `>a1:2`,
/// `<g0:2.1`; the `.chunk` only when the schedule has chunks > 1), and back
/// (nullopt for a malformed name; a missing chunk is 0).
std::string stepName(const PipelineStep &step, int chunks);
std::optional<PipelineStep> parseStepName(const std::string &name);

/// Whether `step` is a forward or a send or receive of activations: a step
/// a forward program (or an evaluation) runs.
bool isForwardStep(const PipelineStep &step);

/// The schedule with only its forward steps and the activations' sends and
/// receives: what a forward program (no backward) runs.
PipelineSchedule forwardSteps(const PipelineSchedule &schedule);

/// Runs the step lists as ranks would, a send completing when posted and a
/// receive waiting for its send; an empty string if every step runs, else
/// why not (a deadlock, a receive without a send, a missing step).
std::string checkPipelineSchedule(const PipelineSchedule &schedule);

} // namespace weft::planner

#endif // WEFT_PLANNER_PIPELINESCHEDULE_H
