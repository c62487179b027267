//===- Cluster.h - GPU catalog and cluster descriptions ---------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_CLUSTER_H
#define WEFT_PLANNER_CLUSTER_H

#include "weft/plan.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace weft::planner {

/// Names of the GPUs in the built-in catalog (v100-16g, v100-32g, a100-40g,
/// a100-80g, a800-80g, h100, h800, h200, b200).
std::vector<std::string> gpuCatalogNames();

/// The catalog entry for `name` (case-insensitive; "a100" and "a800" are the
/// 80 GB parts, "v100" the 32 GB one, "h100-sxm" and "h200-sxm" are
/// aliases), or an error listing the names.
llvm::Expected<plan::Gpu> lookupGpu(llvm::StringRef name);

/// For a catalog GPU whose efficiencies no calibration row fits (Volta,
/// Blackwell: borrowed from Ampere and Hopper), what `weft plan` says about
/// it; empty for the others and for GPUs described in a cluster file.
std::string uncalibratedGpuNote(const plan::Gpu &gpu);

/// True when the GPU's bf16 GEMMs run well below its fp16 ones (no bf16
/// tensor cores: V100), where training runs in fp16.
inline bool lacksBf16TensorCores(const plan::Gpu &gpu) {
  return gpu.bf16_tflops() * 2 < gpu.fp16_tflops();
}

/// A GPU before Ampere (V100, T4), where FlashAttention-2 does not run
/// (sm80 on): told by its missing bf16 tensor cores, which Ampere added.
inline bool predatesAmpere(const plan::Gpu &gpu) {
  return lacksBf16TensorCores(gpu);
}

/// Parses "GPU:PERNODExNODES" (e.g. "h100:8x128") or "GPU:N" (one node of N)
/// into a cluster with the GPU's usual node (NICs, latencies).
llvm::Expected<plan::Cluster> parseClusterShorthand(llvm::StringRef spec);

/// Reads a cluster from a JSON (.json) or protobuf text file. The `gpu` field
/// may give only a `name` from the catalog; fields that are set override it.
llvm::Expected<plan::Cluster> loadClusterFile(llvm::StringRef path);

/// `--cluster` accepts a shorthand or a file path.
llvm::Expected<plan::Cluster> resolveCluster(llvm::StringRef spec);

/// The largest cluster the planner takes: its search stays within seconds.
constexpr int64_t kMaxGpusPerNode = 1024;
constexpr int64_t kMaxTotalGpus = int64_t(1) << 20;

/// Checks that every rate and count is positive and finite, latencies and
/// overheads finite and not negative, and the size within the bounds above.
llvm::Error validateCluster(const plan::Cluster &cluster);

inline int64_t totalGpus(const plan::Cluster &cluster) {
  return static_cast<int64_t>(cluster.gpus_per_node()) * cluster.nodes();
}

} // namespace weft::planner

#endif // WEFT_PLANNER_CLUSTER_H
