//===- WeftEnums.td - Enumerations of the weft dialect -----*- tablegen -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_ENUMS_TD
#define WEFT_ENUMS_TD

include "mlir/IR/EnumAttr.td"

def Weft_ReductionKind : I32EnumAttr<"ReductionKind",
    "how a collective combines the values of the ranks", [
      I32EnumAttrCase<"sum", 0>,
      I32EnumAttrCase<"max", 1>,
      I32EnumAttrCase<"min", 2>,
      I32EnumAttrCase<"avg", 3>
    ]> {
  let cppNamespace = "::weft";
}

def Weft_ComparePredicate : I32EnumAttr<"ComparePredicate",
    "the comparison that weft.compare applies", [
      I32EnumAttrCase<"eq", 0>,
      I32EnumAttrCase<"ne", 1>,
      I32EnumAttrCase<"lt", 2>,
      I32EnumAttrCase<"le", 3>,
      I32EnumAttrCase<"gt", 4>,
      I32EnumAttrCase<"ge", 5>
    ]> {
  let cppNamespace = "::weft";
}

def Weft_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "the form of GELU: exact (erf) or the tanh approximation", [
      I32EnumAttrCase<"erf", 0>,
      I32EnumAttrCase<"tanh", 1>
    ]> {
  let cppNamespace = "::weft";
}

def Weft_LossReduction : I32EnumAttr<"LossReduction",
    "how weft.cross_entropy reduces per-token losses", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"mean", 1>,
      I32EnumAttrCase<"sum", 2>
    ]> {
  let cppNamespace = "::weft";
}

def Weft_FusionKind : I32EnumAttr<"FusionKind",
    "how a weft.fusion runs: one generated elementwise kernel, or a GEMM with its epilogue", [
      I32EnumAttrCase<"elementwise", 0>,
      I32EnumAttrCase<"epilogue", 1>
    ]> {
  let cppNamespace = "::weft";
}

def Weft_CollectiveCodec : I32EnumAttr<"CollectiveCodec",
    "how a collective encodes the floats it sends: bf16, fp8 (e4m3) or int8 with one "
    "f32 scale per block of 128 elements, or the top 1% of a summed gradient by "
    "magnitude with (topk) or without (topk_noef) error feedback", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"bf16", 1>,
      I32EnumAttrCase<"fp8", 2>,
      I32EnumAttrCase<"int8", 3>,
      I32EnumAttrCase<"topk", 4>,
      I32EnumAttrCase<"topk_noef", 5>
    ]> {
  let cppNamespace = "::weft";
}

#endif // WEFT_ENUMS_TD
