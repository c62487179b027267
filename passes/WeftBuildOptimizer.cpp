//===- WeftBuildOptimizer.cpp - The optimizer step as IR ------------------===//
//
// Part of the Weft project.
//
// A training run's update of its parameters, built from weft ops in a
// function of its own: the gradients of a step's micro-batches averaged,
// their global L2 norm (clipped to a maximum if asked), and AdamW's or SGD
// with momentum's update of each parameter and its optimizer state, in the
// order and f32 arithmetic of torch.optim's single-tensor implementations.
// The runner calls it once per step with the summed gradients; the
// learning-rate schedule and the bias corrections are scalars it passes,
// computed on the host as torch.optim does.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Sharding.h"
#include "weft/Dialect/Training.h"
#include "weft/Dialect/WeftOps.h"
#include "weft/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Regex.h"

#include <map>

namespace weft {
#define GEN_PASS_DEF_WEFTBUILDOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace weft

using namespace mlir;
using namespace weft;

namespace {

/// A trained parameter: its name and global shape, and where a rank-local
/// step holds it.
struct Trained {
  std::string name;
  SmallVector<int64_t> shape;
  /// Rank-local: the mesh, the parameter's layout (`param`) and the layout
  /// of the gradient the step gives and of the state (`block`): the
  /// parameter's, or with ZeRO its block over the reduction's `scatter`
  /// axes on dimension `dim`.
  std::string mesh;
  TensorSharding param, block;
  SmallVector<std::string, 2> scatter;
  int64_t dim = -1;
  /// ZeRO-3: the axes the parameter is stored over on its first dimension
  /// (-weft-shard-parameters), and its stored layout.
  SmallVector<std::string, 2> stored;
  TensorSharding storage;
  /// The function and result the gradient is taken from.
  func::FuncOp from;
  unsigned result = 0;
};

struct WeftBuildOptimizerPass
    : public weft::impl::WeftBuildOptimizerBase<WeftBuildOptimizerPass> {
  using WeftBuildOptimizerBase::WeftBuildOptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (optimizer != "adamw" && optimizer != "sgd") {
      module.emitError() << "-weft-build-optimizer: optimizer '" << optimizer
                         << "' is not adamw or sgd";
      return signalPassFailure();
    }
    if (decay != "all" && decay != "matrices") {
      module.emitError() << "-weft-build-optimizer: decay '" << decay
                         << "' is not all or matrices";
      return signalPassFailure();
    }
    // A ring's load-balanced layout (-weft-apply-plan marks the steps).
    loadBalanced = llvm::any_of(module.getOps<func::FuncOp>(), [](auto f) {
      return f->hasAttr(WeftDialect::getLoadBalancedAttrName());
    });
    std::optional<llvm::Regex> frozen;
    if (!freeze.empty()) {
      frozen.emplace(freeze);
      std::string why;
      if (!frozen->isValid(why)) {
        module.emitError() << "-weft-build-optimizer: freeze: " << why;
        return signalPassFailure();
      }
    }
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(WeftDialect::getOptimizerAttrName())) {
        func.emitError() << "the module already has an optimizer step";
        return signalPassFailure();
      }
    // Rank-local on a module cut into pipeline stages: one optimizer step
    // per pipeline rank, on the parameters its stages' functions return the
    // gradients of (a step's reduction function belongs to the step's rank).
    int64_t stages = 1;
    if (auto pipeline = module->getAttrOfType<DictionaryAttr>(
            WeftDialect::getPipelineAttrName()))
      if (auto count = pipeline.getAs<IntegerAttr>("stages"))
        stages = count.getInt();
    const bool pipelined = rankLocal && stages > 1;
    llvm::StringMap<int64_t> rankOf;
    if (pipelined) {
      for (auto func : module.getOps<func::FuncOp>()) {
        auto stage = func->getAttrOfType<DictionaryAttr>(
            WeftDialect::getPipelineStageAttrName());
        auto rank = stage ? stage.getAs<IntegerAttr>("rank") : IntegerAttr();
        if (!rank)
          continue;
        rankOf[func.getSymName()] = rank.getInt();
        if (auto ref = func->getAttrOfType<FlatSymbolRefAttr>(
                WeftDialect::getGradientReductionAttrName()))
          rankOf[ref.getValue()] = rank.getInt();
      }
      std::optional<MeshInfo> mesh = getMeshInfo(module);
      if (!mesh || mesh->axes.empty() || mesh->axes.front() != "pp") {
        module.emitError() << "-weft-build-optimizer: the module is cut into "
                              "pipeline stages but its weft.mesh does not "
                              "begin with the axis pp";
        return signalPassFailure();
      }
    }
    std::vector<std::vector<Trained>> perRank;
    for (int64_t rank = 0; rank < (pipelined ? stages : 1); ++rank) {
      std::vector<Trained> &trained = perRank.emplace_back();
      if (failed(
              collect(module, frozen, pipelined ? rank : -1, rankOf, trained)))
        return signalPassFailure();
    }
    bool none = true;
    for (const std::vector<Trained> &trained : perRank)
      none &= trained.empty();
    if (none) {
      module.emitError() << "-weft-build-optimizer: nothing to train: no "
                            "function returns the gradient (weft.gradient_of) "
                            "of a parameter that is not frozen (run "
                            "-weft-differentiate first; check the freeze "
                            "pattern)";
      return signalPassFailure();
    }
    if (!pipelined) {
      build(module, perRank.front(), "optimizer_step", -1, {});
      return;
    }
    // A parameter on several pipeline ranks (a tied embedding on the first
    // and last stages): each holder's gradient is its stages' part, summed
    // over its holders by an all-reduce over those members of pp, so the
    // copies stay the same, as Megatron-LM's embedding group keeps them; the
    // norm counts it on its first holder.
    std::map<std::string, Tied> tied;
    for (auto [rank, trained] : llvm::enumerate(perRank))
      for (const Trained &p : trained) {
        Tied &entry = tied[p.name];
        if (!entry.holders.empty() &&
            (entry.block != p.block || entry.param != p.param ||
             entry.shape != p.shape)) {
          func::FuncOp from = p.from;
          from.emitError()
              << "'" << p.name << "' is trained on pipeline ranks "
              << entry.holders.front() << " and " << rank
              << " in different blocks (" << entry.block.str() << " and "
              << p.block.str()
              << "): a tied weight needs the same layout on every stage that "
                 "reads it";
          return signalPassFailure();
        }
        entry.holders.push_back(int64_t(rank));
        entry.block = p.block;
        entry.param = p.param;
        entry.shape = p.shape;
      }
    for (auto it = tied.begin(); it != tied.end();)
      it = it->second.holders.size() > 1 ? std::next(it) : tied.erase(it);
    for (auto [rank, trained] : llvm::enumerate(perRank))
      build(module, trained, "optimizer_step_pp" + std::to_string(rank),
            int64_t(rank), tied);
  }

