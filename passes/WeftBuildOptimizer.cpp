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

/// A trained parameter: its name and global shape.
struct Trained {
  std::string name;
  SmallVector<int64_t> shape;
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
    // The trained parameters, in the order the step functions return their
    // gradients; a parameter returned by several functions (a tied weight in
    // two pipeline stages, a gradient and its reduction) once.
    std::vector<Trained> trained;
    llvm::StringSet<> seen;
    for (auto func : module.getOps<func::FuncOp>())
      for (unsigned r = 0; r < func.getNumResults(); ++r) {
        auto name = func.getResultAttrOfType<StringAttr>(
            r, WeftDialect::getGradientOfAttrName());
        if (!name || (frozen && frozen->match(name.getValue())) ||
            !seen.insert(name.getValue()).second)
          continue;
        auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[r]);
        if (!type || !type.hasStaticShape()) {
          func.emitError() << "the gradient of '" << name.getValue()
                           << "' (result #" << r
                           << ") is not a statically shaped tensor";
          return signalPassFailure();
        }
        // A partitioned step returns each rank's block: the parameter is
        // the whole tensor.
        SmallVector<int64_t> shape(type.getShape());
        if (auto local = func.getResultAttrOfType<ShardingAttr>(
                r, WeftDialect::getLocalShardingAttrName()))
          if (auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(
                  func, local.getMesh()))
            shape = getGlobalShape(local, mesh, type.getShape());
        trained.push_back({name.getValue().str(), shape});
      }
    if (trained.empty()) {
      module.emitError() << "-weft-build-optimizer: nothing to train: no "
                            "function returns the gradient (weft.gradient_of) "
                            "of a parameter that is not frozen (run "
                            "-weft-differentiate first; check the freeze "
                            "pattern)";
      return signalPassFailure();
    }
    build(module, trained);
  }

  void build(ModuleOp module, ArrayRef<Trained> trained) {
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
    for (const Trained &p : trained) {
      auto type = RankedTensorType::get(p.shape, f32);
      args.append({type, type});
      argSlots.append({slot("param", p.name), slot("grad", p.name)});
      results.push_back(type);
      resultSlots.push_back(slot("param", p.name));
      for (StringRef role : state) {
        args.push_back(type);
        argSlots.push_back(slot(role, p.name));
        results.push_back(type);
        resultSlots.push_back(slot(role, p.name));
      }
    }
    b.setInsertionPointToEnd(module.getBody());
    auto func = func::FuncOp::create(b, loc, "optimizer_step",
                                     FunctionType::get(context, args, results));
    SymbolTable(module).insert(func);
    func->setAttr(WeftDialect::getOptimizerAttrName(),
                  b.getStringAttr(optimizer));
    for (auto [i, dict] : llvm::enumerate(argSlots))
      func.setArgAttr(i, WeftDialect::getOptimizerSlotAttrName(), dict);
    for (auto [i, dict] : llvm::enumerate(resultSlots))
      func.setResultAttr(i, WeftDialect::getOptimizerSlotAttrName(), dict);
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
    // (torch.nn.utils.clip_grad_norm_).
    SmallVector<Value> grads;
    Value squares;
    for (size_t k = 0; k < trained.size(); ++k) {
      Value g = div(body->getArgument(first + k * perParameter + 1), divisor);
      grads.push_back(g);
      Value square = mul(g, g);
      auto type = cast<RankedTensorType>(square.getType());
      if (type.getRank() > 0)
        square =
            ReduceSumOp::create(b, loc, square,
                                b.getDenseI64ArrayAttr(llvm::to_vector(
                                    llvm::seq<int64_t>(0, type.getRank()))),
                                /*keep_dims=*/false);
      squares = squares ? add(squares, square) : square;
    }
    Value norm = SqrtOp::create(b, loc, squares);
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
    SmallVector<Value> returned{norm};
    for (size_t k = 0; k < trained.size(); ++k) {
      unsigned at = first + k * perParameter;
      Value p = body->getArgument(at), g = grads[k];
      if (adamw) {
        // torch.optim.AdamW, single tensor: decoupled decay, the moments'
        // lerp and addcmul, and addcdiv with the bias corrections.
        Value m = body->getArgument(at + 2), v = body->getArgument(at + 3);
        Value decayed = mul(p, decayFactor);
        Value oneMinusBeta1 = constant(1.0f - float(beta1));
        Value m1 = add(m, mul(sub(g, m), oneMinusBeta1));
        Value oneMinusBeta2 = constant(1.0f - float(beta2));
        Value gg = mul(mul(oneMinusBeta2, g), g);
        Value v1 = add(mul(v, constant(beta2)), gg);
        Value root = SqrtOp::create(b, loc, v1);
        Value epsilon = constant(eps);
        Value denom = add(div(root, root2), epsilon);
        Value p1 = sub(decayed, mul(stepSize, div(m1, denom)));
        returned.append({p1, m1, v1});
      } else {
        // torch.optim.SGD with momentum: L2 weight decay into the gradient,
        // the buffer (zero before the first step), and the step.
        Value buffer = body->getArgument(at + 2);
        Value d = weightDecay != 0 ? add(g, mul(constant(weightDecay), p)) : g;
        Value b1 = add(mul(constant(momentum), buffer), d);
        Value p1 = sub(p, mul(lr, b1));
        returned.append({p1, b1});
      }
    }
    func::ReturnOp::create(b, loc, returned);
  }
};
} // namespace
