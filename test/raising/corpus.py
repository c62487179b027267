#!/usr/bin/python3
"""A corpus of transformer formulations as people write them, exported to ONNX.

Run with Debian's python3-torch (/usr/bin/python3):

    /usr/bin/python3 test/raising/corpus.py OUT_DIR [NAME...]

Each formulation is a small two-layer decoder (or encoder) whose attention,
normalization or MLP is written in one of the ways that model code and
exporters produce: masks applied by torch.where in either polarity, by
masked_fill (nanoGPT, minGPT), or by adding a 0/-inf, 0/-1e4 or finfo.min bias
(causal, an HF-style `(1 - mask) * min` padding mask from an input, or both),
a sliding window, ALiBi biases (MPT's; BLOOM's, added to merged batch·heads
scores by baddbmm, with a `causal | padding` fill), T5's learned relative
position bias (in every block, or as Hugging Face's T5Stack has it: computed
by the first block and handed to the others), nn.MultiheadAttention's causal
and key padding masks;
the 1/sqrt(d) scale after the matmul, on q, split over q and k (the form
torch 2's scaled_dot_product_attention exports) or folded into the query
weight; k transposed before the matmul, by a fused permute, or by einsum;
softmax in f32 with casts around it, dropout kept in a training export; fused
QKV projections cut by split, chunk or slicing; grouped-query K/V expanded by
expand + reshape or repeat_interleave; rotary embeddings in the half-rotation
(LLaMA / NeoX) and interleaved (GPT-J) forms, and on part of each head
(GPT-NeoX's rotary_pct); nn.MultiheadAttention; layer
norms and RMS norms written out by hand (Gemma's scaled by 1 + weight, and
Qwen3's of each head's q and k); GELU (erf, tanh, sigmoid
approximation written out), SiLU, SwiGLU (with a fused gate/up projection,
Phi-3's), GeGLU (Gemma's); parallel attention and MLP blocks with one norm
(GPT-J, Falcon, with multi-query attention) or two (GPT-NeoX); Gemma 2 and 3's
sandwich of norms around attention and the MLP, with rotary tables of their
own for the local layers.

For every formulation it writes, at opsets 14 and 17, a static export and one
with dynamic batch and sequence axes (NAME/NAME-opsetN[-dynamic].onnx), the
opset-18 form of the static opset-17 export (NAME-opset18.onnx), and
NAME/test_data_set_0/ with the inputs and torch's outputs (.npy). The list of
formulations is FORMS; `--list` prints it.
"""

import math
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

HIDDEN, HEADS, LAYERS, VOCAB, MAX_SEQ = 32, 4, 2, 64, 16
HEAD_DIM = HIDDEN // HEADS
KV_HEADS = 2
BATCH, SEQ = 2, 8
WINDOW = 3  # the sliding_window mask's
# Multi-head latent attention's widths (attention="mla"): the latent, each
# head's key part of its own and the rotary part all heads share, and each
# head's value.
MLA_RANK, MLA_NOPE, MLA_ROPE, MLA_V = 16, 8, 4, 6

# Each formulation: a dict of choices for the generic block below. Defaults:
DEFAULTS = dict(
    qkv="separate",      # separate | split | chunk | slice | view5 (reshape to [b,s,3,h,d])
    keys="transpose",    # transpose | permute (one fused permute to [b,h,d,s]) | einsum |
                         # bmm (heads merged with the batch: [b*h, s, d], torch.bmm)
    scale="div",         # div | mul | q | qk_sqrt | folded | k | none (T5's: no scale)
    mask="where_keep",   # none | where_keep | where_fill | masked_fill | masked_fill_triu |
                         # add_inf | add_min | add_1e4 | padding_hf | padding_bert |
                         # causal_padding | where_eq | sliding_window | alibi (MPT:
                         # a [1, h, 1, s] linear bias by head, then a causal fill) |
                         # alibi_bloom (BLOOM: the bias from the attention mask's
                         # cumsum, [b*h, 1, s], added by baddbmm, then a causal fill) |
                         # mha_padding (attention="mha": a boolean causal mask and
                         # a key padding mask from the attention mask) |
                         # t5_relative (T5: a learned bias per head of each query's
                         # bucketed distance to each key, plus a causal one, and no
                         # 1/sqrt(d) scale) |
                         # t5_shared (Hugging Face's T5Stack: only the first block
                         # has the relative bias table; the position bias it
                         # computes, with the causal mask, is handed to every
                         # later block)
    softmax="plain",     # plain | f32 | module | dim3
    dropout=False,       # keep a Dropout node (exported in training mode, p = 0)
    kv_heads=HEADS,      # < HEADS: grouped-query attention
    repeat="expand",     # expand (HF repeat_kv) | interleave (repeat_interleave)
    rotary="none",       # none | half | interleaved | partial (GPT-NeoX's rotary_pct:
                         # the half rotation of the first half of each head)
    rotary_tables="buffer",  # buffer (cos/sin cached at init) | forward (Hugging Face
                         # since transformers 4.38: cos and sin of positions times
                         # inv_freq in the forward pass) | positions (the same, of a
                         # position_ids input, as Optimum exports decoders)
    attention="manual",  # manual | mha (nn.MultiheadAttention) | mla (DeepSeek-V2/V3's
                         # multi-head latent attention: keys and values projected
                         # up from a normalized low-rank latent, each head's key
                         # the concatenation of its own part and a rotary part
                         # shared by all heads, values narrower than keys)
    norm="layernorm",    # layernorm | ln_manual | ln_rsqrt | ln_nobias | rms | rms_div |
                         # rms_f32 | rms_mean_sq | rms_gemma (scaled by 1 + weight)
    qk_norm=False,       # RMSNorm of each head's q and k before the rotary embedding
                         # (True), or their LayerNorm ("layernorm": Persimmon,
                         # StableLM 2), or the RMSNorm of the whole q and k
                         # projections before the heads are viewed ("whole": OLMo 2)
    clip_qkv=0.0,        # > 0: q, k and v clamped to [-clip, clip] after their
                         # projections (MPT's and OLMo's clip_qkv)
                         # (Qwen3, OLMo 2)
    embed_scale=False,   # the token embedding scaled by sqrt(hidden) (Gemma)
    mlp="gelu",          # gelu | gelu_tanh | gelu_new | gelu_sigmoid | relu |
                         # relu_squared (Primer, Persimmon, Nemotron) | silu_manual |
                         # swiglu | swiglu_fused | geglu (Gemma: tanh GELU of a gate
                         # times an up projection)
    block="sequential",  # sequential (x + attn(n1 x), then + mlp(n2 x)) | parallel
                         # (GPT-J, Falcon, Phi: x + attn(n x) + mlp(n x), one norm) |
                         # parallel_two_norms (GPT-NeoX: x + attn(n1 x) + mlp(n2 x)) |
                         # sandwich (Gemma 2 and 3: a norm before and after each of
                         # attention and MLP, x + n2(attn(n1 x)), then
                         # + n4(mlp(n3 x))) | post (OLMo 2: x + n1(attn(x)), then
                         # + n2(mlp(x)), no norm before either branch)
    dynamic=True,        # also export with dynamic batch and sequence axes
    softcap=0.0,         # > 0: the scaled scores soft-capped before the mask,
                         # c * tanh(s / c) (Gemma 2, Grok-1)
    final_softcap=0.0,   # > 0: the logits soft-capped the same way (Gemma 2)
    window_layers="all", # all | even (mask="sliding_window": the window on even
                         # layers only, full causal attention on odd ones, as
                         # Gemma 2 alternates local and global layers)
    mla_q_rank=0,        # attention="mla": > 0, the query from a latent of this
                         # rank, RMS-normalized (DeepSeek-V2/V3; V2-Lite has none)
    rotary_local_base=0.0,  # > 0: the local layers' rotary tables of this base,
                         # the global ones' of 10000 (Gemma 3: 10,000 local,
                         # 1,000,000 global)
    positions="learned", # learned (an nn.Embedding of positions) | sinusoidal (the
                         # Transformer's fixed encoding, PyTorch's tutorial
                         # PositionalEncoding: a persistent [max_len, 1, hidden]
                         # buffer `pe`, sin and cos interleaved, seq-first)
    inv_freq_persistent=False,  # rotary_tables="forward": inv_freq a persistent
                         # buffer (GPT-NeoX's and Llama's before transformers
                         # 4.31), which torch.onnx.export stores as an
                         # initializer; otherwise non-persistent, a Constant
)

