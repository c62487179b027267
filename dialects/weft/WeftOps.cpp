//===- WeftOps.cpp - Operations of the weft dialect -----------------------===//
//
// Part of the Weft project.
//
// Verifiers and result-type inference. Inference functions run on unverified
// IR (from builders and the InferTypeOpInterface verifier), so each checks
// what it relies on and reports a violated constraint instead of asserting.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace weft;

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

/// Elementwise types print once when they are all equal, and as a function type
/// `(operands) -> result` otherwise.
static ParseResult parseElementwiseTypes(OpAsmParser &parser,
                                         ArrayRef<Type *> types) {
  SMLoc loc = parser.getCurrentLocation();
  Type type;
  if (parser.parseType(type))
    return failure();
  auto function = dyn_cast<FunctionType>(type);
  if (!function) {
    for (Type *slot : types)
      *slot = type;
    return success();
  }
  if (function.getNumInputs() + 1 != types.size() ||
      function.getNumResults() != 1)
    return parser.emitError(loc) << "expected " << types.size() - 1
                                 << " operand types and one result type";
  for (auto [slot, input] : llvm::zip(types.drop_back(), function.getInputs()))
    *slot = input;
  *types.back() = function.getResult(0);
  return success();
}

static void printElementwiseTypes(OpAsmPrinter &printer,
                                  ArrayRef<Type> types) {
  if (llvm::all_equal(types)) {
    printer << types.front();
    return;
  }
  printer.printFunctionalType(types.drop_back(), types.take_back());
}

static ParseResult parseElementwiseTypes(OpAsmParser &parser, Type &lhs,
                                         Type &rhs, Type &result) {
  return parseElementwiseTypes(parser, {&lhs, &rhs, &result});
}
static ParseResult parseElementwiseTypes(OpAsmParser &parser, Type &condition,
                                         Type &lhs, Type &rhs, Type &result) {
  return parseElementwiseTypes(parser, {&condition, &lhs, &rhs, &result});
}
static void printElementwiseTypes(OpAsmPrinter &printer, Operation *, Type lhs,
                                  Type rhs, Type result) {
  printElementwiseTypes(printer, {lhs, rhs, result});
}
static void printElementwiseTypes(OpAsmPrinter &printer, Operation *,
                                  Type condition, Type lhs, Type rhs,
                                  Type result) {
  printElementwiseTypes(printer, {condition, lhs, rhs, result});
}

/// A parameter's type, then its inline value if it has one, which takes that
/// type (as in memref.global): `: tensor<4xf32> = dense<[...]>`.
static ParseResult parseParameterTypeAndValue(OpAsmParser &parser, Type &type,
                                              ElementsAttr &value) {
  if (parser.parseColonType(type))
    return failure();
  if (failed(parser.parseOptionalEqual()))
    return success();
  SMLoc loc = parser.getCurrentLocation();
  Attribute attr;
  if (parser.parseAttribute(attr, type))
    return failure();
  value = dyn_cast<ElementsAttr>(attr);
  if (!value)
    return parser.emitError(loc, "expected an elements attribute (dense<...>)");
  return success();
}

static void printParameterTypeAndValue(OpAsmPrinter &printer, Operation *,
                                       Type type, ElementsAttr value) {
  printer << ": " << type;
  if (!value)
    return;
  printer << " = ";
  printer.printAttributeWithoutType(value);
}

#define GET_OP_CLASSES
#include "dialects/weft/WeftOps.cpp.inc"

#include "dialects/weft/WeftInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static RankedTensorType getTensor(Type type) {
  return dyn_cast_or_null<RankedTensorType>(type);
}

/// Reports that `name` has the wrong rank; returns failure.
static LogicalResult rankError(std::optional<Location> loc, StringRef name,
                               Type type, StringRef expected) {
  return emitOptionalError(loc, name, " must have ", expected, ", got ", type);
}

//===----------------------------------------------------------------------===//
// Weights and constants
//===----------------------------------------------------------------------===//

LogicalResult ParameterOp::verify() {
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  if (getValue() && getExternal())
    return emitOpError("has both an inline value and external data; keep one");
  if (std::optional<ElementsAttr> value = getValue();
      value && value->getType() != getType())
    return emitOpError("inline value of type ")
           << value->getType() << " does not match the result type "
           << getType();
  if (ExternalDataAttr external = getExternalAttr()) {
    // The range holds the stored elements (f32 for a weight narrowed to 16
    // bits, which the reader rounds), and a column window whole stored rows:
    // `rowWidth` columns for each of the parameter's rows.
    auto type = cast<RankedTensorType>(getType());
    if (Type stored = external.getStored())
      type = type.clone(stored);
    int64_t bytes = getTensorBytes(type);
    int64_t columns = type.getRank() ? type.getShape().back() : 1;
    if (int64_t width = external.getRowWidth()) {
      if (type.getRank() == 0 || external.getColumnStart() + columns > width)
        return emitOpError("external data columns ")
               << external.getColumnStart() << " of " << width
               << " cannot hold " << type;
      bytes = columns ? bytes / columns * width : 0;
    }
    if (external.getLength() != bytes)
      return emitOpError("external data is ")
             << external.getLength() << " bytes but " << type << " needs "
             << bytes;
  }
  return success();
}

