//===- CudaProgram.cpp - Devices, communicators and the CUDA driver -------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/cuda/Cuda.h"

#include "Bytes.h"

#include "weft/runtime/Launch.h"
#include "weft/runtime/NpyFile.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <cublasLt.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

using namespace weft::rt;
using namespace weft::rt::cuda;

void cuda::check(const Context &ctx, cudaError_t error, const char *call) {
  if (error != cudaSuccess)
    fail(ctx, absl::StrCat(call, ": ", cudaGetErrorName(error), ": ",
                           cudaGetErrorString(error)));
}

void cuda::checkLaunch(const Context &ctx) {
  check(ctx, cudaGetLastError(), "kernel launch");
}

// ---- Host <-> device -------------------------------------------------------

void cuda::upload(Context &ctx, const HostTensor &host,
                  const DeviceTensor &out) {
  std::vector<char> bytes = toDeviceBytes(ctx, host, out);
  check(ctx, cudaMemcpyAsync(out.data, bytes.data(), bytes.size(),
                             cudaMemcpyHostToDevice, ctx.compute),
        "cudaMemcpyAsync");
  check(ctx, cudaStreamSynchronize(ctx.compute), "cudaStreamSynchronize");
}

HostTensor cuda::download(Context &ctx, const DeviceTensor &t) {
  std::vector<char> bytes(size_t(t.bytes()));
  check(ctx, cudaStreamSynchronize(ctx.compute), "cudaStreamSynchronize");
  check(ctx, cudaMemcpy(bytes.data(), t.data, bytes.size(),
                        cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  return fromDeviceBytes(ctx, bytes.data(), t);
}

void cuda::waitFor(Context &ctx, cudaEvent_t done) {
  check(ctx, cudaStreamWaitEvent(ctx.compute, done, 0), "cudaStreamWaitEvent");
  check(ctx, cudaEventDestroy(done), "cudaEventDestroy");
}

// ---- Communicators ---------------------------------------------------------

namespace {

ncclDataType_t ncclType(const Context &ctx, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I64:
    return ncclInt64;
  case DType::I32:
    return ncclInt32;
  case DType::Bool:
    return ncclUint8;
  case DType::F64:
    break;
  }
  fail(ctx, "f64 tensors are not supported by NCCL here");
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Max:
    return ncclMax;
  case ReduceOp::Min:
    return ncclMin;
  case ReduceOp::Avg:
    return ncclAvg;
  case ReduceOp::Sum:
    break;
  }
  return ncclSum;
}

/// Collectives that have been issued and not yet seen to finish, for the
/// watchdog.
struct InFlight {
  std::string what;
  std::chrono::steady_clock::time_point issued;
  cudaEvent_t done;
};

/// One rank per process over NCCL: a communicator per mesh-axis group,
/// split from the world's at start-up, and a watchdog thread. The watchdog
/// polls ncclCommGetAsyncError and the collectives' completion events; on an
/// error, or a collective older than the timeout, it names the collective,
/// aborts every communicator and exits the process non-zero.
class NcclCommunicator : public DeviceCommunicator {
public:
  /// Joins the world and splits it once per group of `communicators`, in
  /// their order: every rank splits at the same points, before any
  /// collective of the program (a rank outside a sub-group's members takes
  /// no part in its communicator).
  NcclCommunicator(int rank, int worldSize, const ncclUniqueId &id,
                   std::chrono::milliseconds timeout, const Context &ctx,
                   const Mesh &mesh,
                   const std::vector<CommunicatorGroup> &communicators)
      : rank(rank), timeout(timeout) {
    checkNccl(ctx, ncclCommInitRank(&world, worldSize, id, rank),
              "ncclCommInitRank");
    for (const CommunicatorGroup &spec : communicators) {
      const std::vector<int64_t> &members = spec.members;
      if (!members.empty() &&
          std::find(members.begin(), members.end(),
                    mesh.indexIn(rank, spec.axes)) == members.end()) {
        ncclComm_t none = nullptr;
        checkNccl(ctx,
                  ncclCommSplit(world, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr),
                  "ncclCommSplit");
        continue;
      }
      std::vector<int> group = groupOf(mesh, rank, spec.axes, members);
      if (groups.count(group))
        continue;
      int key =
          int(std::find(group.begin(), group.end(), rank) - group.begin());
      ncclComm_t comm = nullptr;
      checkNccl(ctx, ncclCommSplit(world, group.front(), key, &comm, nullptr),
                "ncclCommSplit");
      groups[group] = comm;
    }
    watchdog = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    stopping = true;
    watchdog.join();
    std::lock_guard<std::mutex> lock(mutex);
    for (InFlight &f : inFlight)
      cudaEventDestroy(f.done);
    for (auto &[group, comm] : groups)
      ncclCommDestroy(comm);
    ncclCommDestroy(world);
  }

  void allReduce(Context &ctx, const std::vector<int> &group,
                 const DeviceTensor &x, ReduceOp op,
                 const DeviceTensor &out) override {
    int64_t n = int64_t(group.size());
    sent += 2 * (n - 1) * x.bytes() / n;
    checkNccl(ctx,
              ncclAllReduce(x.data, out.data, size_t(x.numel()),
                            ncclType(ctx, x.dtype), ncclOp(op),
                            commFor(ctx, group), ctx.comm),
              "ncclAllReduce");
    track(ctx, "all_reduce");
  }
  void allGather0(Context &ctx, const std::vector<int> &group,
                  const DeviceTensor &x, const DeviceTensor &out) override {
    sent += (int64_t(group.size()) - 1) * x.bytes();
    checkNccl(ctx,
              ncclAllGather(x.data, out.data, size_t(x.numel()),
                            ncclType(ctx, x.dtype), commFor(ctx, group),
                            ctx.comm),
              "ncclAllGather");
    track(ctx, "all_gather");
  }
  void reduceScatter0(Context &ctx, const std::vector<int> &group,
                      const DeviceTensor &x, ReduceOp op,
                      const DeviceTensor &out) override {
    int64_t n = int64_t(group.size());
    sent += (n - 1) * x.bytes() / n;
    checkNccl(ctx,
              ncclReduceScatter(x.data, out.data, size_t(out.numel()),
                                ncclType(ctx, x.dtype), ncclOp(op),
                                commFor(ctx, group), ctx.comm),
              "ncclReduceScatter");
    track(ctx, "reduce_scatter");
  }
  void allToAll0(Context &ctx, const std::vector<int> &group,
                 const DeviceTensor &x, const DeviceTensor &out) override {
    int64_t n = int64_t(group.size());
    sent += (n - 1) * x.bytes() / n;
    ncclComm_t comm = commFor(ctx, group);
    size_t count = size_t(x.numel() / n);
    size_t bytes = size_t(x.bytes() / n);
    checkNccl(ctx, ncclGroupStart(), "ncclGroupStart");
    for (int64_t j = 0; j < n; ++j) {
      checkNccl(ctx,
                ncclSend(static_cast<char *>(x.data) + j * bytes, count,
                         ncclType(ctx, x.dtype), int(j), comm, ctx.comm),
                "ncclSend");
      checkNccl(ctx,
                ncclRecv(static_cast<char *>(out.data) + j * bytes, count,
                         ncclType(ctx, x.dtype), int(j), comm, ctx.comm),
                "ncclRecv");
    }
    checkNccl(ctx, ncclGroupEnd(), "ncclGroupEnd");
    track(ctx, "all_to_all");
  }
  void permute(Context &ctx, const std::vector<int> &group,
               const DeviceTensor &x, int64_t shift,
               const DeviceTensor &out) override {
    int64_t n = int64_t(group.size());
    int64_t index = std::find(group.begin(), group.end(), ctx.rank) -
                    group.begin();
    int to = int(((index + shift) % n + n) % n);
    int from = int(((index - shift) % n + n) % n);
    sent += x.bytes();
    ncclComm_t comm = commFor(ctx, group);
    checkNccl(ctx, ncclGroupStart(), "ncclGroupStart");
    checkNccl(ctx,
              ncclSend(x.data, size_t(x.numel()), ncclType(ctx, x.dtype), to,
                       comm, ctx.comm),
              "ncclSend");
    checkNccl(ctx,
              ncclRecv(out.data, size_t(out.numel()), ncclType(ctx, x.dtype),
                       from, comm, ctx.comm),
              "ncclRecv");
    checkNccl(ctx, ncclGroupEnd(), "ncclGroupEnd");
    track(ctx, "collective_permute");
  }
  int64_t bytesSent() const override { return sent; }

private:
  void checkNccl(const Context &ctx, ncclResult_t result, const char *call) {
    if (result != ncclSuccess)
      fail(ctx, absl::StrCat(call, ": ", ncclGetErrorString(result), " (",
                             ncclGetLastError(world), ")"));
  }

  /// The group's communicator, made at start-up.
  ncclComm_t commFor(const Context &ctx, const std::vector<int> &group) {
    auto found = groups.find(group);
    if (found == groups.end())
      fail(ctx, "a collective over a group whose NCCL communicator was not "
                "created at start-up (the program's communicator list misses "
                "its mesh axes)");
    return found->second;
  }

  void track(const Context &ctx, const char *kind) {
    cudaEvent_t done;
    check(ctx, cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
          "cudaEventCreate");
    check(ctx, cudaEventRecord(done, ctx.comm), "cudaEventRecord");
    std::lock_guard<std::mutex> lock(mutex);
    inFlight.push_back({absl::StrCat(kind, " #", ++issued, " (", ctx.op, ")"),
                        std::chrono::steady_clock::now(), done});
  }

  [[noreturn]] void abortAll(const std::string &why) {
    std::cerr << absl::StrCat("error: rank ", rank, ": watchdog: ", why,
                              "; aborting the NCCL communicators\n")
              << std::flush;
    for (auto &[group, comm] : groups)
      ncclCommAbort(comm);
    ncclCommAbort(world);
    std::_Exit(1);
  }

  void watch() {
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> lock(mutex);
      std::vector<ncclComm_t> all{world};
      for (auto &[group, comm] : groups)
        all.push_back(comm);
      for (ncclComm_t comm : all) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &state) == ncclSuccess &&
            state != ncclSuccess && state != ncclInProgress)
          abortAll(absl::StrCat(
              "NCCL reported ", ncclGetErrorString(state),
              inFlight.empty() ? std::string()
                               : " during " + inFlight.front().what));
      }
      auto now = std::chrono::steady_clock::now();
      while (!inFlight.empty()) {
        InFlight &oldest = inFlight.front();
        cudaError_t query = cudaEventQuery(oldest.done);
        if (query == cudaSuccess) {
          cudaEventDestroy(oldest.done);
          inFlight.erase(inFlight.begin());
          continue;
        }
        if (query != cudaErrorNotReady)
          abortAll(absl::StrCat(oldest.what, " failed: ",
                                cudaGetErrorString(query)));
        if (now - oldest.issued > timeout)
          abortAll(absl::StrCat(
              oldest.what, " did not complete within ",
              std::chrono::duration_cast<std::chrono::milliseconds>(timeout)
                  .count(),
              " ms (a rank never joined it, or hangs)"));
        break;
      }
    }
  }

  int rank;
  std::chrono::milliseconds timeout;
  ncclComm_t world = nullptr;
  std::map<std::vector<int>, ncclComm_t> groups;
  std::mutex mutex;
  std::vector<InFlight> inFlight;
  int64_t issued = 0;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> sent{0};
  std::thread watchdog;
};

