//===- Pipeline.cpp - Pipeline stages run on simulated devices ------------===//
//
// Part of the Weft project.
//
// Runs a module cut into pipeline stages (-weft-split-stages) with its
// schedule in the IR (-weft-schedule-pipeline) and partitioned over a mesh
// whose first axis is `pp`: the runtime's executor (rt::runPipelineRank)
// runs every rank's step list, the same list the cost model simulates,
// interpreting a stage's function for each forward step and passing the
// values between stages with point-to-point sends and receives.
//
//===----------------------------------------------------------------------===//

#include "weft/Driver/Driver.h"

#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Planner/PipelineSchedule.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Pipeline.h"
#include "weft/runtime/Program.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace mlir;
using namespace weft;
using rt::HostTensor;

std::string driver::chromeTrace(const std::vector<TraceEvent> &events,
                                int ranks, int stages) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto comma = [&] {
    if (!first)
      os << ",\n";
    first = false;
  };
  int perStage = stages > 0 ? ranks / stages : ranks;
  for (int r = 0; r < ranks; ++r) {
    comma();
    os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": "
       << r << ", \"args\": {\"name\": \"rank " << r << " (stage "
       << (perStage ? r / perStage : 0) << ")\"}}";
  }
  for (const TraceEvent &event : events) {
    comma();
    os << "{\"name\": \"" << event.name << "\", \"cat\": \"" << event.category
       << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << event.rank
       << ", \"ts\": " << llvm::format("%.3f", event.start)
       << ", \"dur\": " << llvm::format("%.3f", event.end - event.start) << "}";
  }
  os << "\n]}\n";
  return out;
}

/// `func` interpreted on the rank that runs it.
static rt::RankFunction interpreted(func::FuncOp func,
                                    const InterpreterOptions &base) {
  return [func, base](rt::RankContext &ctx,
                      const std::vector<HostTensor> &args) mutable {
    InterpreterOptions options = base;
    options.rank = ctx.rank;
    options.communicator = ctx.comm;
    options.rankContext = &ctx;
    FailureOr<std::vector<HostTensor>> out = interpret(func, args, options);
    if (failed(out))
      throw std::runtime_error("the interpreter failed on " +
                               func.getSymName().str() +
                               " (see the errors reported)");
    return std::move(*out);
  };
}

void driver::interpretStages(rt::PipelineProgram &program,
                             const PipelineInfo &info,
                             const InterpreterOptions &base) {
  for (auto [k, stage] : llvm::enumerate(program.virtualStages)) {
    const PipelineStageInfo &from = info.virtualStages[k];
    stage.function = interpreted(from.func, base);
    for (auto [piece, to] : {std::make_pair(from.backward, &stage.backward),
                             std::make_pair(from.weight, &stage.weight)}) {
      if (!piece)
        continue;
      to->function = interpreted(piece, base);
      // pipelineProgram checked the reduction.
      llvm::Expected<GradientReduction> deferred = gradientReductionOf(piece);
      if (!deferred)
        llvm::consumeError(deferred.takeError());
      else if (deferred->function)
        to->reduce = interpreted(deferred->function, base);
    }
  }
}

