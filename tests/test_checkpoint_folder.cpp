// A run's checkpoints (nn/checkpoint_folder.h, optim/training_state.h): written atomically and kept
// to the newest K (a sharded one's parts with it); a flipped byte, a truncated file or a leftover temporary never read as a
// checkpoint (the one before is used, and the one passed over named with why); a write that fails
// (here: past a file-size limit) is a clear error that leaves the earlier checkpoints loadable; and
// a training state put back into fresh objects continues bit for bit.
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "autograd/nn_functions.h"
#include "nn/checkpoint_folder.h"
#include "nn/sequential.h"
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/training_state.h"
#include "testing.h"

using namespace reel;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the test's temporary directory.
std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("reel_test_checkpoints_" + name);
  fs::remove_all(dir);
  return dir.string();
}

nn::TensorDict some_tensors(float v) {
  return {{"a", full({3, 4}, v, DType::f32)}, {"b", from_vector<int64_t>({1, 2, 3}, {3})}};
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(c ^ 0x10));
}

}  // namespace

TEST_CASE("checkpoint folder: saved, listed, kept to the newest K, read back with its metadata") {
  nn::CheckpointFolder folder(fresh_dir("keep"), 2);
  for (int64_t step : {5, 10, 15}) folder.save(step, some_tensors(static_cast<float>(step)), {{"note", "x"}});
  CHECK(folder.steps() == std::vector<int64_t>{10, 15});
  const auto l = folder.load_latest();
  REQUIRE(l);
  CHECK(l->step == 15);
  CHECK(l->passed_over.empty());
  CHECK(l->metadata.at("note") == "x");
  CHECK(testing::values(l->tensors.at("a"))[0] == 15.0);
  CHECK(l->tensors.at("b").dtype() == DType::i64);
  // An ordinary safetensors file: the plain reader takes it too.
  CHECK(nn::load_safetensors(folder.path_of(15)).size() == 2);
}

TEST_CASE("checkpoint folder: a corrupted or truncated newest checkpoint is passed over, named, for the one before") {
  nn::CheckpointFolder folder(fresh_dir("corrupt"), 3);
  folder.save(1, some_tensors(1), {});
  folder.save(2, some_tensors(2), {});
  folder.save(3, some_tensors(3), {});
  flip_last_byte(folder.path_of(3));  // a flipped bit in tensor b's data
  fs::resize_file(folder.path_of(2), fs::file_size(folder.path_of(2)) - 7);  // cut short
  std::vector<std::string> why;
  const auto l = folder.load_latest(Device::cpu(), &why);
  REQUIRE(l);
  CHECK(l->step == 1);
  REQUIRE(why.size() == 2);
  CHECK(why[0].find("step-000000003.safetensors") != std::string::npos);
  CHECK(why[0].find("tensor 'b' does not match its checksum") != std::string::npos);
  CHECK(why[1].find("step-000000002.safetensors") != std::string::npos);
  CHECK_THROWS_WITH_AS(nn::CheckpointFolder::load(folder.path_of(3)), doctest::Contains("corrupted"), Error);
}

TEST_CASE("checkpoint folder: a half-written temporary is never a checkpoint, and the next save removes it") {
  nn::CheckpointFolder folder(fresh_dir("tmp"), 2);
  folder.save(4, some_tensors(4), {});
  { std::ofstream(folder.path_of(8) + ".tmp") << "half a checkpoint"; }  // a save killed mid-write
  CHECK(folder.steps() == std::vector<int64_t>{4});
  CHECK(folder.load_latest()->step == 4);
  folder.save(9, some_tensors(9), {});
  CHECK(!fs::exists(folder.path_of(8) + ".tmp"));
}

TEST_CASE("checkpoint folder: a sharded checkpoint's parts come before it, are pruned with it, and alone are none") {
  nn::CheckpointFolder folder(fresh_dir("parts"), 1);
  for (int64_t step : {3, 6}) {
    for (int rank : {0, 1}) folder.save_part(step, rank, some_tensors(static_cast<float>(rank)), {});
    folder.save(step, {}, {{"run.parts", "2"}});
  }
  CHECK(folder.steps() == std::vector<int64_t>{6});
  CHECK(!fs::exists(folder.part_path(3, 0)));  // pruned with their checkpoint
  CHECK(!fs::exists(folder.part_path(3, 1)));
  CHECK(testing::values(nn::CheckpointFolder::load(folder.part_path(6, 1)).tensors.at("a"))[0] == 1.0);
  // A sharded save killed between its parts and its checkpoint: the parts are no checkpoint, and the
  // next save removes them.
  folder.save_part(8, 0, some_tensors(8), {});
  CHECK(folder.steps() == std::vector<int64_t>{6});
  CHECK(folder.load_latest()->step == 6);
  folder.save(9, {}, {});
  CHECK(!fs::exists(folder.part_path(8, 0)));
  CHECK(!fs::exists(folder.part_path(6, 0)));
}

