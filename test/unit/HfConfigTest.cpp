//===- HfConfigTest.cpp - Models from Hugging Face config.json ------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//
//
// The published configs of families whose keys differ from LLaMA's (their
// sizes and parameter counts as their authors give them), and the layer
// patterns and errors the reader decides.
//
//===----------------------------------------------------------------------===//

#include "weft/Planner/HfConfig.h"
#include "weft/Planner/Model.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace weft;
using namespace weft::planner;

namespace {

plan::ModelSpec read(llvm::StringRef text) {
  llvm::Expected<plan::ModelSpec> spec =
      modelFromHfConfigText(text, "config.json");
  if (!spec) {
    ADD_FAILURE() << llvm::toString(spec.takeError());
    return {};
  }
  return *spec;
}

std::string error(llvm::StringRef text) {
  llvm::Expected<plan::ModelSpec> spec =
      modelFromHfConfigText(text, "config.json");
  if (spec)
    return "";
  return llvm::toString(spec.takeError());
}

TEST(HfConfig, FalconNewDecoderArchitecture) {
  // Falcon 40B's shape: grouped KV heads of its own key, the MLP 4 x hidden,
  // no context in the file (2,048 tokens); with an output layer of its own,
  // the 41.8 B parameters published.
  const char *untied = R"({"model_type": "falcon",
      "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
      "num_kv_heads": 8, "new_decoder_architecture": true, "parallel_attn": true,
      "tie_word_embeddings": false, "vocab_size": 65024})";
  plan::ModelSpec spec = read(untied);
  EXPECT_EQ(spec.kv_heads(), 8);
  EXPECT_EQ(spec.ffn_hidden(), 4 * 8192);
  EXPECT_EQ(spec.seq_len(), 2048);
  EXPECT_FALSE(spec.tied_embeddings());
  EXPECT_NEAR(parameterCount(spec) / 1e9, 41.8, 0.1);
  // Without the key, FalconConfig's default: tied. Without
  // new_decoder_architecture, multi_query's one KV head (its default).
  plan::ModelSpec tied = read(R"({"model_type": "falcon", "hidden_size": 4544,
      "num_attention_heads": 71, "num_hidden_layers": 32, "vocab_size": 65024})");
  EXPECT_TRUE(tied.tied_embeddings());
  EXPECT_EQ(tied.kv_heads(), 1);
  plan::ModelSpec multi = read(R"({"model_type": "falcon", "hidden_size": 4544,
      "num_attention_heads": 71, "num_hidden_layers": 32, "vocab_size": 65024,
      "multi_query": false})");
  EXPECT_EQ(multi.kv_heads(), 71);
}

TEST(HfConfig, MptBloomAndStarCoderNames) {
  // mosaicml/mpt-7b: d_model, n_heads, n_layers, expansion_ratio,
  // max_seq_len; 6.7 B parameters.
  plan::ModelSpec mpt = read(R"({"model_type": "mpt", "d_model": 4096,
      "n_heads": 32, "n_layers": 32, "expansion_ratio": 4, "max_seq_len": 2048,
      "vocab_size": 50432, "attn_config": {"alibi": true, "attn_impl": "torch"}})");
  EXPECT_EQ(mpt.hidden(), 4096);
  EXPECT_EQ(mpt.kv_heads(), 32);
  EXPECT_EQ(mpt.ffn_hidden(), 16384);
  EXPECT_EQ(mpt.seq_len(), 2048);
  EXPECT_EQ(mpt.ffn_kind(), plan::FFN_GELU);
  EXPECT_TRUE(mpt.alibi());
  EXPECT_EQ(mpt.rope_theta(), 0);
  std::string alibi = error(R"({"model_type": "mpt", "d_model": 64,
      "n_heads": 4, "n_layers": 2, "vocab_size": 100,
      "attn_config": {"alibi": "yes"}})");
  EXPECT_NE(alibi.find("\"attn_config.alibi\" is not true or false"),
            std::string::npos)
      << alibi;
  // no_bias (true by default): LayerNorms and linears without biases, which
  // make the count MosaicML's to the parameter.
  EXPECT_EQ(mpt.norm(), plan::NORM_LAYER_NO_BIAS);
  EXPECT_TRUE(mpt.no_linear_bias());
  EXPECT_EQ(int64_t(parameterCount(mpt)), 6649286656);
  // bigscience/bloom: n_layer, n_head; no context in the file (ALiBi).
  plan::ModelSpec bloom = read(R"({"model_type": "bloom", "hidden_size": 14336,
      "n_head": 112, "n_layer": 70, "vocab_size": 250880})");
  EXPECT_EQ(bloom.seq_len(), 2048);
  EXPECT_TRUE(bloom.alibi());
  // Its word_embeddings_layernorm makes the count BigScience's to the
  // parameter: 176,247,271,424.
  EXPECT_TRUE(bloom.embedding_norm());
  EXPECT_EQ(int64_t(parameterCount(bloom)), 176247271424);
  EXPECT_FALSE(mpt.embedding_norm());
  // bigcode/starcoder: multi-query attention by default.
  plan::ModelSpec starcoder = read(R"({"model_type": "gpt_bigcode",
      "n_embd": 6144, "n_head": 48, "n_layer": 40, "n_inner": 24576,
      "n_positions": 8192, "vocab_size": 49152,
      "activation_function": "gelu_pytorch_tanh"})");
  EXPECT_EQ(starcoder.kv_heads(), 1);
  EXPECT_EQ(starcoder.seq_len(), 8192);
  EXPECT_NEAR(parameterCount(starcoder) / 1e9, 15.5, 0.2);
}