llvm::Expected<std::vector<func::FuncOp>>
driver::pipelineOptimizers(ModuleOp module, const rt::PipelineProgram &program,
                           const InterpreterOptions &base,
                           std::vector<rt::PipelineOptimizerStep> &steps) {
  std::vector<func::FuncOp> functions(size_t(program.stages));
  for (auto func : module.getOps<func::FuncOp>()) {
    auto rank = func->getAttrOfType<IntegerAttr>(
        WeftDialect::getPipelineRankAttrName());
    if (!rank)
      continue;
    if (rank.getInt() >= program.stages || functions[size_t(rank.getInt())])
      return llvm::createStringError(
          "pipeline rank " + llvm::Twine(rank.getInt()) +
          " has several optimizer steps, or the pipeline has no such rank");
    functions[size_t(rank.getInt())] = func;
  }
  steps.clear();
  if (llvm::none_of(functions, [](func::FuncOp f) { return bool(f); }))
    return functions;
  llvm::StringMap<int> gradientIndex;
  for (auto [g, name] : llvm::enumerate(program.gradientNames))
    gradientIndex[name] = int(g);
  for (auto [s, func] : llvm::enumerate(functions)) {
    if (!func)
      return llvm::createStringError("pipeline rank " + llvm::Twine(s) +
                                     " has no optimizer step");
    rt::PipelineOptimizerStep &step = steps.emplace_back();
    step.function = interpreted(func, base);
    codegen::layoutsOf(func, step.argLayouts, step.resultLayouts);
    step.inputs.resize(step.argLayouts.size());
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      OptimizerSlot slot = optimizerArgumentSlot(func, i);
      const std::string &role = slot.role, &parameter = slot.parameter;
      // A parameter's block (1) or its state (2), as the unpipelined step
      // counts them.
      step.held.push_back(int(slot.held()));
      int g = -1;
      if (role == "grad") {
        auto found = gradientIndex.find(parameter);
        if (found == gradientIndex.end())
          return llvm::createStringError(
              func.getSymName() + " takes the gradient of '" + parameter +
              "', which no pipeline stage returns");
        g = found->second;
      }
      step.gradientOf.push_back(g);
    }
  }
  return functions;
}

llvm::Expected<std::vector<HostTensor>> driver::runPipelineOnMeshDevices(
    ModuleOp module, const plan::Plan &plan,
    const std::vector<HostTensor> &inputs, const InterpreterOptions &base,
    int expectedDevices, double timeoutSeconds, std::vector<int64_t> &bytes,
    std::vector<TraceEvent> *trace) {
  FailureOr<std::optional<PipelineInfo>> read = readPipeline(module);
  if (failed(read))
    return diagnosed("reading the module's pipeline failed");
  if (!*read)
    return llvm::createStringError("the module is not split into pipeline "
                                   "stages (run -weft-split-stages)");
  const PipelineInfo &info = **read;
  const int p = info.stages, v = info.chunks;
  if (p != plan.pp() || v != std::max(1, plan.virtual_stages()) ||
      info.microBatches != std::max(1, plan.num_micro_batches()))
    return llvm::createStringError(
        "the module's pipeline (" + llvm::Twine(p) + " stages x " +
        llvm::Twine(v) + " chunks, " + llvm::Twine(info.microBatches) +
        " micro-batches) is not the plan's (pp=" + llvm::Twine(plan.pp()) +
        ", v=" + llvm::Twine(std::max(1, plan.virtual_stages())) +
        ", m=" + llvm::Twine(std::max(1, plan.num_micro_batches())) + ")");
  llvm::Expected<rt::PipelineProgram> program = pipelineProgram(module, info);
  if (!program)
    return program.takeError();
  const int n = int(program->mesh.size());
  if (expectedDevices > 0 && expectedDevices != n)
    return llvm::createStringError("the plan runs on " + llvm::Twine(n) +
                                   " devices, but --devices is " +
                                   llvm::Twine(expectedDevices));
  interpretStages(*program, info, base);
  std::mutex traceMutex;
  rt::StepObserver observe = [&](int rank, const rt::PipelineStep &step,
                                 double start, double end) {
    std::lock_guard<std::mutex> lock(traceMutex);
    trace->push_back(
        {rank, step.name,
         step.kind == rt::PipelineStep::Forward ? "compute" : "p2p", start,
         end});
  };
  auto ran = rt::runPipelineOnMesh(
      *program, base.weightsDir, inputs, &bytes,
      std::chrono::milliseconds(int64_t(timeoutSeconds * 1000)),
      trace ? &observe : nullptr);
  if (!ran.ok())
    return llvm::createStringError(std::string(ran.status().message()));
  return std::move(*ran);
}