TEST_CASE("checkpoint folder: a file that is not a reel checkpoint, and an empty folder") {
  nn::CheckpointFolder folder(fresh_dir("foreign"), 2);
  CHECK(!folder.load_latest());
  nn::save_safetensors(folder.path_of(3), some_tensors(3));  // right name, no checksums
  std::vector<std::string> why;
  CHECK(!folder.load_latest(Device::cpu(), &why));
  REQUIRE(why.size() == 1);
  CHECK(why[0].find("not a checkpoint of a reel run") != std::string::npos);
  CHECK_THROWS_WITH_AS(nn::CheckpointFolder(folder.dir(), 0), doctest::Contains("keep must be at least 1"), Error);
}

TEST_CASE("checkpoint folder: a write past the file-size limit fails clearly and leaves the earlier checkpoint") {
  nn::CheckpointFolder folder(fresh_dir("fsize"), 2);
  folder.save(1, some_tensors(1), {});
  rlimit before{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &before) == 0);
  rlimit small = before;
  small.rlim_cur = 4096;  // smaller than the next checkpoint
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const nn::TensorDict big{{"w", zeros({64, 64}, DType::f32)}};
  std::string message;
  try {
    folder.save(2, big, {});
  } catch (const Error& e) {
    message = e.what();
  }
  REQUIRE(setrlimit(RLIMIT_FSIZE, &before) == 0);
  CHECK(message.find("step-000000002.safetensors.tmp") != std::string::npos);
  CHECK(message.find("File too large") != std::string::npos);
  CHECK(message.find("untouched") != std::string::npos);
  CHECK(!fs::exists(folder.path_of(2) + ".tmp"));
  CHECK(folder.steps() == std::vector<int64_t>{1});
  CHECK(folder.load_latest()->step == 1);
}

TEST_CASE("training state: put back into fresh objects, the next steps are the same bits") {
  // A model with dropout, AdamW, a loss scaler, two windows; then the state, two more windows of the
  // original, and the same two from fresh objects restored from the state (the generator too).
  const auto make = [] {
    manual_seed(3);
    return std::make_shared<nn::MLP>(std::vector<int64_t>{6, 8, 3}, "gelu", 0.2);  // dropout: the generator matters
  };
  const Tensor x = randn({5, 6}), y = from_vector<int64_t>({0, 1, 2, 1, 0}, {5});
  const auto window = [&](nn::MLP& m, optim::Accumulator& acc) {
    const std::vector<int> micro{0, 1};
    acc.step<int>(micro, [](int) { return int64_t{5}; },
                  [&](int) { return cross_entropy(m(x), y, -100, "sum"); });
  };
  auto a = make();
  optim::AdamW opt_a(a->parameters(), 1e-2);
  optim::GradScaler scaler_a;
  optim::Accumulator acc_a(opt_a, {0.0, nullptr, false, nullptr, &scaler_a});
  window(*a, acc_a);
  window(*a, acc_a);
  optim::TrainingState saved =
      optim::gather_training_state(a->state_dict(), opt_a, &scaler_a, &acc_a, {{"mine", "kept"}});
  for (auto& [name, t] : saved.tensors) t = t.clone();  // the run's own tensors: a snapshot is a copy
  window(*a, acc_a);  // the run that was not stopped goes on
  window(*a, acc_a);

  auto b = make();
  manual_seed(99);  // the generator elsewhere: restoring puts it back
  optim::AdamW opt_b(b->parameters(), 5.0);
  optim::GradScaler scaler_b;
  optim::Accumulator acc_b(opt_b, {0.0, nullptr, false, nullptr, &scaler_b});
  const optim::Metadata m = optim::restore_training_state(
      saved, [&](const optim::StateDict& w) { b->load_state_dict(w); }, opt_b, &scaler_b, &acc_b, "memory");
  CHECK(m.at("mine") == "kept");
  CHECK(opt_b.steps() == 2);
  CHECK(opt_b.lr() == opt_a.lr());
  window(*b, acc_b);
  window(*b, acc_b);
  for (const auto& [name, t] : a->state_dict()) CHECK(testing::values(t) == testing::values(b->state_dict().at(name)));

  // What does not fit is refused: no scaler in the run, another shape.
  optim::Accumulator no_scaler(opt_b, {});
  CHECK_THROWS_WITH_AS(optim::restore_training_state(saved, [&](const optim::StateDict& w) { b->load_state_dict(w); },
                                                     opt_b, nullptr, &no_scaler, "memory"),
                       doctest::Contains("made with a loss scaler"), Error);
  nn::MLP other(std::vector<int64_t>{6, 9, 3});
  optim::AdamW opt_other(other.parameters(), 1e-2);
  CHECK_THROWS_WITH_AS(
      optim::restore_training_state(saved, [&](const optim::StateDict& w) { other.load_state_dict(w); }, opt_other,
                                    &scaler_b, nullptr, "memory"),
      doctest::Contains("another model or optimizer"), Error);
}
