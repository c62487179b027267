//===- Interpreter.cpp - Run weft functions on the CPU --------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Exec/Interpreter.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Profile.h"
#include "weft/runtime/Program.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <fstream>
#include <map>

using namespace mlir;
using namespace weft;
using rt::DType;
using rt::HostTensor;

DType weft::toDType(Type elementType) {
  if (elementType.isF16())
    return DType::F16;
  if (elementType.isBF16())
    return DType::BF16;
  if (elementType.isF32())
    return DType::F32;
  if (elementType.isF64())
    return DType::F64;
  if (elementType.isInteger(64))
    return DType::I64;
  if (elementType.isInteger(32))
    return DType::I32;
  return DType::Bool;
}

/// The runtime's codec of the same name.
static rt::Codec runtimeCodec(CollectiveCodec codec) {
  return rt::parseCodec(stringifyCollectiveCodec(codec).str())
      .value_or(rt::Codec::None);
}

static std::vector<int64_t> toVector(ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

static rt::Shape shapeOf(Type type) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(type).getShape();
  return rt::Shape(shape.begin(), shape.end());
}

HostTensor weft::toHostTensor(ElementsAttr value) {
  auto type = cast<RankedTensorType>(value.getType());
  DType dtype = toDType(type.getElementType());
  // f32 and i64 weights are used where the module holds them: the context
  // keeps attributes alive as long as any module of it, so a weight is not
  // copied (the interpreter copies what it returns, see interpret()).
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (dense && !dense.isSplat() &&
      (dtype == DType::F32 || dtype == DType::I64)) {
    ArrayRef<char> raw = dense.getRawData();
    HostTensor tensor;
    tensor.dtype = dtype;
    tensor.shape = shapeOf(type);
    size_t n = static_cast<size_t>(tensor.numel());
    // The storage is borrowed, never written through: kernels write only
    // their results.
    char *data = const_cast<char *>(raw.data());
    if (dtype == DType::F32)
      tensor.floats = rt::Storage<float>::borrow(
          reinterpret_cast<float *>(data), n, nullptr);
    else
      tensor.ints = rt::Storage<int64_t>::borrow(
          reinterpret_cast<int64_t *>(data), n, nullptr);
    return tensor;
  }
  HostTensor tensor = HostTensor::uninitialized(dtype, shapeOf(type));
  int64_t i = 0;
  if (tensor.isFloat()) {
    if (dense && dense.isSplat()) {
      APFloat element = dense.getSplatValue<APFloat>();
      bool lost;
      element.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven,
                      &lost);
      std::fill(tensor.floats.begin(), tensor.floats.end(),
                element.convertToFloat());
      return tensor;
    }
    for (APFloat element : value.getValues<APFloat>()) {
      bool lost;
      element.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
      tensor.floats[i++] = element.convertToFloat();
    }
  } else {
    bool isBool = tensor.dtype == DType::Bool;
    for (APInt element : value.getValues<APInt>())
      tensor.ints[i++] = isBool ? element.getZExtValue() : element.getSExtValue();
  }
  return tensor;
}

