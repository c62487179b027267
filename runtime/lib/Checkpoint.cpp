//===- Checkpoint.cpp - weft train's checkpoints, without LLVM ------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/Checkpoint.h"

#include "weft/runtime/FileWrite.h"
#include "weft/runtime/NpyFile.h"

#include "absl/strings/str_cat.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <locale>
#include <map>
#include <sstream>

using namespace weft::rt;
namespace fs = std::filesystem;

namespace {

constexpr const char *kFormat = "weft-checkpoint-1";

//===----------------------------------------------------------------------===//
// The manifest's JSON
//===----------------------------------------------------------------------===//

/// A JSON value: enough of it for a manifest (objects, arrays, strings,
/// numbers, true, false, null).
struct Json {
  enum class Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object
  } kind = Kind::Null;
  double number = 0;
  bool boolean = false;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json *get(const std::string &key) const {
    if (kind != Kind::Object)
      return nullptr;
    auto found = object.find(key);
    return found == object.end() ? nullptr : &found->second;
  }
  const std::string *getString(const std::string &key) const {
    const Json *value = get(key);
    return value && value->kind == Kind::String ? &value->string : nullptr;
  }
  std::optional<int64_t> getInteger(const std::string &key) const {
    const Json *value = get(key);
    if (!value || !value->isCount(/*allowNegative=*/true))
      return std::nullopt;
    return int64_t(value->number);
  }
  /// A whole number small enough to be exact in a double (and so in an
  /// int64_t).
  bool isCount(bool allowNegative = false) const {
    return kind == Kind::Number && number == std::floor(number) &&
           std::fabs(number) <= 9.0e15 && (allowNegative || number >= 0);
  }
};

class JsonParser {
public:
  explicit JsonParser(const std::string &text) : text(text) {}

