//===- Launch.h - Rank and world from the launcher's environment -*- C++ -*-===//
//
// Part of the Weft project.
//
// A generated program learns its rank from whoever started it: torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI's mpirun
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK) or Slurm's srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID). Nothing set means one process of one rank.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_RUNTIME_LAUNCH_H
#define WEFT_RUNTIME_LAUNCH_H

#include "absl/status/statusor.h"

#include <functional>
#include <string>

namespace weft::rt {

struct LaunchInfo {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  /// Where rank 0 listens to hand out the NCCL unique id (torchrun's store);
  /// empty when the launcher does not say (MPI exchanges it itself). The
  /// port is WEFT_STORE_PORT when set, else MASTER_PORT.
  std::string masterAddr;
  int masterPort = 0;
  /// The per-job secret every rank presents to the TCP store:
  /// WEFT_STORE_SECRET, else torchrun's TORCHELASTIC_RUN_ID (a random id
  /// under --standalone; not when it is "none"). Empty: the store accepts
  /// connections only on a loopback MASTER_ADDR.
  std::string storeSecret;
  /// "torchrun", "mpirun", "slurm" or "single".
  std::string launcher = "single";
};

/// Reads the launcher's variables through `getenv` (the process environment
/// by default). Errors name the variable: not a number, a rank outside the
/// world, a world size below 1.
absl::StatusOr<LaunchInfo> launchFromEnvironment(
    const std::function<const char *(const char *)> &getenv = nullptr);

/// A program partitioned for `expected` ranks refuses another world size.
absl::Status checkWorldSize(const LaunchInfo &info, int expected);

} // namespace weft::rt

#endif // WEFT_RUNTIME_LAUNCH_H