FailureOr<HostTensor> weft::readExternalParameter(Operation *param,
                                                  StringRef dir) {
  auto op = cast<ParameterOp>(param);
  ExternalDataAttr external = op.getExternalAttr();
  if (!external)
    return op.emitError("parameter '")
           << op.getName() << "' is not stored as external data";
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, external.getLocation());
  std::ifstream file(path.str().str(), std::ios::binary);
  if (!file)
    return op.emitError("cannot open external data file '")
           << path << "' for parameter '" << op.getName() << "'";
  std::string bytes(external.getLength(), '\0');
  file.seekg(external.getOffset());
  file.read(bytes.data(), external.getLength());
  if (file.gcount() != external.getLength())
    return op.emitError("external data file '")
           << path << "' is shorter than offset " << external.getOffset()
           << " + length " << external.getLength();
  HostTensor tensor(toDType(op.getType().getElementType()), shapeOf(op.getType()));
  // The file's elements, where they are not the parameter's (an f32 weight
  // narrowed to 16 bits): read as stored, then rounded.
  const DType storedType =
      external.getStored() ? toDType(external.getStored()) : tensor.dtype;
  if (rt::isFloat(storedType) != tensor.isFloat())
    return op.emitError("parameter '")
           << op.getName() << "' is stored as " << external.getStored()
           << ", which its type " << op.getType() << " cannot hold";
  // A column window: element i is column start + i % columns of stored row
  // i / columns.
  int64_t width = external.getRowWidth(), start = external.getColumnStart();
  int64_t columns = tensor.shape.empty() ? 1 : tensor.shape.back();
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    int64_t stored = width ? i / columns * width + start + i % columns : i;
    const char *at = bytes.data() + stored * rt::dtypeBytes(storedType);
    switch (storedType) {
    case DType::F32:
      std::memcpy(&tensor.floats[i], at, 4);
      break;
    case DType::F64: {
      double value;
      std::memcpy(&value, at, 8);
      tensor.floats[i] = static_cast<float>(value);
      break;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t bits;
      std::memcpy(&bits, at, 2);
      tensor.floats[i] = tensor.dtype == DType::F16 ? rt::f16BitsToFloat(bits)
                                                    : rt::bf16BitsToFloat(bits);
      break;
    }
    case DType::I64:
      std::memcpy(&tensor.ints[i], at, 8);
      break;
    case DType::I32: {
      int32_t value;
      std::memcpy(&value, at, 4);
      tensor.ints[i] = value;
      break;
    }
    case DType::Bool:
      tensor.ints[i] = *at != 0;
      break;
    }
    if (storedType != tensor.dtype && tensor.dtype == DType::BF16)
      tensor.floats[i] = rt::roundToBF16(tensor.floats[i]);
    else if (storedType != tensor.dtype && tensor.dtype == DType::F16)
      tensor.floats[i] = rt::roundToF16(tensor.floats[i]);
  }
  return tensor;
}

namespace {

class Interpreter {
public:
  explicit Interpreter(const InterpreterOptions &options) : options(options) {}

  FailureOr<std::vector<HostTensor>> runBlock(Block &block,
                                              std::vector<HostTensor> args);
  /// Measures what `block`'s forward layers hand their backward layers
  /// while it runs (InterpreterOptions::savedActivationPeak).
  void trackSavedActivations(Block &block);
  int64_t savedActivationPeak() const { return savedPeak; }
  FailureOr<std::vector<HostTensor>> runOps(ArrayRef<Operation *> ops,
                                            ValueRange results) {
    for (Operation *op : ops)
      if (failed(run(op)))
        return failure();
    std::vector<HostTensor> tensors;
    for (Value value : results)
      tensors.push_back(get(value));
    return tensors;
  }

private:
  LogicalResult run(Operation *op);
  LogicalResult runCollective(Operation *op);
  const HostTensor &get(Value value) { return values.find(value)->second; }
  /// True if `op` is the last to read `value` (and reads it once): the
  /// value dies there.
  bool diesAt(Value value, Operation *op) const {
    auto last = lastUse.find(value);
    return last != lastUse.end() && last->second == op &&
           llvm::count(op->getOperands(), value) == 1;
  }
  /// `value`'s tensor for `op`: moved out where `op` is its last reader,
  /// copied otherwise.
  HostTensor take(Value value, Operation *op) {
    if (!diesAt(value, op))
      return get(value);
    auto it = values.find(value);
    HostTensor tensor = std::move(it->second);
    values.erase(it);
    return tensor;
  }
  void set(Value value, HostTensor tensor) {
    values.insert_or_assign(value, std::move(tensor));
  }
  LogicalResult setOrFail(Operation *op, Value value,
                          absl::StatusOr<HostTensor> result) {
    if (!result.ok())
      return op->emitError() << std::string(result.status().message());
    set(value, std::move(*result));
    return success();
  }

