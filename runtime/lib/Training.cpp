//===- Training.cpp - A training step on a rank, and its host side --------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Training.h"

#include "weft/runtime/Checkpoint.h"
#include "weft/runtime/CpuKernels.h"
#include "weft/runtime/FileWrite.h"
#include "weft/runtime/NpyFile.h"
#include "weft/runtime/Pipeline.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

using namespace weft::rt;

//===----------------------------------------------------------------------===//
// Tokens
//===----------------------------------------------------------------------===//

static bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

static bool fileExists(const std::string &path) {
  return bool(std::ifstream(path, std::ios::binary));
}

static absl::StatusOr<std::string> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

/// A little-endian integer of `width` bytes at `at` of `bytes` (which
/// holds it), sign-extended when `isSigned`.
static int64_t readInteger(const std::string &bytes, size_t at, size_t width,
                           bool isSigned) {
  uint64_t v = 0;
  for (size_t b = 0; b < width; ++b)
    v |= uint64_t(uint8_t(bytes[at + b])) << (8 * b);
  if (isSigned && width < 8 && (v >> (8 * width - 1)) & 1)
    v |= ~uint64_t(0) << (8 * width);
  return int64_t(v);
}

/// Megatron-LM's indexed dataset (preprocess_data.py's PREFIX.bin and
/// PREFIX.idx; megatron/core/datasets/indexed_dataset.py): the .idx holds
/// "MMIDIDX\0\0", version 1 (u64), the token type's code (u8), the
/// sequence and document counts (u64), then each sequence's length (i32)
/// and byte offset in the .bin (i64), and the documents' first sequences.
/// The tokens are the sequences in order.
static absl::StatusOr<std::vector<int64_t>>
readIndexedDataset(const std::string &prefix) {
  const std::string idxPath = prefix + ".idx", binPath = prefix + ".bin";
  absl::StatusOr<std::string> index = readBytes(idxPath);
  if (!index.ok())
    return index.status();
  const std::string &idx = *index;
  auto bad = [&](const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat(idxPath, ": not a Megatron-LM index (", why, ")"));
  };
  const size_t header = 9 + 8 + 1 + 8 + 8;
  if (idx.size() < header || idx.compare(0, 9, std::string("MMIDIDX\0\0", 9)))
    return bad("it does not start with MMIDIDX");
  if (readInteger(idx, 9, 8, false) != 1)
    return bad("version " + std::to_string(readInteger(idx, 9, 8, false)) +
               ", expected 1");
  // Megatron's DType codes: uint8 1, int8 2, int16 3, int32 4, int64 5,
  // float64 6, float32 7, uint16 8.
  const int code = uint8_t(idx[17]);
  static const std::pair<size_t, bool> types[] = {
      {0, false}, {1, false}, {1, true},  {2, true}, {4, true},
      {8, true},  {0, false}, {0, false}, {2, false}};
  if (code < 1 || code > 8 || !types[code].first)
    return absl::InvalidArgumentError(
        absl::StrCat(idxPath, ": token type code ", code,
                     " is not an integer type (Megatron-LM's DType: uint8 1, "
                     "int8 2, int16 3, int32 4, int64 5, uint16 8)"));
  const auto [width, isSigned] = types[code];
  const uint64_t sequences = uint64_t(readInteger(idx, 18, 8, false));
  if (sequences > (idx.size() - header) / 12)
    return bad(absl::StrCat(sequences, " sequences, which its ", idx.size(),
                            " bytes cannot hold"));
  absl::StatusOr<std::string> data = readBytes(binPath);
  if (!data.ok())
    return data.status();
  std::vector<int64_t> tokens;
  for (uint64_t i = 0; i < sequences; ++i) {
    const int64_t length = readInteger(idx, header + 4 * i, 4, true);
    const int64_t pointer =
        readInteger(idx, header + 4 * sequences + 8 * i, 8, true);
    if (length < 0 || pointer < 0 ||
        uint64_t(pointer) + uint64_t(length) * width > data->size())
      return absl::InvalidArgumentError(absl::StrCat(
          idxPath, ": sequence ", i, " (", length, " tokens at byte ", pointer,
          ") is not inside ", binPath, " (", data->size(), " bytes)"));
    for (int64_t t = 0; t < length; ++t)
      tokens.push_back(readInteger(*data, size_t(pointer) + size_t(t) * width,
                                   width, isSigned));
  }
  return tokens;
}

absl::StatusOr<std::vector<int64_t>>
weft::rt::readTokenFile(const std::string &path, const std::string &rawType) {
  // Megatron-LM's indexed dataset: PREFIX.idx, PREFIX.bin beside a
  // PREFIX.idx, or PREFIX (as its --data-path names them).
  for (const char *suffix : {".idx", ".bin", ""})
    if (endsWith(path, suffix)) {
      std::string prefix = path.substr(0, path.size() - strlen(suffix));
      if (fileExists(prefix + ".idx") &&
          (*suffix || fileExists(prefix + ".bin")))
        return readIndexedDataset(prefix);
    }
  absl::StatusOr<std::string> read = readBytes(path);
  if (!read.ok())
    return read.status();
  std::string bytes = std::move(*read);
  std::string type = rawType;
  size_t start = 0;
  if (endsWith(path, ".npy")) {
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
      return absl::InvalidArgumentError(path + ": not a .npy file");
    unsigned major = uint8_t(bytes[6]);
    size_t headerLen = major == 1 ? uint8_t(bytes[8]) | (uint8_t(bytes[9]) << 8)
                       : bytes.size() >= 12
                           ? uint32_t(uint8_t(bytes[8])) |
                                 (uint32_t(uint8_t(bytes[9])) << 8) |
                                 (uint32_t(uint8_t(bytes[10])) << 16) |
                                 (uint32_t(uint8_t(bytes[11])) << 24)
                           : 0;
    size_t headerStart = major == 1 ? 10 : 12;
    start = headerStart + headerLen;
    if (start > bytes.size())
      return absl::InvalidArgumentError(path + ": truncated .npy header");
    std::string header = bytes.substr(headerStart, headerLen);
    static const std::pair<const char *, const char *> descrs[] = {
        {"<u2", "u16"}, {"<u4", "u32"}, {"<i4", "i32"}, {"<i8", "i64"}};
    type.clear();
    for (auto [descr, name] : descrs)
      if (header.find(descr) != std::string::npos)
        type = name;
    if (type.empty() ||
        header.find("'fortran_order': True") != std::string::npos)
      return absl::InvalidArgumentError(
          path + ": tokens must be a C-order .npy of uint16, uint32, int32 "
                 "or int64");
  }
  size_t width = type == "u16"                    ? 2
                 : type == "u32" || type == "i32" ? 4
                 : type == "i64"                  ? 8
                                                  : 0;
  if (!width)
    return absl::InvalidArgumentError("--data-dtype " + type +
                                      ": expected u16, u32, i32 or i64");
  size_t size = bytes.size() - start;
  if (size % width)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", size, " bytes is not a whole number of ", type, " tokens"));
  std::vector<int64_t> tokens(size / width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const char *p = bytes.data() + start + i * width;
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, p, 2);
      tokens[i] = v;
    } else if (width == 4) {
      uint32_t v;
      std::memcpy(&v, p, 4);
      tokens[i] = type == "i32" ? int64_t(int32_t(v)) : int64_t(v);
    } else {
      std::memcpy(&tokens[i], p, 8);
    }
  }
  return tokens;
}

struct weft::rt::TokenStream::Index {
  std::mutex mutex;
  /// Each row's dataset and sample, as far as a window has asked.
  std::vector<std::pair<size_t, int64_t>> rows;
  std::vector<int64_t> counts;
};

weft::rt::TokenStream::TokenStream(std::vector<int64_t> tokens)
    : weights_{1.0} {
  datasets_.push_back(std::move(tokens));
}

weft::rt::TokenStream::TokenStream(std::vector<std::vector<int64_t>> datasets,
                                   std::vector<double> weights)
    : datasets_(std::move(datasets)), weights_(std::move(weights)),
      index_(std::make_shared<Index>()) {
  double total = 0;
  for (double w : weights_)
    total += w;
  for (double &w : weights_)
    w /= total;
  index_->counts.assign(datasets_.size(), 0);
}

std::pair<size_t, int64_t> weft::rt::TokenStream::row(int64_t index) const {
  if (!index_)
    return {0, index};
  std::lock_guard<std::mutex> lock(index_->mutex);
  auto &rows = index_->rows;
  while (int64_t(rows.size()) <= index) {
    // Megatron-LM's build_blending_indices: the dataset furthest below its
    // share of the rows so far (at least one), the first of equals.
    const double done = std::max<double>(double(rows.size()), 1.0);
    size_t pick = 0;
    double worst = weights_[0] * done - double(index_->counts[0]);
    for (size_t d = 1; d < weights_.size(); ++d)
      if (double error = weights_[d] * done - double(index_->counts[d]);
          error > worst) {
        worst = error;
        pick = d;
      }
    rows.emplace_back(pick, index_->counts[pick]++);
  }
  return rows[size_t(index)];
}

