//===- Pipeline.cpp - Pipeline stages executed from a schedule ------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Pipeline.h"

#include "weft/runtime/CpuKernels.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

using namespace weft::rt;

size_t PipelineProgram::numInputs() const {
  int count = 0;
  for (const PipelineStage &stage : virtualStages)
    for (int input : stage.modelInput)
      count = std::max(count, input + 1);
  return size_t(count);
}

size_t PipelineProgram::numOutputs() const {
  int count = 0;
  for (const PipelineStage &stage : virtualStages)
    for (int output : stage.modelOutput)
      count = std::max(count, output + 1);
  return size_t(count);
}

/// Values a stage receives or sends.
static int countOf(const std::vector<int> &indices) {
  return int(std::count(indices.begin(), indices.end(), -1));
}

absl::Status weft::rt::checkPipelineProgram(const PipelineProgram &program,
                                            size_t inputs) {
  const int p = program.stages, v = program.chunks;
  if (p < 1 || v < 1 || program.microBatches < 1)
    return absl::InvalidArgumentError(
        "a pipeline needs stages, chunks and micro-batches of at least 1");
  if (program.mesh.axes.empty() || program.mesh.axes.front() != "pp" ||
      program.mesh.shape.front() != p)
    return absl::InvalidArgumentError(absl::StrCat(
        "a pipelined program's mesh must have its pp axis (", p, ") first"));
  if (program.virtualStages.size() != size_t(p) * v)
    return absl::InvalidArgumentError(
        absl::StrCat("the pipeline has ", program.virtualStages.size(),
                     " stage functions, not stages x chunks = ", p * v));
  if (program.steps.size() != size_t(p))
    return absl::InvalidArgumentError(
        absl::StrCat("the schedule lists the steps of ", program.steps.size(),
                     " pipeline ranks, not ", p));
  for (size_t k = 0; k < program.virtualStages.size(); ++k) {
    const PipelineStage &stage = program.virtualStages[k];
    if (!stage.function)
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", k, " has no function"));
    if (stage.argLayouts.size() != stage.modelInput.size() ||
        stage.resultLayouts.size() != stage.modelOutput.size())
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", k,
                       " has a layout missing for an argument or "
                       "result"));
    for (int input : stage.modelInput)
      if (input >= int64_t(inputs))
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", k, " reads model input #", input, ", but ",
                         inputs, " inputs were given"));
    if (k + 1 < program.virtualStages.size() &&
        countOf(stage.modelOutput) !=
            countOf(program.virtualStages[k + 1].modelInput))
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", k, " sends ", countOf(stage.modelOutput),
                       " values but stage ", k + 1, " receives ",
                       countOf(program.virtualStages[k + 1].modelInput)));
  }
  for (size_t r = 0; r < program.steps.size(); ++r)
    for (const PipelineStep &step : program.steps[r]) {
      bool transfer =
          step.kind == PipelineStep::Send || step.kind == PipelineStep::Recv;
      if (step.chunk < 0 || step.chunk >= v || step.microBatch < 0 ||
          step.microBatch >= program.microBatches ||
          (transfer && (step.peer < 0 || step.peer >= p)))
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline rank ", r, "'s step ", step.name,
                         " names a chunk, micro-batch or peer the pipeline "
                         "does not have"));
    }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<HostTensor>>>
weft::rt::splitMicroBatches(const std::vector<HostTensor> &inputs, int m) {
  std::vector<std::vector<HostTensor>> micro(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostTensor &input = inputs[i];
    if (m == 1 || input.rank() == 0) {
      micro[i].assign(size_t(m), input);
      continue;
    }
    if (input.shape[0] % m)
      return absl::InvalidArgumentError(
          absl::StrCat("input #", i, "'s batch (", input.shape[0],
                       ") does not divide into m=", m, " micro-batches"));
    for (int b = 0; b < m; ++b)
      micro[i].push_back(sliceForRank(input, 0, b, m));
  }
  return micro;
}

