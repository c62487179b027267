//===- CudaEmitter.cpp - Partitioned programs as CUDA C++ -----------------===//
//
// Part of the Weft project.
//
// Prints what the CUDA target pipeline decided (weft-prepare-cuda): each
// weft.fusion is one kernel (a generated elementwise kernel, or a cuBLASLt
// GEMM with its epilogue), each tensor lives at the arena offset
// -weft-assign-buffers gave it, and each collective is issued on the
// communication stream where it stands and waited for at its weft.wait. An
// elementwise op outside a fusion is a generated kernel of its own. Each op
// prints as one statement; nothing is decided here.
//
//===----------------------------------------------------------------------===//

#include "weft/Codegen/CudaEmitter.h"

#include "EmitterCommon.h"
#include "TrainingProgram.h"

#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Exec/Interpreter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using namespace weft;
using namespace weft::codegen;

namespace {

bool isElementwise(Operation *op) {
  return op->hasTrait<weft::OpTrait::Elementwise>();
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// The C++ element type on the device, or null if the GPU has none here.
const char *deviceType(Type element) {
  switch (toDType(element)) {
  case rt::DType::F32:
    return "float";
  case rt::DType::BF16:
    return "__nv_bfloat16";
  case rt::DType::F16:
    return "__half";
  case rt::DType::I64:
    return "int64_t";
  case rt::DType::I32:
    return "int32_t";
  case rt::DType::Bool:
    return "bool";
  case rt::DType::F64:
    return nullptr;
  }
  return nullptr;
}

std::string shapeLiteral(Value v) {
  std::string text = "{";
  for (auto [i, d] : llvm::enumerate(tensorType(v).getShape()))
    text += (i ? ", " : "") + std::to_string(d);
  return text + "}";
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

class CudaEmitter {
public:
  CudaEmitter(std::string weightsDir, std::string externalDir,
              CudaEmitStats &stats)
      : weightsDir(std::move(weightsDir)), externalDir(std::move(externalDir)),
        stats(stats) {}

  /// Appends `func` as the C++ function `name` to `body` (its kernels to
  /// `kernels`); the weight files and kernel names of the functions emitted
  /// before it are kept apart.
  /// With `held`, the function also takes `params`, the blocks of the
  /// trained parameters the rank holds: a held parameter is uploaded from
  /// there into its block's buffer (where the function has cut it to that
  /// block), not read from a file.
  LogicalResult emitFunction(func::FuncOp func, StringRef name,
                             llvm::StringMap<HeldParameter> *held = nullptr);
  std::string kernels;
  std::string body;

private:
  LogicalResult check();
  LogicalResult emitOp(Operation *op, llvm::raw_ostream &os);
  /// A generated kernel computing `ops` (in order) into `result`; `outside`
  /// gives the tensor a value read from outside the kernel stands for.
  LogicalResult emitElementwiseKernel(Operation *at, ArrayRef<Operation *> ops,
                                      Value result,
                                      llvm::function_ref<Value(Value)> outside,
                                      llvm::raw_ostream &os);
  std::string tensor(Value v) { return names.lookup(v); }
  int64_t offsetOf(Value v);
  void define(Value v, llvm::raw_ostream &os);

  func::FuncOp func;
  std::string weightsDir;
  std::string externalDir;
  CudaEmitStats &stats;

  llvm::DenseMap<Operation *, int64_t> index;
  llvm::DenseMap<Value, std::string> names;
  /// Weights read as this rank's shard by the all_slice that uses them.
  llvm::DenseMap<Operation *, std::string> shardFiles;
  /// The event of each collective in flight, by its result.
  llvm::DenseMap<Value, std::string> events;
  int counter = 0;
  int weightFiles = 0;
  /// Gathers held over a block (weft.all_gather ... hold N), numbered
  /// across the functions: each one's key in the rank's context.
  int heldGathers = 0;
  /// The first value defined without a buffer of its own (an internal
  /// error: -weft-assign-buffers gives one to every value the program
  /// writes).
  Value unbuffered;
  /// The generated kernels by their parameters and body, to their names.
  llvm::StringMap<std::string> kernelNames;
};

/// Checks that the program is what the emitter prints: types the GPU has,
/// and the target pipeline's decisions on every op.
LogicalResult CudaEmitter::check() {
  if (!func->hasAttr(WeftDialect::getArenaBytesAttrName()))
    return func.emitError("the CUDA emitter prints a program prepared for "
                          "it: run the weft-cuda-kernels and "
                          "weft-prepare-cuda pipelines first (weft compile "
                          "--target cuda does)");
  Block &block = func.getBody().front();
  int64_t i = 1;
  for (Operation &op : block) {
    index[&op] = i++;
    for (Value r : op.getResults())
      if (auto type = dyn_cast<RankedTensorType>(r.getType()))
        if (!deviceType(type.getElementType()))
          return op.emitError("weft compile --target cuda: ")
                 << type.getElementType() << " tensors are not supported on "
                 << "the GPU";
    if (op.getNumResults() &&
        !op.hasAttr(WeftDialect::getBufferOffsetsAttrName()))
      return op.emitError("has no buffer: run -weft-assign-buffers first");
    if (isa<CollectiveOpInterface>(op) &&
        (getCollectiveCodec(&op) == CollectiveCodec::topk ||
         getCollectiveCodec(&op) == CollectiveCodec::topk_noef))
      return op.emitError("weft compile --target cuda: top-k collectives "
                          "(codec ")
             << stringifyCollectiveCodec(getCollectiveCodec(&op))
             << ") run on the CPU targets only; use bf16, fp8 or int8 for "
                "the GPU";
  }
  return success();
}

int64_t CudaEmitter::offsetOf(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return func
        .getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                       WeftDialect::getBufferOffsetAttrName())
        .getInt();
  auto offsets = v.getDefiningOp()->getAttrOfType<DenseI64ArrayAttr>(
      WeftDialect::getBufferOffsetsAttrName());
  return offsets[cast<OpResult>(v).getResultNumber()];
}

void CudaEmitter::define(Value v, llvm::raw_ostream &os) {
  std::string name = "v" + std::to_string(counter++);
  names[v] = name;
  RankedTensorType type = tensorType(v);
  if (offsetOf(v) < 0 && !unbuffered)
    unbuffered = v;
  os << "  DeviceTensor " << name << " = at(ctx, " << offsetOf(v) << ", "
     << dtypeName(type.getElementType()) << ", " << shapeLiteral(v) << ");\n";
}

LogicalResult CudaEmitter::emitElementwiseKernel(
    Operation *at, ArrayRef<Operation *> ops, Value result,
    llvm::function_ref<Value(Value)> outside, llvm::raw_ostream &os) {
  ++stats.fusedKernels;
  llvm::DenseSet<Operation *> members(ops.begin(), ops.end());
  RankedTensorType outType = tensorType(result);
  ArrayRef<int64_t> outShape = outType.getShape();
  std::vector<Value> inputs;
  llvm::DenseMap<Value, std::string> computed;
  std::string code;
  llvm::raw_string_ostream k(code);
  int temps = 0;
  std::function<FailureOr<std::string>(Value)> expr =
      [&](Value v) -> FailureOr<std::string> {
    auto found = computed.find(v);
    if (found != computed.end())
      return found->second;
    Type element = tensorType(v).getElementType();
    bool isFloat = isa<FloatType>(element);
    std::string type = isFloat ? "float" : "int64_t";
    std::string name = "t" + std::to_string(temps++);
    Operation *op = v.getDefiningOp();
    if (!op || !members.contains(op)) {
      // An outside operand, read through its broadcast strides.
      size_t n = inputs.size();
      inputs.push_back(outside(v));
      k << "    " << type << " " << name << " = " << (isFloat ? "loadF" : "loadI")
        << "(in" << n << ", offsetOf(i, dims, s" << n << "));\n";
      computed[v] = name;
      return name;
    }
    ++stats.fusedOps;
    SmallVector<std::string> args;
    for (Value operand : op->getOperands()) {
      FailureOr<std::string> a = expr(operand);
      if (failed(a))
        return failure();
      args.push_back(*a);
    }
    auto floatOperands = [&] {
      return op->getNumOperands() == 0 ||
             isa<FloatType>(tensorType(op->getOperand(0)).getElementType());
    };
    std::string e;
    auto binary = [&](const char *f, const char *i, bool call) {
      bool fl = floatOperands();
      const char *symbol = fl ? f : i;
      e = call ? std::string(symbol) + "(" + args[0] + ", " + args[1] + ")"
               : "(" + args[0] + " " + symbol + " " + args[1] + ")";
    };
    bool ok = true;
    llvm::TypeSwitch<Operation *>(op)
        .Case([&](AddOp) { binary("+", "+", false); })
        .Case([&](SubOp) { binary("-", "-", false); })
        .Case([&](MulOp) { binary("*", "*", false); })
        .Case([&](DivOp) {
          if (floatOperands())
            binary("/", "/", false);
          else
            e = "(" + args[1] + " == 0 ? int64_t(0) : " + args[0] + " / " +
                args[1] + ")";
        })
        .Case([&](PowOp) {
          e = floatOperands() ? "powf(" + args[0] + ", " + args[1] + ")"
                              : "int64_t(powf(float(" + args[0] +
                                    "), float(" + args[1] + ")))";
        })
        .Case([&](MaximumOp) {
          e = floatOperands() ? "fmaxf(" + args[0] + ", " + args[1] + ")"
                              : "(" + args[0] + " > " + args[1] + " ? " +
                                    args[0] + " : " + args[1] + ")";
        })
        .Case([&](MinimumOp) {
          e = floatOperands() ? "fminf(" + args[0] + ", " + args[1] + ")"
                              : "(" + args[0] + " < " + args[1] + " ? " +
                                    args[0] + " : " + args[1] + ")";
        })
        .Case([&](CompareOp c) {
          static const char *symbols[] = {"==", "!=", "<", "<=", ">", ">="};
          e = "int64_t(" + args[0] + " " +
              symbols[static_cast<int>(c.getPredicate())] + " " + args[1] +
              ")";
        })
        .Case([&](WhereOp) {
          e = "(" + args[0] + " != 0 ? " + args[1] + " : " + args[2] + ")";
        })
        .Case([&](NegOp) { e = "(-" + args[0] + ")"; })
        .Case([&](ExpOp) { e = "expf(" + args[0] + ")"; })
        .Case([&](LogOp) { e = "logf(" + args[0] + ")"; })
        .Case([&](SqrtOp) { e = "sqrtf(" + args[0] + ")"; })
        .Case([&](RsqrtOp) { e = "rsqrtf(" + args[0] + ")"; })
        .Case([&](TanhOp) { e = "tanhf(" + args[0] + ")"; })
        .Case([&](ErfOp) { e = "erff(" + args[0] + ")"; })
        .Case([&](SinOp) { e = "sinf(" + args[0] + ")"; })
        .Case([&](CosOp) { e = "cosf(" + args[0] + ")"; })
        .Case([&](SigmoidOp) { e = "sigmoid(" + args[0] + ")"; })
        .Case([&](ReluOp) {
          e = floatOperands() ? "fmaxf(" + args[0] + ", 0.0f)"
                              : "(" + args[0] + " > 0 ? " + args[0] + " : 0)";
        })
        .Case([&](AbsOp) {
          e = floatOperands() ? "fabsf(" + args[0] + ")"
                              : "(" + args[0] + " < 0 ? -" + args[0] + " : " +
                                    args[0] + ")";
        })
        .Case([&](SiluOp) { e = "silu(" + args[0] + ")"; })
        .Case([&](GeluOp g) {
          e = (g.getApproximation() == GeluApproximation::tanh ? "geluTanh("
                                                                : "geluErf(") +
              args[0] + ")";
        })
        .Case([&](CastOp c) {
          bool from = floatOperands();
          if (toDType(c.getType().getElementType()) == rt::DType::Bool)
            e = "int64_t(" + args[0] + " != 0)";
          else if (from == isFloat)
            e = args[0];
          else
            e = type + "(" + args[0] + ")";
        })
        .Case([&](BroadcastToOp) { e = args[0]; })
        // A forward program keeps every element (PyTorch's eval mode).
        .Case([&](DropoutOp) { e = args[0]; })
        .Case([&](IotaOp iota) {
          e = type + "(coordinateOf(i, dims, " +
              std::to_string(iota.getDim()) + "))";
        })
        .Default([&](Operation *) { ok = false; });
    if (!ok)
      return op->emitError("weft compile --target cuda cannot fuse '")
             << op->getName() << "'";
    // Round as the stored type would after each op (bf16 chains match).
    if (isFloat)
      e = "roundAs(" + e + ", static_cast<const " +
          std::string(deviceType(element)) + " *>(nullptr))";
    k << "    " << type << " " << name << " = " << e << ";\n";
    computed[v] = name;
    return name;
  };
  FailureOr<std::string> value = expr(result);
  if (failed(value))
    return failure();
  const char *outC = deviceType(outType.getElementType());
  bool outFloat = isa<FloatType>(outType.getElementType());
  // The kernel: its parameters and body. Shapes and strides are arguments,
  // so fusions of the same ops on the same element types (the same fusion
  // in every layer, forward and backward) are one kernel, printed once.
  std::string signature;
  llvm::raw_string_ostream ss(signature);
  ss << "(int64_t n, Dims dims";
  for (size_t j = 0; j < inputs.size(); ++j)
    ss << ", Strides s" << j << ", const "
       << deviceType(tensorType(inputs[j]).getElementType()) << " *in" << j;
  ss << ", " << outC << " *out) {\n"
     << "  WEFT_ELEMENTS(i, n) {\n"
     << code << "    " << (outFloat ? "storeF" : "storeI") << "(out, i, "
     << *value << ");\n  }\n}\n\n";
  auto [known, added] = kernelNames.try_emplace(
      signature, "fused" + std::to_string(kernelNames.size()));
  std::string kernelName = known->second;
  if (added) {
    ++stats.distinctKernels;
    llvm::raw_string_ostream ks(kernels);
    ks << "// " << ops.back()->getName() << " and the "
       << computed.size() - inputs.size() - 1
       << " elementwise op(s) before it, in one pass.\n"
       << "WEFT_GLOBAL void " << kernelName << signature;
  }
  // The launch.
  define(at->getResult(0), os);
  int64_t n = outType.getNumElements();
  std::string dims = "Dims{" + std::to_string(outShape.size()) + ", {";
  for (auto [j, d] : llvm::enumerate(outShape))
    dims += (j ? ", " : "") + std::to_string(d);
  dims += "}}";
  os << "  WEFT_LAUNCH(" << kernelName << ", " << n << ", ctx)(\n      " << n
     << ", " << dims;
  for (auto [j, input] : llvm::enumerate(inputs)) {
    // Broadcast strides of the operand over the output's shape.
    ArrayRef<int64_t> shape = tensorType(input).getShape();
    SmallVector<int64_t> contiguous(shape.size(), 1);
    for (int d = int(shape.size()) - 2; d >= 0; --d)
      contiguous[d] = contiguous[d + 1] * shape[d + 1];
    std::string strides = "Strides{{";
    for (size_t d = 0; d < outShape.size(); ++d) {
      int64_t od = int64_t(d) - int64_t(outShape.size() - shape.size());
      int64_t s = od >= 0 && shape[od] != 1 ? contiguous[od] : 0;
      strides += (d ? ", " : "") + std::to_string(s);
    }
    strides += "}}";
    os << ",\n      " << strides << ", static_cast<const "
       << deviceType(tensorType(input).getElementType()) << " *>("
       << tensor(input) << ".data)";
  }
  os << ",\n      static_cast<" << outC << " *>(" << tensor(at->getResult(0))
     << ".data));\n  checkLaunch(ctx);\n";
  return success();
}

LogicalResult CudaEmitter::emitOp(Operation *op, llvm::raw_ostream &os) {
  os << "  ctx.op = \"" << op->getName() << " #" << index.lookup(op)
     << "\";\n";
  if (isElementwise(op))
    return emitElementwiseKernel(
        op, {op}, op->getResult(0), [](Value v) { return v; }, os);
  auto out = [&]() -> std::string {
    Value result = op->getResult(0);
    define(result, os);
    return tensor(result);
  };
  auto optional = [&](Value v) {
    return v ? "&" + tensor(v) : std::string("nullptr");
  };
  auto weight = [&]() -> LogicalResult {
    FailureOr<std::string> file =
        writeWeight(op, weightsDir, externalDir, weightFiles);
    if (failed(file))
      return failure();
    if (AllSliceOp slice = shardingSlice(op)) {
      shardFiles[slice] = *file;
      return success();
    }
    std::string o = out();
    os << "  loadWeight(ctx, \"" << *file << "\", " << o << ");\n";
    return success();
  };
  auto collective = [&](const std::string &call) {
    std::string event = "e" + std::to_string(counter);
    std::string o = out();
    os << "  cudaEvent_t " << event << " = " << call << ", " << o
       << codecArg(op) << ");\n";
    events[op->getResult(0)] = event;
    ++stats.collectives;
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<ParameterOp, ConstantOp>([&](Operation *) { return weight(); })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceLogSumExpOp>(
          [&](Operation *r) {
            int64_t rank = tensorType(r->getOperand(0)).getRank();
            SmallVector<int64_t> axes;
            for (int64_t a :
                 r->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef())
              axes.push_back(normalizeAxis(a, rank));
            std::string o = out();
            os << "  reduce(ctx, " << reduceKind(r) << ", "
               << tensor(r->getOperand(0)) << ", " << ints(axes) << ", " << o
               << ");\n";
            return success();
          })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](Operation *s) {
        int64_t axis = s->getAttrOfType<IntegerAttr>("axis").getInt();
        int64_t rank = tensorType(s->getOperand(0)).getRank();
        auto scale = s->getAttrOfType<FloatAttr>("scale");
        std::string o = out();
        os << "  softmax(ctx, " << tensor(s->getOperand(0)) << ", "
           << normalizeAxis(axis, rank) << ", "
           << (isa<LogSoftmaxOp>(s) ? "true" : "false") << ", "
           << floatLiteral(scale ? float(scale.getValueAsDouble()) : 1.0f)
           << ", " << (s->hasAttr("causal") ? "true" : "false") << ", " << o
           << ");\n";
        return success();
      })
      .Case([&](LayerNormOp n) {
        std::string o = out();
        os << "  normalize(ctx, " << tensor(n.getInput()) << ", "
           << tensor(n.getScale()) << ", " << optional(n.getBias()) << ", "
           << normalizeAxis(n.getAxis(), n.getType().getRank()) << ", "
           << floatLiteral(n.getEpsilon().convertToFloat()) << ", false, " << o
           << ");\n";
        return success();
      })
      .Case([&](RMSNormOp n) {
        std::string o = out();
        os << "  normalize(ctx, " << tensor(n.getInput()) << ", "
           << tensor(n.getScale()) << ", nullptr, "
           << normalizeAxis(n.getAxis(), n.getType().getRank()) << ", "
           << floatLiteral(n.getEpsilon().convertToFloat()) << ", true, " << o
           << ");\n";
        return success();
      })
      .Case([&](MatmulOp m) -> LogicalResult {
        RankedTensorType a = tensorType(m.getLhs()), b = tensorType(m.getRhs());
        if (b.getRank() > 2 &&
            (a.getRank() != b.getRank() ||
             a.getShape().drop_back(2) != b.getShape().drop_back(2)))
          return m.emitError("weft compile --target cuda: a batched matmul "
                             "needs equal batch dimensions (or a 2-d rhs)");
        std::string o = out();
        os << "  matmul(ctx, " << tensor(m.getLhs()) << ", "
           << tensor(m.getRhs()) << ", "
           << (m.getTransposeLhs() ? "true" : "false") << ", "
           << (m.getTransposeRhs() ? "true" : "false") << ", " << o << ");\n";
        return success();
      })
      .Case([&](LinearOp l) {
        if (l.getBias())
          ++stats.epilogues;
        std::string o = out();
        os << "  linear(ctx, " << tensor(l.getInput()) << ", "
           << tensor(l.getWeight()) << ", " << optional(l.getBias()) << ", "
           << (l.getTransposeWeight() ? "true" : "false")
           << ", Epilogue::" << (l.getBias() ? "Bias" : "None") << ", " << o
           << ");\n";
        return success();
      })
      .Case([&](FusionOp f) -> LogicalResult {
        Block &body = f.getBody().front();
        auto outside = [&](Value v) -> Value {
          return f.getInputs()[cast<BlockArgument>(v).getArgNumber()];
        };
        if (f.getKind() == FusionKind::elementwise) {
          SmallVector<Operation *> ops;
          for (Operation &inner : body.without_terminator())
            ops.push_back(&inner);
          return emitElementwiseKernel(
              f, ops, cast<YieldOp>(body.getTerminator()).getValues().front(),
              outside, os);
        }
        // A GEMM with the GELU in its epilogue.
        auto l = cast<LinearOp>(body.front());
        ++stats.epilogues;
        std::string o = out();
        os << "  linear(ctx, " << tensor(outside(l.getInput())) << ", "
           << tensor(outside(l.getWeight())) << ", "
           << (l.getBias() ? "&" + tensor(outside(l.getBias()))
                           : std::string("nullptr"))
           << ", " << (l.getTransposeWeight() ? "true" : "false")
           << ", Epilogue::" << (l.getBias() ? "GeluBias" : "Gelu") << ", " << o
           << ");\n";
        return success();
      })
      .Case([&](WaitOp w) {
        os << "  waitFor(ctx, " << events.lookup(w.getInput()) << ");\n";
        names[w.getResult()] = tensor(w.getInput());
        return success();
      })
      .Case([&](AttentionOp a) {
        std::string o = out();
        os << "  attention(ctx, " << tensor(a.getQ()) << ", "
           << tensor(a.getK()) << ", " << tensor(a.getV()) << ", "
           << optional(a.getMask()) << ", "
           << floatLiteral(a.getScale().convertToFloat()) << ", "
           << (a.getCausal() ? "true" : "false") << ", " << o
           << attentionOptionArguments(a, optional) << ");\n";
        return success();
      })
      .Case([&](AttentionBlockOp a) {
        define(a.getResult(), os);
        define(a.getLse(), os);
        os << "  attentionBlock(ctx, " << tensor(a.getQ()) << ", "
           << tensor(a.getK()) << ", " << tensor(a.getV()) << ", "
           << optional(a.getMask()) << ", " << optional(a.getQPositions())
           << ", " << optional(a.getKPositions()) << ", "
           << floatLiteral(a.getScale().convertToFloat()) << ", "
           << (a.getCausal() ? "true" : "false") << ", "
           << tensor(a.getResult()) << ", " << tensor(a.getLse())
           << attentionOptionArguments(a, optional) << ");\n";
        return success();
      })
      .Case([&](AttentionGradOp a) {
        for (Value grad : a.getResults())
          define(grad, os);
        os << "  attentionGrad(ctx, " << tensor(a.getQ()) << ", "
           << tensor(a.getK()) << ", " << tensor(a.getV()) << ", "
           << tensor(a.getResultGrad()) << ", " << optional(a.getMask()) << ", "
           << optional(a.getQPositions()) << ", " << optional(a.getKPositions())
           << ", " << optional(a.getOut()) << ", " << optional(a.getLse())
           << ", " << floatLiteral(a.getScale().convertToFloat()) << ", "
           << (a.getCausal() ? "true" : "false") << ", " << tensor(a.getQGrad())
           << ", " << tensor(a.getKGrad()) << ", " << tensor(a.getVGrad())
           << attentionOptionArguments(a, optional) << ");\n";
        return success();
      })
      .Case([&](EmbeddingOp e) {
        std::string o = out();
        os << "  gather(ctx, " << tensor(e.getTable()) << ", "
           << tensor(e.getIndices()) << ", 0, " << o << ");\n";
        return success();
      })
      .Case([&](GatherOp g) {
        std::string o = out();
        os << "  gather(ctx, " << tensor(g.getInput()) << ", "
           << tensor(g.getIndices()) << ", "
           << normalizeAxis(g.getAxis(), tensorType(g.getInput()).getRank())
           << ", " << o << ");\n";
        return success();
      })
      .Case([&](ReshapeOp r) {
        std::string name = "v" + std::to_string(counter++);
        names[r.getResult()] = name;
        os << "  DeviceTensor " << name << " = view(" << tensor(r->getOperand(0))
           << ", " << shapeLiteral(r.getResult()) << ");\n";
        return success();
      })
      .Case([&](TransposeOp t) {
        std::string o = out();
        os << "  transpose(ctx, " << tensor(t->getOperand(0)) << ", "
           << ints(t.getPermutation()) << ", " << o << ");\n";
        return success();
      })
      .Case([&](SliceOp s) {
        SmallVector<int64_t> strides(s.getStarts().size(), 1);
        if (std::optional<ArrayRef<int64_t>> given = s.getStrides())
          strides.assign(given->begin(), given->end());
        std::string o = out();
        os << "  slice(ctx, " << tensor(s->getOperand(0)) << ", "
           << ints(s.getStarts()) << ", " << ints(strides) << ", " << o
           << ");\n";
        return success();
      })
      .Case([&](ConcatOp c) {
        std::string o = out();
        int64_t axis = normalizeAxis(c.getAxis(), c.getType().getRank());
        int64_t at = 0;
        for (Value input : c.getInputs()) {
          os << "  insert(ctx, " << tensor(input) << ", " << axis << ", " << at
             << ", " << o << ");\n";
          at += tensorType(input).getDimSize(axis);
        }
        return success();
      })
      .Case([&](SplitOp s) {
        int64_t rank = tensorType(s->getOperand(0)).getRank();
        int64_t axis = normalizeAxis(s.getAxis(), rank);
        int64_t at = 0;
        for (auto [i, r] : llvm::enumerate(s.getResults())) {
          define(r, os);
          SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
          starts[axis] = at;
          os << "  slice(ctx, " << tensor(s->getOperand(0)) << ", "
             << ints(starts) << ", " << ints(steps) << ", " << tensor(r)
             << ");\n";
          at += tensorType(r).getDimSize(axis);
        }
        return success();
      })
      .Case([&](CumSumOp c) {
        std::string o = out();
        os << "  cumsum(ctx, " << tensor(c->getOperand(0)) << ", "
           << c.getAxis() << ", " << (c.getExclusive() ? "true" : "false")
           << ", " << (c.getReverse() ? "true" : "false") << ", " << o
           << ");\n";
        return success();
      })
      .Case([&](TriluOp t) {
        std::string o = out();
        os << "  trilu(ctx, " << tensor(t->getOperand(0)) << ", "
           << (t.getUpper() ? "true" : "false") << ", " << t.getDiagonal()
           << ", " << o << ");\n";
        return success();
      })
      .Case([&](AllReduceOp c) {
        // A sub-group of the axis: its members before the result.
        std::string members;
        if (!c.getGroupMembers().empty())
          members = ", " + ints(c.getGroupMembers());
        return collective("allReduce(ctx, " + tensor(c->getOperand(0)) + ", " +
                          reduceOp(c.getKind()) + ", " + strings(c.getAxes()) +
                          members);
      })
      .Case([&](AllGatherOp c) {
        // Held over a block of micro-batches: the rank keeps a copy under a
        // key of its own.
        std::string call = c.getHold()
                               ? "heldAllGather(ctx, " +
                                     std::to_string(heldGathers++) + ", " +
                                     std::to_string(*c.getHold()) + ", "
                               : "allGather(ctx, ";
        return collective(call + tensor(c->getOperand(0)) + ", " +
                          strings(c.getAxes()) + ", " +
                          std::to_string(c.getDim()) + ", " +
                          (c.getZigzag() ? "true" : "false"));
      })
      .Case([&](ReduceScatterOp c) {
        return collective("reduceScatter(ctx, " + tensor(c->getOperand(0)) +
                          ", " + reduceOp(c.getKind()) + ", " +
                          strings(c.getAxes()) + ", " +
                          std::to_string(c.getDim()) + ", " +
                          (c.getZigzag() ? "true" : "false"));
      })
      .Case([&](AllToAllOp c) {
        return collective("allToAll(ctx, " + tensor(c->getOperand(0)) + ", " +
                          strings(c.getAxes()) + ", " +
                          std::to_string(c.getSplitDim()) + ", " +
                          std::to_string(c.getConcatDim()));
      })
      .Case([&](CollectivePermuteOp c) {
        return collective("permute(ctx, " + tensor(c->getOperand(0)) + ", " +
                          strings(c.getAxes()) + ", " +
                          std::to_string(c.getShift()));
      })
      .Case([&](AllSliceOp c) {
        std::string o = out();
        auto file = shardFiles.find(c);
        if (file != shardFiles.end()) {
          os << "  loadWeightShard(ctx, \"" << file->second << "\", "
             << strings(c.getAxes()) << ", " << c.getDim() << ", " << o
             << ");\n";
          return success();
        }
        os << "  allSlice(ctx, " << tensor(c->getOperand(0)) << ", "
           << strings(c.getAxes()) << ", " << c.getDim() << ", "
           << (c.getZigzag() ? "true" : "false") << ", " << o << ");\n";
        return success();
      })
      .Case([&](CrossEntropyOp c) {
        static const char *reductions[] = {"None", "Mean", "Sum"};
        std::string o = out();
        os << "  crossEntropy(ctx, " << tensor(c.getLogits()) << ", "
           << tensor(c.getLabels()) << ", LossReduction::"
           << reductions[static_cast<int>(c.getReduction())] << ", ";
        if (c.getIgnoreIndex())
          os << "std::optional<int64_t>(" << int64_t(*c.getIgnoreIndex())
             << ")";
        else
          os << "std::nullopt";
        os << ", " << o << ");\n";
        return success();
      })
      .Case([&](func::ReturnOp r) {
        os << "  return {";
        for (auto [i, v] : llvm::enumerate(r.getOperands()))
          os << (i ? ", " : "") << "download(ctx, " << tensor(v) << ")";
        os << "};\n";
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitError("weft compile --target cuda cannot emit '")
               << other->getName() << "' yet";
      });
}

LogicalResult CudaEmitter::emitFunction(func::FuncOp function, StringRef name,
                                        llvm::StringMap<HeldParameter> *held) {
  func = function;
  index.clear();
  names.clear();
  shardFiles.clear();
  events.clear();
  counter = 0;
  unbuffered = Value();
  if (failed(check()))
    return failure();
  auto count = [&](StringRef name) {
    return func->getAttrOfType<IntegerAttr>(name).getInt();
  };
  // A rank's functions (pipeline stages) run one at a time in one arena.
  stats.arenaBytes =
      std::max(stats.arenaBytes, count(WeftDialect::getArenaBytesAttrName()));
  stats.buffers += int(count(WeftDialect::getBuffersAttrName()));
  stats.unsharedBytes = std::max(
      stats.unsharedBytes, count(WeftDialect::getUnsharedBytesAttrName()));
  llvm::raw_string_ostream os(body);
  os << "std::vector<HostTensor> " << name
     << "(Context &ctx, const std::vector<HostTensor> &inputs"
     << (held ? ",\n    const std::vector<HostTensor> &params" : "") << ") {\n";
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    define(arg, os);
    os << "  upload(ctx, inputs[" << i << "], " << tensor(arg) << ");\n";
  }
  // The held parameters' reads: each chain's ops are not emitted; its block
  // is uploaded where the chain ends (its buffer is live from there).
  llvm::DenseSet<Operation *> skipped;
  llvm::DenseMap<Operation *, std::pair<Value, int>> uploads;
  llvm::DenseSet<Operation *> cutOnUpload;
  if (held) {
    FailureOr<SmallVector<HeldRead>> reads = findHeldReads(
        func.getBody().front(), *held, weightsDir, externalDir, weightFiles);
    if (failed(reads))
      return failure();
    for (const HeldRead &read : *reads) {
      skipped.insert(read.chain.begin(), read.chain.end());
      if (offsetOf(read.value) >= 0) {
        uploads[read.chain.back()] = {read.value, read.index};
        continue;
      }
      // A weight loaded as its shard has no buffer of its own
      // (-weft-assign-buffers): where the rank holds it whole, its block is
      // cut as it is uploaded, into the buffer of the all_slice that reads
      // it.
      auto slice = read.value.hasOneUse()
                       ? dyn_cast<AllSliceOp>(*read.value.getUsers().begin())
                       : AllSliceOp();
      if (!slice || slice.getZigzag() || offsetOf(slice.getResult()) < 0)
        return read.chain.back()->emitError(
            "weft compile --target cuda: parameter read with no buffer "
            "(-weft-assign-buffers gives one to every weight but those "
            "loaded as the block of one all_slice)");
      skipped.insert(slice);
      cutOnUpload.insert(slice);
      uploads[slice] = {slice.getResult(), read.index};
    }
  }
  for (Operation &op : func.getBody().front()) {
    if (skipped.count(&op)) {
      auto upload = uploads.find(&op);
      if (upload != uploads.end()) {
        auto [value, index] = upload->second;
        define(value, os);
        if (cutOnUpload.count(&op)) {
          auto slice = cast<AllSliceOp>(&op);
          os << "  uploadShard(ctx, params[" << index << "], "
             << strings(slice.getAxes()) << ", " << slice.getDim() << ", "
             << tensor(value) << ");\n";
        } else
          os << "  upload(ctx, params[" << index << "], " << tensor(value)
             << ");\n";
      }
      continue;
    }
    if (failed(emitOp(&op, os)))
      return failure();
  }
  if (unbuffered) {
    Operation *at = unbuffered.getDefiningOp();
    return (at ? at->emitError() : func.emitError())
           << "weft compile --target cuda: a value the program writes has no "
              "buffer (-weft-assign-buffers gives none to a weight loaded as "
              "its shard); this is a bug in Weft's CUDA emitter";
  }
  os << "}\n";
  return success();
}

} // namespace