std::pair<weft::rt::TokenStream, weft::rt::TokenStream>
weft::rt::splitTokenStream(const TokenStream &stream, double heldOut) {
  std::vector<std::vector<int64_t>> heads, tails;
  for (const std::vector<int64_t> &tokens : stream.datasets()) {
    const size_t cut =
        tokens.size() - size_t(std::llround(double(tokens.size()) * heldOut));
    heads.emplace_back(tokens.begin(), tokens.begin() + long(cut));
    tails.emplace_back(tokens.begin() + long(cut), tokens.end());
  }
  std::pair<TokenStream, TokenStream> split =
      stream.blended()
          ? std::make_pair(TokenStream(std::move(heads), stream.weights()),
                           TokenStream(std::move(tails), stream.weights()))
          : std::make_pair(TokenStream(std::move(heads.front())),
                           TokenStream(std::move(tails.front())));
  if (std::optional<uint64_t> seed = stream.shuffleSeed()) {
    split.first.shuffle(*seed);
    split.second.shuffle(*seed);
  }
  return split;
}

absl::StatusOr<weft::rt::TokenStream>
weft::rt::readTokenStream(const std::string &spec, const std::string &rawType) {
  std::istringstream fields(spec);
  std::vector<std::string> parts;
  for (std::string part; fields >> part;)
    parts.push_back(part);
  auto weightOf = [](const std::string &text) -> std::optional<double> {
    char *end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end)
      return std::nullopt;
    return value;
  };
  // One file (whose name may hold spaces), unless it reads as a blend.
  if (parts.size() < 2 || !weightOf(parts[0])) {
    absl::StatusOr<std::vector<int64_t>> tokens = readTokenFile(spec, rawType);
    if (!tokens.ok())
      return tokens.status();
    return TokenStream(std::move(*tokens));
  }
  if (parts.size() % 2)
    return absl::InvalidArgumentError(
        "'" + spec +
        "': a blend is WEIGHT PATH pairs (Megatron-LM's --data-path), e.g. "
        "\"0.3 a.npy 0.7 b_text_document\"");
  std::vector<std::vector<int64_t>> datasets;
  std::vector<double> weights;
  for (size_t i = 0; i < parts.size(); i += 2) {
    std::optional<double> weight = weightOf(parts[i]);
    if (!weight || !(*weight > 0) || !std::isfinite(*weight))
      return absl::InvalidArgumentError(
          "'" + spec + "': the blend's weight '" + parts[i] +
          "' is not a positive number (WEIGHT PATH pairs)");
    absl::StatusOr<std::vector<int64_t>> tokens =
        readTokenFile(parts[i + 1], rawType);
    if (!tokens.ok())
      return tokens.status();
    datasets.push_back(std::move(*tokens));
    weights.push_back(*weight);
  }
  if (datasets.size() == 1)
    return TokenStream(std::move(datasets.front()));
  return TokenStream(std::move(datasets), std::move(weights));
}

std::string weft::rt::tokenIdsBeyond(const TokenStream &stream,
                                     const std::string &spec, int64_t classes,
                                     int64_t embeddingRows) {
  if (classes <= 0)
    return "";
  int64_t largest = std::numeric_limits<int64_t>::min();
  for (const std::vector<int64_t> &tokens : stream.datasets())
    if (!tokens.empty())
      largest =
          std::max(largest, *std::max_element(tokens.begin(), tokens.end()));
  if (largest < classes)
    return "";
  std::string why = absl::StrCat(spec, " holds token id ", largest,
                                 ", but the model's output has ", classes,
                                 " classes per position");
  if (embeddingRows > 0 && embeddingRows != classes)
    absl::StrAppend(
        &why, "; its token embedding has ", embeddingRows,
        " rows, so the output is hidden states, not logits: export the model "
        "with its language-model head (a ...ForCausalLM model, or with its "
        "lm_head)");
  else
    absl::StrAppend(&why,
                    ": the data is not tokenized for this model's vocabulary");
  return why;
}

std::string weft::rt::tokenStreamShortfall(
    const TokenStream &stream, const std::string &spec, int64_t batch,
    int64_t seq, const std::vector<InputFeed> &feeds) {
  // One file holds a micro-batch and its last label; each dataset of a
  // blend a sequence and its label, and an encoder's source before them.
  int64_t source = 0;
  for (const InputFeed &input : feeds)
    if (input.fill == Feed::Source)
      source = std::max(source, input.length);
  const int64_t need = (stream.blended() ? seq + 1 : batch * seq + 1) + source;
  for (size_t d = 0; d < stream.datasets().size(); ++d)
    if (int64_t have = int64_t(stream.datasets()[d].size()); have < need)
      return stream.blended()
                 ? absl::StrCat(spec, ": dataset ", d + 1, " of the blend has ",
                                have, " tokens; one sequence needs ", need)
                 : absl::StrCat(spec, " has ", have,
                                " tokens; one micro-batch needs ", need);
  return "";
}

std::optional<Feed> weft::rt::parseFeed(const std::string &name) {
  static const std::pair<const char *, Feed> names[] = {
      {"tokens", Feed::Tokens},       {"source", Feed::Source},
      {"ones", Feed::Ones},           {"zeros", Feed::Zeros},
      {"positions", Feed::Positions}, {"labels", Feed::Labels},
      {"documents", Feed::Documents}};
  for (const auto &[text, feed] : names)
    if (name == text)
      return feed;
  return std::nullopt;
}

/// SplitMix64's output function (Steele, Lea and Flood 2014): a bijective
/// mix of 64 bits.
static uint64_t splitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Place `j` of a permutation of [0, n) drawn from `key`: a four-round
/// Feistel network on the smallest even power of two that holds n,
/// cycle-walked into [0, n) (a bijection there: no state, any n).
static int64_t permuted(int64_t j, int64_t n, uint64_t key) {
  if (n <= 1)
    return 0;
  int bits = 2;
  while ((int64_t(1) << bits) < n)
    ++bits;
  bits += bits % 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t x = uint64_t(j);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t next = left ^ (splitMix64(key ^ (round << 56) ^ right) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= uint64_t(n));
  return int64_t(x);
}

int64_t weft::rt::TokenStream::sampleStart(size_t dataset, int64_t sample,
                                           int64_t seq) const {
  const int64_t size = int64_t(datasets_[dataset].size());
  if (!shuffleSeed_)
    return (sample * seq) % (size - seq);
  // Its samples: each seq tokens and the next one as the last label.
  const int64_t n = std::max<int64_t>(1, (size - 1) / seq);
  const uint64_t epoch = uint64_t(sample / n);
  const uint64_t key =
      splitMix64(splitMix64(*shuffleSeed_) ^
                 splitMix64((uint64_t(dataset) << 40) ^ epoch));
  return permuted(sample % n, n, key) * seq;
}

MaskedDraw weft::rt::maskedDraw(const Objective &objective, int64_t index,
                                int64_t token, bool force) {
  uint64_t h = splitMix64(objective.seed ^ splitMix64(uint64_t(index)));
  // Two uniforms in [0, 1) of 24 bits each.
  double choose = double(h >> 40) / double(1 << 24);
  double kind = double((h >> 16) & 0xFFFFFF) / double(1 << 24);
  if (!force && !(choose < objective.probability))
    return {false, token, choose};
  if (kind < 0.8)
    return {true, objective.maskToken, choose};
  if (kind < 0.9 && objective.vocab > 0)
    return {true, int64_t(splitMix64(h) % uint64_t(objective.vocab)), choose};
  return {true, token, choose};
}

std::vector<HostTensor>
weft::rt::tokenWindows(const std::vector<int64_t> &tokens, int64_t batch,
                       int64_t seq, int64_t first, int64_t count,
                       const std::vector<InputFeed> &inputs,
                       const Objective &objective) {
  return tokenWindows(TokenStream(tokens), batch, seq, first, count, inputs,
                      objective);
}

