//===- WeftApplyPlan.cpp - Plans onto IR: annotate, propagate, unfuse -----===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/RingLayout.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftElements.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"
#include "weft/Plan/Plan.h"
#include "weft/plan.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"

#include <climits>
#include <deque>

namespace weft {
#define GEN_PASS_DEF_WEFTUNFUSEPROJECTIONS
#define GEN_PASS_DEF_WEFTAPPLYPLAN
#define GEN_PASS_DEF_WEFTPROPAGATESHARDING
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

//===----------------------------------------------------------------------===//
// -weft-unfuse-projections
//===----------------------------------------------------------------------===//

namespace {
struct WeftUnfuseProjections
    : public weft::impl::WeftUnfuseProjectionsBase<WeftUnfuseProjections> {
  void runOnOperation() override {
    SmallVector<LinearOp> linears;
    getOperation().walk([&](LinearOp linear) { linears.push_back(linear); });
    for (LinearOp linear : linears)
      (void)unfuse(linear);
  }

  /// The value of a one-element integer constant.
  static std::optional<int64_t> constantIndex(Value value) {
    auto constant = value.getDefiningOp<ConstantOp>();
    auto elements = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                             : DenseElementsAttr();
    if (!elements || elements.getNumElements() != 1 ||
        !isa<IntegerType>(elements.getElementType()))
      return std::nullopt;
    return (*elements.getValues<APInt>().begin()).getSExtValue();
  }

  /// A piece of a fused projection's output: columns [start, start + size)
  /// of the last dimension, which `result` holds (maybe reshaped).
  struct Piece {
    Value result;
    int64_t start, size;
  };

  /// How the fused output is cut, if it is only cut along its last
  /// dimension: by one split (GPT-2's c_attn.split), by slices
  /// (h[..., :d], h[..., d:2d], ...), or viewed as [..., n, rest] and indexed
  /// on n with constants (qkv.view(b, s, 3, h, d)[:, :, i]).
  static std::optional<SmallVector<Piece>> piecesOf(LinearOp linear) {
    Value out = linear.getResult();
    auto type = cast<RankedTensorType>(out.getType());
    int64_t rank = type.getRank(), width = type.getShape().back();
    SmallVector<Piece> pieces;
    if (out.use_empty())
      return std::nullopt;
    if (auto split = dyn_cast<SplitOp>(*out.getUsers().begin());
        split && out.hasOneUse()) {
      if (int64_t(split.getAxis()) != rank - 1)
        return std::nullopt;
      int64_t offset = 0;
      for (Value result : split.getResults()) {
        int64_t size =
            cast<RankedTensorType>(result.getType()).getShape().back();
        pieces.push_back({result, offset, size});
        offset += size;
      }
      return pieces;
    }
    if (auto reshape = dyn_cast<ReshapeOp>(*out.getUsers().begin());
        reshape && out.hasOneUse()) {
      // [..., width] -> [..., n, rest...] with the leading dims kept.
      ArrayRef<int64_t> shape = reshape.getType().getShape();
      if (int64_t(shape.size()) <= rank ||
          shape.take_front(rank - 1) != type.getShape().drop_back() ||
          reshape->use_empty())
        return std::nullopt;
      int64_t n = shape[rank - 1], rest = width / std::max<int64_t>(n, 1);
      for (Operation *user : reshape->getUsers()) {
        auto gather = dyn_cast<GatherOp>(user);
        std::optional<int64_t> index =
            gather ? constantIndex(gather.getIndices()) : std::nullopt;
        if (!gather || int64_t(gather.getAxis()) != rank - 1 || !index ||
            cast<RankedTensorType>(gather.getIndices().getType()).getRank() !=
                0 ||
            *index < 0 || *index >= n)
          return std::nullopt;
        pieces.push_back({gather.getResult(), *index * rest, rest});
      }
      llvm::sort(pieces, [](const Piece &a, const Piece &b) {
        return a.start < b.start;
      });
      return pieces;
    }
    for (Operation *user : out.getUsers()) {
      auto slice = dyn_cast<SliceOp>(user);
      if (!slice ||
          (slice.getStrides() &&
           llvm::any_of(*slice.getStrides(), [](int64_t s) { return s != 1; })))
        return std::nullopt;
      ArrayRef<int64_t> starts = slice.getStarts(), limits = slice.getLimits();
      for (int64_t d = 0; d + 1 < rank; ++d)
        if (starts[d] != 0 || limits[d] != type.getDimSize(d))
          return std::nullopt;
      pieces.push_back(
          {slice.getResult(), starts.back(), limits.back() - starts.back()});
    }
    // Only a true cut: slices that each take a part, not the whole.
    if (pieces.size() < 2)
      return std::nullopt;
    // Users come in no particular order; name the parts by column.
    llvm::sort(pieces, [](const Piece &a, const Piece &b) {
      return a.start < b.start;
    });
    return pieces;
  }

  /// A slice [start, start + size) of a parameter along dimension `dim`
  /// (its last, or its first for a weight stored [out, in]): of its inline
  /// value, a window of its external data, or shape only when it has
  /// neither (a model imported for planning). Rows of an external tensor are
  /// one byte range; columns are a window of each row. Null when the
  /// external data is already a window that rows cannot be cut from.
  static ParameterOp sliceParameter(OpBuilder &b, ParameterOp param,
                                    int64_t dim, int64_t start, int64_t size,
                                    int index) {
    auto type = cast<RankedTensorType>(param.getType());
    const int64_t last = type.getRank() - 1;
    SmallVector<int64_t> starts(type.getRank(), 0);
    SmallVector<int64_t> limits(type.getShape());
    starts[dim] = start;
    limits[dim] = start + size;
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = size;
    auto sliceType = RankedTensorType::get(shape, type.getElementType());
    ElementsAttr value = param.getValue()
                             ? sliceElements(*param.getValue(), starts, limits)
                             : ElementsAttr();
    ExternalDataAttr external;
    if (ExternalDataAttr whole = param.getExternalAttr()) {
      if (dim == last) {
        external = ExternalDataAttr::get(
            b.getContext(), whole.getLocation(), whole.getOffset(),
            whole.getLength(), whole.getColumnStart() + start,
            whole.getRowWidth() ? whole.getRowWidth() : type.getShape().back(),
            whole.getStored());
      } else {
        if (whole.getRowWidth() || dim != 0)
          return ParameterOp();
        // Rows of the stored elements.
        Type element =
            whole.getStored() ? whole.getStored() : type.getElementType();
        int64_t rowBytes =
            getTensorBytes(type.clone(element)) / type.getDimSize(0);
        external =
            ExternalDataAttr::get(b.getContext(), whole.getLocation(),
                                  whole.getOffset() + start * rowBytes,
                                  size * rowBytes, 0, 0, whole.getStored());
      }
    }
    return ParameterOp::create(
        b, param.getLoc(), sliceType,
        b.getStringAttr(param.getName() + ".part" + std::to_string(index)),
        value, external);
  }

  LogicalResult unfuse(LinearOp linear) {
    // nn.Linear's weight is [out, in] (transpose_weight): its pieces are
    // rows; a weight stored [in, out] (GPT-2's Conv1D) is cut in columns.
    const bool transposed = linear.getTransposeWeight();
    auto weight = linear.getWeight().getDefiningOp<ParameterOp>();
    ParameterOp bias =
        linear.getBias() ? linear.getBias().getDefiningOp<ParameterOp>()
                         : ParameterOp();
    // Parameters in external files become column windows of the same
    // bytes. A bias that is not a parameter of its own (exporters share
    // equal initializers, e.g. nn.MultiheadAttention's zero in_proj biases
    // across layers) is sliced as a value.
    if (!weight)
      return failure();
    std::optional<SmallVector<Piece>> pieces = piecesOf(linear);
    if (!pieces)
      return failure();
    const int64_t weightDim =
        transposed ? 0 : cast<RankedTensorType>(weight.getType()).getRank() - 1;
    if (transposed && cast<RankedTensorType>(weight.getType()).getRank() != 2)
      return failure();
    // A weight whose external bytes cannot be cut stays fused.
    if (ExternalDataAttr whole = weight.getExternalAttr();
        whole && transposed && whole.getRowWidth())
      return failure();
    SmallVector<Operation *> cuts;
    for (Piece &piece : *pieces)
      if (Operation *cut = piece.result.getDefiningOp();
          !llvm::is_contained(cuts, cut))
        cuts.push_back(cut);
    OpBuilder b(linear);
    b.setInsertionPointAfter(linear);
    auto outType = linear.getType();
    for (auto [index, piece] : llvm::enumerate(*pieces)) {
      ParameterOp w =
          sliceParameter(b, weight, weightDim, piece.start, piece.size, index);
      Value pieceBias;
      if (bias)
        pieceBias =
            sliceParameter(b, bias, /*dim=*/0, piece.start, piece.size, index);
      else if (linear.getBias())
        pieceBias = SliceOp::create(b, linear.getLoc(), linear.getBias(),
                                    ArrayRef<int64_t>{piece.start},
                                    ArrayRef<int64_t>{piece.start + piece.size},
                                    DenseI64ArrayAttr());
      SmallVector<int64_t> shape(outType.getShape());
      shape.back() = piece.size;
      Value value = LinearOp::create(b, linear.getLoc(), outType.clone(shape),
                                     linear.getInput(), w, pieceBias,
                                     transposed ? b.getUnitAttr() : UnitAttr());
      if (value.getType() != piece.result.getType())
        value = ReshapeOp::create(b, piece.result.getLoc(),
                                  piece.result.getType(), value);
      piece.result.replaceAllUsesWith(value);
    }
    for (Operation *cut : cuts) {
      Value input = cut->getOperand(0);
      cut->erase();
      // The view between the projection and the indexing (view5 form).
      if (Operation *view = input.getDefiningOp();
          view && view != linear && view->use_empty())
        view->erase();
    }
    linear.erase();
    if (weight->use_empty())
      weight.erase();
    if (bias && bias->use_empty())
      bias.erase();
    return success();
  }
};
} // namespace

//===----------------------------------------------------------------------===//
// -weft-apply-plan
//===----------------------------------------------------------------------===//

/// Every weft.parameter of one name gets the sharding the first annotated
/// one of them was given. Each layer reads its weights through its own
/// parameter ops: a backward layer that does not recompute the forward
/// (selective or no recomputation) has no attention to find its projections
/// by, and would otherwise read the whole weight where the forward reads a
/// block (correct, but a weight each rank holds in blocks, and a step that
/// computes with whole weights).
static void shareParameterShardings(func::FuncOp func, StringRef mesh) {
  llvm::StringMap<TensorSharding> given;
  func.walk([&](ParameterOp param) {
    if (std::optional<TensorSharding> s = getSharding(param.getResult()))
      given.try_emplace(param.getName(), *s);
  });
  func.walk([&](ParameterOp param) {
    auto it = given.find(param.getName());
    if (it == given.end())
      return;
    for (Value weight : getWeightValues(param))
      if (!getSharding(weight))
        setSharding(weight, mesh, it->second);
  });
}

/// The residual stream at each top-level layer's boundary: the values that
/// carry it into the layer (its first input and the body's first argument)
/// and out of it (the first yielded value and the layer's first result).
static SmallVector<Value> layerResiduals(func::FuncOp func) {
  SmallVector<Value> residuals;
  for (LayerOp layer : func.getBody().getOps<LayerOp>()) {
    if (layer.getInputs().empty() || layer.getNumResults() == 0)
      continue;
    Block &body = layer.getBody().front();
    residuals.push_back(layer.getInputs().front());
    residuals.push_back(body.getArgument(0));
    residuals.push_back(
        cast<YieldOp>(body.getTerminator()).getValues().front());
    residuals.push_back(layer.getResult(0));
  }
  return residuals;
}

namespace {
struct PlanDegrees {
  int64_t dp = 1, tp = 1, cp = 1, ulysses = 1;
  bool sp = false;
  /// K and V all-gathered over cp instead of passed around a ring.
  bool cpGather = false;
  /// AxoNN's 3-D tensor-parallel grid (1 x 1 x 1: unused).
  int64_t gx = 1, gy = 1, gz = 1;
  bool threeD() const { return gx * gy * gz > 1; }
};

struct WeftApplyPlan : public weft::impl::WeftApplyPlanBase<WeftApplyPlan> {
  using LinearSet = llvm::SetVector<Operation *>;

