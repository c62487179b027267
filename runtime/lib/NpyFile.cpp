//===- NpyFile.cpp - numpy .npy files -------------------------------------===//
//
// Part of the Weft project.
//
// Format: "\x93NUMPY", version, a little-endian header length, then a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded to a multiple of 64 bytes, then the raw data.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/NpyFile.h"

#include "weft/runtime/FileWrite.h"

#include "absl/strings/str_cat.h"

#include <cstring>
#include <fstream>
#include <iterator>

namespace weft::rt {

namespace {

struct NpyHeader {
  std::string type;
  Shape shape;
  /// Where the data starts.
  size_t dataOffset = 0;
};

/// A strict reader of the header's dict literal, as numpy writes it and
/// `numpy.lib.format` reads it: exactly the keys 'descr' (a string),
/// 'fortran_order' (True or False) and 'shape' (a tuple of non-negative
/// integers, "(4,)" for one dimension), then only padding.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &path)
      : text(text), path(path) {}

  absl::Status parse(NpyHeader &header) {
    bool fortran = false, haveDescr = false, haveOrder = false,
         haveShape = false;
    skipSpace();
    if (!eat('{'))
      return fail("does not start with '{'");
    while (true) {
      skipSpace();
      if (eat('}'))
        break;
      std::string key;
      if (!readString(key))
        return fail("has a key that is not a quoted string");
      skipSpace();
      if (!eat(':'))
        return fail(absl::StrCat("has no ':' after '", key, "'"));
      skipSpace();
      if (key == "descr" && !haveDescr) {
        haveDescr = true;
        if (!readString(header.type))
          return fail("'descr' is not a quoted string");
      } else if (key == "fortran_order" && !haveOrder) {
        haveOrder = true;
        if (eatWord("True"))
          fortran = true;
        else if (!eatWord("False"))
          return fail("'fortran_order' is neither True nor False");
      } else if (key == "shape" && !haveShape) {
        haveShape = true;
        if (absl::Status status = readShape(header.shape); !status.ok())
          return status;
      } else {
        return fail(
            absl::StrCat("has an unexpected or repeated key '", key, "'"));
      }
      skipSpace();
      if (eat(','))
        continue;
      skipSpace();
      if (eat('}'))
        break;
      return fail("has no ',' or '}' after a value");
    }
    if (!haveDescr || !haveOrder || !haveShape)
      return fail("lacks 'descr', 'fortran_order' or 'shape'");
    skipSpace();
    if (at != text.size())
      return fail("has bytes after the dict that are not padding");
    if (fortran)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": Fortran-order arrays are not supported"));
    return absl::OkStatus();
  }

private:
  absl::Status fail(const std::string &why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the .npy header ", why, " (at byte ", at, ")"));
  }
  void skipSpace() {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t' ||
                                text[at] == '\n' || text[at] == '\r'))
      ++at;
  }
  bool eat(char c) {
    if (at < text.size() && text[at] == c) {
      ++at;
      return true;
    }
    return false;
  }
  bool eatWord(const char *word) {
    size_t n = std::strlen(word);
    if (text.compare(at, n, word) != 0)
      return false;
    at += n;
    return true;
  }
  bool readString(std::string &out) {
    if (at >= text.size() || (text[at] != '\'' && text[at] != '"'))
      return false;
    char quote = text[at++];
    size_t end = text.find(quote, at);
    if (end == std::string::npos)
      return false;
    out = text.substr(at, end - at);
    if (out.find('\\') != std::string::npos)
      return false;
    at = end + 1;
    return true;
  }
  absl::Status readShape(Shape &shape) {
    if (!eat('('))
      return fail("'shape' is not a tuple");
    skipSpace();
    if (eat(')'))
      return absl::OkStatus();
    while (true) {
      size_t begin = at;
      while (at < text.size() && text[at] >= '0' && text[at] <= '9')
        ++at;
      if (at == begin)
        return fail("'shape' holds something other than non-negative "
                    "integers");
      int64_t value = 0;
      for (size_t i = begin; i < at; ++i) {
        int digit = text[i] - '0';
        if (value > (INT64_MAX - digit) / 10)
          return fail("'shape' has a dimension too large");
        value = value * 10 + digit;
      }
      shape.push_back(value);
      skipSpace();
      bool comma = eat(',');
      skipSpace();
      if (eat(')')) {
        if (shape.size() == 1 && !comma)
          return fail("'shape' of one dimension must be written (n,)");
        return absl::OkStatus();
      }
      if (!comma)
        return fail("'shape' has no ',' between dimensions");
    }
  }

  const std::string &text;
  const std::string &path;
  size_t at = 0;
};

