// tools/kernel_resources/kernel_resources.cpp: the parsers, the occupancy calculation and the check
// of kernel_resources.h.
#include "tools/kernel_resources/kernel_resources.h"

#include <cxxabi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace reel::kernel_resources {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The integer just before `unit` in `line` ("800 bytes stack frame" -> 800 for " bytes stack frame"),
// or -1 when the line does not contain it.
int64_t number_before(const std::string& line, const std::string& unit) {
  const size_t at = line.find(unit);
  if (at == std::string::npos) return -1;
  size_t begin = at;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  if (begin == at) throw std::runtime_error("ptxas output: no number before '" + unit + "' in: " + line);
  return std::stoll(line.substr(begin, at - begin));
}

// The text between the first pair of single quotes after `from`.
std::string quoted(const std::string& line, size_t from) {
  const size_t open = line.find('\'', from), close = open == std::string::npos ? open : line.find('\'', open + 1);
  if (close == std::string::npos) throw std::runtime_error("ptxas output: expected a quoted name in: " + line);
  return line.substr(open + 1, close - open - 1);
}

}  // namespace

std::vector<Kernel> parse_ptxas(const std::string& text) {
  // ptxas -v, per function:
  //   ptxas info    : Compiling entry function '<mangled>' for 'sm_90'      (kernels only)
  //   ptxas info    : Function properties for <mangled>
  //       800 bytes stack frame, 676 bytes spill stores, 856 bytes spill loads
  //   ptxas info    : Used 64 registers, used 0 barriers, 512 bytes smem, ...
  std::vector<Kernel> kernels;
  Kernel* entry = nullptr;       // the kernel being compiled, which "Used N registers" belongs to
  Kernel* properties = nullptr;  // the kernel whose stack and spill line comes next (nullptr: a device function)
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (starts_with(line, "ptxas info")) {
      const size_t colon = line.find(':');
      const std::string body = colon == std::string::npos ? "" : line.substr(colon + 1);
      if (body.find("Compiling entry function") != std::string::npos) {
        Kernel k;
        k.mangled = quoted(body, 0);
        const size_t for_at = body.find(" for ");
        k.arch = for_at == std::string::npos ? "" : quoted(body, for_at);
        kernels.push_back(k);
        entry = &kernels.back();
        properties = nullptr;
      } else if (body.find("Function properties for ") != std::string::npos) {
        const std::string name = body.substr(body.find("Function properties for ") + 24);
        properties = entry && entry->mangled == name ? entry : nullptr;
      } else if (body.find(" registers") != std::string::npos && body.find("Used ") != std::string::npos) {
        if (!entry) continue;  // a device function's registers count in its callers'
        entry->registers = static_cast<int>(number_before(body, " registers"));
        entry->static_smem = std::max<int64_t>(0, number_before(body, " bytes smem"));
        entry->barriers = static_cast<int>(std::max<int64_t>(0, number_before(body, " barriers")));
      }
    } else if (line.find(" bytes stack frame") != std::string::npos) {
      if (!properties) continue;
      properties->stack_frame = number_before(line, " bytes stack frame");
      properties->spill_stores = number_before(line, " bytes spill stores");
      properties->spill_loads = number_before(line, " bytes spill loads");
      if (properties->spill_stores < 0 || properties->spill_loads < 0)
        throw std::runtime_error("ptxas output: no spill counts in: " + line);
      properties = nullptr;
    }
  }
  return kernels;
}

