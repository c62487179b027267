//===- Risk.cpp - How sure the planner is, and what a plan risks ----------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Risk.h"

#include "weft/Plan/Plan.h"

#include "weft/Planner/Report.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace weft;
using namespace weft::planner;

static double percentile(const std::vector<double> &sorted, double q) {
  if (sorted.empty())
    return 1;
  double at = q * double(sorted.size() - 1);
  size_t below = size_t(std::floor(at));
  size_t above = std::min(below + 1, sorted.size() - 1);
  double t = at - double(below);
  return sorted[below] * (1 - t) + sorted[above] * t;
}

ErrorBand planner::errorBandOf(std::vector<double> ratios) {
  ErrorBand band;
  ratios.erase(std::remove_if(ratios.begin(), ratios.end(),
                              [](double r) { return !(r > 0); }),
               ratios.end());
  band.rows = int(ratios.size());
  if (ratios.empty())
    return band;
  std::sort(ratios.begin(), ratios.end());
  band.low = percentile(ratios, 0.1);
  band.median = percentile(ratios, 0.5);
  band.high = percentile(ratios, 0.9);
  double mean = 0;
  for (double r : ratios)
    mean += std::log(r);
  mean /= double(ratios.size());
  double var = 0;
  for (double r : ratios)
    var += (std::log(r) - mean) * (std::log(r) - mean);
  band.spread =
      ratios.size() > 1 ? std::sqrt(var / double(ratios.size() - 1)) : 0;
  return band;
}

ErrorBand planner::validationErrorBand() {
  // Printed by `weft calibrate` ("error band"); update all five together.
  ErrorBand band;
  band.rows = 33;
  band.low = 0.962;
  band.median = 0.984;
  band.high = 1.065;
  band.spread = 0.059;
  return band;
}