LogicalResult IotaOp::verify() {
  if (static_cast<int64_t>(getDim()) >= getType().getRank())
    return emitOpError("dim ") << getDim() << " is out of range for "
                               << getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult
CompareOp::inferReturnTypes(MLIRContext *context,
                            std::optional<Location> location, Adaptor adaptor,
                            SmallVectorImpl<Type> &inferred) {
  return inferBroadcastResultType(
      location, {adaptor.getLhs().getType(), adaptor.getRhs().getType()},
      IntegerType::get(context, 1), inferred);
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *context,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  auto lhs = getTensor(adaptor.getLhs().getType());
  return inferBroadcastResultType(location, adaptor.getOperands().getTypes(),
                                  lhs ? lhs.getElementType() : Type(),
                                  inferred);
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

/// Checks that `axis` is a dimension of `type`.
static LogicalResult verifyAxis(Operation *op, int64_t axis, Type type) {
  int64_t rank = cast<RankedTensorType>(type).getRank();
  if (axis >= rank)
    return op->emitOpError("axis ")
           << axis << " is out of range for rank " << rank
           << " (axes are in [0, rank))";
  return success();
}

/// The checks softmax and log_softmax share: the axis, the scale, and that a
/// causal mask runs along the last dimension of rows.
static LogicalResult verifySoftmaxLike(Operation *op, int64_t axis,
                                       APFloat scale, bool causal, Type input) {
  if (failed(verifyAxis(op, axis, input)))
    return failure();
  if (scale.isNegative() || scale.isZero() || !scale.isFinite())
    return op->emitOpError("scale must be positive and finite");
  auto type = cast<RankedTensorType>(input);
  if (causal && (type.getRank() < 2 || axis != type.getRank() - 1))
    return op->emitOpError("a causal softmax runs along the last dimension "
                           "(")
           << type.getRank() - 1
           << ") of a tensor of rank at least 2, not axis " << axis;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifySoftmaxLike(*this, getAxis(), getScaleAttr().getValue(),
                           getCausal(), getInput().getType());
}
LogicalResult LogSoftmaxOp::verify() {
  return verifySoftmaxLike(*this, getAxis(), getScaleAttr().getValue(),
                           getCausal(), getInput().getType());
}

LogicalResult DropoutOp::verify() {
  double ratio = getRatio().convertToDouble();
  if (!(ratio >= 0 && ratio < 1))
    return emitOpError("ratio must be in [0, 1), got ") << ratio;
  return success();
}

/// The checks layer_norm and rms_norm share: the axis, epsilon, and that the
/// affine operands cover exactly the normalized dimensions.
static LogicalResult verifyNormalization(Operation *op, int64_t axis,
                                         APFloat epsilon, Value input,
                                         ValueRange affine, Type result) {
  if (failed(verifyAxis(op, axis, input.getType())))
    return failure();
  if (epsilon.isNegative() || epsilon.isZero() || !epsilon.isFinite())
    return op->emitOpError("epsilon must be positive and finite");
  auto inputType = cast<RankedTensorType>(input.getType());
  ArrayRef<int64_t> normalized = inputType.getShape().drop_front(axis);
  for (Value operand : affine) {
    auto type = cast<RankedTensorType>(operand.getType());
    if (type.getShape() != normalized)
      return op->emitOpError("scale and bias must have the normalized shape [")
             << normalized << "] (input dimensions from axis " << axis
             << " on), got " << type;
    if (type.getElementType() != inputType.getElementType())
      return op->emitOpError("scale and bias must have the input's element "
                             "type ")
             << inputType.getElementType() << ", got " << type;
  }
  if (result != inputType)
    return op->emitOpError("result type ")
           << result << " must equal the input type " << inputType;
  return success();
}

LogicalResult LayerNormOp::verify() {
  SmallVector<Value> affine{getScale()};
  if (getBias())
    affine.push_back(getBias());
  return verifyNormalization(*this, getAxis(), getEpsilon(), getInput(),
                             affine, getType());
}

LogicalResult RMSNormOp::verify() {
  return verifyNormalization(*this, getAxis(), getEpsilon(), getInput(),
                             getScale(), getType());
}

//===----------------------------------------------------------------------===//
// Linear algebra and attention
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto lhs = getTensor(adaptor.getLhs().getType());
  auto rhs = getTensor(adaptor.getRhs().getType());
  if (!lhs || lhs.getRank() < 2)
    return rankError(location, "lhs", adaptor.getLhs().getType(),
                     "rank at least 2");
  if (!rhs || rhs.getRank() < 2)
    return rankError(location, "rhs", adaptor.getRhs().getType(),
                     "rank at least 2");
  int64_t m = lhs.getDimSize(lhs.getRank() - 2);
  int64_t lhsK = lhs.getDimSize(lhs.getRank() - 1);
  if (adaptor.getTransposeLhs())
    std::swap(m, lhsK);
  int64_t rhsK = rhs.getDimSize(rhs.getRank() - 2);
  int64_t n = rhs.getDimSize(rhs.getRank() - 1);
  if (adaptor.getTransposeRhs())
    std::swap(rhsK, n);
  if (lhsK != rhsK)
    return emitOptionalError(location, "contracting dimensions differ: lhs has ",
                             lhsK, ", rhs has ", rhsK,
                             " (after transpose_lhs/transpose_rhs)");
  std::optional<SmallVector<int64_t>> batch = broadcastShapes(
      lhs.getShape().drop_back(2), rhs.getShape().drop_back(2));
  if (!batch)
    return emitOptionalError(location, "batch dimensions do not broadcast: ",
                             lhs, " and ", rhs);
  batch->append({m, n});
  inferred.push_back(RankedTensorType::get(*batch, lhs.getElementType()));
  return success();
}

LogicalResult LinearOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto input = getTensor(adaptor.getInput().getType());
  auto weight = getTensor(adaptor.getWeight().getType());
  if (!input || input.getRank() < 1)
    return rankError(location, "input", adaptor.getInput().getType(),
                     "rank at least 1");
  if (!weight || weight.getRank() != 2)
    return rankError(location, "weight", adaptor.getWeight().getType(),
                     "rank 2");
  int64_t k = weight.getDimSize(0), n = weight.getDimSize(1);
  if (adaptor.getTransposeWeight())
    std::swap(k, n);
  if (input.getShape().back() != k)
    return emitOptionalError(
        location, "input's last dimension (", input.getShape().back(),
        ") must equal the weight's contracting dimension (", k,
        "); the weight is [k, n], or [n, k] with transpose_weight");
  if (Value biasValue = adaptor.getBias()) {
    auto bias = getTensor(biasValue.getType());
    if (!bias || bias.getRank() != 1)
      return rankError(location, "bias", biasValue.getType(), "rank 1");
    if (bias.getDimSize(0) != n)
      return emitOptionalError(location, "bias has ", bias.getDimSize(0),
                               " elements but the layer has ", n, " outputs");
  }
  SmallVector<int64_t> shape(input.getShape().drop_back());
  shape.push_back(n);
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

/// The checks weft.attention and weft.attention_block share; on success,
/// the output type.
static FailureOr<RankedTensorType> inferAttentionOutput(
    std::optional<Location> location, Value qValue, Value kValue, Value vValue,
    Value maskValue, Value alibiValue, FloatAttr scaleAttr,
    FloatAttr softcapAttr, IntegerAttr windowAttr, bool causal) {
  auto q = getTensor(qValue.getType());
  auto k = getTensor(kValue.getType());
  auto v = getTensor(vValue.getType());
  for (auto [name, type] : {std::pair<StringRef, RankedTensorType>{"q", q},
                            {"k", k},
                            {"v", v}})
    if (!type || type.getRank() != 4)
      return emitOptionalError(location, name,
                               " must be [batch, heads, seq, head_dim] "
                               "(rank 4)");
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return emitOptionalError(location,
                             "q, k and v must have one element type");
  int64_t batch = q.getDimSize(0), heads = q.getDimSize(1),
          seq = q.getDimSize(2);
  if (k.getDimSize(0) != batch || v.getDimSize(0) != batch)
    return emitOptionalError(location, "k and v must have q's batch size ",
                             batch);
  if (k.getDimSize(1) != v.getDimSize(1) || k.getDimSize(2) != v.getDimSize(2))
    return emitOptionalError(location,
                             "k and v must agree on heads and sequence length");
  if (k.getDimSize(3) != q.getDimSize(3))
    return emitOptionalError(location, "q and k must have one head dimension, "
                                       "got ",
                             q.getDimSize(3), " and ", k.getDimSize(3));
  int64_t kvHeads = k.getDimSize(1);
  if (kvHeads == 0 || heads % kvHeads != 0)
    return emitOptionalError(location, "query heads (", heads,
                             ") must be a positive multiple of KV heads (",
                             kvHeads, ")");
  if (maskValue) {
    auto mask = getTensor(maskValue.getType());
    if (!mask || mask.getRank() > 4)
      return rankError(location, "mask", maskValue.getType(), "rank at most 4");
    if (!mask.getElementType().isInteger(1) &&
        mask.getElementType() != q.getElementType())
      return emitOptionalError(location, "mask must be i1 or q's element type ",
                               q.getElementType());
    SmallVector<int64_t> scores{batch, heads, seq, k.getDimSize(2)};
    std::optional<SmallVector<int64_t>> joined =
        broadcastShapes(scores, mask.getShape());
    if (!joined || *joined != scores)
      return emitOptionalError(location, "mask ", mask,
                               " does not broadcast to the scores [", scores,
                               "]");
  }
  if (alibiValue) {
    auto slopes = getTensor(alibiValue.getType());
    if (!slopes || slopes.getRank() != 1 || slopes.getDimSize(0) != heads)
      return emitOptionalError(location, "alibi must be a vector of ", heads,
                               " slopes, one per query head, got ",
                               alibiValue.getType());
  }
  if (scaleAttr && !(scaleAttr.getValueAsDouble() > 0))
    return emitOptionalError(location, "scale must be positive");
  if (softcapAttr && !(softcapAttr.getValueAsDouble() > 0))
    return emitOptionalError(location,
                             "softcap must be positive (leave it "
                             "out for no soft-capping), got ",
                             softcapAttr.getValueAsDouble());
  if (windowAttr && windowAttr.getInt() < 1)
    return emitOptionalError(location, "window must be at least 1 key, got ",
                             windowAttr.getInt());
  if (windowAttr && !causal)
    return emitOptionalError(location, "a sliding window (window ",
                             windowAttr.getInt(), ") needs causal");
  return RankedTensorType::get({batch, heads, seq, v.getDimSize(3)},
                               q.getElementType());
}

/// `weft.attention`'s dropout ratio, and its gradient's: in [0, 1).
static LogicalResult verifyDropout(std::optional<Location> location,
                                   FloatAttr dropout) {
  if (!dropout)
    return success();
  double ratio = dropout.getValueAsDouble();
  if (!(ratio >= 0 && ratio < 1))
    return emitOptionalError(location, "dropout must be in [0, 1), got ",
                             ratio);
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *context,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> output = inferAttentionOutput(
      location, adaptor.getQ(), adaptor.getK(), adaptor.getV(),
      adaptor.getMask(), adaptor.getAlibiSlopes(), adaptor.getScaleAttr(),
      adaptor.getSoftcapAttr(), adaptor.getWindowAttr(),
      bool(adaptor.getCausal()));
  if (failed(output) ||
      failed(verifyDropout(location, adaptor.getDropoutAttr())))
    return failure();
  inferred.push_back(*output);
  return success();
}

LogicalResult AttentionBlockOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  FailureOr<RankedTensorType> output = inferAttentionOutput(
      location, adaptor.getQ(), adaptor.getK(), adaptor.getV(),
      adaptor.getMask(), adaptor.getAlibiSlopes(), adaptor.getScaleAttr(),
      adaptor.getSoftcapAttr(), adaptor.getWindowAttr(),
      bool(adaptor.getCausal()));
  if (failed(output))
    return failure();
  inferred.push_back(*output);
  SmallVector<int64_t> lseShape(output->getShape().drop_back());
  lseShape.push_back(1);
  inferred.push_back(
      RankedTensorType::get(lseShape, Float32Type::get(context)));
  return success();
}

