//===- WeftScheduleCollectives.cpp - Where compute waits for communication ===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"

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
    prefetchWeights();
    for (Operation *op : collectives)
      schedule(op);
  }

  /// The ops in `block` that `value` is computed from, if they are all
  /// weights, constants and slices of them (nothing per step): in block
  /// order, or empty.
  static SmallVector<Operation *> weightChain(Value value, Block *block) {
    SmallVector<Operation *> chain;
    SmallVector<Value> work = {value};
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || def->getBlock() != block ||
          !isa<ParameterOp, ConstantOp, AllSliceOp>(def))
        return {};
      if (!llvm::is_contained(chain, def))
        chain.push_back(def);
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    llvm::sort(chain, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    return chain;
  }

  /// Weights stored in shards (3-D tensor parallelism's gz, weft.stored_over)
  /// are all-gathered before use. Each such gather, with the weight and
  /// slices it reads, moves up to just before the previous gathered weight's
  /// first reader: it runs on the communication stream while that GEMM
  /// computes (one weight ahead, so at most two gathered weights are alive
  /// at once).
  void prefetchWeights() {
    getOperation().walk([&](Block *block) {
      Operation *previousReader = nullptr;
      SmallVector<AllGatherOp> gathers(block->getOps<AllGatherOp>());
      for (AllGatherOp gather : gathers) {
        SmallVector<Operation *> chain = weightChain(gather.getInput(), block);
        Operation *reader = nullptr;
        for (Operation *user : gather->getUsers())
          if (Operation *at = block->findAncestorOpInBlock(*user);
              at && (!reader || at->isBeforeInBlock(reader)))
            reader = at;
        if (chain.empty() || !reader)
          continue;
        if (previousReader && previousReader->isBeforeInBlock(gather)) {
          for (Operation *op : chain)
            if (previousReader->isBeforeInBlock(op))
              op->moveBefore(previousReader);
          gather->moveBefore(previousReader);
        }
        previousReader = reader;
      }
    });
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
