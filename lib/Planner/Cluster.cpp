//===- Cluster.cpp - GPU catalog and cluster descriptions -----------------===//
//
// Part of the Weft project.
//
// Catalog figures come from vendor datasheets as collected in
// ../shared/data/calibration/hardware_constants.csv and nccl_busbw_reference.csv;
// the efficiencies are fitted by `weft calibrate` (docs/cost-model.md).
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/Cluster.h"

#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>

using namespace weft;
using namespace weft::planner;
using llvm::StringRef;

namespace {
/// Which fitted efficiencies a GPU takes: only Ampere's and Hopper's are
/// fitted (weft calibrate); Volta borrows Ampere's, Blackwell Hopper's.
enum class Family { Volta, Ampere, Hopper, Blackwell };
struct CatalogEntry {
  const char *name;
  Family family;
  double bf16, fp16, fp32, hbmGib, hbmGbps, nvlink, busbw;
  int nics;
  double nicGbits;
};
// name, family, bf16, fp16, fp32 TF (dense); HBM GiB, GB/s; NVLink GB/s per
// direction, NCCL ring busbw; NICs per 8-GPU node and their Gbit/s. From the
// datasheets: DGX A100 has 8 x HDR 200, DGX H100/H200/B200 8 x NDR 400,
// DGX-1 V100 4 x EDR 100. V100 has no bf16 tensor cores: its bf16 is its
// fp32 rate (what a bf16 GEMM runs at there). A800 and H800 are the A100
// and H100 with NVLink cut to 400 GB/s (200 per direction); NCCL's
// maintainers expect ~160 GB/s all-reduce busbw on 8 A800s (NVIDIA/nccl
// #412), taken for H800 too. DGX-1V's all-reduce busbw ~130 GB/s (hybrid
// cube-mesh); B200's is H100's fraction of its NVLink (370 / 450).
const CatalogEntry kCatalog[] = {
    {"v100-16g", Family::Volta, 15.7, 125, 15.7, 16, 900, 150, 130, 4, 100},
    {"v100-32g", Family::Volta, 15.7, 125, 15.7, 32, 900, 150, 130, 4, 100},
    {"a100-40g", Family::Ampere, 312, 312, 19.5, 40, 1555, 300, 230, 8, 200},
    {"a100-80g", Family::Ampere, 312, 312, 19.5, 80, 2039, 300, 230, 8, 200},
    {"a800-80g", Family::Ampere, 312, 312, 19.5, 80, 2039, 200, 160, 8, 200},
    {"h100", Family::Hopper, 989, 989, 67, 80, 3350, 450, 370, 8, 400},
    {"h800", Family::Hopper, 989, 989, 67, 80, 3350, 200, 160, 8, 400},
    {"h200", Family::Hopper, 989, 989, 67, 140, 4800, 450, 370, 8, 400},
    {"b200", Family::Blackwell, 2250, 2250, 75, 180, 8000, 900, 740, 8, 400},
};

// Fitted on the calibration data (weft calibrate; docs/cost-model.md).
// A GEMM of F FLOPs reaches eff * F / (F + half) of peak (a fixed ramp of
// ~12 us on both families). A100's pair was refitted once the calibration
// had FSDP runs with large per-GPU GEMMs (MPT, calibration.csv). Hopper's cap
// was refitted on its 19 calibration rows (Megatron-Core's, costed with the
// interleaved schedule their pipeline-communication overlap implies, and
// MPT's H100 table); its half-point is A100's ramp time, which those rows
// pin down little.
constexpr double kGemmEfficiencyAmpere = 0.66;
constexpr double kGemmHalfFlopsAmpere = 2.5e9;
constexpr double kGemmEfficiencyHopper = 0.53;
constexpr double kGemmHalfFlopsHopper = 7.0e9;
constexpr double kMemoryEfficiency = 0.80;
// Host time per op of an eager framework (PyTorch dispatch, launch): it
// bounds small layers.
constexpr double kKernelOverheadUs = 20.0;
// Host time per kernel added when launches block (CUDA_LAUNCH_BLOCKING=1):
// fitted on BigScience's Jean Zay benchmarks of Megatron-DeepSpeed
// (calibration.csv), whose step times fall with the micro-batch where the
// GPU work per step does not (docs/cost-model.md, "Blocking launches"). It
// is per kernel the model counts, which fuses more than eager PyTorch does.
constexpr double kBlockingLaunchUs = 145.0;
} // namespace

