//===- Common.cpp - What the CUDA backend and its emulation share ---------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "Bytes.h"

#include "weft/runtime/Communicator.h"
#include "weft/runtime/Launch.h"
#include "weft/runtime/NpyFile.h"

#include "absl/strings/str_cat.h"

#include <cstring>

using namespace weft::rt;
using namespace weft::rt::cuda;

RankFunction cuda::onDevice(DeviceFunction function) {
  return
      [function](RankContext &rankCtx, const std::vector<HostTensor> &inputs) {
        auto *device = dynamic_cast<DeviceRank *>(rankCtx.backend.get());
        if (!device)
          throw std::runtime_error(
              "a CUDA stage function ran without its rank's device (the "
              "program's main is cuda::pipelineProgramMain, which sets it up)");
        return function(device->context(), inputs);
      };
}

TrainingStepFunction cuda::onDevice(DeviceTrainingStepFunction function) {
  return [function](RankContext &rankCtx, const std::vector<HostTensor> &inputs,
                    const std::vector<HostTensor> &parameters) {
    auto *device = dynamic_cast<DeviceRank *>(rankCtx.backend.get());
    if (!device)
      throw std::runtime_error(
          "a CUDA training step ran without its rank's device (the "
          "program's main is cuda::trainingProgramMain, which sets it up)");
    Context &ctx = device->context();
    // The pipelined step's micro-batch dates the gathers held over a block.
    ctx.microBatch = rankCtx.microBatch;
    ctx.pipelineSteps = rankCtx.pipelineSteps;
    return function(ctx, inputs, parameters);
  };
}

/// LOCAL_RANK when the ranks run as processes (mpirun, srun, torchrun).
static std::optional<int> processLocalRank() {
  if (absl::StatusOr<LaunchInfo> launch = launchFromEnvironment();
      launch.ok() && launch->worldSize > 1)
    return launch->localRank;
  return std::nullopt;
}

int cuda::pipelineProgramMain(int argc, char **argv, PipelineProgram program,
                              const DeviceRankSpec &spec) {
  program.rankSetup = deviceRankSetup(spec, processLocalRank());
  return rt::pipelineProgramMain(argc, argv, program);
}

int cuda::trainingProgramMain(int argc, char **argv, TrainingProgram program,
                              const DeviceRankSpec &spec) {
  program.rankSetup = deviceRankSetup(spec, processLocalRank());
  return rt::trainingProgramMain(argc, argv, program);
}

void cuda::fail(const Context &ctx, const std::string &what) {
  // The drivers put "rank R: " in front, as for the CPU program.
  throw std::runtime_error(absl::StrCat(ctx.op, ctx.op[0] ? ": " : "", what));
}

std::vector<char> cuda::toDeviceBytes(const Context &ctx,
                                      const HostTensor &host,
                                      const DeviceTensor &out) {
  if (host.shape != out.shape)
    fail(ctx, absl::StrCat("a tensor of shape ", shapeString(host.shape),
                           " where ", shapeString(out.shape), " was expected"));
  int64_t n = host.numel();
  int64_t width = dtypeBytes(out.dtype);
  std::vector<char> bytes(size_t(n * width));
  for (int64_t i = 0; i < n; ++i) {
    char *at = bytes.data() + i * width;
    double value = host.at(i);
    int64_t integer = host.isFloat() ? int64_t(value) : host.ints[size_t(i)];
    switch (out.dtype) {
    case DType::F32: {
      float f = float(value);
      std::memcpy(at, &f, 4);
      break;
    }
    case DType::BF16: {
      uint16_t b = floatToBF16Bits(float(value));
      std::memcpy(at, &b, 2);
      break;
    }
    case DType::F16: {
      uint16_t b = floatToF16Bits(float(value));
      std::memcpy(at, &b, 2);
      break;
    }
    case DType::I64:
      std::memcpy(at, &integer, 8);
      break;
    case DType::I32: {
      int32_t v = int32_t(integer);
      std::memcpy(at, &v, 4);
      break;
    }
    case DType::Bool:
      *at = value != 0;
      break;
    case DType::F64:
      fail(ctx, "f64 tensors are not supported on the GPU");
    }
  }
  return bytes;
}

HostTensor cuda::fromDeviceBytes(const Context &ctx, const char *bytes,
                                 const DeviceTensor &t) {
  HostTensor host(t.dtype, t.shape);
  int64_t width = dtypeBytes(t.dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const char *at = bytes + i * width;
    switch (t.dtype) {
    case DType::F32:
      std::memcpy(&host.floats[size_t(i)], at, 4);
      break;
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, at, 2);
      host.floats[size_t(i)] = bf16BitsToFloat(b);
      break;
    }
    case DType::F16: {
      uint16_t b;
      std::memcpy(&b, at, 2);
      host.floats[size_t(i)] = f16BitsToFloat(b);
      break;
    }
    case DType::I64:
      std::memcpy(&host.ints[size_t(i)], at, 8);
      break;
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, at, 4);
      host.ints[size_t(i)] = v;
      break;
    }
    case DType::Bool:
      host.ints[size_t(i)] = *at != 0;
      break;
    case DType::F64:
      fail(ctx, "f64 tensors are not supported on the GPU");
    }
  }
  return host;
}

void cuda::loadWeight(Context &ctx, const std::string &name,
                      const DeviceTensor &out) {
  std::string path = ctx.weightsDir + "/" + name;
  absl::StatusOr<HostTensor> tensor = readNpy(path);
  if (!tensor.ok())
    fail(ctx, absl::StrCat("cannot load weight '", path,
                           "': ", tensor.status().message()));
  if (absl::Status status = checkWeight(*tensor, out.dtype, out.shape, path);
      !status.ok())
    fail(ctx, std::string(status.message()));
  upload(ctx, *tensor, out);
}

void cuda::uploadShard(Context &ctx, const HostTensor &host,
                       const std::vector<std::string> &axes, int64_t dim,
                       const DeviceTensor &out) {
  auto [index, parts] = shardOf(ctx.mesh, ctx.rank, axes);
  if (dim < 0 || dim >= int64_t(host.shape.size()) ||
      host.shape[size_t(dim)] % parts)
    fail(ctx,
         absl::StrCat("cannot cut a tensor of shape ", shapeString(host.shape),
                      " in ", parts, " blocks along dimension ", dim));
  upload(ctx, sliceForRank(host, dim, index, parts), out);
}

void cuda::loadWeightShard(Context &ctx, const std::string &name,
                           const std::vector<std::string> &axes, int64_t dim,
                           const DeviceTensor &out) {
  std::string path = ctx.weightsDir + "/" + name;
  auto [index, parts] = shardOf(ctx.mesh, ctx.rank, axes);
  absl::StatusOr<HostTensor> tensor = readNpyShard(path, dim, index, parts);
  if (!tensor.ok())
    fail(ctx, absl::StrCat("cannot load weight '", path,
                           "': ", tensor.status().message()));
  if (absl::Status status = checkWeight(*tensor, out.dtype, out.shape, path);
      !status.ok())
    fail(ctx, std::string(status.message()));
  upload(ctx, *tensor, out);
}