/// Reads the header of an open .npy file.
absl::StatusOr<NpyHeader> readHeader(std::ifstream &file,
                                     const std::string &path) {
  char prefix[12] = {};
  file.read(prefix, sizeof(prefix));
  size_t got = size_t(file.gcount());
  if (got < 10 || std::memcmp(prefix, "\x93NUMPY", 6) != 0)
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a .npy file"));
  size_t headerLength, headerStart;
  uint8_t major = uint8_t(prefix[6]), minor = uint8_t(prefix[7]);
  if (minor != 0)
    major = 0; // numpy writes versions 1.0, 2.0 and 3.0 only
  if (major == 1) {
    headerLength = static_cast<uint8_t>(prefix[8]) |
                   (static_cast<size_t>(static_cast<uint8_t>(prefix[9])) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (got < 12)
      return absl::InvalidArgumentError(absl::StrCat(path, " is truncated"));
    headerLength = 0;
    for (int i = 3; i >= 0; --i)
      headerLength = (headerLength << 8) | static_cast<uint8_t>(prefix[8 + i]);
    headerStart = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": .npy format version ", int(uint8_t(prefix[6])), ".",
        int(minor), " is not one numpy writes (1.0, 2.0 or 3.0)"));
  }
  if (headerLength > (1u << 20))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the .npy header is too long"));
  std::string header(headerLength, '\0');
  file.clear();
  file.seekg(std::streamoff(headerStart));
  file.read(header.data(), std::streamsize(headerLength));
  if (size_t(file.gcount()) != headerLength)
    return absl::InvalidArgumentError(absl::StrCat(path, " is truncated"));
  NpyHeader result;
  if (absl::Status status = HeaderParser(header, path).parse(result);
      !status.ok())
    return status;
  result.dataOffset = headerStart + headerLength;
  return result;
}

/// Bytes per element of a supported .npy type, 0 if unsupported.
size_t elementWidth(const std::string &type) {
  if (type == "<f8" || type == "<i8")
    return 8;
  if (type == "<f4" || type == "<i4")
    return 4;
  if (type == "<f2")
    return 2;
  if (type == "|b1")
    return 1;
  return 0;
}

/// The bytes that `shape` of `type` needs, or an error that says why they
/// cannot be computed (a negative or overflowing size).
absl::StatusOr<int64_t> dataBytes(const std::string &path,
                                  const std::string &type, const Shape &shape) {
  size_t width = elementWidth(type);
  if (width == 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": element type '", type, "' is not supported"));
  int64_t bytes = checkedBytes(checkedNumElements(shape), int64_t(width));
  if (bytes < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": shape ", shapeString(shape), " of ", type,
                     " is too large to be a real array"));
  return bytes;
}

/// Converts `available` bytes, exactly those of `shape`, to a tensor.
absl::StatusOr<HostTensor> decode(const std::string &path,
                                  const std::string &type, const Shape &shape,
                                  const char *data, size_t available) {
  absl::StatusOr<int64_t> bytes = dataBytes(path, type, shape);
  if (!bytes.ok())
    return bytes.status();
  if (int64_t(available) != *bytes)
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds ", available, " data bytes, but shape ",
                     shapeString(shape), " of ", type, " needs ", *bytes));
  int64_t count = checkedNumElements(shape);
  size_t width = elementWidth(type);
  HostTensor tensor;
  if (type == "<f4" || type == "<f8" || type == "<f2") {
    tensor = HostTensor(type == "<f2"   ? DType::F16
                        : type == "<f8" ? DType::F64
                                        : DType::F32,
                        shape);
    if (width == 4) {
      std::memcpy(tensor.floats.data(), data, size_t(count) * 4);
      return tensor;
    }
    for (int64_t i = 0; i < count; ++i) {
      if (width == 8) {
        double value;
        std::memcpy(&value, data + 8 * i, 8);
        tensor.floats[i] = static_cast<float>(value);
      } else {
        uint16_t bits;
        std::memcpy(&bits, data + 2 * i, 2);
        tensor.floats[i] = f16BitsToFloat(bits);
      }
    }
    return tensor;
  }
  tensor = HostTensor(width == 8   ? DType::I64
                      : width == 4 ? DType::I32
                                   : DType::Bool,
                      shape);
  if (width == 8) {
    std::memcpy(tensor.ints.data(), data, size_t(count) * 8);
    return tensor;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (width == 4) {
      int32_t value;
      std::memcpy(&value, data + 4 * i, 4);
      tensor.ints[i] = value;
    } else {
      tensor.ints[i] = data[i] != 0;
    }
  }
  return tensor;
}

/// The size of an open file, from its end.
int64_t fileSize(std::ifstream &file) {
  file.clear();
  file.seekg(0, std::ios::end);
  return int64_t(file.tellg());
}

/// Opens `path` and reads its header.
absl::StatusOr<NpyHeader> openNpy(const std::string &path,
                                  std::ifstream &file) {
  file.open(path, std::ios::binary);
  if (!file)
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  return readHeader(file, path);
}

} // namespace

/// The bytes of the data `header` declares, checked against the file before
/// anything is allocated: a file is exactly its header and its data.
static absl::StatusOr<int64_t> checkedDataBytes(const std::string &path,
                                                const NpyHeader &header,
                                                std::ifstream &file) {
  absl::StatusOr<int64_t> need = dataBytes(path, header.type, header.shape);
  if (!need.ok())
    return need.status();
  int64_t available = fileSize(file) - int64_t(header.dataOffset);
  if (available != *need)
    return absl::InvalidArgumentError(absl::StrCat(
        path, " holds ", available, " data bytes, but shape ",
        shapeString(header.shape), " of ", header.type, " needs ", *need));
  return need;
}

