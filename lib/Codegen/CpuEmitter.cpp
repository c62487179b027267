//===- CpuEmitter.cpp - Partitioned programs as C++ for the CPU -----------===//
//
// Part of the Weft project.
//
// One statement per op: each SSA value is a `HostTensor` variable, each op a
// call into the runtime (the same kernels the interpreter runs, the same
// collectives by mesh axes), so a compiled program computes what `weft run`
// computes. The function becomes `rankProgram`; a fixed driver scatters the
// inputs to the mesh's ranks (threads over the in-process communicator),
// runs them and gathers the outputs.
//
//===----------------------------------------------------------------------===//

#include "weft/Codegen/CpuEmitter.h"

#include "EmitterCommon.h"
#include "TrainingProgram.h"

#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Exec/Interpreter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace mlir;
using namespace weft;

using namespace weft::codegen;

namespace {

/// A parameter that a training program holds and updates: its index among
/// the program's parameters, the block of it each rank holds (the optimizer
/// step's layout), and the file with its first value.
class Emitter {
public:
  Emitter(llvm::raw_ostream &os, StringRef weightsDir, StringRef externalDir)
      : os(os), weightsDir(weightsDir), externalDir(externalDir) {}

  /// Emits `func` as `std::vector<HostTensor> NAME(RankContext &, inputs)`.
  /// Weight files are numbered across the functions one emitter writes.
  /// With `held`, the function also takes `params`, the blocks of the held
  /// parameters the rank holds: a held parameter is read from there (where
  /// the function cuts it to that block), not from a file.
  LogicalResult emitFunction(func::FuncOp func,
                             StringRef functionName = "rankProgram",
                             llvm::StringMap<HeldParameter> *held = nullptr);

private:
  std::string name(Value v) {
    auto [it, inserted] = names.try_emplace(v, "");
    if (inserted)
      it->second = "v" + std::to_string(counter++);
    return it->second;
  }
  std::string shape(Value v) {
    return ints(cast<RankedTensorType>(v.getType()).getShape());
  }
  void assign(Value result, const std::string &expression) {
    os << "  HostTensor " << name(result) << " = " << expression << ";\n";
  }
  LogicalResult emitWeight(Operation *op);
  LogicalResult emitOp(Operation *op);
  /// For each held parameter `param` of `body`: the ops that cut it to the
  /// block the rank holds (the parameter and its all_slices), into
  /// `skipped`, and the value they compute, into `fromParams`.
  LogicalResult findHeldBlocks(Block &body,
                               llvm::StringMap<HeldParameter> &held);
  /// True if `op` reads `v` last (and once): the tensor can move into the op
  /// or be freed after it.
  bool diesAt(Value v, Operation *op) const {
    auto last = lastUse.find(v);
    return last != lastUse.end() && last->second == op &&
           llvm::count(op->getOperands(), v) == 1;
  }
  /// `v` for an op that may take its buffer where `op` reads it last.
  std::string moved(Value v, Operation *op) {
    return diesAt(v, op) ? "std::move(" + name(v) + ")" : name(v);
  }

