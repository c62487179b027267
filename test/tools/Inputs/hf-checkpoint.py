#!/usr/bin/python3
"""A Hugging Face checkpoint of a small decoder, and its logits as
transformers computes them.

    hf-checkpoint.py write CONFIG.json DIR [--dtype=f32|bf16|f16] [--shards=N]
        [--seed=S] [--drop=NAME] [--extra=NAME]
    hf-checkpoint.py logits CONFIG.json DIR TOKENS.npy OUT.npy
    hf-checkpoint.py sgd-step CONFIG.json DIR DATA.npy AFTER --lr=LR --seq=S --batch=B

`write` draws random weights under transformers' names and shapes for the
config's model_type (llama, mistral, qwen2, qwen3, gemma, gemma2, olmo2, phi3, glm, glm4,
smollm3, internlm2, seed_oss, exaone4, ernie4_5, gpt2, gpt_neo, nemotron,
gpt_neox, bloom, falcon, opt, starcoder2, gptj, phi, mpt, gpt_bigcode) and
writes them as safetensors (model.safetensors, or N shards with a
model.safetensors.index.json), in the dtype given; --drop leaves a tensor
out, --extra adds one the model does not have.

`sgd-step` checks an export of one `weft train` SGD step (AFTER) against
the step torch's autograd takes through the same forward.

`logits` reads the checkpoint back with its own safetensors reader and
computes the logits of TOKENS.npy in float64 as transformers' modeling code
writes these families: separate q, k and v projections (Phi-3's fused
qkv_proj and gate_up_proj split as its forward splits them), rotate_half
rotary (its rope_scaling's frequencies: linear, llama3, yarn, longrope,
dynamic), LLaMA's attention_bias and mlp_bias, repeat_kv, causal softmax at 1 / sqrt(head_dim), RMSNorm (Gemma's
times 1 + w, its embeddings times sqrt(hidden), GELU-tanh gating), Qwen3's
per-head q_norm and k_norm, Gemma 2's (norms before and after each branch,
soft-capped scores and logits, query_pre_attn_scalar, a window on even
layers), OLMo 2's norms after each branch and its q_norm
and k_norm over the whole projections; GPT-2's Conv1D blocks, learned
positions and tied head (its checkpoint with the attn.bias mask buffers
older transformers saved); GPT-NeoX's, BLOOM's and Falcon-7B's fused
query_key_value (GPT-NeoX's with its BOOL attention.bias buffers); OPT's
and StarCoder2's LayerNorm blocks with every linear biased (OPT's position
table read from row 2); GLM's and GLM-4's (partial rotary on adjacent pairs,
QKV biases, fused gate_up_proj; GLM-4's norms after each branch too);
SmolLM3's (LLaMA's, without the rotary embedding on its NoPE layers);
InternLM2's (its remote code's names and grouped wqkv, read into LLaMA's);
Seed-OSS's (Q, K and V biased by attention_bias, o_proj by attention_out_bias);
ERNIE 4.5's (GLM's adjacent-pair rotary on the whole head, use_bias on all
seven projections, head_dim 128, rope_theta 500,000 and a tied head where the
config leaves them out).
"""

import json
import math
import os
import sys

import numpy as np
import torch

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in sys.argv[1:]
             if a.startswith("--"))
mode, config_path, directory = args[:3]
config = json.load(open(config_path))
kind = config["model_type"]
gpt2 = kind == "gpt2"
fused = kind in ("gpt_neox", "bloom", "falcon")
layer_normed = kind in ("opt", "starcoder2", "nemotron")
other = kind in ("gptj", "phi", "mpt", "gpt_bigcode", "gpt_neo")
if kind in ("gptj", "gpt_bigcode"):
    config.update(hidden_size=config["n_embd"], num_attention_heads=config["n_head"],
                  num_hidden_layers=config["n_layer"],
                  intermediate_size=config.get("n_inner") or 4 * config["n_embd"])
if kind == "gpt_bigcode" and config.get("multi_query", True):
    config["num_key_value_heads"] = 1
if kind == "mpt":
    config.update(hidden_size=config["d_model"], num_attention_heads=config["n_heads"],
                  num_hidden_layers=config["n_layers"],
                  intermediate_size=config.get("expansion_ratio", 4) * config["d_model"])
if kind == "opt":
    config["intermediate_size"] = config["ffn_dim"]
if kind == "gpt_neo":
    # GPTNeoConfig's keys; attention_types expands to attention_layers.
    config.update(num_attention_heads=config["num_heads"], num_hidden_layers=config["num_layers"],
                  intermediate_size=config.get("intermediate_size") or 4 * config["hidden_size"])
    if "attention_layers" not in config:
        config["attention_layers"] = [k for kinds, n in config["attention_types"] for _ in range(n)
                                      for k in kinds]
if gpt2:
    # GPT2Config's keys.
    config.update(hidden_size=config["n_embd"], num_attention_heads=config["n_head"],
                  num_hidden_layers=config["n_layer"],
                  intermediate_size=config.get("n_inner") or 4 * config["n_embd"])
if kind == "bloom":
    config.update(num_attention_heads=config["n_head"], num_hidden_layers=config["n_layer"])
if kind in ("bloom", "falcon"):
    config.setdefault("intermediate_size", 4 * config["hidden_size"])
if kind == "falcon" and config.get("multi_query", True):
    config["num_key_value_heads"] = 1
h = config["hidden_size"]
heads = config["num_attention_heads"]
kv = config.get("num_key_value_heads", heads)
ernie = kind == "ernie4_5"
d = config.get("head_dim", 128 if ernie else None) or h // heads
ffn = config["intermediate_size"]
vocab = config["vocab_size"]
layers = config["num_hidden_layers"]
tied = config.get("tie_word_embeddings",
                  kind in ("gemma", "gemma2", "smollm3", "gpt2", "bloom", "falcon", "opt", "starcoder2", "mpt",
                           "gpt_bigcode", "gpt_neo", "ernie4_5"))
