//===- WeftOps.td - Operations of the weft dialect ---------*- tablegen -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_OPS_TD
#define WEFT_OPS_TD

include "WeftDialect.td"
include "WeftEnums.td"
include "WeftAttrs.td"
include "WeftInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

class Weft_Op<string mnemonic, list<Trait> traits = []>
    : Op<Weft_Dialect, mnemonic, traits>;

// Every op says what it costs; the planner's cost model reads only this.
defvar WeftCost = DeclareOpInterfaceMethods<Weft_CostOpInterface>;
// Ops whose factor rule is written in WeftShardingRules.cpp.
defvar WeftRule = DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface>;
// What backward needs (WeftBackward.cpp): the defaults (saves nothing, one
// pass like the forward), saved values of their own, and also a backward
// cost of their own (GEMMs and attention).
// Every differentiable op builds its own gradient (WeftGradients.cpp).
defvar WeftBackward =
    DeclareOpInterfaceMethods<Weft_DifferentiableOpInterface, ["buildGradients"]>;
defvar WeftSaves = DeclareOpInterfaceMethods<Weft_DifferentiableOpInterface,
    ["getSavedForBackward", "buildGradients"]>;
defvar WeftGradients = DeclareOpInterfaceMethods<Weft_DifferentiableOpInterface,
    ["getSavedForBackward", "estimateBackwardCost", "buildGradients"]>;
// Ops that also say what each operand's gradient reads (WeftBackward.cpp)
// where their traits do not: a weight's gradient step (ZB-H1's W) reads it.
defvar WeftSavesReads = DeclareOpInterfaceMethods<Weft_DifferentiableOpInterface,
    ["getSavedForBackward", "getGradientReads", "buildGradients"]>;
defvar WeftGradientsReads = DeclareOpInterfaceMethods<Weft_DifferentiableOpInterface,
    ["getSavedForBackward", "estimateBackwardCost", "getGradientReads", "buildGradients"]>;
defvar WeftAttentionCore = DeclareOpInterfaceMethods<Weft_DifferentiableOpInterface,
    ["getSavedForBackward", "estimateBackwardCost", "isAttentionCore", "buildGradients"]>;
// Ops that also partition themselves (WeftPartitionRules.cpp) instead of by
// the generic factor partition.
defvar WeftRulePartition =
    DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface, ["partition"]>;

//===----------------------------------------------------------------------===//
// Weights and constants
//===----------------------------------------------------------------------===//

def Weft_ParameterOp : Weft_Op<"parameter", [WeftBackward, WeftCost, WeftRulePartition, Pure]> {
  let summary = "A named weight of the model: inline, in external storage, or shape only.";
  let description = [{
    A trainable (or frozen) weight. Its bytes are either inline (`value`), in a byte range
    of a file (`external`, as ONNX external data), or absent: a module imported for
    planning keeps only names, shapes and dtypes. The name is the key that plans, weight
    loaders and checkpoints use.

    ```mlir
    %w = weft.parameter "h.0.mlp.fc1.weight" : tensor<768x3072xf32>
    %b = weft.parameter "h.0.mlp.fc1.bias" : tensor<3072xf32> = dense<0.0>
    %e = weft.parameter "wte.weight" external <"model.onnx.data", offset = 0,
             length = 154389504> : tensor<50257x768xf32>
    ```

    **Constraints**
    - `name` is not empty;
    - at most one of `value` and `external` is given;
    - `value`, if given, has the result's type;
    - `external`, if given, has a `length` of exactly the result's size in bytes
      (`i1` takes one byte per element), or, with a column window `S of W`, the size
      of the stored rows of `W` columns, and `S` plus the result's last dimension is at
      most `W`.
  }];
  let arguments = (ins StrAttr:$name,
                       OptionalAttr<ElementsAttr>:$value,
                       OptionalAttr<Weft_ExternalDataAttr>:$external);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $name (`external` $external^)? attr-dict
    custom<ParameterTypeAndValue>(type($result), $value)
  }];
  let hasVerifier = 1;
}