namespace {

// Little-endian reads, checked against the buffer (a truncated image throws).
struct Bytes {
  const std::string& b;
  uint64_t read(size_t at, int width) const {
    if (at > b.size() || b.size() - at < static_cast<size_t>(width))
      throw std::runtime_error("cubin: read past the end of the image");
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
  }
};

constexpr int kEmCuda = 190;           // e_machine of a CUDA ELF image
constexpr int kEifmtSval = 4;          // an attribute with a 16-bit size and that many bytes
constexpr int kEiattrMaxThreads = 0x05;  // __launch_bounds__: x, y, z as 32-bit words

// The launch bounds of the one CUDA ELF image at `base` of `b` into `bounds`.
void read_cubin(const Bytes& in, size_t base, std::map<std::string, int>& bounds) {
  const uint64_t shoff = in.read(base + 0x28, 8);
  const uint64_t shentsize = in.read(base + 0x3A, 2), shnum = in.read(base + 0x3C, 2), shstrndx = in.read(base + 0x3E, 2);
  if (shentsize < 64 || shstrndx >= shnum) throw std::runtime_error("cubin: malformed section table");
  auto section = [&](uint64_t i, size_t field, int width) { return in.read(base + shoff + i * shentsize + field, width); };
  const uint64_t strtab = section(shstrndx, 24, 8);
  const std::string prefix = ".nv.info.";
  for (uint64_t i = 0; i < shnum; ++i) {
    std::string name;
    for (uint64_t at = base + strtab + section(i, 0, 4); in.read(at, 1) != 0; ++at) name += static_cast<char>(in.read(at, 1));
    if (!starts_with(name, prefix)) continue;
    const uint64_t offset = section(i, 24, 8), size = section(i, 32, 8);
    // Attributes: format byte, attribute byte, then either a 16-bit value or (EIFMT_SVAL) a 16-bit
    // size and that many bytes.
    for (uint64_t at = 0; at + 4 <= size;) {
      const uint64_t format = in.read(base + offset + at, 1), attribute = in.read(base + offset + at + 1, 1);
      const uint64_t value = in.read(base + offset + at + 2, 2);
      if (format == kEifmtSval && attribute == kEiattrMaxThreads && value == 12) {
        const uint64_t x = in.read(base + offset + at + 4, 4), y = in.read(base + offset + at + 8, 4),
                       z = in.read(base + offset + at + 12, 4);
        bounds[name.substr(prefix.size())] = static_cast<int>(x * y * z);
      }
      at += 4 + (format == kEifmtSval ? value : 0);
    }
  }
}

}  // namespace

std::map<std::string, int> parse_launch_bounds(const std::string& bytes) {
  std::map<std::string, int> bounds;
  const Bytes in{bytes};
  const std::string magic = "\x7f" "ELF";
  for (size_t at = bytes.find(magic); at != std::string::npos; at = bytes.find(magic, at + 1)) {
    // A 64-bit little-endian image for EM_CUDA; the host object's own header (and any stray
    // match) is skipped.
    if (bytes.size() - at < 64 || bytes[at + 4] != 2 || bytes[at + 5] != 1 || in.read(at + 18, 2) != kEmCuda) continue;
    read_cubin(in, at, bounds);
  }
  return bounds;
}

const Arch* find_arch(const std::string& name) {
  // cuda_occupancy.h (CUDA 13.0) for compute capability 9.0: 64K registers in 4 sub-partitions,
  // allocated per warp in units of 256; 64 warps and 32 blocks per SM; 228 KiB of shared memory per
  // SM in 128-byte units, of which 1 KiB is the driver's per block; 227 KiB per block (opt-in);
  // 2 named barriers per block of the 32 (64 per SM, shared).
  // 255 registers per thread is what ptxas allocates at most.
  static const Arch kArchs[] = {
      {"sm_90", 65536, 256, 255, 4, 64, 32, 64, 228 * 1024, 1024, 227 * 1024, 128},
  };
  for (const Arch& a : kArchs)
    if (name == a.name) return &a;
  return nullptr;
}

namespace {
int64_t round_up(int64_t x, int64_t unit) { return (x + unit - 1) / unit * unit; }
}  // namespace