/// The groups (mesh-axis sets, and a sub-group's members) of the
/// communicating collectives of `functions`, in program order (function by
/// function), as a C++ list of CommunicatorGroup: every rank creates their
/// communicators at start-up, whichever functions it runs.
static std::string communicatorsLiteral(ArrayRef<func::FuncOp> functions) {
  SmallVector<std::string> communicators;
  for (func::FuncOp func : functions)
    func->walk([&](CollectiveOpInterface collective) {
      std::string group = "CommunicatorGroup{" + strings(collective.getAxes());
      if (!collective.getGroupMembers().empty())
        group += ", " + ints(collective.getGroupMembers());
      group += "}";
      if (collective.communicates() &&
          !llvm::is_contained(communicators, group))
        communicators.push_back(group);
    });
  std::string list = "{";
  for (const std::string &axes : communicators)
    list += (list.size() > 1 ? ", " : "") + axes;
  return list + "}";
}

/// `kArenaBytes` and `kCommunicators`: what every rank sets up before the
/// program's functions run.
static std::string rankConstants(const CudaEmitStats &stats,
                                 StringRef communicators) {
  return "constexpr int64_t kArenaBytes = " + std::to_string(stats.arenaBytes) +
         ";\n// The communicators every rank creates at start-up.\n"
         "const std::vector<CommunicatorGroup> kCommunicators = " +
         communicators.str() + ";\n\n";
}