  const InterpreterOptions &options;
  llvm::DenseMap<Value, HostTensor> values;
  /// The op of the block being run that reads each value last (an op with
  /// regions reads what its regions read). Values die there: a run holds
  /// only the tensors still to be read, as PyTorch's eager mode does.
  llvm::DenseMap<Value, Operation *> lastUse;

  /// Saved activations: for a forward layer and for its backward pair, the
  /// values the backward reads of the forward; per value, the layers holding
  /// it and its bytes; what is held now and the most held at once.
  void noteSavedActivations(Operation *op);
  llvm::DenseMap<Operation *, SmallVector<Value>> handedOver;
  llvm::DenseSet<Operation *> backwardLayers;
  llvm::DenseMap<Value, std::pair<int, int64_t>> savedHeld;
  int64_t savedLive = 0, savedPeak = 0;
};

int64_t allocatedBytes(const HostTensor &tensor) {
  return tensor.numel() *
         int64_t(tensor.isFloat() ? sizeof(float) : sizeof(int64_t));
}

} // namespace

FailureOr<std::vector<HostTensor>>
Interpreter::runBlock(Block &block, std::vector<HostTensor> args) {
  for (auto [arg, tensor] : llvm::zip(block.getArguments(), args))
    set(arg, std::move(tensor));
  lastUse.clear();
  for (Operation &op : block)
    op.walk([&](Operation *inner) {
      for (Value operand : inner->getOperands())
        lastUse[operand] = &op;
    });
  for (Operation &op : block) {
    if (op.hasTrait<mlir::OpTrait::IsTerminator>()) {
      std::vector<HostTensor> results;
      for (Value operand : op.getOperands())
        results.push_back(take(operand, &op));
      return results;
    }
    if (failed(run(&op)))
      return failure();
    if (!handedOver.empty())
      noteSavedActivations(&op);
    // What this op read last is no longer needed.
    for (Value operand : op.getOperands()) {
      auto last = lastUse.find(operand);
      if (last != lastUse.end() && last->second == &op)
        values.erase(operand);
    }
  }
  return block.getParentOp()->emitError("block has no terminator");
}

void Interpreter::trackSavedActivations(Block &block) {
  // Activations are what the block's arguments (the step's inputs) flow
  // into; weights and constants (read again by the backward) are not.
  llvm::DenseSet<Value> activation(block.args_begin(), block.args_end());
  std::map<std::pair<std::string, int64_t>, LayerOp> forwardOf;
  for (Operation &op : block) {
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return activation.contains(v); }))
      activation.insert(op.result_begin(), op.result_end());
    auto layer = dyn_cast<LayerOp>(&op);
    if (!layer)
      continue;
    StringRef kind = layer.getKind();
    int64_t index = int64_t(layer.getIndex());
    if (!kind.consume_back(".backward")) {
      forwardOf[{kind.str(), index}] = layer;
      continue;
    }
    auto pair = forwardOf.find({kind.str(), index});
    if (pair == forwardOf.end())
      continue;
    LayerOp forward = pair->second;
    SmallVector<Value> kept;
    for (Value v : layer.getInputs()) {
      bool fromForward = v.getDefiningOp() == forward.getOperation() ||
                         (activation.contains(v) &&
                          llvm::is_contained(forward.getInputs(), v));
      if (fromForward && !llvm::is_contained(kept, v))
        kept.push_back(v);
    }
    handedOver[forward] = kept;
    handedOver[layer] = kept;
    backwardLayers.insert(layer);
  }
}

void Interpreter::noteSavedActivations(Operation *op) {
  auto it = handedOver.find(op);
  if (it == handedOver.end())
    return;
  bool backward = backwardLayers.contains(op);
  for (Value v : it->second) {
    std::pair<int, int64_t> &held = savedHeld[v];
    if (backward) {
      if (--held.first == 0)
        savedLive -= held.second;
    } else if (held.first++ == 0) {
      auto value = values.find(v);
      held.second = value == values.end() ? 0 : allocatedBytes(value->second);
      savedLive += held.second;
    }
  }
  savedPeak = std::max(savedPeak, savedLive);
}

