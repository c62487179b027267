//===- WeftFuseElementwise.cpp - Kernels of the CUDA backend as IR --------===//
//
// Part of the Weft project.
//
// Which ops run as one kernel: a GEMM with a GELU in its epilogue, and chains
// of elementwise ops. Each group becomes a weft.fusion whose body holds the
// ops; the CUDA emitter prints one kernel per fusion and the planner costs
// one kernel.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace weft {
#define GEN_PASS_DEF_WEFTFUSEELEMENTWISE
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

bool isElementwise(Operation *op) {
  return op->hasTrait<weft::OpTrait::Elementwise>() && op->getNumResults() == 1;
}

/// Ops of the attention core (selective recomputation recomputes them) and
/// other ops are not fused together: the fusion says which it belongs to.
bool isCore(Operation *op) {
  return op->hasAttr(WeftDialect::getAttentionCoreAttrName());
}

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// Replaces `ops` (in block order, `root` last) by a fusion of `kind` that
/// reads `inputs` and yields `root`'s result.
void fuse(FusionKind kind, ArrayRef<Operation *> ops, Operation *root,
          ArrayRef<Value> inputs) {
  OpBuilder b(root);
  SmallVector<Value> operands(inputs.begin(), inputs.end());
  auto fusion = FusionOp::create(b, root->getLoc(),
                                 root->getResult(0).getType(), kind, operands);
  if (isCore(root))
    fusion->setAttr(WeftDialect::getAttentionCoreAttrName(), b.getUnitAttr());
  Block *body = new Block();
  fusion.getBody().push_back(body);
  IRMapping map;
  for (Value input : inputs)
    map.map(input, body->addArgument(input.getType(), input.getLoc()));
  OpBuilder inside = OpBuilder::atBlockEnd(body);
  for (Operation *op : ops)
    inside.clone(*op, map);
  YieldOp::create(inside, root->getLoc(),
                  ValueRange{map.lookup(root->getResult(0))});
  root->getResult(0).replaceAllUsesWith(fusion.getResult());
  for (Operation *op : llvm::reverse(ops))
    op->erase();
}

struct WeftFuseElementwise
    : public weft::impl::WeftFuseElementwiseBase<WeftFuseElementwise> {
  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation().walk([&](Block *block) {
      if (!isa<FusionOp>(block->getParentOp()))
        blocks.push_back(block);
    });
    for (Block *block : blocks) {
      fuseEpilogues(*block);
      fuseChains(*block);
    }
  }

  /// A tanh GELU as the only user of a GEMM's result: cuBLASLt's epilogue.
  void fuseEpilogues(Block &block) {
    SmallVector<LinearOp> linears;
    for (auto linear : block.getOps<LinearOp>())
      linears.push_back(linear);
    for (LinearOp linear : linears) {
      if (!linear->hasOneUse())
        continue;
      auto gelu = dyn_cast<GeluOp>(*linear->getUsers().begin());
      if (!gelu || gelu->getBlock() != &block ||
          gelu.getApproximation() != GeluApproximation::tanh ||
          gelu.getType() != linear.getType() || isCore(linear) != isCore(gelu))
        continue;
      // The GELU moves up to the GEMM: nothing else reads in between.
      gelu->moveAfter(linear);
      fuse(FusionKind::epilogue, {linear, gelu}, gelu,
           SmallVector<Value>(linear->getOperands()));
    }
  }

  /// An elementwise op is computed inside its user's kernel when it is its
  /// only user, elementwise too, and of the same shape; each chain of two
  /// or more becomes one fusion.
  void fuseChains(Block &block) {
    llvm::DenseSet<Operation *> inlined;
    for (Operation &op : block) {
      if (!isElementwise(&op) || !op.hasOneUse())
        continue;
      Operation *user = *op.getUsers().begin();
      if (user->getBlock() == &block && isElementwise(user) &&
          isCore(user) == isCore(&op) &&
          shapeOf(user->getResult(0)) == shapeOf(op.getResult(0)))
        inlined.insert(&op);
    }
    SmallVector<Operation *> roots;
    for (Operation &op : block)
      if (isElementwise(&op) && !inlined.contains(&op))
        roots.push_back(&op);
    // Every chain is found before any is rewritten (fusing erases ops, and
    // a new op may take an erased one's address); the values a chain reads
    // are taken when it is fused (an earlier chain may have replaced them).
    // Each chain's ops in block order, sorted now: moving ops invalidates
    // the block's op order, and recomputing it per chain is quadratic.
    struct Chain {
      llvm::SetVector<Operation *> members;
      SmallVector<Operation *> ordered;
    };
    SmallVector<Chain> chains;
    for (Operation *root : roots) {
      llvm::SetVector<Operation *> members;
      std::function<void(Operation *)> collect = [&](Operation *op) {
        members.insert(op);
        for (Value operand : op->getOperands())
          if (Operation *def = operand.getDefiningOp();
              def && inlined.contains(def))
            collect(def);
      };
      collect(root);
      if (members.size() < 2)
        continue;
      SmallVector<Operation *> ordered(members.begin(), members.end());
      llvm::sort(ordered, [](Operation *a, Operation *b) {
        return a->isBeforeInBlock(b);
      });
      chains.push_back({std::move(members), std::move(ordered)});
    }
    for (Chain &chain : chains) {
      llvm::SetVector<Operation *> &members = chain.members;
      ArrayRef<Operation *> ordered = chain.ordered;
      Operation *root = members.front();
      // The values the chain reads from outside, in the order the kernel
      // reads them (operands left to right, depth first).
      llvm::SetVector<Value> inputs;
      std::function<void(Operation *)> collect = [&](Operation *op) {
        for (Value operand : op->getOperands()) {
          Operation *def = operand.getDefiningOp();
          if (def && members.contains(def))
            collect(def);
          else
            inputs.insert(operand);
        }
      };
      collect(root);
      // The chain runs where its root stands: move its ops there, so that
      // values they read from outside are all defined.
      for (Operation *op : ordered)
        if (op != root)
          op->moveBefore(root);
      fuse(FusionKind::elementwise, ordered, root, inputs.getArrayRef());
    }
  }
};

} // namespace