/// Ranks as threads sharing one GPU: each collective stages its tensor
/// through the host and meets the others in the in-process communicator
/// (whose own timeout names the missing ranks).
class InProcessDeviceCommunicator : public DeviceCommunicator {
public:
  InProcessDeviceCommunicator(Communicator &host, int rank)
      : host(host), rank(rank) {}

  void allReduce(Context &ctx, const std::vector<int> &group,
                 const DeviceTensor &x, ReduceOp op,
                 const DeviceTensor &out) override {
    finish(ctx, host.allReduce(rank, group, stage(ctx, x), op), out);
  }
  void allGather0(Context &ctx, const std::vector<int> &group,
                  const DeviceTensor &x, const DeviceTensor &out) override {
    finish(ctx, host.allGather(rank, group, stage(ctx, x), 0), out);
  }
  void reduceScatter0(Context &ctx, const std::vector<int> &group,
                      const DeviceTensor &x, ReduceOp op,
                      const DeviceTensor &out) override {
    finish(ctx, host.reduceScatter(rank, group, stage(ctx, x), 0, op), out);
  }
  void allToAll0(Context &ctx, const std::vector<int> &group,
                 const DeviceTensor &x, const DeviceTensor &out) override {
    finish(ctx, host.allToAll(rank, group, stage(ctx, x), 0, 0), out);
  }
  void permute(Context &ctx, const std::vector<int> &group,
               const DeviceTensor &x, int64_t shift,
               const DeviceTensor &out) override {
    finish(ctx, host.permute(rank, group, stage(ctx, x), shift), out);
  }
  int64_t bytesSent() const override { return host.bytesSent(rank); }

private:
  HostTensor stage(Context &ctx, const DeviceTensor &x) {
    check(ctx, cudaStreamSynchronize(ctx.comm), "cudaStreamSynchronize");
    std::swap(ctx.compute, ctx.comm);
    HostTensor staged = download(ctx, x);
    std::swap(ctx.compute, ctx.comm);
    return staged;
  }
  void finish(Context &ctx, absl::StatusOr<HostTensor> result,
              const DeviceTensor &out) {
    if (!result.ok())
      fail(ctx, std::string(result.status().message()));
    // The device primitives move bytes: a gather along dimension 0 of the
    // host communicator concatenates what `out` holds stacked ([n, ...]),
    // and a reduce-scatter leaves the leading 1 of the scattered block.
    // Same elements, same order; only the shape differs.
    if (result->numel() != out.numel())
      fail(ctx,
           absl::StrCat("the in-process collective returned ", result->numel(),
                        " elements where ", out.numel(), " were expected"));
    result->shape = out.shape;
    std::swap(ctx.compute, ctx.comm);
    upload(ctx, *result, out);
    std::swap(ctx.compute, ctx.comm);
  }