/// Positions of the queries and keys (attention_block, attention_grad): both
/// or neither, vectors of `seq` and `kv_seq` elements.
static LogicalResult verifyPositions(Operation *op, Value qPositions,
                                     Value kPositions, int64_t seq,
                                     int64_t kvSeq) {
  if (bool(qPositions) != bool(kPositions))
    return op->emitOpError("q_positions and k_positions are given together");
  if (!qPositions)
    return success();
  auto check = [&](Value positions, StringRef name,
                   int64_t size) -> LogicalResult {
    auto type = cast<RankedTensorType>(positions.getType());
    if (type.getRank() != 1 || type.getDimSize(0) != size)
      return op->emitOpError() << name << " must be a vector of " << size
                               << " positions, got " << type;
    return success();
  };
  if (failed(check(qPositions, "q_positions", seq)))
    return failure();
  return check(kPositions, "k_positions", kvSeq);
}

/// A block's visible pairs (a cost fact the partitioner counts): with
/// causal and positions, at most the block's pairs.
static LogicalResult verifyVisiblePairs(Operation *op, IntegerAttr visible,
                                        bool causal, Value qPositions,
                                        int64_t seq, int64_t kvSeq) {
  if (!visible)
    return success();
  if (!causal || !qPositions)
    return op->emitOpError("visible pairs are counted for a causal block "
                           "with positions");
  if (visible.getInt() < 0 || visible.getInt() > seq * kvSeq)
    return op->emitOpError("visible pairs must be in [0, ")
           << seq * kvSeq << "] (seq x kv_seq), got " << visible.getInt();
  return success();
}

