//===- FileWrite.cpp - Whole files written or not at all ------------------===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/FileWrite.h"

#include "absl/strings/str_cat.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>

using namespace weft::rt;

absl::Status weft::rt::writeFileAtomically(const std::string &path,
                                           std::string_view bytes) {
  static std::atomic<unsigned> counter{0};
  std::string temporary =
      absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  auto fail = [&](const char *doing, int error) {
    return absl::DataLossError(absl::StrCat("cannot write ", path, " (", doing,
                                            "): ", std::strerror(error)));
  };
  int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail("open", errno);
  // A file size limit (ulimit -f) raises SIGXFSZ, whose default action ends
  // the process; ignored, write() reports EFBIG instead, which is checked.
  static const bool ignoreSizeSignal = [] {
    std::signal(SIGXFSZ, SIG_IGN);
    return true;
  }();
  (void)ignoreSizeSignal;
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(temporary.c_str());
      return fail("write", error);
    }
    written += size_t(n);
  }
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    return fail("fsync", error);
  }
  if (::close(fd) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return fail("close", error);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(temporary.c_str());
    return fail("rename", error);
  }
  return absl::OkStatus();
}

absl::Status weft::rt::removeStaleOutputs(const std::string &dir,
                                          size_t written,
                                          const std::string &writtenExtension) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  if (ec)
    return ec == std::errc::no_such_file_or_directory
               ? absl::OkStatus()
               : absl::PermissionDeniedError(
                     absl::StrCat("cannot list ", dir, ": ", ec.message()));
  for (; it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::string stem = name.substr(0, name.rfind('.'));
    std::string extension = name.rfind('.') == std::string::npos
                                ? ""
                                : name.substr(name.rfind('.'));
    if (stem.rfind("output_", 0) != 0 || stem.size() == 7 ||
        stem.find_first_not_of("0123456789", 7) != std::string::npos ||
        (extension != ".npy" && extension != ".pb"))
      continue;
    // The index, saturating (the name holds digits only).
    size_t index = 0;
    for (char digit : stem.substr(7))
      index = index > (SIZE_MAX - 9) / 10 ? SIZE_MAX
                                          : index * 10 + size_t(digit - '0');
    if (extension == writtenExtension && index < written)
      continue;
    std::error_code removeError;
    std::filesystem::remove(it->path(), removeError);
    if (removeError)
      return absl::PermissionDeniedError(
          absl::StrCat("cannot remove the stale output ", it->path().string(),
                       ": ", removeError.message()));
  }
  return absl::OkStatus();
}
