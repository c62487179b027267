//===- Network.cpp - Time of collectives on a cluster's links -------------===//
//
// Part of the Weft project. The model is described in docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Network.h"

#include <algorithm>
#include <cmath>

using namespace weft;
using namespace weft::planner;

double Network::collectiveTime(CollectiveKind kind, double bytes, int64_t size,
                               int64_t stride) const {
  if (size <= 1 || bytes <= 0 || kind == CollectiveKind::AllSlice)
    return 0;
  const plan::Gpu &gpu = cluster.gpu();
  const int64_t perNodeGpus = cluster.gpus_per_node();
  const double intraBw = gpu.nvlink_busbw_gbps() * 1e9;
  const double interBw = cluster.nics_per_node() * cluster.nic_gbits() / 8 *
                         1e9 * cluster.nic_efficiency() / perNodeGpus;
  const double alphaIntra = cluster.intra_node_latency_us() * 1e-6;
  const double alphaInter = cluster.inter_node_latency_us() * 1e-6;
  // Ranks of one group that share a node, and the nodes the group spans.
  int64_t perNode =
      stride >= perNodeGpus ? 1 : std::min<int64_t>(size, perNodeGpus / stride);
  perNode = std::max<int64_t>(perNode, 1);
  int64_t nodes = (size + perNode - 1) / perNode;

  auto flat = [&](CollectiveKind what, double s, int64_t n, double bw,
                  double alpha) -> double {
    if (n <= 1)
      return 0;
    double frac = double(n - 1) / n;
    switch (what) {
    case CollectiveKind::AllReduce: {
      double ring = 2 * frac * s / bw + 2 * (n - 1) * alpha;
      double tree = 2 * s / bw + 2 * std::log2(double(n)) * alpha;
      return std::min(ring, tree);
    }
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllToAll:
    case CollectiveKind::Broadcast:
      return frac * s / bw + (n - 1) * alpha;
    default:
      // Point to point (a ring step, a pipeline send).
      return s / bw + alpha;
    }
  };
  if (kind == CollectiveKind::Permute || kind == CollectiveKind::Send ||
      kind == CollectiveKind::Recv)
    return flat(kind, bytes, 2, nodes > 1 ? interBw : intraBw,
                nodes > 1 ? alphaInter : alphaIntra);
  if (nodes == 1)
    return flat(kind, bytes, size, intraBw, alphaIntra);
  if (perNode == 1)
    return flat(kind, bytes, size, interBw, alphaInter);
  // Hierarchical: inside the node over NVLink, across nodes on each GPU's
  // share of the NICs with 1/perNode of the data.
  if (kind == CollectiveKind::AllToAll) {
    double crossing = double(size - perNode) / size;
    return bytes * double(perNode - 1) / size / intraBw +
           bytes * crossing / interBw + (size - 1) * alphaInter;
  }
  if (kind == CollectiveKind::AllReduce)
    return flat(CollectiveKind::ReduceScatter, bytes, perNode, intraBw,
                alphaIntra) +
           flat(CollectiveKind::AllReduce, bytes / perNode, nodes, interBw,
                alphaInter) +
           flat(CollectiveKind::AllGather, bytes, perNode, intraBw, alphaIntra);
  return flat(kind, bytes, perNode, intraBw, alphaIntra) +
         flat(kind, bytes / perNode, nodes, interBw, alphaInter);
}