LogicalResult AttentionBlockOp::verify() {
  int64_t seq = getQ().getType().getDimSize(2),
          kvSeq = getK().getType().getDimSize(2);
  if (failed(
          verifyPositions(*this, getQPositions(), getKPositions(), seq, kvSeq)))
    return failure();
  return verifyVisiblePairs(*this, getVisiblePairsAttr(), getCausal(),
                            getQPositions(), seq, kvSeq);
}

// The gradients have q's, k's and v's types; the output's gradient, the
// attention output's.
LogicalResult AttentionGradOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto output = inferAttentionOutput(
      location, adaptor.getQ(), adaptor.getK(), adaptor.getV(),
      adaptor.getMask(), adaptor.getAlibiSlopes(), adaptor.getScaleAttr(),
      adaptor.getSoftcapAttr(), adaptor.getWindowAttr(),
      bool(adaptor.getCausal()));
  if (failed(output) ||
      failed(verifyDropout(location, adaptor.getDropoutAttr())))
    return failure();
  if (adaptor.getResultGrad().getType() != *output)
    return emitOptionalError(
        location, "result_grad must have the attention output's type ", *output,
        ", got ", adaptor.getResultGrad().getType());
  inferred.push_back(adaptor.getQ().getType());
  inferred.push_back(adaptor.getK().getType());
  inferred.push_back(adaptor.getV().getType());
  return success();
}

