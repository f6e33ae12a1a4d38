// One side's rnic/host objects, released in reverse order of creation (what
// close_device does not free); shared by the perf tests and the sink.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "rnic/host/verbs.h"

namespace tandem::rnic::perf {

struct VerbsObjects {
  host::Context* ctx = nullptr;
  host::Pd* pd = nullptr;
  uint8_t* buf = nullptr;
  uint64_t buf_len = 0;
  host::Mr* mr = nullptr;
  host::Cq* cq = nullptr;
  std::vector<host::Qp*> qps;
  std::unordered_map<uint32_t, uint32_t> index_of;  // QPN -> QP index

  VerbsObjects() = default;
  VerbsObjects(const VerbsObjects&) = delete;
  VerbsObjects& operator=(const VerbsObjects&) = delete;
  ~VerbsObjects() {
    for (host::Qp* q : qps)
      if (q) host::destroy_qp(q);
    if (cq) host::destroy_cq(cq);
    if (mr) host::dereg_mr(mr);
    if (buf) host::free_buf(ctx, buf);
    if (pd) host::dealloc_pd(pd);
    if (ctx) host::close_device(ctx);
  }
};

}  // namespace tandem::rnic::perf
