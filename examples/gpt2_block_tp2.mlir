// One GPT-2 small block (hidden 768, 12 heads, sequence 128) as one rank of
// Megatron-LM tensor parallelism over 2 GPUs, with data parallelism over 2
// more: each rank holds 6 heads and half of the MLP. QKV and fc1 are
// column-parallel, the attention output projection and fc2 row-parallel, so
// each half of the block ends in one all_reduce over `tp`.
//
// The exporter left a reshape pair and a `+ 0` behind; -weft-canonicalize
// removes them.
//
//   weft-opt examples/gpt2_block_tp2.mlir -weft-canonicalize -weft-print-op-facts

weft.mesh @world(dp = 2, tp = 2)

func.func @gpt2_block(
    %hidden: tensor<2x128x768xf32> {weft.sharding = #weft.sharding<@world, [[dp], [], []]>})
    -> (tensor<2x128x768xf32> {weft.sharding = #weft.sharding<@world, [[dp], [], []]>}) {
  %out = weft.layer "gpt2_block"(%hidden) index 0
      : (tensor<2x128x768xf32>) -> tensor<2x128x768xf32> {
  ^bb0(%x: tensor<2x128x768xf32>):
    // Attention: ln_1, QKV (column-parallel: 3 x 384 of 3 x 768 outputs).
    %ln1_w = weft.parameter "h.0.ln_1.weight" : tensor<768xf32>
    %ln1_b = weft.parameter "h.0.ln_1.bias" : tensor<768xf32>
    %ln1 = weft.layer_norm %x, %ln1_w, %ln1_b axis 2 epsilon 1.0e-05
        : (tensor<2x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<2x128x768xf32>
    %qkv_w = weft.parameter "h.0.attn.c_attn.weight" : tensor<768x1152xf32>
    %qkv_b = weft.parameter "h.0.attn.c_attn.bias" : tensor<1152xf32>
    %qkv = weft.linear %ln1, %qkv_w, %qkv_b
        : (tensor<2x128x768xf32>, tensor<768x1152xf32>, tensor<1152xf32>) -> tensor<2x128x1152xf32>
    %q, %k, %v = weft.split %qkv axis 2 sizes [384, 384, 384]
        : tensor<2x128x1152xf32> -> (tensor<2x128x384xf32>, tensor<2x128x384xf32>, tensor<2x128x384xf32>)
    %q4 = weft.reshape %q : tensor<2x128x384xf32> -> tensor<2x128x6x64xf32>
    %k4 = weft.reshape %k : tensor<2x128x384xf32> -> tensor<2x128x6x64xf32>
    %v4 = weft.reshape %v : tensor<2x128x384xf32> -> tensor<2x128x6x64xf32>
    %qh = weft.transpose %q4 permutation [0, 2, 1, 3] : tensor<2x128x6x64xf32> -> tensor<2x6x128x64xf32>
    %kh = weft.transpose %k4 permutation [0, 2, 1, 3] : tensor<2x128x6x64xf32> -> tensor<2x6x128x64xf32>
    %vh = weft.transpose %v4 permutation [0, 2, 1, 3] : tensor<2x128x6x64xf32> -> tensor<2x6x128x64xf32>
    %ctx = weft.attention %qh, %kh, %vh scale 0.125 causal
        : (tensor<2x6x128x64xf32>, tensor<2x6x128x64xf32>, tensor<2x6x128x64xf32>) -> tensor<2x6x128x64xf32>
    %ctx_t = weft.transpose %ctx permutation [0, 2, 1, 3] : tensor<2x6x128x64xf32> -> tensor<2x128x6x64xf32>
    %ctx_flat = weft.reshape %ctx_t : tensor<2x128x6x64xf32> -> tensor<256x384xf32>
    %ctx_3d = weft.reshape %ctx_flat : tensor<256x384xf32> -> tensor<2x128x384xf32>
    // Output projection (row-parallel): a partial sum until the all_reduce.
    %proj_w = weft.parameter "h.0.attn.c_proj.weight" : tensor<384x768xf32>
    %proj = weft.linear %ctx_3d, %proj_w : (tensor<2x128x384xf32>, tensor<384x768xf32>) -> tensor<2x128x768xf32>
    %attn = weft.all_reduce sum %proj over @world ["tp"] : tensor<2x128x768xf32>
    %proj_b = weft.parameter "h.0.attn.c_proj.bias" : tensor<768xf32>
    %attn_b = weft.add %attn, %proj_b : (tensor<2x128x768xf32>, tensor<768xf32>) -> tensor<2x128x768xf32>
    %res1 = weft.add %x, %attn_b : tensor<2x128x768xf32>

    // MLP: ln_2, fc1 (column-parallel, 1536 of 3072), GELU, fc2 (row-parallel).
    %ln2_w = weft.parameter "h.0.ln_2.weight" : tensor<768xf32>
    %ln2_b = weft.parameter "h.0.ln_2.bias" : tensor<768xf32>
    %ln2 = weft.layer_norm %res1, %ln2_w, %ln2_b axis 2 epsilon 1.0e-05
        : (tensor<2x128x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<2x128x768xf32>
    %fc1_w = weft.parameter "h.0.mlp.c_fc.weight" : tensor<768x1536xf32>
    %fc1_b = weft.parameter "h.0.mlp.c_fc.bias" : tensor<1536xf32>
    %fc1 = weft.linear %ln2, %fc1_w, %fc1_b
        : (tensor<2x128x768xf32>, tensor<768x1536xf32>, tensor<1536xf32>) -> tensor<2x128x1536xf32>
    %act = weft.gelu %fc1 approximation tanh : tensor<2x128x1536xf32>
    %fc2_w = weft.parameter "h.0.mlp.c_proj.weight" : tensor<1536x768xf32>
    %fc2 = weft.linear %act, %fc2_w : (tensor<2x128x1536xf32>, tensor<1536x768xf32>) -> tensor<2x128x768xf32>
    %mlp = weft.all_reduce sum %fc2 over @world ["tp"] : tensor<2x128x768xf32>
    %fc2_b = weft.parameter "h.0.mlp.c_proj.bias" : tensor<768xf32>
    %mlp_b = weft.add %mlp, %fc2_b : (tensor<2x128x768xf32>, tensor<768xf32>) -> tensor<2x128x768xf32>
    %zero = weft.constant dense<0.0> : tensor<768xf32>
    %mlp_z = weft.add %mlp_b, %zero : (tensor<2x128x768xf32>, tensor<768xf32>) -> tensor<2x128x768xf32>
    %res2 = weft.add %res1, %mlp_z : tensor<2x128x768xf32>
    weft.yield %res2 : tensor<2x128x768xf32>
  }
  return %out : tensor<2x128x768xf32>
}
