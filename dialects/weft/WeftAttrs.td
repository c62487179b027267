//===- WeftAttrs.td - Attributes of the weft dialect -------*- tablegen -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_ATTRS_TD
#define WEFT_ATTRS_TD

include "WeftDialect.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

class Weft_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Weft_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Weft_ShardingAttr : Weft_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor is laid out over a mesh: split axes per dimension and "
                "partial-sum axes.";
  let description = [{
    For each dimension of a tensor, the list of mesh axes it is split over (major to
    minor), and the list of mesh axes over which the value is a **partial sum**: every
    rank along a partial axis holds a summand, and the true value is their sum. A
    row-parallel matmul produces a value that is partial over the tensor-parallel axis;
    a partitioner resolves it with `weft.all_reduce`, or with `weft.reduce_scatter` when the
    next consumer wants the value split along a dimension. Axes not named anywhere are
    replicated.

    ```mlir
    // [batch, seq, hidden]: batch split over dp, sequence over cp then sp,
    // and a pending sum over tp.
    #weft.sharding<@world, [[dp], [cp, sp], []], partial = [tp]>
    ```

    The attribute is attached as `weft.sharding` to function arguments and results
    (one `#weft.sharding`) and to ops (an array, one per result); the dialect verifies it
    there against the mesh and the tensor's shape.

    **Constraints**
    - every entry of the dimension list is a list of axis names;
    - an axis name is not empty;
    - each axis appears at most once, across all dimensions and the partial list;
    - where attached: the mesh symbol names a `weft.mesh`, every axis exists in it, the
      number of dimension entries equals the tensor's rank, and each dimension is
      divisible by the product of the sizes of its axes.
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    "::mlir::ArrayAttr":$dims,
    "::mlir::ArrayAttr":$partial
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$mesh,
                     "::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>>":$dims,
                     CArg<"::llvm::ArrayRef<::llvm::StringRef>", "{}">:$partial)>
  ];
  let extraClassDeclaration = [{
    /// The axis names that split dimension `dim`, major to minor.
    ::llvm::SmallVector<::llvm::StringRef> getDimAxes(unsigned dim) const;
    /// The axis names over which the value is a pending partial sum.
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxes() const;
    /// True if no dimension is split and nothing is partial.
    bool isReplicated() const;
  }];
}

def Weft_ExternalDataAttr : Weft_Attr<"ExternalData", "external"> {
  let summary = "Where a parameter's bytes live outside the IR.";
  let description = [{
    A byte range of a file: `location` is a path relative to the model's directory (as in
    ONNX external data), `offset` and `length` are in bytes. The bytes are read only when
    a program runs; planning never touches them.

    A parameter may be a window of columns of the stored tensor: `columns = S of W` says
    that the file holds rows of `W` elements (the stored tensor's last dimension) and the
    parameter is columns `S` to `S + n` of each, `n` being the parameter's last
    dimension. `-weft-unfuse-projections` cuts a fused QKV weight stored in a file this
    way, without reading it.

    `stored = T` says that the file holds elements of type `T` where it is not the
    parameter's: `-weft-convert-float-type` narrows an f32 weight to bf16 or f16 without
    rewriting its file, and whoever reads the bytes rounds them to the parameter's type.
    `length` counts the stored bytes.

    ```mlir
    #weft.external<"model.onnx.data", offset = 4096, length = 9437184>
    #weft.external<"model.onnx.data", offset = 4096, length = 9437184, columns = 768 of 2304>
    #weft.external<"model.weights", offset = 0, length = 32768, stored = f32>
    ```

    **Constraints**
    - `location` is not empty;
    - `offset` and `length` are not negative;
    - with `columns`, `W` is positive and `S` is not negative;
    - a `stored` type is f32, f64, f16, bf16, i64 or i32.
  }];
  let parameters = (ins
    StringRefParameter<"file path relative to the model">:$location,
    "int64_t":$offset,
    "int64_t":$length,
    DefaultValuedParameter<"int64_t", "0", "first stored column">:$columnStart,
    DefaultValuedParameter<"int64_t", "0",
                           "stored row width; 0: the parameter is the whole range">:$rowWidth,
    OptionalParameter<"::mlir::Type",
                      "element type of the file where it is not the parameter's">:$stored
  );
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$location, "int64_t":$offset,
                     "int64_t":$length), [{
      return $_get($_ctxt, location, offset, length, 0, 0, ::mlir::Type());
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // WEFT_ATTRS_TD
