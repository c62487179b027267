//===- FreePort.h - A loopback port for store tests -------------*- C++ -*-===//
//
// Part of the Weft project.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_TEST_UNIT_FREEPORT_H
#define WEFT_TEST_UNIT_FREEPORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace weft::test {

/// A loopback port that was free a moment ago.
inline int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  int port = ntohs(address.sin_port);
  ::close(fd);
  return port;
}

} // namespace weft::test

#endif // WEFT_TEST_UNIT_FREEPORT_H