LogicalResult Interpreter::run(Operation *op) {
  using rt::BinaryKind;
  using rt::UnaryKind;
  auto result = [&](HostTensor tensor) {
    set(op->getResult(0), std::move(tensor));
    return success();
  };
  auto binaryOp = [&](BinaryKind kind) {
    return result(rt::binary(kind, get(op->getOperand(0)), get(op->getOperand(1))));
  };
  auto unaryOp = [&](UnaryKind kind) {
    return result(rt::unary(kind, get(op->getOperand(0))));
  };
  auto reduceOp = [&](rt::ReduceKind kind, auto reduction) {
    return result(rt::reduce(kind, get(reduction.getInput()),
                             toVector(reduction.getAxes()),
                             reduction.getKeepDims()));
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParameterOp param) -> LogicalResult {
        rt::ProfileScope profile("weight");
        if (options.parameters) {
          auto it = options.parameters->find(param.getName());
          if (it != options.parameters->end()) {
            if (it->second.shape != shapeOf(param.getType()))
              return param.emitError("parameter '")
                     << param.getName() << "' is given with shape "
                     << rt::shapeString(it->second.shape) << ", expected "
                     << param.getType();
            return result(it->second);
          }
        }
        if (std::optional<ElementsAttr> value = param.getValue())
          return result(toHostTensor(*value));
        if (param.getExternalAttr()) {
          FailureOr<HostTensor> tensor =
              readExternalParameter(param, options.weightsDir);
          return failed(tensor) ? failure() : result(std::move(*tensor));
        }
        return param.emitError("parameter '")
               << param.getName()
               << "' has no value: the module was imported without weights "
                  "(--no-weights); import it with weights to run it";
      })
      .Case([&](ConstantOp c) {
        rt::ProfileScope profile("weight");
        return result(toHostTensor(c.getValue()));
      })
      .Case([&](IotaOp iota) {
        return result(rt::iota(toDType(iota.getType().getElementType()),
                               shapeOf(iota.getType()), iota.getDim()));
      })
      .Case([&](AddOp) { return binaryOp(BinaryKind::Add); })
      .Case([&](SubOp) { return binaryOp(BinaryKind::Sub); })
      .Case([&](MulOp) { return binaryOp(BinaryKind::Mul); })
      .Case([&](DivOp) { return binaryOp(BinaryKind::Div); })
      .Case([&](PowOp) { return binaryOp(BinaryKind::Pow); })
      .Case([&](MaximumOp) { return binaryOp(BinaryKind::Max); })
      .Case([&](MinimumOp) { return binaryOp(BinaryKind::Min); })
      .Case([&](CompareOp compare) {
        static const rt::CompareKind kinds[] = {
            rt::CompareKind::Eq, rt::CompareKind::Ne, rt::CompareKind::Lt,
            rt::CompareKind::Le, rt::CompareKind::Gt, rt::CompareKind::Ge};
        return result(rt::compare(kinds[static_cast<int>(compare.getPredicate())],
                                  get(compare.getLhs()), get(compare.getRhs())));
      })
      .Case([&](WhereOp where) {
        return result(rt::where(get(where.getCondition()), get(where.getLhs()),
                                get(where.getRhs())));
      })
      .Case([&](NegOp) { return unaryOp(UnaryKind::Neg); })
      .Case([&](ExpOp) { return unaryOp(UnaryKind::Exp); })
      .Case([&](LogOp) { return unaryOp(UnaryKind::Log); })
      .Case([&](SqrtOp) { return unaryOp(UnaryKind::Sqrt); })
      .Case([&](RsqrtOp) { return unaryOp(UnaryKind::Rsqrt); })
      .Case([&](TanhOp) { return unaryOp(UnaryKind::Tanh); })
      .Case([&](ErfOp) { return unaryOp(UnaryKind::Erf); })
      .Case([&](SinOp) { return unaryOp(UnaryKind::Sin); })
      .Case([&](CosOp) { return unaryOp(UnaryKind::Cos); })
      .Case([&](SigmoidOp) { return unaryOp(UnaryKind::Sigmoid); })
      .Case([&](ReluOp) { return unaryOp(UnaryKind::Relu); })
      .Case([&](AbsOp) { return unaryOp(UnaryKind::Abs); })
      .Case([&](SiluOp) { return unaryOp(UnaryKind::Silu); })
      .Case([&](GeluOp gelu) {
        return unaryOp(gelu.getApproximation() == GeluApproximation::tanh
                           ? UnaryKind::GeluTanh
                           : UnaryKind::GeluErf);
      })
      .Case([&](CastOp c) {
        return result(rt::cast(get(c.getInput()),
                               toDType(c.getType().getElementType())));
      })
      .Case([&](ReduceSumOp r) { return reduceOp(rt::ReduceKind::Sum, r); })
      .Case([&](ReduceMeanOp r) { return reduceOp(rt::ReduceKind::Mean, r); })
      .Case([&](ReduceMaxOp r) { return reduceOp(rt::ReduceKind::Max, r); })
      .Case([&](ReduceLogSumExpOp r) {
        return reduceOp(rt::ReduceKind::LogSumExp, r);
      })
      .Case([&](SoftmaxOp s) {
        return result(rt::softmax(get(s.getInput()), s.getAxis(), false,
                                  s.getScale().convertToFloat(),
                                  s.getCausal()));
      })
      .Case([&](LogSoftmaxOp s) {
        return result(rt::softmax(get(s.getInput()), s.getAxis(), true,
                                  s.getScale().convertToFloat(),
                                  s.getCausal()));
      })
      // A forward program keeps every element (PyTorch's eval mode).
      .Case([&](DropoutOp d) { return result(take(d.getInput(), op)); })
      .Case([&](LayerNormOp n) {
        const HostTensor *bias = n.getBias() ? &get(n.getBias()) : nullptr;
        return result(rt::normalize(get(n.getInput()), get(n.getScale()), bias,
                                    n.getAxis(),
                                    n.getEpsilon().convertToFloat(), false));
      })
      .Case([&](RMSNormOp n) {
        return result(rt::normalize(get(n.getInput()), get(n.getScale()), nullptr,
                                    n.getAxis(),
                                    n.getEpsilon().convertToFloat(), true));
      })
      .Case([&](MatmulOp m) {
        return result(rt::matmul(get(m.getLhs()), get(m.getRhs()),
                                 m.getTransposeLhs(), m.getTransposeRhs()));
      })
      .Case([&](LinearOp l) {
        const HostTensor *bias = l.getBias() ? &get(l.getBias()) : nullptr;
        return result(rt::linear(get(l.getInput()), get(l.getWeight()), bias,
                                 l.getTransposeWeight()));
      })
      .Case([&](AttentionOp a) {
        const HostTensor *mask = a.getMask() ? &get(a.getMask()) : nullptr;
        return result(rt::attention(
            get(a.getQ()), get(a.getK()), get(a.getV()), mask,
            a.getScale().convertToFloat(), a.getCausal(),
            softcapOrZero(a.getSoftcap()), windowOrZero(a.getWindow()),
            a.getAlibiSlopes() ? &get(a.getAlibiSlopes()) : nullptr));
      })
      .Case([&](AttentionBlockOp a) {
        auto optional = [&](Value v) { return v ? &get(v) : nullptr; };
        rt::AttentionBlock block = rt::attentionBlock(
            get(a.getQ()), get(a.getK()), get(a.getV()), optional(a.getMask()),
            optional(a.getQPositions()), optional(a.getKPositions()),
            a.getScale().convertToFloat(), a.getCausal(),
            softcapOrZero(a.getSoftcap()), windowOrZero(a.getWindow()),
            optional(a.getAlibiSlopes()));
        set(a.getResult(), std::move(block.output));
        set(a.getLse(), std::move(block.lse));
        return success();
      })
      .Case([&](AttentionGradOp a) {
        auto optional = [&](Value v) { return v ? &get(v) : nullptr; };
        rt::AttentionGradients grads = rt::attentionGrad(
            get(a.getQ()), get(a.getK()), get(a.getV()), get(a.getResultGrad()),
            optional(a.getMask()), optional(a.getQPositions()),
            optional(a.getKPositions()), a.getScale().convertToFloat(),
            a.getCausal(), optional(a.getOut()), optional(a.getLse()),
            softcapOrZero(a.getSoftcap()), windowOrZero(a.getWindow()),
            optional(a.getAlibiSlopes()));
        set(a.getQGrad(), std::move(grads.q));
        set(a.getKGrad(), std::move(grads.k));
        set(a.getVGrad(), std::move(grads.v));
        return success();
      })
      .Case([&](EmbeddingOp e) {
        return setOrFail(op, e.getResult(),
                         rt::gather(get(e.getTable()), get(e.getIndices()), 0));
      })
      .Case([&](GatherOp g) {
        return setOrFail(op, g.getResult(),
                         rt::gather(get(g.getInput()), get(g.getIndices()),
                                    g.getAxis()));
      })
      .Case([&](ReshapeOp r) {
        // A view: the buffer moves over where the input dies here.
        HostTensor tensor = take(r.getInput(), op);
        tensor.shape = shapeOf(r.getType());
        return result(std::move(tensor));
      })
      .Case([&](TransposeOp t) {
        return result(rt::transpose(get(t.getInput()),
                                    toVector(t.getPermutation())));
      })
      .Case([&](SliceOp s) {
        std::vector<int64_t> strides(s.getStarts().size(), 1);
        if (std::optional<ArrayRef<int64_t>> given = s.getStrides())
          strides.assign(given->begin(), given->end());
        return result(rt::slice(get(s.getInput()),
                                toVector(s.getStarts()),
                                toVector(s.getLimits()),
                                strides));
      })
      .Case([&](ConcatOp c) {
        std::vector<const HostTensor *> inputs;
        for (Value input : c.getInputs())
          inputs.push_back(&get(input));
        return result(rt::concat(inputs, c.getAxis()));
      })
      .Case([&](SplitOp s) {
        std::vector<HostTensor> pieces =
            rt::split(get(s.getInput()), s.getAxis(),
                      toVector(s.getSizes()));
        for (auto [value, piece] : llvm::zip(s.getResults(), pieces))
          set(value, std::move(piece));
        return success();
      })
      .Case([&](BroadcastToOp b) {
        return result(rt::broadcastTo(get(b.getInput()), shapeOf(b.getType())));
      })
      .Case([&](CumSumOp c) {
        return result(rt::cumsum(get(c.getInput()), c.getAxis(),
                                 c.getExclusive(), c.getReverse()));
      })
      .Case([&](TriluOp t) {
        return result(rt::trilu(get(t.getInput()), t.getUpper(), t.getDiagonal()));
      })
      .Case([&](CrossEntropyOp c) {
        static const rt::LossReduction reductions[] = {
            rt::LossReduction::None, rt::LossReduction::Mean,
            rt::LossReduction::Sum};
        return setOrFail(
            op, c.getResult(),
            rt::crossEntropy(get(c.getLogits()), get(c.getLabels()),
                             reductions[static_cast<int>(c.getReduction())],
                             c.getIgnoreIndex()));
      })
      .Case([&](LayerOp layer) -> LogicalResult {
        std::vector<HostTensor> args;
        for (Value input : layer.getInputs())
          args.push_back(take(input, op));
        Interpreter body(options);
        FailureOr<std::vector<HostTensor>> results =
            body.runBlock(layer.getBody().front(), std::move(args));
        if (failed(results))
          return failure();
        for (auto [value, tensor] : llvm::zip(layer.getResults(), *results))
          set(value, std::move(tensor));
        return success();
      })
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, AllSliceOp,
            CollectivePermuteOp>(
          [&](Operation *collective) { return runCollective(collective); })
      .Default([&](Operation *other) {
        return other->emitError("the CPU interpreter cannot run '")
               << other->getName()
               << "' (collectives need several devices: partition the "
                  "program and run it with --devices)";
      });
}

