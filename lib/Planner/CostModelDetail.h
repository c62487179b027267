//===- CostModelDetail.h - What the cost model's parts share ----*- C++ -*-===//
//
// Part of the Weft project. Private to lib/Planner.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_COSTMODELDETAIL_H
#define WEFT_PLANNER_COSTMODELDETAIL_H

#include "weft/plan.pb.h"

#include <algorithm>

namespace weft::planner::detail {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// Flash attention reaches this fraction of the GEMM efficiency (softmax and
/// masking inside the kernel).
constexpr double kAttentionEfficiency = 0.85;
/// Dropout as Megatron-LM trains GPT: after attention's probabilities, its
/// output projection and the MLP.
constexpr double kDropoutRatio = 0.1;
/// Mixed-precision Adam: bf16 weight, fp32 gradient (Megatron's main_grad),
/// fp32 master weight, momentum and variance.
constexpr double kWeightBytes = 2, kGradBytes = 4, kOptimizerBytes = 12;
/// Bytes an Adam step touches per parameter (reads and writes).
constexpr double kAdamBytesPerParam = 30;
/// cuBLAS workspace, NCCL buffers and allocator slack per GPU.
constexpr double kWorkspaceBytes = 1.0 * kGiB;

/// Model chunks per pipeline rank: the interleaved and ZeroPP schedules'
/// virtual stages, one for the others.
inline int virtualStages(const plan::Plan &plan) {
  return (plan.schedule() == plan::SCHEDULE_INTERLEAVED ||
          plan.schedule() == plan::SCHEDULE_ZEROPP)
             ? std::max(1, plan.virtual_stages())
             : 1;
}

} // namespace weft::planner::detail

#endif // WEFT_PLANNER_COSTMODELDETAIL_H
