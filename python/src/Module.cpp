//===- Module.cpp - weft._weft: the Python binding of the driver ----------===//
//
// Part of the Weft project.
//
// A thin layer over weft/Driver/Driver.h: requests arrive as keyword
// dictionaries filled by weft/__init__.py, answers leave as JSON text (the
// same `toJson` that `weft plan --json` writes), numpy arrays and strings.
// Every failure raises weft.Error with the diagnostics the call reported
// (file, ONNX node, line) followed by the driver's message.
//
//===----------------------------------------------------------------------===//

#include "weft/Driver/Driver.h"
#include "weft/InitAll.h"
#include "weft/Plan/Plan.h"
#include "weft/Planner/Cluster.h"
#include "weft/Planner/PipelineSchedule.h"
#include "weft/Planner/Report.h"

#include "llvm/Support/raw_ostream.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <stdexcept>

namespace py = pybind11;
using namespace weft;
using weft::rt::DType;
using weft::rt::HostTensor;

namespace {

/// What weft.Error carries to Python.
struct WeftError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An MLIR context with Weft's dialects and a collector of its diagnostics.
struct Session {
  Session() : context(registry()), collector(context) {}
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    return registry;
  }
  /// Raises weft.Error for `error`, with the diagnostics collected.
  [[noreturn]] void raise(llvm::Error error) {
    throw WeftError(collector.message(std::move(error)));
  }
  mlir::MLIRContext context;
  driver::DiagnosticCollector collector;
};

/// Reads keyword `name` of `kwargs` into `value` when present (and not
/// None).
template <typename T>
void get(const py::dict &kwargs, const char *name, T &value) {
  if (kwargs.contains(name) && !kwargs[name].is_none())
    value = kwargs[name].cast<T>();
}

/// The answer of weft.plan: the plans and the cost model that costed them,
/// kept for explanations, schedules, exports and the report.
class PlanSession {
public:
  explicit PlanSession(const py::dict &kwargs) {
    driver::PlanRequest request;
    get(kwargs, "model_file", request.modelFile);
    get(kwargs, "preset", request.preset);
    get(kwargs, "layers", request.layers);
    get(kwargs, "hidden", request.hidden);
    get(kwargs, "heads", request.heads);
    get(kwargs, "kv_heads", request.kvHeads);
    get(kwargs, "head_dim", request.headDim);
    get(kwargs, "ffn", request.ffn);
    get(kwargs, "ffn_kind", request.ffnKind);
    get(kwargs, "vocab", request.vocab);
    get(kwargs, "tied", request.tied);
    get(kwargs, "input_shapes", request.inputShapes);
    get(kwargs, "cluster", request.cluster);
    get(kwargs, "global_batch", request.globalBatch);
    get(kwargs, "seq_len", request.seqLen);
    get(kwargs, "dtype", request.dtype);
    get(kwargs, "memory_reserve_gib", request.memoryReserveGib);
    get(kwargs, "flash_attention", request.flashAttention);
    request.flashAttentionDefault = !kwargs.contains("flash_attention");
    get(kwargs, "dropout", request.dropout);
    get(kwargs, "grad_reduce_16bit", request.gradReduce16bit);
    get(kwargs, "launch_blocking", request.launchBlocking);
    get(kwargs, "top", request.top);
    get(kwargs, "tp_across_nodes", request.tpAcrossNodes);
    get(kwargs, "evaluate", request.evaluate);
    get(kwargs, "evaluate_json", request.evaluateJson);
    get(kwargs, "allow_oom", request.allowOom);
    get(kwargs, "framework", request.exportFramework);
    llvm::Expected<driver::PlanOutcome> result = [&] {
      py::gil_scoped_release release;
      return driver::planModel(session.context, request);
    }();
    if (!result)
      session.raise(result.takeError());
    outcome = std::move(*result);
    if (outcome.overMemoryGib > 0)
      throw WeftError(driver::overMemoryMessage(outcome));
  }

  std::string json() const { return toJson(outcome.set); }
  std::string header() const { return outcome.header; }
  size_t size() const { return outcome.set.plans_size(); }

