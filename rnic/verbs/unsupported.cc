// What the drop-in libibverbs does not do yet: each verb fails as libibverbs
// documents a failure (NULL or -1 with errno, or the error code it returns),
// with EOPNOTSUPP, so an application stops with a clear error instead of
// crashing. The README lists these. Provider-private symbols (IBVERBS_PRIVATE_34)
// exist so that Debian's libmlx5/libefa, which perftest links, load; they are
// only called for devices of their own, of which this library lists none.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>


namespace {
template <class T>
T* fail_null() {
  errno = EOPNOTSUPP;
  return nullptr;
}
int fail_minus_one() {
  errno = EOPNOTSUPP;
  return -1;
}
}  // namespace

extern "C" {

// --- public verbs not built yet (dmabuf) ---
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) { return fail_null<ibv_mr>(); }
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }
int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) { return EOPNOTSUPP; }

// --- not Tandem's: multicast, shared (imported) objects ---
int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
// A context shared through its command fd is the kernel's (uverbs): Tandem's contexts are sockets.
ibv_context* ibv_import_device(int) { return fail_null<ibv_context>(); }
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) { return fail_null<ibv_pd>(); }
void ibv_unimport_pd(ibv_pd*) {}
ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) { return fail_null<ibv_mr>(); }
void ibv_unimport_mr(ibv_mr*) {}
ibv_dm* ibv_import_dm(ibv_context*, uint32_t) { return fail_null<ibv_dm>(); }
void ibv_unimport_dm(ibv_dm*) {}
// Kernel-ABI marshalling (the kernel's structs; no kernel device here): nothing to copy.
void ibv_copy_ah_attr_from_kern(void*, const void*) {}
void ibv_copy_qp_attr_from_kern(void*, const void*) {}
void ibv_copy_path_rec_from_kern(void*, const void*) {}
void ibv_copy_path_rec_to_kern(void*, const void*) {}

// --- provider-private (IBVERBS_PRIVATE_34) ---
bool verbs_allow_disassociate_destroy = false;
void verbs_register_driver_34(const void*) {}  // a provider's constructor: ignored
void verbs_set_ops(void*, const void*) {}
void verbs_uninit_context(void*) {}
void __verbs_log(void*, const char*, ...) {}
void* verbs_open_device(void*, void*) { return fail_null<void>(); }
void* _verbs_init_and_alloc_context(void*, int, size_t, size_t, uint32_t) { return fail_null<void>(); }
int verbs_init_cq(void*, void*, void*, void*) { return EOPNOTSUPP; }
unsigned int __ioctl_final_num_attrs(unsigned int, const void*) { return 0; }
int execute_ioctl(void*, void*) { return EOPNOTSUPP; }
int ibv_read_ibdev_sysfs_file(char*, size_t, const char*, const char*, ...) { return fail_minus_one(); }
// ibv_cmd_*: the kernel commands a provider issues; every one returns an errno.

int ibv_cmd_advise_mr() { return EOPNOTSUPP; }
int ibv_cmd_alloc_dm() { return EOPNOTSUPP; }
int ibv_cmd_alloc_mw() { return EOPNOTSUPP; }
int ibv_cmd_alloc_pd() { return EOPNOTSUPP; }
int ibv_cmd_attach_mcast() { return EOPNOTSUPP; }
int ibv_cmd_close_xrcd() { return EOPNOTSUPP; }
int ibv_cmd_create_ah() { return EOPNOTSUPP; }
int ibv_cmd_create_counters() { return EOPNOTSUPP; }
int ibv_cmd_create_cq() { return EOPNOTSUPP; }
int ibv_cmd_create_cq_ex() { return EOPNOTSUPP; }
int ibv_cmd_create_flow() { return EOPNOTSUPP; }
int ibv_cmd_create_flow_action_esp() { return EOPNOTSUPP; }
int ibv_cmd_create_qp() { return EOPNOTSUPP; }
int ibv_cmd_create_qp_ex() { return EOPNOTSUPP; }
int ibv_cmd_create_qp_ex2() { return EOPNOTSUPP; }
int ibv_cmd_create_rwq_ind_table() { return EOPNOTSUPP; }
int ibv_cmd_create_srq() { return EOPNOTSUPP; }
int ibv_cmd_create_srq_ex() { return EOPNOTSUPP; }
int ibv_cmd_create_wq() { return EOPNOTSUPP; }
int ibv_cmd_dealloc_mw() { return EOPNOTSUPP; }
int ibv_cmd_dealloc_pd() { return EOPNOTSUPP; }
int ibv_cmd_dereg_mr() { return EOPNOTSUPP; }
int ibv_cmd_destroy_ah() { return EOPNOTSUPP; }
int ibv_cmd_destroy_counters() { return EOPNOTSUPP; }
int ibv_cmd_destroy_cq() { return EOPNOTSUPP; }
int ibv_cmd_destroy_flow() { return EOPNOTSUPP; }
int ibv_cmd_destroy_flow_action() { return EOPNOTSUPP; }
int ibv_cmd_destroy_qp() { return EOPNOTSUPP; }
int ibv_cmd_destroy_rwq_ind_table() { return EOPNOTSUPP; }
int ibv_cmd_destroy_srq() { return EOPNOTSUPP; }
int ibv_cmd_destroy_wq() { return EOPNOTSUPP; }
int ibv_cmd_detach_mcast() { return EOPNOTSUPP; }
int ibv_cmd_free_dm() { return EOPNOTSUPP; }
int ibv_cmd_get_context() { return EOPNOTSUPP; }
int ibv_cmd_modify_cq() { return EOPNOTSUPP; }
int ibv_cmd_modify_flow_action_esp() { return EOPNOTSUPP; }
int ibv_cmd_modify_qp() { return EOPNOTSUPP; }
int ibv_cmd_modify_qp_ex() { return EOPNOTSUPP; }
int ibv_cmd_modify_srq() { return EOPNOTSUPP; }
int ibv_cmd_modify_wq() { return EOPNOTSUPP; }
int ibv_cmd_open_qp() { return EOPNOTSUPP; }
int ibv_cmd_open_xrcd() { return EOPNOTSUPP; }
int ibv_cmd_poll_cq() { return EOPNOTSUPP; }
int ibv_cmd_post_recv() { return EOPNOTSUPP; }
int ibv_cmd_post_send() { return EOPNOTSUPP; }
int ibv_cmd_post_srq_recv() { return EOPNOTSUPP; }
int ibv_cmd_query_context() { return EOPNOTSUPP; }
int ibv_cmd_query_device_any() { return EOPNOTSUPP; }
int ibv_cmd_query_mr() { return EOPNOTSUPP; }
int ibv_cmd_query_port() { return EOPNOTSUPP; }
int ibv_cmd_query_qp() { return EOPNOTSUPP; }
int ibv_cmd_query_srq() { return EOPNOTSUPP; }
int ibv_cmd_read_counters() { return EOPNOTSUPP; }
int ibv_cmd_reg_dm_mr() { return EOPNOTSUPP; }
int ibv_cmd_reg_dmabuf_mr() { return EOPNOTSUPP; }
int ibv_cmd_reg_mr() { return EOPNOTSUPP; }
int ibv_cmd_req_notify_cq() { return EOPNOTSUPP; }
int ibv_cmd_rereg_mr() { return EOPNOTSUPP; }
int ibv_cmd_resize_cq() { return EOPNOTSUPP; }

}  // extern "C"
