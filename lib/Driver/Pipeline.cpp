//===- Pipeline.cpp - Pipeline stages run on simulated devices ------------===//
//
// Part of the Weft project.
//
// Runs a module cut into pipeline stages (-weft-split-stages) and partitioned
// over a mesh whose first axis is `pp`: every rank executes its pipeline
// rank's step list from the planner's schedule (planner/PipelineSchedule.h),
// the same list the cost model simulates, interpreting a stage's function
// for each forward step and passing the values between stages with
// point-to-point sends and receives.
//
//===----------------------------------------------------------------------===//

#include "weft/Driver/Driver.h"

#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Exec/Interpreter.h"
#include "weft/Planner/PipelineSchedule.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/Program.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace mlir;
using namespace weft;
using rt::HostTensor;

namespace {
/// One virtual stage's function and how its arguments and results connect.
struct Stage {
  func::FuncOp func;
  /// Per argument: the model input it is (>= 0) or -1 for a received value.
  std::vector<int> modelInput;
  /// Per result: the model output it is (>= 0) or -1 for a sent value.
  std::vector<int> modelOutput;
  std::vector<rt::Layout> argLayouts, resultLayouts;
  int received = 0, sent = 0;
};
} // namespace

static int64_t intEntry(DictionaryAttr dict, StringRef key) {
  auto value = dict ? dict.getAs<IntegerAttr>(key) : IntegerAttr();
  return value ? value.getInt() : -1;
}

std::string driver::stepName(const planner::PipelineStep &step, int chunks) {
  std::string name;
  switch (step.kind) {
  case planner::PipelineStep::Forward:
    name = "F";
    break;
  case planner::PipelineStep::Backward:
    name = "B";
    break;
  case planner::PipelineStep::WeightGrad:
    name = "W";
    break;
  case planner::PipelineStep::Send:
    name = std::string(">") + (step.gradient ? "g" : "a") +
           std::to_string(step.peer) + ":";
    break;
  case planner::PipelineStep::Recv:
    name = std::string("<") + (step.gradient ? "g" : "a") +
           std::to_string(step.peer) + ":";
    break;
  }
  name += std::to_string(step.microBatch);
  if (chunks > 1)
    name += "." + std::to_string(step.chunk);
  return name;
}

