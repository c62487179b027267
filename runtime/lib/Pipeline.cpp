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
#include <stdexcept>

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

std::vector<HostTensor>
weft::rt::runPipelineRank(RankContext &ctx, const PipelineProgram &program,
                          const std::vector<std::vector<HostTensor>> &micro,
                          const StepObserver *observer,
                          std::chrono::steady_clock::time_point started) {
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
  // Values received for, and to be sent by, (micro-batch, virtual stage).
  std::map<std::pair<int, int>, std::vector<HostTensor>> received, toSend;
  std::map<std::pair<int, int>, HostTensor> results; // (output, mb)
  for (const PipelineStep &step : program.steps[size_t(s)]) {
    double start = micros();
    const int k = step.chunk * p + s;
    const PipelineStage &stage = program.virtualStages[size_t(k)];
    switch (step.kind) {
    case PipelineStep::Recv: {
      std::vector<HostTensor> &values = received[{step.microBatch, k}];
      for (int i = 0, n = countOf(stage.modelInput); i < n; ++i) {
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
      auto found = toSend.find({step.microBatch, k});
      if (found == toSend.end())
        throw std::runtime_error(where(step) +
                                 "the schedule sends a micro-batch before "
                                 "computing it");
      for (const HostTensor &value : found->second)
        if (absl::Status sent =
                ctx.comm->send(ctx.rank, global(step.peer), value);
            !sent.ok())
          throw std::runtime_error(where(step) + std::string(sent.message()));
      toSend.erase(found);
      break;
    }
    case PipelineStep::Forward: {
      std::vector<HostTensor> args;
      std::vector<HostTensor> &got = received[{step.microBatch, k}];
      size_t next = 0;
      for (size_t a = 0; a < stage.modelInput.size(); ++a) {
        int input = stage.modelInput[a];
        if (input >= 0) {
          args.push_back(
              scatterBlock(micro[size_t(input)][size_t(step.microBatch)],
                           stage.argLayouts[a], ctx.mesh, ctx.rank));
          continue;
        }
        if (next >= got.size())
          throw std::runtime_error(where(step) +
                                   "the schedule runs a forward before "
                                   "receiving its inputs");
        args.push_back(std::move(got[next++]));
      }
      received.erase({step.microBatch, k});
      std::vector<HostTensor> out;
      try {
        out = stage.function(ctx, args);
      } catch (const std::exception &e) {
        throw std::runtime_error(where(step) + e.what());
      }
      if (out.size() != stage.modelOutput.size())
        throw std::runtime_error(where(step) +
                                 absl::StrCat("the stage returned ", out.size(),
                                              " values, not ",
                                              stage.modelOutput.size()));
      std::vector<HostTensor> &sending = toSend[{step.microBatch, k}];
      for (size_t r = 0; r < out.size(); ++r) {
        if (stage.modelOutput[r] < 0)
          sending.push_back(std::move(out[r]));
        else
          results[{stage.modelOutput[r], step.microBatch}] = std::move(out[r]);
      }
      break;
    }
    default:
      throw std::runtime_error(where(step) +
                               "the stages are forward programs, which have "
                               "no backward or weight-gradient step");
    }
    if (observer)
      (*observer)(ctx.rank, step, start, micros());
  }
  std::vector<HostTensor> mine;
  for (auto &[key, value] : results)
    mine.push_back(std::move(value));
  return mine;
}

absl::StatusOr<std::vector<HostTensor>> weft::rt::assemblePipelineOutputs(
    const PipelineProgram &program,
    const std::vector<std::vector<HostTensor>> &perRank) {
  const int p = program.stages, m = program.microBatches;
  const int n = int(program.mesh.size()), perStage = n / p;
  const auto &stages = program.virtualStages;
  std::vector<HostTensor> assembled;
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
    std::vector<HostTensor> micro;
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
    if (m == 1) {
      assembled.push_back(std::move(micro.front()));
      continue;
    }
    if (micro.front().rank() == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "model output #", o,
          " is a scalar, which micro-batches cannot be joined into (a mean "
          "loss?); return it per token or use m=1"));
    std::vector<const HostTensor *> parts;
    for (const HostTensor &t : micro)
      parts.push_back(&t);
    assembled.push_back(concat(parts, 0));
  }
  return assembled;
}

absl::StatusOr<std::vector<HostTensor>> weft::rt::runPipelineOnMesh(
    const PipelineProgram &program, const std::string &weightsDir,
    const std::vector<HostTensor> &inputs, std::vector<int64_t> *bytesSent,
    std::chrono::milliseconds timeout, const StepObserver *observer) {
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
  };
  auto shared = std::make_shared<Shared>(
      Shared{program, std::move(*micro), std::nullopt});
  if (observer)
    shared->observer = *observer;
  RankBody body = [shared, started](RankContext &ctx) {
    return runPipelineRank(ctx, shared->program, shared->micro,
                           shared->observer ? &*shared->observer : nullptr,
                           started);
  };
  auto ran = runRanks(body, program.mesh, weightsDir, bytesSent, timeout);
  if (!ran.ok())
    return ran.status();
  return assemblePipelineOutputs(program, *ran);
}
