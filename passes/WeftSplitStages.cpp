//===- WeftSplitStages.cpp - Pipeline stages as functions -----------------===//
//
// Part of the Weft project.
//
// Cuts a model's function between its weft.layer ops into one function per
// virtual pipeline stage. What crosses a cut is explicit: results marked
// weft.sent_to and, in the same order, arguments marked weft.received_from.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"
#include "weft/Plan/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace weft {
#define GEN_PASS_DEF_WEFTSPLITSTAGES
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

static FunctionOpInterface interfaceOf(func::FuncOp func) {
  return cast<FunctionOpInterface>(func.getOperation());
}

namespace {
struct WeftSplitStages
    : public weft::impl::WeftSplitStagesBase<WeftSplitStages> {
  using WeftSplitStagesBase::WeftSplitStagesBase;

  /// Layers per virtual stage in model order, or failure (reported at
  /// `func`).
  FailureOr<SmallVector<int64_t>> layersPerStage(func::FuncOp func,
                                                 int64_t layers) {
    int64_t p = stages, v = chunks;
    SmallVector<int64_t> perRank;
    if (!stageLayers.empty()) {
      SmallVector<StringRef> pieces;
      StringRef(stageLayers).split(pieces, '/');
      for (StringRef piece : pieces) {
        int64_t n;
        if (piece.trim().getAsInteger(10, n) || n < 1) {
          func.emitError("-weft-split-stages: stage-layers '")
              << stageLayers
              << "' is not layer counts (each at least 1) separated by '/'";
          return failure();
        }
        perRank.push_back(n);
      }
      if (int64_t(perRank.size()) != p) {
        func.emitError("-weft-split-stages: stage-layers lists ")
            << perRank.size() << " stages but stages=" << p;
        return failure();
      }
      int64_t sum = 0;
      for (int64_t n : perRank)
        sum += n;
      if (sum != layers) {
        func.emitError("-weft-split-stages: stage-layers holds ")
            << sum << " layers but @" << func.getSymName() << " has " << layers
            << " (weft.layer ops)";
        return failure();
      }
    } else {
      if (layers % p) {
        func.emitError("-weft-split-stages: the ")
            << layers << " layers of @" << func.getSymName()
            << " do not divide into " << p
            << " stages; give stage-layers (e.g. 'stages=...' in the plan) or "
               "another pp";
        return failure();
      }
      perRank.assign(p, layers / p);
    }
    std::string uneven = checkChunkLayers(perRank, v);
    if (!uneven.empty()) {
      func.emitError("-weft-split-stages: ") << uneven;
      return failure();
    }
    std::vector<int64_t> chunked = chunkLayers(perRank, v);
    return SmallVector<int64_t>(chunked.begin(), chunked.end());
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stages < 1 || chunks < 1) {
      module.emitError("-weft-split-stages: stages and chunks must be at "
                       "least 1");
      return signalPassFailure();
    }
    if (module->hasAttr(WeftDialect::getPipelineAttrName())) {
      module.emitError("-weft-split-stages: the module is already split into "
                       "pipeline stages");
      return signalPassFailure();
    }
    func::FuncOp func;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal()) {
        if (func) {
          f.emitError("-weft-split-stages: the module has more than one "
                      "function; split one model at a time");
          return signalPassFailure();
        }
        func = f;
      }
    if (!func) {
      module.emitError("-weft-split-stages: no function to split");
      return signalPassFailure();
    }
    const int64_t p = stages, v = chunks, k = p * v;
    if (k == 1)
      return; // one stage: the function as it is
    if (!func.getBody().hasOneBlock()) {
      func.emitError("-weft-split-stages: @")
          << func.getSymName() << " has more than one block";
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    int64_t layerCount = 0;
    for (Operation *op : ops)
      layerCount += isa<LayerOp>(op);
    if (layerCount < p || (v > 1 && layerCount < k - 2)) {
      func.emitError("-weft-split-stages: @")
          << func.getSymName() << " has " << layerCount
          << " weft.layer ops, fewer than "
          << (v > 1 ? "stages x chunks - 2 = " : "stages = ")
          << (v > 1 ? k - 2 : p)
          << (layerCount ? "" : " (mark its layers with -weft-mark-layers)")
          << "; use a smaller pp or v";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> perStage = layersPerStage(func, layerCount);
    if (failed(perStage))
      return signalPassFailure();

    // Which ops are rebuilt wherever they are read (parameters, and what
    // the inputs, constants and parameters alone compute: position ids,
    // masks, rotary tables gathered from a cached buffer), and the stage of
    // the rest. Rebuilding them is cheaper than sending them, and their
    // gradients (if any reach a parameter) are summed across stages as a
    // tied weight's are.
    llvm::DenseSet<Operation *> rebuilt, inputDerived;
    llvm::DenseMap<Operation *, int64_t> stageOf;
    int64_t layerIndex = 0, currentStage = 0, left = (*perStage)[0];
    for (Operation *op : ops) {
      if (auto layer = dyn_cast<LayerOp>(op)) {
        while (left == 0) {
          ++currentStage;
          left = (*perStage)[currentStage];
        }
        --left;
        ++layerIndex;
        stageOf[op] = currentStage;
        continue;
      }
      if (isa<ParameterOp>(op)) {
        rebuilt.insert(op);
        inputDerived.insert(op);
        continue;
      }
      bool fromInputs = op->getNumRegions() == 0;
      int64_t stage = 0;
      for (Value operand : op->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (!def)
          continue;
        if (!inputDerived.contains(def))
          fromInputs = false;
        if (!rebuilt.contains(def))
          stage = std::max(stage, stageOf.lookup(def));
      }
      if (fromInputs) {
        inputDerived.insert(op);
        rebuilt.insert(op);
        continue;
      }
      // With no layer in the last chunk (Llama 3's layout), what follows the
      // last layer (final norm, output layer, loss) is that chunk's.
      if (layerIndex == layerCount && (*perStage)[k - 1] == 0)
        stage = k - 1;
      stageOf[op] = stage;
    }
    // With no layer in the first chunk, the embedding is that chunk's: the
    // ops computed from the inputs that only the first layer reads (through
    // one another) run there once, instead of being rebuilt where the first
    // layer runs, and their result is sent on.
    if ((*perStage)[0] == 0) {
      Operation *first = nullptr;
      for (Operation *op : ops)
        if (isa<LayerOp>(op)) {
          first = op;
          break;
        }
      llvm::DenseSet<Operation *> pinned;
      for (Operation *op : llvm::reverse(ops)) {
        if (!rebuilt.contains(op) || isa<ParameterOp>(op) || op->use_empty() ||
            !op->isBeforeInBlock(first))
          continue;
        bool onlyFirst = llvm::all_of(op->getUsers(), [&](Operation *user) {
          return user == first || pinned.contains(user);
        });
        if (onlyFirst)
          pinned.insert(op);
      }
      for (Operation *op : pinned) {
        rebuilt.erase(op);
        stageOf[op] = 0;
      }
    }

    // The ops each stage runs: its own, and the rebuilt ops they read (and
    // the last stage the rebuilt ops the function returns).
    std::vector<llvm::DenseSet<Operation *>> included(k);
    for (Operation *op : ops)
      if (!rebuilt.contains(op))
        included[stageOf.lookup(op)].insert(op);
    for (Value value : ret.getOperands())
      if (Operation *def = value.getDefiningOp())
        if (rebuilt.contains(def))
          included[k - 1].insert(def);
    for (int64_t s = 0; s < k; ++s)
      for (Operation *op : llvm::reverse(ops)) {
        if (!included[s].contains(op))
          continue;
        for (Value operand : op->getOperands())
          if (Operation *def = operand.getDefiningOp())
            if (rebuilt.contains(def))
              included[s].insert(def);
      }
    // The stage that returns each output; with no layer in the last chunk,
    // the last stage returns them all (a model without an output layer
    // passes its last layer's result through).
    const bool lastEmpty = (*perStage)[k - 1] == 0;
    SmallVector<int64_t> outputStage;
    for (Value value : ret.getOperands()) {
      Operation *def = value.getDefiningOp();
      outputStage.push_back(def && !rebuilt.contains(def) && !lastEmpty
                                ? stageOf.lookup(def)
                                : k - 1);
    }
    // live[s]: the values made on stages <= s that a later stage reads, in
    // program order.
    std::vector<llvm::SetVector<Value>> live(k);
    for (Operation *op : ops) {
      if (rebuilt.contains(op))
        continue;
      int64_t made = stageOf.lookup(op);
      for (Value result : op->getResults()) {
        int64_t lastReader = -1;
        for (Operation *user : result.getUsers())
          if (user == ret ? lastEmpty : !rebuilt.contains(user))
            lastReader = std::max(lastReader,
                                  user == ret ? k - 1 : stageOf.lookup(user));
        for (int64_t s = made; s < lastReader; ++s)
          live[s].insert(result);
      }
    }

    MLIRContext *ctx = &getContext();
    OpBuilder b(func);
    auto i64 = [&](int64_t n) { return b.getI64IntegerAttr(n); };
    for (int64_t s = 0; s < k; ++s) {
      // Arguments: the model's inputs this stage reads, then what it
      // receives.
      SmallVector<unsigned> inputs;
      for (BlockArgument arg : func.getArguments()) {
        bool read = false;
        for (Operation *user : arg.getUsers())
          read |= included[s].contains(user) || (user == ret && s == k - 1);
        if (read)
          inputs.push_back(arg.getArgNumber());
      }
      SmallVector<Type> argTypes, resultTypes;
      for (unsigned i : inputs)
        argTypes.push_back(func.getArgument(i).getType());
      if (s > 0)
        for (Value value : live[s - 1])
          argTypes.push_back(value.getType());
      SmallVector<Value> sent, outputs;
      SmallVector<unsigned> outputIndices;
      if (s < k - 1)
        sent.assign(live[s].begin(), live[s].end());
      for (auto [index, value] : llvm::enumerate(ret.getOperands()))
        if (outputStage[index] == s) {
          outputs.push_back(value);
          outputIndices.push_back(index);
        }
      for (Value value : sent)
        resultTypes.push_back(value.getType());
      for (Value value : outputs)
        resultTypes.push_back(value.getType());

      std::string name = (func.getSymName() + "_stage" + Twine(s)).str();
      auto stageFunc =
          func::FuncOp::create(b, func.getLoc(), name,
                               FunctionType::get(ctx, argTypes, resultTypes));
      stageFunc->setAttr(WeftDialect::getPipelineStageAttrName(),
                         b.getDictionaryAttr({
                             b.getNamedAttr("stage", i64(s)),
                             b.getNamedAttr("rank", i64(s % p)),
                             b.getNamedAttr("chunk", i64(s / p)),
                         }));
      Block *entry = stageFunc.addEntryBlock();
      IRMapping map;
      for (auto [position, i] : llvm::enumerate(inputs)) {
        map.map(func.getArgument(i), entry->getArgument(position));
        SmallVector<NamedAttribute> attrs =
            llvm::to_vector(interfaceOf(func).getArgAttrs(i));
        attrs.push_back(
            b.getNamedAttr(WeftDialect::getModelInputAttrName(), i64(i)));
        stageFunc.setArgAttrs(position, attrs);
      }
      if (s > 0)
        for (auto [position, value] : llvm::enumerate(live[s - 1])) {
          unsigned arg = inputs.size() + position;
          map.map(value, entry->getArgument(arg));
          stageFunc.setArgAttr(arg, WeftDialect::getReceivedFromAttrName(),
                               i64(s - 1));
        }
      OpBuilder inside = OpBuilder::atBlockEnd(entry);
      for (Operation *op : ops)
        if (included[s].contains(op))
          inside.clone(*op, map);
      SmallVector<Value> results;
      for (Value value : sent)
        results.push_back(map.lookup(value));
      for (Value value : outputs)
        results.push_back(map.lookupOrDefault(value));
      func::ReturnOp::create(inside, ret.getLoc(), results);
      for (unsigned r = 0; r < sent.size(); ++r)
        stageFunc.setResultAttr(r, WeftDialect::getSentToAttrName(),
                                i64(s + 1));
      for (auto [position, index] : llvm::enumerate(outputIndices)) {
        unsigned r = sent.size() + position;
        SmallVector<NamedAttribute> attrs =
            llvm::to_vector(interfaceOf(func).getResultAttrs(index));
        attrs.push_back(
            b.getNamedAttr(WeftDialect::getModelOutputAttrName(), i64(index)));
        stageFunc.setResultAttrs(r, attrs);
      }
      if (!sent.empty() || !outputs.empty())
        continue;
      stageFunc.emitError("-weft-split-stages: stage ")
          << s << " passes nothing on and returns nothing";
      return signalPassFailure();
    }
    module->setAttr(WeftDialect::getPipelineAttrName(),
                    b.getDictionaryAttr({b.getNamedAttr("stages", i64(p)),
                                         b.getNamedAttr("chunks", i64(v))}));
    func.erase();
  }
};
} // namespace
