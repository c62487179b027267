//===- WeftAssignBuffers.cpp - One arena per rank, reused by liveness -----===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <map>

namespace weft {
#define GEN_PASS_DEF_WEFTASSIGNBUFFERS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

constexpr int64_t kAlignment = 256;

/// A weight read by each rank as its shard, straight into the buffer of the
/// all_slice that is its only user: it has no buffer of its own.
bool loadedAsShard(Operation *op) {
  if (!isa<ParameterOp, ConstantOp>(op) || !op->hasOneUse())
    return false;
  auto slice = dyn_cast<AllSliceOp>(*op->getUsers().begin());
  return slice && !slice.getZigzag();
}

/// Results that are views of their operand's buffer.
bool isView(Operation *op) { return isa<ReshapeOp, WaitOp>(op); }

struct WeftAssignBuffers
    : public weft::impl::WeftAssignBuffersBase<WeftAssignBuffers> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (!func.getBody().hasOneBlock()) {
      func.emitError("-weft-assign-buffers needs a function of one block");
      return signalPassFailure();
    }
    Block &block = func.getBody().front();
    for (Operation &op : block)
      if (isa<LayerOp>(op)) {
        op.emitError("-weft-assign-buffers needs a flat function: run "
                     "-weft-inline-layers first");
        return signalPassFailure();
      }

    // Positions: arguments at 0, ops from 1, the return reads to the end.
    llvm::DenseMap<Operation *, int64_t> index;
    int64_t position = 1;
    for (Operation &op : block)
      index[&op] = position++;
    const int64_t end = position;
    llvm::DenseMap<Value, Value> viewOf;
    for (Operation &op : block)
      if (isView(&op))
        viewOf[op.getResult(0)] = op.getOperand(0);
    auto root = [&](Value v) {
      for (auto it = viewOf.find(v); it != viewOf.end(); it = viewOf.find(v))
        v = it->second;
      return v;
    };
    llvm::DenseMap<Value, int64_t> defined, lastUse;
    auto touch = [&](Value v, int64_t at) {
      int64_t &last = lastUse[root(v)];
      last = std::max(last, at);
    };
    auto readAt = [&](Operation *user) {
      return isa<func::ReturnOp>(user) ? end : index.lookup(user);
    };
    for (BlockArgument arg : func.getArguments()) {
      defined[arg] = 0;
      for (Operation *user : arg.getUsers())
        touch(arg, readAt(block.findAncestorOpInBlock(*user)));
    }
    for (Operation &op : block)
      for (Value r : op.getResults()) {
        defined[r] = index[&op];
        touch(r, index[&op]);
        for (Operation *user : r.getUsers())
          touch(r, readAt(block.findAncestorOpInBlock(*user)));
      }
    // A collective reads its operand until the computation waits for it.
    for (WaitOp wait : block.getOps<WaitOp>()) {
      Operation *collective = wait.getInput().getDefiningOp();
      for (Value operand : collective->getOperands())
        touch(operand, index[wait]);
    }

    // Values that own a buffer, in order of definition.
    std::vector<Value> owners;
    for (BlockArgument arg : func.getArguments())
      owners.push_back(arg);
    for (Operation &op : block) {
      if (isView(&op) || loadedAsShard(&op))
        continue;
      for (Value r : op.getResults())
        if (isa<RankedTensorType>(r.getType()))
          owners.push_back(r);
    }
    // First fit among the buffers alive at each definition.
    llvm::DenseMap<Value, int64_t> offset;
    std::map<int64_t, std::pair<int64_t, int64_t>> live; // start -> size, last
    int64_t arena = 0, unshared = 0;
    for (Value v : owners) {
      int64_t at = defined.lookup(v);
      for (auto it = live.begin(); it != live.end();)
        it = it->second.second < at ? live.erase(it) : std::next(it);
      int64_t bytes = getTensorBytes(v.getType());
      int64_t size = std::max(kAlignment, (bytes + kAlignment - 1) /
                                              kAlignment * kAlignment);
      int64_t place = 0;
      for (auto &[start, entry] : live) {
        if (start - place >= size)
          break;
        place = std::max(place, start + entry.first);
      }
      live[place] = {size, lastUse.lookup(v)};
      offset[v] = place;
      arena = std::max(arena, place + size);
      unshared += size;
    }

    Builder b(&getContext());
    for (BlockArgument arg : func.getArguments())
      func.setArgAttr(arg.getArgNumber(),
                      WeftDialect::getBufferOffsetAttrName(),
                      b.getI64IntegerAttr(offset.lookup(arg)));
    for (Operation &op : block) {
      if (op.getNumResults() == 0)
        continue;
      SmallVector<int64_t> offsets;
      for (Value r : op.getResults()) {
        auto found = offset.find(r);
        offsets.push_back(found == offset.end() ? -1 : found->second);
      }
      op.setAttr(WeftDialect::getBufferOffsetsAttrName(),
                 b.getDenseI64ArrayAttr(offsets));
    }
    func->setAttr(WeftDialect::getArenaBytesAttrName(),
                  b.getI64IntegerAttr(arena));
    func->setAttr(WeftDialect::getBuffersAttrName(),
                  b.getI64IntegerAttr(int64_t(owners.size())));
    func->setAttr(WeftDialect::getUnsharedBytesAttrName(),
                  b.getI64IntegerAttr(unshared));
  }
};
} // namespace
