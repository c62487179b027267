//===- MpiCommunicator.cpp - One rank per process over MPI ----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/MpiCommunicator.h"
#include "weft/runtime/TcpStore.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <thread>

#ifdef WEFT_RUNTIME_HAS_MPI
// The C API only: no MPI C++ bindings (deprecated, and another library).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

using namespace weft::rt;

#ifdef WEFT_RUNTIME_HAS_MPI

bool weft::rt::mpiAvailable() { return true; }

namespace {

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

/// Process-wide MPI state: initialized by the first communicator, finalized
/// at exit unless the job was aborted.
void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

} // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>>
MpiCommunicator::create(int expectedWorldSize,
                        std::chrono::milliseconds timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED,
                               &provided);
    if (code != MPI_SUCCESS)
      return absl::UnavailableError(
          absl::StrCat("MPI_Init failed: ", mpiError(code)));
    std::atexit(finalizeAtExit);
  }
  // Errors come back as codes, so that they are reported with the rank and
  // the collective instead of ending the job inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size != expectedWorldSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "the program was partitioned for ", expectedWorldSize,
        " ranks but MPI started ", size, " (run it with mpirun -np ",
        expectedWorldSize, ")"));
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(size, rank, timeout));
}

/// The tag of point-to-point tensors (collectives use 0 to 31999).
constexpr int kPointToPointTag = 32100;

