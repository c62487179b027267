//===- Report.cpp - Tables, explanations, HTML and exports of plans -------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Report.h"

#include "weft/Plan/Plan.h"
#include "weft/Planner/Cluster.h"
#include "weft/Planner/Model.h"

#include "google/protobuf/util/json_util.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace weft;
using namespace weft::planner;
using llvm::format;

std::string planner::describePlan(const plan::Plan &p) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "dp=" << p.dp() << " tp=" << p.tp() << " pp=" << p.pp();
  if (uses3dTensorParallel(p))
    os << " tp3d=" << p.gx() << "x" << p.gy() << "x" << p.gz();
  if (p.cp() > 1)
    os << " cp=" << p.cp()
       << (p.cp_comm() == plan::CP_COMM_ALL_GATHER ? "(all-gather)" : "");
  if (p.ulysses() > 1)
    os << " ulysses=" << p.ulysses();
  if (p.sequence_parallel())
    os << (p.tp_comm_overlap() ? " sp+overlap" : " sp");
  os << " mbs=" << p.micro_batch() << " m=" << p.num_micro_batches() << " "
     << scheduleName(p.schedule());
  if (p.virtual_stages() > 1)
    os << "(v=" << p.virtual_stages() << ")";
  os << " zero=" << p.zero_stage() << " recompute=" << recomputeName(p.recompute());
  if (!p.compress().empty())
    os << " compress=" << p.compress();
  return text;
}

static std::string scheduleCell(const plan::Plan &p) {
  std::string s = p.pp() == 1 ? "-" : scheduleName(p.schedule());
  if (p.virtual_stages() > 1)
    s += " v=" + std::to_string(p.virtual_stages());
  return s;
}

void planner::printPlanTable(llvm::raw_ostream &os,
                             llvm::ArrayRef<plan::Plan> plans) {
  // A compression column only when a plan compresses.
  bool compressed = llvm::any_of(
      plans, [](const plan::Plan &p) { return !p.compress().empty(); });
  os << format("%-3s %5s %3s %3s %3s %3s %-3s %4s %5s %-15s %4s %-9s %9s "
               "%10s %6s %9s %7s %6s",
               "#", "dp", "tp", "pp", "cp", "uly", "sp", "mbs", "m", "schedule",
               "zero", "recompute", "step(s)", "tokens/s", "MFU", "mem(GiB)",
               "bubble", "comm");
  // And a 3-D tensor-parallel column (Gx x Gy x Gz) only when a plan has
  // one.
  bool grid = llvm::any_of(
      plans, [](const plan::Plan &p) { return uses3dTensorParallel(p); });
  // And how cp exchanges K and V only when a plan gathers them.
  bool gathers = llvm::any_of(plans, [](const plan::Plan &p) {
    return p.cp() > 1 && p.cp_comm() == plan::CP_COMM_ALL_GATHER;
  });
  os << (grid ? "  tp3d " : "") << (gathers ? "  cp-comm" : "")
     << (compressed ? "  compress\n" : "\n");
  int rank = 0;
  for (const plan::Plan &p : plans) {
    ++rank;
    os << format("%-3d %5d %3d %3d %3d %3d %-3s %4d %5d %-15s %4d %-9s %9.4g "
                 "%10.4g %5.1f%% %9.1f %6.1f%% %5.1f%%",
                 rank, p.dp(), p.tp(), p.pp(), p.cp(), p.ulysses(),
                 p.sequence_parallel() ? "on" : "-", p.micro_batch(),
                 p.num_micro_batches(), scheduleCell(p).c_str(), p.zero_stage(),
                 recomputeName(p.recompute()), p.time().step_s(),
                 p.tokens_per_s(), 100 * p.mfu(), p.memory().total_gib(),
                 100 * p.time().bubble_fraction(),
                 100 * p.time().comm_fraction());
    if (grid)
      os << format("  %-5s",
                   uses3dTensorParallel(p)
                       ? (std::to_string(p.gx()) + "x" +
                          std::to_string(p.gy()) + "x" + std::to_string(p.gz()))
                             .c_str()
                       : "-");
    if (gathers)
      os << format("  %-10s", p.cp() <= 1 ? "-"
                              : p.cp_comm() == plan::CP_COMM_ALL_GATHER
                                  ? "all-gather"
                                  : "ring");
    if (compressed)
      os << "  " << (p.compress().empty() ? "-" : p.compress());
    os << "\n";
  }
}

void planner::printPlanBreakdown(llvm::raw_ostream &os, const plan::Plan &p) {
  const plan::TimeBreakdown &t = p.time();
  const plan::MemoryBreakdown &m = p.memory();
  os << "plan: " << describePlan(p) << "\n";
  os << "stages (layers):";
  for (int32_t n : p.stage_layers())
    os << ' ' << n;
  os << "\n";
  os << format("step %.3f s, %.4g tokens/s, MFU %.1f%%, %.1f model TFLOP/s "
               "per GPU, %lld GPUs\n",
               t.step_s(), p.tokens_per_s(), 100 * p.mfu(),
               p.model_tflops_per_gpu(), (long long)p.gpus_used());
  os << format("time (busiest stage): compute %.3f s, recompute %.3f s, tp "
               "comm %.3f s exposed of %.3f s, cp/ulysses comm %.3f s exposed "
               "of %.3f s, pp comm %.3f s, bubble %.3f s (%.1f%%), dp comm "
               "%.3f s exposed of %.3f s, optimizer %.3f s\n",
               t.compute_s(), t.recompute_s(), t.tp_comm_s(),
               t.tp_comm_total_s(), t.cp_comm_s(), t.cp_comm_total_s(),
               t.pp_comm_s(), t.bubble_s(), 100 * t.bubble_fraction(),
               t.dp_comm_exposed_s(), t.dp_comm_total_s(), t.optimizer_s());
  os << "forward communication per rank and micro-batch: "
     << p.forward_comm_bytes_layer() << " bytes per layer, "
     << p.forward_comm_bytes_embedding() << " for the embedding, "
     << p.forward_comm_bytes_head() << " for the output layer\n";
  if (p.has_step_comm()) {
    const plan::StepCommunication &c = p.step_comm();
    if (!c.missing().empty()) {
      os << "training step communication: not counted (" << c.missing()
         << ")\n";
    } else if (c.pipeline_rank_step_size() > 0) {
      os << "training step communication per rank (counted on the step weft "
            "train builds), by pipeline stage:";
      for (int r = 0; r < c.pipeline_rank_step_size(); ++r)
        os << (r ? "," : "") << " " << c.pipeline_rank_step(r) << " bytes ("
           << (r < c.pipeline_rank_p2p_size() ? c.pipeline_rank_p2p(r) : 0)
           << " to neighbouring stages)";
      os << "\n";
    } else
      os << "training step communication per rank (counted on the step weft "
            "train builds): "
         << c.step() << " bytes; per micro-batch " << c.layer_forward()
         << " forward and " << c.layer_backward()
         << " backward per layer, embedding " << c.embedding_forward() << " + "
         << c.embedding_backward() << ", output layer and loss " << c.head()
         << "; gradient reduction " << c.gradient_reduction()
         << (c.reduction_per_micro_batch() ? " per micro-batch" : "")
         << ", optimizer step " << c.optimizer() << "\n";
  }
  std::string frozen;
  if (m.frozen_weights_gib() > 0)
    llvm::raw_string_ostream(frozen)
        << format(" (%.3g frozen)", m.frozen_weights_gib());
  os << format("memory per GPU (worst stage): weights %.1f%s, gradients %.1f, "
               "optimizer %.1f, activations %.1f, workspace %.1f = %.1f GiB "
               "of %.1f GiB%s\n",
               m.weights_gib(), frozen.c_str(), m.gradients_gib(),
               m.optimizer_gib(), m.activations_gib(), m.workspace_gib(),
               m.total_gib(), m.capacity_gib(),
               p.fits() ? "" : "  (does NOT fit)");
}