PlanRisk planner::assessRisk(const plan::Plan &plan, const CostModel &model,
                             bool reasons) {
  PlanRisk risk;
  auto add = [&](double weight, const llvm::Twine &why) {
    risk.score += weight;
    if (reasons)
      risk.reasons.push_back(why.str());
  };
  const int64_t seq = model.training().seq_len();
  if (plan.pp() > 1) {
    int minLayers = plan.stage_layers_size() ? plan.stage_layers(0) : 0;
    for (int32_t n : plan.stage_layers())
      minLayers = std::min<int>(minLayers, n);
    add(plan.pp() > 16 ? 2 : 1,
        llvm::formatv("{0} pipeline stages: the pipelined validation rows "
                      "carry the model's largest errors, both ways (weft "
                      "calibrate)",
                      plan.pp()));
    // Interleaving splits each stage into v chunks of layers.
    double chunk = double(minLayers) / std::max(1, plan.virtual_stages());
    if (minLayers > 0 && chunk <= 2) {
      std::string layers = chunk == std::floor(chunk)
                               ? std::to_string(int(chunk))
                               : llvm::formatv("{0:F1}", chunk).str();
      add(1, llvm::formatv("stage chunks of {0} layer(s): sends, imbalance "
                           "and launch costs per stage weigh most here",
                           layers));
    }
    if (plan.num_micro_batches() < 2 * plan.pp())
      add(1, llvm::formatv("{0} micro-batches over {1} stages: the bubble "
                           "decides the step",
                           plan.num_micro_batches(), plan.pp()));
  }
  if (plan.schedule() == plan::SCHEDULE_INTERLEAVED)
    add(0.5, llvm::formatv("interleaved schedule: {0}x the pipeline sends",
                           plan.virtual_stages()));
  if (plan.schedule() == plan::SCHEDULE_ZB_H1 ||
      plan.schedule() == plan::SCHEDULE_ZEROPP)
    add(1, plan.schedule() == plan::SCHEDULE_ZB_H1
               ? "zero-bubble schedule: few frameworks run it"
               : "ZeroPP schedule: few frameworks run it; run and costed "
                 "as 1F1B (interleaved with chunks) gathering and "
                 "reducing once per block of micro-batches");
  const bool shortSeq = seq < 16384;
  if (plan.cp() > 1 && plan.cp_comm() == plan::CP_COMM_ALL_GATHER)
    add(shortSeq ? 2 : 0.5,
        llvm::formatv("{0}-way all-gather context parallelism at sequence "
                      "{1}{2}",
                      plan.cp(), seq,
                      shortSeq ? ": gathers for blocks this short rarely pay"
                               : ""));
  else if (plan.cp() > 1)
    add(shortSeq ? 2 : 0.5,
        llvm::formatv(
            "{0}-way ring attention at sequence {1}{2}", plan.cp(), seq,
            shortSeq ? ": blocks this short rarely pay for the ring" : ""));
  if (plan.ulysses() > 1)
    add(shortSeq ? 2 : 0.5,
        llvm::formatv("{0}-way Ulysses at sequence {1}{2}", plan.ulysses(), seq,
                      shortSeq ? ": all-to-alls this small rarely pay" : ""));
  if (plan.tp_across_nodes())
    add(2, "tensor parallelism across nodes");
  const int64_t kvHeads = model.model().kv_heads(),
                headWays = int64_t(plan.tp()) * plan.ulysses();
  if (kvHeads > 0 && headWays > kvHeads)
    add(1, llvm::formatv("KV heads ({0}) repeated {1}x to split over "
                         "tp*ulysses={2}: Weft's program repeats them, while "
                         "Megatron-Core and torchtitan need KV heads that "
                         "divide by tp (no calibration row runs this)",
                         kvHeads, headWays / kvHeads, headWays));
  if (uses3dTensorParallel(plan))
    add(1, llvm::formatv("AxoNN's 3-D tensor parallelism (tp3d={0}x{1}x{2}): "
                         "one published system runs it and no calibration "
                         "or validation row does; the overlap of its weight "
                         "gathers is the model's assumption",
                         plan.gx(), plan.gy(), plan.gz()));
  if (!plan.compress().empty())
    add(1, llvm::formatv("compressed collectives ({0}) change the training "
                         "numerics: compare the loss with an uncompressed run "
                         "(weft train --plan-spec ...,compress={0})",
                         plan.compress()));
  if (plan.zero_stage() == 3 && plan.schedule() != plan::SCHEDULE_ZEROPP)
    add(0.5, "ZeRO-3 gathers every layer's weights per micro-batch: the "
             "overlap the model assumes is fitted to FSDP runs within one "
             "node and checked on two across nodes (weft calibrate)");
  return risk;
}

void planner::annotateRisk(plan::Plan &plan, const CostModel &model,
                           const ErrorBand &band) {
  PlanRisk risk = assessRisk(plan, model);
  plan.clear_risks();
  for (const std::string &why : risk.reasons)
    plan.add_risks(why);
  plan.set_risk_score(risk.score);
  double step = plan.time().step_s();
  plan.mutable_time()->set_step_low_s(step * band.low);
  plan.mutable_time()->set_step_high_s(step * band.high);
}

RobustChoice planner::preferRobust(std::vector<plan::Plan> &plans,
                                   const CostModel &model,
                                   const ErrorBand &band, double tolerance) {
  RobustChoice choice;
  choice.tolerance = tolerance;
  if (plans.empty())
    return choice;
  for (plan::Plan &p : plans)
    annotateRisk(p, model, band);
  double limit = plans.front().time().step_s() * (1 + tolerance);
  size_t best = 0;
  for (size_t i = 1; i < plans.size(); ++i)
    if (plans[i].time().step_s() <= limit &&
        plans[i].risk_score() < plans[best].risk_score() - 1e-9)
      best = i;
  auto riskOf = [](const plan::Plan &p) {
    return PlanRisk{p.risk_score(), {p.risks().begin(), p.risks().end()}};
  };
  choice.chosen = best;
  choice.fastestStep = plans.front().time().step_s();
  choice.chosenStep = plans[best].time().step_s();
  choice.fastest = describePlan(plans.front());
  choice.fastestRisk = riskOf(plans.front());
  choice.chosenRisk = riskOf(plans[best]);
  if (best != 0)
    std::rotate(plans.begin(), plans.begin() + best, plans.begin() + best + 1);
  return choice;
}