LogicalResult AttentionGradOp::verify() {
  int64_t seq = getQ().getType().getDimSize(2),
          kvSeq = getK().getType().getDimSize(2);
  if (failed(verifyPositions(*this, getQPositions(), getKPositions(), seq,
                             kvSeq)) ||
      failed(verifyVisiblePairs(*this, getVisiblePairsAttr(), getCausal(),
                                getQPositions(), seq, kvSeq)))
    return failure();
  if (bool(getOut()) != bool(getLse()))
    return emitOpError("out and lse are given together");
  if (!getOut())
    return success();
  if (getOut().getType() != getResultGrad().getType())
    return emitOpError("out must have the attention output's type ")
           << getResultGrad().getType() << ", got " << getOut().getType();
  SmallVector<int64_t> rows(getResultGrad().getType().getShape().drop_back());
  rows.push_back(1);
  auto lseType = RankedTensorType::get(rows, Float32Type::get(getContext()));
  if (getLse().getType() != lseType)
    return emitOpError("lse must be each query row's log-sum-exp, ")
           << lseType << ", got " << getLse().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Indexing and data movement
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *context,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto table = getTensor(adaptor.getTable().getType());
  auto indices = getTensor(adaptor.getIndices().getType());
  if (!table || table.getRank() != 2)
    return rankError(location, "table", adaptor.getTable().getType(),
                     "rank 2 ([vocab, hidden])");
  if (!indices)
    return emitOptionalError(location, "indices must be a ranked tensor");
  SmallVector<int64_t> shape(indices.getShape());
  shape.push_back(table.getDimSize(1));
  inferred.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto input = getTensor(adaptor.getInput().getType());
  auto indices = getTensor(adaptor.getIndices().getType());
  if (!input || !indices)
    return emitOptionalError(location, "expects ranked tensors");
  int64_t axis = adaptor.getAxis();
  if (axis >= input.getRank())
    return emitOptionalError(location, "axis ", axis,
                             " is out of range for rank ", input.getRank(),
                             " (axes are in [0, rank))");
  SmallVector<int64_t> shape(input.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, input.getShape().drop_front(axis + 1));
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ReshapeOp::verify() {
  if (getInput().getType().getNumElements() != getType().getNumElements())
    return emitOpError("cannot reshape ")
           << getInput().getType() << " (" << getInput().getType().getNumElements()
           << " elements) to " << getType() << " (" << getType().getNumElements()
           << " elements)";
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *context,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto input = getTensor(adaptor.getInput().getType());
  if (!input)
    return emitOptionalError(location, "expects a ranked tensor");
  ArrayRef<int64_t> permutation = adaptor.getPermutation();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(permutation.size()) != rank)
    return emitOptionalError(location, "permutation has ", permutation.size(),
                             " entries for rank ", rank);
  llvm::SmallSet<int64_t, 4> seen;
  SmallVector<int64_t> shape;
  for (int64_t dim : permutation) {
    if (dim < 0 || dim >= rank || !seen.insert(dim).second)
      return emitOptionalError(location, "[", permutation,
                               "] is not a permutation of 0..", rank - 1);
    shape.push_back(input.getDimSize(dim));
  }
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *context,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  auto input = getTensor(adaptor.getInput().getType());
  if (!input)
    return emitOptionalError(location, "expects a ranked tensor");
  ArrayRef<int64_t> starts = adaptor.getStarts(), limits = adaptor.getLimits();
  SmallVector<int64_t> strides(input.getRank(), 1);
  if (std::optional<ArrayRef<int64_t>> given = adaptor.getStrides())
    strides.assign(given->begin(), given->end());
  size_t rank = input.getRank();
  if (starts.size() != rank || limits.size() != rank || strides.size() != rank)
    return emitOptionalError(location, "starts, limits and strides need one "
                                       "entry per dimension (",
                             rank, ")");
  SmallVector<int64_t> shape;
  for (size_t d = 0; d < rank; ++d) {
    if (starts[d] < 0 || starts[d] > limits[d] ||
        limits[d] > input.getDimSize(d))
      return emitOptionalError(location, "dimension ", d,
                               ": need 0 <= start <= limit <= size, got start ",
                               starts[d], ", limit ", limits[d], ", size ",
                               input.getDimSize(d));
    if (strides[d] < 1)
      return emitOptionalError(location, "dimension ", d,
                               ": stride must be at least 1, got ", strides[d]);
    shape.push_back(llvm::divideCeil(limits[d] - starts[d], strides[d]));
  }
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(location, "needs at least one input");
  auto first = getTensor(inputs.front().getType());
  if (!first)
    return emitOptionalError(location, "expects ranked tensors");
  int64_t axis = adaptor.getAxis();
  if (axis >= first.getRank())
    return emitOptionalError(location, "axis ", axis,
                             " is out of range for rank ", first.getRank(),
                             " (axes are in [0, rank))");
  SmallVector<int64_t> shape(first.getShape());
  for (Value input : inputs.drop_front()) {
    auto type = getTensor(input.getType());
    if (!type || type.getRank() != first.getRank())
      return emitOptionalError(location, "inputs must have one rank, got ",
                               first, " and ", input.getType());
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (d == axis)
        shape[d] += type.getDimSize(d);
      else if (type.getDimSize(d) != shape[d])
        return emitOptionalError(location, "inputs differ in dimension ", d,
                                 " (only the axis ", axis, " may differ): ",
                                 first, " and ", type);
    }
  }
  inferred.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *context,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  auto input = getTensor(adaptor.getInput().getType());
  if (!input)
    return emitOptionalError(location, "expects a ranked tensor");
  int64_t axis = adaptor.getAxis();
  if (axis >= input.getRank())
    return emitOptionalError(location, "axis ", axis,
                             " is out of range for rank ", input.getRank(),
                             " (axes are in [0, rank))");
  ArrayRef<int64_t> sizes = adaptor.getSizes();
  if (sizes.empty())
    return emitOptionalError(location, "needs at least one size");
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 0)
      return emitOptionalError(location, "sizes must not be negative, got ",
                               size);
    total += size;
  }
  if (total != input.getDimSize(axis))
    return emitOptionalError(location, "sizes add up to ", total,
                             " but dimension ", axis, " has ",
                             input.getDimSize(axis));
  SmallVector<int64_t> shape(input.getShape());
  for (int64_t size : sizes) {
    shape[axis] = size;
    inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  }
  return success();
}