FORMS = {
    # Masks.
    "hf_gpt2_where": dict(mask="where_keep", mlp="gelu_new"),
    "nanogpt_masked_fill": dict(mask="masked_fill", qkv="split", scale="mul"),
    "mingpt_masked_fill_tril": dict(mask="where_eq", qkv="split"),
    "masked_fill_triu_bool": dict(mask="masked_fill_triu"),
    "where_fill_first": dict(mask="where_fill"),
    "additive_triu_inf": dict(mask="add_inf"),
    "additive_triu_finfo_min": dict(mask="add_min"),
    "additive_triu_1e4": dict(mask="add_1e4"),
    "sliding_window_mistral": dict(mask="sliding_window", norm="rms", mlp="swiglu",
                                   rotary="half", kv_heads=KV_HEADS),
    # Mistral as transformers writes it since 4.38: rotary tables computed
    # in the forward pass, and the sliding window combined with the padding
    # of an attention_mask input by AttentionMaskConverter.
    "window_padding_mistral": dict(mask="window_padding_fill", norm="rms", mlp="swiglu",
                                   rotary="half", rotary_tables="forward",
                                   kv_heads=KV_HEADS),
    # Gemma 2 as transformers' eager attention writes it: soft-capped, the
    # padding of an attention_mask input, and on even layers the window
    # filled over the model's causal and padding mask.
    "gemma2_eager_padding": dict(softcap=0.7, final_softcap=3.0, norm="rms_gemma",
                                 mlp="geglu", embed_scale=True, rotary="half",
                                 rotary_tables="forward", kv_heads=KV_HEADS,
                                 mask="gemma2_padding", window_layers="even"),
    "padding_hf_finfo_min": dict(mask="padding_hf"),
    "padding_bert_1e4": dict(mask="padding_bert", mlp="gelu"),
    "causal_plus_padding": dict(mask="causal_padding"),
    "causal_padding_mask_converter": dict(mask="causal_padding_fill", norm="rms",
                                          mlp="swiglu", rotary="half"),
    "encoder_no_mask": dict(mask="none"),
    "alibi_mpt": dict(mask="alibi", mlp="gelu", norm="ln_nobias"),
    "alibi_bloom": dict(mask="alibi_bloom", keys="bmm", mlp="gelu_tanh", softmax="f32"),
    "t5_relative_bias": dict(mask="t5_relative", scale="none", norm="rms", mlp="relu",
                             softmax="f32"),
    "t5_shared_position_bias": dict(mask="t5_shared", scale="none", norm="rms", mlp="relu",
                                    softmax="f32"),
    # Scale.
    "scale_on_q": dict(scale="q"),
    "scale_on_k": dict(scale="k"),
    "scale_split_q_k_sdpa": dict(scale="qk_sqrt", mask="add_inf"),
    "scale_folded_in_weight": dict(scale="folded"),
    "sdpa_bool_causal_bias": dict(scale="qk_sqrt", mask="sdpa_causal"),
    # Keys.
    "keys_fused_permute": dict(keys="permute"),
    "keys_einsum": dict(keys="einsum", scale="q"),
    "bmm_merged_heads": dict(keys="bmm", mask="add_inf"),
    # Softmax.
    "softmax_f32_cast": dict(softmax="f32", mask="add_min"),
    "softmax_module": dict(softmax="module"),
    "softmax_dim3": dict(softmax="dim3"),
    "dropout_training_export": dict(dropout=True),
    # Fused QKV.
    "qkv_chunk": dict(qkv="chunk"),
    "qkv_slice": dict(qkv="slice"),
    "qkv_view5": dict(qkv="view5"),
    # Grouped-query attention and rotary embeddings.
    "gqa_expand_reshape": dict(kv_heads=KV_HEADS, repeat="expand", mask="add_inf",
                               norm="rms", mlp="swiglu"),
    # torch 1.13 exports repeat_interleave with dynamic axes as a Reshape to
    # [0, -1, 0, d] of a 5-D tensor, which no runtime can run (weft refuses it
    # at the MatMul that follows): static exports only.
    "gqa_repeat_interleave": dict(kv_heads=KV_HEADS, repeat="interleave", mask="add_inf",
                                  norm="rms", mlp="swiglu", dynamic=False),
    "rotary_half_llama": dict(rotary="half", mask="add_inf", norm="rms", mlp="swiglu"),
    "rotary_interleaved_gptj": dict(rotary="interleaved", mask="where_keep"),
    "rotary_in_forward_hf": dict(rotary="half", rotary_tables="forward", kv_heads=KV_HEADS,
                                 mask="add_min", norm="rms_f32", mlp="swiglu"),
    "rotary_position_ids_input": dict(rotary="half", rotary_tables="positions",
                                      mask="add_inf", norm="rms", mlp="swiglu"),
    "rotary_inv_freq_buffer": dict(rotary="half", rotary_tables="forward",
                                   inv_freq_persistent=True, mask="add_inf", norm="rms",
                                   mlp="swiglu"),
    # The Transformer's sinusoidal position encoding, a buffer (never trained).
    "sinusoidal_positions": dict(positions="sinusoidal", mask="add_inf"),
    "llama_gqa_rotary": dict(rotary="half", kv_heads=KV_HEADS, mask="add_inf",
                             norm="rms_f32", mlp="swiglu_fused", softmax="f32"),
    # nn.MultiheadAttention.
    "torch_multihead_attention": dict(attention="mha", mask="add_inf"),
    "torch_multihead_key_padding": dict(attention="mha", mask="mha_padding"),
    # Norms.
    "layernorm_manual": dict(norm="ln_manual"),
    "layernorm_rsqrt": dict(norm="ln_rsqrt"),
    "layernorm_no_bias": dict(norm="ln_nobias"),
    "rmsnorm_div_sqrt": dict(norm="rms_div"),
    "rmsnorm_mean_of_square": dict(norm="rms_mean_sq"),
    # MLPs.
    "gelu_tanh_module": dict(mlp="gelu_tanh"),
    "gelu_sigmoid_approx": dict(mlp="gelu_sigmoid"),
    "relu_mlp": dict(mlp="relu"),
    "silu_written_out": dict(mlp="silu_manual"),
    "geglu_gemma": dict(mlp="geglu", norm="rms", mask="add_inf"),
    "swiglu_fused_phi3": dict(mlp="swiglu_fused", norm="rms", rotary="half", mask="add_inf"),
    # Block structure.
    "parallel_block_gptj": dict(block="parallel", rotary="interleaved"),
    "parallel_block_neox": dict(block="parallel_two_norms", rotary="half", mask="add_min"),
    "multi_query_falcon": dict(block="parallel", kv_heads=1, rotary="half", mask="add_inf"),
    "partial_rotary_pythia": dict(block="parallel_two_norms", rotary="partial", mask="add_min"),
    "gemma_norm_scaled_embedding": dict(norm="rms_gemma", mlp="geglu", embed_scale=True,
                                        rotary="half", mask="add_inf"),
    # Gemma 2's attention and final logit soft-capping (HF's eager attention:
    # divide, tanh, multiply, then the causal bias). Its caps are 50 and 30;
    # these bend this small model's scores and logits (|s| ~ 1) visibly.
    "softcap_gemma2": dict(softcap=0.7, final_softcap=3.0, norm="rms_gemma",
                           mlp="geglu", embed_scale=True, mask="add_min"),
    # Gemma 2's attention whole: soft-capped, and local (a sliding window)
    # on even layers, global on odd ones.
    "local_global_gemma2": dict(softcap=0.7, final_softcap=3.0, norm="rms_gemma",
                                mlp="geglu", embed_scale=True, mask="sliding_window",
                                window_layers="even"),
    "qk_norm_qwen3": dict(qk_norm=True, norm="rms", mlp="swiglu", rotary="half",
                          kv_heads=KV_HEADS, mask="add_inf"),
    # Gemma 3's block: norms before and after attention and the MLP, RMS
    # norms of each head's q and k, grouped KV heads, local (windowed) and
    # global layers whose rotary tables have different bases.
    # Persimmon's block: LayerNorms of each head's q and k, squared ReLU,
    # partial rotary embedding; Nemotron's squared ReLU; MPT's and OLMo's
    # clamped q, k and v (the clip bends this small model's projections).
    "qk_layernorm_persimmon": dict(qk_norm="layernorm", norm="layernorm", mlp="relu_squared",
                                   rotary="partial", mask="add_inf"),
    "squared_relu_nemotron": dict(mlp="relu_squared", norm="ln_nobias", rotary="half",
                                  kv_heads=KV_HEADS, mask="add_inf"),
    "clip_qkv_olmo": dict(clip_qkv=0.3, norm="ln_nobias", mlp="swiglu", rotary="half",
                          mask="add_inf"),
    # DeepSeek-V2/V3's multi-head latent attention.
    "latent_attention_deepseek": dict(attention="mla", norm="rms", mlp="swiglu",
                                      rotary="half", mask="add_inf"),
    "latent_query_deepseek_v3": dict(attention="mla", mla_q_rank=24, norm="rms",
                                     mlp="swiglu", rotary="half", mask="add_inf"),
    # OLMo 2's block: a norm after each branch only, and q and k RMS-normed
    # over the whole projection (every head's features at once).
    "post_norm_olmo2": dict(block="post", qk_norm="whole", norm="rms", mlp="swiglu",
                            rotary="half", kv_heads=KV_HEADS, mask="add_inf"),
    "sandwich_gemma3": dict(block="sandwich", qk_norm=True, norm="rms_gemma",
                            mlp="geglu", embed_scale=True, rotary="half",
                            kv_heads=KV_HEADS, mask="sliding_window",
                            window_layers="even", rotary_local_base=100.0),
}