def Weft_ConstantOp : Weft_Op<"constant",
    [WeftBackward, WeftCost, WeftRulePartition, ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "A tensor whose elements are given in the IR.";
  let description = [{
    ```mlir
    %zero = weft.constant dense<0.0> : tensor<4x8xf32>
    ```

    **Constraints**
    - `value` has the result's type (a statically shaped tensor of a weft element type).
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Weft_IotaOp : Weft_Op<"iota", [WeftBackward, WeftCost, WeftRulePartition, Pure, Weft_Elementwise]> {
  let summary = "Integers 0, 1, 2, ... counted along one dimension.";
  let description = [{
    Element `[i0, ..., in]` of the result is `i_dim`, converted to the element type.
    Position ids and causal masks are built from it.

    Partitioned: each rank counts its own block, from the block's first index (an integer
    iota split along `dim`, in contiguous blocks); other splits only shorten it. A
    load-balanced (zigzag) split or a float iota split along `dim` is built whole and
    sliced.

    ```mlir
    %pos = weft.iota dim 1 : tensor<2x128xi64>
    ```

    **Constraints**
    - `dim` is a dimension of the result: `0 <= dim < rank`;
    - the element type is numeric (not `i1`).
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs Weft_NumericTensor:$result);
  let assemblyFormat = "`dim` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

class Weft_BinaryElementwiseOp<string mnemonic, Type tensorType, string what,
                               list<Trait> traits = []>
    : Weft_Op<mnemonic, !listconcat(traits, [
        Pure, Weft_Elementwise, SameOperandsAndResultElementType, InferTypeOpAdaptor,
        DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface>,
        DeclareOpInterfaceMethods<Weft_CostOpInterface>])> {
  let summary = "Elementwise " # what # ", with numpy broadcasting.";
  let description = [{
    Computes `}] # what # [{` of each pair of elements. Operand shapes broadcast as in
    numpy: shapes are aligned at their trailing dimensions; a dimension of size 1 (or a
    missing leading one) stretches to the other's size. The result has the broadcast
    shape. The type list is written once when all types are equal.

    ```mlir
    %c = weft.}] # mnemonic # [{ %a, %b : tensor<4x8xf32>
    %d = weft.}] # mnemonic # [{ %a, %bias : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```

    **Constraints**
    - operands and result have one element type;
    - the operand shapes broadcast, and the result has the broadcast shape.
  }];
  let arguments = (ins tensorType:$lhs, tensorType:$rhs);
  let results = (outs tensorType:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` custom<ElementwiseTypes>(type($lhs), type($rhs), type($result))
  }];
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes) {
      return ::weft::inferBroadcastResultType(location, adaptor.getOperands().getTypes(),
          /*elementType=*/nullptr, inferredReturnTypes);
    }
    ::weft::ShardingRule $cppClass::getShardingRule() {
      return ::weft::getElementwiseShardingRule(getOperation());
    }
    ::weft::OpCost $cppClass::estimateCost(::mlir::TypeRange operandTypes,
                                           ::mlir::TypeRange resultTypes) {
      return ::weft::estimateElementwiseCost(operandTypes, resultTypes,
                                             /*flopsPerElement=*/1);
    }
  }];
}

def Weft_AddOp : Weft_BinaryElementwiseOp<"add", Weft_NumericTensor, "x + y",
                                          [Commutative, WeftBackward, Weft_Additive]> {
  let hasFolder = 1;
}
def Weft_SubOp : Weft_BinaryElementwiseOp<"sub", Weft_NumericTensor, "x - y",
                                          [WeftBackward, Weft_Additive]> {
  let hasFolder = 1;
}
def Weft_MulOp : Weft_BinaryElementwiseOp<"mul", Weft_NumericTensor, "x * y",
                                          [WeftSaves, Commutative,
                                           Weft_Multilinear]> {
  let hasFolder = 1;
}
def Weft_DivOp : Weft_BinaryElementwiseOp<"div", Weft_NumericTensor, "x / y",
                                          [WeftSaves]> {
  let hasFolder = 1;
}
def Weft_PowOp : Weft_BinaryElementwiseOp<"pow", Weft_NumericTensor, "x raised to y",
                                          [WeftSaves]>;
def Weft_MaximumOp : Weft_BinaryElementwiseOp<"maximum", Weft_NumericTensor,
                                              "max(x, y)", [WeftSaves, Commutative]>;
def Weft_MinimumOp : Weft_BinaryElementwiseOp<"minimum", Weft_NumericTensor,
                                              "min(x, y)", [WeftSaves, Commutative]>;

def Weft_CompareOp : Weft_Op<"compare", [WeftBackward, WeftCost, WeftRule, Pure, Weft_Elementwise, SameOperandsElementType,
    InferTypeOpAdaptor]> {
  let summary = "Elementwise comparison to an i1 tensor, with numpy broadcasting.";
  let description = [{
    ```mlir
    %m = weft.compare ge, %row, %col : (tensor<128x1xi64>, tensor<1x128xi64>) -> tensor<128x128xi1>
    ```

    **Constraints**
    - both operands have one element type (any weft element type);
    - the operand shapes broadcast; the result is `i1` with the broadcast shape.
  }];
  let arguments = (ins Weft_ComparePredicate:$predicate, Weft_Tensor:$lhs,
                       Weft_Tensor:$rhs);
  let results = (outs Weft_BoolTensor:$result);
  let assemblyFormat = [{
    $predicate `,` $lhs `,` $rhs attr-dict `:`
    custom<ElementwiseTypes>(type($lhs), type($rhs), type($result))
  }];
}

def Weft_WhereOp : Weft_Op<"where", [WeftSaves, WeftCost, WeftRule, Pure, Weft_Elementwise,
    AllElementTypesMatch<["lhs", "rhs", "result"]>, InferTypeOpAdaptor]> {
  let summary = "Elementwise select: `cond ? lhs : rhs`, with numpy broadcasting.";
  let description = [{
    ```mlir
    %s = weft.where %mask, %scores, %neg_inf
        : (tensor<1x1x128x128xi1>, tensor<2x12x128x128xf32>, tensor<2x12x128x128xf32>)
          -> tensor<2x12x128x128xf32>
    ```

    **Constraints**
    - `condition` is an `i1` tensor;
    - `lhs`, `rhs` and the result have one element type;
    - the three shapes broadcast; the result has the broadcast shape.
  }];
  let arguments = (ins Weft_BoolTensor:$condition, Weft_Tensor:$lhs, Weft_Tensor:$rhs);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $lhs `,` $rhs attr-dict `:`
    custom<ElementwiseTypes>(type($condition), type($lhs), type($rhs), type($result))
  }];
}

// `flops` counts the arithmetic of the definition per element, a
// transcendental function (exp, erf, tanh, sqrt) as one.
class Weft_UnaryElementwiseOp<string mnemonic, Type tensorType, string what,
                              int flops = 1, list<Trait> traits = []>
    : Weft_Op<mnemonic, !listconcat(traits, [Pure, Weft_Elementwise,
        SameOperandsAndResultType,
        DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface>,
        DeclareOpInterfaceMethods<Weft_CostOpInterface>])> {
  let summary = "Elementwise " # what # ".";
  let description = [{
    Computes `}] # what # [{` of each element.

    ```mlir
    %y = weft.}] # mnemonic # [{ %x : tensor<4x8xf32>
    ```

    **Constraints**
    - the result has the operand's type.
  }];
  let arguments = (ins tensorType:$input);
  let results = (outs tensorType:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = [{
    ::weft::ShardingRule $cppClass::getShardingRule() {
      return ::weft::getElementwiseShardingRule(getOperation());
    }
    ::weft::OpCost $cppClass::estimateCost(::mlir::TypeRange operandTypes,
                                           ::mlir::TypeRange resultTypes) {
      return ::weft::estimateElementwiseCost(operandTypes, resultTypes,
                                             /*flopsPerElement=*/}] # flops # [{);
    }
  }];
}

def Weft_NegOp : Weft_UnaryElementwiseOp<"neg", Weft_NumericTensor, "-x", 1,
                                        [WeftBackward, Weft_Additive]>;
def Weft_ExpOp : Weft_UnaryElementwiseOp<"exp", Weft_FloatTensor, "e^x", 1, [WeftSaves]>;
def Weft_LogOp : Weft_UnaryElementwiseOp<"log", Weft_FloatTensor, "ln(x)", 1, [WeftSaves]>;
def Weft_SqrtOp : Weft_UnaryElementwiseOp<"sqrt", Weft_FloatTensor, "sqrt(x)", 1, [WeftSaves]>;
def Weft_RsqrtOp : Weft_UnaryElementwiseOp<"rsqrt", Weft_FloatTensor, "1 / sqrt(x)", 2, [WeftSaves]>;
def Weft_TanhOp : Weft_UnaryElementwiseOp<"tanh", Weft_FloatTensor, "tanh(x)", 1, [WeftSaves]>;
def Weft_ErfOp : Weft_UnaryElementwiseOp<"erf", Weft_FloatTensor, "erf(x)", 1, [WeftSaves]>;
// Rotary position embeddings computed in the forward pass (Hugging Face's
// LlamaRotaryEmbedding since transformers 4.38): cos and sin of positions
// times inverse frequencies.
def Weft_SinOp : Weft_UnaryElementwiseOp<"sin", Weft_FloatTensor, "sin(x)", 1, [WeftSaves]>;
def Weft_CosOp : Weft_UnaryElementwiseOp<"cos", Weft_FloatTensor, "cos(x)", 1, [WeftSaves]>;
def Weft_SigmoidOp : Weft_UnaryElementwiseOp<"sigmoid", Weft_FloatTensor,
                                             "1 / (1 + e^-x)", 3, [WeftSaves]>;
def Weft_ReluOp : Weft_UnaryElementwiseOp<"relu", Weft_NumericTensor, "max(x, 0)", 1, [WeftSaves]>;
// Distances between positions (T5's relative position buckets, ALiBi's
// -|i - j| slopes), mostly folded at import from aranges.
def Weft_AbsOp : Weft_UnaryElementwiseOp<"abs", Weft_NumericTensor, "|x|", 1, [WeftSaves]>;
def Weft_SiluOp : Weft_UnaryElementwiseOp<"silu", Weft_FloatTensor,
                                          "x * sigmoid(x) (swish)", 4, [WeftSaves]>;

def Weft_GeluOp : Weft_Op<"gelu", [WeftSaves, Pure, Weft_Elementwise, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<Weft_CostOpInterface>]> {
  let summary = "Elementwise GELU, exact (erf) or tanh-approximated.";
  let description = [{
    `erf` (the default): `0.5 * x * (1 + erf(x / sqrt(2)))`, PyTorch's `approximate='none'`.
    `tanh`: `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`, GPT-2's form.

    ```mlir
    %y = weft.gelu %x : tensor<4x3072xf32>
    %z = weft.gelu %x approximation tanh : tensor<4x3072xf32>
    ```

    **Constraints**
    - the result has the operand's type.
  }];
  let arguments = (ins Weft_FloatTensor:$input,
                       DefaultValuedAttr<Weft_GeluApproximation,
                                         "::weft::GeluApproximation::erf">:$approximation);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`approximation` $approximation^)? attr-dict `:` type($input)
  }];
}

def Weft_DropoutOp : Weft_Op<"dropout", [WeftSaves, WeftCost, WeftRule, Pure, Weft_Elementwise,
    SameOperandsAndResultType]> {
  let summary = "Dropout: zeroes elements with probability `ratio` in training; the identity in a forward program.";
  let description = [{
    In a training step each element is kept with probability `1 - ratio` and scaled by
    `1 / (1 - ratio)`, or zeroed; backward reads the mask of kept elements (one byte per
    element). A forward (inference) program keeps every element unchanged, as PyTorch's
    eval mode does, so weft's forward programs and kernels treat it as the identity.
    The planner costs the training step, with the mask it saves.

    ```mlir
    %y = weft.dropout %x ratio 1.000000e-01 : tensor<2x128x768xbf16>
    ```

    **Constraints**
    - `0 <= ratio < 1`;
    - the result has the input's type.
  }];
  let arguments = (ins Weft_FloatTensor:$input, F64Attr:$ratio);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = "$input `ratio` $ratio attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Weft_CastOp : Weft_Op<"cast", [WeftBackward, WeftCost,
    DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface, ["isAdditive"]>, Pure, Weft_Elementwise, SameOperandsAndResultShape]> {
  let summary = "Elementwise conversion to another element type.";
  let description = [{
    Floats round to nearest even; float to integer truncates toward zero; to `i1` is
    `x != 0`.

    ```mlir
    %h = weft.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
    ```

    **Constraints**
    - the result has the operand's shape.
  }];
  let arguments = (ins Weft_Tensor:$input);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

class Weft_ReduceOp<string mnemonic, Type tensorType, string what,
                    list<Trait> traits = [WeftBackward], Trait rule = WeftRule>
    : Weft_Op<mnemonic, !listconcat(traits, [WeftCost, rule, Pure,
        SameOperandsAndResultElementType, InferTypeOpAdaptor])> {
  let summary = "The " # what # " over the given dimensions.";
  let description = [{
    Reduces `input` over the dimensions in `axes`. With `keep_dims` the reduced dimensions
    stay with size 1; without, they are removed.

    ```mlir
    %r = weft.}] # mnemonic # [{ %x axes [2] keep_dims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
    ```

    **Constraints**
    - `axes` is not empty, each axis is a dimension of the input (`0 <= a < rank`), and
      no axis repeats;
    - the result has the input's element type and the reduced shape.
  }];
  let arguments = (ins tensorType:$input, DenseI64ArrayAttr:$axes, UnitAttr:$keep_dims);
  let results = (outs tensorType:$result);
  let assemblyFormat = [{
    $input `axes` $axes (`keep_dims` $keep_dims^)? attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes) {
      return ::weft::inferReduceResultType(location, adaptor.getInput().getType(),
          adaptor.getAxes(), adaptor.getKeepDims(), inferredReturnTypes);
    }
  }];
}