  using WeftApplyPlanBase::WeftApplyPlanBase;

  /// The degrees to apply: the options, or the plan file's, which must
  /// not hold fields that this program cannot apply.
  LogicalResult readPlan(ModuleOp module, PlanDegrees &degrees) {
    std::optional<plan::CpComm> comm = parseCpCommName(cpComm);
    if (!comm)
      return module.emitError("cp-comm is 'ring' or 'all-gather', got '")
             << cpComm << "'";
    degrees = {dp, tp, cp, ulysses, sp, *comm == plan::CP_COMM_ALL_GATHER,
               gx, gy, gz};
    if (planFile.empty())
      return success();
    llvm::Expected<plan::Plan> chosen = readPlanFile(planFile);
    if (!chosen)
      return module.emitError(llvm::toString(chosen.takeError()));
    std::vector<std::string> unapplied = unappliedPlanFields(*chosen);
    if (!unapplied.empty()) {
      InFlightDiagnostic diag = module.emitError("the plan in '")
                                << planFile << "' has fields a forward "
                                << "program does not apply:";
      for (const std::string &field : unapplied)
        diag << "\n  " << field;
      return diag;
    }
    degrees.dp = std::max(1, chosen->dp());
    degrees.tp = std::max(1, chosen->tp());
    degrees.cp = std::max(1, chosen->cp());
    degrees.ulysses = std::max(1, chosen->ulysses());
    degrees.sp = chosen->sequence_parallel();
    degrees.cpGather = chosen->cp_comm() == plan::CP_COMM_ALL_GATHER;
    degrees.gx = std::max(1, chosen->gx());
    degrees.gy = std::max(1, chosen->gy());
    degrees.gz = std::max(1, chosen->gz());
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    PlanDegrees d;
    if (failed(readPlan(module, d)))
      return signalPassFailure();
    if (d.dp < 1 || d.tp < 1 || d.cp < 1 || d.ulysses < 1 || d.gx < 1 ||
        d.gy < 1 || d.gz < 1) {
      module.emitError("plan degrees must be at least 1");
      return signalPassFailure();
    }
    if (d.threeD() && (d.tp > 1 || d.cp > 1 || d.ulysses > 1 || d.sp)) {
      module.emitError(
          "plan: 3-D tensor parallelism (tp3d) takes the place of Megatron's "
          "tp and does not combine with tp, sp, cp or ulysses yet; use tp3d "
          "with dp (and pp)");
      return signalPassFailure();
    }
    if (d.sp && d.tp == 1)
      d.sp = false;
    // The model's function, or each of its pipeline stages
    // (-weft-split-stages): every one is partitioned over the same mesh,
    // with the pipeline axis `pp` first and splitting no tensor.
    SmallVector<func::FuncOp> functions;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal() &&
          (functions.empty() ||
           f->hasAttr(WeftDialect::getPipelineStageAttrName())))
        functions.push_back(f);
    if (functions.empty()) {
      module.emitError("no function to partition");
      return signalPassFailure();
    }
    if (getMeshInfo(module)) {
      module.emitError("the module already has a weft.mesh; apply a plan to an "
                       "unpartitioned model");
      return signalPassFailure();
    }
    int64_t pp = 1;
    if (auto pipeline = module->getAttrOfType<DictionaryAttr>(
            WeftDialect::getPipelineAttrName()))
      if (auto stages = pipeline.getAs<IntegerAttr>("stages"))
        pp = stages.getInt();
    OpBuilder mb(module.getBodyRegion());
    mb.setInsertionPointToStart(module.getBody());
    if (d.threeD()) {
      // The 3-D grid's axes: gz (depth) major, gx minor, as AxoNN lays
      // its groups out (the gx all-reduces are the largest).
      SmallVector<StringRef> names;
      SmallVector<int64_t> sizes;
      if (pp > 1) {
        names.push_back("pp");
        sizes.push_back(pp);
      }
      names.append({"dp", "gz", "gy", "gx"});
      sizes.append({d.dp, d.gz, d.gy, d.gx});
      MeshOp::create(mb, module.getLoc(), "mesh", mb.getStrArrayAttr(names),
                     sizes);
    } else if (pp > 1)
      MeshOp::create(mb, module.getLoc(), "mesh",
                     mb.getStrArrayAttr({"pp", "dp", "cp", "ulysses", "tp"}),
                     ArrayRef<int64_t>{pp, d.dp, d.cp, d.ulysses, d.tp});
    else
      MeshOp::create(mb, module.getLoc(), "mesh",
                     mb.getStrArrayAttr({"dp", "cp", "ulysses", "tp"}),
                     ArrayRef<int64_t>{d.dp, d.cp, d.ulysses, d.tp});
    // The token embedding's vocabulary, which the output layer may share
    // from another stage.
    int64_t vocab = 0;
    module.walk([&](EmbeddingOp e) {
      if (isa<BlockArgument>(e.getIndices()))
        vocab = e.getTable().getType().getDimSize(0);
    });
    // The sequence and the residual stream's width, for pipeline stages
    // that hold no layer (an interleaved rank's chunk with only the
    // embedding or only the output layer).
    int64_t anySeq = 0, anyHidden = 0;
    for (func::FuncOp func : functions) {
      func.walk(
          [&](AttentionOp op) { anySeq = op.getQ().getType().getDimSize(2); });
      for (Value residual : layerResiduals(func))
        if (auto type = dyn_cast<RankedTensorType>(residual.getType()))
          if (type.getRank() == 3)
            anyHidden = type.getDimSize(2);
    }
    if (!anySeq && (d.tp > 1 || d.cp > 1 || d.ulysses > 1)) {
      functions.front().emitError(
          "the plan splits heads or the sequence, but the model has no "
          "weft.attention: the import raised none of its attentions (one "
          "written in a form it does not recognize, such as scores through "
          "a function other than a scale, a soft cap or a mask, stays "
          "matmuls and a softmax, which only data and pipeline parallelism "
          "split). "
          "`weft import "
          "--explain-raise MODEL` names the op that stopped each match; "
          "plan with tp=1, cp=1 and ulysses=1, or write the attention as "
          "softmax(q k^T * scale + mask) v");
      return signalPassFailure();
    }
    for (func::FuncOp func : functions)
      if (failed(annotate(func, d, vocab, anySeq, anyHidden, mb)))
        return signalPassFailure();
  }