void weft::rt::accumulateInto(HostTensor &into, const HostTensor &add) {
  if (into.shape != add.shape || !into.isFloat() || !add.isFloat())
    throw std::runtime_error("a gradient is not a float tensor of one shape "
                             "in every micro-batch");
  for (size_t i = 0; i < into.floats.size(); ++i)
    into.floats[i] += add.floats[i];
}

/// Values a stage sends back as gradients.
static int gradientsSentBy(const PipelineStage &stage) {
  int count = 0;
  for (const PipelineRef &ref : stage.backward.results)
    count += ref.kind == PipelineRef::GradientSent;
  return count;
}

std::vector<HostTensor>
weft::rt::runPipelineRank(RankContext &ctx, const PipelineProgram &program,
                          const std::vector<std::vector<HostTensor>> &micro,
                          const StepObserver *observer,
                          std::chrono::steady_clock::time_point started,
                          int64_t *heldGradientBytes, int64_t *peakSavedBytes) {
  if (program.rankSetup && !ctx.backend)
    ctx.backend = program.rankSetup(ctx);
  const int p = program.stages;
  const int perStage = int(program.mesh.size()) / p;
  const int s = ctx.rank / perStage, inner = ctx.rank % perStage;
  auto global = [&](int stage) { return stage * perStage + inner; };
  auto micros = [&] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - started)
        .count();
  };
  auto where = [&](const PipelineStep &step) {
    return absl::StrCat("pipeline stage ", step.chunk * p + s, ", step ",
                        step.name, ": ");
  };
  // What a rank holds for one (micro-batch, virtual stage) between steps.
  struct Held {
    std::vector<HostTensor> received, cotangents, toSend, gradientsToSend;
    std::map<int, HostTensor> saved;
    bool computed = false, backwardDone = false;
    /// Its last backward or weight-gradient step has run.
    bool finished = false;
  };
  std::map<std::pair<int, int>, Held> held;
  std::map<std::pair<int, int>, HostTensor> results; // (output, mb)
  std::map<int, HostTensor> gradients;               // summed over mbs
  // Partial gradients (summed over mbs, reduced once at the end), by
  // (virtual stage, weight step?, result position).
  std::map<std::tuple<int, bool, int>, HostTensor> partials;
  // The most bytes of partial gradients held at once.
  int64_t peakPartials = 0;
  bool weightSteps = false;
  for (const PipelineStep &step : program.steps[size_t(s)])
    weightSteps |= step.kind == PipelineStep::WeightGrad;
  // The step's micro-batch dates what gathers held over a block keep
  // (heldAllGather); they are freed when the step ends.
  ++ctx.pipelineSteps;
  struct HeldReset {
    RankContext &ctx;
    ~HeldReset() {
      ctx.microBatch = -1;
      ctx.held.clear();
      if (ctx.backend)
        ctx.backend->endPipelinedStep();
    }
  } heldReset{ctx};
  // A step's function on `args`, its failures and a wrong result count
  // named with the step.
  auto call = [&](const PipelineStep &step, const RankFunction &function,
                  const std::vector<HostTensor> &args, size_t results) {
    std::vector<HostTensor> out;
    ctx.microBatch = step.microBatch;
    try {
      out = function(ctx, args);
    } catch (const std::exception &e) {
      throw std::runtime_error(where(step) + e.what());
    }
    if (out.size() != results)
      throw std::runtime_error(where(step) +
                               absl::StrCat("the step returned ", out.size(),
                                            " values, not ", results));
    return out;
  };
  // `into` += `add`, or `add` copied (owned) where `into` has nothing.
  auto sumInto = [](auto &map, const auto &key, const HostTensor &add) {
    auto found = map.find(key);
    if (found != map.end()) {
      accumulateInto(found->second, add);
      return;
    }
    HostTensor copy(add.dtype, add.shape);
    std::copy(add.floats.begin(), add.floats.end(), copy.floats.begin());
    map.emplace(key, std::move(copy));
  };
  // The virtual stage a step runs.
  auto stageOf = [&](const PipelineStep &step) { return step.chunk * p + s; };
  // The bytes of the partial gradients held.
  auto partialBytes = [&] {
    int64_t bytes = 0;
    for (const auto &[key, sum] : partials)
      bytes += storageBytes(sum);
    return bytes;
  };
  // A backward or weight-gradient step's function on one micro-batch.
  auto runStepFunction = [&](const PipelineStep &step,
                             const PipelineStepFunction &fn, Held &mine,
                             bool weightStep) {
    if (!fn.function)
      return;
    std::vector<HostTensor> args;
    for (size_t a = 0; a < fn.args.size(); ++a) {
      const PipelineRef &ref = fn.args[a];
      switch (ref.kind) {
      case PipelineRef::Input:
        args.push_back(
            scatterBlock(micro[size_t(ref.index)][size_t(step.microBatch)],
                         fn.argLayouts[a], ctx.mesh, ctx.rank));
        break;
      case PipelineRef::Cotangent:
        if (size_t(ref.index) >= mine.cotangents.size())
          throw std::runtime_error(where(step) +
                                   "the schedule runs a backward before "
                                   "receiving its gradients");
        args.push_back(mine.cotangents[size_t(ref.index)]);
        break;
      case PipelineRef::Saved: {
        auto found = mine.saved.find(ref.index);
        if (found == mine.saved.end())
          throw std::runtime_error(
              where(step) + absl::StrCat("the value kept in slot ", ref.index,
                                         " was not computed before this step"));
        args.push_back(found->second);
        break;
      }
      default:
        throw std::runtime_error(where(step) + "a malformed argument");
      }
    }
    std::vector<HostTensor> out =
        call(step, fn.function, args, fn.results.size());
    // ZeRO-2 and 3: this micro-batch's partial gradients reduced now (every
    // rank of the stage runs its steps in one order), their blocks summed;
    // over blocks of micro-batches (ZeroPP), summed over the block and
    // reduced after its last.
    if (fn.everyMicroBatch && !fn.partial.empty()) {
      if (!fn.reduce)
        throw std::runtime_error(where(step) +
                                 "partial gradients but no function that "
                                 "reduces them");
      std::vector<HostTensor> in;
      const int block = std::max(1, fn.reduceBlock);
      if (block == 1) {
        for (int r : fn.partial)
          in.push_back(std::move(out[size_t(r)]));
      } else {
        for (int r : fn.partial)
          sumInto(partials, std::make_tuple(stageOf(step), weightStep, r),
                  out[size_t(r)]);
        peakPartials = std::max(peakPartials, partialBytes());
        const bool last = step.microBatch % block == block - 1 ||
                          step.microBatch == program.microBatches - 1;
        if (last)
          for (int r : fn.partial) {
            auto found =
                partials.find(std::make_tuple(stageOf(step), weightStep, r));
            in.push_back(std::move(found->second));
            partials.erase(found);
          }
      }
      if (!in.empty()) {
        std::vector<HostTensor> reduced =
            call(step, fn.reduce, in, fn.partial.size());
        for (size_t i = 0; i < reduced.size(); ++i)
          sumInto(gradients, fn.results[size_t(fn.partial[i])].index,
                  reduced[i]);
      }
    }
    for (size_t r = 0; r < out.size(); ++r) {
      const PipelineRef &ref = fn.results[r];
      switch (ref.kind) {
      case PipelineRef::Saved:
        mine.saved[ref.index] = std::move(out[r]);
        break;
      case PipelineRef::GradientSent:
        if (mine.gradientsToSend.size() <= size_t(ref.index))
          mine.gradientsToSend.resize(size_t(ref.index) + 1);
        mine.gradientsToSend[size_t(ref.index)] = std::move(out[r]);
        break;
      case PipelineRef::Gradient:
        if (std::find(fn.partial.begin(), fn.partial.end(), int(r)) !=
            fn.partial.end()) {
          if (!fn.everyMicroBatch)
            sumInto(partials,
                    std::make_tuple(stageOf(step), weightStep, int(r)), out[r]);
        } else
          sumInto(gradients, ref.index, out[r]);
        break;
      default:
        throw std::runtime_error(where(step) + "a malformed result");
      }
    }
    // (Once per step: the sums only grow until the step's reduction.)
    if (!fn.everyMicroBatch && !fn.partial.empty())
      peakPartials = std::max(peakPartials, partialBytes());
  };
  // The bytes of the model inputs virtual stage k's backward and
  // weight-gradient steps read, per micro-batch (the blocks of its first);
  // past its B step, those its W step reads.
  std::map<std::pair<int, bool>, int64_t> inputsKept;
  auto inputsKeptBytes = [&](int k, bool pastBackward) {
    auto [at, inserted] = inputsKept.try_emplace({k, pastBackward}, 0);
    if (!inserted)
      return at->second;
    const PipelineStage &stage = program.virtualStages[size_t(k)];
    std::set<int> read;
    for (const PipelineStepFunction *fn : {&stage.backward, &stage.weight}) {
      // Past B, only what W reads is still kept.
      if (!fn->function || (pastBackward && fn == &stage.backward))
        continue;
      for (size_t a = 0; a < fn->args.size(); ++a)
        if (fn->args[a].kind == PipelineRef::Input &&
            read.insert(fn->args[a].index).second)
          at->second +=
              tensorBytes(scatterBlock(micro[size_t(fn->args[a].index)][0],
                                       fn->argLayouts[a], ctx.mesh, ctx.rank));
    }
    return at->second;
  };
  if (peakSavedBytes)
    *peakSavedBytes = 0;
  for (const PipelineStep &step : program.steps[size_t(s)]) {
    double start = micros();
    const int k = step.chunk * p + s;
    const PipelineStage &stage = program.virtualStages[size_t(k)];
    Held &mine = held[{step.microBatch, k}];
    switch (step.kind) {
    case PipelineStep::Recv: {
      // Activations from the previous virtual stage, or gradients from the
      // next.
      std::vector<HostTensor> &values =
          step.gradient ? mine.cotangents : mine.received;
      int n = step.gradient
                  ? (size_t(k + 1) < program.virtualStages.size()
                         ? gradientsSentBy(program.virtualStages[size_t(k + 1)])
                         : 0)
                  : countOf(stage.modelInput);
      for (int i = 0; i < n; ++i) {
        absl::StatusOr<HostTensor> value =
            ctx.comm->recv(ctx.rank, global(step.peer));
        if (!value.ok())
          throw std::runtime_error(where(step) +
                                   std::string(value.status().message()));
        values.push_back(std::move(*value));
      }
      break;
    }
    case PipelineStep::Send: {
      bool ready = step.gradient ? mine.backwardDone : mine.computed;
      if (!ready)
        throw std::runtime_error(where(step) +
                                 "the schedule sends a micro-batch before "
                                 "computing it");
      std::vector<HostTensor> &values =
          step.gradient ? mine.gradientsToSend : mine.toSend;
      for (const HostTensor &value : values)
        if (absl::Status sent = ctx.comm->send(ctx.rank, global(step.peer),
                                               value, program.codec);
            !sent.ok())
          throw std::runtime_error(where(step) + std::string(sent.message()));
      values.clear();
      break;
    }
    case PipelineStep::Forward: {
      std::vector<HostTensor> args;
      size_t next = 0;
      for (size_t a = 0; a < stage.modelInput.size(); ++a) {
        int input = stage.modelInput[a];
        if (input >= 0) {
          args.push_back(
              scatterBlock(micro[size_t(input)][size_t(step.microBatch)],
                           stage.argLayouts[a], ctx.mesh, ctx.rank));
          continue;
        }
        if (next >= mine.received.size())
          throw std::runtime_error(where(step) +
                                   "the schedule runs a forward before "
                                   "receiving its inputs");
        args.push_back(std::move(mine.received[next++]));
      }
      mine.received.clear();
      std::vector<HostTensor> out =
          call(step, stage.function, args, stage.modelOutput.size());
      for (size_t r = 0; r < out.size(); ++r) {
        int to = stage.modelOutput[r];
        if (to == -1)
          mine.toSend.push_back(std::move(out[r]));
        else if (to <= -2)
          mine.saved[-2 - to] = std::move(out[r]);
        else
          results[{to, step.microBatch}] = std::move(out[r]);
      }
      mine.computed = true;
      break;
    }
    case PipelineStep::Backward:
    case PipelineStep::WeightGrad: {
      if (!program.training())
        throw std::runtime_error(where(step) +
                                 "the stages are forward programs, which "
                                 "have no backward or weight-gradient step");
      if (!mine.computed)
        throw std::runtime_error(where(step) +
                                 "the schedule runs a backward before the "
                                 "forward of its micro-batch");
      bool backward = step.kind == PipelineStep::Backward;
      runStepFunction(step, backward ? stage.backward : stage.weight, mine,
                      !backward);
      if (backward)
        mine.backwardDone = true;
      // Past B, a micro-batch keeps for its W step only what W reads: the
      // kept values (the linears' inputs, what B computed for it) and the
      // received gradients W reads.
      if (backward && weightSteps) {
        std::set<int> savedRead, cotangentsRead;
        for (const PipelineRef &ref : stage.weight.args)
          if (ref.kind == PipelineRef::Saved)
            savedRead.insert(ref.index);
          else if (ref.kind == PipelineRef::Cotangent)
            cotangentsRead.insert(ref.index);
        for (auto it = mine.saved.begin(); it != mine.saved.end();)
          it =
              savedRead.count(it->first) ? std::next(it) : mine.saved.erase(it);
        for (size_t c = 0; c < mine.cotangents.size(); ++c)
          if (!cotangentsRead.count(int(c)))
            mine.cotangents[c] = HostTensor();
      }
      // What the micro-batch kept is freed after its last step.
      if (!backward || !weightSteps) {
        mine.saved.clear();
        mine.cotangents.clear();
        mine.finished = true;
      }
      break;
    }
    }
    if (peakSavedBytes) {
      // Per micro-batch and chunk in flight (its forward run, its last
      // backward step not yet): its kept values, and the blocks of the
      // model inputs its backward steps read (token ids, labels), held for
      // them as a framework keeps the tensors its autograd graph saved.
      int64_t kept = 0;
      for (const auto &[key, entry] : held) {
        if (!entry.computed || entry.finished)
          continue;
        for (const auto &[slot, value] : entry.saved)
          kept += tensorBytes(value);
        const bool pastBackward = weightSteps && entry.backwardDone;
        if (pastBackward)
          for (const HostTensor &gradient : entry.cotangents)
            kept += tensorBytes(gradient);
        kept += inputsKeptBytes(key.second, pastBackward);
      }
      *peakSavedBytes = std::max(*peakSavedBytes, kept);
    }
    if (observer)
      (*observer)(ctx.rank, step, start, micros());
  }
  if (heldGradientBytes) {
    *heldGradientBytes = 0;
    for (const auto &[index, sum] : gradients)
      *heldGradientBytes += storageBytes(sum);
    *heldGradientBytes += peakPartials;
  }
  // The partial gradients, reduced once per step (every rank of a stage
  // runs the same reductions, in chunk order).
  for (int c = 0; c < program.chunks; ++c) {
    const int k = c * p + s;
    const PipelineStage &stage = program.virtualStages[size_t(k)];
    for (bool weightStep : {false, true}) {
      const PipelineStepFunction &fn =
          weightStep ? stage.weight : stage.backward;
      if (fn.partial.empty() || fn.everyMicroBatch)
        continue;
      PipelineStep reduction;
      reduction.kind =
          weightStep ? PipelineStep::WeightGrad : PipelineStep::Backward;
      reduction.chunk = c;
      reduction.name = "the gradient reduction";
      if (!fn.reduce)
        throw std::runtime_error(where(reduction) +
                                 "partial gradients but no function that "
                                 "reduces them");
      std::vector<HostTensor> args;
      for (int r : fn.partial) {
        auto found = partials.find(std::make_tuple(k, weightStep, r));
        if (found == partials.end())
          throw std::runtime_error(where(reduction) +
                                   "a partial gradient no step computed");
        args.push_back(std::move(found->second));
      }
      std::vector<HostTensor> reduced =
          call(reduction, fn.reduce, args, fn.partial.size());
      for (size_t i = 0; i < reduced.size(); ++i)
        sumInto(gradients, fn.results[size_t(fn.partial[i])].index, reduced[i]);
    }
  }
  std::vector<HostTensor> mine;
  for (auto &[key, value] : results)
    mine.push_back(std::move(value));
  for (auto &[index, value] : gradients)
    mine.push_back(std::move(value));
  return mine;
}