// Norms and biases that are not the FFN kind's: Cohere's LayerNorm without
// a bias (with its interleaved rotary embedding and logit_scale), OLMo's
// non-parametric LayerNorm, StableLM's LayerNorm with a bias, Falcon's
// linears without biases and one norm for its parallel branches.
TEST(HfConfig, NormsAndBiases) {
  // CohereForAI/c4ai-command-r-v01: 35.0 B parameters.
  plan::ModelSpec cohere = read(R"({"model_type": "cohere",
      "hidden_size": 8192, "num_attention_heads": 64,
      "num_key_value_heads": 64, "num_hidden_layers": 40,
      "intermediate_size": 22528, "vocab_size": 256000,
      "max_position_embeddings": 8192, "logit_scale": 0.0625,
      "layer_norm_eps": 1e-05, "rope_theta": 8000000.0,
      "tie_word_embeddings": true})");
  EXPECT_EQ(cohere.norm(), plan::NORM_LAYER_NO_BIAS);
  EXPECT_EQ(normKind(cohere), plan::NORM_LAYER_NO_BIAS);
  EXPECT_TRUE(cohere.rotary_interleaved());
  EXPECT_TRUE(cohere.parallel_block());
  EXPECT_FLOAT_EQ(cohere.logit_divisor(), 16.0f);
  EXPECT_NEAR(parameterCount(cohere) / 1e9, 35.0, 0.1);
  // allenai/OLMo-7B-hf: no norm parameters at all (6,888,095,744, AI2's
  // count).
  plan::ModelSpec olmo = read(R"({"model_type": "olmo", "hidden_size": 4096,
      "num_attention_heads": 32, "num_hidden_layers": 32,
      "intermediate_size": 11008, "vocab_size": 50304,
      "max_position_embeddings": 2048, "tie_word_embeddings": false})");
  EXPECT_EQ(normKind(olmo), plan::NORM_LAYER_NO_AFFINE);
  EXPECT_EQ(olmo.qkv_clip(), 0.0f);
  // OLMo-1B-0724-hf's clip_qkv: its QKV projection clamped to [-8, 8].
  plan::ModelSpec clipped = read(R"({"model_type": "olmo",
      "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 16,
      "intermediate_size": 8192, "vocab_size": 50304, "clip_qkv": 8.0})");
  EXPECT_FLOAT_EQ(clipped.qkv_clip(), 8.0f);
  EXPECT_EQ(int64_t(parameterCount(olmo)), 6888095744);
  // stabilityai/stablelm-2-1_6b: LayerNorm with a bias, QKV biases
  // (1,644,515,328, Stability's count).
  plan::ModelSpec stablelm = read(R"({"model_type": "stablelm",
      "hidden_size": 2048, "num_attention_heads": 32,
      "num_key_value_heads": 32, "num_hidden_layers": 24,
      "intermediate_size": 5632, "vocab_size": 100352,
      "max_position_embeddings": 4096, "partial_rotary_factor": 0.25,
      "use_qkv_bias": true, "tie_word_embeddings": false})");
  EXPECT_EQ(normKind(stablelm), plan::NORM_LAYER);
  EXPECT_TRUE(stablelm.qkv_bias());
  EXPECT_EQ(int64_t(parameterCount(stablelm)), 1644515328);
  // tiiuae/falcon-7b: bias false; LayerNorms keep theirs.
  plan::ModelSpec falcon = read(R"({"model_type": "falcon",
      "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
      "vocab_size": 65024, "bias": false, "multi_query": true,
      "parallel_attn": true, "tie_word_embeddings": true})");
  EXPECT_TRUE(falcon.no_linear_bias());
  EXPECT_FALSE(hasLinearBiases(falcon));
  EXPECT_EQ(normKind(falcon), plan::NORM_LAYER);
  // One input_layernorm for both branches: TII's 6,921,720,704.
  EXPECT_TRUE(falcon.one_block_norm());
  EXPECT_EQ(int64_t(parameterCount(falcon)), 6921720704);
  // GPT-2 keeps its biases.
  plan::ModelSpec gpt2 = read(R"({"model_type": "gpt2", "n_embd": 768,
      "n_head": 12, "n_layer": 12, "vocab_size": 50257, "n_positions": 1024})");
  EXPECT_TRUE(hasLinearBiases(gpt2));
  EXPECT_EQ(normKind(gpt2), plan::NORM_LAYER);
}