  Communicator &host;
  int rank;
};

// ---- The driver ------------------------------------------------------------

/// Streams, cuBLASLt and the arena of one rank, released at scope exit.
struct RankResources {
  Context ctx;
  RankResources(int rank, const Mesh &mesh, int64_t arenaBytes,
                const std::string &weightsDir) {
    ctx.rank = rank;
    ctx.mesh = mesh;
    ctx.weightsDir = weightsDir;
    check(ctx, cudaStreamCreateWithFlags(&ctx.compute, cudaStreamNonBlocking),
          "cudaStreamCreate");
    check(ctx, cudaStreamCreateWithFlags(&ctx.comm, cudaStreamNonBlocking),
          "cudaStreamCreate");
    cublasLtHandle_t handle = nullptr;
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS)
      fail(ctx, "cublasLtCreate failed");
    ctx.blasLt = handle;
    ctx.blasWorkspaceBytes = size_t(32) << 20;
    check(ctx, cudaMalloc(&ctx.blasWorkspace, ctx.blasWorkspaceBytes),
          "cudaMalloc (cuBLASLt workspace)");
    void *arena = nullptr;
    check(ctx, cudaMalloc(&arena, size_t(std::max<int64_t>(arenaBytes, 1))),
          absl::StrCat("cudaMalloc (arena of ", arenaBytes, " bytes)").c_str());
    ctx.arena = static_cast<char *>(arena);
  }
  ~RankResources() {
    cudaStreamSynchronize(ctx.compute);
    cudaStreamSynchronize(ctx.comm);
    cudaFree(ctx.arena);
    cudaFree(ctx.blasWorkspace);
    cublasLtDestroy(static_cast<cublasLtHandle_t>(ctx.blasLt));
    cudaStreamDestroy(ctx.compute);
    cudaStreamDestroy(ctx.comm);
  }
};

} // namespace