LogicalResult BroadcastToOp::verify() {
  ArrayRef<int64_t> from = getInput().getType().getShape();
  ArrayRef<int64_t> to = getType().getShape();
  std::optional<SmallVector<int64_t>> joined = broadcastShapes(from, to);
  if (from.size() > to.size() || !joined || *joined != to)
    return emitOpError("cannot broadcast ")
           << getInput().getType() << " to " << getType()
           << " (each input dimension, aligned at the end, must be 1 or equal "
              "the result's)";
  return success();
}

LogicalResult CumSumOp::verify() {
  if (static_cast<int64_t>(getAxis()) >= getType().getRank())
    return emitOpError("axis ")
           << getAxis() << " is not a dimension of " << getType();
  return success();
}

LogicalResult TriluOp::verify() {
  if (getType().getRank() < 2)
    return emitOpError("needs rank at least 2, got ") << getType();
  return success();
}

LogicalResult
CrossEntropyOp::inferReturnTypes(MLIRContext *context,
                                 std::optional<Location> location,
                                 Adaptor adaptor,
                                 SmallVectorImpl<Type> &inferred) {
  auto logits = getTensor(adaptor.getLogits().getType());
  auto labels = getTensor(adaptor.getLabels().getType());
  if (!logits || logits.getRank() < 1)
    return rankError(location, "logits", adaptor.getLogits().getType(),
                     "rank at least 1");
  if (!labels || labels.getShape() != logits.getShape().drop_back())
    return emitOptionalError(location, "labels must have shape [",
                             logits.getShape().drop_back(),
                             "] (logits without the class dimension), got ",
                             adaptor.getLabels().getType());
  ArrayRef<int64_t> shape;
  if (adaptor.getReduction() == LossReduction::none)
    shape = labels.getShape();
  inferred.push_back(RankedTensorType::get(shape, logits.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Repeated structure
//===----------------------------------------------------------------------===//

void LayerOp::build(OpBuilder &builder, OperationState &state, StringRef kind,
                    int64_t index, ValueRange inputs, TypeRange resultTypes) {
  state.addAttribute(getKindAttrName(state.name), builder.getStringAttr(kind));
  state.addAttribute(getIndexAttrName(state.name),
                     builder.getI64IntegerAttr(index));
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  Block *body = new Block();
  for (Value input : inputs)
    body->addArgument(input.getType(), input.getLoc());
  state.addRegion()->push_back(body);
}

LogicalResult LayerOp::verify() {
  if (getKind().empty())
    return emitOpError("needs a non-empty kind");
  Block &body = getBody().front();
  if (body.getArgumentTypes() != getInputs().getTypes())
    return emitOpError("body arguments ")
           << body.getArgumentTypes() << " must have the operand types "
           << getInputs().getTypes();
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ")
           << yield.getValues().getTypes() << " but the layer returns "
           << getResultTypes();
  return success();
}

LogicalResult FusionOp::verify() {
  Block &body = getBody().front();
  if (body.getArgumentTypes() != getInputs().getTypes())
    return emitOpError("body arguments ")
           << body.getArgumentTypes() << " must have the operand types "
           << getInputs().getTypes();
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().size() != 1 ||
      yield.getValues().front().getType() != getType())
    return emitOpError("yields ") << yield.getValues().getTypes()
                                  << " but the fusion returns " << getType();
  auto shape = getType().getShape();
  if (getKind() == FusionKind::elementwise) {
    for (Operation &op : body.without_terminator()) {
      if (!op.hasTrait<weft::OpTrait::Elementwise>())
        return emitOpError("of kind elementwise holds '")
               << op.getName() << "', which is not elementwise";
      for (Type type : op.getResultTypes())
        if (cast<RankedTensorType>(type).getShape() != shape)
          return emitOpError("of kind elementwise holds '")
                 << op.getName() << "' of shape " << type
                 << ", not the fusion's";
    }
    return success();
  }
  // An epilogue: linear, then a tanh GELU of its result.
  auto ops = body.without_terminator();
  auto it = ops.begin();
  auto linear = it != ops.end() ? dyn_cast<LinearOp>(*it) : LinearOp();
  GeluOp gelu = linear && ++it != ops.end() ? dyn_cast<GeluOp>(*it) : GeluOp();
  if (!linear || !gelu || std::next(it) != ops.end() ||
      gelu.getInput() != linear.getResult() ||
      gelu.getApproximation() != GeluApproximation::tanh ||
      yield.getValues().front() != gelu.getResult())
    return emitOpError("of kind epilogue must hold a weft.linear and a tanh "
                       "weft.gelu of its result");
  return success();
}

LogicalResult WaitOp::verify() {
  auto collective = getInput().getDefiningOp<CollectiveOpInterface>();
  if (!collective || !collective.communicates())
    return emitOpError("waits for a value that no communicating collective "
                       "produced");
  return success();
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

ParseResult MeshOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(),
                             result.attributes))
    return failure();
  SmallVector<Attribute> axes;
  SmallVector<int64_t> shape;
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Paren, [&] {
        std::string axis;
        int64_t size = 0;
        if (parser.parseKeywordOrString(&axis) || parser.parseEqual() ||
            parser.parseInteger(size))
          return failure();
        axes.push_back(parser.getBuilder().getStringAttr(axis));
        shape.push_back(size);
        return success();
      }))
    return failure();
  result.addAttribute(getAxesAttrName(result.name),
                      parser.getBuilder().getArrayAttr(axes));
  result.addAttribute(getShapeAttrName(result.name),
                      parser.getBuilder().getDenseI64ArrayAttr(shape));
  return parser.parseOptionalAttrDict(result.attributes);
}