eps = config.get("layer_norm_epsilon", config.get("layer_norm_eps", config.get("norm_epsilon",
                 config.get("norm_eps", 1e-5)))) \
    if gpt2 or fused or layer_normed or other else config.get("rms_norm_eps", 1e-5 if ernie else 1e-6)
theta = config.get("rope_theta", 500000.0 if ernie else 10000.0)
gemma = kind in ("gemma", "gemma2")
glm = kind in ("glm", "glm4")


def gpt2_shapes():
    """GPT2LMHeadModel's: Conv1D weights [in, out], c_attn's columns
    [q | k | v]; the causal-mask buffers older checkpoints saved."""
    t = "transformer."
    out = {t + "wte.weight": (vocab, h), t + "wpe.weight": (config["n_positions"], h),
           t + "ln_f.weight": (h,), t + "ln_f.bias": (h,)}
    for i in range(layers):
        p = t + "h.%d." % i
        for norm in ("ln_1", "ln_2"):
            out[p + norm + ".weight"] = (h,)
            out[p + norm + ".bias"] = (h,)
        out[p + "attn.c_attn.weight"] = (h, 3 * h)
        out[p + "attn.c_attn.bias"] = (3 * h,)
        out[p + "attn.c_proj.weight"] = (h, h)
        out[p + "attn.c_proj.bias"] = (h,)
        out[p + "mlp.c_fc.weight"] = (h, ffn)
        out[p + "mlp.c_fc.bias"] = (ffn,)
        out[p + "mlp.c_proj.weight"] = (ffn, h)
        out[p + "mlp.c_proj.bias"] = (h,)
        out[p + "attn.bias"] = (1, 1, config["n_positions"], config["n_positions"])
    return out


def fused_shapes():
    """GPT-NeoX's (under gpt_neox., embed_out apart, with the causal-mask
    buffers older checkpoints saved), BLOOM's and Falcon's (under
    transformer.): one query_key_value of [heads, 3, d] rows (Falcon-7B's
    [heads + 2, d], one KV head), LayerNorms with biases."""
    neox = kind == "gpt_neox"
    t = "gpt_neox." if neox else "transformer."
    biased = kind != "falcon" or config.get("bias", False)
    out = {t + ("embed_in.weight" if neox else "word_embeddings.weight"): (vocab, h)}
    final = t + ("final_layer_norm." if neox else "ln_f.")
    out[final + "weight"] = out[final + "bias"] = (h,)
    if kind == "bloom":
        out[t + "word_embeddings_layernorm.weight"] = (h,)
        out[t + "word_embeddings_layernorm.bias"] = (h,)
    if not tied:
        out["embed_out.weight" if neox else "lm_head.weight"] = (vocab, h)
    attention = "attention." if neox else "self_attention."
    for i in range(layers):
        p = t + ("layers.%d." if neox else "h.%d.") % i
        norms = ["input_layernorm"] + ([] if kind == "falcon" else ["post_attention_layernorm"])
        for norm in norms:
            out[p + norm + ".weight"] = out[p + norm + ".bias"] = (h,)
        linears = [(attention + "query_key_value", (heads + 2 * kv) * d, h),
                   (attention + "dense", h, h), ("mlp.dense_h_to_4h", ffn, h),
                   ("mlp.dense_4h_to_h", h, ffn)]
        for name, rows, cols in linears:
            out[p + name + ".weight"] = (rows, cols)
            if biased:
                out[p + name + ".bias"] = (rows,)
        if neox:
            out[p + "attention.bias"] = ("BOOL", (1, 1, 16, 16))
    return out


def layer_normed_shapes():
    """OPT's (model.decoder., out_proj, self_attn_layer_norm and each
    layer's final_layer_norm, fc1, fc2, a position table of context + 2
    rows) and StarCoder2's (LLaMA's names, LayerNorms with biases, c_fc and
    c_proj): every linear biased; Nemotron's (LLaMA's names, up_proj and
    down_proj, biased by attention_bias and mlp_bias alone, an lm_head
    unless tied)."""
    opt = kind == "opt"
    nemotron = kind == "nemotron"
    t = "model.decoder." if opt else "model."
    out = {t + "embed_tokens.weight": (vocab, h)}
    if not tied:
        out["lm_head.weight"] = (vocab, h)
    final = t + ("final_layer_norm." if opt else "norm.")
    out[final + "weight"] = out[final + "bias"] = (h,)
    if opt:
        out[t + "embed_positions.weight"] = (config["max_position_embeddings"] + 2, h)
    for i in range(layers):
        p = t + "layers.%d." % i
        for norm in (("self_attn_layer_norm", "final_layer_norm") if opt
                     else ("input_layernorm", "post_attention_layernorm")):
            out[p + norm + ".weight"] = out[p + norm + ".bias"] = (h,)
        linears = [("self_attn.q_proj", heads * d, h), ("self_attn.k_proj", kv * d, h),
                   ("self_attn.v_proj", kv * d, h),
                   ("self_attn.out_proj" if opt else "self_attn.o_proj", h, heads * d),
                   ("fc1" if opt else "mlp.up_proj" if nemotron else "mlp.c_fc", ffn, h),
                   ("fc2" if opt else "mlp.down_proj" if nemotron else "mlp.c_proj", h, ffn)]
        for name, rows, cols in linears:
            out[p + name + ".weight"] = (rows, cols)
            if not nemotron or config.get("mlp_bias" if "mlp." in name else "attention_bias"):
                out[p + name + ".bias"] = (rows,)
    return out