llvm::Expected<planner::PipelineSchedule>
driver::forwardSchedule(const plan::Plan &plan) {
  const int p = std::max(1, plan.pp()), v = std::max(1, plan.virtual_stages()),
            m = std::max(1, plan.num_micro_batches());
  if (plan.schedule() == plan::SCHEDULE_INTERLEAVED && m % p)
    return llvm::createStringError(
        "the interleaved schedule runs micro-batches in groups of pp: m=" +
        llvm::Twine(m) + " is not a multiple of pp=" + llvm::Twine(p));
  planner::PipelineSchedule full =
      planner::buildPipelineSchedule(plan.schedule(), p, v, m);
  std::string problem = planner::checkPipelineSchedule(full);
  if (!problem.empty())
    return llvm::createStringError("the " +
                                   llvm::Twine(scheduleName(plan.schedule())) +
                                   " schedule cannot run: " + problem);
  planner::PipelineSchedule forward = full;
  for (std::vector<planner::PipelineStep> &steps : forward.ranks)
    llvm::erase_if(steps, [](const planner::PipelineStep &step) {
      return step.kind == planner::PipelineStep::Backward ||
             step.kind == planner::PipelineStep::WeightGrad || step.gradient;
    });
  return forward;
}

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
  auto pipeline =
      module->getAttrOfType<DictionaryAttr>(WeftDialect::getPipelineAttrName());
  const int p = int(intEntry(pipeline, "stages")),
            v = int(intEntry(pipeline, "chunks"));
  if (p < 2 || v < 1)
    return llvm::createStringError("the module is not split into pipeline "
                                   "stages (run -weft-split-stages)");
  if (p != plan.pp() || v != std::max(1, plan.virtual_stages()))
    return llvm::createStringError(
        "the module's pipeline (" + llvm::Twine(p) + " stages x " +
        llvm::Twine(v) +
        " chunks) is not the plan's (pp=" + llvm::Twine(plan.pp()) +
        ", v=" + llvm::Twine(std::max(1, plan.virtual_stages())) + ")");
  const int m = std::max(1, plan.num_micro_batches());
  std::optional<MeshInfo> meshInfo = getMeshInfo(module);
  if (!meshInfo || meshInfo->axes.empty() || meshInfo->axes.front() != "pp" ||
      meshInfo->sizes.front() != p)
    return llvm::createStringError(
        "a pipelined module's mesh must have its pp axis first");
  rt::Mesh mesh;
  mesh.axes.assign(meshInfo->axes.begin(), meshInfo->axes.end());
  mesh.shape.assign(meshInfo->sizes.begin(), meshInfo->sizes.end());
  const int n = int(mesh.size()), perStage = n / p;
  if (expectedDevices > 0 && expectedDevices != n)
    return llvm::createStringError("the plan runs on " + llvm::Twine(n) +
                                   " devices, but --devices is " +
                                   llvm::Twine(expectedDevices));

  // The stages, by virtual stage.
  std::vector<Stage> stages(size_t(p) * v);
  for (auto func : module.getOps<func::FuncOp>()) {
    auto at = func->getAttrOfType<DictionaryAttr>(
        WeftDialect::getPipelineStageAttrName());
    int64_t k = intEntry(at, "stage");
    if (!at || k < 0 || k >= int64_t(stages.size()))
      continue;
    Stage &stage = stages[size_t(k)];
    stage.func = func;
    if (func->hasAttr(WeftDialect::getLoadBalancedAttrName()))
      mesh.zigzagAxis = "cp";
    FunctionType type = func.getFunctionType();
    for (unsigned i = 0; i < type.getNumInputs(); ++i) {
      auto input = func.getArgAttrOfType<IntegerAttr>(
          i, WeftDialect::getModelInputAttrName());
      stage.modelInput.push_back(input ? int(input.getInt()) : -1);
      stage.received += !input;
      if (input && input.getInt() >= int64_t(inputs.size()))
        return llvm::createStringError(
            "stage " + llvm::Twine(k) + " reads model input #" +
            llvm::Twine(input.getInt()) + ", but " +
            llvm::Twine(inputs.size()) + " inputs were given");
      stage.argLayouts.push_back(driver::layoutOf(
          func.getArgAttr(i, WeftDialect::getLocalShardingAttrName()),
          cast<RankedTensorType>(type.getInput(i)).getRank()));
    }
    for (unsigned o = 0; o < type.getNumResults(); ++o) {
      auto output = func.getResultAttrOfType<IntegerAttr>(
          o, WeftDialect::getModelOutputAttrName());
      stage.modelOutput.push_back(output ? int(output.getInt()) : -1);
      stage.sent += !output;
      stage.resultLayouts.push_back(driver::layoutOf(
          func.getResultAttr(o, WeftDialect::getLocalShardingAttrName()),
          cast<RankedTensorType>(type.getResult(o)).getRank()));
    }
  }
  int outputs = 0;
  for (size_t k = 0; k < stages.size(); ++k) {
    if (!stages[k].func)
      return llvm::createStringError("the module has no function for "
                                     "pipeline stage " +
                                     llvm::Twine(k));
    if (k + 1 < stages.size() && stages[k].sent != stages[k + 1].received)
      return llvm::createStringError(
          "stage " + llvm::Twine(k) + " sends " + llvm::Twine(stages[k].sent) +
          " values but stage " + llvm::Twine(k + 1) + " receives " +
          llvm::Twine(stages[k + 1].received));
    for (int output : stages[k].modelOutput)
      outputs = std::max(outputs, output + 1);
  }

  // Each model input as m micro-batches along its first dimension.
  std::vector<std::vector<HostTensor>> microInputs(inputs.size());
  for (auto [i, input] : llvm::enumerate(inputs)) {
    if (m == 1 || input.rank() == 0) {
      microInputs[i].assign(size_t(m), input);
      continue;
    }
    if (input.shape[0] % m)
      return llvm::createStringError(
          "input #" + llvm::Twine(i) + "'s batch (" +
          llvm::Twine(input.shape[0]) +
          ") does not divide into m=" + llvm::Twine(m) + " micro-batches");
    for (int b = 0; b < m; ++b)
      microInputs[i].push_back(rt::sliceForRank(input, 0, b, m));
  }

  llvm::Expected<planner::PipelineSchedule> schedule = forwardSchedule(plan);
  if (!schedule)
    return schedule.takeError();
  auto started = std::chrono::steady_clock::now();
  std::mutex traceMutex;
  auto micros = [&] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - started)
        .count();
  };

  // What a rank returns: for each model output its stage holds, the blocks
  // of the m micro-batches, in output order.
  rt::RankBody body = [&](rt::RankContext &ctx) {
    const int s = ctx.rank / perStage, inner = ctx.rank % perStage;
    auto global = [&](int stage) { return stage * perStage + inner; };
    InterpreterOptions options = base;
    options.rank = ctx.rank;
    options.communicator = ctx.comm;
    // Values received for, and to be sent by, (micro-batch, virtual stage).
    std::map<std::pair<int, int>, std::vector<HostTensor>> received, toSend;
    std::map<std::pair<int, int>, HostTensor> results; // (output, mb)
    for (const planner::PipelineStep &step : schedule->ranks[size_t(s)]) {
      double start = micros();
      const int k = step.chunk * p + s;
      const Stage &stage = stages[size_t(k)];
      switch (step.kind) {
      case planner::PipelineStep::Recv: {
        std::vector<HostTensor> &values = received[{step.microBatch, k}];
        for (int i = 0; i < stage.received; ++i) {
          absl::StatusOr<HostTensor> value =
              ctx.comm->recv(ctx.rank, global(step.peer));
          if (!value.ok())
            throw std::runtime_error("stage " + std::to_string(k) +
                                     ", micro-batch " +
                                     std::to_string(step.microBatch) + ": " +
                                     std::string(value.status().message()));
          values.push_back(std::move(*value));
        }
        break;
      }
      case planner::PipelineStep::Send: {
        auto found = toSend.find({step.microBatch, k});
        if (found == toSend.end())
          throw std::runtime_error("the schedule sends micro-batch " +
                                   std::to_string(step.microBatch) +
                                   " of stage " + std::to_string(k) +
                                   " before computing it");
        for (const HostTensor &value : found->second) {
          absl::Status sent =
              ctx.comm->send(ctx.rank, global(step.peer), value);
          if (!sent.ok())
            throw std::runtime_error(std::string(sent.message()));
        }
        toSend.erase(found);
        break;
      }
      case planner::PipelineStep::Forward: {
        std::vector<HostTensor> args;
        std::vector<HostTensor> &got = received[{step.microBatch, k}];
        size_t next = 0;
        for (auto [a, input] : llvm::enumerate(stage.modelInput)) {
          if (input >= 0) {
            args.push_back(rt::scatterBlock(
                microInputs[size_t(input)][size_t(step.microBatch)],
                stage.argLayouts[a], ctx.mesh, ctx.rank));
            continue;
          }
          if (next >= got.size())
            throw std::runtime_error("stage " + std::to_string(k) +
                                     " runs micro-batch " +
                                     std::to_string(step.microBatch) +
                                     " before receiving its inputs");
          args.push_back(std::move(got[next++]));
        }
        received.erase({step.microBatch, k});
        FailureOr<std::vector<HostTensor>> out =
            interpret(stage.func, args, options);
        if (failed(out))
          throw std::runtime_error("the interpreter failed on stage " +
                                   std::to_string(k) +
                                   " (see the errors reported)");
        std::vector<HostTensor> &sending = toSend[{step.microBatch, k}];
        for (auto [r, value] : llvm::enumerate(*out)) {
          if (stage.modelOutput[r] < 0)
            sending.push_back(std::move(value));
          else
            results[{stage.modelOutput[r], step.microBatch}] = std::move(value);
        }
        break;
      }
      default:
        break;
      }
      if (trace) {
        std::lock_guard<std::mutex> lock(traceMutex);
        trace->push_back(
            {ctx.rank, stepName(step, v),
             step.kind == planner::PipelineStep::Forward ? "compute" : "p2p",
             start, micros()});
      }
    }
    std::vector<HostTensor> mine;
    for (auto &[key, value] : results)
      mine.push_back(std::move(value));
    return mine;
  };
  auto ran =
      rt::runRanks(body, mesh, base.weightsDir, &bytes,
                   std::chrono::milliseconds(int64_t(timeoutSeconds * 1000)));
  if (!ran.ok())
    return llvm::createStringError(std::string(ran.status().message()));

  // Each output from the ranks of the stage that returns it: per
  // micro-batch the blocks gathered, then the micro-batches joined.
  std::vector<HostTensor> assembled;
  for (int o = 0; o < outputs; ++o) {
    int owner = -1;
    rt::Layout layout;
    for (size_t k = 0; k < stages.size(); ++k)
      for (auto [r, output] : llvm::enumerate(stages[k].modelOutput))
        if (output == o) {
          owner = int(k);
          layout = stages[k].resultLayouts[r];
        }
    if (owner < 0)
      return llvm::createStringError("no stage returns model output #" +
                                     llvm::Twine(o));
    // The owner's outputs in its rank's result list come in (output,
    // micro-batch) order.
    int position = 0;
    for (size_t k = 0; k < stages.size(); ++k)
      if (int(k) % p == owner % p)
        for (int output : stages[k].modelOutput)
          if (output >= 0 && output < o)
            position += m;
    std::vector<HostTensor> micro;
    for (int b = 0; b < m; ++b) {
      std::vector<HostTensor> blocks;
      for (int rank = 0; rank < n; ++rank) {
        const std::vector<HostTensor> &theirs =
            (*ran)[size_t((owner % p) * perStage + rank % perStage)];
        if (size_t(position + b) >= theirs.size())
          return llvm::createStringError(
              "the ranks of stage " + llvm::Twine(owner) +
              " did not return model output #" + llvm::Twine(o));
        blocks.push_back(theirs[size_t(position + b)]);
      }
      micro.push_back(rt::gatherBlocks(blocks, layout, mesh));
    }
    if (m == 1) {
      assembled.push_back(std::move(micro.front()));
      continue;
    }
    if (micro.front().rank() == 0)
      return llvm::createStringError(
          "model output #" + llvm::Twine(o) +
          " is a scalar, which micro-batches cannot be joined into (a mean "
          "loss?); return it per token or use m=1");
    std::vector<const HostTensor *> parts;
    for (const HostTensor &t : micro)
      parts.push_back(&t);
    assembled.push_back(rt::concat(parts, 0));
  }
  return assembled;
}