void MeshOp::print(OpAsmPrinter &printer) {
  printer << ' ';
  printer.printSymbolName(getSymName());
  printer << '(';
  llvm::interleaveComma(llvm::zip(getAxes(), getShape()), printer,
                        [&](auto axisAndSize) {
                          auto [axis, size] = axisAndSize;
                          printer.printKeywordOrString(
                              cast<StringAttr>(axis).getValue());
                          printer << " = " << size;
                        });
  printer << ')';
  printer.printOptionalAttrDict(
      (*this)->getAttrs(),
      {SymbolTable::getSymbolAttrName(), getAxesAttrName(), getShapeAttrName()});
}

LogicalResult MeshOp::verify() {
  if (getAxes().empty())
    return emitOpError("needs at least one axis");
  if (getAxes().size() != getShape().size())
    return emitOpError("has ") << getAxes().size() << " axis names but "
                               << getShape().size() << " sizes";
  llvm::StringSet<> seen;
  for (auto [axis, size] : llvm::zip(getAxes(), getShape())) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (name.empty())
      return emitOpError("axis names must not be empty");
    if (!seen.insert(name).second)
      return emitOpError("axis '") << name << "' is declared twice";
    if (size < 1)
      return emitOpError("axis '") << name << "' has size " << size
                                   << "; sizes must be at least 1";
  }
  return success();
}

std::optional<int64_t> MeshOp::getAxisSize(StringRef axis) {
  for (auto [name, size] : llvm::zip(getAxes(), getShape()))
    if (cast<StringAttr>(name).getValue() == axis)
      return size;
  return std::nullopt;
}

int64_t MeshOp::getNumDevices() {
  int64_t devices = 1;
  for (int64_t size : getShape())
    devices *= size;
  return devices;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// Resolves a collective's mesh and axes and returns the size of its groups.
static FailureOr<int64_t> verifyGroup(Operation *op, FlatSymbolRefAttr meshRef,
                                      ArrayAttr axes,
                                      SymbolTableCollection &symbolTable) {
  auto mesh = symbolTable.lookupNearestSymbolFrom<MeshOp>(op, meshRef);
  if (!mesh)
    return op->emitOpError("mesh ")
           << meshRef << " is not a weft.mesh in the enclosing module; "
           << "declare it, e.g. 'weft.mesh " << meshRef << "(tp = 2)'";
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  CollectiveCodec codec = getCollectiveCodec(op);
  if (codec != CollectiveCodec::none && op->getNumOperands() &&
      !isa<FloatType>(
          cast<RankedTensorType>(op->getOperand(0).getType()).getElementType()))
    return op->emitOpError("codec ")
           << stringifyCollectiveCodec(codec)
           << " compresses floats; this collective sends "
           << op->getOperand(0).getType() << " (drop the codec)";
  if (!codecApplies(op, codec)) {
    return op->emitOpError("codec ")
           << stringifyCollectiveCodec(codec)
           << " sends a summed gradient's largest elements: only an "
              "all_reduce sum or avg takes it";
  }
  int64_t size = 1;
  llvm::StringSet<> seen;
  for (StringRef axis : axes.getAsValueRange<StringAttr>()) {
    if (!seen.insert(axis).second)
      return op->emitOpError("names mesh axis '") << axis << "' twice";
    std::optional<int64_t> axisSize = mesh.getAxisSize(axis);
    if (!axisSize)
      return op->emitOpError("mesh ")
             << meshRef << " has no axis '" << axis << "'";
    size *= *axisSize;
  }
  return size;
}

/// Checks `dim` against the operand and that the result is the operand with
/// dimension `dim` changed to `expected`.
static LogicalResult verifyResizedDim(Operation *op, RankedTensorType operand,
                                      RankedTensorType result, int64_t dim,
                                      int64_t expected) {
  SmallVector<int64_t> shape(operand.getShape());
  shape[dim] = expected;
  if (result.getShape() != ArrayRef<int64_t>(shape))
    return op->emitOpError("result shape must be [")
           << shape << "], got " << result;
  return success();
}

static LogicalResult verifyDimInRange(Operation *op, StringRef name,
                                      int64_t dim, RankedTensorType type) {
  if (dim >= type.getRank())
    return op->emitOpError()
           << name << " " << dim << " is out of range for " << type;
  return success();
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &table) {
  if (failed(verifyGroup(*this, getMeshAttr(), getAxes(), table)))
    return failure();
  std::optional<ArrayRef<int64_t>> members = getMembers();
  if (!members)
    return success();
  if (getAxes().size() != 1)
    return emitOpError("with 'members' spans one mesh axis, not ")
           << getAxes().size();
  auto mesh = table.lookupNearestSymbolFrom<MeshOp>(*this, getMeshAttr());
  int64_t size =
      mesh.getAxisSize(cast<StringAttr>(getAxes()[0]).getValue()).value_or(0);
  if (members->size() < 2)
    return emitOpError("'members' lists at least two coordinates");
  for (size_t i = 0; i < members->size(); ++i)
    if ((*members)[i] < 0 || (*members)[i] >= size ||
        (i && (*members)[i] <= (*members)[i - 1]))
      return emitOpError("'members' are coordinates of axis ")
             << getAxes()[0] << " (size " << size << ") in increasing order";
  return success();
}

LogicalResult AllGatherOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  if (failed(group) ||
      failed(verifyDimInRange(*this, "dim", getDim(), getInput().getType())))
    return failure();
  return verifyResizedDim(*this, getInput().getType(), getType(), getDim(),
                          getInput().getType().getDimSize(getDim()) * *group);
}