/// Selects this process's device (LOCAL_RANK) and returns the world's NCCL
/// id, made by rank 0 and sent to the others through the host communicator
/// (MPI or the store). Every rank must call it.
static ncclUniqueId joinNcclWorld(RankContext &rankCtx, int localRank) {
  int rank = rankCtx.rank, n = int(rankCtx.mesh.size());
  std::vector<int> world;
  for (int r = 0; r < n; ++r)
    world.push_back(r);
  int devices = 0;
  Context probe;
  probe.rank = rank;
  check(probe, cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices == 0)
    fail(probe, "no CUDA device");
  check(probe, cudaSetDevice(localRank % devices), "cudaSetDevice");
  ncclUniqueId id;
  static_assert(sizeof(id) % 8 == 0, "the NCCL id travels as int64s");
  HostTensor mine(DType::I64, {1, int64_t(sizeof(id) / 8)});
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess)
      fail(probe, "ncclGetUniqueId failed");
    std::memcpy(mine.ints.data(), &id, sizeof(id));
  }
  HostTensor ids = valueOrThrow(rankCtx.comm->allGather(rank, world, mine, 0));
  std::memcpy(&id, ids.ints.data(), sizeof(id));
  return id;
}

/// A rank as a process on device LOCAL_RANK over NCCL.
static std::vector<HostTensor> runOnNccl(const CudaProgramSpec &spec,
                                         RankContext &rankCtx,
                                         const LaunchInfo &launch,
                                         const std::vector<HostTensor> &inputs,
                                         int64_t &bytesSent) {
  ncclUniqueId id = joinNcclWorld(rankCtx, launch.localRank);
  RankResources resources(rankCtx.rank, spec.mesh, spec.arenaBytes,
                          rankCtx.weightsDir);
  NcclCommunicator nccl(rankCtx.rank, int(spec.mesh.size()), id,
                        rankCtx.timeout, resources.ctx, spec.mesh,
                        spec.communicators);
  resources.ctx.communicator = &nccl;
  std::vector<HostTensor> results = spec.function(resources.ctx, inputs);
  check(resources.ctx, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  bytesSent = nccl.bytesSent();
  return results;
}

int cuda::programMain(int argc, char **argv, const CudaProgramSpec &spec) {
  return runProgram(
      argc, argv, spec.mesh, spec.inputs, spec.outputs,
      [&](RankContext &rankCtx, const LaunchInfo &launch, bool ownProcess,
          const std::vector<HostTensor> &inputs, int64_t &bytesSent) {
        if (ownProcess)
          return runOnNccl(spec, rankCtx, launch, inputs, bytesSent);
        // Threads sharing device 0, through the host communicator.
        RankResources resources(rankCtx.rank, spec.mesh, spec.arenaBytes,
                                rankCtx.weightsDir);
        InProcessDeviceCommunicator device(*rankCtx.comm, rankCtx.rank);
        resources.ctx.communicator = &device;
        return spec.function(resources.ctx, inputs);
      },
      spec.inputTypes);
}

namespace {

/// A pipelined program's rank on the GPU: its resources and device
/// communicator for all its steps. As a process, the collectives of its
/// stages run over NCCL; as a thread, through the host communicator.
class GpuRank : public DeviceRank {
public:
  GpuRank(RankContext &rankCtx, const DeviceRankSpec &spec,
          std::optional<int> localRank) {
    std::optional<ncclUniqueId> id;
    if (localRank)
      id = joinNcclWorld(rankCtx, *localRank);
    resources = std::make_unique<RankResources>(
        rankCtx.rank, rankCtx.mesh, spec.arenaBytes, rankCtx.weightsDir);
    if (id) {
      nccl = std::make_unique<NcclCommunicator>(
          rankCtx.rank, int(rankCtx.mesh.size()), *id, rankCtx.timeout,
          resources->ctx, rankCtx.mesh, spec.communicators);
      resources->ctx.communicator = nccl.get();
    } else {
      threads = std::make_unique<InProcessDeviceCommunicator>(*rankCtx.comm,
                                                              rankCtx.rank);
      resources->ctx.communicator = threads.get();
    }
  }
  ~GpuRank() override {
    // The communicators go before the streams they issue on.
    nccl.reset();
    threads.reset();
    resources.reset();
  }
  Context &context() override { return resources->ctx; }
  int64_t bytesSent() const override { return nccl ? nccl->bytesSent() : 0; }

private:
  std::unique_ptr<RankResources> resources;
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<InProcessDeviceCommunicator> threads;
};

} // namespace

std::function<std::shared_ptr<RankBackend>(RankContext &)>
cuda::deviceRankSetup(const DeviceRankSpec &spec,
                      std::optional<int> localRank) {
  return
      [spec, localRank](RankContext &rankCtx) -> std::shared_ptr<RankBackend> {
        return std::make_shared<GpuRank>(rankCtx, spec, localRank);
      };
}