class Norm(nn.Module):
    def __init__(self, kind, width=HIDDEN):
        super().__init__()
        self.kind = kind
        self.eps = 1e-5
        # Gemma keeps the weight less one: it scales by (1 + weight).
        self.weight = nn.Parameter((0.0 if kind == "rms_gemma" else 1.0) +
                                   0.1 * torch.randn(width))
        self.bias = nn.Parameter(0.1 * torch.randn(width))
        if kind == "layernorm":
            self.ln = nn.LayerNorm(width)

    def forward(self, x):
        k = self.kind
        if k == "layernorm":
            return self.ln(x)
        if k in ("ln_manual", "ln_rsqrt", "ln_nobias"):
            mean = x.mean(-1, keepdim=True)
            centered = x - mean
            var = (centered * centered).mean(-1, keepdim=True) if k == "ln_nobias" \
                else centered.pow(2).mean(-1, keepdim=True)
            if k == "ln_rsqrt":
                y = centered * torch.rsqrt(var + self.eps)
            else:
                y = centered / torch.sqrt(var + self.eps)
            return y * self.weight if k == "ln_nobias" else y * self.weight + self.bias
        if k == "rms":
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        if k == "rms_div":
            return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        if k == "rms_f32":
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.type_as(x)
        if k == "rms_gemma":
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * (1.0 + self.weight.float())).type_as(x)
        if k == "rms_mean_sq":
            return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * self.weight
        raise ValueError(k)