//===----------------------------------------------------------------------===//
// --explain
//===----------------------------------------------------------------------===//

void planner::explainPlans(llvm::raw_ostream &os, CostModel &model,
                           llvm::ArrayRef<plan::Plan> plans) {
  if (plans.empty())
    return;
  const plan::Plan &win = plans.front();
  const plan::TimeBreakdown &t = win.time();
  os << "Why this plan: " << describePlan(win) << "\n";
  if (plans.size() > 1) {
    const plan::Plan &next = plans[1];
    double gain = next.time().step_s() / t.step_s() - 1;
    if (gain <= -1e-3) {
      // The plans were reordered for their risks (weft plan's robust
      // choice): the runner-up is the faster one.
      os << format("  - the runner-up (%s) is predicted %.1f%% faster; this "
                   "plan goes first for its fewer risks, the difference being "
                   "within the model's error.\n",
                   describePlan(next).c_str(),
                   100 * (t.step_s() / next.time().step_s() - 1));
    } else if (gain < 1e-3) {
      os << "  - within 0.1% of the runner-up (" << describePlan(next)
         << "): the two are equally good as far as the model can tell (its "
            "error is larger).\n";
    } else {
      os << format("  - %.1f%% faster than the runner-up (%s).", 100 * gain,
                   describePlan(next).c_str());
      struct Diff {
        const char *what;
        double delta;
      };
      Diff diffs[] = {
          {"pipeline bubble", next.time().bubble_s() - t.bubble_s()},
          {"tensor-parallel communication",
           next.time().tp_comm_s() - t.tp_comm_s()},
          {"sequence-parallel communication",
           next.time().cp_comm_s() - t.cp_comm_s()},
          {"recomputation", next.time().recompute_s() - t.recompute_s()},
          {"exposed data-parallel communication",
           next.time().dp_comm_exposed_s() - t.dp_comm_exposed_s()},
          {"compute (GEMM efficiency)",
           next.time().compute_s() - t.compute_s()},
      };
      const Diff *largest = &diffs[0];
      for (const Diff &d : diffs)
        if (d.delta > largest->delta)
          largest = &d;
      if (largest->delta > 0)
        os << format(" The runner-up loses most to %s (%.3f s more per step).",
                     largest->what, largest->delta);
      os << "\n";
    }
  }
  // What binds.
  double memoryShare = win.memory().total_gib() / win.memory().capacity_gib();
  os << "What binds:\n";
  os << format("  - memory: %.1f of %.1f GiB (%.0f%%)%s\n",
               win.memory().total_gib(), win.memory().capacity_gib(),
               100 * memoryShare,
               memoryShare > 0.85 ? ": memory decides the plan" : "");
  if (win.pp() > 1)
    os << format("  - pipeline bubble: %.1f%% of the step with %d "
                 "micro-batches over %d stages\n",
                 100 * t.bubble_fraction(), win.num_micro_batches(), win.pp());
  double comm[] = {t.tp_comm_s(), t.cp_comm_s(), t.pp_comm_s(),
                   t.dp_comm_exposed_s()};
  const char *links[] = {"tensor parallel on NVLink",
                         "context/Ulysses parallel",
                         "pipeline sends between nodes",
                         "data-parallel gradients across nodes (NICs)"};
  int worst = int(std::max_element(std::begin(comm), std::end(comm)) - comm);
  os << format("  - communication: %.1f%% of the step, mostly %s (%.3f s)\n",
               100 * t.comm_fraction(), links[worst], comm[worst]);
  if (win.recompute() != plan::RECOMPUTE_NONE)
    os << format("  - recomputation costs %.3f s per step\n", t.recompute_s());
  if (win.cp() > 1 && win.cp_comm() != plan::CP_COMM_ALL_GATHER) {
    // The ring's layout, by -weft-apply-plan's rule (a decoder's layers are
    // causal).
    const plan::ModelSpec &m = model.model();
    const int64_t seq = model.training().seq_len();
    if (!ringLoadBalanced(m, seq))
      os << format("  - the ring keeps contiguous chunks of %lld positions: "
                   "the sliding window (%lld) is at most an eighth of the "
                   "sequence, so each rank past the first does the same "
                   "work, and a block reaches only the ranks after it\n",
                   static_cast<long long>(seq / win.cp()),
                   static_cast<long long>(m.sliding_window()));
    else
      os << format("  - the ring is load-balanced: each rank holds two "
                   "mirrored chunks of %lld positions, so causal attention "
                   "gives every rank the same work\n",
                   static_cast<long long>(seq / win.cp() / 2));
  }

  // What would change the answer: re-cost the winner under changes.
  os << "What would change the answer:\n";
  if (win.recompute() != plan::RECOMPUTE_NONE) {
    plan::Plan without = win;
    without.set_recompute(plan::RECOMPUTE_NONE);
    without.clear_stage_layers();
    model.evaluate(without);
    if (without.fits())
      os << "  - (recomputation is kept for memory headroom only)\n";
    else
      os << format("  - without recomputation it would take %.3f s per step "
                   "but needs %.1f GiB per GPU (%.1f GiB more)\n",
                   without.time().step_s(), without.memory().total_gib(),
                   without.memory().total_gib() -
                       without.memory().capacity_gib());
  }
  {
    plan::Cluster faster = model.cluster();
    faster.set_nic_gbits(faster.nic_gbits() * 2);
    CostModel alt(model.model(), faster, model.training());
    plan::Plan copy = win;
    alt.evaluate(copy);
    os << format("  - twice the inter-node bandwidth: %.3f s per step "
                 "(%.1f%% faster) for this plan\n",
                 copy.time().step_s(),
                 100 * (t.step_s() / copy.time().step_s() - 1));
  }
  if (model.training().launch_blocking()) {
    // What CUDA_LAUNCH_BLOCKING=1 costs this plan: its host time per kernel
    // and the overlaps it forbids.
    plan::TrainingConfig async = model.training();
    async.set_launch_blocking(false);
    CostModel alt(model.model(), model.cluster(), async);
    plan::Plan copy = win;
    alt.evaluate(copy);
    os << format("  - asynchronous launches (without CUDA_LAUNCH_BLOCKING=1): "
                 "%.3f s per step (%.1f%% faster) for this plan\n",
                 copy.time().step_s(),
                 100 * (t.step_s() / copy.time().step_s() - 1));
  }
  if (win.pp() > 1) {
    plan::TrainingConfig bigger = model.training();
    bigger.set_global_batch(bigger.global_batch() * 2);
    CostModel alt(model.model(), model.cluster(), bigger);
    plan::Plan copy = win;
    copy.set_num_micro_batches(win.num_micro_batches() * 2);
    alt.evaluate(copy);
    os << format("  - twice the global batch: bubble %.1f%% instead of "
                 "%.1f%%, MFU %.1f%%\n",
                 100 * copy.time().bubble_fraction(),
                 100 * t.bubble_fraction(), 100 * copy.mfu());
  }
}