  bool loadBalanced = false;

  /// A parameter several pipeline ranks train: its layout (the same on
  /// each) and the ranks, in order.
  struct Tied {
    SmallVector<int64_t, 2> holders;
    TensorSharding block, param;
    SmallVector<int64_t> shape;
  };

  /// The trained parameters, in the order the step functions return their
  /// gradients (only those of pipeline rank `rank` when >= 0); a parameter
  /// returned by several functions (a tied weight in two pipeline stages, a
  /// gradient and its reduction) once. A gradient that a step's reduction
  /// function (weft.gradient_reduction) returns is taken as that function
  /// gives it: reduced, and with ZeRO scattered.
  LogicalResult collect(ModuleOp module,
                        const std::optional<llvm::Regex> &frozen, int64_t rank,
                        const llvm::StringMap<int64_t> &rankOf,
                        std::vector<Trained> &trained) {
    llvm::StringSet<> reductions;
    for (auto func : module.getOps<func::FuncOp>())
      if (auto ref = func->getAttrOfType<FlatSymbolRefAttr>(
              WeftDialect::getGradientReductionAttrName()))
        reductions.insert(ref.getValue());
    llvm::StringMap<size_t> seen;
    const llvm::StringMap<SmallVector<std::string, 2>> storedAxes =
        storedParameterAxes(module);
    std::optional<MeshInfo> meshInfo = getMeshInfo(module);
    for (auto func : module.getOps<func::FuncOp>()) {
      if (rank >= 0) {
        auto at = rankOf.find(func.getSymName());
        if (at == rankOf.end() || at->second != rank)
          continue;
      }
      for (unsigned r = 0; r < func.getNumResults(); ++r) {
        auto name = func.getResultAttrOfType<StringAttr>(
            r, WeftDialect::getGradientOfAttrName());
        if (!name || (frozen && frozen->match(name.getValue())))
          continue;
        bool reduced = reductions.contains(func.getSymName());
        auto known = seen.find(name.getValue());
        if (known != seen.end() && !reduced)
          continue;
        auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[r]);
        if (!type || !type.hasStaticShape())
          return func.emitError()
                 << "the gradient of '" << name.getValue() << "' (result #" << r
                 << ") is not a statically shaped tensor";
        // A partitioned step returns each rank's block: the parameter is
        // the whole tensor.
        Trained entry;
        entry.name = name.getValue().str();
        entry.shape.assign(type.getShape().begin(), type.getShape().end());
        auto local = func.getResultAttrOfType<ShardingAttr>(
            r, WeftDialect::getLocalShardingAttrName());
        if (local)
          if (auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
                  func, local.getMesh()))
            entry.shape = getGlobalShape(local, mesh, type.getShape());
        if (rankLocal && local && meshInfo) {
          entry.mesh = local.getMesh().getValue().str();
          entry.block = fromAttr(local);
          entry.from = func;
          entry.result = r;
          // The axes the reduction scattered over (its argument's partial
          // ones) split the state, not the parameter.
          entry.param = entry.block;
          auto in = reduced ? func.getArgAttrOfType<ShardingAttr>(
                                  r, WeftDialect::getLocalShardingAttrName())
                            : ShardingAttr();
          SmallVector<std::string, 2> partial;
          if (in)
            partial = fromAttr(in).partial;
          for (auto [d, axes] : llvm::enumerate(entry.param.dims)) {
            // (A reduce-scatter puts its axes minor to those already on
            // the dimension.)
            size_t kept = axes.size();
            while (kept > 0 && llvm::is_contained(partial, axes[kept - 1]))
              --kept;
            if (kept == axes.size())
              continue;
            entry.scatter.assign(axes.begin() + kept, axes.end());
            entry.dim = int64_t(d);
            axes.resize(kept);
          }
        }
        // The block the step stores the weight in (ZeRO-3's, AxoNN's depth
        // axis): the parameter comes and goes as that block. Without the
        // weight in the module, ZeRO-3's rule (`stored-over`).
        if (!entry.mesh.empty()) {
          for (const std::string &axis : storedAxes.lookup(entry.name))
            if (!entry.param.uses(axis))
              entry.stored.push_back(axis);
          if (entry.stored.empty() && !storedOver.empty()) {
            SmallVector<std::string, 4> axes(storedOver.begin(),
                                             storedOver.end());
            entry.stored =
                zeroStorageAxes(entry.shape, entry.param, *meshInfo, axes);
          }
          entry.storage = entry.param;
          if (!entry.stored.empty())
            entry.storage.dims.front().append(entry.stored.begin(),
                                              entry.stored.end());
        }
        if (known != seen.end()) {
          trained[known->second] = std::move(entry);
          continue;
        }
        seen[name.getValue()] = trained.size();
        trained.push_back(std::move(entry));
      }
    }
    for (Trained &entry : trained)
      if (!entry.block.partial.empty())
        return entry.from.emitError()
               << "the gradient of '" << entry.name << "' (result #"
               << entry.result << ") is a partial sum (" << entry.block.str()
               << ") that no reduction function (weft.gradient_reduction) "
                  "reduces: a rank-local optimizer step takes reduced "
                  "gradients";
    return success();
  }

  /// Adds the optimizer step `name` of `trained`; of pipeline rank
  /// `ppRank` when >= 0, which sums the gradients of the `tied` parameters
  /// over the pipeline and the gradient norm's squares over its ranks.
  void build(ModuleOp module, ArrayRef<Trained> trained, StringRef name,
             int64_t ppRank, const std::map<std::string, Tied> &tied) {
    MLIRContext *context = module.getContext();
    OpBuilder b(context);
    Location loc = module.getLoc();
    Type f32 = b.getF32Type();
    auto scalarType = RankedTensorType::get({}, f32);
    const bool adamw = optimizer == "adamw";
    auto slot = [&](StringRef role, StringRef parameter = {}) {
      SmallVector<NamedAttribute, 2> entries{
          b.getNamedAttr("role", b.getStringAttr(role))};
      if (!parameter.empty())
        entries.push_back(
            b.getNamedAttr("parameter", b.getStringAttr(parameter)));
      return b.getDictionaryAttr(entries);
    };
    // The signature: the step's scalars, then per parameter its value, its
    // summed gradient and its state; results: the gradient norm, then per
    // parameter its new value and state.
    SmallVector<Type> args, results{scalarType};
    SmallVector<DictionaryAttr> argSlots, resultSlots{slot("grad_norm")};
    SmallVector<StringRef> scalars{"grad_divisor"};
    if (adamw)
      scalars.append({"decay_factor", "step_size", "bias_correction2_sqrt"});
    else
      scalars.push_back("lr");
    for (StringRef role : scalars) {
      args.push_back(scalarType);
      argSlots.push_back(slot(role));
    }
    SmallVector<StringRef> state{"exp_avg"};
    if (adamw)
      state.push_back("exp_avg_sq");
    else
      state = {"momentum_buffer"};
    // Rank-local: what each argument and result holds on a rank.
    std::optional<MeshInfo> meshInfo = getMeshInfo(module);
    std::string meshName;
    for (const Trained &p : trained)
      if (!p.mesh.empty())
        meshName = p.mesh;
    if (meshName.empty() && ppRank >= 0 && meshInfo)
      meshName = meshInfo->name;
    const bool local = !meshName.empty() && meshInfo;
    std::vector<TensorSharding> argLayouts, resultLayouts;
    if (local) {
      argLayouts.assign(scalars.size(), TensorSharding::replicated(0));
      resultLayouts.push_back(TensorSharding::replicated(0));
    }
    auto typeOf = [&](const Trained &p, const TensorSharding &layout) {
      if (p.mesh.empty() || !meshInfo)
        return RankedTensorType::get(p.shape, f32);
      return RankedTensorType::get(localShape(p.shape, layout, *meshInfo), f32);
    };
    for (const Trained &p : trained) {
      TensorSharding whole = TensorSharding::replicated(p.shape.size());
      const TensorSharding &paramLayout = p.mesh.empty()     ? whole
                                          : p.stored.empty() ? p.param
                                                             : p.storage;
      const TensorSharding &blockLayout = p.mesh.empty() ? whole : p.block;
      auto type = typeOf(p, paramLayout), block = typeOf(p, blockLayout);
      args.append({type, block});
      argSlots.append({slot("param", p.name), slot("grad", p.name)});
      results.push_back(type);
      resultSlots.push_back(slot("param", p.name));
      if (local) {
        argLayouts.insert(argLayouts.end(), {paramLayout, blockLayout});
        resultLayouts.push_back(paramLayout);
      }
      for (StringRef role : state) {
        args.push_back(block);
        argSlots.push_back(slot(role, p.name));
        results.push_back(block);
        resultSlots.push_back(slot(role, p.name));
        if (local) {
          argLayouts.push_back(blockLayout);
          resultLayouts.push_back(blockLayout);
        }
      }
    }
    b.setInsertionPointToEnd(module.getBody());
    auto func = func::FuncOp::create(b, loc, name,
                                     FunctionType::get(context, args, results));
    SymbolTable(module).insert(func);
    func->setAttr(WeftDialect::getOptimizerAttrName(),
                  b.getStringAttr(optimizer));
    if (ppRank >= 0)
      func->setAttr(WeftDialect::getPipelineRankAttrName(),
                    b.getI64IntegerAttr(ppRank));
    for (auto [i, dict] : llvm::enumerate(argSlots))
      func.setArgAttr(i, WeftDialect::getOptimizerSlotAttrName(), dict);
    for (auto [i, dict] : llvm::enumerate(resultSlots))
      func.setResultAttr(i, WeftDialect::getOptimizerSlotAttrName(), dict);
    for (auto [i, layout] : llvm::enumerate(argLayouts))
      func.setArgAttr(i, WeftDialect::getLocalShardingAttrName(),
                      toAttr(context, meshName, layout));
    for (auto [i, layout] : llvm::enumerate(resultLayouts))
      func.setResultAttr(i, WeftDialect::getLocalShardingAttrName(),
                         toAttr(context, meshName, layout));
    Block *body = func.addEntryBlock();
    b.setInsertionPointToEnd(body);

    // Each f32 constant once, where it is first used.
    std::map<float, Value> constants;
    auto constant = [&](double value) -> Value {
      Value &known = constants[float(value)];
      if (!known)
        known = ConstantOp::create(
            b, loc, scalarType,
            DenseElementsAttr::get(scalarType,
                                   b.getF32FloatAttr(float(value))));
      return known;
    };
    auto add = [&](Value x, Value y) -> Value {
      return AddOp::create(b, loc, x, y);
    };
    auto sub = [&](Value x, Value y) -> Value {
      return SubOp::create(b, loc, x, y);
    };
    auto mul = [&](Value x, Value y) -> Value {
      return MulOp::create(b, loc, x, y);
    };
    auto div = [&](Value x, Value y) -> Value {
      return DivOp::create(b, loc, x, y);
    };
    // The step's scalars, by the roles listed above.
    Value divisor = body->getArgument(0);
    Value decayFactor = adamw ? body->getArgument(1) : Value();
    Value stepSize = adamw ? body->getArgument(2) : Value();
    Value root2 = adamw ? body->getArgument(3) : Value();
    Value lr = adamw ? Value() : body->getArgument(1);
    unsigned first = scalars.size();
    unsigned perParameter = 2 + state.size();
    // The averaged gradients and their global L2 norm
    // (torch.nn.utils.clip_grad_norm_). Rank-local, each rank sums the
    // squares of the blocks it holds, grouped by the mesh axes the blocks
    // are split over; each group's sum is all-reduced over its axes (the
    // ranks that hold the same block are not counted twice).
    auto meshRef = FlatSymbolRefAttr::get(context, meshName);
    auto sumOver = [&](Value value, ArrayRef<StringRef> axes,
                       ArrayRef<int64_t> members = {}) -> Value {
      return AllReduceOp::create(
          b, loc, value.getType(),
          ReductionKindAttr::get(context, ReductionKind::sum), value, meshRef,
          b.getStrArrayAttr(axes), CollectiveCodecAttr(),
          members.empty() ? DenseI64ArrayAttr()
                          : b.getDenseI64ArrayAttr(members));
    };
    // A tied parameter's gradient summed over the pipeline ranks that hold
    // it, in one order on each (the name's): Megatron-LM's embedding group
    // of the first and last stages, an all-reduce over those members of pp
    // (over all of pp where every pipeline rank holds it). The others take
    // no part.
    llvm::StringMap<Value> tiedSums;
    for (auto &[tiedName, entry] : tied) {
      const Trained *held = nullptr;
      size_t k = 0;
      for (; k < trained.size() && !held; ++k)
        if (trained[k].name == tiedName)
          held = &trained[k];
      if (!held)
        continue;
      Value part = body->getArgument(first + (k - 1) * perParameter + 1);
      tiedSums[tiedName] = int64_t(entry.holders.size()) == meshInfo->size("pp")
                               ? sumOver(part, {"pp"})
                               : sumOver(part, {"pp"}, entry.holders);
    }
    SmallVector<Value> grads;
    std::map<SmallVector<std::string, 4>, Value> squares;
    for (size_t k = 0; k < trained.size(); ++k) {
      Value summed = tiedSums.lookup(trained[k].name);
      if (!summed)
        summed = body->getArgument(first + k * perParameter + 1);
      Value g = div(summed, divisor);
      grads.push_back(g);
      // (A tied parameter's squares count on its first pipeline rank.)
      auto copy = tied.find(trained[k].name);
      if (copy != tied.end() && copy->second.holders.front() != ppRank)
        continue;
      Value square = mul(g, g);
      auto type = cast<RankedTensorType>(square.getType());
      if (type.getRank() > 0)
        square =
            ReduceSumOp::create(b, loc, square,
                                b.getDenseI64ArrayAttr(llvm::to_vector(
                                    llvm::seq<int64_t>(0, type.getRank()))),
                                /*keep_dims=*/false);
      SmallVector<std::string, 4> split;
      if (local && !trained[k].mesh.empty())
        for (const std::string &axis : meshInfo->axes)
          if (trained[k].block.uses(axis) && meshInfo->size(axis) > 1)
            split.push_back(axis);
      Value &sum = squares[split];
      sum = sum ? add(sum, square) : square;
    }
    Value total;
    for (auto &[axes, sum] : squares) {
      Value whole = sum;
      if (!axes.empty()) {
        SmallVector<StringRef, 4> names(axes.begin(), axes.end());
        whole = sumOver(sum, names);
      }
      total = total ? add(total, whole) : whole;
    }
    // A pipeline rank's squares are its stages'; the pipeline's are summed
    // over the pipeline ranks.
    if (ppRank >= 0)
      total = sumOver(total ? total : constant(0.0), {"pp"});
    Value norm = SqrtOp::create(b, loc, total);
    if (maxGradNorm > 0) {
      // (Ops are built one statement each: the order of the IR does not
      // depend on the compiler's order of evaluating arguments.)
      Value limit = constant(maxGradNorm);
      Value shifted = add(norm, constant(1e-6));
      Value coefficient = div(limit, shifted);
      Value one = constant(1.0);
      Value clamped = MinimumOp::create(b, loc, coefficient, one);
      for (Value &g : grads)
        g = mul(g, clamped);
    }
    // Loss scaling's overflow: a norm that is not finite keeps everything
    // as it was (norm - norm is 0 only for a finite norm).
    Value finite;
    if (skipNonFinite)
      finite = CompareOp::create(
          b, loc, RankedTensorType::get({}, b.getI1Type()),
          ComparePredicate::eq, sub(norm, norm), constant(0.0));
    auto unlessOverflow = [&](Value updated, Value old) -> Value {
      if (!finite)
        return updated;
      return WhereOp::create(b, loc, updated.getType(), finite, updated, old);
    };
    SmallVector<Value> returned{norm};
    for (size_t k = 0; k < trained.size(); ++k) {
      unsigned at = first + k * perParameter;
      Value p = body->getArgument(at), g = grads[k];
      // ZeRO: the rank updates its block of the parameter, and the blocks
      // are gathered back after the update.
      const Trained &entry = trained[k];
      SmallVector<StringRef, 2> scatter(entry.scatter.begin(),
                                        entry.scatter.end());
      // ZeRO-3: the stored block to the rank's layout first (and back after);
      // -weft-optimize-collectives folds the cut of a gather.
      SmallVector<StringRef, 2> stored(entry.stored.begin(),
                                       entry.stored.end());
      RankedTensorType rankType = stored.empty()
                                      ? cast<RankedTensorType>(p.getType())
                                      : typeOf(entry, entry.param);
      // A block whose dimension these axes lead, cp first, is in the
      // load-balanced ring's layout, as the runtime lays it out and the
      // step's gathers and reduce-scatters read it.
      auto zigzag = [&](ArrayRef<StringRef> axes, int64_t dim) {
        return loadBalanced && !axes.empty() && axes.front() == "cp" &&
                       (size_t(dim) >= entry.param.dims.size() ||
                        entry.param.dims[size_t(dim)].empty())
                   ? b.getUnitAttr()
                   : UnitAttr();
      };
      if (!stored.empty())
        p = AllGatherOp::create(b, loc, rankType, p, meshRef,
                                b.getStrArrayAttr(stored),
                                b.getI64IntegerAttr(0), zigzag(stored, 0),
                                CollectiveCodecAttr(), IntegerAttr());
      if (!scatter.empty())
        p = AllSliceOp::create(
            b, loc, g.getType(), p, meshRef, b.getStrArrayAttr(scatter),
            b.getI64IntegerAttr(entry.dim), zigzag(scatter, entry.dim));
      auto gather = [&](Value block) -> Value {
        if (!scatter.empty())
          block = AllGatherOp::create(
              b, loc, rankType, block, meshRef, b.getStrArrayAttr(scatter),
              b.getI64IntegerAttr(entry.dim), zigzag(scatter, entry.dim),
              CollectiveCodecAttr(), IntegerAttr());
        if (!stored.empty())
          block = AllSliceOp::create(b, loc, body->getArgument(at).getType(),
                                     block, meshRef, b.getStrArrayAttr(stored),
                                     b.getI64IntegerAttr(0), zigzag(stored, 0));
        return block;
      };
      // decay=matrices: biases and norm weights (rank 1) do not decay, as
      // nanoGPT's, Megatron-LM's and Hugging Face Trainer's groups keep them.
      const bool decays =
          decay == "all" || cast<RankedTensorType>(p.getType()).getRank() >= 2;
      if (adamw) {
        // torch.optim.AdamW, single tensor: decoupled decay, the moments'
        // lerp and addcmul, and addcdiv with the bias corrections.
        Value m = body->getArgument(at + 2), v = body->getArgument(at + 3);
        Value decayed = decays ? mul(p, decayFactor) : p;
        Value oneMinusBeta1 = constant(1.0f - float(beta1));
        Value m1 = add(m, mul(sub(g, m), oneMinusBeta1));
        Value oneMinusBeta2 = constant(1.0f - float(beta2));
        Value gg = mul(mul(oneMinusBeta2, g), g);
        Value v1 = add(mul(v, constant(beta2)), gg);
        Value root = SqrtOp::create(b, loc, v1);
        Value epsilon = constant(eps);
        Value denom = add(div(root, root2), epsilon);
        Value p1 = sub(decayed, mul(stepSize, div(m1, denom)));
        returned.append({gather(unlessOverflow(p1, p)), unlessOverflow(m1, m),
                         unlessOverflow(v1, v)});
      } else {
        // torch.optim.SGD with momentum: L2 weight decay into the gradient,
        // the buffer (zero before the first step), and the step.
        Value buffer = body->getArgument(at + 2);
        Value d = weightDecay != 0 && decays
                      ? add(g, mul(constant(weightDecay), p))
                      : g;
        Value b1 = add(mul(constant(momentum), buffer), d);
        Value p1 = sub(p, mul(lr, b1));
        returned.append(
            {gather(unlessOverflow(p1, p)), unlessOverflow(b1, buffer)});
      }
    }
    func::ReturnOp::create(b, loc, returned);
  }
};
} // namespace