/// Collectives go through the runtime's services (groups by mesh axes, the
/// zigzag layout), as compiled programs do.
LogicalResult Interpreter::runCollective(Operation *op) {
  auto meshRef = op->getAttrOfType<FlatSymbolRefAttr>("mesh");
  auto meshOp = SymbolTable::lookupNearestSymbolFrom<MeshOp>(op, meshRef);
  if (!meshOp)
    return op->emitError("no weft.mesh ") << meshRef;
  rt::RankContext ctx;
  ctx.rank = options.rank;
  ctx.comm = options.communicator;
  for (StringRef axis : meshOp.getAxes().getAsValueRange<StringAttr>())
    ctx.mesh.axes.push_back(axis.str());
  ctx.mesh.shape.assign(meshOp.getShape().begin(), meshOp.getShape().end());
  std::vector<std::string> axes;
  for (StringRef axis :
       op->getAttrOfType<ArrayAttr>("axes").getAsValueRange<StringAttr>())
    axes.push_back(axis.str());
  const HostTensor &input = get(op->getOperand(0));
  if (!ctx.comm && !isa<AllSliceOp>(op))
    return op->emitError("'")
           << op->getName()
           << "' needs several devices: run the partitioned program with "
              "--devices";
  auto reduceOp = [](ReductionKind kind) {
    switch (kind) {
    case ReductionKind::max:
      return rt::ReduceOp::Max;
    case ReductionKind::min:
      return rt::ReduceOp::Min;
    case ReductionKind::avg:
      return rt::ReduceOp::Avg;
    default:
      return rt::ReduceOp::Sum;
    }
  };
  rt::Codec codec =
      runtimeCodec(cast<CollectiveOpInterface>(op).getWireCodec());
  HostTensor sent;
  if (codec == rt::Codec::TopK) {
    if (!options.feedback)
      return op->emitError("top-k with error feedback carries what it does "
                           "not send to the next step: train with weft "
                           "train, or use topk_noef");
    sent = options.feedback->withFeedback(options.rank, op, input);
  }
  const HostTensor &operand = codec == rt::Codec::TopK ? sent : input;
  try {
    HostTensor result;
    if (auto slice = dyn_cast<AllSliceOp>(op))
      result = rt::allSlice(ctx, input, axes, slice.getDim(), slice.getZigzag());
    else if (auto reduce = dyn_cast<AllReduceOp>(op))
      result =
          rt::allReduce(ctx, operand, reduceOp(reduce.getKind()), axes, codec,
                        std::vector<int64_t>(reduce.getGroupMembers().begin(),
                                             reduce.getGroupMembers().end()));
    else if (auto gather = dyn_cast<AllGatherOp>(op);
             gather && gather.getHold() && options.rankContext) {
      // Held over a block: the running rank's micro-batch dates, and its
      // context keeps, the gathered value (under the op's address).
      rt::RankContext &running = *options.rankContext;
      ctx.microBatch = running.microBatch;
      ctx.pipelineSteps = running.pipelineSteps;
      std::swap(ctx.held, running.held);
      struct Restore {
        rt::RankContext &from, &to;
        ~Restore() { std::swap(from.held, to.held); }
      } restore{ctx, running};
      result = rt::heldAllGather(ctx, int64_t(reinterpret_cast<intptr_t>(op)),
                                 int64_t(*gather.getHold()), input, axes,
                                 gather.getDim(), gather.getZigzag(), codec);
    } else if (gather)
      result = rt::allGather(ctx, input, axes, gather.getDim(),
                             gather.getZigzag(), codec);
    else if (auto scatter = dyn_cast<ReduceScatterOp>(op))
      result = rt::reduceScatter(ctx, input, reduceOp(scatter.getKind()), axes,
                                 scatter.getDim(), scatter.getZigzag(), codec);
    else if (auto toAll = dyn_cast<AllToAllOp>(op))
      result = rt::allToAll(ctx, input, axes, toAll.getSplitDim(),
                            toAll.getConcatDim(), codec);
    else
      result = rt::permute(ctx, input, axes,
                           cast<CollectivePermuteOp>(op).getShift(), codec);
    set(op->getResult(0), std::move(result));
    return success();
  } catch (const std::exception &e) {
    return op->emitError() << e.what();
  }
}

