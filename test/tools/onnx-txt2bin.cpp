//===- onnx-txt2bin.cpp - Write binary ONNX models for tests --------------===//
//
// Part of the Weft project.
//
//   onnx-txt2bin in.onnxtxt out.onnx [--external-data FILE]
//                [--external-threshold BYTES] [--pad-external BYTES]
//
// Parses ONNX's text format and writes the binary model. With
// --external-data, initializers of at least the threshold size move to FILE
// as torch.onnx.export does for large models; --pad-external appends that many
// zero bytes to FILE (sparse, so a 2 GB weight file costs no disk) and points
// one extra initializer at them, to build a large model without writing it.
//
//===----------------------------------------------------------------------===//

#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    std::cerr << "usage: onnx-txt2bin in.onnxtxt out.onnx [--external-data FILE] "
                 "[--external-threshold BYTES] [--pad-external BYTES]\n";
    return 2;
  }
  std::string externalFile;
  long long threshold = 1024, pad = 0;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--external-data")
      externalFile = argv[i + 1];
    else if (flag == "--external-threshold")
      threshold = std::stoll(argv[i + 1]);
    else if (flag == "--pad-external")
      pad = std::stoll(argv[i + 1]);
    else {
      std::cerr << "unknown option " << flag << "\n";
      return 2;
    }
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  onnx::ModelProto model;
  auto status = onnx::OnnxParser::Parse(model, text.str().c_str());
  if (!status.IsOK()) {
    std::cerr << status.ErrorMessage() << "\n";
    return 1;
  }
  if (!externalFile.empty()) {
    std::string dir = argv[2];
    size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    std::ofstream data(dir + "/" + externalFile, std::ios::binary);
    long long offset = 0;
    auto point = [&](onnx::TensorProto &tensor, long long at, long long length) {
      tensor.set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char *key, const std::string &value) {
        auto *entry = tensor.add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      };
      add("location", externalFile);
      add("offset", std::to_string(at));
      add("length", std::to_string(length));
    };
    for (onnx::TensorProto &tensor : *model.mutable_graph()->mutable_initializer()) {
      // Text-format tensors hold typed data; serialize it as raw bytes.
      std::string raw;
      if (tensor.float_data_size()) {
        raw.assign(reinterpret_cast<const char *>(tensor.float_data().data()),
                   tensor.float_data_size() * sizeof(float));
      } else if (tensor.int64_data_size()) {
        raw.assign(reinterpret_cast<const char *>(tensor.int64_data().data()),
                   tensor.int64_data_size() * sizeof(int64_t));
      } else {
        continue;
      }
      if (static_cast<long long>(raw.size()) < threshold)
        continue;
      tensor.clear_float_data();
      tensor.clear_int64_data();
      data.write(raw.data(), raw.size());
      point(tensor, offset, raw.size());
      offset += raw.size();
    }
    if (pad > 0) {
      // One float initializer named "padding" covers the zero bytes.
      onnx::TensorProto *padding = model.mutable_graph()->add_initializer();
      padding->set_name("padding");
      padding->set_data_type(onnx::TensorProto::FLOAT);
      padding->add_dims(pad / 4);
      point(*padding, offset, (pad / 4) * 4);
      data.close();
      if (truncate((dir + "/" + externalFile).c_str(), offset + pad) != 0) {
        std::perror("truncate");
        return 1;
      }
    }
  }
  std::ofstream out(argv[2], std::ios::binary);
  if (!model.SerializeToOstream(&out)) {
    std::cerr << "cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