std::vector<HostTensor>
weft::rt::tokenWindows(const TokenStream &stream, int64_t batch, int64_t seq,
                       int64_t first, int64_t count,
                       const std::vector<InputFeed> &inputs,
                       const Objective &objective) {
  // Each row's dataset, and where its sequence starts in it: one file's
  // windows are consecutive, a blend's (or a shuffled stream's) rows its
  // samples.
  const size_t rows = size_t(count * batch);
  std::vector<const std::vector<int64_t> *> data(rows);
  std::vector<int64_t> starts(rows);
  for (int64_t w = 0; w < count; ++w)
    for (int64_t r = 0; r < batch; ++r) {
      const size_t row = size_t(w * batch + r);
      if (!stream.blended() && !stream.shuffleSeed()) {
        const std::vector<int64_t> &tokens = stream.datasets().front();
        const int64_t size = int64_t(tokens.size());
        const int64_t positions = size - (batch * seq + 1) + 1;
        const int64_t offset = ((first + w) * batch * seq) % positions;
        data[row] = &tokens;
        starts[row] = (offset + r * seq) % size;
        continue;
      }
      auto [dataset, sample] = stream.row((first + w) * batch + r);
      data[row] = &stream.datasets()[dataset];
      starts[row] = stream.sampleStart(dataset, sample, seq);
    }
  // The token `i` places after (before, when negative) a row's start,
  // wrapping around its dataset.
  auto tokenAt = [&](size_t row, int64_t i) {
    const std::vector<int64_t> &tokens = *data[row];
    const int64_t size = int64_t(tokens.size());
    return tokens[size_t(((starts[row] + i) % size + size) % size)];
  };
  HostTensor ids(DType::I64, {count * batch, seq});
  HostTensor labels(DType::I64, {count * batch, seq});
  for (int64_t w = 0; w < count; ++w) {
    for (int64_t i = 0; i < batch * seq; ++i) {
      const size_t row = size_t(w * batch + i / seq);
      int64_t to = w * batch * seq + i;
      ids.ints[to] = tokenAt(row, i % seq);
      labels.ints[to] = tokenAt(row, i % seq + 1);
      // Megatron-LM's --eod-mask-loss: loss_mask[tokens == eod] = 0.
      if (objective.eodMaskLoss && ids.ints[to] == objective.eod)
        labels.ints[to] = objective.ignore;
    }
    if (!objective.masked)
      continue;
    // Masked language modelling, row by row: a row that draws no position
    // has its nearest one chosen.
    for (int64_t r = 0; r < batch; ++r) {
      int64_t nearest = -1;
      double lowest = 2;
      bool any = false;
      for (int64_t c = 0; c < seq; ++c) {
        int64_t i = r * seq + c, to = w * batch * seq + i;
        if (std::find(objective.special.begin(), objective.special.end(),
                      ids.ints[to]) != objective.special.end()) {
          labels.ints[to] = objective.ignore;
          continue;
        }
        MaskedDraw draw =
            maskedDraw(objective, (first + w) * batch * seq + i, ids.ints[to]);
        any |= draw.chosen;
        if (draw.uniform < lowest) {
          lowest = draw.uniform;
          nearest = c;
        }
        labels.ints[to] = draw.chosen ? ids.ints[to] : objective.ignore;
        ids.ints[to] = draw.input;
      }
      if (any || nearest < 0)
        continue;
      int64_t i = r * seq + nearest, to = w * batch * seq + i;
      MaskedDraw draw = maskedDraw(objective, (first + w) * batch * seq + i,
                                   ids.ints[to], /*force=*/true);
      labels.ints[to] = ids.ints[to];
      ids.ints[to] = draw.input;
    }
  }
  // Each position's document in its row (the end-of-document tokens before
  // it) and its position in that document, from the window's tokens before
  // masked language modelling replaced any.
  HostTensor documents(DType::I64, {count * batch, seq});
  HostTensor inDocument(DType::I64, {count * batch, seq});
  for (int64_t row = 0; row < count * batch; ++row) {
    int64_t document = 0, start = 0;
    for (int64_t i = 0; i < seq; ++i) {
      documents.ints[size_t(row * seq + i)] = document;
      inDocument.ints[size_t(row * seq + i)] = i - start;
      if (objective.eod >= 0 && tokenAt(size_t(row), i) == objective.eod) {
        ++document;
        start = i + 1;
      }
    }
  }
  std::vector<HostTensor> filled;
  for (const InputFeed &input :
       inputs.empty() ? std::vector<InputFeed>{Feed::Tokens} : inputs) {
    if (input.fill == Feed::Documents) {
      filled.push_back(documents);
      continue;
    }
    if (input.fill == Feed::Positions && objective.resetPositions) {
      filled.push_back(inDocument);
      continue;
    }
    if (input.fill == Feed::Tokens || input.fill == Feed::Labels) {
      filled.push_back(input.fill == Feed::Tokens ? ids : labels);
      continue;
    }
    const int64_t length = input.length > 0 ? input.length : seq;
    HostTensor fill(DType::I64, {count * batch, length});
    for (int64_t row = 0; row < count * batch; ++row)
      for (int64_t i = 0; i < length; ++i) {
        int64_t value = 0;
        switch (input.fill) {
        case Feed::Source:
          // The length tokens before the row's first, wrapping around.
          value = tokenAt(size_t(row), i - length);
          break;
        case Feed::Ones:
          value = 1;
          break;
        case Feed::Positions:
          value = i;
          break;
        default:
          break;
        }
        fill.ints[size_t(row * length + i)] = value;
      }
    filled.push_back(std::move(fill));
  }
  filled.push_back(std::move(labels));
  return filled;
}

//===----------------------------------------------------------------------===//
// The learning rate and the optimizer's scalars
//===----------------------------------------------------------------------===//

std::optional<LrDecay> weft::rt::parseLrDecay(const std::string &name) {
  static const std::pair<const char *, LrDecay> names[] = {
      {"cosine", LrDecay::Cosine},
      {"linear", LrDecay::Linear},
      {"constant", LrDecay::Constant},
      {"inverse-square-root", LrDecay::InverseSquareRoot},
      {"wsd", LrDecay::Wsd},
      {"exponential", LrDecay::Exponential},
      {"minus_sqrt", LrDecay::MinusSqrt}};
  for (const auto &[text, decay] : names)
    if (name == text)
      return decay;
  return std::nullopt;
}

double LrSchedule::at(int64_t step) const {
  double bottom = floor < 0 ? peak : floor;
  if (warmup > 0 && step < warmup)
    return peak * double(step + 1) / double(warmup);
  if (style == LrDecay::Constant)
    return peak;
  if (style == LrDecay::InverseSquareRoot)
    return std::max(bottom,
                    peak * std::sqrt(double(std::max<int64_t>(warmup, 1)) /
                                     double(step + 1)));
  const int64_t end = decaySteps > 0 ? decaySteps : steps;
  if (step >= end)
    return bottom;
  // The share of the decay done: of the steps after the warm-up, or of
  // WSD's last wsdSteps.
  LrDecay shape = style;
  double done;
  if (style == LrDecay::Wsd) {
    const int64_t start = end - std::max<int64_t>(wsdSteps, 1);
    if (step < start)
      return peak;
    done = double(step - start) / double(std::max<int64_t>(wsdSteps, 1));
    shape = wsdStyle;
  } else {
    done = double(step - warmup) / double(std::max<int64_t>(end - warmup, 1));
  }
  done = std::min(1.0, std::max(0.0, done));
  double kept = 0;
  switch (shape) {
  case LrDecay::Linear:
    kept = 1 - done;
    break;
  case LrDecay::Exponential:
    kept = 2 * std::pow(0.5, done) - 1;
    break;
  case LrDecay::MinusSqrt:
    kept = 1 - std::sqrt(done);
    break;
  default:
    kept = 0.5 * (1 + std::cos(M_PI * done));
    break;
  }
  return bottom + (peak - bottom) * kept;
}

bool LossScale::update(double norm) {
  if (!std::isfinite(norm)) {
    if (window > 0)
      scale = std::max(minimum, scale * backoff);
    goodSteps = 0;
    return false;
  }
  if (window > 0 && ++goodSteps == window) {
    scale *= growth;
    goodSteps = 0;
  }
  return true;
}

bool LossScaling::afterStep(double norm) {
  const bool taken = !scale || scale->update(norm);
  if (taken)
    ++optimizerSteps;
  return taken;
}

std::optional<CheckpointLossScale> LossScaling::checkpointed() const {
  if (!scale)
    return std::nullopt;
  return CheckpointLossScale{scale->scale, scale->goodSteps, optimizerSteps};
}

void LossScaling::resume(int64_t step,
                         const std::optional<CheckpointLossScale> &saved) {
  optimizerSteps = saved ? saved->optimizerSteps : step;
  if (saved && scale && scale->window > 0) {
    scale->scale = saved->scale;
    scale->goodSteps = saved->goodSteps;
  }
}