static bool isFloatConversion(Operation *op);

bool weft::isWeightBlock(Value value) {
  for (Operation *def = value.getDefiningOp();
       isa_and_nonnull<AllSliceOp>(def) || isFloatConversion(def);
       def = value.getDefiningOp())
    value = def->getOperand(0);
  return bool(value.getDefiningOp<ParameterOp>());
}

LogicalResult AllGatherOp::verify() {
  if (getHold() && !isWeightBlock(getInput()))
    return emitOpError("with 'hold' gathers a weight's block (a "
                       "weft.parameter through weft.all_slice ops); a value "
                       "computed per micro-batch cannot be held over a block");
  return success();
}

LogicalResult AllSliceOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  if (failed(group) ||
      failed(verifyDimInRange(*this, "dim", getDim(), getInput().getType())))
    return failure();
  int64_t size = getInput().getType().getDimSize(getDim());
  if (size % (*group * (getZigzag() ? 2 : 1)) != 0)
    return emitOpError("dimension ")
           << getDim() << " of size " << size
           << " does not divide by the group size " << *group
           << (getZigzag() ? " times 2 (zigzag)" : "");
  return verifyResizedDim(*this, getInput().getType(), getType(), getDim(),
                          size / *group);
}

LogicalResult ReduceScatterOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  if (failed(group) ||
      failed(verifyDimInRange(*this, "dim", getDim(), getInput().getType())))
    return failure();
  int64_t size = getInput().getType().getDimSize(getDim());
  if (size % (*group * (getZigzag() ? 2 : 1)) != 0)
    return emitOpError("dimension ")
           << getDim() << " of size " << size
           << " does not divide by the group size " << *group
           << (getZigzag() ? " times 2 (zigzag)" : "");
  return verifyResizedDim(*this, getInput().getType(), getType(), getDim(),
                          size / *group);
}

LogicalResult AllToAllOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  RankedTensorType input = getInput().getType();
  if (failed(group) ||
      failed(verifyDimInRange(*this, "split_dim", getSplitDim(), input)) ||
      failed(verifyDimInRange(*this, "concat_dim", getConcatDim(), input)))
    return failure();
  SmallVector<int64_t> shape(input.getShape());
  if (shape[getSplitDim()] % *group != 0)
    return emitOpError("split dimension ")
           << getSplitDim() << " of size " << shape[getSplitDim()]
           << " does not divide by the group size " << *group;
  shape[getSplitDim()] /= *group;
  shape[getConcatDim()] *= *group;
  if (getType().getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("result shape must be [")
           << shape << "], got " << getType();
  return success();
}

LogicalResult
CollectivePermuteOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  if (failed(group))
    return failure();
  if (getShift() % *group == 0)
    return emitOpError("shift ") << getShift()
                                 << " is a multiple of the group size "
                                 << *group << ", so nothing moves";
  return success();
}

/// Checks a point-to-point offset against the group size.
static LogicalResult verifyPeerOffset(Operation *op, int64_t offset,
                                      int64_t group) {
  if (offset == 0 || offset <= -group || offset >= group)
    return op->emitOpError("offset ")
           << offset << " must be non-zero with magnitude below the group "
           << "size " << group;
  return success();
}

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  return failed(group) ? failure()
                       : verifyPeerOffset(*this, getOffset(), *group);
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  return failed(group) ? failure()
                       : verifyPeerOffset(*this, getOffset(), *group);
}

LogicalResult BroadcastOp::verifySymbolUses(SymbolTableCollection &table) {
  FailureOr<int64_t> group = verifyGroup(*this, getMeshAttr(), getAxes(), table);
  if (failed(group))
    return failure();
  if (static_cast<int64_t>(getRoot()) >= *group)
    return emitOpError("root ") << getRoot() << " is not a rank of a group of "
                                << *group;
  return success();
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

/// A cast from float to float: the same weight in another precision.
static bool isFloatConversion(Operation *op) {
  auto cast = dyn_cast_or_null<CastOp>(op);
  return cast &&
         isa<FloatType>(getElementTypeOrSelf(cast.getInput().getType())) &&
         isa<FloatType>(getElementTypeOrSelf(cast.getResult().getType()));
}

ParameterOp weft::getWeightParameter(Value value) {
  Operation *def = value.getDefiningOp();
  while (isFloatConversion(def))
    def = cast<CastOp>(def).getInput().getDefiningOp();
  return dyn_cast_or_null<ParameterOp>(def);
}

SmallVector<Value> weft::getWeightValues(ParameterOp param) {
  SmallVector<Value> values{param.getResult()};
  for (size_t i = 0; i < values.size(); ++i)
    for (Operation *user : values[i].getUsers())
      if (isFloatConversion(user))
        values.push_back(user->getResult(0));
  return values;
}
