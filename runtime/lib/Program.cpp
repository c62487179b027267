//===- Program.cpp - What a partitioned rank program needs ----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Program.h"

#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/NpyFile.h"
#include "weft/runtime/Profile.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>

using namespace weft::rt;

int64_t Mesh::size() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

int64_t Mesh::axisSize(const std::string &axis) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] == axis)
      return shape[i];
  return 1;
}

int64_t Mesh::indexIn(int rank, const std::vector<std::string> &names) const {
  int64_t index = 0;
  for (const std::string &name : names) {
    int64_t stride = 1, coordinate = 0;
    for (size_t i = axes.size(); i-- > 0;) {
      if (axes[i] == name) {
        coordinate = (rank / stride) % shape[i];
        break;
      }
      stride *= shape[i];
    }
    index = index * axisSize(name) + coordinate;
  }
  return index;
}

std::vector<int> Mesh::group(int rank, const std::vector<std::string> &names) const {
  size_t n = shape.size();
  std::vector<int64_t> coords(n);
  int64_t rest = rank;
  for (size_t i = n; i-- > 0;) {
    coords[i] = rest % shape[i];
    rest /= shape[i];
  }
  std::vector<size_t> which;
  for (const std::string &name : names)
    for (size_t i = 0; i < n; ++i)
      if (axes[i] == name)
        which.push_back(i);
  int64_t size = 1;
  for (size_t i : which)
    size *= shape[i];
  std::vector<int> members;
  for (int64_t g = 0; g < size; ++g) {
    std::vector<int64_t> c = coords;
    int64_t rem = g;
    for (size_t j = which.size(); j-- > 0;) {
      c[which[j]] = rem % shape[which[j]];
      rem /= shape[which[j]];
    }
    int64_t linear = 0;
    for (size_t i = 0; i < n; ++i)
      linear = linear * shape[i] + c[i];
    members.push_back(int(linear));
  }
  return members;
}

static bool isZigzag(const Mesh &mesh, const std::vector<std::string> &axes) {
  return !mesh.zigzagAxis.empty() && !axes.empty() &&
         axes.front() == mesh.zigzagAxis;
}

HostTensor weft::rt::scatterBlock(const HostTensor &global, const Layout &layout,
                                  const Mesh &mesh, int rank) {
  HostTensor block = global;
  for (size_t d = 0; d < layout.size(); ++d) {
    if (layout[d].empty())
      continue;
    int64_t parts = 1;
    for (const std::string &axis : layout[d])
      parts *= mesh.axisSize(axis);
    int64_t index = mesh.indexIn(rank, layout[d]);
    block = isZigzag(mesh, layout[d])
                ? zigzagSlice(block, d, index, mesh.axisSize(layout[d].front()),
                              parts)
                : sliceForRank(block, d, index, parts);
  }
  return block;
}

HostTensor weft::rt::gatherBlocks(const std::vector<HostTensor> &blocks,
                                  const Layout &layout, const Mesh &mesh) {
  const HostTensor &first = blocks[0];
  Shape shape = first.shape;
  for (size_t d = 0; d < layout.size(); ++d)
    for (const std::string &axis : layout[d])
      shape[d] *= mesh.axisSize(axis);
  bool replicated = std::all_of(layout.begin(), layout.end(),
                                [](const auto &axes) { return axes.empty(); });
  if (replicated)
    return first;
  HostTensor full = HostTensor::uninitialized(first.dtype, shape);
  // Each block's runs along its last dimension are contiguous in the block
  // and in the whole: copied whole.
  size_t rank = shape.size();
  for (size_t r = 0; r < blocks.size(); ++r) {
    const HostTensor &block = blocks[r];
    std::vector<int64_t> offset(rank, 0);
    for (size_t d = 0; d < layout.size(); ++d)
      offset[d] = mesh.indexIn(int(r), layout[d]) * block.shape[d];
    int64_t run = rank ? block.shape.back() : 1;
    int64_t runs = run ? block.numel() / run : 0;
    for (int64_t i = 0; i < runs; ++i) {
      int64_t rest = i, target = 0, stride = 1;
      for (size_t d = rank; d-- > 0;) {
        int64_t at = d + 1 == rank ? 0 : rest % block.shape[d];
        if (d + 1 != rank)
          rest /= block.shape[d];
        target += (offset[d] + at) * stride;
        stride *= shape[d];
      }
      if (full.isFloat())
        std::copy_n(block.floats.data() + i * run, run,
                    full.floats.data() + target);
      else
        std::copy_n(block.ints.data() + i * run, run,
                    full.ints.data() + target);
    }
  }
  // Blocks were placed in group order; undo a load-balanced layout.
  for (size_t d = 0; d < layout.size(); ++d)
    if (isZigzag(mesh, layout[d])) {
      int64_t parts = 1;
      for (const std::string &axis : layout[d])
        parts *= mesh.axisSize(axis);
      full = zigzagUnshuffle(full, d, mesh.axisSize(layout[d].front()), parts);
    }
  return full;
}