  std::string table() const {
    std::string text;
    llvm::raw_string_ostream os(text);
    planner::printPlanTable(os, plans());
    return text;
  }
  std::string breakdown(size_t index) const {
    std::string text;
    llvm::raw_string_ostream os(text);
    planner::printPlanBreakdown(os, plan(index));
    return text;
  }
  std::string spec(size_t index) const { return formatPlanSpec(plan(index)); }
  /// Why the first plan wins over the others.
  std::string explain() {
    std::string text;
    llvm::raw_string_ostream os(text);
    planner::explainPlans(os, *outcome.costModel, plans());
    return text;
  }
  std::string exportArgs(size_t index, const std::string &framework) {
    auto text = planner::exportPlan(*outcome.costModel, plan(index), framework);
    if (!text)
      session.raise(text.takeError());
    return *text;
  }
  std::string schedule(size_t index) {
    const plan::Plan &p = plan(index);
    planner::PipelineSchedule schedule = outcome.costModel->pipelineSchedule(p);
    std::string problem = planner::checkPipelineSchedule(schedule);
    if (!problem.empty())
      throw WeftError("the pipeline schedule does not run: " + problem);
    return "pipeline schedule: " + std::string(scheduleName(p.schedule())) +
           ", " + std::to_string(schedule.stages) + " ranks x " +
           std::to_string(schedule.chunks) + " chunks, " +
           std::to_string(schedule.microBatches) + " micro-batches\n" +
           schedule.str();
  }
  std::string rankIr(size_t index) {
    return outcome.costModel->rankProgramText(plan(index));
  }
  std::string report() {
    return planner::renderHtmlReport(*outcome.costModel, outcome.set);
  }

private:
  const plan::Plan &plan(size_t index) const {
    if (index >= size())
      throw py::index_error("plan index " + std::to_string(index) +
                            " out of range (" + std::to_string(size()) +
                            " plans)");
    return outcome.set.plans(int(index));
  }
  std::vector<plan::Plan> plans() const {
    return {outcome.set.plans().begin(), outcome.set.plans().end()};
  }

  Session session;
  driver::PlanOutcome outcome;
};

/// A numpy array as a host tensor: floats as f32 / f16 / f64, integers as
/// i64 or i32, booleans as bool.
HostTensor toHostTensor(const py::array &array, size_t index) {
  py::dtype type = array.dtype();
  char kind = type.kind();
  rt::Shape shape(array.shape(), array.shape() + array.ndim());
  HostTensor tensor;
  tensor.shape = shape;
  if (kind == 'f') {
    tensor.dtype = type.itemsize() == 8   ? DType::F64
                   : type.itemsize() == 2 ? DType::F16
                                          : DType::F32;
    auto values =
        py::array_t<float, py::array::c_style | py::array::forcecast>(array);
    tensor.floats.assign(values.data(), values.data() + values.size());
    return tensor;
  }
  if (kind == 'i' || kind == 'u' || kind == 'b') {
    tensor.dtype = kind == 'b'                             ? DType::Bool
                   : (kind == 'i' && type.itemsize() <= 4) ? DType::I32
                                                           : DType::I64;
    if (kind == 'u' && type.itemsize() < 8)
      tensor.dtype = DType::I32;
    auto values =
        py::array_t<int64_t, py::array::c_style | py::array::forcecast>(array);
    tensor.ints.assign(values.data(), values.data() + values.size());
    return tensor;
  }
  throw py::value_error("input #" + std::to_string(index) +
                        " has numpy dtype " + std::string(py::str(type)) +
                        "; give float, integer or boolean arrays");
}

/// A host tensor as a numpy array of its type (bf16 as float32, which holds
/// every bf16 value).
py::array toArray(const HostTensor &tensor) {
  std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
  auto fill = [&](auto array, const auto &values) {
    auto *out = array.mutable_data();
    for (size_t i = 0; i < values.size(); ++i)
      out[i] = static_cast<std::remove_pointer_t<decltype(out)>>(values[i]);
    return py::array(array);
  };
  switch (tensor.dtype) {
  case DType::F64:
    return fill(py::array_t<double>(shape), tensor.floats);
  case DType::F16: {
    py::array_t<float> wide(shape);
    std::memcpy(wide.mutable_data(), tensor.floats.data(),
                tensor.floats.size() * sizeof(float));
    return py::array(wide.attr("astype")("float16"));
  }
  case DType::F32:
  case DType::BF16:
    return fill(py::array_t<float>(shape), tensor.floats);
  case DType::I32:
    return fill(py::array_t<int32_t>(shape), tensor.ints);
  case DType::Bool:
    return fill(py::array_t<bool>(shape), tensor.ints);
  case DType::I64:
    break;
  }
  return fill(py::array_t<int64_t>(shape), tensor.ints);
}

driver::ModelOptions modelOptions(const py::dict &kwargs) {
  driver::ModelOptions options;
  get(kwargs, "input_shapes", options.inputShapes);
  get(kwargs, "batch_size", options.batchSize);
  get(kwargs, "seq_len", options.seqLen);
  get(kwargs, "raise_ops", options.raise);
  get(kwargs, "dtype", options.dtype);
  get(kwargs, "loss", options.loss);
  return options;
}