std::optional<float>
weft::rt::optimizerScalar(const std::string &role,
                          const OptimizerConstants &constants, double lr,
                          int64_t t, int64_t windows, double lossScale) {
  if (role == "grad_divisor")
    return float(double(windows) * lossScale);
  if (role == "decay_factor")
    return float(1.0 - lr * constants.weightDecay);
  if (role == "step_size")
    return float(lr / (1 - std::pow(constants.beta1, double(t))));
  if (role == "bias_correction2_sqrt")
    return float(std::sqrt(1 - std::pow(constants.beta2, double(t))));
  if (role == "lr")
    return float(lr);
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// One step on a rank
//===----------------------------------------------------------------------===//

std::vector<HostTensor> weft::rt::runTrainingStepOnRank(
    RankContext &ctx, const RankTrainingStep &step,
    const std::vector<std::vector<HostTensor>> &microBatches,
    int64_t *heldGradientBytes) {
  auto reduceOn = [&](std::vector<HostTensor> &results) {
    if (!step.reduce || step.partial.empty())
      return;
    std::vector<HostTensor> in;
    for (int o : step.partial)
      in.push_back(std::move(results[size_t(o)]));
    std::vector<HostTensor> out = step.reduce(ctx, in);
    for (size_t k = 0; k < step.partial.size(); ++k)
      results[size_t(step.partial[k])] = std::move(out[k]);
  };
  const bool everyMicroBatch = step.reduce && step.everyMicroBatch;
  std::vector<HostTensor> sums;
  for (const std::vector<HostTensor> &micro : microBatches) {
    if (micro.size() != step.inputs.size())
      throw std::runtime_error(absl::StrCat("the training step takes ",
                                            step.inputs.size(), " inputs, got ",
                                            micro.size()));
    std::vector<HostTensor> mine;
    for (size_t i = 0; i < micro.size(); ++i)
      mine.push_back(
          scatterBlock(micro[i], step.inputs[i], ctx.mesh, ctx.rank));
    std::vector<HostTensor> out = step.step(ctx, mine);
    if (everyMicroBatch)
      reduceOn(out);
    if (sums.empty())
      sums = std::move(out);
    else
      for (size_t o = 0; o < out.size(); ++o)
        accumulateInto(sums[o], out[o]);
    if (heldGradientBytes) {
      int64_t held = 0;
      for (int o : step.gradients)
        if (size_t(o) < sums.size())
          held += storageBytes(sums[size_t(o)]);
      *heldGradientBytes = std::max(*heldGradientBytes, held);
    }
  }
  if (!everyMicroBatch)
    reduceOn(sums);
  return sums;
}

//===----------------------------------------------------------------------===//
// The generated program's main
//===----------------------------------------------------------------------===//

namespace {

struct TrainingRun {
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  std::string weightsDir, outputDir, tokensPath, dataDtype = "u16";
  /// The loss log (weft train's --log): .jsonl, else CSV.
  std::string logPath;
  /// Checkpoints (weft train's --save, --save-every and --resume).
  std::string saveDir, resumeDir;
  int64_t saveEvery = 0;
  int64_t steps = 1, gradAccum = 1;
  LrSchedule schedule;
  TokenStream tokens;
  /// The ranks are processes (mpirun, srun, torchrun), not threads.
  bool processes = false;
  /// Held-out tokens (--eval-data, or --eval-split's share of TOKENS): their
  /// loss after every `evalEvery` steps (0: after the last only), the mean
  /// of the first `evalIters` windows'; `evalName` says what they are.
  std::optional<TokenStream> evalTokens;
  std::string evalName;
  int64_t evalEvery = 0, evalIters = 1;
};

/// Parses the command line over the program's defaults; prints the error and
/// sets `exitCode` on failure.
std::optional<TrainingRun> parseTrainingArguments(int argc, char **argv,
                                                  const TrainingProgram &p,
                                                  int *exitCode) {
  *exitCode = 2;
  TrainingRun run;
  run.steps = p.steps;
  run.gradAccum = p.gradAccum;
  run.schedule = p.schedule;
  bool scheduleSteps = false, evalOptions = false;
  // Held-out tokens: a file (--eval-data), or the share of TOKENS held out
  // (--eval-split).
  std::string evalPath;
  double evalSplit = 0;
  // --shuffle-seed: the samples' order (TokenStream::shuffle).
  std::optional<uint64_t> shuffleSeed;
  auto usage = [&](const std::string &error) -> std::optional<TrainingRun> {
    if (!error.empty())
      std::cerr << "error: " << error << "\n";
    std::cerr << "usage: " << argv[0]
              << " [--steps N] [--grad-accum N] [--lr X] [--min-lr X] "
                 "[--warmup N] [--data-dtype u16|u32|i32|i64] [--log FILE] "
                 "[--save DIR] [--save-every N] [--resume DIR] "
                 "[--collective-timeout SECONDS] [--eval-data FILE | "
                 "--eval-split F] [--eval-every N] [--eval-iters K] "
                 "[--shuffle-seed N] WEIGHTS_DIR OUTPUT_DIR TOKENS\n";
    return std::nullopt;
  };
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg, value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return usage(arg + " needs a value");
    }
    double number = 0;
    bool isNumber = absl::SimpleAtod(value, &number);
    auto whole = [&](int64_t &into) {
      if (!isNumber || !(number >= 1) || number != std::floor(number))
        return false;
      into = int64_t(number);
      return true;
    };
    if (name == "--data-dtype") {
      run.dataDtype = value;
      continue;
    }
    if (name == "--log") {
      run.logPath = value;
      continue;
    }
    if (name == "--eval-data") {
      evalPath = value;
      continue;
    }
    if (name == "--save" || name == "--resume") {
      (name == "--save" ? run.saveDir : run.resumeDir) = value;
      continue;
    }
    bool ok = isNumber;
    if (name == "--steps") {
      ok = whole(run.steps);
      scheduleSteps = true;
    } else if (name == "--grad-accum") {
      ok = whole(run.gradAccum);
    } else if (name == "--save-every") {
      ok = whole(run.saveEvery);
    } else if (name == "--eval-every") {
      ok = ok && number >= 0 && number == std::floor(number);
      run.evalEvery = int64_t(number);
      evalOptions = true;
    } else if (name == "--eval-iters") {
      ok = whole(run.evalIters);
      evalOptions = true;
    } else if (name == "--eval-split") {
      ok = ok && number > 0 && number < 1;
      evalSplit = number;
    } else if (name == "--lr") {
      ok = ok && number > 0;
      run.schedule.peak = number;
    } else if (name == "--min-lr") {
      run.schedule.floor = number;
    } else if (name == "--warmup") {
      ok = ok && number >= 0 && number == std::floor(number);
      run.schedule.warmup = int64_t(number);
    } else if (name == "--shuffle-seed") {
      ok = ok && number >= 0 && number == std::floor(number) && number < 9.2e18;
      if (ok)
        shuffleSeed = uint64_t(number);
    } else if (name == "--collective-timeout") {
      ok = ok && number > 0;
      run.timeout = std::chrono::milliseconds(int64_t(number * 1000));
    } else {
      return usage("unknown option '" + name + "'");
    }
    if (!ok)
      return usage(name + ": '" + value + "' is not a valid value");
  }
  if (positional.size() != 3)
    return usage("");
  const bool evaluating = !evalPath.empty() || evalSplit > 0;
  if (!evalPath.empty() && evalSplit > 0)
    return usage("--eval-split holds out a share of TOKENS in place of "
                 "--eval-data: give one of them");
  if (evalOptions && !evaluating)
    return usage("--eval-every and --eval-iters evaluate --eval-data or "
                 "--eval-split: give one");
  if (evaluating &&
      !(p.pipeline ? bool(p.evaluationPipeline) : bool(p.evaluate)))
    return usage("this program has no evaluation step (it was compiled "
                 "without -weft-extract-evaluation): evaluate with weft "
                 "train --eval-data, or compile it again");
  if (p.pipeline) {
    // A pipeline step runs the program's m micro-batches.
    const int64_t m = std::max(1, p.pipeline->microBatches);
    if (run.gradAccum != 1 && run.gradAccum != m)
      return usage(absl::StrCat("--grad-accum ", run.gradAccum,
                                ": a pipeline step runs the plan's m=", m,
                                " micro-batches; give 1 or ", m));
    run.gradAccum = m;
  }
  if (scheduleSteps)
    run.schedule.steps = run.steps;
  run.weightsDir = positional[0];
  run.outputDir = positional[1];
  run.tokensPath = positional[2];
  *exitCode = 1;
  absl::StatusOr<TokenStream> tokens =
      readTokenStream(run.tokensPath, run.dataDtype);
  if (!tokens.ok()) {
    std::cerr << "error: " << tokens.status().message() << "\n";
    return std::nullopt;
  }
  if (std::string why = tokenStreamShortfall(*tokens, run.tokensPath, p.batch,
                                             p.seq, p.feeds);
      !why.empty()) {
    std::cerr << "error: " << why << "\n";
    return std::nullopt;
  }
  run.tokens = std::move(*tokens);
  if (evalSplit > 0) {
    std::tie(run.tokens, run.evalTokens) =
        splitTokenStream(run.tokens, evalSplit);
    char share[32];
    std::snprintf(share, sizeof share, "%g", evalSplit * 100);
    run.evalName = absl::StrCat("the last ", share, "% of ", run.tokensPath);
  } else if (!evalPath.empty()) {
    absl::StatusOr<TokenStream> held = readTokenStream(evalPath, run.dataDtype);
    if (!held.ok()) {
      std::cerr << "error: " << held.status().message() << "\n";
      return std::nullopt;
    }
    run.evalTokens = std::move(*held);
    run.evalName = evalPath;
  }
  for (TokenStream *stream :
       {&run.tokens, run.evalTokens ? &*run.evalTokens : nullptr}) {
    if (!stream)
      continue;
    if (shuffleSeed)
      stream->shuffle(*shuffleSeed);
    const std::string &spec =
        stream == &run.tokens ? run.tokensPath : run.evalName;
    std::string why =
        tokenStreamShortfall(*stream, spec, p.batch, p.seq, p.feeds);
    if (why.empty())
      why = tokenIdsBeyond(*stream, spec, p.classes, p.embeddingRows);
    if (!why.empty()) {
      std::cerr << "error: " << why << "\n";
      return std::nullopt;
    }
  }
  *exitCode = 0;
  return run;
}