HostTensor weft::rt::valueOrThrow(absl::StatusOr<HostTensor> value) {
  if (!value.ok())
    throw std::runtime_error(std::string(value.status().message()));
  return std::move(*value);
}

std::vector<int> weft::rt::groupOf(const Mesh &mesh, int rank,
                                   const std::vector<std::string> &axes,
                                   const std::vector<int64_t> &members) {
  std::vector<int> group = mesh.group(rank, axes);
  if (members.empty())
    return group;
  auto member = [&](int r) {
    return std::find(members.begin(), members.end(), mesh.indexIn(r, axes)) !=
           members.end();
  };
  if (!member(rank))
    throw std::runtime_error(
        absl::StrCat("rank ", rank, " runs a collective of a sub-group of ",
                     axes.front(), " that it is not a member of"));
  std::vector<int> kept;
  for (int r : group)
    if (member(r))
      kept.push_back(r);
  return kept;
}

HostTensor weft::rt::allReduce(RankContext &ctx, const HostTensor &x,
                               ReduceOp op,
                               const std::vector<std::string> &axes,
                               Codec codec,
                               const std::vector<int64_t> &members) {
  ProfileScope profile("all_reduce");
  return valueOrThrow(ctx.comm->allReduce(
      ctx.rank, groupOf(ctx.mesh, ctx.rank, axes, members), x, op, codec));
}

HostTensor weft::rt::allGather(RankContext &ctx, const HostTensor &x,
                               const std::vector<std::string> &axes,
                               int64_t dim, bool zigzag, Codec codec) {
  ProfileScope profile("all_gather");
  std::vector<int> group = ctx.mesh.group(ctx.rank, axes);
  HostTensor result =
      valueOrThrow(ctx.comm->allGather(ctx.rank, group, x, dim, codec));
  if (zigzag)
    result = zigzagUnshuffle(result, dim, ctx.mesh.axisSize(axes.front()),
                             int64_t(group.size()));
  return result;
}

int64_t weft::rt::heldBlock(const RankContext &ctx, int64_t block) {
  if (ctx.microBatch < 0 || block < 1)
    return -1;
  return ctx.microBatch / block;
}

HostTensor weft::rt::heldAllGather(RankContext &ctx, int64_t key, int64_t block,
                                   const HostTensor &x,
                                   const std::vector<std::string> &axes,
                                   int64_t dim, bool zigzag, Codec codec) {
  const int64_t at = heldBlock(ctx, block);
  if (at < 0)
    return allGather(ctx, x, axes, dim, zigzag, codec);
  RankContext::HeldGather &kept = ctx.held[key];
  if (kept.step != ctx.pipelineSteps || kept.block != at) {
    kept.value = allGather(ctx, x, axes, dim, zigzag, codec);
    kept.step = ctx.pipelineSteps;
    kept.block = at;
  }
  return kept.value;
}

HostTensor weft::rt::reduceScatter(RankContext &ctx, const HostTensor &x,
                                   ReduceOp op,
                                   const std::vector<std::string> &axes,
                                   int64_t dim, bool zigzag, Codec codec) {
  ProfileScope profile("reduce_scatter");
  std::vector<int> group = ctx.mesh.group(ctx.rank, axes);
  if (!zigzag)
    return valueOrThrow(
        ctx.comm->reduceScatter(ctx.rank, group, x, dim, op, codec));
  // Each rank's zigzag block moved to its place in group order: then the
  // plain reduce-scatter leaves each rank its block.
  const int64_t parts = int64_t(group.size());
  std::vector<HostTensor> blocks;
  for (int64_t r = 0; r < parts; ++r)
    blocks.push_back(
        zigzagSlice(x, dim, r, ctx.mesh.axisSize(axes.front()), parts));
  std::vector<const HostTensor *> pointers;
  for (const HostTensor &block : blocks)
    pointers.push_back(&block);
  return valueOrThrow(ctx.comm->reduceScatter(
      ctx.rank, group, concat(pointers, dim), dim, op, codec));
}

