//===- MpiCommunicator.h - One rank per process over MPI --------*- C++ -*-===//
//
// Part of the Weft project.
//
// Ranks as processes started by mpirun or srun. Each exchange is
// non-blocking point-to-point traffic on MPI_COMM_WORLD (no sub-communicator
// is created, so no call can block forever): the caller polls it against a
// deadline, and a member that never joins makes the others fail with the
// collective's name and the missing ranks, like the in-process communicator.
// After a failure the job should be aborted (abortJob), as NCCL's
// communicators are.
//
// The header needs no MPI; a runtime built without MPI says so at create().
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_MPICOMMUNICATOR_H
#define WEFT_RUNTIME_MPICOMMUNICATOR_H

#include "weft/runtime/Communicator.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace weft::rt {

class MpiCommunicator : public ExchangeCommunicator {
public:
  /// Initializes MPI (once per process) and checks that the world has
  /// `expectedWorldSize` ranks.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>>
  create(int expectedWorldSize, std::chrono::milliseconds timeout);
  ~MpiCommunicator() override;

  /// This process's rank in MPI_COMM_WORLD.
  int rank() const { return myRank; }
  /// Ends every process of the job with `code` (MPI_Abort).
  [[noreturn]] void abortJob(int code);

  /// Point-to-point on their own tag: a send is posted (its buffer kept
  /// until MPI is done with it) and returns; a receive probes for the
  /// peer's next tensor until the timeout.
  absl::Status send(int rank, int peer, const HostTensor &input,
                    Codec codec = Codec::None) override;
  absl::StatusOr<HostTensor> recv(int rank, int peer) override;

protected:
  absl::StatusOr<std::vector<HostTensor>>
  exchange(int rank, const std::vector<int> &group, const HostTensor &mine,
           const char *what) override;

private:
  /// Forgets the posted sends MPI is done with.
  void reapSends();

  MpiCommunicator(int worldSize, int rank, std::chrono::milliseconds timeout)
      : ExchangeCommunicator(worldSize), myRank(rank), timeout(timeout) {}

  int myRank;
  std::chrono::milliseconds timeout;
  std::map<std::string, int64_t> sequence;
  std::string broken;
  /// Posted sends (an MPI_Request, stored opaquely so that this header
  /// needs no MPI) and the bytes they send.
  struct PendingSend {
    std::shared_ptr<void> request;
    std::shared_ptr<std::string> bytes;
  };
  std::vector<PendingSend> pending;
};

/// Whether this runtime was built with MPI.
bool mpiAvailable();

} // namespace weft::rt

#endif // WEFT_RUNTIME_MPICOMMUNICATOR_H
