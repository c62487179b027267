//===- Launch.cpp - Rank and world from the launcher's environment --------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Launch.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <cstdlib>

using namespace weft::rt;

namespace {
/// The integer in `name`, if it is set.
absl::StatusOr<int> readInt(const std::function<const char *(const char *)> &env,
                            const char *name, int fallback, bool *present) {
  const char *value = env(name);
  if (present)
    *present = value != nullptr;
  if (!value)
    return fallback;
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed))
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", value, "' is not a number"));
  return parsed;
}
} // namespace

absl::StatusOr<LaunchInfo> weft::rt::launchFromEnvironment(
    const std::function<const char *(const char *)> &getenvFn) {
  std::function<const char *(const char *)> env =
      getenvFn ? getenvFn : [](const char *name) { return std::getenv(name); };
  struct Scheme {
    const char *launcher, *rank, *size, *local;
  };
  // torchrun first: it also runs under Slurm and may inherit SLURM_*.
  const Scheme schemes[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  LaunchInfo info;
  for (const Scheme &scheme : schemes) {
    bool hasRank = false, hasSize = false;
    auto rank = readInt(env, scheme.rank, 0, &hasRank);
    if (!rank.ok())
      return rank.status();
    auto size = readInt(env, scheme.size, 1, &hasSize);
    if (!size.ok())
      return size.status();
    if (!hasRank && !hasSize)
      continue;
    if (hasRank != hasSize)
      return absl::InvalidArgumentError(absl::StrCat(
          scheme.launcher, " sets ", hasRank ? scheme.rank : scheme.size,
          " but not ", hasRank ? scheme.size : scheme.rank));
    auto local = readInt(env, scheme.local, *rank, nullptr);
    if (!local.ok())
      return local.status();
    info.launcher = scheme.launcher;
    info.rank = *rank;
    info.worldSize = *size;
    info.localRank = *local;
    break;
  }
  if (info.worldSize < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("the world size is ", info.worldSize, "; it must be at least 1"));
  if (info.rank < 0 || info.rank >= info.worldSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", info.rank, " is outside a world of ", info.worldSize));
  if (const char *addr = env("MASTER_ADDR"))
    info.masterAddr = addr;
  auto port = readInt(env, "MASTER_PORT", 0, nullptr);
  if (!port.ok())
    return port.status();
  info.masterPort = *port;
  // The store's own port, where MASTER_PORT is taken (a launcher's agent
  // may serve its own store there).
  bool hasStorePort = false;
  auto storePort = readInt(env, "WEFT_STORE_PORT", 0, &hasStorePort);
  if (!storePort.ok())
    return storePort.status();
  if (hasStorePort)
    info.masterPort = *storePort;
  if (const char *secret = env("WEFT_STORE_SECRET"); secret && *secret)
    info.storeSecret = secret;
  else if (const char *run = env("TORCHELASTIC_RUN_ID");
           run && *run && std::string(run) != "none")
    info.storeSecret = run;
  return info;
}

absl::Status weft::rt::checkWorldSize(const LaunchInfo &info, int expected) {
  if (info.worldSize == expected)
    return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this program was partitioned for ", expected, " ranks, but ",
      info.launcher, " started ", info.worldSize,
      "; launch it with ", expected, " processes (or partition it again)"));
}