// Where the norms lie: OLMo 2's after each branch and over the whole QK
// projection, Command R+'s and StableLM 2 12B's QK norms with a weight per
// head.
TEST(HfConfig, NormPlacement) {
  // allenai/OLMo-2-1124-7B (7.30 B): per layer 4 x 4096^2 + 3 x 4096 x
  // 11008 and four RMSNorms of 4096 (two after the branches, q_norm and
  // k_norm over all 32 heads' 128 features); two embedding tables and the
  // final norm.
  plan::ModelSpec olmo2 = read(R"({"model_type": "olmo2",
      "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 32, "num_hidden_layers": 32,
      "intermediate_size": 11008, "vocab_size": 100352,
      "max_position_embeddings": 4096, "rms_norm_eps": 1e-06,
      "rope_theta": 500000, "tie_word_embeddings": false})");
  EXPECT_TRUE(olmo2.post_norms());
  EXPECT_FALSE(olmo2.sandwich_norms());
  EXPECT_TRUE(olmo2.qk_norm());
  EXPECT_EQ(olmo2.qk_norm_layout(), plan::QK_NORM_WHOLE);
  EXPECT_EQ(normKind(olmo2), plan::NORM_RMS);
  EXPECT_EQ(int64_t(parameterCount(olmo2)),
            int64_t(32) * (4 * 4096LL * 4096 + 3 * 4096LL * 11008 + 4 * 4096) +
                2 * 100352LL * 4096 + 4096);
  EXPECT_EQ(int64_t(parameterCount(olmo2)), 7298617344);
  // allenai/Olmo-3-1025-7B's pattern without layer_types: three layers of
  // a 4,096-token window, then a global one.
  plan::ModelSpec olmo3 = read(R"({"model_type": "olmo3",
      "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 32, "num_hidden_layers": 32,
      "intermediate_size": 11008, "vocab_size": 100278,
      "max_position_embeddings": 65536, "sliding_window": 4096})");
  EXPECT_TRUE(olmo3.post_norms());
  EXPECT_EQ(olmo3.qk_norm_layout(), plan::QK_NORM_WHOLE);
  EXPECT_EQ(olmo3.mixed_sliding_window(), 4096);
  EXPECT_EQ(olmo3.global_every(), 4);
  EXPECT_EQ(olmo3.windowed_layers(), 24);
  // CohereForAI/c4ai-command-r-plus (104 B): use_qk_norm, a LayerNorm
  // weight of [heads, head_dim] for the queries and [kv_heads, head_dim]
  // for the keys.
  plan::ModelSpec plus = read(R"({"model_type": "cohere",
      "hidden_size": 12288, "num_attention_heads": 96,
      "num_key_value_heads": 8, "num_hidden_layers": 64,
      "intermediate_size": 33792, "vocab_size": 256000,
      "max_position_embeddings": 8192, "logit_scale": 0.8333333333333334,
      "use_qk_norm": true, "rope_theta": 75000000.0,
      "tie_word_embeddings": true})");
  EXPECT_TRUE(plus.qk_norm());
  EXPECT_EQ(plus.qk_norm_layout(), plan::QK_NORM_PER_HEAD);
  EXPECT_FALSE(plus.post_norms());
  EXPECT_EQ(int64_t(parameterCount(plus)),
            int64_t(64) * (12288LL * 112 * 128 + 12288LL * 12288 +
                           3 * 12288LL * 33792 + 12288 + 104 * 128) +
                256000LL * 12288 + 12288);
  EXPECT_NEAR(parameterCount(plus) / 1e9, 104, 0.5);
  // stabilityai/stablelm-2-12b (12.1 B): qk_layernorm, one norm (with a
  // bias) for its parallel branches.
  plan::ModelSpec stablelm = read(R"({"model_type": "stablelm",
      "hidden_size": 5120, "num_attention_heads": 32,
      "num_key_value_heads": 8, "num_hidden_layers": 40,
      "intermediate_size": 13824, "vocab_size": 100352,
      "max_position_embeddings": 4096, "partial_rotary_factor": 0.25,
      "qk_layernorm": true, "use_parallel_residual": true,
      "tie_word_embeddings": false})");
  EXPECT_EQ(stablelm.qk_norm_layout(), plan::QK_NORM_PER_HEAD);
  EXPECT_NEAR(parameterCount(stablelm) / 1e9, 12.1, 0.1);
  // Without the keys, neither has a QK norm.
  EXPECT_FALSE(read(R"({"model_type": "cohere", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2,
      "intermediate_size": 128, "vocab_size": 100})")
                   .qk_norm());
}

// ALiBi's slopes as BLOOM's build_alibi_tensor (and MPT's gen_slopes)
// compute them: 2^(-8k/n) for a power of two n; for 112 heads (BLOOM-176B)
// 2^(-k/8) for k = 1 .. 64, then 2^(-k/16) for the first 48 odd k.
TEST(HfConfig, AlibiSlopes) {
  std::vector<float> eight = alibiSlopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int k = 1; k <= 8; ++k)
    EXPECT_FLOAT_EQ(eight[size_t(k - 1)], std::exp2(-float(k)));
  std::vector<float> bloom = alibiSlopes(112);
  ASSERT_EQ(bloom.size(), 112u);
  EXPECT_FLOAT_EQ(bloom[0], std::exp2(-1.0f / 8));
  EXPECT_FLOAT_EQ(bloom[63], std::exp2(-8.0f));
  EXPECT_FLOAT_EQ(bloom[64], std::exp2(-1.0f / 16));
  EXPECT_FLOAT_EQ(bloom[65], std::exp2(-3.0f / 16));
  EXPECT_FLOAT_EQ(bloom[111], std::exp2(-95.0f / 16));
  std::vector<float> six = alibiSlopes(6);
  EXPECT_EQ(six, (std::vector<float>{0.25f, 0.0625f, 0.015625f, 0.00390625f,
                                     0.5f, 0.125f}));
  EXPECT_TRUE(alibiSlopes(0).empty());
}

TEST(HfConfig, LayerTypesPattern) {
  const char *periodic = R"({"model_type": "gemma3_text", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 6, "vocab_size": 100,
      "sliding_window": 512, "layer_types": ["sliding_attention",
      "sliding_attention", "full_attention", "sliding_attention",
      "sliding_attention", "full_attention"]})";
  plan::ModelSpec spec = read(periodic);
  EXPECT_EQ(spec.mixed_sliding_window(), 512);
  EXPECT_EQ(spec.global_every(), 3);
  EXPECT_EQ(spec.windowed_layers(), 4);
  EXPECT_EQ(spec.ffn_kind(), plan::FFN_GEGLU);

  std::string irregular = error(R"({"model_type": "gemma3_text",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
      "vocab_size": 100, "sliding_window": 512, "layer_types":
      ["sliding_attention", "full_attention", "full_attention",
      "sliding_attention"]})");
  EXPECT_NE(irregular.find("other than every N-th full"), std::string::npos)
      << irregular;
  std::string counted = error(R"({"model_type": "mistral", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 100,
      "layer_types": ["full_attention"]})");
  EXPECT_NE(counted.find("lists 1 layers of 4"), std::string::npos) << counted;
  std::string chunked = error(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 100,
      "layer_types": ["chunked_attention"]})");
  EXPECT_NE(chunked.find("'chunked_attention'"), std::string::npos) << chunked;
}