absl::StatusOr<std::vector<std::vector<HostTensor>>>
weft::rt::assemblePipelineMicroOutputs(
    const PipelineProgram &program,
    const std::vector<std::vector<HostTensor>> &perRank) {
  const int p = program.stages, m = program.microBatches;
  const int n = int(program.mesh.size()), perStage = n / p;
  const auto &stages = program.virtualStages;
  std::vector<std::vector<HostTensor>> assembled;
  for (int o = 0, outputs = int(program.numOutputs()); o < outputs; ++o) {
    int owner = -1;
    Layout layout;
    for (size_t k = 0; k < stages.size(); ++k)
      for (size_t r = 0; r < stages[k].modelOutput.size(); ++r)
        if (stages[k].modelOutput[r] == o) {
          owner = int(k);
          layout = stages[k].resultLayouts[r];
        }
    if (owner < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("no stage returns model output #", o));
    // A rank's results come in (output, micro-batch) order over the outputs
    // its stages hold.
    int position = 0;
    for (size_t k = 0; k < stages.size(); ++k)
      if (int(k) % p == owner % p)
        for (int output : stages[k].modelOutput)
          if (output >= 0 && output < o)
            position += m;
    std::vector<HostTensor> &micro = assembled.emplace_back();
    for (int b = 0; b < m; ++b) {
      std::vector<HostTensor> blocks;
      for (int rank = 0; rank < n; ++rank) {
        const std::vector<HostTensor> &theirs =
            perRank[size_t((owner % p) * perStage + rank % perStage)];
        if (size_t(position + b) >= theirs.size())
          return absl::InternalError(
              absl::StrCat("the ranks of stage ", owner,
                           " did not return model output #", o));
        blocks.push_back(theirs[size_t(position + b)]);
      }
      micro.push_back(gatherBlocks(blocks, layout, program.mesh));
    }
  }
  return assembled;
}