def Weft_ReduceSumOp : Weft_ReduceOp<"reduce_sum", Weft_NumericTensor, "sum",
                                      [WeftBackward, Weft_Additive]>;
def Weft_ReduceMeanOp : Weft_ReduceOp<"reduce_mean", Weft_FloatTensor, "mean">;
def Weft_ReduceMaxOp : Weft_ReduceOp<"reduce_max", Weft_NumericTensor, "maximum",
                                     [WeftSaves]>;
def Weft_ReduceLogSumExpOp : Weft_ReduceOp<"reduce_logsumexp", Weft_FloatTensor,
    "log-sum-exp", [WeftSaves], WeftRulePartition> {
  let description = [{
    `log(sum(exp(input)))` over the dimensions in `axes`, computed stably (the maximum
    is taken out first) in one pass over the input: the normalizer of a softmax, what
    a cross-entropy's loss and gradient read (ONNX `ReduceLogSumExp`, `torch.logsumexp`).
    With `keep_dims` the reduced dimensions stay with size 1; without, they are removed.

    Partitioned: propagation does not split a reduced dimension. An input that arrives
    split along one all the same (the logits of a vocabulary-parallel head, in the
    cross-entropy's loss and backward) is reduced where it lies: each rank takes its
    block's log-sum-exp, and the blocks' values `l` combine as `m + log(sum(exp(l - m)))`
    with `m` their maximum, two `weft.all_reduce`s of one value per row (max, then
    sum), instead of gathering the rows.

    ```mlir
    %lse = weft.reduce_logsumexp %logits axes [2] keep_dims : tensor<2x8x32000xf32> -> tensor<2x8x1xf32>
    ```

    **Constraints**
    - `axes` is not empty, each axis is a dimension of the input (`0 <= a < rank`), and
      no axis repeats;
    - the result has the input's element type and the reduced shape.
  }];
}

class Weft_SoftmaxLikeOp<string mnemonic, string what>
    : Weft_Op<mnemonic, [WeftSaves, WeftCost, WeftRulePartition, Pure, SameOperandsAndResultType]> {
  let summary = what # " along one dimension, optionally scaled and causally masked.";
  let description = [{
    Computed stably (the maximum is subtracted first) on `scale · input`. With `causal`,
    the entries of row `i` (dimension `rank - 2`) past column `i` (the last dimension,
    which must be `axis`) are masked out first: Megatron's fused scale-and-causal-mask
    softmax, what unfused attention runs on its scores.

    Partitioned: `axis` is needed whole, so propagation does not split it. An input that
    arrives split along `axis` all the same (the logits of a vocabulary-parallel head, in
    the cross-entropy's backward) is normalized where it lies, without `causal`: each
    rank takes its rows' maxima and sums over the split with two `weft.all_reduce`s of
    one value per row (max, then sum) and keeps its columns, as Megatron's
    vocabulary-parallel cross-entropy does, instead of gathering the rows.

    ```mlir
    %p = weft.}] # mnemonic # [{ %scores axis 3 : tensor<2x12x128x128xf32>
    %q = weft.}] # mnemonic # [{ %scores axis 3 scale 0.125 causal : tensor<2x12x128x128xbf16>
    ```

    **Constraints**
    - `axis` is a dimension of the input: `0 <= axis < rank`;
    - `scale` is positive and finite;
    - with `causal`, the input has rank at least 2 and `axis` is its last dimension;
    - the result has the input's type.
  }];
  let arguments = (ins Weft_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis,
                       DefaultValuedAttr<F32Attr, "1.0f">:$scale, UnitAttr:$causal);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $input `axis` $axis (`scale` $scale^)? (`causal` $causal^)? attr-dict `:` type($input)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$input, "int64_t":$axis), [{
      build($_builder, $_state, input, axis, ::llvm::APFloat(1.0f), false);
    }]>
  ];
  let hasVerifier = 1;
}

def Weft_SoftmaxOp : Weft_SoftmaxLikeOp<"softmax", "Softmax">;
def Weft_LogSoftmaxOp : Weft_SoftmaxLikeOp<"log_softmax", "Log of softmax">;

def Weft_LayerNormOp : Weft_Op<"layer_norm", [WeftSavesReads, WeftCost, WeftRulePartition, Pure]> {
  let summary = "Layer normalization over the trailing dimensions from `axis` on.";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * scale + bias`, where mean and (biased) variance
    are taken over dimensions `axis` to `rank - 1`, as ONNX `LayerNormalization` and
    `torch.nn.LayerNorm`.

    ```mlir
    %y = weft.layer_norm %x, %gamma, %beta axis 2 epsilon 1.0e-05
        : (tensor<2x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<2x128x768xf32>
    ```

    **Constraints**
    - `axis` is a dimension of the input: `0 <= axis < rank`;
    - `epsilon` is positive and finite;
    - `scale` (and `bias`, if given) has shape `input.shape[axis:]`;
    - all operands and the result have one element type, and the result has the input's
      type.
  }];
  let arguments = (ins Weft_FloatTensor:$input, Weft_FloatTensor:$scale,
                       Optional<Weft_FloatTensor>:$bias,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis, F32Attr:$epsilon);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? `axis` $axis `epsilon` $epsilon attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_RMSNormOp : Weft_Op<"rms_norm", [WeftSavesReads, WeftCost, WeftRulePartition, Pure]> {
  let summary = "Root-mean-square normalization over the trailing dimensions from `axis`.";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * scale`, mean over dimensions `axis` to `rank - 1`,
    as in LLaMA. Partitioned over a split normalized dimension (OLMo 2's QK norm
    across heads under tensor parallelism), each rank normalizes its own block
    with the sum of squares all-reduced, as LayerNorm does with its sums.

    ```mlir
    %y = weft.rms_norm %x, %gamma axis 2 epsilon 1.0e-06
        : (tensor<2x128x4096xbf16>, tensor<4096xbf16>) -> tensor<2x128x4096xbf16>
    ```

    **Constraints**
    - `axis` is a dimension of the input: `0 <= axis < rank`;
    - `epsilon` is positive and finite;
    - `scale` has shape `input.shape[axis:]`;
    - all operands and the result have one element type, and the result has the input's
      type.
  }];
  let arguments = (ins Weft_FloatTensor:$input, Weft_FloatTensor:$scale,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis, F32Attr:$epsilon);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `axis` $axis `epsilon` $epsilon attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and attention
//===----------------------------------------------------------------------===//