/// The pipeline rank of `rank` (0 without a pipeline).
int pipelineRankOf(const TrainingProgram &p, int rank) {
  return p.pipeline ? rank / int(p.mesh.size() / size_t(p.pipeline->stages))
                    : 0;
}

/// The optimizer step rank `rank` runs.
const TrainingOptimizer &optimizerOf(const TrainingProgram &p, int rank) {
  if (!p.pipeline)
    return p.optimizer;
  const size_t s = size_t(pipelineRankOf(p, rank));
  if (s >= p.pipelineOptimizers.size())
    throw std::runtime_error(absl::StrCat(
        "pipeline rank ", s, " has no optimizer step; generate it again"));
  return p.pipelineOptimizers[s];
}

/// The optimizer as weft train's --optimizer names it: AdamW keeps moments,
/// SGD (with or without momentum) does not.
std::string optimizerName(const TrainingProgram &p) {
  const TrainingOptimizer &o = p.pipeline && !p.pipelineOptimizers.empty()
                                   ? p.pipelineOptimizers.front()
                                   : p.optimizer;
  for (const OptimizerSlot &slot : o.arguments)
    if (slot.role == "exp_avg" || slot.role == "exp_avg_sq")
      return "adamw";
  return "sgd";
}

/// The optimizer's state a rank holds, by (role, parameter).
using OptimizerState = std::map<std::pair<std::string, int>, HostTensor>;

/// What a checkpoint holds of one parameter or of its optimizer state
/// ("param", or the state's role): where it sits on the mesh, the block a
/// rank holds, and the pipeline rank whose ranks' blocks are gathered (the
/// first that holds it; 0 without a pipeline).
struct CheckpointEntry {
  std::string role;
  int parameter = -1;
  Layout layout;
  Shape block;
  int holder = 0;
};

/// Every parameter (by index), then every optimizer state (by role and
/// parameter), as the optimizer steps hold them; the same list on every
/// rank. Throws when a parameter has no optimizer step that holds it.
std::vector<CheckpointEntry> checkpointEntries(const TrainingProgram &p) {
  std::map<std::pair<std::string, int>, CheckpointEntry> found;
  std::vector<const TrainingOptimizer *> optimizers;
  if (p.pipeline)
    for (const TrainingOptimizer &o : p.pipelineOptimizers)
      optimizers.push_back(&o);
  else
    optimizers.push_back(&p.optimizer);
  for (size_t s = 0; s < optimizers.size(); ++s) {
    const TrainingOptimizer &o = *optimizers[s];
    for (size_t i = 0; i < o.arguments.size(); ++i) {
      const OptimizerSlot &slot = o.arguments[i];
      if (slot.parameter < 0 || slot.role == "grad" ||
          i >= o.argumentLayouts.size() || i >= o.argumentTypes.size())
        continue;
      found.try_emplace({slot.role, slot.parameter},
                        CheckpointEntry{slot.role, slot.parameter,
                                        o.argumentLayouts[i],
                                        o.argumentTypes[i].shape, int(s)});
    }
  }
  std::vector<CheckpointEntry> entries;
  for (size_t k = 0; k < p.parameters.size(); ++k) {
    auto it = found.find({"param", int(k)});
    if (it == found.end())
      throw std::runtime_error(
          absl::StrCat("no optimizer step updates parameter '",
                       p.parameters[k].name, "'; generate the program again"));
    entries.push_back(it->second);
  }
  for (auto &[key, entry] : found)
    if (key.first != "param")
      entries.push_back(entry);
  return entries;
}

/// Where the optimizer's state of (role, parameter) sits on the mesh: its
/// argument's layout in the optimizer step (under ZeRO, a block of the
/// parameter's block).
const Layout &stateLayout(const TrainingOptimizer &o,
                          const std::pair<std::string, int> &key) {
  for (size_t i = 0; i < o.arguments.size() && i < o.argumentLayouts.size();
       ++i)
    if (o.arguments[i].role == key.first &&
        o.arguments[i].parameter == key.second)
      return o.argumentLayouts[i];
  throw std::runtime_error(absl::StrCat(
      "the program does not say how the optimizer's ", key.first,
      " of parameter ", key.second, " is laid out; generate it again"));
}

/// Whether rank `rank` holds each parameter: every one without a pipeline,
/// else those its pipeline rank's optimizer step updates.
std::vector<bool> heldParameters(const TrainingProgram &p, int rank) {
  std::vector<bool> held(p.parameters.size(), !p.pipeline);
  if (p.pipeline)
    for (const OptimizerSlot &slot : optimizerOf(p, rank).arguments)
      if (slot.role == "param" && slot.parameter >= 0 &&
          size_t(slot.parameter) < held.size())
        held[size_t(slot.parameter)] = true;
  return held;
}

/// This rank's blocks of a checkpoint's parameters and optimizer state, cut
/// as the program holds them; returns the step it was written after. Throws
/// naming the file when the checkpoint does not fit the program.
int64_t restoreCheckpoint(const RankContext &ctx, const TrainingProgram &p,
                          const std::string &path,
                          std::vector<HostTensor> &params,
                          OptimizerState &state, LossScaling &scaling) {
  absl::StatusOr<Checkpoint> read = readCheckpoint(path);
  if (!read.ok())
    throw std::runtime_error(std::string(read.status().message()));
  const std::string &manifest = read->manifestPath;
  if (read->feedback)
    throw std::runtime_error(absl::StrCat(
        manifest, ": holds top-k error-feedback residuals, which only weft "
                  "train carries; resume it with weft train"));
  const std::string optimizer = optimizerName(p);
  if (!read->optimizer.empty() && read->optimizer != optimizer)
    throw std::runtime_error(
        absl::StrCat(manifest, ": written by --optimizer ", read->optimizer,
                     ", this program's optimizer is ", optimizer));
  if (read->parameters.size() != p.parameters.size())
    throw std::runtime_error(
        absl::StrCat(manifest, ": holds ", read->parameters.size(),
                     " parameters, the program trains ", p.parameters.size()));
  std::map<std::string, const CheckpointParameter *> byName;
  for (const CheckpointParameter &c : read->parameters)
    byName[c.name] = &c;
  const std::vector<bool> held = heldParameters(p, ctx.rank);
  for (size_t k = 0; k < p.parameters.size(); ++k) {
    const TrainedParameter &param = p.parameters[k];
    auto found = byName.find(param.name);
    if (found == byName.end())
      throw std::runtime_error(
          absl::StrCat(manifest, ": has no parameter '", param.name, "'"));
    if (found->second->value.shape != param.shape)
      throw std::runtime_error(absl::StrCat(
          manifest, ": holds ", shapeString(found->second->value.shape),
          " for '", param.name, "', the program's is ",
          shapeString(param.shape)));
    if (held[k])
      params[k] =
          scatterBlock(found->second->value, param.layout, ctx.mesh, ctx.rank);
  }
  const TrainingOptimizer &o = optimizerOf(p, ctx.rank);
  for (auto &entry : state) {
    const TrainedParameter &param = p.parameters[size_t(entry.first.second)];
    const CheckpointParameter &c = *byName.at(param.name);
    const std::optional<HostTensor> &whole =
        checkpointStateOf(entry.first.first) == CheckpointState::V ? c.v : c.m;
    if (!whole)
      throw std::runtime_error(absl::StrCat(
          manifest, ": has no ", entry.first.first, " for '", param.name, "'"));
    HostTensor block =
        scatterBlock(*whole, stateLayout(o, entry.first), ctx.mesh, ctx.rank);
    if (block.shape != entry.second.shape)
      throw std::runtime_error(absl::StrCat(
          "the optimizer's ", entry.first.first, " of '", param.name,
          "': its layout cuts ", shapeString(block.shape),
          ", the program holds ", shapeString(entry.second.shape)));
    entry.second = std::move(block);
  }
  scaling.resume(read->step, read->lossScale);
  return read->step;
}