  /// Rebuilds a causal (or ALiBi) weft.attention_grad with its queries' and
  /// keys' positions (0, 1, ...): the same mask and biases, which then split
  /// with them.
  static void givePositions(AttentionGradOp grad) {
    OpBuilder b(grad);
    Location loc = grad.getLoc();
    auto positions = [&](Value x) -> Value {
      int64_t n = cast<RankedTensorType>(x.getType()).getDimSize(2);
      return IotaOp::create(b, loc, RankedTensorType::get({n}, b.getI64Type()),
                            0);
    };
    auto with = AttentionGradOp::create(
        b, loc, grad.getQ(), grad.getK(), grad.getV(), grad.getResultGrad(),
        grad.getMask(), grad.getAlibiSlopes(), positions(grad.getQ()),
        positions(grad.getK()), grad.getOut(), grad.getLse(),
        grad.getScaleAttr(), grad.getCausalAttr(), grad.getDropoutAttr(),
        grad.getSoftcapAttr(), grad.getWindowAttr(),
        grad.getVisiblePairsAttr());
    for (NamedAttribute attr : grad->getDiscardableAttrs())
      with->setAttr(attr.getName(), attr.getValue());
    grad->replaceAllUsesWith(with);
    grad->erase();
  }

  /// Annotates one function (the model, or one pipeline stage) under `d`.
  /// `anySeq` and `anyHidden` are the module's, for a function without
  /// attention or layers of its own.
  LogicalResult annotate(func::FuncOp func, const PlanDegrees &d, int64_t vocab,
                         int64_t anySeq, int64_t anyHidden, OpBuilder &mb) {
    SmallVector<Value> residuals = layerResiduals(func);
    // KV heads fewer than the ways heads are split are repeated
    // (-weft-repeat-kv-heads; a training step's were before it was
    // differentiated). 3-D tensor parallelism splits heads over gy and needs
    // KV heads that divide by it.
    if (!d.threeD())
      repeatKeyValueHeads(func, d.tp * d.ulysses);
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp op) { attentions.push_back(op); });
    // The ring's sequence in the load-balanced (zigzag) layout, unless every
    // attention it carries is balanced over contiguous chunks (a causal
    // sliding window of at most an eighth of the sequence).
    const bool balanced =
        loadBalance &&
        (attentions.empty() || llvm::any_of(attentions, [](AttentionOp att) {
           return ringNeedsLoadBalance(att.getQ().getType().getDimSize(2),
                                       att.getCausal(),
                                       windowOrZero(att.getWindow()));
         }));

