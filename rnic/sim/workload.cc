#include "rnic/sim/workload.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace tandem::rnic::sim {

namespace {

// Flow-size CDFs (bytes, cumulative percent) as HPCC's traffic generator
// has them (traffic_gen/*_distribution.txt): DCTCP's web search, also used by
// pFabric, and Facebook's Hadoop; sizes between points are interpolated
// linearly.
struct CdfPoint {
  double bytes;
  double pct;
};
constexpr CdfPoint kWebSearch[] = {
    {0, 0},          {10000, 15},      {20000, 20},      {30000, 30},
    {50000, 40},     {80000, 53},      {200000, 60},     {1000000, 70},
    {2000000, 80},   {5000000, 90},    {10000000, 97},   {30000000, 100},
};
constexpr CdfPoint kHadoop[] = {
    {0, 0},        {100, 1},       {200, 2},       {300, 5},        {350, 15},     {400, 20},    {500, 30},
    {600, 40},     {700, 50},      {1000, 60},     {2000, 67},      {7000, 70},    {30000, 72},  {50000, 82},
    {80000, 87},   {120000, 90},   {300000, 95},   {1000000, 97.5}, {2000000, 99}, {10000000, 100},
};

template <std::size_t N>
double cdf_value(const CdfPoint (&cdf)[N], double pct) noexcept {
  for (std::size_t i = 1; i < N; ++i) {
    if (pct < cdf[i].pct) {
      const CdfPoint& a = cdf[i - 1];
      const CdfPoint& b = cdf[i];
      return a.bytes + (b.bytes - a.bytes) * (pct - a.pct) / (b.pct - a.pct);
    }
  }
  return cdf[N - 1].bytes;
}

// The CDF's mean by the trapezoid rule, as the generator computes it.
template <std::size_t N>
double cdf_mean(const CdfPoint (&cdf)[N]) noexcept {
  double s = 0;
  for (std::size_t i = 1; i < N; ++i) s += (cdf[i].bytes + cdf[i - 1].bytes) / 2 * (cdf[i].pct - cdf[i - 1].pct);
  return s / 100;
}

uint64_t mix(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One finaliser per 8 bytes: the message key mixes source and message id once.
uint64_t pattern_key(uint32_t src, uint64_t msg) noexcept {
  return mix((uint64_t{src} << 40) ^ (msg * 0xC2B2AE3D27D4EB4Full));
}

uint64_t pattern_word(uint64_t key, uint64_t word) noexcept { return mix(key ^ (word * 0xD6E8FEB86659FD93ull)); }

}  // namespace

uint64_t sample_size(const SizeDist& d, Rng& rng) noexcept {
  switch (d.kind) {
    case SizeDist::Kind::kFixed:
      return d.bytes;
    case SizeDist::Kind::kUniform:
      return rng.between(d.min_bytes, d.max_bytes);
    case SizeDist::Kind::kWebSearch:
    case SizeDist::Kind::kHadoop: {
      const double u = rng.unit() * 100.0;
      const double bytes = d.kind == SizeDist::Kind::kWebSearch ? cdf_value(kWebSearch, u) : cdf_value(kHadoop, u);
      auto v = static_cast<uint64_t>(bytes * d.scale);
      return std::clamp<uint64_t>(v, d.min_bytes, d.max_bytes);
    }
  }
  return d.bytes;
}

double mean_size(const SizeDist& d) noexcept {
  switch (d.kind) {
    case SizeDist::Kind::kFixed:
      return static_cast<double>(d.bytes);
    case SizeDist::Kind::kUniform:
      return (static_cast<double>(d.min_bytes) + static_cast<double>(d.max_bytes)) / 2;
    case SizeDist::Kind::kWebSearch:
      return cdf_mean(kWebSearch) * d.scale;
    case SizeDist::Kind::kHadoop:
      return cdf_mean(kHadoop) * d.scale;
  }
  return static_cast<double>(d.bytes);
}

static std::vector<Flow> make_poisson_flows(const WorkloadSpec& w, uint32_t hosts, double host_gbps, Rng& rng) {
  // Every host on its own Poisson clock, merged in time order (a heap of
  // each host's next start), as HPCC's generator: mean gap = mean size /
  // (load x link rate); the destination uniform among the other hosts.
  if (hosts < 2) throw ScenarioError("workload: poisson needs at least 2 hosts");
  const double gap_ns = mean_size(w.size) * 8 / (host_gbps * w.load);
  using Next = std::pair<uint64_t, uint32_t>;
  std::vector<Next> heap;
  for (uint32_t h = 0; h < hosts; ++h) heap.emplace_back(static_cast<uint64_t>(rng.exponential(gap_ns)), h);
  auto later = [](const Next& a, const Next& b) { return a > b; };
  std::make_heap(heap.begin(), heap.end(), later);
  std::vector<Flow> flows;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    auto [t, src] = heap.back();
    if (t >= w.duration_ns) {
      heap.pop_back();
      continue;
    }
    Flow f;
    f.src = src;
    f.dst = static_cast<uint32_t>(rng.below(hosts - 1));
    if (f.dst >= src) ++f.dst;
    f.start_ns = t;
    f.sizes.push_back(std::max<uint64_t>(1, sample_size(w.size, rng)));
    flows.push_back(std::move(f));
    heap.back().first = t + static_cast<uint64_t>(rng.exponential(gap_ns));
    std::push_heap(heap.begin(), heap.end(), later);
  }
  return flows;
}