/// The plan keyword: `plan_json` (a Plan or PlanSet as JSON text), or
/// `plan_file` / `plan_spec` as --plan / --plan-spec take them.
std::optional<plan::Plan> planOf(const py::dict &kwargs, Session &session) {
  std::string json, file, spec;
  get(kwargs, "plan_json", json);
  get(kwargs, "plan_file", file);
  get(kwargs, "plan_spec", spec);
  if (!json.empty()) {
    plan::PlanSet set;
    plan::Plan single;
    if (llvm::Error error = fromJson(json, set, "plan"))
      llvm::consumeError(std::move(error));
    else if (set.plans_size())
      return set.plans(0);
    if (llvm::Error error = fromJson(json, single, "plan"))
      session.raise(std::move(error));
    return single;
  }
  if (file.empty() && spec.empty())
    return std::nullopt;
  llvm::Expected<plan::Plan> plan = driver::resolvePlan(file, spec);
  if (!plan)
    session.raise(plan.takeError());
  return std::move(*plan);
}

/// weft.run: the outputs as numpy arrays and the bytes each rank sent.
py::tuple run(const std::string &model, const py::list &inputs,
              const py::dict &kwargs) {
  Session session;
  driver::RunRequest request;
  request.model = model;
  request.options = modelOptions(kwargs);
  for (size_t i = 0; i < inputs.size(); ++i)
    request.inputs.push_back(toHostTensor(py::array(inputs[i]), i));
  get(kwargs, "input_names", request.inputNames);
  get(kwargs, "devices", request.devices);
  get(kwargs, "collective_timeout", request.collectiveTimeoutSeconds);
  get(kwargs, "dump_partitioned", request.dumpPartitioned);
  request.plan = planOf(kwargs, session);
  llvm::Expected<driver::RunOutcome> outcome = [&] {
    py::gil_scoped_release release;
    return driver::runModel(session.context, request);
  }();
  if (!outcome)
    session.raise(outcome.takeError());
  py::list outputs;
  for (const HostTensor &tensor : outcome->outputs)
    outputs.append(toArray(tensor));
  return py::make_tuple(outputs, outcome->bytesSent);
}

/// weft.compile: what was written, and the built program's path.
py::tuple compile(const std::string &model, const py::dict &kwargs) {
  Session session;
  driver::CompileRequest request;
  request.model = model;
  request.options = modelOptions(kwargs);
  std::optional<plan::Plan> plan = planOf(kwargs, session);
  if (!plan)
    throw py::value_error("weft.compile needs a plan");
  request.plan = std::move(*plan);
  get(kwargs, "plan_origin", request.planOrigin);
  get(kwargs, "target", request.target);
  get(kwargs, "out", request.outputDir);
  get(kwargs, "force", request.force);
  get(kwargs, "build", request.build);
  get(kwargs, "runtime_prefix", request.runtimePrefix);
  llvm::Expected<driver::CompileOutcome> outcome = [&] {
    py::gil_scoped_release release;
    return driver::compileModel(session.context, request);
  }();
  if (!outcome)
    session.raise(outcome.takeError());
  return py::make_tuple(outcome->summary, outcome->program);
}

/// weft.Cluster: the cluster a shorthand or file describes, as JSON.
std::string cluster(const std::string &spec) {
  llvm::Expected<plan::Cluster> cluster = planner::resolveCluster(spec);
  if (!cluster)
    throw WeftError(llvm::toString(cluster.takeError()));
  return toJson(*cluster);
}

/// The plan that the short form describes, as JSON.
std::string parseSpec(const std::string &text) {
  llvm::Expected<PlanSpec> spec = parsePlanSpec(text, "plan");
  if (!spec)
    throw WeftError(llvm::toString(spec.takeError()));
  return toJson(spec->plan);
}

} // namespace

PYBIND11_MODULE(_weft, m) {
  m.doc() = "Weft's C++ driver (use the weft package, not this module)";
  py::register_exception<WeftError>(m, "Error", PyExc_RuntimeError);
  py::class_<PlanSession>(m, "PlanSession")
      .def(py::init<const py::dict &>())
      .def("json", &PlanSession::json)
      .def("header", &PlanSession::header)
      .def("__len__", &PlanSession::size)
      .def("table", &PlanSession::table)
      .def("breakdown", &PlanSession::breakdown)
      .def("spec", &PlanSession::spec)
      .def("explain", &PlanSession::explain)
      .def("export", &PlanSession::exportArgs)
      .def("schedule", &PlanSession::schedule)
      .def("rank_ir", &PlanSession::rankIr)
      .def("report", &PlanSession::report);
  m.def("run", &run);
  m.def("compile", &compile);
  m.def("cluster", &cluster);
  m.def("parse_spec", &parseSpec);
}