/// Gathers every rank's blocks of the parameters and the optimizer state
/// whole (with a pipeline, from the first pipeline rank that holds each);
/// rank 0 writes them as weft train's checkpoint after `step` steps.
/// Returns the bytes this rank sent for it, which are not the training's.
int64_t saveCheckpoint(RankContext &ctx, const TrainingProgram &p,
                       const std::string &saveDir, int64_t step,
                       const std::vector<HostTensor> &params,
                       const OptimizerState &state,
                       const LossScaling &scaling) {
  const std::vector<CheckpointEntry> entries = checkpointEntries(p);
  const std::vector<bool> held = heldParameters(p, ctx.rank);
  std::vector<Layout> layouts;
  std::vector<HostTensor> blocks;
  std::vector<int> holders;
  for (const CheckpointEntry &e : entries) {
    layouts.push_back(e.layout);
    holders.push_back(e.holder);
    const HostTensor *mine = nullptr;
    if (e.role == "param") {
      if (held[size_t(e.parameter)])
        mine = &params[size_t(e.parameter)];
    } else if (auto it = state.find({e.role, e.parameter}); it != state.end()) {
      mine = &it->second;
    }
    // (A rank without it gives a block of its holder's shape, not read.)
    blocks.push_back(mine ? *mine : HostTensor(DType::F32, e.block));
  }
  const int64_t before = ctx.comm->bytesSent(ctx.rank);
  std::vector<int64_t> unused;
  std::vector<HostTensor> whole =
      gatherFromProcesses(*ctx.comm, ctx.rank, ctx.mesh, layouts, blocks, 0,
                          unused, p.pipeline ? holders : std::vector<int>{});
  const int64_t sent = ctx.comm->bytesSent(ctx.rank) - before;
  if (ctx.rank != 0)
    return sent;
  Checkpoint checkpoint;
  checkpoint.step = step;
  checkpoint.optimizer = optimizerName(p);
  checkpoint.lossScale = scaling.checkpointed();
  for (size_t k = 0; k < p.parameters.size(); ++k)
    checkpoint.parameters.push_back(
        CheckpointParameter{p.parameters[k].name, std::move(whole[k]), {}, {}});
  for (size_t i = p.parameters.size(); i < entries.size(); ++i) {
    CheckpointParameter &c =
        checkpoint.parameters[size_t(entries[i].parameter)];
    (checkpointStateOf(entries[i].role) == CheckpointState::V ? c.v : c.m) =
        std::move(whole[i]);
  }
  if (absl::Status status = writeCheckpoint(saveDir, checkpoint); !status.ok())
    throw std::runtime_error(std::string(status.message()));
  return sent;
}

/// Rank `ctx.rank`'s part of one pipelined training step: the schedule's
/// steps on the m micro-batches (`micro`: [micro-batch][input]), its stages'
/// functions on `params`. Returns the loss summed over the micro-batches
/// (when the rank's stages compute it) and, by gradient index, the gradient
/// blocks its stages return.
struct PipelineStepResult {
  std::optional<double> loss;
  std::map<int, HostTensor> gradients;
};

/// `f` on the rank's parameter blocks `params` (empty where `f` is).
RankFunction onParameters(const TrainingStepFunction &f,
                          const std::vector<HostTensor> &params) {
  if (!f)
    return RankFunction();
  return [&params, f](RankContext &c, const std::vector<HostTensor> &in) {
    return f(c, in, params);
  };
}

/// `program` (p.pipeline or p.evaluationPipeline) with the functions
/// `stageSteps` gives its stages on `params`.
PipelineProgram withStageFunctions(PipelineProgram program,
                                   const TrainingProgram &p,
                                   const std::vector<HostTensor> &params,
                                   bool evaluation) {
  if (p.stageSteps.size() != program.virtualStages.size())
    throw std::runtime_error(
        absl::StrCat("the program has the steps of ", p.stageSteps.size(),
                     " pipeline stages for ", program.virtualStages.size()));
  for (size_t k = 0; k < program.virtualStages.size(); ++k) {
    PipelineStage &stage = program.virtualStages[k];
    const PipelineStageSteps &steps = p.stageSteps[k];
    if (evaluation) {
      if (!steps.evaluate)
        throw std::runtime_error(
            absl::StrCat("pipeline stage ", k, " has no evaluation function"));
      stage.function = onParameters(steps.evaluate, params);
      continue;
    }
    stage.function = onParameters(steps.forward, params);
    stage.backward.function = onParameters(steps.backward, params);
    stage.weight.function = onParameters(steps.weight, params);
  }
  return program;
}

/// The model outputs that pipeline rank `s`'s stages hold, in the order of
/// its runPipelineRank results.
std::set<int> outputsOf(const PipelineProgram &program, int s) {
  std::set<int> outputs;
  for (size_t k = size_t(s); k < program.virtualStages.size();
       k += size_t(program.stages))
    for (int o : program.virtualStages[k].modelOutput)
      if (o >= 0)
        outputs.insert(o);
  return outputs;
}

/// The executor's [input][micro-batch] from `micro` ([micro-batch][input]).
std::vector<std::vector<HostTensor>>
byInput(const std::vector<std::vector<HostTensor>> &micro) {
  std::vector<std::vector<HostTensor>> inputs(micro.empty() ? 0
                                                            : micro[0].size());
  for (const std::vector<HostTensor> &one : micro)
    for (size_t i = 0; i < one.size() && i < inputs.size(); ++i)
      inputs[i].push_back(one[i]);
  return inputs;
}

PipelineStepResult
runPipelineTrainingStep(RankContext &ctx, const TrainingProgram &p,
                        const std::vector<HostTensor> &params,
                        const std::vector<std::vector<HostTensor>> &micro,
                        bool processes) {
  PipelineProgram program = withStageFunctions(*p.pipeline, p, params, false);
  // A real program's fault injection (WEFT_STALL_RANK, WEFT_KILL_RANK), as
  // in the forward pipelined programs.
  program = withInjectedFaults(program, processes);
  std::vector<HostTensor> mine = runPipelineRank(ctx, program, byInput(micro));
  // Its model outputs come first, (output, micro-batch) in order: the loss
  // is output 0.
  const int s = pipelineRankOf(p, ctx.rank);
  const std::set<int> outputs = outputsOf(program, s);
  const size_t m = size_t(program.microBatches);
  std::vector<int> gradients = pipelineRankGradients(program, s);
  if (mine.size() != outputs.size() * m + gradients.size())
    throw std::runtime_error(
        absl::StrCat("pipeline rank ", s, "'s steps returned ", mine.size(),
                     " values, not ", outputs.size() * m + gradients.size()));
  PipelineStepResult result;
  if (outputs.count(0)) {
    double loss = 0;
    for (size_t b = 0; b < m; ++b)
      loss += mine[b].at(0);
    result.loss = loss;
  }
  for (size_t g = 0; g < gradients.size(); ++g)
    result.gradients.emplace(gradients[g],
                             std::move(mine[outputs.size() * m + g]));
  return result;
}