//===----------------------------------------------------------------------===//
// HTML
//===----------------------------------------------------------------------===//

static std::string escape(llvm::StringRef text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string planner::renderHtmlReport(CostModel &model,
                                      const plan::PlanSet &set) {
  std::string html;
  llvm::raw_string_ostream os(html);
  if (set.plans().empty())
    return "";
  plan::Plan win = set.plans(0);
  std::vector<TimelineEvent> timeline;
  model.evaluate(win, &timeline);
  const double step = win.time().step_s();
  const int stages = win.pp();

  os << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>Weft "
        "plan: "
     << escape(set.model().name()) << " on " << escape(set.cluster().name())
     << "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:"
        "3px 8px;text-align:right}th{background:#eee}.k{display:inline-block;"
        "width:12px;height:12px;margin:0 4px 0 12px}</style></head><body>\n";
  os << "<h1>" << escape(set.model().name()) << " on "
     << escape(set.cluster().name()) << "</h1>\n";
  os << "<p>" << escape(describePlan(win)) << "<br>"
     << format("step %.3f s, %.4g tokens/s, MFU %.1f%%, peak memory %.1f GiB "
               "of %.1f GiB; %lld candidate plans evaluated in %.3f s",
               step, win.tokens_per_s(), 100 * win.mfu(),
               win.memory().total_gib(), win.memory().capacity_gib(),
               (long long)set.candidates_evaluated(), set.search_seconds())
     << "</p>\n";

  // Timeline.
  const char *colors[] = {"#4e79a7", "#59a14f", "#a0cbe8", "#f28e2b",
                          "#9c9c9c"};
  const char *names[] = {"forward", "backward", "weight gradient",
                         "data-parallel communication", "optimizer"};
  const double width = 1100, rowHeight = 18, left = 70;
  os << "<h2>Pipeline timeline of one step</h2>\n<p>";
  for (int k = 0; k < 5; ++k)
    os << "<span class=\"k\" style=\"background:" << colors[k] << "\"></span>"
       << names[k];
  os << "</p>\n<svg id=\"timeline\" width=\"" << width + left + 10
     << "\" height=\"" << stages * rowHeight + 30
     << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  for (int s = 0; s < stages; ++s)
    os << "<text x=\"0\" y=\"" << s * rowHeight + 13
       << "\" font-size=\"11\">stage " << s << "</text>\n";
  for (const TimelineEvent &e : timeline) {
    double x = left + e.start / step * width;
    double w = std::max(0.3, (e.end - e.start) / step * width);
    os << "<rect class=\"ev\" x=\"" << format("%.2f", x) << "\" y=\""
       << e.stage * rowHeight + 2 << "\" width=\"" << format("%.2f", w)
       << "\" height=\"" << rowHeight - 4 << "\" fill=\"" << colors[e.kind]
       << "\"><title>" << names[e.kind];
    if (e.microBatch >= 0)
      os << " mb " << e.microBatch << " chunk " << e.chunk;
    os << format(" %.4f-%.4f s", e.start, e.end) << "</title></rect>\n";
  }
  os << "<text x=\"" << left << "\" y=\"" << stages * rowHeight + 24
     << "\" font-size=\"11\">0 s</text><text x=\"" << left + width - 60
     << "\" y=\"" << stages * rowHeight + 24 << "\" font-size=\"11\">"
     << format("%.3f s", step) << "</text>\n</svg>\n";

  // Memory per stage by kind.
  const char *memColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                             "#9c9c9c"};
  const char *memNames[] = {"weights", "gradients", "optimizer states",
                            "activations", "workspace"};
  double capacity = win.memory().capacity_gib();
  double scale = 700 / std::max(capacity, win.memory().total_gib());
  os << "<h2>Memory per GPU by kind (GiB)</h2>\n<p>";
  for (int k = 0; k < 5; ++k)
    os << "<span class=\"k\" style=\"background:" << memColors[k]
       << "\"></span>" << memNames[k];
  os << "</p>\n<svg id=\"memory\" width=\"900\" height=\""
     << win.stage_memory_size() * rowHeight + 20
     << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  for (int s = 0; s < win.stage_memory_size(); ++s) {
    const plan::MemoryBreakdown &m = win.stage_memory(s);
    double parts[] = {m.weights_gib(), m.gradients_gib(), m.optimizer_gib(),
                      m.activations_gib(), m.workspace_gib()};
    double x = left;
    os << "<text x=\"0\" y=\"" << s * rowHeight + 13
       << "\" font-size=\"11\">stage " << s << "</text>\n";
    for (int k = 0; k < 5; ++k) {
      double w = parts[k] * scale;
      os << "<rect class=\"mem\" x=\"" << format("%.2f", x) << "\" y=\""
         << s * rowHeight + 2 << "\" width=\"" << format("%.2f", w)
         << "\" height=\"" << rowHeight - 4 << "\" fill=\"" << memColors[k]
         << "\"><title>" << memNames[k] << format(" %.2f GiB", parts[k])
         << "</title></rect>\n";
      x += w;
    }
    os << "<text x=\"" << format("%.1f", x + 4) << "\" y=\""
       << s * rowHeight + 13 << "\" font-size=\"11\">"
       << format("%.1f", m.total_gib()) << "</text>\n";
  }
  os << "<line x1=\"" << format("%.1f", left + capacity * scale)
     << "\" x2=\"" << format("%.1f", left + capacity * scale)
     << "\" y1=\"0\" y2=\"" << win.stage_memory_size() * rowHeight
     << "\" stroke=\"red\"><title>capacity</title></line>\n</svg>\n";

  // Time by kind.
  const plan::TimeBreakdown &t = win.time();
  double kinds[] = {t.compute_s(), t.recompute_s(), t.tp_comm_s(),
                    t.cp_comm_s(), t.pp_comm_s(), t.bubble_s(),
                    t.dp_comm_exposed_s(), t.optimizer_s()};
  const char *kindNames[] = {"compute", "recompute", "tp comm",
                             "cp/ulysses comm", "pp comm", "bubble",
                             "dp comm (exposed)", "optimizer"};
  os << "<h2>Time by kind (busiest stage, s)</h2>\n<table><tr>";
  for (const char *name : kindNames)
    os << "<th>" << name << "</th>";
  os << "</tr><tr>";
  for (double value : kinds)
    os << "<td>" << format("%.3f", value) << "</td>";
  os << "</tr></table>\n";

  // Runner-ups.
  os << "<h2>Plans</h2>\n<table id=\"plans\"><tr><th>#</th><th>plan</th><th>"
        "step (s)</th><th>tokens/s</th><th>MFU</th><th>memory (GiB)</th>"
        "<th>bubble</th><th>comm</th></tr>\n";
  for (int i = 0; i < set.plans_size(); ++i) {
    const plan::Plan &p = set.plans(i);
    os << "<tr><td>" << i + 1 << "</td><td style=\"text-align:left\">"
       << escape(describePlan(p)) << "</td><td>"
       << format("%.3f", p.time().step_s()) << "</td><td>"
       << format("%.4g", p.tokens_per_s()) << "</td><td>"
       << format("%.1f%%", 100 * p.mfu()) << "</td><td>"
       << format("%.1f", p.memory().total_gib()) << "</td><td>"
       << format("%.1f%%", 100 * p.time().bubble_fraction()) << "</td><td>"
       << format("%.1f%%", 100 * p.time().comm_fraction())
       << "</td></tr>\n";
  }
  os << "</table>\n";
  // A self-check that a browser runs: counts what was drawn.
  os << "<p id=\"render-check\"></p>\n<script>\n"
        "document.getElementById('render-check').textContent = "
        "'rendered: timeline boxes=' + "
        "document.querySelectorAll('#timeline rect.ev').length + "
        "' memory bars=' + document.querySelectorAll('#memory "
        "rect.mem').length + ' plans=' + (document.querySelectorAll('#plans "
        "tr').length - 1) + ' timeline width=' + "
        "Math.round(document.getElementById('timeline').getBBox().width);\n"
        "</script>\n</body></html>\n";
  return html;
}

