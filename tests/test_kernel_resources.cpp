// tools/kernel_resources (the nvcc flavour's kernel resources check) on recorded nvcc output, so it
// runs in every build without nvcc: ptxas's resource lines and the launch bounds of a cubin are
// read back exactly; a spilling kernel, a kernel without __launch_bounds__ and one whose registers
// cannot hold one block at its bound fail the check unless the allow-list names them; and the
// occupancy matches CUDA's calculator on closed-form cases. Samples: tools/kernel_resources/samples.
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "testing.h"
#include "tools/kernel_resources/kernel_resources.h"

namespace kr = reel::kernel_resources;

namespace {

std::string sample(const std::string& name) {
  std::ifstream in(std::string(REEL_KERNEL_RESOURCES_SAMPLES) + "/" + name, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing sample ", name);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const kr::Arch& sm90() {
  const kr::Arch* a = kr::find_arch("sm_90");
  REQUIRE(a != nullptr);
  return *a;
}

const kr::Kernel& find(const std::vector<kr::Kernel>& ks, const std::string& mangled, const std::string& arch) {
  for (const kr::Kernel& k : ks)
    if (k.mangled == mangled && k.arch == arch) return k;
  FAIL("no kernel ", mangled, " for ", arch);
  throw std::logic_error("unreachable");
}

const kr::Row& row(const std::vector<kr::Row>& rows, const std::string& name) {
  for (const kr::Row& r : rows)
    if (r.name == name) return r;
  FAIL("no row ", name);
  throw std::logic_error("unreachable");
}

// The probe's kernels with the bounds of its cubin, as the tool joins them.
std::vector<kr::Kernel> probe_kernels() {
  std::vector<kr::Kernel> ks = kr::parse_ptxas(sample("probe.ptxas"));
  const auto bounds = kr::parse_launch_bounds(sample("probe.cubin"));
  for (kr::Kernel& k : ks)
    if (bounds.count(k.mangled)) k.max_threads = bounds.at(k.mangled);
  return ks;
}

}  // namespace

TEST_CASE("ptxas's resource lines are read per kernel and architecture") {
  const std::vector<kr::Kernel> ks = kr::parse_ptxas(sample("probe.ptxas"));
  REQUIRE(ks.size() == 4);
  const kr::Kernel& spill = find(ks, "_Z5spillPfi", "sm_90");
  CHECK(spill.registers == 64);
  CHECK(spill.stack_frame == 800);
  CHECK(spill.spill_stores == 676);
  CHECK(spill.spill_loads == 856);
  CHECK(spill.static_smem == 0);
  const kr::Kernel& plain = find(ks, "_Z5plainPf", "sm_90");
  CHECK(plain.registers == 10);
  CHECK(plain.static_smem == 512);
  CHECK(plain.barriers == 1);
  CHECK(spill.barriers == 0);
  CHECK(plain.spill_stores + plain.spill_loads + plain.stack_frame == 0);
  CHECK(find(ks, "_Z3addIdEvPT_PKS0_i", "sm_90").registers == 10);

  // Hand-written: a device function's spills are its own lines, not a kernel's; one kernel compiled
  // for two architectures is two entries.
  const std::vector<kr::Kernel> made = kr::parse_ptxas(sample("made_up.ptxas"));
  REQUIRE(made.size() == 3);
  const kr::Kernel& spilled = find(made, "_Z11spilled_sumPfi", "sm_90");
  CHECK(spilled.spill_stores == 40);
  CHECK(spilled.spill_loads == 44);
  CHECK(spilled.static_smem == 2048);
  CHECK(find(made, "_Z8too_widePf", "sm_90").registers == 128);
  CHECK(find(made, "_Z8too_widePf", "sm_80").registers == 40);

  // reel's own attention kernels, as the nvcc flavour printed them: 4 kernels x {float, double}.
  const std::vector<kr::Kernel> attention = kr::parse_ptxas(sample("attention.ptxas"));
  CHECK(attention.size() == 8);
  for (const kr::Kernel& k : attention) {
    CHECK(k.arch == "sm_90");
    CHECK(k.registers > 0);
    CHECK(k.spill_stores + k.spill_loads == 0);
  }

  CHECK_THROWS_AS(kr::parse_ptxas("ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'\n"
                                  "ptxas info    : Function properties for _Z1kv\n"
                                  "    8 bytes stack frame, many bytes spill stores, 0 bytes spill loads\n"),
                  std::runtime_error);
}

TEST_CASE("the launch bounds come from the cubin's .nv.info sections") {
  const std::string cubin = sample("probe.cubin");
  const std::map<std::string, int> bounds = kr::parse_launch_bounds(cubin);
  CHECK(bounds.size() == 3);  // plain declares none
  CHECK(bounds.at("_Z3addIfEvPT_PKS0_i") == 256);
  CHECK(bounds.at("_Z3addIdEvPT_PKS0_i") == 256);
  CHECK(bounds.at("_Z5spillPfi") == 1024);
  // The same image inside other bytes (as a host object's fatbin holds it) is found there too.
  CHECK(kr::parse_launch_bounds("host object header ... " + cubin + " ... trailer") == bounds);
  CHECK(kr::parse_launch_bounds("no device code here").empty());
  CHECK_THROWS_AS(kr::parse_launch_bounds(cubin.substr(0, cubin.size() / 2)), std::runtime_error);
}

TEST_CASE("occupancy on sm_90 matches CUDA's calculator in closed form") {
  const kr::Arch& a = sm90();
  // 256 threads = 8 warps; 32 registers: 1024 per warp, 16 warps per sub-partition, 64 per SM:
  // 8 blocks, the warp limit too.
  kr::Occupancy o = kr::occupancy(a, 256, 32, 0);
  CHECK(o.blocks == 8);
  CHECK(o.percent == doctest::Approx(100.0));
  // 64 registers: 2048 per warp, 8 per sub-partition: 32 warps, 4 blocks, 50 %.
  o = kr::occupancy(a, 256, 64, 0);
  CHECK(o.blocks == 4);
  CHECK(o.percent == doctest::Approx(50.0));
  CHECK(o.limited_by == "registers");
  // 33 registers round up to 1280 per warp: 12 warps per sub-partition, 48 per SM: 6 blocks, 75 %.
  o = kr::occupancy(a, 256, 33, 0);
  CHECK(o.blocks == 6);
  CHECK(o.percent == doctest::Approx(75.0));
  // 1024 threads of 64 registers fill the register file exactly once; of 128 they cannot start.
  CHECK(kr::occupancy(a, 1024, 64, 0).blocks == 1);
  o = kr::occupancy(a, 1024, 128, 0);
  CHECK(o.blocks == 0);
  CHECK(o.limited_by == "registers");
  // One warp per block: 32 blocks at most, half the warps.
  o = kr::occupancy(a, 32, 16, 0);
  CHECK(o.blocks == 32);
  CHECK(o.percent == doctest::Approx(50.0));
  CHECK(o.limited_by == "blocks");
  // 45 KiB static + the driver's 1 KiB = 47104 bytes a block: 233472 / 47104 = 4 blocks of 4 warps,
  // 25 % (5 blocks without the reserved KiB).
  o = kr::occupancy(a, 128, 16, 45 * 1024);
  CHECK(o.blocks == 4);
  CHECK(o.percent == doctest::Approx(25.0));
  CHECK(o.limited_by == "shared memory");
  CHECK(kr::occupancy(a, 128, 16, 228 * 1024).blocks == 0);  // over 227 KiB a block
  CHECK(kr::occupancy(a, 128, 256, 0).blocks == 0);          // over 255 registers a thread
  CHECK(kr::occupancy(a, 2048, 16, 0).blocks == 0);          // over 1024 threads a block
  // 64 named barriers per SM: a block of one warp using 4 keeps 16 blocks resident, not 32.
  o = kr::occupancy(a, 32, 16, 0, 4);
  CHECK(o.blocks == 16);
  CHECK(o.limited_by == "barriers");
}

TEST_CASE("kernels are named and grouped by their demangled name") {
  CHECK(kr::kernel_name("_Z3addIfEvPT_PKS0_i") == "add");
  const std::string dq = kr::parse_ptxas(sample("attention.ptxas")).front().mangled;
  CHECK(kr::kernel_name(dq) == "reel::kernels::cuda::(anonymous namespace)::attention_backward_dq_kernel");
  CHECK(kr::short_name(kr::kernel_name(dq)) == "attention_backward_dq_kernel");
  CHECK(kr::kernel_name("not_mangled") == "not_mangled");
}

TEST_CASE("a spilling kernel, one without a bound and one too wide for its registers fail") {
  const kr::Arch& a = sm90();
  std::vector<kr::Row> rows = kr::check(probe_kernels(), a, {});
  REQUIRE(rows.size() == 3);
  const kr::Row& add = row(rows, "add");
  CHECK(add.instantiations == 2);
  CHECK(add.worst.max_threads == 256);
  CHECK(add.occ.blocks == 8);
  CHECK_FALSE(add.fails());
  CHECK(row(rows, "spill").fails());
  CHECK(row(rows, "spill").problem.find("spills 676 bytes") != std::string::npos);
  CHECK(row(rows, "plain").fails());
  CHECK(row(rows, "plain").problem.find("no __launch_bounds__") != std::string::npos);

  std::vector<kr::Kernel> made = kr::parse_ptxas(sample("made_up.ptxas"));
  for (kr::Kernel& k : made) k.max_threads = k.mangled == "_Z8too_widePf" ? 1024 : 128;
  rows = kr::check(made, a, {});
  REQUIRE(rows.size() == 2);  // the sm_80 entry is not this architecture's
  CHECK(row(rows, "spilled_sum").fails());
  const kr::Row& wide = row(rows, "too_wide");
  CHECK(wide.fails());
  CHECK(wide.occ.blocks == 0);
  CHECK(wide.problem.find("does not fit") != std::string::npos);

  // The allow-list lets a named kernel pass, with its reason in the table; an entry that names no
  // kernel is reported; an entry without a reason is refused.
  const auto allow = kr::parse_allow_list("# comment\n\nspill   a made-up kernel that spills on purpose\n"
                                          "gone kernel removed since\n");
  CHECK(allow.at("spill") == "a made-up kernel that spills on purpose");
  rows = kr::check(probe_kernels(), a, allow);
  CHECK_FALSE(row(rows, "spill").fails());
  CHECK(row(rows, "spill").allowed == "a made-up kernel that spills on purpose");
  CHECK(row(rows, "plain").fails());
  const std::string table = kr::format_table(rows, a, allow);
  CHECK(table.find("worst instantiation") != std::string::npos);
  CHECK(table.find("allowed spill: spills 676 bytes") != std::string::npos);
  CHECK(table.find("FAIL plain") != std::string::npos);
  CHECK(table.find("names gone, which is no kernel") != std::string::npos);
  CHECK_THROWS_AS(kr::parse_allow_list("spill\n"), std::runtime_error);
}