TEST(HfConfig, GptNeo) {
  // EleutherAI/gpt-neo-125M: GPT-2's block with global and local (window
  // 256) layers alternating from a global first, unscaled scores, no
  // biases on q, k and v but one on out_proj; 125,198,592 parameters.
  plan::ModelSpec neo = read(R"({"model_type": "gpt_neo",
      "activation_function": "gelu_new", "attention_types":
      [[["global", "local"], 6]], "hidden_size": 768,
      "intermediate_size": null, "layer_norm_epsilon": 1e-05,
      "max_position_embeddings": 2048, "num_heads": 12, "num_layers": 12,
      "vocab_size": 50257, "window_size": 256})");
  EXPECT_EQ(neo.mixed_sliding_window(), 256);
  EXPECT_EQ(neo.global_every(), 2);
  EXPECT_TRUE(neo.global_first());
  EXPECT_EQ(neo.windowed_layers(), 6);
  EXPECT_EQ(layerWindow(neo, 0), 0);
  EXPECT_EQ(layerWindow(neo, 1), 256);
  EXPECT_EQ(layerWindow(neo, 11), 256);
  EXPECT_FLOAT_EQ(neo.attention_scale(), 1.0f);
  EXPECT_TRUE(neo.no_attention_bias());
  EXPECT_TRUE(neo.attention_output_bias());
  EXPECT_TRUE(neo.tied_embeddings());
  EXPECT_EQ(neo.rope_theta(), 0);
  EXPECT_EQ(neo.ffn_hidden(), 4 * 768);
  EXPECT_EQ(int64_t(parameterCount(neo)), 125198592);
  // attention_layers, where given, is the list; a period of three with the
  // first global leaves two of four windowed (layers 1 and 2).
  plan::ModelSpec three = read(R"({"model_type": "gpt_neo",
      "hidden_size": 64, "num_heads": 4, "num_layers": 4, "vocab_size": 100,
      "window_size": 8, "attention_layers": ["global", "local", "local",
      "global"]})");
  EXPECT_EQ(three.global_every(), 3);
  EXPECT_TRUE(three.global_first());
  EXPECT_EQ(three.windowed_layers(), 2);
  EXPECT_EQ(layerWindow(three, 3), 0);
  EXPECT_EQ(windowedLayerCount(13, 2, true), 6);
  EXPECT_EQ(windowedLayerCount(13, 2, false), 7);
  // What is not every N-th global, a kind it does not build, a malformed
  // list: errors naming the key.
  std::string irregular = error(R"({"model_type": "gpt_neo",
      "hidden_size": 64, "num_heads": 4, "num_layers": 5, "vocab_size": 100,
      "window_size": 8, "attention_types": [[["global", "local"], 2],
      [["local"], 1]]})");
  EXPECT_NE(irregular.find("\"attention_types\" mixes full and windowed "
                           "layers other than every N-th full"),
            std::string::npos)
      << irregular;
  std::string sparse = error(R"({"model_type": "gpt_neo", "hidden_size": 64,
      "num_heads": 4, "num_layers": 2, "vocab_size": 100, "window_size": 8,
      "attention_layers": ["global", "sparse"]})");
  EXPECT_NE(sparse.find("\"attention_layers\" has a layer of 'sparse': Weft "
                        "plans global and local layers"),
            std::string::npos)
      << sparse;
  std::string malformed = error(R"({"model_type": "gpt_neo",
      "hidden_size": 64, "num_heads": 4, "num_layers": 2, "vocab_size": 100,
      "window_size": 8, "attention_types": [["global", 2]]})");
  EXPECT_NE(malformed.find("is not a list of [[kinds], repeats] pairs"),
            std::string::npos)
      << malformed;
  std::string counted = error(R"({"model_type": "gpt_neo",
      "hidden_size": 64, "num_heads": 4, "num_layers": 3, "vocab_size": 100,
      "window_size": 8, "attention_types": [[["global", "local"], 1]]})");
  EXPECT_NE(counted.find("\"attention_types\" lists 2 layers of 3"),
            std::string::npos)
      << counted;
  // Repeats far past the layers are an error, not an expansion.
  std::string many = error(R"({"model_type": "gpt_neo",
      "hidden_size": 64, "num_heads": 4, "num_layers": 2, "vocab_size": 100,
      "window_size": 8, "attention_types": [[["global", "local"],
      4000000000000000000]]})");
  EXPECT_NE(many.find("\"attention_types\" lists more than the 2 layers"),
            std::string::npos)
      << many;
}

TEST(HfConfig, Nemotron) {
  // nvidia/Nemotron-4-Minitron-4B's shape: a squared-ReLU MLP of two
  // matrices, rotary on half of each 128-wide head, no biases, an untied
  // head; 4.19 B parameters.
  plan::ModelSpec minitron = read(R"({"model_type": "nemotron",
      "hidden_size": 3072, "intermediate_size": 9216,
      "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
      "num_hidden_layers": 32, "vocab_size": 256000,
      "max_position_embeddings": 4096, "hidden_act": "relu2",
      "norm_eps": 1e-05, "rope_theta": 10000})");
  EXPECT_EQ(minitron.ffn_kind(), plan::FFN_GELU);
  EXPECT_EQ(minitron.ffn_activation(), kSquaredRelu);
  EXPECT_FLOAT_EQ(minitron.rotary_percent(), 0.5f);
  EXPECT_FALSE(minitron.rotary_interleaved());
  EXPECT_TRUE(minitron.no_linear_bias());
  EXPECT_FALSE(minitron.qkv_bias());
  EXPECT_FALSE(minitron.tied_embeddings());
  EXPECT_EQ(minitron.norm(), plan::NORM_DEFAULT); // a GELU kind's LayerNorm
  EXPECT_TRUE(minitron.norm_one_plus()); // LayerNorm1P
  EXPECT_NEAR(parameterCount(minitron) / 1e9, 4.19, 0.005);
  // attention_bias biases the four projections, mlp_bias the MLP's two.
  plan::ModelSpec biased = read(R"({"model_type": "nemotron",
      "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
      "num_hidden_layers": 1, "vocab_size": 100, "attention_bias": true,
      "mlp_bias": true})");
  plan::ModelSpec plain = read(R"({"model_type": "nemotron",
      "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
      "num_hidden_layers": 1, "vocab_size": 100})");
  EXPECT_EQ(int64_t(parameterCount(biased) - parameterCount(plain)),
            3 * 64 + 64 + 96 + 64);
  std::string unknown = error(R"({"model_type": "nemotron",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 100, "hidden_act": "relu6"})");
  EXPECT_NE(unknown.find("Weft builds GELU, ReLU and squared ReLU"),
            std::string::npos)
      << unknown;
}

