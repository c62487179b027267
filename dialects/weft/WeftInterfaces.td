//===- WeftInterfaces.td - Op interfaces of weft -----------*- tablegen -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_INTERFACES_TD
#define WEFT_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Weft_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::weft";
  let description = [{
    An op's **sharding rule**, as a factor rule (the idea of OpenXLA Shardy's
    `op_sharding_rule`): the op's iteration space is a list of factors with sizes; each
    operand and result dimension is a product of factors (usually one); a factor that
    appears in operands but not in results is a reduction factor.

    `weft.matmul` on `[m, k] x [k, n] -> [m, n]` has the rule
    `([i, k], [k, j]) -> ([i, j]) {i=m, j=n, k=k} reduction={k}`. Splitting a parallel
    factor splits every dimension it names; splitting a reduction factor leaves the result
    partial over that axis. Propagation and partitioning read only this rule, so they need
    no per-op cases.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the factor rule of this op for its current operand and result types.",
      "::weft::ShardingRule", "getShardingRule", (ins)>,
    InterfaceMethod<[{
        Builds this op's part of the program every rank runs (`-weft-partition`):
        reads its operands' local values through `state` in the shardings it needs,
        creates local ops with the state's builder, and records its results' local
        values and shardings. The default is the generic partition by the factor rule
        (`partitionByFactorRule`); an op whose partitioned form is another algorithm
        (ring attention for a split key sequence, a vocabulary-parallel lookup)
        implements it.
      }],
      "::mlir::LogicalResult", "partition", (ins "::weft::PartitionState &":$state),
      [{}], [{
        return ::mlir::success(::mlir::succeeded(
            ::weft::partitionByFactorRule($_op.getOperation(), state)));
      }]>,
    InterfaceMethod<[{
        Returns true if a sum over ranks of the op's operands may be taken after the op
        instead of before it: op(x1 + x2, ...) = op(x1, ...) + op(x2, ...), in exact
        arithmetic and with no loss of precision in the op's result type. The default
        is the `Additive` trait; `weft.cast` is additive when it converts a float type to
        one at least as wide (a 16-bit gradient widened to f32 is summed in f32).
      }],
      "bool", "isAdditive", (ins), [{}], [{
        return $_op->template hasTrait<::weft::OpTrait::Additive>();
      }]>
  ];
}

def Weft_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::weft";
  let description = [{
    What an op costs: floating-point operations and the bytes it reads and writes, for
    given operand and result types. The types are parameters, not the op's own, so the
    planner can ask what the op costs on a shard (local shapes) without rewriting the IR.
    The cost model turns these counts into time with a roofline per device.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the cost of this op applied to tensors of the given types.",
      "::weft::OpCost", "estimateCost",
      (ins "::mlir::TypeRange":$operandTypes, "::mlir::TypeRange":$resultTypes)>,
    InterfaceMethod<
      "Returns the cost of this op for its own operand and result types.",
      "::weft::OpCost", "getCost", (ins), [{}], [{
        return $_op.estimateCost($_op->getOperandTypes(), $_op->getResultTypes());
      }]>
  ];
}

def Weft_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::weft";
  let description = [{
    What a training step's backward needs from an op: the values its gradient reads
    (kept from forward until backward, or recomputed), and what computing its gradients
    costs. The planner's memory model sums the saved values of the program one rank
    runs, and its time model costs backward from these, so that both follow the IR.
    Selective recomputation (Korthikanti et al. 2022) recomputes the attention core:
    `weft.attention` and `weft.attention_block`, and the ops that
    `-weft-decompose-attention` makes of them, which say so.

    Gradients themselves are IR: each op builds its vector-Jacobian product from weft
    ops (`buildGradients`), so the backward program is partitioned, costed and emitted
    like the forward one.

    The defaults: an op saves nothing, and its gradient costs one pass like its forward.
  }];
  let methods = [
    InterfaceMethod<[{
        Appends the values this op's backward reads: operands or results, or one byte per
        element of a value (`maskOnly`, a dropout mask). Parameters and constants may be
        listed; the memory model counts activations only.
      }],
      "void", "getSavedForBackward",
      (ins "::llvm::SmallVectorImpl<::weft::SavedTensor> &":$saved), [{}], [{
        (void)saved;
      }]>,
    InterfaceMethod<[{
        Returns what computing this op's gradients costs for operands and results of the
        given types: the input gradients, and the weight gradients of an op that has a
        weight operand (`weft.linear`).
      }],
      "::weft::BackwardCost", "estimateBackwardCost",
      (ins "::mlir::TypeRange":$operandTypes, "::mlir::TypeRange":$resultTypes), [{}], [{
        return ::weft::estimateStreamingBackwardCost($_op.getOperation(), operandTypes,
                                                     resultTypes);
      }]>,
    InterfaceMethod<[{
        Builds the op's vector-Jacobian product (`-weft-differentiate`): reads the
        gradients that reached its results from `state` (`state.gradient(result)`,
        null where none did), creates the ops that compute its operands' gradients
        with `state.builder()`, and adds them with `state.accumulate(operand, grad)`
        (which sums gradients that broadcast back to the operand's shape). A
        parameter adds its gradient by name (`state.accumulateParameter`). Fails, with
        a diagnostic at the op, where the op has no gradient.
      }],
      "::mlir::LogicalResult", "buildGradients", (ins "::weft::GradientState &":$state)>,
    InterfaceMethod<[{
        Appends what the gradient of operand `operand` reads: values of the forward
        program (operands or results), the gradient that reached a result, or a tensor
        the backward computes on the way (typed like a value of the op: a norm's
        normalized input, typed like its result). For a weight this is what a
        schedule's weight-gradient step (ZB-H1's W) reads, and of it what the
        input-gradient step computed is kept from B to W. The defaults follow the
        traits: an `Additive` op's gradient reads the result's gradient alone, a
        `Multilinear` one's also the other operands; any other op's reads its results'
        gradients and what it saves for backward.
      }],
      "void", "getGradientReads",
      (ins "unsigned":$operand,
           "::llvm::SmallVectorImpl<::weft::GradientRead> &":$reads), [{}], [{
        ::weft::getDefaultGradientReads($_op.getOperation(), operand, reads);
      }]>,
    InterfaceMethod<[{
        Returns true if the op belongs to the attention core that selective
        recomputation recomputes in backward instead of saving its results.
      }],
      "bool", "isAttentionCore", (ins), [{}], [{
        return $_op->hasAttr(::weft::WeftDialect::getAttentionCoreAttrName());
      }]>
  ];
}

