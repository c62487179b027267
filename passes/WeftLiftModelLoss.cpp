//===- WeftLiftModelLoss.cpp - A model's own loss as the step's loss ------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// Models are often written to compute their own loss: nanoGPT's forward(idx,
// targets) returns (logits, cross_entropy(logits, targets)), Hugging Face's
// ...ForCausalLM(input_ids, labels=input_ids) returns (loss, logits) with the
// labels shifted by one inside. A training step computes that loss itself
// (-weft-append-loss) from the labels it feeds, so this pass takes the loss
// out of the model: the logits it scores become the first result and the
// labels input goes, when the loss is the one the step computes.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace weft {
#define GEN_PASS_DEF_WEFTLIFTMODELLOSS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
/// Where one operand of the loss comes from: `base`, then at most one slice,
/// at most one padding (a concat with a constant after), reshapes and casts
/// (which keep the order of the elements).
struct Traced {
  Value base;
  SliceOp slice;
  ConcatOp padding;
  /// Whether every reshape kept the last dimension (the classes of logits).
  bool keepsLast = true;
};
} // namespace

static FailureOr<Traced> trace(Value value) {
  Traced traced;
  while (Operation *op = value.getDefiningOp()) {
    if (auto reshape = dyn_cast<ReshapeOp>(op)) {
      auto from = cast<RankedTensorType>(reshape.getInput().getType());
      auto to = cast<RankedTensorType>(reshape.getType());
      if (from.getRank() == 0 || to.getRank() == 0 ||
          from.getShape().back() != to.getShape().back())
        traced.keepsLast = false;
      value = reshape.getInput();
    } else if (auto cast = dyn_cast<CastOp>(op)) {
      value = cast.getInput();
    } else if (auto slice = dyn_cast<SliceOp>(op)) {
      if (traced.slice)
        return failure();
      traced.slice = slice;
      value = slice.getInput();
    } else if (auto concat = dyn_cast<ConcatOp>(op);
               concat && !traced.padding && concat.getInputs().size() == 2 &&
               concat.getInputs()[1].getDefiningOp<ConstantOp>()) {
      traced.padding = concat;
      value = concat.getInputs()[0];
    } else {
      break;
    }
  }
  traced.base = value;
  return traced;
}

/// `value` without the casts that produced it.
static Value castsStripped(Value value) {
  while (auto cast = value.getDefiningOp<CastOp>())
    value = cast.getInput();
  return value;
}

/// Whether `slice`, of a value of `shape`, keeps all of it but [start,
/// limit) of `axis`, with stride 1.
static bool slicesOnly(SliceOp slice, ArrayRef<int64_t> shape, int64_t axis,
                       int64_t start, int64_t limit) {
  if (cast<RankedTensorType>(slice.getInput().getType()).getShape() != shape ||
      axis < 0 || axis >= int64_t(shape.size()))
    return false;
  if (slice.getStrides() &&
      llvm::any_of(*slice.getStrides(), [](int64_t s) { return s != 1; }))
    return false;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    if (slice.getStarts()[d] != (d == axis ? start : 0) ||
        slice.getLimits()[d] != (d == axis ? limit : shape[d]))
      return false;
  return true;
}

/// Erases the ops of `block` that nothing reads and that have no effects,
/// last first.
static void eraseDead(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (op.use_empty() && !op.hasTrait<mlir::OpTrait::IsTerminator>() &&
        isMemoryEffectFree(&op))
      op.erase();
}