HostTensor weft::rt::allToAll(RankContext &ctx, const HostTensor &x,
                              const std::vector<std::string> &axes,
                              int64_t splitDim, int64_t concatDim,
                              Codec codec) {
  ProfileScope profile("all_to_all");
  return valueOrThrow(ctx.comm->allToAll(
      ctx.rank, ctx.mesh.group(ctx.rank, axes), x, splitDim, concatDim, codec));
}

HostTensor weft::rt::allSlice(RankContext &ctx, const HostTensor &x,
                              const std::vector<std::string> &axes,
                              int64_t dim, bool zigzag) {
  ProfileScope profile("all_slice");
  auto [index, parts] = shardOf(ctx.mesh, ctx.rank, axes);
  return zigzag ? zigzagSlice(x, dim, index, ctx.mesh.axisSize(axes.front()),
                              parts)
                : sliceForRank(x, dim, index, parts);
}

HostTensor weft::rt::permute(RankContext &ctx, const HostTensor &x,
                             const std::vector<std::string> &axes,
                             int64_t shift, Codec codec) {
  ProfileScope profile("collective_permute");
  return valueOrThrow(ctx.comm->permute(
      ctx.rank, ctx.mesh.group(ctx.rank, axes), x, shift, codec));
}

HostTensor weft::rt::asType(const HostTensor &x, DType dtype) {
  return x.dtype == dtype ? x : cast(x, dtype);
}

absl::Status weft::rt::checkWeight(const HostTensor &read, DType dtype,
                                   const Shape &shape,
                                   const std::string &path) {
  DType stored = dtype == DType::BF16 ? DType::F32 : dtype;
  if (read.dtype != stored || read.shape != shape)
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", path, "' holds ", dtypeName(read.dtype),
        shapeString(read.shape), ", but the program was compiled for ",
        dtypeName(stored), shapeString(shape),
        " (were the weights written for another model or plan?)"));
  return absl::OkStatus();
}

HostTensor weft::rt::loadWeight(const RankContext &ctx, const std::string &name,
                                DType dtype, const Shape &shape) {
  ProfileScope profile("weight");
  std::string path = ctx.weightsDir + "/" + name;
  absl::StatusOr<HostTensor> tensor = readNpy(path);
  if (!tensor.ok())
    throw std::runtime_error(absl::StrCat("cannot load weight '", path,
                                          "': ", tensor.status().message()));
  if (absl::Status status = checkWeight(*tensor, dtype, shape, path);
      !status.ok())
    throw std::runtime_error(std::string(status.message()));
  return asType(*tensor, dtype);
}

std::pair<int64_t, int64_t>
weft::rt::shardOf(const Mesh &mesh, int rank,
                  const std::vector<std::string> &axes) {
  int64_t parts = 1;
  for (const std::string &axis : axes)
    parts *= mesh.axisSize(axis);
  return {mesh.indexIn(rank, axes), parts};
}

HostTensor weft::rt::loadWeightShard(const RankContext &ctx,
                                     const std::string &name,
                                     const std::vector<std::string> &axes,
                                     int64_t dim, DType dtype,
                                     const Shape &shape) {
  ProfileScope profile("weight");
  std::string path = ctx.weightsDir + "/" + name;
  auto [index, parts] = shardOf(ctx.mesh, ctx.rank, axes);
  absl::StatusOr<HostTensor> tensor = readNpyShard(path, dim, index, parts);
  if (!tensor.ok())
    throw std::runtime_error(absl::StrCat("cannot load weight '", path,
                                          "': ", tensor.status().message()));
  if (absl::Status status = checkWeight(*tensor, dtype, shape, path);
      !status.ok())
    throw std::runtime_error(std::string(status.message()));
  return asType(*tensor, dtype);
}

