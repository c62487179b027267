//===- Sharding.cpp - Shardings, factor assignment, meshes ----------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/Sharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/raw_ostream.h"

#include <climits>

using namespace mlir;
using namespace weft;

bool TensorSharding::uses(StringRef axis) const {
  for (const auto &dim : dims)
    for (const std::string &a : dim)
      if (a == axis)
        return true;
  return llvm::is_contained(partial, axis);
}

std::string TensorSharding::str() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << '[';
  llvm::interleaveComma(dims, os, [&](const auto &dim) {
    os << '[';
    llvm::interleaveComma(dim, os);
    os << ']';
  });
  os << ']';
  if (!partial.empty()) {
    os << " partial=[";
    llvm::interleaveComma(partial, os);
    os << ']';
  }
  return text;
}

int64_t MeshInfo::size(StringRef axis) const {
  for (auto [name, size] : llvm::zip(axes, sizes))
    if (name == axis)
      return size;
  return 1;
}

int64_t MeshInfo::product(ArrayRef<std::string> names) const {
  int64_t total = 1;
  for (const std::string &axis : names)
    total *= size(axis);
  return total;
}

std::optional<MeshInfo> weft::getMeshInfo(ModuleOp module) {
  for (MeshOp mesh : module.getOps<MeshOp>()) {
    MeshInfo info;
    info.name = mesh.getSymName().str();
    for (auto [axis, size] : llvm::zip(
             mesh.getAxes().getAsValueRange<StringAttr>(), mesh.getShape())) {
      info.axes.push_back(axis.str());
      info.sizes.push_back(size);
    }
    return info;
  }
  return std::nullopt;
}

TensorSharding weft::fromAttr(ShardingAttr attr) {
  TensorSharding sharding;
  for (Attribute dim : attr.getDims()) {
    sharding.dims.emplace_back();
    for (StringRef axis : cast<ArrayAttr>(dim).getAsValueRange<StringAttr>())
      sharding.dims.back().push_back(axis.str());
  }
  for (StringRef axis : attr.getPartial().getAsValueRange<StringAttr>())
    sharding.partial.push_back(axis.str());
  return sharding;
}

ShardingAttr weft::toAttr(MLIRContext *context, StringRef mesh,
                          const TensorSharding &sharding) {
  SmallVector<SmallVector<StringRef>> dims;
  for (const auto &dim : sharding.dims) {
    dims.emplace_back();
    for (const std::string &axis : dim)
      dims.back().push_back(axis);
  }
  SmallVector<StringRef> partial;
  for (const std::string &axis : sharding.partial)
    partial.push_back(axis);
  return ShardingAttr::get(context, mesh, dims, partial);
}

static constexpr StringLiteral kShardingAttr =
    WeftDialect::getShardingAttrName();

std::optional<TensorSharding> weft::getSharding(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (auto layer = dyn_cast<LayerOp>(arg.getOwner()->getParentOp())) {
      auto list = layer->getAttrOfType<ArrayAttr>(
          WeftDialect::getInputShardingsAttrName());
      if (!list || arg.getArgNumber() >= list.size())
        return std::nullopt;
      if (auto attr = dyn_cast<ShardingAttr>(list[arg.getArgNumber()]))
        return fromAttr(attr);
      return std::nullopt;
    }
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    if (!func)
      return std::nullopt;
    if (auto attr = func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(),
                                                        kShardingAttr))
      return fromAttr(attr);
    return std::nullopt;
  }
  Operation *op = value.getDefiningOp();
  auto array = op->getAttrOfType<ArrayAttr>(kShardingAttr);
  unsigned index = cast<OpResult>(value).getResultNumber();
  if (!array || index >= array.size())
    return std::nullopt;
  if (auto attr = dyn_cast<ShardingAttr>(array[index]))
    return fromAttr(attr);
  return std::nullopt;
}

void weft::setSharding(Value value, StringRef mesh,
                       const TensorSharding &sharding) {
  MLIRContext *context = value.getContext();
  ShardingAttr attr = toAttr(context, mesh, sharding);
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    Operation *owner = arg.getOwner()->getParentOp();
    if (auto func = dyn_cast<func::FuncOp>(owner))
      func.setArgAttr(arg.getArgNumber(), kShardingAttr, attr);
    if (auto layer = dyn_cast<LayerOp>(owner)) {
      StringRef name = WeftDialect::getInputShardingsAttrName();
      SmallVector<Attribute> entries;
      if (auto list = layer->getAttrOfType<ArrayAttr>(name))
        entries.assign(list.begin(), list.end());
      // Inputs without a sharding yet hold `unit`: not decided (a
      // replicated entry would read as an annotation).
      for (size_t i = entries.size(); i < layer.getInputs().size(); ++i)
        entries.push_back(UnitAttr::get(context));
      entries[arg.getArgNumber()] = attr;
      layer->setAttr(name, ArrayAttr::get(context, entries));
    }
    return;
  }
  Operation *op = value.getDefiningOp();
  SmallVector<Attribute> entries;
  if (auto array = op->getAttrOfType<ArrayAttr>(kShardingAttr))
    entries.assign(array.begin(), array.end());
  // Results without a sharding yet hold `unit`: not decided (a replicated
  // entry would read as an annotation, and propagation would keep it).
  while (entries.size() < op->getNumResults())
    entries.push_back(UnitAttr::get(context));
  entries[cast<OpResult>(value).getResultNumber()] = attr;
  op->setAttr(kShardingAttr, ArrayAttr::get(context, entries));
}