std::vector<std::string> planner::gpuCatalogNames() {
  std::vector<std::string> names;
  for (const CatalogEntry &entry : kCatalog)
    names.push_back(entry.name);
  return names;
}

static plan::Gpu toGpu(const CatalogEntry &entry) {
  plan::Gpu gpu;
  gpu.set_name(entry.name);
  gpu.set_bf16_tflops(entry.bf16);
  gpu.set_fp16_tflops(entry.fp16);
  gpu.set_fp32_tflops(entry.fp32);
  gpu.set_hbm_gib(entry.hbmGib);
  gpu.set_hbm_gbps(entry.hbmGbps);
  gpu.set_nvlink_gbps(entry.nvlink);
  gpu.set_nvlink_busbw_gbps(entry.busbw);
  bool hopper =
      entry.family == Family::Hopper || entry.family == Family::Blackwell;
  gpu.set_gemm_efficiency(hopper ? kGemmEfficiencyHopper
                                 : kGemmEfficiencyAmpere);
  gpu.set_gemm_half_flops(hopper ? kGemmHalfFlopsHopper
                                  : kGemmHalfFlopsAmpere);
  gpu.set_memory_efficiency(kMemoryEfficiency);
  gpu.set_kernel_overhead_us(kKernelOverheadUs);
  gpu.set_blocking_launch_us(kBlockingLaunchUs);
  return gpu;
}

static const CatalogEntry *findEntry(StringRef name) {
  std::string lower = name.lower();
  StringRef key(lower);
  key.consume_back("-sxm");
  key.consume_back("sxm");
  if (key == "a100")
    key = "a100-80g";
  if (key == "a800")
    key = "a800-80g";
  if (key == "v100")
    key = "v100-32g";
  if (key == "h100-80g")
    key = "h100";
  if (key == "h200-141g")
    key = "h200";
  for (const CatalogEntry &entry : kCatalog)
    if (key == entry.name)
      return &entry;
  return nullptr;
}

std::string planner::uncalibratedGpuNote(const plan::Gpu &gpu) {
  const CatalogEntry *entry = findEntry(gpu.name());
  if (!entry ||
      (entry->family != Family::Volta && entry->family != Family::Blackwell))
    return "";
  bool volta = entry->family == Family::Volta;
  // Megatron-LM's 2019 runs (Shoeybi et al., arXiv 1909.08053: 39 TFLOP/s
  // on one DGX-2H V100 for the 1.2B model, 15.1 PFLOP/s on 512 for 8.3B, by
  // its FLOP formula) took 1.47x and 1.23x the steps costed so
  // (docs/cost-model.md, "GPUs without calibration rows").
  return gpu.name() +
         " is uncalibrated: no published run on it is in weft calibrate's "
         "data, and its GEMM efficiency and ramp are " +
         (volta ? "A100's" : "H100's") +
         " fit; the band below is A100's and H100's" +
         (volta ? " (Megatron-LM's 2019 V100 runs took 1.2-1.5x the step so "
                  "costed)"
                : "");
}

llvm::Expected<plan::Gpu> planner::lookupGpu(StringRef name) {
  if (const CatalogEntry *entry = findEntry(name))
    return toGpu(*entry);
  return llvm::createStringError(
      "unknown GPU '" + name.str() + "'; the catalog has " +
      llvm::join(gpuCatalogNames(), ", ") +
      " (or describe it in a cluster file, see docs/plan-schema.md)");
}

static plan::Cluster defaultCluster(const plan::Gpu &gpu, int64_t perNode,
                                    int64_t nodes) {
  plan::Cluster cluster;
  const CatalogEntry *entry = findEntry(gpu.name());
  cluster.set_name(gpu.name() + ":" + std::to_string(perNode) + "x" +
                   std::to_string(nodes));
  *cluster.mutable_gpu() = gpu;
  cluster.set_gpus_per_node(perNode);
  cluster.set_nodes(nodes);
  // The catalog's NICs are an 8-GPU node's: other node sizes keep each
  // GPU's share (Perlmutter's 4 A100s have 4 NICs, a DGX-2's 16 V100s 8).
  const double nicsPer8 = entry ? entry->nics : 8;
  cluster.set_nics_per_node(
      int32_t(std::max<long>(1, std::lround(nicsPer8 * double(perNode) / 8))));
  cluster.set_nic_gbits(entry ? entry->nicGbits : 200);
  cluster.set_nic_efficiency(0.9);
  cluster.set_intra_node_latency_us(5);
  cluster.set_inter_node_latency_us(10);
  return cluster;
}

