//===- plan_api.cpp - Using Weft's planner from C++ -----------------------===//
//
// Part of the Weft project.
//
// The planner as a library: describe a model, a cluster and the training
// setup, search the plan space, print the best plans, then cost a plan of
// your own. Build: `ninja -C build plan-api-example`; run:
// `build/bin/plan-api-example [preset] [cluster] [global-batch]`.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Cluster.h"
#include "weft/Planner/CostModel.h"
#include "weft/Planner/Model.h"
#include "weft/Planner/Report.h"
#include "weft/Planner/Search.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <string>

using namespace weft;

int main(int argc, char **argv) {
  std::string preset = argc > 1 ? argv[1] : "llama3-70b";
  std::string clusterSpec = argc > 2 ? argv[2] : "h100:8x64";
  int64_t batch = argc > 3 ? std::atoll(argv[3]) : 512;

  // 1. The model: a preset (or fill a plan::ModelSpec yourself).
  llvm::Expected<plan::ModelSpec> model = planner::lookupPreset(preset);
  if (!model) {
    llvm::errs() << llvm::toString(model.takeError()) << "\n";
    return 1;
  }
  // 2. The cluster: shorthand, a file, or a plan::Cluster built in code.
  llvm::Expected<plan::Cluster> cluster =
      planner::parseClusterShorthand(clusterSpec);
  if (!cluster) {
    llvm::errs() << llvm::toString(cluster.takeError()) << "\n";
    return 1;
  }
  // 3. The training setup.
  plan::TrainingConfig training;
  training.set_global_batch(batch);
  training.set_seq_len(model->seq_len());
  training.set_dtype("bf16");
  training.set_memory_reserve_gib(2);
  training.set_flash_attention(true);

  // 4. Search.
  planner::CostModel costModel(*model, *cluster, training);
  planner::SearchOptions options;
  options.top = 3;
  planner::SearchResult result = planner::searchPlans(costModel, options);
  llvm::outs() << model->name() << " on " << cluster->name() << ": "
               << result.candidates << " candidates\n";
  if (result.plans.empty()) {
    llvm::outs() << "no plan fits\n";
    return 1;
  }
  planner::printPlanTable(llvm::outs(), result.plans);

  // 5. Cost a plan of your own and compare.
  auto mine = planner::parsePlanSpec("tp=8,pp=4,mbs=1,schedule=1f1b,zero=1",
                                     costModel);
  if (!mine) {
    llvm::errs() << llvm::toString(mine.takeError()) << "\n";
    return 1;
  }
  std::string why = costModel.checkPlan(*mine);
  if (!why.empty()) {
    llvm::outs() << "my plan cannot run: " << why << "\n";
    return 0;
  }
  costModel.evaluate(*mine);
  planner::printPlanBreakdown(llvm::outs(), *mine);
  llvm::outs() << llvm::format(
      "the search's best is %.2fx faster than my plan\n",
      mine->time().step_s() / result.plans[0].time().step_s());
  return 0;
}