    // The plan must divide the shapes it splits.
    int64_t seq = attentions.empty() ? anySeq : 0;
    int64_t hidden = residuals.empty() ? anyHidden : 0;
    for (AttentionOp att : attentions) {
      auto q = att.getQ().getType(), k = att.getK().getType();
      int64_t heads = q.getDimSize(1), kvHeads = k.getDimSize(1);
      seq = q.getDimSize(2);
      if (d.threeD() && (heads % d.gy || kvHeads % d.gy)) {
        att.emitError("plan: the ")
            << heads << " attention heads (" << kvHeads
            << " KV heads) are not divisible by gy (" << d.gy
            << "), the 3-D grid's axis that splits them";
        return failure();
      }
      if (heads % (d.tp * d.ulysses)) {
        att.emitError("plan: the ")
            << heads << " attention heads are not divisible by tp x ulysses ("
            << d.tp * d.ulysses << ")";
        return failure();
      }
      if (kvHeads % (d.tp * d.ulysses) && (d.tp * d.ulysses) % kvHeads) {
        att.emitError("plan: the ")
            << kvHeads << " KV heads and tp x ulysses (" << d.tp * d.ulysses
            << ") do not divide one another (KV heads are split when they "
               "divide by it, and repeated when it divides by them)";
        return failure();
      }
      int64_t seqSplit =
          d.cp * d.ulysses * (d.sp ? d.tp : 1) * (d.cp > 1 && balanced ? 2 : 1);
      if (k.getDimSize(2) != seq && d.cp * d.ulysses > 1) {
        att.emitError("plan: the attention's queries (")
            << seq << ") and keys (" << k.getDimSize(2)
            << ") differ in length (cross-attention, as an encoder-decoder's "
               "decoder has); context parallelism and Ulysses split the "
               "sequence of self-attention only: choose cp=1 and ulysses=1 "
               "(Megatron's sequence parallelism, sp, applies)";
        return failure();
      }
      if (seq % seqSplit) {
        att.emitError("plan: the sequence (")
            << seq << ") is not divisible by "
            << (d.cp > 1 && balanced ? "2 x " : "") << "cp x ulysses"
            << (d.sp ? " x tp" : "") << " (" << seqSplit << ")";
        return failure();
      }
    }
    for (Value residual : residuals) {
      auto type = dyn_cast<RankedTensorType>(residual.getType());
      if (type && type.getRank() == 3)
        hidden = type.getDimSize(2);
    }
    StringRef mesh = "mesh";
    if (d.cp > 1 && balanced)
      func->setAttr(WeftDialect::getLoadBalancedAttrName(),
                    mb.getStrArrayAttr({"cp"}));
    auto axesFor = [&](std::initializer_list<std::pair<const char *, int64_t>>
                           list) {
      SmallVector<std::string, 2> axes;
      for (auto [name, size] : list)
        if (size > 1)
          axes.push_back(name);
      return axes;
    };
    SmallVector<std::string, 2> batchAxes =
        axesFor({{"dp", d.dp}, {"gz", d.gz}});
    const int64_t batchSplit = d.dp * d.gz;
    SmallVector<std::string, 2> seqAxes =
        axesFor({{"cp", d.cp}, {"ulysses", d.ulysses}});
    SmallVector<std::string, 2> residualSeq =
        axesFor({{"cp", d.cp}, {"ulysses", d.ulysses}, {"tp", d.sp ? d.tp : 1}});
    SmallVector<std::string, 2> tpAxes = axesFor({{"tp", d.tp}});
    SmallVector<std::string, 2> headAxes =
        d.threeD() ? axesFor({{"gy", d.gy}})
                   : axesFor({{"tp", d.tp}, {"ulysses", d.ulysses}});
    SmallVector<std::string, 2> cpAxes = axesFor({{"cp", d.cp}});