absl::StatusOr<HostTensor> readNpy(const std::string &path) {
  std::ifstream file;
  absl::StatusOr<NpyHeader> header = openNpy(path, file);
  if (!header.ok())
    return header.status();
  absl::StatusOr<int64_t> need = checkedDataBytes(path, *header, file);
  if (!need.ok())
    return need.status();
  std::string bytes(size_t(*need), '\0');
  file.clear();
  file.seekg(std::streamoff(header->dataOffset));
  file.read(bytes.data(), std::streamsize(bytes.size()));
  if (int64_t(file.gcount()) != *need)
    return absl::InvalidArgumentError(absl::StrCat(path, " could not be read"));
  return decode(path, header->type, header->shape, bytes.data(), bytes.size());
}

absl::StatusOr<HostTensor> readNpyShard(const std::string &path, int64_t dim,
                                        int64_t index, int64_t parts) {
  std::ifstream file;
  absl::StatusOr<NpyHeader> header = openNpy(path, file);
  if (!header.ok())
    return header.status();
  const Shape &shape = header->shape;
  if (absl::StatusOr<int64_t> need = checkedDataBytes(path, *header, file);
      !need.ok())
    return need.status();
  size_t width = elementWidth(header->type);
  if (dim < 0 || dim >= int64_t(shape.size()) || parts <= 0 ||
      shape[size_t(dim)] % parts != 0 || index < 0 || index >= parts)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": shape ", shapeString(shape), " has no shard ", index, " of ",
        parts, " along dimension ", dim));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  int64_t piece = shape[size_t(dim)] / parts;
  size_t run = size_t(piece * inner) * width;
  std::string bytes(size_t(outer) * run, '\0');
  // Only the shard's bytes: one contiguous run per outer index.
  for (int64_t o = 0; o < outer; ++o) {
    size_t from = header->dataOffset +
                  size_t((o * shape[size_t(dim)] + index * piece) * inner) *
                      width;
    file.clear();
    file.seekg(std::streamoff(from));
    file.read(bytes.data() + size_t(o) * run, std::streamsize(run));
    if (size_t(file.gcount()) != run)
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is truncated (shape ", shapeString(shape), ")"));
  }
  Shape shard = shape;
  shard[size_t(dim)] = piece;
  return decode(path, header->type, shard, bytes.data(), bytes.size());
}

absl::Status writeNpy(const std::string &path, const HostTensor &tensor) {
  std::string descr;
  switch (tensor.dtype) {
  case DType::F32:
  case DType::BF16:
    descr = "<f4";
    break;
  case DType::F16:
    descr = "<f2";
    break;
  case DType::F64:
    descr = "<f8";
    break;
  case DType::I64:
    descr = "<i8";
    break;
  case DType::I32:
    descr = "<i4";
    break;
  case DType::Bool:
    descr = "|b1";
    break;
  }
  // Python tuple syntax: "()", "(4,)", "(2, 3)".
  std::string shape = "(";
  for (size_t d = 0; d < tensor.shape.size(); ++d)
    shape += (d ? ", " : "") + std::to_string(tensor.shape[d]);
  shape += tensor.shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  uint16_t length = static_cast<uint16_t>(header.size());
  bytes.push_back(static_cast<char>(length & 0xFF));
  bytes.push_back(static_cast<char>(length >> 8));
  bytes += header;
  size_t dataStart = bytes.size();
  int64_t count = tensor.numel();
  bytes.resize(dataStart + size_t(count * dtypeBytes(tensor.dtype == DType::BF16
                                                         ? DType::F32
                                                         : tensor.dtype)));
  char *out = bytes.data() + dataStart;
  switch (tensor.dtype) {
  case DType::F32:
  case DType::BF16:
    std::memcpy(out, tensor.floats.data(), size_t(count) * 4);
    break;
  case DType::I64:
    std::memcpy(out, tensor.ints.data(), size_t(count) * 8);
    break;
  case DType::F16:
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits = floatToF16Bits(tensor.floats[i]);
      std::memcpy(out + 2 * i, &bits, 2);
    }
    break;
  case DType::F64:
    for (int64_t i = 0; i < count; ++i) {
      double value = tensor.floats[i];
      std::memcpy(out + 8 * i, &value, 8);
    }
    break;
  case DType::I32:
    for (int64_t i = 0; i < count; ++i) {
      int32_t value = static_cast<int32_t>(tensor.ints[i]);
      std::memcpy(out + 4 * i, &value, 4);
    }
    break;
  case DType::Bool:
    for (int64_t i = 0; i < count; ++i)
      out[i] = tensor.ints[i] ? 1 : 0;
    break;
  }
  return writeFileAtomically(path, bytes);
}

} // namespace weft::rt