def other_shapes():
    """GPT-J's (transformer.h., q/k/v/out_proj without biases, fc_in,
    fc_out, one ln_1, lm_head with a bias), Phi's (LLaMA's names, dense,
    fc1, fc2, final_layernorm, biases everywhere, lm_head's too), MPT's
    (transformer.blocks., Wqkv of [q; k; v] rows, norm_1, norm_2 without
    biases, ffn.up_proj, ffn.down_proj, norm_f), GPT-BigCode's (GPT-2's
    names as nn.Linear, c_attn of [q; k; v] rows with one KV head) and
    GPT-Neo's (GPT-2's names, q/k/v_proj without biases and out_proj with
    one under attn.attention, and the causal-mask and masked_bias buffers
    its older checkpoints saved)."""
    out = {}
    if kind == "gptj":
        t, at = "transformer.", "transformer.h.%d."
        out[t + "wte.weight"] = (vocab, h)
        out[t + "ln_f.weight"] = out[t + "ln_f.bias"] = (h,)
        out["lm_head.weight"], out["lm_head.bias"] = (vocab, h), (vocab,)
        layer = [("ln_1.weight", (h,)), ("ln_1.bias", (h,))] + \
            [("attn.%s_proj.weight" % n, (h, h)) for n in ("q", "k", "v", "out")] + \
            [("mlp.fc_in.weight", (ffn, h)), ("mlp.fc_in.bias", (ffn,)),
             ("mlp.fc_out.weight", (h, ffn)), ("mlp.fc_out.bias", (h,))]
    elif kind == "phi":
        t, at = "model.", "model.layers.%d."
        out[t + "embed_tokens.weight"] = (vocab, h)
        out[t + "final_layernorm.weight"] = out[t + "final_layernorm.bias"] = (h,)
        out["lm_head.weight"], out["lm_head.bias"] = (vocab, h), (vocab,)
        layer = [("input_layernorm.weight", (h,)), ("input_layernorm.bias", (h,))]
        for name, rows, cols in (("self_attn.q_proj", h, h), ("self_attn.k_proj", h, h),
                                 ("self_attn.v_proj", h, h), ("self_attn.dense", h, h),
                                 ("mlp.fc1", ffn, h), ("mlp.fc2", h, ffn)):
            layer += [(name + ".weight", (rows, cols)), (name + ".bias", (rows,))]
    elif kind == "mpt":
        t, at = "transformer.", "transformer.blocks.%d."
        out[t + "wte.weight"] = (vocab, h)
        out[t + "norm_f.weight"] = (h,)
        layer = [("norm_1.weight", (h,)), ("attn.Wqkv.weight", (3 * h, h)),
                 ("attn.out_proj.weight", (h, h)), ("norm_2.weight", (h,)),
                 ("ffn.up_proj.weight", (ffn, h)), ("ffn.down_proj.weight", (h, ffn))]
    elif kind == "gpt_neo":
        t, at = "transformer.", "transformer.h.%d."
        out[t + "wte.weight"] = (vocab, h)
        out[t + "wpe.weight"] = (config["max_position_embeddings"], h)
        out[t + "ln_f.weight"] = out[t + "ln_f.bias"] = (h,)
        positions = config["max_position_embeddings"]
        layer = [("ln_1.weight", (h,)), ("ln_1.bias", (h,)), ("ln_2.weight", (h,)), ("ln_2.bias", (h,))] + \
            [("attn.attention.%s_proj.weight" % n, (h, h)) for n in ("q", "k", "v", "out")] + \
            [("attn.attention.out_proj.bias", (h,)),
             ("attn.attention.bias", ("BOOL", (1, 1, positions, positions))),
             ("attn.attention.masked_bias", ()),
             ("mlp.c_fc.weight", (ffn, h)), ("mlp.c_fc.bias", (ffn,)),
             ("mlp.c_proj.weight", (h, ffn)), ("mlp.c_proj.bias", (h,))]
    else:
        t, at = "transformer.", "transformer.h.%d."
        out[t + "wte.weight"] = (vocab, h)
        out[t + "wpe.weight"] = (config["n_positions"], h)
        out[t + "ln_f.weight"] = out[t + "ln_f.bias"] = (h,)
        layer = []
        for norm in ("ln_1", "ln_2"):
            layer += [(norm + ".weight", (h,)), (norm + ".bias", (h,))]
        for name, rows, cols in (("attn.c_attn", h + 2 * kv * d, h), ("attn.c_proj", h, h),
                                 ("mlp.c_fc", ffn, h), ("mlp.c_proj", h, ffn)):
            layer += [(name + ".weight", (rows, cols)), (name + ".bias", (rows,))]
    for i in range(layers):
        for name, shape in layer:
            out[at % i + name] = shape
    return out


def internlm2_shapes():
    """InternLM2's (its remote code's names): tok_embeddings, attention.wqkv
    of [kv_heads, group + 2, head_dim] rows, attention.wo (both biased with
    its bias, true by default), feed_forward.w1 / w3 / w2, attention_norm,
    ffn_norm and the head as output."""
    rows = (heads + 2 * kv) * d
    out = {"model.tok_embeddings.weight": (vocab, h), "model.norm.weight": (h,),
           "output.weight": (vocab, h)}
    for i in range(layers):
        p = "model.layers.%d." % i
        out[p + "attention_norm.weight"] = out[p + "ffn_norm.weight"] = (h,)
        out[p + "attention.wqkv.weight"] = (rows, h)
        out[p + "attention.wo.weight"] = (h, heads * d)
        if config.get("bias", True):
            out[p + "attention.wqkv.bias"] = (rows,)
            out[p + "attention.wo.bias"] = (h,)
        out[p + "feed_forward.w1.weight"] = out[p + "feed_forward.w3.weight"] = (ffn, h)
        out[p + "feed_forward.w2.weight"] = (h, ffn)
    return out


