//===- WeftScheduleCollectives.cpp - Where compute waits for communication ===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace weft {
#define GEN_PASS_DEF_WEFTSCHEDULECOLLECTIVES
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
struct WeftScheduleCollectives
    : public weft::impl::WeftScheduleCollectivesBase<WeftScheduleCollectives> {
  void runOnOperation() override {
    SmallVector<Operation *> collectives;
    getOperation().walk([&](CollectiveOpInterface collective) {
      if (collective.communicates() && collective->getNumResults() == 1 &&
          !isa<FusionOp>(collective->getParentOp()))
        collectives.push_back(collective);
    });
    for (Operation *op : collectives)
      schedule(op);
  }

  /// A wait before the first op of the collective's block that reads its
  /// result (or that holds a reader), and every reader reads the wait.
  void schedule(Operation *collective) {
    Value result = collective->getResult(0);
    Block *block = collective->getBlock();
    Operation *first = block->getTerminator();
    for (Operation *user : result.getUsers()) {
      Operation *at = block->findAncestorOpInBlock(*user);
      if (at && at->isBeforeInBlock(first))
        first = at;
    }
    OpBuilder b(first);
    auto wait = WaitOp::create(b, collective->getLoc(), result);
    result.replaceAllUsesExcept(wait.getResult(), wait);
  }
};
} // namespace
