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

#include "absl/strings/str_cat.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>

namespace weft::rt {

namespace {

struct NpyHeader {
  std::string type;
  Shape shape;
  /// Where the data starts.
  size_t dataOffset = 0;
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
  if (prefix[6] == 1) {
    headerLength = static_cast<uint8_t>(prefix[8]) |
                   (static_cast<size_t>(static_cast<uint8_t>(prefix[9])) << 8);
    headerStart = 10;
  } else {
    if (got < 12)
      return absl::InvalidArgumentError(absl::StrCat(path, " is truncated"));
    headerLength = 0;
    for (int i = 3; i >= 0; --i)
      headerLength = (headerLength << 8) | static_cast<uint8_t>(prefix[8 + i]);
    headerStart = 12;
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
  std::smatch descr, order, shapeMatch;
  if (!std::regex_search(header, descr, std::regex("'descr':\\s*'([^']*)'")) ||
      !std::regex_search(header, order,
                         std::regex("'fortran_order':\\s*(True|False)")) ||
      !std::regex_search(header, shapeMatch,
                         std::regex("'shape':\\s*\\(([^)]*)\\)")))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read the .npy header"));
  if (order[1] == "True")
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": Fortran-order arrays are not supported"));
  NpyHeader result;
  std::string dims = shapeMatch[1];
  std::regex number("\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number);
       it != std::sregex_iterator(); ++it)
    result.shape.push_back(std::stoll(it->str()));
  result.type = descr[1];
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

absl::StatusOr<HostTensor> decode(const std::string &path,
                                  const std::string &type, const Shape &shape,
                                  const char *data, size_t available) {
  int64_t count = numElements(shape);
  auto need = [&](size_t width) -> absl::Status {
    if (available < count * width)
      return absl::InvalidArgumentError(absl::StrCat(
          path, " holds ", available, " data bytes, shape ",
          shapeString(shape), " of ", type, " needs ", count * width));
    return absl::OkStatus();
  };
  HostTensor tensor;
  if (type == "<f4" || type == "<f8" || type == "<f2") {
    size_t width = type == "<f8" ? 8 : type == "<f4" ? 4 : 2;
    if (absl::Status status = need(width); !status.ok())
      return status;
    tensor = HostTensor(type == "<f2"   ? DType::F16
                        : type == "<f8" ? DType::F64
                                        : DType::F32,
                        shape);
    for (int64_t i = 0; i < count; ++i) {
      if (width == 4) {
        std::memcpy(&tensor.floats[i], data + 4 * i, 4);
      } else if (width == 8) {
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
  if (type == "<i8" || type == "<i4" || type == "|b1") {
    size_t width = type == "<i8" ? 8 : type == "<i4" ? 4 : 1;
    if (absl::Status status = need(width); !status.ok())
      return status;
    tensor = HostTensor(width == 8 ? DType::I64 : width == 4 ? DType::I32 : DType::Bool,
                        shape);
    for (int64_t i = 0; i < count; ++i) {
      if (width == 8) {
        std::memcpy(&tensor.ints[i], data + 8 * i, 8);
      } else if (width == 4) {
        int32_t value;
        std::memcpy(&value, data + 4 * i, 4);
        tensor.ints[i] = value;
      } else {
        tensor.ints[i] = data[i] != 0;
      }
    }
    return tensor;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": element type '", type, "' is not supported"));
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

absl::StatusOr<HostTensor> readNpy(const std::string &path) {
  std::ifstream file;
  absl::StatusOr<NpyHeader> header = openNpy(path, file);
  if (!header.ok())
    return header.status();
  file.clear();
  file.seekg(std::streamoff(header->dataOffset));
  std::string bytes((std::istreambuf_iterator<char>(file)),
                    std::istreambuf_iterator<char>());
  return decode(path, header->type, header->shape, bytes.data(), bytes.size());
}

absl::StatusOr<HostTensor> readNpyShard(const std::string &path, int64_t dim,
                                        int64_t index, int64_t parts) {
  std::ifstream file;
  absl::StatusOr<NpyHeader> header = openNpy(path, file);
  if (!header.ok())
    return header.status();
  const Shape &shape = header->shape;
  size_t width = elementWidth(header->type);
  if (width == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": element type '", header->type, "' is not supported"));
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
  std::ofstream file(path, std::ios::binary);
  if (!file)
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  file.write("\x93NUMPY\x01\x00", 8);
  uint16_t length = static_cast<uint16_t>(header.size());
  file.put(static_cast<char>(length & 0xFF));
  file.put(static_cast<char>(length >> 8));
  file.write(header.data(), header.size());
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    switch (tensor.dtype) {
    case DType::F32:
    case DType::BF16:
      file.write(reinterpret_cast<const char *>(&tensor.floats[i]), 4);
      break;
    case DType::F16: {
      uint16_t bits = floatToF16Bits(tensor.floats[i]);
      file.write(reinterpret_cast<const char *>(&bits), 2);
      break;
    }
    case DType::I64:
      file.write(reinterpret_cast<const char *>(&tensor.ints[i]), 8);
      break;
    case DType::F64: {
      double value = tensor.floats[i];
      file.write(reinterpret_cast<const char *>(&value), 8);
      break;
    }
    case DType::I32: {
      int32_t value = static_cast<int32_t>(tensor.ints[i]);
      file.write(reinterpret_cast<const char *>(&value), 4);
      break;
    }
    case DType::Bool:
      file.put(tensor.ints[i] ? 1 : 0);
      break;
    }
  }
  return file ? absl::OkStatus()
              : absl::DataLossError(absl::StrCat("failed writing ", path));
}

} // namespace weft::rt