def internlm2_as_llama(w):
    """InternLM2's tensors under LLaMA's names: its wqkv split as its
    attention's rearrange('b q (h gs d) -> b q h gs d', gs=2 + group) splits
    the projection (the group's queries, then its key, then its value)."""
    group = heads // kv
    out = {"model.embed_tokens.weight": w["model.tok_embeddings.weight"],
           "model.norm.weight": w["model.norm.weight"], "lm_head.weight": w["output.weight"]}
    for i in range(layers):
        p = "model.layers.%d." % i
        out[p + "input_layernorm.weight"] = w[p + "attention_norm.weight"]
        out[p + "post_attention_layernorm.weight"] = w[p + "ffn_norm.weight"]
        for suffix in ("weight", "bias"):
            fused = w.get(p + "attention.wqkv." + suffix)
            if fused is None:
                continue
            rest = tuple(fused.shape[1:])
            t = fused.reshape((kv, group + 2, d) + rest)
            out[p + "self_attn.q_proj." + suffix] = t[:, :group].reshape((heads * d,) + rest)
            out[p + "self_attn.k_proj." + suffix] = t[:, -2].reshape((kv * d,) + rest)
            out[p + "self_attn.v_proj." + suffix] = t[:, -1].reshape((kv * d,) + rest)
            if p + "attention.wo." + suffix in w:
                out[p + "self_attn.o_proj." + suffix] = w[p + "attention.wo." + suffix]
        for ours, theirs in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
            out[p + "mlp.%s.weight" % ours] = w[p + "feed_forward.%s.weight" % theirs]
    return out


def shapes():
    if kind == "internlm2":
        return internlm2_shapes()
    if other:
        return other_shapes()
    if gpt2:
        return gpt2_shapes()
    if fused:
        return fused_shapes()
    if layer_normed:
        return layer_normed_shapes()
    out = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,)}
    if not tied:
        out["lm_head.weight"] = (vocab, h)
    for i in range(layers):
        p = "model.layers.%d." % i
        if kind not in ("olmo2", "exaone4"):
            out[p + "input_layernorm.weight"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
        if kind in ("olmo2", "gemma2", "exaone4"):
            out[p + "post_feedforward_layernorm.weight"] = (h,)
        if kind == "gemma2":
            out[p + "pre_feedforward_layernorm.weight"] = (h,)
        if kind == "olmo2":
            out[p + "self_attn.q_norm.weight"] = (heads * d,)
            out[p + "self_attn.k_norm.weight"] = (kv * d,)
        if kind in ("qwen3", "exaone4"):
            out[p + "self_attn.q_norm.weight"] = (d,)
            out[p + "self_attn.k_norm.weight"] = (d,)
        if kind == "glm4":
            out[p + "post_self_attn_layernorm.weight"] = (h,)
            out[p + "post_mlp_layernorm.weight"] = (h,)
        if kind == "phi3":
            out[p + "self_attn.qkv_proj.weight"] = ((heads + 2 * kv) * d, h)
        else:
            out[p + "self_attn.q_proj.weight"] = (heads * d, h)
            out[p + "self_attn.k_proj.weight"] = (kv * d, h)
            out[p + "self_attn.v_proj.weight"] = (kv * d, h)
        if kind in ("phi3", "glm", "glm4"):
            out[p + "mlp.gate_up_proj.weight"] = (2 * ffn, h)
        else:
            out[p + "mlp.gate_proj.weight"] = (ffn, h)
            out[p + "mlp.up_proj.weight"] = (ffn, h)
        # Qwen2's and GLM's QKV biases (GLM's attention_bias is true by
        # default); LLaMA's attention_bias on all four projections, its
        # mlp_bias on the MLP's three.
        seed = kind == "seed_oss"
        if kind == "qwen2" or config.get("attention_bias", glm or seed):
            out[p + "self_attn.q_proj.bias"] = (heads * d,)
            out[p + "self_attn.k_proj.bias"] = (kv * d,)
            out[p + "self_attn.v_proj.bias"] = (kv * d,)
        if config.get("attention_out_bias") if seed else \
                config.get("attention_bias") and not glm:
            out[p + "self_attn.o_proj.bias"] = (h,)
        if ernie and config.get("use_bias"):
            out[p + "self_attn.q_proj.bias"] = (heads * d,)
            out[p + "self_attn.k_proj.bias"] = out[p + "self_attn.v_proj.bias"] = (kv * d,)
            out[p + "self_attn.o_proj.bias"] = (h,)
        if config.get("mlp_bias") or (ernie and config.get("use_bias")):
            out[p + "mlp.gate_proj.bias"] = out[p + "mlp.up_proj.bias"] = (ffn,)
            out[p + "mlp.down_proj.bias"] = (h,)
        out[p + "self_attn.o_proj.weight"] = (h, heads * d)
        out[p + "mlp.down_proj.weight"] = (h, ffn)
    return out


DTYPES = {"f32": ("F32", np.float32), "f16": ("F16", np.float16), "bf16": ("BF16", None),
          "F32": np.float32, "F16": np.float16, "F64": np.float64}


def encode(values, dtype):
    if dtype == "bf16":
        bits = values.astype(np.float32).view(np.uint32)
        # Round to nearest even, as torch's bfloat16 conversion does.
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype(np.uint16).tobytes()
    return values.astype(DTYPES[dtype][1]).tobytes()


def write_file(path, tensors, dtype):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, values in tensors.items():
        mask = values.dtype == bool
        blob = values.astype(np.uint8).tobytes() if mask else encode(values, dtype)
        header[name] = {"dtype": "BOOL" if mask else DTYPES[dtype][0], "shape": list(values.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write():
    rng = np.random.default_rng(int(flags.get("seed", "0")))
    tensors = {}
    buffers = {}
    for name, shape in shapes().items():
        if shape and shape[0] == "BOOL":
            buffers[name] = np.tril(np.ones(shape[1], dtype=bool))
            continue
        if not shape:  # GPT-Neo's masked_bias, a scalar buffer
            buffers[name] = np.array(-1e9)
            continue
        if len(shape) == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
            base = 0.0 if gemma or kind == "nemotron" else 1.0  # stored as w, applied as 1 + w
            tensors[name] = base + 0.1 * rng.standard_normal(shape)
        else:
            tensors[name] = 0.08 * rng.standard_normal(shape)
    tensors.update(buffers)
    if "drop" in flags:
        del tensors[flags["drop"]]
    if "extra" in flags:
        tensors[flags["extra"]] = rng.standard_normal((h,))
    os.makedirs(directory, exist_ok=True)
    dtype = flags.get("dtype", "f32")
    shards = int(flags.get("shards", "1"))
    if shards == 1:
        write_file(os.path.join(directory, "model.safetensors"), tensors, dtype)
        return
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: tensors[n] for n in names[s::shards]}
        write_file(os.path.join(directory, file), part, dtype)
        weight_map.update({n: file for n in part})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(directory, "model.safetensors.index.json"), "w"))