//===----------------------------------------------------------------------===//
// Exports
//===----------------------------------------------------------------------===//

namespace {
/// How Megatron-LM lays out an interleaved plan's chunks (weft::chunkLayers).
enum class MegatronChunks { Even, EdgesShort, None };
} // namespace

static MegatronChunks megatronChunks(const plan::Plan &p) {
  if (p.stage_layers_size() != p.pp())
    return MegatronChunks::Even; // not laid out yet: the cost model's even
  std::vector<int64_t> chunks = chunkLayers(
      std::vector<int64_t>(p.stage_layers().begin(), p.stage_layers().end()),
      std::max(1, p.virtual_stages()));
  bool even = true, edges = chunks.size() > 2;
  for (size_t i = 0; i < chunks.size(); ++i) {
    even &= chunks[i] == chunks[0];
    bool edge = i == 0 || i + 1 == chunks.size();
    edges &= chunks[i] == chunks[1] - (edge ? 1 : 0);
  }
  return even    ? MegatronChunks::Even
         : edges ? MegatronChunks::EdgesShort
                 : MegatronChunks::None;
}

const char *planner::exportRestriction(const plan::Plan &p,
                                       llvm::StringRef framework) {
  if (framework == "megatron") {
    if (p.ulysses() > 1)
      return "Megatron-LM has no Ulysses all-to-all attention; choose a plan "
             "with ulysses=1 (its context parallelism is the ring, cp=)";
    if (p.schedule() == plan::SCHEDULE_ZB_H1 ||
        p.schedule() == plan::SCHEDULE_ZEROPP ||
        p.schedule() == plan::SCHEDULE_GPIPE)
      return "Megatron-LM runs 1F1B and interleaved 1F1B only";
    if (p.zero_stage() >= 2)
      return "Megatron-LM's distributed optimizer is ZeRO-1; ZeRO-2/3 plans "
             "need DeepSpeed or torchtitan (FSDP)";
    if (p.recompute() == plan::RECOMPUTE_OP)
      return "Megatron-LM recomputes full layers or the attention core "
             "(selective); recompute=op is torchtitan's per-op policy: choose "
             "recompute=selective or full";
    if (p.schedule() == plan::SCHEDULE_INTERLEAVED &&
        megatronChunks(p) == MegatronChunks::None)
      return "Megatron-LM's interleaved chunks hold equal layers (or, with "
             "--account-for-embedding-in-pipeline-split and "
             "--account-for-loss-in-pipeline-split, one fewer in the first "
             "and the last); choose a plan whose chunks do";
  } else if (framework == "deepspeed") {
    if (p.schedule() != plan::SCHEDULE_1F1B)
      return "DeepSpeed's pipeline engine runs 1F1B only";
    if (p.cp() > 1)
      return "DeepSpeed has no ring attention; choose a plan with cp=1 (its "
             "sequence parallelism is Ulysses)";
    if (p.pp() > 1 && p.zero_stage() >= 2)
      return "DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 only";
    // AutoTP training is tensor x data parallelism with ZeRO 0-2 on a
    // Hugging Face model (deepspeed.ai/tutorials/autotp-training).
    if (p.tp() > 1 && p.zero_stage() == 3)
      return "DeepSpeed's tensor parallelism (AutoTP) combines with ZeRO "
             "stages 0-2, not ZeRO-3: choose zero<=2 or tp=1";
    if (p.tp() > 1 && p.pp() > 1)
      return "DeepSpeed's tensor parallelism (AutoTP) shards a Hugging Face "
             "model, not the pipeline engine's stages: choose tp=1 or pp=1, "
             "or --export megatron (Megatron-DeepSpeed's tp with pipeline)";
    if (p.sequence_parallel())
      return "DeepSpeed's tensor parallelism (AutoTP) has no Megatron "
             "sequence parallelism: choose sp=0, or --export megatron";
    if (p.recompute() == plan::RECOMPUTE_OP ||
        p.recompute() == plan::RECOMPUTE_SELECTIVE)
      return "DeepSpeed checkpoints whole layers (the pipeline's "
             "activation_checkpoint_interval); recompute=selective "
             "(Megatron's attention core) and recompute=op (torchtitan's "
             "per-op policy) have no DeepSpeed setting: choose recompute=full "
             "or none, or --export megatron for selective";
  } else if (framework == "torchtitan") {
    if (p.ulysses() > 1)
      return "torchtitan has no Ulysses attention; choose a plan with "
             "ulysses=1";
    if (p.zero_stage() == 1 || p.zero_stage() == 2)
      return "torchtitan shards with FSDP2 (ZeRO-3) or replicates (ZeRO-0); "
             "choose zero=0 or zero=3";
    if (p.recompute() == plan::RECOMPUTE_SELECTIVE)
      return "torchtitan has no attention-core checkpointing (Megatron's "
             "recompute=selective); its selective modes are per op "
             "(recompute=op) and every n-th layer: choose recompute=op, full "
             "or none";
  }
  return nullptr;
}

