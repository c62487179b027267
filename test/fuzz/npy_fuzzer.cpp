//===- npy_fuzzer.cpp - libFuzzer target for the tensor file readers ------===//
//
// Part of the Weft project.
//
// Feeds arbitrary bytes to the readers of input, weight and output files:
// as an .npy file (whole, and as rank shards, what compiled programs read)
// as an ONNX TensorProto (.pb, ONNX's test-data layout) and as a Hugging
// Face safetensors checkpoint (weft import --checkpoint). Any crash,
// sanitizer report, escaping exception or allocation beyond the bytes given
// is a bug: bad files must get errors.
//
//===----------------------------------------------------------------------===//

#include "weft/Exec/TensorFiles.h"
#include "weft/Planner/HfCheckpoint.h"
#include "weft/runtime/NpyFile.h"

#include <cstdio>
#include <string>
#include <unistd.h>

static void writeBytes(const std::string &path, const uint8_t *data,
                       size_t size) {
  if (FILE *file = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string base =
      "/tmp/weft-npy-fuzz-" + std::to_string(getpid());
  std::string npy = base + ".npy", pb = base + ".pb";
  writeBytes(npy, data, size);
  (void)weft::rt::readNpy(npy);
  for (int dim = 0; dim < 2; ++dim)
    (void)weft::rt::readNpyShard(npy, dim, 1, 2);
  writeBytes(pb, data, size);
  weft::rt::HostTensor tensor;
  std::string error;
  (void)weft::readTensorFile(pb, tensor, error);
  std::string safetensors = base + ".safetensors";
  writeBytes(safetensors, data, size);
  llvm::Expected<weft::planner::HfCheckpoint> checkpoint =
      weft::planner::HfCheckpoint::open(safetensors);
  if (!checkpoint) {
    llvm::consumeError(checkpoint.takeError());
    return 0;
  }
  for (const std::string &name : checkpoint->names())
    (void)checkpoint->read(name);
  return 0;
}
