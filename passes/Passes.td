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
    at its current shapes; whether the op is elementwise (it chains into a generated
    kernel); what its backward saves and costs (and whether it belongs to the attention
    core that selective recomputation recomputes); what each float operand's gradient
    reads (for a weight: what a weight-gradient step, ZB-H1's W, reads); and for a
    collective its group size
    on the mesh and the bytes each rank sends. Use it to check an op's facts, or to see
    what a model is made of.

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
    - `softmax(scores) · v` into `weft.attention`, recognised by what the ops around the
      softmax compute rather than by one textual form. From the softmax inwards it peels,
      in any nesting: masks by `where(keep, s, fill)` or `where(drop, fill, s)` (torch's
      `masked_fill`) with a constant fill of -1e4 or less (-inf, finfo.min, -1e9), and
      additive biases (`s + bias`, 0/-inf, 0/-1e4, `(1 - mask) * min`); constant scales
      after the product, on q, on kᵀ or split over both (torch 2's SDPA export); and
      float casts (softmax in f32). After the softmax it accepts a cast back and dropout
      (kept as the attention's `dropout`). A constant mask that keeps the lower triangle
      becomes `causal`, whichever polarity and form wrote it; a mask computed at run time
      becomes the `mask` operand (`m == false` when it marks dropped positions). Scores
      of rank 3 (batch and heads merged, as `nn.MultiheadAttention` and bmm code write
      them) are raised on `[batch, heads, seq, head_dim]` views of their operands;
    - attention on K/V whose heads were repeated (HF's `repeat_kv`: reshape,
      broadcast_to, reshape; or `repeat_interleave`'s static export: split, repeat,
      concat) into grouped-query attention on the K/V heads themselves;
    - an attention whose float mask sums a constant causal bias with another mask
      (HF's causal + padding, maybe clamped at finfo.min) into a causal attention with
      the other mask alone.
    - a causal attention whose float mask is a constant ALiBi bias, each row of each
      head `c + m_h j` over the keys (MPT's `build_attn_bias`, `[1, h, 1, s]`), into the
      attention's `alibi` slopes `m_h` (under causal the same probabilities: `-m_h |i -
      j|` plus a constant of the row).

    With `explain=true` (`weft import --explain-raise`) every softmax left unraised gets
    a remark that names the op (and ONNX node) that stopped the attention match.

    Run `-weft-canonicalize` first so that folded constants are visible. `weft import`
    runs both unless given `--no-raise`.
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Emit a remark at each softmax that is not raised to weft.attention, "
           "naming the op that stopped the match">,
  ];
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

def WeftInlineLayers : Pass<"weft-inline-layers", "::mlir::func::FuncOp"> {
  let summary = "Replaces each weft.layer by its body: one flat function for the emitters.";
  let description = [{
    Layers are structure for the planner and for pipeline stages: they are kept through
    apply-plan, propagation and partitioning. The emitters print one flat function, so
    `weft compile` inlines them last. Each layer's body ops are cloned before it, with
    its arguments replaced by its inputs and its results by the yielded values.

    ```
    weft-opt -weft-inline-layers model.mlir
    ```
  }];
}

def WeftFuseElementwise : Pass<"weft-fuse-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Groups what the CUDA backend runs as one kernel into weft.fusion ops.";
  let description = [{
    The CUDA backend's fusion decisions, made here and visible in the IR:

    - a `weft.linear` whose only user is a tanh `weft.gelu` of the same type becomes a
      `weft.fusion epilogue`: one cuBLASLt call with the `GELU_BIAS` (or `GELU`)
      epilogue;
    - an elementwise op (with the `Elementwise` trait) whose only user is an
      elementwise op computing a tensor of the same shape is computed inside its user's
      kernel: each chain of two or more such ops becomes a `weft.fusion elementwise`
      whose operands are the values the chain reads from outside, in the order the
      kernel reads them. An elementwise op left alone is a kernel of its own.

    Ops of different blocks are never fused: a fusion stays inside its layer. Ops of
    the attention core (`weft.attention_core`, which selective recomputation
    recomputes) are fused only with each other, and their fusion carries the mark. The
    planner costs the program after this pass, so that what it costs is what the GPU
    runs.

    ```
    weft-opt -weft-fuse-elementwise model.mlir
    ```
  }];
}

def WeftScheduleCollectives : Pass<"weft-schedule-collectives", "::mlir::func::FuncOp"> {
  let summary = "Overlaps each collective with the computation that follows it, up to its first reader.";
  let description = [{
    The CUDA backend issues collectives on a communication stream. This pass decides
    where the computation waits for each one: right before the first op of its block
    that reads the result, where it inserts a `weft.wait`; every reader then reads the
    wait's result. A collective whose result is unread is waited for before the
    block's terminator. Until its wait a collective reads its operand, which
    `-weft-assign-buffers` keeps alive that long.

    Weights stored in shards (`weft.stored_over`, 3-D tensor parallelism's `gz`) are
    all-gathered before use; such a gather, with the weight and slices it reads, is
    first moved up to just before the previous gathered weight's first reader, so it
    runs while that GEMM computes (prefetch one weight ahead: at most two gathered
    weights are alive at once).

    ```
    weft-opt -weft-schedule-collectives model.mlir
    ```
  }];
}

def WeftAssignBuffers : Pass<"weft-assign-buffers", "::mlir::func::FuncOp"> {
  let summary = "Places each tensor of a flat function in one arena, reusing memory by liveness.";
  let description = [{
    The CUDA backend's memory plan: one arena per rank; each value that needs a buffer
    is placed first-fit, 256-byte aligned, among the buffers alive when it is defined.
    A value is alive from its op to the last op that reads it (the function's return
    reads to the end); a `weft.reshape` and a `weft.wait` are views of their operand,
    which they keep alive; a collective's operand stays alive until the collective's
    `weft.wait`; a weight whose only user is an `all_slice` has no buffer of its own
    (each rank reads its shard from the file into the slice's).

    Results: `weft.buffer_offsets` on each op (a byte offset per result, -1 for a
    result without a buffer), `weft.buffer_offset` on each argument, and on the
    function `weft.arena_bytes` (the arena), `weft.buffers` (how many) and
    `weft.unshared_bytes` (what the buffers would take without reuse). Needs a flat
    function (`-weft-inline-layers` first).

    ```
    weft-opt -weft-assign-buffers model.mlir
    ```
  }];
}

def WeftDecomposeAttention : Pass<"weft-decompose-attention", "::mlir::func::FuncOp"> {
  let summary = "Lowers fused attention to Megatron's unfused form: scores and probabilities in memory.";
  let description = [{
    Without a fused (flash) attention kernel, attention runs as Megatron-LM's unfused
    path: `scores = Q Kᵀ` (a batched matmul), `probs = softmax(scale · scores)` with the
    causal mask fused into the softmax (Megatron's `FusedScaleMaskSoftmax`), dropout on
    the probabilities when the attention has one, and `probs · V`. An explicit mask is
    added (float) or selected (`i1`) after scaling. Grouped KV heads are repeated to the
    query heads first (reshape, broadcast_to, reshape). Every op it creates carries
    `weft.attention_core`: selective recomputation recomputes them in backward. The
    S × S scores and probabilities are then tensors of the program, which is what the
    planner's memory model counts under `--flash-attention=false`.

    `weft.attention_grad` (attention's fused gradient) becomes Megatron's unfused
    backward: the decomposed attention of its operands, recomputed and differentiated
    (`dV = Pᵀ dO`, `dP = dO Vᵀ`, `dS = P (dP - rowsum(P dP))`, `dQ = s dS K`,
    `dK = s dSᵀ Q`, grouped heads summed back), with the `S × S` probabilities in
    memory. `weft.attention_block` (ring attention's fused steps) and an
    `attention_grad` with positions (a ring's partition of it) are left alone.

    ```
    weft-opt -weft-decompose-attention model.mlir
    ```
  }];
}

def WeftAssignFeeds : Pass<"weft-assign-feeds", "::mlir::ModuleOp"> {
  let summary = "Records how a training run fills each input of a model: token ids, masks, positions.";
  let description = [{
    A training step is fed windows of a token stream: one input of the model function
    takes the token ids, and the labels (`-weft-append-loss`) the next tokens. Models
    exported from PyTorch take more integer inputs, and each needs its own values. The
    pass names each on the module as `weft.feeds`, one entry per input:

    - `"tokens"`: the token ids, the input whose next tokens are the labels: an
      encoder-decoder's decoder input (a name holding `decoder`, or starting with `tgt`
      or `target`), else the first input;
    - `"source"`: each row's tokens just before its window, as many as the input is long:
      an encoder-decoder's encoder input (the first input, or one whose name starts with
      `src` or `source`, holds `encoder`, or is `input_ids`, when another input takes the
      token ids). The encoder reads a text and the decoder continues it: T5's prefix
      language modelling;
    - `"ones"`: an attention mask (every token attended), as long as its input;
    - `"zeros"`: token types (segment 0);
    - `"positions"`: `0 .. length-1` in every row (position ids);
    - `"labels"`: the next tokens (a model that computes its own loss).

    An input's fill follows its name (`onnx.name`, as the exporter wrote it from
    `forward`'s argument), in Hugging Face's names: a name holding `mask` is a mask, one
    holding `position` (or `pos_ids`) positions, one holding `token_type` or `segment`
    token types. `feeds` gives the fill of inputs whose names say none of these, or
    overrides one; an input the pass cannot place is an error at the function, naming it.
    `weft train` and the programs `weft compile --train` writes fill the inputs as the
    attribute says.

    ```
    weft-opt -weft-assign-feeds model.mlir
    weft-opt -weft-assign-feeds="feeds=pos=positions,seg=zeros" model.mlir
    ```
  }];
  let options = [
    ListOption<"feeds", "feeds", "std::string",
               "NAME=FILL: the input named NAME (or #INDEX) is filled with FILL "
               "(tokens, source, ones, zeros, positions or labels)">
  ];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftDocumentMask : Pass<"weft-document-mask", "::mlir::ModuleOp"> {
  let summary = "Keeps each token's attention within its document: a block-causal mask from document ids.";
  let description = [{
    Pretraining packs documents into fixed-length windows, separated by an end-of-document
    token. Without a mask, a token attends to the documents before its own in the window.
    Megatron-LM's `--reset-attention-mask`, torchtitan's `block_causal` mask and Llama 3
    keep each token's attention within its document. This pass gives the model's function
    one more input, `document_ids` (`i64`, the token ids' shape `[batch, seq]`: each
    position's document within its row, which `weft train` and the programs
    `weft compile --train` writes fill as `"documents"` in `weft.feeds`: the number of
    end-of-document tokens before it in the row, so the end token belongs to the
    document it ends), and builds once, in the function,

    ```mlir
    %rows = weft.reshape %document_ids : tensor<BxSxi64> -> tensor<Bx1xSx1xi64>
    %cols = weft.reshape %document_ids : tensor<BxSxi64> -> tensor<Bx1x1xSxi64>
    %same = weft.compare eq, %rows, %cols : (...) -> tensor<Bx1xSxSxi1>
    ```

    which becomes the mask of every `weft.attention` whose queries and keys are the token
    sequence (sequence length `S` both), combined with the attention's own: an `i1` mask
    keeps where both keep (`weft.where %same, %mask, false`), an additive one is kept where
    the documents agree and is `-inf` elsewhere. The attention's `causal` stays, so a
    causal model becomes block-causal and a bidirectional one (BERT) attends within its
    document. An attention inside a `weft.layer` gets the mask as one more operand of the
    layer (and of every layer around it).

    Runs after `-weft-assign-feeds` (the token ids' input gives `[batch, seq]`). A module
    without `weft.feeds`, a model with an encoder's source input (an encoder-decoder), or
    one without an attention over the token sequence is an error that says so.

    ```
    weft-opt -weft-assign-feeds -weft-document-mask model.mlir
    ```
  }];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftLiftModelLoss : Pass<"weft-lift-model-loss", "::mlir::ModuleOp"> {
  let summary = "Takes a model's own cross-entropy out, so that a training step computes it.";
  let description = [{
    Models are often written to compute their loss: nanoGPT's `forward(idx, targets)`
    returns `(logits, F.cross_entropy(logits.view(-1, V), targets.view(-1)))`, a Hugging
    Face `...ForCausalLM(input_ids, labels=...)` returns `(loss, logits)` with
    `logits[..., :-1, :]` scored against `labels[..., 1:]` (since transformers 4.46, every
    position's logits against `pad(labels, (0, 1), value=-100)[..., 1:]`, the same
    loss). A training step computes the loss itself (`-weft-append-loss`) from the labels
    it feeds, so this pass removes the model's: the logits the loss scores become the
    function's first result (the other results but the loss follow), and the labels
    input is erased (a shifted loss's labels may be the model's own token input, which
    stays).

    ```
    weft-opt -weft-lift-model-loss model.mlir
    ```

    The step's loss is then the model's: with the next tokens as `targets`, nanoGPT's
    exactly; Hugging Face's over every position, where the model's leaves out each row's
    last (whose next token it does not have). The loss must be one result,
    `weft.cross_entropy` with reduction `mean` (a `sum`, a weighted or a combined loss
    is refused), of logits `[..., classes]` traced through reshapes that keep the
    classes, casts and at most the shift's slice and padding, against an input of the
    logits' positions that the model reads nowhere else. Anything else is an error at the
    loss that says so. A model without a loss is left alone. Runs first in every training
    step (`weft train`, `weft compile --train`, the planner's costing).
  }];
  let options = [
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Remark what was taken out and what the step computes instead">
  ];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftAppendLoss : Pass<"weft-append-loss", "::mlir::ModuleOp"> {
  let summary = "Replaces a model's logits output by the per-token cross-entropy against labels.";
  let description = [{
    The head of a training step: the first result of the module's function (logits
    `[..., classes]`) becomes `cross_entropy(cast<f32>(logits), labels)` with reduction
    `none`, one loss per position, and the labels (`i64`, the logits' shape without the
    classes) become the function's last argument. Other results are kept. The planner
    costs a model's training step with this loss; `weft run --loss` and `weft compile
    --loss` build the same program.

    ```
    weft-opt -weft-append-loss model.mlir
    weft-opt -weft-append-loss="ignore-index=-100" model.mlir
    weft-opt -weft-append-loss="reduction=mean ignore-index=-100" model.mlir
    ```

    With `reduction=mean` the first result is the scalar training loss: the per-position
    losses summed and divided by the number of counted positions (all of them, or those
    whose label is not `ignore-index`), as `torch.nn.functional.cross_entropy` computes
    it. Both sums are ordinary reductions, so a partitioned program takes the mean over
    the tokens of every rank.
  }];
  let options = [
    Option<"ignoreIndex", "ignore-index", "int64_t",
           /*default=*/"std::numeric_limits<int64_t>::min()",
           "A label that counts no loss (PyTorch uses -100); none by default">,
    Option<"reduction", "reduction", "std::string", /*default=*/"\"none\"",
           "none: one loss per position; mean: the mean over the positions "
           "whose label is counted (a training step's scalar loss)">
  ];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftDifferentiate : Pass<"weft-differentiate", "::mlir::ModuleOp"> {
  let summary = "Builds a training step's backward: the gradient of the loss for every parameter.";
  let description = [{
    Reverse-mode differentiation of each function whose first result is a scalar float
    (the loss, as `-weft-append-loss=reduction=mean` makes it). Every op builds its own
    vector-Jacobian product from weft ops (`DifferentiableOpInterface::buildGradients`);
    the pass only sweeps the ops in reverse and adds up the gradients of each value.
    A `weft.layer` gets a backward layer of kind `<kind>.backward` that takes the layer's
    inputs and its results' gradients, recomputes the body (full recomputation) and
    yields the inputs' and the body parameters' gradients, so backward keeps the layer
    structure that pipeline stages are cut along.

    The function then returns the loss and, for every parameter the loss depends on, its
    gradient, marked `{weft.gradient_of = "name"}`; a parameter read in several places
    (tied embeddings) gets one summed gradient. Other results are dropped. The result is
    an ordinary program: `-weft-partition-with-plan` partitions it (data-parallel
    gradient reduction is the all-reduce that a replicated parameter's partial gradient
    needs), and the interpreter and emitters run it.

    ```
    weft-opt -weft-append-loss=reduction=mean -weft-differentiate model.mlir
    ```

    `recompute` chooses what a backward layer recomputes (Korthikanti et al. 2022):
    `full` recomputes the layer's forward inside the backward layer; `selective`
    recomputes only the attention core (the ops that say `isAttentionCore`) and takes
    every other value it reads from the forward layer, which yields it as an extra
    result; `none` takes every value from the forward layer. `op` is torchtitan's
    selective per-op checkpointing (`selective_ac_option = "op"`): the forward layer
    keeps the results of its fused attentions and of the 1st, 3rd, 5th, ... matrix op
    that reads a weight (the op's cost names its unit), and the backward layer
    recomputes every other op it needs from those and the layer's input. Parameters and
    constants are read again in every mode.

    An op without a gradient (a pipeline send, a fusion, a strided slice) stops the pass
    with a diagnostic at the op.

    `scale-loss` is loss scaling (Micikevicius et al. 2018), for steps that compute in
    f16 (`-weft-mixed-precision=compute=f16`): the loss's gradient starts as the step's
    new last argument `%scale: tensor<f32> {weft.loss_scale}`, so small gradients stay
    above f16's smallest normal; the optimizer step divides it out (its `grad_divisor`)
    and, with `skip-nonfinite`, skips a step whose gradients overflowed. On a pipeline
    stage the argument is also the model's last input (`weft.model_input`), which the
    pipeline's runner gives every micro-batch.

    `freeze` names parameters that are not trained (fine-tuning with frozen weights, or
    buffers an exporter left as initializers, such as rotary tables): a parameter whose
    name matches is a constant to the sweep, so it gets no gradient, and neither does
    anything only frozen parameters reach; a backward layer computes and reduces no
    gradient for such an input.
  }];
  let options = [
    Option<"recompute", "recompute", "std::string", /*default=*/"\"full\"",
           "What backward layers recompute: full, selective (the attention core), op "
           "(torchtitan's per-op policy) or none">,
    Option<"scaleLoss", "scale-loss", "bool", /*default=*/"false",
           "Seed the loss's gradient with a new last argument, an f32 scalar marked "
           "weft.loss_scale, instead of 1 (loss scaling: every gradient comes out "
           "multiplied by it)">,
    Option<"freeze", "freeze", "std::string", /*default=*/"\"\"",
           "Parameters whose names match this regular expression are not trained: "
           "they get no gradient, and what only they reach is not differentiated">
  ];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftConvertFloatType : Pass<"weft-convert-float-type", "::mlir::func::FuncOp"> {
  let summary = "Stores every f32 tensor as bf16 or f16: weights, activations, inputs and outputs.";
  let description = [{
    Inference in 16-bit floats, as the exported f32 model would run after `model.to(torch.bfloat16)`:
    every `f32` tensor type in the function (arguments, results, every op's results and the
    block arguments of nested regions) becomes `to`, and the values of constants and
    parameters are rounded to it (nearest, ties to even); a parameter in an external file
    keeps its file and says `stored = f32`, and whoever reads it rounds. Kernels keep computing in f32
    and round what they store, so a bf16 program accumulates in f32. Scalar attributes
    (scales, epsilons) are unchanged; so are integer and boolean tensors.

    Positions are computed in f32: an op that reads no argument and no parameter, only
    iotas, constants and such ops (the rotary embedding's angles, their cosines and
    sines, computed in the forward pass), keeps its f32 result, and the constants it
    reads their values; one `weft.cast` narrows the value where another op reads it.
    PyTorch computes Hugging Face's rotary tables with autocast off, and Megatron-LM
    its rotary frequencies in f32: bf16 has no exact position past 256, and an angle
    of thousands of radians rounded to it is off by tens.

    Example: `weft-opt -weft-convert-float-type=to=bf16`.
  }];
  let options = [
    Option<"to", "to", "std::string", /*default=*/"\"bf16\"",
           "The 16-bit type: bf16 or f16">,
  ];
}

def WeftMixedPrecision : Pass<"weft-mixed-precision", "::mlir::func::FuncOp"> {
  let summary = "Computes in bf16 or f16 and keeps the f32 weights: mixed-precision training.";
  let description = [{
    Training with 16-bit compute and f32 master weights (Micikevicius et al. 2018, as
    Megatron-LM's `--bf16` and PyTorch's autocast run it). Every `f32` tensor inside the
    function (op results, constants, the block arguments of nested regions) becomes
    `compute`, as `-weft-convert-float-type` does, except:

    - an `f32` `weft.parameter` keeps its type and its value, and each read of it goes
      through one `weft.cast` to `compute` next to it: the weights the optimizer updates
      stay f32, the GEMMs read a 16-bit copy;
    - the function's signature is unchanged: an `f32` argument is narrowed where the body
      starts, an `f32` result is widened where it is returned.

    Run it on a model's forward function before `-weft-append-loss` (which widens the
    16-bit logits and computes the loss in f32) and `-weft-differentiate`: the gradient of
    each cast is the cast back, so backward computes in 16 bits and every parameter's
    gradient is widened to f32 where it leaves the parameter's cast. A widening cast is
    additive (`ShardingRuleOpInterface::isAdditive`), so
    `-weft-defer-gradient-reduction` moves the data-parallel sum past it: the gradients
    are reduced and accumulated in f32, as Megatron-LM does for bf16.

    Example: `weft-opt -weft-mixed-precision=compute=bf16 -weft-append-loss -weft-differentiate`.
  }];
  let options = [
    Option<"compute", "compute", "std::string", /*default=*/"\"bf16\"",
           "The 16-bit compute type: bf16 or f16">,
  ];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftUnfuseProjections : Pass<"weft-unfuse-projections", "::mlir::func::FuncOp"> {
  let summary = "Splits a fused projection (one linear, then a split) into one linear per piece.";
  let description = [{
    GPT-2 computes Q, K and V with one linear of width 3h and splits the result.
    Splitting that linear's columns over tensor parallelism would give each rank a
    contiguous third of the columns, not a share of each of Q, K and V. This pass
    rewrites a linear whose output is only cut along its last dimension — by one
    `split`, by slices (`h[..., :d]`), or by a view to `[..., n, rest]` indexed with
    constants on `n` (`qkv.view(b, s, 3, h, d)[:, :, i]`) — into one linear per
    piece, with the weight's and bias's columns sliced into new parameters
    (`NAME.part0`, ...), so that each piece is column-parallel on its own. A weight
    stored `[out, in]` (`transpose_weight`: PyTorch's `nn.Linear(h, 3 * h)`, as
    nanoGPT, GPT-NeoX and Falcon write their fused QKV) is cut in rows instead.
    Shape-only parameters (a model imported for planning) become shape-only pieces, so
    the planner costs the program that runs. Parameters in external files become
    windows of the same bytes (a range of rows, or `columns = S of W`); a transposed
    weight that is already a column window stays fused.
    ```
    weft-opt -weft-unfuse-projections model.mlir
    ```
  }];
}

def WeftRepeatKvHeads : Pass<"weft-repeat-kv-heads", "::mlir::func::FuncOp"> {
  let summary = "Repeats KV heads that are fewer than the ways a plan splits heads.";
  let description = [{
    Grouped-query and multi-query attention (Llama 3's 8 KV heads under tp = 16,
    StarCoder's and Falcon-7B's one) can have fewer KV heads than tensor parallelism
    (times Ulysses) splits heads. This pass rewrites every `weft.attention` and
    `weft.attention_grad` whose KV heads divide `ways` (and are fewer) to read K and V
    with each head repeated `ways / kv` times: `reshape`, `broadcast_to` (marked
    `weft.repeated_kv_heads`), `reshape`. That is the same attention (a query head
    reads its group's KV head, of which the group's heads now read copies), and the
    heads' split then gives every rank a copy of its group's head. An
    `attention_grad`'s K and V gradients come back summed over the copies.
    `-weft-apply-plan` runs it with `ways = tp x ulysses` and leaves the projections
    that make K and V whole on every rank (their weight gradients, partial over the
    ranks that share a head, are all-reduced); a training step runs it before
    `-weft-differentiate`, so that the backward reads the copy a rank holds. KV heads
    that neither divide `ways` nor are divisible by it are left alone (the plan
    refuses them).
    ```
    weft-opt -weft-repeat-kv-heads=ways=4 model.mlir
    ```
  }];
  let options = [
    Option<"ways", "ways", "int64_t", /*default=*/"1",
           "The ways heads are split (tp x ulysses)">
  ];
}

def WeftSplitStages : Pass<"weft-split-stages", "::mlir::ModuleOp"> {
  let summary = "Cuts a model into pipeline stages: one function per stage, joined by the values they pass.";
  let description = [{
    The model's function (with its `weft.layer`s, from `-weft-mark-layers`) becomes
    `stages x chunks` functions, one per virtual stage `k` in model order, named
    `@<function>_stage<k>` and marked `weft.pipeline_stage = {stage = k, rank = k mod
    stages, chunk = k / stages}`; the module gets `weft.pipeline = {stages, chunks}`.
    Virtual stage `k` runs on pipeline rank `k mod stages` (Megatron's interleaved
    order: rank `r` holds chunks `r`, `r + stages`, ...). Whole layers are cut:
    - layers go to virtual stages in order, `stage-layers` per pipeline rank, or
      evenly when it is not given; a rank's layers split over its chunks as evenly as
      they go, the first rank's extra layers in its last chunks and every other rank's
      in its first (`weft::chunkLayers`, the cost model's definition too), so the first
      rank's first chunk and the last rank's last chunk may hold no layer: then the
      first holds only the embedding (what is computed from the inputs for the first
      layer alone runs there once and is sent on) and the last only what follows the
      last layer (Llama 3's layout);
    - every other op runs on the stage of its latest operand, so the embedding runs on
      stage 0 and the final norm, output layer and loss on the last;
    - parameters and what is computed from the model's inputs, constants and
      parameters alone, no activation (masks, position ids, rotary tables gathered
      from a cached buffer) are rebuilt on every stage that reads them, never sent
      (nor their gradients); a tied weight is read by name on each stage that uses it;
    - the values a stage passes on are the results marked `weft.sent_to = k + 1`, and
      the next stage's arguments marked `weft.received_from = k` in the same order,
      forwarded through stages that do not read them; arguments that are the model's
      inputs carry `weft.model_input = i`, results that are its outputs
      `weft.model_output = j`.
    Any other chunk without a layer, or layers that do not divide over the stages
    without `stage-layers`, is an error that says what to give.
    ```
    weft-opt -weft-split-stages="stages=2 chunks=2" model.mlir
    weft-opt -weft-split-stages="stages=2 stage-layers=3/1" model.mlir
    weft-opt -weft-split-stages="stages=2 chunks=2 stage-layers=1/1" model.mlir
    ```
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"1", "Pipeline ranks (pp)">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"1",
           "Model chunks per pipeline rank (v, interleaved schedules)">,
    Option<"stageLayers", "stage-layers", "std::string", /*default=*/"\"\"",
           "Layers on each pipeline rank, separated by '/' (e.g. 3/1)">
  ];
}

def WeftSchedulePipeline : Pass<"weft-schedule-pipeline", "::mlir::ModuleOp"> {
  let summary = "Writes a pipeline schedule's per-rank step lists into a module cut into stages.";
  let description = [{
    On a module cut by `-weft-split-stages`, adds to its `weft.pipeline` the schedule
    every pipeline rank runs: `schedule` (its name), `micro_batches` and `steps`, one
    list per pipeline rank of the steps it runs in order. They are the lists the cost
    model simulates (`planner::buildPipelineSchedule`, printed by `weft plan
    --print-schedule`): `F<mb>` a forward of micro-batch `mb`, `B<mb>` its backward,
    `W<mb>` its weight gradients (ZB-H1 and ZeroPP), `>a<r>:<mb>` a send of its
    activations to pipeline rank `r`, `<a<r>:<mb>` a receive from it, `>g`/`<g` the
    same for gradients, `.c` after the micro-batch the model chunk with interleaved
    stages. Forward programs get the forward steps and the activations' transfers
    only; stages differentiated by `-weft-differentiate` (training) get the whole
    list. The runtime
    (`weft run`) and the programs `weft compile` writes execute exactly these
    lists. A schedule that cannot run (the interleaved schedule with micro-batches
    not a multiple of the stages) is an error.
    ```
    weft-opt -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=4" model.mlir
    ```
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "gpipe, 1f1b, interleaved, zb-h1 or zeropp">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches per step (m)">
  ];
}

def WeftSplitBackward : Pass<"weft-split-backward", "::mlir::ModuleOp"> {
  let summary = "Cuts each differentiated pipeline stage into its forward, backward and weight-gradient steps' functions.";
  let description = [{
    On a module cut into pipeline stages whose stages `-weft-differentiate` turned into
    forward-and-backward functions (usually after partitioning, so that what is cut is
    the per-rank program with its collectives), splits each stage's function by what
    its results need:
    - the **forward** function (`role = "forward"`, the stage's name) computes what the
      stage sends on (`weft.sent_to`) and the model outputs (the loss);
    - the **backward** function (`@<stage>_backward`, `role = "backward"`) computes the
      gradients sent back to the previous stage (`weft.gradient_to`) and, unless the
      schedule has weight-gradient steps, the parameters' gradients;
    - with a schedule that has `W` steps (ZB-H1, ZeroPP), the **weight** function
      (`@<stage>_weight`, `role = "weight"`) computes the parameters' gradients
      (`weft.gradient_of`) after the backward has sent its gradients on.

    Each op goes to the first function whose results need it; a value one function makes
    and a later one reads is returned by the first and taken by the second with the same
    `weft.saved` slot. With `W` steps, a backward layer (`weft.layer "<kind>.backward"`)
    whose input gradient the backward step needs but whose weights' gradients only the
    weight step does is first cut in two layers: the first computes what the backward
    step needs and yields, besides, what the rest reads of it (the layer's output
    gradients); the second, `"<kind>.backward.weight"`, computes the weights' gradients
    from those and the kept activations. So the `B` step sends the input gradient without
    computing (or reducing over dp) the weights' gradients, which the `W` step computes,
    as ZB-H1 defines them. The first stage sends no gradient back; with `W` steps its
    backward function still computes the input gradients, down to the backward layers'
    results that an op outside them reads (the gradient reaching its first layer, which
    the embedding's gradient reads), and keeps them for its weight function, which runs
    the rest: so its `W` steps, which the schedule places as one slot each, compute the
    weight gradients only. The values kept between steps are the activations a pipeline
    rank keeps per micro-batch between its steps (with `-weft-differentiate="recompute=full"` the layer inputs
    only, since the backward recomputes the rest). Ops without operands (parameters,
    constants) are rebuilt where they are read instead of kept. An activation a step
    gathered over the mesh (`weft.all_gather`: the output layer's input under sequence
    parallelism) that a later step reads is gathered again there from the kept block,
    as Megatron's sequence-parallel linears do, not kept whole; so is a gather inside a
    backward layer that its weight part reads (under sequence parallelism a linear's
    input, and the output gradient a row-parallel linear's backward gathered over the
    sequence): the weight part takes the block and gathers it again. The functions' other
    arguments keep their `weft.model_input`, `weft.received_from` and
    `weft.cotangent_of` marks.
    ```
    weft-opt -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline -weft-split-backward model.mlir
    ```
  }];
}

def WeftExtractEvaluation : Pass<"weft-extract-evaluation", "::mlir::ModuleOp"> {
  let summary = "Adds a training step's evaluation step: the same forward, to its loss alone, as in eval mode.";
  let description = [{
    What Megatron-LM's `--eval-interval` and nanoGPT's `estimate_loss` run on held-out
    data: the loss of the model with the weights of the moment, without the backward.
    The pass clones the module's training step (its first defined function that is not
    an optimizer step or an evaluation step) as `<step>_evaluation`, marked
    `weft.evaluation_step`, which returns the step's first result (the loss) alone.
    Dropout becomes the identity (PyTorch's eval mode). Every op that the loss does not
    read, directly or through the values it reads, is erased: the backward, the
    gradients and their collectives. Every rank runs the same program, so each rank
    drops the same collectives. The arguments stay the step's (the token ids, the
    labels and the other feeds, and the loss scale), so a runner fills them as it fills
    the step's. The parameters are read as the step reads them, in the blocks that a
    rank holds, so the evaluation step runs under the plan on the rank's own blocks.

    Applies to a step that is one function, whose first result is a scalar float loss;
    it is an error otherwise. A module that already has an evaluation step is left alone.

    A step cut into pipeline stages (after `-weft-schedule-pipeline`) gets one evaluation
    function per virtual stage, `<stage>_evaluation`, marked `weft.pipeline_stage` with
    `role = "evaluation"`: the stage's forward in eval mode, which returns what it sends
    on and the model's outputs (the last stage's loss), not what it keeps for its
    backward. The module's `weft.pipeline` gets `evaluation_steps`: per pipeline rank, the
    forward steps of its schedule (`F`, and the sends and receives of activations) in the
    schedule's order, what Megatron-LM's `forward_only` pipeline runs. A prefix of the
    micro-batches is the same list without the others' steps, so a runner evaluates
    fewer micro-batches than the step trains on with the same list.

    ```mlir
    // Before: the step returns the loss and the gradients.
    func.func @main(%ids: tensor<2x8xi64>, %labels: tensor<2x8xi64>)
        -> (tensor<f32>, tensor<64x32xf32>) { ... }
    // After, added next to it:
    func.func @main_evaluation(%ids: tensor<2x8xi64>, %labels: tensor<2x8xi64>)
        -> tensor<f32> attributes {weft.evaluation_step} { ... }
    ```
  }];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftKeepAttentionStatistics : Pass<"weft-keep-attention-statistics", "::mlir::ModuleOp"> {
  let summary = "Keeps each attention's log-sum-exp for its gradient, which then recomputes no softmax statistics.";
  let description = [{
    FlashAttention-2's split of the work (Dao 2023): the forward keeps, per query row,
    the log-sum-exp of its scores, and the backward forms the probabilities as
    `exp(scale · Q Kᵀ + mask - lse)` and `D = rowsum(dO ∘ out)` from it and the
    output, instead of computing each row's softmax again (on the GPU, a second run of
    the forward inside the backward; the cost model's backward, 2.5 times the
    forward, already assumes this).

    For each `weft.attention_grad` that has no `saved` operands and no positions, the
    pass looks for the `weft.attention` of the same `q`, `k`, `v`, mask, scale,
    `causal` and dropout:
    - in the same block (a backward layer that recomputes the attention, under full or
      selective recomputation, or a function without layers): the attention becomes a
      `weft.attention_block` over all keys, whose `lse` the gradient reads with the
      attention's output;
    - in the forward `weft.layer` whose results the backward layer reads as `q`, `k`
      and `v` (no recomputation): the forward layer's attention becomes the block, the
      forward layer also yields its `lse` and its output (in the last layout that the
      reshapes and transposes which alone read it give it, `weft::layoutChain`: the
      output projection's input, which the layer keeps anyway; the backward layer
      undoes them), and the backward layer takes them. What the forward layer keeps
      grows by one f32 per query row and head.

    The backward layer's `q`, `k`, `v` and mask may be the forward layer's, kept, or
    recomputed from kept values (`op` recomputation): the same ops, of the same
    attributes, on equal operands. A gradient whose attention is not found is left as
    it is; so is a ring's, which `-weft-partition` already builds with the forward's
    statistics. A query row whose
    keys are all masked gets a zero output and no gradient (as a ring's block), where
    a plain attention would give NaN. Run it after `-weft-differentiate` (and, on a
    partitioned module, after `-weft-partition`); `weft train`, `weft compile --train`
    and the planner's training programs run it.
    ```
    weft-opt -weft-differentiate -weft-keep-attention-statistics model.mlir
    ```

    With `recompute-attention` (what `weft train` and the planner use under selective
    recomputation, Korthikanti et al.'s, which reruns the core attention in backward:
    Megatron-Core checkpoints its fused attention so), a gradient whose attention is
    not in its block gets the attention run again just before it, from the `q`, `k`,
    `v` and mask it reads, instead of taking the output and `lse` from the forward
    layer: the forward layer keeps nothing more, and the backward runs one attention
    forward more, as the cost model charges selective recomputation.
  }];
  let options = [
    Option<"recomputeAttention", "recompute-attention", "bool", /*default=*/"false",
           "Run a gradient's attention again just before it, from what it reads, where "
           "that attention is not in its block (selective recomputation), instead of "
           "keeping its output and log-sum-exp in the forward layer">
  ];
}

def WeftSplitStageSends : Pass<"weft-split-stage-sends", "::mlir::ModuleOp"> {
  let summary = "Each tensor-parallel rank sends its 1/tp block of what a pipeline stage passes on; the receiver all-gathers it.";
  let description = [{
    Megatron-LM's scatter/gather optimization of pipeline sends (Narayanan et al. 2021,
    Sec. 4.1; DeepSpeed's `pipe_partitioned` and `grad_partitioned`). Without sequence
    parallelism, the activation a stage sends on (`weft.sent_to`) and the gradient it
    sends back (`weft.gradient_to`) are whole on each of the tp ranks of the stage, so
    every tp rank would send the same tensor over the inter-node link. On a partitioned
    module cut into pipeline stages, this pass cuts each such value, where its
    `weft.local_sharding` uses no `tp` axis, to the rank's block
    (`weft.all_slice over ["tp"]`, a local copy) before it is returned, and gathers it
    back (`weft.all_gather over ["tp"]`, over NVLink) where the receiving function
    takes it (`weft.received_from`, `weft.cotangent_of`): each link then carries 1/tp
    of the bytes. The dimension cut is the first of the sequence (1), the other inner
    dimensions and then the batch (0) whose per-rank size tp divides; a value no
    dimension of which tp divides is sent whole. Both ends decide from the same type and
    sharding, so the sender's result and the receiver's argument keep one type. Modules
    without pipeline stages, or whose mesh has no `tp` axis larger than 1, are left
    unchanged; the cost model (`weft plan`) costs the smaller sends and the gathers.
    ```
    weft-opt -weft-partition-with-plan="tp=2" -weft-split-stage-sends model.mlir
    ```
  }];
}

def WeftApplyPlan : Pass<"weft-apply-plan", "::mlir::ModuleOp"> {
  let summary = "Puts a plan's shardings on a transformer's weights, inputs and activations.";
  let description = [{
    Declares `weft.mesh @mesh(dp, cp, ulysses, tp)` (with `pp` first when the module is
    split into pipeline stages by `-weft-split-stages`: then every stage's function is
    annotated, and the values stages pass on as the residual stream) and annotates,
    with `weft.sharding`:
    - the inputs and outputs: batch over `dp`, sequence over `cp` and `ulysses`;
    - each layer's residual stream: batch over `dp`, sequence over `cp`, `ulysses`, and
      `tp` with Megatron sequence parallelism (`sp`);
    - each attention: heads over `tp` then `ulysses`, queries over `cp` (ring attention);
    - Megatron tensor parallelism on the weights: the linears feeding attention and the
      MLP's up (and gate) projections column-parallel, the attention output and MLP down
      projections row-parallel;
    - the token embedding's vocabulary and the output layer's columns over `tp`.
    With `cp` > 1 the ring is load-balanced (`load-balance`, on by default): the function
    gets `weft.load_balanced = ["cp"]`, and the sequence is laid out so that rank `i`
    holds chunks `i` and `2cp - 1 - i` of `2cp`. Where every attention is a causal
    sliding window of at most an eighth of the sequence, the ranks' work is balanced over
    contiguous chunks (the most loaded does at most 1/15 more of the attention's work
    than the mean), and the ring keeps them: rank `i` holds chunk `i` of `cp`, a block
    reaches only the ranks after it, and the ring passes it over fewer steps (one where
    the window fits in a chunk). A causal attention's gradient
    (`weft.attention_grad`, in a differentiated program) then gets its queries' and keys'
    positions (`weft.iota`): its causal mask reads them, so its queries stay split with
    the ring, as the forward's do. With `cp-comm=all-gather` (Megatron's
    `--cp-comm-type all_gather`, Llama 3's context parallelism) the attention and its
    gradient also get `weft.context_parallel_gather`: the partitioner all-gathers K and V
    over `cp` before one attention of the rank's queries over every key, instead of
    passing the blocks around a ring.
    Weights and activations not named here get their shardings from
    `-weft-propagate-sharding`. Layers (`weft.layer`) stay regions: each layer's residual
    input and output are annotated at its boundary (the body's first argument gets its
    sharding in `weft.input_shardings` on the layer). A plan that does not divide a shape (heads by tp x ulysses,
    KV heads, the sequence by cp x ulysses, the batch by dp) is an error at the op.
    ```
    weft-opt -weft-apply-plan="tp=2 sp=1" model.mlir
    weft-opt -weft-apply-plan="plan-file=plans.json" model.mlir
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", /*default=*/"1", "Data-parallel degree">,
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel degree">,
    Option<"cp", "cp", "int64_t", /*default=*/"1", "Ring-attention (context) degree">,
    Option<"ulysses", "ulysses", "int64_t", /*default=*/"1", "Ulysses degree">,
    Option<"sp", "sp", "bool", /*default=*/"false", "Megatron sequence parallelism">,
    Option<"gx", "gx", "int64_t", /*default=*/"1",
           "3-D tensor parallelism: the axis splitting the contraction of the linears that read the residual stream">,
    Option<"gy", "gy", "int64_t", /*default=*/"1",
           "3-D tensor parallelism: the axis splitting their outputs (and the heads)">,
    Option<"gz", "gz", "int64_t", /*default=*/"1",
           "3-D tensor parallelism: the depth axis, splitting the batch and storing weight shards">,
    Option<"loadBalance", "load-balance", "bool", /*default=*/"true",
           "Ring attention with each rank holding two mirrored sequence chunks where causal attention needs them to balance the ranks' work (not where every attention is a causal sliding window of at most an eighth of the sequence); false: contiguous chunks">,
    Option<"cpComm", "cp-comm", "std::string", /*default=*/"\"ring\"",
           "How the cp ranks exchange keys and values: ring (passed around, overlapped) or all-gather (gathered before one attention)">,
    Option<"planFile", "plan-file", "std::string", /*default=*/"\"\"",
           "A weft plan --json file (its first plan) or a Plan in JSON">
  ];
}

def WeftCompressCollectives : Pass<"weft-compress-collectives", "::mlir::ModuleOp"> {
  let summary = "Sets the codec of each float collective from a per-mesh-axis policy.";
  let description = [{
    A plan's compression policy gives a codec per mesh axis (`dp:int8,tp:bf16`; codecs
    `bf16`, `fp8`, `int8`, and for `dp` also `topk` and `topk_noef`; axes `dp`, `tp`,
    `cp`, `ulysses`, the 3-D grid's `gx`, `gy`, `gz`, and `pp`). Top-k (the largest 1% of a summed gradient, with or without error
    feedback) goes on summing all-reduces only; the group's other collectives stay
    uncompressed. Every all_reduce,
    all_gather, reduce_scatter, all_to_all and collective_permute over float tensors gets
    the codec of its axes: the mildest of them (bf16 milder than fp8, fp8 than int8),
    and none if one of its axes has none. Collectives over integer tensors (token counts,
    indices), ops that take no codec (all_slice, send, recv) and collectives whose codec
    is already set are left alone: the partitioner pins the loss's statistics (the
    vocabulary-parallel cross-entropy's maxima, sums and target logits, and the
    token totals) to `codec none`, since they are few and decide the loss. Scalars
    (a data-parallel loss sum, a squared gradient norm: statistics that decide the step,
    where int8's block scale or top-k's index outweighs the value) and data the codec
    would not narrow (bf16 under `bf16`) stay uncompressed too; both are facts of the
    type, not of the size, so the planner's programs at sample shapes carry the same
    codecs as the program that runs. Data-parallel gradients are the all-reduces over `dp`, so
    `dp:int8` compresses them aggressively while `tp:bf16` compresses tensor-parallel
    activations and their gradients mildly. What the codec costs in accuracy is the
    user's call: `weft train` prints the loss, and `test/training/compression.py` compares it with the uncompressed run's.

    A pipeline's stages pass activations and their gradients with point-to-point sends
    that the runtime's executor runs from the module's schedule: `pp`'s codec (bf16, fp8
    or int8) goes into that schedule, `weft.pipeline = {..., codec = "int8"}`, and the
    executor sends every float under it. A module without pipeline stages ignores `pp`.
    ```
    weft-opt -weft-compress-collectives="policy=dp:int8,tp:bf16" partitioned.mlir
    ```
  }];
  let options = [
    Option<"policy", "policy", "std::string", /*default=*/"\"\"",
           "axis:codec pairs separated by ',' (dp:int8,tp:bf16)">
  ];
}