/// Llama 3.1's rope_scaling (llama3: low and high frequency factors 1 and
/// 4 over 8,192 tokens), which Megatron-LM's --use-rope-scaling fixes.
static bool llama31Scaling(const plan::RopeScaling &rope) {
  return rope.type() == "llama3" && rope.low_freq_factor() == 1 &&
         rope.high_freq_factor() == 4 && rope.original_context() == 8192;
}

llvm::Expected<std::string> planner::exportPlan(const CostModel &model,
                                                const plan::Plan &p,
                                                llvm::StringRef framework) {
  const plan::ModelSpec &m = model.model();
  const plan::TrainingConfig &tr = model.training();
  std::string text;
  llvm::raw_string_ostream os(text);
  bool swiglu = m.ffn_kind() == plan::FFN_SWIGLU;
  if (framework != "megatron" && framework != "deepspeed" &&
      framework != "torchtitan")
    return llvm::createStringError("unknown framework '" + framework.str() +
                                   "'; use megatron, deepspeed or torchtitan");
  if (const char *why = exportRestriction(p, framework))
    return llvm::createStringError(why);
  if (m.vocab() == 0)
    return llvm::createStringError(
        "the model reads features, not token ids (a vision transformer's "
        "pixels): the exported launchers pretrain language models only; run "
        "Weft's own program (weft compile)");
  if (m.ffn_kind() == plan::FFN_GEGLU)
    return llvm::createStringError(
        "the model's MLP is gated by another activation than SiLU (GeGLU, as "
        "Gemma's): the exported launchers know GELU and SwiGLU MLPs only");
  if (m.sliding_window() > 0 || m.mixed_sliding_window() > 0)
    return llvm::createStringError(
        "the model attends through a sliding window of " +
        std::to_string(std::max(m.sliding_window(), m.mixed_sliding_window())) +
        " keys" + (m.mixed_sliding_window() > 0 ? " on some layers" : "") +
        ": the exported launchers set full causal attention only; run "
        "Weft's own program (weft compile / weft train)");
  if (m.attention_softcap() > 0)
    return llvm::createStringError(
        llvm::formatv("the model soft-caps its attention scores at {0}: the "
                      "exported launchers set plain softmax attention; run "
                      "Weft's own program (weft compile / weft train)",
                      llvm::format("%g", m.attention_softcap()))
            .str());
  // Megatron-Core's --qk-layernorm norms each head's queries and keys.
  if (m.qk_norm() && m.qk_norm_layout() != plan::QK_NORM_SHARED)
    return llvm::createStringError(
        m.qk_norm_layout() == plan::QK_NORM_WHOLE
            ? "the model norms its queries and keys across all heads at once "
              "(OLMo 2's QK norm): Megatron-LM's --qk-layernorm norms each "
              "head; run Weft's own program (weft compile / weft train)"
            : "the model norms each head's queries and keys with a weight per "
              "head (Cohere's use_qk_norm, StableLM's qk_layernorm): "
              "Megatron-LM's --qk-layernorm shares one weight; run Weft's "
              "own program (weft compile / weft train)");
  if (m.post_norms())
    return llvm::createStringError(
        "the model norms each branch's output and not its input (OLMo 2's "
        "norm placement): the exported launchers norm before each branch; "
        "run Weft's own program (weft compile / weft train)");
  if (m.qk_norm() && framework != "megatron")
    return llvm::createStringError(
        "the model norms each head's queries and keys (Qwen3's and Gemma 3's "
        "QK norm), which " +
        framework.str() +
        "'s launcher does not set; export for megatron (--qk-layernorm), or "
        "run Weft's own program (weft compile / weft train)");
  if (m.sandwich_norms() || m.logit_softcap() > 0 || m.embedding_scale() > 0 ||
      m.attention_scale() > 0 || m.residual_scale() > 0 ||
      m.logit_divisor() > 0)
    return llvm::createStringError(
        "the model scales its embeddings, scores, branches or logits, or "
        "norms each branch's output too (Gemma's and Granite's arithmetic): "
        "the exported launchers "
        "build LLaMA's and GPT's blocks; run Weft's own program (weft "
        "compile / weft train)");
  if (m.value_head_dim() > 0)
    return llvm::createStringError(
        "the model's values are " + std::to_string(m.value_head_dim()) +
        " wide per head, not as wide as its queries and keys (DeepSeek's "
        "multi-head latent attention): the exported launchers set standard "
        "attention; run Weft's own program (weft compile / weft train)");
  if (m.alibi())
    return llvm::createStringError(
        "the model's positions are ALiBi's biases on the attention scores "
        "(BLOOM, MPT): the exported launchers set rotary or learned "
        "positions; run Weft's own program (weft compile / weft train)");
  if (normKind(m) != (swiglu ? plan::NORM_RMS : plan::NORM_LAYER))
    return llvm::createStringError(
        "the model's norms are not its FFN kind's in the exported launchers "
        "(RMSNorm with SwiGLU, LayerNorm with a bias with GELU: StableLM's, "
        "Cohere's, OLMo's and MPT's differ); run Weft's own program (weft "
        "compile / weft train)");
  if (const plan::RopeScaling &rope = m.rope_scaling(); !rope.type().empty()) {
    const bool megatronLlama3 = llama31Scaling(rope);
    const bool megatronLinear =
        rope.type() == "linear" && rope.factor() == std::round(rope.factor());
    // torchtitan's llama3 flavors scale as Llama 3.1 does, by 8.
    const bool titanLlama3 = megatronLlama3 && rope.factor() == 8;
    if (!(framework == "megatron" && (megatronLlama3 || megatronLinear)) &&
        !(framework == "torchtitan" && titanLlama3))
      return llvm::createStringError(
          "the model's rotary frequencies are scaled (rope_scaling '" +
          rope.type() +
          "'), which the launcher does not set as the config does: Megatron-LM "
          "sets Llama 3.1's (low and high frequency factors 1 and 4, 8,192 "
          "tokens) and an integer linear interpolation, torchtitan's llama3 "
          "flavors Llama 3.1's by 8; run Weft's own program (weft compile / "
          "weft train)");
  }
  if (m.nope_layers_size() > 0)
    return llvm::createStringError(
        "the model's attention turns no rotary embedding on " +
        std::to_string(m.nope_layers_size()) +
        " of its layers (SmolLM3's NoPE layers): the exported launchers turn "
        "every layer; run Weft's own program (weft compile / weft train)");
  if (m.rope_local_theta() > 0)
    return llvm::createStringError(
        "the model's local layers turn at a rotary base of their own (Gemma "
        "3's rope_local_base_freq): the exported launchers use one; run "
        "Weft's own program (weft compile / weft train)");
  if (m.qkv_clip() > 0)
    return llvm::createStringError(
        "the model clamps its QKV projection (OLMo's and MPT's clip_qkv): the "
        "exported launchers do not; run Weft's own program (weft compile / "
        "weft train)");
  if (m.no_linear_bias() && framework != "megatron")
    return llvm::createStringError(
        "the model's linear layers have no biases where its GELU MLP's "
        "kind has them (MPT's no_bias, Falcon's bias: false): the exported "
        "GELU launchers build biases, except Megatron-LM's "
        "(--disable-bias-linear); run Weft's own program (weft compile / "
        "weft train)");
  if (m.attention_output_bias() || m.mlp_bias())
    return llvm::createStringError(
        "the model's attention output projection or MLP has biases where "
        "its other linears have none (LLaMA's and Nemotron's "
        "attention_bias, mlp_bias): the exported launchers bias "
        "Q, K and V alone (--add-qkv-bias); run Weft's own program (weft "
        "compile / weft train)");
  if (m.no_attention_bias() || m.output_bias())
    return llvm::createStringError(
        "the model's attention projections have no biases where its MLP's "
        "have, or its output layer has one (GPT-J's, Phi's lm_head): the "
        "exported launchers bias every linear or none and never the output "
        "layer; run Weft's own program (weft compile / weft train)");
  if (m.embedding_norm())
    return llvm::createStringError(
        "the model norms its embeddings before the first block (BLOOM's "
        "word_embeddings_layernorm): the exported launchers do not; run "
        "Weft's own program (weft compile / weft train)");
  if (m.parallel_block())
    return llvm::createStringError(
        "the model adds attention and MLP to the residual in parallel "
        "(GPT-J, GPT-NeoX, Falcon, Phi): the exported launchers build "
        "sequential blocks; run Weft's own program (weft compile / weft "
        "train)");
  // (Megatron-LM's GELU is the exact one.)
  // (Megatron-LM squares its ReLU with --squared-relu: Nemotron-4's.)
  if (!m.ffn_activation().empty() && m.ffn_activation() != kExactGelu &&
      !(framework == "megatron" && m.ffn_activation() == kSquaredRelu))
    return llvm::createStringError(
        "the model's MLP applies " + m.ffn_activation() +
        " between its two matrices: the exported launchers know GELU and "
        "SwiGLU MLPs only (and Megatron-LM's --squared-relu)");
  // Megatron-LM's --apply-layernorm-1p is LayerNorm's alone.
  if (m.norm_one_plus() &&
      (framework != "megatron" || normKind(m) != plan::NORM_LAYER))
    return llvm::createStringError(
        "the model's norms scale by 1 + w (Gemma's RMSNorm, Nemotron's "
        "LayerNorm1P): the exported launchers hold the scale itself, except "
        "Megatron-LM's LayerNorm (--apply-layernorm-1p); run Weft's own "
        "program (weft compile / weft train)");
  // Megatron-Core divides its query groups over tp (and DeepSpeed's
  // Megatron and torchtitan their KV heads), with no repeat.
  if (int64_t ways = int64_t(p.tp()) * p.ulysses();
      m.kv_heads() > 0 && m.kv_heads() % ways)
    return llvm::createStringError(
        llvm::formatv("the plan repeats the model's KV heads ({0}) to split "
                      "them over tp*ulysses={1}, which {2} does not do (it "
                      "needs KV heads divisible by tp*ulysses); choose "
                      "tp*ulysses dividing {0}, or run Weft's own program (weft "
                      "compile / weft train)",
                      m.kv_heads(), ways, framework)
            .str());
  if (framework == "megatron") {
    os << "# Megatron-LM (pretrain_gpt.py) arguments for: " << describePlan(p)
       << "\n";
    if (p.pp() > 1 && stageSendSplit(p, tr.seq_len(), m.hidden()) > 1)
      os << "# (weft costs each tp rank sending 1/" << p.tp()
         << " of a stage's activations, all-gathered where they arrive, as "
            "Megatron-LM's scatter/gather did; Megatron-Core without "
            "--sequence-parallel sends them whole from every tp rank)\n";
    os << "--num-layers " << m.layers() << " --hidden-size " << m.hidden()
       << " --num-attention-heads " << m.heads() << " --ffn-hidden-size "
       << m.ffn_hidden() << " \\\n";
    if (m.head_dim() > 0)
      os << "--kv-channels " << m.head_dim() << " \\\n";
    if (m.kv_heads() != m.heads())
      os << "--group-query-attention --num-query-groups " << m.kv_heads()
         << " \\\n";
    if (swiglu)
      os << "--swiglu --normalization RMSNorm --disable-bias-linear "
            "--position-embedding-type rope \\\n";
    else if (m.rope_theta() > 0)
      os << "--position-embedding-type rope \\\n";
    // Nemotron-4's: a squared ReLU, LayerNorm1P, no biases.
    std::vector<std::string> gelu;
    if (m.ffn_activation() == kSquaredRelu)
      gelu.push_back("--squared-relu");
    if (m.norm_one_plus())
      gelu.push_back("--apply-layernorm-1p");
    if (!swiglu && m.no_linear_bias())
      gelu.push_back("--disable-bias-linear");
    if (!gelu.empty())
      os << llvm::join(gelu, " ") << " \\\n";
    // Megatron-LM's defaults are 10,000 and 1e-5: a model of another base
    // (Llama 3's 500,000) or epsilon (Qwen2.5's 1e-6) is another model.
    std::vector<std::string> shape;
    if (m.rope_theta() > 0)
      shape.push_back(llvm::formatv("--rotary-base {0}",
                                    llvm::format("%.0f", m.rope_theta())));
    // Llama 3.1's scaling (Megatron-LM applies it with 1, 4 and 8,192
    // fixed), and linear interpolation.
    if (m.rope_scaling().type() == "llama3")
      shape.push_back(
          llvm::formatv("--use-rope-scaling --rope-scaling-factor {0}",
                        llvm::format("%g", m.rope_scaling().factor())));
    if (m.rope_scaling().type() == "linear")
      shape.push_back(
          llvm::formatv("--rotary-seq-len-interpolation-factor {0}",
                        llvm::format("%g", m.rope_scaling().factor())));
    if (m.qkv_bias() && swiglu)
      shape.push_back("--add-qkv-bias");
    if (m.qk_norm())
      shape.push_back("--qk-layernorm");
    if (m.rotary_percent() > 0)
      shape.push_back(llvm::formatv("--rotary-percent {0}",
                                    llvm::format("%g", m.rotary_percent())));
    // GPT-J's, GLM's, Cohere's and ERNIE 4.5's rotary turns adjacent pairs;
    // Megatron-Core refuses it with its fused rotary kernel.
    if (m.rotary_interleaved())
      shape.push_back("--rotary-interleaved --no-rope-fusion");
    if (m.norm_epsilon() > 0)
      shape.push_back(llvm::formatv("--norm-epsilon {0}",
                                    llvm::format("%g", m.norm_epsilon())));
    if (!shape.empty())
      os << llvm::join(shape, " ") << " \\\n";
    if (!m.tied_embeddings())
      os << "--untie-embeddings-and-output-weights \\\n";
    os << "--seq-length " << tr.seq_len() << " --max-position-embeddings "
       << tr.seq_len() << " \\\n";
    os << "--micro-batch-size " << p.micro_batch() << " --global-batch-size "
       << tr.global_batch() << " --" << (tr.dtype() == "fp16" ? "fp16" : "bf16")
       << " \\\n";
    os << "--tensor-model-parallel-size " << p.tp()
       << " --pipeline-model-parallel-size " << p.pp()
       << " --context-parallel-size " << p.cp() << " \\\n";
    if (p.cp() > 1)
      os << "--cp-comm-type "
         << (p.cp_comm() == plan::CP_COMM_ALL_GATHER ? "all_gather" : "p2p")
         << " \\\n";
    if (p.sequence_parallel())
      os << "--sequence-parallel \\\n";
    if (p.tp_comm_overlap())
      os << "--tp-comm-overlap \\\n";
    if (p.schedule() == plan::SCHEDULE_INTERLEAVED) {
      if (megatronChunks(p) == MegatronChunks::EdgesShort)
        os << "--virtual-pipeline-model-parallel-size " << p.virtual_stages()
           << " --account-for-embedding-in-pipeline-split "
              "--account-for-loss-in-pipeline-split \\\n";
      else
        os << "--num-layers-per-virtual-pipeline-stage "
           << m.layers() / (p.pp() * p.virtual_stages()) << " \\\n";
    }
    if (p.pp() > 1 && p.virtual_stages() <= 1) {
      bool uneven = false;
      for (int32_t n : p.stage_layers())
        uneven |= n != p.stage_layers(1 % p.pp());
      if (uneven)
        os << "--decoder-first-pipeline-num-layers " << p.stage_layers(0)
           << " --decoder-last-pipeline-num-layers "
           << p.stage_layers(p.pp() - 1) << " \\\n";
    }
    if (p.zero_stage() == 1)
      os << "--use-distributed-optimizer --overlap-grad-reduce "
            "--overlap-param-gather \\\n";
    else if (p.dp() > 1)
      os << "--overlap-grad-reduce \\\n";
    if (p.recompute() == plan::RECOMPUTE_FULL)
      os << "--recompute-granularity full --recompute-method uniform "
            "--recompute-num-layers 1 \\\n";
    else if (p.recompute() == plan::RECOMPUTE_SELECTIVE)
      os << "--recompute-granularity selective \\\n";
    os << "# launch on " << p.gpus_used() << " GPUs (data parallel size "
       << p.dp() << " follows from the world size)\n";
    return text;
  }
  if (framework == "deepspeed") {
    int64_t accumulation = p.num_micro_batches();
    os << "{\n  \"train_batch_size\": " << tr.global_batch()
       << ",\n  \"train_micro_batch_size_per_gpu\": " << p.micro_batch()
       << ",\n  \"gradient_accumulation_steps\": " << accumulation << ",\n  \""
       << (tr.dtype() == "fp16" ? "fp16" : "bf16")
       << "\": {\"enabled\": true},\n  \"optimizer\": {\"type\": \"Adam\"},\n"
       << "  \"zero_optimization\": {\"stage\": " << p.zero_stage()
       << ", \"overlap_comm\": true, \"contiguous_gradients\": true},\n"
       // Weft costs each tensor-parallel rank saving its whole checkpointed
       // layer input, as DeepSpeed does without partition_activations;
       // the pipeline engine recomputes every layer at interval 1.
       << "  \"activation_checkpointing\": {\"partition_activations\": "
          "false, \"contiguous_memory_optimization\": false},\n";
    if (p.pp() > 1)
      os << "  \"pipeline\": {\"stages\": " << p.pp()
         << ", \"partition\": \"uniform\", "
            "\"activation_checkpoint_interval\": "
         << (p.recompute() == plan::RECOMPUTE_FULL ? 1 : 0) << "},\n";
    else if (p.recompute() == plan::RECOMPUTE_FULL)
      // Without the pipeline engine the model checkpoints its own layers.
      os << "  \"weft_recompute\": \"full: checkpoint every transformer layer "
            "in the model (e.g. Hugging Face gradient_checkpointing_enable()); "
            "without pipeline stages DeepSpeed's config does not set it\",\n";
    os << "  \"sequence_parallel_size\": " << p.ulysses()
       << ",\n  \"tensor_parallel\": {\"autotp_size\": " << p.tp()
       << "},\n  \"weft_plan\": \"" << describePlan(p) << "\"\n}\n";
    return text;
  }
  if (framework == "torchtitan") {
    const char *schedule = "1F1B";
    if (p.schedule() == plan::SCHEDULE_GPIPE)
      schedule = "GPipe";
    else if (p.schedule() == plan::SCHEDULE_INTERLEAVED)
      schedule = "Interleaved1F1B";
    else if (p.schedule() == plan::SCHEDULE_ZB_H1 ||
             p.schedule() == plan::SCHEDULE_ZEROPP)
      schedule = "InterleavedZeroBubble";
    bool fsdp = p.zero_stage() == 3;
    os << "# torchtitan job config for: " << describePlan(p) << "\n";
    // torchtitan builds its models by flavor (torchtitan/models/llama3:
    // 8B, 70B, 405B, each dim, layers, heads, KV heads and the FFN its
    // multipliers give, at rope_theta 500,000 and Llama 3's vocabulary),
    // every one with Llama 3.1's rope scaling by 8 (RoPEScalingArgs'
    // defaults): a config without it (Llama 3.0's) is not the flavor.
    const bool titanRope =
        m.hf_model_type().empty() ||
        (llama31Scaling(m.rope_scaling()) && m.rope_scaling().factor() == 8);
    const char *flavor = nullptr;
    for (auto [name, layers, hidden, heads, ffn] :
         {std::tuple{"8B", 32, 4096, 32, 14336},
          std::tuple{"70B", 80, 8192, 64, 28672},
          std::tuple{"405B", 126, 16384, 128, 53248}})
      if (swiglu && m.layers() == layers && m.hidden() == hidden &&
          m.heads() == heads && m.kv_heads() == 8 && m.ffn_hidden() == ffn &&
          m.vocab() == 128256 && m.head_dim() == 0 && !m.tied_embeddings() &&
          (m.rope_theta() == 0 || m.rope_theta() == 5e5) && titanRope)
        flavor = name;
    if (flavor)
      os << "[model]\nname = \"llama3\"\nflavor = \"" << flavor << "\"\n\n";
    else
      os << llvm::formatv(
          "# [model]: torchtitan has no flavor of this model ({0} layers, "
          "dim {1}, {2} heads, {3} KV heads, FFN {4}, vocabulary "
          "{5}{6}{7}{8}): "
          "register one with its model's flavors\n",
          m.layers(), m.hidden(), m.heads(), m.kv_heads(), m.ffn_hidden(),
          m.vocab(),
          m.rope_theta() > 0
              ? llvm::formatv(", rope_theta {0}",
                              llvm::format("%.0f", m.rope_theta()))
                    .str()
              : std::string(),
          swiglu ? "" : ", a GELU MLP: torchtitan's llama3 is SwiGLU",
          titanRope ? ""
                    : ", rotary frequencies without Llama 3.1's scaling by 8, "
                      "which torchtitan's llama3 flavors apply");
    os << "[training]\nlocal_batch_size = "
       << tr.global_batch() / p.dp() << "\nglobal_batch_size = "
       << tr.global_batch() << "\nseq_len = " << tr.seq_len()
       << "\nmixed_precision_param = \""
       << (tr.dtype() == "fp16" ? "float16" : "bfloat16") << "\"\n\n";
    os << "[parallelism]\ndata_parallel_replicate_degree = "
       << (fsdp ? 1 : p.dp())
       << "\ndata_parallel_shard_degree = " << (fsdp ? p.dp() : 1)
       << "\ntensor_parallel_degree = " << p.tp()
       << "\npipeline_parallel_degree = " << p.pp()
       << "\ncontext_parallel_degree = " << p.cp();
    // (PyTorch's context parallelism: "alltoall" passes the K/V shards
    // around the ring, "allgather" gathers them first.)
    if (p.cp() > 1)
      os << "\ncontext_parallel_rotate_method = \""
         << (p.cp_comm() == plan::CP_COMM_ALL_GATHER ? "allgather" : "alltoall")
         << "\"";
    os << "\npipeline_parallel_schedule = \"" << schedule
       << "\"\npipeline_parallel_microbatch_size = " << p.micro_batch() << "\n";
    if (p.tp() > 1)
      os << "# torchtitan's TP always uses sequence parallelism for norms\n";
    os << "\n[activation_checkpoint]\nmode = \""
       << (p.recompute() == plan::RECOMPUTE_FULL ? "full"
           : p.recompute() == plan::RECOMPUTE_OP ? "selective"
                                                 : "none")
       << "\"\n";
    if (p.recompute() == plan::RECOMPUTE_OP)
      os << "selective_ac_option = \"op\"\n";
    return text;
  }
  return llvm::createStringError("unknown framework '" + framework.str() +
                                 "'; use megatron, deepspeed or torchtitan");
}
