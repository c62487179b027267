//===- Passes.td - Weft's passes ---------------------------*- tablegen -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_PASSES_TD
#define WEFT_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftCanonicalize : Pass<"weft-canonicalize"> {
  let summary = "Folds weft ops and removes what no longer has a use.";
  let description = [{
    Applies every weft op's folds and canonical rewrites to a fixed point, and erases ops
    that are dead afterwards. It removes what exporters leave behind:

    - `weft.reshape` of a `weft.reshape` becomes one reshape; a reshape to the same type
      disappears;
    - `weft.transpose` of a `weft.transpose` composes into one (none, if the composition
      is the identity); an identity permutation disappears;
    - `x + 0`, `x - 0`, `x * 1`, `x / 1` become `x` when the constant's broadcast does not
      change `x`'s shape (`+0` is treated as an identity for `-0.0` too, as XLA does);
    - a `weft.cast`, `weft.slice`, `weft.broadcast_to` or single-input `weft.concat` to the
      operand's own type disappears.

    Collectives are never removed: they are not pure.

    ```
    weft-opt -weft-canonicalize model.mlir
    ```
  }];
  let options = [
    Option<"maxIterations", "max-iterations", "int64_t", /*default=*/"10",
           "How many times to sweep the IR before giving up on a fixed point">
  ];
}

def WeftPrintOpFacts : Pass<"weft-print-op-facts"> {
  let summary = "Reports each op's sharding rule and cost as remarks.";
  let description = [{
    Emits a remark on every op that implements the sharding-rule or cost interface, with
    what the planner and partitioner will read: the factor rule (Shardy notation, with
    factor sizes and reduction factors) and the FLOPs and bytes the op reads and writes
    at its current shapes. Use it to check an op's facts, or to see what a model is
    made of.

    ```
    weft-opt -weft-print-op-facts model.mlir
    // remark: sharding rule ([i, k], [k, j]) -> ([i, j]) {i=4, k=16, j=8} reduction={k};
    //         cost: 1024 flops, 768 bytes read, 128 bytes written
    ```
  }];
}

def WeftRaise : Pass<"weft-raise"> {
  let summary = "Raises decomposed forms that exporters write to single weft ops.";
  let description = [{
    `torch.onnx.export` writes layer norms, GELUs and attention as chains of elementwise
    ops. The planner, cost model and partitioner need them as single ops: a layer_norm's
    sharding rule and an attention's cost and sequence-parallel forms exist only for the
    op. This pass rewrites, whatever the operand order of commutative ops:

    - `x * 0.5 * (1 + erf(x / sqrt(2)))` into `weft.gelu` (erf form);
    - `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))` into `weft.gelu`
      with `approximation tanh` (GPT-2's form);
    - `x * sigmoid(x)` into `weft.silu`;
    - `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* gamma] [+ beta]` over
      trailing dimensions into `weft.layer_norm`;
    - `x * rsqrt(mean(x^2) + eps) [* w]` (also written `x / sqrt(...)` or
      `x * (1 / sqrt(...))`) into `weft.rms_norm`;
    - `matmul(x, W) [+ b]` with `W` a rank-2 parameter (and `b` a rank-1 parameter of the
      output size) into `weft.linear`;
    - `softmax(q · kᵀ / c [+ additive mask | where(mask, ., -big)]) · v` on rank-4 heads into
      `weft.attention`; a constant lower-triangular mask becomes `causal`;
    - attention on K/V whose heads were repeated (`repeat_kv`: reshape, broadcast_to,
      reshape) into grouped-query attention on the K/V heads themselves.

    Run `-weft-canonicalize` first so that folded constants are visible. `weft import`
    runs both unless given `--no-raise`.
  }];
}

def WeftMarkLayers : Pass<"weft-mark-layers", "::mlir::func::FuncOp"> {
  let summary = "Wraps each repetition of a repeated block in a weft.layer.";
  let description = [{
    Exporters name each node after the module that produced it (`/h.0/attn/MatMul`,
    `/layers.3/mlp/down_proj/MatMul`). This pass reads those names from the ops'
    locations, finds the scope repeated most often (`h`, `layers`, `encoder.layer`), and
    wraps the ops of each repetition, which appear one block after another, in a
    `weft.layer` of that kind and index. Weights used only by one repetition move into
    its body; constants it uses are copied in; every other value from outside becomes a
    layer input. The result is what the cost model (one cost per kind) and the pipeline
    splitter (cuts between layers) work on.

    The function is left unchanged when fewer than two repetitions are found or when
    their ops interleave.
  }];
  let dependentDialects = ["::weft::WeftDialect"];
}

#endif // WEFT_PASSES_TD