/// Rank `ctx.rank`'s part of an evaluation: the evaluation step (with a
/// pipeline, the evaluation pipeline) on the first --eval-iters windows of
/// the held-out tokens, filled as the step's inputs are (the loss scale,
/// unused, at 1), on the rank's parameter blocks. Returns the mean of their
/// losses (the printing rank's is the loss; every rank must run it).
double evaluateHeldOut(RankContext &ctx, const TrainingProgram &p,
                       const TrainingRun &run,
                       const std::vector<HostTensor> &params) {
  // Held-out window `w` as the step's inputs.
  auto window = [&](int64_t w) {
    std::vector<HostTensor> inputs = tokenWindows(
        *run.evalTokens, p.batch, p.seq, w, 1, p.feeds, p.objective);
    if (p.lossScale) {
      HostTensor scale(DType::F32, {});
      scale.floats[0] = 1.0f;
      inputs.push_back(std::move(scale));
    }
    return inputs;
  };
  double sum = 0;
  if (p.pipeline) {
    // The evaluation pipeline on m windows at a time: the schedule's
    // forward steps of as many micro-batches as are left (a prefix of the
    // micro-batches runs as the whole list does).
    if (!p.evaluationPipeline)
      throw std::runtime_error("the program has no evaluation pipeline");
    PipelineProgram program =
        withStageFunctions(*p.evaluationPipeline, p, params, true);
    const std::vector<std::vector<PipelineStep>> all = program.steps;
    const int m = std::max(1, program.microBatches);
    const int s = pipelineRankOf(p, ctx.rank);
    const std::set<int> outputs = outputsOf(program, s);
    for (int64_t first = 0; first < run.evalIters; first += m) {
      const int count = int(std::min<int64_t>(m, run.evalIters - first));
      for (size_t r = 0; r < all.size(); ++r) {
        program.steps[r].clear();
        for (const PipelineStep &step : all[r])
          if (step.microBatch < count)
            program.steps[r].push_back(step);
      }
      program.microBatches = count;
      std::vector<std::vector<HostTensor>> micro;
      for (int b = 0; b < count; ++b)
        micro.push_back(window(first + b));
      std::vector<HostTensor> mine =
          runPipelineRank(ctx, program, byInput(micro));
      if (mine.size() != outputs.size() * size_t(count))
        throw std::runtime_error(absl::StrCat(
            "pipeline rank ", s, "'s evaluation steps returned ", mine.size(),
            " values, not ", outputs.size() * size_t(count)));
      // (The loss, output 0, first: one per micro-batch.)
      if (outputs.count(0))
        for (int b = 0; b < count; ++b)
          sum += mine[size_t(b)].at(0);
    }
    return sum / double(run.evalIters);
  }
  for (int64_t w = 0; w < run.evalIters; ++w) {
    std::vector<HostTensor> inputs = window(w);
    if (inputs.size() != p.stepInputs.size())
      throw std::runtime_error(absl::StrCat("the evaluation step takes ",
                                            p.stepInputs.size(),
                                            " inputs, got ", inputs.size()));
    std::vector<HostTensor> mine;
    for (size_t i = 0; i < inputs.size(); ++i)
      mine.push_back(
          scatterBlock(inputs[i], p.stepInputs[i], ctx.mesh, ctx.rank));
    std::vector<HostTensor> out = p.evaluate(ctx, mine, params);
    if (out.empty())
      throw std::runtime_error("the evaluation step returned no loss");
    sum += out[0].at(0);
  }
  return sum / double(run.evalIters);
}

/// One rank's training: its blocks of the parameters and the optimizer
/// state, and the steps. Returns the final blocks of the parameters;
/// `sideBytes` gets what the rank sent that is not the training's: to write
/// checkpoints and to evaluate (on the host communicator, then on the
/// backend's, a GPU program's).
std::vector<HostTensor> trainRank(RankContext &ctx, const TrainingProgram &p,
                                  const TrainingRun &run,
                                  std::pair<int64_t, int64_t> &sideBytes) {
  if (p.rankSetup && !ctx.backend)
    ctx.backend = p.rankSetup(ctx);
  // The parameters it holds (with a pipeline, its stages'): their blocks.
  const TrainingOptimizer &optimizer = optimizerOf(p, ctx.rank);
  const std::vector<bool> held = heldParameters(p, ctx.rank);
  std::vector<HostTensor> params(p.parameters.size());
  for (size_t k = 0; k < p.parameters.size(); ++k)
    if (held[k])
      params[k] =
          scatterBlock(asType(loadWeight(ctx, p.parameters[k].file, DType::F32,
                                         p.parameters[k].shape),
                              DType::F32),
                       p.parameters[k].layout, ctx.mesh, ctx.rank);
  // The optimizer's state, by (role, parameter): zeros to begin with.
  OptimizerState state;
  for (size_t i = 0; i < optimizer.arguments.size(); ++i) {
    const OptimizerSlot &slot = optimizer.arguments[i];
    if (slot.parameter >= 0 && slot.role != "param" && slot.role != "grad")
      state[{slot.role, slot.parameter}] =
          HostTensor(DType::F32, optimizer.argumentTypes[i].shape);
  }
  // The rank that prints the steps and writes the log: the first that has
  // the loss (with a pipeline, of the last stage's pipeline rank).
  const int perStage = p.pipeline ? int(p.mesh.size()) / p.pipeline->stages : 1;
  const int printer = p.pipeline ? (p.pipeline->stages - 1) * perStage : 0;
  // The optimizer steps taken, and loss scaling's scale.
  LossScaling scaling;
  scaling.scale = p.lossScale;
  // Resumed: the checkpoint's values, and its step.
  int64_t start = 0;
  if (!run.resumeDir.empty()) {
    start = restoreCheckpoint(ctx, p, run.resumeDir, params, state, scaling);
    if (ctx.rank == printer)
      std::cout << "resumed from " << run.resumeDir << " at step " << start
                << "\n";
  }
  int64_t &checkpointBytes = sideBytes.first;
  sideBytes = {0, 0};
  RankTrainingStep step;
  step.step = [&](RankContext &c, const std::vector<HostTensor> &inputs) {
    return p.step(c, inputs, params);
  };
  step.inputs = p.stepInputs;
  step.reduce = p.reduce;
  step.partial = p.partial;
  step.everyMicroBatch = p.everyMicroBatch;
  // Rank 0 logs each step as weft train --log does.
  std::ofstream log;
  const bool jsonl =
      run.logPath.size() >= 6 &&
      run.logPath.compare(run.logPath.size() - 6, 6, ".jsonl") == 0;
  if (ctx.rank == printer && !run.logPath.empty()) {
    // A resumed run adds to the log it continues, as weft train does.
    std::error_code ec;
    const bool append =
        start > 0 && std::filesystem::file_size(run.logPath, ec) > 0 && !ec;
    log.open(run.logPath, append ? std::ios::app : std::ios::trunc);
    if (!log)
      throw std::runtime_error("cannot write " + run.logPath);
    if (!jsonl && !append)
      log << "step,loss,lr,grad_norm,tokens,seconds"
          << (scaling.scale ? ",loss_scale,skipped" : "")
          << (run.evalTokens ? ",val_loss" : "") << "\n";
  }
  const auto begin = std::chrono::steady_clock::now();
  int64_t tokensSeen = 0;
  for (int64_t s = start; s < run.steps; ++s) {
    const auto stepBegin = std::chrono::steady_clock::now();
    std::vector<std::vector<HostTensor>> micro;
    for (int64_t w = 0; w < run.gradAccum; ++w) {
      micro.push_back(tokenWindows(run.tokens, p.batch, p.seq,
                                   s * run.gradAccum + w, 1, p.feeds,
                                   p.objective));
      if (scaling.scale) {
        HostTensor scale(DType::F32, {});
        scale.floats[0] = float(scaling.factor());
        micro.back().push_back(std::move(scale));
      }
    }
    // The loss summed over the micro-batches (where the rank has it), and
    // each held parameter's gradient block.
    std::optional<double> lossSum;
    std::function<HostTensor(int)> gradientOf;
    std::vector<HostTensor> sums;
    PipelineStepResult piped;
    if (p.pipeline) {
      piped = runPipelineTrainingStep(ctx, p, params, micro, run.processes);
      lossSum = piped.loss;
      gradientOf = [&](int k) {
        auto found = piped.gradients.find(p.parameters[size_t(k)].gradient);
        if (found == piped.gradients.end())
          throw std::runtime_error(
              absl::StrCat("pipeline rank ", pipelineRankOf(p, ctx.rank),
                           "'s stages do not return the gradient of ",
                           p.parameters[size_t(k)].name));
        return std::move(found->second);
      };
    } else {
      sums = runTrainingStepOnRank(ctx, step, micro);
      lossSum = sums[0].at(0);
      gradientOf = [&](int k) {
        return std::move(sums[size_t(p.parameters[size_t(k)].gradient)]);
      };
    }
    tokensSeen += run.gradAccum * p.batch * p.seq;
    const double lr = run.schedule.at(s);
    std::vector<HostTensor> in;
    for (size_t i = 0; i < optimizer.arguments.size(); ++i) {
      const OptimizerSlot &slot = optimizer.arguments[i];
      if (std::optional<float> scalar = optimizerScalar(
              slot.role, p.constants, lr, scaling.optimizerSteps + 1,
              run.gradAccum, scaling.factor())) {
        HostTensor tensor(DType::F32, {});
        tensor.floats[0] = *scalar;
        in.push_back(std::move(tensor));
      } else if (slot.role == "grad") {
        in.push_back(gradientOf(slot.parameter));
      } else if (slot.role == "param") {
        in.push_back(params[size_t(slot.parameter)]);
      } else {
        in.push_back(state.at({slot.role, slot.parameter}));
      }
    }
    std::vector<HostTensor> out = optimizer.function(ctx, in);
    double norm = 0;
    for (size_t r = 0; r < optimizer.results.size() && r < out.size(); ++r) {
      const OptimizerSlot &slot = optimizer.results[r];
      if (slot.role == "grad_norm")
        norm = out[r].at(0);
      else if (slot.role == "param")
        params[size_t(slot.parameter)] = std::move(out[r]);
      else
        state[{slot.role, slot.parameter}] = std::move(out[r]);
    }
    const double loss = lossSum.value_or(0) / double(run.gradAccum);
    if (lossSum && !std::isfinite(loss))
      throw std::runtime_error(absl::StrCat(
          "step ", s + 1, ": the loss is not finite (", loss, "); lower --lr"));
    // Loss scaling: an overflow skipped the update and moves the scale.
    const double usedScale = scaling.factor();
    const bool taken = scaling.afterStep(norm);
    if (!run.saveDir.empty() &&
        (s + 1 == run.steps ||
         (run.saveEvery > 0 && (s + 1) % run.saveEvery == 0)))
      checkpointBytes +=
          saveCheckpoint(ctx, p, run.saveDir, s + 1, params, state, scaling);
    // The held-out loss, on every rank (the evaluation step communicates).
    std::optional<double> heldOut;
    if (run.evalTokens &&
        (s + 1 == run.steps ||
         (run.evalEvery > 0 && (s + 1) % run.evalEvery == 0))) {
      const int64_t host = ctx.comm->bytesSent(ctx.rank),
                    backend = ctx.backend ? ctx.backend->bytesSent() : 0;
      heldOut = evaluateHeldOut(ctx, p, run, params);
      sideBytes.first += ctx.comm->bytesSent(ctx.rank) - host;
      sideBytes.second +=
          (ctx.backend ? ctx.backend->bytesSent() : 0) - backend;
    }
    if (ctx.rank != printer)
      continue;
    auto now = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(now - begin).count();
    double stepSeconds = std::chrono::duration<double>(now - stepBegin).count();
    char line[256];
    std::snprintf(line, sizeof line,
                  "step %lld/%lld  loss %.6f  lr %.3e  grad_norm %.4f  "
                  "tokens/s %.0f  eta %.0fs",
                  (long long)(s + 1), (long long)run.steps, loss, lr, norm,
                  double(tokensSeen) / std::max(seconds, 1e-9),
                  stepSeconds * double(run.steps - s - 1));
    std::cout << line;
    if (scaling.scale) {
      std::snprintf(line, sizeof line, "  loss_scale %g", usedScale);
      std::cout << line << (taken ? "" : "  skipped: the gradients overflowed");
    }
    std::cout << "\n";
    if (heldOut) {
      std::snprintf(line, sizeof line,
                    "eval after step %lld/%lld  val_loss %.6f  val_ppl %.4g  "
                    "(%lld micro-batches of ",
                    (long long)(s + 1), (long long)run.steps, *heldOut,
                    std::exp(*heldOut), (long long)run.evalIters);
      std::cout << line << run.evalName << ")\n";
    }
    std::cout << std::flush;
    if (log.is_open()) {
      std::snprintf(line, sizeof line,
                    jsonl ? "{\"step\": %lld, \"loss\": %.9f, \"lr\": %.6e, "
                            "\"grad_norm\": %.6f, \"tokens\": %lld, "
                            "\"seconds\": %.3f"
                          : "%lld,%.9f,%.6e,%.6f,%lld,%.3f",
                    (long long)(s + 1), loss, lr, norm, (long long)tokensSeen,
                    seconds);
      log << line;
      if (scaling.scale) {
        std::snprintf(line, sizeof line,
                      jsonl ? ", \"loss_scale\": %.17g, \"skipped\": %s"
                            : ",%.17g,%s",
                      usedScale,
                      jsonl ? (taken ? "false" : "true") : (taken ? "0" : "1"));
        log << line;
      }
      // (weft train's val_loss column: empty on the steps not evaluated.)
      if (run.evalTokens && (heldOut || !jsonl)) {
        std::snprintf(line, sizeof line,
                      jsonl ? ", \"val_loss\": %.9f" : ",%.9f",
                      heldOut.value_or(0));
        log << (heldOut ? line : ",");
      }
      log << (jsonl ? "}\n" : "\n") << std::flush;
      if (!log)
        throw std::runtime_error("cannot write " + run.logPath);
    }
  }
  return params;
}