Occupancy occupancy(const Arch& arch, int threads, int registers, int64_t smem, int barriers) {
  // cudaOccMaxActiveBlocksPerMultiprocessor's limits, each in blocks per SM; the smallest wins.
  if (threads <= 0 || threads > 1024) return {0, 0, "block size"};
  const int warps = (threads + 31) / 32;
  const int by_warps = arch.max_warps_per_sm / warps;
  int by_regs = INT_MAX;
  if (registers > arch.max_regs_per_thread) {
    by_regs = 0;
  } else if (registers > 0) {
    const int64_t per_warp = round_up(int64_t{registers} * 32, arch.reg_alloc_unit);
    // A block's warps are spread over the sub-partitions, each with a quarter of the registers.
    if (per_warp * round_up(warps, arch.sub_partitions) > arch.regs_per_sm) {
      by_regs = 0;
    } else {
      const int64_t warps_per_sub = arch.regs_per_sm / arch.sub_partitions / per_warp;
      by_regs = static_cast<int>(warps_per_sub * arch.sub_partitions / warps);
    }
  }
  const int64_t smem_per_block = round_up(smem + arch.smem_reserved_per_block, arch.smem_alloc_unit);
  const int by_smem = smem > arch.max_smem_per_block ? 0
                     : smem_per_block == 0        ? INT_MAX
                                                  : static_cast<int>(arch.smem_per_sm / smem_per_block);
  const int by_barriers = barriers > 0 ? arch.barriers_per_sm / barriers : INT_MAX;
  const std::pair<int, const char*> limits[] = {{by_warps, "warps"},
                                                {by_regs, "registers"},
                                                {by_smem, "shared memory"},
                                                {arch.max_blocks_per_sm, "blocks"},
                                                {by_barriers, "barriers"}};
  Occupancy o{INT_MAX, 0, ""};
  for (const auto& [blocks, what] : limits)
    if (blocks < o.blocks) o = {blocks, 0, what};
  o.percent = 100.0 * o.blocks * warps / arch.max_warps_per_sm;
  return o;
}

std::string kernel_name(const std::string& mangled) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                     &std::free);
  if (status != 0 || !d) return mangled;
  std::string s = d.get();
  if (starts_with(s, "void ")) s = s.substr(5);
  // The qualified name ends at the template arguments or the parameters; "(anonymous namespace)"
  // is part of it.
  const std::string anon = "(anonymous namespace)";
  std::string name;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, anon.size(), anon) == 0) {
      name += anon;
      i += anon.size();
    } else if (s[i] == '<' || s[i] == '(') {
      break;
    } else {
      name += s[i++];
    }
  }
  return name;
}

std::string short_name(const std::string& qualified) {
  const size_t at = qualified.rfind("::");
  return at == std::string::npos ? qualified : qualified.substr(at + 2);
}

std::map<std::string, std::string> parse_allow_list(const std::string& text) {
  std::map<std::string, std::string> allow;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    const size_t end = line.find_first_of(" \t", begin);
    const size_t reason = end == std::string::npos ? end : line.find_first_not_of(" \t", end);
    if (reason == std::string::npos)
      throw std::runtime_error("allow-list: '" + line + "' gives no reason (\"<kernel> <why it is accepted>\")");
    std::string why = line.substr(reason);
    while (!why.empty() && (why.back() == '\r' || why.back() == ' ')) why.pop_back();
    allow[line.substr(begin, end - begin)] = why;
  }
  return allow;
}

std::vector<Row> check(const std::vector<Kernel>& kernels, const Arch& arch,
                       const std::map<std::string, std::string>& allow) {
  // Group the instantiations by qualified name, in the order first seen.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Kernel*>> groups;
  for (const Kernel& k : kernels) {
    if (k.arch != arch.name) continue;
    const std::string q = kernel_name(k.mangled);
    if (!groups.count(q)) order.push_back(q);
    groups[q].push_back(&k);
  }
  std::map<std::string, int> short_uses;
  for (const std::string& q : order) ++short_uses[short_name(q)];
  std::vector<Row> rows;
  for (const std::string& q : order) {
    Row row;
    row.name = short_uses[short_name(q)] > 1 ? q : short_name(q);
    row.instantiations = static_cast<int>(groups[q].size());
    bool first = true;
    for (const Kernel* k : groups[q]) {
      const Occupancy o = occupancy(arch, k->max_threads > 0 ? k->max_threads : 1024, k->registers, k->static_smem,
                                     k->barriers);
      // Worse: no bound, fewer blocks, more spilled bytes, more registers.
      const auto badness = [](const Kernel& x, const Occupancy& xo) {
        return std::make_tuple(x.max_threads == 0, -xo.blocks, x.spill_stores + x.spill_loads, x.registers);
      };
      if (first || badness(*k, o) > badness(row.worst, row.occ)) {
        row.worst = *k;
        row.occ = o;
      }
      first = false;
    }
    const Kernel& w = row.worst;
    std::ostringstream problem;
    if (w.max_threads == 0)
      problem << "no __launch_bounds__: the block size it is launched with is not known";
    else if (w.spill_stores > 0 || w.spill_loads > 0)
      problem << "spills " << w.spill_stores << " bytes stored, " << w.spill_loads << " loaded per thread";
    else if (row.occ.blocks == 0)
      problem << "one block of " << w.max_threads << " threads does not fit on an SM (" << row.occ.limited_by << ")";
    row.problem = problem.str();
    if (const auto it = allow.find(row.name); it != allow.end()) row.allowed = it->second;
    rows.push_back(row);
  }
  return rows;
}

