//===- WeftSplitStageSends.cpp - Pipeline sends split over tp -------------===//
//
// Part of the Weft project.
//
// Megatron's scatter/gather of pipeline sends: what a stage passes on whole
// on each tensor-parallel rank is cut to the rank's 1/tp block before it is
// sent, and gathered back over tp where the next function takes it.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace weft {
#define GEN_PASS_DEF_WEFTSPLITSTAGESENDS
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {
constexpr llvm::StringLiteral kAxis = "tp";

/// The dimension of a value passed between stages that is cut over tp (`n`
/// ranks), or -1 to send it whole: only a float tensor of rank >= 2 whole
/// over tp (stageSendCutDimension picks the dimension). Sender and receiver
/// call it on the same type and sharding, so both agree.
int64_t cutDimension(Type type, ShardingAttr local, int64_t n) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || tensor.getRank() < 2 || !tensor.hasStaticShape() ||
      !isa<FloatType>(tensor.getElementType()) || !local)
    return -1;
  TensorSharding sharding = fromAttr(local);
  if (sharding.uses(kAxis) || !sharding.partial.empty() ||
      int64_t(sharding.dims.size()) != tensor.getRank())
    return -1;
  return stageSendCutDimension(tensor.getShape(), n);
}

RankedTensorType cutType(Type type, int64_t dim, int64_t n) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[size_t(dim)] /= n;
  return RankedTensorType::get(shape, tensor.getElementType());
}

ShardingAttr cutSharding(MLIRContext *context, ShardingAttr local,
                         int64_t dim) {
  TensorSharding sharding = fromAttr(local);
  // The rank's block of its block: tp is the minor axis of the dimension.
  sharding.dims[size_t(dim)].push_back(kAxis.str());
  return toAttr(context, local.getMesh().getValue(), sharding);
}

struct WeftSplitStageSends
    : public weft::impl::WeftSplitStageSendsBase<WeftSplitStageSends> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!module->hasAttr(WeftDialect::getPipelineAttrName()))
      return;
    std::optional<MeshInfo> mesh = getMeshInfo(module);
    if (!mesh || llvm::find(mesh->axes, kAxis) == mesh->axes.end())
      return;
    const int64_t n = mesh->size(kAxis);
    if (n <= 1)
      return;
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() &&
          func->hasAttr(WeftDialect::getPipelineStageAttrName()))
        split(func, n);
  }

  void split(func::FuncOp func, int64_t n) {
    MLIRContext *context = func.getContext();
    Block &body = func.getBody().front();
    OpBuilder b(context);
    auto axes = b.getStrArrayAttr({kAxis});
    // Received: the block arrives and is gathered where the body reads it.
    b.setInsertionPointToStart(&body);
    SmallVector<Type> argTypes(func.getArgumentTypes());
    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      if (!func.getArgAttr(i, WeftDialect::getReceivedFromAttrName()) &&
          !func.getArgAttr(i, WeftDialect::getCotangentOfAttrName()))
        continue;
      auto local = func.getArgAttrOfType<ShardingAttr>(
          i, WeftDialect::getLocalShardingAttrName());
      int64_t dim = cutDimension(arg.getType(), local, n);
      if (dim < 0)
        continue;
      Type whole = arg.getType();
      arg.setType(cutType(whole, dim, n));
      argTypes[i] = arg.getType();
      auto gather =
          AllGatherOp::create(b, func.getLoc(), whole, arg, local.getMesh(),
                              axes, b.getI64IntegerAttr(dim), UnitAttr(),
                              CollectiveCodecAttr(), IntegerAttr());
      arg.replaceAllUsesExcept(gather.getResult(), gather);
      func.setArgAttr(i, WeftDialect::getLocalShardingAttrName(),
                      cutSharding(context, local, dim));
    }
    // Sent: each rank returns its block.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    b.setInsertionPoint(ret);
    SmallVector<Type> resultTypes(func.getResultTypes());
    for (unsigned o = 0; o < func.getNumResults(); ++o) {
      if (!func.getResultAttr(o, WeftDialect::getSentToAttrName()) &&
          !func.getResultAttr(o, WeftDialect::getGradientToAttrName()))
        continue;
      auto local = func.getResultAttrOfType<ShardingAttr>(
          o, WeftDialect::getLocalShardingAttrName());
      Value value = ret.getOperand(o);
      int64_t dim = cutDimension(value.getType(), local, n);
      if (dim < 0)
        continue;
      RankedTensorType block = cutType(value.getType(), dim, n);
      // A value passed on as it came (forwarded to a later stage) is sent
      // as the block it came as, not gathered and cut again.
      Value cut;
      if (auto gather = value.getDefiningOp<AllGatherOp>())
        if (isa<BlockArgument>(gather.getInput()) &&
            gather.getInput().getType() == block &&
            int64_t(gather.getDim()) == dim && gather.getAxes() == axes &&
            !gather.getZigzag())
          cut = gather.getInput();
      if (!cut)
        cut = AllSliceOp::create(b, ret.getLoc(), block, value, local.getMesh(),
                                 axes, b.getI64IntegerAttr(dim), UnitAttr());
      ret.setOperand(o, cut);
      resultTypes[o] = block;
      func.setResultAttr(o, WeftDialect::getLocalShardingAttrName(),
                         cutSharding(context, local, dim));
    }
    func.setType(FunctionType::get(context, argTypes, resultTypes));
  }
};
} // namespace