def read_checkpoint(directory=directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) \
        if os.path.exists(index) else ["model.safetensors"]
    params = {}
    for file in files:
        raw = open(os.path.join(directory, file), "rb").read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            blob = raw[8 + n + begin:8 + n + end]
            if info["dtype"] == "BOOL":
                continue
            if info["dtype"] == "BF16":
                values = (np.frombuffer(blob, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                values = np.frombuffer(blob, DTYPES[info["dtype"]])
            params[name] = torch.from_numpy(values.astype(np.float64).reshape(info["shape"]))
    return params


def gpt2_logits(w, tokens):
    """GPT2LMHeadModel's forward: learned positions, LayerNorms, c_attn
    split into q, k and v, gelu_new, the tied head."""
    b, s = tokens.shape
    t = "transformer."

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (h,), w[name + ".weight"], w[name + ".bias"], eps)

    def conv1d(x, name):
        return x @ w[name + ".weight"] + w[name + ".bias"]

    x = w[t + "wte.weight"][tokens] + w[t + "wpe.weight"][:s]
    for i in range(layers):
        p = t + "h.%d." % i
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(h, -1)
        q, k, v = (z.view(b, s, heads, d).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + conv1d(attended, p + "attn.c_proj")
        up = conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")
        x = x + conv1d(torch.nn.functional.gelu(up, approximate="tanh"), p + "mlp.c_proj")
    return ln(x, t + "ln_f") @ w[t + "wte.weight"].T


def fused_logits(w, tokens):
    """GPTNeoXForCausalLM's (parallel residual: x + attn(ln1 x) + mlp(ln2 x),
    rotary on rotary_pct of each head, exact GELU), BloomForCausalLM's (ALiBi
    of build_alibi_tensor, the embeddings' LayerNorm, sequential, tanh GELU)
    and Falcon-7B's (one KV head, x + attn(ln x) + mlp(ln x), exact GELU)
    forwards."""
    b, s = tokens.shape
    neox = kind == "gpt_neox"
    t = "gpt_neox." if neox else "transformer."
    attention = "attention." if neox else "self_attention."

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (h,), w[name + ".weight"], w[name + ".bias"], eps)

    def linear(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    def rotate(x, rotated, base):
        inv = 1.0 / base ** (torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
        freqs = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], -1)
        part, rest = x[..., :rotated], x[..., rotated:]
        half = torch.cat([-part[..., rotated // 2:], part[..., :rotated // 2]], -1)
        return torch.cat([part * emb.cos() + half * emb.sin(), rest], -1)

    def slopes(n):
        p = 2 ** math.floor(math.log2(n))
        base = 2 ** (-(2 ** -(math.log2(p) - 3)))
        out = [base ** i for i in range(1, p + 1)]
        if p != n:
            extra = 2 ** (-(2 ** -(math.log2(2 * p) - 3)))
            out += [extra ** i for i in range(1, 1 + 2 * min(p, n - p), 2)]
        return torch.tensor(out, dtype=torch.float64)

    x = w[t + ("embed_in.weight" if neox else "word_embeddings.weight")][tokens]
    if kind == "bloom":
        x = ln(x, t + "word_embeddings_layernorm")
    for i in range(layers):
        p = t + ("layers.%d." if neox else "h.%d.") % i
        hin = ln(x, p + "input_layernorm")
        qkv = linear(hin, p + attention + "query_key_value")
        if kv == heads:
            qkv = qkv.view(b, s, heads, 3, d)
            q, k, v = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
        else:
            qkv = qkv.view(b, s, heads + 2, d)
            q, k, v = qkv[:, :, :heads], qkv[:, :, heads:heads + 1], qkv[:, :, heads + 1:]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if kind != "bloom":
            rotated = int(d * config.get("rotary_pct", 0.25)) if neox else d
            base = config.get("rotary_emb_base", 10000.0) if neox else config.get("rope_theta", 10000.0)
            q, k = rotate(q, rotated, base), rotate(k, rotated, base)
        k = k.expand(b, heads, s, d)
        v = v.expand(b, heads, s, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if kind == "bloom":
            scores = scores + slopes(heads)[:, None, None] * torch.arange(s, dtype=torch.float64)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, heads * d)
        attn = linear(attended, p + attention + "dense")

        def mlp(y):
            up = linear(y, p + "mlp.dense_h_to_4h")
            act = torch.nn.functional.gelu(up, approximate="tanh" if kind == "bloom" else "none")
            return linear(act, p + "mlp.dense_4h_to_h")

        if kind == "bloom":
            x = x + attn
            x = x + mlp(ln(x, p + "post_attention_layernorm"))
        elif neox:
            x = x + attn + mlp(ln(x, p + "post_attention_layernorm"))
        else:
            x = x + attn + mlp(hin)
    x = ln(x, t + ("final_layer_norm" if neox else "ln_f"))
    if tied:
        head = w[t + "word_embeddings.weight"]
    else:
        head = w["embed_out.weight" if neox else "lm_head.weight"]
    return x @ head.T


def layer_normed_logits(w, tokens):
    """OPTForCausalLM's (learned positions read at p + 2, ReLU) and
    Starcoder2ForCausalLM's (rotate_half rotary, grouped KV heads, tanh
    GELU) forwards: pre-norm LayerNorm blocks, every linear biased, the
    tied head; NemotronForCausalLM's (LayerNorm1P's weight + 1,
    rotate_half on partial_rotary_factor of each head, squared ReLU)."""
    b, s = tokens.shape
    opt = kind == "opt"
    nemotron = kind == "nemotron"
    t = "model.decoder." if opt else "model."

    def ln(x, name):
        weight = w[name + ".weight"] + 1 if nemotron else w[name + ".weight"]
        return torch.nn.functional.layer_norm(x, (h,), weight, w[name + ".bias"], eps)

    def linear(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    def rotate(x):
        r = int(d * config.get("partial_rotary_factor", 0.5)) if nemotron else d
        inv = 1.0 / theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
        freqs = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], -1)
        part, rest = x[..., :r], x[..., r:]
        half = torch.cat([-part[..., r // 2:], part[..., :r // 2]], -1)
        return torch.cat([part * emb.cos() + half * emb.sin(), rest], -1)

    x = w[t + "embed_tokens.weight"][tokens]
    if opt:
        x = x + w[t + "embed_positions.weight"][2:s + 2]
    for i in range(layers):
        p = t + "layers.%d." % i
        hin = ln(x, p + ("self_attn_layer_norm" if opt else "input_layernorm"))
        q = linear(hin, p + "self_attn.q_proj").view(b, s, heads, d).transpose(1, 2)
        k = linear(hin, p + "self_attn.k_proj").view(b, s, kv, d).transpose(1, 2)
        v = linear(hin, p + "self_attn.v_proj").view(b, s, kv, d).transpose(1, 2)
        if not opt:
            q, k = rotate(q), rotate(k)
        k = k[:, :, None].expand(b, kv, heads // kv, s, d).reshape(b, heads, s, d)
        v = v[:, :, None].expand(b, kv, heads // kv, s, d).reshape(b, heads, s, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, heads * d)
        x = x + linear(attended, p + ("self_attn.out_proj" if opt else "self_attn.o_proj"))
        m = ln(x, p + ("final_layer_norm" if opt else "post_attention_layernorm"))
        up = linear(m, p + ("fc1" if opt else "mlp.up_proj" if nemotron else "mlp.c_fc"))
        act = torch.relu(up) if opt or config.get("hidden_act") == "relu" else \
            torch.relu(up) ** 2 if nemotron else \
            torch.nn.functional.gelu(up, approximate="tanh")
        x = x + linear(act, p + ("fc2" if opt else "mlp.down_proj" if nemotron else "mlp.c_proj"))
    x = ln(x, t + ("final_layer_norm" if opt else "norm"))
    return x @ w[t + "embed_tokens.weight" if tied else "lm_head.weight"].T


def other_logits(w, tokens):
    """GPTJForCausalLM's (x + attn(ln_1 x) + mlp(ln_1 x), rotate_every_two
    on rotary_dim features, gelu_new, lm_head's bias), PhiForCausalLM's (the
    same block with rotate_half on partial_rotary_factor of each head),
    MptForCausalLM's (sequential, ALiBi slopes 2^-8k/n on the keys'
    positions, exact GELU, no biases), GPTBigCodeForCausalLM's (GPT-2's
    block with one KV head, tanh GELU) and GPTNeoForCausalLM's (GPT-2's
    block, scores q k^T unscaled, its local layers' keys i - j < window_size)
    forwards."""
    b, s = tokens.shape

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (h,), w[name + ".weight"], w.get(name + ".bias"), eps)

    def linear(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    def rotary(x, rotated, pairs):
        inv = 1.0 / config.get("rope_theta", 10000.0) ** \
            (torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
        freqs = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
        part, rest = x[..., :rotated], x[..., rotated:]
        if pairs:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
            turned = torch.stack((-part[..., 1::2], part[..., ::2]), dim=-1).flatten(-2)
        else:
            emb = torch.cat([freqs, freqs], -1)
            turned = torch.cat([-part[..., rotated // 2:], part[..., :rotated // 2]], -1)
        return torch.cat([part * emb.cos() + turned * emb.sin(), rest], -1)

    def attend(q, k, v, bias=None, scale=1 / math.sqrt(d), window=None):
        q, k, v = q.view(b, s, heads, d), k.view(b, s, kv, d), v.view(b, s, kv, d)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if kind == "gptj":
            q, k = rotary(q, config["rotary_dim"], True), rotary(k, config["rotary_dim"], True)
        elif kind == "phi":
            rotated = int(d * config.get("partial_rotary_factor", 0.5))
            q, k = rotary(q, rotated, False), rotary(k, rotated, False)
        k, v = k.expand(b, heads, s, d), v.expand(b, heads, s, d)
        scores = q @ k.transpose(-1, -2) * scale
        if bias is not None:
            scores = scores + bias
        hidden_keys = torch.ones(s, s, dtype=torch.bool).triu(1)
        if window:
            hidden_keys |= torch.ones(s, s, dtype=torch.bool).tril(-window)
        scores = scores.masked_fill(hidden_keys, float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, heads * d)

    gelu_new = lambda y: torch.nn.functional.gelu(y, approximate="tanh")
    if kind in ("gptj", "phi"):
        t = "transformer." if kind == "gptj" else "model."
        x = w[t + ("wte.weight" if kind == "gptj" else "embed_tokens.weight")][tokens]
        for i in range(layers):
            if kind == "gptj":
                p = t + "h.%d." % i
                hin = ln(x, p + "ln_1")
                qkv = [linear(hin, p + "attn.%s_proj" % n) for n in "qkv"]
                attn = linear(attend(*qkv), p + "attn.out_proj")
                mlp = linear(gelu_new(linear(hin, p + "mlp.fc_in")), p + "mlp.fc_out")
            else:
                p = t + "layers.%d." % i
                hin = ln(x, p + "input_layernorm")
                qkv = [linear(hin, p + "self_attn.%s_proj" % n) for n in "qkv"]
                attn = linear(attend(*qkv), p + "self_attn.dense")
                mlp = linear(gelu_new(linear(hin, p + "mlp.fc1")), p + "mlp.fc2")
            x = x + attn + mlp
        x = ln(x, t + ("ln_f" if kind == "gptj" else "final_layernorm"))
        return linear(x, "lm_head")
    t = "transformer."
    x = w[t + "wte.weight"][tokens]
    if kind in ("gpt_bigcode", "gpt_neo"):
        x = x + w[t + "wpe.weight"][:s]
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)],
                          dtype=torch.float64)
    for i in range(layers):
        if kind == "mpt":
            p = t + "blocks.%d." % i
            q, k, v = linear(ln(x, p + "norm_1"), p + "attn.Wqkv").chunk(3, -1)
            # MPT's build_attn_bias: each key's distance from the last
            # position, times -slope... as a row's constant it is the same
            # softmax as slope times the key's position.
            bias = slopes[:, None, None] * (torch.arange(s, dtype=torch.float64) - (s - 1))
            x = x + linear(attend(q, k, v, bias), p + "attn.out_proj")
            up = linear(ln(x, p + "norm_2"), p + "ffn.up_proj")
            x = x + linear(torch.nn.functional.gelu(up), p + "ffn.down_proj")
        elif kind == "gpt_neo":
            p = t + "h.%d." % i
            hin = ln(x, p + "ln_1")
            qkv = [linear(hin, p + "attn.attention.%s_proj" % n) for n in "qkv"]
            local = config["attention_layers"][i] == "local"
            attended = attend(*qkv, scale=1.0, window=config["window_size"] if local else None)
            x = x + linear(attended, p + "attn.attention.out_proj")
            x = x + linear(gelu_new(linear(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
        else:
            p = t + "h.%d." % i
            q, k, v = linear(ln(x, p + "ln_1"), p + "attn.c_attn").split([h, kv * d, kv * d], -1)
            x = x + linear(attend(q, k, v), p + "attn.c_proj")
            x = x + linear(gelu_new(linear(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, t + ("norm_f" if kind == "mpt" else "ln_f"))
    return x @ w[t + "wte.weight"].T


def exaone_sliding():
    """EXAONE 4's window (sliding_window, 4096 where the key is absent, none
    where null) and each layer's kind: layer_types, else every
    sliding_window_pattern-th layer full (Exaone4Config.__post_init__)."""
    window = config.get("sliding_window", 4096)
    kinds = config.get("layer_types")
    if kinds is None:
        pattern = config.get("sliding_window_pattern", 4) if window is not None else 0
        kinds = ["sliding_attention" if pattern and (i + 1) % pattern != 0 else "full_attention"
                 for i in range(layers)]
    return window, [k == "sliding_attention" for k in kinds]


def rope_layer(i):
    """Whether layer i turns the rotary embedding: SmolLM3's use_rope, a 1 in
    no_rope_layers, or not every no_rope_layer_interval-th layer; EXAONE 4's
    sliding layers alone where it has a window (its global NoPE)."""
    if kind == "exaone4":
        window, sliding = exaone_sliding()
        return window is None or sliding[i]
    if kind != "smollm3":
        return True
    flags = config.get("no_rope_layers")
    if flags is not None:
        return bool(flags[i])
    return (i + 1) % config.get("no_rope_layer_interval", 4) != 0


def rope_frequencies(dim, seq):
    """The inverse frequencies and the cos / sin scale of transformers'
    ROPE_INIT_FUNCTIONS for the config's rope_scaling, as the rotary
    embedding's forward uses them for a sequence of `seq` positions: default,
    linear (_compute_linear_scaling_rope_parameters), llama3
    (_compute_llama3_parameters), yarn (_compute_yarn_parameters), longrope
    (_compute_longrope_parameters; longrope_frequency_update picks the long
    factors past the original context), dynamic
    (_compute_dynamic_ntk_parameters at seq_len = seq past
    max_position_embeddings)."""
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    inv = 1.0 / theta ** exponents
    rs = config.get("rope_scaling") or {}
    kind_ = rs.get("rope_type", rs.get("type", "default"))
    if kind_ in ("longrope", "su"):
        if "original_max_position_embeddings" in config:
            old = config["original_max_position_embeddings"]
            factor = config["max_position_embeddings"] / old
        else:
            old, factor = config["max_position_embeddings"], rs.get("factor", 1.0)
        scale = rs.get("attention_factor")
        if scale is None:
            scale = math.sqrt(1 + math.log(factor) / math.log(old)) if factor > 1 else 1.0
        ext = torch.tensor(rs["long_factor"] if seq > old else rs["short_factor"],
                           dtype=torch.float64)
        return 1.0 / (ext * theta ** exponents), scale
    if kind_ == "dynamic":
        most = config["max_position_embeddings"]
        length = seq if seq > most else most
        base = theta * ((rs["factor"] * length / most) - (rs["factor"] - 1)) ** (dim / (dim - 2))
        return 1.0 / base ** exponents, 1.0
    if kind_ == "linear":
        return inv / rs["factor"], 1.0
    if kind_ == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        llama = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * llama / factor + smooth * llama
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, smoothed, llama), 1.0
    if kind_ == "yarn":
        factor = rs["factor"]
        old = rs.get("original_max_position_embeddings") or config["max_position_embeddings"]
        fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
        scale = rs.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

        def correction(rotations):
            return (dim * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low, high = math.floor(correction(fast)), math.ceil(correction(slow))
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrapolation = 1 - ramp
        return inv / factor * (1 - extrapolation) + inv * extrapolation, scale
    return inv, 1.0


def logits():
    w = read_checkpoint()
    if kind == "internlm2":
        w = internlm2_as_llama(w)
    tokens = torch.from_numpy(np.load(args[3]))
    np.save(args[4], forward(w, tokens).float().numpy())


def sgd_step():
    """One step of plain SGD (no momentum, decay or clipping) from the
    checkpoint on the first --batch windows of --seq + 1 tokens of DATA.npy
    (each window starting --seq after the last, as weft train reads them),
    the mean next-token cross entropy; compares every tensor of AFTER (an
    export of weft train's step) with the checkpoint's minus lr times its
    gradient from torch's autograd, within 1e-5 of the tensor's largest
    value."""
    after_dir = args[4]
    lr, seq, batch = float(flags["lr"]), int(flags["seq"]), int(flags["batch"])
    w = read_checkpoint()
    for tensor in w.values():
        tensor.requires_grad_(True)
    data = np.load(args[3]).astype(np.int64)
    rows = torch.from_numpy(np.stack([data[i * seq:i * seq + seq + 1] for i in range(batch)]))
    out = forward(w, rows[:, :seq])
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), rows[:, 1:].reshape(-1))
    loss.backward()
    after = read_checkpoint(after_dir)
    words, moved = ["sgd"], 0.0
    for name, tensor in w.items():
        if tensor.grad is None:
            continue
        want = tensor.detach() - lr * tensor.grad
        moved = max(moved, float((lr * tensor.grad).abs().max()))
        d = float((after[name] - want).abs().max())
        if d > 1e-5 * max(1.0, float(tensor.detach().abs().max())):
            words.append("DIFFER %s %g" % (name, d))
    # A step too small to tell a wrong gradient from a right one proves nothing.
    words.append("equal" if len(words) == 1 and moved > 1e-3 else "moved %g" % moved)
    print(" ".join(words))


def forward(w, tokens):
    """The family's logits of `tokens` from the tensors `w`."""
    if other:
        return other_logits(w, tokens)
    if gpt2 or fused or layer_normed:
        return gpt2_logits(w, tokens) if gpt2 else \
            fused_logits(w, tokens) if fused else layer_normed_logits(w, tokens)
    b, s = tokens.shape

    def rms(x, weight):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y * (1.0 + weight) if gemma else y * weight

    def rotate_glm(x):
        # GLM's: the first partial_rotary_factor of each head, each pair of
        # adjacent features turned (cos and sin repeat_interleave'd);
        # ERNIE 4.5's the same on the whole head.
        r = d if ernie else int(d * config.get("partial_rotary_factor", 0.5))
        inv, scale = rope_frequencies(r, s)
        freqs = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
        cos = freqs.cos().repeat_interleave(2, -1) * scale
        sin = freqs.sin().repeat_interleave(2, -1) * scale
        xr, xp = x[..., :r], x[..., r:]
        turned = torch.stack((-xr[..., 1::2], xr[..., 0::2]), -1).flatten(-2)
        return torch.cat([xr * cos + turned * sin, xp], -1)

    def rotate(x):
        if glm or ernie:
            return rotate_glm(x)
        inv, scale = rope_frequencies(d, s)
        freqs = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], -1)
        half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
        return x * emb.cos() * scale + half * emb.sin() * scale

    def linear(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    x = w["model.embed_tokens.weight"][tokens]
    if gemma:
        x = x * math.sqrt(h)
    for i in range(layers):
        p = "model.layers.%d." % i
        hin = x if kind in ("olmo2", "exaone4") else rms(x, w[p + "input_layernorm.weight"])
        if kind == "phi3":
            qkv = linear(hin, p + "self_attn.qkv_proj")
            q, k, v = qkv.split([heads * d, kv * d, kv * d], -1)
        else:
            q, k, v = (linear(hin, p + "self_attn.%s_proj" % n) for n in "qkv")
        if kind == "olmo2":
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q = q.view(b, s, heads, d)
        k = k.view(b, s, kv, d)
        if kind in ("qwen3", "exaone4"):
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.view(b, s, kv, d).transpose(1, 2)
        if rope_layer(i):
            q, k = rotate(q), rotate(k)
        k = k[:, :, None].expand(b, kv, heads // kv, s, d).reshape(b, heads, s, d)
        v = v[:, :, None].expand(b, kv, heads // kv, s, d).reshape(b, heads, s, d)
        scale = config.get("query_pre_attn_scalar", d) ** -0.5
        scores = q @ k.transpose(-1, -2) * scale
        hidden_keys = torch.ones(s, s, dtype=torch.bool).triu(1)
        if kind == "gemma2":
            # Gemma 2's soft-capped scores; its even layers slide (a key
            # i - j >= sliding_window behind is hidden).
            cap = config["attn_logit_softcapping"]
            scores = cap * torch.tanh(scores / cap)
            if i % 2 == 0:
                hidden_keys |= torch.ones(s, s, dtype=torch.bool).tril(-config["sliding_window"])
        if kind == "exaone4":
            window, sliding = exaone_sliding()
            if window is not None and sliding[i]:
                hidden_keys |= torch.ones(s, s, dtype=torch.bool).tril(-window)
        scores = scores.masked_fill(hidden_keys, float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, heads * d)
        out = linear(attended, p + "self_attn.o_proj")
        if kind == "glm4":
            x = x + rms(out, w[p + "post_self_attn_layernorm.weight"])
            m = rms(x, w[p + "post_attention_layernorm.weight"])
        elif kind in ("olmo2", "exaone4"):
            x = x + rms(out, w[p + "post_attention_layernorm.weight"])
            m = x
        elif kind == "gemma2":
            x = x + rms(out, w[p + "post_attention_layernorm.weight"])
            m = rms(x, w[p + "pre_feedforward_layernorm.weight"])
        else:
            x = x + out
            m = rms(x, w[p + "post_attention_layernorm.weight"])
        if kind in ("phi3", "glm", "glm4"):
            gate, up = linear(m, p + "mlp.gate_up_proj").chunk(2, -1)
        else:
            gate, up = linear(m, p + "mlp.gate_proj"), linear(m, p + "mlp.up_proj")
        act = torch.nn.functional.gelu(gate, approximate="tanh") if gemma \
            else torch.nn.functional.silu(gate)
        down = linear(act * up, p + "mlp.down_proj")
        if kind == "glm4":
            down = rms(down, w[p + "post_mlp_layernorm.weight"])
        x = x + (rms(down, w[p + "post_feedforward_layernorm.weight"])
                 if kind in ("olmo2", "gemma2", "exaone4") else down)
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    out = x @ head.T
    if kind == "gemma2":
        cap = config["final_logit_softcapping"]
        out = cap * torch.tanh(out / cap)
    return out


if mode == "write":
    write()
elif mode == "sgd-step":
    sgd_step()
else:
    logits()
