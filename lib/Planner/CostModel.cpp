//===- CostModel.cpp - Time and memory of a training step -----------------===//
//
// Part of the Weft project. The model is described in docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/CostModel.h"

#include "weft/Dialect/Pipeline.h"
#include "weft/Dialect/RingLayout.h"
#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftInterfaces.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Plan/Plan.h"
#include "weft/Planner/Cluster.h"
#include "weft/Planner/RankProgram.h"

#include "CostModelDetail.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace weft;
using namespace weft::planner;
using namespace weft::planner::detail;

CostModel::CostModel(plan::ModelSpec model, plan::Cluster cluster,
                     plan::TrainingConfig training, ModelSource source)
    : modelSpec(std::move(model)), clusterSpec(std::move(cluster)),
      trainingConfig(std::move(training)),
      context(std::make_unique<MLIRContext>(MLIRContext::Threading::DISABLED)) {
  context->loadDialect<WeftDialect, func::FuncDialect>();
  if (trainingConfig.seq_len() <= 0)
    trainingConfig.set_seq_len(modelSpec.seq_len());
  ownModel = bool(source);
  if (!source) {
    // The built-in transformer of the spec with two layers: the cost model
    // costs one and multiplies; the training step's count takes what a
    // second adds to the gradient reduction and the optimizer step.
    plan::ModelSpec spec = modelSpec;
    std::optional<double> dropout;
    if (trainingConfig.dropout())
      dropout = kDropoutRatio;
    source.buildLayers = [spec, dropout](MLIRContext &ctx, int64_t batch,
                                         int64_t seq, int64_t layers) {
      TransformerShape shape;
      shape.batch = batch;
      shape.seq = seq;
      shape.layers =
          std::min<int64_t>(layers, std::max<int64_t>(1, spec.layers()));
      shape.dropout = dropout;
      return buildTransformer(ctx, spec, shape);
    };
    // Global layers among windowed ones (--global-every): every layer, so
    // that the program of each kind is costed for its share of them.
    const int64_t built =
        spec.global_every() > 0 ? std::max<int64_t>(2, spec.layers()) : 2;
    source.build = [build = source.buildLayers,
                    built](MLIRContext &ctx, int64_t batch, int64_t seq) {
      return build(ctx, batch, seq, built);
    };
  }
  programs = std::make_unique<RankProgramBuilder>(*context, std::move(source),
                                                  trainingConfig);
}

CostModel::~CostModel() = default;

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

CostModel::FamilyKey CostModel::familyKey(const plan::Plan &plan) {
  return {plan.tp() > 1,
          plan.ulysses() > 1,
          plan.cp(),
          plan.sequence_parallel(),
          plan.compress(),
          plan.cp() > 1 && plan.cp_comm() == plan::CP_COMM_ALL_GATHER};
}

CostModel::BlockKey CostModel::blockKey(const plan::Plan &plan) const {
  // Policies are few (one per search, a handful with --compress=auto).
  auto policy = llvm::find(policyNames, plan.compress());
  int64_t index = policy - policyNames.begin();
  if (policy == policyNames.end())
    policyNames.push_back(plan.compress());
  bool grid = uses3dTensorParallel(plan);
  return {plan.micro_batch(),
          plan.tp(),
          plan.ulysses(),
          plan.cp(),
          plan.sequence_parallel(),
          0,
          index,
          grid ? plan.gx() : 0,
          grid ? plan.gy() : 0,
          grid ? plan.gz() : 0,
          plan.cp() > 1 && plan.cp_comm() == plan::CP_COMM_ALL_GATHER};
}

double CostModel::collectiveTime(CollectiveKind kind, double bytes,
                                 int64_t size, int64_t stride) const {
  return Network(clusterSpec).collectiveTime(kind, bytes, size, stride);
}

CollectiveCodec CostModel::codecFor(const plan::Plan &plan,
                                    llvm::ArrayRef<std::string> axes) {
  if (plan.compress().empty())
    return CollectiveCodec::none;
  llvm::Expected<CompressPolicy> policy = parseCompressPolicy(plan.compress());
  if (!policy) {
    llvm::consumeError(policy.takeError());
    return CollectiveCodec::none;
  }
  return symbolizeCollectiveCodec(codecForAxes(*policy, axes))
      .value_or(CollectiveCodec::none);
}

double CostModel::wireBytes(double bytes, double width, CollectiveCodec codec) {
  if (codec == CollectiveCodec::none || width <= 0)
    return bytes;
  return double(codecWireBytes(std::llround(bytes / width), std::llround(width),
                               true, codec));
}

double CostModel::codecTime(CollectiveKind kind, double bytes, double wire,
                            CollectiveCodec codec) const {
  // Nothing to encode when the codec does not narrow the data (bf16 on
  // bf16 activations): the runtime sends them as they are.
  if (codec == CollectiveCodec::none || wire >= bytes)
    return 0;
  const plan::Gpu &gpu = clusterSpec.gpu();
  double phases = kind == CollectiveKind::AllReduce ? 2 : 1;
  return phases * 2 * (bytes + wire) /
         (gpu.hbm_gbps() * 1e9 * gpu.memory_efficiency());
}

CollectiveCodec CostModel::gradientCodec(const plan::Plan &plan) {
  if (plan.compress().empty())
    return CollectiveCodec::none;
  return codecFor(plan, gradientAxes(plan));
}

std::vector<std::string> CostModel::gradientAxes(const plan::Plan &plan) {
  std::vector<std::string> axes = {"dp"};
  if (plan.cp() > 1)
    axes.push_back("cp");
  if (plan.ulysses() > 1)
    axes.push_back("ulysses");
  return axes;
}

//===----------------------------------------------------------------------===//
// Blocks: costing the rank's program op by op
//===----------------------------------------------------------------------===//

double CostModel::opTime(const OpCost &cost) const {
  double bytes = double(cost.bytesRead + cost.bytesWritten);
  if (cost.flops == 0 && bytes == 0)
    return 0.0;
  const plan::Gpu &gpu = clusterSpec.gpu();
  const double peak = (trainingConfig.dtype() == "fp16" ? gpu.fp16_tflops()
                                                        : gpu.bf16_tflops()) *
                      1e12;
  const double hbm = gpu.hbm_gbps() * 1e9 * gpu.memory_efficiency();
  int kernels = std::max(cost.kernels, 1);
  double compute;
  if (cost.unit == OpCost::Unit::Vector) {
    compute = cost.flops / (gpu.fp32_tflops() * 1e12);
  } else {
    // The efficiency curve is per kernel: a backward of two GEMMs runs two
    // GEMMs of the forward's size.
    double perKernel = cost.flops / kernels;
    double eff =
        gpu.gemm_efficiency() * perKernel / (perKernel + gpu.gemm_half_flops());
    if (cost.unit == OpCost::Unit::FusedAttention)
      eff *= kAttentionEfficiency;
    compute = cost.flops / (peak * std::max(eff, 1e-3));
  }
  return std::max(compute, bytes / hbm) + launchTime(cost);
}

double CostModel::launchTime(const OpCost &cost) const {
  if (cost.flops == 0 && cost.bytesRead == 0 && cost.bytesWritten == 0)
    return 0.0;
  const plan::Gpu &gpu = clusterSpec.gpu();
  double perKernel =
      gpu.kernel_overhead_us() +
      (trainingConfig.launch_blocking() ? gpu.blocking_launch_us() : 0.0);
  return std::max(cost.kernels, 1) * perKernel * 1e-6;
}

/// Lagrange weights of x for linear interpolation between x0 and x1.
static std::pair<double, double> linearWeights(double x, double x0, double x1) {
  return {(x1 - x) / (x1 - x0), (x - x0) / (x1 - x0)};
}

bool CostModel::measure(const ProgramShape &shape, int64_t microBatch,
                        ProgramProfile &profile, std::string &error) {
  auto start = std::chrono::steady_clock::now();
  OwningOpRef<ModuleOp> program = programs->build(shape, microBatch, error);
  bool built = bool(program);
  if (program)
    profile = profileProgram(*program, trainingConfig.freeze());
  ++stats.programs;
  // Layers that differ in their sliding window (Gemma 2's local and global
  // ones): the program keeps a layer of each kind in turn, and the layer
  // costed is their mean, each weighted by the fraction of the layers it
  // stands for. Their counts differ (an attention's pairs), and their ops
  // where a window lets the ring skip steps: those are kept with zero
  // counts in the variants that lack them (planner::mergeVariant).
  ArrayRef<double> weights = programs->layerVariants();
  if (built && weights.size() > 1) {
    profile.variantCounts.assign(1, profile.counts);
    bool merged = false;
    for (size_t v = 1; v < weights.size() && built; ++v) {
      OwningOpRef<ModuleOp> other =
          programs->build(shape, microBatch, error, v);
      ++stats.programs;
      built = bool(other);
      if (!other)
        break;
      ProgramProfile kind = profileProgram(*other, trainingConfig.freeze());
      if (!merged && sameOps(profile, kind)) {
        profile.variantCounts.push_back(std::move(kind.counts));
      } else {
        mergeVariant(profile, kind, unsigned(v));
        merged = true;
      }
    }
    if (built) {
      profile.counts.assign(profile.variantCounts.front().size(), 0.0);
      for (size_t v = 0; v < weights.size(); ++v)
        for (size_t j = 0; j < profile.counts.size(); ++j)
          profile.counts[j] += weights[v] * profile.variantCounts[v][j];
    }
  }
  stats.programSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return built;
}

bool CostModel::exactProfile(const ProgramShape &shape, int64_t microBatch,
                             ProfileTerms &terms, std::string &error) {
  if (!programs->hasMicroBatch(microBatch, error))
    return false;
  auto [found, inserted] = exactCache.try_emplace(shape);
  ShapeProfiles &entry = found->second;
  // The smallest micro-batch the program splits: 3-D tensor parallelism's
  // depth axis splits it gz ways.
  const int64_t unit = std::max<int64_t>(1, shape.gz);
  if (inserted) {
    // Two micro-batch sizes give every other one (counts are affine in it).
    std::string unused;
    if (unit > 1 && (!programs->hasMicroBatch(unit, unused) ||
                     !programs->hasMicroBatch(2 * unit, unused)))
      entry.affine = false; // built at each micro-batch below
    else if (measure(shape, unit, entry.one, entry.error) &&
             measure(shape, 2 * unit, entry.two, entry.error))
      entry.affine = sameOps(entry.one, entry.two);
  }
  if (!entry.error.empty()) {
    error = entry.error;
    return false;
  }
  if (entry.affine) {
    auto [w1, w2] =
        linearWeights(double(microBatch), double(unit), double(2 * unit));
    terms = {{&entry.one, w1}, {&entry.two, w2}};
    return true;
  }
  // The program's ops depend on the batch: build it at this one.
  auto exact = entry.exact.find(microBatch);
  if (exact == entry.exact.end()) {
    ProgramProfile profile;
    if (!measure(shape, microBatch, profile, error))
      return false;
    exact = entry.exact.emplace(microBatch, std::move(profile)).first;
  }
  terms = {{&exact->second, 1.0}};
  return true;
}

