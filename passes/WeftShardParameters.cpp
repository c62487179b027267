//===- WeftShardParameters.cpp - ZeRO-3: weights stored in blocks ---------===//
//
// Part of the Weft project.
//
// ZeRO-3 (fully sharded data parallelism) stores each weight split over the
// data-parallel group and gathers it where it is used. The dialect already
// says that of a weight: `weft.stored_over` on a `weft.parameter` makes the
// partitioner keep the block of its first dimension split further over those
// axes and all-gather it before each use (AxoNN's depth axis is the other
// user). This pass puts it on every weight whose block divides, after
// propagation has decided how the weight is used.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace weft {
#define GEN_PASS_DEF_WEFTSHARDPARAMETERS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftShardParametersPass
    : public weft::impl::WeftShardParametersBase<WeftShardParametersPass> {
  using WeftShardParametersBase::WeftShardParametersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<MeshInfo> mesh = getMeshInfo(module);
    if (!mesh)
      return;
    SmallVector<std::string, 4> group(axes.begin(), axes.end());
    if (group.empty())
      group = zeroGroupAxes();
    module.walk([&](ParameterOp param) {
      auto type = dyn_cast<RankedTensorType>(param.getType());
      if (!type || !type.hasStaticShape() || type.getRank() == 0 ||
          param->hasAttr(WeftDialect::getStoredOverAttrName()))
        return;
      TensorSharding sharding =
          getSharding(param.getResult())
              .value_or(TensorSharding::replicated(type.getRank()));
      SmallVector<std::string, 2> stored =
          zeroStorageAxes(type.getShape(), sharding, *mesh, group);
      if (stored.empty())
        return;
      SmallVector<StringRef, 2> names(stored.begin(), stored.end());
      param->setAttr(WeftDialect::getStoredOverAttrName(),
                     OpBuilder(param).getStrArrayAttr(names));
    });
  }
};
} // namespace