def WeftPropagateSharding : Pass<"weft-propagate-sharding", "::mlir::ModuleOp"> {
  let summary = "Gives every value a sharding, from the annotated ones, through the ops' factor rules.";
  let description = [{
    Sweeps each function forward and backward until nothing changes; a layer's input
    and its body argument, and a yielded value and the layer's result, share a
    sharding. At every op, the factor rule turns the shardings of its operands and results into mesh axes per
    factor and back into shardings of the tensors that have none yet. Priority: an
    annotation (`weft.sharding` already present) wins over a propagated sharding, and a
    sharding found earlier wins over a later one; an axis splits one factor of an op, and
    blocked factors (softmax axes, normalized or gathered dimensions) are never split.
    Two annotations that give one factor different axes are an error at the op. Where a
    weight's planned split and an annotated activation want one axis for different
    factors, the weight's decides (a backward layer's transposed linear computes in the
    weight's column split, as its forward did). A training step's gradient returned split
    as its parameter is decides the same way, and reaches back through the ops that only
    lay it out (casts, reshapes, the sum over the batch, a tied weight's sum) to the op
    that computes it: a vocabulary-parallel embedding's gradient is computed from a
    vocabulary-split one-hot and the gathered gradient, as Megatron's, not contracted
    over a sequence split and re-laid. Every
    op result and argument ends with a `weft.sharding`. An op's results (and a layer
    body's arguments) share one attribute list: where one of them is annotated, the
    others hold `unit` (not decided), which propagation fills.
  }];
}

def WeftPartition : Pass<"weft-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrites a sharded program into the program every rank runs, with collectives.";
  let description = [{
    Each op gets its operands in the sharding its factor rule and result sharding need and
    computes on per-rank shapes. Resharding inserts `weft.all_gather` (a dimension
    loses axes), `weft.all_slice` (gains axes), `weft.all_to_all` (axes move between
    dimensions; a load-balanced ring's zigzag `cp` split moves by gather and slice, as
    an all-to-all moves contiguous chunks) and, for partial sums, `weft.reduce_scatter` when a dimension gains the
    partial axes, else `weft.all_reduce`. A row-parallel linear followed by a
    sequence-split residual therefore becomes one reduce_scatter. Two lowerings are not
    generic: a token embedding with a vocabulary-split table becomes a masked local
    lookup whose result is partial, and an attention whose sequence is split over `cp`
    becomes ring attention (K/V blocks passed around with `weft.collective_permute`,
    online-softmax accumulation, causal masks from each block's positions). A
    cross-entropy over split classes (or with a mean over split positions) becomes
    Megatron's vocabulary-parallel cross-entropy: all-reduces of the maximum, the sum of
    exponents and the label's logit. The ops a vocabulary-split embedding, such a
    cross-entropy or ring attention is rewritten into are marked `weft.decomposed`: a
    training step is differentiated before it is partitioned, so their backward is the
    one op's and reads its operands (the attention's q, k and v), and the cost model
    keeps those for the backward, not what the pieces would keep one by one. Each op
    partitions itself (`ShardingRuleOpInterface::partition`). A `weft.layer` stays a
    layer: its inputs are resharded to its body arguments' shardings, its body is
    partitioned, and its yielded values are resharded to its results' shardings. The
    function's argument and result shardings stay as attributes, for the runner.
  }];
}