std::string format_table(const std::vector<Row>& rows, const Arch& arch,
                         const std::map<std::string, std::string>& allow) {
  std::ostringstream out;
  out << "Kernel resources on " << arch.name << " (per SM: " << arch.regs_per_sm << " registers, "
      << arch.max_warps_per_sm << " warps, " << arch.max_blocks_per_sm << " blocks, " << arch.smem_per_sm / 1024
      << " KiB shared memory)\n"
      << "One row per kernel: its worst instantiation of the `inst.` that ptxas compiled. block: its\n"
      << "__launch_bounds__; smem: static shared memory only (dynamic shared memory is chosen at launch);\n"
      << "blocks/SM and occupancy: at that block size, by CUDA's occupancy calculator.\n";
  size_t width = 6;
  for (const Row& r : rows) width = std::max(width, r.name.size());
  out << std::left << std::setw(static_cast<int>(width)) << "kernel" << std::right << std::setw(6) << "inst."
      << std::setw(7) << "block" << std::setw(6) << "regs" << std::setw(14) << "spill st/ld B" << std::setw(8)
      << "stack B" << std::setw(8) << "smem B" << std::setw(10) << "blocks/SM" << std::setw(11) << "occupancy"
      << "  limited by     status\n";
  for (const Row& r : rows) {
    const Kernel& w = r.worst;
    // Without a bound the block size, and so the occupancy, is not known.
    std::ostringstream spill, occ, block, blocks;
    spill << w.spill_stores << "/" << w.spill_loads;
    if (w.max_threads > 0) {
      block << w.max_threads;
      blocks << r.occ.blocks;
      occ << std::fixed << std::setprecision(1) << r.occ.percent << "%";
    } else {
      block << "-";
      blocks << "-";
      occ << "-";
    }
    const std::string status = r.problem.empty() ? (r.allowed.empty() ? "ok" : "ok (allowed: no longer needed)")
                               : r.allowed.empty() ? "FAIL" : "allowed";
    out << std::left << std::setw(static_cast<int>(width)) << r.name << std::right << std::setw(6) << r.instantiations
        << std::setw(7) << block.str() << std::setw(6) << w.registers << std::setw(14) << spill.str() << std::setw(8)
        << w.stack_frame << std::setw(8) << w.static_smem << std::setw(10) << blocks.str() << std::setw(11)
        << occ.str() << "  " << std::left << std::setw(15) << (w.max_threads > 0 ? r.occ.limited_by : "-") << status
        << "\n";
  }
  std::set<std::string> names;
  for (const Row& r : rows) {
    names.insert(r.name);
    if (r.fails()) out << "FAIL " << r.name << " (worst instantiation " << r.worst.mangled << "): " << r.problem << "\n";
  }
  for (const Row& r : rows)
    if (!r.problem.empty() && !r.allowed.empty()) out << "allowed " << r.name << ": " << r.problem << " -- " << r.allowed << "\n";
  for (const auto& [name, why] : allow)
    if (!names.count(name)) out << "note: the allow-list names " << name << ", which is no kernel of this build\n";
  return out.str();
}

}  // namespace reel::kernel_resources