/// Writes `program` as program.cu, the host emulation's program_host.cpp
/// and the CMake project that builds either.
static LogicalResult writeCudaProject(ModuleOp module, StringRef outDir,
                                      StringRef program) {
  if (failed(writeFile(module, outDir, "program.cu", program)))
    return failure();
  if (failed(writeFile(module, outDir, "program_host.cpp",
                       "// The CUDA program as C++ for the runtime's host "
                       "emulation (-DWEFT_DEVICE=cpu).\n"
                       "#include \"program.cu\"\n")))
    return failure();
  return writeFile(
      module, outDir, "CMakeLists.txt",
      "# Generated by `weft compile --target cuda`: the rank program against "
      "the\n# installed runtime's CUDA backend, for A100 (sm_80) and H100/H200 "
      "(sm_90).\n"
      "# -DWEFT_DEVICE=cpu builds the same program as C++ against the "
      "runtime's host\n# emulation of the CUDA backend, to run it without a "
      "GPU.\n"
      "cmake_minimum_required(VERSION 3.20)\n"
      "project(WeftRankProgram CXX)\n"
      "set(CMAKE_CXX_STANDARD 17)\n"
      "if(NOT CMAKE_BUILD_TYPE)\n  set(CMAKE_BUILD_TYPE Release)\nendif()\n"
      "set(WEFT_DEVICE cuda CACHE STRING \"cuda, or cpu (host emulation)\")\n"
      "# The host code is one long function of kernel launches: -O1 compiles "
      "it in\n# about half the time -O3 takes, and it grows with the layers "
      "(nvcc's -O is\n# the host compiler's; the device code is optimized "
      "either way).\n"
      "set(WEFT_PROGRAM_OPTIMIZATION -O1 CACHE STRING\n"
      "    \"optimization of the generated program's host code (Release)\")\n"
      "set(CMAKE_CXX_FLAGS_RELEASE \"${WEFT_PROGRAM_OPTIMIZATION} "
      "-DNDEBUG\")\n"
      "find_package(WeftRuntime REQUIRED)\n"
      "if(WEFT_DEVICE STREQUAL \"cpu\")\n"
      "  if(NOT TARGET Weft::WeftRuntimeCudaEmulation)\n"
      "    message(FATAL_ERROR \"this Weft runtime has no CUDA emulation\")\n"
      "  endif()\n"
      "  add_executable(program program_host.cpp)\n"
      "  target_compile_options(program PRIVATE -Wall -Werror)\n"
      "  target_link_libraries(program PRIVATE "
      "Weft::WeftRuntimeCudaEmulation)\n"
      "  return()\n"
      "endif()\n"
      "if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND\n"
      "   EXISTS /usr/local/cuda/bin/nvcc)\n"
      "  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)\n"
      "endif()\n"
      "# Unless CMAKE_CUDA_ARCHITECTURES says otherwise: the device code is "
      "compiled\n# once, to compute_80 PTX, and ptxas makes sm_80 and sm_90 "
      "code from it\n# (CMake's list would run nvcc's front end once per "
      "architecture).\n"
      "set(WEFT_CUDA_GENCODE)\n"
      "if(NOT CMAKE_CUDA_ARCHITECTURES)\n"
      "  set(CMAKE_CUDA_ARCHITECTURES OFF)\n"
      "  set(WEFT_CUDA_GENCODE\n"
      "      "
      "\"--generate-code=arch=compute_80,code=[compute_80,sm_80,sm_90]\")\n"
      "endif()\n"
      "enable_language(CUDA)\n"
      "set(CMAKE_CUDA_STANDARD 17)\n"
      "set(CMAKE_CUDA_FLAGS_RELEASE \"${WEFT_PROGRAM_OPTIMIZATION} "
      "-DNDEBUG\")\n"
      "if(NOT TARGET Weft::WeftRuntimeCuda)\n"
      "  message(FATAL_ERROR \"this Weft runtime was built without its CUDA "
      "backend\")\n"
      "endif()\n"
      "add_executable(program program.cu)\n"
      "target_compile_options(program PRIVATE ${WEFT_CUDA_GENCODE}\n"
      "  --Werror=all-warnings -Xcompiler=-Wall)\n"
      "target_link_libraries(program PRIVATE Weft::WeftRuntimeCuda)\n");
}

