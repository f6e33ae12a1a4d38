// Flow-table benchmark: memory per entry and bulk lookup rate of
//  * the DPU's level-1 mapping table (dpu/model/mapping_table.h) at 16M entries, and
//  * the RNIC's level-2 table (rnic/table/level2_table.h) at 1M entries,
// each against a bare DPDK rte_hash (CRC hash, extendable buckets, key -> index
// into a value array) holding the same keys and values, looked up with the
// same random key order in bursts of 32, in the same run.
// rte_hash memory comes from an EAL started with --no-huge (ordinary pages),
// because the machine's 2 GB of hugepages are shared by everyone.
#include <CLI/CLI.hpp>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_malloc.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpu/model/mapping_table.h"
#include "dpu/store/store.h"
#include "rnic/table/level2_table.h"

namespace {

using Clock = std::chrono::steady_clock;
using tandem::dpu::Mapping;
using tandem::dpu::MappingKey;
using tandem::dpu::MappingTable;
constexpr std::size_t kBurst = 32;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::size_t rte_heap_bytes() {
  rte_malloc_socket_stats st{};
  std::size_t total = 0;
  for (unsigned s = 0; s < rte_socket_count(); ++s)
    if (rte_malloc_get_socket_stats(rte_socket_id_by_idx(s), &st) == 0) total += st.heap_allocsz_bytes;
  return total;
}

struct Row {
  std::string table;
  std::size_t entries = 0;
  double ours_bpe = 0, base_bpe = 0;          // bytes per entry
  double ours_build = 0, base_build = 0;      // M inserts/s
  double ours_lookup = 0, base_lookup = 0;    // M lookups/s (best of reps)
  double hash_ns_keyed = 0, hash_ns_unkeyed = 0;  // level 2: ns per key hash
};

double thread_cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

rte_hash* make_rte_hash(const char* name, std::size_t entries, uint32_t key_len) {
  rte_hash_parameters p{};
  p.name = name;
  p.entries = static_cast<uint32_t>(entries);
  p.key_len = key_len;
  p.hash_func = rte_hash_crc;
  p.socket_id = static_cast<int>(rte_socket_id());
  p.extra_flag = RTE_HASH_EXTRA_FLAGS_EXT_TABLE;  // never fails an insert for lack of a bucket
  rte_hash* h = rte_hash_create(&p);
  if (!h) {
    std::fprintf(stderr, "table16m: rte_hash_create(%zu entries) failed: %s\n", entries, rte_strerror(rte_errno));
    std::exit(1);
  }
  return h;
}

// rte_hash bulk lookups of keys[order[...]] in bursts; values read through the data index.
template <class Key, class Value>
double rte_lookups(rte_hash* h, const std::vector<Key>& keys, const std::vector<uint32_t>& order,
                   const std::vector<Value>& values, uint64_t& checksum) {
  const void* kp[kBurst];
  void* data[kBurst];
  uint64_t mask = 0;
  auto t0 = Clock::now();
  for (std::size_t base = 0; base + kBurst <= order.size(); base += kBurst) {
    for (std::size_t i = 0; i < kBurst; ++i) kp[i] = &keys[order[base + i]];
    rte_hash_lookup_bulk_data(h, kp, kBurst, &mask, data);
    for (std::size_t i = 0; i < kBurst; ++i)
      if (mask >> i & 1) checksum += values[reinterpret_cast<uintptr_t>(data[i])].underlay_ip;
  }
  return static_cast<double>(order.size() / kBurst * kBurst) / seconds_since(t0) / 1e6;
}

Row bench_level1(std::size_t n, std::size_t lookups, int reps, std::mt19937_64& rng) {
  Row row;
  row.table = "level-1 mappings (DPU)";
  row.entries = n;
  std::vector<MappingKey> keys(n);
  std::vector<Mapping> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    keys[i] = MappingKey{1 + static_cast<uint32_t>(i % 4096), 0x0A000000u + static_cast<uint32_t>(i / 4096)};
    values[i] = Mapping{static_cast<uint32_t>(rng()), {2, 0, 0, 0, 0, 1}, static_cast<uint16_t>(i % 64)};
  }
  std::vector<uint32_t> order(lookups);
  for (auto& o : order) o = static_cast<uint32_t>(rng() % n);

  // Ours: reserve as the bulk import does, then insert.
  MappingTable ours;
  auto t0 = Clock::now();
  ours.reserve(n);
  for (std::size_t i = 0; i < n; ++i) ours.upsert(keys[i], values[i]);
  row.ours_build = n / seconds_since(t0) / 1e6;
  row.ours_bpe = double(ours.memory_bytes()) / n;