/// Rank 0's end: each parameter whole, and the bytes each rank sent.
int writeTrainedParameters(const TrainingProgram &p, const std::string &dir,
                           const std::vector<HostTensor> &whole,
                           const std::vector<int64_t> &bytes) {
  if (!createOutputDirectory(dir))
    return 1;
  std::string names;
  for (size_t k = 0; k < whole.size(); ++k) {
    if (absl::Status status =
            writeNpy(absl::StrCat(dir, "/param-", k, ".npy"), whole[k]);
        !status.ok()) {
      std::cerr << "error: " << status.message() << "\n";
      return 1;
    }
    names += p.parameters[k].name + "\n";
  }
  if (absl::Status status = writeFileAtomically(dir + "/parameters.txt", names);
      !status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return 1;
  }
  std::cout << p.mesh.size() << " ranks; bytes sent per rank:";
  for (int64_t b : bytes)
    std::cout << ' ' << b;
  std::cout << "\n";
  return 0;
}

} // namespace

int weft::rt::trainingProgramMain(int argc, char **argv,
                                  const TrainingProgram &program) {
  int exitCode = 0;
  std::optional<LaunchInfo> launch = programLaunch(program.mesh, &exitCode);
  if (!launch)
    return exitCode;
  std::optional<TrainingRun> run =
      parseTrainingArguments(argc, argv, program, &exitCode);
  if (!run)
    return exitCode;
  run->processes = launch->worldSize > 1;
  std::vector<Layout> layouts;
  for (const TrainedParameter &param : program.parameters)
    layouts.push_back(param.layout);
  // With a pipeline, each parameter is gathered from the first pipeline rank
  // that holds it; the others give a block of its shape.
  std::vector<int> holders;
  std::vector<Shape> blockShapes;
  try {
    for (const CheckpointEntry &e : checkpointEntries(program))
      if (e.role == "param") {
        holders.push_back(e.holder);
        blockShapes.push_back(e.block);
      }
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  auto heldBlocks = [&](std::vector<HostTensor> blocks, int rank) {
    const std::vector<bool> held = heldParameters(program, rank);
    for (size_t k = 0; k < blocks.size(); ++k)
      if (!held[k])
        blocks[k] = HostTensor(DType::F32, blockShapes[k]);
    return blocks;
  };
  if (!program.pipeline)
    holders.clear();
  if (launch->worldSize <= 1) {
    // Every rank a thread over the in-process communicator.
    std::vector<int64_t> bytes;
    std::vector<std::pair<int64_t, int64_t>> sideBytes(program.mesh.size());
    auto results = runRanks(
        [&](RankContext &ctx) {
          return trainRank(ctx, program, *run, sideBytes[size_t(ctx.rank)]);
        },
        program.mesh, run->weightsDir, &bytes, run->timeout);
    if (!results.ok()) {
      std::cerr << "error: " << results.status().message() << "\n";
      return 1;
    }
    // The bytes of training, without the checkpoints' gathers.
    // (Counted on the host communicator.)
    for (size_t r = 0; r < bytes.size() && r < sideBytes.size(); ++r)
      bytes[r] -= sideBytes[r].first;
    std::vector<HostTensor> whole;
    for (size_t k = 0; k < layouts.size(); ++k) {
      std::vector<HostTensor> blocks;
      for (std::vector<HostTensor> &rank : *results)
        blocks.push_back(std::move(rank[k]));
      if (k < holders.size())
        blocks = blocksOfHolder(std::move(blocks), program.mesh, holders[k]);
      whole.push_back(gatherBlocks(blocks, layouts[k], program.mesh));
    }
    return writeTrainedParameters(program, run->outputDir, whole, bytes);
  }
  // One rank per process.
  auto joined =
      ProcessGroup::join(*launch, int(program.mesh.size()), run->timeout);
  if (!joined.ok()) {
    std::cerr << absl::StrCat("error: rank ", launch->rank, ": ",
                              joined.status().message(), "\n");
    return 1;
  }
  ProcessGroup &group = **joined;
  ExchangeCommunicator &comm = group.communicator();
  const int rank = group.rank();
  try {
    RankContext ctx{rank, program.mesh, &comm, run->weightsDir, run->timeout};
    std::pair<int64_t, int64_t> sideBytes;
    std::vector<HostTensor> blocks =
        heldBlocks(trainRank(ctx, program, *run, sideBytes), rank);
    std::vector<int64_t> bytes;
    std::vector<HostTensor> whole = gatherFromProcesses(
        comm, rank, program.mesh, layouts, blocks,
        comm.bytesSent(rank) + (ctx.backend ? ctx.backend->bytesSent() : 0) -
            sideBytes.first - sideBytes.second,
        bytes, holders);
    if (rank == 0 &&
        writeTrainedParameters(program, run->outputDir, whole, bytes) != 0)
      group.abort("cannot write the trained parameters");
  } catch (const std::exception &e) {
    group.abort(e.what());
  }
  group.finish();
  return 0;
}