bool CostModel::familyProfile(const plan::Plan &plan, ProfileTerms &terms) {
  // A family is the programs that differ only in sizes: tp > 1 or not,
  // ulysses > 1 or not, the ring (whose steps are unrolled) and SP. Its
  // members' counts are multilinear in (micro-batch, 1/tp, 1/ulysses), so
  // the programs at the corners (micro-batch 1 and 2, tp 2 and 4, ulysses 2
  // and 4) give all of them. That needs every dimension a member splits to
  // divide by its degrees, as it does for built-in models (checkPlan).
  if (ownModel || exactPrograms || uses3dTensorParallel(plan))
    return false;
  const int64_t tp = plan.tp(), u = plan.ulysses();
  if ((tp > 1 && modelSpec.vocab() % (tp * 4) && modelSpec.vocab() % tp) ||
      modelSpec.vocab() % 4)
    return false;
  FamilyKey key = familyKey(plan);
  // Repeated KV heads (fewer than tp x ulysses) make a program whose counts
  // are not multilinear in 1/tp (each rank repeats its K and V tp x ulysses
  // / kv_heads times): such a plan, or a family whose corners would repeat
  // them, is built at its own degrees.
  if (modelSpec.kv_heads() % (tp * u) ||
      modelSpec.kv_heads() % ((key.tp ? 4 : 1) * (key.ulysses ? 4 : 1)))
    return false;
  auto [found, inserted] = familyCache.try_emplace(key);
  Family &family = found->second;
  if (inserted) {
    std::vector<int64_t> tps =
        key.tp ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{1};
    std::vector<int64_t> us =
        key.ulysses ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{1};
    std::string error;
    for (int64_t mbs : {1, 2})
      for (int64_t t : tps)
        for (int64_t uu : us) {
          ProgramShape shape{2,           t, key.cp, uu, key.sp, key.cpGather,
                             key.compress};
          family.corners.emplace_back();
          if (!measure(shape, mbs, family.corners.back(), error)) {
            family.valid = false;
            return false;
          }
          if (!sameOps(family.corners.front(), family.corners.back())) {
            family.valid = false;
            return false;
          }
        }
    family.valid = true;
  }
  if (!family.valid)
    return false;
  auto mbs = linearWeights(double(plan.micro_batch()), 1, 2);
  auto t =
      key.tp ? linearWeights(1.0 / tp, 0.5, 0.25) : std::make_pair(1.0, 0.0);
  auto uw = key.ulysses ? linearWeights(1.0 / u, 0.5, 0.25)
                        : std::make_pair(1.0, 0.0);
  terms.clear();
  size_t index = 0;
  for (double wm : {mbs.first, mbs.second})
    for (int ti = 0; ti < (key.tp ? 2 : 1); ++ti)
      for (int ui = 0; ui < (key.ulysses ? 2 : 1); ++ui) {
        double w = wm * (ti ? t.second : t.first) * (ui ? uw.second : uw.first);
        terms.push_back({&family.corners[index++], w});
      }
  return true;
}

void CostModel::costProfile(const plan::Plan &plan, const ProfileTerms &terms,
                            double scale, int64_t ring, Blocks &result,
                            bool &byDp, int variant) {
  const int64_t dp = std::max(1, plan.dp());
  // Each count is the weighted sum of the measured programs' counts.
  auto sum = [&](auto field) {
    double total = 0;
    for (auto &[profile, weight] : terms)
      total += weight * field(*profile);
    return total;
  };
  const ProgramProfile &first = *terms.front().first;
  std::vector<double> &counts = scratchCounts;
  counts.assign(first.counts.size(), 0.0);
  for (auto &[profile, weight] : terms) {
    const double *from = variant < 0
                             ? profile->counts.data()
                             : profile->variantCounts[size_t(variant)].data();
    for (size_t j = 0, e = counts.size(); j < e; ++j)
      counts[j] += weight * from[j];
  }
  // A problem `scale` times the size: what grows with the tokens (flops,
  // activation bytes, the bytes collectives carry) scales, kernel counts
  // and latencies do not; weight bytes scale too, which only lowers the
  // figure (CostModel::relativeBlocks).
  if (scale != 1.0)
    for (double &count : counts)
      count *= scale;
  auto cost = [&](const OpCost &like, const double *at) {
    OpCost c = like;
    c.flops = at[0];
    c.bytesRead = int64_t(std::llround(at[1]));
    c.bytesWritten = int64_t(std::llround(at[2]));
    return c;
  };
  BlockCost *byKind[3] = {&result.embedding, &result.layer, &result.head};
  double ringComm[3] = {0, 0, 0}, ringSteps[3] = {0, 0, 0};
  double largestStep[3] = {0, 0, 0}, stepOps[3] = {0, 0, 0};
  // The ring's backward (the partitioned weft.attention_grad): each block
  // the forward passes is passed again, and a key or value block's
  // gradient sums travel with it, n times per attention of n steps where
  // the block goes n - 1 times (the last send takes them home, after the
  // last step: exposed). Its steps are the blocks' gradients. (n is c, or
  // fewer where a sliding window lets the ring skip steps.)
  double ringBackward[3] = {0, 0, 0}, sumsHome[3] = {0, 0, 0};
  double keyValueSends[3] = {0, 0, 0}, keyValueTime[3] = {0, 0, 0};
  double backwardSteps[3] = {0, 0, 0}, largestBackwardStep[3] = {0, 0, 0};
  // All-gather context parallelism: the backward gathers the K/V blocks
  // again and reduce-scatters their gradients (the same bytes), exposed as
  // the forward's gathers are.
  double keysGathered[3] = {0, 0, 0};
  const unsigned variantBit =
      variant >= 0 && variant < 32 ? 1u << variant : ~0u;
  for (size_t i = 0; i < first.ops.size(); ++i) {
    const OpRecord &op = first.ops[i];
    // An op another kind of layer has and this one does not.
    if (!(op.variants & variantBit))
      continue;
    const double *at = counts.data() + i * kCountFields;
    int kind = int(op.block);
    BlockCost &block = *byKind[kind];
    if (op.collective) {
      if (op.axes & kDpAxis)
        byDp = true;
      AxisSizes sizes = AxisSizes::of(plan);
      sizes.dp = dp;
      int64_t group = groupSize(op.axes, sizes);
      int64_t stride = groupStride(op.axes, sizes);
      // The codec the program's collective carries: raw bytes are
      // interpolated exactly, then encoded.
      CollectiveCodec codec =
          op.floatOperand ? op.codec : CollectiveCodec::none;
      double full = wireBytes(at[kFullBytes], op.elementBytes, codec);
      double operand = wireBytes(at[kOperandBytes], op.elementBytes, codec);
      // A top-k all-reduce is an all-gather of each rank's kept part.
      CollectiveKind sentAs =
          isTopK(codec) ? CollectiveKind::AllGather : op.kind;
      double encoded = full;
      if (isTopK(codec))
        full = operand * double(group);
      double time = collectiveTime(sentAs, full, group, stride) +
                    codecTime(sentAs, at[kFullBytes], encoded, codec);
      block.commBytes += double(
          collectiveBytesSent(sentAs, int64_t(std::llround(operand)), group));
      if (op.regathered)
        block.regather += time;
      if (op.recomputedByOps)
        block.recomputedByOps += time;
      if (op.gradientRegathered)
        block.gradientRegather +=
            collectiveTime(CollectiveKind::AllGather, full, group, stride) +
            codecTime(CollectiveKind::AllGather, at[kFullBytes], encoded,
                      codec);
      if (op.commClass == CommClass::WeightGather)
        block.weightGather += time;
      else if (op.commClass == CommClass::TensorParallel)
        block.tpComm += time;
      else if (op.commClass == CommClass::Ring) {
        ringComm[kind] += time;
        ringBackward[kind] += time;
        if (op.ringRole == OpRecord::RingRole::KeyValue && plan.cp() > 1) {
          ++keyValueSends[kind];
          keyValueTime[kind] += time;
        }
      } else {
        block.seqComm += time;
        if (op.keysGathered)
          keysGathered[kind] += time;
      }
      continue;
    }
    OpCost forwardCost = cost(op.forward, at + kForwardFlops);
    double forward = opTime(forwardCost);
    block.forward += forward;
    block.flops += forwardCost.flops;
    OpCost input = cost(op.backward.inputGradient, at + kInputGradientFlops);
    block.backwardInput += opTime(input);
    OpCost weight = cost(op.backward.weightGradient, at + kWeightGradientFlops);
    block.backwardWeight += opTime(weight);
    block.launches +=
        launchTime(forwardCost) + launchTime(input) + launchTime(weight);
    if (op.attentionCore)
      block.attentionCore += forward;
    if (op.recomputedByOps)
      block.recomputedByOps += forward;
    if (weight.flops > 0)
      block.linearForward += forward;
    if (op.ringStep) {
      ringSteps[kind] += forward;
      largestStep[kind] = std::max(largestStep[kind], forward);
      ++stepOps[kind];
      double backward = opTime(input);
      backwardSteps[kind] += backward;
      largestBackwardStep[kind] = std::max(largestBackwardStep[kind], backward);
    }
  }
  // A ring's next K/V block travels while the current one is attended to:
  // n - 1 sends overlap n - 1 of its n steps (n = c without a window).
  const double c = plan.cp();
  for (int kind = 0; kind < 3; ++kind) {
    BlockCost &block = *byKind[kind];
    // Each attention's steps pass K and V once between steps: the sends
    // per attention and the steps they overlap.
    const double sends = keyValueSends[kind] / 2;
    const double attentions = std::max(0.0, stepOps[kind] - sends);
    const double overlapped =
        stepOps[kind] > 0 ? sends / stepOps[kind] : (c - 1) / c;
    if (sends > 0) {
      // n sends of the sums per n - 1 of the block.
      ringBackward[kind] += keyValueTime[kind] * stepOps[kind] / sends;
      sumsHome[kind] += keyValueTime[kind] * attentions / sends;
    }
    // (Ulysses' all-to-alls are their own transposes; gathered keys are
    // gathered again and their gradients reduce-scattered.)
    block.serial = trainingConfig.launch_blocking();
    block.seqCommBackward = block.seqComm + keysGathered[kind];
    block.seqCommTotal = block.seqComm + ringComm[kind];
    block.seqCommBackwardTotal =
        block.seqComm + keysGathered[kind] + ringBackward[kind];
    if (c > 1 && block.serial) {
      // Blocking launches: every send waits for its step, and a ring of
      // `ring` steps sends ring - 1 times what these c - 1 sends carry.
      const double r = double(ring);
      block.seqComm += (r - 1) / (c - 1) * ringComm[kind];
      block.seqCommBackward +=
          (r - 1) / (c - 1) * (ringBackward[kind] - sumsHome[kind]) +
          sumsHome[kind];
    } else if (c > 1 && ring == plan.cp()) {
      block.seqComm +=
          std::max(0.0, ringComm[kind] - ringSteps[kind] * overlapped);
      block.seqCommBackward +=
          std::max(0.0, ringBackward[kind] - sumsHome[kind] -
                            backwardSteps[kind] * overlapped) +
          sumsHome[kind];
    } else if (c > 1) {
      // A longer ring of `ring` steps (relativeBlocks): each of its
      // ring - 1 sends per attention carries the scaled bytes of one of
      // these c - 1 (over at least as many nodes), and each of its steps
      // is no larger than the largest step here (scaled by c / ring, where
      // its blocks shrink by (c / ring)^2): at least this much of its sends
      // is exposed. Its backward sends at least as much per step (the
      // blocks and their sums), and the sums' last sends.
      // (Sends per attention: c - 1, or fewer under a window.)
      const double r = double(ring);
      const double perAttention =
          attentions > 0 && sends > 0 ? sends / attentions : c - 1;
      block.seqComm +=
          std::max(0.0, (r - 1) * (ringComm[kind] / perAttention -
                                   attentions * largestStep[kind]));
      block.seqCommBackward +=
          std::max(0.0, (r - 1) * ((ringBackward[kind] - sumsHome[kind]) /
                                       perAttention -
                                   attentions * largestBackwardStep[kind])) +
          sumsHome[kind];
    }
    auto memory = [&](double BlockMemory::*field) {
      return sum(
          [&](const ProgramProfile &p) { return p.memory[kind].*field; });
    };
    block.savedBytes = memory(&BlockMemory::savedBytes);
    block.savedBytesSelective = memory(&BlockMemory::savedBytesSelective);
    block.savedBytesOps = memory(&BlockMemory::savedBytesOps);
    block.inputBytes = memory(&BlockMemory::inputBytes);
    block.weightGradientReadBytes =
        memory(&BlockMemory::weightGradientReadBytes);
    block.weightGradientReadsInput =
        first.memory[kind].weightGradientReadsInput;
    block.sharedInputBytes = memory(&BlockMemory::sharedInputBytes);
    block.parameters = memory(&BlockMemory::parameters);
    block.sharedParameters = memory(&BlockMemory::sharedParameters);
    block.frozenParameters = memory(&BlockMemory::frozenParameters);
    block.frozenSharedParameters = memory(&BlockMemory::frozenSharedParameters);
    block.gatheredWeight = memory(&BlockMemory::gatheredWeight);
    block.gatheredKeysBytes = memory(&BlockMemory::gatheredKeysBytes);
  }
}