LogicalResult weft::emitCudaProgram(ModuleOp module, StringRef outDir,
                                    StringRef origin, StringRef externalDir,
                                    CudaEmitStats &stats) {
  FailureOr<std::optional<PipelineInfo>> pipeline = readPipeline(module);
  if (failed(pipeline))
    return failure();
  FailureOr<std::vector<func::FuncOp>> programs =
      programFunctions(module, *pipeline, externalDir);
  if (failed(programs))
    return failure();
  const std::vector<func::FuncOp> &functions = *programs;
  FailureOr<std::string> weightsDir = weightsDirectory(module, outDir);
  if (failed(weightsDir))
    return failure();
  CudaEmitter emitter(*weightsDir, externalDir.str(), stats);
  auto stageName = [](size_t k) { return "stage" + std::to_string(k); };
  for (auto [k, func] : llvm::enumerate(functions))
    if (failed(emitter.emitFunction(
            func, *pipeline ? stageName(k) : std::string("rankProgram"))))
      return failure();
  std::string communicatorList = communicatorsLiteral(functions);
  std::string program;
  llvm::raw_string_ostream out(program);
  out << "// Generated by `weft compile --target cuda` from "
      << commentText(origin)
      << (*pipeline ? ":\n// the pipeline stages and the schedule each rank "
                      "runs. Build with the CMakeLists.txt\n"
                    : ":\n// the program every rank runs. Build with the "
                      "CMakeLists.txt ")
      << (*pipeline ? "// " : "") << "next to it; run as\n"
      << "//   program [--collective-timeout S] WEIGHTS_DIR OUTPUT_DIR "
         "INPUT_0.npy ...\n"
      << "// alone (ranks as threads sharing GPU 0) or under mpirun/srun "
         "(one process\n// and GPU per rank, over NCCL).\n"
      << "// Arena: " << stats.arenaBytes << " bytes per rank for "
      << stats.buffers << " buffers (" << stats.unsharedBytes
      << " without reuse"
      << (*pipeline ? "; the largest stage's, shared by a rank's stages" : "")
      << ").\n"
      << "#include \"weft/runtime/cuda/Cuda.h\"\n"
      << "#include \"weft/runtime/cuda/Elementwise.cuh\"\n\n"
      << "#include <string>\n#include <vector>\n\n"
      << "using namespace weft::rt;\nusing namespace weft::rt::cuda;\n\n"
      << "namespace {\n\n"
      << emitter.kernels << emitter.body << "\n";
  if (*pipeline) {
    out << pipelineLiteral(
               module, **pipeline,
               [&](size_t k) { return "onDevice(" + stageName(k) + ")"; })
        << "\n"
        << rankConstants(stats, communicatorList) << "} // namespace\n\n"
        << "int main(int argc, char **argv) {\n"
        << "  return pipelineProgramMain(argc, argv, makeProgram(), "
           "{kArenaBytes, kCommunicators});\n}\n";
  } else {
    func::FuncOp func = functions.front();
    out << "const Mesh kMesh = " << meshLiteral(module, func) << ";\n"
        << "const std::vector<Layout> kInputs = " << layoutsLiteral(func, false)
        << ";\n"
        << "const std::vector<Layout> kOutputs = " << layoutsLiteral(func, true)
        << ";\n"
        << "const std::vector<TensorType> kInputTypes = "
        << inputTypesLiteral(func) << ";\n"
        << rankConstants(stats, communicatorList) << "} // namespace\n\n"
        << "int main(int argc, char **argv) {\n"
        << "  return programMain(argc, argv, {rankProgram, kMesh, kInputs, "
           "kOutputs, kArenaBytes, kCommunicators, kInputTypes});\n}\n";
  }
  return writeCudaProject(module, outDir, program);
}