  llvm::raw_ostream &os;
  std::string weightsDir;
  std::string externalDir;
  llvm::DenseMap<Value, std::string> names;
  llvm::DenseMap<Operation *, std::string> shardFiles;
  /// The op that reads each value last; the returned values are read by the
  /// return. A tensor is freed after its last reader, so that a program
  /// holds only what is still to be read (the interpreter's rule too).
  llvm::DenseMap<Value, Operation *> lastUse;
  llvm::SmallPtrSet<Operation *, 16> skipped;
  llvm::DenseMap<Operation *, std::pair<Value, int>> fromParams;
  int counter = 0;
  int weights = 0;
  /// Gathers held over a block (weft.all_gather ... hold N), numbered
  /// across the functions: each one's key in the rank's context.
  int heldGathers = 0;
};

LogicalResult Emitter::emitWeight(Operation *op) {
  FailureOr<std::string> file =
      writeWeight(op, weightsDir, externalDir, weights);
  if (failed(file))
    return failure();
  // A weight sliced for this rank: read only the rank's shard.
  if (AllSliceOp slice = shardingSlice(op)) {
    shardFiles[slice] = *file;
    return success();
  }
  assign(op->getResult(0),
         "loadWeight(ctx, \"" + *file + "\", " +
             dtypeName(cast<RankedTensorType>(op->getResult(0).getType())
                           .getElementType()) +
             ", " + shape(op->getResult(0)) + ")");
  return success();
}

LogicalResult Emitter::emitOp(Operation *op) {
  auto arg = [&](unsigned i) { return name(op->getOperand(i)); };
  auto optional = [&](Value v) {
    return v ? "&" + name(v) : std::string("nullptr");
  };
  auto binary = [&](const char *kind) {
    assign(op->getResult(0),
           std::string("binary(BinaryKind::") + kind + ", " + arg(0) + ", " +
               arg(1) + ")");
    return success();
  };
  auto unary = [&](const char *kind) {
    assign(op->getResult(0),
           std::string("unary(UnaryKind::") + kind + ", " + arg(0) + ")");
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<ParameterOp, ConstantOp>(
          [&](Operation *weight) { return emitWeight(weight); })
      .Case([&](IotaOp i) {
        assign(i.getResult(), std::string("iota(") +
                                  dtypeName(i.getType().getElementType()) +
                                  ", " + shape(i.getResult()) + ", " +
                                  std::to_string(i.getDim()) + ")");
        return success();
      })
      .Case([&](AddOp) { return binary("Add"); })
      .Case([&](SubOp) { return binary("Sub"); })
      .Case([&](MulOp) { return binary("Mul"); })
      .Case([&](DivOp) { return binary("Div"); })
      .Case([&](PowOp) { return binary("Pow"); })
      .Case([&](MaximumOp) { return binary("Max"); })
      .Case([&](MinimumOp) { return binary("Min"); })
      .Case([&](CompareOp c) {
        static const char *kinds[] = {"Eq", "Ne", "Lt", "Le", "Gt", "Ge"};
        assign(c.getResult(),
               std::string("compare(CompareKind::") +
                   kinds[static_cast<int>(c.getPredicate())] + ", " + arg(0) +
                   ", " + arg(1) + ")");
        return success();
      })
      .Case([&](WhereOp) {
        assign(op->getResult(0),
               "where(" + arg(0) + ", " + arg(1) + ", " + arg(2) + ")");
        return success();
      })
      .Case([&](NegOp) { return unary("Neg"); })
      .Case([&](ExpOp) { return unary("Exp"); })
      .Case([&](LogOp) { return unary("Log"); })
      .Case([&](SqrtOp) { return unary("Sqrt"); })
      .Case([&](RsqrtOp) { return unary("Rsqrt"); })
      .Case([&](TanhOp) { return unary("Tanh"); })
      .Case([&](ErfOp) { return unary("Erf"); })
      .Case([&](SinOp) { return unary("Sin"); })
      .Case([&](CosOp) { return unary("Cos"); })
      .Case([&](SigmoidOp) { return unary("Sigmoid"); })
      .Case([&](ReluOp) { return unary("Relu"); })
      .Case([&](AbsOp) { return unary("Abs"); })
      .Case([&](SiluOp) { return unary("Silu"); })
      .Case([&](GeluOp g) {
        return unary(g.getApproximation() == GeluApproximation::tanh
                         ? "GeluTanh"
                         : "GeluErf");
      })
      .Case([&](CastOp c) {
        assign(c.getResult(), "cast(" + arg(0) + ", " +
                                  dtypeName(c.getType().getElementType()) + ")");
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, ReduceLogSumExpOp>(
          [&](Operation *r) {
            auto axes =
                r->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
            bool keep = r->hasAttr("keep_dims");
            assign(r->getResult(0), std::string("reduce(") + reduceKind(r) +
                                        ", " + arg(0) + ", " + ints(axes) +
                                        ", " + (keep ? "true" : "false") + ")");
            return success();
          })
      .Case([&](SoftmaxOp s) {
        assign(s.getResult(),
               "softmax(" + arg(0) + ", " + std::to_string(s.getAxis()) +
                   ", false, " + floatLiteral(s.getScale().convertToFloat()) +
                   ", " + (s.getCausal() ? "true" : "false") + ")");
        return success();
      })
      .Case([&](LogSoftmaxOp s) {
        assign(s.getResult(),
               "softmax(" + arg(0) + ", " + std::to_string(s.getAxis()) +
                   ", true, " + floatLiteral(s.getScale().convertToFloat()) +
                   ", " + (s.getCausal() ? "true" : "false") + ")");
        return success();
      })
      .Case([&](DropoutOp d) {
        // A forward program keeps every element (PyTorch's eval mode).
        assign(op->getResult(0), moved(d.getInput(), op));
        return success();
      })
      .Case([&](AttentionBlockOp a) {
        std::string block = "block" + std::to_string(counter++);
        os << "  AttentionBlock " << block << " = attentionBlock("
           << name(a.getQ()) << ", " << name(a.getK()) << ", " << name(a.getV())
           << ", " << optional(a.getMask()) << ", "
           << optional(a.getQPositions()) << ", " << optional(a.getKPositions())
           << ", " << floatLiteral(a.getScale().convertToFloat()) << ", "
           << (a.getCausal() ? "true" : "false")
           << attentionOptionArguments(a, optional) << ");\n";
        assign(a.getResult(), "std::move(" + block + ".output)");
        assign(a.getLse(), "std::move(" + block + ".lse)");
        return success();
      })
      .Case([&](AttentionGradOp a) {
        std::string grads = "grads" + std::to_string(counter++);
        os << "  AttentionGradients " << grads << " = attentionGrad("
           << name(a.getQ()) << ", " << name(a.getK()) << ", " << name(a.getV())
           << ", " << name(a.getResultGrad()) << ", " << optional(a.getMask())
           << ", " << optional(a.getQPositions()) << ", "
           << optional(a.getKPositions()) << ", "
           << floatLiteral(a.getScale().convertToFloat()) << ", "
           << (a.getCausal() ? "true" : "false") << ", " << optional(a.getOut())
           << ", " << optional(a.getLse())
           << attentionOptionArguments(a, optional) << ");\n";
        assign(a.getQGrad(), "std::move(" + grads + ".q)");
        assign(a.getKGrad(), "std::move(" + grads + ".k)");
        assign(a.getVGrad(), "std::move(" + grads + ".v)");
        return success();
      })
      .Case([&](LayerNormOp n) {
        assign(n.getResult(),
               "normalize(" + name(n.getInput()) + ", " + name(n.getScale()) +
                   ", " + optional(n.getBias()) + ", " +
                   std::to_string(n.getAxis()) + ", " +
                   floatLiteral(n.getEpsilon().convertToFloat()) +
                   ", false)");
        return success();
      })
      .Case([&](RMSNormOp n) {
        assign(n.getResult(),
               "normalize(" + name(n.getInput()) + ", " + name(n.getScale()) +
                   ", nullptr, " + std::to_string(n.getAxis()) + ", " +
                   floatLiteral(n.getEpsilon().convertToFloat()) +
                   ", true)");
        return success();
      })
      .Case([&](MatmulOp m) {
        assign(m.getResult(), "matmul(" + arg(0) + ", " + arg(1) + ", " +
                                  (m.getTransposeLhs() ? "true" : "false") +
                                  ", " +
                                  (m.getTransposeRhs() ? "true" : "false") + ")");
        return success();
      })
      .Case([&](LinearOp l) {
        assign(l.getResult(), "linear(" + name(l.getInput()) + ", " +
                                  name(l.getWeight()) + ", " +
                                  optional(l.getBias()) + ", " +
                                  (l.getTransposeWeight() ? "true" : "false") +
                                  ")");
        return success();
      })
      .Case([&](AttentionOp a) {
        assign(a.getResult(), "attention(" + name(a.getQ()) + ", " +
                                  name(a.getK()) + ", " + name(a.getV()) +
                                  ", " + optional(a.getMask()) + ", " +
                                  floatLiteral(a.getScale().convertToFloat()) +
                                  ", " + (a.getCausal() ? "true" : "false") +
                                  attentionOptionArguments(a, optional) + ")");
        return success();
      })
      .Case([&](EmbeddingOp e) {
        assign(e.getResult(), "valueOrThrow(gather(" + name(e.getTable()) +
                                  ", " + name(e.getIndices()) + ", 0))");
        return success();
      })
      .Case([&](GatherOp g) {
        assign(g.getResult(), "valueOrThrow(gather(" + name(g.getInput()) +
                                  ", " + name(g.getIndices()) + ", " +
                                  std::to_string(g.getAxis()) + "))");
        return success();
      })
      .Case([&](ReshapeOp r) {
        // A view: the buffer moves over where the input dies here.
        assign(r.getResult(), "reshape(" + moved(r.getInput(), op) + ", " +
                                  shape(r.getResult()) + ")");
        return success();
      })
      .Case([&](TransposeOp t) {
        assign(t.getResult(),
               "transpose(" + arg(0) + ", " + ints(t.getPermutation()) + ")");
        return success();
      })
      .Case([&](SliceOp s) {
        SmallVector<int64_t> strides(s.getStarts().size(), 1);
        if (std::optional<ArrayRef<int64_t>> given = s.getStrides())
          strides.assign(given->begin(), given->end());
        assign(s.getResult(), "slice(" + arg(0) + ", " + ints(s.getStarts()) +
                                  ", " + ints(s.getLimits()) + ", " +
                                  ints(strides) + ")");
        return success();
      })
      .Case([&](ConcatOp c) {
        std::string list = "{";
        for (auto [i, input] : llvm::enumerate(c.getInputs()))
          list += (i ? ", &" : "&") + name(input);
        assign(c.getResult(), "concat(" + list + "}, " +
                                  std::to_string(c.getAxis()) + ")");
        return success();
      })
      .Case([&](SplitOp s) {
        std::string pieces = "pieces" + std::to_string(counter++);
        os << "  std::vector<HostTensor> " << pieces << " = split(" << arg(0)
           << ", " << s.getAxis() << ", " << ints(s.getSizes()) << ");\n";
        for (auto [i, r] : llvm::enumerate(s.getResults()))
          assign(r, "std::move(" + pieces + "[" + std::to_string(i) + "])");
        return success();
      })
      .Case([&](BroadcastToOp b) {
        assign(b.getResult(),
               "broadcastTo(" + arg(0) + ", " + shape(b.getResult()) + ")");
        return success();
      })
      .Case([&](CumSumOp c) {
        assign(c.getResult(), "cumsum(" + arg(0) + ", " +
                                  std::to_string(c.getAxis()) + ", " +
                                  (c.getExclusive() ? "true" : "false") + ", " +
                                  (c.getReverse() ? "true" : "false") + ")");
        return success();
      })
      .Case([&](TriluOp t) {
        assign(t.getResult(), "trilu(" + arg(0) + ", " +
                                  (t.getUpper() ? "true" : "false") + ", " +
                                  std::to_string(t.getDiagonal()) + ")");
        return success();
      })
      .Case([&](CrossEntropyOp c) {
        static const char *reductions[] = {"None", "Mean", "Sum"};
        std::string ignore =
            c.getIgnoreIndex()
                ? "std::optional<int64_t>(" +
                      std::to_string(int64_t(*c.getIgnoreIndex())) + ")"
                : "std::nullopt";
        assign(c.getResult(),
               "valueOrThrow(crossEntropy(" + arg(0) + ", " + arg(1) +
                   ", LossReduction::" +
                   reductions[static_cast<int>(c.getReduction())] + ", " +
                   ignore + "))");
        return success();
      })
      .Case([&](AllReduceOp c) -> LogicalResult {
        if (getCollectiveCodec(c) == CollectiveCodec::topk)
          return c.emitError("weft compile: top-k with error feedback keeps "
                             "a residual across training steps, which "
                             "compiled (forward) programs do not run; train "
                             "with weft train, or use topk_noef");
        // A sub-group of the axis: its members after the codec.
        std::string members;
        if (!c.getGroupMembers().empty())
          members = std::string(codecArg(c).empty() ? ", Codec::None" : "") +
                    ", " + ints(c.getGroupMembers());
        assign(c.getResult(),
               "allReduce(ctx, " + arg(0) + ", " + reduceOp(c.getKind()) +
                   ", " + strings(c.getAxes()) + codecArg(c) + members + ")");
        return success();
      })
      .Case([&](AllGatherOp c) {
        // Held over a block of micro-batches: the rank keeps it under a key
        // of its own.
        std::string held = c.getHold()
                               ? "heldAllGather(ctx, " +
                                     std::to_string(heldGathers++) + ", " +
                                     std::to_string(*c.getHold()) + ", "
                               : "allGather(ctx, ";
        assign(c.getResult(), held + arg(0) + ", " + strings(c.getAxes()) +
                                  ", " + std::to_string(c.getDim()) + ", " +
                                  (c.getZigzag() ? "true" : "false") +
                                  codecArg(c) + ")");
        return success();
      })
      .Case([&](ReduceScatterOp c) {
        assign(c.getResult(),
               "reduceScatter(ctx, " + arg(0) + ", " + reduceOp(c.getKind()) +
                   ", " + strings(c.getAxes()) + ", " +
                   std::to_string(c.getDim()) + ", " +
                   (c.getZigzag() ? "true" : "false") + codecArg(c) + ")");
        return success();
      })
      .Case([&](AllToAllOp c) {
        assign(c.getResult(),
               "allToAll(ctx, " + arg(0) + ", " + strings(c.getAxes()) + ", " +
                   std::to_string(c.getSplitDim()) + ", " +
                   std::to_string(c.getConcatDim()) + codecArg(c) + ")");
        return success();
      })
      .Case([&](AllSliceOp c) {
        auto file = shardFiles.find(c);
        if (file != shardFiles.end()) {
          assign(c.getResult(), "loadWeightShard(ctx, \"" + file->second +
                                    "\", " + strings(c.getAxes()) + ", " +
                                    std::to_string(c.getDim()) + ", " +
                                    dtypeName(c.getType().getElementType()) +
                                    ", " + shape(c.getResult()) + ")");
          return success();
        }
        assign(c.getResult(), "allSlice(ctx, " + arg(0) + ", " +
                                  strings(c.getAxes()) + ", " +
                                  std::to_string(c.getDim()) + ", " +
                                  (c.getZigzag() ? "true" : "false") + ")");
        return success();
      })
      .Case([&](CollectivePermuteOp c) {
        assign(c.getResult(),
               "permute(ctx, " + arg(0) + ", " + strings(c.getAxes()) + ", " +
                   std::to_string(c.getShift()) + codecArg(c) + ")");
        return success();
      })
      .Case([&](func::ReturnOp r) {
        // Moved into the result, not copied (a braced list would copy); in
        // a step that reads the held parameters through views, a result
        // that is still one (a frozen parameter, returned as it is) is
        // copied.
        os << "  std::vector<HostTensor> results;\n";
        for (Value v : r.getOperands())
          os << "  results.push_back("
             << (fromParams.empty() ? moved(v, op)
                                    : "owning(" + moved(v, op) + ")")
             << ");\n";
        os << "  return results;\n";
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitError("weft compile cannot emit '")
               << other->getName() << "' for the CPU";
      });
}

LogicalResult Emitter::findHeldBlocks(Block &body,
                                      llvm::StringMap<HeldParameter> &held) {
  FailureOr<SmallVector<HeldRead>> reads =
      findHeldReads(body, held, weightsDir, externalDir, weights);
  if (failed(reads))
    return failure();
  for (const HeldRead &read : *reads) {
    skipped.insert(read.chain.begin(), read.chain.end());
    fromParams[read.chain.front()] = {read.value, read.index};
  }
  return success();
}

LogicalResult Emitter::emitFunction(func::FuncOp func, StringRef functionName,
                                    llvm::StringMap<HeldParameter> *held) {
  names.clear();
  shardFiles.clear();
  lastUse.clear();
  skipped.clear();
  fromParams.clear();
  counter = 0;
  os << "std::vector<HostTensor> " << functionName
     << "(RankContext &ctx, const std::vector<HostTensor> &inputs"
     << (held ? ",\n    const std::vector<HostTensor> &params" : "") << ") {\n";
  for (auto [i, arg] : llvm::enumerate(func.getArguments()))
    os << "  HostTensor " << name(arg) << " = asType(inputs[" << i << "], "
       << dtypeName(cast<RankedTensorType>(arg.getType()).getElementType())
       << ");\n";
  Block &body = func.getBody().front();
  for (Operation &op : body)
    op.walk([&](Operation *inner) {
      for (Value operand : inner->getOperands())
        lastUse[operand] = &op;
    });
  if (held && failed(findHeldBlocks(body, *held)))
    return failure();
  for (Operation &op : body) {
    if (skipped.count(&op)) {
      // A held parameter, as the rank holds it.
      auto from = fromParams.find(&op);
      if (from != fromParams.end())
        os << "  HostTensor " << name(from->second.first) << " = viewOf(params["
           << from->second.second << "]);\n";
      continue;
    }
    if (failed(emitOp(&op)))
      return failure();
    if (op.hasTrait<mlir::OpTrait::IsTerminator>())
      continue;
    // Free what this op read last (moved-from tensors are already empty).
    llvm::SmallPtrSet<Value, 4> freed;
    for (Value operand : op.getOperands()) {
      auto last = lastUse.find(operand);
      if (last != lastUse.end() && last->second == &op &&
          names.count(operand) && freed.insert(operand).second)
        os << "  release(" << name(operand) << ");\n";
    }
  }
  os << "}\n";
  return success();
}

} // namespace

static LogicalResult writeCMakeProject(ModuleOp module, StringRef outDir);

LogicalResult weft::emitCpuProgram(ModuleOp module, StringRef outDir,
                                   StringRef origin, StringRef externalDir) {
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
  std::string body;
  llvm::raw_string_ostream os(body);
  Emitter emitter(os, *weightsDir, externalDir);
  for (auto [k, func] : llvm::enumerate(functions))
    if (failed(emitter.emitFunction(
            func, *pipeline ? "stage" + std::to_string(k) : "rankProgram")))
      return failure();

  std::string program;
  llvm::raw_string_ostream out(program);
  out << "// Generated by `weft compile` from " << commentText(origin)
      << (*pipeline ? ": the pipeline stages and the schedule each rank "
                      "runs.\n"
                    : ": the program every rank runs.\n")
      << "// Build with the CMakeLists.txt next to it; run as\n"
      << "//   program [--collective-timeout S] WEIGHTS_DIR OUTPUT_DIR "
         "INPUT_0.npy ...\n"
      << "// alone (ranks as threads) or under mpirun (one process per "
         "rank).\n"
      << "#include \"weft/runtime/CpuKernels.h\"\n"
      << "#include \"weft/runtime/NpyFile.h\"\n"
      << (*pipeline ? "#include \"weft/runtime/Pipeline.h\"\n" : "")
      << "#include \"weft/runtime/Program.h\"\n\n"
      << "#include <optional>\n#include <string>\n#include <vector>\n\n"
      << "using namespace weft::rt;\n\nnamespace {\n\n"
      << body << "\n";
  if (*pipeline) {
    out << pipelineLiteral(module, **pipeline,
                           [](size_t k) { return "stage" + std::to_string(k); })
        << "\n} // namespace\n\n"
        << "int main(int argc, char **argv) {\n"
        << "  return pipelineProgramMain(argc, argv, makeProgram());\n}\n";
  } else {
    func::FuncOp func = functions.front();
    out << "const Mesh kMesh = " << meshLiteral(module, func) << ";\n"
        << "const std::vector<Layout> kInputs = " << layoutsLiteral(func, false)
        << ";\n"
        << "const std::vector<Layout> kOutputs = " << layoutsLiteral(func, true)
        << ";\n"
        << "const std::vector<TensorType> kInputTypes = "
        << inputTypesLiteral(func) << ";\n\n} // namespace\n\n"
        << "int main(int argc, char **argv) {\n"
        << "  return programMain(argc, argv, {rankProgram, kMesh, kInputs, "
           "kOutputs, kInputTypes});\n}\n";
  }
  if (failed(writeFile(module, outDir, "program.cpp", program)))
    return failure();
  return writeCMakeProject(module, outDir);
}

/// The CMake project that builds program.cpp against the installed runtime.
static LogicalResult writeCMakeProject(ModuleOp module, StringRef outDir) {
  return writeFile(
      module, outDir, "CMakeLists.txt",
      "# Generated by `weft compile`: the rank program against the "
      "installed runtime.\n"
      "cmake_minimum_required(VERSION 3.20)\n"
      "project(WeftRankProgram CXX)\n"
      "set(CMAKE_CXX_STANDARD 17)\n"
      "if(NOT CMAKE_BUILD_TYPE)\n  set(CMAKE_BUILD_TYPE Release)\nendif()\n"
      "find_package(WeftRuntime REQUIRED)\n"
      "# The program is one long function of calls into the runtime, whose "
      "kernels\n# are built optimized: -O1 compiles it in about a quarter of "
      "the time -O3\n# takes, and that time grows with the layers.\n"
      "set(WEFT_PROGRAM_OPTIMIZATION -O1 CACHE STRING\n"
      "    \"optimization of the generated program's own code (Release)\")\n"
      "set(CMAKE_CXX_FLAGS_RELEASE \"${WEFT_PROGRAM_OPTIMIZATION} "
      "-DNDEBUG\")\n"
      "add_executable(program program.cpp)\n"
      "target_link_libraries(program PRIVATE Weft::WeftRuntime)\n");
}

//===----------------------------------------------------------------------===//
// Training programs
//===----------------------------------------------------------------------===//

/// The training program of a module cut into pipeline stages: each stage's
/// forward, backward and weight-gradient steps on the rank's parameter
/// blocks, their gradient reductions, each pipeline rank's optimizer step,
/// and the pipeline the runtime runs them by.
static LogicalResult emitCpuPipelineTrainingProgram(
    ModuleOp module, const PipelineInfo &info, StringRef outDir,
    StringRef origin, StringRef externalDir, const TrainingProgramDefaults &d) {
  FailureOr<PipelineTrainingFunctions> functions =
      readPipelineTrainingFunctions(module, info, externalDir);
  if (failed(functions))
    return failure();
  PipelineTrainingFunctions &f = *functions;
  FailureOr<std::string> weightsDir = weightsDirectory(module, outDir);
  if (failed(weightsDir))
    return failure();
  std::string body;
  llvm::raw_string_ostream os(body);
  Emitter emitter(os, *weightsDir, externalDir);
  for (const PipelineFunction &each : pipelineFunctions(f))
    if (failed(emitter.emitFunction(each.func, each.name,
                                    each.readsHeld ? &f.held : nullptr)))
      return failure();
  if (failed(checkHeldRead(module, f.order, f.held)))
    return failure();
  std::string program;
  llvm::raw_string_ostream out(program);
  out << "// Generated by `weft compile --train` from " << commentText(origin)
      << ": the pipeline stages'\n// forward, backward and weight-gradient "
         "steps, their gradient reductions, each\n// pipeline rank's "
         "optimizer step, and the schedule each rank runs.\n"
      << "// Build with the CMakeLists.txt next to it; run as\n"
      << "//   program [--steps N] [--lr X] [--min-lr X] [--warmup N]\n"
      << "//           [--log FILE] [--collective-timeout S]\n"
      << "//           [--eval-data FILE | --eval-split F] [--eval-every N] "
         "[--eval-iters K]\n"
      << "//           WEIGHTS_DIR OUTPUT_DIR TOKENS\n"
      << "// alone (ranks as threads) or under mpirun (one process per "
         "rank).\n"
      << "#include \"weft/runtime/CpuKernels.h\"\n"
      << "#include \"weft/runtime/Pipeline.h\"\n"
      << "#include \"weft/runtime/Program.h\"\n"
      << "#include \"weft/runtime/Training.h\"\n\n"
      << "#include <optional>\n#include <string>\n#include <vector>\n\n"
      << "using namespace weft::rt;\n\nnamespace {\n\n"
      << body << "\n"
      << pipelineTrainingProgramLiteral(
             module, f, d, [](StringRef name) { return name.str(); })
      << "\n} // namespace\n\n"
      << "int main(int argc, char **argv) {\n"
      << "  return trainingProgramMain(argc, argv, makeProgram());\n}\n";
  if (failed(writeFile(module, outDir, "program.cpp", program)))
    return failure();
  return writeCMakeProject(module, outDir);
}

LogicalResult weft::emitCpuTrainingProgram(ModuleOp module, StringRef outDir,
                                           StringRef origin,
                                           StringRef externalDir,
                                           const TrainingProgramDefaults &d) {
  FailureOr<std::optional<PipelineInfo>> pipeline = readPipeline(module);
  if (failed(pipeline))
    return failure();
  if (*pipeline)
    return emitCpuPipelineTrainingProgram(module, **pipeline, outDir, origin,
                                          externalDir, d);
  FailureOr<TrainingFunctions> functions =
      readTrainingFunctions(module, externalDir);
  if (failed(functions))
    return failure();
  TrainingFunctions &f = *functions;
  FailureOr<std::string> weightsDir = weightsDirectory(module, outDir);
  if (failed(weightsDir))
    return failure();
  std::string body;
  llvm::raw_string_ostream os(body);
  Emitter emitter(os, *weightsDir, externalDir);
  if (failed(emitter.emitFunction(f.step, "trainingStep", &f.held)) ||
      (f.reduce && failed(emitter.emitFunction(f.reduce, "reduceGradients"))) ||
      failed(emitter.emitFunction(f.optimizer, "optimizerStep")) ||
      (f.evaluate &&
       failed(emitter.emitFunction(f.evaluate, "evaluationStep", &f.held))) ||
      failed(checkHeldRead(f)))
    return failure();
  std::string program;
  llvm::raw_string_ostream out(program);
  out << "// Generated by `weft compile --train` from " << commentText(origin)
      << ": the training step, its gradient reduction and the optimizer "
         "step every rank runs.\n"
      << "// Build with the CMakeLists.txt next to it; run as\n"
      << "//   program [--steps N] [--grad-accum N] [--lr X] [--min-lr X] "
         "[--warmup N]\n"
      << "//           [--log FILE] [--collective-timeout S]\n"
      << "//           [--eval-data FILE | --eval-split F] [--eval-every N] "
         "[--eval-iters K]\n"
      << "//           WEIGHTS_DIR OUTPUT_DIR TOKENS\n"
      << "// alone (ranks as threads) or under mpirun (one process per "
         "rank).\n"
      << "#include \"weft/runtime/CpuKernels.h\"\n"
      << "#include \"weft/runtime/Program.h\"\n"
      << "#include \"weft/runtime/Training.h\"\n\n"
      << "#include <optional>\n#include <string>\n#include <vector>\n\n"
      << "using namespace weft::rt;\n\nnamespace {\n\n"
      << body << "\n"
      << trainingProgramLiteral(module, f, d,
                                [](StringRef name) { return name.str(); })
      << "\n} // namespace\n\n"
      << "int main(int argc, char **argv) {\n"
      << "  return trainingProgramMain(argc, argv, makeProgram());\n}\n";
  if (failed(writeFile(module, outDir, "program.cpp", program)))
    return failure();
  return writeCMakeProject(module, outDir);
}
