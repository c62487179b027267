//===- Report.h - Tables, explanations, HTML and exports of plans -*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_REPORT_H
#define WEFT_PLANNER_REPORT_H

#include "weft/Plan/Plan.h"
#include "weft/Planner/CostModel.h"
#include "weft/Planner/Search.h"

#include "llvm/Support/raw_ostream.h"

namespace weft::planner {

/// The plans as a table: degrees, micro-batching, schedule, ZeRO, recompute,
/// step time, tokens/s, MFU, peak memory, bubble and communication share.
void printPlanTable(llvm::raw_ostream &os, llvm::ArrayRef<plan::Plan> plans);

/// One plan's time and memory breakdown, for --evaluate.
void printPlanBreakdown(llvm::raw_ostream &os, const plan::Plan &plan);

/// Why the first plan wins, what binds it, and what would change the answer
/// (re-costing it under changed memory, network and batch).
void explainPlans(llvm::raw_ostream &os, CostModel &model,
                  llvm::ArrayRef<plan::Plan> plans);

/// A self-contained HTML page (no network): the pipeline timeline of one
/// step of the first plan, memory per GPU by kind, time by kind and the
/// runner-up plans.
std::string renderHtmlReport(CostModel &model, const plan::PlanSet &plans);

/// Launch arguments or a config for `framework` (megatron, deepspeed,
/// torchtitan) that realize `plan`; an error when the framework cannot
/// express it.
llvm::Expected<std::string> exportPlan(const CostModel &model,
                                       const plan::Plan &plan,
                                       llvm::StringRef framework);

/// Why `framework` cannot run `plan`, or null when it can (also null-free for
/// an unknown framework). `weft plan --export F` searches only plans F runs.
const char *exportRestriction(const plan::Plan &plan, llvm::StringRef framework);

/// A one-line description: "dp=8 tp=8 pp=16 mbs=1 interleaved(v=3) ...".
std::string describePlan(const plan::Plan &plan);

} // namespace weft::planner

#endif // WEFT_PLANNER_REPORT_H