DenseElementsAttr weft::toElementsAttr(const HostTensor &tensor,
                                       RankedTensorType type) {
  Type element = type.getElementType();
  if (auto floatType = dyn_cast<FloatType>(element)) {
    SmallVector<APFloat> values;
    for (float value : tensor.floats) {
      APFloat converted(value);
      bool lost;
      converted.convert(floatType.getFloatSemantics(),
                        APFloat::rmNearestTiesToEven, &lost);
      values.push_back(converted);
    }
    return DenseElementsAttr::get(type, values);
  }
  unsigned width = element.getIntOrFloatBitWidth();
  SmallVector<APInt> values;
  for (int64_t value : tensor.ints)
    values.push_back(APInt(width, static_cast<uint64_t>(value),
                           /*isSigned=*/width > 1, /*implicitTrunc=*/true));
  return DenseElementsAttr::get(type, values);
}

FailureOr<std::vector<HostTensor>>
weft::evaluate(ArrayRef<Operation *> ops, ValueRange results,
               const InterpreterOptions &options) {
  return Interpreter(options).runOps(ops, results);
}

FailureOr<std::vector<HostTensor>>
weft::interpret(func::FuncOp func, const std::vector<HostTensor> &inputs,
                const InterpreterOptions &options) {
  FunctionType type = func.getFunctionType();
  if (inputs.size() != type.getNumInputs())
    return func.emitError("@")
           << func.getSymName() << " takes " << type.getNumInputs()
           << " inputs, got " << inputs.size();
  std::vector<HostTensor> converted;
  for (auto [index, input] : llvm::enumerate(inputs)) {
    auto expected = cast<RankedTensorType>(type.getInput(index));
    rt::Shape shape = shapeOf(expected);
    if (input.shape != shape)
      return func.emitError("input #")
             << index << " has shape " << rt::shapeString(input.shape)
             << " but @" << func.getSymName() << " expects " << expected;
    DType dtype = toDType(expected.getElementType());
    converted.push_back(input.dtype == dtype ? input : rt::cast(input, dtype));
  }
  Interpreter interpreter(options);
  std::vector<int64_t> *peaks = options.savedActivationPeak;
  bool measured =
      peaks && options.rank >= 0 && size_t(options.rank) < peaks->size();
  if (measured)
    interpreter.trackSavedActivations(func.getBody().front());
  FailureOr<std::vector<HostTensor>> results =
      interpreter.runBlock(func.getBody().front(), std::move(converted));
  if (measured && succeeded(results))
    (*peaks)[size_t(options.rank)] = std::max(
        (*peaks)[size_t(options.rank)], interpreter.savedActivationPeak());
  // A result may be a weight the module holds: the caller gets its own copy.
  if (succeeded(results))
    for (HostTensor &result : *results)
      if (result.floats.borrowed() || result.ints.borrowed())
        result = HostTensor(result);
  return results;
}
