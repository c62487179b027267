//===- store_fuzzer.cpp - libFuzzer target for the TCP store --------------===//
//
// Part of the Weft project.
//
// Random frames against a live store on 127.0.0.1 (rank 0 of a world of 4
// serving, secret "fuzz"): each input is sent on a fresh connection, after
// a valid hello when its first byte is odd (so that both the stranger's and
// the member's paths are searched), and the connection is closed. Then the
// store must still answer its own rank within two seconds: a crash, a
// sanitizer report, a hang or a server that stopped serving is a bug.
//
//===----------------------------------------------------------------------===//

#include "weft/runtime/TcpStore.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

using namespace weft::rt;

namespace {

struct Live {
  int port = 0;
  std::unique_ptr<TcpStore> store;
  Live() {
    for (int attempt = 0; attempt < 20 && !store; ++attempt) {
      LaunchInfo launch;
      launch.launcher = "torchrun";
      launch.rank = 0;
      launch.worldSize = 4;
      launch.masterAddr = "127.0.0.1";
      launch.masterPort = 20000 + (getpid() * 7 + attempt * 131) % 40000;
      launch.storeSecret = "fuzz";
      auto made = TcpStore::connect(launch, std::chrono::seconds(2));
      if (made.ok()) {
        store = std::move(*made);
        port = launch.masterPort;
      }
    }
    if (!store) {
      std::fprintf(stderr, "store_fuzzer: cannot start a store\n");
      std::abort();
    }
  }
};

void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(char((v >> (8 * i)) & 0xff));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Live live;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(uint16_t(live.port));
  if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) ==
      0) {
    std::string bytes;
    if (size > 0 && (data[0] & 1)) {
      // A member's hello (rank 1 to 3), then the frames.
      bytes = "H";
      putU64(bytes, 4);
      bytes += "fuzz";
      putU64(bytes, 1);
      bytes += char('1' + data[0] % 3);
    }
    bytes.append(reinterpret_cast<const char *>(data), size);
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ::close(fd);
  // Answered, and promptly (a member may legitimately overwrite or delete
  // the probe key between the two requests, so its value is not checked).
  auto start = std::chrono::steady_clock::now();
  std::string value;
  if (!live.store->set("probe", "1").ok() ||
      !live.store->tryGet("probe", value).ok() ||
      std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) {
    std::fprintf(stderr, "store_fuzzer: the store stopped serving its rank\n");
    std::abort();
  }
  return 0;
}