class Mlp(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        inner = 4 * HIDDEN
        gated = kind.startswith("swiglu") or kind == "geglu"
        if kind == "swiglu_fused":
            self.gate_up = nn.Linear(HIDDEN, 2 * inner, bias=False)
        else:
            self.up = nn.Linear(HIDDEN, inner, bias=not gated)
        if kind in ("swiglu", "geglu"):
            self.gate = nn.Linear(HIDDEN, inner, bias=False)
        self.down = nn.Linear(inner, HIDDEN, bias=not gated)

    def forward(self, x):
        k = self.kind
        if k == "swiglu":
            return self.down(nn.functional.silu(self.gate(x)) * self.up(x))
        if k == "swiglu_fused":
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down(nn.functional.silu(gate) * up)
        if k == "geglu":
            return self.down(nn.functional.gelu(self.gate(x), approximate="tanh") * self.up(x))
        h = self.up(x)
        if k == "gelu":
            h = nn.functional.gelu(h)
        elif k == "gelu_tanh":
            h = nn.functional.gelu(h, approximate="tanh")
        elif k == "gelu_new":
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                            (h + 0.044715 * torch.pow(h, 3.0))))
        elif k == "gelu_sigmoid":
            h = h * torch.sigmoid(1.702 * h)
        elif k == "relu":
            h = torch.relu(h)
        elif k == "relu_squared":
            h = torch.square(torch.relu(h))
        elif k == "silu_manual":
            h = h * torch.sigmoid(h)
        else:
            raise ValueError(k)
        return self.down(h)


def alibi_slopes(heads):
    """ALiBi's slope of each head (Press et al. 2022), for a power of two."""
    start = 2 ** (-(2 ** -(math.log2(heads) - 3)))
    return torch.tensor([start ** (i + 1) for i in range(heads)])