absl::StatusOr<std::vector<HostTensor>> weft::rt::assemblePipelineOutputs(
    const PipelineProgram &program,
    const std::vector<std::vector<HostTensor>> &perRank) {
  auto micro = assemblePipelineMicroOutputs(program, perRank);
  if (!micro.ok())
    return micro.status();
  std::vector<HostTensor> assembled;
  for (size_t o = 0; o < micro->size(); ++o) {
    std::vector<HostTensor> &blocks = (*micro)[o];
    if (blocks.size() == 1) {
      assembled.push_back(std::move(blocks.front()));
      continue;
    }
    if (blocks.front().rank() == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "model output #", o,
          " is a scalar, which micro-batches cannot be joined into (a mean "
          "loss?); return it per token or use m=1"));
    std::vector<const HostTensor *> parts;
    for (const HostTensor &t : blocks)
      parts.push_back(&t);
    assembled.push_back(concat(parts, 0));
  }
  return assembled;
}

std::vector<int> weft::rt::pipelineRankGradients(const PipelineProgram &program,
                                                 int rank) {
  std::set<int> indices;
  for (size_t k = 0; k < program.virtualStages.size(); ++k) {
    if (int(k) % program.stages != rank)
      continue;
    const PipelineStage &stage = program.virtualStages[k];
    for (const PipelineStepFunction *fn : {&stage.backward, &stage.weight})
      for (const PipelineRef &ref : fn->results)
        if (ref.kind == PipelineRef::Gradient)
          indices.insert(ref.index);
  }
  return {indices.begin(), indices.end()};
}