namespace {
struct WeftLiftModelLoss
    : public weft::impl::WeftLiftModelLossBase<WeftLiftModelLoss> {
  using WeftLiftModelLossBase::WeftLiftModelLossBase;

  void runOnOperation() override {
    func::FuncOp func;
    for (auto candidate : getOperation().getOps<func::FuncOp>())
      if (!func && !candidate.isExternal())
        func = candidate;
    if (!func)
      return;
    auto ret = cast<func::ReturnOp>(func.getBody().back().getTerminator());
    // The result that is a reduced cross-entropy, and any other that reads
    // one. (Per-token losses, reduction none, are the step's own:
    // -weft-append-loss writes them, and its mean reduces them.)
    std::optional<unsigned> lossResult;
    CrossEntropyOp loss;
    for (auto [i, value] : llvm::enumerate(ret.getOperands())) {
      auto found = castsStripped(value).getDefiningOp<CrossEntropyOp>();
      if (!found || found.getReduction() == LossReduction::none)
        continue;
      if (lossResult) {
        found.emitError("the model returns two losses (results #")
            << *lossResult << " and #" << i
            << "); a training step takes one: return the logits";
        return signalPassFailure();
      }
      lossResult = unsigned(i);
      loss = found;
    }
    // A loss that reaches the results some other way (weighted, summed with
    // another) is not the step's.
    WalkResult walk = func.walk([&](CrossEntropyOp op) {
      if (op == loss || op.getReduction() == LossReduction::none)
        return WalkResult::advance();
      SmallVector<Value> work{op.getResult()};
      llvm::DenseSet<Value> seen;
      while (!work.empty()) {
        Value v = work.pop_back_val();
        if (!seen.insert(v).second)
          continue;
        for (Operation *user : v.getUsers()) {
          if (isa<func::ReturnOp>(user)) {
            op.emitError("the model's results are computed from this "
                         "cross-entropy, which a training step does not "
                         "take apart: return the logits (and the loss as "
                         "cross_entropy(logits, labels) with reduction "
                         "'mean', if at all)");
            return WalkResult::interrupt();
          }
          for (Value result : user->getResults())
            work.push_back(result);
        }
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    if (!loss)
      return;
    if (loss.getReduction() != LossReduction::mean) {
      loss.emitError("the model's loss is a cross-entropy with reduction '")
          << stringifyLossReduction(loss.getReduction())
          << "'; a training step's loss is the mean over the tokens: return "
             "the logits, or the loss with reduction 'mean'";
      return signalPassFailure();
    }
    FailureOr<Traced> logits = trace(loss.getLogits());
    FailureOr<Traced> labels = trace(loss.getLabels());
    auto logitsType = succeeded(logits)
                          ? dyn_cast<RankedTensorType>(logits->base.getType())
                          : RankedTensorType();
    auto argument = succeeded(labels) ? dyn_cast<BlockArgument>(labels->base)
                                      : BlockArgument();
    auto describe = [&](InFlightDiagnostic diag) {
      diag << "; Weft takes a loss of the form cross_entropy(logits.view(-1, "
              "classes), targets.view(-1)) (nanoGPT's), or with the logits' "
              "last position and the labels' first dropped (Hugging Face's "
              "shift): return the logits instead";
      return signalPassFailure();
    };
    if (!logitsType || logitsType.getRank() < 2 || !logits->keepsLast)
      return describe(loss.emitError("the model's loss does not score logits "
                                     "[..., classes] of the model"));
    if (!argument || argument.getOwner() != &func.getBody().front())
      return describe(loss.emitError(
          "the model's loss does not take its labels from an input of the "
          "model"));
    auto labelsType = cast<RankedTensorType>(argument.getType());
    ArrayRef<int64_t> positions = logitsType.getShape().drop_back();
    if (labelsType.getShape() != positions)
      return describe(loss.emitError("the model's loss scores logits of ")
                      << logitsType << " against labels of " << labelsType);
    // Hugging Face's shift: logits[..., :-1, :] against labels[..., 1:];
    // or (transformers 4.46 on) every position's logits against the labels
    // padded by one ignored position and shifted, pad(labels, (0, 1),
    // value=-100)[..., 1:].
    const bool shifted = bool(logits->slice) || bool(labels->slice) ||
                         bool(logits->padding) || bool(labels->padding);
    const int64_t axis = int64_t(positions.size()) - 1;
    const int64_t length = positions.back();
    // (The slice and the padding act on the model's tensors themselves, not
    // on reshapes of them: a shift of the flattened positions would score
    // each row's last against the next row's first.)
    auto dropsFirst = [&](SliceOp slice) {
      ArrayRef<int64_t> shape =
          cast<RankedTensorType>(slice.getInput().getType()).getShape();
      return shape.size() == positions.size() &&
             slicesOnly(slice, shape, axis, 1, shape[axis]);
    };
    auto padsIgnored = [&](ConcatOp concat) {
      auto constant = concat.getInputs()[1].getDefiningOp<ConstantOp>();
      auto value = dyn_cast<DenseIntElementsAttr>(constant.getValue());
      auto type = cast<RankedTensorType>(concat.getInputs()[1].getType());
      return type.getRank() == int64_t(positions.size()) &&
             int64_t(concat.getAxis()) == axis && value && value.isSplat() &&
             type.getDimSize(axis) == 1 && loss.getIgnoreIndex() &&
             value.getSplatValue<APInt>().getSExtValue() ==
                 int64_t(*loss.getIgnoreIndex());
    };
    const bool cut =
        logits->slice && !logits->padding && labels->slice &&
        !labels->padding &&
        castsStripped(logits->slice.getInput()) == logits->base &&
        castsStripped(labels->slice.getInput()) == labels->base &&
        slicesOnly(logits->slice, logitsType.getShape(), axis, 0, length - 1) &&
        dropsFirst(labels->slice);
    // Padded then shifted, or shifted then padded.
    auto adjacent = [&](ConcatOp padding, SliceOp slice) {
      Value padded = castsStripped(padding.getInputs()[0]);
      return (castsStripped(slice.getInput()) == padding.getResult() &&
              padded == labels->base) ||
             (padded == slice.getResult() &&
              castsStripped(slice.getInput()) == labels->base);
    };
    const bool padded =
        !logits->slice && !logits->padding && labels->slice &&
        labels->padding && adjacent(labels->padding, labels->slice) &&
        dropsFirst(labels->slice) && padsIgnored(labels->padding);
    if (shifted && !cut && !padded)
      return describe(
          loss.emitError("the model's loss slices or pads its logits and "
                         "labels otherwise than by Hugging Face's shift"));
    // The logits first, then the other results but the loss.
    Value scored = logits->base;
    SmallVector<Value> results{scored};
    auto attrsOf = [&](unsigned i) -> Attribute {
      DictionaryAttr attrs = func.getResultAttrDict(i);
      return attrs ? attrs : DictionaryAttr::get(&getContext());
    };
    SmallVector<Attribute> resultAttrs{DictionaryAttr::get(&getContext())};
    for (auto [i, value] : llvm::enumerate(ret.getOperands()))
      if (i != *lossResult && value != scored) {
        results.push_back(value);
        resultAttrs.push_back(attrsOf(unsigned(i)));
      }
    for (auto [i, value] : llvm::enumerate(ret.getOperands()))
      if (value == scored)
        resultAttrs[0] = attrsOf(unsigned(i));
    OpBuilder b(ret);
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    eraseDead(func.getBody().front());
    // The labels input goes: the step feeds its own labels. Unshifted, the
    // model's labels are the next tokens, which it reads nowhere else;
    // shifted, they are the token ids, which a model may read as its input.
    auto name =
        func.getArgAttrOfType<StringAttr>(argument.getArgNumber(), "onnx.name");
    std::string input = "input #" + std::to_string(argument.getArgNumber()) +
                        (name ? " ('" + name.getValue().str() + "')" : "");
    if (!argument.use_empty() && !shifted) {
      emitError(argument.getLoc())
          << "the model reads its labels, " << input
          << ", beyond its loss; the labels of a training step are the "
             "next tokens, which the model must not see";
      return signalPassFailure();
    }
    if (argument.use_empty())
      (void)func.eraseArgument(argument.getArgNumber());
    SmallVector<Type> types;
    for (Value value : results)
      types.push_back(value.getType());
    func.setType(FunctionType::get(
        &getContext(), func.getBody().front().getArgumentTypes(), types));
    func.setAllResultAttrs(resultAttrs);
    if (explain)
      emitRemark(func.getLoc())
          << "the model computes its own loss, cross_entropy against " << input
          << (shifted ? " shifted by one position" : "")
          << "; the training step computes it from the logits, with the "
             "labels it feeds"
          << (shifted ? " (the next tokens, at every position: the model's "
                        "loss leaves out each row's last)"
                      : " (the next tokens)");
  }
};
} // namespace