def Weft_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::weft";
  let description = [{
    A collective over a group of ranks of a `weft.mesh`: which kind it is, the group
    (the mesh axes it spans and their size), and how many bytes each rank puts on the
    wire. The cost model times collectives from these facts, the CUDA backend schedules
    them on its communication stream, and the runtime's communicators count the same
    bytes, so a plan's predicted traffic is checked against a run.

    Bytes sent per rank follow NCCL's ring algorithms, for an operand of `S` bytes and
    a group of `n`: all_reduce `2(n-1)S/n`, all_gather `(n-1)S`, reduce_scatter and
    all_to_all `(n-1)S/n`, collective_permute and send `S`, broadcast `(n-1)S/n` on
    average, recv and all_slice nothing (all_slice keeps a local slice). Under a codec
    `S` is the encoded size: bf16 two bytes per element, fp8 and int8 one byte per
    element plus a four-byte scale per block of 128.
  }];
  let methods = [
    InterfaceMethod<"Returns which collective this is.",
      "::weft::CollectiveKind", "getCollectiveKind", (ins)>,
    InterfaceMethod<"Returns the mesh the group lives on.",
      "::mlir::FlatSymbolRefAttr", "getMeshAttr", (ins)>,
    InterfaceMethod<"Returns the mesh axes that span the group, major first.",
      "::mlir::ArrayAttr", "getAxes", (ins)>,
    InterfaceMethod<[{
        Returns the coordinates along its one axis of the ranks a collective with
        `members` joins (a sub-group of the axis: Megatron-LM's embedding group
        of the first and last pipeline stages), or nothing: every rank of the axes.
      }],
      "::llvm::ArrayRef<int64_t>", "getGroupMembers", (ins), [{}], [{
        if (auto members = $_op->template getAttrOfType<::mlir::DenseI64ArrayAttr>(
                "members"))
          return members.asArrayRef();
        return {};
      }]>,
    InterfaceMethod<[{
        Returns the number of ranks in the group (the product of the axes' sizes on
        the mesh, or the number of `members`), or 0 if the mesh or an axis cannot be
        found.
      }],
      "int64_t", "getGroupSize", (ins), [{}], [{
        return ::weft::getCollectiveGroupSize($_op.getOperation());
      }]>,
    InterfaceMethod<[{
        Returns how the collective encodes the floats it sends: its `codec`
        attribute (all_reduce, all_gather, reduce_scatter, all_to_all,
        collective_permute), or none.
      }],
      "::weft::CollectiveCodec", "getWireCodec", (ins), [{}], [{
        return ::weft::getCollectiveCodec($_op.getOperation());
      }]>,
    InterfaceMethod<[{
        Returns the bytes one rank sends for this collective in a group of
        `groupSize` ranks, counted like NCCL's ring algorithms, of the operand
        as encoded by its codec.
      }],
      "int64_t", "getBytesSent", (ins "int64_t":$groupSize), [{}], [{
        return ::weft::getCollectiveBytesSent($_op.getOperation(), groupSize);
      }]>,
    InterfaceMethod<[{
        Returns true if the collective moves data between ranks (every kind but
        all_slice, which keeps a local slice).
      }],
      "bool", "communicates", (ins), [{}], [{
        return $_op.getCollectiveKind() != ::weft::CollectiveKind::AllSlice;
      }]>
  ];
}

// An op whose every result element is computed from the operand elements at the
// same position (numpy broadcasting) or from its own coordinates, with no other
// data dependence: such ops chain into one generated kernel.
def Weft_Elementwise : NativeOpTrait<"Elementwise"> {
  let cppNamespace = "::weft::OpTrait";
}

// An op that is additive in its operands taken together: op(x1 + x2, y1 + y2, ...) =
// op(x1, y1, ...) + op(x2, y2, ...) for tensors of its operands' shapes (a sum, a
// difference, a negation, a reshape, a transpose, a slice, a sum over dimensions). If every operand is a partial sum over
// one group of ranks, so is the result: a reduction of its operands can move past it
// (-weft-defer-gradient-reduction moves data-parallel gradient sums to the end of the
// step through such ops).
def Weft_Additive : NativeOpTrait<"Additive"> {
  let cppNamespace = "::weft::OpTrait";
}

// An op that is linear in each operand while the others are held fixed:
// op(x1 + x2, y) = op(x1, y) + op(x2, y) (a product, a matrix product; not an op
// that adds a bias). If one operand is a partial sum over a group of ranks and the
// others are the same on every rank of the group, the result is a partial sum over
// it: the reduction can move past the op (-weft-defer-gradient-reduction moves a
// position embedding's gradient sum, which passes through the one-hot matrix product
// of the embedding's backward, to the end of the step).
def Weft_Multilinear : NativeOpTrait<"Multilinear"> {
  let cppNamespace = "::weft::OpTrait";
}

#endif // WEFT_INTERFACES_TD
