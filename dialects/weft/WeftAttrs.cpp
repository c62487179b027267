//===- WeftAttrs.cpp - Attributes of the weft dialect ---------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Dialect/WeftDialect.h"
#include "weft/Dialect/WeftOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace weft;

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

/// Axis names print bare when they are identifiers, quoted otherwise.
static void printAxisList(AsmPrinter &printer, ArrayAttr axes) {
  printer << '[';
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer.printKeywordOrString(cast<StringAttr>(axis).getValue());
  });
  printer << ']';
}

static ParseResult parseAxisList(AsmParser &parser, ArrayAttr &axes) {
  SmallVector<Attribute> names;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        std::string name;
        if (parser.parseKeywordOrString(&name))
          return failure();
        names.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      }))
    return failure();
  axes = parser.getBuilder().getArrayAttr(names);
  return success();
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringAttr mesh;
  SmallVector<Attribute> dims;
  ArrayAttr partial = parser.getBuilder().getArrayAttr({});
  if (parser.parseLess() || parser.parseSymbolName(mesh) ||
      parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        ArrayAttr axes;
        if (parseAxisList(parser, axes))
          return failure();
        dims.push_back(axes);
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma()))
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parseAxisList(parser, partial))
      return {};
  if (parser.parseGreater())
    return {};
  return ShardingAttr::getChecked(
      [&] { return parser.emitError(loc); }, parser.getContext(),
      FlatSymbolRefAttr::get(mesh), parser.getBuilder().getArrayAttr(dims),
      partial);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printer.printSymbolName(getMesh().getValue());
  printer << ", [";
  llvm::interleaveComma(getDims(), printer, [&](Attribute axes) {
    printAxisList(printer, cast<ArrayAttr>(axes));
  });
  printer << ']';
  if (!getPartial().empty()) {
    printer << ", partial = ";
    printAxisList(printer, getPartial());
  }
  printer << '>';
}

LogicalResult
ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     FlatSymbolRefAttr mesh, ArrayAttr dims,
                     ArrayAttr partial) {
  if (!mesh || !dims || !partial)
    return emitError() << "#weft.sharding needs a mesh, dimensions and a "
                          "partial list";
  llvm::StringSet<> seen;
  auto checkAxes = [&](Attribute entry, const Twine &where) -> LogicalResult {
    auto axes = dyn_cast<ArrayAttr>(entry);
    if (!axes)
      return emitError() << where << " must be a list of axis names";
    for (Attribute axis : axes) {
      auto name = dyn_cast<StringAttr>(axis);
      if (!name)
        return emitError() << where << " must be a list of axis names";
      if (name.getValue().empty())
        return emitError() << "axis names must not be empty (" << where << ")";
      if (!seen.insert(name.getValue()).second)
        return emitError() << "mesh axis '" << name.getValue()
                           << "' is used more than once; an axis splits at "
                              "most one dimension or is partial";
    }
    return success();
  };
  for (auto [index, entry] : llvm::enumerate(dims))
    if (failed(checkAxes(entry, "dimension " + Twine(index))))
      return failure();
  return checkAxes(partial, "the partial list");
}

ShardingAttr ShardingAttr::get(MLIRContext *context, StringRef mesh,
                               ArrayRef<SmallVector<StringRef>> dims,
                               ArrayRef<StringRef> partial) {
  Builder builder(context);
  SmallVector<Attribute> dimAttrs;
  for (const SmallVector<StringRef> &axes : dims)
    dimAttrs.push_back(builder.getStrArrayAttr(axes));
  return get(context, FlatSymbolRefAttr::get(context, mesh),
             builder.getArrayAttr(dimAttrs), builder.getStrArrayAttr(partial));
}

SmallVector<StringRef> ShardingAttr::getDimAxes(unsigned dim) const {
  SmallVector<StringRef> axes;
  for (Attribute axis : cast<ArrayAttr>(getDims()[dim]))
    axes.push_back(cast<StringAttr>(axis).getValue());
  return axes;
}

SmallVector<StringRef> ShardingAttr::getPartialAxes() const {
  SmallVector<StringRef> axes;
  for (Attribute axis : getPartial())
    axes.push_back(cast<StringAttr>(axis).getValue());
  return axes;
}

bool ShardingAttr::isReplicated() const {
  return getPartial().empty() &&
         llvm::all_of(getDims(), [](Attribute axes) {
           return cast<ArrayAttr>(axes).empty();
         });
}

//===----------------------------------------------------------------------===//
// Sharding against a mesh
//===----------------------------------------------------------------------===//