MpiCommunicator::~MpiCommunicator() {
  // A posted send must be done before MPI finalizes; its receiver has it by
  // now unless the job failed, so wait at most the timeout.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
    reapSends();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void MpiCommunicator::abortJob(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void MpiCommunicator::reapSends() {
  std::vector<PendingSend> still;
  for (PendingSend &send : pending) {
    int flag = 0;
    MPI_Test(static_cast<MPI_Request *>(send.request.get()), &flag,
             MPI_STATUS_IGNORE);
    if (!flag)
      still.push_back(std::move(send));
  }
  pending = std::move(still);
}

absl::Status MpiCommunicator::send(int rank, int peer, const HostTensor &input,
                                   Codec codec) {
  if (!broken.empty())
    return absl::AbortedError(broken);
  if (rank != myRank || peer < 0 || peer >= worldSize() || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat("send on rank ", rank,
                                                   " (process rank ", myRank,
                                                   "): no peer rank ", peer));
  reapSends();
  auto bytes =
      std::make_shared<std::string>(serializeTensor(roundTrip(input, codec)));
  if (bytes->size() > size_t(INT_MAX))
    return absl::UnimplementedError(
        absl::StrCat("send on rank ", rank, ": a tensor of ", bytes->size(),
                     " bytes is too large for one MPI message"));
  auto request = std::make_shared<MPI_Request>();
  int code = MPI_Isend(bytes->data(), int(bytes->size()), MPI_BYTE, peer,
                       kPointToPointTag, MPI_COMM_WORLD, request.get());
  if (code != MPI_SUCCESS) {
    broken = absl::StrCat("send on rank ", rank, " to rank ", peer, ": ",
                          mpiError(code));
    return absl::InternalError(broken);
  }
  pending.push_back({request, bytes});
  countSent(rank, wireBytes(input, codec));
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> MpiCommunicator::recv(int rank, int peer) {
  if (!broken.empty())
    return absl::AbortedError(broken);
  if (rank != myRank || peer < 0 || peer >= worldSize() || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat("recv on rank ", rank,
                                                   " (process rank ", myRank,
                                                   "): no peer rank ", peer));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spin = 0;; ++spin) {
    reapSends();
    int flag = 0;
    MPI_Status status;
    int code =
        MPI_Iprobe(peer, kPointToPointTag, MPI_COMM_WORLD, &flag, &status);
    if (code != MPI_SUCCESS) {
      broken = absl::StrCat("recv on rank ", rank, " from rank ", peer, ": ",
                            mpiError(code));
      return absl::InternalError(broken);
    }
    if (flag) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      std::string bytes(size_t(std::max(count, 0)), '\0');
      code = MPI_Recv(bytes.data(), count, MPI_BYTE, peer, kPointToPointTag,
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (code != MPI_SUCCESS) {
        broken = absl::StrCat("recv on rank ", rank, " from rank ", peer, ": ",
                              mpiError(code));
        return absl::InternalError(broken);
      }
      return deserializeTensor(bytes);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      broken = absl::StrCat("recv on rank ", rank, " from rank ", peer,
                            " timed out after ", timeout.count(), " ms: rank ",
                            peer, " never sent");
      return absl::DeadlineExceededError(broken);
    }
    if (spin < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

absl::StatusOr<std::vector<HostTensor>>
MpiCommunicator::exchange(int rank, const std::vector<int> &group,
                          const HostTensor &mine, const char *what) {
  if (!broken.empty())
    return absl::AbortedError(broken);
  absl::StatusOr<size_t> position = indexIn(rank, group, what, myRank);
  if (!position.ok())
    return position.status();
  size_t index = *position;
  // Messages between two ranks arrive in the order sent (MPI's
  // non-overtaking rule) and every rank issues the same collectives in the
  // same order; the tag only separates a group's consecutive collectives.
  int tag = int(sequence[groupKey(group)]++ % 32000);
  if (mine.numel() > INT_MAX)
    return absl::UnimplementedError(absl::StrCat(
        what, ": a tensor of ", mine.numel(),
        " elements is too large for one MPI message"));
  int count = int(mine.numel());
  MPI_Datatype type = mine.isFloat() ? MPI_FLOAT : MPI_INT64_T;
  std::vector<HostTensor> all(group.size());
  all[index] = mine;
  std::vector<MPI_Request> receives, sends;
  std::vector<size_t> from;
  auto fail = [&](const std::string &why) {
    broken = why;
    return absl::InternalError(why);
  };
  for (size_t j = 0; j < group.size(); ++j) {
    if (j == index)
      continue;
    all[j] = HostTensor(mine.dtype, mine.shape);
    void *data = mine.isFloat() ? static_cast<void *>(all[j].floats.data())
                                : static_cast<void *>(all[j].ints.data());
    MPI_Request request;
    int code = MPI_Irecv(data, count, type, group[j], tag, MPI_COMM_WORLD,
                         &request);
    if (code != MPI_SUCCESS)
      return fail(absl::StrCat(what, " on rank ", rank,
                               ": receiving from rank ", group[j], ": ",
                               mpiError(code)));
    receives.push_back(request);
    from.push_back(j);
  }
  const void *payload = mine.isFloat()
                            ? static_cast<const void *>(mine.floats.data())
                            : static_cast<const void *>(mine.ints.data());
  for (size_t j = 0; j < group.size(); ++j) {
    if (j == index)
      continue;
    MPI_Request request;
    int code = MPI_Isend(payload, count, type, group[j], tag, MPI_COMM_WORLD,
                         &request);
    if (code != MPI_SUCCESS)
      return fail(absl::StrCat(what, " on rank ", rank, ": sending to rank ",
                               group[j], ": ", mpiError(code)));
    sends.push_back(request);
  }
  // Poll until every message is in or the deadline passes.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> received(receives.size(), false);
  size_t pending = receives.size() + sends.size();
  std::vector<bool> sent(sends.size(), false);
  for (int spin = 0; pending > 0; ++spin) {
    auto test = [&](std::vector<MPI_Request> &requests,
                    std::vector<bool> &done) -> absl::Status {
      for (size_t i = 0; i < requests.size(); ++i) {
        if (done[i])
          continue;
        int flag = 0;
        MPI_Status status;
        int code = MPI_Test(&requests[i], &flag, &status);
        if (code != MPI_SUCCESS)
          return absl::InternalError(mpiError(code));
        if (flag) {
          done[i] = true;
          --pending;
        }
      }
      return absl::OkStatus();
    };
    absl::Status status = test(receives, received);
    if (status.ok())
      status = test(sends, sent);
    if (!status.ok())
      return fail(absl::StrCat(what, " on rank ", rank, ": ",
                               status.message(),
                               " (do all ranks hold the same shapes?)"));
    if (pending == 0)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (size_t i = 0; i < receives.size(); ++i)
        if (!received[i])
          absl::StrAppend(&missing, missing.empty() ? "" : ", ",
                          group[from[i]]);
      if (missing.empty())
        missing = "(its messages were not taken)";
      return fail(absl::StrCat(what, " on rank ", rank, " timed out after ",
                               timeout.count(), " ms waiting for rank(s) ",
                               missing));
    }
    // Oversubscribed ranks share cores: yield, then sleep, while waiting.
    if (spin < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return all;
}

#else // !WEFT_RUNTIME_HAS_MPI

bool weft::rt::mpiAvailable() { return false; }

absl::StatusOr<std::unique_ptr<MpiCommunicator>>
MpiCommunicator::create(int, std::chrono::milliseconds) {
  return absl::UnimplementedError(
      "this Weft runtime was built without MPI (install libopenmpi-dev and "
      "rebuild), so it cannot run ranks as processes");
}

MpiCommunicator::~MpiCommunicator() = default;

void MpiCommunicator::abortJob(int code) { std::exit(code); }

void MpiCommunicator::reapSends() {}

absl::Status MpiCommunicator::send(int, int, const HostTensor &, Codec) {
  return absl::UnimplementedError("MPI is not available");
}

absl::StatusOr<HostTensor> MpiCommunicator::recv(int, int) {
  return absl::UnimplementedError("MPI is not available");
}

absl::StatusOr<std::vector<HostTensor>>
MpiCommunicator::exchange(int, const std::vector<int> &, const HostTensor &,
                          const char *) {
  return absl::UnimplementedError("MPI is not available");
}

#endif