  /// The whole text as one value, or an error saying where it stops.
  absl::StatusOr<Json> parse() {
    Json value;
    if (!parseValue(value, 0))
      return absl::InvalidArgumentError(error);
    skipSpace();
    if (pos != text.size())
      return fail("text after the value");
    return value;
  }

private:
  absl::Status fail(const std::string &what) {
    return absl::InvalidArgumentError(absl::StrCat(what, " at offset ", pos));
  }
  bool failed(const std::string &what) {
    error = absl::StrCat(what, " at offset ", pos);
    return false;
  }
  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' ||
                                 text[pos] == '\r' || text[pos] == '\t'))
      ++pos;
  }
  bool literal(const char *word) {
    size_t n = std::char_traits<char>::length(word);
    if (text.compare(pos, n, word) != 0)
      return false;
    pos += n;
    return true;
  }
  bool parseString(std::string &out) {
    ++pos; // the opening quote
    while (pos < text.size() && text[pos] != '"') {
      char c = text[pos++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= text.size())
        break;
      char e = text[pos++];
      switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        if (pos + 4 > text.size())
          return failed("a short \\u escape");
        unsigned code = 0;
        for (int d = 0; d < 4; ++d) {
          char h = text[pos + d];
          int digit = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                      : h >= 'a' && h <= 'f'                      ? h - 'a' + 10
                      : h >= 'A' && h <= 'F'                      ? h - 'A' + 10
                                                                  : -1;
          if (digit < 0)
            return failed("a \\u escape that is not hexadecimal");
          code = code * 16 + unsigned(digit);
        }
        pos += 4;
        // Names are ASCII in practice; others are kept as UTF-8 of the
        // basic plane.
        if (code < 0x80) {
          out += char(code);
        } else if (code < 0x800) {
          out += char(0xC0 | (code >> 6));
          out += char(0x80 | (code & 0x3F));
        } else {
          out += char(0xE0 | (code >> 12));
          out += char(0x80 | ((code >> 6) & 0x3F));
          out += char(0x80 | (code & 0x3F));
        }
        break;
      }
      default:
        out += e; // \" \\ \/
      }
    }
    if (pos >= text.size())
      return failed("an unterminated string");
    ++pos; // the closing quote
    return true;
  }
  bool parseValue(Json &value, int depth) {
    if (depth > 64)
      return failed("nesting too deep");
    skipSpace();
    if (pos >= text.size())
      return failed("the end of the text where a value belongs");
    char c = text[pos];
    if (c == '{') {
      value.kind = Json::Kind::Object;
      ++pos;
      skipSpace();
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return true;
      }
      while (true) {
        skipSpace();
        if (pos >= text.size() || text[pos] != '"')
          return failed("a key that is not a string");
        std::string key;
        if (!parseString(key))
          return false;
        skipSpace();
        if (pos >= text.size() || text[pos] != ':')
          return failed("no ':' after a key");
        ++pos;
        if (!parseValue(value.object[key], depth + 1))
          return false;
        skipSpace();
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == '}') {
          ++pos;
          return true;
        }
        return failed("no ',' or '}' in an object");
      }
    }
    if (c == '[') {
      value.kind = Json::Kind::Array;
      ++pos;
      skipSpace();
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return true;
      }
      while (true) {
        value.array.emplace_back();
        if (!parseValue(value.array.back(), depth + 1))
          return false;
        skipSpace();
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == ']') {
          ++pos;
          return true;
        }
        return failed("no ',' or ']' in an array");
      }
    }
    if (c == '"') {
      value.kind = Json::Kind::String;
      return parseString(value.string);
    }
    if (literal("true") || literal("false")) {
      value.kind = Json::Kind::Bool;
      value.boolean = text[pos - 1] == 'e' && text[pos - 2] == 'u';
      return true;
    }
    if (literal("null"))
      return true;
    size_t end = pos;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) ||
            text[end] == '-' || text[end] == '+' || text[end] == '.' ||
            text[end] == 'e' || text[end] == 'E'))
      ++end;
    if (end == pos)
      return failed(absl::StrCat("an unexpected '", std::string(1, c), "'"));
    std::istringstream in(text.substr(pos, end - pos));
    in.imbue(std::locale::classic());
    if (!(in >> value.number) || !in.eof())
      return failed("a malformed number");
    value.kind = Json::Kind::Number;
    pos = end;
    return true;
  }

  const std::string &text;
  size_t pos = 0;
  std::string error;
};

std::string jsonString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", unsigned(c));
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

absl::Status renameOver(const fs::path &from, const fs::path &to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot rename ", from.string(),
                                            " to ", to.string(), ": ",
                                            ec.message()));
  return absl::OkStatus();
}

} // namespace