LogicalResult weft::verifyShardingFor(
    ShardingAttr sharding, Type type, Operation *from,
    function_ref<InFlightDiagnostic()> emitError) {
  auto mesh =
      SymbolTable::lookupNearestSymbolFrom<MeshOp>(from, sharding.getMesh());
  if (!mesh)
    return emitError() << "mesh " << sharding.getMesh()
                       << " is not a weft.mesh in the enclosing module";
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return emitError() << "only ranked tensors can be sharded, got " << type;
  if (static_cast<int64_t>(sharding.getDims().size()) != tensor.getRank())
    return emitError() << "has " << sharding.getDims().size()
                       << " dimension entries for a tensor of rank "
                       << tensor.getRank();
  auto checkAxis = [&](StringRef axis) -> std::optional<int64_t> {
    std::optional<int64_t> size = mesh.getAxisSize(axis);
    if (!size)
      emitError() << "mesh " << sharding.getMesh() << " has no axis '" << axis
                  << "'";
    return size;
  };
  for (int64_t dim = 0; dim < tensor.getRank(); ++dim) {
    int64_t parts = 1;
    for (StringRef axis : sharding.getDimAxes(dim)) {
      std::optional<int64_t> size = checkAxis(axis);
      if (!size)
        return failure();
      parts *= *size;
    }
    if (tensor.getDimSize(dim) % parts != 0)
      return emitError() << "dimension " << dim << " of size "
                         << tensor.getDimSize(dim) << " does not split into "
                         << parts << " equal parts; pick axes whose sizes "
                         << "divide it";
  }
  for (StringRef axis : sharding.getPartialAxes())
    if (!checkAxis(axis))
      return failure();
  return success();
}

SmallVector<int64_t> weft::getLocalShape(ShardingAttr sharding, MeshOp mesh,
                                         ArrayRef<int64_t> globalShape) {
  SmallVector<int64_t> local(globalShape);
  for (auto [dim, size] : llvm::enumerate(local))
    for (StringRef axis : sharding.getDimAxes(dim))
      size /= mesh.getAxisSize(axis).value_or(1);
  return local;
}

SmallVector<int64_t> weft::getGlobalShape(ShardingAttr sharding, MeshOp mesh,
                                          ArrayRef<int64_t> localShape) {
  SmallVector<int64_t> global(localShape);
  for (auto [dim, size] : llvm::enumerate(global))
    for (StringRef axis : sharding.getDimAxes(dim))
      size *= mesh.getAxisSize(axis).value_or(1);
  return global;
}

//===----------------------------------------------------------------------===//
// ExternalDataAttr
//===----------------------------------------------------------------------===//

// <"file", offset = O, length = L[, columns = S of W][, stored = T]>
Attribute ExternalDataAttr::parse(AsmParser &parser, Type) {
  std::string location;
  int64_t offset = 0, length = 0, columnStart = 0, rowWidth = 0;
  Type stored;
  if (parser.parseLess() || parser.parseString(&location) ||
      parser.parseComma() || parser.parseKeyword("offset") ||
      parser.parseEqual() || parser.parseInteger(offset) ||
      parser.parseComma() || parser.parseKeyword("length") ||
      parser.parseEqual() || parser.parseInteger(length))
    return {};
  bool columns = false;
  while (succeeded(parser.parseOptionalComma())) {
    if (!columns && !stored &&
        succeeded(parser.parseOptionalKeyword("columns"))) {
      columns = true;
      if (parser.parseEqual() || parser.parseInteger(columnStart) ||
          parser.parseKeyword("of") || parser.parseInteger(rowWidth))
        return {};
    } else if (!stored && succeeded(parser.parseOptionalKeyword("stored"))) {
      if (parser.parseEqual() || parser.parseType(stored))
        return {};
    } else {
      parser.emitError(parser.getCurrentLocation(),
                       "expected 'columns = S of W' or 'stored = TYPE', in "
                       "that order");
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                    parser.getContext(), StringRef(location), offset, length,
                    columnStart, rowWidth, stored);
}

void ExternalDataAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printString(getLocation());
  printer << ", offset = " << getOffset() << ", length = " << getLength();
  if (getRowWidth())
    printer << ", columns = " << getColumnStart() << " of " << getRowWidth();
  if (getStored())
    printer << ", stored = " << getStored();
  printer << ">";
}

LogicalResult
ExternalDataAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         StringRef location, int64_t offset, int64_t length,
                         int64_t columnStart, int64_t rowWidth, Type stored) {
  if (location.empty())
    return emitError() << "external data needs a file location";
  if (offset < 0)
    return emitError() << "external data offset must not be negative, got "
                       << offset;
  if (length < 0)
    return emitError() << "external data length must not be negative, got "
                       << length;
  if (columnStart < 0 || rowWidth < 0 || (columnStart > 0 && rowWidth == 0))
    return emitError() << "external data columns " << columnStart << " of "
                       << rowWidth
                       << ": the row width must be positive and the first "
                          "column not negative";
  if (stored && !stored.isF32() && !stored.isF64() && !stored.isF16() &&
      !stored.isBF16() && !stored.isInteger(64) && !stored.isInteger(32))
    return emitError() << "external data stored as " << stored
                       << ": the file's elements are f32, f64, f16, bf16, i64 "
                          "or i32";
  return success();
}