TEST(HfConfig, Ernie45) {
  // baidu/ERNIE-4.5-0.3B-PT's shape with the keys its config class fills
  // in left out: head_dim 128 (not hidden / heads = 64), rope_theta
  // 500,000, a tied head, no biases; 360,748,032 parameters (0.36 B).
  plan::ModelSpec ernie = read(R"({"model_type": "ernie4_5",
      "hidden_size": 1024, "intermediate_size": 3072,
      "num_attention_heads": 16, "num_key_value_heads": 2,
      "num_hidden_layers": 18, "vocab_size": 103424,
      "max_position_embeddings": 131072, "rms_norm_eps": 1e-05})");
  EXPECT_EQ(ernie.ffn_kind(), plan::FFN_SWIGLU);
  EXPECT_EQ(ernie.head_dim(), 128);
  EXPECT_DOUBLE_EQ(ernie.rope_theta(), 500000.0);
  EXPECT_TRUE(ernie.rotary_interleaved());
  EXPECT_FLOAT_EQ(ernie.rotary_percent(), 0.0f); // the whole head
  EXPECT_TRUE(ernie.tied_embeddings());
  EXPECT_FALSE(ernie.qkv_bias());
  EXPECT_FALSE(ernie.mlp_bias());
  EXPECT_EQ(int64_t(parameterCount(ernie)), 360748032);
  // use_bias biases all seven projections.
  plan::ModelSpec biased = read(R"({"model_type": "ernie4_5",
      "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 1,
      "vocab_size": 100, "use_bias": true})");
  plan::ModelSpec plain = read(R"({"model_type": "ernie4_5",
      "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 1,
      "vocab_size": 100})");
  EXPECT_TRUE(biased.qkv_bias());
  EXPECT_TRUE(biased.attention_output_bias());
  EXPECT_TRUE(biased.mlp_bias());
  EXPECT_EQ(int64_t(parameterCount(biased) - parameterCount(plain)),
            4 * 32 + 2 * 2 * 32 + 64 + 2 * 96 + 64);
  // A null head_dim is hidden / heads.
  plan::ModelSpec natural = read(R"({"model_type": "ernie4_5",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 100, "head_dim": null})");
  EXPECT_EQ(natural.head_dim(), 0);
}

TEST(HfConfig, Exaone4) {
  // EXAONE 4's hybrid attention: a window of 4,096 where the config has no
  // sliding_window key, every fourth layer global and without rotary.
  plan::ModelSpec hybrid = read(R"({"model_type": "exaone4",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
      "intermediate_size": 96, "vocab_size": 100})");
  EXPECT_EQ(hybrid.mixed_sliding_window(), 4096);
  EXPECT_EQ(hybrid.global_every(), 4);
  EXPECT_FALSE(hybrid.global_first());
  ASSERT_EQ(hybrid.nope_layers_size(), 2);
  EXPECT_EQ(hybrid.nope_layers(0), 3);
  EXPECT_EQ(hybrid.nope_layers(1), 7);
  EXPECT_TRUE(hybrid.post_norms());
  EXPECT_TRUE(hybrid.qk_norm());
  EXPECT_EQ(hybrid.qk_norm_layout(), plan::QK_NORM_SHARED);
  EXPECT_FALSE(hybrid.tied_embeddings());
  // Letters alone (without layer_types) spell the same pattern.
  plan::ModelSpec letters = read(R"({"model_type": "exaone4",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
      "intermediate_size": 96, "vocab_size": 100,
      "sliding_window_pattern": "LLLG"})");
  EXPECT_EQ(letters.SerializeAsString(), hybrid.SerializeAsString());
  // A null window: every layer global, every layer turning.
  plan::ModelSpec global = read(R"({"model_type": "exaone4",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
      "intermediate_size": 96, "vocab_size": 100, "sliding_window": null,
      "layer_types": ["full_attention", "full_attention", "full_attention",
      "full_attention", "full_attention", "full_attention",
      "full_attention", "full_attention"]})");
  EXPECT_EQ(global.mixed_sliding_window(), 0);
  EXPECT_EQ(global.sliding_window(), 0);
  EXPECT_EQ(global.nope_layers_size(), 0);
  std::string zero = error(R"({"model_type": "exaone4", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 8, "vocab_size": 100,
      "sliding_window_pattern": 0})");
  EXPECT_NE(zero.find("\"sliding_window_pattern\" is not a positive count"),
            std::string::npos)
      << zero;
}

TEST(HfConfig, QwenSlidingWindowLayers) {
  const char *base = R"({"model_type": "qwen2", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 28, "vocab_size": 100,
      "sliding_window": 4096, "use_sliding_window": %s,
      "max_window_layers": %d})";
  char text[512];
  snprintf(text, sizeof(text), base, "false", 0);
  EXPECT_EQ(read(text).sliding_window(), 0);
  snprintf(text, sizeof(text), base, "true", 0);
  EXPECT_EQ(read(text).sliding_window(), 4096);
  snprintf(text, sizeof(text), base, "true", 28);
  EXPECT_EQ(read(text).sliding_window(), 0);
  snprintf(text, sizeof(text), base, "true", 14);
  EXPECT_NE(error(text).find("\"max_window_layers\" 14 of 28"),
            std::string::npos);
}