/// Runs pipeline rank `s`'s optimizer step on this rank after its steps
/// (`mine`: its runPipelineRank results, to which the step's results are
/// appended).
static void runOptimizerOnRank(RankContext &ctx, const PipelineProgram &program,
                               const PipelineOptimizerStep &optimizer,
                               std::vector<HostTensor> &mine,
                               PipelineHeld &held) {
  const int s = ctx.rank / int(ctx.mesh.size() / size_t(program.stages));
  std::vector<int> gradients = pipelineRankGradients(program, s);
  const size_t first = mine.size() - gradients.size();
  std::vector<HostTensor> args;
  for (size_t i = 0; i < optimizer.argLayouts.size(); ++i) {
    int g = optimizer.gradientOf[i];
    if (g < 0) {
      args.push_back(scatterBlock(optimizer.inputs[i], optimizer.argLayouts[i],
                                  ctx.mesh, ctx.rank));
      int kind = i < optimizer.held.size() ? optimizer.held[i] : 0;
      if (kind)
        (kind == 1 ? held.parameters : held.optimizer) +=
            storageBytes(args.back());
      continue;
    }
    auto at = std::lower_bound(gradients.begin(), gradients.end(), g);
    if (at == gradients.end() || *at != g)
      throw std::runtime_error(absl::StrCat(
          "pipeline rank ", s, "'s optimizer step takes the gradient of ",
          program.gradientNames[size_t(g)],
          ", which its stages do not return"));
    args.push_back(mine[first + size_t(at - gradients.begin())]);
  }
  std::vector<HostTensor> out = optimizer.function(ctx, args);
  if (out.size() != optimizer.resultLayouts.size())
    throw std::runtime_error(absl::StrCat(
        "pipeline rank ", s, "'s optimizer step returned ", out.size(),
        " results, not ", optimizer.resultLayouts.size()));
  for (HostTensor &result : out)
    mine.push_back(std::move(result));
}

