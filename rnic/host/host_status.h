// Status codes of the host interface, shared by the application library and
// the worker-side server (the server puts them in its replies).
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem::rnic::host {

#define TANDEM_FOREACH_HOST_STATUS(X)                                             \
  X(kOk, "ok")                                                                    \
  X(kWorkerGone, "worker gone (socket closed or unreachable)")                    \
  X(kTimeout, "worker did not answer in time")                                    \
  X(kVersionMismatch, "no common protocol version with the worker")               \
  X(kProtocolError, "malformed message")                                          \
  X(kInvalidArgument, "invalid argument")                                         \
  X(kQueueFull, "queue full")                                                     \
  X(kNoMemory, "out of memory (shared memory region could not be created)")       \
  X(kNotShared, "address is not in a buffer from alloc_buf(): worker cannot map it") \
  X(kNoResources, "worker table full")                                            \
  X(kNotFound, "unknown handle")                                                  \
  X(kBadLkey, "bad lkey")                                                         \
  X(kBadState, "operation not allowed in this QP state")                          \
  X(kBusy, "object still in use")                                                 \
  X(kBadRegion, "shared memory fd rejected (size, seals or mmap)")                \
  X(kUnsupported, "unsupported operation or flag")                                \
  X(kNoSuchVnic, "the worker has no vNIC with that overlay IP")                   \
  X(kCqOverrun, "CQ overrun: a completion found it full, the CQ is in error")      \
  X(kAccessDenied, "the worker does not let this user open that vNIC")            \
  X(kOverLimit, "the application or its vNIC holds its limit of QPs, CQs, MRs or PDs") \
  X(kOverByteLimit, "the application or its vNIC holds its limit of registered bytes")

enum class Status : uint32_t {
#define TANDEM_HOST_STATUS_ENUM(name, str) name,
  TANDEM_FOREACH_HOST_STATUS(TANDEM_HOST_STATUS_ENUM)
#undef TANDEM_HOST_STATUS_ENUM
  kCount
};

constexpr std::string_view status_name(Status s) noexcept {
  switch (s) {
#define TANDEM_HOST_STATUS_NAME(name, str) \
  case Status::name:                       \
    return str;
    TANDEM_FOREACH_HOST_STATUS(TANDEM_HOST_STATUS_NAME)
#undef TANDEM_HOST_STATUS_NAME
    case Status::kCount:
      break;
  }
  return "invalid status";
}

}  // namespace tandem::rnic::host