def Weft_MatmulOp : Weft_Op<"matmul", [WeftGradients, Pure, Weft_Multilinear, SameOperandsAndResultElementType,
    InferTypeOpAdaptor, DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface>,
    DeclareOpInterfaceMethods<Weft_CostOpInterface>]> {
  let summary = "Batched matrix product, with optional transposes and broadcast batch dimensions.";
  let description = [{
    Multiplies the matrices in the last two dimensions; leading (batch) dimensions
    broadcast as in numpy. `transpose_lhs` / `transpose_rhs` swap an operand's last two
    dimensions first, so `Q Kᵀ` needs no separate transpose.

    ```mlir
    %s = weft.matmul %q, %k transpose_rhs
        : (tensor<2x12x128x64xf32>, tensor<2x12x128x64xf32>) -> tensor<2x12x128x128xf32>
    ```

    **Constraints**
    - both operands have rank at least 2 and one element type;
    - the contracting dimensions agree: `lhs[..., m, k]` and `rhs[..., k, n]` (after the
      transposes);
    - the batch dimensions broadcast;
    - the result is `[broadcast batch..., m, n]`.
  }];
  let arguments = (ins Weft_NumericTensor:$lhs, Weft_NumericTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Weft_NumericTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_lhs` $transpose_lhs^)? (`transpose_rhs` $transpose_rhs^)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_LinearOp : Weft_Op<"linear", [WeftGradientsReads, Pure, SameOperandsAndResultElementType,
    InferTypeOpAdaptor, DeclareOpInterfaceMethods<Weft_ShardingRuleOpInterface, ["partition"]>,
    DeclareOpInterfaceMethods<Weft_CostOpInterface>]> {
  let summary = "A dense layer: `input · weight + bias` over the last dimension.";
  let description = [{
    `input` is `[..., k]`; `weight` is `[k, n]` (as ONNX `MatMul` operands exported from
    torch), or `[n, k]` with `transpose_weight` (as `torch.nn.Linear.weight` and ONNX
    `Gemm` with `transB`); `bias`, if given, is `[n]`. The result is `[..., n]`. Megatron
    tensor parallelism splits `n` (column-parallel) or `k` (row-parallel).

    ```mlir
    %h = weft.linear %x, %w, %b
        : (tensor<2x128x768xf32>, tensor<768x3072xf32>, tensor<3072xf32>) -> tensor<2x128x3072xf32>
    ```

    **Constraints**
    - `input` has rank at least 1, `weight` rank 2, `bias` rank 1;
    - `weight`'s contracting dimension equals `input`'s last dimension;
    - `bias` has `weight`'s output size;
    - all operands and the result have one element type;
    - the result is `input.shape[:-1] + [n]`.
  }];
  let arguments = (ins Weft_NumericTensor:$input, Weft_NumericTensor:$weight,
                       Optional<Weft_NumericTensor>:$bias, UnitAttr:$transpose_weight);
  let results = (outs Weft_NumericTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? (`transpose_weight` $transpose_weight^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Weft_AttentionOp : Weft_Op<"attention", [WeftAttentionCore, WeftCost, WeftRulePartition, Pure,
    AttrSizedOperandSegments, InferTypeOpAdaptor]> {
  let summary = "Scaled dot-product attention with causal or explicit masks and grouped KV heads.";
  let description = [{
    `softmax(scale · Q Kᵀ + mask) · V` per head. `q` is `[batch, heads, seq, head_dim]`,
    `k` is `[batch, kv_heads, kv_seq, head_dim]`, `v` is `[batch, kv_heads, kv_seq,
    v_head_dim]`. With grouped-query attention, `heads` is a multiple of `kv_heads` and
    query head `h` reads KV head `h / (heads / kv_heads)`. `causal` masks key positions after
    the query position (aligned at the top-left). `mask`, if given, broadcasts to `[batch,
    heads, seq, kv_seq]`: an `i1` mask keeps positions where it is true; a float mask is
    added to the scores. `dropout` is the probability with which training drops an
    attention probability; a forward (inference) program keeps them all, as PyTorch's
    eval mode does.

    `softcap`, if given, caps the scaled scores before any mask: `softcap · tanh(scale ·
    Q Kᵀ / softcap) + mask` (Gemma 2's and Grok-1's attention logit soft-capping, as
    FlashAttention's `softcap` and ONNX Attention's `softcap` apply it).

    `window`, with `causal`, is a sliding window (Mistral, Gemma 2's local layers,
    FlashAttention's `window_size = (window - 1, 0)`): query `i` sees keys `i - window + 1`
    to `i`, itself and the `window - 1` before it. No `[seq, kv_seq]` mask is stored, and
    the work is that of the pairs in the window.

    `alibi`, if given, is a vector of one slope `m_h` per query head: ALiBi's
    linear biases (Press et al. 2022; BLOOM, MPT), `-m_h · |i - j|` added to query `i`'s
    scaled (and capped) score of key `j`, as FlashAttention's `alibi_slopes` adds them.
    Under `causal` that is `m_h · (j - i)`, which differs from BLOOM's `m_h · j` by a
    constant per row, so the probabilities are the same. No `[heads, seq, kv_seq]` bias
    is stored; the slopes split with the heads. They take no gradient here (a gradient
    to them is taken through the decomposed attention).

    ```mlir
    %o = weft.attention %q, %k, %v scale 0.125 causal
        : (tensor<2x32x128x64xbf16>, tensor<2x8x128x64xbf16>, tensor<2x8x128x64xbf16>)
          -> tensor<2x32x128x64xbf16>
    ```

    **Constraints**
    - `q`, `k`, `v` have rank 4 and one float element type;
    - `k` and `v` have `q`'s batch size, and each other's head count and sequence length;
    - `q` and `k` have one head dimension;
    - the query head count is a positive multiple of the KV head count;
    - `mask`, if given, has rank at most 4, is `i1` or `q`'s element type, and broadcasts
      to `[batch, heads, seq, kv_seq]`;
    - `scale` is positive;
    - `softcap`, if given, is positive;
    - `window`, if given, is positive and comes with `causal`;
    - `alibi`, if given, is a float vector of `heads` slopes (of any float type: a 16-bit
      program's are rounded as Hugging Face's BLOOM rounds its biases);
    - `dropout`, if given, is in `[0, 1)`;
    - the result is `[batch, heads, seq, v_head_dim]` of `q`'s element type.
  }];
  let arguments = (ins Weft_FloatTensor:$q, Weft_FloatTensor:$k, Weft_FloatTensor:$v,
                       Optional<Weft_Tensor>:$mask, Optional<Weft_FloatTensor>:$alibi_slopes,
                       F32Attr:$scale, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$dropout, OptionalAttr<F32Attr>:$softcap,
                       OptionalAttr<I64Attr>:$window);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`mask` $mask^)? (`alibi` $alibi_slopes^)? `scale` $scale
    (`softcap` $softcap^)? (`causal` $causal^)? (`window` $window^)? (`dropout` $dropout^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$q, "::mlir::Value":$k, "::mlir::Value":$v,
                   "::mlir::Value":$mask, "::llvm::APFloat":$scale, "bool":$causal), [{
      build($_builder, $_state, q, k, v, mask, ::mlir::Value(), scale, causal,
            ::mlir::FloatAttr(), ::mlir::FloatAttr(), ::mlir::IntegerAttr());
    }]>
  ];
}

def Weft_AttentionBlockOp : Weft_Op<"attention_block", [WeftAttentionCore, WeftCost, WeftRule, Pure,
    AttrSizedOperandSegments, InferTypeOpAdaptor]> {
  let summary = "Attention of queries over one block of keys and values, with its log-sum-exp.";
  let description = [{
    One step of blockwise attention (ring attention, Li et al. 2021 and Liu et al. 2023;
    the form FlashAttention returns): `softmax(scale · Q Kᵀ + mask) · V` over this block
    of keys only, and per query row the log-sum-exp `lse` of its scaled, masked scores.
    Blocks combine exactly: for two blocks `a` and `b`, `lse = log(exp(lse_a) +
    exp(lse_b))` and `out = out_a · exp(lse_a - lse) + out_b · exp(lse_b - lse)`. The
    partitioner lowers attention over a key sequence split around a ring of ranks to
    one block per ring step and such merges.

    Shapes, grouped KV heads, `mask`, `alibi`, `softcap` and `window` are as in
    `weft.attention` (the log-sum-exp is of the capped, biased, masked scores; with
    positions, the window is of positions: key `j` is hidden from query `i` when
    `k_positions[j] <= q_positions[i] - window`, and ALiBi's distance is
    `|q_positions[i] - k_positions[j]|`). `q_positions` and
    `k_positions` give the sequence position of each query and key; with `causal`, key
    `j` is masked for query `i` when `k_positions[j] > q_positions[i]` (without
    positions, when `j > i`). A query whose keys are all masked gets a zero output and
    `lse = -1e30`, which a merge weighs by zero. `lse` is `f32` whatever the element
    type of `q`, as FlashAttention keeps it.

    `visible N` is a cost fact, not semantics: the (query, key) pairs per batch and
    head that the positions of the most loaded rank leave visible to this block, as
    the partitioner counts them from the ring's layout, its step and the window. The
    cost counts those pairs (a kernel skips the tiles a causal mask or a window hides);
    without it, a causal block with positions is costed as half its pairs (what a
    load-balanced ring's steps hold), or `window` pairs per query.

    ```mlir
    %o, %lse = weft.attention_block %q, %k, %v positions %qp, %kp scale 0.125 causal
        : (tensor<1x8x64x64xbf16>, tensor<1x8x64x64xbf16>, tensor<1x8x64x64xbf16>,
           tensor<64xi64>, tensor<64xi64>) -> (tensor<1x8x64x64xbf16>, tensor<1x8x64x1xf32>)
    ```

    **Constraints**
    - `q`, `k`, `v`, `mask` and `alibi` are as for `weft.attention`;
    - `q_positions` and `k_positions` are given together, are integer vectors, and have
      `seq` and `kv_seq` elements;
    - `scale` and `softcap`, if given, are positive;
    - `window`, if given, is positive and comes with `causal`;
    - `visible_pairs`, if given, comes with `causal` and positions and is in `[0, seq ·
      kv_seq]`;
    - `result` is `[batch, heads, seq, v_head_dim]` of `q`'s element type and `lse` is
      `[batch, heads, seq, 1]` of `f32`.
  }];
  let arguments = (ins Weft_FloatTensor:$q, Weft_FloatTensor:$k, Weft_FloatTensor:$v,
                       Optional<Weft_Tensor>:$mask, Optional<Weft_FloatTensor>:$alibi_slopes,
                       Optional<Weft_IntTensor>:$q_positions,
                       Optional<Weft_IntTensor>:$k_positions, F32Attr:$scale,
                       UnitAttr:$causal, OptionalAttr<F32Attr>:$softcap,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<I64Attr>:$visible_pairs);
  let results = (outs Weft_FloatTensor:$result, F32Tensor:$lse);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`mask` $mask^)? (`alibi` $alibi_slopes^)?
    (`positions` $q_positions^ `,` $k_positions)? `scale` $scale (`softcap` $softcap^)?
    (`causal` $causal^)? (`window` $window^)? (`visible` $visible_pairs^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_AttentionGradOp : Weft_Op<"attention_grad", [WeftCost, WeftRulePartition, Pure,
    AttrSizedOperandSegments, InferTypeOpAdaptor]> {
  let summary = "The gradients of attention with respect to Q, K and V, fused.";
  let description = [{
    The vector-Jacobian product of `weft.attention` (FlashAttention's backward, Dao et
    al. 2022): given the gradient `result_grad` that reached the attention's output, the
    gradients of `q`, `k` and `v`. Per query row it recomputes the probabilities `P =
    softmax(scale · Q Kᵀ + mask)` from `q` and `k`, and with `dP = dO Vᵀ` and `D =
    rowsum(P ∘ dP)`:

    `dV = Pᵀ dO`, `dS = P ∘ (dP - D)`, `dQ = scale · dS K`, `dK = scale · dSᵀ Q`,

    with a grouped KV head's `dK` and `dV` summed over its query heads. With `softcap`
    the scores are capped before the mask, `S = softcap · tanh(scale · Q Kᵀ / softcap)`,
    and `dS` is multiplied by the cap's derivative `1 - (S / softcap)²` before it reaches
    `dQ` and `dK`; `window` is the forward's sliding window and `alibi` its slopes (a
    constant bias on the scores, which `dS` passes through). Nothing of size
    `seq × kv_seq` is kept, and under `causal` only the visible half of the pairs is
    computed. `-weft-differentiate` builds it as `weft.attention`'s gradient (attention
    whose mask takes no gradient); its cost is the cost model's attention backward.
    `dropout` is the forward's: the probabilities are dropped in backward as the
    forward drops them (a training step keeps every element, as a forward program
    does: docs/training.md), so both ops carry it or neither.

    Shapes, grouped KV heads, `mask` and `causal` are as in `weft.attention`;
    `q_positions` and `k_positions` are as in `weft.attention_block`: with them, a
    causal query sequence splits across ranks like any other dimension. A query row
    whose keys are all masked contributes nothing. The key sequence is contracted: where
    the queries are split, each rank's `dK` and `dV` are partial sums over its queries.

    With `saved %out, %lse` (the attention's output for these queries and each query
    row's log-sum-exp over *all* its keys, f32, as the forward kept them) the op is the
    backward of one block of keys: `P = exp(scale · Q Kᵀ + mask - lse)` and `D =
    rowsum(dO ∘ out)` are the whole attention's, so `dK` and `dV` are this block's and
    `dQ` is this block's part of the sum over blocks. That is the step of ring
    attention's backward (`-weft-partition` builds it for a causal or full attention
    whose sequence is split over `cp`, as it builds the forward ring).

    ```mlir
    %dq, %dk, %dv = weft.attention_grad %q, %k, %v grad %do positions %qp, %kp scale 0.125 causal
        : (tensor<1x8x64x64xf32>, tensor<1x8x64x64xf32>, tensor<1x8x64x64xf32>,
           tensor<1x8x64x64xf32>, tensor<64xi64>, tensor<64xi64>)
          -> (tensor<1x8x64x64xf32>, tensor<1x8x64x64xf32>, tensor<1x8x64x64xf32>)
    ```

    **Constraints**
    - `q`, `k`, `v`, `mask` and `alibi` are as for `weft.attention`;
    - `result_grad` has the attention output's type, `[batch, heads, seq, v_head_dim]`
      of `q`'s element type;
    - `q_positions` and `k_positions` are given together, are integer vectors, and have
      `seq` and `kv_seq` elements;
    - `out` and `lse` are given together: `out` has `result_grad`'s type and `lse` is
      `[batch, heads, seq, 1]` of f32;
    - `scale` and `softcap`, if given, are positive;
    - `window`, if given, is positive and comes with `causal`;
    - `dropout`, if given, is in `[0, 1)`;
    - `visible_pairs`, if given, comes with `causal` and positions and is in `[0, seq ·
      kv_seq]` (as for `weft.attention_block`: the pairs the cost counts);
    - the results have the types of `q`, `k` and `v`.
  }];
  let arguments = (ins Weft_FloatTensor:$q, Weft_FloatTensor:$k, Weft_FloatTensor:$v,
                       Weft_FloatTensor:$result_grad, Optional<Weft_Tensor>:$mask,
                       Optional<Weft_FloatTensor>:$alibi_slopes,
                       Optional<Weft_IntTensor>:$q_positions,
                       Optional<Weft_IntTensor>:$k_positions,
                       Optional<Weft_FloatTensor>:$out,
                       Optional<Weft_FloatTensor>:$lse, F32Attr:$scale,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$dropout,
                       OptionalAttr<F32Attr>:$softcap, OptionalAttr<I64Attr>:$window,
                       OptionalAttr<I64Attr>:$visible_pairs);
  let results = (outs Weft_FloatTensor:$q_grad, Weft_FloatTensor:$k_grad,
                      Weft_FloatTensor:$v_grad);
  let assemblyFormat = [{
    $q `,` $k `,` $v `grad` $result_grad (`mask` $mask^)? (`alibi` $alibi_slopes^)?
    (`positions` $q_positions^ `,` $k_positions)? (`saved` $out^ `,` $lse)?
    `scale` $scale (`softcap` $softcap^)? (`causal` $causal^)? (`window` $window^)?
    (`visible` $visible_pairs^)? (`dropout` $dropout^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Indexing and data movement
//===----------------------------------------------------------------------===//

def Weft_EmbeddingOp : Weft_Op<"embedding", [WeftSavesReads, WeftCost, WeftRulePartition, Pure, InferTypeOpAdaptor]> {
  let summary = "Looks up rows of an embedding table by token id.";
  let description = [{
    `result[i..., :] = table[indices[i...], :]`, with indices as in `weft.gather`. The
    op that vocabulary-parallel partitioning splits along the table's rows.

    ```mlir
    %h = weft.embedding %wte[%tokens] : (tensor<50257x768xf32>, tensor<2x128xi64>) -> tensor<2x128x768xf32>
    ```

    **Constraints**
    - `table` has rank 2;
    - the result is `indices.shape + [table.shape[1]]` with the table's element type.
  }];
  let arguments = (ins Weft_FloatTensor:$table, Weft_IntTensor:$indices);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $table `[` $indices `]` attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_GatherOp : Weft_Op<"gather", [WeftSavesReads, WeftCost, WeftRule, Pure, InferTypeOpAdaptor]> {
  let summary = "Takes slices of `input` along one dimension at the given indices (ONNX Gather).";
  let description = [{
    The result is `input.shape[:axis] + indices.shape + input.shape[axis+1:]`. Indices
    are in `[-input.shape[axis], input.shape[axis])`; a negative index counts from the
    end, as in ONNX. An index outside that range is an error when the program runs.

    ```mlir
    %r = weft.gather %x[%idx] axis 1 : (tensor<4x10x8xf32>, tensor<3xi64>) -> tensor<4x3x8xf32>
    ```

    **Constraints**
    - `axis` is a dimension of the input: `0 <= axis < rank`;
    - the result has the input's element type and the shape above.
  }];
  let arguments = (ins Weft_Tensor:$input, Weft_IntTensor:$indices,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `[` $indices `]` `axis` $axis attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_ReshapeOp : Weft_Op<"reshape", [WeftBackward, WeftCost, WeftRule, Pure, SameOperandsAndResultElementType,
    Weft_Additive]> {
  let summary = "The same elements, in row-major order, under another shape.";
  let description = [{
    ```mlir
    %heads = weft.reshape %x : tensor<2x128x768xf32> -> tensor<2x128x12x64xf32>
    ```

    **Constraints**
    - the result has the input's element type and number of elements.
  }];
  let arguments = (ins Weft_Tensor:$input);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Weft_TransposeOp : Weft_Op<"transpose", [WeftBackward, WeftCost, WeftRule, Pure, SameOperandsAndResultElementType,
    InferTypeOpAdaptor, Weft_Additive]> {
  let summary = "Permutes dimensions: result dimension i is input dimension permutation[i].";
  let description = [{
    ```mlir
    %t = weft.transpose %x permutation [0, 2, 1, 3]
        : tensor<2x128x12x64xf32> -> tensor<2x12x128x64xf32>
    ```

    **Constraints**
    - `permutation` is a permutation of `0 .. rank-1`;
    - `result.shape[i] == input.shape[permutation[i]]`, with the input's element type.
  }];
  let arguments = (ins Weft_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `permutation` $permutation attr-dict `:` type($input) `->` type($result)
  }];
  let hasFolder = 1;
}

def Weft_SliceOp : Weft_Op<"slice", [WeftBackward, WeftCost, WeftRulePartition, Pure, SameOperandsAndResultElementType,
    InferTypeOpAdaptor, Weft_Additive]> {
  let summary = "A strided box of a tensor, given by start, limit and stride per dimension.";
  let description = [{
    Dimension `d` of the result takes input indices `starts[d], starts[d] + strides[d],
    ...` below `limits[d]`: `ceil((limits[d] - starts[d]) / strides[d])` of them.
    Without `strides`, every stride is 1.

    ```mlir
    %q = weft.slice %qkv starts [0, 0, 0] limits [2, 128, 768]
        : tensor<2x128x2304xf32> -> tensor<2x128x768xf32>
    ```

    **Constraints**
    - `starts`, `limits` and `strides` (if given) have one entry per dimension;
    - `0 <= starts[d] <= limits[d] <= input.shape[d]` and `strides[d] >= 1`;
    - the result has the input's element type and the shape above.
  }];
  let arguments = (ins Weft_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$limits, OptionalAttr<DenseI64ArrayAttr>:$strides);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `starts` $starts `limits` $limits (`strides` $strides^)? attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasFolder = 1;
}

def Weft_ConcatOp : Weft_Op<"concat", [WeftBackward, WeftCost, WeftRule, Pure, SameOperandsAndResultElementType,
    InferTypeOpAdaptor]> {
  let summary = "Joins tensors along one dimension.";
  let description = [{
    ```mlir
    %kv = weft.concat %past, %k axis 2
        : (tensor<2x12x96x64xf32>, tensor<2x12x32x64xf32>) -> tensor<2x12x128x64xf32>
    ```

    **Constraints**
    - at least one input; all inputs have one rank and one element type;
    - `axis` is a dimension: `0 <= axis < rank`;
    - inputs agree on every dimension but `axis`; the result's `axis` dimension is the sum.
  }];
  let arguments = (ins Variadic<Weft_Tensor>:$inputs,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $inputs `axis` $axis attr-dict `:` functional-type($inputs, results)
  }];
  let hasFolder = 1;
}

def Weft_SplitOp : Weft_Op<"split", [WeftBackward, WeftCost, WeftRulePartition, Pure, InferTypeOpAdaptor]> {
  let summary = "Cuts a tensor along one dimension into pieces of the given sizes.";
  let description = [{
    ```mlir
    %q, %k, %v = weft.split %qkv axis 2 sizes [768, 768, 768]
        : tensor<2x128x2304xf32> -> (tensor<2x128x768xf32>, tensor<2x128x768xf32>,
                                     tensor<2x128x768xf32>)
    ```

    **Constraints**
    - `axis` is a dimension: `0 <= axis < rank`;
    - there is one result per entry of `sizes`, and at least one;
    - no size is negative (a piece may be empty, as in ONNX) and the sizes add up to the
      input's `axis` dimension;
    - result `i` is the input's shape with `sizes[i]` at `axis`, same element type.
  }];
  let arguments = (ins Weft_Tensor:$input,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Weft_Tensor>:$results);
  let assemblyFormat = [{
    $input `axis` $axis `sizes` $sizes attr-dict `:` type($input) `->` `(` type($results) `)`
  }];
}

def Weft_BroadcastToOp : Weft_Op<"broadcast_to", [WeftBackward, WeftCost, WeftRule, Pure, Weft_Elementwise, SameOperandsAndResultElementType]> {
  let summary = "Expands a tensor to a larger shape by numpy broadcasting.";
  let description = [{
    (The collective that sends one rank's tensor to all others is `weft.broadcast`.)

    ```mlir
    %b = weft.broadcast_to %bias : tensor<768xf32> -> tensor<2x128x768xf32>
    ```

    **Constraints**
    - the result's rank is at least the input's;
    - aligned at the trailing dimensions, each input dimension is 1 or equals the
      result's;
    - same element type.
  }];
  let arguments = (ins Weft_Tensor:$input);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Weft_TriluOp : Weft_Op<"trilu", [WeftBackward, WeftCost, WeftRule, Pure, SameOperandsAndResultType]> {
  let summary = "Keeps the lower (or upper) triangle of the last two dimensions; zeroes the rest.";
  let description = [{
    As ONNX `Trilu`: element `[..., i, j]` is kept when `j - i <= diagonal` (lower) or
    `j - i >= diagonal` (with `upper`), else it becomes zero (false for `i1`).

    ```mlir
    %causal = weft.trilu %ones : tensor<128x128xi1>
    %strict = weft.trilu %ones upper diagonal 1 : tensor<128x128xf32>
    ```

    **Constraints**
    - the input has rank at least 2;
    - the result has the input's type.
  }];
  let arguments = (ins Weft_Tensor:$input, UnitAttr:$upper,
                       DefaultValuedAttr<I64Attr, "0">:$diagonal);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input (`upper` $upper^)? (`diagonal` $diagonal^)? attr-dict `:` type($input)
  }];
  let hasVerifier = 1;
}

def Weft_CumSumOp : Weft_Op<"cumsum", [WeftBackward, WeftCost, WeftRule, Pure, Weft_Additive,
                                        SameOperandsAndResultType]> {
  let summary = "Running sum along one dimension.";
  let description = [{
    As ONNX `CumSum` and `torch.cumsum`: element `i` along `axis` is the sum of the
    input's elements `0..i`; with `exclusive`, of `0..i-1` (the first is 0); with
    `reverse`, of `i..n-1` (`exclusive`: `i+1..n-1`). On floats and integers: a padding
    mask's running count gives the positions of BLOOM's ALiBi and of position ids
    computed from an attention mask.

    Partitioned: `axis` is needed whole; every other dimension passes through. Its
    gradient is the running sum of the result's gradient in the other direction, with
    the same `exclusive`.

    ```mlir
    %positions = weft.cumsum %mask axis 1 : tensor<2x128xi64>
    %before = weft.cumsum %x axis 0 exclusive reverse : tensor<16x8xf32>
    ```

    **Constraints**
    - `axis` is a dimension of the input: `0 <= axis < rank`;
    - the result has the input's type.
  }];
  let arguments = (ins Weft_NumericTensor:$input,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$axis,
                       UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs Weft_NumericTensor:$result);
  let assemblyFormat = [{
    $input `axis` $axis (`exclusive` $exclusive^)? (`reverse` $reverse^)? attr-dict `:`
    type($input)
  }];
  let hasVerifier = 1;
}

def Weft_CrossEntropyOp : Weft_Op<"cross_entropy", [WeftSaves, WeftCost, WeftRulePartition, Pure, InferTypeOpAdaptor]> {
  let summary = "Softmax cross-entropy of logits against integer class labels.";
  let description = [{
    Per position, `logsumexp(logits[..., :]) - logits[..., label]`. Positions whose label
    equals `ignore_index` contribute zero and are not counted by `mean`. `reduction` is
    `none` (a loss per position), `mean` or `sum` (a scalar).

    ```mlir
    %loss = weft.cross_entropy %logits, %labels reduction mean ignore_index -100
        : (tensor<2x128x50257xf32>, tensor<2x128xi64>) -> tensor<f32>
    ```

    **Constraints**
    - `logits` has rank at least 1 and `labels` has rank `logits.rank - 1`;
    - `labels.shape == logits.shape[:-1]`;
    - the result has `logits`' element type, shape `labels.shape` for `none` and rank 0
      otherwise.
  }];
  let arguments = (ins Weft_FloatTensor:$logits, Weft_IntTensor:$labels,
                       Weft_LossReduction:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Weft_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `reduction` $reduction (`ignore_index` $ignore_index^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Repeated structure
//===----------------------------------------------------------------------===//

def Weft_LayerOp : Weft_Op<"layer", [WeftBackward, WeftCost, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "One repetition of a repeated block (a transformer layer).";
  let description = [{
    The body computes the layer from the block arguments (the operands) and yields its
    results. The body is isolated from above: its weights are `weft.parameter` ops inside
    it, so a layer can move to another pipeline stage as a unit.

    Layers with the same `kind` are one structure repeated: the same body up to the names
    and values of their parameters. The cost model costs a kind once; the pipeline
    splitter cuts only between layers. `index` is the position in the repetition.

    ```mlir
    %h1 = weft.layer "gpt2_block"(%h0) index 0 : (tensor<2x128x768xf32>) -> tensor<2x128x768xf32> {
    ^bb0(%x: tensor<2x128x768xf32>):
      %g = weft.parameter "h.0.ln_1.weight" : tensor<768xf32>
      ...
      weft.yield %out : tensor<2x128x768xf32>
    }
    ```

    **Constraints**
    - `kind` is not empty and `index` is not negative;
    - the body's arguments have the operands' types;
    - the terminator yields values of the results' types.
  }];
  let arguments = (ins StrAttr:$kind, ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
                       Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `(` $inputs `)` `index` $index attr-dict `:` functional-type($inputs, $results)
    $body
  }];
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$kind, "int64_t":$index,
                   "::mlir::ValueRange":$inputs, "::mlir::TypeRange":$resultTypes)>
  ];
}

def Weft_FusionOp : Weft_Op<"fusion", [WeftGradientsReads, WeftCost, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "Ops that run as one kernel: an elementwise chain, or a GEMM and its epilogue.";
  let description = [{
    What `-weft-fuse-elementwise` decides, for the CUDA backend: the body runs as one
    kernel that reads the operands and writes the result, and the values inside it are
    never stored. `kind` says which kernel:

    - `elementwise`: a generated kernel. Every op of the body is elementwise (it has the
      `Elementwise` trait) and computes a tensor of the result's shape; operands of other
      shapes are read through broadcast strides.
    - `epilogue`: a cuBLASLt GEMM whose epilogue applies the rest: the body is one
      `weft.linear` and a tanh `weft.gelu` of its result (`GELU_BIAS` with a bias).

    The planner costs the fusion as the kernel it is: its body's flops, its operands
    read once and its result written once. In backward it keeps what its body's ops
    keep, as the differentiated program does: a value inside the fusion that one of
    them reads in backward (a SiLU's output that a SwiGLU product reads; the GEMM's
    result, which the epilogue keeps as cuBLASLt's `GELU_AUX` does) is written out,
    not recomputed (Megatron's fused bias-GELU kernel recomputes it; Weft's
    `-weft-differentiate` does not).

    ```mlir
    %y = weft.fusion elementwise (%h, %c, %z) : (tensor<4x64xf32>, tensor<64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32> {
    ^bb0(%a: tensor<4x64xf32>, %b: tensor<64xf32>, %d: tensor<4x64xf32>):
      %0 = weft.add %a, %b : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
      %1 = weft.exp %0 : tensor<4x64xf32>
      %2 = weft.mul %1, %d : tensor<4x64xf32>
      weft.yield %2 : tensor<4x64xf32>
    }
    ```

    **Constraints**
    - the body's arguments have the operands' types, and it yields one value of the
      result's type;
    - `elementwise`: every op of the body is elementwise and its result has the fusion's
      shape;
    - `epilogue`: the body is a `weft.linear` and a tanh `weft.gelu` of its result.
  }];
  let arguments = (ins Weft_FusionKind:$kind, Variadic<AnyRankedTensor>:$inputs);
  let results = (outs AnyRankedTensor:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `(` $inputs `)` attr-dict `:` functional-type($inputs, $result) $body
  }];
  let hasVerifier = 1;
}

def Weft_WaitOp : Weft_Op<"wait", [WeftCost, AllTypesMatch<["input", "result"]>]> {
  let summary = "Where the computation waits for a collective's result.";
  let description = [{
    What `-weft-schedule-collectives` decides, for the CUDA backend: a collective runs on
    the communication stream from where it stands, overlapping the computation that
    follows, until the first op that reads its result; that op reads it through a
    `weft.wait`, where the compute stream waits for the collective's event. Until then
    the collective reads its operand, whose buffer stays alive. The result is the
    operand; on backends without streams the op does nothing.

    Not `Pure`: it marks a point in the program, which no pass may move or drop.

    ```mlir
    %g = weft.all_gather %x over @mesh ["tp"] dim 1 : tensor<2x4x32xf32> -> tensor<2x8x32xf32>
    %h = weft.layer_norm ...            // overlaps the gather
    %w = weft.wait %g : tensor<2x8x32xf32>
    ```

    **Constraints**
    - the operand is the result of a collective that communicates.
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Weft_YieldOp : Weft_Op<"yield", [WeftCost, Pure, Terminator, ReturnLike,
    ParentOneOf<["LayerOp", "FusionOp"]>]> {
  let summary = "Ends a weft.layer or weft.fusion body with its results.";
  let description = [{
    ```mlir
    weft.yield %out : tensor<2x128x768xf32>
    ```

    **Constraints**
    - the parent is a `weft.layer` or a `weft.fusion`, whose results have the yielded
      values' types.
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{
    build($_builder, $_state, ::mlir::ValueRange());
  }]>];
}

//===----------------------------------------------------------------------===//
// Mesh and collectives
//===----------------------------------------------------------------------===//

def Weft_MeshOp : Weft_Op<"mesh", [WeftCost, Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A logical grid of devices with named axes.";
  let description = [{
    Declares the devices a program runs on as an n-dimensional grid whose axes have names
    and sizes; the device count is the product of the sizes. Shardings and collectives
    refer to the mesh by symbol and to its axes by name. Axis order is major to minor:
    the last axis varies fastest over consecutive device ids, so the axes that should
    stay inside a node (tensor parallelism) go last.

    ```mlir
    weft.mesh @world(dp = 16, pp = 4, tp = 8)
    ```

    **Constraints**
    - at least one axis;
    - axis names are not empty and do not repeat;
    - every axis size is at least 1.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$shape);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The size of the named axis, or std::nullopt if the mesh has no such axis.
    std::optional<int64_t> getAxisSize(::llvm::StringRef axis);
    /// The number of devices in the mesh.
    int64_t getNumDevices();
  }];
}

// `kind` names the op's CollectiveKind.
class Weft_CollectiveOp<string mnemonic, string kind, list<Trait> traits = []>
    : Weft_Op<mnemonic, !listconcat(traits, [WeftCost, WeftBackward, Weft_CollectiveOpInterface,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  let extraClassDeclaration = [{
    ::weft::CollectiveKind getCollectiveKind() {
      return ::weft::CollectiveKind::}] # kind # [{;
    }
  }];
  code commonDescription = [{
    Collectives are not `Pure`: every rank of a group must run them in the same order,
    so no pass may drop, duplicate or reorder one on its own.

    The group is every set of ranks that differ only in their coordinates along `axes`
    of `mesh`; its size is the product of those axes' sizes, and a rank's index in the
    group is its coordinate linearized over `axes` in the order given.

    all_reduce, all_gather, reduce_scatter, all_to_all and collective_permute take an
    optional `codec` (bf16, fp8, int8) that compresses the floats each rank sends:
    bf16 rounds to nearest even; fp8 (e4m3) and int8 scale each block of 128 elements by
    its largest magnitude and send the scale as an f32. Every rank of the group
    reconstructs the same values from what was sent (an all_reduce encodes each rank's
    summand and then the sum), so replicas stay identical. `-weft-compress-collectives`
    sets codecs from a plan's policy.
  }];
  code commonConstraints = [{
    - `mesh` names a `weft.mesh` in the enclosing module;
    - `axes` is not empty, names axes of that mesh, and names none twice;
    - a `codec` other than none needs a float operand;
  }];
}

def Weft_AllReduceOp : Weft_CollectiveOp<"all_reduce", "AllReduce",
    [SameOperandsAndResultType]> {
  let summary = "Combines a tensor across the ranks of a mesh-axis group; all get the result.";
  let description = [{
    Every rank of the group ends with the elementwise `kind` (sum, max, min, avg) of the
    group's inputs.

    With `members`, the group is a sub-group of its one axis: the ranks whose
    coordinates along it are listed (a tied embedding's gradient summed over the
    pipeline ranks that hold it, as Megatron-LM's embedding group of the first and last
    stages). Only those ranks may run it.
  }] # commonDescription # [{

    ```mlir
    %y = weft.all_reduce sum %x over @world ["tp"] : tensor<2x128x768xf32>
    %g = weft.all_reduce sum %e over @world ["pp"] members [0, 3] : tensor<64x32xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - the result has the operand's type;
    - with `members`, `axes` is one axis and the members are at least two of its
      coordinates, in increasing order.
  }];
  let arguments = (ins Weft_ReductionKind:$kind, Weft_NumericTensor:$input,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       OptionalAttr<Weft_CollectiveCodec>:$codec,
                       OptionalAttr<DenseI64ArrayAttr>:$members);
  let results = (outs Weft_NumericTensor:$result);
  let assemblyFormat = [{
    $kind $input `over` $mesh $axes (`members` $members^)? (`codec` $codec^)? attr-dict
    `:` type($input)
  }];
}

