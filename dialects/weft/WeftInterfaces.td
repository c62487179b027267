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
      "::weft::ShardingRule", "getShardingRule", (ins)>
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

#endif // WEFT_INTERFACES_TD