    // A [batch, sequence, ...] activation: batch and sequence split.
    auto annotateActivation = [&](Value value, ArrayRef<std::string> seqSplit) {
      auto type = dyn_cast<RankedTensorType>(value.getType());
      if (!type || type.getRank() < 1)
        return;
      TensorSharding s = TensorSharding::replicated(type.getRank());
      if (type.getDimSize(0) % batchSplit == 0)
        s.dims[0].assign(batchAxes.begin(), batchAxes.end());
      if (type.getRank() >= 2 && seq && type.getDimSize(1) == seq)
        s.dims[1].assign(seqSplit.begin(), seqSplit.end());
      setSharding(value, mesh, s);
    };
    if (func.getNumArguments() &&
        cast<RankedTensorType>(func.getArgument(0).getType()).getDimSize(0) %
            batchSplit) {
      func.emitError("plan: the batch (")
          << cast<RankedTensorType>(func.getArgument(0).getType()).getDimSize(0)
          << ") is not divisible by dp" << (d.gz > 1 ? " x gz" : "") << " ("
          << batchSplit << ")";
      return failure();
    }
    // A [batch, sequence, hidden] activation between layers.
    auto isResidual = [&](RankedTensorType type) {
      return type.getRank() == 3 && hidden && type.getDimSize(2) == hidden;
    };
    for (BlockArgument arg : func.getArguments()) {
      // What a stage receives from the previous one, and the gradient of
      // what it sent to the next, come as the residual stream.
      bool received =
          (func.getArgAttr(arg.getArgNumber(),
                           WeftDialect::getReceivedFromAttrName()) ||
           func.getArgAttr(arg.getArgNumber(),
                           WeftDialect::getCotangentOfAttrName())) &&
          isResidual(cast<RankedTensorType>(arg.getType()));
      annotateActivation(arg, received ? residualSeq : seqAxes);
    }
    for (Value residual : residuals)
      annotateActivation(residual, residualSeq);
    // Other [batch, sequence, hidden] values crossing a layer's boundary:
    // a backward layer takes the residual stream's gradient after its
    // forward inputs (and a cross-attention layer an encoder's output).
    // Left to propagation, they come whole and every rank's backward
    // gathers the batch.
    for (LayerOp layer : func.getBody().getOps<LayerOp>()) {
      Block &body = layer.getBody().front();
      auto yield = cast<YieldOp>(body.getTerminator());
      for (auto [input, arg] :
           llvm::zip(layer.getInputs(), body.getArguments()))
        if (isResidual(cast<RankedTensorType>(input.getType())) &&
            !getSharding(arg)) {
          annotateActivation(input, residualSeq);
          annotateActivation(arg, residualSeq);
        }
      // A result is kept in the residual stream's layout; the value the
      // body yields for it is left to propagation, so that the annotation
      // does not reach back into the forward's ops (under Megatron SP, a
      // kept LayerNorm output split along the sequence would otherwise
      // carry that split through the column-parallel q, k, v and MLP
      // projections it feeds, which the forward program keeps split over
      // their columns) and the forward layer computes what a forward
      // program computes.
      (void)yield;
      for (Value result : layer.getResults())
        if (isa<RankedTensorType>(result.getType()) &&
            isResidual(cast<RankedTensorType>(result.getType())) &&
            !getSharding(result))
          annotateActivation(result, residualSeq);
    }
    for (AttentionOp att : attentions) {
      TensorSharding s = TensorSharding::replicated(4);
      s.dims[0].assign(batchAxes.begin(), batchAxes.end());
      s.dims[1].assign(headAxes.begin(), headAxes.end());
      s.dims[2].assign(cpAxes.begin(), cpAxes.end());
      setSharding(att.getResult(), mesh, s);
      if (d.cp > 1)
        att->setAttr(WeftDialect::getContextParallelAttrName(),
                     mb.getStrArrayAttr({"cp"}));
      if (d.cp > 1 && d.cpGather)
        att->setAttr(WeftDialect::getContextParallelGatherAttrName(),
                     mb.getUnitAttr());
    }
    // An attention's gradient runs the ring backward where the partitioner
    // knows the forward ring's statistics; otherwise it keeps its queries
    // split over cp, as the ring keeps them, and a causal mask (or ALiBi's
    // distances) then needs their positions.
    if (d.cp > 1) {
      SmallVector<AttentionGradOp> grads;
      func.walk([&](AttentionGradOp op) {
        op->setAttr(WeftDialect::getContextParallelAttrName(),
                    mb.getStrArrayAttr({"cp"}));
        if (d.cpGather)
          op->setAttr(WeftDialect::getContextParallelGatherAttrName(),
                      mb.getUnitAttr());
        if ((op.getCausal() || op.getAlibiSlopes()) && !op.getQPositions())
          grads.push_back(op);
      });
      for (AttentionGradOp grad : grads)
        givePositions(grad);
    }

