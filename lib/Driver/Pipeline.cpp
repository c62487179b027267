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
  // Each stage's function, interpreted on the rank that runs it.
  for (auto [k, stage] : llvm::enumerate(program->virtualStages)) {
    func::FuncOp func = info.virtualStages[k].func;
    stage.function = [func, base](rt::RankContext &ctx,
                                  const std::vector<HostTensor> &args) mutable {
      InterpreterOptions options = base;
      options.rank = ctx.rank;
      options.communicator = ctx.comm;
      FailureOr<std::vector<HostTensor>> out = interpret(func, args, options);
      if (failed(out))
        throw std::runtime_error("the interpreter failed on " +
                                 func.getSymName().str() +
                                 " (see the errors reported)");
      return std::move(*out);
    };
  }
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

llvm::Expected<rt::PipelineProgram>
driver::pipelineProgram(ModuleOp module, const PipelineInfo &info) {
  std::optional<MeshInfo> meshInfo = getMeshInfo(module);
  if (!meshInfo || meshInfo->axes.empty() || meshInfo->axes.front() != "pp" ||
      meshInfo->sizes.front() != info.stages)
    return llvm::createStringError(
        "a pipelined module's mesh must have its pp axis first");
  rt::PipelineProgram program;
  program.mesh.axes.assign(meshInfo->axes.begin(), meshInfo->axes.end());
  program.mesh.shape.assign(meshInfo->sizes.begin(), meshInfo->sizes.end());
  program.stages = info.stages;
  program.chunks = info.chunks;
  program.microBatches = info.microBatches;
  for (const PipelineStageInfo &from : info.virtualStages) {
    func::FuncOp func = from.func;
    if (func->hasAttr(WeftDialect::getLoadBalancedAttrName()))
      program.mesh.zigzagAxis = "cp";
    rt::PipelineStage &stage = program.virtualStages.emplace_back();
    stage.modelInput = from.modelInput;
    stage.modelOutput = from.modelOutput;
    FunctionType type = func.getFunctionType();
    for (unsigned i = 0; i < type.getNumInputs(); ++i)
      stage.argLayouts.push_back(driver::layoutOf(
          func.getArgAttr(i, WeftDialect::getLocalShardingAttrName()),
          cast<RankedTensorType>(type.getInput(i)).getRank()));
    for (unsigned o = 0; o < type.getNumResults(); ++o)
      stage.resultLayouts.push_back(driver::layoutOf(
          func.getResultAttr(o, WeftDialect::getLocalShardingAttrName()),
          cast<RankedTensorType>(type.getResult(o)).getRank()));
  }
  for (const auto &steps : info.steps) {
    std::vector<rt::PipelineStep> &mine = program.steps.emplace_back();
    for (const auto &[step, name] : steps)
      mine.push_back({rt::PipelineStep::Kind(step.kind), step.microBatch,
                      step.chunk, step.peer, name});
  }
  return program;
}