absl::Status weft::rt::checkInput(const HostTensor &input,
                                  const TensorType &block, const Layout &layout,
                                  const Mesh &mesh, const std::string &what) {
  Shape global = block.shape;
  for (size_t d = 0; d < global.size() && d < layout.size(); ++d)
    for (const std::string &axis : layout[d])
      global[d] *= mesh.axisSize(axis);
  auto kind = [](DType t) { return isFloat(t) ? 0 : t == DType::Bool ? 2 : 1; };
  if (input.shape != global || kind(input.dtype) != kind(block.dtype))
    return absl::InvalidArgumentError(absl::StrCat(
        what, " holds ", dtypeName(input.dtype), shapeString(input.shape),
        ", but the program was compiled for ", dtypeName(block.dtype),
        shapeString(global),
        kind(block.dtype) == 1 ? " (an i32 or i64 file)" : ""));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<HostTensor>>> weft::rt::runRanks(
    const RankBody &body, const Mesh &mesh, const std::string &weightsDir,
    std::vector<int64_t> *bytesSent, std::chrono::milliseconds timeout) {
  int n = int(mesh.size());
  // The ranks' threads share this state and are detached, so that a rank
  // stuck outside any collective cannot hang the run: once one rank fails,
  // the others are aborted and get a short grace period to stop.
  struct MeshRun {
    MeshRun(int n, std::chrono::milliseconds timeout)
        : comm(n, timeout), timeout(timeout), results(n), errors(n),
          finished(n, false) {}
    InProcessCommunicator comm;
    std::chrono::milliseconds timeout;
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::vector<HostTensor>> results;
    std::vector<std::string> errors;
    std::vector<bool> finished;
    int count = 0;
    bool failed = false;
  };
  auto run = std::make_shared<MeshRun>(n, timeout);
  auto shared = std::make_shared<std::tuple<RankBody, Mesh, std::string>>(
      body, mesh, weightsDir);
  for (int rank = 0; rank < n; ++rank)
    std::thread([run, shared, rank] {
      auto &[body, mesh, weightsDir] = *shared;
      RankContext ctx{rank, mesh, &run->comm, weightsDir, run->timeout};
      std::vector<HostTensor> result;
      std::string error;
      try {
        RankProfile profile;
        result = body(ctx);
      } catch (const std::exception &e) {
        error = absl::StrCat("rank ", rank, ": ", e.what());
        run->comm.abort(error);
      }
      std::lock_guard<std::mutex> lock(run->mutex);
      run->results[rank] = std::move(result);
      run->errors[rank] = std::move(error);
      run->failed |= !run->errors[rank].empty();
      run->finished[rank] = true;
      ++run->count;
      run->changed.notify_all();
    }).detach();
  std::unique_lock<std::mutex> lock(run->mutex);
  run->changed.wait(lock, [&] { return run->count == n || run->failed; });
  if (run->failed) {
    const auto grace = std::chrono::seconds(2);
    if (!run->changed.wait_for(lock, grace, [&] { return run->count == n; })) {
      std::string stuck;
      for (int rank = 0; rank < n; ++rank)
        if (!run->finished[rank])
          absl::StrAppend(&stuck, stuck.empty() ? "" : ", ", rank);
      for (const std::string &error : run->errors)
        if (!error.empty())
          return absl::DeadlineExceededError(absl::StrCat(
              error, " (rank(s) ", stuck,
              " did not stop and were left behind)"));
    }
    for (const std::string &error : run->errors)
      if (!error.empty())
        return absl::InternalError(error);
  }
  if (bytesSent)
    for (int rank = 0; rank < n; ++rank)
      bytesSent->push_back(run->comm.bytesSent(rank));
  return std::move(run->results);
}

absl::StatusOr<std::vector<HostTensor>> weft::rt::runOnMesh(
    const RankFunction &function, const Mesh &mesh,
    const std::string &weightsDir, const std::vector<HostTensor> &inputs,
    const std::vector<Layout> &inputLayouts,
    const std::vector<Layout> &outputLayouts, std::vector<int64_t> *bytesSent,
    std::chrono::milliseconds timeout) {
  if (inputs.size() != inputLayouts.size())
    return absl::InvalidArgumentError(
        absl::StrCat("the program takes ", inputLayouts.size(), " inputs, got ",
                     inputs.size()));
  // The inputs are shared by the ranks' threads, which may outlive this
  // call when a rank is left behind.
  auto shared =
      std::make_shared<std::pair<std::vector<HostTensor>, std::vector<Layout>>>(
          inputs, inputLayouts);
  RankBody body = [function, shared](RankContext &ctx) {
    std::vector<HostTensor> mine;
    for (size_t i = 0; i < shared->first.size(); ++i)
      mine.push_back(scatterBlock(shared->first[i], shared->second[i], ctx.mesh,
                                  ctx.rank));
    return function(ctx, mine);
  };
  auto results = runRanks(body, mesh, weightsDir, bytesSent, timeout);
  if (!results.ok())
    return results.status();
  int n = int(mesh.size());
  std::vector<HostTensor> outputs;
  for (size_t o = 0; o < outputLayouts.size(); ++o) {
    std::vector<HostTensor> blocks;
    for (int rank = 0; rank < n; ++rank) {
      if (o >= (*results)[rank].size())
        return absl::InternalError(
            absl::StrCat("rank ", rank, " returned ", (*results)[rank].size(),
                         " outputs, not ", outputLayouts.size()));
      blocks.push_back(std::move((*results)[rank][o]));
    }
    outputs.push_back(gatherBlocks(blocks, outputLayouts[o], mesh));
  }
  return outputs;
}