const CostModel::Blocks &CostModel::blocks(const plan::Plan &plan) {
  const int64_t dp = std::max(1, plan.dp());
  BlockKey key = blockKey(plan);
  if (lastBlocks) {
    BlockKey last = key;
    if (lastDpDependent)
      std::get<5>(last) = dp;
    if (last == lastKey)
      return *lastBlocks;
  }
  bool byDp = dpDependent.count(key);
  if (byDp)
    std::get<5>(key) = dp;
  auto found = cache.find(key);
  if (found != cache.end()) {
    lastKey = key;
    lastDpDependent = byDp;
    lastBlocks = &found->second;
    return found->second;
  }

  Blocks result;
  // Local shapes do not depend on dp, only the batch each rank gets. The
  // program is built at dp = 2 so that what it communicates over dp in
  // forward (an attention mask gathered over the batch, say) is in it;
  // those collectives are costed at the plan's dp. A program with such
  // collectives has a dp = 1 form of its own (nothing gathered), built
  // for plans without data parallelism.
  ProgramShape shape = ProgramShape::of(plan, byDp && dp == 1 ? 1 : 2);
  ProfileTerms terms;
  auto startCombine = std::chrono::steady_clock::now();
  double programsBefore = stats.programSeconds;
  llvm::scope_exit countCombine([&] {
    ++stats.shapes;
    stats.shapeSeconds += std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - startCombine)
                              .count() -
                          (stats.programSeconds - programsBefore);
  });
  if ((byDp || !familyProfile(plan, terms)) &&
      !exactProfile(shape, plan.micro_batch(), terms, result.error)) {
    // A program that cannot be built never wins.
    double infinity = std::numeric_limits<double>::infinity();
    for (BlockCost *block : {&result.layer, &result.embedding, &result.head})
      block->forward = infinity;
  } else {
    costProfile(plan, terms, 1.0, plan.cp(), result, byDp);
    // Layers of several kinds: each kind's layer too, for the stages
    // that hold them (the embedding and the head are the same in each).
    const size_t kinds = terms.front().first->variantCounts.size();
    if (kinds > 1 && llvm::all_of(terms, [&](const auto &term) {
          return term.first->variantCounts.size() == kinds;
        }))
      for (size_t k = 0; k < kinds; ++k) {
        Blocks kind;
        bool unused = false;
        costProfile(plan, terms, 1.0, plan.cp(), kind, unused, int(k));
        result.layerKinds.push_back(kind.layer);
      }
  }
  if (byDp && !std::get<5>(key)) {
    dpDependent.insert(key);
    // Costed from the dp = 2 program: right for every dp > 1.
    if (dp == 1)
      return blocks(plan);
    std::get<5>(key) = dp;
  }
  lastKey = key;
  lastDpDependent = byDp;
  lastBlocks = &cache.emplace(key, std::move(result)).first->second;
  return *lastBlocks;
}

std::string CostModel::programError(const plan::Plan &plan) {
  return blocks(plan).error;
}

const BlockCost &CostModel::layerCost(const plan::Plan &plan) {
  return blocks(plan).layer;
}
const BlockCost &CostModel::embeddingCost(const plan::Plan &plan) {
  return blocks(plan).embedding;
}
const BlockCost &CostModel::headCost(const plan::Plan &plan) {
  return blocks(plan).head;
}

OwningOpRef<ModuleOp> CostModel::rankProgram(const plan::Plan &plan,
                                             std::string &error) {
  return programs->build(ProgramShape::of(plan, std::max(1, plan.dp())),
                         plan.micro_batch(), error);
}