/// Every rank's runPipelineRank results, each rank a thread; with
/// `optimizers`, each followed by its pipeline rank's optimizer step's.
static absl::StatusOr<std::vector<std::vector<HostTensor>>> runPipelineRanks(
    const PipelineProgram &program, const std::string &weightsDir,
    const std::vector<HostTensor> &inputs, std::vector<int64_t> *bytesSent,
    std::chrono::milliseconds timeout, const StepObserver *observer,
    const std::vector<PipelineOptimizerStep> *optimizers = nullptr,
    std::vector<PipelineHeld> *held = nullptr) {
  if (optimizers && int(optimizers->size()) != program.stages)
    return absl::InvalidArgumentError(
        absl::StrCat(optimizers->size(), " optimizer steps for ",
                     program.stages, " pipeline ranks"));
  if (absl::Status status = checkPipelineProgram(program, inputs.size());
      !status.ok())
    return status;
  auto micro = splitMicroBatches(inputs, program.microBatches);
  if (!micro.ok())
    return micro.status();
  auto started = std::chrono::steady_clock::now();
  // runRanks may leave a stuck rank behind when another fails: what the
  // ranks read is theirs to keep, not this frame's.
  struct Shared {
    PipelineProgram program;
    std::vector<std::vector<HostTensor>> micro;
    std::optional<StepObserver> observer;
    std::vector<PipelineOptimizerStep> optimizers;
    std::vector<PipelineHeld> held;
  };
  auto shared = std::make_shared<Shared>(
      Shared{program, std::move(*micro), std::nullopt, {}, {}});
  shared->held.resize(program.mesh.size());
  if (observer)
    shared->observer = *observer;
  if (optimizers)
    shared->optimizers = *optimizers;
  RankBody body = [shared, started](RankContext &ctx) {
    // (Each rank writes its own entry.)
    PipelineHeld &mineHeld = shared->held[size_t(ctx.rank)];
    std::vector<HostTensor> mine =
        runPipelineRank(ctx, shared->program, shared->micro,
                        shared->observer ? &*shared->observer : nullptr,
                        started, &mineHeld.gradients, &mineHeld.activations);
    if (!shared->optimizers.empty()) {
      const int s =
          ctx.rank / int(ctx.mesh.size() / size_t(shared->program.stages));
      runOptimizerOnRank(ctx, shared->program, shared->optimizers[size_t(s)],
                         mine, mineHeld);
    }
    return mine;
  };
  auto ran = runRanks(body, program.mesh, weightsDir, bytesSent, timeout);
  if (ran.ok() && held)
    *held = shared->held;
  return ran;
}