/// The CUDA training program of a module cut into pipeline stages (as
/// emitCpuPipelineTrainingProgram's): each stage's steps and reductions and
/// each pipeline rank's optimizer step on the device.
static LogicalResult emitCudaPipelineTrainingProgram(
    ModuleOp module, const PipelineInfo &info, StringRef outDir,
    StringRef origin, StringRef externalDir, const TrainingProgramDefaults &d,
    CudaEmitStats &stats) {
  FailureOr<PipelineTrainingFunctions> functions =
      readPipelineTrainingFunctions(module, info, externalDir);
  if (failed(functions))
    return failure();
  PipelineTrainingFunctions &f = *functions;
  FailureOr<std::string> weightsDir = weightsDirectory(module, outDir);
  if (failed(weightsDir))
    return failure();
  CudaEmitter emitter(*weightsDir, externalDir.str(), stats);
  SmallVector<func::FuncOp> all;
  for (const PipelineFunction &each : pipelineFunctions(f)) {
    if (failed(emitter.emitFunction(each.func, each.name,
                                    each.readsHeld ? &f.held : nullptr)))
      return failure();
    all.push_back(each.func);
  }
  if (failed(checkHeldRead(module, f.order, f.held)))
    return failure();
  auto onDevice = [](StringRef name) { return "onDevice(" + name.str() + ")"; };
  std::string program;
  llvm::raw_string_ostream out(program);
  out << "// Generated by `weft compile --train --target cuda` from "
      << commentText(origin)
      << ":\n// the pipeline stages' forward, backward and weight-gradient "
         "steps, their\n// gradient reductions, each pipeline rank's optimizer "
         "step, and the schedule\n// each rank runs on its GPU. Build with the "
         "CMakeLists.txt next to it; run as\n"
      << "//   program [--steps N] [--lr X] [--min-lr X] [--warmup N]\n"
      << "//           [--log FILE] [--collective-timeout S]\n"
      << "//           [--eval-data FILE | --eval-split F] [--eval-every N] "
         "[--eval-iters K]\n"
      << "//           WEIGHTS_DIR OUTPUT_DIR TOKENS\n"
      << "// alone (ranks as threads sharing GPU 0) or under mpirun/srun "
         "(one process\n// and GPU per rank, over NCCL; the stages' "
         "activations through the host).\n"
      << "// Arena: " << stats.arenaBytes << " bytes per rank for "
      << stats.buffers << " buffers (" << stats.unsharedBytes
      << " without reuse; the largest function's, shared by all).\n"
      << "#include \"weft/runtime/cuda/Cuda.h\"\n"
      << "#include \"weft/runtime/cuda/Elementwise.cuh\"\n\n"
      << "#include <string>\n#include <vector>\n\n"
      << "using namespace weft::rt;\nusing namespace weft::rt::cuda;\n\n"
      << "namespace {\n\n"
      << emitter.kernels << emitter.body << "\n"
      << pipelineTrainingProgramLiteral(module, f, d, onDevice) << "\n"
      << rankConstants(stats, communicatorsLiteral(all)) << "} // namespace\n\n"
      << "int main(int argc, char **argv) {\n"
      << "  return trainingProgramMain(argc, argv, makeProgram(), "
         "{kArenaBytes, kCommunicators});\n}\n";
  return writeCudaProject(module, outDir, program);
}

