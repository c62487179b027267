//===- TensorFiles.cpp - Tensors in ONNX .pb and numpy .npy files ---------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/Exec/TensorFiles.h"
#include "weft/runtime/FileWrite.h"
#include "weft/runtime/NpyFile.h"

#include "onnx/onnx_pb.h"

#include <cstring>
#include <fstream>

using namespace weft;
using rt::DType;
using rt::HostTensor;

static bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T> static T load(const char *data, int64_t index) {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return value;
}

bool weft::readTensorFile(const std::string &path, HostTensor &tensor,
                          std::string &error) {
  if (endsWith(path, ".npy")) {
    absl::StatusOr<HostTensor> read = rt::readNpy(path);
    if (!read.ok()) {
      error = std::string(read.status().message());
      return false;
    }
    tensor = std::move(*read);
    return true;
  }
  std::ifstream file(path, std::ios::binary);
  onnx::TensorProto proto;
  if (!file) {
    error = "cannot open " + path;
    return false;
  }
  if (!proto.ParseFromIstream(&file)) {
    error = path + " is not an ONNX TensorProto";
    return false;
  }
  rt::Shape shape(proto.dims().begin(), proto.dims().end());
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && count > (int64_t(1) << 40) / d)) {
      error = path + " has an invalid shape " + rt::shapeString(shape);
      return false;
    }
    count *= d;
  }
  const std::string &raw = proto.raw_data();
  bool hasRaw = proto.has_raw_data();
  // The element count must match the data, raw or typed, before any read.
  auto checkRaw = [&](int64_t width, int64_t typed) {
    int64_t have = hasRaw ? static_cast<int64_t>(raw.size()) : typed * width;
    if (have != count * width) {
      error = path + " holds " + std::to_string(have / width) +
              " elements for shape " + rt::shapeString(shape) +
              " (is it a TensorProto?)";
      return false;
    }
    return true;
  };
  switch (proto.data_type()) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::DOUBLE: {
    bool isDouble = proto.data_type() == onnx::TensorProto::DOUBLE;
    if (!checkRaw(isDouble ? 8 : 4, isDouble ? proto.double_data_size()
                                             : proto.float_data_size()))
      return false;
    tensor = HostTensor(isDouble ? DType::F64 : DType::F32, shape);
    for (int64_t i = 0; i < count; ++i)
      tensor.floats[i] =
          hasRaw ? (isDouble ? static_cast<float>(load<double>(raw.data(), i))
                             : load<float>(raw.data(), i))
                 : (isDouble ? static_cast<float>(proto.double_data(i))
                             : proto.float_data(i));
    return true;
  }
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  // ONNX's test data stores bfloat16 as uint16 bit patterns (numpy has no
  // bfloat16); Weft, which has no uint16, reads them as bfloat16.
  case onnx::TensorProto::UINT16: {
    bool isHalf = proto.data_type() == onnx::TensorProto::FLOAT16;
    if (!checkRaw(2, proto.int32_data_size()))
      return false;
    tensor = HostTensor(isHalf ? DType::F16 : DType::BF16, shape);
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits = hasRaw ? load<uint16_t>(raw.data(), i)
                             : static_cast<uint16_t>(proto.int32_data(i));
      tensor.floats[i] = isHalf ? rt::f16BitsToFloat(bits) : rt::bf16BitsToFloat(bits);
    }
    return true;
  }
  case onnx::TensorProto::INT64:
    if (!checkRaw(8, proto.int64_data_size()))
      return false;
    tensor = HostTensor(DType::I64, shape);
    for (int64_t i = 0; i < count; ++i)
      tensor.ints[i] = hasRaw ? load<int64_t>(raw.data(), i) : proto.int64_data(i);
    return true;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL: {
    bool isBool = proto.data_type() == onnx::TensorProto::BOOL;
    if (!checkRaw(isBool ? 1 : 4, proto.int32_data_size()))
      return false;
    tensor = HostTensor(isBool ? DType::Bool : DType::I32, shape);
    for (int64_t i = 0; i < count; ++i)
      tensor.ints[i] = hasRaw ? (isBool ? raw[i] != 0 : load<int32_t>(raw.data(), i))
                              : proto.int32_data(i);
    return true;
  }
  default:
    error = path + " has element type " +
            onnx::TensorProto::DataType_Name(
                static_cast<onnx::TensorProto::DataType>(proto.data_type())) +
            ", which Weft does not run";
    return false;
  }
}

bool weft::writeTensorFile(const std::string &path, const HostTensor &tensor,
                           std::string &error) {
  if (endsWith(path, ".npy")) {
    absl::Status status = rt::writeNpy(path, tensor);
    if (!status.ok())
      error = std::string(status.message());
    return status.ok();
  }
  onnx::TensorProto proto;
  for (int64_t d : tensor.shape)
    proto.add_dims(d);
  std::string raw;
  auto append = [&](const void *data, size_t size) {
    raw.append(static_cast<const char *>(data), size);
  };
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    switch (tensor.dtype) {
    case DType::F32:
      append(&tensor.floats[i], 4);
      break;
    case DType::F16: {
      uint16_t bits = rt::floatToF16Bits(tensor.floats[i]);
      append(&bits, 2);
      break;
    }
    case DType::BF16: {
      uint16_t bits = rt::floatToBF16Bits(tensor.floats[i]);
      append(&bits, 2);
      break;
    }
    case DType::I64:
      append(&tensor.ints[i], 8);
      break;
    case DType::F64: {
      double value = tensor.floats[i];
      append(&value, 8);
      break;
    }
    case DType::I32: {
      int32_t value = static_cast<int32_t>(tensor.ints[i]);
      append(&value, 4);
      break;
    }
    case DType::Bool:
      raw.push_back(tensor.ints[i] ? 1 : 0);
      break;
    }
  }
  static const onnx::TensorProto::DataType types[] = {
      onnx::TensorProto::FLOAT, onnx::TensorProto::FLOAT16,
      onnx::TensorProto::BFLOAT16, onnx::TensorProto::INT64,
      onnx::TensorProto::INT32, onnx::TensorProto::BOOL,
      onnx::TensorProto::DOUBLE};
  proto.set_data_type(types[static_cast<int>(tensor.dtype)]);
  proto.set_raw_data(raw);
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) {
    error = "cannot serialize " + path;
    return false;
  }
  absl::Status status = rt::writeFileAtomically(path, bytes);
  if (!status.ok())
    error = std::string(status.message());
  return status.ok();
}