llvm::Expected<plan::Cluster> planner::parseClusterShorthand(StringRef spec) {
  auto [gpuName, shape] = spec.split(':');
  auto usage = [&](const llvm::Twine &why) {
    return llvm::createStringError(
        "cluster '" + spec.str() + "': " + why.str() +
        "; write GPU:PERNODExNODES (e.g. h100:8x128) or GPU:N for one node");
  };
  if (shape.empty())
    return usage("missing the GPU count after ':'");
  llvm::Expected<plan::Gpu> gpu = lookupGpu(gpuName);
  if (!gpu)
    return gpu.takeError();
  int64_t perNode = 0, nodes = 1;
  auto [first, second] = shape.split('x');
  if (first.getAsInteger(10, perNode) ||
      (!second.empty() && second.getAsInteger(10, nodes)))
    return usage("'" + shape.str() + "' is not a GPU count");
  if (perNode <= 0 || nodes <= 0)
    return usage("there must be at least one GPU per node and one node");
  if (perNode > kMaxGpusPerNode || nodes > kMaxTotalGpus)
    return usage("more GPUs than the planner takes (at most " +
                 std::to_string(kMaxGpusPerNode) + " per node and " +
                 std::to_string(kMaxTotalGpus) + " in all)");
  plan::Cluster cluster = defaultCluster(*gpu, perNode, nodes);
  if (llvm::Error error = validateCluster(cluster))
    return error;
  return cluster;
}

llvm::Error planner::validateCluster(const plan::Cluster &cluster) {
  auto positive = [](double value) { return std::isfinite(value) && value > 0; };
  if (cluster.nodes() <= 0 || cluster.gpus_per_node() <= 0)
    return llvm::createStringError(
        "cluster '" + cluster.name() +
        "': gpus_per_node and nodes must be positive");
  const plan::Gpu &gpu = cluster.gpu();
  std::vector<std::pair<const char *, double>> checks = {
      {"gpus_per_node", double(cluster.gpus_per_node())},
      {"nodes", double(cluster.nodes())},
      {"nics_per_node", double(cluster.nics_per_node())},
      {"nic_gbits", cluster.nic_gbits()},
      {"nic_efficiency", cluster.nic_efficiency()},
      {"gpu.bf16_tflops", gpu.bf16_tflops()},
      {"gpu.fp16_tflops", gpu.fp16_tflops()},
      {"gpu.fp32_tflops", gpu.fp32_tflops()},
      {"gpu.hbm_gib", gpu.hbm_gib()},
      {"gpu.hbm_gbps", gpu.hbm_gbps()},
      {"gpu.nvlink_busbw_gbps", gpu.nvlink_busbw_gbps()},
      {"gpu.gemm_efficiency", gpu.gemm_efficiency()},
      {"gpu.memory_efficiency", gpu.memory_efficiency()},
  };
  for (auto &[name, value] : checks)
    if (!positive(value))
      return llvm::createStringError(
          "cluster '" + cluster.name() + "': " + name +
          " must be positive (it is " + std::to_string(value) + ")");
  if (gpu.gemm_efficiency() > 1 || gpu.memory_efficiency() > 1 ||
      cluster.nic_efficiency() > 1)
    return llvm::createStringError("cluster '" + cluster.name() +
                                   "': efficiencies are fractions in (0, 1]");
  std::vector<std::pair<const char *, double>> nonNegative = {
      {"gpu.gemm_half_flops", gpu.gemm_half_flops()},
      {"gpu.kernel_overhead_us", gpu.kernel_overhead_us()},
      {"gpu.blocking_launch_us", gpu.blocking_launch_us()},
      {"intra_node_latency_us", cluster.intra_node_latency_us()},
      {"inter_node_latency_us", cluster.inter_node_latency_us()},
  };
  // NaN fails every comparison, so the test is written to catch it.
  for (auto &[name, value] : nonNegative)
    if (!(std::isfinite(value) && value >= 0))
      return llvm::createStringError(
          "cluster '" + cluster.name() + "': " + name +
          " must be a finite number, zero or more (it is " +
          std::to_string(value) + ")");
  // What the search handles in seconds; no cluster is larger.
  if (cluster.gpus_per_node() > kMaxGpusPerNode)
    return llvm::createStringError(
        "cluster '" + cluster.name() + "': gpus_per_node is " +
        std::to_string(cluster.gpus_per_node()) +
        "; the planner takes at most " + std::to_string(kMaxGpusPerNode) +
        " GPUs per node");
  if (totalGpus(cluster) > kMaxTotalGpus)
    return llvm::createStringError("cluster '" + cluster.name() +
                                   "': " + std::to_string(totalGpus(cluster)) +
                                   " GPUs; the planner takes at most " +
                                   std::to_string(kMaxTotalGpus) +
                                   " (2^20) in all");
  return llvm::Error::success();
}

