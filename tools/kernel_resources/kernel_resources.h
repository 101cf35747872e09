// tools/kernel_resources/kernel_resources.h: what each CUDA kernel of an nvcc build costs on an SM,
// read from that build's own output, and the check the nvcc flavour runs on it.
//
// Sources, both from the one compile of each kernels/cuda/*.cu (no second compile):
//   * ptxas's resource lines (--ptxas-options=-v, which capture.sh keeps as <object>.ptxas):
//     registers, stack frame, spill stores and loads, static shared memory, per kernel and arch;
//   * the launch bound of each kernel, __launch_bounds__(N) in its source, which ptxas does not
//     print but writes into the cubin that the object's fatbin carries (EIATTR_MAX_THREADS in the
//     .nv.info.<kernel> section). The bound is the block size the kernel is launched with at most:
//     it is the one place in the source that says so (the launch passes the same constant), and ptxas
//     keeps the registers within what one block of it needs.
// From those and the architecture's limits, the theoretical occupancy as CUDA's own calculator
// (cuda_occupancy.h, cudaOccMaxActiveBlocksPerMultiprocessor: warps, registers, shared memory,
// blocks and named barriers) computes it, for a launch at the bound with no dynamic shared memory
// (which the build cannot know) and the default carveout: checked equal to that header over
// 317,440 cases of block size, registers, static shared memory and barriers.
//
// The check: a kernel fails when it spills, when it declares no __launch_bounds__, or when one block
// at its bound does not fit on an SM, unless the allow-list names it with a reason.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace reel::kernel_resources {

// One kernel instantiation as ptxas compiled it for one architecture.
struct Kernel {
  std::string mangled;  // the symbol, e.g. _Z3addIfEvPT_PKS0_i
  std::string arch;     // sm_90
  int registers = 0;
  int64_t stack_frame = 0, spill_stores = 0, spill_loads = 0;  // bytes per thread
  int64_t static_smem = 0;                                     // bytes per block
  int barriers = 0;                                            // named barriers (__syncthreads: 1)
  int max_threads = 0;  // __launch_bounds__ (x * y * z of EIATTR_MAX_THREADS); 0: none declared
};

// The kernels ("Compiling entry function") of ptxas -v / nvcc --resource-usage output, in order.
// Non-entry device functions that ptxas also reports are left out. Throws std::runtime_error on a
// resource line it cannot read.
std::vector<Kernel> parse_ptxas(const std::string& text);

// The launch bound of every kernel of every CUDA ELF image (a cubin) found in `bytes`: a cubin
// itself, or a host object whose fatbin embeds one (uncompressed, as nvcc 13 leaves SASS).
// Kernels without __launch_bounds__ are absent. Throws std::runtime_error on a malformed image.
std::map<std::string, int> parse_launch_bounds(const std::string& bytes);

// An SM's limits, as cuda_occupancy.h states them per compute capability.
struct Arch {
  const char* name;
  int regs_per_sm;              // 32-bit registers
  int reg_alloc_unit;           // registers are allocated per warp in units of this many
  int max_regs_per_thread;
  int sub_partitions;           // a warp's registers come from one of these quarters of the file
  int max_warps_per_sm;
  int max_blocks_per_sm;
  int barriers_per_sm;          // named barriers, shared by the resident blocks
  int64_t smem_per_sm;          // bytes, the largest carveout
  int64_t smem_reserved_per_block;  // the driver's own per block (sm_80 on)
  int64_t max_smem_per_block;   // bytes a block may use (opt-in), the reserved part not included
  int smem_alloc_unit;
};
// The known architecture named "sm_90" and the like, or nullptr.
const Arch* find_arch(const std::string& name);

struct Occupancy {
  int blocks = 0;          // resident blocks per SM
  double percent = 0;      // resident warps / the SM's maximum
  std::string limited_by;  // "warps", "registers", "shared memory", "blocks", "barriers" (the smallest limit)
};
// Blocks of `threads` threads using `registers` per thread, `smem` bytes of shared memory and
// `barriers` named barriers that one SM of `arch` keeps resident.
Occupancy occupancy(const Arch& arch, int threads, int registers, int64_t smem, int barriers = 0);

// "reel::ops::(anonymous namespace)::map_kernel" of a mangled kernel symbol: demangled, without the
// return type, template arguments and parameters (the mangled name itself when it does not demangle).
std::string kernel_name(const std::string& mangled);
// The last component of a qualified name: map_kernel.
std::string short_name(const std::string& qualified);

// The allow-list: "<kernel> <reason>" per line, '#' comments and blank lines skipped.
std::map<std::string, std::string> parse_allow_list(const std::string& text);

// One line of the table: every instantiation of one kernel, shown by its worst (fewest blocks per
// SM, then most spilled bytes, then most registers).
struct Row {
  std::string name;  // short_name, or the qualified name where two kernels share it
  int instantiations = 0;
  Kernel worst;
  Occupancy occ;
  std::string problem;  // empty when it passes
  std::string allowed;  // the allow-list's reason, when it names the kernel
  bool fails() const { return !problem.empty() && allowed.empty(); }
};
std::vector<Row> check(const std::vector<Kernel>& kernels, const Arch& arch,
                       const std::map<std::string, std::string>& allow);

// The table (with its header, which says what it groups and assumes) and, after it, a line per
// failing kernel and per allow-list entry that no longer applies.
std::string format_table(const std::vector<Row>& rows, const Arch& arch,
                         const std::map<std::string, std::string>& allow);

}  // namespace reel::kernel_resources