def WeftBuildOptimizer : Pass<"weft-build-optimizer", "::mlir::ModuleOp"> {
  let summary = "Builds a training run's optimizer step (AdamW or SGD with momentum) as a function.";
  let description = [{
    Adds `@optimizer_step`, the update a training run applies once per step, built from
    weft ops: for every parameter whose gradient a function of the module returns
    (`weft.gradient_of`; a parameter returned by several functions once, and none whose
    name matches `freeze`), it takes the parameter, its gradient summed over the step's
    micro-batches, and its optimizer state, and returns the new parameter and state.
    The gradients are divided by the number of micro-batches (`grad_divisor`), their
    global L2 norm is the function's first result, and with `max-grad-norm` > 0 every
    gradient is scaled by `min(1, max / (norm + 1e-6))`, as
    `torch.nn.utils.clip_grad_norm_` does. The update is torch.optim's single-tensor
    form in f32, operation for operation:

    - `adamw`: `p *= decay_factor; m = m + (g - m)(1 - β₁); v = v β₂ + (1 - β₂) g g;
      p -= step_size · m / (sqrt(v) / bias_correction2_sqrt + ε)`;
    - `sgd`: `d = g + λ p` (with weight decay λ); `b = μ b + d` (the buffer starts at
      zero, which makes it `d` at the first step); `p -= lr · b`.

    With `decay=matrices` the parameters of rank 1 (biases, norm weights) take no decay
    (AdamW's `p *= decay_factor` and SGD's `λ p` are left out of their updates), as the
    parameter groups of nanoGPT, Megatron-LM and Hugging Face's Trainer keep them; the
    default, `all`, is `torch.optim.AdamW(model.parameters())`'s.

    What changes from step to step comes in as scalars the runner computes on the host,
    as torch.optim does in Python: `decay_factor` = 1 − lr·λ, `step_size` =
    lr / (1 − β₁ᵗ), `bias_correction2_sqrt` = √(1 − β₂ᵗ) (AdamW), `lr` (SGD). Every
    argument and result says what it holds in `weft.optimizer_slot` (`{role,
    parameter}`); the function has `weft.optimizer = "adamw"` or `"sgd"`. On a
    partitioned module a gradient's global shape comes from its `weft.local_sharding`.

    With `rank-local` on a partitioned module, the function is the step each rank runs:
    every argument and result is the rank's block and carries its `weft.local_sharding`.
    A gradient is taken as the step's reduction function returns it (reduced, and under
    ZeRO, `-weft-defer-gradient-reduction=scatter=true`, reduce-scattered): its optimizer
    state has the gradient's layout, the parameter comes in as the rank holds it, is cut
    to the gradient's block with `weft.all_slice` over the axes the reduction scattered
    over (no communication), updated, and `weft.all_gather`ed back — ZeRO-1/2's sharded
    optimizer state and parameter all-gather, visible in IR. The norm sums each rank's
    squares per group of mesh axes its blocks are split over and all-reduces each group's
    sum over those axes, so a block held by several ranks counts once. With `stored-over`
    (ZeRO-3), a parameter comes in and goes back as `-weft-shard-parameters` stores it
    (split over those axes on its first dimension, by the same rule): it is all-gathered
    to the rank's layout and cut to the gradient's block, and the update is gathered and
    cut back; `-weft-optimize-collectives` folds a cut of a gather over the same axes, so
    where the storage is the gradient's block no collective is left.

    ```mlir
    %pb = weft.all_slice %p over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
    ... AdamW on %pb, %g, %m, %v (tensor<4x4xf32>) ...
    %p1 = weft.all_gather %pb1 over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<8x4xf32>
    ```

    With `rank-local` on a module cut into pipeline stages (`weft.pipeline`, a mesh whose
    first axis is `pp`), each pipeline rank gets its own step, `@optimizer_step_pp<r>`
    with `weft.pipeline_rank = r`, on the parameters whose gradients its stages'
    functions (and their reduction functions) return, as Megatron-LM's ranks each update
    their stages' parameters. A parameter that several pipeline ranks train (a tied
    input and output embedding on the first and last stages) has its gradient summed
    over the pipeline ranks that hold it, Megatron-LM's embedding group, by an
    all-reduce over those members of `pp` (`members [0, 3]`; over all of `pp` when
    every rank holds it) that each holder's step joins at the same place (the others
    take no part), so its copies stay identical; the squares of
    the gradient norm are summed per rank as above, the tied parameter's on its first
    holder only, and then all-reduced over `pp`. ZeRO composes: the stages' reduction
    functions reduce-scatter (ZeRO-1 and 2), and with `stored-over` (ZeRO-3) each pipeline
    rank's step takes and returns the stored blocks of its stages' weights. A weight the
    module stores in blocks (`weft.stored_over` on a `weft.parameter` of its name, which the
    partitioned weight keeps: ZeRO-3's, AxoNN's depth axis) comes and goes as that block
    with or without `stored-over`. On a module
    whose steps are load-balanced (`weft.load_balanced`), a block that `cp` leads on its
    dimension is in the ring's zigzag layout, as the runtime lays out such a split: the
    gathers and cuts of it are `zigzag` ones.

    ```mlir
    %e = weft.all_reduce sum %g_wte over @mesh ["pp"] : tensor<64x32xf32>
    ...
    %n = weft.all_reduce sum %squares over @mesh ["pp"] : tensor<f32>
    ```

    With `skip-nonfinite` (loss scaling, `-weft-differentiate=scale-loss=true`), a step
    whose gradient norm is not finite (a gradient overflowed) changes nothing: every
    parameter and state result is `weft.where(norm - norm == 0, updated, old)`, as
    `torch.cuda.amp.GradScaler` skips `optimizer.step()`; the norm it returns tells the
    runner to lower the scale (and not to count the step in AdamW's bias corrections).

    ```
    weft-opt -weft-differentiate -weft-build-optimizer model.mlir
    weft-opt -weft-build-optimizer="optimizer=sgd momentum=0.9 max-grad-norm=1.0" step.mlir
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw or sgd (with momentum)">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "AdamW's decoupled weight decay; SGD's L2 penalty">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW's first-moment decay">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW's second-moment decay">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW's epsilon">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9", "SGD's momentum">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"0",
           "clip the gradients to this global L2 norm (0: no clipping)">,
    Option<"freeze", "freeze", "std::string", /*default=*/"\"\"",
           "a regular expression: parameters whose names match are not updated">,
    Option<"decay", "decay", "std::string", /*default=*/"\"all\"",
           "which parameters weight decay shrinks: all (torch.optim over "
           "model.parameters()), or matrices, those of rank 2 or more (nanoGPT's, "
           "Megatron-LM's and Hugging Face Trainer's groups: no decay for biases and "
           "norm weights)">,
    Option<"rankLocal", "rank-local", "bool", /*default=*/"false",
           "on a partitioned module: the step each rank runs, on the blocks it holds">,
    ListOption<"storedOver", "stored-over", "std::string",
               "rank-local, ZeRO-3: the parameters come and go as -weft-shard-parameters "
               "stored them over these axes">,
    Option<"skipNonFinite", "skip-nonfinite", "bool", /*default=*/"false",
           "leave the parameters and state as they were when the gradient norm is not "
           "finite (loss scaling's overflow)">
  ];
  let dependentDialects = ["::weft::WeftDialect", "::mlir::func::FuncDialect"];
}

def WeftShardParameters : Pass<"weft-shard-parameters", "::mlir::ModuleOp"> {
  let summary = "ZeRO-3: stores every weight split over the data-parallel group, gathered where it is used.";
  let description = [{
    Puts `weft.stored_over` on every `weft.parameter` whose first dimension, as the
    rank holds it (its `weft.sharding` from `-weft-propagate-sharding`), the group
    divides: the group is the mesh axes among `axes` (default `dp`, `cp`, `ulysses`) of
    size > 1 that do not already split the weight, in mesh order. `-weft-partition` then
    keeps each rank's block and all-gathers the weight before each use: in every layer,
    and again in its backward layer, once per micro-batch, as PyTorch FSDP and DeepSpeed
    ZeRO-3 do. A weight that already has `weft.stored_over` (3-D tensor parallelism's
    `gz`), or whose rows the group does not divide, is left alone. Run between
    `-weft-propagate-sharding` and `-weft-partition` (`-weft-partition-with-plan` with
    `zero=3`); the gradients' reduction is then reduce-scattered
    (`-weft-defer-gradient-reduction=scatter=true every-micro-batch=true`) and the
    optimizer step updates the stored blocks (`-weft-build-optimizer` with
    `stored-over`).

    ```mlir
    %w = weft.parameter "h.0.mlp.c_fc.weight" {weft.sharding = [#weft.sharding<@mesh, [[], ["tp"]]>],
                                               weft.stored_over = ["dp"]} : tensor<32x128xf32>
    ```
  }];
  let options = [
    ListOption<"axes", "axes", "std::string",
               "the mesh axes a weight may be stored over (default: dp, cp, ulysses)">
  ];
  let dependentDialects = ["::weft::WeftDialect"];
}

def WeftDeferGradientReduction : Pass<"weft-defer-gradient-reduction", "::mlir::ModuleOp"> {
  let summary = "Moves a partitioned training step's gradient all-reduces into a function run once per step.";
  let description = [{
    The partitioner all-reduces a partial sum where it arises, so a data-parallel
    gradient is reduced inside the backward layer that computes it, once per micro-batch.
    For each result of a partitioned function that is a gradient (`weft.gradient_of`)
    and comes from sum all-reduces of one group through layer boundaries, additive
    ops (`Additive`: a tied embedding's two gradients summed, a transposed weight's
    gradient, a sum over the batch) and ops linear in one operand whose other operands
    are the same on every rank of the group (`Multilinear`: the one-hot matrix product
    of a position embedding's backward, whose positions come from iotas or from inputs
    not split over the group), each value on the way read only by the ops on the way
    (a value may be read twice: a rotary table's gradient is sliced in halves that are
    added back), this pass removes
    those all-reduces: the step returns the partial sum (its `weft.local_sharding` lists
    the reduction's axes as `partial`), and a new function `@<step>_reduce_gradients`
    all-reduces each such result over the same group, with the same codec. A sum
    all-reduce of a value that is itself such an all-reduce over other axes is one
    all-reduce over both (the partitioner reduces a gradient partial over dp and ulysses
    in two steps; once per step it is one all-reduce over the dp x ulysses group). The
    step names it in `weft.gradient_reduction`. A runner sums the partial gradients of a step's
    micro-batches on each rank and calls it once per optimizer step, as PyTorch DDP's
    `no_sync()` accumulation and Megatron-LM's gradient buffers do: the bytes of the
    gradient reduction no longer grow with the number of micro-batches. Other results
    are left as they are, and so is a pipeline stage's function until
    `-weft-split-backward` has cut it into its steps' functions (it has a `role`): then
    each backward or weight-gradient function gets its own reduction, which the
    pipeline executor calls after the rank's last step.

    ```mlir
    // before: the step all-reduces the gradient over dp
    %g = weft.all_reduce sum %p over @mesh ["dp"] : tensor<4x4xf32>
    return %loss, %g : tensor<f32>, tensor<4x4xf32>
    // after
    func.func @step(...) -> (tensor<f32>, tensor<4x4xf32> {weft.gradient_of = "w",
        weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["dp"]>})
        attributes {weft.gradient_reduction = @step_reduce_gradients}
    func.func @step_reduce_gradients(%g: tensor<4x4xf32> {...partial = ["dp"]>})
        -> (tensor<4x4xf32> {weft.gradient_of = "w", ...}) {
      %r = weft.all_reduce sum %g over @mesh ["dp"] : tensor<4x4xf32>
      return %r : tensor<4x4xf32>
    }
    ```

    With `scatter` (ZeRO stages 1 and 2), each gradient the reduction function takes is
    reduce-scattered instead, over the same group, along its first dimension whose local
    size the group divides: every rank of the group keeps one block of the reduced
    gradient, and the result's `weft.local_sharding` names the group on that dimension
    (minor to the axes already there). A gradient with no such dimension is all-reduced
    whole. `-weft-build-optimizer=rank-local=true` then updates each rank's block.
    With `every-micro-batch` as well (ZeRO-2), the step is marked
    `weft.reduce_every_micro_batch`: a runner calls the reduction after each micro-batch
    and sums the reduced blocks, so a rank never holds more than its block of the
    accumulated gradients, and the reduction's bytes grow with the micro-batches (as
    DeepSpeed's stage 2 does); without it (ZeRO-1, Megatron's distributed optimizer), the
    whole partial gradients accumulate and are reduce-scattered once. A pipeline stage's
    backward and weight-gradient functions are marked the same way, and the pipeline
    executor reduces after each of their steps. On a load-balanced step
    (`weft.load_balanced`), a block whose dimension the group leads with `cp` is in the
    ring's zigzag layout (as the runtime lays out such a split): its reduce-scatter is a
    `zigzag` one, on a dimension that divides by twice the group.

    Without `scatter`, the gradient of a weight the module stores in blocks beyond its
    layout (`weft.stored_over` on the weight, which the partitioned weight keeps: AxoNN's
    depth axis `gz`) is reduce-scattered over those axes onto its first dimension, into the
    stored block, and all-reduced over the rest of its group; when that leaves nothing to
    all-reduce (no dp), the step is marked `weft.reduce_every_micro_batch`, so that a rank
    accumulates its block, as AxoNN's backward reduce-scatters over the depth axis.

    ```mlir
    %r = weft.reduce_scatter sum %g over @mesh ["dp"] dim 0
        : tensor<4x4xf32> -> tensor<2x4xf32>
    ```
  }];
  let options = [
    Option<"scatter", "scatter", "bool", /*default=*/"false",
           "reduce-scatter each gradient (ZeRO 1/2): every rank keeps one block">,
    Option<"everyMicroBatch", "every-micro-batch", "bool", /*default=*/"false",
           "mark the step weft.reduce_every_micro_batch (ZeRO-2): the runner reduces "
           "after each micro-batch and keeps only the reduced blocks">
  ];
}

def WeftHoldGatheredWeights : Pass<"weft-hold-gathered-weights", "::mlir::ModuleOp"> {
  let summary = "ZeroPP's blockwise schedule: a pipeline stage gathers its stored weights once per block of micro-batches and reduces their gradients once per block.";
  let description = [{
    Under ZeRO-3 a pipeline stage's steps gather each weight's stored block before use
    (`weft.stored_over`, `-weft-shard-parameters`) and, with
    `weft.reduce_every_micro_batch`, reduce-scatter its partial gradients after every
    micro-batch. ZeroPP (Tang et al. 2024) runs the micro-batches in blocks of `block`
    (the pipeline's depth): a stage gathers its chunk's weights once for the block's
    forwards and once for its backwards, and reduce-scatters the gradients summed over
    the block once, after its last backward. The cost model counts that
    (`-weft-plan`'s ZeroPP reuse), and this pass makes the program say it:

    - every `weft.all_gather` in a pipeline stage's function (`weft.pipeline_stage`)
      whose operand is a weight's block (`weft.parameter` through `weft.all_slice`)
      gets `hold <block>`: the runner gathers it on the first micro-batch of each block
      and reuses the result for the block's others;
    - every such function with `weft.reduce_every_micro_batch` gets
      `weft.micro_batch_block = <block>`: the runner sums the partial gradients of a
      block's micro-batches and calls the reduction once, after the block's last.

    A gather that holds its result keeps the stage's gathered weights between the
    block's steps (the memory the cost model counts for ZeroPP: a chunk's weights for
    the forwards and one for the backwards), and the summed gradients of the block, a
    chunk's whole gradients, until the block's reduction.

    ```mlir
    %w = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<8x4xf32>
    %b = weft.all_slice %w over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
    %g = weft.all_gather %b over @mesh ["dp"] dim 0 hold 4
        : tensor<4x4xf32> -> tensor<8x4xf32>
    ```

    With `block` 1 nothing changes. Run after `-weft-defer-gradient-reduction`, on a
    module cut into pipeline stages.
  }];
  let options = [
    Option<"block", "block", "int64_t", /*default=*/"1",
           "micro-batches per block (ZeroPP: min(pipeline stages, micro-batches))">
  ];
}

def WeftOptimizeCollectives : Pass<"weft-optimize-collectives", "::mlir::func::FuncOp"> {
  let summary = "Removes collectives over size-1 groups, reduces a sum of partial sums once, sums before all-reducing, folds reduce-then-slice into reduce_scatter, buckets independent all-reduces.";
  let description = [{
    - a collective whose axes all have size 1 is its input;
    - an all-gather read only by casts to one narrower float type (a ZeRO-3 weight
      stored in f32 blocks, read in bf16) gathers the cast block: the same values in
      half the bytes, as FSDP's mixed precision gathers 16-bit parameters;
    - a sum of sum all-reduces (or of sum reduce-scatters) of one group, dimension and
      codec (an op that is `isAdditive`, two operands or more, each reduced only for it,
      from inputs of one type) is computed on the partial values and reduced once: the
      gradients of separate q, k and v (or gate and up) projections of one input are
      summed, then reduced, as Megatron's fused projections are;
    - a running sum that adds matching sum reductions one at a time,
      `(x + reduce(a)) + reduce(b)`, each value read once, is reassociated to
      `x + reduce(a + b)`: a post-LN layer's q, k and v input gradients, added into the
      residual gradient under Megatron SP, are reduce-scattered once;
    - an additive op of one operand whose result is smaller than its input (a
      `weft.reduce_sum`), reading a sum all-reduce read only there, is the all-reduce
      of the op (the smaller tensor is reduced); where the all-reduce's input is also
      reduce-scattered over the same group along a dimension that is a reduction
      factor of the op's sharding rule, the op reads the scattered block: under
      Megatron SP a final norm's bias gradient is summed over the sequence block, as
      Megatron's is, instead of all-reducing the whole gradient;
    - a `weft.all_slice` that nothing reads is removed (it moves no data);
    - `weft.all_slice` of a `weft.all_reduce` over the same axes becomes one
      `weft.reduce_scatter`;
    - `weft.all_slice` of a `weft.all_gather` on the same dimension and axes is the
      gather's input;
    - all-reduces of one kind, group and element type whose inputs are all ready at
      the first of them are bucketed into one (flattened, concatenated, reduced, split
      back): one launch and one latency for gradient buckets, or a loss and its count.
  }];
}

#endif // WEFT_PASSES_TD
