// tandem-wire: look at RoCEv2 packets. `decode` prints a pcap as JSON lines,
// `encode` builds a pcap from JSON lines. Flags only; the work is in
// common/wiretool.
#include <CLI/CLI.hpp>

#include <iostream>

#include "common/log/log_cli.h"
#include "common/log/log_stream.h"
#include "common/wiretool/wire_tool.h"

int main(int argc, char** argv) {
  using tandem::common::WireToolConfig;
  namespace log = tandem::common::log;
  log::init("tandem-wire");
  WireToolConfig cfg;
  std::string log_level = "info";
  CLI::App app{
      "tandem-wire: decode and encode RoCEv2 (Ethernet/IPv4/UDP 4791/BTH, optional VXLAN) "
      "packets in classic pcap files."};
  app.require_subcommand(1);
  // --help shows every subcommand's options too, not just their names.
  app.set_help_flag();
  app.set_help_all_flag("-h,--help", "Print this help (all subcommands) and exit");
  log::add_level_option(app, log_level);

  auto* dec = app.add_subcommand("decode", "Print FILE.pcap as one JSON object per packet");
  dec->add_option("file", cfg.input, "pcap file to read (classic pcap, Ethernet)")->required();
  dec->add_flag("--summary", cfg.summary, "print one readable line per packet instead of JSON");
  dec->add_flag("--payload", cfg.payload,
                "add the payload bytes as payload_hex (then the output re-encodes to the same "
                "bytes)");

  auto* enc = app.add_subcommand("encode", "Build OUT.pcap from SPEC.jsonl, one packet per line");
  enc->add_option("spec", cfg.input, "JSON-lines packet spec to read")->required();
  enc->add_option("out", cfg.output, "pcap file to write (overwritten)")->required();
  enc->add_flag("--nanosecond", cfg.nanosecond, "write nanosecond timestamps (default: microsecond)");
  app.footer(R"(decode keys: index, ok (well-formed RoCEv2 with a valid ICRC), drop_reason (null when
  ok), len, src_mac, dst_mac, vlan, src, dst, tos, ttl, sport, dport, opcode, opcode_name, dqpn,
  psn, ack_req, se, pkey, fecn, becn, reth {va,rkey,len} / aeth {syndrome,msn} / imm / atomic /
  atomic_ack when the opcode carries them, payload_len (without pad and ICRC), icrc (the carried
  value, 0x%08x, stored LSB first on the wire), icrc_ok, outer {.., vni} for VXLAN. A field the
  capture does not hold (truncated frame) is left out.

encode: the same keys, one JSON object per line; blank lines and # comments are skipped.
  opcode       number or name (RC_SEND_ONLY, RC_RDMA_WRITE_FIRST, ...); required
  payload_hex  payload bytes as hex, or payload_len N for the bytes 0,1,2,..,255,0,..
  defaults     src 10.0.0.1, dst 10.0.0.2, sport 49152, MACs 02:00:00:00:00:01/02,
               dqpn 0, psn 0, pkey 0xffff, ttl 64; reth.len defaults to the payload length
  vlan         802.1Q VLAN id (vlan_pcp for the priority)
  outer        {src,dst,src_mac,dst_mac,sport,vni,tos,ttl}: wrap in VXLAN (UDP 4789)
  bad_icrc     true: store the complement of the correct ICRC
  icrc         store this value (number or "0x..") instead of the computed ICRC
  truncate     N: cut the frame to its first N bytes
  Numbers may be JSON numbers or strings ("0x1234"). Lengths, IPv4 checksum and ICRC are
  computed.

Exit status: 0 on success; 2 on bad input (missing file, not a pcap, truncated record, bad JSON,
unknown field or value), with one error line on stderr naming the file and line or record.)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    log::error("{} (see tandem-wire --help)", e.what());
    return tandem::common::kExitBadInput;
  }
  log::set_level(*log::parse_level(log_level));
  cfg.command = dec->parsed() ? "decode" : "encode";
  log::LogStream err(log::Level::err);
  return tandem::common::run(cfg, std::cout, err);
}