def Weft_AllGatherOp : Weft_CollectiveOp<"all_gather", "AllGather",
    [SameOperandsAndResultElementType]> {
  let summary = "Concatenates the group's tensors along one dimension; all get the result.";
  let description = [{
    The result holds the inputs of group ranks 0, 1, ... in order along `dim`. With
    `zigzag`, the inverse of `weft.all_slice ... zigzag`: each rank of the first axis
    holds chunks `i` and `2n - 1 - i` of `2n`, and they go back to their places.

    With `hold N` (ZeroPP's blockwise schedule, `-weft-hold-gathered-weights`), the
    gather of a weight's stored block is held over blocks of `N` micro-batches: in a
    pipelined step, the first micro-batch of each block that runs it gathers, and the
    block's other micro-batches reuse that result without communicating. Outside a
    pipelined step it gathers every time.
  }] # commonDescription # [{

    ```mlir
    %full = weft.all_gather %x over @world ["tp"] dim 2
        : tensor<2x128x192xf32> -> tensor<2x128x768xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `dim` is a dimension of the operand;
    - the result equals the operand's shape except `result[dim] == operand[dim] *
      group size`, with the same element type;
    - with `hold`, `N` is positive and the operand is a weight's block: a
      `weft.parameter`, through `weft.all_slice` ops and float casts only (a value
      computed per micro-batch cannot be held).
  }];
  let arguments = (ins Weft_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim, UnitAttr:$zigzag,
                       OptionalAttr<Weft_CollectiveCodec>:$codec,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$hold);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` $dim (`zigzag` $zigzag^)? (`codec` $codec^)?
    (`hold` $hold^)? attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Weft_AllSliceOp : Weft_CollectiveOp<"all_slice", "AllSlice",
    [SameOperandsAndResultElementType]> {
  let summary = "Each rank keeps its own slice of a tensor that all ranks hold; "
                "no communication.";
  let description = [{
    The inverse of `all_gather`: every rank of the group holds the same `input`, and
    rank `i` of the group keeps the `i`-th of `group size` equal slices along `dim`.
    The partitioner uses it to split a replicated value (a constant, a position
    table) the way its consumer needs. No data moves, but the result depends on the
    rank, so it is ordered like the other collectives.

    With `zigzag` (load-balanced ring attention), the first axis of `axes` splits the
    dimension into `2n` chunks and its rank `i` keeps chunks `i` and `2n - 1 - i`, so
    that under a causal mask every rank has as much work; the other axes then split
    that pair contiguously.
  }] # commonDescription # [{

    ```mlir
    %mine = weft.all_slice %x over @world ["cp"] dim 1
        : tensor<2x128x768xf32> -> tensor<2x32x768xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `dim` is a dimension of the operand, divisible by the group size (by twice the
      group size with `zigzag`);
    - the result equals the operand's shape except `result[dim] == operand[dim] /
      group size`, with the same element type.
  }];
  let arguments = (ins Weft_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim, UnitAttr:$zigzag);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` $dim (`zigzag` $zigzag^)? attr-dict `:` type($input)
    `->` type($result)
  }];
}