  // Baseline: rte_hash key -> index, values in a plain array.
  std::size_t heap0 = rte_heap_bytes();
  t0 = Clock::now();
  rte_hash* h = make_rte_hash("l1_baseline", n, sizeof(MappingKey));
  for (std::size_t i = 0; i < n; ++i)
    if (rte_hash_add_key_data(h, &keys[i], reinterpret_cast<void*>(uintptr_t{i})) < 0) {
      std::fprintf(stderr, "table16m: rte_hash insert %zu failed\n", i);
      std::exit(1);
    }
  row.base_build = n / seconds_since(t0) / 1e6;
  row.base_bpe = double(rte_heap_bytes() - heap0 + values.size() * sizeof(Mapping)) / n;

  std::vector<MappingKey> burst(kBurst);
  Mapping out[kBurst];
  bool hit[kBurst];
  for (int r = 0; r < reps; ++r) {
    uint64_t sum_ours = 0, sum_base = 0;
    t0 = Clock::now();
    for (std::size_t base = 0; base + kBurst <= order.size(); base += kBurst) {
      for (std::size_t i = 0; i < kBurst; ++i) burst[i] = keys[order[base + i]];
      ours.find_bulk(burst.data(), kBurst, out, hit);
      for (std::size_t i = 0; i < kBurst; ++i)
        if (hit[i]) sum_ours += out[i].underlay_ip;
    }
    double o = double(order.size() / kBurst * kBurst) / seconds_since(t0) / 1e6;
    double b = rte_lookups(h, keys, order, values, sum_base);
    if (sum_ours != sum_base) {
      std::fprintf(stderr, "table16m: level-1 results differ from rte_hash (%lu vs %lu)\n", sum_ours, sum_base);
      std::exit(1);
    }
    row.ours_lookup = std::max(row.ours_lookup, o);
    row.base_lookup = std::max(row.base_lookup, b);
  }
  rte_hash_free(h);
  return row;
}

Row bench_level2(std::size_t n, std::size_t lookups, int reps, std::mt19937_64& rng) {
  using namespace tandem::common;
  using tandem::rnic::Level2Table;
  Row row;
  row.table = "level-2 entries (RNIC)";
  row.entries = n;
  std::vector<EntryKey> keys(n);
  std::vector<EgressAction> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    keys[i] = egress_key(static_cast<uint32_t>(i % 1024), 0xC0A80000u + static_cast<uint32_t>(i / 1024));
    values[i].underlay_dst_ip = static_cast<uint32_t>(rng());
    values[i].underlay_src_ip = values[i].underlay_dst_ip;  // rte_lookups sums underlay_ip-like field below
  }
  std::vector<uint32_t> order(lookups);
  for (auto& o : order) o = static_cast<uint32_t>(rng() % n);

  Level2Table ours({static_cast<uint32_t>(n)});
  auto t0 = Clock::now();
  ours.begin();
  for (std::size_t i = 0; i < n; ++i)
    if (ours.put(make_egress_entry(keys[i], values[i])) != tandem::rnic::TableStatus::kOk) {
      std::fprintf(stderr, "table16m: level-2 put %zu refused\n", i);
      std::exit(1);
    }
  ours.commit();
  row.ours_build = n / seconds_since(t0) / 1e6;
  row.ours_bpe = double(ours.memory_bytes()) / n;

  struct V {
    uint32_t underlay_ip;
  };
  std::vector<V> vals(n);
  for (std::size_t i = 0; i < n; ++i) vals[i].underlay_ip = values[i].underlay_dst_ip;
  std::size_t heap0 = rte_heap_bytes();
  t0 = Clock::now();
  rte_hash* h = make_rte_hash("l2_baseline", n, sizeof(EntryKey));
  for (std::size_t i = 0; i < n; ++i) rte_hash_add_key_data(h, &keys[i], reinterpret_cast<void*>(uintptr_t{i}));
  row.base_build = n / seconds_since(t0) / 1e6;
  row.base_bpe = double(rte_heap_bytes() - heap0 + n * sizeof(EgressAction)) / n;

  std::vector<EntryKey> burst(kBurst);
  const Level2Entry* out[kBurst];
  for (int r = 0; r < reps; ++r) {
    uint64_t sum_ours = 0, sum_base = 0;
    t0 = Clock::now();
    auto snap = ours.begin_read();
    for (std::size_t base = 0; base + kBurst <= order.size(); base += kBurst) {
      for (std::size_t i = 0; i < kBurst; ++i) burst[i] = keys[order[base + i]];
      ours.lookup_burst(snap, burst.data(), kBurst, out);
      for (std::size_t i = 0; i < kBurst; ++i)
        if (out[i]) sum_ours += out[i]->egress.underlay_dst_ip;
    }
    double o = double(order.size() / kBurst * kBurst) / seconds_since(t0) / 1e6;
    double b = rte_lookups(h, keys, order, vals, sum_base);
    if (sum_ours != sum_base) {
      std::fprintf(stderr, "table16m: level-2 results differ from rte_hash\n");
      std::exit(1);
    }
    row.ours_lookup = std::max(row.ours_lookup, o);
    row.base_lookup = std::max(row.base_lookup, b);
  }
  rte_hash_free(h);
  // What keying the hash costs (rnic/table/key_hash.h): ns per key of the
  // table's SipHash-1-3 and of the unkeyed mix it replaced, same keys, turns
  // taken, best of reps; set against the ns per lookup above.
  const tandem::rnic::TableHashKey secret{rng(), rng()};
  for (int r = 0; r < reps; ++r) {
    uint64_t acc = 0;
    // 4096 keys (48 KiB) over and over: the hash's cost, not the memory's;
    // this thread's CPU time, so that other processes' turns do not count.
    double c0 = thread_cpu_ns();
    for (std::size_t i = 0; i < order.size(); ++i) acc += tandem::rnic::keyed_hash(secret, keys[i & 4095]);
    const double keyed = (thread_cpu_ns() - c0) / double(order.size());
    c0 = thread_cpu_ns();
    for (std::size_t i = 0; i < order.size(); ++i) acc += tandem::rnic::unkeyed_hash(keys[i & 4095]);
    const double unkeyed = (thread_cpu_ns() - c0) / double(order.size());
    static volatile uint64_t sink;
    sink = acc;
    row.hash_ns_keyed = r == 0 ? keyed : std::min(row.hash_ns_keyed, keyed);
    row.hash_ns_unkeyed = r == 0 ? unkeyed : std::min(row.hash_ns_unkeyed, unkeyed);
  }
  return row;
}

