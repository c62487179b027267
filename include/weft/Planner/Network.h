//===- Network.h - Time of collectives on a cluster's links -----*- C++ -*-===//
//
// Part of the Weft project.
//
// The network part of the cost model: an alpha-beta time per collective
// algorithm (ring and tree all-reduce, ring all-gather / reduce-scatter /
// all-to-all, point to point) on the links a group spans: NVLink inside a
// node, each GPU's share of the node's NICs across nodes, and hierarchical
// collectives for groups that span both.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_NETWORK_H
#define WEFT_PLANNER_NETWORK_H

#include "weft/Dialect/WeftInterfaces.h"
#include "weft/plan.pb.h"

#include <cstdint>

namespace weft::planner {

/// The links of a cluster, and the time of a collective over them.
class Network {
public:
  explicit Network(const plan::Cluster &cluster) : cluster(cluster) {}
  /// Seconds for a collective of `kind` over `size` ranks `stride` apart
  /// in the cluster's rank order (consecutive ranks fill a node first),
  /// `bytes` being the full (gathered, or reduced) tensor; for point to
  /// point (permute, send, recv) the bytes one rank sends.
  double collectiveTime(CollectiveKind kind, double bytes, int64_t size,
                        int64_t stride) const;

private:
  const plan::Cluster &cluster;
};

} // namespace weft::planner

#endif // WEFT_PLANNER_NETWORK_H