def Weft_ReduceScatterOp : Weft_CollectiveOp<"reduce_scatter", "ReduceScatter",
    [SameOperandsAndResultElementType]> {
  let summary = "Combines the group's tensors and leaves each rank one slice along a dimension.";
  let description = [{
    Rank `i` of the group gets slice `i` (of `group size` equal slices along `dim`) of the
    elementwise `kind` of the group's inputs. What Megatron sequence parallelism does after
    a row-parallel linear, and ZeRO-2 with gradients. With `zigzag`, the slices are those of
    `weft.all_slice ... zigzag` (the load-balanced ring's layout: each rank of the first axis
    gets chunks `i` and `2n - 1 - i` of `2n`), as a gradient stored in that layout needs.
  }] # commonDescription # [{

    ```mlir
    %part = weft.reduce_scatter sum %x over @world ["tp"] dim 1
        : tensor<2x128x768xf32> -> tensor<2x32x768xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `dim` is a dimension of the operand, divisible by the group size (by twice the
      group size with `zigzag`);
    - the result equals the operand's shape except `result[dim] == operand[dim] /
      group size`, with the same element type.
  }];
  let arguments = (ins Weft_ReductionKind:$kind, Weft_NumericTensor:$input,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim, UnitAttr:$zigzag,
                       OptionalAttr<Weft_CollectiveCodec>:$codec);
  let results = (outs Weft_NumericTensor:$result);
  let assemblyFormat = [{
    $kind $input `over` $mesh $axes `dim` $dim (`zigzag` $zigzag^)? (`codec` $codec^)? attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Weft_AllToAllOp : Weft_CollectiveOp<"all_to_all", "AllToAll",
    [SameOperandsAndResultElementType]> {
  let summary = "Splits along one dimension, exchanges the pieces, concatenates along another.";
  let description = [{
    Each rank cuts its input into `group size` pieces along `split_dim`, sends piece `j`
    to group rank `j`, and concatenates what it receives, in group-rank order, along
    `concat_dim`. DeepSpeed-Ulysses uses it to turn a sequence split into a head split
    around attention and back.
  }] # commonDescription # [{

    ```mlir
    %heads = weft.all_to_all %x over @world ["sp"] split_dim 1 concat_dim 2
        : tensor<2x12x32x64xf32> -> tensor<2x3x128x64xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `split_dim` and `concat_dim` are dimensions of the operand;
    - `operand[split_dim]` is divisible by the group size;
    - the result equals the operand's shape except `result[split_dim] /= group size`
      and then `result[concat_dim] *= group size`, with the same element type.
  }];
  let arguments = (ins Weft_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$split_dim,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$concat_dim,
                       OptionalAttr<Weft_CollectiveCodec>:$codec);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `split_dim` $split_dim `concat_dim` $concat_dim
    (`codec` $codec^)? attr-dict `:` type($input) `->` type($result)
  }];
}