LogicalResult weft::emitCudaTrainingProgram(ModuleOp module, StringRef outDir,
                                            StringRef origin,
                                            StringRef externalDir,
                                            const TrainingProgramDefaults &d,
                                            CudaEmitStats &stats) {
  FailureOr<std::optional<PipelineInfo>> pipeline = readPipeline(module);
  if (failed(pipeline))
    return failure();
  if (*pipeline)
    return emitCudaPipelineTrainingProgram(module, **pipeline, outDir, origin,
                                           externalDir, d, stats);
  FailureOr<TrainingFunctions> functions =
      readTrainingFunctions(module, externalDir);
  if (failed(functions))
    return failure();
  TrainingFunctions &f = *functions;
  FailureOr<std::string> weightsDir = weightsDirectory(module, outDir);
  if (failed(weightsDir))
    return failure();
  CudaEmitter emitter(*weightsDir, externalDir.str(), stats);
  if (failed(emitter.emitFunction(f.step, "trainingStep", &f.held)) ||
      (f.reduce && failed(emitter.emitFunction(f.reduce, "reduceGradients"))) ||
      failed(emitter.emitFunction(f.optimizer, "optimizerStep")) ||
      (f.evaluate &&
       failed(emitter.emitFunction(f.evaluate, "evaluationStep", &f.held))) ||
      failed(checkHeldRead(f)))
    return failure();
  SmallVector<func::FuncOp> all{f.step};
  if (f.reduce)
    all.push_back(f.reduce);
  all.push_back(f.optimizer);
  if (f.evaluate)
    all.push_back(f.evaluate);
  std::string program;
  llvm::raw_string_ostream out(program);
  out << "// Generated by `weft compile --train --target cuda` from "
      << commentText(origin)
      << ":\n// the training step, its gradient reduction and the optimizer "
         "step every rank runs\n// on its GPU. Build with the CMakeLists.txt "
         "next to it; run as\n"
      << "//   program [--steps N] [--grad-accum N] [--lr X] [--min-lr X] "
         "[--warmup N]\n"
      << "//           [--log FILE] [--collective-timeout S]\n"
      << "//           [--eval-data FILE | --eval-split F] [--eval-every N] "
         "[--eval-iters K]\n"
      << "//           WEIGHTS_DIR OUTPUT_DIR TOKENS\n"
      << "// alone (ranks as threads sharing GPU 0) or under mpirun/srun "
         "(one process\n// and GPU per rank, over NCCL).\n"
      << "// Arena: " << stats.arenaBytes << " bytes per rank for "
      << stats.buffers << " buffers (" << stats.unsharedBytes
      << " without reuse; the largest function's, shared by the three).\n"
      << "#include \"weft/runtime/cuda/Cuda.h\"\n"
      << "#include \"weft/runtime/cuda/Elementwise.cuh\"\n\n"
      << "#include <string>\n#include <vector>\n\n"
      << "using namespace weft::rt;\nusing namespace weft::rt::cuda;\n\n"
      << "namespace {\n\n"
      << emitter.kernels << emitter.body << "\n"
      << trainingProgramLiteral(
             module, f, d,
             [](StringRef name) { return "onDevice(" + name.str() + ")"; })
      << "\n"
      << rankConstants(stats, communicatorsLiteral(all)) << "} // namespace\n\n"
      << "int main(int argc, char **argv) {\n"
      << "  return trainingProgramMain(argc, argv, makeProgram(), "
         "{kArenaBytes, kCommunicators});\n}\n";
  return writeCudaProject(module, outDir, program);
}