static std::vector<Flow> make_flows_in_range(const WorkloadSpec& w, uint32_t hosts, Rng& rng, double host_gbps);

std::vector<Flow> make_flows(const WorkloadSpec& w, uint32_t all_hosts, Rng& rng, double host_gbps) {
  if (w.first_host >= all_hosts) throw ScenarioError("workload: first_host beyond the topology's hosts");
  const uint32_t hosts = w.host_count ? w.host_count : all_hosts - w.first_host;
  if (uint64_t{w.first_host} + hosts > all_hosts) throw ScenarioError("workload: host range beyond the topology");
  std::vector<Flow> flows = make_flows_in_range(w, hosts, rng, host_gbps);
  for (Flow& f : flows) {
    f.src += w.first_host;
    f.dst += w.first_host;
    f.start_ns += w.start_ns;
  }
  return flows;
}

static std::vector<Flow> make_flows_in_range(const WorkloadSpec& w, uint32_t hosts, Rng& rng, double host_gbps) {
  if (w.kind == WorkloadSpec::Kind::kPoisson) return make_poisson_flows(w, hosts, host_gbps, rng);
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw ScenarioError("workload: " + what);
  };
  switch (w.kind) {
    case WorkloadSpec::Kind::kBulk:
      need(w.src < hosts && w.dst < hosts && w.src != w.dst, "bulk src/dst must be two different hosts");
      pairs.emplace_back(w.src, w.dst);
      break;
    case WorkloadSpec::Kind::kPermutation: {
      // A random derangement: every host sends to one other and receives from one.
      need(hosts >= 2, "permutation needs at least 2 hosts");
      std::vector<uint32_t> perm(hosts);
      for (uint32_t i = 0; i < hosts; ++i) perm[i] = i;
      for (;;) {
        rng.shuffle(perm.data(), perm.size());
        bool fixed_point = false;
        for (uint32_t i = 0; i < hosts; ++i) fixed_point = fixed_point || perm[i] == i;
        if (!fixed_point) break;
      }
      for (uint32_t i = 0; i < hosts; ++i) pairs.emplace_back(i, perm[i]);
      break;
    }
    case WorkloadSpec::Kind::kIncast: {
      need(w.receiver < hosts, "incast receiver out of range");
      need(w.senders >= 1 && w.senders < hosts, "incast needs 1 <= senders < hosts");
      uint32_t s = 0;
      for (uint32_t h = 0; h < hosts && s < w.senders; ++h) {
        if (h == w.receiver) continue;
        pairs.emplace_back(h, w.receiver);
        ++s;
      }
      break;
    }
    case WorkloadSpec::Kind::kPoisson:
      break;
    case WorkloadSpec::Kind::kRing:
      need(hosts >= 2, "ring needs at least 2 hosts");
      for (uint32_t a = 0; a < hosts; ++a) pairs.emplace_back(a, (a + 1) % hosts);
      break;
    case WorkloadSpec::Kind::kAllToAll: {
      need(hosts >= 2, "all_to_all needs at least 2 hosts");
      const uint32_t g = w.group ? w.group : hosts;
      need(g >= 2, "all_to_all group must be at least 2");
      for (uint32_t a = 0; a < hosts; ++a) {
        for (uint32_t b = a - a % g; b < std::min(hosts, a - a % g + g); ++b) {
          if (a != b) pairs.emplace_back(a, b);
        }
      }
      break;
    }
  }
  std::vector<Flow> flows;
  for (auto [s, d] : pairs) {
    Flow f;
    f.src = s;
    f.dst = d;
    f.start_ns = w.start_jitter_ns ? rng.between(0, w.start_jitter_ns) : 0;
    for (uint32_t m = 0; m < w.messages; ++m) f.sizes.push_back(sample_size(w.size, rng));
    flows.push_back(std::move(f));
  }
  return flows;
}

static_assert(std::endian::native == std::endian::little, "fill_pattern's whole-word path assumes little-endian");

void fill_pattern(uint8_t* out, uint32_t src, uint64_t msg, uint64_t offset, uint64_t len) noexcept {
  const uint64_t key = pattern_key(src, msg);
  uint64_t o = offset;
  const uint64_t end = offset + len;
  // A partial first word, then whole words, then a partial last word.
  while (o < end && (o & 7) != 0) {
    const uint64_t v = pattern_word(key, o / 8);
    *out++ = static_cast<uint8_t>(v >> ((o & 7) * 8));
    ++o;
  }
  for (; o + 8 <= end; o += 8, out += 8) {
    const uint64_t v = pattern_word(key, o / 8);
    std::memcpy(out, &v, 8);  // little-endian hosts: byte k of the word is bits 8k..8k+7
  }
  for (; o < end; ++o) {
    const uint64_t v = pattern_word(key, o / 8);
    *out++ = static_cast<uint8_t>(v >> ((o & 7) * 8));
  }
}

int64_t check_pattern(const uint8_t* data, uint32_t src, uint64_t msg, uint64_t offset, uint64_t len) noexcept {
  uint8_t buf[4096];
  for (uint64_t done = 0; done < len;) {
    uint64_t n = std::min<uint64_t>(sizeof(buf), len - done);
    fill_pattern(buf, src, msg, offset + done, n);
    if (std::memcmp(buf, data + done, n) != 0) {
      for (uint64_t i = 0; i < n; ++i) {
        if (buf[i] != data[done + i]) return static_cast<int64_t>(done + i);
      }
    }
    done += n;
  }
  return -1;
}

}  // namespace tandem::rnic::sim