def Weft_CollectivePermuteOp : Weft_CollectiveOp<"collective_permute", "Permute",
    [SameOperandsAndResultType]> {
  let summary = "Ring shift: each rank sends its tensor `shift` places along the group.";
  let description = [{
    Group rank `i` sends its input to group rank `(i + shift) mod n` and receives from
    `(i - shift) mod n`. Ring attention passes K/V blocks this way.
  }] # commonDescription # [{

    ```mlir
    %next_kv = weft.collective_permute %kv over @world ["cp"] shift 1 : tensor<2x8x64x64xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `shift` is not a multiple of the group size (that would be a copy);
    - the result has the operand's type.
  }];
  let arguments = (ins Weft_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$shift, OptionalAttr<Weft_CollectiveCodec>:$codec);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `shift` $shift (`codec` $codec^)? attr-dict `:` type($input)
  }];
}

def Weft_SendOp : Weft_CollectiveOp<"send", "Send"> {
  let summary = "Sends a tensor to the rank `offset` places along the group (pipeline P2P).";
  let description = [{
    Point-to-point: group rank `i` sends to group rank `i + offset`, which must exist (no
    wrap-around). The receiving rank runs a `weft.recv` with the opposite offset and the
    same `tag`. Pipeline stages pass activations forward and gradients back this way.
  }] # commonDescription # [{

    ```mlir
    weft.send %act to @world ["pp"] offset 1 tag 3 : tensor<1x128x768xbf16>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `offset` is not zero and its magnitude is less than the group size;
    - `tag` is not negative.
  }];
  let arguments = (ins Weft_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$offset,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$tag);
  let assemblyFormat = [{
    $input `to` $mesh $axes `offset` $offset (`tag` $tag^)? attr-dict `:` type($input)
  }];
}

