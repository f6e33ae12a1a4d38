// libFuzzer target: the connection manager fed hostile QP1 MADs. The input is
// a run of records (1 byte of source selectors + a 256-byte MAD); an engine
// with a listener and one connection in each state it can reach takes them,
// with time moving between them. decode_mad must stay inside its 256 bytes
// (ASan), the engine must not crash, and nothing it sends may be longer than a MAD.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rnic/cm/cm_engine.h"

using namespace tandem::rnic::cm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  CmConfig c;
  c.response_timeout = 10;
  c.max_retries = 2;
  CmEngine e(c);
  e.set_vnics({CmVnic{1, 0xC0A80701, 0x8001, 100, 1}, CmVnic{2, 0xC0A80801, 0x8002, 200, 2}});
  e.add_client(1, 0);
  CmRequest l;
  l.local_port = 7174;
  l.ps = kPsTcp;
  uint32_t id;
  uint16_t port;
  e.listen(1, l, &id, &port);
  CmRequest r;
  r.local_ip = 0xC0A80701;
  r.remote_ip = 0xC0A80702;
  r.remote_port = 7174;
  r.ps = kPsTcp;
  r.qp_type = 2;
  e.connect(1, r, 0, &id, &port);
  uint64_t now = 0;
  constexpr std::size_t kRec = 1 + kMadLen;
  for (std::size_t at = 0; at + 1 <= size; at += kRec) {
    uint8_t mad[kMadLen] = {};
    const std::size_t n = std::min(kRec - 1, size - at - 1);
    std::memcpy(mad, data + at + 1, n);
    const uint8_t sel = data[at];
    MadSource s;
    s.underlay = (sel & 1) ? 0x0A000002 : 0x0A000003;
    s.pkey = (sel & 2) ? 0x8001 : 0x8002;
    s.req_vnic = (sel >> 2) & 3;
    s.req_route_underlay = (sel & 16) ? s.underlay : 0;
    e.on_mad(s, mad, now);
    // Answer whatever the engine asked as a well-behaved application would, now and then.
    for (const CmEngine::Event& ev : e.events_out()) {
      CmRequest a;
      a.id = ev.msg.id;
      if (sel & 32) e.accept(1, a, now);
      else if (sel & 64) e.establish(1, a, now);
      else if (sel & 128) e.disconnect(1, a, now);
    }
    e.events_out().clear();
    now += (sel & 0xF0) * 1'000'000ull;
    e.tick(now);
    e.mads_out().clear();
  }
  e.remove_client(1, now);
  e.tick(now + 10'000'000'000ull);
  return 0;
}
