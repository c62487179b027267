//===- WeftDialect.td - The weft dialect -------------------*- tablegen -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_TD
#define WEFT_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Weft_Dialect : Dialect {
  let name = "weft";
  let cppNamespace = "::weft";
  let summary = "Transformer graphs, their parallel layout and their collectives.";
  let description = [{
    The `weft` dialect is the IR that Weft's importers produce, its planner costs, and its
    partitioner rewrites. It has three parts:

    * **compute ops** on statically shaped builtin tensors (`f32`, `f64`, `f16`, `bf16`,
      `i64`, `i32`, `i1`) at the level of a transformer graph: `weft.linear`, `weft.attention`,
      `weft.layer_norm` are single ops, not decompositions;
    * a **parallel vocabulary**: a module-level `weft.mesh` with named axes, the
      `#weft.sharding` attribute (per-dimension split axes plus the axes over which a value
      is a pending partial sum), and NCCL-shaped collectives over named mesh axes;
    * **structure**: `weft.layer` marks one repetition of a repeated block so that it is
      costed once and pipeline stages split at its boundaries.

    Shapes are static: importers bind dynamic dimensions (batch, sequence) before they
    build weft ops. Axis attributes are non-negative; importers normalize ONNX's negative
    axes.

    Two op interfaces carry the facts every later component reads: the sharding rule
    (`ShardingRuleOpInterface`) and the cost (`CostOpInterface`).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The discardable attribute that carries a value's sharding: on an op, an
    /// array with one `#weft.sharding` per result (`unit` for a result whose
    /// sharding is not decided yet); on a function argument or result, one
    /// `#weft.sharding`.
    static constexpr ::llvm::StringLiteral getShardingAttrName() {
      return ::llvm::StringLiteral("weft.sharding");
    }
    /// On a partitioned function's argument or result: where the per-rank
    /// value (of local type) sits in the global tensor, a `#weft.sharding`.
    static constexpr ::llvm::StringLiteral getLocalShardingAttrName() {
      return ::llvm::StringLiteral("weft.local_sharding");
    }
    /// On a function: the mesh axes whose sequence split uses the
    /// load-balanced (zigzag) layout of ring attention, an array of names.
    static constexpr ::llvm::StringLiteral getLoadBalancedAttrName() {
      return ::llvm::StringLiteral("weft.load_balanced");
    }
    /// On a `weft.parameter`: mesh axes over which each rank stores only a
    /// shard of its (already split) weight, an array of names. The
    /// partitioner splits the weight's first dimension further over them
    /// and all-gathers it before use (AxoNN's depth axis, FSDP); the
    /// gradient of that gather is a reduce-scatter.
    static constexpr ::llvm::StringLiteral getStoredOverAttrName() {
      return ::llvm::StringLiteral("weft.stored_over");
    }
    /// On a `weft.layer`: the shardings of its body's arguments, an array
    /// with one `#weft.sharding` per input, or `unit` where not decided yet (a
    /// layer's inputs are resharded to these at its boundary).
    static constexpr ::llvm::StringLiteral getInputShardingsAttrName() {
      return ::llvm::StringLiteral("weft.input_shardings");
    }
    /// On an op made from a `weft.attention` by -weft-decompose-attention:
    /// it belongs to the attention core, which selective recomputation
    /// recomputes in backward (a unit attribute).
    // On a training step's result (-weft-differentiate): the name of the
    // parameter whose gradient it is.
    static constexpr ::llvm::StringLiteral getGradientOfAttrName() {
      return ::llvm::StringLiteral("weft.gradient_of");
    }
    static constexpr ::llvm::StringLiteral getAttentionCoreAttrName() {
      return ::llvm::StringLiteral("weft.attention_core");
    }
    /// On a `weft.attention` and its gradient `weft.attention_grad`: the mesh
    /// axes of its ring (context parallelism), an array of names.
    static constexpr ::llvm::StringLiteral getContextParallelAttrName() {
      return ::llvm::StringLiteral("weft.context_parallel");
    }
    /// With `weft.context_parallel`, a unit attribute: the context-parallel
    /// ranks all-gather K and V before one attention (Megatron's
    /// `--cp-comm-type all_gather`) instead of passing them around a ring.
    static constexpr ::llvm::StringLiteral getContextParallelGatherAttrName() {
      return ::llvm::StringLiteral("weft.context_parallel_gather");
    }
    /// On a `weft.broadcast_to` made by -weft-repeat-kv-heads, a unit
    /// attribute: it repeats KV heads for a head split, and the projections
    /// that make them stay whole on every rank (-weft-apply-plan).
    static constexpr ::llvm::StringLiteral getRepeatedKvHeadsAttrName() {
      return ::llvm::StringLiteral("weft.repeated_kv_heads");
    }
    /// From -weft-assign-buffers. On an op: the arena offset of each result's
    /// buffer, -1 for a result without one (an array of i64); on a function
    /// argument: its buffer's offset (i64).
    static constexpr ::llvm::StringLiteral getBufferOffsetsAttrName() {
      return ::llvm::StringLiteral("weft.buffer_offsets");
    }
    static constexpr ::llvm::StringLiteral getBufferOffsetAttrName() {
      return ::llvm::StringLiteral("weft.buffer_offset");
    }
    /// From -weft-assign-buffers, on the function: the arena's bytes, the
    /// number of buffers in it, and their bytes without reuse (i64 each).
    static constexpr ::llvm::StringLiteral getArenaBytesAttrName() {
      return ::llvm::StringLiteral("weft.arena_bytes");
    }
    static constexpr ::llvm::StringLiteral getBuffersAttrName() {
      return ::llvm::StringLiteral("weft.buffers");
    }
    static constexpr ::llvm::StringLiteral getUnsharedBytesAttrName() {
      return ::llvm::StringLiteral("weft.unshared_bytes");
    }
    /// From -weft-partition, on the ops a partition rule builds from one op
    /// in place of a copy of it (a vocabulary-parallel cross-entropy's
    /// max, exponent, sums and all-reduces; a vocabulary-parallel
    /// embedding's range masks; ring attention's blocks, K/V passes and
    /// merge) (unit). A training step is differentiated before it is
    /// partitioned, so the backward of such ops is the one op's: it reads
    /// that op's operands (the logits block and the labels; the ids; q, k
    /// and v), not what the ops would keep one by one. The cost model
    /// keeps for the backward what connected such ops read from outside.
    static constexpr ::llvm::StringLiteral getDecomposedAttrName() {
      return ::llvm::StringLiteral("weft.decomposed");
    }
    /// From -weft-split-stages. On the module: `{stages, chunks}` of the
    /// pipeline; on each stage's function: `{stage, rank, chunk}` (virtual
    /// stage in model order, the pipeline rank running it, its chunk there)
    /// and, once -weft-split-backward cut a training stage, its `role`:
    /// "forward", "backward" (input gradients) or "weight" (weight
    /// gradients), or "evaluation" (-weft-extract-evaluation: the forward in
    /// eval mode). -weft-schedule-pipeline adds the module's `schedule`,
    /// `micro_batches` and `steps`; -weft-extract-evaluation its
    /// `evaluation_steps` (the forward steps of `steps`, per rank, that an
    /// evaluation runs); -weft-compress-collectives its `codec`
    /// ("bf16", "fp8" or "int8", from a policy's pp axis), under which the
    /// executor sends the floats of every activation and gradient.
    static constexpr ::llvm::StringLiteral getPipelineAttrName() {
      return ::llvm::StringLiteral("weft.pipeline");
    }
    static constexpr ::llvm::StringLiteral getPipelineStageAttrName() {
      return ::llvm::StringLiteral("weft.pipeline_stage");
    }
    /// On a stage's argument: the index of the model input it is (i64), or
    /// the virtual stage it is received from (i64); on a stage's result: the
    /// index of the model output it is, or the stage it is sent to.
    static constexpr ::llvm::StringLiteral getModelInputAttrName() {
      return ::llvm::StringLiteral("weft.model_input");
    }
    static constexpr ::llvm::StringLiteral getReceivedFromAttrName() {
      return ::llvm::StringLiteral("weft.received_from");
    }
    static constexpr ::llvm::StringLiteral getModelOutputAttrName() {
      return ::llvm::StringLiteral("weft.model_output");
    }
    static constexpr ::llvm::StringLiteral getSentToAttrName() {
      return ::llvm::StringLiteral("weft.sent_to");
    }
    /// From -weft-differentiate on a split module. On a stage's argument:
    /// the gradient of the stage's result with this index (a value it sends
    /// on), received back from the next stage (i64); on a stage's result:
    /// the gradient of a received value, sent back to this virtual stage
    /// (i64).
    static constexpr ::llvm::StringLiteral getCotangentOfAttrName() {
      return ::llvm::StringLiteral("weft.cotangent_of");
    }
    static constexpr ::llvm::StringLiteral getGradientToAttrName() {
      return ::llvm::StringLiteral("weft.gradient_to");
    }
    /// From -weft-split-backward. On a stage's result: a value kept on the
    /// rank for a later step of the same micro-batch (the backward, or the
    /// weight gradient), in this slot (i64); on an argument: the slot it
    /// reads.
    static constexpr ::llvm::StringLiteral getSavedAttrName() {
      return ::llvm::StringLiteral("weft.saved");
    }
    /// From -weft-defer-gradient-reduction. On a partitioned training step:
    /// the function (a symbol in the module) that reduces the gradients the
    /// step returns as partial sums, run once per optimizer step on the sums
    /// of its micro-batches' gradients.
    static constexpr ::llvm::StringLiteral getGradientReductionAttrName() {
      return ::llvm::StringLiteral("weft.gradient_reduction");
    }
    /// From -weft-defer-gradient-reduction=every-micro-batch=true (ZeRO-2).
    /// On a training step with a weft.gradient_reduction (unit): the runner
    /// reduces after every micro-batch and sums the reduced (scattered)
    /// blocks, so that a rank holds only its block of the accumulated
    /// gradients, at the price of a reduction per micro-batch.
    static constexpr ::llvm::StringLiteral getReduceEveryMicroBatchAttrName() {
      return ::llvm::StringLiteral("weft.reduce_every_micro_batch");
    }
    /// From -weft-hold-gathered-weights (ZeroPP's blockwise schedule). On a
    /// pipeline stage's step that has weft.reduce_every_micro_batch (a
    /// positive integer N): the runner sums the partial gradients of each
    /// block of N micro-batches and reduces them once, after the block's
    /// last, as the step's gathers marked `hold N` gather once per block.
    static constexpr ::llvm::StringLiteral getMicroBatchBlockAttrName() {
      return ::llvm::StringLiteral("weft.micro_batch_block");
    }
    /// From -weft-differentiate=scale-loss=true. On a training step's
    /// argument (a unit attribute): the f32 scalar the loss's gradient is
    /// seeded with, so that every gradient comes out multiplied by it
    /// (loss scaling for f16).
    static constexpr ::llvm::StringLiteral getLossScaleAttrName() {
      return ::llvm::StringLiteral("weft.loss_scale");
    }
    /// From the ONNX importer. On a module: the initializers it made
    /// constants because their values are fixed position buffers (sinusoid
    /// tables, rotary frequencies), which torch never trains though the file
    /// stores them as it stores weights; a non-empty array of names.
    static constexpr ::llvm::StringLiteral getFixedBuffersAttrName() {
      return ::llvm::StringLiteral("weft.fixed_buffers");
    }
    /// From -weft-assign-feeds. On a module: how a training run fills each
    /// input of the model's function, in order ("tokens" first, then
    /// "ones", "zeros", "positions" or "labels" (the next tokens) for each
    /// other input, and "documents" for -weft-document-mask's document
    /// ids); the labels of -weft-append-loss and the loss scale follow them.
    static constexpr ::llvm::StringLiteral getFeedsAttrName() {
      return ::llvm::StringLiteral("weft.feeds");
    }
    /// From -weft-extract-evaluation. On a function (unit): a training
    /// step's evaluation step, the forward to its loss with the step's
    /// arguments, run on held-out data with the weights of the moment.
    static constexpr ::llvm::StringLiteral getEvaluationStepAttrName() {
      return ::llvm::StringLiteral("weft.evaluation_step");
    }
    /// From -weft-build-optimizer. On a function: the update rule it
    /// applies ("adamw" or "sgd"); it is a training run's optimizer step.
    static constexpr ::llvm::StringLiteral getOptimizerAttrName() {
      return ::llvm::StringLiteral("weft.optimizer");
    }
    /// From -weft-build-optimizer=rank-local=true on a module cut into
    /// pipeline stages. On an optimizer step (i64): the pipeline rank that
    /// runs it, on the parameters of its stages.
    static constexpr ::llvm::StringLiteral getPipelineRankAttrName() {
      return ::llvm::StringLiteral("weft.pipeline_rank");
    }
    /// On an optimizer step's argument or result: what it holds, as
    /// {role = "...", parameter = "name"}. Per parameter: "param", "grad",
    /// "exp_avg", "exp_avg_sq", "momentum_buffer"; step scalars (no
    /// parameter): "grad_divisor", "decay_factor", "step_size",
    /// "bias_correction2_sqrt", "lr", and the result "grad_norm".
    static constexpr ::llvm::StringLiteral getOptimizerSlotAttrName() {
      return ::llvm::StringLiteral("weft.optimizer_slot");
    }
  }];
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Weft_FloatType : AnyTypeOf<[F32, F64, F16, BF16], "f32, f64, f16 or bf16">;
def Weft_IntType : AnyTypeOf<[I64, I32], "i64 or i32">;

def Weft_Tensor : StaticShapeTensorOf<[F32, F64, F16, BF16, I64, I32, I1]>;
def Weft_FloatTensor : StaticShapeTensorOf<[F32, F64, F16, BF16]>;
def Weft_NumericTensor : StaticShapeTensorOf<[F32, F64, F16, BF16, I64, I32]>;
def Weft_IntTensor : StaticShapeTensorOf<[I64, I32]>;
def Weft_BoolTensor : StaticShapeTensorOf<[I1]>;

#endif // WEFT_DIALECT_TD