def Weft_RecvOp : Weft_CollectiveOp<"recv", "Recv"> {
  let summary = "Receives a tensor from the rank `offset` places along the group.";
  let description = [{
    The counterpart of `weft.send`: group rank `i` receives from group rank `i + offset`.
  }] # commonDescription # [{

    ```mlir
    %act = weft.recv from @world ["pp"] offset -1 tag 3 : tensor<1x128x768xbf16>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `offset` is not zero and its magnitude is less than the group size;
    - `tag` is not negative.
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes, I64Attr:$offset,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$tag);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    `from` $mesh $axes `offset` $offset (`tag` $tag^)? attr-dict `:` type($result)
  }];
}

def Weft_BroadcastOp : Weft_CollectiveOp<"broadcast", "Broadcast", [SameOperandsAndResultType]> {
  let summary = "Every rank of the group gets the tensor of group rank `root`.";
  let description = [{
    (Shape broadcasting is `weft.broadcast_to`.)
  }] # commonDescription # [{

    ```mlir
    %w = weft.broadcast %x over @world ["dp"] root 0 : tensor<768x768xf32>
    ```

    **Constraints**
  }] # commonConstraints # [{
    - `0 <= root < group size`;
    - the result has the operand's type.
  }];
  let arguments = (ins Weft_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$root);
  let results = (outs Weft_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `root` $root attr-dict `:` type($input)
  }];
}

#endif // WEFT_OPS_TD