namespace {
/// Collects protobuf text-format errors with their line and column.
class TextErrors : public google::protobuf::io::ErrorCollector {
public:
  void AddError(int line, int column, const std::string &message) override {
    if (text.empty())
      text = std::to_string(line + 1) + ":" + std::to_string(column + 1) +
             ": " + message;
  }
  std::string text;
};
} // namespace

llvm::Expected<plan::Cluster> planner::loadClusterFile(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError("cannot read cluster file '" + path.str() +
                                   "': " + buffer.getError().message());
  std::string text = (*buffer)->getBuffer().str();
  plan::Cluster parsed;
  if (path.ends_with(".json")) {
    auto status = google::protobuf::util::JsonStringToMessage(text, &parsed);
    if (!status.ok())
      return llvm::createStringError(
          path.str() + ": not a valid Cluster in JSON: " +
          std::string(status.message()) +
          " (fields are listed in docs/plan-schema.md)");
  } else {
    google::protobuf::TextFormat::Parser parser;
    TextErrors errors;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(text, &parsed))
      return llvm::createStringError(path.str() + ":" + errors.text +
                                     " (a Cluster in protobuf text format)");
  }
  if (parsed.gpus_per_node() <= 0 || parsed.nodes() <= 0)
    return llvm::createStringError(
        path.str() + ": gpus_per_node and nodes must be positive (they are " +
        std::to_string(parsed.gpus_per_node()) + " and " +
        std::to_string(parsed.nodes()) + ")");
  // Start from the catalog when the GPU is named there; the file overrides.
  plan::Cluster cluster;
  if (!parsed.gpu().name().empty() && findEntry(parsed.gpu().name())) {
    plan::Gpu gpu = *lookupGpu(parsed.gpu().name());
    cluster = defaultCluster(gpu, parsed.gpus_per_node(), parsed.nodes());
  } else {
    cluster.set_nic_efficiency(0.9);
    cluster.mutable_gpu()->set_memory_efficiency(kMemoryEfficiency);
    cluster.mutable_gpu()->set_gemm_efficiency(kGemmEfficiencyHopper);
    cluster.mutable_gpu()->set_gemm_half_flops(kGemmHalfFlopsHopper);
    cluster.mutable_gpu()->set_kernel_overhead_us(kKernelOverheadUs);
    cluster.mutable_gpu()->set_blocking_launch_us(kBlockingLaunchUs);
  }
  cluster.MergeFrom(parsed);
  if (cluster.name().empty())
    cluster.set_name(llvm::sys::path::filename(path).str());
  if (llvm::Error error = validateCluster(cluster))
    return llvm::createStringError(path.str() + ": " +
                                   llvm::toString(std::move(error)));
  return cluster;
}

llvm::Expected<plan::Cluster> planner::resolveCluster(StringRef spec) {
  if (spec.ends_with(".json") || spec.ends_with(".txtpb") ||
      spec.ends_with(".textproto") || spec.ends_with(".pbtxt") ||
      spec.contains('/'))
    return loadClusterFile(spec);
  return parseClusterShorthand(spec);
}
