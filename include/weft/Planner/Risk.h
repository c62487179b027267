//===- Risk.h - How sure the planner is, what a plan risks ------*- C++ -*-===//
//
// Part of the Weft project. docs/cost-model.md ("Robust answers") describes
// the band and the risk score.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PLANNER_RISK_H
#define WEFT_PLANNER_RISK_H

#include "weft/Planner/CostModel.h"

#include <string>
#include <vector>

namespace weft::planner {

/// The cost model's error on published runs it was not fitted to, as
/// measured/predicted step-time ratios.
struct ErrorBand {
  int rows = 0;
  /// 10th percentile, median and 90th percentile of measured / predicted.
  double low = 1, median = 1, high = 1;
  /// Standard deviation of log(measured / predicted): how far apart two
  /// plans' true times can be when the model calls them equal.
  double spread = 0;
};

/// The band of a set of measured/predicted ratios (none <= 0).
ErrorBand errorBandOf(std::vector<double> ratios);

/// The band `weft calibrate` measured on bench/calibration/validation.csv
/// when the cost model last changed. `weft calibrate` recomputes it and says
/// whether this copy is stale; test/Planner/calibrate-validation.test fails
/// if it is.
ErrorBand validationErrorBand();

/// What a plan risks beyond its predicted time: the parts of it the model
/// checks least against published runs, or that few frameworks run.
struct PlanRisk {
  double score = 0;
  std::vector<std::string> reasons;
};

/// With `reasons` false only the score is computed (cheap enough to filter
/// a search's candidates).
PlanRisk assessRisk(const plan::Plan &plan, const CostModel &model,
                    bool reasons = true);

/// Sets the plan's risks, risk score and the band of its step.
void annotateRisk(plan::Plan &plan, const CostModel &model,
                  const ErrorBand &band);

/// The outcome of preferring a lower-risk plan among near-equal ones.
struct RobustChoice {
  /// Index (in the list before reordering) of the plan now first; 0 when
  /// the fastest stays first.
  size_t chosen = 0;
  double tolerance = 0;
  double fastestStep = 0, chosenStep = 0;
  std::string fastest;
  PlanRisk fastestRisk, chosenRisk;
};

/// Among the plans (fastest first) whose predicted step is within
/// `tolerance` (relative) of the fastest, moves the one with the lowest
/// risk score to the front (ties: the faster). Annotates every plan
/// (annotateRisk).
RobustChoice preferRobust(std::vector<plan::Plan> &plans,
                          const CostModel &model, const ErrorBand &band,
                          double tolerance);

} // namespace weft::planner

#endif // WEFT_PLANNER_RISK_H