    // Megatron's tensor parallelism on the weights (or AxoNN's 3-D).
    if (d.tp > 1 || d.threeD()) {
      // In the order found (a walk of the IR), so that every annotation
      // below is made in the same order on every run.
      LinearSet column, row, whole;
      // What every head reads alike: the input of a broadcast over the heads
      // ([b, 1, s, d] to [b, h, s, d]: DeepSeek's rotary key, which all
      // heads share beside keys of their own), whose linears are whole.
      SmallVector<Value> sharedByHeads;
      // Backward from `from` to the first linear on each path, not past a
      // repeat of KV heads nor a broadcast over the heads (whose input goes
      // to `sharedByHeads`).
      auto firstLinears = [&](ArrayRef<Value> from, LinearSet &into) {
        std::deque<std::pair<Value, int>> work;
        for (Value v : from)
          work.push_back({v, 0});
        llvm::DenseSet<Value> seen;
        while (!work.empty()) {
          auto [v, depth] = work.front();
          work.pop_front();
          if (!seen.insert(v).second || depth > 24)
            continue;
          Operation *def = v.getDefiningOp();
          if (!def || isa<ParameterOp, ConstantOp>(def) ||
              def->hasAttr(WeftDialect::getRepeatedKvHeadsAttrName()))
            continue;
          if (isa<LinearOp>(def)) {
            into.insert(def);
            continue;
          }
          if (auto broadcast = dyn_cast<BroadcastToOp>(def)) {
            auto from = cast<RankedTensorType>(broadcast.getInput().getType());
            auto to = cast<RankedTensorType>(broadcast.getType());
            if (from.getRank() == 4 && to.getRank() == 4 &&
                from.getDimSize(1) == 1 && to.getDimSize(1) > 1) {
              sharedByHeads.push_back(broadcast.getInput());
              continue;
            }
          }
          for (Value operand : def->getOperands())
            work.push_back({operand, depth + 1});
        }
      };
      // Repeated KV heads are made whole on every rank.
      SmallVector<Value> repeated;
      func.walk([&](BroadcastToOp op) {
        if (op->hasAttr(WeftDialect::getRepeatedKvHeadsAttrName()))
          repeated.push_back(op.getInput());
      });
      firstLinears(repeated, whole);
      for (AttentionOp att : attentions) {
        firstLinears({att.getQ(), att.getK(), att.getV()}, column);
        SmallVector<Value> shared = std::move(sharedByHeads);
        sharedByHeads.clear();
        firstLinears(shared, whole);
        // Forward from the result to the first linear.
        std::deque<std::pair<Value, int>> forward = {{att.getResult(), 0}};
        while (!forward.empty()) {
          auto [v, depth] = forward.front();
          forward.pop_front();
          if (depth > 8)
            continue;
          for (Operation *user : v.getUsers()) {
            if (isa<LinearOp>(user)) {
              row.insert(user);
              continue;
            }
            for (Value r : user->getResults())
              forward.push_back({r, depth + 1});
          }
        }
      }
      // (By name: the backward's copies of a weight are other ops.) A
      // projection fused with the queries' (Megatron's QKV GEMM, columns
      // grouped by KV head) is split as theirs: its output is gathered
      // before the K and V groups are cut from it, as Megatron-LM forks do
      // when tp exceeds the query groups, rather than every rank computing
      // every query head.
      llvm::StringSet<> wholeWeights;
      for (Operation *op : whole) {
        if (column.contains(op))
          continue;
        auto linear = cast<LinearOp>(op);
        for (Value w : {linear.getWeight(), linear.getBias()})
          if (ParameterOp param = w ? getWeightParameter(w) : ParameterOp())
            wholeWeights.insert(param.getName());
      }
      // Whether a linear's output reaches, forward, a column-parallel
      // linear's input before any other linear: a down-projection whose
      // output a column-parallel up-projection reads (DeepSeek's latent
      // before its norm and the heads' keys and values) is whole, as
      // Megatron-Core keeps it; split over its columns, it would be
      // all-gathered for the norm and the next GEMM.
      auto feedsColumn = [&](LinearOp linear) {
        std::deque<std::pair<Value, int>> work = {{linear.getResult(), 0}};
        llvm::DenseSet<Value> seen;
        while (!work.empty()) {
          auto [v, depth] = work.front();
          work.pop_front();
          if (!seen.insert(v).second || depth > 8)
            continue;
          for (OpOperand &use : v.getUses()) {
            auto user = dyn_cast<LinearOp>(use.getOwner());
            if (user) {
              if (column.contains(user) && use.get() == user.getInput())
                return true;
              continue;
            }
            for (Value r : use.getOwner()->getResults())
              work.push_back({r, depth + 1});
          }
        }
        return false;
      };
      func.walk([&](LinearOp linear) {
        if (column.contains(linear) || row.contains(linear))
          return;
        int64_t in = linear.getInput().getType().getShape().back();
        int64_t out = linear.getType().getShape().back();
        if (hidden && in == hidden && out != hidden && !feedsColumn(linear))
          column.insert(linear);
        else if (hidden && in != hidden && out == hidden)
          row.insert(linear);
        // The output layer, split over the vocabulary: outside the layers.
        // A layer's linear as wide as the vocabulary is not one (a model
        // whose vocabulary equals its hidden size: the backward's
        // transposed q projection would otherwise be split over its rows
        // where the forward's copy is split over its columns).
        else if (vocab && out == vocab && !linear->getParentOfType<LayerOp>())
          column.insert(linear);
      });
      // (On the weight and every copy of it in another precision.)
      auto annotateWeight = [&](Value v, int64_t dim) {
        auto param = getWeightParameter(v);
        auto type = cast<RankedTensorType>(v.getType());
        if (!param || type.getDimSize(dim) % d.tp ||
            wholeWeights.contains(param.getName()))
          return;
        TensorSharding s = TensorSharding::replicated(type.getRank());
        s.dims[dim].assign(tpAxes.begin(), tpAxes.end());
        for (Value weight : getWeightValues(param))
          setSharding(weight, mesh, s);
      };
      // A value a forward layer keeps for its backward that a column-parallel
      // linear makes (q, k and v of separate projections) or that a
      // row-parallel linear reads (the attention's output, the output
      // projection's input) is computed split over tp in its last
      // dimension: kept so, not all-gathered (or, under Megatron SP,
      // all-to-all'd to the sequence split) in every forward layer and
      // re-laid again in the backward. Under SP its sequence keeps the
      // residual stream's other splits (cp). Under AxoNN's 3-D grid a row
      // linear contracts over gy: its input is kept split over gy.
      auto keepSplit = [&](ArrayRef<std::string> splitAxes, int64_t ways) {
        SmallVector<std::string, 2> seqOnly;
        for (const std::string &axis : residualSeq)
          if (!llvm::is_contained(splitAxes, axis))
            seqOnly.push_back(axis);
        llvm::DenseMap<Value, SmallVector<BlockArgument>> takenBy;
        for (LayerOp layer : func.getBody().getOps<LayerOp>())
          for (auto [input, arg] :
               llvm::zip(layer.getInputs(), layer.getBody().getArguments()))
            takenBy[input].push_back(arg);
        for (LayerOp layer : func.getBody().getOps<LayerOp>()) {
          auto yield = cast<YieldOp>(layer.getBody().front().getTerminator());
          for (auto [index, result] : llvm::enumerate(layer.getResults())) {
            Value yielded = yield.getValues()[index];
            auto type = dyn_cast<RankedTensorType>(result.getType());
            auto madeByColumn = [&]() {
              auto linear = yielded.getDefiningOp<LinearOp>();
              return linear && column.contains(linear);
            };
            auto readByRow = [&]() {
              return llvm::any_of(yielded.getUsers(), [&](Operation *user) {
                auto linear = dyn_cast<LinearOp>(user);
                return linear && row.contains(linear) &&
                       linear.getInput() == yielded;
              });
            };
            if (index == 0 || !type || !isResidual(type) ||
                type.getDimSize(2) % ways ||
                !(readByRow() || (d.sp && madeByColumn())))
              continue;
            auto split = [&](Value value) {
              TensorSharding s = TensorSharding::replicated(3);
              if (type.getDimSize(0) % batchSplit == 0)
                s.dims[0].assign(batchAxes.begin(), batchAxes.end());
              const SmallVector<std::string, 2> &seqAxesKept =
                  d.sp ? seqOnly : residualSeq;
              if (seq && type.getDimSize(1) == seq)
                s.dims[1].assign(seqAxesKept.begin(), seqAxesKept.end());
              s.dims[2].assign(splitAxes.begin(), splitAxes.end());
              setSharding(value, mesh, s);
            };
            split(result);
            split(yielded);
            for (BlockArgument arg : takenBy.lookup(result))
              split(arg);
          }
        }
      };
      if (d.threeD()) {
        annotate3d(func, column, row, d, mesh);
        if (d.gy > 1)
          keepSplit({"gy"}, d.gy);
        shareParameterShardings(func, mesh);
        return annotateOutputs(func, d, batchAxes, seqAxes, residualSeq,
                               isResidual, seq);
      }
      for (Operation *op : column) {
        auto linear = cast<LinearOp>(op);
        annotateWeight(linear.getWeight(), linear.getTransposeWeight() ? 0 : 1);
        if (linear.getBias())
          annotateWeight(linear.getBias(), 0);
      }
      for (Operation *op : row) {
        auto linear = cast<LinearOp>(op);
        annotateWeight(linear.getWeight(), linear.getTransposeWeight() ? 1 : 0);
      }
      keepSplit(tpAxes, d.tp);
      // Vocabulary-parallel token embedding.
      func.walk([&](EmbeddingOp e) {
        if (isa<BlockArgument>(e.getIndices()))
          annotateWeight(e.getTable(), 0);
      });
      shareParameterShardings(func, mesh);
    }
    return annotateOutputs(func, d, batchAxes, seqAxes, residualSeq, isResidual,
                           seq);
  }

  /// AxoNN's 3-D tensor parallelism on the weights: the linears that read
  /// the residual stream (`column`) contract over gx and split their
  /// outputs over gy; those that give it back (`row`) contract over gy and
  /// split their outputs over gx, so the first's output feeds the second
  /// unchanged. Every such weight is stored split over gz as well and
  /// all-gathered before use. The token embedding's vocabulary goes over gy,
  /// like the output layer's.
  void annotate3d(func::FuncOp func, const LinearSet &column,
                  const LinearSet &row, const PlanDegrees &d, StringRef mesh) {
    // Splits `dim` of a weight over `axis` (when it divides), keeping what
    // another use of the same weight (a tied embedding) has put there.
    auto sizeOf = [&](StringRef axis) -> int64_t {
      return axis == "gx"   ? d.gx
             : axis == "gy" ? d.gy
             : axis == "gz" ? d.gz
                            : 1;
    };
    auto split = [&](Value v, int64_t dim, StringRef axis, int64_t size) {
      auto param = getWeightParameter(v);
      auto type = cast<RankedTensorType>(v.getType());
      if (!param || size == 1 || dim >= type.getRank())
        return;
      TensorSharding s =
          getSharding(v).value_or(TensorSharding::replicated(type.getRank()));
      int64_t already = 1;
      for (const std::string &held : s.dims[dim])
        already *= sizeOf(held);
      if (s.uses(axis) || type.getDimSize(dim) % (already * size))
        return;
      s.dims[dim].push_back(axis.str());
      for (Value weight : getWeightValues(param))
        setSharding(weight, mesh, s);
    };
    auto store = [&](Value v) {
      auto param = getWeightParameter(v);
      auto type = cast<RankedTensorType>(v.getType());
      if (!param || d.gz == 1 || type.getRank() != 2)
        return;
      TensorSharding s =
          getSharding(v).value_or(TensorSharding::replicated(type.getRank()));
      int64_t split = 1;
      for (const std::string &axis : s.dims[0])
        split *= sizeOf(axis);
      if (type.getDimSize(0) % (split * d.gz) == 0)
        param->setAttr(WeftDialect::getStoredOverAttrName(),
                       OpBuilder(param).getStrArrayAttr({"gz"}));
    };
    // (linears, the axis of their contraction, the axis of their outputs)
    for (auto [linears, in, out] :
         {std::make_tuple(&column, StringRef("gx"), StringRef("gy")),
          std::make_tuple(&row, StringRef("gy"), StringRef("gx"))})
      for (Operation *op : *linears) {
        auto linear = cast<LinearOp>(op);
        bool t = linear.getTransposeWeight();
        split(linear.getWeight(), t ? 1 : 0, in, sizeOf(in));
        split(linear.getWeight(), t ? 0 : 1, out, sizeOf(out));
        if (linear.getBias())
          split(linear.getBias(), 0, out, sizeOf(out));
      }
    func.walk([&](EmbeddingOp e) {
      if (isa<BlockArgument>(e.getIndices()))
        split(e.getTable(), 0, "gy", d.gy);
    });
    for (auto set : {&column, &row})
      for (Operation *op : *set)
        store(cast<LinearOp>(op).getWeight());
  }

  /// Outputs: batch over dp, sequence as the inputs; what a pipeline stage
  /// sends on as the residual stream between layers (with Megatron SP, the
  /// next stage receives the tp-split sequence). `seq` is the sequence the
  /// plan splits.
  LogicalResult annotateOutputs(
      func::FuncOp func, const PlanDegrees &d, ArrayRef<std::string> batchAxes,
      ArrayRef<std::string> seqAxes, ArrayRef<std::string> residualSeq,
      llvm::function_ref<bool(RankedTensorType)> isResidual, int64_t seq) {
    ModuleOp module = getOperation();
    StringRef mesh = "mesh";
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    // A training step's gradient is laid out as its parameter is (split
    // where the plan splits the weight, whole over dp), not as a batch.
    llvm::StringMap<ParameterOp> parameters;
    func.walk([&](ParameterOp p) { parameters.try_emplace(p.getName(), p); });
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      auto type = cast<RankedTensorType>(value.getType());
      TensorSharding s = TensorSharding::replicated(type.getRank());
      if (auto of = func.getResultAttrOfType<StringAttr>(
              index, WeftDialect::getGradientOfAttrName())) {
        ParameterOp param = parameters.lookup(of.getValue());
        std::optional<TensorSharding> weight =
            param ? getSharding(param.getResult()) : std::nullopt;
        if (weight && weight->dims.size() == s.dims.size())
          s = *weight;
        func.setResultAttr(index, WeftDialect::getShardingAttrName(),
                           toAttr(module.getContext(), mesh, s));
        continue;
      }
      if (type.getRank() >= 1 && type.getDimSize(0) % (d.dp * d.gz) == 0)
        s.dims[0].assign(batchAxes.begin(), batchAxes.end());
      bool sent =
          (func.getResultAttr(index, WeftDialect::getSentToAttrName()) ||
           func.getResultAttr(index, WeftDialect::getGradientToAttrName())) &&
          isResidual(type);
      if (type.getRank() >= 2 && seq && type.getDimSize(1) == seq)
        s.dims[1].assign(sent ? residualSeq.begin() : seqAxes.begin(),
                         sent ? residualSeq.end() : seqAxes.end());
      func.setResultAttr(index, WeftDialect::getShardingAttrName(),
                         toAttr(module.getContext(), mesh, s));
    }
    return success();
  }
};