TEST(HfConfig, RopeOriginalContextAndTypes) {
  // transformers 5's rope_parameters says what rope_scaling said.
  plan::ModelSpec spec = read(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "max_position_embeddings": 131072, "rope_parameters": {"rope_type":
      "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(spec.seq_len(), 8192);
  EXPECT_FALSE(spec.tied_embeddings());
  // Its llama3 scaling with transformers' defaults for the frequency
  // factors it leaves out (1 and 4): at head_dim 16 and base 10,000 the
  // highest frequency (a wavelength of 2 pi) is kept, the lowest (2 pi x
  // 10^3.5, past 8,192) divided by 8.
  EXPECT_EQ(spec.rope_scaling().type(), "llama3");
  EXPECT_EQ(spec.rope_scaling().original_context(), 8192);
  EXPECT_DOUBLE_EQ(rotaryFrequency(spec, 0, 16, 4096), 1.0);
  EXPECT_DOUBLE_EQ(rotaryFrequency(spec, 7, 16, 4096),
                   std::pow(10000.0, -14.0 / 16) / 8);
  EXPECT_TRUE(ropeScalingBuilt(spec));
  // Phi-3's long-context configs keep the original length beside a
  // longrope scaling.
  plan::ModelSpec phi3 = read(R"({"model_type": "phi3", "hidden_size": 3072,
      "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32064,
      "intermediate_size": 8192, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096, "rope_scaling": {"type":
      "longrope", "long_factor": [1.0], "short_factor": [1.0]},
      "sliding_window": 262144})");
  EXPECT_EQ(phi3.seq_len(), 4096);
  EXPECT_EQ(phi3.ffn_kind(), plan::FFN_SWIGLU);
  // LongRoPE: the factor is how far max_position_embeddings extends the
  // trained context (32), cos and sin scaled by sqrt(1 + ln 32 / ln 4096)
  // (transformers' _compute_longrope_parameters); one short and one long
  // factor apply to every frequency, as torch broadcasts them.
  EXPECT_EQ(phi3.rope_scaling().type(), "longrope");
  EXPECT_TRUE(ropeScalingBuilt(phi3));
  EXPECT_DOUBLE_EQ(phi3.rope_scaling().factor(), 32.0);
  EXPECT_EQ(phi3.rope_scaling().original_context(), 4096);
  EXPECT_NEAR(rotaryScale(phi3), 1.1902380714238083, 1e-12);
  EXPECT_DOUBLE_EQ(rotaryFrequency(phi3, 3, 96, 4096),
                   std::pow(10000.0, -6.0 / 96));
  phi3.mutable_rope_scaling()->set_long_factor(0, 4.0);
  EXPECT_DOUBLE_EQ(rotaryFrequency(phi3, 47, 96, 4097),
                   std::pow(10000.0, -94.0 / 96) / 4);
  EXPECT_NEAR(parameterCount(phi3) / 1e9, 3.82, 0.02);
  EXPECT_EQ(spec.ffn_kind(), plan::FFN_SWIGLU);
  std::string nested = error(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "rope_scaling": {"original_max_position_embeddings": "8k"}})");
  EXPECT_NE(
      nested.find("\"rope_scaling.original_max_position_embeddings\" is not "
                  "an integer"),
      std::string::npos)
      << nested;
  // Phi-3's factors: the short ones within the trained context, the long
  // ones beyond it; "su" is LongRoPE's first name.
  plan::ModelSpec su = read(R"({"model_type": "phi3", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "max_position_embeddings": 64, "original_max_position_embeddings": 16,
      "rope_scaling": {"type": "su", "short_factor": [1, 1, 1, 1, 1, 1, 2, 4],
      "long_factor": [1, 1, 2, 2, 4, 4, 8, 16]}})");
  EXPECT_EQ(su.rope_scaling().type(), "longrope");
  EXPECT_DOUBLE_EQ(rotaryFrequency(su, 7, 16, 16),
                   std::pow(10000.0, -14.0 / 16) / 4);
  EXPECT_DOUBLE_EQ(rotaryFrequency(su, 7, 16, 17),
                   std::pow(10000.0, -14.0 / 16) / 16);
  EXPECT_NEAR(rotaryScale(su), std::sqrt(1 + std::log(4.0) / std::log(16.0)),
              1e-12);
  std::string pairs = error(R"({"model_type": "phi3", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "rope_scaling": {"type": "longrope", "short_factor": [1, 2],
      "long_factor": [1, 2]}})");
  EXPECT_NE(pairs.find("\"rope_scaling.short_factor\" has 2 factors where "
                       "the rotary embedding turns 8 pairs"),
            std::string::npos)
      << pairs;
  std::string missing = error(R"({"model_type": "phi3", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "rope_scaling": {"type": "longrope", "short_factor": [1]}})");
  EXPECT_NE(missing.find("both needed"), std::string::npos) << missing;
  // Dynamic NTK: the plain frequencies within max_position_embeddings; past
  // it the base times (2 x 32 / 16 - 1)^(16 / 14).
  plan::ModelSpec ntk = read(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "max_position_embeddings": 16, "rope_scaling": {"type": "dynamic",
      "factor": 2.0}})");
  EXPECT_TRUE(ropeScalingBuilt(ntk));
  EXPECT_DOUBLE_EQ(rotaryFrequency(ntk, 5, 16, 16),
                   std::pow(10000.0, -10.0 / 16));
  EXPECT_NEAR(rotaryFrequency(ntk, 5, 16, 32),
              std::pow(10000.0 * std::pow(3.0, 16.0 / 14), -10.0 / 16), 1e-15);
  std::string act = error(R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4,
      "n_layer": 2, "vocab_size": 100, "activation_function": "tanh"})");
  EXPECT_NE(act.find("'tanh'"), std::string::npos) << act;
  std::string latent = error(R"({"model_type": "deepseek_v2", "hidden_size":
      64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "kv_lora_rank": 512})");
  EXPECT_NE(latent.find("latent attention"), std::string::npos) << latent;
  EXPECT_NE(error("[1, 2]").find("not a JSON object"), std::string::npos);
  std::string typed = error(R"({"model_type": 7, "hidden_size": 64})");
  EXPECT_NE(typed.find("\"model_type\" is not a string"), std::string::npos)
      << typed;
  // Sizes that are not sizes are named, not planned as the defaults.
  std::string kv = error(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "num_key_value_heads": "2"})");
  EXPECT_NE(kv.find("\"num_key_value_heads\" is not an integer"),
            std::string::npos)
      << kv;
}

