//===- WeftSchedulePipeline.cpp - A pipeline schedule in the IR -----------===//
//
// Part of the Weft project.
//
// Writes the per-rank step lists of a pipeline schedule into the module's
// weft.pipeline attribute, so that what runs (the runtime's executor, the
// programs weft compile prints) is read from the IR, and is the list the
// cost model simulates.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"
#include "weft/Plan/Plan.h"
#include "weft/Planner/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace weft {
#define GEN_PASS_DEF_WEFTSCHEDULEPIPELINE
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftSchedulePipeline
    : public weft::impl::WeftSchedulePipelineBase<WeftSchedulePipeline> {
  using WeftSchedulePipelineBase::WeftSchedulePipelineBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto pipeline = module->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineAttrName());
    if (!pipeline) {
      module.emitError("-weft-schedule-pipeline: the module is not cut into "
                       "pipeline stages; run -weft-split-stages first");
      return signalPassFailure();
    }
    std::optional<plan::Schedule> kind = parseScheduleName(schedule);
    if (!kind) {
      module.emitError("-weft-schedule-pipeline: unknown schedule '")
          << schedule << "'; use gpipe, 1f1b, interleaved, zb-h1 or zeropp";
      return signalPassFailure();
    }
    const int p = int(pipeline.getAs<IntegerAttr>("stages").getInt());
    const int v = int(pipeline.getAs<IntegerAttr>("chunks").getInt());
    const int64_t m = microBatches;
    if (m < 1 || m > 1000000) {
      module.emitError("-weft-schedule-pipeline: micro-batches=")
          << m << " must be at least 1";
      return signalPassFailure();
    }
    // ZeroPP with chunks runs Megatron's interleaved order (as the cost
    // model simulates it).
    const bool interleaved = *kind == plan::SCHEDULE_INTERLEAVED ||
                             (*kind == plan::SCHEDULE_ZEROPP && v > 1);
    if (v > 1 && !interleaved) {
      module.emitError("-weft-schedule-pipeline: the stages have ")
          << v
          << " chunks per rank, which only the interleaved and ZeroPP "
             "schedules run; use schedule=interleaved";
      return signalPassFailure();
    }
    if (interleaved && m % p) {
      module.emitError("-weft-schedule-pipeline: the ")
          << scheduleName(*kind)
          << " schedule with chunks runs micro-batches in groups of the " << p
          << " stages: micro-batches=" << m << " is not a multiple of " << p;
      return signalPassFailure();
    }
    planner::PipelineSchedule full =
        planner::buildPipelineSchedule(*kind, p, v, int(m));
    if (std::string problem = planner::checkPipelineSchedule(full);
        !problem.empty()) {
      module.emitError("-weft-schedule-pipeline: the ")
          << scheduleName(*kind) << " schedule cannot run: " << problem;
      return signalPassFailure();
    }
    // A training step (stages differentiated: they return gradients) runs
    // the whole list; a forward program its forward steps.
    planner::PipelineSchedule list =
        returnsGradients(module) ? full : planner::forwardSteps(full);
    Builder b(&getContext());
    SmallVector<Attribute> ranks;
    for (const std::vector<planner::PipelineStep> &steps : list.ranks) {
      SmallVector<Attribute> names;
      for (const planner::PipelineStep &step : steps)
        names.push_back(b.getStringAttr(planner::stepName(step, v)));
      ranks.push_back(b.getArrayAttr(names));
    }
    NamedAttrList entries(pipeline);
    entries.set("schedule", b.getStringAttr(scheduleName(*kind)));
    entries.set("micro_batches", b.getI64IntegerAttr(m));
    entries.set("steps", b.getArrayAttr(ranks));
    module->setAttr(WeftDialect::getPipelineAttrName(),
                    entries.getDictionary(&getContext()));
  }
};
} // namespace