CheckpointState weft::rt::checkpointStateOf(const std::string &role) {
  if (role == "exp_avg" || role == "momentum_buffer")
    return CheckpointState::M;
  if (role == "exp_avg_sq")
    return CheckpointState::V;
  return CheckpointState::None;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

absl::Status weft::rt::writeCheckpoint(const std::string &saveDir,
                                       const Checkpoint &checkpoint) {
  const std::string name = absl::StrCat("step-", checkpoint.step);
  const fs::path dir = fs::path(saveDir) / name;
  const fs::path tmp = fs::path(saveDir) / (name + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot create ", tmp.string(), ": ", ec.message()));
  std::string entries;
  for (size_t i = 0; i < checkpoint.parameters.size(); ++i) {
    const CheckpointParameter &p = checkpoint.parameters[i];
    std::string shape;
    for (int64_t d : p.value.shape)
      absl::StrAppend(&shape, shape.empty() ? "" : ",", d);
    std::string entry = absl::StrCat("{\"name\":", jsonString(p.name),
                                     ",\"shape\":[", shape, "]");
    auto write = [&](const HostTensor &tensor,
                     const char *kind) -> absl::Status {
      std::string file = absl::StrCat(kind, "-", i, ".npy");
      if (absl::Status status = writeNpy((tmp / file).string(), tensor);
          !status.ok())
        return status;
      absl::StrAppend(&entry, ",\"",
                      kind == std::string("param") ? "value" : kind,
                      "\":", jsonString(file));
      return absl::OkStatus();
    };
    if (absl::Status status = write(p.value, "param"); !status.ok())
      return status;
    if (p.m)
      if (absl::Status status = write(*p.m, "m"); !status.ok())
        return status;
    if (p.v)
      if (absl::Status status = write(*p.v, "v"); !status.ok())
        return status;
    absl::StrAppend(&entries, entries.empty() ? "" : ",", entry, "}");
  }
  std::string feedback;
  if (checkpoint.feedback) {
    std::string kept;
    for (const CheckpointResidual &r : checkpoint.feedback->residuals) {
      std::string file = absl::StrCat("feedback-", r.rank, "-", r.site, ".npy");
      if (absl::Status status = writeNpy((tmp / file).string(), r.value);
          !status.ok())
        return status;
      absl::StrAppend(&kept, kept.empty() ? "" : ",", "{\"rank\":", r.rank,
                      ",\"site\":", r.site, ",\"file\":", jsonString(file),
                      "}");
    }
    feedback = absl::StrCat(
        ",\"feedback\":{\"plan\":", jsonString(checkpoint.feedback->plan),
        ",\"residuals\":[", kept, "]}");
  }
  std::string lossScale;
  if (const std::optional<CheckpointLossScale> &scaled = checkpoint.lossScale) {
    // (17 digits: the scale reads back as the same double.)
    char scale[32];
    std::snprintf(scale, sizeof scale, "%.17g", scaled->scale);
    lossScale =
        absl::StrCat(",\"loss_scale\":{\"scale\":", scale,
                     ",\"good_steps\":", scaled->goodSteps,
                     ",\"optimizer_steps\":", scaled->optimizerSteps, "}");
  }
  std::string manifest = absl::StrCat(
      "{\"format\":", jsonString(kFormat),
      ",\"optimizer\":", jsonString(checkpoint.optimizer), ",\"parameters\":[",
      entries, "]", feedback, lossScale, ",\"step\":", checkpoint.step, "}\n");
  if (absl::Status status =
          writeFileAtomically((tmp / "manifest.json").string(), manifest);
      !status.ok())
    return status;
  fs::remove_all(dir, ec);
  if (absl::Status status = renameOver(tmp, dir); !status.ok())
    return status;
  return writeFileAtomically((fs::path(saveDir) / "latest").string(),
                             name + "\n");
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

absl::StatusOr<Checkpoint> weft::rt::readCheckpoint(const std::string &path) {
  fs::path dir = path;
  const fs::path latest = fs::path(path) / "latest";
  if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string name;
    if (!std::getline(in, name))
      return absl::NotFoundError(absl::StrCat("cannot read ", latest.string()));
    while (!name.empty() && (name.back() == ' ' || name.back() == '\r'))
      name.pop_back();
    dir = fs::path(path) / name;
  }
  const std::string manifestPath = (dir / "manifest.json").string();
  std::ifstream in(manifestPath, std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat(manifestPath, ": cannot read the checkpoint's manifest"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  absl::StatusOr<Json> json = JsonParser(text).parse();
  if (!json.ok())
    return absl::InvalidArgumentError(absl::StrCat(
        manifestPath, ": corrupt manifest: ", json.status().message()));
  const std::string *format = json->getString("format");
  std::optional<int64_t> step = json->getInteger("step");
  const Json *entries = json->get("parameters");
  if (!format || *format != kFormat || !step || *step < 0 || !entries ||
      entries->kind != Json::Kind::Array)
    return absl::InvalidArgumentError(
        absl::StrCat(manifestPath, ": not a weft checkpoint manifest (format ",
                     kFormat, " with step and parameters)"));
  Checkpoint checkpoint;
  checkpoint.step = *step;
  checkpoint.manifestPath = manifestPath;
  if (const std::string *optimizer = json->getString("optimizer"))
    checkpoint.optimizer = *optimizer;
  for (size_t i = 0; i < entries->array.size(); ++i) {
    const Json &entry = entries->array[i];
    const std::string *name = entry.getString("name");
    const Json *shape = entry.get("shape");
    if (!name || !shape || shape->kind != Json::Kind::Array ||
        !entry.getString("value"))
      return absl::InvalidArgumentError(
          absl::StrCat(manifestPath, ": parameter #", i,
                       " is not {name, shape, value[, m, v]}"));
    Shape expected;
    for (const Json &d : shape->array) {
      if (!d.isCount())
        return absl::InvalidArgumentError(
            absl::StrCat(manifestPath, ": parameter #", i,
                         "'s shape is not a list of sizes"));
      expected.push_back(int64_t(d.number));
    }
    CheckpointParameter p;
    p.name = *name;
    auto read = [&](const char *key) -> absl::StatusOr<HostTensor> {
      const std::string file = (dir / *entry.getString(key)).string();
      absl::StatusOr<HostTensor> tensor = readNpy(file);
      if (!tensor.ok())
        return tensor.status();
      if (tensor->shape != expected || !tensor->isFloat())
        return absl::InvalidArgumentError(absl::StrCat(
            file, ": holds ", shapeString(tensor->shape), " for '", *name,
            "', the manifest says ", shapeString(expected)));
      return tensor;
    };
    absl::StatusOr<HostTensor> value = read("value");
    if (!value.ok())
      return value.status();
    p.value = std::move(*value);
    for (const char *key : {"m", "v"}) {
      if (!entry.getString(key))
        continue;
      absl::StatusOr<HostTensor> state = read(key);
      if (!state.ok())
        return state.status();
      (key == std::string("m") ? p.m : p.v) = std::move(*state);
    }
    checkpoint.parameters.push_back(std::move(p));
  }
  if (const Json *scaled = json->get("loss_scale")) {
    const Json *scale = scaled->get("scale");
    std::optional<int64_t> good = scaled->getInteger("good_steps");
    std::optional<int64_t> taken = scaled->getInteger("optimizer_steps");
    if (!scale || scale->kind != Json::Kind::Number ||
        !std::isfinite(scale->number) || !(scale->number > 0) || !good ||
        *good < 0 || !taken || *taken < 0 || *taken > *step)
      return absl::InvalidArgumentError(absl::StrCat(
          manifestPath,
          ": its loss_scale is not {scale > 0, good_steps, optimizer_steps "
          "<= step}"));
    checkpoint.lossScale = CheckpointLossScale{scale->number, *good, *taken};
  }
  if (const Json *feedback = json->get("feedback")) {
    const std::string *plan = feedback->getString("plan");
    const Json *kept = feedback->get("residuals");
    if (!plan || !kept || kept->kind != Json::Kind::Array)
      return absl::InvalidArgumentError(absl::StrCat(
          manifestPath, ": its feedback is not {plan, residuals}"));
    checkpoint.feedback.emplace();
    checkpoint.feedback->plan = *plan;
    for (size_t i = 0; i < kept->array.size(); ++i) {
      const Json &entry = kept->array[i];
      std::optional<int64_t> rank = entry.getInteger("rank");
      std::optional<int64_t> site = entry.getInteger("site");
      const std::string *file = entry.getString("file");
      if (!rank || !site || !file || *rank < 0 || *site < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(manifestPath, ": top-k residual #", i,
                         " is not {rank, site, file}"));
      CheckpointResidual residual;
      residual.rank = int(*rank);
      residual.site = *site;
      residual.file = (dir / *file).string();
      absl::StatusOr<HostTensor> value = readNpy(residual.file);
      if (!value.ok())
        return value.status();
      if (!value->isFloat())
        return absl::InvalidArgumentError(
            absl::StrCat(residual.file, ": a residual that is not floats"));
      residual.value = std::move(*value);
      checkpoint.feedback->residuals.push_back(std::move(residual));
    }
  }
  return checkpoint;
}