// Persistence at scale: bulk-import `rows` mappings from CSV into SQLite (one
// transaction, every row validated), then reopen and rebuild the level-1 state
// as an agent restart does. Supplementary: no baseline.
struct StoreRow {
  std::size_t rows = 0;
  double import_s = 0, load_s = 0, db_bytes_per_row = 0;
};

StoreRow bench_store(std::size_t rows) {
  namespace fs = std::filesystem;
  using namespace tandem::dpu;
  StoreRow out;
  out.rows = rows;
  fs::path dir = fs::temp_directory_path() / ("tandem-bench-store-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string db = (dir / "agent.db").string();
  std::ostringstream csv;
  for (std::size_t i = 0; i < rows; ++i) {
    uint32_t ip = 0x0A000000u + static_cast<uint32_t>(i / 4096);
    csv << 1 + i % 4096 << ',' << (ip >> 24) << '.' << (ip >> 16 & 255) << '.' << (ip >> 8 & 255) << '.'
        << (ip & 255) << ",10.1." << i % 200 << ".1,02:00:00:00:00:01,far" << i % 64 << '\n';
  }
  {
    Store store(db);
    Level1State state;
    std::vector<Change> tenants;
    for (uint32_t v = 1; v <= 4096; ++v) {
      tenants.push_back(AddTenant{v, "t" + std::to_string(v)});
      state.apply(tenants.back());
    }
    store.persist(tenants);  // one transaction, one fsync
    state.reserve_mappings(rows);
    std::istringstream in(csv.str());
    auto t0 = Clock::now();
    ImportResult r = store.import_mappings(in, ImportFormat::kCsv, state);
    out.import_s = seconds_since(t0);
    if (!r.result.ok() || r.imported != rows) {
      std::fprintf(stderr, "table16m: import failed: %s\n", r.result.message.c_str());
      std::exit(1);
    }
  }
  {
    Store store(db);
    Level1State state;
    auto t0 = Clock::now();
    store.load(state);
    out.load_s = seconds_since(t0);
    if (state.mappings().size() != rows) {
      std::fprintf(stderr, "table16m: reload found %zu mappings\n", state.mappings().size());
      std::exit(1);
    }
  }
  std::size_t bytes = 0;
  for (auto& f : fs::directory_iterator(dir)) bytes += fs::file_size(f.path());
  out.db_bytes_per_row = double(bytes) / rows;
  fs::remove_all(dir);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::size_t entries = 16u << 20, l2_entries = 1u << 20, lookups = 4u << 20;
  int reps = 3;
  uint64_t seed = 1;
  std::size_t store_rows = 0;
  CLI::App app{"Flow tables: bytes/entry and bulk lookups/s, ours vs DPDK rte_hash"};
  app.add_flag("--json", json, "print one JSON object instead of a table");
  app.add_option("--entries", entries, "level-1 mapping entries")->check(CLI::Range(1024, 1 << 26));
  app.add_option("--l2-entries", l2_entries, "level-2 table entries (0 = skip)")->check(CLI::Range(0, 1 << 23));
  app.add_option("--lookups", lookups, "random lookups per measurement")->check(CLI::Range(1024, 1 << 28));
  app.add_option("--reps", reps, "measurements (the best is reported)")->check(CLI::Range(1, 20));
  app.add_option("--seed", seed, "key order seed");
  app.add_option("--store-rows", store_rows, "also time SQLite bulk import + reload of N mappings (0 = skip)")
      ->check(CLI::Range(0, 1 << 25));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // rte_hash allocates through rte_malloc: give the EAL ordinary memory.
  std::size_t mem_mb = std::max<std::size_t>(512, (entries + l2_entries) * 64 / (1 << 20) + 256);
  std::vector<std::string> eal = {"table16m", "--no-pci", "--no-huge", "-m", std::to_string(mem_mb),
                                  "--no-shconf", "--file-prefix", "tandem-bench-table16m",
                                  "--no-telemetry", "-l", "0", "--log-level", "*:error"};
  std::vector<char*> eal_argv;
  for (auto& s : eal) eal_argv.push_back(s.data());
  rte_openlog_stream(stderr);
  if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
    std::fprintf(stderr, "table16m: EAL init failed: %s\n", rte_strerror(rte_errno));
    return 1;
  }

  std::mt19937_64 rng(seed);
  std::vector<Row> rows;
  rows.push_back(bench_level1(entries, lookups, reps, rng));
  if (l2_entries) rows.push_back(bench_level2(l2_entries, lookups, reps, rng));
  const Row& head = rows[0];
  StoreRow st;
  if (store_rows) st = bench_store(store_rows);

  if (json) {
    nlohmann::json j;
    j["bench"] = "table-16m";
    j["unit"] = "Mlookups/s";
    j["ours"] = head.ours_lookup;
    j["baseline"] = head.base_lookup;
    j["baseline_name"] = "DPDK rte_hash (CRC, ext table) + value array";
    j["ratio"] = head.ours_lookup / head.base_lookup;
    j["burst"] = kBurst;
    j["memory"] = "EAL --no-huge (ordinary pages)";
    for (const Row& r : rows) {
      nlohmann::json t;
      t["entries"] = r.entries;
      t["bytes_per_entry"] = {{"ours", r.ours_bpe}, {"baseline", r.base_bpe}};
      t["build_Minserts_per_s"] = {{"ours", r.ours_build}, {"baseline", r.base_build}};
      t["lookup_Mlookups_per_s"] = {{"ours", r.ours_lookup}, {"baseline", r.base_lookup}};
      if (r.hash_ns_keyed > 0) {
        t["hash_ns"] = {{"keyed_siphash13", r.hash_ns_keyed}, {"unkeyed_mix", r.hash_ns_unkeyed}};
        // Extra time of the keyed hash over the old one, as a share of a lookup.
        t["keying_share_of_lookup"] = (r.hash_ns_keyed - r.hash_ns_unkeyed) / (1e3 / r.ours_lookup);
      }
      j[r.table.substr(0, 7)] = t;
    }
    if (store_rows)
      j["store"] = {{"rows", st.rows}, {"import_rows_per_s", st.rows / st.import_s},
                    {"load_rows_per_s", st.rows / st.load_s}, {"db_bytes_per_row", st.db_bytes_per_row}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("flow tables vs DPDK rte_hash (same keys, same random order, bursts of %zu, best of %d)\n",
                kBurst, reps);
    std::printf("%-24s %10s | %8s %8s | %9s %9s | %9s %9s %6s\n", "table", "entries", "B/entry", "rte_hash",
                "Mins/s", "rte_hash", "Mlook/s", "rte_hash", "ratio");
    for (const Row& r : rows)
      std::printf("%-24s %10zu | %8.1f %8.1f | %9.2f %9.2f | %9.2f %9.2f %6.2f\n", r.table.c_str(), r.entries,
                  r.ours_bpe, r.base_bpe, r.ours_build, r.base_build, r.ours_lookup, r.base_lookup,
                  r.ours_lookup / r.base_lookup);
    for (const Row& r : rows)
      if (r.hash_ns_keyed > 0)
        std::printf("level-2 key hash: SipHash-1-3 (keyed) %.2f ns, unkeyed mix %.2f ns per key: %.1f %% of a "
                    "%.1f ns lookup\n", r.hash_ns_keyed, r.hash_ns_unkeyed,
                    100 * (r.hash_ns_keyed - r.hash_ns_unkeyed) / (1e3 / r.ours_lookup), 1e3 / r.ours_lookup);
    if (store_rows)
      std::printf("SQLite store, %zu mappings: bulk import %.1f s (%.0f rows/s), reload %.1f s (%.0f rows/s), "
                  "%.0f bytes/row on disk\n",
                  st.rows, st.import_s, st.rows / st.import_s, st.load_s, st.rows / st.load_s, st.db_bytes_per_row);
  }
  rte_eal_cleanup();
  return 0;
}