TEST(HfConfig, Glm) {
  // THUDM/glm-4-9b-chat-hf: rotary on adjacent pairs of half of each head,
  // Q, K and V biased (attention_bias), o_proj not; 9.40 B parameters.
  plan::ModelSpec glm = read(R"({"model_type": "glm", "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
      "num_hidden_layers": 40, "intermediate_size": 13696,
      "vocab_size": 151552, "max_position_embeddings": 131072,
      "partial_rotary_factor": 0.5, "rms_norm_eps": 1.5625e-07,
      "attention_bias": true, "rope_theta": 10000.0,
      "tie_word_embeddings": false})");
  EXPECT_TRUE(glm.qkv_bias());
  EXPECT_FALSE(glm.attention_output_bias());
  EXPECT_FLOAT_EQ(glm.rotary_percent(), 0.5f);
  EXPECT_TRUE(glm.rotary_interleaved());
  EXPECT_FALSE(glm.sandwich_norms());
  EXPECT_EQ(int64_t(parameterCount(glm)), 9399951360);
  // GLM-4-0414: the same with a norm after each branch as well (two more
  // per layer), and the class's defaults (partial rotary 0.5, biases).
  plan::ModelSpec glm4 = read(R"({"model_type": "glm4", "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
      "num_hidden_layers": 40, "intermediate_size": 13696,
      "vocab_size": 151552, "max_position_embeddings": 32768,
      "tie_word_embeddings": false})");
  EXPECT_TRUE(glm4.sandwich_norms());
  EXPECT_TRUE(glm4.qkv_bias());
  EXPECT_FLOAT_EQ(glm4.rotary_percent(), 0.5f);
  EXPECT_EQ(int64_t(parameterCount(glm4) - parameterCount(glm)), 40 * 2 * 4096);
}

TEST(HfConfig, SmolLM3NoPELayers) {
  // HuggingFaceTB/SmolLM3-3B's shape: every fourth layer without rotary
  // (no_rope_layer_interval's default), embeddings tied by default.
  plan::ModelSpec smol = read(R"({"model_type": "smollm3", "hidden_size": 2048,
      "num_attention_heads": 16, "num_key_value_heads": 4,
      "num_hidden_layers": 36, "intermediate_size": 11008,
      "vocab_size": 128256, "max_position_embeddings": 65536,
      "rope_theta": 5000000.0})");
  ASSERT_EQ(smol.nope_layers_size(), 9);
  EXPECT_EQ(smol.nope_layers(0), 3);
  EXPECT_EQ(smol.nope_layers(8), 35);
  EXPECT_TRUE(smol.tied_embeddings());
  EXPECT_NEAR(parameterCount(smol) / 1e9, 3.08, 0.01);
  // The list, where given, is the model's: 1 turns, 0 does not.
  plan::ModelSpec listed = read(R"({"model_type": "smollm3", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 100,
      "no_rope_layers": [0, 1, 0]})");
  ASSERT_EQ(listed.nope_layers_size(), 2);
  EXPECT_EQ(listed.nope_layers(1), 2);
  std::string bad = error(R"({"model_type": "smollm3", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 100,
      "no_rope_layers": [1, "no", 1]})");
  EXPECT_NE(bad.find("\"no_rope_layers\" is not a list of numbers"),
            std::string::npos)
      << bad;
  // A count past any model is refused before anything is listed per layer.
  std::string deep = error(R"({"model_type": "smollm3", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2000000000,
      "vocab_size": 100})");
  EXPECT_NE(deep.find("of 2000000000 layers: Weft plans models of at most "
                      "4096"),
            std::string::npos)
      << deep;
}

TEST(HfConfig, RotaryBiasesAndParallelBlocks) {
  // Qwen2: QKV biases always, its rope_theta and RMSNorm epsilon.
  plan::ModelSpec qwen = read(R"({"model_type": "qwen2", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "rope_theta": 1000000.0, "rms_norm_eps": 1e-06})");
  EXPECT_TRUE(qwen.qkv_bias());
  EXPECT_EQ(qwen.rope_theta(), 1e6);
  EXPECT_EQ(qwen.norm_epsilon(), 1e-6);
  EXPECT_FALSE(qwen.parallel_block());
  // Qwen2-VL's language model is Qwen2's, QKV biases and all.
  plan::ModelSpec vl = read(R"({"model_type": "qwen2_vl", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "vision_config": {"depth": 32}})");
  EXPECT_TRUE(vl.qkv_bias());
  EXPECT_EQ(vl.ffn_kind(), plan::FFN_SWIGLU);
  // LLaMA: the class's 10,000 where the file has no base; 1e-5 is the
  // default epsilon (0 in the spec).
  plan::ModelSpec llama = read(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "rms_norm_eps": 1e-05})");
  EXPECT_EQ(llama.rope_theta(), 1e4);
  EXPECT_EQ(llama.norm_epsilon(), 0);
  EXPECT_FALSE(llama.qkv_bias());
  // LLaMA's attention_bias biases o_proj as well as Q, K and V, mlp_bias
  // the MLP's three: 2 x (3 x 64 + 64 + 2 x 256 + 64) more parameters
  // (intermediate_size 256). Qwen2's biases stop at Q, K and V; Mistral has
  // no attention_bias to read.
  const char *biased = R"({"model_type": "%s", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "intermediate_size": 256, "attention_bias": true, "mlp_bias": true})";
  char text[512];
  snprintf(text, sizeof(text), biased, "llama");
  plan::ModelSpec llamaBiased = read(text);
  EXPECT_TRUE(llamaBiased.qkv_bias());
  EXPECT_TRUE(llamaBiased.attention_output_bias());
  EXPECT_TRUE(llamaBiased.mlp_bias());
  llama.set_ffn_hidden(256);
  EXPECT_EQ(parameterCount(llamaBiased) - parameterCount(llama),
            2 * (3 * 64 + 64 + 2 * 256 + 64));
  snprintf(text, sizeof(text), biased, "qwen2");
  plan::ModelSpec qwenBiased = read(text);
  EXPECT_TRUE(qwenBiased.qkv_bias());
  EXPECT_FALSE(qwenBiased.attention_output_bias() || qwenBiased.mlp_bias());
  snprintf(text, sizeof(text), biased, "mistral");
  plan::ModelSpec mistral = read(text);
  EXPECT_FALSE(mistral.qkv_bias() || mistral.attention_output_bias() ||
               mistral.mlp_bias());
  // GPT-J: parallel, rotary on rotary_dim 64 of heads of 256.
  plan::ModelSpec gptj = read(R"({"model_type": "gptj", "n_embd": 4096,
      "n_head": 16, "n_layer": 28, "rotary_dim": 64, "n_positions": 2048,
      "vocab_size": 50400})");
  EXPECT_TRUE(gptj.parallel_block());
  EXPECT_FLOAT_EQ(gptj.rotary_percent(), 0.25f);
  EXPECT_TRUE(gptj.rotary_interleaved());
  EXPECT_NEAR(parameterCount(gptj) / 1e9, 6.05, 0.05);
  // Its attention projections have no biases, its lm_head has one.
  EXPECT_TRUE(gptj.no_attention_bias());
  EXPECT_TRUE(gptj.output_bias());
  EXPECT_TRUE(hasLinearBiases(gptj));
  // microsoft/phi-2: every linear biased, lm_head too: 2,779,683,840, as
  // Microsoft counts it (51,200 fewer without the output bias).
  plan::ModelSpec phi2 = read(R"({"model_type": "phi", "hidden_size": 2560,
      "num_attention_heads": 32, "num_hidden_layers": 32,
      "intermediate_size": 10240, "vocab_size": 51200,
      "max_position_embeddings": 2048, "partial_rotary_factor": 0.4,
      "tie_word_embeddings": false})");
  EXPECT_TRUE(phi2.output_bias());
  EXPECT_FALSE(phi2.no_attention_bias());
  EXPECT_EQ(int64_t(parameterCount(phi2)), 2779683840);
  // GPT-NeoX without parallel residual; GPT-2's learned positions.
  plan::ModelSpec neox = read(R"({"model_type": "gpt_neox", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "use_parallel_residual": false, "rotary_pct": 1.0})");
  EXPECT_FALSE(neox.parallel_block());
  EXPECT_EQ(neox.rotary_percent(), 0);
  EXPECT_FALSE(neox.rotary_interleaved());
  plan::ModelSpec gpt2 = read(R"({"model_type": "gpt2", "n_embd": 64,
      "n_head": 4, "n_layer": 2, "vocab_size": 100})");
  EXPECT_EQ(gpt2.rope_theta(), 0);
}

