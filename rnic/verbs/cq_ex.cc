// ibv_cq_ex's poll and read ops (ibv_start_poll, ibv_next_poll, ibv_wc_read_*):
// each poll takes one completion from the CQ ring into the TandemCq, the reads
// return its fields. RoCE has no LIDs: slid and dlid_path_bits are 0, sl is
// what ibv_poll_cq gives (0xA for a datagram over IPv4); the timestamp is the
// worker's clock in ns when it wrote the completion (cq.h kCoreClockKhz).
#include <cerrno>

#include "rnic/verbs/cq.h"
#include "rnic/verbs/device.h"

namespace tandem::rnic::verbs {

namespace {

TandemCq* of(ibv_cq_ex* x) { return reinterpret_cast<TandemCq*>(x); }

int take(ibv_cq_ex* x) {
  TandemCq* c = of(x);
  const int r = poll_counted(c, 1, &c->cur, &c->cur_ts);
  if (r == 0) return ENOENT;
  if (r < 0) return errno_of(static_cast<int>(host::last_status()));
  x->status = c->cur.status;
  x->wr_id = c->cur.wr_id;
  return 0;
}

int start_poll(ibv_cq_ex* x, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return take(x);
}
int next_poll(ibv_cq_ex* x) { return take(x); }
void end_poll(ibv_cq_ex*) {}  // nothing is held between polls

ibv_wc_opcode read_opcode(ibv_cq_ex* x) { return of(x)->cur.opcode; }
uint32_t read_vendor_err(ibv_cq_ex* x) { return of(x)->cur.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* x) { return of(x)->cur.byte_len; }
__be32 read_imm_data(ibv_cq_ex* x) { return of(x)->cur.imm_data; }
uint32_t read_qp_num(ibv_cq_ex* x) { return of(x)->cur.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* x) { return of(x)->cur.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* x) { return of(x)->cur.wc_flags; }
uint32_t read_slid(ibv_cq_ex* x) { return of(x)->cur.slid; }
uint8_t read_sl(ibv_cq_ex* x) { return of(x)->cur.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* x) { return of(x)->cur.dlid_path_bits; }
uint64_t read_completion_ts(ibv_cq_ex* x) { return of(x)->cur_ts; }
// What ibv_create_cq_ex refused to promise: never called by a correct program, defined anyway.
uint16_t read_cvlan(ibv_cq_ex*) { return 0; }
uint32_t read_flow_tag(ibv_cq_ex*) { return 0; }
void read_tm_info(ibv_cq_ex*, ibv_wc_tm_info* info) {
  if (info != nullptr) *info = ibv_wc_tm_info{};
}
uint64_t read_wallclock(ibv_cq_ex*) { return 0; }

}  // namespace

void install_cq_ex_ops(TandemCq* c) {
  ibv_cq_ex& x = c->cqx;
  x.comp_mask = 0;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  x.read_completion_ts = read_completion_ts;
  x.read_cvlan = read_cvlan;
  x.read_flow_tag = read_flow_tag;
  x.read_tm_info = read_tm_info;
  x.read_completion_wallclock_ns = read_wallclock;
}

}  // namespace tandem::rnic::verbs