absl::StatusOr<std::vector<HostTensor>> weft::rt::runPipelineOnMesh(
    const PipelineProgram &program, const std::string &weightsDir,
    const std::vector<HostTensor> &inputs, std::vector<int64_t> *bytesSent,
    std::chrono::milliseconds timeout, const StepObserver *observer) {
  auto ran = runPipelineRanks(program, weightsDir, inputs, bytesSent, timeout,
                              observer);
  if (!ran.ok())
    return ran.status();
  return assemblePipelineOutputs(program, *ran);
}

absl::StatusOr<PipelineTrainingResult> weft::rt::runPipelineTrainingOnMesh(
    const PipelineProgram &program, const std::string &weightsDir,
    const std::vector<HostTensor> &inputs, std::vector<int64_t> *bytesSent,
    std::chrono::milliseconds timeout, const StepObserver *observer,
    const std::vector<PipelineOptimizerStep> &optimizers) {
  PipelineTrainingResult result;
  auto ran = runPipelineRanks(program, weightsDir, inputs, bytesSent, timeout,
                              observer, &optimizers, &result.held);
  if (!ran.ok())
    return ran.status();
  auto outputs = assemblePipelineMicroOutputs(program, *ran);
  if (!outputs.ok())
    return outputs.status();
  result.outputs = std::move(*outputs);
  // Each pipeline rank's optimizer results, from the blocks of its ranks
  // (its pipeline coordinate stands for every other's in the gather).
  const int p = program.stages;
  const int n = int(program.mesh.size()), perStage = n / p;
  for (int s = 0; s < p; ++s) {
    const PipelineOptimizerStep &optimizer = optimizers[size_t(s)];
    const size_t count = optimizer.resultLayouts.size();
    std::vector<HostTensor> &whole = result.updated.emplace_back();
    for (size_t r = 0; r < count; ++r) {
      std::vector<HostTensor> blocks;
      for (int rank = 0; rank < n; ++rank) {
        const std::vector<HostTensor> &theirs =
            (*ran)[size_t(s * perStage + rank % perStage)];
        if (theirs.size() < count)
          return absl::InternalError(
              absl::StrCat("the ranks of pipeline rank ", s,
                           " did not return their optimizer step's results"));
        blocks.push_back(theirs[theirs.size() - count + r]);
      }
      whole.push_back(
          gatherBlocks(blocks, optimizer.resultLayouts[r], program.mesh));
    }
  }
  return result;
}