// Gemma's arithmetic, from google/gemma-2-27b's and gemma-7b's configs: the
// normalizer sqrt(hidden) on the embeddings (every Gemma), sandwich norms,
// query_pre_attn_scalar and the final soft-cap (Gemma 2), counted among the
// parameters as the authors count them (27.2 B, 8.54 B).
TEST(HfConfig, GemmaArithmetic) {
  plan::ModelSpec gemma2 = read(R"({"model_type": "gemma2",
      "hidden_size": 4608, "num_attention_heads": 32,
      "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 46,
      "intermediate_size": 36864, "vocab_size": 256000,
      "query_pre_attn_scalar": 144, "final_logit_softcapping": 30.0,
      "attn_logit_softcapping": 50.0, "sliding_window": 4096,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-06,
      "hidden_activation": "gelu_pytorch_tanh"})");
  EXPECT_NEAR(gemma2.embedding_scale(), 67.882, 1e-3);
  EXPECT_TRUE(gemma2.sandwich_norms());
  EXPECT_TRUE(gemma2.norm_one_plus());
  EXPECT_FLOAT_EQ(gemma2.attention_scale(), 1.0f / 12);
  EXPECT_FLOAT_EQ(gemma2.logit_softcap(), 30);
  EXPECT_FLOAT_EQ(gemma2.attention_softcap(), 50);
  EXPECT_NEAR(parameterCount(gemma2) / 1e9, 27.2, 0.05);
  plan::ModelSpec gemma = read(R"({"model_type": "gemma",
      "hidden_size": 3072, "num_attention_heads": 16,
      "num_key_value_heads": 16, "head_dim": 256, "num_hidden_layers": 28,
      "intermediate_size": 24576, "vocab_size": 256000,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-06})");
  EXPECT_NEAR(gemma.embedding_scale(), 55.426, 1e-3);
  EXPECT_FALSE(gemma.sandwich_norms());
  EXPECT_EQ(gemma.attention_scale(), 0);
  EXPECT_EQ(gemma.logit_softcap(), 0);
  EXPECT_NEAR(parameterCount(gemma) / 1e9, 8.54, 0.01);
  // Qwen3's QK norm (Qwen/Qwen3-8B's config: 8.19 B parameters, its QK
  // norms' 9,216 among them); Gemma 3's.
  plan::ModelSpec qwen3 = read(R"({"model_type": "qwen3", "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "num_hidden_layers": 36, "intermediate_size": 12288,
      "vocab_size": 151936, "tie_word_embeddings": false,
      "max_position_embeddings": 40960, "rope_theta": 1000000})");
  EXPECT_TRUE(qwen3.qk_norm());
  EXPECT_FALSE(qwen3.sandwich_norms());
  EXPECT_NEAR(parameterCount(qwen3) / 1e9, 8.19, 0.005);
  EXPECT_FALSE(gemma2.qk_norm());
  // Granite's multipliers (ibm-granite/granite-3.1-8b-base's values).
  plan::ModelSpec granite = read(R"({"model_type": "granite",
      "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "num_hidden_layers": 40,
      "intermediate_size": 12800, "vocab_size": 49155,
      "embedding_multiplier": 12.0, "attention_multiplier": 0.0078125,
      "residual_multiplier": 0.22, "logits_scaling": 16.0})");
  EXPECT_FLOAT_EQ(granite.embedding_scale(), 12);
  EXPECT_FLOAT_EQ(granite.attention_scale(), 0.0078125f);
  EXPECT_FLOAT_EQ(granite.residual_scale(), 0.22f);
  EXPECT_FLOAT_EQ(granite.logit_divisor(), 16);
  EXPECT_FALSE(granite.sandwich_norms());
  // Other families have none of it.
  plan::ModelSpec llama = read(R"({"model_type": "llama", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100})");
  EXPECT_EQ(llama.embedding_scale(), 0);
  EXPECT_FALSE(llama.sandwich_norms());
  EXPECT_FALSE(llama.qk_norm());
  EXPECT_EQ(llama.residual_scale(), 0);
  EXPECT_EQ(llama.logit_divisor(), 0);
}

} // namespace