FactorAxes weft::assignFactorAxes(
    const ShardingRule &rule, const MeshInfo &mesh,
    ArrayRef<ShardedTensor> tensors,
    function_ref<void(int64_t, const std::string &, const std::string &)>
        conflict) {
  int64_t n = rule.getNumFactors();
  FactorAxes result;
  result.axes.resize(n);
  result.priority.assign(n, INT_MAX);
  // Higher-priority tensors first, so they claim axes before others.
  SmallVector<const ShardedTensor *> order;
  for (const ShardedTensor &tensor : tensors)
    if (tensor.sharding)
      order.push_back(&tensor);
  llvm::stable_sort(order, [](const ShardedTensor *a, const ShardedTensor *b) {
    return a->priority < b->priority;
  });
  // A factor that is not the major one of some dimension of the op (a batch
  // merged behind the sequence, [s, b, ...] -> [s * b, ...]) has no
  // contiguous block there (projectSharding leaves such a dimension whole):
  // it stays whole everywhere, and the operands that hold it split are
  // gathered. Splitting it in some tensors only gave the op local shapes
  // that disagree.
  llvm::SmallDenseSet<int64_t> minor;
  for (const auto *list : {&rule.operands, &rule.results})
    for (const ShardingRule::TensorFactors &tensor : *list)
      for (const ShardingRule::DimFactors &dim : tensor)
        for (size_t i = 1; i < dim.size(); ++i)
          minor.insert(dim[i]);
  llvm::StringMap<int64_t> owner; // axis -> factor
  for (const ShardedTensor *tensor : order) {
    const auto &factors = *tensor->factors;
    for (size_t dim = 0;
         dim < factors.size() && dim < tensor->sharding->dims.size(); ++dim) {
      const auto &axes = tensor->sharding->dims[dim];
      if (axes.empty() || factors[dim].empty())
        continue;
      int64_t factor = factors[dim].front();
      if (rule.isBlocked(factor) || minor.contains(factor) ||
          rule.factorSizes[factor] % mesh.product(axes) != 0)
        continue;
      if (result.priority[factor] != INT_MAX) {
        // One split refining the other (a prefix) is a reshard, not a
        // conflict: [cp] then [cp, tp] slices once more.
        const auto &held = result.axes[factor];
        size_t common = 0;
        while (common < held.size() && common < axes.size() &&
               held[common] == axes[common])
          ++common;
        bool refines = common == std::min(held.size(), axes.size());
        if (!refines && conflict && result.priority[factor] == 0 &&
            tensor->priority == 0) {
          std::string a, b;
          for (const std::string &x : result.axes[factor])
            a += (a.empty() ? "" : ",") + x;
          for (const std::string &x : axes)
            b += (b.empty() ? "" : ",") + x;
          conflict(factor, a, b);
        }
        continue;
      }
      // An axis splits one factor only: keep the major axes up to the first
      // one another factor holds (a prefix is still a contiguous split).
      SmallVector<std::string, 2> kept;
      for (const std::string &axis : axes) {
        if (owner.count(axis))
          break;
        kept.push_back(axis);
      }
      if (kept.empty() || rule.factorSizes[factor] % mesh.product(kept) != 0)
        continue;
      for (const std::string &axis : kept)
        owner[axis] = factor;
      result.axes[factor] = kept;
      result.priority[factor] = tensor->priority;
    }
  }
  return result;
}

TensorSharding weft::projectSharding(const ShardingRule::TensorFactors &factors,
                                     const FactorAxes &assignment) {
  TensorSharding sharding;
  for (const auto &dim : factors) {
    sharding.dims.emplace_back();
    if (dim.empty())
      continue;
    // Only the major factor's axes describe a contiguous split.
    bool minorSplit = false;
    for (size_t i = 1; i < dim.size(); ++i)
      minorSplit |= !assignment.axes[dim[i]].empty();
    if (!minorSplit)
      sharding.dims.back() = assignment.axes[dim.front()];
  }
  return sharding;
}

SmallVector<int64_t> weft::localShape(ArrayRef<int64_t> shape,
                                      const TensorSharding &sharding,
                                      const MeshInfo &mesh) {
  SmallVector<int64_t> local(shape);
  for (size_t dim = 0; dim < local.size() && dim < sharding.dims.size(); ++dim)
    local[dim] /= mesh.product(sharding.dims[dim]);
  return local;
}

SmallVector<std::string, 2>
weft::zeroStorageAxes(ArrayRef<int64_t> shape, const TensorSharding &sharding,
                      const MeshInfo &mesh, ArrayRef<std::string> axes) {
  SmallVector<std::string, 2> stored;
  if (shape.empty() || sharding.dims.empty())
    return stored;
  for (const std::string &axis : mesh.axes)
    if (llvm::is_contained(axes, axis) && mesh.size(axis) > 1 &&
        !sharding.uses(axis))
      stored.push_back(axis);
  int64_t rows = shape.front() / mesh.product(sharding.dims.front());
  // A split whose major axis is cp is the ring's load-balanced layout on a
  // module that has one: two mirrored pieces per rank, which the stored
  // block's gather and slice then use too.
  const int64_t pieces = !stored.empty() && stored.front() == "cp" ? 2 : 1;
  if (stored.empty() || rows % (mesh.product(stored) * pieces) != 0)
    stored.clear();
  return stored;
}