//===----------------------------------------------------------------------===//
// -weft-propagate-sharding
//===----------------------------------------------------------------------===//

struct WeftPropagateSharding
    : public weft::impl::WeftPropagateShardingBase<WeftPropagateSharding> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<MeshInfo> mesh = getMeshInfo(module);
    if (!mesh)
      return; // nothing is sharded
    bool failedConflict = false;
    module.walk([&](func::FuncOp func) {
      if (func.isExternal())
        return;
      if (failed(propagate(func, *mesh)))
        failedConflict = true;
    });
    if (failedConflict)
      signalPassFailure();
  }

  LogicalResult propagate(func::FuncOp func, const MeshInfo &mesh) {
    llvm::DenseMap<Value, TensorSharding> shardings;
    llvm::DenseMap<Value, int> priority;
    auto seed = [&](Value v) {
      if (std::optional<TensorSharding> s = getSharding(v)) {
        shardings[v] = *s;
        priority[v] = 0;
      }
    };
    // A step relates the operands and results of an op through its factor
    // rule, or one value to another across a layer's boundary (an input and
    // its body argument, a yielded value and the layer's result) through
    // the identity rule.
    struct Step {
      Operation *op;
      ShardingRule rule;
      SmallVector<Value, 4> operands, results;
    };
    std::vector<Step> steps;
    auto identity = [&](Operation *op, Value from, Value to) {
      Step edge{op, {}, {from}, {to}};
      auto shape = cast<RankedTensorType>(from.getType()).getShape();
      SmallVector<int64_t> factors = addFactors(edge.rule, shape);
      edge.rule.operands.push_back(toTensorFactors(factors));
      edge.rule.results.push_back(toTensorFactors(factors));
      steps.push_back(std::move(edge));
    };
    for (BlockArgument arg : func.getArguments())
      seed(arg);
    func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (op == func.getOperation())
        return;
      for (Value r : op->getResults())
        seed(r);
      if (auto layer = dyn_cast<LayerOp>(op)) {
        Block &body = layer.getBody().front();
        for (auto [input, arg] :
             llvm::zip(layer.getInputs(), body.getArguments())) {
          seed(arg);
          identity(op, input, arg);
        }
        return;
      }
      if (auto yield = dyn_cast<YieldOp>(op)) {
        for (auto [value, result] :
             llvm::zip(yield.getValues(), op->getParentOp()->getResults()))
          identity(op, value, result);
        return;
      }
      if (auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op))
        steps.push_back({op, ruleOp.getShardingRule(),
                         SmallVector<Value, 4>(op->getOperands()),
                         SmallVector<Value, 4>(op->getResults())});
    });
    // A training step's gradient is returned in its parameter's sharding
    // (-weft-apply-plan): the value returned takes it as an annotation, so
    // the gradient is computed where it is kept (a column-parallel weight's
    // gradient split over tp) instead of computed whole and sliced.
    //
    // A split gradient also reaches back, as an annotation that decides like
    // a weight's, through the ops that only lay it out (casts, reshapes, the
    // sum over the batch, the sum of a tied weight's uses) to the op that
    // computes it: that op computes the gradient in its parameter's split,
    // as Megatron's vocabulary-parallel embedding does under SP (the
    // sequence-split gradient gathered, each rank's one-hot over its own
    // vocabulary rows), instead of contracting over a sequence split that
    // the gradient's split then re-lays with an all-to-all of the one-hot.
    llvm::DenseSet<Value> weightLike;
    auto reachBack = [&](Value returned) {
      SmallVector<Value> work{returned};
      while (!work.empty()) {
        Value value = work.pop_back_val();
        Operation *op = value.getDefiningOp();
        auto ruleOp = dyn_cast_or_null<ShardingRuleOpInterface>(op);
        if (!ruleOp || op->getNumResults() != 1)
          continue;
        bool layout = op->getNumOperands() == 1;
        if (!layout && op->hasTrait<weft::OpTrait::Elementwise>())
          layout = llvm::all_of(op->getOperandTypes(),
                                [&](Type t) { return t == value.getType(); });
        if (!layout)
          continue;
        ShardingRule rule = ruleOp.getShardingRule();
        if (rule.results.size() != 1 ||
            rule.operands.size() != op->getNumOperands())
          continue;
        TensorSharding sharding = shardings[value];
        ShardedTensor result{&rule.results[0], &sharding, 0};
        FactorAxes axes = assignFactorAxes(rule, mesh, {result});
        for (auto [operand, factors] :
             llvm::zip(op->getOperands(), rule.operands)) {
          if (!isa<RankedTensorType>(operand.getType()) ||
              isa<BlockArgument>(operand) || shardings.count(operand) ||
              !operand.hasOneUse())
            continue;
          shardings[operand] = projectSharding(factors, axes);
          priority[operand] = 0;
          weightLike.insert(operand);
          work.push_back(operand);
        }
      }
    };
    auto ret = dyn_cast<func::ReturnOp>(func.getBody().front().getTerminator());
    for (unsigned r = 0; ret && r < func.getNumResults(); ++r) {
      auto attr = func.getResultAttrOfType<ShardingAttr>(
          r, WeftDialect::getShardingAttrName());
      Value value = ret.getOperand(r);
      if (attr && func.getResultAttr(r, WeftDialect::getGradientOfAttrName()) &&
          !shardings.count(value) && !isa<BlockArgument>(value)) {
        shardings[value] = fromAttr(attr);
        priority[value] = 0;
        if (llvm::any_of(shardings[value].dims,
                         [](const auto &axes) { return !axes.empty(); })) {
          weightLike.insert(value);
          reachBack(value);
        }
      }
    }
    bool error = false;
    llvm::DenseSet<Operation *> reported;
    auto step = [&](const Step &current) {
      Operation *op = current.op;
      const ShardingRule &rule = current.rule;
      SmallVector<ShardedTensor> tensors;
      SmallVector<Value> values;
      // Where the plan's split of a weight (Megatron's column and row
      // splits) and an annotated activation want one axis for different
      // factors, the weight's decides: a backward layer's transposed linear
      // reads the residual stream's gradient, split along the sequence
      // under Megatron SP, and computes its output split over the weight's
      // columns as the forward did (the input is gathered), not along the
      // sequence (which would re-lay every value after it with all-to-alls).
      for (auto [value, factors] : llvm::zip(current.operands, rule.operands)) {
        values.push_back(value);
        auto it = shardings.find(value);
        int rank = it == shardings.end() ? INT_MAX : priority[value];
        if (rank == 0 && (getWeightParameter(value) || weightLike.count(value)))
          rank = -1;
        tensors.push_back(
            {&factors, it == shardings.end() ? nullptr : &it->second, rank});
      }
      for (auto [value, factors] : llvm::zip(current.results, rule.results)) {
        values.push_back(value);
        auto it = shardings.find(value);
        int rank = it == shardings.end() ? INT_MAX : priority[value];
        if (rank == 0 && weightLike.count(value))
          rank = -1;
        tensors.push_back(
            {&factors, it == shardings.end() ? nullptr : &it->second, rank});
      }
      FactorAxes axes = assignFactorAxes(
          rule, mesh, tensors,
          [&](int64_t, const std::string &a, const std::string &b) {
            if (!reported.insert(op).second)
              return;
            op->emitError("conflicting shardings: one annotation splits a "
                          "dimension over [")
                << a << "], another over [" << b
                << "]; remove one, or reshard between them explicitly";
            error = true;
          });
      bool changed = false;
      for (auto [index, value] : llvm::enumerate(values)) {
        const auto &factors = *tensors[index].factors;
        TensorSharding proposed = projectSharding(factors, axes);
        auto it = shardings.find(value);
        if (it != shardings.end() && priority[value] == 0)
          continue;
        // Weights are split only where the plan says (Megatron's column
        // and row splits); elsewhere they stay whole.
        if (getWeightParameter(value))
          continue;
        TensorSharding current =
            it != shardings.end() ? it->second
                                  : TensorSharding::replicated(factors.size());
        bool grew = false;
        for (size_t dim = 0; dim < current.dims.size(); ++dim) {
          const auto &have = current.dims[dim];
          const auto &want = proposed.dims[dim];
          // Fill an unsplit dimension, or refine a split that the proposal
          // extends ([cp] -> [cp, ulysses]); never change what is there.
          if (want.size() <= have.size() ||
              !std::equal(have.begin(), have.end(), want.begin()))
            continue;
          bool free = true;
          for (size_t i = have.size(); i < want.size(); ++i)
            free &= !current.uses(want[i]);
          if (!free)
            continue;
          current.dims[dim] = want;
          grew = true;
        }
        if (it == shardings.end() || grew) {
          shardings[value] = current;
          priority[value] = 1;
          changed |= grew;
        }
      }
      return changed;
    };
    for (int sweep = 0; sweep < 16; ++sweep) {
      bool changed = false;
      for (const Step &current : steps)
        changed |= step(current);
      for (const Step &current : llvm::reverse(steps))
        changed |= step(current);
      if (!changed)
        break;
    }
    if (error)
      return failure();
    for (auto &[value, sharding] : shardings)
      if (priority[value] != 0 || !isa<BlockArgument>(value))
        setSharding(value, mesh.name, sharding);
    return success();
  }

};
} // namespace