def t5_buckets(relative, buckets=8, max_distance=16):
    """T5's relative position buckets, unidirectional (a decoder's): exact
    for the nearest keys, logarithmic beyond, as transformers'
    T5Attention._relative_position_bucket with bidirectional=False."""
    n = -torch.clamp(relative, max=0)
    exact = buckets // 2
    far = exact + (torch.log(n.float().clamp(min=1) / exact) /
                   math.log(max_distance / exact) * (buckets - exact)).long()
    return torch.where(n < exact, n, torch.clamp(far, max=buckets - 1))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f
        self.local = True  # a sliding window's layers: local or global
        kv = f["kv_heads"] * HEAD_DIM
        if f["attention"] == "mha":
            self.mha = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
            return
        if f["attention"] == "mla":
            # transformers' DeepseekV3Attention without the query's low rank
            # (DeepSeek-V2-Lite's): q from the hidden states; k and v from a
            # latent of MLA_RANK, RMS-normalized, with MLA_ROPE columns of
            # one rotary key beside it.
            if f["mla_q_rank"]:
                # DeepSeek-V2/V3's: the query from a low-rank latent too.
                self.q_a = nn.Linear(HIDDEN, f["mla_q_rank"], bias=False)
                self.q_norm = Norm("rms", f["mla_q_rank"])
                self.q_b = nn.Linear(f["mla_q_rank"], HEADS * (MLA_NOPE + MLA_ROPE), bias=False)
            else:
                self.q = nn.Linear(HIDDEN, HEADS * (MLA_NOPE + MLA_ROPE), bias=False)
            self.kv_a = nn.Linear(HIDDEN, MLA_RANK + MLA_ROPE, bias=False)
            self.kv_norm = Norm("rms", MLA_RANK)
            self.kv_b = nn.Linear(MLA_RANK, HEADS * (MLA_NOPE + MLA_V), bias=False)
            self.o = nn.Linear(HEADS * MLA_V, HIDDEN, bias=False)
            return
        if f["qkv"] == "separate":
            self.q = nn.Linear(HIDDEN, HIDDEN)
            self.k = nn.Linear(HIDDEN, kv)
            self.v = nn.Linear(HIDDEN, kv)
        else:
            self.qkv = nn.Linear(HIDDEN, HIDDEN + 2 * kv)
        self.o = nn.Linear(HIDDEN, HIDDEN)
        self.drop = nn.Dropout(0.1)
        if f["qk_norm"] == "whole":
            self.q_norm = Norm("rms", HIDDEN)
            self.k_norm = Norm("rms", kv)
        elif f["qk_norm"]:
            kind = "layernorm" if f["qk_norm"] == "layernorm" else "rms"
            self.q_norm = Norm(kind, HEAD_DIM)
            self.k_norm = Norm(kind, HEAD_DIM)
            if kind == "layernorm":
                # Trained norms of their own (two as initialized are one
                # computation, which CSE merges).
                with torch.no_grad():
                    for norm in (self.q_norm, self.k_norm):
                        norm.ln.weight.add_(0.1 * torch.randn(HEAD_DIM))
                        norm.ln.bias.add_(0.1 * torch.randn(HEAD_DIM))
        if f["scale"] == "folded":
            with torch.no_grad():
                weight = self.q.weight if f["qkv"] == "separate" else self.qkv.weight[:HIDDEN]
                bias = self.q.bias if f["qkv"] == "separate" else self.qkv.bias[:HIDDEN]
                weight.mul_(HEAD_DIM ** -0.5)
                bias.mul_(HEAD_DIM ** -0.5)
        if f["mask"] in ("t5_relative", "t5_shared"):
            self.relative = nn.Embedding(8, HEADS)
        # t5_shared: the first block's position bias, which later blocks read
        # (Model gives every attention one list and drops the later tables).
        self.shared = None
        if f["mask"] in ("where_keep", "where_fill", "masked_fill", "where_eq"):
            self.register_buffer("bias", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ))
                                 .view(1, 1, MAX_SEQ, MAX_SEQ).to(
                                     torch.bool if f["mask"] != "where_eq" and
                                     f["mask"] != "masked_fill" else torch.float32))

    def project(self, x):
        f, b, s = self.f, x.shape[0], x.shape[1]
        kv = f["kv_heads"] * HEAD_DIM
        if f["qkv"] == "separate":
            return self.q(x), self.k(x), self.v(x)
        h = self.qkv(x)
        if f["qkv"] == "split":
            return h.split([HIDDEN, kv, kv], dim=2)
        if f["qkv"] == "chunk":
            assert kv == HIDDEN
            return h.chunk(3, dim=-1)
        if f["qkv"] == "slice":
            return h[:, :, :HIDDEN], h[:, :, HIDDEN:HIDDEN + kv], h[:, :, HIDDEN + kv:]
        if f["qkv"] == "view5":
            h = h.view(b, s, 3, HEADS, HEAD_DIM)
            return (h[:, :, 0].reshape(b, s, HIDDEN), h[:, :, 1].reshape(b, s, HIDDEN),
                    h[:, :, 2].reshape(b, s, HIDDEN))
        raise ValueError(f["qkv"])

    def rotary(self, t, cos, sin):
        if self.f["rotary"] == "partial":
            # GPTNeoXAttention with rotary_pct < 1: the rotated dimensions
            # first, the rest passed through, concatenated.
            r = cos.shape[-1]
            rotated, kept = t[..., :r], t[..., r:]
            return torch.cat((rotated * cos + rotate_half(rotated) * sin, kept), dim=-1)
        if self.f["rotary"] == "half":
            return t * cos + rotate_half(t) * sin
        if self.f["rotary"] == "interleaved":
            return t * cos + rotate_every_two(t) * sin
        return t

    def forward(self, x, cos, sin, padding):
        f, b, s = self.f, x.shape[0], x.shape[1]
        if f["attention"] == "mha" and f["mask"] == "mha_padding":
            # nn.TransformerEncoderLayer's way: a boolean causal mask and a
            # key padding mask, which MultiheadAttention or-s over the heads
            # and makes a 0 / -inf bias.
            causal = torch.ones(s, s, dtype=torch.bool).triu(diagonal=1)
            if padding is None:
                padding = torch.ones(b, s, dtype=torch.long)
            return self.mha(x, x, x, attn_mask=causal, key_padding_mask=padding == 0,
                            need_weights=False)[0]
        if f["attention"] == "mha":
            causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
            return self.mha(x, x, x, attn_mask=causal, need_weights=False)[0]
        if f["attention"] == "mla":
            return self.latent(x, cos, sin, padding)
        q, k, v = self.project(x)
        if f["clip_qkv"]:
            c = f["clip_qkv"]
            q, k, v = q.clamp(min=-c, max=c), k.clamp(min=-c, max=c), v.clamp(min=-c, max=c)
        if f["qk_norm"] == "whole":
            q, k = self.q_norm(q), self.k_norm(k)
        kvh = f["kv_heads"]
        q = q.view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        v = v.view(b, s, kvh, HEAD_DIM).transpose(1, 2)
        if f["keys"] == "permute" and f["rotary"] == "none" and kvh == HEADS:
            kt = k.view(b, s, kvh, HEAD_DIM).permute(0, 2, 3, 1)
            k = None
        else:
            k = k.view(b, s, kvh, HEAD_DIM).transpose(1, 2)
        if f["qk_norm"] and f["qk_norm"] != "whole":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary(q, cos, sin), (self.rotary(k, cos, sin) if k is not None else k)
        if kvh != HEADS:
            rep = HEADS // kvh
            if f["repeat"] == "expand":
                expand = lambda t: t[:, :, None, :, :].expand(b, kvh, rep, s, HEAD_DIM) \
                    .reshape(b, HEADS, s, HEAD_DIM)
            else:
                expand = lambda t: torch.repeat_interleave(t, rep, dim=1)
            k, v = expand(k), expand(v)
        scale = HEAD_DIM ** -0.5
        if f["scale"] == "q":
            q = q * scale
        elif f["scale"] == "qk_sqrt":
            q = q * math.sqrt(scale)
        elif f["scale"] == "k" and k is not None:
            k = k * scale
        if k is not None:
            kt = k.transpose(-2, -1)
        if f["scale"] == "qk_sqrt":
            kt = kt * math.sqrt(scale)
        if f["keys"] == "einsum":
            w = torch.einsum("bhqd,bhkd->bhqk", q, k)
        elif f["keys"] == "bmm" and f["mask"] == "alibi_bloom":
            # BloomAttention: alibi.baddbmm(q, k^T, beta=1, alpha=1/sqrt(d)),
            # viewed as [b, h, s, s]; the scale is inside.
            merge = lambda t: t.reshape(b * HEADS, s, HEAD_DIM)
            alibi = self.bloom_alibi(padding, b, s)
            w = alibi.baddbmm(merge(q), merge(k).transpose(1, 2), beta=1.0,
                              alpha=1.0 / math.sqrt(HEAD_DIM)).view(b, HEADS, s, s)
        elif f["keys"] == "bmm":
            merge = lambda t: t.reshape(b * HEADS, s, HEAD_DIM)
            w = torch.bmm(merge(q), merge(k).transpose(1, 2))
        else:
            w = torch.matmul(q, kt)
        if f["mask"] == "alibi_bloom":
            pass
        elif f["scale"] == "div":
            w = w / math.sqrt(HEAD_DIM)
        elif f["scale"] == "mul":
            w = w * (1.0 / math.sqrt(HEAD_DIM))
        if f["softcap"]:
            w = w / f["softcap"]
            w = torch.tanh(w)
            w = w * f["softcap"]
        w = self.apply_mask(w, s, padding)
        if f["softmax"] == "f32":
            p = nn.functional.softmax(w.float(), dim=-1).type_as(w)
        elif f["softmax"] == "module":
            p = nn.Softmax(dim=-1)(w)
        elif f["softmax"] == "dim3":
            p = torch.softmax(w, dim=3)
        else:
            p = nn.functional.softmax(w, dim=-1)
        if f["dropout"]:
            p = self.drop(p)
        if f["keys"] == "bmm":
            p = p.view(b * HEADS, s, s)
            o = torch.bmm(p, v.reshape(b * HEADS, s, HEAD_DIM)).reshape(b, HEADS, s, HEAD_DIM)
        else:
            o = torch.matmul(p, v)
        return self.o(o.transpose(1, 2).reshape(b, s, HIDDEN))

    def latent(self, x, cos, sin, padding):
        """DeepseekV3Attention.forward (transformers 4.50), its rotary
        embedding in the half-rotation form."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_b(self.q_norm(self.q_a(x))) if self.f["mla_q_rank"] else self.q(x)
        q = q.view(b, s, HEADS, MLA_NOPE + MLA_ROPE).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [MLA_NOPE, MLA_ROPE], dim=-1)
        compressed = self.kv_a(x)
        k_pass, k_rot = torch.split(compressed, [MLA_RANK, MLA_ROPE], dim=-1)
        k_pass = self.kv_b(self.kv_norm(k_pass)).view(b, s, HEADS, MLA_NOPE + MLA_V)
        k_pass, v = torch.split(k_pass.transpose(1, 2), [MLA_NOPE, MLA_V], dim=-1)
        k_rot = k_rot.view(b, 1, s, MLA_ROPE)
        q_rot = q_rot * cos + rotate_half(q_rot) * sin
        k_rot = k_rot * cos + rotate_half(k_rot) * sin
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        q = torch.cat((q_pass, q_rot), dim=-1)
        k = torch.cat((k_pass, k_rot), dim=-1)
        w = torch.matmul(q, k.transpose(2, 3)) * (MLA_NOPE + MLA_ROPE) ** -0.5
        w = self.apply_mask(w, s, padding)
        p = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(p, v)
        return self.o(o.transpose(1, 2).reshape(b, s, HEADS * MLA_V))

    @staticmethod
    def bloom_alibi(padding, b, s):
        """transformers' build_alibi_tensor: each key's position among the
        sequence's unpadded tokens times the head's slope, [b*h, 1, s]."""
        if padding is None:
            padding = torch.ones(b, s, dtype=torch.long)
        positions = ((padding.cumsum(dim=-1) - 1) * padding)[:, None, :]
        alibi = alibi_slopes(HEADS)[..., None] * positions
        return alibi.reshape(b * HEADS, 1, s)

    def apply_mask(self, w, s, padding):
        m = self.f["mask"]
        minimum = torch.finfo(w.dtype).min
        if m == "none":
            return w
        if m == "t5_shared":
            # T5Stack: the first block computes position_bias (its table's
            # bias plus the causal mask) and returns it; the stack hands it
            # to each later block, whose attention adds it as it is.
            if self.relative is not None:
                positions = torch.arange(s)
                bias = self.relative(t5_buckets(positions[None, :] - positions[:, None]))
                causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
                self.shared.append(bias.permute(2, 0, 1).unsqueeze(0) + causal)
            return w + self.shared[0]
        if m == "t5_relative":
            # T5Attention.compute_bias: the learned bias of each head for the
            # bucket of each key's distance, [1, h, s, s], plus the decoder's
            # causal mask; the mask takes a gradient.
            positions = torch.arange(s)
            bias = self.relative(t5_buckets(positions[None, :] - positions[:, None]))
            bias = bias.permute(2, 0, 1).unsqueeze(0)
            causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
            return w + (bias + causal)
        if m == "alibi":
            # MPT's build_attn_bias: -slope * distance to the last key,
            # [1, h, 1, s], added; then the causal mask fills finfo.min.
            distance = torch.arange(1 - s, 1, dtype=torch.int32).view(1, 1, 1, s)
            bias = distance * alibi_slopes(HEADS).view(1, HEADS, 1, 1)
            w = w + bias.to(w.dtype)
            upper = torch.ones(s, s, dtype=torch.bool).triu(diagonal=1)
            return w.masked_fill(upper.view(1, 1, s, s), minimum)
        if m == "alibi_bloom":
            # BloomModel's causal mask (padding is in the bias's positions
            # and in its own mask): True where a query may not see a key.
            causal = torch.ones(s, s, dtype=torch.bool).triu(diagonal=1)
            if padding is None:  # test/training/form_gradients.py: no padding
                padding = torch.ones(w.shape[0], s, dtype=torch.long)
            hidden = causal[None, None] | (padding[:, None, None, :] == 0)
            return torch.masked_fill(w, hidden, minimum)
        if m == "where_keep":
            return torch.where(self.bias[:, :, :s, :s], w,
                               torch.full([], minimum, dtype=w.dtype))
        if m == "where_fill":
            return torch.where(~self.bias[:, :, :s, :s],
                               torch.tensor(float("-inf"), dtype=w.dtype), w)
        if m == "masked_fill":
            return w.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
        if m == "where_eq":
            return torch.where(self.bias[:, :, :s, :s] == 1, w,
                               torch.tensor(-1e9, dtype=w.dtype))
        if m == "masked_fill_triu":
            upper = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
            return w.masked_fill(upper, float("-inf"))
        if m == "sdpa_causal":
            # torch 2's scaled_dot_product_attention(is_causal=True) export: a
            # bool tril turned into a 0 / -inf bias, added.
            keep = torch.ones(s, s, dtype=torch.bool).tril(diagonal=0)
            bias = torch.zeros(s, s, dtype=w.dtype).masked_fill(~keep,
                                                                float("-inf"))
            return w + bias
        if m == "add_inf":
            return w + torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        if m == "sliding_window" and not self.local:
            # A global layer between local ones (Gemma 2): full causal.
            return w + torch.zeros(s, s, dtype=w.dtype).masked_fill(
                ~torch.ones(s, s, dtype=torch.bool).tril(diagonal=0), float("-inf"))
        if m == "sliding_window":
            # Mistral's sliding window: each query sees itself and the
            # WINDOW - 1 keys before it, as a 0 / -inf bias.
            keep = torch.ones(s, s, dtype=torch.bool).tril(diagonal=0) & \
                torch.ones(s, s, dtype=torch.bool).triu(diagonal=1 - WINDOW)
            return w + torch.zeros(s, s, dtype=w.dtype).masked_fill(~keep, float("-inf"))
        if m == "add_min":
            return w + torch.triu(torch.full((s, s), minimum), diagonal=1)[None, None]
        if m == "add_1e4":
            return w + (1.0 - torch.tril(torch.ones(s, s))) * -10000.0
        if m == "padding_hf":
            return w + (1.0 - padding[:, None, None, :].to(w.dtype)) * minimum
        if m == "padding_bert":
            return w + (1.0 - padding[:, None, None, :].to(w.dtype)) * -10000.0
        if m == "causal_padding_fill":
            # transformers >= 4.36 (AttentionMaskConverter): a causal bias of
            # 0 / finfo.min, filled with finfo.min where the padding masks.
            causal = torch.triu(torch.full((s, s), minimum), diagonal=1)[None, None]
            causal = causal.expand(w.shape[0], 1, s, s)
            padded = (1.0 - padding[:, None, None, :].to(w.dtype)) * minimum
            return w + causal.masked_fill(padded.bool(), minimum)
        if m == "window_padding_fill":
            # Mistral through AttentionMaskConverter with a sliding window:
            # the causal bias, filled with finfo.min WINDOW keys and more
            # before each query, then where the padding masks.
            causal = torch.triu(torch.full((s, s), minimum), diagonal=1)
            far = torch.tril(torch.ones(s, s, dtype=torch.bool), diagonal=-WINDOW)
            causal = causal.masked_fill(far, minimum)[None, None]
            causal = causal.expand(w.shape[0], 1, s, s)
            if padding is None:  # test/training/form_gradients.py: no padding
                padding = torch.ones(w.shape[0], s, dtype=torch.long)
            padded = (1.0 - padding[:, None, None, :].to(w.dtype)) * minimum
            return w + causal.masked_fill(padded.bool(), minimum)
        if m == "gemma2_padding":
            # transformers' Gemma2 eager attention: the model's causal mask
            # with the padding (AttentionMaskConverter's), which a local
            # layer fills with finfo.min WINDOW keys and more before each
            # query (Gemma2DecoderLayer: torch.where(tril(ones, -window),
            # min, mask)).
            causal = torch.triu(torch.full((s, s), minimum), diagonal=1)[None, None]
            causal = causal.expand(w.shape[0], 1, s, s)
            if padding is None:  # test/training/form_gradients.py: no padding
                padding = torch.ones(w.shape[0], s, dtype=torch.long)
            padded = (1.0 - padding[:, None, None, :].to(w.dtype)) * minimum
            mask = causal.masked_fill(padded.bool(), minimum)
            if self.local:
                far = torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=-WINDOW)
                mask = torch.where(far, torch.tensor(minimum, dtype=mask.dtype), mask)
            return w + mask
        if m == "causal_padding":
            causal = torch.triu(torch.full((s, s), minimum), diagonal=1)[None, None]
            pad = (1.0 - padding[:, None, None, :].to(w.dtype)) * minimum
            return w + (causal + pad).clamp(min=minimum)
        raise ValueError(m)


class Block(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.norm1 = Norm(f["norm"])
        self.attn = Attention(f)
        self.norm2 = Norm(f["norm"])
        self.mlp = Mlp(f["mlp"])
        self.block = f["block"]
        if self.block == "sandwich":
            self.norm3 = Norm(f["norm"])
            self.norm4 = Norm(f["norm"])
        if self.block == "parallel_two_norms" and f["norm"] == "layernorm":
            # Norms of their own, as trained ones are: two nn.LayerNorms as
            # initialized are one computation, which the importer's CSE merges.
            with torch.no_grad():
                for norm in (self.norm1, self.norm2):
                    norm.ln.weight.add_(0.1 * torch.randn(HIDDEN))
                    norm.ln.bias.add_(0.1 * torch.randn(HIDDEN))

    def forward(self, x, cos, sin, padding):
        block = self.block
        if block == "parallel":
            h = self.norm1(x)
            return x + self.attn(h, cos, sin, padding) + self.mlp(h)
        if block == "parallel_two_norms":
            return x + self.attn(self.norm1(x), cos, sin, padding) + self.mlp(self.norm2(x))
        if block == "sandwich":
            x = x + self.norm2(self.attn(self.norm1(x), cos, sin, padding))
            return x + self.norm4(self.mlp(self.norm3(x)))
        if block == "post":
            x = x + self.norm1(self.attn(x, cos, sin, padding))
            return x + self.norm2(self.mlp(x))
        x = x + self.attn(self.norm1(x), cos, sin, padding)
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        if f["positions"] == "sinusoidal":
            position = torch.arange(MAX_SEQ).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, HIDDEN, 2) * (-math.log(10000.0) / HIDDEN))
            pe = torch.zeros(MAX_SEQ, 1, HIDDEN)
            pe[:, 0, 0::2] = torch.sin(position * div_term)
            pe[:, 0, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe)
        else:
            self.pos = nn.Embedding(MAX_SEQ, HIDDEN)
        self.blocks = nn.ModuleList(Block(f) for _ in range(LAYERS))
        if f["window_layers"] == "even":
            for i, block in enumerate(self.blocks):
                block.attn.local = i % 2 == 0
        if f["mask"] == "t5_shared":
            self.shared = []
            for i, block in enumerate(self.blocks):
                block.attn.shared = self.shared
                if i:
                    block.attn.relative = None
        self.norm = Norm(f["norm"])
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        rotated = HEAD_DIM // 2 if f["rotary"] == "partial" else HEAD_DIM
        if f["attention"] == "mla":
            rotated = MLA_ROPE

        def tables(base):
            inv_freq = 1.0 / (base ** (torch.arange(0, rotated, 2).float() / rotated))
            freqs = torch.outer(torch.arange(MAX_SEQ).float(), inv_freq)
            if f["rotary"] == "interleaved":
                emb = torch.repeat_interleave(freqs, 2, dim=-1)
            else:
                emb = torch.cat((freqs, freqs), dim=-1)
            return inv_freq, emb.cos(), emb.sin()

        inv_freq, cos, sin = tables(10000)
        self.register_buffer("cos_cached", cos)
        self.register_buffer("sin_cached", sin)
        self.register_buffer("inv_freq", inv_freq, persistent=f["inv_freq_persistent"])
        if f["rotary_local_base"]:
            _, cos, sin = tables(f["rotary_local_base"])
            self.register_buffer("cos_local", cos)
            self.register_buffer("sin_local", sin)

    def uses_padding(self):
        return self.f["mask"] in ("padding_hf", "padding_bert", "causal_padding",
                                  "causal_padding_fill", "window_padding_fill",
                                  "gemma2_padding",
                                  "alibi_bloom", "mha_padding")

    def uses_positions(self):
        return self.f["rotary_tables"] == "positions"

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        s = input_ids.shape[1]
        if self.f["mask"] == "t5_shared":
            self.shared.clear()
        cos, sin = self.cos_cached[:s], self.sin_cached[:s]
        if self.f["rotary_tables"] != "buffer":
            # LlamaRotaryEmbedding.forward (transformers >= 4.38).
            if position_ids is None:
                position_ids = torch.arange(s).unsqueeze(0)
            inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        positions = torch.arange(s, dtype=torch.long).unsqueeze(0)
        x = self.embed(input_ids)
        if self.f["embed_scale"]:
            x = x * torch.tensor(HIDDEN ** 0.5, dtype=x.dtype)
        if self.f["positions"] == "sinusoidal":
            x = (x.transpose(0, 1) + self.pe[:s]).transpose(0, 1)
        else:
            x = x + self.pos(positions)
        for block in self.blocks:
            if self.f["rotary_local_base"] and block.attn.local:
                x = block(x, self.cos_local[:s], self.sin_local[:s], attention_mask)
                continue
            x = block(x, cos, sin, attention_mask)
        logits = self.head(self.norm(x))
        if self.f["final_softcap"]:
            cap = self.f["final_softcap"]
            logits = torch.tanh(logits / cap) * cap
        return logits


def padded_keys(f):
    """The padded positions at the end of the second sequence of a
    formulation with an attention_mask input. Under a sliding window with
    three, the last query's window would hold only padding, every key it
    sees masked by finfo.min: torch's eager attention then averages all keys
    alike, while weft, which factors the window out of the mask, averages
    the window's; and a ring (cp) merges blocks by log-sum-exps that are
    finfo.min rounded, which no longer tell one key from three. Such a row
    is a padded position, whose output no loss reads."""
    return WINDOW - 1 if f["mask"] in ("window_padding_fill", "gemma2_padding") else 3


def is_causal(f):
    """Whether the formulation's attention is causal (every mask form but
    the padding-only ones and none; a sliding window is raised to causal
    attention with a `window`)."""
    return f["mask"] not in ("none", "padding_hf", "padding_bert")


def form(name):
    f = dict(DEFAULTS)
    f.update(FORMS[name])
    return f


def export(name, out_dir):
    f = form(name)
    torch.manual_seed(1)
    model = Model(f)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    inputs, names = (ids,), ["input_ids"]
    if model.uses_padding():
        mask = torch.ones(BATCH, SEQ, dtype=torch.long)
        # The second sequence's last positions are padding: three, or under
        # a sliding window fewer than WINDOW, so that every query sees a key
        # (see padded_keys).
        mask[1, SEQ - padded_keys(f):] = 0
        inputs, names = (ids, mask), ["input_ids", "attention_mask"]
    if model.uses_positions():
        # The second sequence starts at position 3 (a left-padded batch).
        positions = torch.arange(SEQ).unsqueeze(0).repeat(BATCH, 1)
        positions[1] += 3
        inputs, names = inputs + (positions,), names + ["position_ids"]
    # Exported by keyword (torch.onnx.export's trailing dict), so that a model
    # without attention_mask takes position_ids second.
    args = inputs
    if model.uses_positions():
        args = inputs[:-1] + ({"position_ids": inputs[-1]},)
    model.eval()
    with torch.no_grad():
        expected = model(*args[:-1], **args[-1]) if model.uses_positions() else model(*args)
    directory = os.path.join(out_dir, name)
    data = os.path.join(directory, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for i, tensor in enumerate(inputs):
        np.save(os.path.join(data, "input_%d.npy" % i), tensor.numpy())
    np.save(os.path.join(data, "output_0.npy"), expected.numpy())
    paths = []
    for opset in (14, 17):
        for dynamic in (False, True) if f["dynamic"] else (False,):
            path = os.path.join(directory, "%s-opset%d%s.onnx"
                                % (name, opset, "-dynamic" if dynamic else ""))
            axes = {n: {0: "batch", 1: "sequence"} for n in names}
            axes["logits"] = {0: "batch", 1: "sequence"}
            mode = torch.onnx.TrainingMode.EVAL
            if f["dropout"]:
                # A training export keeps the Dropout nodes (weft's forward
                # program treats them as the identity, as eval mode does).
                model.train()
                mode = torch.onnx.TrainingMode.TRAINING
            torch.onnx.export(model, args, path, opset_version=opset,
                              input_names=names, output_names=["logits"],
                              dynamic_axes=axes if dynamic else None,
                              do_constant_folding=not f["dropout"], training=mode)
            model.eval()
            paths.append(path)
    path = os.path.join(directory, "%s-opset18.onnx" % name)
    onnx.save(as_opset18(onnx.load(paths[-2 if f["dynamic"] else -1])), path)
    paths.append(path)
    return paths


REDUCTIONS_WITH_AXES_INPUT = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                              "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                              "ReduceSumSquare"}


def as_opset18(model):
    """The opset-18 form of an opset-17 model, as torch >= 2.5 writes it
    (torch 1.13 exports at most opset 17): the reductions take their axes as
    an initializer input, a Split without sizes says num_outputs, and the
    IR version is 10 (ONNX 1.16's)."""
    graph = model.graph
    for node in graph.node:
        if node.op_type in REDUCTIONS_WITH_AXES_INPUT:
            for attr in list(node.attribute):
                if attr.name == "axes":
                    name = "%s_axes" % (node.name or node.output[0])
                    graph.initializer.append(
                        numpy_helper.from_array(np.array(attr.ints, np.int64), name))
                    node.input.append(name)
                    node.attribute.remove(attr)
        if node.op_type == "Split" and len(node.input) == 1:
            node.attribute.append(onnx.helper.make_attribute("num_outputs", len(node.output)))
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = 18
    model.ir_version = 10
    return model


def main(argv):
    if argv and argv[0] == "--list":
        for name in FORMS:
            print(name)
        return
    out_dir = argv[0] if argv else "corpus"
    names = argv[1:] or list(FORMS)
    for name in names:
        export(name, out_dir)
        print("wrote %s" % os.path.join(out_dir, name))


if __name__ == "__main__":
    main(sys.argv[1:])