std::string CostModel::rankProgramText(const plan::Plan &plan) {
  std::string error;
  OwningOpRef<ModuleOp> module = rankProgram(plan, error);
  if (!module)
    return "// no rank program: " + error + "\n";
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

//===----------------------------------------------------------------------===//
// Checking a plan
//===----------------------------------------------------------------------===//

std::string CostModel::checkPlan(const plan::Plan &plan) const {
  std::string why;
  llvm::raw_string_ostream os(why);
  const plan::ModelSpec &m = modelSpec;
  const int64_t seq = trainingConfig.seq_len();
  if (plan.dp() < 1 || plan.tp() < 1 || plan.pp() < 1 || plan.cp() < 1 ||
      plan.ulysses() < 1 || plan.micro_batch() < 1)
    return "every degree and the micro-batch size must be at least 1";
  // Ring attention is blockwise attention with an online softmax: a fused
  // kernel. Megatron-LM's context parallelism likewise needs
  // TransformerEngine's fused attention.
  if (plan.cp() > 1 && !trainingConfig.flash_attention())
    return "ring attention (cp > 1) needs fused (flash) attention, which "
           "--flash-attention=false rules out; split the sequence with "
           "ulysses or sp instead";
  int64_t gpus = int64_t(plan.dp()) * plan.tp() * plan.pp() * plan.cp() *
                 plan.ulysses() * tensor3dSize(plan);
  if (gpus > totalGpus(clusterSpec)) {
    os << "the plan needs " << gpus << " GPUs (dp*tp*pp*cp*ulysses"
       << (uses3dTensorParallel(plan) ? "*gx*gy*gz" : "") << ") but the "
       << "cluster has " << totalGpus(clusterSpec);
    return why;
  }
  if (uses3dTensorParallel(plan)) {
    if (plan.gx() < 1 || plan.gy() < 1 || plan.gz() < 1)
      return "the 3-D tensor-parallel grid's degrees must be at least 1";
    if (plan.tp() > 1 || plan.cp() > 1 || plan.ulysses() > 1 ||
        plan.sequence_parallel() || plan.tp_comm_overlap())
      return "3-D tensor parallelism (tp3d) takes the place of Megatron's tp "
             "and does not combine with tp, sp, tp-overlap, cp or ulysses";
    if (m.heads() % plan.gy() || m.kv_heads() % plan.gy()) {
      os << "heads (" << m.heads() << ", " << m.kv_heads()
         << " KV) are not divisible by gy=" << plan.gy();
      return why;
    }
    int64_t g = int64_t(plan.gx()) * plan.gy() * plan.gz();
    if (m.hidden() % g || m.ffn_hidden() % g) {
      os << "hidden (" << m.hidden() << ") and ffn_hidden (" << m.ffn_hidden()
         << ") must be divisible by gx*gy*gz (" << g << ")";
      return why;
    }
    if (plan.micro_batch() % plan.gz()) {
      os << "the micro-batch (" << plan.micro_batch()
         << ") is split over gz=" << plan.gz() << " and must divide by it";
      return why;
    }
  }
  if (plan.tp() > clusterSpec.gpus_per_node() && !plan.tp_across_nodes()) {
    os << "tp=" << plan.tp() << " does not fit in a node of "
       << clusterSpec.gpus_per_node() << " GPUs (allow it with tp across nodes)";
    return why;
  }
  int64_t tu = int64_t(plan.tp()) * plan.ulysses();
  if (m.heads() % tu) {
    os << "heads (" << m.heads() << ") are not divisible by tp*ulysses (" << tu
       << ")";
    return why;
  }
  // KV heads split over tp x ulysses, or repeated when it is a multiple of
  // them (-weft-apply-plan, as it builds the rank program).
  if (m.kv_heads() % tu && tu % m.kv_heads()) {
    os << "kv_heads (" << m.kv_heads() << ") and tp*ulysses (" << tu
       << ") do not divide one another";
    return why;
  }
  if (m.ffn_hidden() % plan.tp()) {
    os << "ffn_hidden (" << m.ffn_hidden() << ") is not divisible by tp="
       << plan.tp();
    return why;
  }
  // The ring's load-balanced layout splits the sequence in 2 x cp chunks
  // (-weft-apply-plan, by the same rule: a decoder's layers are causal).
  const bool zigzag = plan.cp() > 1 && ringLoadBalanced(m, seq);
  int64_t seqSplit = int64_t(plan.cp()) * plan.ulysses() * (zigzag ? 2 : 1);
  if (seq % seqSplit) {
    os << "the sequence (" << seq << ") is not divisible by "
       << (zigzag          ? "2*cp*ulysses"
           : plan.cp() > 1 ? "cp*ulysses"
                           : "ulysses")
       << " (" << seqSplit << ")";
    return why;
  }
  if (plan.tp_comm_overlap() && !plan.sequence_parallel())
    return "TP communication overlap needs sequence parallelism (sp)";
  if (plan.sequence_parallel()) {
    if (plan.tp() == 1)
      return "sequence parallelism needs tp > 1";
    if ((seq / plan.cp() / plan.ulysses()) % plan.tp()) {
      os << "sequence parallelism: the " << seq / plan.cp() / plan.ulysses()
         << " tokens per rank are not divisible by tp=" << plan.tp();
      return why;
    }
  }
  int64_t batch = trainingConfig.global_batch();
  if (batch % (int64_t(plan.dp()) * plan.micro_batch())) {
    os << "the global batch (" << batch << ") is not divisible by dp*mbs ("
       << int64_t(plan.dp()) * plan.micro_batch() << ")";
    return why;
  }
  int64_t micro = batch / plan.dp() / plan.micro_batch();
  if (plan.num_micro_batches() != micro) {
    os << "num_micro_batches is " << plan.num_micro_batches()
       << " but global batch / (dp*mbs) is " << micro;
    return why;
  }
  if (plan.pp() > m.layers()) {
    os << "pp=" << plan.pp() << " is more than the " << m.layers()
       << " layers";
    return why;
  }
  int v = virtualStages(plan);
  switch (plan.schedule()) {
  case plan::SCHEDULE_INTERLEAVED:
  case plan::SCHEDULE_ZEROPP:
    if (plan.schedule() == plan::SCHEDULE_INTERLEAVED && v < 2)
      return "the interleaved schedule needs v >= 2 chunks per stage";
    // Chunks may be uneven (weft::chunkLayers); only the first rank's first
    // chunk and the last rank's last may hold no layer.
    if (m.layers() < int64_t(plan.pp()) * v - 2) {
      os << "the " << m.layers() << " layers do not fill pp*v ("
         << plan.pp() * v
         << ") chunks: every chunk needs a layer, except the first rank's "
            "first and the last rank's last; use a smaller v or pp";
      return why;
    }
    if (plan.schedule() == plan::SCHEDULE_INTERLEAVED && plan.pp() < 2)
      return "the interleaved schedule needs pp >= 2";
    if (plan.schedule() == plan::SCHEDULE_INTERLEAVED && micro % plan.pp()) {
      os << "the interleaved schedule needs the " << micro
         << " micro-batches to be a multiple of pp=" << plan.pp();
      return why;
    }
    if (plan.schedule() == plan::SCHEDULE_ZEROPP &&
        (plan.tp() != 1 || plan.zero_stage() != 3))
      return "ZeroPP is a TP-free pipeline with fully sharded data "
             "parallelism: it needs tp=1 and zero=3";
    break;
  case plan::SCHEDULE_ZB_H1:
  case plan::SCHEDULE_GPIPE:
    if (plan.pp() < 2) {
      os << scheduleName(plan.schedule()) << " needs pp >= 2";
      return why;
    }
    break;
  default:
    break;
  }
  if (plan.zero_stage() < 0 || plan.zero_stage() > 3)
    return "zero must be 0, 1, 2 or 3";
  if (plan.stage_layers_size()) {
    if (plan.stage_layers_size() != plan.pp()) {
      os << "stages lists " << plan.stage_layers_size()
         << " stages but pp=" << plan.pp();
      return why;
    }
    int64_t sum = 0;
    for (int32_t n : plan.stage_layers()) {
      if (n < 1)
        return "every pipeline stage needs at least one layer";
      sum += n;
    }
    if (sum != m.layers()) {
      os << "stages hold " << sum << " layers but the model has "
         << m.layers();
      return why;
    }
    if (v > 1) {
      std::vector<int64_t> perRank(plan.stage_layers().begin(),
                                   plan.stage_layers().end());
      std::string uneven = checkChunkLayers(perRank, v);
      if (!uneven.empty())
        return uneven;
    }
  }
  return "";
}

//===----------------------------------------------------------------------===//
// Stages, memory and time
//===----------------------------------------------------------------------===//

size_t CostModel::chunkKindCounts(const plan::Plan &plan, const Blocks &b,
                                  std::vector<double> &counts) const {
  const int v = virtualStages(plan);
  const std::vector<int64_t> chunks =
      chunkLayers(std::vector<int64_t>(plan.stage_layers().begin(),
                                       plan.stage_layers().end()),
                  v);
  ArrayRef<uint32_t> sequence = programs->layerVariantSequence();
  const size_t kinds = b.layerKinds.size();
  int64_t total = 0;
  for (int64_t n : chunks)
    total += n;
  if (kinds < 2 || int64_t(sequence.size()) != total) {
    counts.assign(chunks.begin(), chunks.end());
    return 1;
  }
  // The chunks take the layers in order, virtual stage by virtual stage.
  counts.assign(chunks.size() * kinds, 0.0);
  size_t layer = 0;
  for (size_t vs = 0; vs < chunks.size(); ++vs)
    for (int64_t i = 0; i < chunks[vs]; ++i)
      counts[vs * kinds + std::min<size_t>(sequence[layer++], kinds - 1)] += 1;
  return kinds;
}

/// Interleaved chunks of layers of several kinds: the layers per rank
/// (`stages`) moved one at a time from the busiest rank to another while
/// that lowers the busiest rank's work (then the sum of the squares of the
/// ranks' work), each rank keeping `least(rank)` layers. A rank's work is
/// its chunks' layers, which weft::chunkLayers deals out in virtual-stage
/// order (a move shifts which layers every later chunk holds), each
/// `weightOf(layer)`, and the embedding's `firstExtra` on the first rank and
/// the head's `lastExtra` on the last.
static void balanceChunksByKind(std::vector<int32_t> &stages, int v,
                                int64_t firstExtra, int64_t lastExtra,
                                llvm::function_ref<int64_t(int64_t)> weightOf,
                                llvm::function_ref<int(int)> least) {
  const int p = int(stages.size());
  // (busiest rank's work, sum of squares); the busiest rank.
  auto measure = [&](const std::vector<int32_t> &perRank, int *busiest) {
    std::vector<int64_t> chunks =
        chunkLayers(std::vector<int64_t>(perRank.begin(), perRank.end()), v);
    std::vector<int64_t> work(size_t(p), 0);
    work[0] += firstExtra;
    work[size_t(p - 1)] += lastExtra;
    int64_t layer = 0;
    for (size_t vs = 0; vs < chunks.size(); ++vs)
      for (int64_t i = 0; i < chunks[vs]; ++i)
        work[vs % size_t(p)] += weightOf(layer++);
    int top = 0;
    double squares = 0;
    for (int s = 0; s < p; ++s) {
      squares += double(work[size_t(s)]) * double(work[size_t(s)]);
      if (work[size_t(s)] > work[size_t(top)])
        top = s;
    }
    if (busiest)
      *busiest = top;
    return std::make_pair(work[size_t(top)], squares);
  };
  int busiest = 0;
  std::pair<int64_t, double> best = measure(stages, &busiest);
  int64_t total = 0;
  for (int32_t n : stages)
    total += n;
  // From the even split instead where that is better (the remainder on the
  // middle ranks, whose chunks hold no embedding or head).
  std::vector<int32_t> even(size_t(p), int32_t(total / p));
  for (int64_t r = 0; r < total % p; ++r)
    ++even[size_t(1 + r % std::max(1, p - 2))];
  bool fits = true;
  for (int s = 0; s < p; ++s)
    fits &= even[size_t(s)] >= least(s);
  int evenBusiest = 0;
  if (std::pair<int64_t, double> start = measure(even, &evenBusiest);
      fits && start < best) {
    best = start;
    stages = even;
    busiest = evenBusiest;
  }
  // (Each move lowers the pair; a bound on the moves all the same.)
  for (int64_t moves = 0; moves < 4 * total + 4 * p; ++moves) {
    std::vector<int32_t> chosen;
    int chosenBusiest = busiest;
    for (int to = 0; to < p; ++to) {
      if (to == busiest || stages[size_t(busiest)] <= least(busiest))
        continue;
      std::vector<int32_t> moved = stages;
      --moved[size_t(busiest)];
      ++moved[size_t(to)];
      int top = 0;
      std::pair<int64_t, double> result = measure(moved, &top);
      if (result < best) {
        best = result;
        chosen = std::move(moved);
        chosenBusiest = top;
      }
    }
    if (chosen.empty())
      return;
    stages = std::move(chosen);
    busiest = chosenBusiest;
  }
}

std::vector<int32_t> CostModel::balanceStages(const plan::Plan &plan) {
  const int p = plan.pp(), v = virtualStages(plan);
  const int64_t layers = modelSpec.layers();
  // (Layers of several kinds differ by their sliding window.)
  const bool oneKind = modelSpec.mixed_sliding_window() <= 0;
  if (p == 1 || (v > 1 && oneKind && layers % (int64_t(p) * v) == 0))
    return std::vector<int32_t>(p, int32_t(layers / p));
  // (One lookup of the plan's blocks: this runs once per candidate.)
  const Blocks &costs = blocks(plan);
  const BlockCost &layer = costs.layer, &embed = costs.embedding,
                  &head = costs.head;
  auto total = [](const BlockCost &b) {
    return b.forward + b.backwardInput + b.backwardWeight + 2 * b.tpComm;
  };
  double unit = std::max(total(layer), 1e-12);
  // The stages' shape depends only on the extra work of the first and last
  // stage relative to a layer; cache on those ratios.
  int64_t firstExtra = std::llround(total(embed) / unit * 100);
  int64_t lastExtra = std::llround(total(head) / unit * 100);
  // Layers of several kinds (local and global attention): each layer
  // weighs its kind's work, in hundredths of the mean layer's, in the
  // model's order of layers.
  ArrayRef<uint32_t> sequence = programs->layerVariantSequence();
  std::vector<int64_t> kindWeights;
  if (costs.layerKinds.size() > 1 && int64_t(sequence.size()) == layers)
    for (const BlockCost &kind : costs.layerKinds)
      kindWeights.push_back(
          std::max<int64_t>(1, std::llround(total(kind) / unit * 100)));
  auto weightOf = [&](int64_t i) -> int64_t {
    return kindWeights.empty()
               ? 100
               : kindWeights[std::min<size_t>(sequence[size_t(i)],
                                              kindWeights.size() - 1)];
  };
  auto key =
      std::make_tuple(p, v, int(layers), firstExtra, lastExtra, kindWeights);
  auto found = stageCache.find(key);
  if (found != stageCache.end())
    return found->second;
  // Contiguous min-max partition of [embedding, layer 1..L, head] into p
  // stages with at least one layer each: binary search on the largest stage
  // cost, greedy packing from the front (so ties leave earlier stages
  // fuller, deterministically). Costs are in hundredths of a layer.
  auto pack = [&](int64_t limit, std::vector<int32_t> *out) -> bool {
    // Stages closed so far (their layer counts go to `out` when given).
    int64_t closed = 0;
    if (out)
      out->clear();
    int64_t current = firstExtra;
    int32_t count = 0;
    for (int64_t i = 0; i < layers; ++i) {
      int64_t remainingLayers = layers - i;
      int64_t remainingStages = p - closed - 1;
      bool last = i == layers - 1;
      int64_t add = weightOf(i) + (last ? lastExtra : 0);
      // Close the stage when the next layer does not fit, or when the
      // stages left need one layer each.
      if (count > 0 && (current + add > limit ||
                        remainingLayers <= remainingStages)) {
        if (out)
          out->push_back(count);
        ++closed;
        current = 0;
        count = 0;
      }
      current += add;
      ++count;
      if (current > limit || closed >= p)
        return false;
    }
    if (out)
      out->push_back(count);
    return closed + 1 == p;
  };
  int64_t low = 0, high = firstExtra + lastExtra;
  for (int64_t i = 0; i < layers; ++i)
    high += weightOf(i);
  while (low < high) {
    int64_t mid = low + (high - low) / 2;
    if (pack(mid, nullptr))
      high = mid;
    else
      low = mid + 1;
  }
  std::vector<int32_t> stages;
  if (!pack(low, &stages))
    stages.assign(p, int32_t(layers / p));
  if (v > 1) {
    // Interleaved chunks need a layer each, except the first rank's first
    // and the last rank's last (weft::chunkLayers): move layers to the ranks
    // short of that from the fullest ones (the first of them), which leaves
    // the slowest stage no slower when the layers fill the chunks evenly.
    auto least = [&](int s) { return v - (s == 0 || s == p - 1 ? 1 : 0); };
    for (int s = 0; s < p; ++s)
      while (stages[s] < least(s)) {
        int from = -1;
        for (int t = 0; t < p; ++t)
          if (stages[t] > least(t) && (from < 0 || stages[t] > stages[from]))
            from = t;
        if (from < 0)
          break; // too few layers: checkPlan says so
        --stages[from];
        ++stages[s];
      }
    if (!kindWeights.empty())
      balanceChunksByKind(stages, v, firstExtra, lastExtra, weightOf, least);
  }
  stageCache.emplace(key, stages);
  return stages;
}

/// TP communication left on the critical path. With overlap, each collective
/// runs as tp chunks pipelined with the GEMM next to it (`gemmScale` x the
/// forward linear time in that pass); the first chunk cannot overlap.
static double exposedTensorParallelComm(const plan::Plan &plan,
                                        const BlockCost &block,
                                        double gemmScale) {
  if (!plan.tp_comm_overlap() || block.serial)
    return block.tpComm;
  return std::max(block.tpComm / plan.tp(),
                  block.tpComm - gemmScale * block.linearForward);
}

/// The part of a block's weight gathers (forward) or of its gradients'
/// reduce-scatters (backward, the same bytes) that its compute in that pass
/// does not hide: the next block's weights are gathered while this one
/// computes.
static double exposedWeightGather(const BlockCost &block, bool backward) {
  if (block.serial)
    return block.weightGather;
  double compute =
      backward ? block.backwardInput + block.backwardWeight : block.forward;
  return std::max(0.0, block.weightGather - compute);
}

/// What a layer's backward runs again before its gradients, by the plan's
/// recomputation: the whole forward (`layerForward`, with its exposed
/// communication), the attention core, or what recompute=op reruns.
static double recomputeTime(const plan::Plan &plan, const BlockCost &layer,
                            double layerForward) {
  switch (plan.recompute()) {
  case plan::RECOMPUTE_FULL:
    return layerForward;
  case plan::RECOMPUTE_SELECTIVE:
    return layer.attentionCore;
  case plan::RECOMPUTE_OP:
    return layer.recomputedByOps;
  default:
    return 0;
  }
}

/// The part of a block's regathers (BlockCost::regather, and under ZB-H1
/// gradientRegather) that its backward does not hide. A regather reads a
/// kept block, so it is issued as the backward starts and runs while the
/// linear layers' GEMMs compute (Megatron SP's asynchronous all-gather in a
/// linear's backward, overlapped with the input gradient's GEMM; under
/// ZB-H1, in the weight-gradient step, with the weight gradients' GEMMs):
/// only what exceeds their time is exposed. Under full recomputation the
/// recomputed forward gathers again instead (in `recompute`), except in a
/// ZB-H1 weight-gradient step, which gathers from the blocks that the
/// backward step passes on.
static double exposedRegather(const plan::Plan &plan, const BlockCost &block,
                              bool recomputed) {
  if (block.serial)
    return plan.schedule() == plan::SCHEDULE_ZB_H1
               ? block.regather + block.gradientRegather
               : (recomputed ? 0.0 : block.regather);
  if (plan.schedule() == plan::SCHEDULE_ZB_H1)
    return std::max(0.0, block.regather + block.gradientRegather -
                             block.linearForward);
  if (recomputed)
    return 0.0;
  return std::max(0.0, block.regather - block.linearForward);
}

void CostModel::stageTimes(const plan::Plan &plan, StageTimes &times,
                           int onlyRank) {
  const int p = plan.pp(), v = virtualStages(plan);
  // (One lookup of the plan's blocks: this runs once per candidate.)
  const Blocks &costs = blocks(plan);
  const BlockCost &layer = costs.layer, &embed = costs.embedding,
                  &head = costs.head;
  const bool zb = plan.schedule() == plan::SCHEDULE_ZB_H1;
  times.forward.assign(p * v, 0);
  times.backward.assign(p * v, 0);
  times.weight.assign(p * v, 0);
  times.shardComm.assign(p * v, 0);
  times.shardExposed.assign(p * v, 0);
  times.shardBytes.assign(p * v, 0);
  // A layer's forward, backward and (ZB-H1) weight-gradient step, for each
  // kind of layer a chunk holds (local and global attention), or the one.
  struct LayerSteps {
    double forward, backward, weight;
  };
  auto stepsOf = [&](const BlockCost &kind) {
    double layerForward = kind.forward +
                          exposedTensorParallelComm(plan, kind, 1) +
                          kind.seqComm + exposedWeightGather(kind, false);
    double recompute = recomputeTime(plan, kind, layerForward);
    const double regather =
        exposedRegather(plan, kind, plan.recompute() == plan::RECOMPUTE_FULL);
    double backward =
        kind.backwardInput + exposedTensorParallelComm(plan, kind, 2) +
        kind.seqCommBackward + recompute + (zb ? 0 : kind.backwardWeight) +
        exposedWeightGather(kind, true) + (zb ? 0 : regather);
    return LayerSteps{layerForward, backward,
                      zb ? kind.backwardWeight + regather : 0};
  };
  std::vector<double> &kindCounts = scratchKindCounts;
  const size_t kinds = chunkKindCounts(plan, costs, kindCounts);
  SmallVector<LayerSteps, 4> kindSteps;
  if (kinds > 1)
    for (const BlockCost &kind : costs.layerKinds)
      kindSteps.push_back(stepsOf(kind));
  else
    kindSteps.push_back(stepsOf(layer));
  const double shard = dataParallelShard(plan);
  const int64_t shardStride = int64_t(plan.tp()) * tensor3dSize(plan);
  for (int c = 0; c < v; ++c)
    for (int s = 0; s < p; ++s) {
      if (onlyRank >= 0 && s != onlyRank)
        continue;
      int vs = c * p + s;
      double layers = 0, f = 0, b = 0, w = 0;
      for (size_t k = 0; k < kinds; ++k) {
        const double n = kindCounts[vs * kinds + k];
        layers += n;
        f += n * kindSteps[k].forward;
        b += n * kindSteps[k].backward;
        w += n * kindSteps[k].weight;
      }
      if (vs == 0) {
        f += embed.forward + embed.tpComm + exposedWeightGather(embed, false);
        // Under ZB-H1 the first stage's W step runs the embedding's whole
        // backward, from the input gradient its B step keeps
        // (-weft-split-backward).
        (zb && p > 1 ? w : b) += embed.backwardInput + embed.backwardWeight +
                                 embed.tpComm +
                                 exposedWeightGather(embed, true) +
                                 exposedRegather(plan, embed, false);
      }
      if (vs == p * v - 1) {
        f += head.forward + head.tpComm + exposedWeightGather(head, false);
        const double headRegather = exposedRegather(plan, head, false);
        b += head.backwardInput + head.tpComm + (zb ? 0 : head.backwardWeight) +
             exposedWeightGather(head, true) + (zb ? 0 : headRegather);
        w += zb ? head.backwardWeight + headRegather : 0;
      }
      if (plan.zero_stage() == 3 && shard > 1) {
        // Parameters of the chunk gathered before forward and backward,
        // gradients reduce-scattered after backward, prefetched behind
        // compute. ZeroPP gathers once per pipeline block of micro-batches.
        // The embedding and the output layer (FSDP's root unit; weft train's
        // -weft-shard-parameters stores them too) are gathered once, in
        // forward, and kept for their backward.
        double layerParams = layers * layer.parameters;
        double edgeParams = 0;
        if (vs == 0)
          edgeParams += embed.parameters;
        if (vs == p * v - 1)
          edgeParams += head.parameters + (p > 1 ? head.sharedParameters : 0);
        double params = layerParams + edgeParams;
        // Frozen ones (--freeze) are gathered but have no gradient.
        double frozen = layers * layer.frozenParameters;
        if (vs == 0)
          frozen += embed.frozenParameters;
        if (vs == p * v - 1)
          frozen +=
              head.frozenParameters + (p > 1 ? head.frozenSharedParameters : 0);
        const double trained = params - frozen;
        // Top-k compresses summing all-reduces only, not ZeRO's collectives.
        CollectiveCodec codec = gradientCodec(plan);
        if (isTopK(codec))
          codec = CollectiveCodec::none;
        double gradWidth =
            trainingConfig.grad_reduce_16bit() ? kWeightBytes : kGradBytes;
        auto gatherTime = [&](double elements) {
          double wire = wireBytes(elements * kWeightBytes, kWeightBytes, codec);
          return collectiveTime(CollectiveKind::AllGather, wire, int64_t(shard),
                                shardStride) +
                 codecTime(CollectiveKind::AllGather, elements * kWeightBytes,
                           wire, codec);
        };
        double scatterWire = wireBytes(trained * gradWidth, gradWidth, codec);
        double forwardGather = gatherTime(params);
        double backwardGather = gatherTime(layerParams);
        double scatter =
            collectiveTime(CollectiveKind::ReduceScatter, scatterWire,
                           int64_t(shard), shardStride) +
            codecTime(CollectiveKind::ReduceScatter, trained * gradWidth,
                      scatterWire, codec);
        // (-weft-hold-gathered-weights: blocks of min(p, m), the last
        // one shorter where they do not divide m.)
        const double micro = std::max(1, plan.num_micro_batches());
        const double reuse =
            micro / std::ceil(micro / double(zeroPPBlock(plan)));
        // What one rank sends for it per micro-batch (ring counts).
        const double n = shard;
        times.shardBytes[vs] =
            ((n - 1) / n *
             (wireBytes(params * kWeightBytes, kWeightBytes, codec) +
              wireBytes(layerParams * kWeightBytes, kWeightBytes, codec) +
              scatterWire)) /
            reuse;
        double computeOnly = f + b;
        if (layer.serial) {
          f += forwardGather / reuse;
          b += (backwardGather + scatter) / reuse;
        } else {
          f = std::max(f, forwardGather / reuse);
          b = std::max(b + w, (backwardGather + scatter) / reuse) - w;
        }
        times.shardComm[vs] =
            (forwardGather + backwardGather + scatter) / reuse;
        times.shardExposed[vs] = f + b - computeOnly;
      }
      times.forward[vs] = f;
      times.backward[vs] = b;
      times.weight[vs] = w;
    }
  double activation =
      stageActivationBytes(plan, trainingConfig.seq_len(), modelSpec.hidden());
  // Cut over tp (-weft-split-stage-sends), a send is gathered back over tp
  // where it arrives, and the backward of a stage that received one gathers
  // its kept block again (-weft-split-backward).
  const int64_t cut =
      stageSendSplit(plan, trainingConfig.seq_len(), modelSpec.hidden());
  const double gather = p > 1 && cut > 1
                            ? collectiveTime(CollectiveKind::AllGather,
                                             activation * double(cut), cut, 1)
                            : 0;
  if (gather > 0)
    for (int vs = 1; vs < p * v; ++vs)
      if (onlyRank < 0 || vs % p == onlyRank)
        times.backward[vs] += gather;
  int64_t ppStride = int64_t(plan.tp()) * plan.ulysses() * plan.cp() *
                     plan.dp() * tensor3dSize(plan);
  // A policy's pp codec compresses every send, activations and gradients
  // alike: the encoded bytes on the link, plus encoding and decoding.
  CollectiveCodec codec = p > 1 && !plan.compress().empty()
                              ? codecFor(plan, {"pp"})
                              : CollectiveCodec::none;
  double wire = wireBytes(activation, kWeightBytes, codec);
  const double send =
      p > 1 ? collectiveTime(CollectiveKind::Send, wire, 2, ppStride) +
                  codecTime(CollectiveKind::Send, activation, wire, codec)
            : 0;
  times.p2p = p > 1 ? send + gather : 0;
  // Blocking launches: a send also holds its sender until it arrives (each
  // stage but the last sends its activations on, each but the first its
  // input gradients back); otherwise only the receiver waits for it.
  if (send > 0 && trainingConfig.launch_blocking())
    for (int vs = 0; vs < p * v; ++vs) {
      if (onlyRank >= 0 && vs % p != onlyRank)
        continue;
      if (vs < p * v - 1)
        times.forward[vs] += send;
      if (vs > 0)
        times.backward[vs] += send;
    }
}

double planner::stageActivationBytes(const plan::Plan &plan,
                                     int64_t sequenceLength, int64_t hidden) {
  // One rank's block of the residual stream: the micro-batch (split over gz
  // with 3-D tensor parallelism), its sequence split over cp and ulysses
  // (and tp with Megatron SP), bf16.
  double bytes = double(plan.micro_batch()) * sequenceLength / plan.cp() /
                 plan.ulysses() * hidden * kWeightBytes;
  if (plan.sequence_parallel())
    bytes /= plan.tp();
  // AxoNN's depth axis splits the micro-batch; without SP each tp rank
  // sends its 1/tp (-weft-split-stage-sends).
  return bytes / std::max(1, plan.gz()) /
         double(stageSendSplit(plan, sequenceLength, hidden));
}

bool planner::ringLoadBalanced(const plan::ModelSpec &model, int64_t seq) {
  return model.mixed_sliding_window() > 0 ||
         ringNeedsLoadBalance(seq, /*causal=*/true, model.sliding_window());
}

int64_t planner::stageSendSplit(const plan::Plan &plan, int64_t sequenceLength,
                                int64_t hidden) {
  const int64_t tp = plan.tp();
  if (plan.pp() <= 1 || tp <= 1 || plan.sequence_parallel() ||
      tensor3dSize(plan) > 1)
    return 1;
  // The residual stream's block, as the pass cuts it.
  const int64_t seq =
      sequenceLength / std::max(1, plan.cp()) / std::max(1, plan.ulysses());
  return stageSendCutDimension(
             {int64_t(std::max(1, plan.micro_batch())), seq, hidden}, tp) >= 0
             ? tp
             : 1;
}

PipelineSchedule CostModel::pipelineSchedule(const plan::Plan &plan) {
  StageTimes times;
  stageTimes(plan, times);
  return buildPipelineSchedule(plan.schedule(), plan.pp(), virtualStages(plan),
                               plan.num_micro_batches(), times.forward,
                               times.backward, times.weight, times.p2p);
}

double CostModel::simulate(const plan::Plan &plan, const StageTimes &times,
                           std::vector<TimelineEvent> *timeline) {
  // Plans that differ only outside the pipeline (ZeRO-1 vs 2, DP overlap)
  // share their timeline.
  std::vector<double> key;
  if (!timeline) {
    key = {double(plan.schedule()), double(plan.pp()),
           double(plan.virtual_stages()), double(plan.num_micro_batches()),
           times.p2p};
    key.insert(key.end(), times.forward.begin(), times.forward.end());
    key.insert(key.end(), times.backward.begin(), times.backward.end());
    key.insert(key.end(), times.weight.begin(), times.weight.end());
    auto found = simulationCache.find(key);
    if (found != simulationCache.end())
      return found->second;
  }
  double makespan = simulatePipeline(plan.schedule(), plan.pp(),
                                     virtualStages(plan),
                                     plan.num_micro_batches(), times.forward,
                                     times.backward, times.weight, times.p2p,
                                     timeline);
  if (!timeline)
    simulationCache.emplace(std::move(key), makespan);
  return makespan;
}

namespace {
struct DataParallelCost {
  double total = 0, exposed = 0, optimizer = 0;
  double reduceBytes = 0; // what one rank sends in the gradient reduction
  double gatherBytes = 0; // and in ZeRO-1/2's parameter all-gather
};
} // namespace

static DataParallelCost dataParallel(CostModel &model, const plan::Plan &plan,
                                     double stageParams, double lastBackward,
                                     double firstForward, double shard) {
  DataParallelCost cost;
  const int64_t stride = int64_t(plan.tp()) * tensor3dSize(plan);
  if (shard > 1 && plan.zero_stage() < 3) {
    // Under a compression policy the gradients (and ZeRO's parameter
    // gathers) go encoded, and encoding and decoding take memory passes.
    CollectiveCodec codec = CostModel::gradientCodec(plan);
    double width =
        model.training().grad_reduce_16bit() ? kWeightBytes : kGradBytes;
    double grads = stageParams * width;
    // Top-k compresses the all-reduce of ZeRO 0 only (sent as an all-gather
    // of each rank's kept elements); ZeRO's reduce-scatters go as they are.
    if (isTopK(codec) && plan.zero_stage() > 0)
      codec = CollectiveCodec::none;
    double gradWire = CostModel::wireBytes(grads, width, codec);
    CollectiveKind reduceKind = plan.zero_stage() == 0
                                    ? CollectiveKind::AllReduce
                                    : CollectiveKind::ReduceScatter;
    const double n = shard;
    cost.reduceBytes = isTopK(codec)            ? (n - 1) * gradWire
                       : plan.zero_stage() == 0 ? 2 * (n - 1) / n * gradWire
                                                : (n - 1) / n * gradWire;
    double reduce =
        isTopK(codec)
            ? model.collectiveTime(CollectiveKind::AllGather, shard * gradWire,
                                   int64_t(shard), stride) +
                  model.codecTime(CollectiveKind::AllGather, grads, gradWire,
                                  codec)
            : model.collectiveTime(reduceKind, gradWire, int64_t(shard),
                                   stride) +
                  model.codecTime(reduceKind, grads, gradWire, codec);
    double params = stageParams * kWeightBytes;
    double paramWire = CostModel::wireBytes(params, kWeightBytes, codec);
    if (plan.zero_stage() > 0)
      cost.gatherBytes = (n - 1) / n * paramWire;
    double gather =
        plan.zero_stage() == 0
            ? 0
            : model.collectiveTime(CollectiveKind::AllGather, paramWire,
                                   int64_t(shard), stride) +
                  model.codecTime(CollectiveKind::AllGather, params, paramWire,
                                  codec);
    // Gradients reduce in buckets behind the last micro-batch's backward; the
    // parameter all-gather runs behind the next step's first forward. ZeRO-2
    // keeps only each rank's block of the accumulated gradients, so it
    // reduce-scatters after every micro-batch (DeepSpeed's stage 2; weft
    // train's weft.reduce_every_micro_batch): the earlier ones hide behind
    // their backward and the next forward.
    double buckets = 8;
    const double m = std::max(1, plan.num_micro_batches());
    const double reductions = plan.zero_stage() == 2 ? m : 1;
    cost.reduceBytes *= reductions;
    cost.total = reductions * reduce + gather;
    // Blocking launches (TrainingConfig::launch_blocking): the reductions
    // wait for the backward and the gathers for the optimizer.
    cost.exposed =
        model.training().launch_blocking()
            ? cost.total
            : std::max(reduce / buckets, reduce - lastBackward) +
                  (reductions - 1) *
                      std::max(0.0, reduce - lastBackward - firstForward) +
                  (gather > 0
                       ? std::max(gather / buckets, gather - firstForward)
                       : 0);
  }
  double local = stageParams / (plan.zero_stage() >= 1 ? shard : 1);
  const plan::Gpu &gpu = model.cluster().gpu();
  cost.optimizer = local * kAdamBytesPerParam /
                   (gpu.hbm_gbps() * 1e9 * gpu.memory_efficiency());
  return cost;
}

/// A layer's forward, backward (input gradients, with recomputation) and
/// weight-gradient work, and the embedding's and the head's, with the
/// tensor-parallel communication and weight gathers they leave exposed: what
/// workLowerBound and averageWorkBound add up.
namespace {
struct WorkTerms {
  double layerF, layerB, layerW, embedWork, headWork;
};
} // namespace

static WorkTerms workTerms(const plan::Plan &plan, const BlockCost &layer,
                           const BlockCost &embedding, const BlockCost &head) {
  WorkTerms w;
  double tpF = exposedTensorParallelComm(plan, layer, 1);
  double tpB = exposedTensorParallelComm(plan, layer, 2);
  w.layerF =
      layer.forward + tpF + layer.seqComm + exposedWeightGather(layer, false);
  double recompute = recomputeTime(plan, layer, w.layerF);
  w.layerB = layer.backwardInput + tpB + layer.seqCommBackward + recompute +
             exposedWeightGather(layer, true);
  w.layerW = layer.backwardWeight;
  w.embedWork = embedding.forward + embedding.backwardInput +
                embedding.backwardWeight + 2 * embedding.tpComm;
  w.headWork =
      head.forward + head.backwardInput + head.backwardWeight + 2 * head.tpComm;
  return w;
}

double CostModel::averageWorkBound(const plan::Plan &plan) {
  const Blocks &b = blocks(plan);
  const WorkTerms w = workTerms(plan, b.layer, b.embedding, b.head);
  double work = double(modelSpec.layers()) * (w.layerF + w.layerB + w.layerW);
  // Layers of several kinds: each layer's own kind (the mean profile's
  // ring, whose steps are the kinds' union, is not their mean).
  ArrayRef<uint32_t> sequence = programs->layerVariantSequence();
  if (b.layerKinds.size() > 1 &&
      int64_t(sequence.size()) == modelSpec.layers()) {
    SmallVector<double, 4> perKind;
    for (const BlockCost &layer : b.layerKinds) {
      const WorkTerms t = workTerms(plan, layer, b.embedding, b.head);
      perKind.push_back(t.layerF + t.layerB + t.layerW);
    }
    work = 0;
    for (uint32_t k : sequence)
      work += perKind[std::min<size_t>(k, perKind.size() - 1)];
  }
  work += w.embedWork;
  work += w.headWork;
  // (Below the slowest stage's m * work by more than rounding.)
  return double(plan.num_micro_batches()) * work / plan.pp() * (1 - 1e-12);
}

double CostModel::workLowerBound(const plan::Plan &plan) {
  // The work of each stage without ZeRO-3 prefetch limits, pipeline sends
  // and data parallelism (all only add time), in closed form per stage.
  const int p = plan.pp(), v = virtualStages(plan), m = plan.num_micro_batches();
  const Blocks &b = blocks(plan);
  const bool zb = plan.schedule() == plan::SCHEDULE_ZB_H1;
  const WorkTerms mean = workTerms(plan, b.layer, b.embedding, b.head);
  // Stage s's layers' work (forward, backward and weight gradients), m
  // times their forward and backward, and its first chunk's forward (the
  // fill it adds) and backward (the drain).
  struct StageWork {
    double work, forwardBackward, firstForward, firstDrain;
  };
  // Stage s starts after the first forward has passed the stages before
  // it (fill) and ends no sooner than its own work. The step then waits
  // for the last backward to pass those stages again (drain). Under ZB-H1
  // the weight gradients need not wait for the last backward: they may
  // fill the drain, so only forward and backward precede it.
  auto boundOf = [&](auto stageWork) {
    double bound = 0, fill = 0, drain = 0;
    for (int s = 0; s < p; ++s) {
      const StageWork w = stageWork(s);
      double work = w.work;
      if (s == 0)
        work += mean.embedWork;
      if (s == p - 1)
        work += mean.headWork;
      double stage = m * work;
      if (zb)
        stage = std::max(stage, w.forwardBackward + drain);
      else
        stage += drain;
      bound = std::max(bound, fill + stage);
      fill += w.firstForward + (s == 0 ? b.embedding.forward : 0);
      drain += w.firstDrain;
    }
    return bound;
  };
  // Layers of one kind (the search's common case).
  if (b.layerKinds.size() < 2)
    return boundOf([&](int s) {
      const double layers = plan.stage_layers(s);
      const double chunk =
          double(chunkLayerCount(plan.stage_layers(s), v, s, p, 0));
      return StageWork{layers * (mean.layerF + mean.layerB + mean.layerW),
                       m * layers * (mean.layerF + mean.layerB),
                       chunk * mean.layerF,
                       chunk * (mean.layerB + (zb ? 0 : mean.layerW))};
    });
  // Layers of several kinds (local and global attention): each chunk's
  // count of each.
  std::vector<double> &counts = scratchKindCounts;
  const size_t kinds = chunkKindCounts(plan, b, counts);
  SmallVector<WorkTerms, 4> kind;
  if (kinds > 1)
    for (const BlockCost &layer : b.layerKinds)
      kind.push_back(workTerms(plan, layer, b.embedding, b.head));
  else
    kind.push_back(mean);
  auto chunkWork = [&](int vs, double WorkTerms::*field) {
    double work = 0;
    for (size_t k = 0; k < kinds; ++k)
      work += counts[size_t(vs) * kinds + k] * (kind[k].*field);
    return work;
  };
  return boundOf([&](int s) {
    double forward = 0, backward = 0, weight = 0;
    for (int c = 0; c < v; ++c) {
      forward += chunkWork(c * p + s, &WorkTerms::layerF);
      backward += chunkWork(c * p + s, &WorkTerms::layerB);
      weight += chunkWork(c * p + s, &WorkTerms::layerW);
    }
    // (The first chunk of stage s is virtual stage s.)
    return StageWork{forward + backward + weight, m * (forward + backward),
                     chunkWork(s, &WorkTerms::layerF),
                     chunkWork(s, &WorkTerms::layerB) +
                         (zb ? 0 : chunkWork(s, &WorkTerms::layerW))};
  });
}

bool CostModel::isMeasured(const plan::Plan &plan) const {
  if (cache.count(blockKey(plan)))
    return true;
  FamilyKey family = familyKey(plan);
  auto found = familyCache.find(family);
  if (found != familyCache.end() && found->second.valid)
    return true;
  return exactCache.count(ProgramShape::of(plan, 2));
}

const CostModel::Blocks *CostModel::relativeBlocks(const plan::Plan &plan) {
  const BlockKey key = blockKey(plan);
  auto found = relativeCache.find(key);
  if (found != relativeCache.end())
    return found->second.get();
  std::unique_ptr<Blocks> &entry = relativeCache[key];
  // The relative has a ring too: without one, attention is another kernel
  // (Megatron's unfused path when flash attention is off).
  for (int64_t cp = plan.cp() / 2; cp >= 2; cp /= 2) {
    plan::Plan relative = plan;
    relative.set_cp(int(cp));
    if (!isMeasured(relative))
      continue;
    const Blocks &measured = blocks(relative);
    entry = std::make_unique<Blocks>();
    if (!measured.error.empty()) {
      entry->error = measured.error;
      break;
    }
    // A program that gathers over dp is costed per dp: not bounded here.
    ProfileTerms terms;
    std::string error;
    if (dpDependent.count(blockKey(relative)) ||
        (!familyProfile(relative, terms) &&
         !exactProfile(ProgramShape::of(relative, 2), relative.micro_batch(),
                       terms, error))) {
      entry.reset();
      break;
    }
    bool byDp = false;
    costProfile(relative, terms, double(cp) / double(plan.cp()), plan.cp(),
                *entry, byDp);
    break;
  }
  return entry.get();
}

double CostModel::relativeWorkBound(const plan::Plan &plan) {
  const Blocks *b = relativeBlocks(plan);
  if (!b || !b->error.empty())
    return 0;
  // (As workTerms adds them up, without recomputation, weight gathers and
  // regathers: the sequence's communication in forward and in backward.)
  auto work = [&](const BlockCost &block) {
    return block.forward + block.backwardInput + block.backwardWeight +
           exposedTensorParallelComm(plan, block, 1) +
           exposedTensorParallelComm(plan, block, 2) + block.seqComm +
           block.seqCommBackward;
  };
  const double layer = work(b->layer);
  const int64_t layers = modelSpec.layers(), p = plan.pp();
  double total = layers * layer + work(b->embedding) + work(b->head);
  // The slowest stage does at least the average, and holds at least
  // ceil(layers / pp) layers (of the mean layer's work where the layers
  // attend alike: of layers of several kinds, those could be the cheaper).
  const bool alike = programs->layerVariantSequence().empty();
  double slowest =
      std::max(total / p, alike ? double((layers + p - 1) / p) * layer : 0.0);
  return plan.num_micro_batches() * slowest * (1 - 1e-12);
}

double CostModel::stepLowerBound(const plan::Plan &plan, double stopAt) {
  double bound = workLowerBound(plan);
  const Blocks &b = blocks(plan);
  const int p = plan.pp(), v = virtualStages(plan);
  if (bound >= stopAt)
    return bound;
  StageTimes &times = scratchTimes;
  stageTimes(plan, times, /*onlyRank=*/0);
  double lastBackward = 0, firstForward = 0;
  for (int c = 0; c < v; ++c) {
    lastBackward += times.backward[c * p] + times.weight[c * p];
    firstForward += times.forward[c * p];
  }
  DataParallelCost dp =
      dataParallel(*this, plan, stageParameters(plan, 0, b).trained,
                   lastBackward, firstForward, dataParallelShard(plan));
  return bound + dp.exposed + dp.optimizer;
}

/// A pipelined step's count (countStepCommunication with pp > 1): per
/// pipeline rank, from the step built with one and with two layers in each
/// model chunk, each layer adding the same (its collectives per micro-batch,
/// its parameters' reduction and update); a model with no more layers than
/// that is built whole.
static void countPipelinedStep(RankProgramBuilder &programs,
                               const plan::ModelSpec &model, plan::Plan &plan) {
  const int p = plan.pp(), v = std::max(1, plan.virtual_stages());
  plan::StepCommunication comm;
  auto count = [&](int64_t perChunk, std::vector<int64_t> &perRank,
                   std::vector<int64_t> &p2p) {
    std::string error;
    OwningOpRef<ModuleOp> step =
        programs.buildTrainingStep(plan, perChunk, error);
    if (step && succeeded(planner::countPipelinedStepCommunication(
                    *step, perRank, p2p, error)))
      return true;
    comm.set_missing(error.empty() ? "the pipelined step cannot be built"
                                   : error);
    return false;
  };
  std::vector<int64_t> perRank, p2p;
  if (model.layers() <= 2 * int64_t(p) * v) {
    if (!count(0, perRank, p2p)) {
      plan.mutable_step_comm()->CopyFrom(comm);
      return;
    }
  } else {
    std::vector<int64_t> two, twoP2p;
    if (!count(1, perRank, p2p) || !count(2, two, twoP2p)) {
      plan.mutable_step_comm()->CopyFrom(comm);
      return;
    }
    for (int r = 0; r < p; ++r) {
      const int64_t perLayers = two[size_t(r)] - perRank[size_t(r)];
      if (perLayers % v || twoP2p[size_t(r)] != p2p[size_t(r)]) {
        comm.set_missing("pipeline rank " + std::to_string(r) +
                         "'s chunks do not add the same bytes per layer");
        plan.mutable_step_comm()->CopyFrom(comm);
        return;
      }
      const int64_t layers = r < plan.stage_layers_size() ? plan.stage_layers(r)
                                                          : model.layers() / p;
      perRank[size_t(r)] += (layers - v) * (perLayers / v);
    }
  }
  for (int r = 0; r < p; ++r) {
    comm.add_pipeline_rank_step(perRank[size_t(r)]);
    comm.add_pipeline_rank_p2p(p2p[size_t(r)]);
  }
  comm.set_step(*std::max_element(perRank.begin(), perRank.end()));
  plan.mutable_step_comm()->CopyFrom(comm);
}

void CostModel::countStepCommunication(plan::Plan &plan) {
  if (plan.pp() > 1) {
    countPipelinedStep(*programs, modelSpec, plan);
    return;
  }
  // The step with one layer gives the blocks of a micro-batch; with two,
  // what each layer adds to the gradient reduction and the optimizer step
  // (their collectives are per parameter).
  const int64_t layers = std::max<int64_t>(1, modelSpec.layers());
  plan::StepCommunication counted[2];
  for (int kept = 1; kept <= std::min<int64_t>(2, layers); ++kept) {
    std::string error;
    OwningOpRef<ModuleOp> step = programs->buildTrainingStep(plan, kept, error);
    if (!step) {
      plan.mutable_step_comm()->set_missing(error);
      return;
    }
    int64_t built = 0;
    counted[kept - 1] = planner::countStepCommunication(*step, &built);
    if (built != kept)
      counted[kept - 1].set_missing(
          "the model's IR has " + std::to_string(built) + " layer(s) of " +
          std::to_string(layers) + "; the step's count needs two");
    if (!counted[kept - 1].missing().empty()) {
      *plan.mutable_step_comm() = counted[kept - 1];
      return;
    }
  }
  plan::StepCommunication comm = counted[0];
  if (layers > 1) {
    const plan::StepCommunication &two = counted[1];
    comm.set_gradient_reduction(
        comm.gradient_reduction() +
        (layers - 1) * (two.gradient_reduction() - comm.gradient_reduction()));
    comm.set_optimizer(comm.optimizer() +
                       (layers - 1) * (two.optimizer() - comm.optimizer()));
  }
  int64_t perMicroBatch =
      layers * (comm.layer_forward() + comm.layer_backward()) +
      comm.embedding_forward() + comm.embedding_backward() + comm.head();
  int64_t reduction = comm.gradient_reduction();
  if (comm.reduction_per_micro_batch()) {
    perMicroBatch += reduction;
    reduction = 0;
  }
  comm.set_step(std::max(1, plan.num_micro_batches()) * perMicroBatch +
                reduction + comm.optimizer());
  *plan.mutable_step_comm() = comm;
}

void CostModel::evaluate(plan::Plan &plan,
                         std::vector<TimelineEvent> *timeline) {
  if (plan.stage_layers_size() == 0) {
    std::vector<int32_t> stages;
    if (modelSpec.layers() % plan.pp() == 0)
      stages.assign(plan.pp(), int32_t(modelSpec.layers() / plan.pp()));
    else
      stages = balanceStages(plan);
    for (int32_t n : stages)
      plan.add_stage_layers(n);
  }
  plan.set_gpus_used(int64_t(plan.dp()) * plan.tp() * plan.pp() * plan.cp() *
                     plan.ulysses() * tensor3dSize(plan));
  fillMemory(plan);
  const int p = plan.pp(), v = virtualStages(plan);
  const int m = plan.num_micro_batches();
  StageTimes times;
  stageTimes(plan, times);
  double pipeline = simulate(plan, times, timeline);

  // Data parallelism and the optimizer, on the stage that finishes last.
  const double shard = dataParallelShard(plan);
  double dpExposed = 0, dpTotal = 0, optimizer = 0, reduceBytes = 0,
         gatherBytes = 0;
  for (int s = 0; s < p; ++s) {
    double lastBackward = 0, firstForward = 0;
    for (int c = 0; c < v; ++c) {
      lastBackward += times.backward[c * p + s] + times.weight[c * p + s];
      firstForward += times.forward[c * p + s];
    }
    DataParallelCost cost = dataParallel(
        *this, plan, stageParameters(plan, s, blocks(plan)).trained,
        lastBackward, firstForward, shard);
    dpExposed = std::max(dpExposed, cost.exposed);
    dpTotal = std::max(dpTotal, cost.total);
    optimizer = std::max(optimizer, cost.optimizer);
    reduceBytes = std::max(reduceBytes, cost.reduceBytes);
    gatherBytes = std::max(gatherBytes, cost.gatherBytes);
  }
  plan.set_grad_reduce_bytes(int64_t(std::llround(reduceBytes)));
  plan.set_param_gather_bytes(int64_t(std::llround(gatherBytes)));
  // A weight the first and last stages share (a tied embedding): after the
  // gradient reduction, the optimizer steps of those two pipeline ranks sum
  // their blocks of the gradient (f32; under ZeRO its data-parallel block)
  // in an all-reduce over those members of pp (-weft-build-optimizer,
  // Megatron-LM's embedding group): exposed before the update.
  double tiedSum = 0;
  if (p > 1) {
    const Blocks &b = blocks(plan);
    double shared = b.head.sharedParameters - b.head.frozenSharedParameters;
    if (plan.zero_stage() >= 1)
      shared /= shard;
    const int64_t ppStride = int64_t(plan.tp()) * plan.ulysses() * plan.cp() *
                             plan.dp() * tensor3dSize(plan);
    // The two are (p - 1) pipeline ranks apart: on one node when that is
    // less than a node's GPUs.
    const int64_t apart = ppStride * (p - 1);
    if (shared > 0)
      tiedSum = collectiveTime(
          CollectiveKind::AllReduce, shared * kGradBytes, 2,
          apart < int64_t(clusterSpec.gpus_per_node()) ? 1 : apart);
  }
  double step = pipeline + dpExposed + tiedSum + optimizer;
  // ZeRO-3's collectives run inside the pipeline (per micro-batch and
  // chunk); they are data-parallel communication in the breakdown.
  double shardTotal = 0, shardExposed = 0;
  if (timeline) {
    for (int s = 0; s < p; ++s) {
      // (The tied weight's sum over pp follows the reduction.)
      if (dpExposed + tiedSum > 0)
        timeline->push_back({TimelineEvent::DataParallelComm, s, -1, 0,
                             pipeline, pipeline + dpExposed + tiedSum});
      timeline->push_back({TimelineEvent::Optimizer, s, -1, 0,
                           pipeline + dpExposed + tiedSum, step});
    }
  }

  // Breakdown on the busiest stage.
  int busiest = 0;
  double busiestWork = -1;
  for (int s = 0; s < p; ++s) {
    double work = 0;
    for (int c = 0; c < v; ++c)
      work += times.forward[c * p + s] + times.backward[c * p + s] +
              times.weight[c * p + s];
    if (work > busiestWork) {
      busiestWork = work;
      busiest = s;
    }
  }
  for (int c = 0; c < v; ++c) {
    shardTotal += m * times.shardComm[c * p + busiest];
    shardExposed += m * times.shardExposed[c * p + busiest];
  }
  double shardBytes = 0;
  for (int s = 0; s < p; ++s) {
    double stage = 0;
    for (int c = 0; c < v; ++c)
      stage += m * times.shardBytes[c * p + s];
    shardBytes = std::max(shardBytes, stage);
  }
  plan.set_shard_comm_bytes(int64_t(std::llround(shardBytes)));
  // The busiest stage's layers, by kind (local and global attention).
  const Blocks &costs = blocks(plan);
  std::vector<double> &kindCounts = scratchKindCounts;
  const size_t kinds = chunkKindCounts(plan, costs, kindCounts);
  const double forwards = plan.recompute() == plan::RECOMPUTE_FULL ? 2 : 1;
  const bool zb = plan.schedule() == plan::SCHEDULE_ZB_H1;
  double tpExposed = 0, cpExposed = 0, cpTotal = 0, tpTotal = 0, recomputed = 0;
  for (size_t k = 0; k < kinds; ++k) {
    const BlockCost &layer = kinds > 1 ? costs.layerKinds[k] : costs.layer;
    double layers = 0;
    for (int c = 0; c < v; ++c)
      layers += kindCounts[size_t(c * p + busiest) * kinds + k];
    tpExposed +=
        layers * ((exposedTensorParallelComm(plan, layer, 1) +
                   exposedWeightGather(layer, false)) *
                      forwards +
                  exposedTensorParallelComm(plan, layer, 2) +
                  exposedWeightGather(layer, true) +
                  exposedRegather(plan, layer,
                                  plan.recompute() == plan::RECOMPUTE_FULL));
    cpExposed += layers * (layer.seqComm * forwards + layer.seqCommBackward);
    cpTotal +=
        layers * (layer.seqCommTotal * forwards + layer.seqCommBackwardTotal);
    // Tensor parallelism's whole: the forward's collectives (again when
    // recomputed) and their transposes, weight gathers, and the regathers a
    // recomputed forward does not make unnecessary.
    const double regathers =
        (plan.recompute() == plan::RECOMPUTE_FULL && !zb ? 0 : layer.regather) +
        (zb ? layer.gradientRegather : 0);
    tpTotal += layers * ((layer.tpComm + layer.weightGather) * (forwards + 1) +
                         regathers);
    recomputed +=
        layers *
        (plan.recompute() == plan::RECOMPUTE_FULL
             ? layer.forward
             : recomputeTime(plan, layer,
                             layer.forward + layer.tpComm + layer.seqComm +
                                 exposedWeightGather(layer, false)));
  }
  const BlockCost &layer = layerCost(plan);
  plan::TimeBreakdown *time = plan.mutable_time();
  time->set_step_s(step);
  time->set_tp_comm_s(m * tpExposed);
  time->set_cp_comm_s(m * cpExposed);
  time->set_cp_comm_total_s(m * cpTotal);
  time->set_tp_comm_total_s(m * tpTotal);
  time->set_recompute_s(m * recomputed);
  time->set_pp_comm_s(p > 1 ? 2.0 * m * v * times.p2p : 0);
  double work = m * busiestWork;
  time->set_compute_s(std::max(0.0, work - time->tp_comm_s() -
                                        time->cp_comm_s() -
                                        time->recompute_s() - shardExposed));
  time->set_bubble_s(std::max(0.0, pipeline - work));
  // (The tied weight's sum over pp is the gradient reduction's last part.)
  time->set_dp_comm_exposed_s(dpExposed + shardExposed + tiedSum);
  time->set_dp_comm_total_s(dpTotal + shardTotal + tiedSum);
  time->set_optimizer_s(optimizer);
  time->set_bubble_fraction(step > 0 ? time->bubble_s() / step : 0);
  time->set_comm_fraction(step > 0 ? (time->tp_comm_s() + time->cp_comm_s() +
                                      time->pp_comm_s() +
                                      time->dp_comm_exposed_s()) /
                                         step
                                   : 0);
  double tokens = double(trainingConfig.global_batch()) *
                  trainingConfig.seq_len();
  plan.set_tokens_per_s(tokens / step);
  double flops = modelFlopsPerStep(modelSpec, trainingConfig.global_batch(),
                                   trainingConfig.seq_len());
  double peak = (trainingConfig.dtype() == "fp16"
                     ? clusterSpec.gpu().fp16_tflops()
                     : clusterSpec.gpu().bf16_tflops()) *
                1e12;
  plan.set_model_tflops_per_gpu(flops / step / plan.gpus_used() / 1e12);
  plan.set_forward_comm_bytes_layer(int64_t(layer.commBytes));
  plan.set_forward_comm_bytes_embedding(int64_t(embeddingCost(plan).commBytes));
  plan.set_forward_comm_bytes_head(int64_t(headCost(plan).commBytes));
  // The embedding and the head keep what they save whatever the mode
  // (recomputation is per layer).
  plan.set_saved_bytes_layer(
      int64_t(std::llround(layer.savedUnder(plan.recompute()))));
  plan.set_saved_bytes_embedding(
      int64_t(std::llround(embeddingCost(plan).savedBytes)));
  plan.set_saved_bytes_head(int64_t(std::llround(headCost(plan).savedBytes)));
  plan.set_saved_bytes_layer_inputs(
      int64_t(std::llround(layer.sharedInputBytes)));
  plan.set_weight_gradient_read_bytes_layer(
      int64_t(std::llround(layer.weightGradientReadBytes)));
  plan.set_weight_gradient_read_bytes_head(
      int64_t(std::llround(headCost(plan).weightGradientReadBytes)));
  plan.set_forward_p2p_bytes(
      p > 1 ? int64_t(
                  wireBytes(stageActivationBytes(plan, trainingConfig.seq_len(),
                                                 modelSpec.hidden()),
                            kWeightBytes, codecFor(plan, {"pp"})))
            : 0);
  plan.set_mfu(flops / step / plan.gpus_used() / peak);
}

//===----------------------------------------------------------------------===//
// Plans written by hand
//===----------------------------------------------------------------------===//

llvm::Expected<plan::Plan> planner::parsePlanSpec(llvm::StringRef text,
                                                  const CostModel &model) {
  llvm::Expected<PlanSpec> spec = weft::parsePlanSpec(text, "--evaluate");
  if (!spec)
    return spec.takeError();
  plan::Plan plan = spec->plan;
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError("--evaluate \"" + text.str() + "\": " +
                                   why.str());
  };
  int64_t others = int64_t(plan.tp()) * plan.pp() * plan.cp() * plan.ulysses() *
                   tensor3dSize(plan);
  if (!spec->dpGiven) {
    int64_t gpus = totalGpus(model.cluster());
    if (gpus % others)
      return bad("dp is not given and tp*pp*cp*ulysses" +
                 llvm::Twine(uses3dTensorParallel(plan) ? "*gx*gy*gz" : "") +
                 " (" + llvm::Twine(others) + ") does not divide the " +
                 llvm::Twine(gpus) + " GPUs");
    plan.set_dp(gpus / others);
  }
  if (!spec->microBatchesGiven) {
    int64_t batch = model.training().global_batch();
    int64_t per = int64_t(plan.dp()) * plan.micro_batch();
    if (batch % per)
      return bad("the global batch (" + llvm::Twine(batch) +
                 ") is not divisible by dp*mbs (" + llvm::Twine(per) + ")");
    plan.set_num_micro_batches(batch / per);
  }
  if (plan.schedule() == plan::SCHEDULE_INTERLEAVED &&
      !spec->virtualStagesGiven)
    return bad("the interleaved schedule needs v (chunks per stage)");
  if (plan.schedule() != plan::SCHEDULE_INTERLEAVED &&
      plan.schedule() != plan::SCHEDULE_ZEROPP)
    plan.set_virtual_stages(1);
  return plan;
}
